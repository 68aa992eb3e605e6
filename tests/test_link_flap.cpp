// link_flap and the netlink helpers against real veth links in a private network namespace.
#include <sched.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <cstdlib>
#include <stop_token>
#include <thread>

#include "faults/fault.hpp"
#include "faults/netlink.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_link_flap {

using namespace rc;
using namespace rc::faults;
using namespace std::chrono_literals;

namespace {

using rctest::kMs;
// A correctness bound, not a performance one: a loaded machine delays a wake-up by a few ms.
constexpr int64_t kTolerance = 15 * kMs;

// Moves this process into a fresh network namespace the first time it is called, before any
// test thread exists (threads inherit it). Everything the tests create dies with the process,
// and the host's own interfaces are out of reach.
void enterPrivateNetns() {
  static const bool entered = [] {
    if (unshare(CLONE_NEWNET) != 0) return false;
    // A fresh namespace holds only loopback; anything else means this is not one.
    auto links = nl::listLinks();
    return links && links->size() == 1 && (*links)[0].name == "lo";
  }();
  REQUIRE(entered);
}

using rctest::sh;

// A veth pair rcf0/rcf1, both up, made fresh for each test.
struct FlapVeth {
  FlapVeth() {
    enterPrivateNetns();
    (void)std::system("ip link del rcf0 >/dev/null 2>&1");
    sh("ip link add rcf0 type veth peer name rcf1");
    sh("ip link set rcf0 up");
    sh("ip link set rcf1 up");
    auto link = nl::getLink("rcf0");
    REQUIRE(link);
    ifindex = link->ifindex;
  }
  ~FlapVeth() { (void)std::system("ip link del rcf0 >/dev/null 2>&1"); }
  int ifindex = 0;
};

Policy labPolicy() {
  Policy p;
  p.allowlist = {"rcf0", "nothere0"};
  p.protectedInterfaces = {"lo"};
  p.defaultInterface = "rcf0";
  return p;
}

const FaultKind& flapKind() {
  const FaultKind* k = findKind("link_flap");
  REQUIRE(k != nullptr);
  return *k;
}

Result<std::unique_ptr<Fault>> makeFault(const json& raw, const Policy& policy = labPolicy()) {
  const FaultKind& k = flapKind();
  auto p = normaliseParams(k.name, k.params, raw);
  if (!p) return p.error();
  return k.create(*p, policy);
}

bool adminUp(const std::string& name) {
  auto link = nl::getLink(name);
  REQUIRE(link);
  return link->adminUp;
}

// Watches one link's admin-state transitions on its own thread with its own netlink socket,
// so the times do not depend on the fault's own bookkeeping or on the test thread.
class Observer {
 public:
  Observer(int ifindex, int transitions) {
    auto m = nl::LinkMonitor::open();
    REQUIRE(m);
    thread_ = std::thread([this, ifindex, transitions, mon = std::move(*m)]() mutable {
      bool last = true;
      auto deadline = std::chrono::steady_clock::now() + 10s;
      for (int i = 0; i < transitions; ++i) {
        auto ev = mon.waitFor(
            ifindex, [&](const nl::LinkEvent& e) { return e.adminUp != last; }, deadline);
        if (!ev) {
          error_ = ev.error().message;
          return;
        }
        last = ev->adminUp;
        seen_.push_back(*ev);
      }
    });
  }
  ~Observer() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<nl::LinkEvent>& finish() {
    thread_.join();
    INFO(error_);
    CHECK(error_.empty());
    return seen_;
  }

 private:
  std::thread thread_;
  std::vector<nl::LinkEvent> seen_;
  std::string error_;
};

void checkInterval(int64_t from, int64_t to, int64_t expected) {
  INFO("interval " << (to - from) / 1e6 << " ms, expected " << expected / 1e6 << " ms");
  CHECK(std::llabs((to - from) - expected) <= kTolerance);
}

// Between two of the fault's own events: never shorter than asked (the next step is planned
// from the instant the previous change took effect; 1 ms for reading the wall and the steady
// clock one after the other), and late by scheduling at most.
void checkHeld(int64_t from, int64_t to, int64_t asked) {
  INFO("held " << (to - from) / 1e6 << " ms, asked " << asked / 1e6 << " ms");
  CHECK(to - from >= asked - kMs);
  CHECK(to - from <= asked + kTolerance);
}

}  // namespace

TEST_CASE("netlink helpers read links in the test namespace", "[netlink]") {
  FlapVeth veth;
  auto byName = nl::getLink("rcf0");
  REQUIRE(byName);
  CHECK(byName->adminUp);
  CHECK(byName->mtu == 1500);
  CHECK(byName->mac.size() == 17);
  auto byIndex = nl::getLink(veth.ifindex);
  REQUIRE(byIndex);
  CHECK(byIndex->name == "rcf0");
  auto all = nl::listLinks();
  REQUIRE(all);
  CHECK(all->size() == 3);  // lo, rcf0, rcf1

  auto missing = nl::getLink("nothere0");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message,
             Catch::Contains("'nothere0'") && Catch::Contains("does not exist"));

  REQUIRE(nl::setAdminState(veth.ifindex, false));
  CHECK_FALSE(adminUp("rcf0"));
  REQUIRE(nl::setAdminState(veth.ifindex, true));
  CHECK(adminUp("rcf0"));
}

TEST_CASE("a 300 ms flap is down for 300 ms as the kernel reports it", "[link_flap]") {
  FlapVeth veth;
  auto fault = makeFault({{"interface", "rcf0"}, {"down", "300ms"}});
  REQUIRE(fault);
  auto snap = (*fault)->snapshot();
  REQUIRE(snap);
  CHECK((*snap)["interface"] == "rcf0");
  CHECK((*snap)["ifindex"] == veth.ifindex);
  CHECK((*snap)["admin_up"] == true);

  Observer observer(veth.ifindex, 2);
  EventLog log;
  auto r = (*fault)->run(std::stop_token{}, log);
  REQUIRE(r);
  const auto& seen = observer.finish();

  auto events = log.snapshot();
  REQUIRE(events.size() == 2);
  CHECK(events[0].what == "down");
  CHECK(events[0].detail == "rcf0");
  CHECK(events[1].what == "up");
  checkHeld(events[0].timeNs, events[1].timeNs, 300 * kMs);

  REQUIRE(seen.size() == 2);
  CHECK_FALSE(seen[0].adminUp);
  CHECK(seen[1].adminUp);
  checkInterval(seen[0].timeNs, seen[1].timeNs, 300 * kMs);
  CHECK(adminUp("rcf0"));

  // Already as the snapshot had it: revert changes nothing and says nothing.
  REQUIRE((*fault)->revert(log));
  CHECK(log.snapshot().size() == 2);
}

TEST_CASE("a train of three flaps keeps its schedule", "[link_flap]") {
  FlapVeth veth;
  auto fault = makeFault({{"interface", "rcf0"}, {"count", 3}, {"down", "100ms"}, {"up", "150ms"}});
  REQUIRE(fault);
  CHECK((*fault)->describe() == "link_flap rcf0: 3 x (down 100ms, up 150ms)");
  REQUIRE((*fault)->snapshot());

  Observer observer(veth.ifindex, 6);
  EventLog log;
  REQUIRE((*fault)->run(std::stop_token{}, log));
  const auto& seen = observer.finish();

  auto events = log.snapshot();
  REQUIRE(events.size() == 6);
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i);
    CHECK(events[i].what == (i % 2 == 0 ? "down" : "up"));
    if (i > 0) checkHeld(events[i - 1].timeNs, events[i].timeNs, i % 2 ? 100 * kMs : 150 * kMs);
  }
  REQUIRE(seen.size() == 6);
  for (size_t i = 0; i < seen.size(); ++i) {
    INFO("kernel notification " << i);
    CHECK(seen[i].adminUp == (i % 2 == 1));
    if (i > 0 && seen[i].kernelTime) {
      // The kernel's own timestamps keep the schedule as the fault's events do.
      checkInterval(seen[i - 1].timeNs, seen[i].timeNs, i % 2 ? 100 * kMs : 150 * kMs);
    } else {
      // Without SO_TIMESTAMPNS on netlink (this kernel) a notification carries the instant the
      // observer thread read it, which is the test's own scheduling (a CI run read one 65 ms
      // late on a busy machine). The schedule is the fault's events' above (the fault thread
      // reads the same notification, waiting for it); each notification must come with its
      // transition: not well before the fault saw it (either thread may read first), and before
      // the next transition was due.
      const int64_t lag = seen[i].timeNs - events[i].timeNs;
      INFO("read " << lag / 1e6 << " ms after the fault's event");
      CHECK(lag >= -50 * kMs);
      CHECK(lag < (i % 2 ? 150 : 100) * kMs);
    }
  }
  CHECK(adminUp("rcf0"));
}

TEST_CASE("jitter stretches each step by at most the jitter", "[link_flap]") {
  FlapVeth veth;
  auto fault = makeFault({{"interface", "rcf0"},
                          {"count", 2},
                          {"down", "50ms"},
                          {"up", "50ms"},
                          {"jitter", "40ms"},
                          {"seed", 7}});
  REQUIRE(fault);
  REQUIRE((*fault)->snapshot());
  EventLog log;
  REQUIRE((*fault)->run(std::stop_token{}, log));
  auto events = log.snapshot();
  REQUIRE(events.size() == 4);
  for (size_t i = 1; i < events.size(); ++i) {
    int64_t d = events[i].timeNs - events[i - 1].timeNs;
    INFO("step " << i << ": " << d / 1e6 << " ms");
    CHECK(d >= 50 * kMs - kMs);  // never shorter than asked (checkHeld)
    CHECK(d <= 90 * kMs + kTolerance);
  }
}

TEST_CASE("a stop request during the down time returns promptly and revert brings the link up",
          "[link_flap]") {
  FlapVeth veth;
  auto fault = makeFault({{"interface", "rcf0"}, {"down", "5s"}});
  REQUIRE(fault);
  REQUIRE((*fault)->snapshot());

  auto watch = nl::LinkMonitor::open();
  REQUIRE(watch);
  EventLog log;
  Result<void> result = makeError("run did not return");
  std::jthread runner([&](std::stop_token stop) { result = (*fault)->run(stop, log); });
  auto down = watch->waitFor(
      veth.ifindex, [](const nl::LinkEvent& e) { return !e.adminUp; },
      std::chrono::steady_clock::now() + 2s);
  REQUIRE(down);
  CHECK_FALSE(adminUp("rcf0"));

  auto t0 = std::chrono::steady_clock::now();
  runner.request_stop();
  runner.join();
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 200ms);
  CHECK(result);
  CHECK_FALSE(adminUp("rcf0"));  // run leaves the rest to revert

  REQUIRE((*fault)->revert(log));
  CHECK(adminUp("rcf0"));
  auto events = log.snapshot();
  REQUIRE(events.size() == 2);
  CHECK(events[0].what == "down");
  CHECK(events[1].what == "reverted");
  CHECK(events[1].detail == "rcf0");
}

TEST_CASE("revert is idempotent and restores a link that was admin-down before", "[link_flap]") {
  FlapVeth veth;
  sh("ip link set rcf0 down");
  auto fault = makeFault({{"interface", "rcf0"}, {"down", "50ms"}});
  REQUIRE(fault);
  auto snap = (*fault)->snapshot();
  REQUIRE(snap);
  CHECK((*snap)["admin_up"] == false);

  EventLog log;
  REQUIRE((*fault)->run(std::stop_token{}, log));
  auto events = log.snapshot();
  REQUIRE(events.size() == 2);
  CHECK(events[0].what == "down");
  CHECK_THAT(events[0].detail, Catch::Contains("already admin-down"));
  CHECK(events[1].what == "up");
  CHECK(adminUp("rcf0"));  // the flap ends up; revert restores the snapshot

  REQUIRE((*fault)->revert(log));
  CHECK_FALSE(adminUp("rcf0"));
  REQUIRE(log.snapshot().size() == 3);
  CHECK(log.snapshot()[2].what == "reverted");

  REQUIRE((*fault)->revert(log));
  CHECK_FALSE(adminUp("rcf0"));
  CHECK(log.snapshot().size() == 3);
}

TEST_CASE("revertRecord restores from a journal snapshot after a crash", "[link_flap]") {
  FlapVeth veth;
  const FaultKind& kind = flapKind();
  json params = {{"interface", "rcf0"}, {"down", 1'000'000'000}, {"count", 1}};
  json snap = {{"interface", "rcf0"}, {"ifindex", veth.ifindex}, {"admin_up", true}};

  sh("ip link set rcf0 down");
  REQUIRE(kind.revertRecord(params, snap, rc::faults::Policy{}));
  CHECK(adminUp("rcf0"));
  REQUIRE(kind.revertRecord(params, snap, rc::faults::Policy{}));  // idempotent
  CHECK(adminUp("rcf0"));

  SECTION("a different interface now holding the index is left alone") {
    sh("ip link set rcf0 down");
    json other = {{"interface", "other0"}, {"ifindex", veth.ifindex}, {"admin_up", true}};
    auto r = kind.revertRecord(params, other, rc::faults::Policy{});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message,
               Catch::Contains("'other0'") && Catch::Contains("renamed or replaced"));
    CHECK_FALSE(adminUp("rcf0"));
  }
  SECTION("an interface that is gone is reported") {
    json gone = {{"interface", "gone0"}, {"ifindex", 99999}, {"admin_up", true}};
    auto r = kind.revertRecord(params, gone, rc::faults::Policy{});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("'gone0'") && Catch::Contains("is gone"));
  }
  SECTION("a malformed record is refused") {
    auto r = kind.revertRecord(params, json{{"interface", "rcf0"}}, rc::faults::Policy{});
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("admin_up"));
  }
}

TEST_CASE("create refuses protected, unlisted and missing interfaces", "[link_flap]") {
  FlapVeth veth;
  SECTION("protected") {
    auto f = makeFault({{"interface", "lo"}});
    REQUIRE_FALSE(f);
    CHECK_THAT(f.error().message, Catch::Contains("'lo'") && Catch::Contains("protected"));
  }
  SECTION("not allowlisted") {
    auto f = makeFault({{"interface", "rcf1"}});
    REQUIRE_FALSE(f);
    CHECK_THAT(f.error().message, Catch::Contains("'rcf1'") && Catch::Contains("allowlist"));
  }
  SECTION("allowlisted but absent") {
    auto f = makeFault({{"interface", "nothere0"}});
    REQUIRE_FALSE(f);
    CHECK_THAT(f.error().message,
               Catch::Contains("'nothere0'") && Catch::Contains("does not exist"));
  }
  SECTION("no interface named: the policy's default") {
    auto f = makeFault(json::object());
    REQUIRE(f);
    CHECK((*f)->params()["interface"] == "rcf0");
    Policy noDefault = labPolicy();
    noDefault.defaultInterface.clear();
    auto g = makeFault(json::object(), noDefault);
    REQUIRE_FALSE(g);
    CHECK_THAT(g.error().message, Catch::Contains("no interface given"));
  }
  CHECK(adminUp("rcf0"));
  CHECK(adminUp("rcf1"));
}

TEST_CASE("defaultRouteInterface follows the namespace's default route", "[netlink]") {
  FlapVeth veth;
  auto none = nl::defaultRouteInterface();
  REQUIRE(none);
  CHECK(*none == "");

  sh("ip addr add 10.77.0.1/24 dev rcf0");
  sh("ip route add default via 10.77.0.2 dev rcf0");
  auto v4 = nl::defaultRouteInterface();
  REQUIRE(v4);
  CHECK(*v4 == "rcf0");

  // Without an IPv4 default route, the IPv6 one counts.
  sh("ip route del default");
  sh("ip -6 addr add fd00:77::1/64 dev rcf1 nodad");
  sh("ip -6 route add default via fd00:77::2 dev rcf1");
  auto v6 = nl::defaultRouteInterface();
  REQUIRE(v6);
  CHECK(*v6 == "rcf1");
}

}  // namespace test_link_flap
