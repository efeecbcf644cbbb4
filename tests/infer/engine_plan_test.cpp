// The engine's per-shape buffer plans (engine.h, EngineOptions::plan_buffers) and the batch-1 row split
// (split_rows): planned runs equal unplanned ones bit for bit (text and image, fp32 and int8, several
// shapes, repeated), shape changes and the LRU bound, concurrent callers, outputs that never alias the
// arena, and how much a steady-state run still allocates through ATen's CPU allocator.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "hotpath/core/error.h"
#include "hotpath/infer/engine.h"
#include "hotpath/infer/lower.h"
#include "hotpath/models/registry.h"
#include "hotpath/models/text/bert.h"
#include "hotpath/ops/int8_linear.h"
#include "support/tiny_bert.h"

namespace hotpath::infer {
namespace {

// Every linear dynamic int8, in graph.h's quantized form (what the quantizer writes).
Graph quantize_linears(const Graph& g) {
  Graph q = g;
  for (Node& n : q.nodes) {
    if (n.op != OpKind::kLinear) continue;
    auto [w8, scale] = ops::Int8Linear::quantize_weight(q.params.at(n.params.at("weight")));
    q.params[n.params.at("weight")] = w8;
    q.params[n.name + ".weight_scale"] = scale;
    n.params["weight_scale"] = n.name + ".weight_scale";
    n.attrs["quant"] = std::string("dynamic_int8");
  }
  return q;
}

std::vector<at::Tensor> text_inputs(std::int64_t batch, std::int64_t length, std::uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor ids = at::randint(1, 50, {batch, length}, at::kLong);
  at::Tensor mask = at::ones({batch, length}, at::kLong);
  if (batch > 1) mask[batch - 1].narrow(0, length / 2, length - length / 2).zero_();
  at::Tensor types = at::zeros({batch, length}, at::kLong);
  types[0].narrow(0, length / 2, length - length / 2).fill_(1);
  return {ids, mask, types};
}

struct TextGraphs {
  Graph bert_fp32, bert_int8, embedder_fp32, embedder_int8;
};

const TextGraphs& text_graphs() {
  static const TextGraphs g = [] {
    TextGraphs t;
    at::manual_seed(21);
    models::BertForSequenceClassification bert(test::tiny_bert(formats::BertArch::kBert, 64));
    bert.eval();
    t.bert_fp32 = lower_text_classifier(bert);
    t.bert_int8 = quantize_linears(t.bert_fp32);
    auto encoder = std::make_shared<models::BertModel>(test::tiny_bert(formats::BertArch::kDistilBert, 64),
                                                       models::BertOptions{.add_pooling_layer = false});
    encoder->eval();
    const models::SentenceEmbedder embedder(encoder);
    t.embedder_fp32 = lower_sentence_embedder(embedder);
    t.embedder_int8 = quantize_linears(t.embedder_fp32);
    return t;
  }();
  return g;
}

EngineOptions options(bool planned, int threads, bool int8) {
  EngineOptions o{.threads = threads, .precision = int8 ? Precision::kInt8 : Precision::kFp32};
  o.plan_buffers = planned;
  return o;
}

TEST(EnginePlan, PlannedTextRunsEqualUnplannedBitForBit) {
  const TextGraphs& g = text_graphs();
  const std::pair<const Graph*, const char*> graphs[] = {{&g.bert_fp32, "bert fp32"},
                                                         {&g.bert_int8, "bert int8"},
                                                         {&g.embedder_fp32, "embedder fp32"},
                                                         {&g.embedder_int8, "embedder int8"}};
  for (const auto& [graph, name] : graphs) {
    const bool int8 = std::string(name).find("int8") != std::string::npos;
    const Engine plain = Engine::from_graph(*graph, options(false, 1, int8));
    const Engine planned = Engine::from_graph(*graph, options(true, 1, int8));
    EXPECT_NE(plain.describe().find("buffers: allocated per run (plan_buffers off)"), std::string::npos);
    std::uint64_t seed = 1;
    for (const auto& [batch, length] : {std::pair{1, 7}, std::pair{2, 13}, std::pair{1, 7}, std::pair{3, 40}}) {
      for (int repeat = 0; repeat < 3; ++repeat) {  // the first run records the plan, the next ones use it
        const auto in = text_inputs(batch, length, seed++);
        const at::Tensor want = plain.run(in).front();
        const at::Tensor got = planned.run(in).front();
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(at::equal(got, want)) << name << " batch " << batch << " length " << length << " run " << repeat;
      }
    }
    const auto plans = planned.buffer_plans();
    ASSERT_EQ(plans.size(), 3U) << planned.describe();
    EXPECT_EQ(plans[0].input_shapes[0], (std::vector<std::int64_t>{3, 40})) << "most recently used first";
    for (const auto& p : plans) {
      EXPECT_GT(p.planned, 10) << name;
      EXPECT_GT(p.arena_bytes, 0);
      EXPECT_LT(p.arena_bytes, p.planned_bytes) << name << ": lifetimes that do not overlap share bytes";
      EXPECT_LT(p.buffers, p.planned);
    }
    EXPECT_NE(planned.describe().find("shape [3, 40] [3, 40] [3, 40]: arena "), std::string::npos) << planned.describe();
  }
}

TEST(EnginePlan, PlannedImageRunsEqualUnplannedBitForBit) {
  for (const char* arch : {"cnn_small", "resnet18_small"}) {
    at::manual_seed(4);
    auto model = models::create_model(arch, {.num_classes = 5, .in_channels = 3});
    model->eval();
    const Graph fp32 = lower_image_model(*model, {.channels = 3, .image_size = 20});
    for (const bool int8 : {false, true}) {
      const Graph g = int8 ? quantize_linears(fp32) : fp32;
      for (const bool channels_last : {true, false}) {
        EngineOptions off = options(false, 1, int8), on = options(true, 1, int8);
        off.channels_last = on.channels_last = channels_last;
        const Engine plain = Engine::from_graph(g, off);
        const Engine planned = Engine::from_graph(g, on);
        for (const std::int64_t batch : {1, 3, 1, 3}) {
          const at::Tensor x = at::randn({batch, 3, 20, 20});
          const at::Tensor want = plain.run({x}).front();
          EXPECT_TRUE(at::equal(planned.run({x}).front(), want)) << arch << " batch " << batch;
          EXPECT_TRUE(at::equal(planned.run({x}).front(), want)) << arch << " batch " << batch << " again";
        }
        EXPECT_EQ(planned.buffer_plans().size(), 2U);
      }
    }
  }
}

// Batch 1 on 2 threads splits along the tokens: int8 rows are the unsplit run's bit for bit (exact int32
// sums, per-row kernels), fp32 ones within GEMM rounding.
TEST(EnginePlan, Batch1RowSplitMatchesTheUnsplitRun) {
  const TextGraphs& g = text_graphs();
  for (const bool int8 : {false, true}) {
    for (const Graph* graph : {&g.bert_fp32, &g.embedder_fp32}) {
      const Graph q = int8 ? quantize_linears(*graph) : *graph;
      EngineOptions whole_options = options(true, 2, int8);
      whole_options.split_rows = false;
      const Engine split = Engine::from_graph(q, options(true, 2, int8));
      const Engine split3 = Engine::from_graph(q, options(true, 3, int8));  // chunks that do not halve
      const Engine whole = Engine::from_graph(q, whole_options);
      EXPECT_NE(split.describe().find("batch 1: split along the tokens"), std::string::npos) << split.describe();
      EXPECT_NE(whole.describe().find("(split_rows off)"), std::string::npos) << whole.describe();
      for (const std::int64_t length : {1, 2, 17, 64, 17}) {
        for (int repeat = 0; repeat < 2; ++repeat) {
          const auto in = text_inputs(1, length, static_cast<std::uint64_t>(length * 10 + repeat));
          const at::Tensor want = whole.run(in).front();
          for (const Engine* e : {&split, &split3}) {
            const at::Tensor got = e->run(in).front();
            if (int8) {
              EXPECT_TRUE(at::equal(got, want)) << "length " << length << " " << (got - want).abs().max().item<double>();
            } else {
              EXPECT_LE((got - want).abs().max().item<double>(), 1e-5 * std::max(1.0, want.abs().max().item<double>()))
                  << "length " << length;
            }
          }
        }
      }
      bool any_split = false;
      for (const auto& p : split.buffer_plans()) any_split = any_split || p.split_rows;
      EXPECT_TRUE(any_split) << split.describe();
    }
  }
  // A bad token id inside the split fails with the engine's one line, not a hang.
  const Engine split = Engine::from_graph(g.bert_int8, options(true, 2, true));
  auto in = text_inputs(1, 9, 3);
  (void)split.run(in);
  in[0][0][4] = 50;
  try {
    (void)split.run(in);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(", 50], expected [0, 50)"), std::string::npos)
        << e.what();
  }
}

TEST(EnginePlan, KeepsAtMostPlannedShapesMostRecentFirst) {
  EngineOptions o = options(true, 1, true);
  o.planned_shapes = 2;
  const Engine planned = Engine::from_graph(text_graphs().bert_int8, o);
  const Engine plain = Engine::from_graph(text_graphs().bert_int8, options(false, 1, true));
  for (const std::int64_t length : {5, 6, 7, 5, 8, 5}) {
    const auto in = text_inputs(2, length, static_cast<std::uint64_t>(length));
    EXPECT_TRUE(at::equal(planned.run(in).front(), plain.run(in).front())) << length;
  }
  const auto plans = planned.buffer_plans();
  ASSERT_EQ(plans.size(), 2U);
  EXPECT_EQ(plans[0].input_shapes[0][1], 5);
  EXPECT_EQ(plans[1].input_shapes[0][1], 8);
}

TEST(EnginePlan, ConcurrentCallersEachGetTheirOwnArena) {
  const Engine planned = Engine::from_graph(text_graphs().bert_int8, options(true, 1, true));
  const Engine plain = Engine::from_graph(text_graphs().bert_int8, options(false, 1, true));
  std::vector<std::vector<at::Tensor>> inputs;
  std::vector<at::Tensor> want;
  for (int i = 0; i < 6; ++i) {
    inputs.push_back(text_inputs(2, i % 2 == 0 ? 11 : 12, static_cast<std::uint64_t>(100 + i)));
    want.push_back(plain.run(inputs.back()).front());
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int r = 0; r < 12; ++r) {
        const std::size_t i = static_cast<std::size_t>((c + r) % 6);
        if (!at::equal(planned.run(inputs[i]).front(), want[i])) ++wrong;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  std::size_t arenas = 0;
  for (const auto& p : planned.buffer_plans()) arenas += p.arenas;
  EXPECT_GE(arenas, 2U) << planned.describe();
  EXPECT_LE(arenas, 8U) << "at most one arena per concurrent caller and shape";
}

TEST(EnginePlan, OutputsAreNotOverwrittenByLaterRuns) {
  const Engine planned = Engine::from_graph(text_graphs().embedder_fp32, options(true, 1, false));
  const auto a = text_inputs(2, 9, 1), b = text_inputs(2, 9, 2);
  (void)planned.run(a);
  const at::Tensor first = planned.run(a).front();
  const at::Tensor copy = first.clone();
  const at::Tensor second = planned.run(b).front();
  EXPECT_TRUE(at::equal(first, copy)) << "an output aliased the arena";
  EXPECT_FALSE(at::equal(first, second));
}

// Every CPU allocation ATen makes goes through c10's CPU allocator: this one counts them (oneDNN's own
// scratch does not, and is not counted).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(std::size_t n) override {
    if (counting.load()) {
      ++count;
      bytes += static_cast<std::int64_t>(n);
    }
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count_bytes) const override {
    base_->copy_data(dest, src, count_bytes);
  }
  std::atomic<bool> counting{false};
  std::atomic<std::int64_t> count{0}, bytes{0};

 private:
  c10::Allocator* base_;
};

TEST(EnginePlan, SteadyStateRunsAllocateAlmostNothing) {
  static CountingAllocator counter(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counter, /*priority=*/100);
  ASSERT_EQ(c10::GetCPUAllocator(), &counter);
  for (const bool int8 : {false, true}) {
    const Graph& g = int8 ? text_graphs().bert_int8 : text_graphs().bert_fp32;
    const Engine plain = Engine::from_graph(g, options(false, 1, int8));
    const Engine planned = Engine::from_graph(g, options(true, 1, int8));
    const auto in = text_inputs(2, 48, 5);
    (void)plain.run(in);
    (void)planned.run(in);  // records the plan
    (void)planned.run(in);  // makes the arena
    const auto measure = [&](const Engine& e) {
      counter.count = 0;
      counter.bytes = 0;
      counter.counting = true;
      (void)e.run(in);
      counter.counting = false;
      return std::pair<std::int64_t, std::int64_t>{counter.count.load(), counter.bytes.load()};
    };
    const auto [plain_count, plain_bytes] = measure(plain);
    const auto [planned_count, planned_bytes] = measure(planned);
    std::cout << (int8 ? "int8" : "fp32") << " tiny BERT batch 2 x 48: unplanned " << plain_count << " allocations, "
              << plain_bytes << " bytes; planned " << planned_count << " allocations, " << planned_bytes << " bytes\n";
    EXPECT_LT(planned_bytes * 10, plain_bytes) << "a planned run allocates < 10 % of the unplanned run's bytes";
    EXPECT_LT(planned_count * 2, plain_count);
  }
}

}  // namespace
}  // namespace hotpath::infer
