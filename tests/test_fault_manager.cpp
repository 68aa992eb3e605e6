// Fault manager safety on real links: journal before apply, revert on request, lease expiry,
// maximum lifetime, journal replay after a crash, shutdown. Runs in a private network
// namespace (unshare) with a veth pair, so nothing outside this process is touched.
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <catch2/catch.hpp>
#include "support.hpp"
#include "test_util.hpp"
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "agent/fault_manager.hpp"
#include "common/clock.hpp"
#include "common/fd_reserve.hpp"
#include "common/unique_fd.hpp"
#include "faults/netlink.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_fault_manager {

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

using rctest::TempDir;

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

void setAdmin(const std::string& name, bool up) {
  auto l = nl::getLink(name);
  REQUIRE(l.ok());
  REQUIRE(nl::setAdminState(l->ifindex, up).ok());
}

// Restores vethA to admin-up when a test ends, also after a failed assertion.
struct UpAtEnd {
  ~UpAtEnd() {
    if (auto l = nl::getLink("vethA"); l.ok()) (void)nl::setAdminState(l->ifindex, true);
  }
};

proto::Schedule flap(std::string id, std::string down, int64_t lifetimeMs = 60000) {
  proto::Schedule s;
  s.faultId = std::move(id);
  s.kind = "link_flap";
  s.params = {{"down", std::move(down)}};
  s.lifetimeMs = lifetimeMs;
  return s;
}

json readJournal(const std::string& dir, const std::string& id) {
  std::ifstream in(dir + "/journal/" + id + ".json");
  json j = json::parse(in, nullptr, false);
  return j.is_object() ? j.value("record", json()) : json();
}

using rctest::eventually;

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
  // An entry it cannot understand is moved aside for an operator and reported.
  CHECK_FALSE(fs::exists(d.path + "/journal/garbage.json"));
  CHECK(fs::exists(d.path + "/journal/quarantine/garbage.json"));
  REQUIRE(lines.size() == 2);
  CHECK(m.status()["quarantined"].size() == 1);
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

TEST_CASE("one owner per target: the issue's two flaps on one interface") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  // `inject link_flap --set down=4s --for 6s`, scaled down ...
  REQUIRE(m.schedule("ctl-a", flap("first", "1200ms", 2000)).ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  std::this_thread::sleep_for(300ms);
  // ... and a moment later `--set down=500ms --set up=500ms --set count=6 --for 8s`.
  auto second = flap("second", "100ms", 3000);
  second.params["up"] = "100ms";
  second.params["count"] = 6;
  auto r = m.schedule("ctl-b", second);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message,
             Catch::Contains("interface 'vethA' is held by fault 'first' (link_flap, controller "
                             "'ctl-a') until") &&
                 Catch::Contains("UTC") && Catch::Contains("from now") &&
                 Catch::Contains("revert 'first' first"));
  CHECK_FALSE(fs::exists(d.path + "/journal/second.json"));
  CHECK_FALSE(m.get("second").ok());
  // The holder ends as it would have alone: the link as before, the journal empty.
  REQUIRE(eventually([&] { return m.get("first")->at("state") == "ended"; }));
  CHECK(m.get("first")->at("end_reason") == "completed");
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
  // Once it ended, the target is free again.
  REQUIRE(m.schedule("ctl-b", flap("third", "100ms", 1000)).ok());
  REQUIRE(eventually([&] { return m.get("third")->at("state") == "ended"; }));
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("one owner per target: windows that do not overlap follow one another") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  // A long down cut at its lifetime, and a second one due exactly when the first one's window
  // ends (a playbook's next trial): both accepted, the second applied after the first's revert.
  int64_t t0 = wallNs() + 200'000'000;
  auto a = flap("w1", "30s", 500);
  a.startNs = t0;
  auto b = flap("w2", "200ms", 1000);
  b.startNs = t0 + 500'000'000;
  REQUIRE(m.schedule("ctl", a).ok());
  REQUIRE(m.schedule("ctl", b).ok());
  // Overlapping the second's window is refused even before either started.
  auto c = flap("w3", "100ms", 300);
  c.startNs = t0 + 1'200'000'000;
  auto refused = m.schedule("ctl", c);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("held by fault 'w2'"));
  REQUIRE(eventually([&] { return m.get("w2")->at("state") == "ended"; }));
  CHECK(m.get("w1")->at("end_reason") == "lifetime");
  CHECK(m.get("w2")->at("end_reason") == "completed");
  CHECK(m.get("w2")->at("applied_ns").get<int64_t>() >= m.get("w1")->at("ended_ns").get<int64_t>());
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("the snapshot is taken when the fault is applied, not when it is scheduled") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto s = flap("late-snap", "200ms");
  s.startNs = wallNs() + 500'000'000;
  REQUIRE(m.schedule("ctl", s).ok());
  // The journal knows the fault before it runs, but holds no snapshot yet.
  REQUIRE(fs::exists(d.path + "/journal/late-snap.json"));
  CHECK(readJournal(d.path, "late-snap").contains("targets"));
  CHECK_FALSE(readJournal(d.path, "late-snap").contains("snapshot"));
  // Between scheduling and the instant, an operator takes the link down.
  setAdmin("vethA", false);
  REQUIRE(eventually([&] { return m.get("late-snap")->at("state") == "ended"; }));
  CHECK(m.get("late-snap")->at("end_reason") == "completed");
  // Restored to what it was when the fault was applied: down.
  CHECK_FALSE(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("a fault that was never applied is never reverted") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto s = flap("never", "1s");
  s.startNs = wallNs() + 3'000'000'000;
  REQUIRE(m.schedule("ctl", s).ok());
  setAdmin("vethA", false);
  std::promise<json> done;
  REQUIRE(m.revert("never", [&](json r) { done.set_value(r); }).ok());
  auto fut = done.get_future();
  REQUIRE(fut.wait_for(5s) == std::future_status::ready);
  json r = fut.get();
  CHECK(r["end_reason"] == "reverted");
  CHECK(r["applied_ns"] == 0);
  // Nothing restored over the operator's change, and nothing left journaled.
  CHECK_FALSE(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("a journal entry is never overwritten by a new fault with the same id") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  auto link = nl::getLink("vethA");
  REQUIRE(link.ok());
  json left = {{"kind", "link_flap"},
               {"params", {{"interface", "vethA"}}},
               {"snapshot", {{"interface", "vethA"}, {"ifindex", link->ifindex}, {"admin_up", true}}}};
  {
    auto j = Journal::open(d.path);
    REQUIRE(j->add("reused", left).ok());
  }
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  auto r = m.schedule("ctl", flap("reused", "1s"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("already exists"));
  CHECK(readJournal(d.path, "reused") == left);
  CHECK(adminUp("vethA"));
}

TEST_CASE("a malformed journal entry is quarantined; the others are still replayed") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  auto link = nl::getLink("vethA");
  REQUIRE(link.ok());
  setAdmin("vethA", false);
  {
    auto j = Journal::open(d.path);
    // A value of the wrong type deep in a snapshot: reading it throws.
    REQUIRE(j->add("a-bad", {{"kind", "pfc_storm"},
                             {"params", json::object()},
                             {"snapshot", {{"interface", "vethA"}, {"priorities_vector", "x"}}}})
                .ok());
    REQUIRE(j->add("b-good", {{"kind", "link_flap"},
                              {"params", {{"interface", "vethA"}}},
                              {"snapshot", {{"interface", "vethA"},
                                            {"ifindex", link->ifindex},
                                            {"admin_up", true}}}})
                .ok());
    REQUIRE(j->add("d-never", {{"kind", "link_flap"}, {"params", {{"interface", "vethA"}}}}).ok());
  }
  std::ofstream(d.path + "/journal/c-corrupt.json") << "{\"fault\": [";
  auto j = Journal::open(d.path);
  auto replay = FaultManager::replayJournal(*j, policy());
  CHECK(adminUp("vethA"));
  CHECK(replay.quarantined == std::vector<std::string>{"a-bad", "c-corrupt"});
  CHECK(replay.unrevertable.empty());
  CHECK(fs::exists(d.path + "/journal/quarantine/a-bad.json"));
  CHECK(fs::exists(d.path + "/journal/quarantine/c-corrupt.json"));
  CHECK(j->list()->empty());
  REQUIRE(replay.lines.size() == 4);
  CHECK_THAT(replay.lines[0], Catch::Contains("'a-bad' is malformed") && Catch::Contains("quarantine"));
  CHECK_THAT(replay.lines[3], Catch::Contains("never applied"));
  FaultManager m(policy(), std::move(*j), 60s, 5s);
  m.adoptReplay(replay);
  CHECK(m.status()["quarantined"].size() == 2);
}

TEST_CASE("the agent replays its journal before it loads TLS material") {
  privateNamespace();
  UpAtEnd guard;
  const char* agent = std::getenv("RDMACHAOS_AGENT");
  REQUIRE(agent);
  TempDir d;
  auto link = nl::getLink("vethA");
  REQUIRE(link.ok());
  {
    auto j = Journal::open(d.path + "/state");
    REQUIRE(j->add("crashed", {{"kind", "link_flap"},
                               {"params", {{"interface", "vethA"}}},
                               {"snapshot", {{"interface", "vethA"},
                                             {"ifindex", link->ifindex},
                                             {"admin_up", true}}}})
                .ok());
  }
  setAdmin("vethA", false);
  // TLS files that do not exist: the agent cannot serve, but must revert first.
  std::string config = d.path + "/agent.toml";
  std::ofstream(config) << "[agent]\nnode = \"t1\"\nlisten = \"127.0.0.1:0\"\nstate_dir = \""
                        << d.path << "/state\"\n[tls]\nca = \"" << d.path
                        << "/no-ca.pem\"\ncert = \"" << d.path << "/no.pem\"\nkey = \"" << d.path
                        << "/no.key\"\n[interfaces]\ndata = [\"vethA\"]\nallow = [\"vethA\"]\n";
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(agent, agent, "--config", config.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }, 20s));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(adminUp("vethA"));
  CHECK_FALSE(fs::exists(d.path + "/state/journal/crashed.json"));
}

TEST_CASE("a failed revert is retried with backoff until it succeeds, journaled and shown meanwhile") {
  privateNamespace();
  TempDir d;
  // Puts the interface back under its name and up when the test ends, also after a failure.
  struct NameBack {
    ~NameBack() {
      (void)!std::system(
          "ip link show vethZ >/dev/null 2>&1 && { ip link del vethA 2>/dev/null; "
          "ip link set vethZ name vethA; }; ip link set vethA up");
    }
  } nameBack;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 60s);
  REQUIRE(m.schedule("ctl", flap("f-retry", "30s")).ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  // While it is down the interface is renamed: its ifindex now names 'vethZ', which revert
  // refuses to touch, as it would an index reused by another interface.
  REQUIRE(std::system("ip link set vethA name vethZ") == 0);
  std::promise<json> done;
  REQUIRE(m.revert("f-retry", [&](json r) { done.set_value(r); }).ok());
  auto fut = done.get_future();
  REQUIRE(eventually(
      [&] {
        json st = m.status();
        return st.contains("unreverted") && st["unreverted"].size() == 1 &&
               st["unreverted"][0].value("attempts", 0) >= 3;
      },
      10s));
  json st = m.status();
  CHECK(st["unreverted"][0]["fault"] == "f-retry");
  CHECK(st["unreverted"][0]["state"] == "retrying");
  CHECK_THAT(st["unreverted"][0]["last_error"].get<std::string>(), Catch::Contains("vethZ"));
  CHECK(st["active_faults"] == 1);
  CHECK(fs::exists(d.path + "/journal/f-retry.json"));  // still journaled while it is applied
  CHECK(m.get("f-retry")->at("state") == "revert_retrying");
  CHECK(fut.wait_for(0s) != std::future_status::ready);
  // The interface comes back: the next attempt restores it and only then is the fault done.
  REQUIRE(std::system("ip link set vethZ name vethA") == 0);
  REQUIRE(fut.wait_for(15s) == std::future_status::ready);
  json r = fut.get();
  CHECK(r["end_reason"] == "reverted");
  CHECK(r["revert_attempts"].get<int>() >= 4);
  CHECK(adminUp("vethA"));
  CHECK_FALSE(fs::exists(d.path + "/journal/f-retry.json"));
  CHECK(m.status()["unreverted"].empty());
  CHECK(m.status()["unrevertable"].empty());
}

TEST_CASE("a revert still failing when the agent stops is journaled; the next start retries it") {
  privateNamespace();
  TempDir d;
  struct NameBack {
    ~NameBack() {
      (void)!std::system(
          "ip link show vethZ >/dev/null 2>&1 && { ip link del vethA 2>/dev/null; "
          "ip link set vethZ name vethA; }; ip link set vethA up");
    }
  } nameBack;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  {
    FaultManager m(policy(), *j, 60s, 60s);
    REQUIRE(m.schedule("ctl", flap("f-left", "30s")).ok());
    REQUIRE(eventually([] { return !adminUp("vethA"); }));
    REQUIRE(std::system("ip link set vethA name vethZ") == 0);
    REQUIRE(m.revert("f-left", [](json) {}).ok());
    REQUIRE(eventually([&] { return m.status().value("unreverted", json::array()).size() == 1; }));
    auto t0 = std::chrono::steady_clock::now();
    m.shutdown();  // gives up after one last attempt, without waiting out the backoff
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    CHECK(m.status()["unrevertable"] == json::array({"f-left"}));
  }
  CHECK(fs::exists(d.path + "/journal/f-left.json"));
  // The next start's replay cannot revert it either (still renamed): the new manager keeps
  // retrying it, shows it, and lets no other fault take the interface meanwhile (a new
  // interface under the old name is not the one the snapshot names).
  auto replay = FaultManager::replayJournal(*j, policy());
  REQUIRE(replay.unrevertable == std::vector<std::string>{"f-left"});
  FaultManager next(policy(), *j, 60s, 60s);
  next.adoptReplay(replay);
  REQUIRE(eventually([&] {
    json u = next.status().value("unreverted", json::array());
    return u.size() == 1 && u[0].value("attempts", 0) >= 2;
  }));
  CHECK(next.status()["unreverted"][0]["fault"] == "f-left");
  REQUIRE(std::system("ip link add vethA type veth peer name vethC") == 0);
  auto refused = next.schedule("ctl", flap("f-new", "1s"));
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("journaled fault 'f-left'"));
  CHECK(fs::exists(d.path + "/journal/f-left.json"));
  REQUIRE(std::system("ip link del vethA && ip link set vethZ name vethA") == 0);
  REQUIRE(eventually([] { return adminUp("vethA"); }, 15s));
  REQUIRE(eventually([&] { return next.status()["unreverted"].empty(); }));
  CHECK_FALSE(fs::exists(d.path + "/journal/f-left.json"));
}

TEST_CASE("an exception in a fault's step reverts and reports; it never ends the agent") {
  privateNamespace();
  TempDir d;
  UpAtEnd up;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 60s);
  std::atomic<int> revertThrows{2};
  m.setStepHook([&](std::string_view step, const std::string& id) {
    if (id == "x-snapshot" && step == "snapshot") throw std::runtime_error("boom in snapshot");
    if (id == "x-run" && step == "run") {
      // Halfway through applying: the link is already down when the exception comes.
      setAdmin("vethA", false);
      throw std::runtime_error("boom in run");
    }
    if (id == "x-revert" && step == "revert" && revertThrows-- > 0)
      throw std::runtime_error("boom in revert");
  });
  auto ended = [&](const std::string& id) {
    REQUIRE(eventually([&] { return m.get(id)->at("state") == "ended"; }, 15s));
    return *m.get(id);
  };

  SECTION("in snapshot: never applied, nothing to revert, reported") {
    REQUIRE(m.schedule("ctl", flap("x-snapshot", "30s")).ok());
    json r = ended("x-snapshot");
    CHECK(r["end_reason"] == "error");
    CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("boom in snapshot"));
    CHECK(r["applied_ns"] == 0);
  }
  SECTION("in run, with the link already down: reverted and reported") {
    REQUIRE(m.schedule("ctl", flap("x-run", "30s")).ok());
    json r = ended("x-run");
    CHECK(r["end_reason"] == "error");
    CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("run threw: boom in run"));
    CHECK(adminUp("vethA"));
  }
  SECTION("in revert: a failed revert, retried until it succeeds") {
    REQUIRE(m.schedule("ctl", flap("x-revert", "30s")).ok());
    REQUIRE(eventually([] { return !adminUp("vethA"); }));
    REQUIRE(m.revert("x-revert", [](json) {}).ok());
    json r = ended("x-revert");
    CHECK(r["end_reason"] == "reverted");
    CHECK(r["revert_attempts"] == 3);
    CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("revert threw: boom in revert"));
    CHECK(adminUp("vethA"));
  }
  // Whatever happened, the agent lives on, nothing is left journaled and it still works.
  CHECK(fs::is_empty(d.path + "/journal"));
  REQUIRE(m.schedule("ctl", flap("after", "30s")).ok());
  REQUIRE(eventually([] { return !adminUp("vethA"); }));
  std::promise<json> done;
  REQUIRE(m.revert("after", [&](json rec) { done.set_value(rec); }).ok());
  REQUIRE(done.get_future().wait_for(10s) == std::future_status::ready);
  CHECK(adminUp("vethA"));
}

TEST_CASE("out of descriptors, a revert still gets the ones it needs from the reserve") {
  // A process that has used every descriptor it may open (sessions, flows, workloads): the
  // link_flap revert opens netlink sockets. In a child, so that its lowered RLIMIT_NOFILE and
  // the descriptors it uses up end with it.
  privateNamespace();
  UpAtEnd up;
  TempDir d;
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    size_t inUse = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator("/proc/self/fd")) inUse++;
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(10);
    lim.rlim_cur = inUse + 64;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) _exit(11);
    fdReserve().setWanted(16);
    if (fdReserve().held() != 16) _exit(12);
    int code = 0;
    try {  // nothing of Catch's may unwind into the parent's test run from here
      FaultManager m(policy(), *Journal::open(d.path), 60s, 60s);
      if (!m.schedule("ctl", flap("f-fd", "30s")).ok()) _exit(13);
      if (!eventually([] { return !adminUp("vethA"); })) _exit(14);
      // Every descriptor the process may still open, taken.
      std::vector<UniqueFD> hog;
      for (;;) {
        UniqueFD fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!fd.isValid()) break;
        hog.push_back(std::move(fd));
      }
      if (errno != EMFILE) _exit(15);
      std::promise<json> done;
      if (!m.revert("f-fd", [&](json r) { done.set_value(r); }).ok()) _exit(16);
      auto fut = done.get_future();
      // Without the reserve the revert fails with EMFILE and is retried until descriptors come
      // back: it does not end in time.
      if (fut.wait_for(20s) != std::future_status::ready) code = 17;
      else if (fut.get()["end_reason"] != "reverted") code = 18;
      hog.clear();
      if (code == 0 && !adminUp("vethA")) code = 19;
      if (code == 0 && fdReserve().held() != 16) code = 20;  // refilled after the revert
    } catch (...) {
      code = 30;
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status << " (exit codes: see the test)");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(adminUp("vethA"));
}

TEST_CASE("handover: a fault waits for an earlier owner still applying before its snapshot") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  FaultManager m(policy(), *Journal::open(d.path), 60s, 5s);
  // A's window ends where B's starts, and B prepares (250 ms ahead) before A is applied. B's
  // snapshot is slow (a switch that answers late): it must not read A's link-down.
  m.setStepHook([&](std::string_view step, const std::string& id) {
    if (id == "hand-b" && step == "snapshot")
      (void)eventually([&] { return !adminUp("vethA") || m.get("hand-a")->at("state") == "ended"; }, 3s);
  });
  int64_t t0 = wallNs() + 400'000'000;
  auto a = flap("hand-a", "30s", 200);
  a.startNs = t0;
  auto b = flap("hand-b", "100ms", 2000);
  b.startNs = t0 + 200'000'000;
  REQUIRE(m.schedule("ctl", a).ok());
  REQUIRE(m.schedule("ctl", b).ok());
  REQUIRE(eventually([&] { return m.get("hand-b")->at("state") == "ended"; }));
  CHECK(m.get("hand-a")->at("end_reason") == "lifetime");
  CHECK(m.get("hand-b")->at("end_reason") == "completed");
  // B's snapshot came after A's revert, so B's revert left the link as it was before both.
  CHECK(m.get("hand-b")->at("applied_ns").get<int64_t>() >= m.get("hand-a")->at("ended_ns").get<int64_t>());
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
}

TEST_CASE("the emergency button catches a schedule still in its journal fsync") {
  privateNamespace();
  UpAtEnd guard;
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  // A stalled disk: add() returns only when the test lets it.
  std::promise<void> inFsync, release;
  auto released = release.get_future().share();
  j->setAddHook([&, released](const std::string& id) {
    if (id != "stalled") return;
    inFsync.set_value();
    released.wait();
  });
  FaultManager m(policy(), *j, 60s, 5s);
  auto scheduled = std::async(std::launch::async, [&] { return m.schedule("ctl@principal", flap("stalled", "30s")); });
  // Let the disk go on whatever happens (before `scheduled` is waited for at the end).
  struct Release {
    std::promise<void>& p;
    bool done = false;
    void now() {
      if (!done) p.set_value();
      done = true;
    }
    ~Release() { now(); }
  } releaseGuard{release};
  REQUIRE(inFsync.get_future().wait_for(10s) == std::future_status::ready);
  std::promise<json> answer;
  auto answered = answer.get_future();
  std::string principal = "principal";
  // Each button is pressed while the schedule is still inside its journal write.
  SECTION("revert_all of every controller (recover --all)") {
    m.revertAll(nullptr, "reverted", [&](json recs) { answer.set_value(recs); });
    CHECK(scheduled.wait_for(0ms) == std::future_status::timeout);
  }
  SECTION("revert_all of the caller's certificate") {
    m.revertAll(&principal, "reverted", [&](json recs) { answer.set_value(recs); });
    CHECK(scheduled.wait_for(0ms) == std::future_status::timeout);
  }
  SECTION("revert of its id") {
    REQUIRE(m.revert("stalled", [&](json rec) { answer.set_value(json::array({rec})); }).ok());
  }
  releaseGuard.now();
  auto r = scheduled.get();
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("reverted while it was being journaled; not applied"));
  REQUIRE(answered.wait_for(5s) == std::future_status::ready);
  json recs = answered.get();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0]["fault"] == "stalled");
  CHECK(recs[0]["end_reason"] == "reverted");
  CHECK(recs[0]["applied_ns"] == 0);
  // Never applied, nothing journaled, and the agent still takes faults.
  std::this_thread::sleep_for(300ms);
  CHECK(adminUp("vethA"));
  CHECK(fs::is_empty(d.path + "/journal"));
  CHECK(m.activeCount() == 0);
  REQUIRE(m.schedule("ctl", flap("next", "100ms", 1000)).ok());
  REQUIRE(eventually([&] { return m.get("next")->at("state") == "ended"; }));
  CHECK(adminUp("vethA"));
}

}  // namespace test_fault_manager
