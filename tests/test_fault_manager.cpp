// Fault manager safety on real links: journal before apply, revert on request, lease expiry,
// maximum lifetime, journal replay after a crash, shutdown. Runs in a private network
// namespace (unshare) with a veth pair, so nothing outside this process is touched.
#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "agent/fault_manager.hpp"
#include "common/clock.hpp"
#include "faults/netlink.hpp"

using namespace rc;
using namespace rc::agent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// Once per process: a private namespace with vethA <-> vethB, both up.
void privateNamespace() {
  static bool done = [] {
    if (unshare(CLONE_NEWNET) != 0) return false;
    return std::system("ip link add vethA type veth peer name vethB && ip link set vethA up && "
                       "ip link set vethB up && ip link set lo up") == 0;
  }();
  REQUIRE(done);
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rc-fm-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

faults::Policy policy() {
  faults::Policy p;
  p.allowlist = {"vethA"};
  p.protectedInterfaces = {"lo"};
  p.defaultInterface = "vethA";
  return p;
}

bool adminUp(const std::string& name) {
  auto l = nl::getLink(name);
  REQUIRE(l.ok());
  return l->adminUp;
}

proto::Schedule flap(std::string id, std::string down, int64_t lifetimeMs = 60000) {
  proto::Schedule s;
  s.faultId = std::move(id);
  s.kind = "link_flap";
  s.params = {{"down", std::move(down)}};
  s.lifetimeMs = lifetimeMs;
  return s;
}

// Waits (bounded) for a predicate; returns whether it became true.
template <typename F>
bool eventually(F f, std::chrono::milliseconds limit = 10s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return f();
}

}  // namespace

TEST_CASE("the journal entry exists while a fault is active and is gone after revert") {
  privateNamespace();
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  FaultManager m(policy(), *j, 60s, 5s);
  auto rec = m.schedule("ctl", flap("f1", "30s"));
  REQUIRE(rec.ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  CHECK(fs::exists(d.path + "/journal/f1.json"));
  std::promise<json> done;
  REQUIRE(m.revert("f1", [&](json r) { done.set_value(r); }).ok());
  auto fut = done.get_future();
  REQUIRE(fut.wait_for(5s) == std::future_status::ready);
  json r = fut.get();
  CHECK(r["end_reason"] == "reverted");
  CHECK(adminUp("vethA"));
  CHECK_FALSE(fs::exists(d.path + "/journal/f1.json"));
}

TEST_CASE("a controller whose lease runs out gets its faults reverted") {
  privateNamespace();
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 400ms);
  REQUIRE(m.schedule("ctl-gone", flap("f2", "30s")).ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(eventually([] { return adminUp("vethA"); }, 5s));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 3s);
  auto rec = m.get("f2");
  REQUIRE(rec.ok());
  REQUIRE(eventually([&] { return m.get("f2")->at("state") == "ended"; }));
  CHECK(m.get("f2")->at("end_reason") == "lease_expired");
}

TEST_CASE("heartbeats keep the lease; the agent's maximum lifetime still wins") {
  privateNamespace();
  TempDir d;
  // Max lifetime 1s even though the controller asks for 60s.
  FaultManager m(policy(), *Journal::open(d.path), 1s, 400ms);
  REQUIRE(m.schedule("ctl", flap("f3", "30s", 60000)).ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  // Keep the lease alive well past its timeout: the fault must stay until the lifetime.
  auto until = std::chrono::steady_clock::now() + 700ms;
  while (std::chrono::steady_clock::now() < until) {
    m.heartbeat("ctl");
    CHECK_FALSE(adminUp("vethA"));
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(eventually([] { return adminUp("vethA"); }, 3s));
  REQUIRE(eventually([&] { return m.get("f3")->at("state") == "ended"; }));
  CHECK(m.get("f3")->at("end_reason") == "lifetime");
  CHECK(m.get("f3")->at("lifetime_ms") == 1000);
}

TEST_CASE("journal replay after a crash restores the link before anything else") {
  privateNamespace();
  TempDir d;
  // What a crashed agent leaves: the link down and a journal entry with the snapshot.
  auto link = nl::getLink("vethA");
  REQUIRE(link.ok());
  REQUIRE(nl::setAdminState(link->ifindex, false).ok());
  {
    auto j = Journal::open(d.path);
    REQUIRE(j->add("crashed", {{"kind", "link_flap"},
                               {"params", {{"interface", "vethA"}}},
                               {"snapshot", {{"interface", "vethA"}, {"ifindex", link->ifindex},
                                             {"admin_up", true}}}})
                .ok());
    REQUIRE(j->add("garbage", {{"kind", "no_such_kind"}}).ok());
  }
  REQUIRE_FALSE(adminUp("vethA"));
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto lines = m.recoverJournal();
  CHECK(adminUp("vethA"));
  CHECK_FALSE(fs::exists(d.path + "/journal/crashed.json"));
  // An entry it cannot understand stays for an operator and is reported.
  CHECK(fs::exists(d.path + "/journal/garbage.json"));
  REQUIRE(lines.size() == 2);
  CHECK(m.status()["unrevertable"].size() == 1);
}

TEST_CASE("shutdown reverts everything that is active") {
  privateNamespace();
  TempDir d;
  {
    FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
    REQUIRE(m.schedule("ctl", flap("f4", "30s")).ok());
    REQUIRE(eventually([] { return !adminUp("vethA"); }));
    m.shutdown();
    CHECK(adminUp("vethA"));
    CHECK_FALSE(fs::exists(d.path + "/journal/f4.json"));
  }
}

TEST_CASE("refusals: protected, not allowlisted, unknown kind, bad params, duplicates, stale start") {
  privateNamespace();
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto s = flap("r1", "1s");
  s.params["interface"] = "lo";
  auto r = m.schedule("ctl", s);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("'lo' is protected"));
  s.params["interface"] = "vethB";
  r = m.schedule("ctl", s);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("'vethB' is not in the agent's allowlist"));
  s = flap("r2", "1s");
  s.kind = "meteor_strike";
  r = m.schedule("ctl", s);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("unknown fault kind 'meteor_strike'"));
  s = flap("r3", "forever");
  r = m.schedule("ctl", s);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("down"));
  s = flap("r4", "1s");
  s.startNs = wallNs() - 60'000'000'000;
  r = m.schedule("ctl", s);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("in the past"));
  REQUIRE(m.schedule("ctl", flap("dup", "2s")).ok());
  r = m.schedule("ctl", flap("dup", "2s"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("already active"));
  // Nothing refused left a journal entry behind.
  CHECK(m.activeCount() == 1);
  m.shutdown();
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("a fault scheduled for a future instant starts then, not before") {
  privateNamespace();
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto s = flap("later", "200ms");
  s.startNs = wallNs() + 500'000'000;
  REQUIRE(m.schedule("ctl", s).ok());
  std::this_thread::sleep_for(300ms);
  CHECK(adminUp("vethA"));
  REQUIRE(eventually([&] { return m.get("later")->at("state") == "ended"; }));
  auto rec = *m.get("later");
  CHECK(rec["end_reason"] == "completed");
  // Applied within a few ms of the requested instant.
  CHECK(std::llabs(rec["applied_ns"].get<int64_t>() - s.startNs) < 20'000'000);
}
