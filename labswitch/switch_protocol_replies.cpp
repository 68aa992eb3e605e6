// The lab switch's control replies: each one's fields to JSON and back (switch_protocol.hpp).
#include "labswitch/switch_protocol.hpp"
#include "labswitch/switch_protocol_internal.hpp"

namespace rc::swproto {

using detail::okReply;
using detail::Reader;
using detail::replyReader;

json toJson(const OkReply&) { return okReply(); }
template <>
Result<OkReply> parse<OkReply>(const json& m) {
  return replyReader(m, "the").finish(OkReply{});
}

json toJson(const PingReply& p) {
  json j = okReply();
  j["switch"] = p.switchName;
  j["version"] = p.version;
  return j;
}
template <>
Result<PingReply> parse<PingReply>(const json& m) {
  PingReply p;
  Reader r = replyReader(m, cmd::ping);
  r.field("switch", p.switchName);
  r.field("version", p.version);
  return r.finish(std::move(p));
}

// ---- topology ----

json toJson(const TopologyReply& t) {
  json sw = json::array(), ls = json::array();
  for (const auto& s : t.switches) sw.push_back({{"name", s.name}, {"role", s.role}, {"ports", s.ports}});
  for (const auto& l : t.links)
    ls.push_back({{"name", l.name}, {"a", l.a}, {"b", l.b}, {"up", l.up}, {"routed_up", l.routedUp}});
  json j = okReply();
  j["switches"] = std::move(sw);
  j["links"] = std::move(ls);
  j["routing"] = t.routing;
  return j;
}
template <>
Result<TopologyReply> parse<TopologyReply>(const json& m) {
  TopologyReply t;
  Reader r = replyReader(m, cmd::topology);
  r.list("switches", t.switches, [](Reader& e, TopologySwitch& s) {
    e.field("name", s.name);
    e.field("role", s.role);
    e.list("ports", s.ports);
  });
  r.list("links", t.links, [](Reader& e, TopologyLink& l) {
    e.field("name", l.name);
    e.field("a", l.a);
    e.field("b", l.b);
    e.field("up", l.up);
    e.field("routed_up", l.routedUp);
  });
  r.field("routing", t.routing);
  return r.finish(std::move(t));
}

// ---- counters ----

namespace {

json queueJson(const QueueCounters& q) {
  return {{"queue", q.queue}, {"depth_bytes", q.depthBytes}, {"depth_frames", q.depthFrames},
          {"max_depth_bytes", q.maxDepthBytes}, {"tx_frames", q.txFrames}, {"tx_bytes", q.txBytes},
          {"drops", q.drops}, {"ecn_marked", q.ecnMarked}, {"pfc_rx", q.pfcRx}, {"pfc_tx", q.pfcTx},
          {"paused_ns", q.pausedNs}, {"xoff_ns", q.xoffNs}, {"storm_gaps", q.stormGaps}, {"paused", q.paused},
          {"ingress_bytes", q.ingressBytes}, {"xoff", q.xoff}, {"host_held", q.hostHeld},
          {"wd_storms", q.wdStorms}, {"wd_restored", q.wdRestored}, {"wd_drops", q.wdDrops},
          {"wd_storm", q.wdStorm}};
}

void readQueue(Reader& r, QueueCounters& q) {
  r.field("queue", q.queue);
  r.field("depth_bytes", q.depthBytes);
  r.field("depth_frames", q.depthFrames);
  r.field("max_depth_bytes", q.maxDepthBytes);
  r.field("tx_frames", q.txFrames);
  r.field("tx_bytes", q.txBytes);
  r.field("drops", q.drops);
  r.field("ecn_marked", q.ecnMarked);
  r.field("pfc_rx", q.pfcRx);
  r.field("pfc_tx", q.pfcTx);
  r.field("paused_ns", q.pausedNs);
  r.field("xoff_ns", q.xoffNs);
  r.field("storm_gaps", q.stormGaps);
  r.field("paused", q.paused);
  r.field("ingress_bytes", q.ingressBytes);
  r.field("xoff", q.xoff);
  r.field("host_held", q.hostHeld);
  r.field("wd_storms", q.wdStorms);
  r.field("wd_restored", q.wdRestored);
  r.field("wd_drops", q.wdDrops);
  r.field("wd_storm", q.wdStorm);
}

json portJson(const PortCounters& p) {
  json qs = json::array();
  for (const auto& q : p.queues) qs.push_back(queueJson(q));
  json j = {{"name", p.name}, {"switch", p.switchName}, {"admin_up", p.adminUp}, {"up", p.up},
            {"rate_bps", p.rateBps}, {"rx_frames", p.rxFrames}, {"rx_bytes", p.rxBytes},
            {"rx_drops", p.rxDrops}, {"no_route", p.noRoute}, {"tx_frames", p.txFrames},
            {"tx_bytes", p.txBytes}, {"queues", std::move(qs)}};
  if (p.io)
    j["io"] = {{"reads", p.io->reads}, {"read_frames", p.io->readFrames}, {"writes", p.io->writes},
               {"write_frames", p.io->writeFrames}, {"super_writes", p.io->superWrites},
               {"super_write_frames", p.io->superWriteFrames}};
  if (p.io && p.io->ringDrops) j["io"]["ring_drops"] = *p.io->ringDrops;
  if (p.io && p.io->runEnds) {
    const auto& e = *p.io->runEnds;
    j["io"]["run_ends"] = {{"hold", e.hold}, {"push", e.push}, {"short", e.shortFrame}, {"fin", e.fin},
                           {"full", e.full}, {"marked", e.marked}, {"differs", e.differs},
                           {"evicted", e.evicted}, {"flushed", e.flushed}, {"alone", e.alone}};
  }
  return j;
}

void readPort(Reader& r, PortCounters& p) {
  r.field("name", p.name);
  r.field("switch", p.switchName);
  r.field("admin_up", p.adminUp);
  r.field("up", p.up);
  r.field("rate_bps", p.rateBps);
  r.field("rx_frames", p.rxFrames);
  r.field("rx_bytes", p.rxBytes);
  r.field("rx_drops", p.rxDrops);
  r.field("no_route", p.noRoute);
  r.field("tx_frames", p.txFrames);
  r.field("tx_bytes", p.txBytes);
  r.list("queues", p.queues, readQueue);
  if (r.has("io")) {
    PortIoCounters io;
    r.object("io", io, [](Reader& e, PortIoCounters& c) {
      e.field("reads", c.reads);
      e.field("read_frames", c.readFrames);
      e.field("writes", c.writes);
      e.field("write_frames", c.writeFrames);
      e.field("super_writes", c.superWrites);
      e.field("super_write_frames", c.superWriteFrames);
      if (e.has("ring_drops")) {
        uint64_t n = 0;
        e.field("ring_drops", n);
        c.ringDrops = n;
      }
      if (e.has("run_ends")) {
        RunEndCounters ends;
        e.object("run_ends", ends, [](Reader& x, RunEndCounters& n) {
          x.field("hold", n.hold);
          x.field("push", n.push);
          x.field("short", n.shortFrame);
          x.field("fin", n.fin);
          x.field("full", n.full);
          x.field("marked", n.marked);
          x.field("differs", n.differs);
          x.field("evicted", n.evicted);
          x.field("flushed", n.flushed);
          x.field("alone", n.alone);
        });
        c.runEnds = ends;
      }
    });
    p.io = io;
  }
}

}  // namespace

json toJson(const CountersReply& c) {
  json ports = json::array();
  for (const auto& p : c.ports) ports.push_back(portJson(p));
  json j = okReply();
  j["now_ns"] = c.nowNs;
  j["loop_ns"] = c.loopNs;
  j["busy_ns"] = c.busyNs;
  j["ports"] = std::move(ports);
  return j;
}
template <>
Result<CountersReply> parse<CountersReply>(const json& m) {
  CountersReply c;
  Reader r = replyReader(m, cmd::counters);
  r.field("now_ns", c.nowNs);
  r.field("loop_ns", c.loopNs);
  r.field("busy_ns", c.busyNs);
  r.list("ports", c.ports, readPort);
  return r.finish(std::move(c));
}

// ---- events, meters ----

json toJson(const EventsReply& e) {
  json out = json::array();
  for (const auto& x : e.events) {
    out.push_back({{"seq", x.seq}, {"mono_ns", x.monoNs}, {"wall_ns", x.wallNs}, {"what", x.what},
                   {"port", x.port}, {"priority", x.priority}});
    if (x.l4Dst >= 0) out.back()["l4_dst"] = x.l4Dst;
  }
  json j = okReply();
  j["last_seq"] = e.lastSeq;
  j["events"] = std::move(out);
  return j;
}
template <>
Result<EventsReply> parse<EventsReply>(const json& m) {
  EventsReply e;
  Reader r = replyReader(m, cmd::events);
  r.field("last_seq", e.lastSeq);
  r.list("events", e.events, [](Reader& x, SwitchEvent& s) {
    x.field("seq", s.seq);
    x.field("mono_ns", s.monoNs);
    x.field("wall_ns", s.wallNs);
    x.field("what", s.what);
    x.field("port", s.port);
    x.field("priority", s.priority);
    std::optional<int> l4;
    x.field("l4_dst", l4);
    s.l4Dst = l4.value_or(-1);
  });
  return r.finish(std::move(e));
}

json toJson(const MetersReply& m) {
  json out = json::array();
  for (const auto& x : m.meters)
    out.push_back({{"port", x.port}, {"l4_dst", x.l4Dst}, {"frames", x.frames}, {"bytes", x.bytes},
                   {"active", x.active}, {"first_wall_ns", x.firstWallNs ? json(*x.firstWallNs) : json(nullptr)},
                   {"last_wall_ns", x.lastWallNs ? json(*x.lastWallNs) : json(nullptr)}});
  json j = okReply();
  j["meters"] = std::move(out);
  return j;
}
template <>
Result<MetersReply> parse<MetersReply>(const json& m) {
  MetersReply out;
  Reader r = replyReader(m, cmd::meters);
  r.list("meters", out.meters, [](Reader& x, MeterState& s) {
    x.field("port", s.port);
    x.field("l4_dst", s.l4Dst);
    x.field("frames", s.frames);
    x.field("bytes", s.bytes);
    x.field("active", s.active);
    x.field("first_wall_ns", s.firstWallNs);
    x.field("last_wall_ns", s.lastWallNs);
  });
  return r.finish(std::move(out));
}

// ---- packet rules ----

namespace {

json ruleJson(const PacketRuleState& s) {
  json d = {{"name", s.name}, {"port", s.port}, {"direction", s.direction}, {"protocol", s.protocol},
            {"select", s.select}, {"action", s.action}, {"matched", s.matched}, {"acted", s.acted},
            {"not_applicable", s.notApplicable}, {"held", s.held}};
  if (s.capture) {
    d["capture"] = s.capture->path;
    d["capture_frames"] = s.capture->frames;
    d["capture_skipped"] = s.capture->skipped;
  }
  if (s.events) {
    d["events"] = s.events->list;
    d["events_total"] = s.events->total;
  }
  return d;
}

void readRule(Reader& r, PacketRuleState& s) {
  r.field("name", s.name);
  r.field("port", s.port);
  r.field("direction", s.direction);
  r.field("protocol", s.protocol);
  r.field("select", s.select);
  r.field("action", s.action);
  r.field("matched", s.matched);
  r.field("acted", s.acted);
  r.field("not_applicable", s.notApplicable);
  r.field("held", s.held);
  if (r.has("capture")) {
    PacketRuleCapture c;
    r.field("capture", c.path);
    r.field("capture_frames", c.frames);
    r.field("capture_skipped", c.skipped);
    s.capture = std::move(c);
  }
  if (r.has("events")) {
    PacketRuleEvents e;
    r.list("events", e.list);
    r.field("events_total", e.total);
    s.events = std::move(e);
  }
}

}  // namespace

json toJson(const AddPacketRuleReply& a) {
  json j = okReply();
  j["rule"] = ruleJson(a.rule);
  return j;
}
template <>
Result<AddPacketRuleReply> parse<AddPacketRuleReply>(const json& m) {
  AddPacketRuleReply a;
  Reader r = replyReader(m, cmd::addPacketRule);
  r.object("rule", a.rule, readRule);
  return r.finish(std::move(a));
}

json toJson(const DelPacketRuleReply& d) {
  json j = okReply();
  if (d.rule)
    j["rule"] = ruleJson(*d.rule);
  else
    j["absent"] = true;
  return j;
}
template <>
Result<DelPacketRuleReply> parse<DelPacketRuleReply>(const json& m) {
  DelPacketRuleReply d;
  Reader r = replyReader(m, cmd::delPacketRule);
  bool absent = false;
  if (r.has("absent")) r.field("absent", absent);
  if (!absent) {
    PacketRuleState s;
    r.object("rule", s, readRule);
    d.rule = std::move(s);
  }
  return r.finish(std::move(d));
}

json toJson(const PacketRulesReply& p) {
  json out = json::array();
  for (const auto& s : p.rules) out.push_back(ruleJson(s));
  json j = okReply();
  j["rules"] = std::move(out);
  return j;
}
template <>
Result<PacketRulesReply> parse<PacketRulesReply>(const json& m) {
  PacketRulesReply p;
  Reader r = replyReader(m, cmd::packetRules);
  r.list("rules", p.rules, readRule);
  return r.finish(std::move(p));
}

// ---- per-queue settings: a get_ reply's list and a set_ reply's "previous" have one shape ----

json toJson(const EcnSettings& e) {
  return {{"enabled", e.enabled}, {"kmin", e.kmin}, {"kmax", e.kmax}, {"pmax", e.pmax}};
}

namespace {

void readEcnSettings(Reader& r, EcnSettings& s) {
  r.field("enabled", s.enabled);
  r.field("kmin", s.kmin);
  r.field("kmax", s.kmax);
  r.field("pmax", s.pmax);
}

json ecnJson(const std::vector<EcnQueueState>& v) {
  json out = json::array();
  for (const auto& e : v) out.push_back({{"port", e.port}, {"queue", e.queue}, {"profile", toJson(e.profile)}});
  return out;
}
void readEcn(Reader& r, EcnQueueState& e) {
  r.field("port", e.port);
  r.field("queue", e.queue);
  r.object("profile", e.profile, readEcnSettings);
}

json pfcJson(const std::vector<PfcQueueState>& v) {
  json out = json::array();
  for (const auto& t : v)
    out.push_back({{"port", t.port}, {"priority", t.priority}, {"xoff", t.xoff}, {"xon", t.xon},
                   {"lossless", t.lossless}});
  return out;
}
void readPfc(Reader& r, PfcQueueState& t) {
  r.field("port", t.port);
  r.field("priority", t.priority);
  r.field("xoff", t.xoff);
  r.field("xon", t.xon);
  r.field("lossless", t.lossless);
}

json watchdogJson(const std::vector<WatchdogQueueState>& v) {
  json out = json::array();
  for (const auto& w : v)
    out.push_back({{"port", w.port}, {"priority", w.priority}, {"enabled", w.enabled},
                   {"detection_ms", w.detectionMs}, {"restoration_ms", w.restorationMs}, {"action", w.action}});
  return out;
}
void readWatchdog(Reader& r, WatchdogQueueState& w) {
  r.field("port", w.port);
  r.field("priority", w.priority);
  r.field("enabled", w.enabled);
  r.field("detection_ms", w.detectionMs);
  r.field("restoration_ms", w.restorationMs);
  r.field("action", w.action);
}

json linkJson(const std::vector<LinkPortState>& v) {
  json out = json::array();
  for (const auto& l : v) out.push_back({{"port", l.port}, {"admin_up", l.adminUp}});
  return out;
}
void readLink(Reader& r, LinkPortState& l) {
  r.field("port", l.port);
  r.field("admin_up", l.adminUp);
}

json settingsJson(const std::vector<PortSettings>& v) {
  json out = json::array();
  for (const auto& p : v) out.push_back({{"port", p.port}, {"rate_bps", p.rateBps}, {"mtu", p.mtu}});
  return out;
}
void readPortSettings(Reader& r, PortSettings& p) {
  r.field("port", p.port);
  r.field("rate_bps", p.rateBps);
  r.field("mtu", p.mtu);
}

// A reply whose field KEY is a list, written by WRITE.
template <typename Item>
json listReply(const char* key, const std::vector<Item>& items, json (*write)(const std::vector<Item>&)) {
  json j = okReply();
  j[key] = write(items);
  return j;
}

}  // namespace

template <>
Result<EcnSettings> parse<EcnSettings>(const json& m) {
  EcnSettings e;
  Reader r(m, "ECN profile");
  readEcnSettings(r, e);
  return r.finish(e);
}

json toJson(const GetEcnReply& g) { return listReply("profiles", g.profiles, ecnJson); }
template <>
Result<GetEcnReply> parse<GetEcnReply>(const json& m) {
  GetEcnReply g;
  Reader r = replyReader(m, cmd::getEcn);
  r.list("profiles", g.profiles, readEcn);
  return r.finish(std::move(g));
}
json toJson(const SetEcnReply& s) { return listReply("previous", s.previous, ecnJson); }
template <>
Result<SetEcnReply> parse<SetEcnReply>(const json& m) {
  SetEcnReply s;
  Reader r = replyReader(m, cmd::setEcn);
  r.list("previous", s.previous, readEcn);
  return r.finish(std::move(s));
}

json toJson(const GetPfcReply& g) { return listReply("thresholds", g.thresholds, pfcJson); }
template <>
Result<GetPfcReply> parse<GetPfcReply>(const json& m) {
  GetPfcReply g;
  Reader r = replyReader(m, cmd::getPfc);
  r.list("thresholds", g.thresholds, readPfc);
  return r.finish(std::move(g));
}
json toJson(const SetPfcReply& s) { return listReply("previous", s.previous, pfcJson); }
template <>
Result<SetPfcReply> parse<SetPfcReply>(const json& m) {
  SetPfcReply s;
  Reader r = replyReader(m, cmd::setPfc);
  r.list("previous", s.previous, readPfc);
  return r.finish(std::move(s));
}

json toJson(const GetWatchdogReply& g) {
  json j = listReply("watchdogs", g.watchdogs, watchdogJson);
  j["poll_ms"] = g.pollMs;
  return j;
}
template <>
Result<GetWatchdogReply> parse<GetWatchdogReply>(const json& m) {
  GetWatchdogReply g;
  Reader r = replyReader(m, cmd::getWatchdog);
  r.field("poll_ms", g.pollMs);
  r.list("watchdogs", g.watchdogs, readWatchdog);
  return r.finish(std::move(g));
}
json toJson(const SetWatchdogReply& s) { return listReply("previous", s.previous, watchdogJson); }
template <>
Result<SetWatchdogReply> parse<SetWatchdogReply>(const json& m) {
  SetWatchdogReply s;
  Reader r = replyReader(m, cmd::setWatchdog);
  r.list("previous", s.previous, readWatchdog);
  return r.finish(std::move(s));
}

json toJson(const GetLinkReply& g) { return listReply("ports", g.ports, linkJson); }
template <>
Result<GetLinkReply> parse<GetLinkReply>(const json& m) {
  GetLinkReply g;
  Reader r = replyReader(m, cmd::getLink);
  r.list("ports", g.ports, readLink);
  return r.finish(std::move(g));
}
json toJson(const SetLinkReply& s) { return listReply("previous", s.previous, linkJson); }
template <>
Result<SetLinkReply> parse<SetLinkReply>(const json& m) {
  SetLinkReply s;
  Reader r = replyReader(m, cmd::setLink);
  r.list("previous", s.previous, readLink);
  return r.finish(std::move(s));
}

json toJson(const GetPortReply& g) { return listReply("ports", g.ports, settingsJson); }
template <>
Result<GetPortReply> parse<GetPortReply>(const json& m) {
  GetPortReply g;
  Reader r = replyReader(m, cmd::getPort);
  r.list("ports", g.ports, readPortSettings);
  return r.finish(std::move(g));
}
json toJson(const SetPortReply& s) { return listReply("previous", s.previous, settingsJson); }
template <>
Result<SetPortReply> parse<SetPortReply>(const json& m) {
  SetPortReply s;
  Reader r = replyReader(m, cmd::setPort);
  r.list("previous", s.previous, readPortSettings);
  return r.finish(std::move(s));
}

// ---- routing ----

json toJson(const GetRoutingReply& g) {
  json j = okReply();
  j["mode"] = g.mode;
  return j;
}
template <>
Result<GetRoutingReply> parse<GetRoutingReply>(const json& m) {
  GetRoutingReply g;
  Reader r = replyReader(m, cmd::getRouting);
  r.field("mode", g.mode);
  return r.finish(std::move(g));
}

json toJson(const SetRoutingReply& s) {
  json j = okReply();
  j["previous"] = s.previous;
  j["mode"] = s.mode;
  return j;
}
template <>
Result<SetRoutingReply> parse<SetRoutingReply>(const json& m) {
  SetRoutingReply s;
  Reader r = replyReader(m, cmd::setRouting);
  r.field("previous", s.previous);
  r.field("mode", s.mode);
  return r.finish(std::move(s));
}

}  // namespace rc::swproto
