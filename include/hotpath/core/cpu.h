// hotpath/core/cpu.h — CPU dispatch: which instruction-set level the kernels may use, and why each
// op runs the variant it runs.
//
//   const cpu::OpDispatch kDispatch{"dropout", {{"avx2", cpu::Isa::kAvx2}, {"portable", cpu::Isa::kScalar}}};
//   const auto run = kDispatch.select() == 0 ? &run_avx2 : &run_portable;    // per call: cheap
//   std::cout << cpu::dispatch_report_text();                               // every op, and why
//
// The CPU is probed once. One cap bounds every kernel: HOTPATH_MAX_ISA=scalar|avx2|avx512|avx512_bf16
// in the environment (read once; a bad value is one error), lowered further by set_max_isa() (tests,
// benchmarks), so an AVX-512 machine runs and tests the AVX2 and scalar paths too. Each op declares
// its variants, widest first, in one OpDispatch; select() takes the first the cap allows and, the
// first time it makes a choice, prints it with the reasons the wider ones were skipped when
// HOTPATH_VERBOSE=dispatch.
// Choices that depend on the inputs (dtype, device, mask shape) are not ISA choices: ops keep their
// own per-call *_skip_reason() for those.
//
// Levels (each includes the ones below it):
//   scalar       baseline x86-64 (SSE2), or any non-x86 CPU
//   avx2         AVX2 + FMA (x86-64-v3's vector part)
//   avx512       AVX-512 F + BW + DQ + VL (x86-64-v4; oneDNN's bf16 kernels need these)
//   avx512_bf16  avx512 + AVX512_BF16 (native bf16 dot products)
//
// State: the probe, the HOTPATH_MAX_ISA value, the set_max_isa() cap, the HOTPATH_VERBOSE flag and the
// list of registered ops live in function-local statics of cpu.cpp; each OpDispatch holds its
// once-read override and which choices it has printed. All of it is thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// x86 kernel variants are compiled (target attributes, #pragma GCC target) only where this is 1;
// elsewhere ops offer their portable variant alone and say so.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOTPATH_X86_KERNELS 1
#endif

namespace hotpath::cpu {

enum class Isa : std::uint8_t { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

#ifdef HOTPATH_X86_KERNELS
inline constexpr bool kX86Kernels = true;
#else
inline constexpr bool kX86Kernels = false;
#endif

// "scalar", "avx2", "avx512", "avx512_bf16" — the spelling HOTPATH_MAX_ISA takes.
const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

// The widest level this CPU (and build) supports, probed once.
Isa detected_isa();
// The CPU's feature flags hotpath looks at, e.g. "avx2 fma avx512f avx512bw avx512dq avx512vl".
std::string detected_features();
// Whether the CPU has an int8 dot-product instruction (AVX512_VNNI or AVX-VNNI): not capped by HOTPATH_MAX_ISA,
// as LibTorch and oneDNN read the CPU themselves.
bool detected_vnni();
// "ONEDNN_MAX_CPU_ISA=AVX2" (or DNNL_MAX_CPU_ISA) when the environment caps oneDNN below its VNNI kernels, else "".
std::string onednn_cap_below_vnni();
// HOTPATH_MAX_ISA caps hotpath's kernels; this passes the same cap to LibTorch's own (ATen's vectorised loops:
// ATEN_CPU_CAPABILITY, oneDNN: ONEDNN_MAX_CPU_ISA, MKL: MKL_ENABLE_INSTRUCTIONS) so a capped run behaves like a
// machine of that level. A variable already set is left alone. They are read when first used: call this at
// start-up (the CLI's main), before any LibTorch kernel runs. Throws hotpath::Error on a bad HOTPATH_MAX_ISA.
void cap_libraries_isa();

// min(detected_isa(), the cap): what kernels may use. Throws hotpath::Error once per call while
// HOTPATH_MAX_ISA holds a bad value.
Isa max_isa();
// Caps every kernel at `cap`, within HOTPATH_MAX_ISA (the environment's cap stays the ceiling, so
// tests that walk the levels below it honour it; a cap above what the CPU has changes nothing).
// reset_max_isa() returns to HOTPATH_MAX_ISA alone.
void set_max_isa(Isa cap);
void reset_max_isa();
bool allows(Isa level);
// Why a kernel may not use `level` ("this CPU lacks AVX2+FMA", "capped by HOTPATH_MAX_ISA=avx2"),
// or an empty string when it may.
std::string isa_skip_reason(Isa level);

// set_max_isa(cap) for a scope; the previous cap (or none) comes back on destruction.
class ScopedMaxIsa {
 public:
  explicit ScopedMaxIsa(Isa cap);
  ~ScopedMaxIsa();
  ScopedMaxIsa(const ScopedMaxIsa&) = delete;
  ScopedMaxIsa& operator=(const ScopedMaxIsa&) = delete;

 private:
  int previous_;
};

// One variant of a kernel: its name in reports and the level it needs. `compiled` is false for a
// variant this build left out (x86 variants: pass kX86Kernels).
struct Variant {
  const char* name;
  Isa needs;
  bool compiled = true;
};

// One op's current choice, as reports show it.
struct Choice {
  std::string op;
  std::string variant;
  std::string reason;  // why wider variants were skipped ("" when the widest runs)
  std::string note;
};

// An op's ISA dispatch. Construct one per op at namespace scope (it registers itself, so reports
// list the op before it first runs); the last variant must need kScalar.
class OpDispatch {
 public:
  struct Options {
    // Notes that hold whichever variant runs, e.g. "serial: built without OpenMP".
    const char* note = "";
    // An environment variable that may name a variant to force (HOTPATH_BF16_MATH=fp32); read once.
    const char* override_env = nullptr;
  };
  OpDispatch(const char* op, std::initializer_list<Variant> variants, Options options);
  OpDispatch(const char* op, std::initializer_list<Variant> variants) : OpDispatch(op, variants, Options{}) {}
  OpDispatch(const OpDispatch&) = delete;
  OpDispatch& operator=(const OpDispatch&) = delete;

  // Index into the variants of the one to run now (the override, else the widest the cap allows).
  // Thread-safe and cheap enough to call per kernel call.
  std::size_t select() const;
  [[nodiscard]] const char* op() const { return op_; }
  [[nodiscard]] const Variant& variant(std::size_t i) const { return variants_[i]; }
  // select() with the reasons, for reports.
  Choice choice() const;
  // "avx2", or "portable (avx2: this CPU lacks AVX2+FMA)": the choice with why wider ones were
  // skipped and the note. The pointer stays valid for the life of the program.
  const char* describe() const;

 private:
  std::size_t forced() const;  // the override's index, or variants_.size()
  std::string reason(std::size_t chosen) const;
  void first_choice(std::size_t chosen) const;

  const char* op_;
  std::vector<Variant> variants_;
  Options options_;
  mutable std::atomic<std::uint32_t> reported_{0};  // bit i: variant i was chosen and printed
  mutable std::once_flag override_read_;              // options_.override_env, read once into:
  mutable std::size_t forced_ = 0;                    //   the forced variant, or variants_.size()
  mutable std::string override_error_;                //   or why its value is bad
};

// Every registered op, selected under the current cap, sorted by op name.
std::vector<Choice> dispatch_choices();
// "cpu: avx512 (...), cap none" then one line per op: "  attention  avx2  (avx512: capped by ...)".
std::string dispatch_report_text();
// {"detected": "avx512", "features": "...", "cap": "avx2" | null, "cap_source": "HOTPATH_MAX_ISA=avx2" |
//  "set_max_isa(avx2)" | null, "max_isa": "avx2", "ops": {"attention": {"variant": "avx2", "reason": "..."}}}
std::string dispatch_report_json();

// HOTPATH_VERBOSE holds "dispatch" (or "all") in its comma-separated list; read once.
bool verbose_dispatch();

}  // namespace hotpath::cpu
