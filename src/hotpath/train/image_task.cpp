// ImageTask: an image classifier from the registry trained on WebDataset image shards (data.kind:
// image). What differs from text lives here; the loop is trainer.cpp.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <ostream>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/preprocess.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/weights.h"
#include "hotpath/train/task.h"
#include "tasks.h"

namespace hotpath::train {
namespace fs = std::filesystem;
namespace {

// 4-D parameters to NHWC strides: oneDNN/cuDNN pick their channels-last kernels.
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

class ImageTask final : public Task {
 public:
  ImageTask(const Recipe& recipe, const TaskOptions& options)
      : recipe_(recipe),
        device_(options.device),
        train_options_(train_loader_options(recipe, options.rank, options.world_size)) {
    configure_loader_device(train_options_, recipe, device_);
    const auto& tr = recipe.train;
    samples_ = data::count_samples(train_options_);  // all ranks' (split_batches)
    micro_per_epoch_ = samples_ / (std::int64_t{train_options_.batch_size} * train_options_.world_size);
    HOTPATH_CHECK(micro_per_epoch_ / tr.accum_steps >= 1, recipe.source, ": data.train holds ", samples_,
                  " usable samples, fewer than one batch of train.batch_size=", tr.batch_size,
                  train_options_.world_size > 1 ? " on each of " + std::to_string(train_options_.world_size) + " ranks" : "");
    class_names_ = class_names_for(recipe);
    HOTPATH_CHECK(class_names_.empty() || static_cast<std::int64_t>(class_names_.size()) == recipe.model.num_classes,
                  recipe.source, ": model.num_classes is ", recipe.model.num_classes, " but the data has ",
                  class_names_.size(), " class names");
    if (!recipe.data.eval.empty()) {
      eval_shards_ = resolve_recipe_shards(recipe.data.eval, "data.eval", recipe);
      // Every input the run needs is checked before step 1: the eval shards are indexed now, not after
      // the first epoch.
      data::LoaderOptions eo = eval_preprocess_for(recipe).loader_options(eval_shards_);
      eo.num_classes = recipe.model.num_classes;
      HOTPATH_CHECK(data::count_samples(eo) >= 1, recipe.source, ": data.eval holds no usable sample");
    }

    const models::ModelOptions mo{.num_classes = recipe.model.num_classes,
                                  .in_channels = recipe.data.channels,
                                  .zero_init_residual = recipe.model.zero_init_residual};
    model_ = models::create_model(recipe.model.name, mo);
    if (!recipe.model.weights.empty()) {
      const auto report =
          models::load_safetensors(*model_, recipe.model.weights, {.allow_partial = recipe.model.allow_partial});
      if (options.out) *options.out << "weights: " << report.summary() << "\n";
    }
    freeze_prefixes(*model_, recipe);
    model_->to(device_);
    if (recipe.model.channels_last) to_channels_last(*model_);
    trainable_ = trainable_parameters(*model_, recipe);
    loader_ = std::make_unique<data::Loader>(train_options_);
  }

  [[nodiscard]] std::string describe() const override {
    return recipe_.model.name + ", " + std::to_string(recipe_.model.num_classes) + " classes, " +
           std::to_string(recipe_.data.image_size) + "×" + std::to_string(recipe_.data.image_size) + "×" +
           std::to_string(recipe_.data.channels) + (recipe_.model.channels_last ? " channels-last" : "") +
           "; data: " + loader_->describe();
  }
  [[nodiscard]] torch::nn::Module& module() override { return *model_; }
  [[nodiscard]] NamedParameters trainable() const override { return trainable_; }
  [[nodiscard]] std::int64_t train_samples() const override { return samples_; }
  [[nodiscard]] const char* sample_unit() const override { return "img/s"; }

  [[nodiscard]] std::int64_t micro_batches_in_epoch(std::int64_t /*epoch*/) const override { return micro_per_epoch_; }
  void seek(BatchPosition p) override {
    loader_->seek(p);
    position_ = p;
  }
  [[nodiscard]] BatchPosition position() const override { return position_; }
  std::optional<MicroBatch> next() override {
    std::optional<data::Batch> batch = loader_->next();
    if (!batch) return std::nullopt;
    ++position_.batch;
    MicroBatch mb;
    mb.inputs.push_back(batch->images.to(device_, /*non_blocking=*/true));
    mb.labels = batch->labels.to(device_, /*non_blocking=*/true);
    mb.samples = batch->labels.size(0);
    // Dropout and stochastic depth keyed by (train.seed, epoch, the sample's place in the epoch's global batch
    // order), as its augmentation is: the masks a sample gets do not depend on the rank or the batch it shares
    // (docs/distributed.md).
    mb.dropout = ops::DropoutSource::per_sample(recipe_.train.seed, batch->epoch, batch->positions);
    return mb;
  }

  at::Tensor loss(const MicroBatch& batch, double label_smoothing) override {
    const at::Tensor logits = model_->forward(batch.inputs.front(), batch.dropout);
    return at::cross_entropy_loss(logits.to(at::kFloat), batch.labels, {}, at::Reduction::Mean, -100, label_smoothing);
  }

  [[nodiscard]] bool has_eval() const override { return !eval_shards_.empty(); }
  infer::EvalResult evaluate(std::optional<at::ScalarType> autocast) override {
    if (!eval_loader_) {
      data::LoaderOptions o = eval_preprocess_for(recipe_).loader_options(eval_shards_);
      o.batch_size = train_options_.batch_size;
      o.workers = train_options_.workers;
      o.prefetch = train_options_.prefetch;
      o.max_bad_samples = recipe_.data.max_bad_samples;
      o.num_classes = recipe_.model.num_classes;
      eval_loader_ = std::make_unique<data::Loader>(o);
    }
    const char* precision = !autocast ? "fp32" : *autocast == at::kHalf ? "fp16" : "bf16";
    return infer::evaluate(*model_, *eval_loader_, {.precision = precision});
  }

  [[nodiscard]] TensorMap checkpoint_tensors() override { return models::named_state(*model_); }
  [[nodiscard]] nlohmann::ordered_json resume_key() const override {
    nlohmann::ordered_json key = resume_values(recipe_);  // the recipe table's resume keys
    key["the number of samples in data.train"] = samples_;
    return key;
  }
  // The loader plans each global batch of world × train.batch_size samples from all shards whatever the world
  // size (split_batches), and augmentation and dropout are keyed by the global position.
  [[nodiscard]] std::string world_size_change_refusal() const override { return ""; }
  // Bad samples skipped (and counted against data.max_bad_samples) by this invocation's loaders.
  void add_profile(nlohmann::ordered_json& profile) const override {
    profile["bad_samples"] = {{"train", loader_->stats().bad_samples},
                              {"eval", eval_loader_ ? eval_loader_->stats().bad_samples : 0}};
    profile["train_loader"] = loader_->describe();  // which decode path ran (nvJPEG: images per decoder)
  }
  [[nodiscard]] SkippedSamples skipped_samples() const override {
    const std::vector<std::string> reasons = loader_->bad_samples();
    return {loader_->stats().bad_samples, reasons.empty() ? std::string() : reasons.back()};
  }
  [[nodiscard]] Remedies remedies() const override {
    return {"input-bound: raise data.workers, use smaller images or uint8 batches",
            "optimizer-bound: fewer parameters, no EMA, or a fused optimizer",
            "compute-bound: a smaller model, channels-last, bf16 or more threads help"};
  }

  // The package `hotpath eval|predict --model-dir` read: model.safetensors + model.json, in place.
  void export_model(const fs::path& dir, ExportPlace /*place*/) override {
    fs::create_directories(dir);
    models::save_safetensors(*model_, (dir / "model.safetensors").string());
    infer::Package package;
    package.dir = dir.string();
    package.layout = infer::PackageLayout::kRunDirectory;
    package.architecture = recipe_.model.name;
    package.num_classes = recipe_.model.num_classes;
    package.image = eval_preprocess_for(recipe_);
    package.labels = class_names_;
    write_file_atomic((dir / "model.json").string(), infer::run_directory_json(package));
  }

 private:
  Recipe recipe_;
  at::Device device_;
  data::LoaderOptions train_options_;
  std::int64_t samples_ = 0;
  std::int64_t micro_per_epoch_ = 0;
  std::vector<std::string> class_names_;
  std::vector<std::string> eval_shards_;
  models::ModelHandle model_;
  NamedParameters trainable_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<data::Loader> eval_loader_;
  BatchPosition position_;
};

}  // namespace

infer::EvalPreprocess eval_preprocess_for(const Recipe& recipe) {
  const auto& d = recipe.data;
  infer::EvalPreprocess p;
  p.image_size = d.image_size;
  p.channels = d.channels;
  p.crop = d.eval_crop == "resize" ? infer::EvalCrop::kResize : infer::EvalCrop::kResizeCenterCrop;
  p.resize_shorter = d.resize_shorter;
  p.mean = d.mean;
  p.std = d.std;
  p.channels_last = recipe.model.channels_last;
  return p;
}

data::LoaderOptions train_loader_options(const Recipe& recipe, int rank, int world_size) {
  const auto& d = recipe.data;
  data::LoaderOptions o;
  o.shards = resolve_recipe_shards(d.train, "data.train", recipe);
  o.batch_size = static_cast<int>(recipe.train.micro_batch_size());
  o.workers = static_cast<int>(d.workers);
  o.prefetch = static_cast<int>(d.prefetch);
  o.size = static_cast<int>(d.image_size);
  o.channels = static_cast<int>(d.channels);
  o.crop = d.train_crop == "resize" ? data::CropMode::kResize : data::CropMode::kRandomResizedCrop;
  o.rrc.scale_min = d.scale_min;
  o.rrc.scale_max = d.scale_max;
  o.flip_probability = d.flip;
  o.translate = static_cast<int>(d.translate);
  o.erasing.probability = d.random_erasing;
  for (std::size_t c = 0; c < d.mean.size() && c < 3; ++c) {
    o.normalization.mean[c] = static_cast<float>(d.mean[c]);
    o.normalization.std[c] = static_cast<float>(d.std[c]);
  }
  o.format.layout = recipe.model.channels_last ? data::PixelLayout::kHWC : data::PixelLayout::kCHW;
  o.shuffle = true;
  o.shuffle_buffer = static_cast<std::size_t>(d.shuffle_buffer);
  o.drop_last = true;
  o.seed = recipe.train.seed;
  o.rank = rank;
  o.world_size = world_size;
  o.split_batches = world_size > 1;
  o.max_bad_samples = d.max_bad_samples;
  o.num_classes = recipe.model.num_classes;
  return o;
}

std::unique_ptr<Task> make_image_task(const Recipe& recipe, const TaskOptions& options) {
  return std::make_unique<ImageTask>(recipe, options);
}

}  // namespace hotpath::train
