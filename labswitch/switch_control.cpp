// The lab switch's control socket: the command table (switch_protocol.hpp's requests to their
// handlers), the handlers, and the socket's accept/read/reply loop.
#include "labswitch/switch_fabric.hpp"

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
#include "labswitch/switch_packet.hpp"
#include "labswitch/switch_port.hpp"

namespace rc::labswitch {

namespace sp = rc::swproto;

namespace {

// One row per command of switch_protocol.hpp: its name and the Fabric handler that answers it.
// The handler gets its request parsed (a malformed one is refused, naming the field) and
// returns its reply or the reason it refused.
struct Command {
  std::string_view name;
  json (*run)(Fabric& fabric, const json& request, int64_t now);
};

template <typename Request, auto Handler>
json run(Fabric& fabric, const json& request, int64_t now) {
  auto req = sp::parse<Request>(request);
  if (!req) return Fabric::err(req.error().message);
  auto reply = (fabric.*Handler)(*req, now);
  if (!reply) return Fabric::err(reply.error().message);
  return sp::toJson(*reply);
}

// In the order the unknown-command error lists them.
constexpr Command kCommands[] = {
    {.name = sp::cmd::ping, .run = run<sp::PingRequest, &Fabric::ping>},
    {.name = sp::cmd::topology, .run = run<sp::TopologyRequest, &Fabric::topology>},
    {.name = sp::cmd::counters, .run = run<sp::CountersRequest, &Fabric::counters>},
    {.name = sp::cmd::events, .run = run<sp::EventsRequest, &Fabric::events>},
    {.name = sp::cmd::setMeter, .run = run<sp::SetMeterRequest, &Fabric::setMeter>},
    {.name = sp::cmd::delMeter, .run = run<sp::DelMeterRequest, &Fabric::delMeter>},
    {.name = sp::cmd::meters, .run = run<sp::MetersRequest, &Fabric::meters>},
    {.name = sp::cmd::addPacketRule, .run = run<sp::AddPacketRuleRequest, &Fabric::addPacketRule>},
    {.name = sp::cmd::delPacketRule, .run = run<sp::DelPacketRuleRequest, &Fabric::delPacketRule>},
    {.name = sp::cmd::packetRules, .run = run<sp::PacketRulesRequest, &Fabric::packetRules>},
    {.name = sp::cmd::resetCounters, .run = run<sp::ResetCountersRequest, &Fabric::resetCounters>},
    {.name = sp::cmd::getEcn, .run = run<sp::GetEcnRequest, &Fabric::getEcn>},
    {.name = sp::cmd::setEcn, .run = run<sp::SetEcnRequest, &Fabric::setEcn>},
    {.name = sp::cmd::getPfc, .run = run<sp::GetPfcRequest, &Fabric::getPfc>},
    {.name = sp::cmd::setPfc, .run = run<sp::SetPfcRequest, &Fabric::setPfc>},
    {.name = sp::cmd::getWatchdog, .run = run<sp::GetWatchdogRequest, &Fabric::getWatchdog>},
    {.name = sp::cmd::setWatchdog, .run = run<sp::SetWatchdogRequest, &Fabric::setWatchdog>},
    {.name = sp::cmd::getLink, .run = run<sp::GetLinkRequest, &Fabric::getLink>},
    {.name = sp::cmd::setLink, .run = run<sp::SetLinkRequest, &Fabric::setLink>},
    {.name = sp::cmd::getPort, .run = run<sp::GetPortRequest, &Fabric::getPort>},
    {.name = sp::cmd::setPort, .run = run<sp::SetPortRequest, &Fabric::setPort>},
    {.name = sp::cmd::getRouting, .run = run<sp::GetRoutingRequest, &Fabric::getRouting>},
    {.name = sp::cmd::setRouting, .run = run<sp::SetRoutingRequest, &Fabric::setRouting>},
};

// A reply of PacketRules (packet_rules.hpp, which answers in the protocol's JSON) as its type.
template <typename Reply>
Result<Reply> rulesReply(const json& j) {
  if (j.value("ok", false) != true) return makeError(j.value("error", std::string("packet rule refused")));
  return sp::parse<Reply>(j);
}

}  // namespace

json Fabric::handle(const json& req) {
  try {
    if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
      return err("a request is a JSON object with a string 'cmd'");
    std::string cmd = req["cmd"];
    for (const Command& c : kCommands)
      if (c.name == cmd) return c.run(*this, req, monoNs());
    std::string known;
    for (const Command& c : kCommands) known += (known.empty() ? "" : ", ") + std::string(c.name);
    return err("unknown command '" + cmd + "' (" + known + ")");
  } catch (const std::exception& e) {
    return err(std::string("bad request: ") + e.what());
  }
}

Result<sp::PingReply> Fabric::ping(const sp::PingRequest&, int64_t) { return sp::PingReply{}; }

Result<sp::EventsReply> Fabric::events(const sp::EventsRequest& req, int64_t) {
  uint64_t since = req.since.value_or(0);
  sp::EventsReply out{.lastSeq = eventSeq_};
  for (const auto& e : events_)
    if (e.seq > since)
      out.events.push_back({.seq = e.seq, .monoNs = e.monoNs, .wallNs = e.wallNs, .what = e.what, .port = e.port,
                            .priority = e.prio, .l4Dst = e.l4Dst});
  return out;
}

// set_meter {port, l4_dst}: meter (again, from zero) the frames leaving PORT for that TCP/UDP
// port; del_meter {port, l4_dst}; meters: every meter with its counts and first/last frame.
Result<int> Fabric::meterPort(std::string_view cmd, const std::string& port, int l4Dst) const {
  if (port == "*") return makeError(std::string(cmd) + " needs one 'port' (a switch port name)");
  if (l4Dst < 1 || l4Dst > 65535) return makeError(std::string(cmd) + " needs 'l4_dst', a TCP/UDP port 1..65535");
  auto ports = selectPorts(port);
  if (!ports) return ports.error();
  return (*ports)[0];
}

Result<sp::OkReply> Fabric::setMeter(const sp::SetMeterRequest& req, int64_t) {
  auto pi = meterPort(req.kCmd, req.port, req.l4Dst);
  if (!pi) return pi.error();
  int l4 = req.l4Dst;
  auto it = std::find_if(meters_.begin(), meters_.end(), [&](const Meter& m) { return m.port == *pi && m.l4Dst == l4; });
  if (it == meters_.end()) {
    if (meters_.size() >= kMaxMeters)
      return makeError("at most " + std::to_string(kMaxMeters) + " meters (del_meter one first)");
    meters_.push_back(Meter{*pi, l4});
  } else {
    *it = Meter{*pi, l4};
  }
  return sp::OkReply{};
}

Result<sp::OkReply> Fabric::delMeter(const sp::DelMeterRequest& req, int64_t) {
  auto pi = meterPort(req.kCmd, req.port, req.l4Dst);
  if (!pi) return pi.error();
  int l4 = req.l4Dst;
  auto it = std::find_if(meters_.begin(), meters_.end(), [&](const Meter& m) { return m.port == *pi && m.l4Dst == l4; });
  if (it == meters_.end()) return makeError("no meter on port " + ports_[size_t(*pi)].name + " for " + std::to_string(l4));
  meters_.erase(it);
  return sp::OkReply{};
}

Result<sp::MetersReply> Fabric::meters(const sp::MetersRequest&, int64_t) {
  sp::MetersReply out;
  for (const auto& m : meters_)
    out.meters.push_back({.port = ports_[size_t(m.port)].name, .l4Dst = m.l4Dst, .frames = m.frames,
                          .bytes = m.bytes, .active = m.active,
                          .firstWallNs = m.firstNs ? std::optional(wallOf(m.firstNs)) : std::nullopt,
                          .lastWallNs = m.lastNs ? std::optional(wallOf(m.lastNs)) : std::nullopt});
  return out;
}

Result<sp::AddPacketRuleReply> Fabric::addPacketRule(const sp::AddPacketRuleRequest& req, int64_t now) {
  auto spec = parseRuleSpec(req.rule);
  if (!spec) return spec.error();
  int pi = -1;
  for (size_t i = 0; i < ports_.size(); i++)
    if (ports_[i].name == spec->port && ports_[i].isHost()) pi = int(i);
  if (pi < 0) {
    std::string names;
    for (const auto& p : ports_)
      if (p.isHost()) names += (names.empty() ? "" : ", ") + p.name;
    return makeError("packet rule: port '" + spec->port + "' is not a host port of this switch (" + names + ")");
  }
  std::string dir = cfg_.captureDir;
  if (dir.empty()) {
    auto slash = cfg_.control.rfind('/');
    dir = (slash == std::string::npos ? std::string(".") : cfg_.control.substr(0, slash)) + "/captures";
  }
  auto reply = rulesReply<sp::AddPacketRuleReply>(packetRules_.add(*spec, pi, dir, now));
  updateChecksumVerify(now);
  return reply;
}

Result<sp::DelPacketRuleReply> Fabric::delPacketRule(const sp::DelPacketRuleRequest& req, int64_t now) {
  return rulesReply<sp::DelPacketRuleReply>(
      packetRules_.remove(req.name, req.events.value_or(false), now, wallOf(now),
                          [&](int pi, bool ingress, std::vector<uint8_t> f) {
                            // What the rule still held goes on, as it would have at its time.
                            Port& p = ports_[size_t(pi)];
                            if (ingress) {
                              int prio = classify(f.data(), f.size(), classes_);
                              if (portUp(pi)) forward(pi, std::move(f), prio, now);
                            } else if (p.io && !p.closed) {
                              p.io->write(f.data(), f.size());
                            }
                          }));
}

Result<sp::PacketRulesReply> Fabric::packetRules(const sp::PacketRulesRequest& req, int64_t) {
  return rulesReply<sp::PacketRulesReply>(packetRules_.list(req.events.value_or(false)));
}

Result<sp::OkReply> Fabric::resetCounters(const sp::ResetCountersRequest&, int64_t now) {
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
  return sp::OkReply{};
}

// Ports named by `port` ("*" or absent = all).
Result<std::vector<int>> Fabric::selectPorts(const std::optional<std::string>& port) const {
  std::string name = port.value_or("*");
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

Result<std::vector<int>> Fabric::selectPrios(const std::optional<int>& prio, const char* key) const {
  if (!prio) return std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
  if (*prio < 0 || *prio >= kPriorities) return makeError(std::string(key) + " must be 0..7");
  return std::vector<int>{*prio};
}

Result<sp::TopologyReply> Fabric::topology(const sp::TopologyRequest&, int64_t) const {
  sp::TopologyReply out{.routing = adaptive_ ? "adaptive" : "ecmp"};
  for (const auto& s : switches_) {
    sp::TopologySwitch sw{.name = s.name,
                          .role = s.role == Role::leaf ? "leaf" : s.role == Role::spine ? "spine" : "single"};
    for (size_t i = 0; i < ports_.size(); i++)
      if (&switches_[size_t(ports_[i].sw)] == &s) sw.ports.push_back(ports_[i].name);
    out.switches.push_back(std::move(sw));
  }
  for (const auto& l : links_)
    out.links.push_back({.name = l.name, .a = ports_[size_t(l.a)].name, .b = ports_[size_t(l.b)].name,
                         .up = portUp(l.a), .routedUp = l.routedUp});
  return out;
}

Result<sp::CountersReply> Fabric::counters(const sp::CountersRequest& req, int64_t now) {
  auto sel = selectPorts(req.port);
  if (!sel) return sel.error();
  // busy_ns: the event loop's time outside epoll_wait since loop_ns ago (see idleNs_).
  int64_t loop = loopStartNs_ > 0 ? now - loopStartNs_ : 0;
  sp::CountersReply out{.nowNs = now, .loopNs = loop, .busyNs = std::max<int64_t>(0, loop - idleNs_)};
  for (int pi : *sel) {
    Port& p = ports_[size_t(pi)];
    sp::PortCounters pc{.name = p.name, .switchName = switches_[size_t(p.sw)].name, .adminUp = p.adminUp,
                        .up = portUp(pi), .rateBps = p.rateBps, .rxFrames = p.rxFrames, .rxBytes = p.rxBytes,
                        .rxDrops = p.rxDrops, .noRoute = p.noRoute, .txFrames = p.txFrames, .txBytes = p.txBytes};
    for (int prio = 0; prio < kPriorities; prio++) {
      Queue& q = p.q[prio];
      pc.queues.push_back({.queue = prio, .depthBytes = q.bytes, .depthFrames = q.frames.size(),
                           .maxDepthBytes = q.stats.maxDepth, .txFrames = q.stats.txFrames,
                           .txBytes = q.stats.txBytes, .drops = q.stats.drops, .ecnMarked = q.stats.ecnMarked,
                           .pfcRx = q.stats.pfcRx, .pfcTx = q.stats.pfcTx, .pausedNs = pausedNs(q, now),
                           .xoffNs = xoffNs(q, now), .stormGaps = q.stats.stormGaps,
                           .paused = q.pausedUntil > now, .ingressBytes = q.ingressBytes, .xoff = q.xoff,
                           .hostHeld = q.hold.size(), .wdStorms = q.stats.wdStorms,
                           .wdRestored = q.stats.wdRestored, .wdDrops = q.stats.wdDrops, .wdStorm = q.storm});
    }
    if (p.io) {
      // What the host's NIC end cost in system calls: reads and writes, and the wire frames
      // they carried (more than one each with offload).
      auto io = p.io->ioStats();
      pc.io = sp::PortIoCounters{.reads = io.reads, .readFrames = io.readFrames, .writes = io.writes,
                                 .writeFrames = io.writeFrames, .superWrites = io.superWrites,
                                 .superWriteFrames = io.superWriteFrames, .ringDrops = io.ringDrops};
      if (io.runEnds) {
        const RunEnds& e = *io.runEnds;
        pc.io->runEnds = sp::RunEndCounters{.hold = e.hold, .push = e.push, .shortFrame = e.shortFrame,
                                            .fin = e.fin, .full = e.full, .marked = e.marked,
                                            .differs = e.differs, .evicted = e.evicted,
                                            .flushed = e.flushed, .alone = e.alone};
      }
    }
    out.ports.push_back(std::move(pc));
  }
  return out;
}

Result<std::vector<std::pair<int, int>>> Fabric::selectQueues(const std::optional<std::string>& port,
                                                              const std::optional<int>& prio,
                                                              const char* prioKey) const {
  auto sel = selectPorts(port);
  if (!sel) return sel.error();
  auto prios = selectPrios(prio, prioKey);
  if (!prios) return prios.error();
  std::vector<std::pair<int, int>> queues;
  for (int pi : *sel)
    for (int p : *prios) queues.emplace_back(pi, p);
  return queues;
}

std::vector<sp::EcnQueueState> Fabric::ecnStates(const std::vector<std::pair<int, int>>& queues) const {
  std::vector<sp::EcnQueueState> out;
  for (auto [pi, prio] : queues) {
    const EcnProfile& e = ports_[size_t(pi)].q[prio].ecn;
    out.push_back({.port = ports_[size_t(pi)].name, .queue = prio,
                   .profile = {.enabled = e.enabled, .kmin = e.kminBytes, .kmax = e.kmaxBytes, .pmax = e.pmax}});
  }
  return out;
}

Result<sp::GetEcnReply> Fabric::getEcn(const sp::GetEcnRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.queue, "queue");
  if (!queues) return queues.error();
  return sp::GetEcnReply{.profiles = ecnStates(*queues)};
}

Result<sp::SetEcnReply> Fabric::setEcn(const sp::SetEcnRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.queue, "queue");
  if (!queues) return queues.error();
  sp::SetEcnReply out{.previous = ecnStates(*queues)};
  auto set = replaceAll(*queues, &Queue::ecn, [&req](EcnProfile& e) -> std::string {
    if (req.enabled) e.enabled = *req.enabled;
    if (req.kmin) e.kminBytes = *req.kmin;
    if (req.kmax) e.kmaxBytes = *req.kmax;
    if (req.pmax) e.pmax = *req.pmax;
    if (e.kminBytes > e.kmaxBytes) return "kmin must not exceed kmax";
    if (!(e.pmax >= 0 && e.pmax <= 1)) return "pmax must be within [0, 1]";
    return {};
  });
  if (!set) return set.error();
  return out;
}

std::vector<sp::PfcQueueState> Fabric::pfcStates(const std::vector<std::pair<int, int>>& queues) const {
  std::vector<sp::PfcQueueState> out;
  for (auto [pi, prio] : queues) {
    const auto& t = ports_[size_t(pi)].q[prio].pfc;
    out.push_back({.port = ports_[size_t(pi)].name, .priority = prio, .xoff = t.xoffBytes, .xon = t.xonBytes,
                   .lossless = bool(cfg_.losslessMask & (1u << prio))});
  }
  return out;
}

Result<sp::GetPfcReply> Fabric::getPfc(const sp::GetPfcRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.priority, "priority");
  if (!queues) return queues.error();
  return sp::GetPfcReply{.thresholds = pfcStates(*queues)};
}

Result<sp::SetPfcReply> Fabric::setPfc(const sp::SetPfcRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.priority, "priority");
  if (!queues) return queues.error();
  sp::SetPfcReply out{.previous = pfcStates(*queues)};
  auto set = replaceAll(*queues, &Queue::pfc, [&req](PfcThreshold& n) -> std::string {
    if (req.xoff) n.xoffBytes = *req.xoff;
    if (req.xon) n.xonBytes = *req.xon;
    if (n.xonBytes > n.xoffBytes) return "xon must not exceed xoff";
    return {};
  });
  if (!set) return set.error();
  return out;
}

std::vector<sp::WatchdogQueueState> Fabric::watchdogStates(const std::vector<std::pair<int, int>>& queues) const {
  std::vector<sp::WatchdogQueueState> out;
  for (auto [pi, prio] : queues) {
    const auto& w = ports_[size_t(pi)].q[prio].wd;
    out.push_back({.port = ports_[size_t(pi)].name, .priority = prio, .enabled = w.enabled,
                   .detectionMs = double(w.detectionNs) / 1e6, .restorationMs = double(w.restorationNs) / 1e6,
                   .action = actionName(w.action)});
  }
  return out;
}

Result<sp::GetWatchdogReply> Fabric::getWatchdog(const sp::GetWatchdogRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.priority, "priority");
  if (!queues) return queues.error();
  return sp::GetWatchdogReply{.pollMs = double(cfg_.pollNs) / 1e6, .watchdogs = watchdogStates(*queues)};
}

Result<sp::SetWatchdogReply> Fabric::setWatchdog(const sp::SetWatchdogRequest& req, int64_t) {
  auto queues = selectQueues(req.port, req.priority, "priority");
  if (!queues) return queues.error();
  sp::SetWatchdogReply out{.previous = watchdogStates(*queues)};
  auto set = replaceAll(*queues, &Queue::wd, [&req](WatchdogConfig& w) -> std::string {
    if (req.enabled) w.enabled = *req.enabled;
    if (req.detectionMs) w.detectionNs = int64_t(*req.detectionMs * 1e6);
    if (req.restorationMs) w.restorationNs = int64_t(*req.restorationMs * 1e6);
    if (req.action) {
      auto a = parseAction(*req.action);
      if (!a) return a.error().message;
      w.action = *a;
    }
    if (w.detectionNs < 1'000'000 || w.restorationNs < 1'000'000 || w.detectionNs > 60'000'000'000 ||
        w.restorationNs > 60'000'000'000)
      return "detection_ms and restoration_ms must be within [1, 60000]";
    return {};
  });
  if (!set) return set.error();
  return out;
}

// Line rate and MTU per port.
std::vector<sp::PortSettings> Fabric::portSettings(const std::vector<int>& sel) const {
  std::vector<sp::PortSettings> out;
  for (int pi : sel)
    out.push_back({.port = ports_[size_t(pi)].name, .rateBps = ports_[size_t(pi)].rateBps, .mtu = ports_[size_t(pi)].mtu});
  return out;
}

Result<sp::GetPortReply> Fabric::getPort(const sp::GetPortRequest& req, int64_t) {
  auto sel = selectPorts(req.port);
  if (!sel) return sel.error();
  return sp::GetPortReply{.ports = portSettings(*sel)};
}

Result<sp::SetPortReply> Fabric::setPort(const sp::SetPortRequest& req, int64_t) {
  auto sel = selectPorts(req.port);
  if (!sel) return sel.error();
  sp::SetPortReply out{.previous = portSettings(*sel)};
  if (req.rateBps && !(*req.rateBps >= 1e6 && *req.rateBps <= 400e9)) return makeError("rate_bps must be within [1e6, 4e11]");
  if (req.mtu && (*req.mtu < 68 || *req.mtu > 9216)) return makeError("mtu must be within [68, 9216]");
  for (int pi : *sel) {
    if (req.rateBps) ports_[size_t(pi)].rateBps = *req.rateBps;
    if (req.mtu) ports_[size_t(pi)].mtu = *req.mtu;
  }
  return out;
}

// The ports of inter-switch link LINK (both ends), else those PORT names.
Result<std::vector<int>> Fabric::selectLink(const std::optional<std::string>& link,
                                            const std::optional<std::string>& port) const {
  if (!link) return selectPorts(port);
  for (const auto& l : links_)
    if (l.name == *link) return std::vector<int>{l.a, l.b};
  return makeError("no inter-switch link '" + *link + "'");
}

std::vector<sp::LinkPortState> Fabric::linkStates(const std::vector<int>& sel) const {
  std::vector<sp::LinkPortState> out;
  for (int pi : sel) out.push_back({.port = ports_[size_t(pi)].name, .adminUp = ports_[size_t(pi)].adminUp});
  return out;
}

Result<sp::GetLinkReply> Fabric::getLink(const sp::GetLinkRequest& req, int64_t) {
  auto sel = selectLink(req.link, req.port);
  if (!sel) return sel.error();
  return sp::GetLinkReply{.ports = linkStates(*sel)};
}

Result<sp::SetLinkReply> Fabric::setLink(const sp::SetLinkRequest& req, int64_t now) {
  auto sel = selectLink(req.link, req.port);
  if (!sel) return sel.error();
  sp::SetLinkReply out{.previous = linkStates(*sel)};
  for (int pi : *sel) setAdmin(pi, req.up, now);
  return out;
}

Result<sp::GetRoutingReply> Fabric::getRouting(const sp::GetRoutingRequest&, int64_t) {
  return sp::GetRoutingReply{.mode = adaptive_ ? "adaptive" : "ecmp"};
}

Result<sp::SetRoutingReply> Fabric::setRouting(const sp::SetRoutingRequest& req, int64_t) {
  if (req.mode != "ecmp" && req.mode != "adaptive") return makeError("routing mode '" + req.mode + "' is not ecmp or adaptive");
  sp::SetRoutingReply out{.previous = adaptive_ ? "adaptive" : "ecmp", .mode = req.mode};
  adaptive_ = req.mode == "adaptive";
  for (auto& s : switches_) s.flowlets.clear();
  return out;
}

void Fabric::setAdmin(int pi, bool up, int64_t now) {
  Port& p = ports_[size_t(pi)];
  if (p.adminUp == up) return;
  p.adminUp = up;
  log::info("port {} admin {}", p.name, up ? "up" : "down");
  // The host sees its NIC lose carrier, as with a real cable pull.
  if (p.io && !p.io->setCarrier(up))
    log::warn("port {}: the host's NIC did not {} carrier: {}", p.name, up ? "regain" : "lose", std::strerror(errno));
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

Result<void> Fabric::listenControl() {
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

void Fabric::accept() {
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

void Fabric::clientReadable(int slot) {
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

bool Fabric::sendAll(int fd, const std::string& s) {
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

}  // namespace rc::labswitch
