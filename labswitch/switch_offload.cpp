// Segmentation offload between the lab switch and its hosts' TAPs (see switch_offload.hpp).
#include "labswitch/switch_offload.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace rc::labswitch {
namespace {

constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20, kCwr = 0x80;

uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
void put32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}

// Where a TCP frame's headers are: l3 (IP), l4 (TCP), hdr (payload); v6 for IPv6.
struct TcpLayout {
  size_t l3 = 0, l4 = 0, hdr = 0;
  bool v6 = false;
};

// Empty string: FRAME is an IPv4 or IPv6 (no extension headers) TCP frame laid out in L.
std::string tcpLayout(const uint8_t* f, size_t len, TcpLayout& l) {
  if (len < 14) return "shorter than an Ethernet header";
  size_t l3 = 14;
  uint16_t type = get16(f + 12);
  if (type == 0x8100) {
    if (len < 18) return "a VLAN tag without a type";
    type = get16(f + 16);
    l3 = 18;
  }
  if (type == 0x0800) {
    if (len < l3 + 20 || (f[l3] >> 4) != 4) return "not an IPv4 header";
    size_t ihl = size_t(f[l3] & 0xf) * 4;
    if (ihl < 20 || len < l3 + ihl) return "an IPv4 header of a bad length";
    if (f[l3 + 9] != 6) return "not TCP";
    l.l4 = l3 + ihl;
  } else if (type == 0x86dd) {
    if (len < l3 + 40 || (f[l3] >> 4) != 6) return "not an IPv6 header";
    if (f[l3 + 6] != 6) return "not TCP right after the IPv6 header";
    l.l4 = l3 + 40;
    l.v6 = true;
  } else {
    return "neither IPv4 nor IPv6";
  }
  if (len < l.l4 + 20) return "a TCP header cut short";
  size_t doff = size_t(f[l.l4 + 12] >> 4) * 4;
  if (doff < 20 || len < l.l4 + doff) return "a TCP header of a bad length";
  l.l3 = l3;
  l.hdr = l.l4 + doff;
  return {};
}

// The pseudo-header's sum for a TCP segment of TCPLEN bytes.
uint32_t pseudoSum(const uint8_t* f, const TcpLayout& l, size_t tcpLen) {
  uint32_t sum = 0;
  if (l.v6) {
    sum = csumAdd(f + l.l3 + 8, 32);
    sum += uint32_t(tcpLen >> 16) + uint32_t(tcpLen & 0xffff);
  } else {
    sum = csumAdd(f + l.l3 + 12, 8);
    sum += uint32_t(tcpLen);
  }
  return sum + 6;
}

// Sets the IP length fields (and the IPv4 header checksum) for a frame of LEN bytes.
void setIpLength(uint8_t* f, const TcpLayout& l, size_t len) {
  if (l.v6) {
    put16(f + l.l3 + 4, uint16_t(len - l.l3 - 40));
    return;
  }
  put16(f + l.l3 + 2, uint16_t(len - l.l3));
  put16(f + l.l3 + 10, 0);
  put16(f + l.l3 + 10, uint16_t(~csumFold(csumAdd(f + l.l3, l.l4 - l.l3))));
}

}  // namespace

uint32_t csumAdd(const uint8_t* data, size_t len, uint32_t sum) {
  // The one's complement sum does not depend on byte order: add the data as native 32-bit
  // words (little-endian here), fold, and swap the 16-bit result into network order. Four
  // bytes a step instead of two (the switch sums every byte a host hands over).
  uint64_t s = 0;
  size_t i = 0;
  for (; i + 4 <= len; i += 4) {
    uint32_t w;
    std::memcpy(&w, data + i, 4);
    s += w;
  }
  if (i + 2 <= len) {
    uint16_t w;
    std::memcpy(&w, data + i, 2);
    s += w;
    i += 2;
  }
  if (i < len) {
    uint16_t w = 0;
    std::memcpy(&w, data + i, 1);  // the odd last byte is the high byte of a zero-padded word
    s += w;
  }
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  uint16_t native = uint16_t(s);
  uint16_t be = uint16_t(native << 8 | native >> 8);
  if constexpr (std::endian::native == std::endian::big) be = native;
  uint64_t total = uint64_t(sum) + be;
  while (total >> 32) total = (total & 0xffffffff) + (total >> 32);
  return uint32_t(total);
}

uint16_t csumFold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(sum);
}

bool completeChecksum(uint8_t* frame, size_t len, uint16_t start, uint16_t offset) {
  if (size_t(start) + offset + 2 > len) return false;
  uint16_t c = uint16_t(~csumFold(csumAdd(frame + start, len - start)));
  // UDP (its checksum is 6 bytes in) sends a computed 0 as 0xffff: 0 there means "none".
  if (c == 0 && offset == 6) c = 0xffff;
  put16(frame + start + offset, c);
  return true;
}

std::string segmentFrame(const uint8_t* frame, size_t len, const VnetHdr& h,
                         std::vector<std::vector<uint8_t>>& out) {
  const uint8_t gso = h.gsoType & uint8_t(~kGsoEcn);
  if (gso == kGsoNone) {
    std::vector<uint8_t> f(frame, frame + len);
    if ((h.flags & kVnetNeedsCsum) && !completeChecksum(f.data(), f.size(), h.csumStart, h.csumOffset))
      return "its checksum offsets lie outside the frame";
    out.push_back(std::move(f));
    return {};
  }
  if (gso != kGsoTcpV4 && gso != kGsoTcpV6) return "a segmentation type other than TCP (" + std::to_string(gso) + ")";
  TcpLayout l;
  if (auto why = tcpLayout(frame, len, l); !why.empty()) return "a TCP super-frame that is " + why;
  if (h.gsoSize == 0) return "a TCP super-frame with a segment size of 0";
  const size_t payload = len - l.hdr, mss = h.gsoSize;
  const uint32_t seq0 = get32(frame + l.l4 + 4);
  const uint16_t id0 = l.v6 ? 0 : get16(frame + l.l3 + 4);
  const uint8_t flags = frame[l.l4 + 13];
  const size_t count = std::max<size_t>(1, (payload + mss - 1) / mss);
  for (size_t i = 0; i < count; i++) {
    const size_t off = i * mss, n = std::min(mss, payload - std::min(payload, off));
    std::vector<uint8_t> seg(l.hdr + n);
    std::memcpy(seg.data(), frame, l.hdr);
    std::memcpy(seg.data() + l.hdr, frame + l.hdr + off, n);
    uint8_t* f = seg.data();
    if (!l.v6) put16(f + l.l3 + 4, uint16_t(id0 + i));
    setIpLength(f, l, seg.size());
    put32(f + l.l4 + 4, seq0 + uint32_t(off));
    uint8_t fl = flags;
    if (i + 1 < count) fl &= uint8_t(~(kFin | kPsh));
    if (i > 0) fl &= uint8_t(~kCwr);
    f[l.l4 + 13] = fl;
    // Left partial, as the host left it: the field holds the pseudo-header's sum. Summing
    // every payload byte here was 8 % of the switch's time, and wasted when the segment
    // leaves joined again (the receiving host is told CHECKSUM_PARTIAL); the ports that need
    // it whole complete it (completeTcpChecksum).
    put16(f + l.l4 + 16, csumFold(pseudoSum(f, l, seg.size() - l.l4)));
    out.push_back(std::move(seg));
  }
  return {};
}

// The same flow: Ethernet (and VLAN) header, IP version, addresses and protocol, TCP ports.
bool TcpCoalescer::sameFlow(const Run& r, const uint8_t* f, size_t len) const {
  if (len < r.l4 + 4) return false;
  const uint8_t* b = r.bytes.data();
  if (std::memcmp(f, b, r.l3) != 0 || (f[r.l3] >> 4) != (b[r.l3] >> 4)) return false;
  const bool v6 = (b[r.l3] >> 4) == 6;
  if (v6 ? std::memcmp(f + r.l3 + 8, b + r.l3 + 8, 32) != 0 || f[r.l3 + 6] != b[r.l3 + 6]
         : std::memcmp(f + r.l3 + 12, b + r.l3 + 12, 8) != 0 || f[r.l3 + 9] != b[r.l3 + 9])
    return false;
  return std::memcmp(f + r.l4, b + r.l4, 4) == 0;
}

bool TcpCoalescer::joins(const Run& run, const uint8_t* f, size_t len) const {
  if (run.closedBy || len <= run.hdrLen || run.bytes.size() + (len - run.hdrLen) > kMaxRunBytes) return false;
  const uint8_t* r = run.bytes.data();
  TcpLayout l;
  if (!tcpLayout(f, len, l).empty() || l.hdr != run.hdrLen || l.l4 != run.l4 || l.l3 != run.l3) return false;
  if (std::memcmp(f, r, run.l3) != 0) return false;  // Ethernet (and VLAN) header
  const size_t l3 = run.l3, l4 = run.l4;
  if (l.v6) {
    // Version, class (ECN included), flow label; next header and hop limit; addresses.
    if (std::memcmp(f + l3, r + l3, 4) != 0 || std::memcmp(f + l3 + 6, r + l3 + 6, 34) != 0) return false;
  } else {
    // Version, length, TOS (ECN included); fragment field, TTL, protocol; addresses, options.
    if (std::memcmp(f + l3, r + l3, 2) != 0 || std::memcmp(f + l3 + 6, r + l3 + 6, 4) != 0 ||
        std::memcmp(f + l3 + 12, r + l3 + 12, l4 - l3 - 12) != 0)
      return false;
  }
  const uint8_t* t = f + l4;
  const uint8_t* rt = r + l4;
  const size_t plen = len - run.hdrLen;
  return std::memcmp(t, rt, 4) == 0 && get32(t + 4) == run.nextSeq && std::memcmp(t + 8, rt + 8, 5) == 0 &&
         (t[13] & uint8_t(~(kPsh | kFin))) == rt[13] && std::memcmp(t + 14, rt + 14, 2) == 0 &&
         std::memcmp(t + 18, rt + 18, run.hdrLen - l4 - 18) == 0 && plen <= run.mss;
}

namespace {

// The TCP segment's length by its IP header (0: the IP length does not fit the frame).
size_t tcpLength(const uint8_t* f, size_t len, const TcpLayout& l) {
  const size_t ipEnd = l.v6 ? l.l3 + 40 + get16(f + l.l3 + 4) : l.l3 + get16(f + l.l3 + 2);
  if (ipEnd > len || ipEnd < l.hdr) return 0;
  return ipEnd - l.l4;
}

}  // namespace

bool tcpChecksumOk(const uint8_t* f, size_t len) {
  TcpLayout l;
  if (!tcpLayout(f, len, l).empty()) return true;
  const size_t tcpLen = tcpLength(f, len, l);
  if (tcpLen == 0) return false;
  return csumFold(csumAdd(f + l.l4, tcpLen, pseudoSum(f, l, tcpLen))) == 0xffff;
}

bool tcpChecksumPartial(const uint8_t* f, size_t len) {
  TcpLayout l;
  if (!tcpLayout(f, len, l).empty()) return false;
  const size_t tcpLen = tcpLength(f, len, l);
  return tcpLen != 0 && get16(f + l.l4 + 16) == csumFold(pseudoSum(f, l, tcpLen));
}

bool completeTcpChecksum(uint8_t* f, size_t len) {
  if (!tcpChecksumPartial(f, len)) return false;
  TcpLayout l;
  tcpLayout(f, len, l);
  return completeChecksum(f, l.l4 + tcpLength(f, len, l), uint16_t(l.l4), 16);
}

uint64_t RunEnds::*TcpCoalescer::whyNotJoined(const Run& r, const uint8_t* f, size_t len) const {
  if (r.bytes.size() + (len - std::min(len, r.hdrLen)) > kMaxRunBytes) return &RunEnds::full;
  // The ECN bits: IPv4's TOS byte's low two; IPv6's traffic class's, bits 4-5 of its second byte.
  const uint8_t ecnMask = (r.bytes[r.l3] >> 4) == 6 ? 0x30 : 0x03;
  if (len > r.l3 + 1 && ((f[r.l3 + 1] ^ r.bytes[r.l3 + 1]) & ecnMask)) return &RunEnds::marked;
  return &RunEnds::differs;
}

void TcpCoalescer::add(const uint8_t* f, size_t len, int64_t now) {
  // The open run of this frame's flow, if any (a frame that is not TCP has none).
  auto own = runs_.end();
  for (auto it = runs_.begin(); it != runs_.end(); ++it)
    if (sameFlow(*it, f, len)) {
      own = it;
      break;
    }
  const bool partial = tcpChecksumPartial(f, len);
  if (verify_ && !partial && !tcpChecksumOk(f, len)) {
    // What its flow holds goes first (the flow's order), then this frame alone, unflagged.
    if (own != runs_.end()) {
      retire(*own, &RunEnds::differs);
      runs_.erase(own);
    }
    badChecksums_++;
    ends_.alone++;
    emit_(VnetHdr{}, f, len);
    return;
  }
  if (own != runs_.end()) {
    Run& r = *own;
    if (joins(r, f, len)) {
      const size_t plen = len - r.hdrLen;
      r.bytes.insert(r.bytes.end(), f + r.hdrLen, f + len);
      r.frames++;
      r.nextSeq += uint32_t(plen);
      const uint8_t last = f[r.l4 + 13] & (kPsh | kFin);
      if (plen < r.mss || last) {
        r.bytes[r.l4 + 13] |= last;
        r.closedBy = (last & kFin) ? &RunEnds::fin : (last & kPsh) ? &RunEnds::push : &RunEnds::shortFrame;
      }
      return;
    }
    // The flow's next frame does not join: what it holds goes first, in the flow's order.
    retire(r, whyNotJoined(r, f, len));
    runs_.erase(own);
  }
  TcpLayout l;
  const bool tcp = tcpLayout(f, len, l).empty();
  const uint8_t flags = tcp ? f[l.l4 + 13] : 0;
  // A run starts at a data segment carrying ACK and nothing that must stay on its own frame.
  if (!tcp || len <= l.hdr || !(flags & kAck) || (flags & (kSyn | kRst | kUrg | kCwr))) {
    ends_.alone++;
    emitOne(f, len, partial ? l.l4 : 0);
    return;
  }
  if (runs_.size() >= kMaxRuns) {
    retire(runs_.front(), &RunEnds::evicted);
    runs_.erase(runs_.begin());
  }
  Run r;
  if (!spare_.empty()) {
    r = std::move(spare_.back());
    spare_.pop_back();
  }
  r.bytes.assign(f, f + len);
  r.frames = 1;
  r.l3 = l.l3;
  r.l4 = l.l4;
  r.hdrLen = l.hdr;
  r.mss = uint16_t(len - l.hdr);
  r.nextSeq = get32(f + l.l4 + 4) + uint32_t(len - l.hdr);
  r.closedBy = (flags & kFin) ? &RunEnds::fin : (flags & kPsh) ? &RunEnds::push : nullptr;
  r.since = now;
  runs_.push_back(std::move(r));
}

size_t TcpCoalescer::heldBytes() const {
  size_t n = 0;
  for (const auto& r : runs_) n += r.bytes.size();
  return n;
}

void TcpCoalescer::emitOne(const uint8_t* f, size_t len, size_t partialAt) {
  VnetHdr h;
  if (partialAt > 0) {
    // Its checksum is the host's to finish, as a NIC would have (see segmentFrame).
    h.flags = kVnetNeedsCsum;
    h.csumStart = uint16_t(partialAt);
    h.csumOffset = 16;
  }
  emit_(h, f, len);
}

void TcpCoalescer::retire(Run& r, uint64_t RunEnds::*why) {
  if (r.closedBy) why = r.closedBy;  // what closed it ended it
  if (r.frames > 0 && why) ends_.*why += 1;
  if (r.frames == 1) {
    emitOne(r.bytes.data(), r.bytes.size(), tcpChecksumPartial(r.bytes.data(), r.bytes.size()) ? r.l4 : 0);
  } else if (r.frames > 1) {
    TcpLayout l;
    l.l3 = r.l3;
    l.l4 = r.l4;
    l.hdr = r.hdrLen;
    l.v6 = (r.bytes[r.l3] >> 4) == 6;
    uint8_t* f = r.bytes.data();
    setIpLength(f, l, r.bytes.size());
    // The receiving stack finishes the checksum (CHECKSUM_PARTIAL): the field holds the
    // pseudo-header's sum, as a sender's stack leaves it for a NIC.
    put16(f + r.l4 + 16, csumFold(pseudoSum(f, l, r.bytes.size() - r.l4)));
    VnetHdr h;
    h.flags = kVnetNeedsCsum;
    h.gsoType = l.v6 ? kGsoTcpV6 : kGsoTcpV4;
    h.hdrLen = uint16_t(r.hdrLen);
    h.gsoSize = r.mss;
    h.csumStart = uint16_t(r.l4);
    h.csumOffset = 16;
    emit_(h, r.bytes.data(), r.bytes.size());
    superFrames_++;
    framesJoined_ += r.frames;
  }
  r.frames = 0;
  r.closedBy = nullptr;
  r.bytes.clear();
  spare_.push_back(std::move(r));  // its buffer serves the next run
}

int64_t TcpCoalescer::flushDue(int64_t now, int64_t hold) {
  int64_t next = INT64_MAX;
  size_t kept = 0;
  for (size_t i = 0; i < runs_.size(); i++) {
    Run& r = runs_[i];
    if (r.since + hold <= now) {
      retire(r, &RunEnds::hold);
      continue;
    }
    next = std::min(next, r.since + hold);
    if (kept != i) runs_[kept] = std::move(r);
    kept++;
  }
  runs_.resize(kept);
  return next;
}

void TcpCoalescer::flush() {
  for (auto& r : runs_) {
    retire(r, &RunEnds::flushed);
  }
  runs_.clear();
}

}  // namespace rc::labswitch
