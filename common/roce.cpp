// RoCEv2 frame parsing and the ICRC (see roce.hpp).
#include "common/roce.hpp"

#include <array>
#include <cstdio>
#include <cstring>

namespace rc::roce {
namespace {

uint16_t be16(const uint8_t* p) { return uint16_t((p[0] << 8) | p[1]); }
uint32_t be24(const uint8_t* p) { return (uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]; }
uint32_t be32(const uint8_t* p) { return (uint32_t(p[0]) << 24) | be24(p + 1); }

// Extended header bytes after the BTH, by RC opcode (IBA 9.2, table 38).
int extendedLength(uint8_t op) {
  if (op == 0x64) return 8;   // UD SEND_ONLY: DETH
  if (op == 0x65) return 12;  // UD SEND_ONLY with immediate: DETH + ImmDt
  // UC's SEND and WRITE opcodes carry RC's extended headers (0x20 + the RC code).
  if ((op & 0xe0) == 0x20 && (op & 0x1f) <= 0x0b) op = op & 0x1f;
  switch (op) {
    case 0x03: case 0x05: return 4;            // SEND_LAST/ONLY with immediate: ImmDt
    case 0x06: case 0x0a: return 16;           // WRITE_FIRST/ONLY: RETH
    case 0x09: return 4;                       // WRITE_LAST with immediate
    case 0x0b: return 20;                      // WRITE_ONLY with immediate: RETH + ImmDt
    case 0x0c: return 16;                      // READ request: RETH
    case 0x0d: case 0x0f: case 0x10: return 4; // READ response first/last/only: AETH
    case 0x11: return 4;                       // ACKNOWLEDGE: AETH
    case 0x12: return 12;                      // ATOMIC ACKNOWLEDGE: AETH + AtomicAckETH
    case 0x13: case 0x14: return 28;           // CMP_SWAP, FETCH_ADD: AtomicETH
    case 0x16: case 0x17: return 4;            // SEND with invalidate: IETH
    case 0x81: return 16;                      // CNP: reserved
    default: return 0;
  }
}

bool hasAeth(uint8_t op) { return op == 0x0d || op == 0x0f || op == 0x10 || op == 0x11 || op == 0x12; }

OpClass classify(uint8_t op, uint8_t syndrome, bool aeth) {
  if (op == 0x81) return OpClass::cnp;
  uint8_t base = op & 0x1f;  // RC 0x00, UC 0x20, RD 0x40, UD 0x60 share the low bits
  if (base <= 0x05 || base == 0x16 || base == 0x17) return OpClass::send;
  if (base <= 0x0b) return OpClass::write;
  if (base == 0x0c) return OpClass::readRequest;
  if (base <= 0x10) return OpClass::readResponse;
  if (base == 0x11 || base == 0x12) {
    if (aeth && (syndrome & 0xe0) != 0) return OpClass::nak;  // RNR NAK and NAK
    return OpClass::ack;
  }
  if (base == 0x13 || base == 0x14) return OpClass::atomic;
  return OpClass::other;
}

struct CrcTable {
  std::array<uint32_t, 256> t{};
  CrcTable() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
  }
};

uint32_t crcUpdate(uint32_t crc, const uint8_t* p, size_t n) {
  static const CrcTable table;
  for (size_t i = 0; i < n; i++) crc = table.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

}  // namespace

const char* className(OpClass c) {
  switch (c) {
    case OpClass::send: return "send";
    case OpClass::write: return "write";
    case OpClass::readRequest: return "read_request";
    case OpClass::readResponse: return "read_response";
    case OpClass::ack: return "ack";
    case OpClass::nak: return "nak";
    case OpClass::atomic: return "atomic";
    case OpClass::cnp: return "cnp";
    default: return "other";
  }
}

std::optional<OpClass> parseClass(const std::string& s) {
  for (auto c : {OpClass::send, OpClass::write, OpClass::readRequest, OpClass::readResponse, OpClass::ack,
                 OpClass::nak, OpClass::atomic, OpClass::cnp})
    if (s == className(c)) return c;
  return std::nullopt;
}

std::optional<Flow> flowOf(const uint8_t* f, size_t len) {
  if (len < 14) return std::nullopt;
  size_t off = 12;
  uint16_t type = be16(f + off);
  if (type == 0x8100) {
    if (len < 18) return std::nullopt;
    off += 4;
    type = be16(f + off);
  }
  off += 2;
  if (type != 0x0800 || len < off + 20 || (f[off] >> 4) != 4) return std::nullopt;
  Flow fl;
  fl.ipOffset = off;
  size_t ihl = size_t(f[off] & 0xf) * 4;
  if (ihl < 20 || len < off + ihl) return std::nullopt;
  fl.dscp = f[off + 1] >> 2;
  fl.ecn = f[off + 1] & 3;
  fl.ipTotalLength = be16(f + off + 2);
  fl.protocol = f[off + 9];
  fl.srcIp = be32(f + off + 12);
  fl.dstIp = be32(f + off + 16);
  fl.l4Offset = off + ihl;
  bool firstFragment = (be16(f + off + 6) & 0x1fff) == 0;
  if (firstFragment && (fl.protocol == 6 || fl.protocol == 17) && len >= fl.l4Offset + 4) {
    fl.srcPort = be16(f + fl.l4Offset);
    fl.dstPort = be16(f + fl.l4Offset + 2);
  }
  return fl;
}

std::string ipText(uint32_t a) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
  return buf;
}

std::string flowText(const Flow& f) {
  const char* proto = f.protocol == 6 ? "tcp" : f.protocol == 17 ? "udp" : "ip";
  return ipText(f.srcIp) + ":" + std::to_string(f.srcPort) + " > " + ipText(f.dstIp) + ":" +
         std::to_string(f.dstPort) + " " + proto;
}

std::optional<Bth> parse(const uint8_t* f, size_t len) {
  auto fl = flowOf(f, len);
  if (!fl || fl->protocol != 17 || fl->dstPort != kUdpPort) return std::nullopt;
  size_t ipEnd = fl->ipOffset + fl->ipTotalLength;
  size_t udp = fl->l4Offset;
  if (udp + 8 > ipEnd || udp + 8 + 12 > len) return std::nullopt;
  size_t udpEnd = udp + be16(f + udp + 4);
  if (udpEnd > ipEnd || udpEnd < udp + 8 + 12 + 4) return std::nullopt;
  Bth b;
  b.flow = *fl;
  b.truncated = ipEnd > len;
  b.bthOffset = udp + 8;
  const uint8_t* h = f + b.bthOffset;
  b.opcode = h[0];
  b.pad = (h[1] >> 4) & 3;
  b.destQp = be24(h + 5);
  b.ackRequest = h[8] & 0x80;
  b.psn = be24(h + 9);
  b.icrcOffset = udpEnd - 4;
  size_t ext = size_t(extendedLength(b.opcode));
  b.payloadOffset = b.bthOffset + 12 + ext;
  if (b.payloadOffset + b.pad > b.icrcOffset) return std::nullopt;
  b.payloadLength = b.icrcOffset - b.payloadOffset - b.pad;
  b.hasAeth = hasAeth(b.opcode & 0x1f) && ((b.opcode & 0xe0) == 0);
  if (b.bthOffset + 12 + ext > len) {
    if (!b.truncated) return std::nullopt;
    b.hasAeth = false;  // cut before its extended headers: the BTH alone
  }
  if (b.hasAeth) {
    const uint8_t* a = h + 12;
    b.syndrome = a[0];
    b.msn = be24(a + 1);
  }
  b.cls = classify(b.opcode, b.syndrome, b.hasAeth);
  return b;
}

std::string opcodeName(uint8_t op) {
  static const char* rc[] = {"SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_IMM", "SEND_ONLY",
                             "SEND_ONLY_IMM", "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST", "WRITE_LAST_IMM",
                             "WRITE_ONLY", "WRITE_ONLY_IMM", "READ_REQUEST", "READ_RESPONSE_FIRST",
                             "READ_RESPONSE_MIDDLE", "READ_RESPONSE_LAST", "READ_RESPONSE_ONLY",
                             "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD", "0x15",
                             "SEND_LAST_INV", "SEND_ONLY_INV"};
  if (op < sizeof rc / sizeof rc[0]) return rc[op];
  if (op == 0x81) return "CNP";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", op);
  return buf;
}

bool isRequest(uint8_t op) {
  auto c = classify(op, 0, false);
  return c == OpClass::send || c == OpClass::write || c == OpClass::readRequest || c == OpClass::atomic;
}

uint32_t computeIcrc(const uint8_t* f, size_t len, const Bth& b) {
  (void)len;
  uint8_t ones[8];
  std::memset(ones, 0xff, sizeof ones);
  uint32_t crc = crcUpdate(0xffffffffu, ones, 8);
  // The IPv4 and UDP headers and the BTH, masked.
  size_t hdrEnd = b.bthOffset + 12;
  uint8_t masked[60 + 8 + 12];
  size_t n = hdrEnd - b.flow.ipOffset;
  if (n > sizeof masked) return 0;
  std::memcpy(masked, f + b.flow.ipOffset, n);
  size_t ihl = b.flow.l4Offset - b.flow.ipOffset;
  masked[1] = 0xff;                    // TOS: DSCP and ECN
  masked[8] = 0xff;                    // TTL
  masked[10] = masked[11] = 0xff;      // header checksum
  masked[ihl + 6] = masked[ihl + 7] = 0xff;  // UDP checksum
  masked[ihl + 8 + 4] = 0xff;          // BTH resv8a (the byte before the destination QP)
  crc = crcUpdate(crc, masked, n);
  crc = crcUpdate(crc, f + hdrEnd, b.icrcOffset - hdrEnd);
  return ~crc;
}

uint32_t storedIcrc(const uint8_t* f, const Bth& b) {
  const uint8_t* p = f + b.icrcOffset;
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

void writeIcrc(uint8_t* f, size_t len, const Bth& b) {
  uint32_t c = computeIcrc(f, len, b);
  uint8_t* p = f + b.icrcOffset;
  for (int i = 0; i < 4; i++) p[i] = uint8_t(c >> (8 * i));
}

int32_t psnDiff(uint32_t a, uint32_t b) {
  uint32_t d = (a - b) & kPsnMask;
  return d > 0x800000 ? int32_t(d) - 0x1000000 : int32_t(d);
}

}  // namespace rc::roce
