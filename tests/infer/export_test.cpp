// hotpath export end to end: run directories and Hugging Face directories → packages that reload in the
// engine with the training model's outputs; calibration shards with corrupt samples; refusals.
#include "hotpath/infer/export.h"

// The tests fill ExportSource / ExportOptions with C++20 designated initializers, leaving the rest at their
// defaults on purpose; GCC before 14 still warns about the omitted members (GCC bug 96868).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/data/kernels/image.h"
#include "hotpath/formats/tar_writer.h"
#include "hotpath/infer/classifier.h"
#include "hotpath/infer/lower.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/sentence_embed.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/weights.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

namespace hotpath::infer {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// An image run directory as `hotpath train` leaves it: model.json + model.safetensors of a cnn_small.
fs::path write_image_run(const TempDir& dir, models::ModelHandle& model) {
  return test::write_tiny_image_run(dir.path() / "run", model);
}

// `good` 12×12 gray PNG samples with labels 0..2, then `corrupt` samples whose PNG is cut short.
std::string write_calibration_shard(const TempDir& dir, int good, int corrupt) {
  formats::ShardWriter writer(dir.file("calib-%06d.tar"), {});
  for (int i = 0; i < good + corrupt; ++i) {
    std::vector<std::uint8_t> px(144);
    for (std::size_t j = 0; j < px.size(); ++j) px[j] = static_cast<std::uint8_t>((j * 7 + static_cast<std::size_t>(i) * 13) % 256);
    auto png = data::encode_png(px.data(), 12, 12, 1);
    if (i >= good) png.resize(png.size() / 2);
    const std::string cls = std::to_string(i % 3);
    writer.write({std::to_string(1000 + i), {{"png", png}, {"cls", test::as_bytes(cls)}}});
  }
  writer.close();
  return dir.file("calib-000000.tar");
}

TEST(Export, ImageRunToInt8PackageCountsCorruptCalibrationSamples) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const std::string shard = write_calibration_shard(dir, 40, 3);
  const fs::path pkg = dir.path() / "pkg";
  const ExportReport r = export_package({.model_dir = run.string()},
                                        {.out = pkg, .precision = Precision::kInt8, .calibration = {shard},
                                         .calibration_samples = 64, .allow_accuracy_loss = true});
  EXPECT_EQ(r.json["data"]["samples"].get<std::int64_t>(), 40);
  EXPECT_EQ(r.json["data"]["bad_samples"].get<std::int64_t>(), 3);
  EXPECT_NE(r.summary.find("(3 bad samples skipped)"), std::string::npos) << r.summary;
  EXPECT_TRUE(r.json.contains("quantization"));
  const Package p = read_package(pkg);
  EXPECT_EQ(p.precision, Precision::kInt8);
  EXPECT_EQ(p.labels, std::vector<std::string>({"circle", "square", "line"}));
  // The package predicts through the engine with the run's own preprocessing.
  const Classifier c = Classifier::from_dir(pkg.string());
  EXPECT_EQ(c.preprocess().image_size, 12);
  EXPECT_EQ(c.logits(at::randn({2, 1, 12, 12})).sizes(), (std::vector<std::int64_t>{2, 3}));
}

// A run directory and the model package exported from it read into one Package with the same facts under the same
// names; each layout runs its own way (the run's training model eagerly, the package in the engine), and the
// functions of the other layout refuse it with one line.
TEST(Package, BothLayoutsReadIntoOnePackageWithTheSameFields) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = run.string()}, {.out = pkg, .precision = Precision::kFp32});
  const Package from_run = read_package(run);
  const Package from_pkg = read_package(pkg);
  EXPECT_EQ(from_run.layout, PackageLayout::kRunDirectory);
  EXPECT_EQ(from_pkg.layout, PackageLayout::kModelPackage);
  for (const Package* p : {&from_run, &from_pkg}) {
    EXPECT_EQ(p->kind, PackageKind::kImageClassifier);
    EXPECT_EQ(p->architecture, "cnn_small");
    EXPECT_EQ(p->num_classes, 3);
    EXPECT_EQ(p->labels, std::vector<std::string>({"circle", "square", "line"}));
    EXPECT_EQ(p->precision, Precision::kFp32);
    EXPECT_EQ(p->image.channels, 1);
    EXPECT_EQ(p->image.image_size, 12);
    EXPECT_EQ(p->image.mean, std::vector<double>{0.5});
  }
  const at::Tensor batch = at::randn({2, 1, 12, 12});
  const at::Tensor eager = Classifier::from_package(from_run).logits(batch);
  const at::Tensor engine = Classifier::from_package(from_pkg).logits(batch);
  EXPECT_TRUE(at::allclose(eager, engine, 1e-4, 1e-5)) << (eager - engine).abs().max().item<double>();
  const auto message = [](const auto& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { (void)load_package_graph(from_run); }).find("a training run directory (model.json), not a "
                                                                       "model package; export it first"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)load_package_model(from_pkg); }).find("a model package runs in the engine"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)read_package(dir.path()); }).find("neither a model package"), std::string::npos);
}

// Agreement measured on random inputs means nothing for real data: an int8 export without --calibration is written
// with a warning (console and report) that its accuracy is unknown, and prints no agreement.
TEST(Export, Int8OnRandomInputsSaysItsAccuracyIsUnknownAndPrintsNoAgreement) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const fs::path pkg = dir.path() / "pkg";
  const ExportReport r = export_package({.model_dir = run.string()}, {.out = pkg, .precision = Precision::kInt8});
  EXPECT_EQ(r.json["status"], "accuracy-unknown");
  EXPECT_NE(r.warning.find("calibrated on random inputs: its accuracy on real data is unknown (pass --calibration "
                           "SHARDS"),
            std::string::npos)
      << r.warning;
  EXPECT_EQ(r.json["warning"], r.warning);
  EXPECT_EQ(r.summary.find("agreement"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("random inputs; accuracy on real data not measured"), std::string::npos) << r.summary;
  const auto written = nlohmann::json::parse(read_file((pkg / "quantization_report.json").string()));
  EXPECT_EQ(written["status"], "accuracy-unknown");
  EXPECT_EQ(read_package(pkg).precision, Precision::kInt8);
}

// Each stage's seconds in the report; a progress line per stage on the given stream (here from the first
// second on: by default only past 2 s), none without one.
TEST(Export, ReportsEachStagesSecondsAndPrintsProgressPerStage) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  std::ostringstream lines;
  const ExportReport r = export_package(
      {.model_dir = run.string()},
      {.out = dir.path() / "pkg", .precision = Precision::kInt8, .progress = &lines, .progress_after_s = 0.0});
  const auto& t = r.json["timings_s"];
  for (const char* stage : {"loading the model", "reading the calibration data", "running the fp32 graph",
                            "running the source model", "quantize: observing ranges",
                            "quantize: comparing the quantized graph with fp32", "running the exported graph"}) {
    ASSERT_TRUE(t.contains(stage)) << stage << " in " << t.dump();
    EXPECT_GE(t[stage].get<double>(), 0.0) << stage;
    EXPECT_NE(lines.str().find(std::string("export: ") + stage), std::string::npos) << stage << " in " << lines.str();
  }
  EXPECT_NE(lines.str().find("(100%)"), std::string::npos) << lines.str();
  EXPECT_EQ(lines.str().find('\r'), std::string::npos);  // not a terminal: plain lines
  const ExportReport quiet = export_package({.model_dir = run.string()}, {.out = dir.path() / "pkg2"});
  EXPECT_TRUE(quiet.json["timings_s"].contains("running the fp32 graph"));
}

TEST(Export, Fp32PackageReloadsWithTheRunsOutputs) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const fs::path pkg = dir.path() / "pkg";
  const ExportReport r = export_package({.model_dir = run.string()}, {.out = pkg});
  EXPECT_EQ(r.json["status"], "ok");
  EXPECT_NE(r.json["data"]["source"].get<std::string>().find("random inputs"), std::string::npos);
  EXPECT_LT(r.json["lowering_vs_model"]["max_abs_error"].get<double>(), 1e-4);
  const at::Tensor x = at::randn({3, 1, 12, 12});
  const at::NoGradGuard no_grad;
  const at::Tensor want = model->forward(x);
  const at::Tensor got = Classifier::from_dir(pkg.string()).logits(x);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
  // An existing package is not overwritten by accident, and nothing of it changes.
  const auto before = fs::last_write_time(pkg / "model.safetensors");
  EXPECT_THROW(export_package({.model_dir = run.string()}, {.out = pkg}), Error);
  EXPECT_EQ(fs::last_write_time(pkg / "model.safetensors"), before);
  EXPECT_NO_THROW(export_package({.model_dir = run.string()}, {.out = pkg, .overwrite = true}));
}

// Every entry under `dir` (names relative to it), to see that an export left nothing else behind.
std::vector<std::string> tree(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) names.push_back(fs::relative(e.path(), dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string export_error(const ExportSource& source, const ExportOptions& options) {
  try {
    (void)export_package(source, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Export, OverwriteReplacesThePackageAsAWhole) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = run.string()}, {.out = pkg});
  const std::vector<std::string> written = tree(pkg);
  // A file the new package does not write (an old vocab.txt) must not survive into it.
  test::write_file((pkg / "vocab.txt").string(), "[PAD]\n");
  (void)export_package({.model_dir = run.string()}, {.out = pkg, .overwrite = true});
  EXPECT_EQ(tree(pkg), written);
  EXPECT_EQ(read_package(pkg).labels, std::vector<std::string>({"circle", "square", "line"}));
  // Nothing beside it: the temp dir was renamed in, the old package removed.
  std::vector<std::string> top;
  for (const auto& e : fs::directory_iterator(dir.path())) top.push_back(e.path().filename().string());
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, std::vector<std::string>({"pkg", "run"}));
}

TEST(Export, AFailureWhileWritingLeavesTheOldPackageAsItWas) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  const fs::path pkg = dir.path() / "pkg";
  (void)export_package({.model_dir = run.string()}, {.out = pkg});
  const auto config = test::read_bytes((pkg / "config.json").string());
  const auto weights = test::read_bytes((pkg / "model.safetensors").string());
  // A class name labels.txt cannot hold fails after config.json and preprocess.json are written.
  Package bad = read_package(run.string());
  bad.labels[1] = "squ\nare";
  test::write_file((run / "model.json").string(), run_directory_json(bad));
  const std::string error = export_error({.model_dir = run.string()}, {.out = pkg, .overwrite = true});
  EXPECT_NE(error.find("line break"), std::string::npos) << error;
  EXPECT_EQ(test::read_bytes((pkg / "config.json").string()), config);
  EXPECT_EQ(test::read_bytes((pkg / "model.safetensors").string()), weights);
  EXPECT_EQ(read_package(pkg).labels, std::vector<std::string>({"circle", "square", "line"}));
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

TEST(Export, NeverReplacesATrainingRunOrTheModelItReads) {
  const TempDir dir;
  models::ModelHandle model;
  const fs::path run = write_image_run(dir, model);
  test::write_file((run / "metrics.jsonl").string(), "{\"step\": 1}\n");
  const std::vector<std::string> before = tree(run);
  const auto weights = test::read_bytes((run / "model.safetensors").string());
  const ExportSource src{.model_dir = run.string()};
  // The issue's case: --out RUN --overwrite replaced the trained weights with the package's.
  std::string e = export_error(src, {.out = run, .overwrite = true});
  EXPECT_NE(e.find("is --model-dir"), std::string::npos) << e;
  e = export_error(src, {.out = run.string() + "/", .overwrite = true});
  EXPECT_NE(e.find("is --model-dir"), std::string::npos) << e;
  e = export_error(src, {.out = run / "pkg"});
  EXPECT_NE(e.find("is inside --model-dir"), std::string::npos) << e;
  e = export_error(src, {.out = dir.path(), .overwrite = true});
  EXPECT_NE(e.find("holds --model-dir"), std::string::npos) << e;
  EXPECT_EQ(tree(run), before);
  EXPECT_EQ(test::read_bytes((run / "model.safetensors").string()), weights);
  // Another run (one the old export already wrote a package over), or a directory holding one.
  const fs::path other = dir.path() / "other" / "run2";
  fs::create_directories(other / "checkpoints" / "step-00000001");
  test::write_file((other / "config.json").string(), R"({"hotpath_package": 1})");
  e = export_error(src, {.out = other, .overwrite = true});
  EXPECT_NE(e.find("is a training run (" + (other / "checkpoints").string()), std::string::npos) << e;
  // A package directory with a run inside it (a run's output_dir set inside the package).
  test::write_file((dir.path() / "other" / "config.json").string(), R"({"hotpath_package": 1})");
  e = export_error(src, {.out = dir.path() / "other", .overwrite = true});
  EXPECT_NE(e.find("holds a training run"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(other / "checkpoints" / "step-00000001"));
  // --overwrite replaces a package, never some other directory.
  const fs::path notes = dir.path() / "notes";
  fs::create_directories(notes);
  test::write_file((notes / "todo.txt").string(), "keep\n");
  e = export_error(src, {.out = notes, .overwrite = true});
  EXPECT_NE(e.find("is not a hotpath package"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(notes / "todo.txt"));
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
}

TEST(Export, RefusesAmbiguousOrIncompleteSources) {
  const auto message = [](const ExportSource& s) {
    try {
      (void)lower_export_source(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("give exactly one of"), std::string::npos);
  EXPECT_NE(message({.model_dir = "a", .model = "resnet18"}).find("give exactly one of"), std::string::npos);
  EXPECT_NE(message({.model = "resnet18"}).find("needs exactly one of --pretrained or --random-init"),
            std::string::npos);
  EXPECT_NE(message({.model = "resnet18", .random_init = true, .num_classes = 0}).find("--num-classes 0"),
            std::string::npos);
  const TempDir dir;
  EXPECT_NE(message({.model_dir = dir.path().string()}).find("holds neither model.json"), std::string::npos);
  EXPECT_NE(message({.model = "vit_tiny", .random_init = true, .num_classes = 3, .image_size = 32})
                .find("this ViT is built for 224×224 images (its pos_embedding), the input is 32×32"),
            std::string::npos);
}

// A model family the lowering does not know is one line naming it (for the package and ONNX alike).
class Unknown : public models::ImageClassifier {
 public:
  Unknown() : models::ImageClassifier("MysteryNet") {}
  at::Tensor forward(const at::Tensor& x) override { return x; }
};

TEST(Export, UnknownModelFamilyIsOneLineNamingIt) {
  const Unknown m;
  try {
    (void)lower_image_model(m, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "lowering: no inference lowering for model MysteryNet");
  }
}

// A Hugging Face directory: config.json, model.safetensors under HF's key names, vocab.txt.
fs::path write_hf_dir(const TempDir& dir, bool classifier) {
  return test::write_tiny_hf_bert(dir.path() / (classifier ? "hf-cls" : "hf-emb"), classifier);
}

TEST(Export, HuggingFaceClassifierAndEmbedderDirectories) {
  const TempDir dir;
  {
    const fs::path hf = write_hf_dir(dir, true);
    const fs::path pkg = dir.path() / "cls-pkg";
    test::write_file((dir.path() / "lines.txt").string(), "the cat sat\n\nthe dog ran far away\n");
    const ExportReport r = export_package({.model_dir = hf.string()},
                                          {.out = pkg, .precision = Precision::kInt8,
                                           .calibration = {(dir.path() / "lines.txt").string()},
                                           .allow_accuracy_loss = true});
    EXPECT_EQ(r.json["data"]["source"], "text lines");
    EXPECT_EQ(r.json["data"]["samples"].get<std::int64_t>(), 2);  // the empty line is not a sample
    const Package p = read_package(pkg);
    EXPECT_EQ(p.kind, PackageKind::kTextClassifier);
    EXPECT_EQ(p.labels.size(), 2U);
    EXPECT_TRUE(fs::exists(pkg / "vocab.txt"));
  }
  {
    const fs::path hf = write_hf_dir(dir, false);
    const fs::path pkg = dir.path() / "emb-pkg";
    (void)export_package({.model_dir = hf.string()}, {.out = pkg});
    const Package p = read_package(pkg);
    EXPECT_EQ(p.kind, PackageKind::kSentenceEmbedder);
    // The package encoder gives the directory encoder's embeddings.
    const std::vector<std::string_view> lines = {"the cat sat on the mat", "a dog", "far away"};
    const at::Tensor want = SentenceEncoder::from_directory(hf).encode(lines);
    const at::Tensor got = SentenceEncoder::from_package(p).encode(lines);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
  }
}

}  // namespace
}  // namespace hotpath::infer
