// tests/python/loader_reference.cpp — the C++ side of test_data.py's bit-for-bit check: the batches `hotpath train`
// would load for a recipe, written raw so that python can compare hotpath.data.Loader's tensors with them.
//
//   python_loader_reference RECIPE.yaml BATCHES OUT.bin          image loader (train_loader_options)
//   python_loader_reference --text RECIPE.yaml BATCHES OUT.bin   text loader (text_loader_options, training)
//
// OUT.bin holds, per batch: int64 rows, then rows × C × H × W float32 (NCHW order, whatever the memory layout),
// then rows int64 labels. With --text, per batch: int64 rows, int64 length, then input_ids, attention_mask and
// token_type_ids (rows × length int32 each), then rows int64 labels. Exit 1 with one line on any error.
#include <ATen/ops/contiguous.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "hotpath/data/loader.h"
#include "hotpath/text/text_loader.h"
#include "hotpath/train/recipe.h"
#include "hotpath/train/task.h"
#include "hotpath/train/text_loader_options.h"

namespace {

template <typename T>
void write_all(std::ofstream& out, const std::vector<T>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

int text_reference(const char* recipe_path, const char* batches_arg, const char* out_path) {
  const hotpath::train::Recipe recipe = hotpath::train::load_recipe(recipe_path);
  hotpath::text::TextLoader loader(hotpath::train::text_loader_options(recipe, true));
  const long batches = std::strtol(batches_arg, nullptr, 10);
  std::ofstream out(out_path, std::ios::binary);
  loader.seek({0, 0});
  for (long b = 0; b < batches; ++b) {
    std::optional<hotpath::text::TextBatch> batch = loader.next();
    if (!batch) break;
    out.write(reinterpret_cast<const char*>(&batch->batch_size), sizeof batch->batch_size);
    out.write(reinterpret_cast<const char*>(&batch->length), sizeof batch->length);
    write_all(out, batch->input_ids);
    write_all(out, batch->attention_mask);
    write_all(out, batch->token_type_ids);
    write_all(out, batch->labels);
  }
  if (!out) {
    std::cerr << "python_loader_reference: cannot write " << out_path << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--text") {
    try {
      return text_reference(argv[2], argv[3], argv[4]);
    } catch (const std::exception& e) {
      std::cerr << "python_loader_reference: error: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc != 4) {
    std::cerr << "usage: python_loader_reference RECIPE.yaml BATCHES OUT.bin\n";
    return 2;
  }
  try {
    const hotpath::train::Recipe recipe = hotpath::train::load_recipe(argv[1]);
    hotpath::data::Loader loader(hotpath::train::train_loader_options(recipe));
    const long batches = std::strtol(argv[2], nullptr, 10);
    std::ofstream out(argv[3], std::ios::binary);
    loader.seek({0, 0});
    for (long b = 0; b < batches; ++b) {
      std::optional<hotpath::data::Batch> batch = loader.next();
      if (!batch) break;
      const at::Tensor images = batch->images.contiguous();
      const at::Tensor labels = batch->labels.contiguous();
      const std::int64_t rows = labels.size(0);
      out.write(reinterpret_cast<const char*>(&rows), sizeof rows);
      out.write(static_cast<const char*>(images.data_ptr()), static_cast<std::streamsize>(images.nbytes()));
      out.write(static_cast<const char*>(labels.data_ptr()), static_cast<std::streamsize>(labels.nbytes()));
    }
    if (!out) {
      std::cerr << "python_loader_reference: cannot write " << argv[3] << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "python_loader_reference: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
