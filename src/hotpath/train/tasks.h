// tasks.h (private to hotpath_train) — the two Task implementations' factories and what they share:
// freezing by name prefix and the trainable-parameter list.
#pragma once

#include <memory>

#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"

namespace torch::nn {
class Module;
}

namespace hotpath::train {

std::unique_ptr<Task> make_image_task(const Recipe& recipe, const TaskOptions& options);  // image_task.cpp
std::unique_ptr<Task> make_text_task(const Recipe& recipe, const TaskOptions& options);   // text_task.cpp

// model.freeze: every parameter whose name starts with a prefix stops requiring gradients; a prefix
// that matches nothing is an error naming it.
void freeze_prefixes(torch::nn::Module& module, const Recipe& recipe);
// The parameters that still require gradients, by name; an error when there is none.
NamedParameters trainable_parameters(const torch::nn::Module& module, const Recipe& recipe);

}  // namespace hotpath::train
