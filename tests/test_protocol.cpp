// Protocol: framing, the version handshake, and strict validation of malformed,
// oversized, ill-typed and out-of-version messages.
#include <catch2/catch.hpp>

#include <set>

#include "common/protocol.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_protocol {

using namespace rc;
using namespace rc::proto;

TEST_CASE("frames round-trip through the incremental decoder, byte by byte") {
  json a = makeRequest(1, "heartbeat");
  json b = makeRequest(2, "clock", {{"t0", 123}});
  std::string stream = encodeFrame(a) + encodeFrame(b);
  FrameDecoder dec;
  std::vector<json> got;
  for (char c : stream) {
    dec.feed(std::string_view(&c, 1));
    while (auto m = dec.next()) {
      REQUIRE(m->ok());
      got.push_back(**m);
    }
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0] == a);
  CHECK(got[1]["t0"] == 123);
}

TEST_CASE("the length prefix is big-endian") {
  std::string f = encodeFrame(json::object());
  CHECK(f.size() == 4 + 2);
  CHECK(f[0] == 0);
  CHECK(f[3] == 2);
}

TEST_CASE("an oversized frame is refused before its body is read") {
  FrameDecoder dec;
  unsigned char hdr[4] = {0x00, 0x20, 0x00, 0x01};  // 2 MiB + 1
  dec.feed(std::string_view(reinterpret_cast<char*>(hdr), 4));
  auto m = dec.next();
  REQUIRE(m.has_value());
  REQUIRE_FALSE(m->ok());
  CHECK_THAT(m->error().message, Catch::Contains("exceeds"));
}

TEST_CASE("garbage bodies are errors, not crashes") {
  auto body = GENERATE(as<std::string>{}, "not json", "[1,2,3]", "\"string\"", "{\"a\":",
                       std::string("\xff\xfe\x00", 3), "");
  auto r = parseBody(body);
  CHECK_FALSE(r.ok());
}

TEST_CASE("valid requests parse into typed values") {
  auto env = parseRequest(makeRequest(7, "schedule",
                                      {{"fault", "f-1"},
                                       {"kind", "link_flap"},
                                       {"params", {{"down", "2s"}}},
                                       {"start_ns", 1000},
                                       {"clock_offset_ns", -5},
                                       {"lifetime_ms", 30000}}));
  REQUIRE(env.ok());
  CHECK(env->id == 7);
  const auto& s = std::get<Schedule>(env->request);
  CHECK(s.faultId == "f-1");
  CHECK(s.params["down"] == "2s");
  CHECK(s.clockOffsetNs == -5);
  CHECK(s.lifetimeMs == 30000);

  auto hello = parseRequest(makeRequest(1, "hello", {{"controller", "ctl-a"}, {"versions", {1, 2}}}));
  REQUIRE(hello.ok());
  CHECK(std::get<Hello>(hello->request).versions.size() == 2);
}

TEST_CASE("malformed and ill-typed requests are refused with the field named") {
  auto [msg, fragment] = GENERATE(table<json, std::string>({
      {json{{"id", 1}, {"type", "heartbeat"}}, "missing field 'v'"},
      {json{{"v", 1}, {"type", "heartbeat"}}, "missing field 'id'"},
      {json{{"v", 1}, {"id", -1}, {"type", "heartbeat"}}, "out of range"},
      {json{{"v", 1}, {"id", 1}, {"type", 5}}, "'type' must be a string"},
      {json{{"v", 1}, {"id", 1}, {"type", "reboot"}}, "unknown message type 'reboot'"},
      {json{{"v", 1}, {"id", 1}, {"type", "heartbeat"}, {"extra", 1}}, "unknown field 'extra'"},
      {json{{"v", 1}, {"id", 1}, {"type", "clock"}, {"t0", "now"}}, "'t0' must be an integer"},
      {json{{"v", 1}, {"id", 1}, {"type", "revert"}, {"fault", "../x"}}, "A-Z a-z 0-9"},
      {json{{"v", 1}, {"id", 1}, {"type", "schedule"}, {"fault", "f"}, {"kind", "link_flap"}},
       "missing field 'lifetime_ms'"},
      {json{{"v", 1}, {"id", 1}, {"type", "schedule"}, {"fault", "f"}, {"kind", "link_flap"},
            {"lifetime_ms", 0}},
       "out of range"},
      {json{{"v", 1}, {"id", 1}, {"type", "schedule"}, {"fault", "f"}, {"kind", "link_flap"},
            {"lifetime_ms", 10}, {"params", "down=1s"}},
       "'params' must be an object"},
      {json{{"v", 1}, {"id", 1}, {"type", "hello"}, {"controller", "c"}, {"versions", json::array()}},
       "non-empty array"},
      {json{{"v", 1}, {"id", 1}, {"type", "hello"}, {"controller", "c"}, {"versions", {"1"}}},
       "integers"},
  }));
  auto r = parseRequest(msg);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains(fragment));
}

TEST_CASE("an out-of-version message is refused with the version error code") {
  auto r = parseRequest(json{{"v", 99}, {"id", 1}, {"type", "heartbeat"}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == 1);
  CHECK_THAT(r.error().message, Catch::Contains("99"));
  // hello is parsed whatever its v, so the agent can answer with its own versions.
  CHECK(parseRequest(json{{"v", 99}, {"id", 1}, {"type", "hello"}, {"controller", "c"},
                          {"versions", {99}}})
            .ok());
}

TEST_CASE("replies: success, agent errors, and mismatches") {
  auto ok = parseReply(makeReply(3, "list", {{"faults", json::array()}}), 3, "list");
  REQUIRE(ok.ok());
  auto err = parseReply(makeError(3, kErrRefused, "interface 'mgmt0' is protected"), 3, "schedule");
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.error().message, Catch::Contains("protected") && Catch::Contains("refused"));
  CHECK_FALSE(parseReply(makeReply(4, "list"), 3, "list").ok());
  CHECK_FALSE(parseReply(makeReply(3, "status"), 3, "list").ok());
}

namespace {
json workloadStart() {
  return makeRequest(9, "workload_start",
                     {{"workload", "wl-1"},
                      {"kind", "allreduce"},
                      {"rank", 1},
                      {"world", {{{"rank", 0}, {"address", "198.19.1.11"}, {"port", 7480}},
                                 {{"rank", 1}, {"address", "198.19.1.12"}, {"port", 7480}}}},
                      {"size", 4096},
                      {"duration_ms", 2000},
                      {"streams", 2},
                      {"bin_us", 10000},
                      {"start_ns", 1000},
                      {"clock_offset_ns", -3}});
}
}  // namespace

TEST_CASE("workload_start and workload_stop parse into typed values") {
  auto env = parseRequest(workloadStart());
  REQUIRE(env.ok());
  const auto& w = std::get<WorkloadStart>(env->request);
  CHECK(w.workloadId == "wl-1");
  CHECK(w.rank == 1);
  CHECK(w.world.size() == 2);
  CHECK(w.world[1].address == "198.19.1.12");
  CHECK(w.streams == 2);
  CHECK(w.durationMs == 2000);
  CHECK(w.reconnectTimeoutMs == 10000);  // default
  CHECK(w.checksum);
  CHECK(w.transport == "tcp");  // default
  json v = workloadStart();
  v["transport"] = "verbs";
  auto ve = parseRequest(v);
  REQUIRE(ve.ok());
  CHECK(std::get<WorkloadStart>(ve->request).transport == "verbs");
  CHECK(w.qp == QpSettings{});  // NCCL's defaults and DSCP 26 when absent
  v["dscp"] = 48;
  v["qp_timeout"] = 8;
  v["qp_retry_cnt"] = 3;
  v["qp_rnr_retry"] = 0;
  auto qe = parseRequest(v);
  REQUIRE(qe.ok());
  CHECK(std::get<WorkloadStart>(qe->request).qp == QpSettings{48, 8, 3, 0});
  CHECK(w.perftest.empty());
  json p = workloadStart();
  p["kind"] = "perftest";
  auto pd = parseRequest(p);
  REQUIRE(pd.ok());
  CHECK(std::get<WorkloadStart>(pd->request).perftest == "ib_write_bw");  // the default test
  p["perftest"] = "ib_send_bw";
  auto ps = parseRequest(p);
  REQUIRE(ps.ok());
  // A name only: the agent looks it up in its own fixed list of programs.
  CHECK(std::get<WorkloadStart>(ps->request).perftest == "ib_send_bw");
  auto stop = parseRequest(makeRequest(3, "workload_stop", {{"workload", "wl-1"}}));
  REQUIRE(stop.ok());
  CHECK(std::get<WorkloadStop>(stop->request).workloadId == "wl-1");
}

TEST_CASE("malformed workload_start messages are refused with the field named") {
  auto [key, value, fragment] = GENERATE(table<std::string, json, std::string>({
      {"rank", 2, "out of range"},
      {"size", 0, "out of range"},
      {"size", int64_t(1) << 31, "out of range"},
      {"streams", 65, "out of range"},
      {"iterations", 10, "exactly one of"},
      {"world", json::array(), "array of 2 to"},
      {"world", {{{"rank", 1}, {"address", "a"}, {"port", 1}}, {{"rank", 0}, {"address", "b"}, {"port", 1}}}, "in order"},
      {"world", {{{"rank", 0}, {"address", "a"}, {"port", 0}}, {{"rank", 1}, {"address", "b"}, {"port", 1}}}, "out of range"},
      {"bin_us", 10, "out of range"},
      {"reconnect_timeout_ms", 0, "out of range"},
      {"checksum", "yes", "true or false"},
      {"transport", "udp", "field 'transport' must be \"tcp\" or \"verbs\""},
      {"transport", 1, "field 'transport' must be a string"},
      {"workload", "../x", "A-Z a-z 0-9"},
      {"colour", "red", "unknown field 'colour'"},
      {"dscp", 64, "out of range"},
      {"qp_timeout", 32, "out of range"},
      {"qp_retry_cnt", 8, "out of range"},
      {"qp_rnr_retry", -1, "out of range"},
      {"perftest", "ib_write_bw", "field 'perftest' is only for kind \"perftest\""},
      {"perftest", std::string(40, 'x'), "perftest"},
  }));
  json m = workloadStart();
  m[key] = value;
  auto r = parseRequest(m);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains(fragment));
}

TEST_CASE("telemetry and workload_ended round-trip and are validated") {
  TelemetryMsg t;
  t.workloadId = "wl-1";
  t.rank = 2;
  t.seq = 5;
  t.firstBinNs = 1'000'000'000;
  t.binNs = 10'000'000;
  t.bins = {1, 2, 3};
  t.iterations = {{0, 10, 20, 4096, true}};
  t.counters.iterations = 1;
  auto back = parseTelemetry(toJson(t));
  REQUIRE(back.ok());
  CHECK(back->bins == t.bins);
  CHECK(back->iterations[0].endNs == 20);
  CHECK(back->counters.iterations == 1);

  json bad = toJson(t);
  bad["bins"] = {-1};
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  bad["iterations"][0]["end_ns"] = 5;
  CHECK_THAT(parseTelemetry(bad).error().message, Catch::Contains("ends before"));
  bad = toJson(t);
  bad["bin_ns"] = 1;
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  bad["bins"] = std::vector<int>(kMaxTelemetryBins + 1, 0);
  CHECK_FALSE(parseTelemetry(bad).ok());

  WorkloadEnded e;
  e.workloadId = "wl-1";
  e.rank = 0;
  e.endReason = "completed";
  e.verified = true;
  e.counters.reconnects = 2;
  auto eb = parseWorkloadEnded(toJson(e));
  REQUIRE(eb.ok());
  CHECK(eb->counters.reconnects == 2);
  json m = toJson(e);
  CHECK_FALSE(m.contains("note"));  // sent only when set
  m.erase("verified");
  CHECK_FALSE(parseWorkloadEnded(m).ok());
  // A launched job's note travels; a note beyond 1024 bytes, or not a string, is refused.
  e.note = "Open MPI pml ucx, UCX_TLS=rc_verbs,ud_verbs,self on rxe0:1; mpirun exited with status 0";
  auto en = parseWorkloadEnded(toJson(e));
  REQUIRE(en.ok());
  CHECK(en->note == e.note);
  m = toJson(e);
  m["note"] = std::string(1025, 'x');
  CHECK_FALSE(parseWorkloadEnded(m).ok());
  m["note"] = 3;
  CHECK_FALSE(parseWorkloadEnded(m).ok());
}

TEST_CASE("deep nesting is refused at the decode edge, before anything recurses into it") {
  // 100000 levels of [ ... ] fit in a frame; copying or printing them would overflow the stack.
  const size_t depth = 100000;
  std::string deep = "{\"v\":1,\"id\":7,\"type\":\"schedule\",\"fault\":\"f\",\"kind\":\"link_flap\","
                     "\"params\":{\"down\":" +
                     std::string(depth, '[') + std::string(depth, ']') + "},\"lifetime_ms\":1000}";
  auto j = parseBody(deep);
  REQUIRE_FALSE(j.ok());
  CHECK_THAT(j.error().message, Catch::Contains("deeper than 32 levels"));
  // Through the stream decoder too: an error for the caller to reply with, not a crash.
  std::string frame(4, '\0');
  uint32_t n = uint32_t(deep.size());
  frame[0] = char(n >> 24), frame[1] = char(n >> 16), frame[2] = char(n >> 8), frame[3] = char(n);
  FrameDecoder dec;
  dec.feed(frame + deep);
  auto m = dec.next();
  REQUIRE(m.has_value());
  CHECK_FALSE(m->ok());
  // Brackets inside strings are text, not nesting; real messages pass.
  CHECK(parseBody("{\"a\":\"" + std::string(1000, '[') + "\\\"[{\"}").ok());
  CHECK(checkDepth("[[[[]]]]", 4).ok());
  CHECK_FALSE(checkDepth("[[[[[]]]]]", 4).ok());
  CHECK(parseBody(makeRequest(1, "schedule", {{"params", {{"a", {{"b", {1, 2, {3}}}}}}}}).dump()).ok());
}

TEST_CASE("random tokens are 64 bits of hex and do not repeat") {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; i++) {
    std::string t = randomToken();
    REQUIRE(t.size() == 16);
    CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(t);
  }
  CHECK(seen.size() == 10000);
}

TEST_CASE("a reply is never a frame the peer refuses: long event lists are cut, the rest is an error") {
  // 200 faults, each a long flap train with 2,000 events: tens of MB as one frame.
  json faults = json::array();
  for (int f = 0; f < 200; f++) {
    json events = json::array();
    for (int e = 0; e < 2000; e++)
      events.push_back({{"t_ns", int64_t(e) * 1000000}, {"what", e % 2 ? "up" : "down"}, {"detail", "data0"}});
    faults.push_back({{"id", "f" + std::to_string(f)}, {"events", events}});
  }
  json reply = makeReply(7, "list", {{"faults", faults}});
  REQUIRE(encodeFrame(reply).size() > kMaxFrameBytes);  // as sent before: the controller hung up
  auto frame = encodeBoundedFrame(reply);
  REQUIRE(frame);
  REQUIRE(frame->size() - 4 <= kMaxFrameBytes);
  FrameDecoder dec;
  dec.feed(*frame);
  auto msg = dec.next();
  REQUIRE(msg);
  REQUIRE(msg->ok());
  const json& back = **msg;
  REQUIRE(back["faults"].size() == 200);
  const json& first = back["faults"][0];
  // The first and last events survive (a train's start and its end), and the cut is counted.
  CHECK(first["events"].front()["t_ns"] == 0);
  CHECK(first["events"].back()["t_ns"] == int64_t(1999) * 1000000);
  CHECK(first["events_omitted"].get<size_t>() + first["events"].size() == 2000);
  // A small reply is untouched.
  json small = makeReply(8, "get", {{"fault", {{"events", json::array({1, 2, 3})}}}});
  CHECK(*encodeBoundedFrame(small) == encodeFrame(small));
  // What cannot fit even without events is an error, not an oversized frame.
  json huge = makeReply(9, "status", {{"blob", std::string(kMaxFrameBytes + 10, 'x')}});
  CHECK_FALSE(encodeBoundedFrame(huge));
}

TEST_CASE("revert_all reverts the caller's faults unless it says all") {
  auto mine = parseRequest(makeRequest(1, "revert_all", json::object()));
  REQUIRE(mine.ok());
  CHECK_FALSE(std::get<RevertAll>(mine->request).all);
  auto every = parseRequest(makeRequest(2, "revert_all", {{"all", true}}));
  REQUIRE(every.ok());
  CHECK(std::get<RevertAll>(every->request).all);
  CHECK_FALSE(parseRequest(makeRequest(3, "revert_all", {{"all", "yes"}})).ok());
  CHECK_FALSE(parseRequest(makeRequest(4, "revert_all", {{"everything", true}})).ok());
}

TEST_CASE("a schedule body from toJson reads back as the same Schedule; lifetimes round up") {
  using namespace rc::proto;
  CHECK(lifetimeMsFor(0) == 1);
  CHECK(lifetimeMsFor(1) == 1);
  CHECK(lifetimeMsFor(1'000'000) == 1);
  CHECK(lifetimeMsFor(1'000'001) == 2);  // never shorter than asked (inject truncated to 1 ms)
  CHECK(lifetimeMsFor(2'500'000'000) == 2500);
  Schedule s{"ctl-x-1", "link_flap", json{{"down", "1s"}}, 123456789, -42, lifetimeMsFor(1'500'000)};
  json body = toJson(s);
  body["v"] = kVersion;
  body["id"] = 9;
  body["type"] = "schedule";
  auto env = parseRequest(body);
  REQUIRE(env);
  auto* back = std::get_if<Schedule>(&env->request);
  REQUIRE(back);
  CHECK(back->faultId == s.faultId);
  CHECK(back->kind == s.kind);
  CHECK(back->params == s.params);
  CHECK(back->startNs == s.startNs);
  CHECK(back->clockOffsetNs == s.clockOffsetNs);
  CHECK(back->lifetimeMs == 2);
}

TEST_CASE("telemetry carries the NIC counters that changed, bounded and validated") {
  TelemetryMsg t;
  t.workloadId = "wl-1";
  t.binNs = 10'000'000;
  NicSample ns;
  ns.tNs = 123;
  ns.values = {{"rx_prio3_pause", 18446744073709551615ull}, {"rdma.np_cnp_sent", 7}, {"net.rx_bytes", 0}};
  t.nic = ns;
  auto back = parseTelemetry(toJson(t));
  REQUIRE(back.ok());
  REQUIRE(back->nic);
  CHECK(back->nic->tNs == 123);
  CHECK(back->nic->values == ns.values);

  t.nic.reset();
  auto none = parseTelemetry(toJson(t));
  REQUIRE(none.ok());
  CHECK_FALSE(none->nic);

  t.nic = ns;
  json bad = toJson(t);
  bad["nic"]["values"]["rx_prio3_pause"] = -1;
  CHECK_THAT(parseTelemetry(bad).error().message, Catch::Contains("'rx_prio3_pause'"));
  bad = toJson(t);
  bad["nic"]["values"]["x"] = "12";
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  bad["nic"]["values"][std::string(kMaxNicCounterName + 1, 'a')] = 1;
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  bad["nic"]["extra"] = 1;
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  bad["nic"] = json::array();
  CHECK_FALSE(parseTelemetry(bad).ok());
  bad = toJson(t);
  // (Appended, not "c" + to_string: GCC 12's false -Wrestrict at -O3, PR 105651.)
  for (size_t i = 0; i <= kMaxNicCounters; i++) bad["nic"]["values"][std::string("c").append(std::to_string(i))] = 1;
  CHECK_FALSE(parseTelemetry(bad).ok());
}

TEST_CASE("a fault_ended event from toJson reads back with its record; malformed ones are refused") {
  json record = {{"fault", "run1-0-flap-n2"}, {"state", "reverted"}, {"applied_ns", 5}, {"ended_ns", 9}};
  json m = toJson(FaultEnded{"run1-0-flap-n2", record});
  CHECK(m["type"] == "fault_ended");
  CHECK(m["id"] == 0);
  auto e = parseFaultEnded(m);
  REQUIRE(e.ok());
  CHECK(e->faultId == "run1-0-flap-n2");
  CHECK(e->record == record);
  json noId = m;
  noId["fault"].erase("fault");
  CHECK_FALSE(parseFaultEnded(noId).ok());
  json extra = m;
  extra["surprise"] = 1;
  CHECK_FALSE(parseFaultEnded(extra).ok());
  json other = m;
  other["type"] = "telemetry";
  CHECK_FALSE(parseFaultEnded(other).ok());
}

TEST_CASE("workload_start and workload_stop bodies from toJson read back as the same requests") {
  using namespace rc::proto;
  WorkloadStart w;
  w.workloadId = "wl-1";
  w.kind = "allreduce";
  w.rank = 1;
  w.world = {{0, "198.18.1.1", 7480}, {1, "198.18.1.2", 7480}};
  w.size = 1 << 20;
  w.durationMs = 5000;
  w.streams = 2;
  w.binUs = 10'000;
  w.startNs = 123;
  w.clockOffsetNs = -7;
  w.transport = "tcp";
  w.qp.dscp = 48;
  json body = toJson(w);
  CHECK_FALSE(body.contains("iterations"));
  body["v"] = kVersion;
  body["id"] = 3;
  body["type"] = "workload_start";
  auto env = parseRequest(body);
  REQUIRE(env);
  auto* back = std::get_if<WorkloadStart>(&env->request);
  REQUIRE(back);
  CHECK(back->workloadId == w.workloadId);
  CHECK(back->rank == 1);
  REQUIRE(back->world.size() == 2);
  CHECK(back->world[1].address == "198.18.1.2");
  CHECK(back->durationMs == 5000);
  CHECK(back->iterations == 0);
  CHECK(back->streams == 2);
  CHECK(back->startNs == 123);
  CHECK(back->clockOffsetNs == -7);
  CHECK(back->qp == w.qp);

  json stop = toJson(WorkloadStop{"wl-1"});
  stop["v"] = kVersion;
  stop["id"] = 4;
  stop["type"] = "workload_stop";
  auto s = parseRequest(stop);
  REQUIRE(s);
  REQUIRE(std::get_if<WorkloadStop>(&s->request));
  CHECK(std::get_if<WorkloadStop>(&s->request)->workloadId == "wl-1");
}

TEST_CASE("hello, clock, revert and revert_all bodies from toJson read back as the same requests") {
  using namespace rc::proto;
  auto back = [](json body, const char* type) {
    body["v"] = kVersion;
    body["id"] = 5;
    body["type"] = type;
    auto env = parseRequest(body);
    REQUIRE(env);
    return env->request;
  };
  auto h = back(toJson(Hello{"ctl-abc", {kVersion}}), "hello");
  REQUIRE(std::get_if<Hello>(&h));
  CHECK(std::get_if<Hello>(&h)->controllerId == "ctl-abc");
  auto c = back(toJson(ClockReq{42}), "clock");
  REQUIRE(std::get_if<ClockReq>(&c));
  CHECK(std::get_if<ClockReq>(&c)->t0 == 42);
  auto r = back(toJson(Revert{"f-1"}), "revert");
  REQUIRE(std::get_if<Revert>(&r));
  CHECK(std::get_if<Revert>(&r)->faultId == "f-1");
  auto ra = back(toJson(RevertAll{true}), "revert_all");
  REQUIRE(std::get_if<RevertAll>(&ra));
  CHECK(std::get_if<RevertAll>(&ra)->all);
  auto g = back(toJson(GetFault{"f-2"}), "get");
  REQUIRE(std::get_if<GetFault>(&g));
  CHECK(std::get_if<GetFault>(&g)->faultId == "f-2");
}

}  // namespace test_protocol
