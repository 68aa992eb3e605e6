// Protocol: framing, the version handshake, and strict validation of malformed,
// oversized, ill-typed and out-of-version messages.
#include <catch2/catch.hpp>

#include "common/protocol.hpp"

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
