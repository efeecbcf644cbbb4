// hotpath/core/tensorboard.h — write TensorBoard event files without TensorFlow or protobuf.
//
//   hotpath::TensorBoardWriter tb(run_dir + "/tb");     // creates the directory and the event file
//   tb.add_scalar("train/loss", loss, step);           // one record per call, buffered
//   tb.flush();                                        // e.g. once per logged step or eval
//
// The file is what TF's EventFileWriter and tensorboardX write: a TFRecord stream (length, masked
// CRC-32C of the length, payload, masked CRC-32C of the payload) of `tensorflow.Event` protos,
// hand-encoded here because only four fields are needed. The first record carries
// file_version "brain.Event:2". Not thread-safe: log from one thread (the trainer's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hotpath {

// CRC-32C (Castagnoli), as TFRecord uses: crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::span<const std::byte> bytes);
std::uint32_t crc32c(std::string_view bytes);
// TFRecord's masking, so that a CRC stored next to the data it covers does not look like data.
std::uint32_t masked_crc32c(std::uint32_t crc);

// The bytes of one TFRecord around `payload`: u64 length, masked crc of the length, payload,
// masked crc of the payload (integers little-endian).
std::string frame_tfrecord(std::string_view payload);

class TensorBoardWriter {
 public:
  // Creates `dir` (and parents) and opens a new event file in it, named like TF's
  // "events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>". Throws hotpath::Error.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes and closes; errors there are swallowed (call flush() to see them)
  TensorBoardWriter(TensorBoardWriter&&) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar (stored as float32, as TensorBoard's simple_value is). wall_time: seconds since the
  // Unix epoch, default now.
  void add_scalar(std::string_view tag, double value, std::int64_t step,
                  std::optional<double> wall_time = std::nullopt);
  // One text summary (TensorBoard's "Text" tab renders it as markdown), e.g. the resolved config.
  void add_text(std::string_view tag, std::string_view text, std::int64_t step,
                std::optional<double> wall_time = std::nullopt);
  // Hands buffered records to the OS so a running TensorBoard sees them. Throws on a write error.
  void flush();

  // The event file's full path.
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  void write_event(std::string_view event_payload);

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

}  // namespace hotpath
