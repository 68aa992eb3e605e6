// The lab switch's segmentation offload (labswitch/switch_offload.cpp): a host's TCP super-frame
// becomes exactly the wire frames it stands for, and wire frames are joined back only where
// nothing the model did to one of them would be lost.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "labswitch/packet_rules.hpp"
#include "labswitch/switch_fabric.hpp"
#include "labswitch/switch_offload.hpp"
#include "labswitch/switch_packet.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_switch_offload {

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
    // The TCP checksum left partial, as the host left it; completed, it is right.
    CHECK(tcpChecksumPartial(s.data(), s.size()));
    CHECK_FALSE(tcpChecksumValid(s));
    Frame whole = s;
    CHECK(completeTcpChecksum(whole.data(), whole.size()));
    CHECK(tcpChecksumValid(whole));
    CHECK(std::memcmp(whole.data(), s.data(), kL4 + 16) == 0);
    CHECK(std::memcmp(whole.data() + kL4 + 18, s.data() + kL4 + 18, s.size() - kL4 - 18) == 0);
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

TEST_CASE("a partial TCP checksum: told from a whole one, completed, flagged to the host, never left on a corrupted frame",
          "[offload]") {
  Frame partial = tcpFrame(700, 42, 0, true), whole = tcpFrame(700, 42);
  CHECK(tcpChecksumPartial(partial.data(), partial.size()));
  CHECK_FALSE(tcpChecksumPartial(whole.data(), whole.size()));
  CHECK_FALSE(tcpChecksumOk(partial.data(), partial.size()));
  // Completing: the partial one becomes the whole one; the whole one is left alone.
  Frame done = partial;
  CHECK(completeTcpChecksum(done.data(), done.size()));
  CHECK(done == whole);
  CHECK_FALSE(completeTcpChecksum(done.data(), done.size()));
  CHECK(done == whole);
  // Not TCP, or a TCP length beyond the frame: never partial.
  Frame udp = whole;
  udp[kL3 + 9] = 17;
  CHECK_FALSE(tcpChecksumPartial(udp.data(), udp.size()));
  CHECK_FALSE(tcpChecksumPartial(partial.data(), partial.size() - 1));
  // A single frame to the host: a partial one with CHECKSUM_PARTIAL at its TCP header, a whole
  // one unflagged (a pure ACK, which opens no run).
  std::vector<Written> got;
  TcpCoalescer c([&](const VnetHdr& h, const uint8_t* d, size_t n) { got.push_back({h, Frame(d, d + n)}); });
  Frame ack = tcpFrame(0, 42, 0, true), ackWhole = tcpFrame(0, 42);
  c.add(ack.data(), ack.size());
  c.add(ackWhole.data(), ackWhole.size());
  REQUIRE(got.size() == 2);
  CHECK(got[0].h.flags == kVnetNeedsCsum);
  CHECK(got[0].h.csumStart == kL4);
  CHECK(got[0].h.csumOffset == 16);
  CHECK(got[1].h.flags == 0);

  // A frame whose whole checksum happens to be its pseudo-header's sum (1 in 65,536; found by
  // trying the values of one payload word) reads as partial, and completing it changes no byte.
  // Corrupted, it must not: the host would finish its checksum and take it.
  Frame odd = whole;
  const uint16_t pseudo = be16(partial.data() + kL4 + 16);
  bool found = false;
  for (uint32_t w = 0; w <= 0xffff && !found; w++) {
    odd[kHdr + 10] = uint8_t(w >> 8);
    odd[kHdr + 11] = uint8_t(w);
    odd[kL4 + 16] = odd[kL4 + 17] = 0;
    const size_t tcpLen = odd.size() - kL4;
    uint16_t sum = uint16_t(~refSum(odd.data() + kL4, tcpLen, refSum(odd.data() + kL3 + 12, 8) + 6 + uint32_t(tcpLen)));
    odd[kL4 + 16] = uint8_t(sum >> 8);
    odd[kL4 + 17] = uint8_t(sum);
    found = sum == pseudo;
  }
  REQUIRE(found);
  CHECK(tcpChecksumValid(odd));
  CHECK(tcpChecksumPartial(odd.data(), odd.size()));
  Frame same = odd;
  completeTcpChecksum(same.data(), same.size());
  CHECK(same == odd);
  Frame bad = odd;
  REQUIRE(corruptFrame(bad));
  CHECK_FALSE(tcpChecksumPartial(bad.data(), bad.size()));
  CHECK_FALSE(tcpChecksumValid(bad));
  // An ordinary frame corrupted: its checksum completed first, then wrong.
  Frame bad2 = partial;
  REQUIRE(corruptFrame(bad2));
  CHECK_FALSE(tcpChecksumPartial(bad2.data(), bad2.size()));
  CHECK_FALSE(tcpChecksumValid(bad2));
  CHECK(std::memcmp(bad2.data() + kL4 + 16, whole.data() + kL4 + 16, 2) == 0);
}

TEST_CASE("with verification on, a frame with a bad TCP checksum joins no run and goes alone, unflagged", "[offload]") {
  const uint16_t mss = 1448;
  Frame super = tcpFrame(8 * mss, 500, 0x08, true);
  std::vector<Frame> wire;
  REQUIRE(segmentFrame(super.data(), super.size(), tso(mss), wire).empty());
  REQUIRE(wire.size() == 8);
  for (const auto& f : wire) CHECK(tcpChecksumPartial(f.data(), f.size()));
  // What a packet rule's corrupt does: completes the checksum, then flips one payload bit.
  REQUIRE(corruptFrame(wire[4]));
  CHECK_FALSE(tcpChecksumOk(wire[4].data(), wire[4].size()));
  CHECK_FALSE(tcpChecksumPartial(wire[4].data(), wire[4].size()));
  const bool verify = GENERATE(false, true);
  std::vector<Written> got;
  TcpCoalescer c([&](const VnetHdr& h, const uint8_t* d, size_t n) { got.push_back({h, Frame(d, d + n)}); });
  c.setVerify(verify);
  for (const auto& f : wire) c.add(f.data(), f.size());
  c.flush();
  if (!verify) {
    // Unchecked, the bad frame is joined and the host would take it as checksummed.
    REQUIRE(got.size() == 1);
    CHECK(got[0].h.flags == kVnetNeedsCsum);
    CHECK(c.badChecksums() == 0);
    return;
  }
  // Checked: frames 0-3 as one run, frame 4 alone without the offload header (its host checks
  // it), frames 5-7 as the next run; the flow's order kept.
  REQUIRE(got.size() == 3);
  CHECK(c.badChecksums() == 1);
  CHECK(got[0].h.gsoType == kGsoTcpV4);
  CHECK(got[0].f.size() == kHdr + 4 * mss);
  CHECK(got[1].h.flags == 0);
  CHECK(got[1].h.gsoType == kGsoNone);
  CHECK(got[1].f == wire[4]);
  CHECK(got[2].h.gsoType == kGsoTcpV4);
  CHECK(got[2].f.size() == kHdr + 3 * mss);
  CHECK(be32(got[2].f.data() + kL4 + 4) == 500 + 5 * mss);
}

TEST_CASE("what the model did to one frame ends a run: a CE mark, a gap, a SYN; another flow does not", "[offload]") {
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
    CHECK(got[1].h.gsoType == kGsoNone);   // a single frame goes as it is, its checksum
    CHECK(got[1].h.flags == kVnetNeedsCsum);  // still partial: the host finishes it
    CHECK(got[1].h.csumStart == kL4);
    CHECK(got[1].h.csumOffset == 16);
    CHECK(got[1].f == w[2]);
    // Why each write's run ended: the mark, the mark's end, then flush().
    CHECK(c.runEnds() == RunEnds{.marked = 2, .flushed = 1});
  }
  SECTION("the fourth frame dropped by a queue: the gap in the sequence ends the run") {
    for (size_t i = 0; i < wire.size(); i++)
      if (i != 3) c.add(wire[i].data(), wire[i].size());
    c.flush();
    CHECK(sent() == std::vector<size_t>{3, 2});
    CHECK(c.runEnds() == RunEnds{.differs = 1, .flushed = 1});
  }
  SECTION("another flow in between joins its own run; a SYN of the flow ends the flow's run") {
    // flags 0x10 (ACK) so the other flow's frame may open a run of its own.
    Frame other = tcpFrame(mss, 9, 0x10, false, 40001), other2 = tcpFrame(mss, 9 + mss, 0x10, false, 40001);
    Frame syn = tcpFrame(0, 5, 0x02);
    c.add(wire[0].data(), wire[0].size());
    c.add(other.data(), other.size());
    c.add(wire[1].data(), wire[1].size());
    c.add(other2.data(), other2.size());
    c.add(wire[2].data(), wire[2].size());
    c.add(syn.data(), syn.size());
    c.add(wire[3].data(), wire[3].size());
    c.flush();
    // Frames 1-3 of the flow as one (the other flow between them did not end it), then the SYN
    // after them (its own flow's order), then the other flow's two frames as one, then frame 4.
    REQUIRE(got.size() == 4);
    CHECK(sent() == std::vector<size_t>{3, 0, 2, 1});  // the SYN carries no payload
    CHECK(got[1].f == syn);
    CHECK(be16(got[2].f.data() + kL4) == 40001);
    CHECK(got[3].f == wire[3]);
    CHECK(c.superFrames() == 2);
    CHECK(c.runEnds() == RunEnds{.differs = 1, .flushed = 2, .alone = 1});
  }
  SECTION("a ninth flow sends the oldest open run on its way") {
    for (uint16_t k = 0; k < TcpCoalescer::kMaxRuns + 1; k++) {
      Frame f = tcpFrame(mss, 1, 0x10, false, uint16_t(41000 + k));
      c.add(f.data(), f.size());
    }
    REQUIRE(got.size() == 1);
    CHECK(be16(got[0].f.data() + kL4) == 41000);
    c.flush();
    CHECK(got.size() == TcpCoalescer::kMaxRuns + 1);
    CHECK(c.runEnds() == RunEnds{.evicted = 1, .flushed = TcpCoalescer::kMaxRuns});
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
    CHECK(c.runEnds() == RunEnds{.shortFrame = 1, .flushed = 1});
    // A frame with PSH closes its run too; a FIN as well; a run that reaches kMaxRunBytes
    // ends when the flow's next frame would pass it.
    Frame p1 = tcpFrame(mss, 100000), p2 = tcpFrame(mss, 100000 + mss, 0x08), p3 = tcpFrame(mss, 100000 + 2 * mss);
    for (const Frame* f : {&p1, &p2, &p3}) c.add(f->data(), f->size());
    Frame f1 = tcpFrame(mss, 200000, 0x01, false, 40002), f2 = tcpFrame(mss, 200000 + mss, 0, false, 40002);
    for (const Frame* f : {&f1, &f2}) c.add(f->data(), f->size());
    uint32_t seq = 300000;
    for (size_t i = 0; i * mss <= TcpCoalescer::kMaxRunBytes; i++, seq += mss) {
      Frame f = tcpFrame(mss, seq, 0, false, 40003);
      c.add(f.data(), f.size());
    }
    c.flush();
    CHECK(c.runEnds() == RunEnds{.push = 1, .shortFrame = 1, .fin = 1, .full = 1, .flushed = 4});
  }
  CHECK(got.size() >= 2);
}

TEST_CASE("the delivery hold: a run goes to its host when its first frame has waited the hold, not before", "[offload]") {
  const uint16_t mss = 1448;
  std::vector<Written> got;
  TcpCoalescer c([&](const VnetHdr& h, const uint8_t* d, size_t n) { got.push_back({h, Frame(d, d + n)}); });
  const int64_t hold = 500'000;
  // Flow A opens at t=0, flow B at t=300 us; a pure ACK (no payload) is never held.
  Frame a1 = tcpFrame(mss, 1, 0x10), a2 = tcpFrame(mss, 1 + mss, 0x10);
  Frame b1 = tcpFrame(mss, 5, 0x10, false, 40001);
  Frame ack = tcpFrame(0, 9, 0x10, false, 40002);
  c.add(a1.data(), a1.size(), 0);
  c.add(a2.data(), a2.size(), 100'000);
  c.add(b1.data(), b1.size(), 300'000);
  c.add(ack.data(), ack.size(), 350'000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].f == ack);
  CHECK(c.heldBytes() == kHdr + 2 * mss + kHdr + mss);
  // At 499 us nothing is due; A is due at 500 us, B at 800 us.
  CHECK(c.flushDue(499'999, hold) == 500'000);
  CHECK(got.size() == 1);
  CHECK(c.flushDue(500'000, hold) == 800'000);
  REQUIRE(got.size() == 2);
  CHECK(got[1].h.gsoType == kGsoTcpV4);  // A's two frames as one super-frame
  CHECK(got[1].f.size() == kHdr + 2 * mss);
  CHECK(c.flushDue(800'000, hold) == INT64_MAX);
  REQUIRE(got.size() == 3);
  CHECK(got[2].f == b1);
  CHECK(c.empty());
  CHECK(c.runEnds() == RunEnds{.hold = 2, .alone = 1});
}

namespace {

// Host ports whose NICs are stream sockets (the soft-RoCE guests' kind): the test listens where
// QEMU would, so that it can feed a port chosen frames at chosen instants and read what the
// switch sends each host.
struct StreamHosts {
  std::string dir;
  std::vector<std::string> paths;
  std::vector<rc::UniqueFD> listeners, conns;
  explicit StreamHosts(int n) {
    char tmpl[] = "/tmp/rc-superframe-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    for (int i = 1; i <= n; i++) {
      paths.push_back(dir + "/n" + std::to_string(i) + ".sock");
      rc::UniqueFD l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      REQUIRE(l.isValid());
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::strncpy(sa.sun_path, paths.back().c_str(), sizeof sa.sun_path - 1);
      REQUIRE(::bind(l.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
      REQUIRE(::listen(l.get(), 1) == 0);
      listeners.push_back(std::move(l));
    }
  }
  ~StreamHosts() {
    for (const auto& p : paths) ::unlink(p.c_str());
    ::rmdir(dir.c_str());
  }
  void acceptAll() {
    for (auto& l : listeners) {
      conns.emplace_back(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      REQUIRE(conns.back().isValid());
    }
  }
  // The frames the switch has sent host I (0-based) so far.
  std::vector<Frame> received(size_t i) {
    std::vector<uint8_t> bytes;
    uint8_t buf[65536];
    for (;;) {
      ssize_t r = ::recv(conns[i].get(), buf, sizeof buf, MSG_DONTWAIT);
      if (r <= 0) break;
      bytes.insert(bytes.end(), buf, buf + r);
    }
    std::vector<Frame> out;
    for (size_t off = 0; off + 4 <= bytes.size();) {
      size_t len = size_t(bytes[off]) << 24 | size_t(bytes[off + 1]) << 16 | size_t(bytes[off + 2]) << 8 | bytes[off + 3];
      REQUIRE(off + 4 + len <= bytes.size());
      out.emplace_back(bytes.begin() + long(off + 4), bytes.begin() + long(off + 4 + len));
      off += 4 + len;
    }
    return out;
  }
};

// Sets the IPv4 TOS byte of a frame built by tcpFrame (its header checksum kept valid).
void setTos(Frame& f, uint8_t tos) {
  uint8_t* ip = f.data() + kL3;
  ip[1] = tos;
  ip[10] = ip[11] = 0;
  uint16_t c = uint16_t(~refSum(ip, 20));
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
}

}  // namespace

TEST_CASE("a super-frame is accounted as the wire frames it stands for: queue, pacing, ECN, PFC, drops, counters",
          "[offload][model]") {
  // 44 segments of 1448 bytes: a 64 KB TSO super-frame from n1 to n2, cut as a TAP's read cuts
  // it (segmentFrame) and handed to the model at one instant, as one read hands it over.
  const uint16_t mss = 1448;
  const size_t wire = kHdr + mss, frames = 44;  // 1514-byte wire frames
  const int64_t frameNs = int64_t(double(wire + 24) * 8e9 / 1e9);  // with preamble, FCS, gap at 1 Gb/s
  StreamHosts hosts(3);
  Config cfg;
  cfg.rateBps = 1e9;
  for (int i = 0; i < 3; i++) cfg.hosts.push_back(HostPort{"n" + std::to_string(i + 1), "", "", hosts.paths[size_t(i)]});
  // Marks every ECT frame that arrives while the queue holds more than 16 KiB (kmax = kmin + 1:
  // the marking probability is 1 past kmin, so the count is exact); XOFF once n1's ingress
  // account passes 43 wire frames (so the super-frame's last wire frame crosses it), XON at
  // 15,000 bytes or less; a lossy queue takes 10 frames and a bit.
  cfg.ecn.kminBytes = 16 * 1024;
  cfg.ecn.kmaxBytes = 16 * 1024 + 1;
  cfg.ecn.pmax = 1.0;
  cfg.pfc.xoffBytes = 43 * wire;
  cfg.pfc.xonBytes = 15'000;
  cfg.lossyQueueBytes = 10 * wire + 100;
  Fabric fab(cfg);
  REQUIRE(fab.build());
  hosts.acceptAll();
  const int64_t t0 = 1'000'000'000;
  // n2 says who it is first (the switch learns its MAC), and its frame to n1 goes out.
  Frame hello = tcpFrame(0, 1, 0, false, 8080);
  std::swap_ranges(hello.begin(), hello.begin() + 6, hello.begin() + 6);
  fab.fromHost(1, hello, t0 - 10'000'000);
  fab.pump(t0 - 10'000'000);
  fab.flushPorts(t0 - 10'000'000);
  REQUIRE(hosts.received(0).size() == 1);

  auto port = [&](const std::string& name, int64_t now) {
    return rc::swproto::toJson(*fab.counters({.port = name}, now))["ports"][0];
  };
  auto cut = [&](uint8_t tos) {
    Frame super = tcpFrame(frames * mss, 1000, 0, true);
    setTos(super, tos);
    std::vector<Frame> out;
    REQUIRE(segmentFrame(super.data(), super.size(), tso(mss), out).empty());
    REQUIRE(out.size() == frames);
    for (const auto& f : out) REQUIRE(f.size() == wire);
    return out;
  };

  SECTION("lossless (DSCP 26, priority 3): depth, marks, XOFF at the crossing frame, pacing, XON, counters") {
    // A meter on n2 for the flow's TCP port counts wire frames too.
    REQUIRE(fab.handle(rc::swproto::toJson(rc::swproto::SetMeterRequest{.port = "n2", .l4Dst = 8080}))["ok"] == true);
    auto segs = cut(26 << 2 | 2);
    for (size_t k = 0; k < frames; k++) {
      fab.fromHost(0, std::move(segs[k]), t0);
      // n1's ingress account passes 43 frames with the 44th wire frame, not before.
      if (k + 2 == frames) CHECK(port("n1", t0)["queues"][3]["pfc_tx"] == 0);
    }
    json n2 = port("n2", t0), n1 = port("n1", t0);
    const json& q = n2["queues"][3];
    CHECK(q["depth_bytes"] == frames * wire);
    CHECK(q["depth_frames"] == frames);
    CHECK(q["max_depth_bytes"] == frames * wire);
    // Frame k finds k frames queued: marked when k x 1514 > 16384, i.e. from k = 11 on.
    CHECK(q["ecn_marked"] == frames - 11);
    // ... and then one XOFF went towards n1.
    CHECK(n1["queues"][3]["pfc_tx"] == 1);
    CHECK(n1["queues"][3]["xoff"] == true);
    CHECK(n1["queues"][3]["ingress_bytes"] == frames * wire);
    CHECK(n1["rx_frames"].get<uint64_t>() == frames + 0);
    CHECK(n1["rx_bytes"].get<uint64_t>() == frames * wire + 0);
    // Pacing: the first frame leaves at t0, one more every 12,304 ns; a pass sends what is due
    // within the 100 us slack. 300 us in: frames 0..32 (32 x 12.3 us <= 400 us).
    fab.pump(t0);
    CHECK(port("n2", t0)["queues"][3]["tx_frames"] == 1 + 100'000 / frameNs);
    fab.pump(t0 + 300'000);
    CHECK(port("n2", t0 + 300'000)["queues"][3]["tx_frames"] == 1 + 400'000 / frameNs);
    CHECK(port("n2", t0 + 300'000)["queues"][3]["depth_bytes"] == (frames - 1 - 400'000 / frameNs) * wire);
    // XON once n1's account is 15,000 bytes or less: 9 frames left (13,626), not 10 (15,140).
    CHECK(port("n1", t0 + 300'000)["queues"][3]["pfc_tx"] == 1);
    fab.pump(t0 + 10'000'000);
    json after = port("n1", t0 + 10'000'000);
    CHECK(after["queues"][3]["pfc_tx"] == 2);
    CHECK(after["queues"][3]["xoff"] == false);
    CHECK(after["queues"][3]["ingress_bytes"] == 0);
    json out = port("n2", t0 + 10'000'000);
    CHECK(out["queues"][3]["tx_frames"] == frames);
    CHECK(out["queues"][3]["tx_bytes"] == frames * wire);
    CHECK(out["tx_frames"].get<uint64_t>() == frames + 0);
    json meters = fab.handle(rc::swproto::toJson(rc::swproto::MetersRequest{}))["meters"];
    REQUIRE(meters.size() == 1);
    CHECK(meters[0]["frames"] == frames);
    CHECK(meters[0]["bytes"] == frames * wire);
    // What n2's NIC receives: every wire frame, in order, the marked ones CE and no others.
    fab.flushPorts(t0 + 10'000'000);
    auto got = hosts.received(1);
    REQUIRE(got.size() == frames);
    for (size_t k = 0; k < frames; k++) {
      INFO("frame " << k);
      CHECK(got[k].size() == wire);
      CHECK(be32(got[k].data() + kL4 + 4) == 1000 + k * mss);
      CHECK((got[k][kL3 + 1] & 3) == (k >= 11 ? 3 : 2));
    }
  }
  SECTION("lossy (priority 0): the tail past the queue's limit is dropped frame by frame") {
    for (auto& f : cut(0x02)) fab.fromHost(0, std::move(f), t0);
    json q = port("n2", t0)["queues"][0];
    CHECK(q["depth_frames"] == 10);
    CHECK(q["drops"] == frames - 10);
    CHECK(port("n1", t0)["queues"][0]["pfc_tx"] == 0);
    // The port starts its schedule at its first pass: 9 frames are due within its 100 us slack,
    // the tenth 110.7 us in.
    fab.pump(t0 + 10'000'000);
    CHECK(port("n2", t0 + 10'000'000)["queues"][0]["tx_frames"] == 9);
    fab.pump(t0 + 10'020'000);
    fab.flushPorts(t0 + 10'020'000);
    CHECK(port("n2", t0 + 10'020'000)["queues"][0]["tx_frames"] == 10);
    auto got = hosts.received(1);
    REQUIRE(got.size() == 10);
    // The first ten frames reach n2; the eleventh and later never leave the switch.
    for (size_t k = 0; k < 10; k++) CHECK(be32(got[k].data() + kL4 + 4) == 1000 + k * mss);
  }
}

}  // namespace test_switch_offload
