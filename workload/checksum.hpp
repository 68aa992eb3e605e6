// Payload checksum: a Fletcher-style sum over 64-bit words, computed incrementally as bytes
// are sent or received (while they are still in cache), so it costs little at line rate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rc::workload {

class StreamChecksum {
 public:
  void update(const std::byte* p, size_t n) {
    len_ += n;
    // Finish a word left over from the previous piece: pieces end anywhere.
    while (npend_ && n) {
      pend_ |= uint64_t(std::to_integer<uint8_t>(*p++)) << (8 * npend_);
      n--;
      if (++npend_ == 8) {
        add(pend_);
        pend_ = 0;
        npend_ = 0;
      }
    }
    // Single words up to a lane boundary, then four independent lanes: no long dependency
    // chain, so the sum keeps up with the copy the kernel does anyway.
    for (; n >= 8 && (words_ & 3); p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      add(w);
    }
    for (; n >= 32; p += 32, n -= 32) {
      uint64_t w[4];
      std::memcpy(w, p, 32);
      for (int l = 0; l < 4; l++) {
        a_[l] += w[l];
        b_[l] += a_[l];
      }
      words_ += 4;
    }
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      add(w);
    }
    for (; n; n--) pend_ |= uint64_t(std::to_integer<uint8_t>(*p++)) << (8 * npend_++);
  }
  // 32 bits, so that a verbs transport can carry it as the immediate of a WRITE WITH IMM.
  uint32_t value() const {
    uint64_t a[4] = {a_[0], a_[1], a_[2], a_[3]}, b[4] = {b_[0], b_[1], b_[2], b_[3]};
    if (npend_) {
      a[words_ & 3] += pend_;
      b[words_ & 3] += a[words_ & 3];
    }
    uint64_t c = len_ << 1;
    for (int l = 0; l < 4; l++) c = (c ^ b[l]) * 0x9E3779B97F4A7C15ull + a[l];
    return uint32_t(c ^ (c >> 32));
  }

 private:
  void add(uint64_t w) {
    unsigned l = unsigned(words_++ & 3);
    a_[l] += w;
    b_[l] += a_[l];
  }
  uint64_t a_[4] = {1, 2, 3, 4}, b_[4] = {0, 0, 0, 0};
  uint64_t pend_ = 0, len_ = 0, words_ = 0;
  unsigned npend_ = 0;
};

inline uint32_t checksum32(const std::byte* data, size_t len) {
  StreamChecksum s;
  s.update(data, len);
  return s.value();
}

}  // namespace rc::workload
