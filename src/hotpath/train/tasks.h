// tasks.h (private to hotpath_train) — the factories of the two Task implementations (make_task in
// task.cpp picks one by data.kind).
#pragma once

#include <memory>

#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"

namespace hotpath::train {

std::unique_ptr<Task> make_image_task(const Recipe& recipe, const TaskOptions& options);  // image_task.cpp
std::unique_ptr<Task> make_text_task(const Recipe& recipe, const TaskOptions& options);   // text_task.cpp

}  // namespace hotpath::train
