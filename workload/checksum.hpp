// Payload checksum: a Fletcher-style 64-bit sum, cheap enough to run at line rate on every
// chunk, that catches flipped, lost and reordered words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rc::workload {

inline uint64_t checksum(const std::byte* data, size_t len) {
  // Two independent lanes keep the adds from forming one long dependency chain.
  uint64_t a1 = 1, b1 = 0, a2 = 7, b2 = 0;
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    uint64_t w1, w2;
    std::memcpy(&w1, data + i, 8);
    std::memcpy(&w2, data + i + 8, 8);
    a1 += w1;
    b1 += a1;
    a2 += w2;
    b2 += a2;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data + i, len - i);
  a1 += tail;
  b1 += a1;
  return (b1 * 0x9E3779B97F4A7C15ull) ^ (b2 + (a1 << 17) + (a2 >> 3) + len);
}

inline uint32_t checksum32(const std::byte* data, size_t len) {
  uint64_t c = checksum(data, len);
  return uint32_t(c ^ (c >> 32));  // fits a verbs immediate
}

}  // namespace rc::workload
