// libFuzzer target: index arbitrary bytes as a tar shard and touch every member's bytes.
// Indexing must never crash, hang or allocate without bound, and every offset it hands out
// must lie inside the input (ASan checks the reads below).
#include <cstddef>
#include <cstdint>
#include <span>

#include "hotpath/formats/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const hotpath::formats::ShardIndex index = hotpath::formats::ShardReader::index_bytes("fuzz.tar", bytes);
  unsigned checksum = 0;
  for (const auto& sample : index.samples) {
    if (sample.key.empty() || sample.members.empty()) __builtin_trap();
    for (const auto& member : sample.members) {
      if (member.data_offset > size || member.size > size - member.data_offset) __builtin_trap();
      if (member.header_offset >= member.data_offset) __builtin_trap();
      for (const std::byte b : bytes.subspan(member.data_offset, member.size)) checksum += static_cast<unsigned>(b);
    }
  }
  for (const auto& bad : index.bad) checksum += static_cast<unsigned>(bad.to_string().size());
  // Keep the reads from being optimised away.
  volatile unsigned sink = checksum;
  (void)sink;
  return 0;
}
