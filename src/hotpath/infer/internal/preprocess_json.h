// EvalPreprocess as JSON with the channel count under another key: model.json has kept the flat
// "in_channels" of its first version (old run directories load, new ones load in old readers).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hotpath/infer/preprocess.h"

namespace hotpath::infer::internal {

nlohmann::ordered_json eval_preprocess_to_json(const EvalPreprocess& p, const char* channels_key);
EvalPreprocess eval_preprocess_from_json(const nlohmann::json& j, const std::string& where, const char* channels_key);

}  // namespace hotpath::infer::internal
