// The lab switch's control requests: each one's fields to JSON and back (switch_protocol.hpp).
#include "labswitch/switch_protocol.hpp"

#include "labswitch/switch_protocol_internal.hpp"

namespace rc::swproto {
namespace detail {

Reader requestReader(const json& m, std::string_view cmd) {
  Reader r(m, std::string(cmd));
  if (r.has("cmd") && (!m["cmd"].is_string() || m["cmd"].get<std::string>() != cmd))
    r.fail("'cmd' must be \"" + std::string(cmd) + "\" (got " + m["cmd"].dump() + ")");
  return r;
}

Reader replyReader(const json& m, std::string_view what) {
  Reader r(m, std::string(what) + " reply");
  if (r.error()) return r;
  if (!r.has("ok")) {
    r.fail("'ok' is missing");
  } else if (m["ok"] != true) {
    auto why = m.find("error");
    r.fail("the switch refused: " + (why != m.end() && why->is_string() ? why->get<std::string>() : m.dump()));
  }
  return r;
}

json request(std::string_view cmd) { return json{{"cmd", std::string(cmd)}}; }
json okReply() { return json{{"ok", true}}; }

}  // namespace detail

using detail::put;
using detail::Reader;
using detail::request;
using detail::requestReader;

json errorReply(const std::string& why) { return json{{"ok", false}, {"error", why}}; }

// ---- requests without fields ----

json toJson(const PingRequest&) { return request(PingRequest::kCmd); }
template <>
Result<PingRequest> parse<PingRequest>(const json& m) {
  return requestReader(m, PingRequest::kCmd).finish(PingRequest{});
}

json toJson(const TopologyRequest&) { return request(TopologyRequest::kCmd); }
template <>
Result<TopologyRequest> parse<TopologyRequest>(const json& m) {
  return requestReader(m, TopologyRequest::kCmd).finish(TopologyRequest{});
}

json toJson(const MetersRequest&) { return request(MetersRequest::kCmd); }
template <>
Result<MetersRequest> parse<MetersRequest>(const json& m) {
  return requestReader(m, MetersRequest::kCmd).finish(MetersRequest{});
}

json toJson(const ResetCountersRequest&) { return request(ResetCountersRequest::kCmd); }
template <>
Result<ResetCountersRequest> parse<ResetCountersRequest>(const json& m) {
  return requestReader(m, ResetCountersRequest::kCmd).finish(ResetCountersRequest{});
}

json toJson(const GetRoutingRequest&) { return request(GetRoutingRequest::kCmd); }
template <>
Result<GetRoutingRequest> parse<GetRoutingRequest>(const json& m) {
  return requestReader(m, GetRoutingRequest::kCmd).finish(GetRoutingRequest{});
}

// ---- counters, events, meters ----

json toJson(const CountersRequest& q) {
  json j = request(CountersRequest::kCmd);
  put(j, "port", q.port);
  return j;
}
template <>
Result<CountersRequest> parse<CountersRequest>(const json& m) {
  CountersRequest q;
  Reader r = requestReader(m, CountersRequest::kCmd);
  r.field("port", q.port);
  return r.finish(std::move(q));
}

json toJson(const EventsRequest& q) {
  json j = request(EventsRequest::kCmd);
  put(j, "since", q.since);
  return j;
}
template <>
Result<EventsRequest> parse<EventsRequest>(const json& m) {
  EventsRequest q;
  Reader r = requestReader(m, EventsRequest::kCmd);
  r.field("since", q.since);
  return r.finish(std::move(q));
}

namespace {
template <typename T>
json meterRequest(const T& q) {
  json j = request(T::kCmd);
  j["port"] = q.port;
  j["l4_dst"] = q.l4Dst;
  return j;
}
template <typename T>
Result<T> parseMeterRequest(const json& m) {
  T q;
  Reader r = requestReader(m, T::kCmd);
  r.field("port", q.port);
  r.field("l4_dst", q.l4Dst);
  return r.finish(std::move(q));
}
}  // namespace

json toJson(const SetMeterRequest& q) { return meterRequest(q); }
template <>
Result<SetMeterRequest> parse<SetMeterRequest>(const json& m) {
  return parseMeterRequest<SetMeterRequest>(m);
}
json toJson(const DelMeterRequest& q) { return meterRequest(q); }
template <>
Result<DelMeterRequest> parse<DelMeterRequest>(const json& m) {
  return parseMeterRequest<DelMeterRequest>(m);
}

// ---- packet rules ----

json toJson(const AddPacketRuleRequest& q) {
  json j = request(AddPacketRuleRequest::kCmd);
  j["rule"] = q.rule;
  return j;
}
template <>
Result<AddPacketRuleRequest> parse<AddPacketRuleRequest>(const json& m) {
  AddPacketRuleRequest q;
  Reader r = requestReader(m, AddPacketRuleRequest::kCmd);
  r.field("rule", q.rule);
  if (!r.error() && !q.rule.is_object()) r.fail("'rule' must be an object (see docs/faults/packet.md)");
  return r.finish(std::move(q));
}

json toJson(const DelPacketRuleRequest& q) {
  json j = request(DelPacketRuleRequest::kCmd);
  j["name"] = q.name;
  put(j, "events", q.events);
  return j;
}
template <>
Result<DelPacketRuleRequest> parse<DelPacketRuleRequest>(const json& m) {
  DelPacketRuleRequest q;
  Reader r = requestReader(m, DelPacketRuleRequest::kCmd);
  r.field("name", q.name);
  r.field("events", q.events);
  return r.finish(std::move(q));
}

json toJson(const PacketRulesRequest& q) {
  json j = request(PacketRulesRequest::kCmd);
  put(j, "events", q.events);
  return j;
}
template <>
Result<PacketRulesRequest> parse<PacketRulesRequest>(const json& m) {
  PacketRulesRequest q;
  Reader r = requestReader(m, PacketRulesRequest::kCmd);
  r.field("events", q.events);
  return r.finish(std::move(q));
}

// ---- per-queue settings ----

json toJson(const GetEcnRequest& q) {
  json j = request(GetEcnRequest::kCmd);
  put(j, "port", q.port);
  put(j, "queue", q.queue);
  return j;
}
template <>
Result<GetEcnRequest> parse<GetEcnRequest>(const json& m) {
  GetEcnRequest q;
  Reader r = requestReader(m, GetEcnRequest::kCmd);
  r.field("port", q.port);
  r.field("queue", q.queue);
  return r.finish(std::move(q));
}

json toJson(const SetEcnRequest& q) {
  json j = request(SetEcnRequest::kCmd);
  put(j, "port", q.port);
  put(j, "queue", q.queue);
  put(j, "enabled", q.enabled);
  put(j, "kmin", q.kmin);
  put(j, "kmax", q.kmax);
  put(j, "pmax", q.pmax);
  return j;
}
template <>
Result<SetEcnRequest> parse<SetEcnRequest>(const json& m) {
  SetEcnRequest q;
  Reader r = requestReader(m, SetEcnRequest::kCmd);
  r.field("port", q.port);
  r.field("queue", q.queue);
  r.field("enabled", q.enabled);
  r.field("kmin", q.kmin);
  r.field("kmax", q.kmax);
  r.field("pmax", q.pmax);
  return r.finish(std::move(q));
}

json toJson(const GetPfcRequest& q) {
  json j = request(GetPfcRequest::kCmd);
  put(j, "port", q.port);
  put(j, "priority", q.priority);
  return j;
}
template <>
Result<GetPfcRequest> parse<GetPfcRequest>(const json& m) {
  GetPfcRequest q;
  Reader r = requestReader(m, GetPfcRequest::kCmd);
  r.field("port", q.port);
  r.field("priority", q.priority);
  return r.finish(std::move(q));
}

json toJson(const SetPfcRequest& q) {
  json j = request(SetPfcRequest::kCmd);
  put(j, "port", q.port);
  put(j, "priority", q.priority);
  put(j, "xoff", q.xoff);
  put(j, "xon", q.xon);
  return j;
}
template <>
Result<SetPfcRequest> parse<SetPfcRequest>(const json& m) {
  SetPfcRequest q;
  Reader r = requestReader(m, SetPfcRequest::kCmd);
  r.field("port", q.port);
  r.field("priority", q.priority);
  r.field("xoff", q.xoff);
  r.field("xon", q.xon);
  return r.finish(std::move(q));
}

json toJson(const GetWatchdogRequest& q) {
  json j = request(GetWatchdogRequest::kCmd);
  put(j, "port", q.port);
  put(j, "priority", q.priority);
  return j;
}
template <>
Result<GetWatchdogRequest> parse<GetWatchdogRequest>(const json& m) {
  GetWatchdogRequest q;
  Reader r = requestReader(m, GetWatchdogRequest::kCmd);
  r.field("port", q.port);
  r.field("priority", q.priority);
  return r.finish(std::move(q));
}

json toJson(const SetWatchdogRequest& q) {
  json j = request(SetWatchdogRequest::kCmd);
  put(j, "port", q.port);
  put(j, "priority", q.priority);
  put(j, "enabled", q.enabled);
  put(j, "detection_ms", q.detectionMs);
  put(j, "restoration_ms", q.restorationMs);
  put(j, "action", q.action);
  return j;
}
template <>
Result<SetWatchdogRequest> parse<SetWatchdogRequest>(const json& m) {
  SetWatchdogRequest q;
  Reader r = requestReader(m, SetWatchdogRequest::kCmd);
  r.field("port", q.port);
  r.field("priority", q.priority);
  r.field("enabled", q.enabled);
  r.field("detection_ms", q.detectionMs);
  r.field("restoration_ms", q.restorationMs);
  r.field("action", q.action);
  return r.finish(std::move(q));
}

// ---- ports, links, routing ----

json toJson(const GetLinkRequest& q) {
  json j = request(GetLinkRequest::kCmd);
  put(j, "port", q.port);
  put(j, "link", q.link);
  return j;
}
template <>
Result<GetLinkRequest> parse<GetLinkRequest>(const json& m) {
  GetLinkRequest q;
  Reader r = requestReader(m, GetLinkRequest::kCmd);
  r.field("port", q.port);
  r.field("link", q.link);
  return r.finish(std::move(q));
}

json toJson(const SetLinkRequest& q) {
  json j = request(SetLinkRequest::kCmd);
  put(j, "port", q.port);
  put(j, "link", q.link);
  j["up"] = q.up;
  return j;
}
template <>
Result<SetLinkRequest> parse<SetLinkRequest>(const json& m) {
  SetLinkRequest q;
  Reader r = requestReader(m, SetLinkRequest::kCmd);
  r.field("port", q.port);
  r.field("link", q.link);
  r.field("up", q.up);
  return r.finish(std::move(q));
}

json toJson(const GetPortRequest& q) {
  json j = request(GetPortRequest::kCmd);
  put(j, "port", q.port);
  return j;
}
template <>
Result<GetPortRequest> parse<GetPortRequest>(const json& m) {
  GetPortRequest q;
  Reader r = requestReader(m, GetPortRequest::kCmd);
  r.field("port", q.port);
  return r.finish(std::move(q));
}

json toJson(const SetPortRequest& q) {
  json j = request(SetPortRequest::kCmd);
  put(j, "port", q.port);
  put(j, "rate_bps", q.rateBps);
  put(j, "mtu", q.mtu);
  return j;
}
template <>
Result<SetPortRequest> parse<SetPortRequest>(const json& m) {
  SetPortRequest q;
  Reader r = requestReader(m, SetPortRequest::kCmd);
  r.field("port", q.port);
  r.field("rate_bps", q.rateBps);
  r.field("mtu", q.mtu);
  return r.finish(std::move(q));
}

json toJson(const SetRoutingRequest& q) {
  json j = request(SetRoutingRequest::kCmd);
  j["mode"] = q.mode;
  return j;
}
template <>
Result<SetRoutingRequest> parse<SetRoutingRequest>(const json& m) {
  SetRoutingRequest q;
  Reader r = requestReader(m, SetRoutingRequest::kCmd);
  r.field("mode", q.mode);
  return r.finish(std::move(q));
}

}  // namespace rc::swproto
