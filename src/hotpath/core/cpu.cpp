#include "hotpath/core/cpu.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "hotpath/core/error.h"

namespace hotpath::cpu {
namespace {

constexpr int kNoCap = -1;

struct Probe {
  Isa isa = Isa::kScalar;
  std::string features;
  bool vnni = false;  // AVX512_VNNI or AVX-VNNI
};

Probe probe() {
  Probe p;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  // __builtin_cpu_supports takes only literals.
#define HOTPATH_FEATURE(f) \
  if (__builtin_cpu_supports(f)) p.features.append(p.features.empty() ? "" : " ").append(f)
  HOTPATH_FEATURE("avx2");
  HOTPATH_FEATURE("fma");
  HOTPATH_FEATURE("avx512f");
  HOTPATH_FEATURE("avx512bw");
  HOTPATH_FEATURE("avx512dq");
  HOTPATH_FEATURE("avx512vl");
  HOTPATH_FEATURE("avx512vnni");
  HOTPATH_FEATURE("avx512bf16");
#undef HOTPATH_FEATURE
  p.isa = bf16 ? Isa::kAvx512Bf16 : avx512 ? Isa::kAvx512 : avx2 ? Isa::kAvx2 : Isa::kScalar;
#ifdef HOTPATH_X86_KERNELS  // GCC builds: clang 14 (the fuzz build) does not know "avxvnni"; no int8 kernels there
  p.vnni = __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
#endif
#endif
  return p;
}

const Probe& probed() {
  static const Probe p = probe();  // once, thread-safe (magic static)
  return p;
}

// HOTPATH_MAX_ISA, read once: the cap, or the error every max_isa() call throws.
struct EnvCap {
  std::optional<Isa> cap;
  std::string value;
  std::string error;
};

const EnvCap& env_cap() {
  static const EnvCap env = [] {
    EnvCap e;
    const char* v = std::getenv("HOTPATH_MAX_ISA");
    if (v == nullptr || *v == '\0') return e;
    e.value = v;
    e.cap = parse_isa(e.value);
    if (!e.cap) {
      e.error = "HOTPATH_MAX_ISA: expected scalar, avx2, avx512 or avx512_bf16, got '" + printable(e.value) + "'";
    }
    return e;
  }();
  return env;
}

// The set_max_isa() cap as an Isa value, or kNoCap.
std::atomic<int>& set_cap() {
  static std::atomic<int> cap{kNoCap};
  return cap;
}

// The cap in force — the lower of HOTPATH_MAX_ISA and set_max_isa() — and whether it is the setter's.
// Cheap (no allocation): max_isa() runs on every kernel call.
struct Cap {
  std::optional<Isa> isa;
  bool from_setter = false;
};

Cap current_cap() {
  const EnvCap& env = env_cap();
  HOTPATH_CHECK(env.error.empty(), env.error);
  const int set = set_cap().load(std::memory_order_relaxed);
  if (set != kNoCap && (!env.cap || static_cast<Isa>(set) < *env.cap)) return {static_cast<Isa>(set), true};
  return {env.cap, false};
}

// The cap and where it came from ("HOTPATH_MAX_ISA=avx2", "set_max_isa(scalar)"; "" when none).
std::pair<std::optional<Isa>, std::string> cap_and_source() {
  const Cap cap = current_cap();
  if (!cap.isa) return {std::nullopt, ""};
  if (cap.from_setter) return {cap.isa, std::string("set_max_isa(") + isa_name(*cap.isa) + ")"};
  return {cap.isa, "HOTPATH_MAX_ISA=" + env_cap().value};
}

const char* cpu_lacks(Isa level) {
  switch (level) {
    case Isa::kScalar: return "";
    case Isa::kAvx2: return "this CPU lacks AVX2+FMA";
    case Isa::kAvx512: return "this CPU lacks AVX-512 F/BW/DQ/VL";
    case Isa::kAvx512Bf16: return "this CPU lacks AVX512_BF16";
  }
  return "";
}

// Every OpDispatch, and the strings describe() hands out (they only grow: a few per op and cap).
struct Registry {
  std::mutex mutex;
  std::map<std::string, const OpDispatch*, std::less<>> ops;
  std::set<std::string, std::less<>> strings;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

Isa detected_isa() { return probed().isa; }
std::string detected_features() { return probed().features; }
bool detected_vnni() { return probed().vnni; }

void cap_libraries_isa() {
  const char* cap = std::getenv("HOTPATH_MAX_ISA");  // NOLINT(concurrency-mt-unsafe): at start-up
  if (cap == nullptr || *cap == '\0') return;
  struct Caps {
    const char *aten, *onednn, *mkl;
  };
  Caps caps{};
  switch (max_isa()) {  // throws on a bad HOTPATH_MAX_ISA: one line
    case Isa::kScalar: caps = {"default", "SSE41", "SSE4_2"}; break;
    case Isa::kAvx2: caps = {"avx2", "AVX2", "AVX2"}; break;
    case Isa::kAvx512: caps = {"avx512", "AVX512_CORE", nullptr}; break;
    case Isa::kAvx512Bf16: return;
  }
  setenv("ATEN_CPU_CAPABILITY", caps.aten, 0);  // NOLINT(concurrency-mt-unsafe): at start-up
  setenv("ONEDNN_MAX_CPU_ISA", caps.onednn, 0);  // NOLINT(concurrency-mt-unsafe)
  if (caps.mkl != nullptr) setenv("MKL_ENABLE_INSTRUCTIONS", caps.mkl, 0);  // NOLINT(concurrency-mt-unsafe)
}

std::string onednn_cap_below_vnni() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read by callers once
    if (value == nullptr) continue;
    std::string v(value);
    for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (v == "SSE41" || v == "AVX" || v == "AVX2" || v == "AVX512_CORE") return std::string(name) + "=" + value;
    return "";
  }
  return "";
}

Isa max_isa() {
  const std::optional<Isa> cap = current_cap().isa;
  return cap ? std::min(*cap, detected_isa()) : detected_isa();
}

void set_max_isa(Isa cap) { set_cap().store(static_cast<int>(cap), std::memory_order_relaxed); }
void reset_max_isa() { set_cap().store(kNoCap, std::memory_order_relaxed); }
bool allows(Isa level) { return level <= max_isa(); }

std::string isa_skip_reason(Isa level) {
#if !defined(__x86_64__)
  if (level != Isa::kScalar) return "not an x86-64 build";
#endif
  if (level > detected_isa()) return cpu_lacks(level);
  const auto [cap, source] = cap_and_source();
  if (cap && level > *cap) return "capped by " + source;
  return "";
}

ScopedMaxIsa::ScopedMaxIsa(Isa cap) : previous_(set_cap().load(std::memory_order_relaxed)) { set_max_isa(cap); }
ScopedMaxIsa::~ScopedMaxIsa() { set_cap().store(previous_, std::memory_order_relaxed); }

bool verbose_dispatch() {
  static const bool on = [] {
    const char* v = std::getenv("HOTPATH_VERBOSE");
    if (v == nullptr) return false;
    std::stringstream list{std::string(v)};
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item == "dispatch" || item == "all") return true;
    }
    return false;
  }();
  return on;
}

// ---- OpDispatch ---------------------------------------------------------------------------------

OpDispatch::OpDispatch(const char* op, std::initializer_list<Variant> variants, Options options)
    : op_(op), variants_(variants), options_(options) {
  HOTPATH_ASSERT(!variants_.empty() && variants_.size() <= 32);
  HOTPATH_ASSERT(variants_.back().needs == Isa::kScalar && variants_.back().compiled);
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const bool fresh = r.ops.emplace(op_, this).second;
  HOTPATH_ASSERT(fresh);  // one OpDispatch per op name
}

std::size_t OpDispatch::forced() const {
  if (options_.override_env == nullptr) return variants_.size();
  std::call_once(override_read_, [this] {
    forced_ = variants_.size();
    const char* v = std::getenv(options_.override_env);
    if (v == nullptr || *v == '\0') return;
    std::string names;
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      if (!variants_[i].compiled) continue;
      if (std::string_view(v) == variants_[i].name) forced_ = i;
      names.append(names.empty() ? "" : " or ").append(variants_[i].name);
    }
    if (forced_ == variants_.size()) {
      override_error_ = std::string(options_.override_env) + ": expected " + names + ", got '" + printable(v) + "'";
    }
  });
  HOTPATH_CHECK(override_error_.empty(), override_error_);
  return forced_;
}

std::size_t OpDispatch::select() const {
  std::size_t chosen = forced();
  if (chosen == variants_.size()) {
    const Isa level = max_isa();
    chosen = variants_.size() - 1;
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      if (variants_[i].compiled && variants_[i].needs <= level) {
        chosen = i;
        break;
      }
    }
  }
  if ((reported_.load(std::memory_order_relaxed) & (1u << chosen)) == 0) first_choice(chosen);
  return chosen;
}

std::string OpDispatch::reason(std::size_t chosen) const {
  if (chosen != variants_.size() && forced() == chosen) {
    return std::string("forced by ") + options_.override_env + "=" + variants_[chosen].name;
  }
  std::string why;
  for (std::size_t i = 0; i < chosen; ++i) {
    std::string skip = variants_[i].compiled ? isa_skip_reason(variants_[i].needs)
                                             : "not compiled in this build (needs GCC on x86-64)";
    why.append(why.empty() ? "" : "; ").append(variants_[i].name).append(": ").append(skip);
  }
  return why;
}

void OpDispatch::first_choice(std::size_t chosen) const {
  const std::uint32_t bit = 1u << chosen;
  if ((reported_.fetch_or(bit, std::memory_order_relaxed) & bit) != 0) return;  // another thread did
  if (!verbose_dispatch()) return;
  std::string line = std::string("hotpath: dispatch: ") + op_ + " -> " + variants_[chosen].name;
  const std::string why = reason(chosen);
  if (!why.empty()) line.append(" (").append(why).append(")");
  if (*options_.note != '\0') line.append(", ").append(options_.note);
  std::fprintf(stderr, "%s\n", line.c_str());  // one write per line: threads do not interleave
}

Choice OpDispatch::choice() const {
  const std::size_t chosen = select();
  return {op_, variants_[chosen].name, reason(chosen), options_.note};
}

namespace {

std::string describe_choice(const Choice& c) {
  std::string text = c.variant;
  if (!c.reason.empty()) text.append(" (").append(c.reason).append(")");
  if (!c.note.empty()) text.append(", ").append(c.note);
  return text;
}

}  // namespace

const char* OpDispatch::describe() const {
  std::string text = describe_choice(choice());
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return r.strings.insert(std::move(text)).first->c_str();
}

// ---- reports --------------------------------------------------------------------------------------

std::vector<Choice> dispatch_choices() {
  std::vector<const OpDispatch*> ops;
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    for (const auto& [name, op] : r.ops) ops.push_back(op);
  }
  std::vector<Choice> choices;
  choices.reserve(ops.size());
  for (const OpDispatch* op : ops) choices.push_back(op->choice());
  return choices;
}

namespace {

std::string cap_text() {
  const auto [cap, source] = cap_and_source();
  return cap ? std::string(isa_name(*cap)) + " (" + source + ")" : "none";
}

}  // namespace

std::string dispatch_report_text() {
  const std::vector<Choice> choices = dispatch_choices();
  std::ostringstream out;
  out << "cpu: " << isa_name(detected_isa()) << " (" << (detected_features().empty() ? "no AVX2" : detected_features())
      << "), cap " << cap_text() << ", kernels up to " << isa_name(max_isa()) << "\n";
  std::size_t width = 0;
  for (const Choice& c : choices) width = std::max(width, c.op.size());
  for (const Choice& c : choices) {
    out << "  " << c.op << std::string(width + 2 - c.op.size(), ' ') << describe_choice(c) << "\n";
  }
  return out.str();
}

std::string dispatch_report_json() {
  const std::vector<Choice> choices = dispatch_choices();
  const auto [cap, source] = cap_and_source();
  nlohmann::json report = {{"detected", isa_name(detected_isa())},
                           {"features", detected_features()},
                           {"cap", cap ? nlohmann::json(isa_name(*cap)) : nlohmann::json(nullptr)},
                           {"cap_source", cap ? nlohmann::json(source) : nlohmann::json(nullptr)},
                           {"max_isa", isa_name(max_isa())},
                           {"ops", nlohmann::json::object()}};
  for (const Choice& c : choices) {
    nlohmann::json op = {{"variant", c.variant}, {"reason", c.reason}};
    if (!c.note.empty()) op["note"] = c.note;
    report["ops"][c.op] = std::move(op);
  }
  return report.dump();
}

}  // namespace hotpath::cpu
