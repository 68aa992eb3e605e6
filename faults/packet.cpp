// The packet fault: a rule in the lab switch that drops, marks, corrupts, delays, duplicates or
// reorders chosen frames on one node's port (RoCEv2 by QP, PSN and opcode class; TCP/UDP by
// 5-tuple), deterministically from a seed, with every acted-on frame an event and the port's
// frames captured as pcapng for the go-back-N oracle (docs/faults/packet.md). It needs the lab
// switch: a real cluster's switch has no such rule (a programmable one could host it).
//
// Safety: the rule's name is chosen and journaled before it is added, so a restarted agent
// deletes it (revertRecord); the switch deletes it by itself shortly after its duration, so a
// rule whose agent never comes back still ends; a restarted switch has no rules at all.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>

#include "common/clock.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "labswitch/packet_rules.hpp"

namespace rc::faults {
namespace {

// The switch ends a rule this long after its duration by itself (its agent gone).
constexpr int64_t kLifetimeGraceNs = 2'000'000'000;
// Acted-on frames reported as events, at most; the summary counts all.
constexpr size_t kMaxReportedEvents = 1000;

const char* kNeedsSwitch =
    "packet: needs the lab switch (a namespace or soft-RoCE lab: `rdmachaos lab up`), whose data "
    "path applies the rule; a real cluster's switch cannot drop one chosen RoCE packet (a "
    "programmable switch could: docs/faults/packet.md)";

// The switch's rule (labswitch/packet_rules.hpp) from normalised parameters.
json ruleJson(const json& p, const std::string& name, const std::string& port) {
  json r = {{"name", name}, {"port", port}};
  for (const char* k : {"direction", "protocol", "src_ip", "dst_ip", "opcode", "select", "action", "transmission"})
    if (p.contains(k) && p[k].is_string() && !p[k].get<std::string>().empty()) r[k] = p[k];
  for (const char* k : {"src_port", "dst_port", "dscp", "priority", "qpn", "psn_min", "psn_max", "n", "every",
                        "burst", "seed", "reorder_depth", "max_actions"})
    if (p.contains(k) && p[k].is_number_integer()) r[k] = p[k];
  if (p.contains("probability") && p["probability"].is_number()) r["probability"] = p["probability"];
  if (p.contains("delay")) r["delay_ns"] = p["delay"];
  if (p.contains("duration")) r["lifetime_ns"] = p["duration"].get<int64_t>() + kLifetimeGraceNs;
  if (p.contains("capture")) r["capture"] = p["capture"];
  if (p.contains("capture_limit")) r["capture_limit"] = p["capture_limit"];
  return r;
}

Result<void> check(const json& params) {
  auto r = labswitch::parseRuleSpec(ruleJson(params, "check", "port"));
  if (!r) {
    std::string m = r.error().message;  // "packet rule: 'x' ..." names the switch's field
    for (const char* f : {"'delay_ns'", "'lifetime_ns'"})
      if (auto at = m.find(f); at != std::string::npos) m.replace(at, std::strlen(f), std::strcmp(f, "'delay_ns'") == 0 ? "'delay'" : "'duration'");
    return makeError("packet" + m.substr(std::string("packet rule").size()));
  }
  if (params.value("select", "all") == "probability" && !params.contains("probability"))
    return makeError("packet: select = \"probability\" needs 'probability' (e.g. 0.001)");
  return {};
}

std::string newRuleName() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "rc-%08x%08x", rd(), rd());
  return buf;
}

Result<swproto::DelPacketRuleReply> deleteRule(const std::string& socket, const std::string& name, bool withEvents) {
  return labswitchCall(socket, swproto::DelPacketRuleRequest{.name = name, .events = withEvents});
}

class PacketFault final : public Fault {
 public:
  PacketFault(json params, std::string socket, std::string port)
      : params_(std::move(params)), socket_(std::move(socket)), port_(std::move(port)), name_(newRuleName()) {}

  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    // Nothing to read: the rule does not exist yet. Its name is journaled first, so that revert
    // after a crash finds it.
    std::lock_guard lock(m_);
    snapped_ = true;
    return json{{"socket", socket_}, {"rule", name_}, {"port", port_}};
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    {
      std::lock_guard lock(m_);
      if (!snapped_) return makeError("packet: run without a snapshot");
    }
    {
      // From here the rule may exist even if the answer is lost: revert always deletes it.
      std::lock_guard lock(m_);
      sent_ = true;
    }
    auto added = labswitchCall(socket_, swproto::AddPacketRuleRequest{.rule = ruleJson(params_, name_, port_)});
    if (!added) return makeError("packet: " + added.error().message, added.error().code);
    events.add(Event{wallNs(), "applied", "lab switch port " + port_ + " rule " + name_, false});
    if (added->rule.capture && !added->rule.capture->path.empty())
      events.add(Event{wallNs(), "capture", added->rule.capture->path, false});
    auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(params_.at("duration").get<int64_t>());
    {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait_until(lock, stop, until, [] { return false; });
    }
    return finish(events);
  }

  Result<void> revert(EventLog& events) override {
    {
      std::lock_guard lock(m_);
      if (!sent_ || finished_) return {};
    }
    return finish(events);
  }

  std::string describe() const override {
    std::string s = "packet " + params_.value("action", "") + " on lab switch port " + port_ + " (" +
                    params_.value("direction", "ingress") + ", " + params_.value("protocol", "roce");
    if (params_.contains("qpn") && params_["qpn"].get<int64_t>() >= 0) s += ", QP " + std::to_string(params_["qpn"].get<int64_t>());
    if (params_.contains("opcode")) s += ", " + params_.value("opcode", "");
    return s + ", select " + params_.value("select", "all") + ")";
  }

  std::vector<std::string> targets() const override { return {"packet faults on lab switch port '" + port_ + "'"}; }

 private:
  // Deletes the rule and reports what it did: each acted-on frame (up to a bound) and a summary.
  Result<void> finish(EventLog& events) {
    auto r = deleteRule(socket_, name_, true);
    if (!r) return makeError("packet: deleting rule " + name_ + ": " + r.error().message, r.error().code);
    {
      std::lock_guard lock(m_);
      finished_ = true;
    }
    if (!r->rule) {
      events.add(Event{wallNs(), "reverted", "rule " + name_ + " had already ended in the switch", false});
      return {};
    }
    const swproto::PacketRuleState& rule = *r->rule;
    size_t n = 0;
    if (rule.events)
      for (const auto& e : rule.events->list) {
        if (n++ >= kMaxReportedEvents) break;
        events.add(Event{e.value("wall_ns", int64_t(0)), "packet_" + e.value("action", std::string("acted")), e.dump(), false});
      }
    char buf[256];
    std::snprintf(buf, sizeof buf, "matched %llu, acted %llu, not applicable %llu, captured %llu (%llu past the limit)",
                  (unsigned long long)rule.matched, (unsigned long long)rule.acted,
                  (unsigned long long)rule.notApplicable,
                  (unsigned long long)(rule.capture ? rule.capture->frames : 0),
                  (unsigned long long)(rule.capture ? rule.capture->skipped : 0));
    events.add(Event{wallNs(), "packet_summary", buf, false});
    events.add(Event{wallNs(), "reverted", "lab switch port " + port_ + " rule " + name_ + " deleted", false});
    return {};
  }

  json params_;
  std::string socket_, port_, name_;
  std::mutex m_;
  bool snapped_ = false, sent_ = false, finished_ = false;
};

}  // namespace

extern const FaultKind kind_packet;
const FaultKind kind_packet{
    .name = "packet",
    .summary = "drops, marks, corrupts, delays, duplicates or reorders chosen frames in the lab switch "
               "(RoCEv2 by QP, PSN and opcode; TCP/UDP by 5-tuple), with a pcapng capture",
    .params = {
        {.name = "port", .type = ParamType::string, .help = "lab switch port (default: the one facing this node)",
         .optional = true},
        {.name = "direction", .type = ParamType::string,
         .help = "ingress (frames from the node) or egress (frames to it)", .defaultValue = "ingress",
         .choices = {"ingress", "egress"}},
        {.name = "protocol", .type = ParamType::string, .help = "roce (UDP 4791), tcp, udp or any",
         .defaultValue = "roce", .choices = {"roce", "tcp", "udp", "any"}},
        {.name = "src_ip", .type = ParamType::string, .help = "IPv4 source address to match", .optional = true},
        {.name = "dst_ip", .type = ParamType::string, .help = "IPv4 destination address to match", .optional = true},
        {.name = "src_port", .type = ParamType::integer, .help = "TCP/UDP source port to match (-1 any)",
         .defaultValue = -1, .min = -1, .max = 65535},
        {.name = "dst_port", .type = ParamType::integer, .help = "TCP/UDP destination port to match (-1 any)",
         .defaultValue = -1, .min = -1, .max = 65535},
        {.name = "dscp", .type = ParamType::integer, .help = "DSCP to match (-1 any)", .defaultValue = -1, .min = -1,
         .max = 63},
        {.name = "priority", .type = ParamType::integer, .help = "switch priority to match (-1 any)",
         .defaultValue = -1, .min = -1, .max = 7},
        {.name = "opcode", .type = ParamType::string, .help = "RoCE opcode class to match", .optional = true,
         .choices = {"send", "write", "read_request", "read_response", "ack", "nak", "atomic", "cnp"}},
        {.name = "qpn", .type = ParamType::integer, .help = "RoCE destination QP to match (-1 any)",
         .defaultValue = -1, .min = -1, .max = 0xffffff},
        {.name = "psn_min", .type = ParamType::integer, .help = "lowest RoCE PSN to match (-1 open)",
         .defaultValue = -1, .min = -1, .max = 0xffffff},
        {.name = "psn_max", .type = ParamType::integer, .help = "highest RoCE PSN to match (-1 open)",
         .defaultValue = -1, .min = -1, .max = 0xffffff},
        {.name = "transmission", .type = ParamType::string,
         .help = "RoCE requests: first (a PSN the QP sends for the first time), resend, or any",
         .defaultValue = "any", .choices = {"any", "first", "resend"}},
        {.name = "select", .type = ParamType::string,
         .help = "which matches: all, nth, every, burst (burst frames from the n-th), probability",
         .defaultValue = "all", .choices = {"all", "nth", "every", "burst", "probability"}},
        {.name = "n", .type = ParamType::integer, .help = "nth/burst: the first match acted on (1 = the first)",
         .defaultValue = 1, .min = 1, .max = 1e12},
        {.name = "every", .type = ParamType::integer, .help = "every: act on every k-th match", .defaultValue = 1,
         .min = 1, .max = 1e12},
        {.name = "burst", .type = ParamType::integer, .help = "burst: how many matches from the n-th",
         .defaultValue = 1, .min = 1, .max = 1e6},
        {.name = "probability", .type = ParamType::rate,
         .help = "probability: each match with this probability (0..1)", .min = 0, .max = 1, .optional = true},
        {.name = "seed", .type = ParamType::integer, .help = "seed of the probability draws (same seed, same frames)",
         .defaultValue = 1, .min = 0, .max = 9007199254740991.0},
        {.name = "action", .type = ParamType::string,
         .help = "drop, ecn_mark, corrupt (the ICRC fails), delay, duplicate, reorder, or none (capture only)",
         .choices = {"drop", "ecn_mark", "corrupt", "delay", "duplicate", "reorder", "none"}},
        {.name = "delay", .type = ParamType::duration,
         .help = "delay: how long a frame is held; reorder: at most this long", .defaultValue = int64_t(1e6),
         .min = 1e3, .max = 10e9},
        {.name = "reorder_depth", .type = ParamType::integer, .help = "reorder: frames a held one waits behind",
         .defaultValue = 1, .min = 1, .max = 1000},
        {.name = "max_actions", .type = ParamType::integer, .help = "frames acted on at most",
         .defaultValue = int64_t(1'000'000), .min = 1, .max = 1e9},
        {.name = "duration", .type = ParamType::duration, .help = "how long the rule stays in the switch",
         .defaultValue = int64_t(10e9), .min = 1 * kParamMs, .max = kParamHour - double(kLifetimeGraceNs)},
        {.name = "capture", .type = ParamType::boolean,
         .help = "write the port's matching frames (first 128 bytes) as pcapng", .defaultValue = true},
        {.name = "capture_limit", .type = ParamType::size, .help = "the capture's size at most",
         .defaultValue = int64_t(16 << 20), .min = 4096, .max = double(1ull << 30)},
        {.name = "socket", .type = ParamType::string,
         .help = "lab switch control socket: only the one of the agent's configuration ([lab] switch_socket), "
                 "the default",
         .optional = true},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      if (auto ok = check(params); !ok) return ok.error();
      if (policy.labswitchSocket.empty()) return makeError(kNeedsSwitch);
      auto sock = labswitchSocket(params.value("socket", ""), policy);
      if (!sock) return makeError("packet: " + sock.error().message);
      std::string port = labswitchHostPort(params.value("port", ""), policy);
      if (port.empty())
        return makeError("packet: no lab switch port: set 'port', or [lab] switch_port in the agent's configuration");
      json resolved = params;
      resolved["socket"] = *sock;
      resolved["port"] = port;
      return std::unique_ptr<Fault>(std::make_unique<PacketFault>(std::move(resolved), *sock, port));
    },
    .revertRecord = [](const json& /*params*/, const json& snapshot, const Policy& /*policy*/) -> Result<void> {
      if (!snapshot.is_object() || !snapshot.contains("rule") || !snapshot.contains("socket"))
        return makeError("packet journal snapshot lacks 'rule' or 'socket'");
      auto r = deleteRule(snapshot["socket"].get<std::string>(), snapshot["rule"].get<std::string>(), false);
      if (!r) return makeError("packet revert: " + r.error().message, r.error().code);
      return {};
    },
    .check = check,
    .planTarget = [](const json& params) {
      std::string port = stringParam(params, "port");
      return "packet faults on " + (port.empty() ? std::string("this node's lab switch port") : "lab switch port '" + port + "'");
    },
};

}  // namespace rc::faults
