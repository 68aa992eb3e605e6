// The lab switch inside: ports, queues and switches, and the Fabric that owns them. Its data
// plane (switch_dataplane.cpp), control socket (switch_control.cpp) and event loop
// (switch_loop.cpp) are one class over the same state, split by what each part does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/pfc.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/switch.hpp"
#include "labswitch/packet_rules.hpp"
#include "labswitch/switch_packet.hpp"
#include "labswitch/switch_protocol.hpp"
#include "labswitch/switch_port.hpp"

namespace rc::labswitch {


// Preamble + SFD (8), FCS (4, absent on a TAP) and inter-frame gap (12): a line rate counts
// them, so a port's throughput in frame bytes is what a real port of that speed carries.
constexpr int kWireOverhead = 24;
constexpr size_t kReadBatch = 64;
// Transmission runs ahead of the port's schedule by at most this much, so one timer wake-up
// sends a small burst instead of one frame; the long-run rate stays exact.
constexpr int64_t kTxSlackNs = 100'000;
// A backlogged port that the scheduler served late catches up (a burst), so the long-run rate
// stays exact on a busy machine; at most this much lateness is made up.
constexpr int64_t kTxCatchUpNs = 20'000'000;
// Frames a paused host NIC holds before the switch stops reading that host's TAP (whose
// ring then drops: a TAP cannot push back on the host). A RoCE NIC holds a paused priority's
// frames in host memory, not dropping them. At 512 frames an incast's pause spread stopped
// the reads and the hosts' TAPs dropped the lossless job's frames: it stalled on timeouts the
// fabric did not cause. 16,384 frames (24 MB at most per host) outlast the lab's pauses; the
// TCP windows bound what a paused host can have outstanding.
constexpr size_t kHostHoldFrames = 16384;
constexpr size_t kMaxClients = 16;
constexpr size_t kMaxRequest = 64 * 1024;
constexpr size_t kMaxFlowlets = 1 << 16;

inline const char* actionName(WatchdogAction a) {
  switch (a) {
    case WatchdogAction::drop: return "drop";
    case WatchdogAction::forward: return "forward";
    default: return "alert";
  }
}

inline Result<WatchdogAction> parseAction(const std::string& s) {
  if (s == "drop") return WatchdogAction::drop;
  if (s == "forward") return WatchdogAction::forward;
  if (s == "alert") return WatchdogAction::alert;
  return makeError("watchdog action '" + s + "' is not one of drop, forward, alert");
}

struct Packet {
  std::vector<uint8_t> data;
  int inPort = -1;  // ingress port whose (port, priority) account holds these bytes
  int prio = 0;
};

struct QueueStats {
  uint64_t txFrames = 0, txBytes = 0, drops = 0, ecnMarked = 0, maxDepth = 0;
  uint64_t pfcRx = 0, pfcTx = 0, wdStorms = 0, wdRestored = 0, wdDrops = 0;
  int64_t pausedNs = 0;  // closed pause intervals; the open one is added when read
  int64_t xoffNs = 0;    // closed XOFF intervals (this switch pausing the upstream); likewise
  uint64_t stormGaps = 0;  // gaps in received PFC longer than the pause the frame before asked for
};

struct Queue {
  std::deque<Packet> frames;
  uint64_t bytes = 0;
  int64_t deficit = 0;
  QueueStats stats;
  EcnProfile ecn;
  // Egress pause from received PFC.
  int64_t pausedUntil = 0, pauseStart = 0;
  // Ingress accounting of this port as ingress for this priority, and the PFC it sent.
  uint64_t ingressBytes = 0;
  PfcThreshold pfc;
  bool xoff = false;
  int64_t xoffRefreshAt = 0, xoffSince = 0;
  // The host NIC model: a paused host holds its frames of this priority.
  int64_t hostPausedUntil = 0;
  std::deque<std::vector<uint8_t>> hold;
  // PFC watchdog.
  WatchdogConfig wd;
  bool storm = false;
  int64_t stalledSince = 0, lastPfcRx = 0;
  int64_t rxPauseEnd = 0;  // when the last received PFC frame's pause ran out (storm gaps)
  bool pfcRxActive = false;  // an episode of received PFC (a storm, seen on the wire) is open
};

// Something the fabric did, with when: ground truth for the runner's evidence (a bounded ring).
struct FabricEvent {
  uint64_t seq = 0;
  int64_t monoNs = 0, wallNs = 0;
  std::string what;  // pfc_rx_start, pfc_rx_end, wd_detect, wd_restore, flow_start, flow_end
  std::string port;
  int prio = 0;
  int l4Dst = -1;  // flow_start/flow_end: the meter's TCP/UDP destination port
};
constexpr size_t kMaxEvents = 4096;

// A traffic meter: frames leaving PORT with TCP/UDP destination port L4DST, counted and timed
// as they go on the wire, so that "when did this traffic stop" has a ground truth (the runner
// meters an incast's flows into its receiver). A burst of frames with gaps shorter than
// kMeterGapNs is one flow episode: flow_start at its first frame, flow_end at its last.
struct Meter {
  int port = -1;
  int l4Dst = 0;
  uint64_t frames = 0, bytes = 0;
  int64_t firstNs = 0, lastNs = 0;  // monotonic; 0 = none yet
  bool active = false;
};
constexpr size_t kMaxMeters = 32;
constexpr int64_t kMeterGapNs = 20'000'000;

struct Port {
  std::string name;
  int sw = 0;
  std::unique_ptr<PortIo> io;  // host ports
  int peer = -1;               // internal links: the other end
  int link = -1;
  double rateBps = 1e9;
  int mtu = 1500;
  bool adminUp = true;
  Mac mac{};  // the switch's own address on this port (PFC source)
  Queue q[kPriorities];
  double nextTxNs = 0;
  int drrNext = 0;
  bool reading = true;
  bool closed = false;  // a stream port whose guest closed the connection
  bool busy = false;  // transmitting back to back (see kTxCatchUpNs)
  size_t held = 0;
  uint64_t rxFrames = 0, rxBytes = 0, txFrames = 0, txBytes = 0, rxDrops = 0, noRoute = 0;
  uint64_t windowTxBytes = 0, lastWindowTxBytes = 0;  // adaptive routing's load estimate
  bool isHost() const { return io != nullptr; }
};

struct Link {
  std::string name;
  int a = -1, b = -1;
  bool routedUp = true;  // the state ECMP's next hops reflect, `convergence` after a change
  int64_t routeChangeAt = 0;
};

enum class Role { single, leaf, spine };

struct Flowlet {
  int port;
  int64_t last;
};

struct Switch {
  std::string name;
  Role role = Role::single;
  std::vector<int> hostPorts;
  std::vector<int> uplinks;              // leaf: one per spine, in spine order
  std::map<int, int> downlinkToLeaf;     // spine: leaf switch index -> port
  uint64_t bufferUsed = 0;
  std::unordered_map<uint32_t, Flowlet> flowlets;
};

class Fabric {
 public:
  explicit Fabric(Config c) : cfg_(std::move(c)), rng_(cfg_.seed) {
    if (cfg_.dscpMap.size() == 64) std::copy(cfg_.dscpMap.begin(), cfg_.dscpMap.end(), classes_.dscp.begin());
    classes_.tcpAckPriority = cfg_.tcpAckPriority;
    adaptive_ = cfg_.routing == "adaptive";
  }

  Result<void> build();

  // ---- data plane ------------------------------------------------------------------------

  // A frame read from a host's TAP: the host NIC model holds it while the switch pauses
  // that host for its priority (a TAP host ignores PFC, so the switch honours it for it).
  void fromHost(int pi, std::vector<uint8_t> data, int64_t now);

  // A frame arriving at port pi (from its host or its peer switch). A host port's packet
  // rules see it first.
  void receive(int pi, std::vector<uint8_t> data, int64_t now);
  // The rest of receive(): routes a frame at priority PRIO and queues it on its egress ports.
  void forward(int pi, std::vector<uint8_t> data, int prio, int64_t now);
  // Frames the packet rules held (delay, reorder) whose time came, and rules that expired.
  void releasePackets(int64_t now);
  void enqueue(int ei, Packet pkt, int64_t now);

  bool queueReady(const Port& p, int prio, int64_t now) const;

  // Strict priority for 7 and 6 (network control, CNP); deficit round robin for 0..5 with
  // equal weights (quantum = one MTU).
  int pickQueue(Port& p, int64_t now);

  void transmit(int pi, int prio, int64_t now);

  void deliver(int pi, std::vector<uint8_t> data, int64_t now);

  // Returns a frame's bytes to the buffer and its ingress account; resumes at xon.
  void release(Port& e, Queue& q, const Packet& pkt, int64_t now);

  void sendPfc(int pi, int prio, bool pause, int64_t now);

  void onPfc(int pi, const pfc::Frame& f, int64_t now);

  // Time this switch has held the upstream of (port, priority) in XOFF: ground truth for "the
  // pause spread to this port's sender".
  static int64_t xoffNs(const Queue& q, int64_t now) { return q.stats.xoffNs + (q.xoff ? now - q.xoffSince : 0); }

  int64_t pausedNs(const Queue& q, int64_t now) const;

  void releaseHeld(int pi, int64_t now);

  // ---- routing -------------------------------------------------------------------------

  bool portUp(int pi) const;

  // A leaf's uplink as a next hop towards dstLeaf (-1: any leaf, e.g. for flooding). ECMP
  // (routed) knows link states from routing, `convergence` after a change. Adaptive routing
  // sees its own ports at once, and the spines' downlinks too: AI fabrics' adaptive routing
  // carries remote link faults in the data plane (InfiniBand's fault routing notifications,
  // Spectrum-X), so a leaf stops sending towards a spine that lost the destination leaf.
  bool usable(int uplink, int dstLeaf, bool routed) const;

  int pickUplink(Switch& sw, const std::vector<uint8_t>& data, int dstLeaf, int64_t now);

  void route(int inPort, const std::vector<uint8_t>& data, int64_t now, std::vector<int>& out);

  // ---- periodic work (watchdog poll interval) ------------------------------------------

  void meterTx(int pi, const std::vector<uint8_t>& data, int64_t now);

  void tick(int64_t now);
  // Turns the TAPs' checksum check before joining on while a packet rule corrupts TCP, and for
  // a second after the last one ends (its frames may still be queued).
  void updateChecksumVerify(int64_t now);

  // SONiC's PFC watchdog: a queue that stays paused with frames waiting for the detection
  // time is in a storm; the storm ends when no PFC arrived for the restoration time.
  void watchdog(int pi, int prio, int64_t now);

  void endStorm(Port& p, Queue& q, int prio, int64_t now, const char* why);

  // Records an event at monotonic instant AT (now or earlier), with the wall clock of that
  // instant, so the controller on the same host can place it on its run timeline.
  int64_t wallOf(int64_t mono) const;

  void event(int64_t at, const char* what, const std::string& port, int prio, int l4Dst = -1);

  // ---- control (switch_control.cpp) ----------------------------------------------------------
  // One handler per command of switch_protocol.hpp, in its command table: the request parsed,
  // the reply or the reason it is refused.

  // One request line's object to its reply's.
  json handle(const json& req);

  static json err(const std::string& m) { return swproto::errorReply(m); }

  Result<swproto::PingReply> ping(const swproto::PingRequest& req, int64_t now);
  Result<swproto::TopologyReply> topology(const swproto::TopologyRequest& req, int64_t now) const;
  Result<swproto::CountersReply> counters(const swproto::CountersRequest& req, int64_t now);
  Result<swproto::EventsReply> events(const swproto::EventsRequest& req, int64_t now);
  // set_meter: meter (again, from zero) the frames leaving PORT for that TCP/UDP port;
  // del_meter; meters: every meter with its counts and first/last frame.
  Result<swproto::OkReply> setMeter(const swproto::SetMeterRequest& req, int64_t now);
  Result<swproto::OkReply> delMeter(const swproto::DelMeterRequest& req, int64_t now);
  Result<swproto::MetersReply> meters(const swproto::MetersRequest& req, int64_t now);
  Result<swproto::AddPacketRuleReply> addPacketRule(const swproto::AddPacketRuleRequest& req, int64_t now);
  Result<swproto::DelPacketRuleReply> delPacketRule(const swproto::DelPacketRuleRequest& req, int64_t now);
  Result<swproto::PacketRulesReply> packetRules(const swproto::PacketRulesRequest& req, int64_t now);
  Result<swproto::OkReply> resetCounters(const swproto::ResetCountersRequest& req, int64_t now);
  Result<swproto::GetEcnReply> getEcn(const swproto::GetEcnRequest& req, int64_t now);
  Result<swproto::SetEcnReply> setEcn(const swproto::SetEcnRequest& req, int64_t now);
  Result<swproto::GetPfcReply> getPfc(const swproto::GetPfcRequest& req, int64_t now);
  Result<swproto::SetPfcReply> setPfc(const swproto::SetPfcRequest& req, int64_t now);
  Result<swproto::GetWatchdogReply> getWatchdog(const swproto::GetWatchdogRequest& req, int64_t now);
  Result<swproto::SetWatchdogReply> setWatchdog(const swproto::SetWatchdogRequest& req, int64_t now);
  Result<swproto::GetLinkReply> getLink(const swproto::GetLinkRequest& req, int64_t now);
  Result<swproto::SetLinkReply> setLink(const swproto::SetLinkRequest& req, int64_t now);
  Result<swproto::GetPortReply> getPort(const swproto::GetPortRequest& req, int64_t now);
  Result<swproto::SetPortReply> setPort(const swproto::SetPortRequest& req, int64_t now);
  Result<swproto::GetRoutingReply> getRouting(const swproto::GetRoutingRequest& req, int64_t now);
  Result<swproto::SetRoutingReply> setRouting(const swproto::SetRoutingRequest& req, int64_t now);

  // Ports named by `port` ("*" or absent = all).
  Result<std::vector<int>> selectPorts(const std::optional<std::string>& port) const;

  Result<std::vector<int>> selectPrios(const std::optional<int>& prio, const char* key) const;

  // The queues (port, priority) a get_/set_ command of a per-queue setting names: its `port` and
  // its priority, named PRIO_KEY on the wire.
  Result<std::vector<std::pair<int, int>>> selectQueues(const std::optional<std::string>& port,
                                                        const std::optional<int>& prio, const char* prioKey) const;
  // The ports of inter-switch link LINK (both ends), else those PORT names.
  Result<std::vector<int>> selectLink(const std::optional<std::string>& link,
                                      const std::optional<std::string>& port) const;
  // The one port a meter command names, checked.
  Result<int> meterPort(std::string_view cmd, const std::string& port, int l4Dst) const;

  // The set_ half of a per-queue setting: EDIT makes each selected queue's new FIELD from its
  // current one and returns an error text to refuse it. Every queue's new value is made and
  // checked before any is stored, so a request refused on its second queue has changed nothing
  // (bad input changes nothing).
  template <typename T, typename Edit>
  Result<void> replaceAll(const std::vector<std::pair<int, int>>& queues, T Queue::*field, Edit edit) {
    std::vector<T> next;
    for (auto [pi, prio] : queues) {
      T v = ports_[size_t(pi)].q[prio].*field;
      if (std::string why = edit(v); !why.empty()) return makeError(why);
      next.push_back(v);
    }
    auto it = next.begin();
    for (auto [pi, prio] : queues) ports_[size_t(pi)].q[prio].*field = *it++;
    return {};
  }

  // What get_ replies (and set_ replies as "previous") for these queues or ports.
  std::vector<swproto::EcnQueueState> ecnStates(const std::vector<std::pair<int, int>>& queues) const;
  std::vector<swproto::PfcQueueState> pfcStates(const std::vector<std::pair<int, int>>& queues) const;
  std::vector<swproto::WatchdogQueueState> watchdogStates(const std::vector<std::pair<int, int>>& queues) const;
  std::vector<swproto::PortSettings> portSettings(const std::vector<int>& ports) const;
  std::vector<swproto::LinkPortState> linkStates(const std::vector<int>& ports) const;

  void setAdmin(int pi, bool up, int64_t now);

  // ---- event loop ---------------------------------------------------------------------------

  Result<void> serve();

  // Transmits what each port's schedule has due; returns when the next frame is due.
  int64_t pump(int64_t now);
  // Writes what each host port holds that is due; returns when the next held run is due.
  int64_t flushPorts(int64_t now);
  // The loop's next wake-up: WAKE (CLOCK_MONOTONIC ns; INT64_MAX: none), or soon if past.
  void setWake(int64_t wake, int64_t now);

  // Stops reading a host whose NIC model holds too much, and resumes when it drained: the
  // host's own TAP queue then fills, which is what a paused NIC does to its host.
  void updateReading();

  Result<void> listenControl();

  void accept();

  void clientReadable(int slot);

  static bool sendAll(int fd, const std::string& s);

  void watch(int fd, uint64_t tag);

 private:
  static constexpr uint64_t kSignal = 1, kPollTimer = 3, kListen = 4;
  static constexpr uint64_t kClientBase = 1000, kPortBase = 1'000'000;

  struct Client {
    UniqueFD fd;
    std::string in;
  };

  Result<void> addHost(int sw, const HostPort& h);

  int addPort(int sw, std::string name, double rate);

  struct MacHash {
    size_t operator()(const Mac& m) const {
      size_t h = 0;
      for (uint8_t b : m) h = h * 131 + b;
      return h;
    }
  };

  Config cfg_;
  std::mt19937 rng_;
  Classes classes_;  // priority classification: DSCP map and the pure-ACK rule
  bool adaptive_ = false;
  std::vector<Switch> switches_;
  // With the switch on its own core (Config::cpu), the thread that writes to the hosts' TAPs
  // on the others (host_delivery.hpp); null otherwise.
  std::shared_ptr<HostDelivery> delivery_;
  std::vector<Port> ports_;
  std::vector<Link> links_;
  std::unordered_map<Mac, int, MacHash> macTable_;
  UniqueFD control_;
  std::deque<FabricEvent> events_;
  std::vector<Meter> meters_;
  PacketRules packetRules_;
  uint64_t eventSeq_ = 0;
  std::vector<Client> clients_;
  int ep_ = -1;
  // The event loop's time outside epoll_wait since it started (CLOCK_MONOTONIC): work done or
  // waiting for the CPU with work at hand. Near the elapsed time, the switch is saturated:
  // its CPU, not the line rate, bounds the traffic (`counters` reports both).
  int64_t loopStartNs_ = 0, idleNs_ = 0;
  int64_t verifyUntil_ = 0;  // updateChecksumVerify
  bool verifying_ = false;
  int64_t nextWake_ = INT64_MAX;  // the transmit schedule's next instant: epoll's timeout
};

}  // namespace rc::labswitch
