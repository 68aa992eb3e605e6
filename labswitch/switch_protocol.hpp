// The lab switch's control protocol, typed: one struct per request and per reply, shared by the
// switch and every client (faults/, the controller's fabric sampler, the --ecn-profile CLI, tests).
//
// Wire format (docs/lab.md, "The control socket"): one JSON object per line on a unix stream
// socket. A request is {"cmd": NAME, ...fields}; its reply {"ok": true, ...fields} or
// {"ok": false, "error": WHY}. toJson() writes a message, parse<T>() reads one and refuses it
// with an error naming the field ("set_ecn: 'kmin' must be an unsigned integer"). Fields a
// message does not know are ignored, as the switch always did. This library holds no switch
// state: clients link it without the switch's data path.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace rc::swproto {

using json = nlohmann::json;

// The command names, in the order the switch lists them (its unknown-command error).
namespace cmd {
inline constexpr std::string_view ping = "ping";
inline constexpr std::string_view topology = "topology";
inline constexpr std::string_view counters = "counters";
inline constexpr std::string_view events = "events";
inline constexpr std::string_view setMeter = "set_meter";
inline constexpr std::string_view delMeter = "del_meter";
inline constexpr std::string_view meters = "meters";
inline constexpr std::string_view addPacketRule = "add_packet_rule";
inline constexpr std::string_view delPacketRule = "del_packet_rule";
inline constexpr std::string_view packetRules = "packet_rules";
inline constexpr std::string_view resetCounters = "reset_counters";
inline constexpr std::string_view getEcn = "get_ecn";
inline constexpr std::string_view setEcn = "set_ecn";
inline constexpr std::string_view getPfc = "get_pfc";
inline constexpr std::string_view setPfc = "set_pfc";
inline constexpr std::string_view getWatchdog = "get_watchdog";
inline constexpr std::string_view setWatchdog = "set_watchdog";
inline constexpr std::string_view getLink = "get_link";
inline constexpr std::string_view setLink = "set_link";
inline constexpr std::string_view getPort = "get_port";
inline constexpr std::string_view setPort = "set_port";
inline constexpr std::string_view getRouting = "get_routing";
inline constexpr std::string_view setRouting = "set_routing";
}  // namespace cmd

inline constexpr std::string_view kSwitchName = "rdmachaos-labswitch";
inline constexpr int kVersion = 1;

// A reply that carries nothing but "ok": set_meter, del_meter, reset_counters.
struct OkReply {
  friend bool operator==(const OkReply&, const OkReply&) = default;
};

// ---- ping, topology --------------------------------------------------------------------------

struct PingReply {
  std::string switchName{kSwitchName};  // "switch"
  int version = kVersion;
  friend bool operator==(const PingReply&, const PingReply&) = default;
};
struct PingRequest {
  static constexpr std::string_view kCmd = cmd::ping;
  using Reply = PingReply;
  friend bool operator==(const PingRequest&, const PingRequest&) = default;
};

struct TopologySwitch {
  std::string name;
  std::string role;  // leaf, spine or single
  std::vector<std::string> ports;
  friend bool operator==(const TopologySwitch&, const TopologySwitch&) = default;
};
struct TopologyLink {
  std::string name, a, b;  // "leaf1-spine1" between ports "leaf1:spine1" and "spine1:leaf1"
  bool up = false;
  bool routedUp = false;  // "routed_up": what ECMP's next hops reflect (after convergence)
  friend bool operator==(const TopologyLink&, const TopologyLink&) = default;
};
struct TopologyReply {
  std::vector<TopologySwitch> switches;
  std::vector<TopologyLink> links;
  std::string routing;  // ecmp or adaptive
  friend bool operator==(const TopologyReply&, const TopologyReply&) = default;
};
struct TopologyRequest {
  static constexpr std::string_view kCmd = cmd::topology;
  using Reply = TopologyReply;
  friend bool operator==(const TopologyRequest&, const TopologyRequest&) = default;
};

// ---- counters, events, meters ----------------------------------------------------------------

struct QueueCounters {
  int queue = 0;
  uint64_t depthBytes = 0, depthFrames = 0, maxDepthBytes = 0, txFrames = 0, txBytes = 0, drops = 0;
  uint64_t ecnMarked = 0, pfcRx = 0, pfcTx = 0;
  int64_t pausedNs = 0, xoffNs = 0;
  uint64_t stormGaps = 0;
  bool paused = false;
  uint64_t ingressBytes = 0;
  bool xoff = false;
  uint64_t hostHeld = 0;
  uint64_t wdStorms = 0, wdRestored = 0, wdDrops = 0;
  bool wdStorm = false;
  friend bool operator==(const QueueCounters&, const QueueCounters&) = default;
};
// Why a TAP's writes ended their runs (labswitch/switch_offload.hpp, RunEnds): `run_ends`.
struct RunEndCounters {
  uint64_t hold = 0, push = 0, shortFrame = 0, fin = 0, full = 0, marked = 0, differs = 0, evicted = 0,
           flushed = 0, alone = 0;
  friend bool operator==(const RunEndCounters&, const RunEndCounters&) = default;
};
// What a host port's NIC end cost in system calls (with offload, a call carries several frames).
struct PortIoCounters {
  uint64_t reads = 0, readFrames = 0, writes = 0, writeFrames = 0, superWrites = 0, superWriteFrames = 0;
  std::optional<RunEndCounters> runEnds;  // a TAP with offload
  std::optional<uint64_t> ringDrops;      // a veth port: frames its socket queue had no room for
  friend bool operator==(const PortIoCounters&, const PortIoCounters&) = default;
};
struct PortCounters {
  std::string name;
  std::string switchName;  // "switch"
  bool adminUp = true, up = true;
  double rateBps = 0;
  uint64_t rxFrames = 0, rxBytes = 0, rxDrops = 0, noRoute = 0, txFrames = 0, txBytes = 0;
  std::vector<QueueCounters> queues;
  std::optional<PortIoCounters> io;  // host ports only
  friend bool operator==(const PortCounters&, const PortCounters&) = default;
};
struct CountersReply {
  int64_t nowNs = 0;
  int64_t loopNs = 0;  // the event loop's age
  int64_t busyNs = 0;  // its time outside epoll_wait in that age
  std::vector<PortCounters> ports;
  friend bool operator==(const CountersReply&, const CountersReply&) = default;
};
struct CountersRequest {
  static constexpr std::string_view kCmd = cmd::counters;
  using Reply = CountersReply;
  std::optional<std::string> port;  // a port name; "*" or none: every port
  friend bool operator==(const CountersRequest&, const CountersRequest&) = default;
};

struct SwitchEvent {
  uint64_t seq = 0;
  int64_t monoNs = 0, wallNs = 0;
  std::string what;  // pfc_rx_start, pfc_rx_end, wd_detect, wd_restore, flow_start, flow_end
  std::string port;
  int priority = 0;
  int l4Dst = -1;  // flow_start/flow_end: the meter's port; -1: absent on the wire
  friend bool operator==(const SwitchEvent&, const SwitchEvent&) = default;
};
struct EventsReply {
  uint64_t lastSeq = 0;
  std::vector<SwitchEvent> events;
  friend bool operator==(const EventsReply&, const EventsReply&) = default;
};
struct EventsRequest {
  static constexpr std::string_view kCmd = cmd::events;
  using Reply = EventsReply;
  std::optional<uint64_t> since;  // events after this sequence number (none: all kept)
  friend bool operator==(const EventsRequest&, const EventsRequest&) = default;
};

struct SetMeterRequest {
  static constexpr std::string_view kCmd = cmd::setMeter;
  using Reply = OkReply;
  std::string port;  // one port, not "*"
  int l4Dst = 0;     // TCP/UDP destination port 1..65535
  friend bool operator==(const SetMeterRequest&, const SetMeterRequest&) = default;
};
struct DelMeterRequest {
  static constexpr std::string_view kCmd = cmd::delMeter;
  using Reply = OkReply;
  std::string port;
  int l4Dst = 0;
  friend bool operator==(const DelMeterRequest&, const DelMeterRequest&) = default;
};
struct MeterState {
  std::string port;
  int l4Dst = 0;
  uint64_t frames = 0, bytes = 0;
  bool active = false;
  std::optional<int64_t> firstWallNs, lastWallNs;  // null on the wire until a frame was metered
  friend bool operator==(const MeterState&, const MeterState&) = default;
};
struct MetersReply {
  std::vector<MeterState> meters;
  friend bool operator==(const MetersReply&, const MetersReply&) = default;
};
struct MetersRequest {
  static constexpr std::string_view kCmd = cmd::meters;
  using Reply = MetersReply;
  friend bool operator==(const MetersRequest&, const MetersRequest&) = default;
};

struct ResetCountersRequest {
  static constexpr std::string_view kCmd = cmd::resetCounters;
  using Reply = OkReply;
  friend bool operator==(const ResetCountersRequest&, const ResetCountersRequest&) = default;
};

// ---- packet rules (docs/faults/packet.md) ------------------------------------------------------

// A rule's capture: on the wire "capture" (the pcapng path), "capture_frames", "capture_skipped".
struct PacketRuleCapture {
  std::string path;
  uint64_t frames = 0, skipped = 0;
  friend bool operator==(const PacketRuleCapture&, const PacketRuleCapture&) = default;
};
// A rule's acted-on frames, when asked for: "events" (labswitch/packet_rules.hpp's PacketEvent
// as JSON, the run's evidence as is) and "events_total".
struct PacketRuleEvents {
  std::vector<json> list;
  uint64_t total = 0;
  friend bool operator==(const PacketRuleEvents&, const PacketRuleEvents&) = default;
};
// A rule as the switch describes it.
struct PacketRuleState {
  std::string name, port, direction, protocol, select, action;
  uint64_t matched = 0, acted = 0, notApplicable = 0, held = 0;
  std::optional<PacketRuleCapture> capture;
  std::optional<PacketRuleEvents> events;
  friend bool operator==(const PacketRuleState&, const PacketRuleState&) = default;
};
struct AddPacketRuleReply {
  PacketRuleState rule;
  friend bool operator==(const AddPacketRuleReply&, const AddPacketRuleReply&) = default;
};
struct AddPacketRuleRequest {
  static constexpr std::string_view kCmd = cmd::addPacketRule;
  using Reply = AddPacketRuleReply;
  // The rule's object, whose fields labswitch::parseRuleSpec (packet_rules.hpp) reads and checks.
  json rule = json::object();
  friend bool operator==(const AddPacketRuleRequest&, const AddPacketRuleRequest&) = default;
};
struct DelPacketRuleReply {
  std::optional<PacketRuleState> rule;  // none: "absent": the rule had already ended
  friend bool operator==(const DelPacketRuleReply&, const DelPacketRuleReply&) = default;
};
struct DelPacketRuleRequest {
  static constexpr std::string_view kCmd = cmd::delPacketRule;
  using Reply = DelPacketRuleReply;
  std::string name;
  std::optional<bool> events;  // the rule's acted-on frames in the reply
  friend bool operator==(const DelPacketRuleRequest&, const DelPacketRuleRequest&) = default;
};
struct PacketRulesReply {
  std::vector<PacketRuleState> rules;
  friend bool operator==(const PacketRulesReply&, const PacketRulesReply&) = default;
};
struct PacketRulesRequest {
  static constexpr std::string_view kCmd = cmd::packetRules;
  using Reply = PacketRulesReply;
  std::optional<bool> events;
  friend bool operator==(const PacketRulesRequest&, const PacketRulesRequest&) = default;
};

// ---- per-queue settings: ECN, PFC, watchdog ------------------------------------------------------
// A get_ request names queues by `port` ("*" or none: all) and `queue`/`priority` (none: all 8);
// its set_ twin changes the fields given on every one of them and replies with the previous values.

struct EcnSettings {
  bool enabled = true;
  uint64_t kmin = 0, kmax = 0;  // bytes
  double pmax = 0;
  friend bool operator==(const EcnSettings&, const EcnSettings&) = default;
};
struct EcnQueueState {
  std::string port;
  int queue = 0;
  EcnSettings profile;
  friend bool operator==(const EcnQueueState&, const EcnQueueState&) = default;
};
struct GetEcnReply {
  std::vector<EcnQueueState> profiles;
  friend bool operator==(const GetEcnReply&, const GetEcnReply&) = default;
};
struct SetEcnReply {
  std::vector<EcnQueueState> previous;
  friend bool operator==(const SetEcnReply&, const SetEcnReply&) = default;
};
struct GetEcnRequest {
  static constexpr std::string_view kCmd = cmd::getEcn;
  using Reply = GetEcnReply;
  std::optional<std::string> port;
  std::optional<int> queue;
  friend bool operator==(const GetEcnRequest&, const GetEcnRequest&) = default;
};
struct SetEcnRequest {
  static constexpr std::string_view kCmd = cmd::setEcn;
  using Reply = SetEcnReply;
  std::optional<std::string> port;
  std::optional<int> queue;
  std::optional<bool> enabled;
  std::optional<uint64_t> kmin, kmax;
  std::optional<double> pmax;
  friend bool operator==(const SetEcnRequest&, const SetEcnRequest&) = default;
};

struct PfcQueueState {
  std::string port;
  int priority = 0;
  uint64_t xoff = 0, xon = 0;  // bytes
  bool lossless = false;
  friend bool operator==(const PfcQueueState&, const PfcQueueState&) = default;
};
struct GetPfcReply {
  std::vector<PfcQueueState> thresholds;
  friend bool operator==(const GetPfcReply&, const GetPfcReply&) = default;
};
struct SetPfcReply {
  std::vector<PfcQueueState> previous;
  friend bool operator==(const SetPfcReply&, const SetPfcReply&) = default;
};
struct GetPfcRequest {
  static constexpr std::string_view kCmd = cmd::getPfc;
  using Reply = GetPfcReply;
  std::optional<std::string> port;
  std::optional<int> priority;
  friend bool operator==(const GetPfcRequest&, const GetPfcRequest&) = default;
};
struct SetPfcRequest {
  static constexpr std::string_view kCmd = cmd::setPfc;
  using Reply = SetPfcReply;
  std::optional<std::string> port;
  std::optional<int> priority;
  std::optional<uint64_t> xoff, xon;
  friend bool operator==(const SetPfcRequest&, const SetPfcRequest&) = default;
};

struct WatchdogQueueState {
  std::string port;
  int priority = 0;
  bool enabled = false;
  double detectionMs = 0, restorationMs = 0;
  std::string action;  // drop, forward or alert
  friend bool operator==(const WatchdogQueueState&, const WatchdogQueueState&) = default;
};
struct GetWatchdogReply {
  double pollMs = 0;
  std::vector<WatchdogQueueState> watchdogs;
  friend bool operator==(const GetWatchdogReply&, const GetWatchdogReply&) = default;
};
struct SetWatchdogReply {
  std::vector<WatchdogQueueState> previous;
  friend bool operator==(const SetWatchdogReply&, const SetWatchdogReply&) = default;
};
struct GetWatchdogRequest {
  static constexpr std::string_view kCmd = cmd::getWatchdog;
  using Reply = GetWatchdogReply;
  std::optional<std::string> port;
  std::optional<int> priority;
  friend bool operator==(const GetWatchdogRequest&, const GetWatchdogRequest&) = default;
};
struct SetWatchdogRequest {
  static constexpr std::string_view kCmd = cmd::setWatchdog;
  using Reply = SetWatchdogReply;
  std::optional<std::string> port;
  std::optional<int> priority;
  std::optional<bool> enabled;
  std::optional<double> detectionMs, restorationMs;
  std::optional<std::string> action;
  friend bool operator==(const SetWatchdogRequest&, const SetWatchdogRequest&) = default;
};

// ---- ports and links ---------------------------------------------------------------------------

struct LinkPortState {
  std::string port;
  bool adminUp = true;
  friend bool operator==(const LinkPortState&, const LinkPortState&) = default;
};
struct GetLinkReply {
  std::vector<LinkPortState> ports;
  friend bool operator==(const GetLinkReply&, const GetLinkReply&) = default;
};
struct SetLinkReply {
  std::vector<LinkPortState> previous;
  friend bool operator==(const SetLinkReply&, const SetLinkReply&) = default;
};
// An inter-switch `link` ("leaf1-spine1": both its ends), else `port` ("*" or none: all).
struct GetLinkRequest {
  static constexpr std::string_view kCmd = cmd::getLink;
  using Reply = GetLinkReply;
  std::optional<std::string> port, link;
  friend bool operator==(const GetLinkRequest&, const GetLinkRequest&) = default;
};
struct SetLinkRequest {
  static constexpr std::string_view kCmd = cmd::setLink;
  using Reply = SetLinkReply;
  std::optional<std::string> port, link;
  bool up = true;
  friend bool operator==(const SetLinkRequest&, const SetLinkRequest&) = default;
};

struct PortSettings {
  std::string port;
  double rateBps = 0;
  int mtu = 0;
  friend bool operator==(const PortSettings&, const PortSettings&) = default;
};
struct GetPortReply {
  std::vector<PortSettings> ports;
  friend bool operator==(const GetPortReply&, const GetPortReply&) = default;
};
struct SetPortReply {
  std::vector<PortSettings> previous;
  friend bool operator==(const SetPortReply&, const SetPortReply&) = default;
};
struct GetPortRequest {
  static constexpr std::string_view kCmd = cmd::getPort;
  using Reply = GetPortReply;
  std::optional<std::string> port;
  friend bool operator==(const GetPortRequest&, const GetPortRequest&) = default;
};
struct SetPortRequest {
  static constexpr std::string_view kCmd = cmd::setPort;
  using Reply = SetPortReply;
  std::optional<std::string> port;
  std::optional<double> rateBps;
  std::optional<int> mtu;
  friend bool operator==(const SetPortRequest&, const SetPortRequest&) = default;
};

// ---- routing -------------------------------------------------------------------------------------

struct GetRoutingReply {
  std::string mode;  // ecmp or adaptive
  friend bool operator==(const GetRoutingReply&, const GetRoutingReply&) = default;
};
struct SetRoutingReply {
  std::string previous, mode;
  friend bool operator==(const SetRoutingReply&, const SetRoutingReply&) = default;
};
struct GetRoutingRequest {
  static constexpr std::string_view kCmd = cmd::getRouting;
  using Reply = GetRoutingReply;
  friend bool operator==(const GetRoutingRequest&, const GetRoutingRequest&) = default;
};
struct SetRoutingRequest {
  static constexpr std::string_view kCmd = cmd::setRouting;
  using Reply = SetRoutingReply;
  std::string mode;
  friend bool operator==(const SetRoutingRequest&, const SetRoutingRequest&) = default;
};

// ---- reading and writing -------------------------------------------------------------------------

// Every request and reply type (what toJson and parse are defined for).
#define RC_SWPROTO_REQUESTS(X)                                                                      \
  X(PingRequest) X(TopologyRequest) X(CountersRequest) X(EventsRequest) X(SetMeterRequest)          \
  X(DelMeterRequest) X(MetersRequest) X(AddPacketRuleRequest) X(DelPacketRuleRequest)              \
  X(PacketRulesRequest) X(ResetCountersRequest) X(GetEcnRequest) X(SetEcnRequest) X(GetPfcRequest) \
  X(SetPfcRequest) X(GetWatchdogRequest) X(SetWatchdogRequest) X(GetLinkRequest) X(SetLinkRequest) \
  X(GetPortRequest) X(SetPortRequest) X(GetRoutingRequest) X(SetRoutingRequest)
#define RC_SWPROTO_REPLIES(X)                                                                       \
  X(OkReply) X(PingReply) X(TopologyReply) X(CountersReply) X(EventsReply) X(MetersReply)           \
  X(AddPacketRuleReply) X(DelPacketRuleReply) X(PacketRulesReply) X(GetEcnReply) X(SetEcnReply)     \
  X(GetPfcReply) X(SetPfcReply) X(GetWatchdogReply) X(SetWatchdogReply) X(GetLinkReply)             \
  X(SetLinkReply) X(GetPortReply) X(SetPortReply) X(GetRoutingReply) X(SetRoutingReply)

// A request as a line's object: {"cmd": T::kCmd, ...}; a reply: {"ok": true, ...}.
// parse<T> reads one back. A request's "cmd" must be T's (or absent); a reply must say
// "ok": true (an error reply becomes the error, quoting the switch's reason).
template <typename T>
Result<T> parse(const json& message);

#define RC_SWPROTO_DECLARE(T) \
  json toJson(const T& message); \
  template <>                    \
  Result<T> parse<T>(const json& message);
RC_SWPROTO_REQUESTS(RC_SWPROTO_DECLARE)
RC_SWPROTO_REPLIES(RC_SWPROTO_DECLARE)
#undef RC_SWPROTO_DECLARE

// An ECN profile alone ({"enabled", "kmin", "kmax", "pmax"}), as get_ecn shows one: what
// `rdmachaos-labswitch --ecn-profile show` prints and ecn_shift journals.
json toJson(const EcnSettings& profile);
template <>
Result<EcnSettings> parse<EcnSettings>(const json& profile);

// An error reply: {"ok": false, "error": WHY}.
json errorReply(const std::string& why);

}  // namespace rc::swproto
