#include "hotpath/core/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

#include "hotpath/core/error.h"

namespace hotpath {
namespace {

constexpr std::uint32_t kCrc32cPolynomial = 0x82F63B78;  // reflected Castagnoli polynomial
constexpr std::uint32_t kCrcMaskDelta = 0xA282EAD8;       // TFRecord's mask constant

// Byte-at-a-time table: an event is ~50 bytes and a run logs a few per step, far from a hot path.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1U) != 0 ? (crc >> 1) ^ kCrc32cPolynomial : crc >> 1;
    table[i] = crc;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- the protobuf wire format, just what tensorflow.Event needs -------------------------------
enum class WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint32_t>(type));
}

template <typename T>
void put_little_endian(std::string& out, T v) {
  static_assert(std::endian::native == std::endian::little, "hotpath assumes a little-endian host");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, WireType::kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, std::uint32_t field, double v) {
  put_key(out, field, WireType::kFixed64);
  put_little_endian(out, v);
}

void put_float(std::string& out, std::uint32_t field, float v) {
  put_key(out, field, WireType::kFixed32);
  put_little_endian(out, v);
}

void put_int64(std::string& out, std::uint32_t field, std::int64_t v) {
  put_key(out, field, WireType::kVarint);
  put_varint(out, static_cast<std::uint64_t>(v));  // negative int64 is 10 bytes, as protobuf does
}

// Field numbers from tensorflow/core/util/event.proto and framework/summary.proto, tensor.proto.
namespace event {
constexpr std::uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
}
namespace summary {
constexpr std::uint32_t kValue = 1;
}
namespace value {
constexpr std::uint32_t kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
namespace metadata {
constexpr std::uint32_t kPluginData = 1;
constexpr std::uint32_t kPluginName = 1;  // inside PluginData
}
namespace tensor {
constexpr std::uint32_t kDtype = 1, kShape = 2, kStringVal = 8;
constexpr std::uint32_t kShapeDim = 2, kDimSize = 1;  // TensorShapeProto.dim, Dim.size
constexpr std::int64_t kDtString = 7;                 // types.proto DT_STRING
}  // namespace tensor

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_with_summary_value(double wall_time, std::int64_t step, std::string_view summary_value) {
  std::string summary_bytes;
  put_bytes(summary_bytes, summary::kValue, summary_value);
  std::string out;
  put_double(out, event::kWallTime, wall_time);
  put_int64(out, event::kStep, step);
  put_bytes(out, event::kSummary, summary_bytes);
  return out;
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "localhost";
  return buf.data();
}

// TF appends a process-wide counter so two writers opened in the same second get distinct files.
std::atomic<std::uint64_t> g_file_counter{0};

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> bytes) {
  std::uint32_t crc = 0xFFFFFFFFU;
  for (std::byte b : bytes) crc = kCrc32cTable[(crc ^ static_cast<std::uint32_t>(b)) & 0xFFU] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFU;
}

std::uint32_t crc32c(std::string_view bytes) {
  return crc32c(std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

std::uint32_t masked_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

std::string frame_tfrecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_little_endian(out, static_cast<std::uint64_t>(payload.size()));
  put_little_endian(out, masked_crc32c(crc32c(std::string_view(out.data(), 8))));
  out.append(payload);
  put_little_endian(out, masked_crc32c(crc32c(payload)));
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  HOTPATH_CHECK(!ec, dir, ": cannot create the TensorBoard log directory: ", ec.message());
  const auto seconds = static_cast<long long>(std::time(nullptr));
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() +
                                         "." + std::to_string(::getpid()) + "." +
                                         std::to_string(g_file_counter.fetch_add(1))))
              .string();
  file_.reset(std::fopen(path_.c_str(), "wb"));
  HOTPATH_CHECK(file_ != nullptr, path_, ": cannot create the event file: ", std::strerror(errno));
  std::string first;
  put_double(first, event::kWallTime, unix_now());
  put_bytes(first, event::kFileVersion, "brain.Event:2");
  write_event(first);
  flush();  // TensorBoard recognises the run as soon as the file has its version record
}

TensorBoardWriter::~TensorBoardWriter() = default;  // fclose flushes
TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&&) noexcept = default;

void TensorBoardWriter::add_scalar(std::string_view tag, double value, std::int64_t step,
                                   std::optional<double> wall_time) {
  std::string v;
  put_bytes(v, value::kTag, tag);
  put_float(v, value::kSimpleValue, static_cast<float>(value));
  write_event(event_with_summary_value(wall_time.value_or(unix_now()), step, v));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view text, std::int64_t step,
                                 std::optional<double> wall_time) {
  // What tensorboardX's text_summary writes: a 1-element DT_STRING tensor tagged for the "text" plugin.
  std::string plugin_data;
  put_bytes(plugin_data, metadata::kPluginName, "text");
  std::string meta;
  put_bytes(meta, metadata::kPluginData, plugin_data);
  std::string dim;
  put_int64(dim, tensor::kDimSize, 1);
  std::string shape;
  put_bytes(shape, tensor::kShapeDim, dim);
  std::string tensor_proto;
  put_int64(tensor_proto, tensor::kDtype, tensor::kDtString);
  put_bytes(tensor_proto, tensor::kShape, shape);
  put_bytes(tensor_proto, tensor::kStringVal, text);
  std::string v;
  put_bytes(v, value::kTag, tag);
  put_bytes(v, value::kMetadata, meta);
  put_bytes(v, value::kTensor, tensor_proto);
  write_event(event_with_summary_value(wall_time.value_or(unix_now()), step, v));
}

void TensorBoardWriter::write_event(std::string_view event_payload) {
  HOTPATH_CHECK(file_ != nullptr, "TensorBoardWriter: used after being moved from");
  const std::string record = frame_tfrecord(event_payload);
  HOTPATH_CHECK(std::fwrite(record.data(), 1, record.size(), file_.get()) == record.size(), path_,
                ": cannot write an event record: ", std::strerror(errno));
}

void TensorBoardWriter::flush() {
  HOTPATH_CHECK(file_ != nullptr, "TensorBoardWriter: used after being moved from");
  HOTPATH_CHECK(std::fflush(file_.get()) == 0, path_, ": cannot flush the event file: ", std::strerror(errno));
}

}  // namespace hotpath
