// A read-only string -> id hash table for WordPiece lookups (private to hotpath_text).
//
// WordPiece probes many substrings per word; std::unordered_map<std::string, int> would need a
// std::string per probe. This open-addressing table hashes the bytes in place.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotpath::text::internal {

inline std::uint64_t hash_bytes(const char* s, std::size_t n) {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xFF51AFD7ED558CCDULL);
  while (n >= 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, s, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  if (n > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBULL;
  }
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ULL;
  h ^= h >> 32;
  return h;
}

class VocabTable {
 public:
  // Later entries with the same key win (HF's vocab.txt reader inserts line by line).
  void build(const std::vector<std::pair<std::string_view, std::int32_t>>& entries) {
    std::size_t capacity = 16;
    while (capacity < entries.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    arena_.clear();
    for (const auto& [key, id] : entries) {
      if (key.size() > max_len_) max_len_ = key.size();
      const std::uint64_t h = hash_bytes(key.data(), key.size());
      std::size_t i = h & mask_;
      while (true) {
        Slot& slot = slots_[i];
        if (slot.id < 0) {
          slot = Slot{static_cast<std::uint32_t>(h >> 32), static_cast<std::uint32_t>(arena_.size()),
                      static_cast<std::uint32_t>(key.size()), id};
          arena_.append(key);
          break;
        }
        if (matches(slot, h, key.data(), key.size())) {
          slot.id = id;
          break;
        }
        i = (i + 1) & mask_;
      }
    }
  }

  // The id of `s[0, n)`, or -1.
  [[nodiscard]] std::int32_t find(const char* s, std::size_t n) const {
    if (slots_.empty()) return -1;
    const std::uint64_t h = hash_bytes(s, n);
    std::size_t i = h & mask_;
    while (true) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (matches(slot, h, s, n)) return slot.id;
      i = (i + 1) & mask_;
    }
  }
  [[nodiscard]] std::size_t max_len() const { return max_len_; }

 private:
  struct Slot {
    std::uint32_t hash = 0;
    std::uint32_t offset = 0;
    std::uint32_t len = 0;
    std::int32_t id = -1;
  };
  [[nodiscard]] bool matches(const Slot& slot, std::uint64_t h, const char* s, std::size_t n) const {
    return slot.hash == static_cast<std::uint32_t>(h >> 32) && slot.len == n &&
           std::memcmp(arena_.data() + slot.offset, s, n) == 0;
  }

  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t mask_ = 0;
  std::size_t max_len_ = 0;
};

}  // namespace hotpath::text::internal
