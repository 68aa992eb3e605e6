// The lab switch's control socket: JSON-lines requests for counters, settings, events and meters.
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

json Fabric::eventsCmd(const json& req) {
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
json Fabric::meterCmd(const json& req, const std::string& cmd) {
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

json Fabric::packetCmd(const json& req, const std::string& cmd, int64_t now) {
  bool withEvents = req.contains("events") && req["events"].is_boolean() && req["events"].get<bool>();
  if (cmd == "packet_rules") return packetRules_.list(withEvents);
  if (cmd == "del_packet_rule") {
    if (!req.contains("name") || !req["name"].is_string()) return err("del_packet_rule needs 'name' (the rule's)");
    return packetRules_.remove(req["name"].get<std::string>(), withEvents, now, wallOf(now),
                               [&](int pi, bool ingress, std::vector<uint8_t> f) {
                                 // What the rule still held goes on, as it would have at its time.
                                 Port& p = ports_[size_t(pi)];
                                 if (ingress) {
                                   int prio = classify(f.data(), f.size(), dscp_);
                                   if (portUp(pi)) forward(pi, std::move(f), prio, now);
                                 } else if (p.io && !p.closed) {
                                   p.io->write(f.data(), f.size());
                                 }
                               });
  }
  if (!req.contains("rule")) return err("add_packet_rule needs 'rule' (see docs/faults/packet.md)");
  auto spec = parseRuleSpec(req["rule"]);
  if (!spec) return err(spec.error().message);
  int pi = -1;
  for (size_t i = 0; i < ports_.size(); i++)
    if (ports_[i].name == spec->port && ports_[i].isHost()) pi = int(i);
  if (pi < 0) {
    std::string names;
    for (const auto& p : ports_)
      if (p.isHost()) names += (names.empty() ? "" : ", ") + p.name;
    return err("packet rule: port '" + spec->port + "' is not a host port of this switch (" + names + ")");
  }
  std::string dir = cfg_.captureDir;
  if (dir.empty()) {
    auto slash = cfg_.control.rfind('/');
    dir = (slash == std::string::npos ? std::string(".") : cfg_.control.substr(0, slash)) + "/captures";
  }
  return packetRules_.add(*spec, pi, dir, now);
}

json Fabric::handle(const json& req) {
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
    if (cmd == "add_packet_rule" || cmd == "del_packet_rule" || cmd == "packet_rules") return packetCmd(req, cmd, now);
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
    return err("unknown command '" + cmd + "' (ping, topology, counters, events, set_meter, del_meter, meters, add_packet_rule, del_packet_rule, packet_rules, reset_counters, get_ecn, set_ecn, get_pfc, set_pfc, get_watchdog, set_watchdog, get_link, set_link, get_port, set_port, get_routing, set_routing)");
  } catch (const std::exception& e) {
    return err(std::string("bad request: ") + e.what());
  }
}

// Ports named by `port` ("*" or absent = all).
Result<std::vector<int>> Fabric::selectPorts(const json& req) const {
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

Result<std::vector<int>> Fabric::selectPrios(const json& req, const char* key) const {
  if (!req.contains(key)) return std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
  int p = req[key].get<int>();
  if (p < 0 || p >= kPriorities) return makeError(std::string(key) + " must be 0..7");
  return std::vector<int>{p};
}

json Fabric::topology() const {
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

json Fabric::counters(const json& req, int64_t now) {
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
    if (p.io) {
      // What the host's NIC end cost in system calls: reads and writes, and the wire frames
      // they carried (more than one each with offload).
      auto io = p.io->ioStats();
      ports.back()["io"] = {{"reads", io.reads}, {"read_frames", io.readFrames}, {"writes", io.writes},
                            {"write_frames", io.writeFrames}, {"super_writes", io.superWrites},
                            {"super_write_frames", io.superWriteFrames}};
    }
  }
  // busy_ns: the event loop's time outside epoll_wait since loop_ns ago (see idleNs_).
  int64_t loop = loopStartNs_ > 0 ? now - loopStartNs_ : 0;
  return {{"ok", true}, {"now_ns", now}, {"loop_ns", loop}, {"busy_ns", std::max<int64_t>(0, loop - idleNs_)},
          {"ports", ports}};
}

json Fabric::ecnJson(const EcnProfile& e) {
  return {{"enabled", e.enabled}, {"kmin", e.kminBytes}, {"kmax", e.kmaxBytes}, {"pmax", e.pmax}};
}

Result<std::vector<std::pair<int, int>>> Fabric::selectQueues(const json& req, const char* prioKey) const {
  auto sel = selectPorts(req);
  if (!sel) return sel.error();
  auto prios = selectPrios(req, prioKey);
  if (!prios) return prios.error();
  std::vector<std::pair<int, int>> queues;
  for (int pi : *sel)
    for (int prio : *prios) queues.emplace_back(pi, prio);
  return queues;
}

json Fabric::ecn(const json& req, bool set) {
  auto queues = selectQueues(req, "queue");
  if (!queues) return err(queues.error().message);
  json prev = json::array();
  for (auto [pi, prio] : *queues)
    prev.push_back({{"port", ports_[size_t(pi)].name}, {"queue", prio},
                    {"profile", ecnJson(ports_[size_t(pi)].q[prio].ecn)}});
  if (!set) return {{"ok", true}, {"profiles", prev}};
  return replaceAll(*queues, &Queue::ecn, prev, [&req](EcnProfile& e) -> std::string {
    if (req.contains("enabled")) e.enabled = req["enabled"].get<bool>();
    if (req.contains("kmin")) e.kminBytes = req["kmin"].get<uint64_t>();
    if (req.contains("kmax")) e.kmaxBytes = req["kmax"].get<uint64_t>();
    if (req.contains("pmax")) e.pmax = req["pmax"].get<double>();
    if (e.kminBytes > e.kmaxBytes) return "kmin must not exceed kmax";
    if (!(e.pmax >= 0 && e.pmax <= 1)) return "pmax must be within [0, 1]";
    return {};
  });
}

json Fabric::pfcCmd(const json& req, bool set) {
  auto queues = selectQueues(req, "priority");
  if (!queues) return err(queues.error().message);
  json prev = json::array();
  for (auto [pi, prio] : *queues) {
    const auto& t = ports_[size_t(pi)].q[prio].pfc;
    prev.push_back({{"port", ports_[size_t(pi)].name}, {"priority", prio},
                    {"xoff", t.xoffBytes}, {"xon", t.xonBytes},
                    {"lossless", bool(cfg_.losslessMask & (1u << prio))}});
  }
  if (!set) return {{"ok", true}, {"thresholds", prev}};
  return replaceAll(*queues, &Queue::pfc, prev, [&req](PfcThreshold& n) -> std::string {
    if (req.contains("xoff")) n.xoffBytes = req["xoff"].get<uint64_t>();
    if (req.contains("xon")) n.xonBytes = req["xon"].get<uint64_t>();
    if (n.xonBytes > n.xoffBytes) return "xon must not exceed xoff";
    return {};
  });
}

json Fabric::wdCmd(const json& req, bool set) {
  auto queues = selectQueues(req, "priority");
  if (!queues) return err(queues.error().message);
  json prev = json::array();
  for (auto [pi, prio] : *queues) {
    const auto& w = ports_[size_t(pi)].q[prio].wd;
    prev.push_back({{"port", ports_[size_t(pi)].name}, {"priority", prio}, {"enabled", w.enabled},
                    {"detection_ms", double(w.detectionNs) / 1e6},
                    {"restoration_ms", double(w.restorationNs) / 1e6},
                    {"action", actionName(w.action)}});
  }
  if (!set) return {{"ok", true}, {"poll_ms", double(cfg_.pollNs) / 1e6}, {"watchdogs", prev}};
  return replaceAll(*queues, &Queue::wd, prev, [&req](WatchdogConfig& w) -> std::string {
    if (req.contains("enabled")) w.enabled = req["enabled"].get<bool>();
    if (req.contains("detection_ms")) w.detectionNs = int64_t(req["detection_ms"].get<double>() * 1e6);
    if (req.contains("restoration_ms")) w.restorationNs = int64_t(req["restoration_ms"].get<double>() * 1e6);
    if (req.contains("action")) {
      auto a = parseAction(req["action"].get<std::string>());
      if (!a) return a.error().message;
      w.action = *a;
    }
    if (w.detectionNs < 1'000'000 || w.restorationNs < 1'000'000 || w.detectionNs > 60'000'000'000 ||
        w.restorationNs > 60'000'000'000)
      return "detection_ms and restoration_ms must be within [1, 60000]";
    return {};
  });
}

// Line rate and MTU per port.
json Fabric::portCmd(const json& req, bool set) {
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

json Fabric::linkCmd(const json& req, bool set, int64_t now) {
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

void Fabric::setAdmin(int pi, bool up, int64_t now) {
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
