// hotpath/core/bounded.h — numbers from input, bounded by construction.
//
//   const auto step = parse_int(name.substr(5), 0, kMaxStep, "checkpoints/" + name);  // strict digits
//   const auto steps = double_to_int(epochs * per_epoch, 0, kMaxStep, "schedule.step_epochs");
//   check_int_in(threads, 0, max_threads(), "train.threads");
//
// Every integer that comes from a file, a flag or a recipe goes through one of these: a value out of
// range, an overflow or a non-integer is one line naming the field and the range, never a wrapped
// int64 (`step--9223372036854775808`) or a std::stoll exception naming nothing.
#pragma once

#include <cstdint>
#include <string_view>

namespace hotpath {

// The most threads any thread-count option accepts: 8 × the cores (at least 64). More only thrashes;
// 100,000 used to crash inside the thread pool.
std::int64_t max_threads();

// Throws hotpath::Error "<what>: expected an integer in [lo, hi], got <value>" unless lo <= value <= hi.
void check_int_in(std::int64_t value, std::int64_t lo, std::int64_t hi, std::string_view what);

// Strict decimal integer: an optional '-', then digits only (no spaces, '+', hex, trailing bytes),
// in [lo, hi], overflow detected. Throws naming `what`.
std::int64_t parse_int(std::string_view text, std::int64_t lo, std::int64_t hi, std::string_view what);

// A finite double rounded to the nearest integer, in [lo, hi] (checked before converting: no
// undefined behaviour, no wrap). Throws naming `what`.
std::int64_t double_to_int(double value, std::int64_t lo, std::int64_t hi, std::string_view what);

// Throws unless `value` is finite and lo <= value <= hi.
void check_double_in(double value, double lo, double hi, std::string_view what);

}  // namespace hotpath
