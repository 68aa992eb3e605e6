// IEEE 802.1Qbb PFC frames: building and parsing, shared by the lab switch and pfc_storm.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace rc::pfc {

constexpr uint8_t kDestination[6] = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
constexpr uint16_t kEthertype = 0x8808;  // MAC control
constexpr uint16_t kOpcode = 0x0101;     // priority-based flow control
constexpr size_t kFrameSize = 60;        // minimum Ethernet frame without FCS
constexpr int kPriorities = 8;

// One quantum is 512 bit times at the link's speed.
inline int64_t quantaToNs(uint32_t quanta, double rateBitsPerSecond) {
  return int64_t(double(quanta) * 512.0 * 1e9 / rateBitsPerSecond);
}

struct Frame {
  uint16_t enableVector = 0;                 // bit p: quanta[p] is valid
  std::array<uint16_t, kPriorities> quanta{};  // 0 = resume
};

// Writes a 60-byte PFC frame into out (at least kFrameSize bytes).
inline void build(uint8_t* out, const uint8_t source[6], const Frame& f) {
  std::memset(out, 0, kFrameSize);
  std::memcpy(out, kDestination, 6);
  std::memcpy(out + 6, source, 6);
  out[12] = kEthertype >> 8;
  out[13] = kEthertype & 0xff;
  out[14] = kOpcode >> 8;
  out[15] = kOpcode & 0xff;
  out[16] = uint8_t(f.enableVector >> 8);
  out[17] = uint8_t(f.enableVector);
  for (int p = 0; p < kPriorities; p++) {
    out[18 + 2 * p] = uint8_t(f.quanta[size_t(p)] >> 8);
    out[19 + 2 * p] = uint8_t(f.quanta[size_t(p)]);
  }
}

// A PFC frame (untagged, ethertype 0x8808, opcode 0x0101) or nothing.
inline std::optional<Frame> parse(const uint8_t* data, size_t len) {
  if (len < 34) return std::nullopt;
  if (((data[12] << 8) | data[13]) != kEthertype || ((data[14] << 8) | data[15]) != kOpcode)
    return std::nullopt;
  Frame f;
  f.enableVector = uint16_t((data[16] << 8) | data[17]);
  for (int p = 0; p < kPriorities; p++)
    f.quanta[size_t(p)] = uint16_t((data[18 + 2 * p] << 8) | data[19 + 2 * p]);
  return f;
}

}  // namespace rc::pfc
