// The lab switch's data plane: building the fabric, queues, PFC, ECN, routing and the watchdog.
#include "labswitch/switch_fabric.hpp"

#include <fcntl.h>
#include <poll.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <sched.h>
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
#include "labswitch/switch_packet.hpp"
#include "labswitch/switch_port.hpp"

namespace rc::labswitch {

Result<void> Fabric::build() {
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

// A frame read from a host's TAP: the host NIC model holds it while the switch pauses
// that host for its priority (a TAP host ignores PFC, so the switch honours it for it).
void Fabric::fromHost(int pi, std::vector<uint8_t> data, int64_t now) {
  Port& p = ports_[size_t(pi)];
  if (data.size() < 14) return;
  if (!pfc::parse(data.data(), data.size()).has_value() && !isMulticast(data.data() + 6)) {
    Mac src;
    std::memcpy(src.data(), data.data() + 6, 6);
    macTable_[src] = pi;
  }
  int prio = classify(data.data(), data.size(), classes_);
  Queue& q = p.q[prio];
  if ((q.hostPausedUntil > now || !q.hold.empty()) && !pfc::parse(data.data(), data.size())) {
    q.hold.push_back(std::move(data));
    p.held++;
    return;
  }
  receive(pi, std::move(data), now);
}

// A frame arriving at port pi (from its host or its peer switch).
void Fabric::receive(int pi, std::vector<uint8_t> data, int64_t now) {
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
  int prio = classify(data.data(), data.size(), classes_);
  if (p.isHost() && packetRules_.watches(pi)) {
    std::vector<std::vector<uint8_t>> pass;
    packetRules_.process(pi, true, std::move(data), prio, now, wallOf(now), pass);
    for (auto& f : pass) forward(pi, std::move(f), prio, now);
    return;
  }
  forward(pi, std::move(data), prio, now);
}

void Fabric::forward(int pi, std::vector<uint8_t> data, int prio, int64_t now) {
  Port& p = ports_[size_t(pi)];
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

void Fabric::enqueue(int ei, Packet pkt, int64_t now) {
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

bool Fabric::queueReady(const Port& p, int prio, int64_t now) const {
  const Queue& q = p.q[prio];
  if (q.frames.empty()) return false;
  if (q.pausedUntil <= now) return true;
  // The watchdog's forward and drop actions both ignore the pause of a stormed queue.
  return q.storm && q.wd.action != WatchdogAction::alert;
}

// Strict priority for 7 and 6 (network control, CNP); deficit round robin for 0..5 with
// equal weights (quantum = one MTU).
int Fabric::pickQueue(Port& p, int64_t now) {
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

void Fabric::transmit(int pi, int prio, int64_t now) {
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

void Fabric::deliver(int pi, std::vector<uint8_t> data, int64_t now) {
  Port& p = ports_[size_t(pi)];
  if (p.io) {
    if (packetRules_.watches(pi)) {
      std::vector<std::vector<uint8_t>> pass;
      int prio = classify(data.data(), data.size(), classes_);
      packetRules_.process(pi, false, std::move(data), prio, now, wallOf(now), pass);
      for (auto& f : pass) p.io->write(f.data(), f.size());
      return;
    }
    p.io->write(data.data(), data.size());
  } else if (p.peer >= 0) {
    receive(p.peer, std::move(data), now);
  }
}

// Returns a frame's bytes to the buffer and its ingress account; resumes at xon.
void Fabric::release(Port& e, Queue& q, const Packet& pkt, int64_t now) {
  size_t len = pkt.data.size();
  q.bytes -= len;
  switches_[size_t(e.sw)].bufferUsed -= len;
  Queue& in = ports_[size_t(pkt.inPort)].q[pkt.prio];
  in.ingressBytes -= len;
  if (in.xoff && in.ingressBytes <= in.pfc.xonBytes) sendPfc(pkt.inPort, pkt.prio, false, now);
}

void Fabric::sendPfc(int pi, int prio, bool pause, int64_t now) {
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

void Fabric::onPfc(int pi, const pfc::Frame& f, int64_t now) {
  Port& p = ports_[size_t(pi)];
  for (int prio = 0; prio < kPriorities; prio++) {
    if (!(f.enableVector & (1u << prio))) continue;
    Queue& q = p.q[prio];
    q.stats.pfcRx++;
    if (!q.pfcRxActive) event(now, "pfc_rx_start", p.name, prio);
    uint16_t quanta = f.quanta[size_t(prio)];
    // Storm quality: a frame that arrives after the pause of the one before it ran out (its
    // own quanta at this port's rate) ends a gap in which the port was free to send, so the
    // storm did not hold it paused throughout. Counted whether or not this switch honours the
    // pause (lossy priority, watchdog): it judges the storm, not the switch. A resume frame
    // (0 quanta, e.g. a storm's revert) pauses nothing, so it ends no gap.
    if (quanta > 0 && q.pfcRxActive && now > q.rxPauseEnd) q.stats.stormGaps++;
    q.pfcRxActive = true;
    q.lastPfcRx = now;
    q.rxPauseEnd = now + pfc::quantaToNs(quanta, p.rateBps);
    if (!(cfg_.losslessMask & (1u << prio))) continue;  // PFC is off for lossy priorities
    if (q.storm && q.wd.action != WatchdogAction::alert) continue;  // the watchdog ignores it
    if (q.pausedUntil > now) {
      q.stats.pausedNs += now - q.pauseStart;
    } else if (q.pausedUntil > q.pauseStart) {
      q.stats.pausedNs += q.pausedUntil - q.pauseStart;
    }
    q.pauseStart = now;
    q.pausedUntil = quanta == 0 ? now : now + pfc::quantaToNs(quanta, p.rateBps);
  }
}

int64_t Fabric::pausedNs(const Queue& q, int64_t now) const {
  int64_t open = q.pausedUntil > q.pauseStart ? std::min(now, q.pausedUntil) - q.pauseStart : 0;
  return q.stats.pausedNs + std::max<int64_t>(0, open);
}

void Fabric::releaseHeld(int pi, int64_t now) {
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

bool Fabric::portUp(int pi) const {
  const Port& p = ports_[size_t(pi)];
  if (!p.adminUp) return false;
  return p.peer < 0 || ports_[size_t(p.peer)].adminUp;
}

// A leaf's uplink as a next hop towards dstLeaf (-1: any leaf, e.g. for flooding). ECMP
// (routed) knows link states from routing, `convergence` after a change. Adaptive routing
// sees its own ports at once, and the spines' downlinks too: AI fabrics' adaptive routing
// carries remote link faults in the data plane (InfiniBand's fault routing notifications,
// Spectrum-X), so a leaf stops sending towards a spine that lost the destination leaf.
bool Fabric::usable(int uplink, int dstLeaf, bool routed) const {
  const Port& up = ports_[size_t(uplink)];
  const Link& l = links_[size_t(up.link)];
  if (!(routed ? l.routedUp : portUp(uplink))) return false;
  if (dstLeaf < 0) return true;
  const Switch& spine = switches_[size_t(ports_[size_t(up.peer)].sw)];
  auto it = spine.downlinkToLeaf.find(dstLeaf);
  if (it == spine.downlinkToLeaf.end()) return false;
  return routed ? links_[size_t(ports_[size_t(it->second)].link)].routedUp : portUp(it->second);
}

int Fabric::pickUplink(Switch& sw, const std::vector<uint8_t>& data, int dstLeaf, int64_t now) {
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

void Fabric::route(int inPort, const std::vector<uint8_t>& data, int64_t now, std::vector<int>& out) {
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

void Fabric::meterTx(int pi, const std::vector<uint8_t>& data, int64_t now) {
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

void Fabric::updateChecksumVerify(int64_t now) {
  if (packetRules_.corruptsTcp()) verifyUntil_ = now + 1'000'000'000;
  const bool want = now < verifyUntil_;
  if (want == verifying_) return;
  verifying_ = want;
  for (auto& p : ports_)
    if (p.io) p.io->setVerifyChecksums(want);
}

void Fabric::tick(int64_t now) {
  updateChecksumVerify(now);
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
void Fabric::watchdog(int pi, int prio, int64_t now) {
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

void Fabric::endStorm(Port& p, Queue& q, int prio, int64_t now, const char* why) {
  (void)now;
  q.storm = false;
  q.stalledSince = 0;
  q.stats.wdRestored++;
  event(now, "wd_restore", p.name, prio);
  log::info("PFC watchdog: port {} priority {} {}", p.name, prio, why);
}

// Records an event at monotonic instant AT (now or earlier), with the wall clock of that
// instant, so the controller on the same host can place it on its run timeline.
int64_t Fabric::wallOf(int64_t mono) const {
  int64_t wallNowNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  return wallNowNs - (monoNs() - mono);
}

void Fabric::event(int64_t at, const char* what, const std::string& port, int prio, int l4Dst) {
  FabricEvent e{++eventSeq_, at, wallOf(at), what, port, prio, l4Dst};
  events_.push_back(std::move(e));
  if (events_.size() > kMaxEvents) events_.pop_front();
}

Result<void> Fabric::addHost(int sw, const HostPort& h) {
  const bool tap = h.stream.empty() && h.io != "packet";
  if (tap && cfg_.cpu >= 0 && cfg_.deliveryThread && !delivery_) {
    // The hosts' cores: every online core but the switch's (where `lab up --split-cores`
    // steers their receive work). On shared cores the switch writes itself: there the thread
    // cost the job 9 % of its frames for a loop 40 % less busy, and left free to run on the
    // switch's core too it made the loop busier (bench/delivery_thread.sh, bench/README.md).
    cpu_set_t cores;
    CPU_ZERO(&cores);
    const long n = std::min<long>(::sysconf(_SC_NPROCESSORS_ONLN), CPU_SETSIZE);
    for (long c = 0; c < n; c++)
      if (c != cfg_.cpu) CPU_SET(int(c), &cores);
    delivery_ = std::make_shared<HostDelivery>(cores);
  }
  auto io = !h.stream.empty()  ? connectStream(h.stream, h.name)
            : h.io == "packet" ? attachPacket(h.netns, h.ifname, h.hostNetns, cfg_.deliveryHoldNs)
                               : attachTap(h.netns, h.ifname, cfg_.offload, cfg_.deliveryHoldNs, delivery_);
  if (!io) return makeError("host port " + h.name + ": " + io.error().message, io.error().code);
  int pi = addPort(sw, h.name, cfg_.rateBps);
  Port& p = ports_[size_t(pi)];
  p.io = std::move(io).value();
  Mac m = p.io->hostMac();
  if (m != Mac{}) macTable_[m] = pi;
  switches_[size_t(sw)].hostPorts.push_back(pi);
  return {};
}

int Fabric::addPort(int sw, std::string name, double rate) {
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

}  // namespace rc::labswitch

namespace rc::labswitch {

void Fabric::releasePackets(int64_t now) {
  packetRules_.releaseDue(now, wallOf(now), [&](int pi, bool ingress, std::vector<uint8_t> f) {
    Port& p = ports_[size_t(pi)];
    if (ingress) {
      if (!portUp(pi)) return;
      int prio = classify(f.data(), f.size(), classes_);
      forward(pi, std::move(f), prio, now);
    } else if (p.io && !p.closed) {
      p.io->write(f.data(), f.size());
    }
  });
}

}  // namespace rc::labswitch
