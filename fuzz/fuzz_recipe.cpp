// libFuzzer target: arbitrary text through the YAML recipe parser. Bad input must end in
// hotpath::Error (never a crash, hang or a yaml-cpp exception escaping); an accepted recipe must
// survive to_yaml → parse_recipe unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hotpath/core/error.h"
#include "hotpath/train/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hotpath::train::Recipe recipe;
  try {
    recipe = hotpath::train::parse_recipe(text, {}, "fuzz.yaml");
  } catch (const hotpath::Error&) {
    return 0;  // rejected with a message
  }
  const std::string yaml = hotpath::train::to_yaml(recipe);
  try {
    const auto again = hotpath::train::parse_recipe(yaml, {}, "roundtrip.yaml");
    if (hotpath::train::to_yaml(again) != yaml) {
      std::fprintf(stderr, "fuzz_recipe: round trip changed the recipe:\n%s", yaml.c_str());
      std::abort();
    }
  } catch (const hotpath::Error& e) {
    std::fprintf(stderr, "fuzz_recipe: an accepted recipe did not read back: %s\n%s", e.what(), yaml.c_str());
    std::abort();
  }
  return 0;
}
