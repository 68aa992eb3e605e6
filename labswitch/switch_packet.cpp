// Frame inspection for the lab switch (see switch_packet.hpp).
#include "labswitch/switch_packet.hpp"

namespace rc::labswitch {
namespace {

constexpr uint16_t kVlan = 0x8100;
constexpr uint16_t kIpv4 = 0x0800;

uint16_t be16(const uint8_t* p) { return uint16_t((p[0] << 8) | p[1]); }

// Offset of the IPv4 header, or 0 when the frame carries none (after an optional tag).
size_t ipv4Offset(const uint8_t* f, size_t len) {
  if (len < 14) return 0;
  size_t off = 12;
  uint16_t type = be16(f + off);
  if (type == kVlan) {
    if (len < 18) return 0;
    off += 4;
    type = be16(f + off);
  }
  off += 2;
  if (type != kIpv4 || len < off + 20 || (f[off] >> 4) != 4) return 0;
  return off;
}

uint32_t mix(uint32_t h, uint32_t v) {
  // FNV-1a over the 4 bytes of v: cheap, and every input bit reaches the result.
  for (int i = 0; i < 4; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 16777619u;
  }
  return h;
}

}  // namespace

DscpMap defaultDscpMap() {
  DscpMap m{};
  m[26] = 3;
  m[48] = 6;
  return m;
}

// A pure TCP ACK in an IPv4 header at IP (ipv4Offset's, not 0).
static bool pureTcpAckAt(const uint8_t* f, size_t len, size_t ip) {
  if (f[ip + 9] != 6) return false;
  size_t ihl = size_t(f[ip] & 0xf) * 4;
  if (ihl < 20 || len < ip + ihl + 20) return false;
  const uint8_t* tcp = f + ip + ihl;
  size_t doff = size_t(tcp[12] >> 4) * 4;
  constexpr uint8_t kFinSynRst = 0x07;
  return doff >= 20 && be16(f + ip + 2) == ihl + doff && (tcp[13] & kFinSynRst) == 0 && (tcp[13] & 0x10);
}

bool isPureTcpAck(const uint8_t* f, size_t len) {
  size_t ip = ipv4Offset(f, len);
  return ip != 0 && pureTcpAckAt(f, len, ip);
}

int classify(const uint8_t* f, size_t len, const Classes& classes) {
  if (len >= 16 && be16(f + 12) == kVlan) return f[14] >> 5;
  size_t ip = ipv4Offset(f, len);
  if (ip == 0) return 0;
  if (classes.tcpAckPriority >= 0 && pureTcpAckAt(f, len, ip)) return classes.tcpAckPriority & 7;
  return classes.dscp[f[ip + 1] >> 2] & 7;
}

Ecn ecnOf(const uint8_t* f, size_t len) {
  size_t ip = ipv4Offset(f, len);
  if (ip == 0) return Ecn::notIpv4;
  switch (f[ip + 1] & 3) {
    case 0: return Ecn::notEct;
    case 3: return Ecn::ce;
    default: return Ecn::ect;
  }
}

bool markCe(uint8_t* f, size_t len) {
  size_t ip = ipv4Offset(f, len);
  if (ip == 0) return false;
  uint8_t tos = f[ip + 1];
  if ((tos & 3) == 0 || (tos & 3) == 3) return false;
  uint16_t oldWord = be16(f + ip);  // version/IHL and TOS share one 16-bit checksum word
  f[ip + 1] = uint8_t(tos | 3);
  uint16_t newWord = be16(f + ip);
  // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')
  uint32_t sum = uint16_t(~be16(f + ip + 10)) + uint16_t(~oldWord) + newWord;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  uint16_t check = uint16_t(~sum);
  f[ip + 10] = uint8_t(check >> 8);
  f[ip + 11] = uint8_t(check);
  return true;
}

uint32_t flowHash(const uint8_t* f, size_t len) {
  uint32_t h = 2166136261u;
  size_t ip = ipv4Offset(f, len);
  if (ip == 0) {
    for (size_t i = 0; i < 12 && i < len; i++) h = (h ^ f[i]) * 16777619u;
    return h;
  }
  auto word = [&](size_t o) {
    return uint32_t(f[o]) << 24 | uint32_t(f[o + 1]) << 16 | uint32_t(f[o + 2]) << 8 | f[o + 3];
  };
  uint8_t proto = f[ip + 9];
  h = mix(h, word(ip + 12));
  h = mix(h, word(ip + 16));
  h = mix(h, proto);
  size_t l4 = ip + size_t(f[ip] & 0xf) * 4;
  bool firstFragment = (be16(f + ip + 6) & 0x1fff) == 0;
  if ((proto == 6 || proto == 17) && firstFragment && len >= l4 + 4) h = mix(h, word(l4));
  // A final avalanche so that `h % n` uses every bit.
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  return h;
}

int l4DstPort(const uint8_t* f, size_t len) {
  size_t ip = ipv4Offset(f, len);
  if (ip == 0 || len < ip + 20) return -1;
  uint8_t proto = f[ip + 9];
  size_t l4 = ip + size_t(f[ip] & 0xf) * 4;
  bool firstFragment = (be16(f + ip + 6) & 0x1fff) == 0;
  if ((proto != 6 && proto != 17) || !firstFragment || len < l4 + 4) return -1;
  return be16(f + l4 + 2);
}

}  // namespace rc::labswitch
