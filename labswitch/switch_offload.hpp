// Segmentation offload between the lab switch and its hosts' TAPs (IFF_VNET_HDR).
//
// A host's TCP hands its TAP super-frames of up to 64 KiB (TSO) with their checksums left to
// the NIC; the switch reads one with a virtio_net_hdr and cuts it here into the wire frames it
// stands for (their TCP checksums left partial, as the host left them), so the model (queues,
// pacing, ECN, PFC, drops, meters, counters) only ever sees wire frames, exactly as before. On
// the way out, wire frames of one TCP flow that the model sends to a host in one pass, back to
// back and alike, are joined into one super-frame for the receiving host (its stack then takes
// them as one, as after a NIC's GRO); a frame that differs (a CE mark, other flags, a gap in
// the sequence) ends the run, so what a host receives is what the model sent, frame for frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rc::labswitch {

// struct virtio_net_hdr (linux/virtio_net.h), host byte order (a TAP's default).
struct VnetHdr {
  uint8_t flags = 0;
  uint8_t gsoType = 0;
  uint16_t hdrLen = 0;
  uint16_t gsoSize = 0;
  uint16_t csumStart = 0;
  uint16_t csumOffset = 0;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t kVnetNeedsCsum = 1;
constexpr uint8_t kGsoNone = 0, kGsoTcpV4 = 1, kGsoTcpV6 = 4, kGsoEcn = 0x80;

// The one's complement sum of DATA (not folded, not complemented), added to SUM.
uint32_t csumAdd(const uint8_t* data, size_t len, uint32_t sum = 0);
uint16_t csumFold(uint32_t sum);

// Completes a checksum the sender left to the NIC: the 16-bit field at START + OFFSET holds
// the pseudo-header's sum; the sum of everything from START on is folded into it. False (frame
// unchanged) when the offsets lie outside the frame.
bool completeChecksum(uint8_t* frame, size_t len, uint16_t start, uint16_t offset);

// Turns one frame read with header H into wire frames appended to OUT: a TCP super-frame
// (IPv4 or IPv6, gso_size H.gsoSize) cut into segments with their IP lengths, IPv4 ids and
// header checksums, TCP sequence numbers and flags (FIN and PSH on the last only, CWR on the
// first only) and partial TCP checksums (tcpChecksumPartial: summing each payload here is
// wasted when the segments leave joined); any other frame as it is, its checksum completed
// if H asks for that. An error names what the frame lacks (nothing is appended then).
std::string segmentFrame(const uint8_t* frame, size_t len, const VnetHdr& h,
                         std::vector<std::vector<uint8_t>>& out);

// Why each run of a TAP's writes ended (a run: the wire frames one write carries, one or
// more), and the frames that joined none: together, every write to the host. What ends the
// runs is what sets the switch's writes, and with them its time (bench/README.md, "Why the
// switch's writes end").
struct RunEnds {
  uint64_t hold = 0;        // its first frame waited the delivery hold
  uint64_t push = 0;        // a frame with PSH closed it (the sender pushed)
  uint64_t shortFrame = 0;  // a frame shorter than the run's segment size closed it
  uint64_t fin = 0;         // a FIN closed it
  uint64_t full = 0;        // the flow's next frame would have passed kMaxRunBytes
  uint64_t marked = 0;      // the flow's next frame had other ECN bits (a CE mark, or none)
  uint64_t differs = 0;     // the flow's next frame differed otherwise (a gap, ACK number, window, options, size)
  uint64_t evicted = 0;     // a flow beyond kMaxRuns opened a run
  uint64_t flushed = 0;     // flush() sent it at once
  uint64_t alone = 0;       // frames that join no run (pure ACKs, SYN, CWR, UDP, RoCE, PFC)
  friend bool operator==(const RunEnds&, const RunEnds&) = default;
};

// Joins runs of wire frames to one host into super-frames (see the top of this file), as a
// NIC's GRO does: up to kMaxRuns flows are open at once, so the frames of two streams that a
// queue interleaves still join, each flow in its own order (frames of different flows may
// reach the host in another order than the model sent them, as after GRO; one flow's never).
// add() takes the next frame for the host; emit gets each frame or super-frame with its
// header; a frame that cannot join (a pure ACK, UDP, a SYN) goes at once, after its own flow's
// open run if it has one; flush() emits every open run, oldest first; flushDue() only those
// opened HOLD ago or earlier (the delivery hold: see switch_port.hpp). A run holds at most
// kMaxRunBytes.
class TcpCoalescer {
 public:
  using Emit = std::function<void(const VnetHdr&, const uint8_t*, size_t)>;
  static constexpr size_t kMaxRunBytes = 62 * 1024;
  static constexpr size_t kMaxRuns = 8;
  explicit TcpCoalescer(Emit emit) : emit_(std::move(emit)) {}
  // NOW: when the frame left the model (it opens a run's hold).
  void add(const uint8_t* frame, size_t len, int64_t now = 0);
  void flush();
  // Emits the runs opened at NOW - HOLD or earlier; returns when the next open run is due
  // (INT64_MAX when none is open).
  int64_t flushDue(int64_t now, int64_t hold);
  bool empty() const { return runs_.empty(); }
  size_t heldBytes() const;
  uint64_t superFrames() const { return superFrames_; }  // runs of two frames or more emitted
  uint64_t framesJoined() const { return framesJoined_; }
  // While on, a TCP frame whose checksum is wrong joins no run: it goes to the host alone,
  // without the offload header, so the host's stack checks it and drops it, as a NIC's GRO
  // merges only frames whose checksum it verified. Off by default: verifying costs a pass
  // over every byte, and only a packet rule that corrupts TCP makes such frames (the switch
  // turns it on while one exists).
  void setVerify(bool on) { verify_ = on; }
  uint64_t badChecksums() const { return badChecksums_; }  // frames sent alone for it
  const RunEnds& runEnds() const { return ends_; }

 private:
  struct Run {
    std::vector<uint8_t> bytes;  // the first frame's headers, then every frame's payload
    size_t frames = 0;
    size_t hdrLen = 0, l3 = 0, l4 = 0;
    uint16_t mss = 0;
    uint32_t nextSeq = 0;
    int64_t since = 0;  // when its first frame came
    // Set when the last frame was short or carried PSH/FIN, to which of those (RunEnds::push,
    // shortFrame, fin): nothing may follow.
    uint64_t RunEnds::*closedBy = nullptr;
  };
  bool sameFlow(const Run& r, const uint8_t* frame, size_t len) const;
  bool joins(const Run& r, const uint8_t* frame, size_t len) const;
  // What ended R when FRAME, its flow's next, could not join it (R not closed).
  uint64_t RunEnds::*whyNotJoined(const Run& r, const uint8_t* frame, size_t len) const;
  // Emits R (a super-frame, or its one frame) and keeps its buffer in spare_; R is left empty.
  // WHY: what ended it (a closed run counts as what closed it).
  void retire(Run& r, uint64_t RunEnds::*why);
  // Emits one frame; PARTIAL_AT > 0: a TCP frame whose checksum is partial, its TCP header
  // there (the host is told to finish it).
  void emitOne(const uint8_t* f, size_t len, size_t partialAt);
  Emit emit_;
  std::vector<Run> runs_;  // open runs, oldest first
  std::vector<Run> spare_;  // emptied runs kept for their buffers
  uint64_t superFrames_ = 0, framesJoined_ = 0, badChecksums_ = 0;
  RunEnds ends_;
  bool verify_ = false;
};

// True when FRAME is a TCP segment (IPv4 or IPv6) whose checksum is right; true also for a
// frame that is not TCP (nothing to check here).
bool tcpChecksumOk(const uint8_t* frame, size_t len);

// True when FRAME is a TCP segment whose checksum is partial: its field holds the folded sum
// of its pseudo-header, as a sender's stack leaves it for the NIC and as segmentFrame leaves
// the segments it cuts. A segment whose complete checksum happens to be that value (1 in
// 65,536) passes for partial, harmlessly: completing it, or letting the host finish it,
// gives the same bytes. Only a corrupted frame could be misjudged, and corruptFrame
// (packet_rules.cpp) never leaves one that reads as partial.
bool tcpChecksumPartial(const uint8_t* frame, size_t len);

// Completes FRAME's TCP checksum if it is partial; true if it changed it. For ports whose
// host does not take CHECKSUM_PARTIAL (a TAP without offload, a QEMU stream), for a capture
// that must show checksums whole, and before a packet rule corrupts the frame.
bool completeTcpChecksum(uint8_t* frame, size_t len);

}  // namespace rc::labswitch
