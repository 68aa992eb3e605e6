// The lab switch's data plane, control socket and event loop (see switch.hpp).
#include "lab/switch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/pfc.hpp"
#include "common/unique_fd.hpp"
#include "lab/switch_packet.hpp"
#include "lab/switch_port.hpp"

namespace rc::labswitch {
namespace {

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
// Frames a paused host NIC holds before the switch stops reading that host's TAP.
constexpr size_t kHostHoldFrames = 512;
constexpr size_t kMaxClients = 16;
constexpr size_t kMaxRequest = 64 * 1024;
constexpr size_t kMaxFlowlets = 1 << 16;

const char* actionName(WatchdogAction a) {
  switch (a) {
    case WatchdogAction::drop: return "drop";
    case WatchdogAction::forward: return "forward";
    default: return "alert";
  }
}

Result<WatchdogAction> parseAction(const std::string& s) {
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
  uint64_t stormGaps = 0;  // gaps in received PFC longer than the maximum pause time
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
    if (cfg_.dscpMap.size() == 64)
      std::copy(cfg_.dscpMap.begin(), cfg_.dscpMap.end(), dscp_.begin());
    else
      dscp_ = defaultDscpMap();
    adaptive_ = cfg_.routing == "adaptive";
  }

  Result<void> build() {
    double linkRate = cfg_.linkRateBps > 0 ? cfg_.linkRateBps : cfg_.rateBps;
    if (cfg_.spines == 0) {
      switches_.push_back(Switch{"switch", Role::single, {}, {}, {}, 0, {}});
      for (const auto& h : cfg_.hosts)
        if (auto r = addHost(0, h); !r) return r;
      return {};
    }
    int leaves = cfg_.leaves;
    if (leaves < 1 || size_t(leaves) > cfg_.hosts.size() || cfg_.hosts.size() % size_t(leaves) != 0)
      return makeError("leaf-spine: " + std::to_string(cfg_.hosts.size()) +
                       " host(s) do not divide evenly into " + std::to_string(leaves) + " leaves");
    size_t perLeaf = cfg_.hosts.size() / size_t(leaves);
    for (int l = 0; l < leaves; l++)
      switches_.push_back(Switch{"leaf" + std::to_string(l + 1), Role::leaf, {}, {}, {}, 0, {}});
    for (int s = 0; s < cfg_.spines; s++)
      switches_.push_back(Switch{"spine" + std::to_string(s + 1), Role::spine, {}, {}, {}, 0, {}});
    for (size_t i = 0; i < cfg_.hosts.size(); i++)
      if (auto r = addHost(int(i / perLeaf), cfg_.hosts[i]); !r) return r;
    for (int l = 0; l < leaves; l++) {
      for (int s = 0; s < cfg_.spines; s++) {
        int spineSw = leaves + s;
        int a = addPort(l, switches_[size_t(l)].name + ":" + switches_[size_t(spineSw)].name, linkRate);
        int b = addPort(spineSw, switches_[size_t(spineSw)].name + ":" + switches_[size_t(l)].name, linkRate);
        ports_[size_t(a)].peer = b;
        ports_[size_t(b)].peer = a;
        int li = int(links_.size());
        links_.push_back(Link{switches_[size_t(l)].name + "-" + switches_[size_t(spineSw)].name, a, b, true, 0});
        ports_[size_t(a)].link = li;
        ports_[size_t(b)].link = li;
        switches_[size_t(l)].uplinks.push_back(a);
        switches_[size_t(spineSw)].downlinkToLeaf[l] = b;
      }
    }
    return {};
  }

  // ---- data plane ------------------------------------------------------------------------

  // A frame read from a host's TAP: the host NIC model holds it while the switch pauses
  // that host for its priority (a TAP host ignores PFC, so the switch honours it for it).
  void fromHost(int pi, std::vector<uint8_t> data, int64_t now) {
    Port& p = ports_[size_t(pi)];
    if (data.size() < 14) return;
    if (!pfc::parse(data.data(), data.size()).has_value() && !isMulticast(data.data() + 6)) {
      Mac src;
      std::memcpy(src.data(), data.data() + 6, 6);
      macTable_[src] = pi;
    }
    int prio = classify(data.data(), data.size(), dscp_);
    Queue& q = p.q[prio];
    if ((q.hostPausedUntil > now || !q.hold.empty()) && !pfc::parse(data.data(), data.size())) {
      q.hold.push_back(std::move(data));
      p.held++;
      return;
    }
    receive(pi, std::move(data), now);
  }

  // A frame arriving at port pi (from its host or its peer switch).
  void receive(int pi, std::vector<uint8_t> data, int64_t now) {
    Port& p = ports_[size_t(pi)];
    p.rxFrames++;
    p.rxBytes += data.size();
    if (!portUp(pi) || data.size() < 14 || data.size() > size_t(p.mtu) + 18) {
      p.rxDrops++;
      return;
    }
    if (auto f = pfc::parse(data.data(), data.size())) {
      onPfc(pi, *f, now);
      return;
    }
    int prio = classify(data.data(), data.size(), dscp_);
    std::vector<int> out;
    route(pi, data, now, out);
    if (out.empty()) {
      p.noRoute++;
      return;
    }
    for (size_t i = 0; i < out.size(); i++) {
      Packet pkt;
      pkt.data = (i + 1 == out.size()) ? std::move(data) : data;
      pkt.inPort = pi;
      pkt.prio = prio;
      enqueue(out[i], std::move(pkt), now);
    }
  }

  void enqueue(int ei, Packet pkt, int64_t now) {
    Port& e = ports_[size_t(ei)];
    Queue& q = e.q[pkt.prio];
    Switch& sw = switches_[size_t(e.sw)];
    size_t len = pkt.data.size();
    if (!portUp(ei)) {
      q.stats.drops++;
      return;
    }
    if (q.storm && q.wd.action == WatchdogAction::drop) {
      q.stats.wdDrops++;
      return;
    }
    bool lossless = cfg_.losslessMask & (1u << pkt.prio);
    // Lossless traffic is never dropped: PFC keeps it within the buffer plus headroom.
    if (!lossless && (q.bytes + len > cfg_.lossyQueueBytes || sw.bufferUsed + len > cfg_.bufferBytes)) {
      q.stats.drops++;
      return;
    }
    if (q.ecn.enabled && q.bytes > q.ecn.kminBytes &&
        ecnOf(pkt.data.data(), len) == Ecn::ect) {
      double prob = 1.0;
      if (q.bytes < q.ecn.kmaxBytes)
        prob = q.ecn.pmax * double(q.bytes - q.ecn.kminBytes) /
               double(std::max<uint64_t>(1, q.ecn.kmaxBytes - q.ecn.kminBytes));
      if (std::uniform_real_distribution<double>(0, 1)(rng_) < prob &&
          markCe(pkt.data.data(), len))
        q.stats.ecnMarked++;
    }
    q.bytes += len;
    q.stats.maxDepth = std::max(q.stats.maxDepth, q.bytes);
    sw.bufferUsed += len;
    Queue& in = ports_[size_t(pkt.inPort)].q[pkt.prio];
    in.ingressBytes += len;
    if (lossless && !in.xoff && in.ingressBytes > in.pfc.xoffBytes) sendPfc(pkt.inPort, pkt.prio, true, now);
    q.frames.push_back(std::move(pkt));
  }

  bool queueReady(const Port& p, int prio, int64_t now) const {
    const Queue& q = p.q[prio];
    if (q.frames.empty()) return false;
    if (q.pausedUntil <= now) return true;
    // The watchdog's forward and drop actions both ignore the pause of a stormed queue.
    return q.storm && q.wd.action != WatchdogAction::alert;
  }

  // Strict priority for 7 and 6 (network control, CNP); deficit round robin for 0..5 with
  // equal weights (quantum = one MTU).
  int pickQueue(Port& p, int64_t now) {
    for (int prio : {7, 6})
      if (queueReady(p, prio, now)) return prio;
    bool any = false;
    for (int i = 0; i < 6; i++) any |= queueReady(p, i, now);
    if (!any) return -1;
    for (int round = 0; round < 64; round++) {
      int i = p.drrNext;
      Queue& q = p.q[i];
      if (queueReady(p, i, now)) {
        if (q.deficit >= int64_t(q.frames.front().data.size())) return i;
        q.deficit += p.mtu + 18;
      } else {
        q.deficit = 0;
      }
      p.drrNext = (i + 1) % 6;
    }
    return -1;
  }

  void transmit(int pi, int prio, int64_t now) {
    Port& p = ports_[size_t(pi)];
    Queue& q = p.q[prio];
    Packet pkt = std::move(q.frames.front());
    q.frames.pop_front();
    size_t len = pkt.data.size();
    if (prio < 6) q.deficit -= int64_t(len);
    release(p, q, pkt, now);
    // An idle port starts its schedule now; a busy one continues its own schedule.
    double base = p.busy ? std::max(p.nextTxNs, double(now - kTxCatchUpNs)) : std::max(p.nextTxNs, double(now));
    p.busy = true;
    p.nextTxNs = base + double(len + kWireOverhead) * 8e9 / p.rateBps;
    q.stats.txFrames++;
    q.stats.txBytes += len;
    p.txFrames++;
    p.txBytes += len;
    p.windowTxBytes += len;
    if (!meters_.empty()) meterTx(pi, pkt.data, now);
    deliver(pi, std::move(pkt.data), now);
  }

  void deliver(int pi, std::vector<uint8_t> data, int64_t now) {
    Port& p = ports_[size_t(pi)];
    if (p.io) {
      p.io->write(data.data(), data.size());
    } else if (p.peer >= 0) {
      receive(p.peer, std::move(data), now);
    }
  }

  // Returns a frame's bytes to the buffer and its ingress account; resumes at xon.
  void release(Port& e, Queue& q, const Packet& pkt, int64_t now) {
    size_t len = pkt.data.size();
    q.bytes -= len;
    switches_[size_t(e.sw)].bufferUsed -= len;
    Queue& in = ports_[size_t(pkt.inPort)].q[pkt.prio];
    in.ingressBytes -= len;
    if (in.xoff && in.ingressBytes <= in.pfc.xonBytes) sendPfc(pkt.inPort, pkt.prio, false, now);
  }

  void sendPfc(int pi, int prio, bool pause, int64_t now) {
    Port& p = ports_[size_t(pi)];
    Queue& q = p.q[prio];
    pfc::Frame f;
    f.enableVector = uint16_t(1u << prio);
    f.quanta[size_t(prio)] = pause ? 0xffff : 0;
    uint8_t frame[pfc::kFrameSize];
    pfc::build(frame, p.mac.data(), f);
    if (pause && !q.xoff) q.xoffSince = now;
    if (!pause && q.xoff) q.stats.xoffNs += now - q.xoffSince;
    q.xoff = pause;
    int64_t pauseNs = pfc::quantaToNs(0xffff, p.rateBps);
    // Refreshed at half the pause time while above xoff, as a NIC or switch does.
    q.xoffRefreshAt = now + pauseNs / 2;
    q.stats.pfcTx++;
    if (p.io) {
      p.io->write(frame, sizeof frame);
      q.hostPausedUntil = pause ? now + pauseNs : 0;
      if (!pause) releaseHeld(pi, now);
    } else if (p.peer >= 0) {
      receive(p.peer, std::vector<uint8_t>(frame, frame + sizeof frame), now);
    }
  }

  void onPfc(int pi, const pfc::Frame& f, int64_t now) {
    Port& p = ports_[size_t(pi)];
    for (int prio = 0; prio < kPriorities; prio++) {
      if (!(f.enableVector & (1u << prio))) continue;
      Queue& q = p.q[prio];
      q.stats.pfcRx++;
      if (!q.pfcRxActive) event(now, "pfc_rx_start", p.name, prio);
      // Storm quality: a gap longer than the longest pause at this port's rate left the port
      // free to send, so the storm did not hold it paused throughout.
      if (q.pfcRxActive && now - q.lastPfcRx > pfc::quantaToNs(0xffff, p.rateBps)) q.stats.stormGaps++;
      q.pfcRxActive = true;
      q.lastPfcRx = now;
      if (!(cfg_.losslessMask & (1u << prio))) continue;  // PFC is off for lossy priorities
      if (q.storm && q.wd.action != WatchdogAction::alert) continue;  // the watchdog ignores it
      uint16_t quanta = f.quanta[size_t(prio)];
      if (q.pausedUntil > now) {
        q.stats.pausedNs += now - q.pauseStart;
      } else if (q.pausedUntil > q.pauseStart) {
        q.stats.pausedNs += q.pausedUntil - q.pauseStart;
      }
      q.pauseStart = now;
      q.pausedUntil = quanta == 0 ? now : now + pfc::quantaToNs(quanta, p.rateBps);
    }
  }

  // Time this switch has held the upstream of (port, priority) in XOFF: ground truth for "the
  // pause spread to this port's sender".
  static int64_t xoffNs(const Queue& q, int64_t now) { return q.stats.xoffNs + (q.xoff ? now - q.xoffSince : 0); }

  int64_t pausedNs(const Queue& q, int64_t now) const {
    int64_t open = q.pausedUntil > q.pauseStart ? std::min(now, q.pausedUntil) - q.pauseStart : 0;
    return q.stats.pausedNs + std::max<int64_t>(0, open);
  }

  void releaseHeld(int pi, int64_t now) {
    Port& p = ports_[size_t(pi)];
    for (int prio = 0; prio < kPriorities; prio++) {
      Queue& q = p.q[prio];
      while (!q.hold.empty() && q.hostPausedUntil <= now) {
        auto data = std::move(q.hold.front());
        q.hold.pop_front();
        p.held--;
        receive(pi, std::move(data), now);
      }
    }
  }

  // ---- routing -------------------------------------------------------------------------

  bool portUp(int pi) const {
    const Port& p = ports_[size_t(pi)];
    if (!p.adminUp) return false;
    return p.peer < 0 || ports_[size_t(p.peer)].adminUp;
  }

  // A leaf's uplink as a next hop towards dstLeaf (-1: any leaf, e.g. for flooding). ECMP
  // (routed) knows link states from routing, `convergence` after a change. Adaptive routing
  // sees its own ports at once, and the spines' downlinks too: AI fabrics' adaptive routing
  // carries remote link faults in the data plane (InfiniBand's fault routing notifications,
  // Spectrum-X), so a leaf stops sending towards a spine that lost the destination leaf.
  bool usable(int uplink, int dstLeaf, bool routed) const {
    const Port& up = ports_[size_t(uplink)];
    const Link& l = links_[size_t(up.link)];
    if (!(routed ? l.routedUp : portUp(uplink))) return false;
    if (dstLeaf < 0) return true;
    const Switch& spine = switches_[size_t(ports_[size_t(up.peer)].sw)];
    auto it = spine.downlinkToLeaf.find(dstLeaf);
    if (it == spine.downlinkToLeaf.end()) return false;
    return routed ? links_[size_t(ports_[size_t(it->second)].link)].routedUp : portUp(it->second);
  }

  int pickUplink(Switch& sw, const std::vector<uint8_t>& data, int dstLeaf, int64_t now) {
    uint32_t h = flowHash(data.data(), data.size());
    std::vector<int> cands;
    for (int u : sw.uplinks)
      if (usable(u, dstLeaf, !adaptive_)) cands.push_back(u);
    if (cands.empty()) return -1;
    if (!adaptive_) return cands[h % cands.size()];
    auto it = sw.flowlets.find(h);
    if (it != sw.flowlets.end() && now - it->second.last < cfg_.flowletGapNs &&
        std::find(cands.begin(), cands.end(), it->second.port) != cands.end()) {
      it->second.last = now;
      return it->second.port;
    }
    // A new flowlet goes to the least-loaded uplink: queued bytes plus what it sent in the
    // last poll interval.
    int best = cands[h % cands.size()];
    uint64_t bestLoad = UINT64_MAX;
    for (int u : cands) {
      const Port& p = ports_[size_t(u)];
      uint64_t load = p.lastWindowTxBytes + p.windowTxBytes;
      for (const auto& q : p.q) load += q.bytes;
      if (load < bestLoad) {
        bestLoad = load;
        best = u;
      }
    }
    if (sw.flowlets.size() >= kMaxFlowlets) sw.flowlets.clear();
    sw.flowlets[h] = Flowlet{best, now};
    return best;
  }

  void route(int inPort, const std::vector<uint8_t>& data, int64_t now, std::vector<int>& out) {
    const Port& in = ports_[size_t(inPort)];
    Switch& sw = switches_[size_t(in.sw)];
    int dst = -1;
    if (!isMulticast(data.data())) {
      Mac m;
      std::memcpy(m.data(), data.data(), 6);
      if (auto it = macTable_.find(m); it != macTable_.end()) dst = it->second;
    }
    if (dst >= 0) {
      int dstSw = ports_[size_t(dst)].sw;
      if (dstSw == in.sw) {
        if (dst != inPort) out.push_back(dst);
      } else if (sw.role == Role::leaf) {
        if (int u = pickUplink(sw, data, dstSw, now); u >= 0) out.push_back(u);
      } else if (sw.role == Role::spine) {
        auto it = sw.downlinkToLeaf.find(dstSw);
        if (it != sw.downlinkToLeaf.end() && it->second != inPort) out.push_back(it->second);
      }
      return;
    }
    // Flooding along a tree, so the leaf-spine has no loop: a leaf floods its hosts and,
    // for frames from its own hosts, one uplink; a spine floods every other leaf.
    for (int h : sw.hostPorts)
      if (h != inPort) out.push_back(h);
    if (sw.role == Role::leaf && in.isHost()) {
      if (int u = pickUplink(sw, data, -1, now); u >= 0) out.push_back(u);
    } else if (sw.role == Role::spine) {
      for (auto& [leaf, port] : sw.downlinkToLeaf)
        if (port != inPort && links_[size_t(ports_[size_t(port)].link)].routedUp) out.push_back(port);
    }
  }

  // ---- periodic work (watchdog poll interval) ------------------------------------------

  void meterTx(int pi, const std::vector<uint8_t>& data, int64_t now) {
    int dst = -2;
    for (auto& m : meters_) {
      if (m.port != pi) continue;
      if (dst == -2) dst = l4DstPort(data.data(), data.size());
      if (dst != m.l4Dst) continue;
      if (!m.active) {
        m.active = true;
        event(now, "flow_start", ports_[size_t(pi)].name, 0, m.l4Dst);
      }
      if (m.firstNs == 0) m.firstNs = now;
      m.lastNs = now;
      m.frames++;
      m.bytes += data.size();
    }
  }

  void tick(int64_t now) {
    for (auto& m : meters_)
      if (m.active && now - m.lastNs > kMeterGapNs) {
        m.active = false;
        event(m.lastNs, "flow_end", ports_[size_t(m.port)].name, 0, m.l4Dst);
      }
    for (size_t pi = 0; pi < ports_.size(); pi++) {
      Port& p = ports_[pi];
      p.lastWindowTxBytes = p.windowTxBytes;
      p.windowTxBytes = 0;
      for (int prio = 0; prio < kPriorities; prio++) {
        Queue& q = p.q[prio];
        if (q.xoff && now >= q.xoffRefreshAt) sendPfc(int(pi), prio, true, now);
        // An episode of received PFC (a storm) ends when the watchdog's restoration time passed
        // without a frame, as the watchdog itself judges it; its end is the last frame's instant.
        if (q.pfcRxActive && now - q.lastPfcRx > q.wd.restorationNs + cfg_.pollNs) {
          q.pfcRxActive = false;
          event(q.lastPfcRx, "pfc_rx_end", p.name, prio);
        }
        watchdog(int(pi), prio, now);
      }
      if (p.held) releaseHeld(int(pi), now);
    }
    for (auto& l : links_) {
      bool up = portUp(l.a);
      if (up != l.routedUp) {
        if (l.routeChangeAt == 0) l.routeChangeAt = now + cfg_.convergenceNs;
        if (now >= l.routeChangeAt) {
          l.routedUp = up;
          l.routeChangeAt = 0;
          log::info("routing: link {} is now {} in the next-hop tables", l.name, up ? "up" : "down");
        }
      } else {
        l.routeChangeAt = 0;
      }
    }
  }

  // SONiC's PFC watchdog: a queue that stays paused with frames waiting for the detection
  // time is in a storm; the storm ends when no PFC arrived for the restoration time.
  void watchdog(int pi, int prio, int64_t now) {
    Port& p = ports_[size_t(pi)];
    Queue& q = p.q[prio];
    if (!q.wd.enabled) {
      if (q.storm) endStorm(p, q, prio, now, "watchdog disabled");
      q.stalledSince = 0;
      return;
    }
    if (q.storm) {
      if (now - q.lastPfcRx >= q.wd.restorationNs) endStorm(p, q, prio, now, "restored");
      return;
    }
    bool stalled = q.pausedUntil > now && !q.frames.empty();
    if (!stalled) {
      q.stalledSince = 0;
      return;
    }
    if (q.stalledSince == 0) q.stalledSince = now;
    if (now - q.stalledSince < q.wd.detectionNs) return;
    q.storm = true;
    q.stats.wdStorms++;
    event(now, "wd_detect", p.name, prio);
    log::warn("PFC watchdog: storm detected on port {} priority {} (action {})", p.name, prio,
              actionName(q.wd.action));
    if (q.wd.action == WatchdogAction::alert) return;
    if (q.pausedUntil > now) {
      q.stats.pausedNs += now - q.pauseStart;
      q.pausedUntil = q.pauseStart = now;
    }
    if (q.wd.action == WatchdogAction::drop) {
      while (!q.frames.empty()) {
        Packet pkt = std::move(q.frames.front());
        q.frames.pop_front();
        release(p, q, pkt, now);
        q.stats.wdDrops++;
      }
    }
  }

  void endStorm(Port& p, Queue& q, int prio, int64_t now, const char* why) {
    (void)now;
    q.storm = false;
    q.stalledSince = 0;
    q.stats.wdRestored++;
    event(now, "wd_restore", p.name, prio);
    log::info("PFC watchdog: port {} priority {} {}", p.name, prio, why);
  }

  // Records an event at monotonic instant AT (now or earlier), with the wall clock of that
  // instant, so the controller on the same host can place it on its run timeline.
  int64_t wallOf(int64_t mono) const {
    int64_t wallNowNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    return wallNowNs - (monoNs() - mono);
  }

  void event(int64_t at, const char* what, const std::string& port, int prio, int l4Dst = -1) {
    FabricEvent e{++eventSeq_, at, wallOf(at), what, port, prio, l4Dst};
    events_.push_back(std::move(e));
    if (events_.size() > kMaxEvents) events_.pop_front();
  }

  json eventsCmd(const json& req) {
    uint64_t since = 0;
    if (req.contains("since")) {
      if (!req["since"].is_number_unsigned()) return err("'since' must be an event sequence number (>= 0)");
      since = req["since"].get<uint64_t>();
    }
    json out = json::array();
    for (const auto& e : events_)
      if (e.seq > since) {
        out.push_back({{"seq", e.seq}, {"mono_ns", e.monoNs}, {"wall_ns", e.wallNs}, {"what", e.what},
                       {"port", e.port}, {"priority", e.prio}});
        if (e.l4Dst >= 0) out.back()["l4_dst"] = e.l4Dst;
      }
    return {{"ok", true}, {"last_seq", eventSeq_}, {"events", out}};
  }

  // set_meter {port, l4_dst}: meter (again, from zero) the frames leaving PORT for that TCP/UDP
  // port; del_meter {port, l4_dst}; meters: every meter with its counts and first/last frame.
  json meterCmd(const json& req, const std::string& cmd) {
    if (cmd == "meters") {
      json out = json::array();
      for (const auto& m : meters_)
        out.push_back({{"port", ports_[size_t(m.port)].name}, {"l4_dst", m.l4Dst}, {"frames", m.frames},
                       {"bytes", m.bytes}, {"active", m.active},
                       {"first_wall_ns", m.firstNs ? json(wallOf(m.firstNs)) : json(nullptr)},
                       {"last_wall_ns", m.lastNs ? json(wallOf(m.lastNs)) : json(nullptr)}});
      return {{"ok", true}, {"meters", out}};
    }
    if (!req.contains("port") || !req["port"].is_string() || req["port"] == "*")
      return err(cmd + " needs one 'port' (a switch port name)");
    if (!req.contains("l4_dst") || !req["l4_dst"].is_number_integer() || req["l4_dst"].get<int64_t>() < 1 ||
        req["l4_dst"].get<int64_t>() > 65535)
      return err(cmd + " needs 'l4_dst', a TCP/UDP port 1..65535");
    auto ports = selectPorts(req);
    if (!ports) return err(ports.error().message);
    int pi = (*ports)[0], l4 = req["l4_dst"].get<int>();
    auto it = std::find_if(meters_.begin(), meters_.end(), [&](const Meter& m) { return m.port == pi && m.l4Dst == l4; });
    if (cmd == "del_meter") {
      if (it == meters_.end()) return err("no meter on port " + ports_[size_t(pi)].name + " for " + std::to_string(l4));
      meters_.erase(it);
      return {{"ok", true}};
    }
    if (it == meters_.end()) {
      if (meters_.size() >= kMaxMeters)
        return err("at most " + std::to_string(kMaxMeters) + " meters (del_meter one first)");
      meters_.push_back(Meter{pi, l4});
    } else {
      *it = Meter{pi, l4};
    }
    return {{"ok", true}};
  }

  // ---- control ----------------------------------------------------------------------------

  json handle(const json& req) {
    try {
      if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
        return err("a request is a JSON object with a string 'cmd'");
      std::string cmd = req["cmd"];
      int64_t now = monoNs();
      if (cmd == "ping") return {{"ok", true}, {"switch", "rdmachaos-labswitch"}, {"version", 1}};
      if (cmd == "topology") return topology();
      if (cmd == "counters") return counters(req, now);
      if (cmd == "events") return eventsCmd(req);
      if (cmd == "set_meter" || cmd == "del_meter" || cmd == "meters") return meterCmd(req, cmd);
      if (cmd == "reset_counters") {
        for (auto& p : ports_) {
          p.rxFrames = p.rxBytes = p.txFrames = p.txBytes = p.rxDrops = p.noRoute = 0;
          for (auto& q : p.q) {
            int64_t open = pausedNs(q, now) - q.stats.pausedNs;
            int64_t openXoff = xoffNs(q, now) - q.stats.xoffNs;
            q.stats = QueueStats{};
            q.stats.pausedNs = -open;  // paused time so far in an open interval is not counted
            q.stats.xoffNs = -openXoff;
            q.stats.maxDepth = q.bytes;
          }
        }
        return {{"ok", true}};
      }
      if (cmd == "get_ecn" || cmd == "set_ecn") return ecn(req, cmd == "set_ecn");
      if (cmd == "get_pfc" || cmd == "set_pfc") return pfcCmd(req, cmd == "set_pfc");
      if (cmd == "get_watchdog" || cmd == "set_watchdog") return wdCmd(req, cmd == "set_watchdog");
      if (cmd == "get_link" || cmd == "set_link") return linkCmd(req, cmd == "set_link", now);
      if (cmd == "get_port" || cmd == "set_port") return portCmd(req, cmd == "set_port");
      if (cmd == "get_routing") return {{"ok", true}, {"mode", adaptive_ ? "adaptive" : "ecmp"}};
      if (cmd == "set_routing") {
        std::string m = req.value("mode", "");
        if (m != "ecmp" && m != "adaptive") return err("routing mode '" + m + "' is not ecmp or adaptive");
        std::string prev = adaptive_ ? "adaptive" : "ecmp";
        adaptive_ = m == "adaptive";
        for (auto& s : switches_) s.flowlets.clear();
        return {{"ok", true}, {"previous", prev}, {"mode", m}};
      }
      return err("unknown command '" + cmd + "' (ping, topology, counters, events, set_meter, del_meter, meters, reset_counters, get_ecn, set_ecn, get_pfc, set_pfc, get_watchdog, set_watchdog, get_link, set_link, get_port, set_port, get_routing, set_routing)");
    } catch (const std::exception& e) {
      return err(std::string("bad request: ") + e.what());
    }
  }

  static json err(const std::string& m) { return {{"ok", false}, {"error", m}}; }

  // Ports named by `port` ("*" or absent = all).
  Result<std::vector<int>> selectPorts(const json& req) const {
    std::string name = req.value("port", "*");
    std::vector<int> out;
    for (size_t i = 0; i < ports_.size(); i++)
      if (name == "*" || ports_[i].name == name) out.push_back(int(i));
    if (out.empty()) {
      std::string names;
      for (const auto& p : ports_) names += (names.empty() ? "" : ", ") + p.name;
      return makeError("no port '" + name + "' (ports: " + names + ")");
    }
    return out;
  }

  Result<std::vector<int>> selectPrios(const json& req, const char* key) const {
    if (!req.contains(key)) return std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
    int p = req[key].get<int>();
    if (p < 0 || p >= kPriorities) return makeError(std::string(key) + " must be 0..7");
    return std::vector<int>{p};
  }

  json topology() const {
    json sw = json::array();
    for (const auto& s : switches_) {
      json ps = json::array();
      for (size_t i = 0; i < ports_.size(); i++)
        if (&switches_[size_t(ports_[i].sw)] == &s) ps.push_back(ports_[i].name);
      sw.push_back({{"name", s.name},
                    {"role", s.role == Role::leaf ? "leaf" : s.role == Role::spine ? "spine" : "single"},
                    {"ports", ps}});
    }
    json ls = json::array();
    for (const auto& l : links_)
      ls.push_back({{"name", l.name}, {"a", ports_[size_t(l.a)].name}, {"b", ports_[size_t(l.b)].name},
                    {"up", portUp(l.a)}, {"routed_up", l.routedUp}});
    return {{"ok", true}, {"switches", sw}, {"links", ls}, {"routing", adaptive_ ? "adaptive" : "ecmp"}};
  }

  json counters(const json& req, int64_t now) {
    auto sel = selectPorts(req);
    if (!sel) return err(sel.error().message);
    json ports = json::array();
    for (int pi : *sel) {
      Port& p = ports_[size_t(pi)];
      json qs = json::array();
      for (int prio = 0; prio < kPriorities; prio++) {
        Queue& q = p.q[prio];
        qs.push_back({{"queue", prio}, {"depth_bytes", q.bytes}, {"depth_frames", q.frames.size()},
                      {"max_depth_bytes", q.stats.maxDepth}, {"tx_frames", q.stats.txFrames},
                      {"tx_bytes", q.stats.txBytes}, {"drops", q.stats.drops},
                      {"ecn_marked", q.stats.ecnMarked}, {"pfc_rx", q.stats.pfcRx},
                      {"pfc_tx", q.stats.pfcTx}, {"paused_ns", pausedNs(q, now)}, {"xoff_ns", xoffNs(q, now)},
                      {"storm_gaps", q.stats.stormGaps},
                      {"paused", q.pausedUntil > now}, {"ingress_bytes", q.ingressBytes},
                      {"xoff", q.xoff}, {"host_held", q.hold.size()},
                      {"wd_storms", q.stats.wdStorms}, {"wd_restored", q.stats.wdRestored},
                      {"wd_drops", q.stats.wdDrops}, {"wd_storm", q.storm}});
      }
      ports.push_back({{"name", p.name}, {"switch", switches_[size_t(p.sw)].name},
                       {"admin_up", p.adminUp}, {"up", portUp(pi)}, {"rate_bps", p.rateBps},
                       {"rx_frames", p.rxFrames}, {"rx_bytes", p.rxBytes}, {"rx_drops", p.rxDrops},
                       {"no_route", p.noRoute}, {"tx_frames", p.txFrames}, {"tx_bytes", p.txBytes},
                       {"queues", qs}});
    }
    return {{"ok", true}, {"now_ns", now}, {"ports", ports}};
  }

  static json ecnJson(const EcnProfile& e) {
    return {{"enabled", e.enabled}, {"kmin", e.kminBytes}, {"kmax", e.kmaxBytes}, {"pmax", e.pmax}};
  }

  json ecn(const json& req, bool set) {
    auto sel = selectPorts(req);
    if (!sel) return err(sel.error().message);
    auto prios = selectPrios(req, "queue");
    if (!prios) return err(prios.error().message);
    json prev = json::array();
    for (int pi : *sel)
      for (int prio : *prios)
        prev.push_back({{"port", ports_[size_t(pi)].name}, {"queue", prio},
                        {"profile", ecnJson(ports_[size_t(pi)].q[prio].ecn)}});
    if (!set) return {{"ok", true}, {"profiles", prev}};
    for (int pi : *sel)
      for (int prio : *prios) {
        EcnProfile e = ports_[size_t(pi)].q[prio].ecn;
        if (req.contains("enabled")) e.enabled = req["enabled"].get<bool>();
        if (req.contains("kmin")) e.kminBytes = req["kmin"].get<uint64_t>();
        if (req.contains("kmax")) e.kmaxBytes = req["kmax"].get<uint64_t>();
        if (req.contains("pmax")) e.pmax = req["pmax"].get<double>();
        if (e.kminBytes > e.kmaxBytes) return err("kmin must not exceed kmax");
        if (!(e.pmax >= 0 && e.pmax <= 1)) return err("pmax must be within [0, 1]");
        ports_[size_t(pi)].q[prio].ecn = e;
      }
    return {{"ok", true}, {"previous", prev}};
  }

  json pfcCmd(const json& req, bool set) {
    auto sel = selectPorts(req);
    if (!sel) return err(sel.error().message);
    auto prios = selectPrios(req, "priority");
    if (!prios) return err(prios.error().message);
    json prev = json::array();
    for (int pi : *sel)
      for (int prio : *prios) {
        const auto& t = ports_[size_t(pi)].q[prio].pfc;
        prev.push_back({{"port", ports_[size_t(pi)].name}, {"priority", prio},
                        {"xoff", t.xoffBytes}, {"xon", t.xonBytes},
                        {"lossless", bool(cfg_.losslessMask & (1u << prio))}});
      }
    if (!set) return {{"ok", true}, {"thresholds", prev}};
    for (int pi : *sel)
      for (int prio : *prios) {
        auto& t = ports_[size_t(pi)].q[prio].pfc;
        PfcThreshold n = t;
        if (req.contains("xoff")) n.xoffBytes = req["xoff"].get<uint64_t>();
        if (req.contains("xon")) n.xonBytes = req["xon"].get<uint64_t>();
        if (n.xonBytes > n.xoffBytes) return err("xon must not exceed xoff");
        t = n;
      }
    return {{"ok", true}, {"previous", prev}};
  }

  json wdCmd(const json& req, bool set) {
    auto sel = selectPorts(req);
    if (!sel) return err(sel.error().message);
    auto prios = selectPrios(req, "priority");
    if (!prios) return err(prios.error().message);
    json prev = json::array();
    for (int pi : *sel)
      for (int prio : *prios) {
        const auto& w = ports_[size_t(pi)].q[prio].wd;
        prev.push_back({{"port", ports_[size_t(pi)].name}, {"priority", prio}, {"enabled", w.enabled},
                        {"detection_ms", double(w.detectionNs) / 1e6},
                        {"restoration_ms", double(w.restorationNs) / 1e6},
                        {"action", actionName(w.action)}});
      }
    if (!set) return {{"ok", true}, {"poll_ms", double(cfg_.pollNs) / 1e6}, {"watchdogs", prev}};
    WatchdogConfig base;
    for (int pi : *sel)
      for (int prio : *prios) {
        WatchdogConfig w = ports_[size_t(pi)].q[prio].wd;
        if (req.contains("enabled")) w.enabled = req["enabled"].get<bool>();
        if (req.contains("detection_ms")) w.detectionNs = int64_t(req["detection_ms"].get<double>() * 1e6);
        if (req.contains("restoration_ms")) w.restorationNs = int64_t(req["restoration_ms"].get<double>() * 1e6);
        if (req.contains("action")) {
          auto a = parseAction(req["action"].get<std::string>());
          if (!a) return err(a.error().message);
          w.action = *a;
        }
        if (w.detectionNs < 1'000'000 || w.restorationNs < 1'000'000 ||
            w.detectionNs > 60'000'000'000 || w.restorationNs > 60'000'000'000)
          return err("detection_ms and restoration_ms must be within [1, 60000]");
        ports_[size_t(pi)].q[prio].wd = w;
      }
    return {{"ok", true}, {"previous", prev}};
  }

  // Line rate and MTU per port.
  json portCmd(const json& req, bool set) {
    auto sel = selectPorts(req);
    if (!sel) return err(sel.error().message);
    json prev = json::array();
    for (int pi : *sel)
      prev.push_back({{"port", ports_[size_t(pi)].name}, {"rate_bps", ports_[size_t(pi)].rateBps},
                      {"mtu", ports_[size_t(pi)].mtu}});
    if (!set) return {{"ok", true}, {"ports", prev}};
    double rate = req.value("rate_bps", 0.0);
    int mtu = req.value("mtu", 0);
    if (req.contains("rate_bps") && !(rate >= 1e6 && rate <= 400e9)) return err("rate_bps must be within [1e6, 4e11]");
    if (req.contains("mtu") && (mtu < 68 || mtu > 9216)) return err("mtu must be within [68, 9216]");
    for (int pi : *sel) {
      if (rate > 0) ports_[size_t(pi)].rateBps = rate;
      if (mtu > 0) ports_[size_t(pi)].mtu = mtu;
    }
    return {{"ok", true}, {"previous", prev}};
  }

  json linkCmd(const json& req, bool set, int64_t now) {
    std::vector<int> sel;
    if (req.contains("link")) {
      std::string name = req["link"];
      for (const auto& l : links_)
        if (l.name == name) sel = {l.a, l.b};
      if (sel.empty()) return err("no inter-switch link '" + name + "'");
    } else {
      auto s = selectPorts(req);
      if (!s) return err(s.error().message);
      sel = *s;
    }
    json prev = json::array();
    for (int pi : sel) prev.push_back({{"port", ports_[size_t(pi)].name}, {"admin_up", ports_[size_t(pi)].adminUp}});
    if (!set) return {{"ok", true}, {"ports", prev}};
    bool up = req.at("up").get<bool>();
    for (int pi : sel) setAdmin(pi, up, now);
    return {{"ok", true}, {"previous", prev}};
  }

  void setAdmin(int pi, bool up, int64_t now) {
    Port& p = ports_[size_t(pi)];
    if (p.adminUp == up) return;
    p.adminUp = up;
    log::info("port {} admin {}", p.name, up ? "up" : "down");
    if (p.io) {
      // The host sees its NIC lose carrier, as with a real cable pull (TUNSETCARRIER, 5.0+).
      int carrier = up ? 1 : 0;
      ::ioctl(p.io->fd(), TUNSETCARRIER, &carrier);
    }
    if (!up) {
      // A down port drops what it queued; frames of its peer end are dropped the same way.
      for (int end : {pi, p.peer}) {
        if (end < 0) continue;
        Port& e = ports_[size_t(end)];
        for (auto& q : e.q) {
          while (!q.frames.empty()) {
            Packet pkt = std::move(q.frames.front());
            q.frames.pop_front();
            release(e, q, pkt, now);
            q.stats.drops++;
          }
        }
      }
    }
  }

  // ---- event loop ---------------------------------------------------------------------------

  Result<void> serve() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT}) sigaddset(&mask, s);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    UniqueFD sig(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    UniqueFD ep(::epoll_create1(EPOLL_CLOEXEC));
    txTimer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    UniqueFD pollTimer(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!sig.isValid() || !ep.isValid() || !txTimer_.isValid() || !pollTimer.isValid())
      return makeError(std::string("cannot create the event loop: ") + std::strerror(errno), errno);
    ep_ = ep.get();
    itimerspec period{};
    period.it_interval.tv_sec = cfg_.pollNs / 1'000'000'000;
    period.it_interval.tv_nsec = cfg_.pollNs % 1'000'000'000;
    period.it_value = period.it_interval;
    ::timerfd_settime(pollTimer.get(), 0, &period, nullptr);
    if (auto r = listenControl(); !r) return r;

    watch(sig.get(), kSignal);
    watch(txTimer_.get(), kTxTimer);
    watch(pollTimer.get(), kPollTimer);
    watch(control_.get(), kListen);
    for (size_t i = 0; i < ports_.size(); i++)
      if (ports_[i].io) watch(ports_[i].io->fd(), kPortBase + uint64_t(i));

    log::info("forwarding: {} switch(es), {} port(s), {} link(s), routing {}, control {}",
              switches_.size(), ports_.size(), links_.size(), adaptive_ ? "adaptive" : "ecmp",
              cfg_.control);
    std::vector<std::vector<uint8_t>> batch;
    epoll_event evs[64];
    for (;;) {
      int n = ::epoll_wait(ep_, evs, 64, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return makeError(std::string("epoll_wait: ") + std::strerror(errno), errno);
      }
      for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64;
        int64_t now = monoNs();
        if (tag == kSignal) {
          log::info("stopping on a signal");
          ::unlink(cfg_.control.c_str());
          return {};
        } else if (tag == kTxTimer) {
          uint64_t x;
          (void)!::read(txTimer_.get(), &x, sizeof x);
        } else if (tag == kPollTimer) {
          uint64_t x;
          (void)!::read(pollTimer.get(), &x, sizeof x);
          tick(now);
        } else if (tag == kListen) {
          accept();
        } else if (tag >= kClientBase && tag < kPortBase) {
          clientReadable(int(tag - kClientBase));
        } else if (tag >= kPortBase) {
          int pi = int(tag - kPortBase);
          batch.clear();
          auto got = ports_[size_t(pi)].io->readBatch(batch, kReadBatch);
          if (!got) {
            log::error("{}", got.error().message);
            // A guest that went away: stop watching its socket rather than spin on EOF.
            if (got.error().code == EPIPE) {
              Port& dead = ports_[size_t(pi)];
              ::epoll_ctl(ep_, EPOLL_CTL_DEL, dead.io->fd(), nullptr);
              dead.closed = true;
            }
            continue;
          }
          for (auto& f : batch) fromHost(pi, std::move(f), now);
        }
      }
      for (auto& p : ports_)
        if (p.io && !p.closed) p.io->flush();
      pump(monoNs());
      updateReading();
    }
  }

  void pump(int64_t now) {
    int64_t wake = INT64_MAX;
    // A frame delivered over an internal link can queue on a port served earlier in the
    // pass; passes repeat until nothing moves, and the last pass computes the wake-up.
    for (int pass = 0; pass < 8; pass++) {
      wake = INT64_MAX;
      bool moved = false;
      for (size_t pi = 0; pi < ports_.size(); pi++) {
        Port& p = ports_[pi];
        // PFC refreshes are due at half the pause time, which at high rates is far below
        // the poll interval: they are part of the transmit schedule.
        for (int prio = 0; prio < kPriorities; prio++) {
          Queue& q = p.q[prio];
          if (!q.xoff) continue;
          if (now >= q.xoffRefreshAt) sendPfc(int(pi), prio, true, now);
          wake = std::min(wake, q.xoffRefreshAt);
        }
        for (;;) {
          bool backlog = false;
          for (const auto& q : p.q) backlog |= !q.frames.empty();
          if (!backlog) {
            p.busy = false;
            break;
          }
          if (p.nextTxNs > double(now + kTxSlackNs)) {
            wake = std::min(wake, int64_t(p.nextTxNs) - kTxSlackNs);
            break;
          }
          int prio = pickQueue(p, now);
          if (prio < 0) {
            p.busy = false;
            // Everything waiting is paused: wake when the first pause ends.
            for (const auto& q : p.q)
              if (!q.frames.empty() && q.pausedUntil > now) wake = std::min(wake, q.pausedUntil);
            break;
          }
          transmit(int(pi), prio, now);
          moved = true;
        }
      }
      if (!moved) break;
      wake = std::min(wake, now + 1000);  // still moving after the last pass: come back soon
    }
    if (wake <= now) wake = now + 1000;
    itimerspec t{};
    if (wake != INT64_MAX) {
      t.it_value.tv_sec = wake / 1'000'000'000;
      t.it_value.tv_nsec = wake % 1'000'000'000;
    }
    ::timerfd_settime(txTimer_.get(), TFD_TIMER_ABSTIME, &t, nullptr);
  }

  // Stops reading a host whose NIC model holds too much, and resumes when it drained: the
  // host's own TAP queue then fills, which is what a paused NIC does to its host.
  void updateReading() {
    for (size_t pi = 0; pi < ports_.size(); pi++) {
      Port& p = ports_[pi];
      if (!p.io || p.closed) continue;
      bool want = p.held < kHostHoldFrames;
      if (want == p.reading) continue;
      p.reading = want;
      epoll_event ev{};
      ev.events = want ? uint32_t(EPOLLIN) : 0u;
      ev.data.u64 = kPortBase + pi;
      ::epoll_ctl(ep_, EPOLL_CTL_MOD, p.io->fd(), &ev);
    }
  }

  Result<void> listenControl() {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (cfg_.control.empty() || cfg_.control.size() >= sizeof sa.sun_path)
      return makeError("control socket path '" + cfg_.control + "' is empty or too long");
    std::strcpy(sa.sun_path, cfg_.control.c_str());
    control_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    ::unlink(cfg_.control.c_str());  // a previous instance's socket (restart after a crash)
    mode_t old = ::umask(077);
    int rc = ::bind(control_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::umask(old);
    if (rc != 0 || ::listen(control_.get(), 16) != 0)
      return makeError("cannot listen on control socket '" + cfg_.control + "': " + std::strerror(errno), errno);
    return {};
  }

  void accept() {
    UniqueFD c(::accept4(control_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.isValid()) return;
    size_t slot = 0;
    while (slot < clients_.size() && clients_[slot].fd.isValid()) slot++;
    if (slot == kMaxClients) return;  // refused: closing it tells the client
    if (slot == clients_.size()) clients_.emplace_back();
    clients_[slot].fd = std::move(c);
    clients_[slot].in.clear();
    watch(clients_[slot].fd.get(), kClientBase + slot);
  }

  void clientReadable(int slot) {
    Client& c = clients_[size_t(slot)];
    char buf[4096];
    ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      c.fd.reset();
      return;
    }
    c.in.append(buf, size_t(n));
    size_t nl;
    while ((nl = c.in.find('\n')) != std::string::npos) {
      std::string line = c.in.substr(0, nl);
      c.in.erase(0, nl + 1);
      json req = json::parse(line, nullptr, false);
      json resp = req.is_discarded() ? err("request is not valid JSON") : handle(req);
      std::string out = resp.dump() + "\n";
      if (!sendAll(c.fd.get(), out)) {
        c.fd.reset();
        return;
      }
    }
    if (c.in.size() > kMaxRequest) {
      sendAll(c.fd.get(), err("request longer than 64 KiB").dump() + "\n");
      c.fd.reset();
    }
  }

  static bool sendAll(int fd, const std::string& s) {
    size_t off = 0;
    int64_t deadline = monoNs() + 1'000'000'000;
    while (off < s.size()) {
      ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += size_t(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (monoNs() > deadline) return false;  // a client that does not read is dropped
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    }
    return true;
  }

  void watch(int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

 private:
  static constexpr uint64_t kSignal = 1, kTxTimer = 2, kPollTimer = 3, kListen = 4;
  static constexpr uint64_t kClientBase = 1000, kPortBase = 1'000'000;

  struct Client {
    UniqueFD fd;
    std::string in;
  };

  Result<void> addHost(int sw, const HostPort& h) {
    auto io = h.stream.empty() ? attachTap(h.netns, h.ifname) : connectStream(h.stream, h.name);
    if (!io) return makeError("host port " + h.name + ": " + io.error().message, io.error().code);
    int pi = addPort(sw, h.name, cfg_.rateBps);
    Port& p = ports_[size_t(pi)];
    p.io = std::move(io).value();
    Mac m = p.io->hostMac();
    if (m != Mac{}) macTable_[m] = pi;
    switches_[size_t(sw)].hostPorts.push_back(pi);
    return {};
  }

  int addPort(int sw, std::string name, double rate) {
    Port p;
    p.name = std::move(name);
    p.sw = sw;
    p.rateBps = rate;
    p.mtu = cfg_.mtu;
    int pi = int(ports_.size());
    // A locally administered address per port, for the PFC frames the port sends.
    p.mac = {0x02, 0x72, 0x63, uint8_t(sw), uint8_t(pi >> 8), uint8_t(pi)};
    for (auto& q : p.q) {
      q.ecn = cfg_.ecn;
      q.pfc = cfg_.pfc;
      q.wd = cfg_.watchdog;
    }
    ports_.push_back(std::move(p));
    return pi;
  }

  struct MacHash {
    size_t operator()(const Mac& m) const {
      size_t h = 0;
      for (uint8_t b : m) h = h * 131 + b;
      return h;
    }
  };

  Config cfg_;
  std::mt19937 rng_;
  DscpMap dscp_{};
  bool adaptive_ = false;
  std::vector<Switch> switches_;
  std::vector<Port> ports_;
  std::vector<Link> links_;
  std::unordered_map<Mac, int, MacHash> macTable_;
  UniqueFD control_, txTimer_;
  std::deque<FabricEvent> events_;
  std::vector<Meter> meters_;
  uint64_t eventSeq_ = 0;
  std::vector<Client> clients_;
  int ep_ = -1;
};

template <typename T>
T get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

}  // namespace

Result<Config> parseConfig(const json& j) {
  try {
    if (!j.is_object()) return makeError("switch configuration must be a JSON object");
    Config c;
    c.control = get<std::string>(j, "control", "");
    c.rateBps = get<double>(j, "rate_bps", c.rateBps);
    c.linkRateBps = get<double>(j, "link_rate_bps", 0);
    c.mtu = get<int>(j, "mtu", c.mtu);
    c.bufferBytes = get<uint64_t>(j, "buffer_bytes", c.bufferBytes);
    c.lossyQueueBytes = get<uint64_t>(j, "lossy_queue_bytes", c.lossyQueueBytes);
    c.leaves = get<int>(j, "leaves", 0);
    c.spines = get<int>(j, "spines", 0);
    c.routing = get<std::string>(j, "routing", c.routing);
    c.pollNs = int64_t(get<double>(j, "poll_ms", 10) * 1e6);
    c.convergenceNs = int64_t(get<double>(j, "convergence_ms", 500) * 1e6);
    c.flowletGapNs = int64_t(get<double>(j, "flowlet_gap_us", 500) * 1e3);
    c.seed = get<uint32_t>(j, "seed", 1);
    if (j.contains("lossless")) {
      c.losslessMask = 0;
      for (int p : j["lossless"].get<std::vector<int>>())
        if (p >= 0 && p < 8) c.losslessMask |= uint8_t(1u << p);
    }
    if (j.contains("ecn")) {
      const json& e = j["ecn"];
      c.ecn.enabled = get<bool>(e, "enabled", true);
      c.ecn.kminBytes = get<uint64_t>(e, "kmin", c.ecn.kminBytes);
      c.ecn.kmaxBytes = get<uint64_t>(e, "kmax", c.ecn.kmaxBytes);
      c.ecn.pmax = get<double>(e, "pmax", c.ecn.pmax);
    }
    if (j.contains("pfc")) {
      c.pfc.xoffBytes = get<uint64_t>(j["pfc"], "xoff", c.pfc.xoffBytes);
      c.pfc.xonBytes = get<uint64_t>(j["pfc"], "xon", c.pfc.xonBytes);
    }
    if (j.contains("watchdog")) {
      const json& w = j["watchdog"];
      c.watchdog.enabled = get<bool>(w, "enabled", true);
      c.watchdog.detectionNs = int64_t(get<double>(w, "detection_ms", 200) * 1e6);
      c.watchdog.restorationNs = int64_t(get<double>(w, "restoration_ms", 200) * 1e6);
      auto a = parseAction(get<std::string>(w, "action", "drop"));
      if (!a) return a.error();
      c.watchdog.action = *a;
    }
    if (j.contains("dscp_map")) c.dscpMap = j["dscp_map"].get<std::vector<uint8_t>>();
    for (const auto& h : j.value("hosts", json::array()))
      c.hosts.push_back(HostPort{h.at("name"), h.value("netns", ""), h.value("ifname", "data0"),
                                 h.value("stream", "")});
    if (c.control.empty()) return makeError("switch configuration lacks 'control' (socket path)");
    if (c.hosts.empty() || c.hosts.size() > 256) return makeError("switch configuration needs 1..256 hosts");
    if (!(c.rateBps >= 1e6 && c.rateBps <= 400e9)) return makeError("rate_bps must be within [1e6, 4e11]");
    if (c.mtu < 68 || c.mtu > 9216) return makeError("mtu must be within [68, 9216]");
    if (c.routing != "ecmp" && c.routing != "adaptive") return makeError("routing must be ecmp or adaptive");
    if (c.pollNs < 1'000'000 || c.pollNs > 1'000'000'000) return makeError("poll_ms must be within [1, 1000]");
    if (c.spines < 0 || c.spines > 16 || c.leaves < 0 || c.leaves > 64) return makeError("leaves/spines out of range");
    if (c.spines > 0 && c.leaves < 1) return makeError("a leaf-spine needs leaves >= 1");
    if (!c.dscpMap.empty() && c.dscpMap.size() != 64) return makeError("dscp_map needs 64 entries");
    return c;
  } catch (const std::exception& e) {
    return makeError(std::string("bad switch configuration: ") + e.what());
  }
}

Result<void> run(const Config& config) {
  Fabric f(config);
  if (auto r = f.build(); !r) return r;
  return f.serve();
}

}  // namespace rc::labswitch
