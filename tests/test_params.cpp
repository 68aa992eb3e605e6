// Parameter normalisation and the interface policy, on link_flap's parameter table.
#include <catch2/catch.hpp>

#include "faults/fault.hpp"
#include "rdmachaos_config.h"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_params {

using namespace rc;
using namespace rc::faults;

namespace {

const FaultKind& flapKind() {
  const FaultKind* k = findKind("link_flap");
  REQUIRE(k != nullptr);
  return *k;
}

Result<json> normalise(const json& raw) {
  return normaliseParams("link_flap", flapKind().params, raw);
}

}  // namespace

TEST_CASE("link_flap is registered with its documented parameters", "[params]") {
  const FaultKind& k = flapKind();
  std::vector<std::string> names;
  for (const auto& p : k.params) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"interface", "down", "count", "up", "jitter", "seed",
                                          "switch_port", "socket"});
}

TEST_CASE("defaults are filled in", "[params]") {
  auto p = normalise(json::object());
  REQUIRE(p);
  CHECK((*p)["down"] == 1'000'000'000);
  CHECK((*p)["up"] == 1'000'000'000);
  CHECK((*p)["count"] == 1);
  CHECK((*p)["jitter"] == 0);
  CHECK((*p)["seed"] == 1);
  CHECK_FALSE(p->contains("interface"));  // the agent's default interface applies at create
}

TEST_CASE("values are normalised", "[params]") {
  auto [key, value, expected] = GENERATE(table<std::string, json, json>({
      {"down", "500ms", 500'000'000},
      {"down", "2s", 2'000'000'000},
      {"down", "1ms", 1'000'000},
      {"down", "1h", 3'600'000'000'000},
      {"up", "250ms", 250'000'000},
      {"up", "1m", 60'000'000'000},
      {"jitter", "0s", 0},
      {"jitter", "0", 0},
      {"jitter", "20ms", 20'000'000},
      {"count", 3, 3},
      {"count", "1000", 1000},
      {"seed", "42", 42},
      {"seed", 0, 0},
      {"interface", "data0", "data0"},
  }));
  INFO(key << " = " << value.dump());
  auto p = normalise(json{{key, value}});
  REQUIRE(p);
  CHECK((*p)[key] == expected);
}

TEST_CASE("bad values are rejected naming the parameter", "[params]") {
  auto [raw, fragments] = GENERATE(table<json, std::vector<std::string>>({
      {json{{"bogus", 1}},
       {"no parameter 'bogus'", "known: interface, down, count, up, jitter, seed"}},
      {json{{"count", 0}}, {"'count'", "out of range", "[1, 1000]"}},
      {json{{"count", 1001}}, {"'count'", "out of range"}},
      {json{{"count", "three"}}, {"'count'", "'three' is not an integer"}},
      {json{{"count", "3x"}}, {"'count'", "not an integer"}},
      {json{{"count", true}}, {"'count'", "wrong type"}},
      {json{{"down", "500"}}, {"'down'", "needs a unit"}},
      {json{{"down", 500}}, {"'down'", "must be a duration with a unit"}},
      {json{{"down", "500 parsecs"}}, {"'down'"}},
      {json{{"down", "500us"}}, {"'down'", "out of range"}},
      {json{{"down", "2h"}}, {"'down'", "out of range"}},
      {json{{"up", "0s"}}, {"'up'", "out of range"}},
      {json{{"jitter", "61m"}}, {"'jitter'", "out of range"}},
      {json{{"down", json::array({1})}}, {"'down'", "wrong type"}},
      {json{{"interface", 5}}, {"'interface'", "must be a string"}},
      {json{{"interface", std::string(300, 'x')}}, {"'interface'", "at most 256"}},
      {json::array(), {"must be a table"}},
  }));
  INFO(raw.dump());
  auto p = normalise(raw);
  REQUIRE_FALSE(p);
  for (const auto& f : fragments) CHECK_THAT(p.error().message, Catch::Contains(f));
}

TEST_CASE("checkInterface names the interface and the fix", "[params]") {
  Policy policy;
  policy.allowlist = {"data0", "data1"};
  policy.protectedInterfaces = {"eth0", "data1"};
  policy.defaultInterface = "data0";

  CHECK(checkInterface(policy, "data0"));

  auto [name, fragments] = GENERATE(table<std::string, std::vector<std::string>>({
      {"eth0", {"'eth0'", "protected"}},
      // Protection wins over the allowlist.
      {"data1", {"'data1'", "protected"}},
      {"data7", {"'data7'", "not in the agent's allowlist [data0, data1]", "allow_interfaces"}},
      {"", {"no interface given"}},
  }));
  auto r = checkInterface(policy, name);
  REQUIRE_FALSE(r);
  for (const auto& f : fragments) CHECK_THAT(r.error().message, Catch::Contains(f));
}

TEST_CASE("an empty allowlist allows nothing", "[params]") {
  Policy policy;
  auto r = checkInterface(policy, "data0");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("'data0'") && Catch::Contains("allowlist []"));
}

// create touches nothing, and loopback exists in every namespace, so this runs unprivileged.
TEST_CASE("link_flap describes itself and validates its target", "[params]") {
  Policy policy;
  policy.allowlist = {"lo"};
  auto p = normalise(json{{"interface", "lo"}, {"count", 3}, {"down", "500ms"}});
  REQUIRE(p);
  auto f = flapKind().create(*p, policy);
  REQUIRE(f);
  CHECK((*f)->describe() == "link_flap lo: 3 x (down 500ms, up 1s)");

  auto j = normalise(json{{"interface", "lo"}, {"jitter", "20ms"}, {"seed", 9}});
  REQUIRE(j);
  auto g = flapKind().create(*j, policy);
  REQUIRE(g);
  CHECK((*g)->describe() == "link_flap lo: down 1s + jitter 20ms (seed 9)");

  SECTION("unnormalised durations are refused rather than misread") {
    auto bad = flapKind().create(json{{"interface", "lo"}, {"down", "500ms"}}, policy);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::Contains("'down'"));
  }
  SECTION("a malformed journal record is refused without touching anything") {
    auto r = flapKind().revertRecord(*p, json{{"ifindex", "1"}}, rc::faults::Policy{});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("link_flap journal snapshot"));
  }
}

TEST_CASE("one form per parameter: the normalised form is the wire's, read back unchanged, and a person's bare number is still refused") {
  using rc::faults::ParamsFrom;
  for (const auto* kind : rc::faults::registry()) {
    CAPTURE(kind->name);
    // Every kind's defaults, and link_flap's written values, normalise once and then hold.
    json written = kind->name == "link_flap" ? json{{"down", "1.5s"}, {"count", "3"}, {"jitter", "250us"}} : json::object();
    auto n = rc::faults::normaliseParams(kind->name, kind->params, written);
    if (!n) continue;  // a kind with required parameters (receiver, port, ...): below for link_flap
    auto again = rc::faults::normaliseParams(kind->name, kind->params, *n, ParamsFrom::normalised);
    REQUIRE(again.ok());
    CHECK(*again == *n);
  }
  const auto* flap = rc::faults::findKind("link_flap");
  REQUIRE(flap);
  auto n = rc::faults::normaliseParams("link_flap", flap->params, {{"down", "1.5s"}});
  REQUIRE(n.ok());
  CHECK((*n)["down"] == 1500000000);
  // The agent still checks the kind's range on the wire's integers.
  auto tooLong = rc::faults::normaliseParams("link_flap", flap->params, {{"down", int64_t(1) << 60}}, ParamsFrom::normalised);
  REQUIRE_FALSE(tooLong.ok());
  CHECK_THAT(tooLong.error().message, Catch::Contains("out of range"));
  // A person's bare number is ambiguous (2 s or 2 ns?): refused with the unit to write.
  auto bare = rc::faults::normaliseParams("link_flap", flap->params, {{"down", 2}});
  REQUIRE_FALSE(bare.ok());
  CHECK_THAT(bare.error().message, Catch::Contains("must be a duration with a unit"));
  // The agent also reads a controller that still writes "<n>ns".
  auto old = rc::faults::normaliseParams("link_flap", flap->params, {{"down", "1500000000ns"}}, ParamsFrom::normalised);
  REQUIRE(old.ok());
  CHECK((*old)["down"] == 1500000000);
}

TEST_CASE("incast refuses what it cannot do safely, and picks its role from the address", "[params][incast]") {
  const FaultKind* k = findKind("incast");
  REQUIRE(k != nullptr);
  auto make = [&](json raw, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
    auto p = normaliseParams("incast", k->params, raw);
    if (!p) return p.error();
    return k->create(*p, policy);
  };
  Policy lo;
  lo.allowlist = {"lo"};
  auto fails = [&](json raw, const Policy& policy, const std::string& needle) {
    auto r = make(std::move(raw), policy);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains(needle));
  };
  fails({{"receiver", "n1"}, {"senders", 1}}, lo, "receiver 'n1' is not an IPv4 address");
  fails({{"receiver", "127.0.0.1"}}, lo, "senders must be resolved");
  fails({{"receiver", "127.0.0.1"}, {"senders", 2}, {"fan_in", 5}}, lo, "fan_in 5 must be a multiple of senders 2");
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}, {"fan_in", 1000}}, lo, "1000 flows per sender is more than 512");
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}, {"size", "10B"}}, lo, "'size' = 10B is out of range");
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}, {"transport", "rdma"}}, lo,
        "'transport' = 'rdma' is not one of auto, verbs, tcp, udp");
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
  // Verbs asked for where no RDMA device carries the address (loopback never is one's):
  // refused when scheduled, naming the address and the way out, not when the instant comes.
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}, {"transport", "verbs"}}, lo,
        "transport \"verbs\" but no RDMA device with an ACTIVE port carries 127.0.0.1");
#endif
  // The traffic's interface must be allowlisted: here the path is lo, which is not.
  Policy none;
  none.allowlist = {"data0"};
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}}, none,
        "the path to 127.0.0.1 leaves through lo: interface 'lo' is not in the agent's allowlist");
  Policy guarded = lo;
  guarded.protectedInterfaces = {"lo"};
  fails({{"receiver", "127.0.0.1"}, {"senders", 1}}, guarded, "is protected");

  // Only the agent's data subnets: [interfaces] data_subnets, else its allowed interfaces' own.
  Policy narrow = lo;
  narrow.dataSubnets = {"127.0.0.0/30"};
  fails({{"receiver", "127.0.0.9"}, {"senders", 1}}, narrow,
        "incast: receiver '127.0.0.9' is outside this agent's data subnets (127.0.0.0/30)");
  REQUIRE(make({{"receiver", "127.0.0.2"}, {"senders", 1}}, narrow));
  CHECK_FALSE(rc::faults::parseIpv4Prefix("10.0.0.0/33"));
  CHECK_FALSE(rc::faults::parseIpv4Prefix("10.0.0.0"));
  CHECK_FALSE(rc::faults::parseIpv4Prefix("10.0.0/8"));
  CHECK(rc::faults::parseIpv4Prefix("10.0.0.0/0")->contains(0x01020304));

  auto sink = make({{"receiver", "127.0.0.1"}, {"senders", 2}, {"fan_in", 8}}, lo);
  REQUIRE(sink);
  CHECK((*sink)->describe() == "incast sink on 127.0.0.1:7490 (lo), expecting 8 flows");
  CHECK((*sink)->params()["role"] == "receiver");
  // "auto" that reaches an agent is decided by its own device: none carries loopback.
  CHECK((*sink)->params()["transport"] == "tcp");
  auto udpSink = make({{"receiver", "127.0.0.1"}, {"senders", 2}, {"fan_in", 8}, {"transport", "udp"}}, lo);
  REQUIRE(udpSink);
  CHECK((*udpSink)->describe() == "incast sink on 127.0.0.1:7490/udp (lo), expecting 8 flows");
  // Nothing outlives the agent: a journal record after a crash has nothing to restore.
  CHECK(k->revertRecord((*sink)->params(), json{{"role", "receiver"}}, rc::faults::Policy{}));
}

TEST_CASE("noop is a fault kind that changes nothing and reverts", "[params][noop]") {
  const FaultKind* k = findKind("noop");
  REQUIRE(k != nullptr);
  auto p = normaliseParams("noop", k->params, json{{"duration", "20ms"}});
  REQUIRE(p);
  auto f = k->create(*p, Policy{});
  REQUIRE(f);
  EventLog events;
  std::stop_source stop;
  REQUIRE((*f)->run(stop.get_token(), events));  // returns after its 20 ms
  REQUIRE((*f)->revert(events));
  auto ev = events.snapshot();
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].what == "applied");
  CHECK(ev[1].what == "reverted");
  CHECK(k->revertRecord(*p, json::object(), Policy{}));
}

}  // namespace test_params
