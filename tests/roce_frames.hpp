// RoCEv2 and TCP frames built in tests: Ethernet + IPv4 (valid header checksum) + UDP 4791 +
// BTH (+ RETH or AETH) + payload + a valid ICRC, for the packet rules and the oracle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/pcapng.hpp"
#include "common/roce.hpp"

namespace rctest {

struct RoceSpec {
  uint8_t opcode = 0x07;  // WRITE_MIDDLE
  uint32_t qpn = 0x11;
  uint32_t psn = 0;
  size_t payload = 64;
  uint32_t src = 0x0a000001, dst = 0x0a000002;  // 10.0.0.1 > 10.0.0.2
  uint16_t sport = 49152;
  uint8_t tos = (26 << 2) | 2;  // DSCP 26, ECT(0)
  uint8_t syndrome = 0;         // AETH (ACKNOWLEDGE): 0 ACK, 0x60 NAK sequence error
};

inline void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
inline void put24(uint8_t* p, uint32_t v) { p[0] = uint8_t(v >> 16); p[1] = uint8_t(v >> 8); p[2] = uint8_t(v); }
inline void put32(uint8_t* p, uint32_t v) { put16(p, uint16_t(v >> 16)); put16(p + 2, uint16_t(v)); }

inline void ipv4Checksum(uint8_t* ip) {
  ip[10] = ip[11] = 0;
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += uint32_t(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  put16(ip + 10, uint16_t(~sum));
}

inline std::vector<uint8_t> roceFrame(const RoceSpec& s) {
  size_t ext = 0;
  if (s.opcode == 0x06 || s.opcode == 0x0a || s.opcode == 0x0c) ext = 16;
  if (s.opcode == 0x11) ext = 4;
  size_t payload = s.opcode == 0x11 ? 0 : s.payload;
  size_t udpLen = 8 + 12 + ext + payload + 4;
  std::vector<uint8_t> f(14 + 20 + udpLen, 0);
  f[0] = 0x02, f[5] = 0x02, f[6] = 0x02, f[11] = 0x01;
  put16(&f[12], 0x0800);
  uint8_t* ip = &f[14];
  ip[0] = 0x45;
  ip[1] = s.tos;
  put16(ip + 2, uint16_t(20 + udpLen));
  put16(ip + 6, 0x4000);  // DF
  ip[8] = 64;
  ip[9] = 17;
  put32(ip + 12, s.src);
  put32(ip + 16, s.dst);
  ipv4Checksum(ip);
  uint8_t* udp = ip + 20;
  put16(udp, s.sport);
  put16(udp + 2, rc::roce::kUdpPort);
  put16(udp + 4, uint16_t(udpLen));
  uint8_t* bth = udp + 8;
  bth[0] = s.opcode;
  put16(bth + 2, 0xffff);
  put24(bth + 5, s.qpn);
  put24(bth + 9, s.psn);
  if (s.opcode == 0x11) bth[12] = s.syndrome;
  for (size_t i = 0; i < payload; i++) bth[12 + ext + i] = uint8_t(i * 7 + s.psn);
  auto b = rc::roce::parse(f.data(), f.size());
  if (b) rc::roce::writeIcrc(f.data(), f.size(), *b);
  return f;
}

// A TCP segment 10.0.0.1:SPORT > 10.0.0.2:DPORT with PAYLOAD bytes.
inline std::vector<uint8_t> tcpFrame(uint16_t sport, uint16_t dport, size_t payload = 100, uint8_t tos = 2) {
  std::vector<uint8_t> f(14 + 20 + 20 + payload, 0);
  put16(&f[12], 0x0800);
  uint8_t* ip = &f[14];
  ip[0] = 0x45;
  ip[1] = tos;
  put16(ip + 2, uint16_t(40 + payload));
  ip[8] = 64;
  ip[9] = 6;
  put32(ip + 12, 0x0a000001);
  put32(ip + 16, 0x0a000002);
  ipv4Checksum(ip);
  put16(ip + 20, sport);
  put16(ip + 22, dport);
  ip[32] = 0x50;  // data offset 5 words
  return f;
}

// A capture record at TIME (ns) with an optional switch comment.
inline rc::pcapng::Record record(int64_t timeNs, std::vector<uint8_t> frame, const std::string& comment = {},
                                 rc::pcapng::Direction dir = rc::pcapng::Direction::inbound) {
  rc::pcapng::Record r;
  r.timeNs = timeNs;
  r.originalLength = uint32_t(frame.size());
  r.data = std::move(frame);
  r.comment = comment;
  r.direction = dir;
  return r;
}

}  // namespace rctest
