// The lab switch's control protocol (labswitch/switch_protocol.hpp): every request and reply
// round-trips through toJson and parse, the wire keeps the field names clients always sent, a
// malformed message is refused naming its field, and the switch's command table answers them.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <typeinfo>

#include "labswitch/switch_fabric.hpp"
#include "labswitch/switch_protocol.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_switch_protocol {

using namespace rc::swproto;

namespace {

std::set<std::string>& covered() {
  static std::set<std::string> names;
  return names;
}

// Through text, as on the socket, and back: the same value, and the same JSON again.
template <typename T>
void roundTrip(const T& message) {
  covered().insert(typeid(T).name());
  json wire = json::parse(toJson(message).dump());
  INFO(typeid(T).name() << ": " << wire.dump());
  auto back = parse<T>(wire);
  if (!back) FAIL(back.error().message);
  CHECK(*back == message);
  CHECK(toJson(*back) == wire);
}

template <typename T>
std::string errorOf(const json& message) {
  auto r = parse<T>(message);
  return r ? std::string() : r.error().message;
}

QueueCounters queue(int q) {
  return {.queue = q, .depthBytes = 3000, .depthFrames = 2, .maxDepthBytes = 9000, .txFrames = 11, .txBytes = 15000,
          .drops = 1, .ecnMarked = 4, .pfcRx = 5, .pfcTx = 6, .pausedNs = 7'000'000, .xoffNs = 8'000, .stormGaps = 2,
          .paused = true, .ingressBytes = 1514, .xoff = true, .hostHeld = 3, .wdStorms = 1, .wdRestored = 1,
          .wdDrops = 9, .wdStorm = q == 3};
}

PacketRuleState rule(bool withExtras) {
  PacketRuleState s{.name = "rc-1", .port = "n1", .direction = "ingress", .protocol = "roce", .select = "nth",
                    .action = "drop", .matched = 10, .acted = 1, .notApplicable = 2, .held = 0};
  if (withExtras) {
    s.capture = PacketRuleCapture{.path = "/tmp/lab/captures/packet-rc-1.pcapng", .frames = 10, .skipped = 0};
    s.events = PacketRuleEvents{
        .list = {json{{"wall_ns", 5}, {"rule", "rc-1"}, {"action", "drop"}, {"qpn", 17}, {"psn", 3}}}, .total = 1};
  }
  return s;
}

}  // namespace

TEST_CASE("switch protocol: every request and reply round-trips through toJson and parse", "[switch_protocol]") {
  // Requests, with every optional field given and with none.
  roundTrip(PingRequest{});
  roundTrip(TopologyRequest{});
  roundTrip(CountersRequest{});
  roundTrip(CountersRequest{.port = "n2"});
  roundTrip(EventsRequest{.since = uint64_t(1) << 62});
  roundTrip(EventsRequest{});
  roundTrip(SetMeterRequest{.port = "n1", .l4Dst = 4791});
  roundTrip(DelMeterRequest{.port = "leaf1:spine1", .l4Dst = 8080});
  roundTrip(MetersRequest{});
  roundTrip(AddPacketRuleRequest{.rule = {{"name", "rc-1"}, {"port", "n1"}, {"action", "drop"}, {"n", 3}}});
  roundTrip(DelPacketRuleRequest{.name = "rc-1", .events = true});
  roundTrip(DelPacketRuleRequest{.name = "rc-1"});
  roundTrip(PacketRulesRequest{.events = false});
  roundTrip(ResetCountersRequest{});
  roundTrip(GetEcnRequest{.port = "*", .queue = 3});
  roundTrip(SetEcnRequest{.port = "n2", .queue = 3, .enabled = true, .kmin = 1000, .kmax = 2000, .pmax = 0.25});
  roundTrip(SetEcnRequest{.kmin = 1000});
  roundTrip(GetPfcRequest{.port = "n4", .priority = 3});
  roundTrip(SetPfcRequest{.port = "n4", .priority = 3, .xoff = 200, .xon = 100});
  roundTrip(GetWatchdogRequest{});
  roundTrip(SetWatchdogRequest{.port = "*", .priority = 3, .enabled = false, .detectionMs = 200.5,
                               .restorationMs = 400, .action = "forward"});
  roundTrip(GetLinkRequest{.link = "leaf1-spine1"});
  roundTrip(GetLinkRequest{.port = "n2"});
  roundTrip(SetLinkRequest{.port = "n2", .up = false});
  roundTrip(SetLinkRequest{.link = "leaf1-spine1", .up = true});
  roundTrip(GetPortRequest{.port = "n1"});
  roundTrip(SetPortRequest{.port = "n1", .rateBps = 5e8, .mtu = 9000});
  roundTrip(GetRoutingRequest{});
  roundTrip(SetRoutingRequest{.mode = "adaptive"});

  // Replies.
  roundTrip(OkReply{});
  roundTrip(PingReply{});
  roundTrip(TopologyReply{
      .switches = {{.name = "leaf1", .role = "leaf", .ports = {"n1", "leaf1:spine1"}},
                   {.name = "spine1", .role = "spine", .ports = {"spine1:leaf1"}}},
      .links = {{.name = "leaf1-spine1", .a = "leaf1:spine1", .b = "spine1:leaf1", .up = true, .routedUp = false}},
      .routing = "ecmp"});
  roundTrip(CountersReply{
      .nowNs = 123456789, .loopNs = 1'000'000'000, .busyNs = 250'000'000,
      .ports = {{.name = "n1", .switchName = "leaf1", .adminUp = true, .up = false, .rateBps = 1e9, .rxFrames = 1,
                 .rxBytes = 2, .rxDrops = 3, .noRoute = 4, .txFrames = 5, .txBytes = 6,
                 .queues = {queue(0), queue(3)},
                 .io = PortIoCounters{.reads = 1, .readFrames = 2, .writes = 3, .writeFrames = 4, .superWrites = 5,
                                      .superWriteFrames = 6,
                                      .runEnds = RunEndCounters{.hold = 7, .push = 8, .shortFrame = 9, .fin = 10,
                                                                .full = 11, .marked = 12, .differs = 13,
                                                                .evicted = 14, .flushed = 15, .alone = 16}}},
                {.name = "n2", .switchName = "leaf1", .io = PortIoCounters{.reads = 1, .ringDrops = 17}},
                {.name = "leaf1:spine1", .switchName = "leaf1", .rateBps = 4e9, .queues = {queue(7)}}}});
  roundTrip(EventsReply{.lastSeq = 42,
                        .events = {{.seq = 41, .monoNs = 1, .wallNs = 2, .what = "pfc_rx_start", .port = "n1",
                                    .priority = 3},
                                   {.seq = 42, .monoNs = 3, .wallNs = 4, .what = "flow_start", .port = "n2",
                                    .priority = 0, .l4Dst = 4791}}});
  roundTrip(MetersReply{.meters = {{.port = "n1", .l4Dst = 4791, .frames = 10, .bytes = 15140, .active = true,
                                    .firstWallNs = 100, .lastWallNs = 200},
                                   {.port = "n2", .l4Dst = 8080}}});
  roundTrip(AddPacketRuleReply{.rule = rule(false)});
  roundTrip(DelPacketRuleReply{.rule = rule(true)});
  roundTrip(DelPacketRuleReply{});
  roundTrip(PacketRulesReply{.rules = {rule(false), rule(true)}});
  EcnQueueState ecn{.port = "n2", .queue = 3, .profile = {.enabled = true, .kmin = 100, .kmax = 200, .pmax = 0.5}};
  roundTrip(GetEcnReply{.profiles = {ecn}});
  roundTrip(SetEcnReply{.previous = {ecn, ecn}});
  PfcQueueState pfc{.port = "n2", .priority = 3, .xoff = 524288, .xon = 262144, .lossless = true};
  roundTrip(GetPfcReply{.thresholds = {pfc}});
  roundTrip(SetPfcReply{.previous = {pfc}});
  WatchdogQueueState wd{.port = "n2", .priority = 3, .enabled = true, .detectionMs = 200, .restorationMs = 200.5,
                        .action = "drop"};
  roundTrip(GetWatchdogReply{.pollMs = 10, .watchdogs = {wd}});
  roundTrip(SetWatchdogReply{.previous = {wd}});
  roundTrip(GetLinkReply{.ports = {{.port = "leaf1:spine1", .adminUp = true}, {.port = "spine1:leaf1", .adminUp = false}}});
  roundTrip(SetLinkReply{.previous = {{.port = "n2", .adminUp = true}}});
  roundTrip(GetPortReply{.ports = {{.port = "n1", .rateBps = 1e9, .mtu = 1500}}});
  roundTrip(SetPortReply{.previous = {{.port = "n1", .rateBps = 1e9, .mtu = 1500}}});
  roundTrip(GetRoutingReply{.mode = "adaptive"});
  roundTrip(SetRoutingReply{.previous = "ecmp", .mode = "adaptive"});

  // Every type the header lists was round-tripped above.
#define RC_TYPE_NAME(T) typeid(T).name(),
  std::set<std::string> all = {RC_SWPROTO_REQUESTS(RC_TYPE_NAME) RC_SWPROTO_REPLIES(RC_TYPE_NAME)};
#undef RC_TYPE_NAME
  for (const auto& name : all) {
    INFO(name);
    CHECK(covered().count(name) == 1);
  }
}

TEST_CASE("switch protocol: the wire is what clients sent by hand before", "[switch_protocol]") {
  auto same = [](const json& typed, const char* old) { CHECK(typed == json::parse(old)); };
  same(toJson(SetEcnRequest{.port = "n2", .queue = 3, .enabled = true, .kmin = 100, .kmax = 200, .pmax = 0.5}),
       R"({"cmd":"set_ecn","port":"n2","queue":3,"enabled":true,"kmin":100,"kmax":200,"pmax":0.5})");
  same(toJson(GetEcnRequest{.port = "n4", .queue = 3}), R"({"cmd":"get_ecn","port":"n4","queue":3})");
  same(toJson(SetLinkRequest{.link = "leaf1-spine1", .up = false}),
       R"({"cmd":"set_link","link":"leaf1-spine1","up":false})");
  same(toJson(EventsRequest{.since = 7}), R"({"cmd":"events","since":7})");
  same(toJson(CountersRequest{}), R"({"cmd":"counters"})");
  same(toJson(DelPacketRuleRequest{.name = "rc-1", .events = true}),
       R"({"cmd":"del_packet_rule","name":"rc-1","events":true})");
  same(toJson(SetWatchdogRequest{.port = "*", .priority = 3, .enabled = false}),
       R"({"cmd":"set_watchdog","port":"*","priority":3,"enabled":false})");
  same(toJson(SetMeterRequest{.port = "n1", .l4Dst = 4791}), R"({"cmd":"set_meter","port":"n1","l4_dst":4791})");
  same(toJson(SetPortRequest{.port = "n1", .rateBps = 5e8, .mtu = 9000}),
       R"({"cmd":"set_port","port":"n1","rate_bps":5e8,"mtu":9000})");
  same(toJson(SetRoutingRequest{.mode = "ecmp"}), R"({"cmd":"set_routing","mode":"ecmp"})");
  // A reply as the switch wrote it before the protocol was typed: absent l4_dst, null meter times.
  auto events = parse<EventsReply>(json::parse(
      R"({"ok":true,"last_seq":3,"events":[{"seq":3,"mono_ns":1,"wall_ns":2,"what":"wd_detect","port":"n2","priority":3}]})"));
  REQUIRE(events);
  CHECK(events->events.at(0).l4Dst == -1);
  auto meters = parse<MetersReply>(json::parse(
      R"({"ok":true,"meters":[{"port":"n1","l4_dst":4791,"frames":0,"bytes":0,"active":false,"first_wall_ns":null,"last_wall_ns":null}]})"));
  REQUIRE(meters);
  CHECK_FALSE(meters->meters.at(0).firstWallNs.has_value());
  CHECK(toJson(*meters)["meters"][0]["first_wall_ns"].is_null());
  // An unknown field is ignored, as the switch always did (a selector get_ commands do not use).
  CHECK(parse<TopologyRequest>(json::parse(R"({"cmd":"topology","port":"*"})")));
}

TEST_CASE("switch protocol: a malformed message is refused with an error naming the field", "[switch_protocol]") {
  struct Bad {
    const char* message;
    std::string (*parse)(const json&);
    const char* error;
  };
  auto bad = GENERATE(values<Bad>({
      {R"j({"cmd":"set_meter","port":"n2"})j", errorOf<SetMeterRequest>, "set_meter: 'l4_dst' is missing"},
      {R"j({"cmd":"set_meter","port":3,"l4_dst":80})j", errorOf<SetMeterRequest>, "set_meter: 'port' must be a string"},
      {R"j({"cmd":"set_ecn","kmin":-1})j", errorOf<SetEcnRequest>, "set_ecn: 'kmin' must be an unsigned integer"},
      {R"j({"cmd":"set_ecn","pmax":"high"})j", errorOf<SetEcnRequest>, "set_ecn: 'pmax' must be a number"},
      {R"j({"cmd":"set_link","port":"n2","up":"yes"})j", errorOf<SetLinkRequest>, "set_link: 'up' must be true or false"},
      {R"j({"cmd":"set_link","port":"n2"})j", errorOf<SetLinkRequest>, "set_link: 'up' is missing"},
      {R"j({"cmd":"get_ecn","queue":3.5})j", errorOf<GetEcnRequest>, "get_ecn: 'queue' must be an integer"},
      {R"j({"cmd":"set_port","mtu":99999999999})j", errorOf<SetPortRequest>, "set_port: 'mtu' must be an integer"},
      {R"j({"cmd":"set_routing"})j", errorOf<SetRoutingRequest>, "set_routing: 'mode' is missing"},
      {R"j({"cmd":"add_packet_rule","rule":"drop"})j", errorOf<AddPacketRuleRequest>, "add_packet_rule: 'rule' must be an object"},
      {R"j({"cmd":"events","since":"x"})j", errorOf<EventsRequest>, "events: 'since' must be an unsigned integer"},
      {R"j({"cmd":"del_packet_rule"})j", errorOf<DelPacketRuleRequest>, "del_packet_rule: 'name' is missing"},
      {R"j({"cmd":"pong"})j", errorOf<PingRequest>, "ping: 'cmd' must be \"ping\""},
      {R"j([1,2])j", errorOf<PingRequest>, "ping: the message is not a JSON object"},
      {R"j({"switch":"x","version":1})j", errorOf<PingReply>, "ping reply: 'ok' is missing"},
      {R"j({"ok":false,"error":"no port 'n9' (ports: n1, n2)"})j", errorOf<CountersReply>, "no port 'n9' (ports: n1, n2)"},
      {R"j({"ok":true,"now_ns":1,"loop_ns":1,"busy_ns":1,"ports":[{"name":"n1","switch":"s","admin_up":true,"up":true,
          "rate_bps":1e9,"rx_frames":0,"rx_bytes":0,"rx_drops":0,"no_route":0,"tx_frames":0,"tx_bytes":0,
          "queues":[{"queue":"zero"}]}]})j",
       errorOf<CountersReply>, "counters reply: 'ports[0].queues[0].queue' must be an integer"},
      {R"j({"ok":true,"profiles":[{"port":"n2","queue":3,"profile":{"enabled":true,"kmin":1,"pmax":0.1}}]})j",
       errorOf<GetEcnReply>, "get_ecn reply: 'profiles[0].profile.kmax' is missing"},
      {R"j({"ok":true,"rules":{}})j", errorOf<PacketRulesReply>, "packet_rules reply: 'rules' must be an array"},
      {R"j({"ok":true,"meters":[{"port":"n1","l4_dst":1,"frames":0,"bytes":0,"active":false,"first_wall_ns":"now"}]})j",
       errorOf<MetersReply>, "meters reply: 'meters[0].first_wall_ns' must be an integer"},
  }));
  INFO(bad.message);
  CHECK_THAT(bad.parse(json::parse(bad.message)), Catch::Contains(bad.error));
}

TEST_CASE("switch protocol: the switch's command table answers each command and refuses the rest",
          "[switch_protocol]") {
  rc::labswitch::Fabric fab(rc::labswitch::Config{});
  auto ping = parse<PingReply>(fab.handle(toJson(PingRequest{})));
  REQUIRE(ping);
  CHECK(ping->switchName == "rdmachaos-labswitch");
  CHECK(ping->version == 1);
  auto routing = parse<SetRoutingReply>(fab.handle(toJson(SetRoutingRequest{.mode = "adaptive"})));
  REQUIRE(routing);
  CHECK(routing->previous == "ecmp");
  auto now = parse<GetRoutingReply>(fab.handle(toJson(GetRoutingRequest{})));
  REQUIRE(now);
  CHECK(now->mode == "adaptive");
  // Refused with the parse's reason, naming the field, and nothing changed.
  json refused = fab.handle(json{{"cmd", "set_routing"}, {"mode", 1}});
  CHECK(refused["ok"] == false);
  CHECK_THAT(refused["error"].get<std::string>(), Catch::Contains("set_routing: 'mode' must be a string"));
  CHECK(parse<GetRoutingReply>(fab.handle(toJson(GetRoutingRequest{})))->mode == "adaptive");
  // An unknown command: the error lists every known one.
  json unknown = fab.handle(json{{"cmd", "reboot"}});
  CHECK(unknown["ok"] == false);
  std::string why = unknown["error"];
  CHECK_THAT(why, Catch::StartsWith("unknown command 'reboot' (ping, topology, counters, events,"));
  for (auto name : {cmd::setMeter, cmd::addPacketRule, cmd::resetCounters, cmd::setWatchdog, cmd::setRouting})
    CHECK_THAT(why, Catch::Contains(std::string(name)));
  CHECK(fab.handle(json{{"no", "cmd"}})["error"] == "a request is a JSON object with a string 'cmd'");
}

}  // namespace test_switch_protocol
