// The lab switch's segmentation offload (labswitch/switch_offload.cpp): a host's TCP super-frame
// becomes exactly the wire frames it stands for, and wire frames are joined back only where
// nothing the model did to one of them would be lost.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "labswitch/switch_offload.hpp"
#include "labswitch/switch_packet.hpp"

using namespace rc::labswitch;
using Frame = std::vector<uint8_t>;

namespace {

// A straightforward checksum, two bytes at a time, to check the switch's against.
uint16_t refSum(const uint8_t* d, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(d[i] << 8 | d[i + 1]);
  if (n % 2) sum += uint32_t(d[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(sum);
}
uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

constexpr size_t kL3 = 14, kL4 = 34, kTcpHdr = 32;  // IPv4 without options; TCP with 12 bytes of options
constexpr size_t kHdr = kL4 + kTcpHdr;

// An IPv4 TCP frame (or super-frame) of PAYLOAD bytes: ECT(0), ACK plus FLAGS, a timestamp
// option, sequence SEQ; checksums complete unless PARTIAL (then the TCP field holds the
// pseudo-header's sum, as a host leaves it for the NIC).
Frame tcpFrame(size_t payload, uint32_t seq, uint8_t flags = 0, bool partial = false, uint16_t sport = 40000) {
  Frame f(kHdr + payload);
  const uint8_t dst[6] = {2, 0, 0, 0, 0, 2}, src[6] = {2, 0, 0, 0, 0, 1};
  std::memcpy(f.data(), dst, 6);
  std::memcpy(f.data() + 6, src, 6);
  f[12] = 0x08;
  uint8_t* ip = f.data() + kL3;
  ip[0] = 0x45;
  ip[1] = 0x02;  // ECT(0)
  const size_t ipLen = f.size() - kL3;
  ip[2] = uint8_t(ipLen >> 8);
  ip[3] = uint8_t(ipLen);
  ip[4] = 0x12;
  ip[5] = 0x34;
  ip[6] = 0x40;  // DF
  ip[8] = 64;
  ip[9] = 6;
  const uint8_t a[8] = {198, 19, 0, 1, 198, 19, 0, 2};
  std::memcpy(ip + 12, a, 8);
  uint16_t c = uint16_t(~refSum(ip, 20));
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
  uint8_t* t = f.data() + kL4;
  t[0] = uint8_t(sport >> 8);
  t[1] = uint8_t(sport);
  t[2] = 0x1f;
  t[3] = 0x90;
  t[4] = uint8_t(seq >> 24);
  t[5] = uint8_t(seq >> 16);
  t[6] = uint8_t(seq >> 8);
  t[7] = uint8_t(seq);
  t[11] = 7;           // ack 7
  t[12] = 8 << 4;      // 32-byte header
  t[13] = uint8_t(0x10 | flags);
  t[14] = 0x01;        // window
  t[20] = 1;           // NOP NOP TS
  t[21] = 1;
  t[22] = 8;
  t[23] = 10;
  t[27] = 0x55;        // TSval
  for (size_t i = 0; i < payload; i++) f[kHdr + i] = uint8_t(i * 7 + seq);
  const size_t tcpLen = f.size() - kL4;
  uint32_t pseudo = refSum(ip + 12, 8) + 6 + uint32_t(tcpLen);
  if (partial) {
    uint16_t p = refSum(nullptr, 0, pseudo);
    t[16] = uint8_t(p >> 8);
    t[17] = uint8_t(p);
  } else {
    uint16_t s = uint16_t(~refSum(t, tcpLen, pseudo));
    t[16] = uint8_t(s >> 8);
    t[17] = uint8_t(s);
  }
  return f;
}

bool tcpChecksumValid(const Frame& f) {
  const uint8_t* ip = f.data() + kL3;
  const size_t tcpLen = f.size() - kL4;
  return refSum(f.data() + kL4, tcpLen, refSum(ip + 12, 8) + 6 + uint32_t(tcpLen)) == 0xffff;
}
bool ipChecksumValid(const Frame& f) { return refSum(f.data() + kL3, 20) == 0xffff; }

VnetHdr tso(uint16_t mss) {
  VnetHdr h;
  h.flags = kVnetNeedsCsum;
  h.gsoType = kGsoTcpV4;
  h.hdrLen = kHdr;
  h.gsoSize = mss;
  h.csumStart = kL4;
  h.csumOffset = 16;
  return h;
}

struct Written {
  VnetHdr h;
  Frame f;
};

}  // namespace

TEST_CASE("the switch's checksum is the one's complement sum, at any length and alignment", "[offload]") {
  Frame d(1501);
  for (size_t i = 0; i < d.size(); i++) d[i] = uint8_t(i * 131 + 17);
  for (size_t off : {0, 1, 2, 3})
    for (size_t n : {0, 1, 2, 3, 5, 20, 1447, 1448, 1497})
      CHECK(csumFold(csumAdd(d.data() + off, n, 0x1234)) == refSum(d.data() + off, n, 0x1234));
}

TEST_CASE("a TCP super-frame becomes its wire frames: lengths, ids, sequence, flags, checksums", "[offload]") {
  const uint16_t mss = 1448;
  const size_t payload = 10 * mss + 300;  // 11 wire frames, the last short
  Frame super = tcpFrame(payload, 1000, 0x08 /* PSH */ | 0x80 /* CWR */, true);
  std::vector<Frame> out;
  VnetHdr h = tso(mss);
  h.gsoType |= kGsoEcn;
  REQUIRE(segmentFrame(super.data(), super.size(), h, out).empty());
  REQUIRE(out.size() == 11);
  size_t bytes = 0;
  for (size_t i = 0; i < out.size(); i++) {
    INFO("segment " << i);
    const Frame& s = out[i];
    const size_t n = i + 1 < out.size() ? mss : 300;
    CHECK(s.size() == kHdr + n);
    CHECK(be16(s.data() + kL3 + 2) == s.size() - kL3);         // IPv4 total length
    CHECK(be16(s.data() + kL3 + 4) == 0x1234 + i);             // IPv4 id, one more per segment
    CHECK(s[kL3 + 1] == 0x02);                                 // ECT kept on every segment
    CHECK(ipChecksumValid(s));
    CHECK(be32(s.data() + kL4 + 4) == 1000 + i * mss);         // sequence
    CHECK(tcpChecksumValid(s));
    const uint8_t fl = s[kL4 + 13];
    CHECK(bool(fl & 0x10));                                    // ACK on all
    CHECK(bool(fl & 0x08) == (i + 1 == out.size()));           // PSH on the last only
    CHECK(bool(fl & 0x80) == (i == 0));                        // CWR on the first only
    CHECK(std::memcmp(s.data() + kHdr, super.data() + kHdr + i * mss, n) == 0);
    CHECK(s.size() <= 1514);                                   // every one fits the wire
    bytes += n;
  }
  CHECK(bytes == payload);
}

TEST_CASE("a frame without segmentation gets its checksum completed, or passes as it is", "[offload]") {
  Frame partial = tcpFrame(500, 5, 0, true), whole = tcpFrame(500, 5);
  std::vector<Frame> out;
  VnetHdr h;
  h.flags = kVnetNeedsCsum;
  h.csumStart = kL4;
  h.csumOffset = 16;
  REQUIRE(segmentFrame(partial.data(), partial.size(), h, out).empty());
  REQUIRE(out.size() == 1);
  CHECK(out[0] == whole);
  REQUIRE(segmentFrame(whole.data(), whole.size(), VnetHdr{}, out).empty());
  CHECK(out.back() == whole);
  // Offsets outside the frame, a super-frame that is not TCP, a segment size of 0: errors, and
  // nothing is added.
  const size_t before = out.size();
  h.csumStart = uint16_t(whole.size());
  CHECK_FALSE(segmentFrame(whole.data(), whole.size(), h, out).empty());
  Frame notTcp = whole;
  notTcp[kL3 + 9] = 17;
  CHECK_FALSE(segmentFrame(notTcp.data(), notTcp.size(), tso(1448), out).empty());
  CHECK_FALSE(segmentFrame(whole.data(), whole.size(), tso(0), out).empty());
  CHECK_FALSE(segmentFrame(whole.data(), 40, tso(1448), out).empty());
  CHECK(out.size() == before);
}

TEST_CASE("wire frames of one flow, back to back and alike, are joined; the host gets the same bytes", "[offload]") {
  const uint16_t mss = 1448;
  Frame super = tcpFrame(8 * mss + 100, 77, 0x08, true);
  std::vector<Frame> wire;
  REQUIRE(segmentFrame(super.data(), super.size(), tso(mss), wire).empty());
  std::vector<Written> got;
  TcpCoalescer c([&](const VnetHdr& h, const uint8_t* d, size_t n) { got.push_back({h, Frame(d, d + n)}); });
  for (const auto& f : wire) c.add(f.data(), f.size());
  c.flush();
  REQUIRE(got.size() == 1);
  CHECK(c.superFrames() == 1);
  CHECK(c.framesJoined() == 9);
  const Written& w = got[0];
  CHECK(w.h.gsoType == kGsoTcpV4);
  CHECK(w.h.gsoSize == mss);
  CHECK(w.h.flags == kVnetNeedsCsum);
  CHECK(w.h.hdrLen == kHdr);
  CHECK(w.h.csumStart == kL4);
  CHECK(w.h.csumOffset == 16);
  // The payload in order, the lengths of the whole, PSH of the last frame kept, and the
  // checksum field as a host's stack leaves it for a NIC (the pseudo-header's sum).
  CHECK(w.f.size() == super.size());
  CHECK(std::memcmp(w.f.data() + kHdr, super.data() + kHdr, super.size() - kHdr) == 0);
  CHECK(be16(w.f.data() + kL3 + 2) == super.size() - kL3);
  CHECK(ipChecksumValid(w.f));
  CHECK(w.f[kL4 + 13] == (0x10 | 0x08));
  CHECK(be16(w.f.data() + kL4 + 16) == be16(super.data() + kL4 + 16));
  // Cut again, it gives the same wire frames.
  std::vector<Frame> again;
  REQUIRE(segmentFrame(w.f.data(), w.f.size(), w.h, again).empty());
  CHECK(again == wire);
}

TEST_CASE("what the model did to one frame ends a run: a CE mark, a gap, another flow, a SYN", "[offload]") {
  const uint16_t mss = 1448;
  Frame super = tcpFrame(6 * mss, 1, 0, true);
  std::vector<Frame> wire;
  REQUIRE(segmentFrame(super.data(), super.size(), tso(mss), wire).empty());
  std::vector<Written> got;
  TcpCoalescer c([&](const VnetHdr& h, const uint8_t* d, size_t n) { got.push_back({h, Frame(d, d + n)}); });
  auto sent = [&] {
    std::vector<size_t> sizes;
    for (const auto& w : got) sizes.push_back((w.f.size() - kHdr + mss - 1) / mss);
    return sizes;
  };

  SECTION("the third frame marked CE by a queue: frames 1-2, 3 alone (marked), 4-6") {
    std::vector<Frame> w = wire;
    REQUIRE(markCe(w[2].data(), w[2].size()));
    for (const auto& f : w) c.add(f.data(), f.size());
    c.flush();
    CHECK(sent() == std::vector<size_t>{2, 1, 3});
    CHECK((got[1].f[kL3 + 1] & 3) == 3);   // CE, on that frame alone
    CHECK((got[0].f[kL3 + 1] & 3) == 2);
    CHECK((got[2].f[kL3 + 1] & 3) == 2);
    CHECK(got[1].h.gsoType == kGsoNone);   // a single frame goes as it is
    CHECK(got[1].f == w[2]);
  }
  SECTION("the fourth frame dropped by a queue: the gap in the sequence ends the run") {
    for (size_t i = 0; i < wire.size(); i++)
      if (i != 3) c.add(wire[i].data(), wire[i].size());
    c.flush();
    CHECK(sent() == std::vector<size_t>{3, 2});
  }
  SECTION("another flow in between, and a SYN, each end a run and go alone") {
    Frame other = tcpFrame(mss, 9, 0, false, 40001), syn = tcpFrame(0, 5, 0x02);
    c.add(wire[0].data(), wire[0].size());
    c.add(wire[1].data(), wire[1].size());
    c.add(other.data(), other.size());
    c.add(syn.data(), syn.size());
    c.add(wire[2].data(), wire[2].size());
    c.flush();
    CHECK(got.size() == 4);
    CHECK(got[1].f == other);
    CHECK(got[2].f == syn);
    CHECK(got[3].f == wire[2]);
  }
  SECTION("nothing follows a short frame or one with PSH") {
    Frame shortOne = tcpFrame(100, 1 + mss, 0, false);
    c.add(wire[0].data(), wire[0].size());
    c.add(shortOne.data(), shortOne.size());
    Frame next = tcpFrame(mss, 1 + mss + 100);
    c.add(next.data(), next.size());
    c.flush();
    CHECK(got.size() == 2);
    CHECK(c.framesJoined() == 2);
  }
  CHECK(got.size() >= 2);
}
