// hotpath/core/position.h — where a batch stream stands: the next batch is number `batch` of `epoch`.
//
// One type for the image loader (data/loader.h), the text loader (text/text_loader.h) and the training tasks
// (train/task.h): a checkpoint saves it, seek() resumes from it.
#pragma once

#include <cstdint>

namespace hotpath {

struct BatchPosition {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
  friend bool operator==(const BatchPosition&, const BatchPosition&) = default;
};

}  // namespace hotpath
