// hotpath/core/input_file.h — open input files safely: never block, never read without a bound.
//
//   const InputFile in = InputFile::open(path);             // a FIFO, directory or device: one line
//   std::string text = read_file(path, read_limit::kConfig, "config");  // refuses a 5 GB config.json
//   check_regular_file(path);                                // before handing a path to a library
//
// Every file hotpath reads is opened with O_NONBLOCK and fstat()ed before a byte is read, so a FIFO
// or /dev/zero passed by mistake is refused at once, naming the path and what it is; whole-file reads
// carry a size limit suited to the kind of file (read_limit below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <string_view>

namespace hotpath {

// Upper bounds on whole-file reads, by kind of file. Far above any real file of that kind, far below
// what would exhaust memory; the refusal names the path, its size and the limit.
namespace read_limit {
inline constexpr std::size_t kRecipe = std::size_t{16} << 20;       // YAML recipe
inline constexpr std::size_t kConfig = std::size_t{64} << 20;       // config.json, model.json, trainer.json
inline constexpr std::size_t kTokenizer = std::size_t{1} << 30;     // tokenizer.json, vocab.txt
inline constexpr std::size_t kImage = std::size_t{256} << 20;       // one encoded image
inline constexpr std::size_t kClasses = std::size_t{64} << 20;      // classes.txt, --classes-file
inline constexpr std::size_t kList = std::size_t{4} << 30;          // CSV/JSONL lists, text inputs
inline constexpr std::size_t kDefault = std::size_t{1} << 30;       // read_file(path) without a kind
}  // namespace read_limit

// An open, read-only, regular file (RAII). open() never blocks: O_NONBLOCK, then fstat(); anything
// but a regular file is refused with "<path>: is a FIFO (named pipe), not a regular file" (directory,
// character device, block device, socket likewise).
class InputFile {
 public:
  static InputFile open(const std::string& path);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // The whole file; refuses one larger than `max_bytes` before allocating ("<path>: <kind> of N bytes
  // exceeds the limit of M bytes").
  [[nodiscard]] std::string read_all(std::size_t max_bytes, std::string_view kind) const;

 private:
  InputFile(std::string path, int fd, std::uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// What `path` is when it is not a regular file ("a directory", "a FIFO (named pipe)", ...); empty when
// it is one. Throws when it cannot be stat()ed (missing: "<path>: cannot open: No such file ...").
std::string non_regular_kind(const std::string& path);
// Throws unless `path` names a regular file (a symlink to one is fine). For paths handed to code that
// opens them itself (a library, a later stage).
void check_regular_file(const std::string& path);

// The whole file, at most `max_bytes` (see read_limit), opened through InputFile.
std::string read_file(const std::string& path, std::size_t max_bytes, std::string_view kind);

// The rest of a stream (stdin), at most `max_bytes`; `name` is used in the message ("stdin").
std::string read_stream(std::istream& in, std::size_t max_bytes, std::string_view name);

}  // namespace hotpath
