// link_degrade against the lab switch (a port's rate lowered, restored exactly, a conflict left
// alone) and against a veth's link modes (refused with the reason: a veth has none).
#include <sched.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <stop_token>
#include <thread>

#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "faults/netlink.hpp"
#include "support.hpp"
#include "test_util.hpp"

// This source in a namespace of its own: the netns sources build one program from unity chunks.
namespace test_link_degrade {

using namespace rc;
using namespace rc::faults;
using namespace std::chrono_literals;

namespace {

const FaultKind& degradeKind() {
  const FaultKind* k = findKind("link_degrade");
  REQUIRE(k != nullptr);
  return *k;
}

Result<json> normalised(const json& raw) {
  const FaultKind& k = degradeKind();
  auto p = normaliseParams(k.name, k.params, raw);
  if (!p) return p.error();
  if (auto ok = k.check(*p); !ok) return ok.error();
  return p;
}

Result<std::unique_ptr<Fault>> makeFault(const json& raw, const Policy& policy) {
  auto p = normalised(raw);
  if (!p) return p.error();
  return degradeKind().create(*p, policy);
}

double portRate(const rctest::Lab& lab, const std::string& port) {
  auto r = labswitchCall(lab.switchControl(), swproto::GetPortRequest{.port = port});
  REQUIRE(r);
  REQUIRE(r->ports.size() == 1);
  return r->ports[0].rateBps;
}

void setPortRate(const rctest::Lab& lab, const std::string& port, double bps) {
  REQUIRE(
      labswitchCall(lab.switchControl(), swproto::SetPortRequest{.port = port, .rateBps = bps}));
}

// Runs FAULT on a thread of its own (as the agent's manager does) until stopped.
struct Running {
  explicit Running(Fault& f) : fault(f) {
    thread = std::jthread([this](std::stop_token stop) { result = fault.run(stop, events); });
  }
  Result<void> stop() {
    thread.request_stop();
    thread.join();
    return result;
  }
  Fault& fault;
  EventLog events;
  Result<void> result;
  std::jthread thread;
};

}  // namespace

TEST_CASE("link_degrade checks its parameters before anything") {
  CHECK_FALSE(normalised({{"fraction", 0.5}, {"rate", "500M"}}).ok());  // one of the two
  CHECK_FALSE(normalised(json::object()).ok());                         // neither
  CHECK_FALSE(normalised({{"fraction", 1}}).ok());                      // not a degrade
  CHECK_FALSE(normalised({{"fraction", 0}}).ok());
  CHECK_FALSE(normalised({{"fraction", 0.5}, {"switch_port", "*"}}).ok());  // every port
  CHECK_FALSE(
      normalised({{"fraction", 0.5}, {"switch_port", "leaf1-spine1"}}).ok());  // a link, not a port
  auto p = normalised({{"rate", "500M"}, {"switch_port", "n2"}, {"duration", "2s"}});
  REQUIRE(p);
  CHECK((*p)["rate"] == 500'000'000);
  CHECK((*p)["duration"] == 2'000'000'000);
  // The planner's names: the port's rate, the same whichever node degrades it.
  CHECK(degradeKind().planTarget(*p) == "the rate of lab switch port 'n2'");
  CHECK(degradeKind().fabricTargets(*p) ==
        std::vector<std::string>{"the rate of lab switch port 'n2'"});
  CHECK(degradeKind().fabricTargets(*normalised({{"fraction", 0.5}})).empty());
}

// `rdmachaos inject --help` lists the kind and every one of its parameters (from the kind's table).
TEST_CASE("inject --help lists link_degrade's parameters") {
  char tmpl[] = "/tmp/rc-degrade-help-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::string dir = tmpl;
  std::string out, err;
  rctest::runCli(dir, {"inject", "--help"}, &out, &err);
  std::filesystem::remove_all(dir);
  const std::string help = out + err;
  const auto at = help.find("\n  link_degrade: ");
  REQUIRE(at != std::string::npos);
  // Its lines: the kind's, then its parameters' (indented by four), up to the next other line.
  std::string section = help.substr(at + 1);
  for (size_t i = section.find('\n'); i != std::string::npos; i = section.find('\n', i + 1))
    if (section.compare(i + 1, 4, "    ") != 0) {
      section.resize(i);
      break;
    }
  for (const auto& p : degradeKind().params) {
    INFO(p.name << " in:\n" << section);
    CHECK(section.find("    " + p.name + " ") != std::string::npos);
  }
}

TEST_CASE("link_degrade lowers a lab switch port's rate and restores exactly what it found") {
  rctest::Lab lab("rc-degrade", [] {
    rc::lab::UpOptions o;
    o.nodes = 1;
    o.rateBps = 800e6;
    return o;
  }());
  Policy policy;
  policy.labswitchSocket = lab.switchControl();
  policy.labswitchPort = "n1";

  SECTION("a fraction of the rate found, for its duration, then back") {
    auto f = makeFault({{"fraction", 0.25}}, policy);
    REQUIRE(f);
    CHECK((*f)->targets() == std::vector<std::string>{"the rate of lab switch port 'n1'"});
    auto snap = (*f)->snapshot();
    REQUIRE(snap);
    CHECK((*snap)["rate_bps"] == 800e6);
    CHECK((*snap)["applied_bps"] == 200e6);
    CHECK(portRate(lab, "n1") == 800e6);  // the snapshot touches nothing
    Running r(**f);
    REQUIRE(rctest::eventually([&] { return portRate(lab, "n1") == 200e6; }, 2s));
    REQUIRE(r.stop());
    EventLog ev;
    REQUIRE((*f)->revert(ev));
    CHECK(portRate(lab, "n1") == 800e6);
    REQUIRE((*f)->revert(ev));  // idempotent
    CHECK(portRate(lab, "n1") == 800e6);
  }
  SECTION("an absolute rate; a port already at or below it is refused, touching nothing") {
    auto f = makeFault({{"rate", "300M"}, {"switch_port", "n1"}}, policy);
    REQUIRE(f);
    REQUIRE((*f)->snapshot());
    setPortRate(lab, "n1", 300e6);
    auto g = makeFault({{"rate", "300M"}}, policy);
    REQUIRE(g);
    auto refused = (*g)->snapshot();
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code == EBUSY);
    CHECK(portRate(lab, "n1") == 300e6);
    setPortRate(lab, "n1", 800e6);
  }
  SECTION("a rate someone else changed since is left alone: a revert conflict") {
    auto f = makeFault({{"fraction", 0.5}}, policy);
    REQUIRE(f);
    REQUIRE((*f)->snapshot());
    Running r(**f);
    REQUIRE(rctest::eventually([&] { return portRate(lab, "n1") == 400e6; }, 2s));
    setPortRate(lab, "n1", 700e6);  // an operator
    REQUIRE(r.stop());
    EventLog ev;
    auto rev = (*f)->revert(ev);
    REQUIRE_FALSE(rev);
    CHECK(rev.error().code == kRevertConflict);
    CHECK(portRate(lab, "n1") == 700e6);
    setPortRate(lab, "n1", 800e6);
  }
  SECTION("after a crash, the journal's record restores only over its own change") {
    auto f = makeFault({{"fraction", 0.5}}, policy);
    REQUIRE(f);
    auto snap = (*f)->snapshot();
    REQUIRE(snap);
    Running r(**f);
    REQUIRE(rctest::eventually([&] { return portRate(lab, "n1") == 400e6; }, 2s));
    REQUIRE(r.stop());
    // The agent died here: a new one reverts from the journal.
    REQUIRE(degradeKind().revertRecord((*f)->params(), *snap, policy));
    CHECK(portRate(lab, "n1") == 800e6);
    REQUIRE(degradeKind().revertRecord((*f)->params(), *snap, policy));  // idempotent
    setPortRate(lab, "n1", 650e6);
    auto conflict = degradeKind().revertRecord((*f)->params(), *snap, policy);
    REQUIRE_FALSE(conflict);
    CHECK(conflict.error().code == kRevertConflict);
    CHECK(portRate(lab, "n1") == 650e6);
    setPortRate(lab, "n1", 800e6);
  }
}

// A veth has no link modes (its driver reports a speed but supports none and cannot set any):
// the fault is refused when it is created, with the reason, and nothing changes.
TEST_CASE("link_degrade on a veth is refused: its driver has no link modes") {
  static const bool entered = [] {
    if (unshare(CLONE_NEWNET) != 0) return false;
    auto links = nl::listLinks();
    return links && links->size() == 1 && (*links)[0].name == "lo";
  }();
  REQUIRE(entered);
  (void)std::system("ip link del rcd0 >/dev/null 2>&1");
  rctest::sh("ip link add rcd0 type veth peer name rcd1");
  rctest::sh("ip link set rcd0 up");
  rctest::sh("ip link set rcd1 up");
  struct Cleanup {
    ~Cleanup() { (void)std::system("ip link del rcd0 >/dev/null 2>&1"); }
  } cleanup;
  Policy policy;
  policy.allowlist = {"rcd0"};
  policy.protectedInterfaces = {"lo"};
  auto before = nl::getLink("rcd0");
  REQUIRE(before);
  auto f = makeFault({{"fraction", 0.5}, {"interface", "rcd0"}}, policy);
  REQUIRE_FALSE(f);
  INFO(f.error().message);
  CHECK(f.error().code == EOPNOTSUPP);
  CHECK(f.error().message.find("no link modes") != std::string::npos);
  CHECK(f.error().message.find("nothing changed") != std::string::npos);
  auto after = nl::getLink("rcd0");
  REQUIRE(after);
  CHECK(after->adminUp == before->adminUp);
  // Outside the allowlist it is refused before the driver is asked.
  auto g = makeFault({{"fraction", 0.5}, {"interface", "rcd1"}}, policy);
  REQUIRE_FALSE(g);
  CHECK(g.error().code == EPERM);
}

}  // namespace test_link_degrade
