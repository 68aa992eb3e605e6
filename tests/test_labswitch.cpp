// Behaviour of the lab switch in a real lab: line rate, PFC pause propagation under a
// pfc_storm fault with the watchdog off and on. Asserts on switch counters and traffic.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/clock.hpp"
#include "faults/fault.hpp"
#include "lab/process.hpp"
#include "lab_traffic.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_labswitch {

using namespace labtest;

namespace {

constexpr int kDscp26 = 26 << 2;

// Runs a fault the way the agent does (create, snapshot, run, revert) on a thread inside
// the node's namespace; the thread joins (and the fault is reverted) when this goes away.
struct FaultRun {
  std::thread t;
  std::stop_source stop;
  rc::faults::EventLog events;
  std::atomic<bool> done{false};
  std::string error;
  FaultRun(const std::string& ns, std::string kind, json params) {
    t = std::thread([this, ns, kind, params] {
      int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
        error = "cannot enter " + ns;
        done = true;
        return;
      }
      ::close(fd);
      const auto* k = rc::faults::findKind(kind);
      auto p = rc::faults::normaliseParams(kind, k->params, params);
      if (!p) {
        error = p.error().message;
        done = true;
        return;
      }
      // The agent's configuration names the lab's switch socket, as `lab up` writes it.
      rc::faults::Policy policy{{"data0"}, {"mgmt0"}, "data0"};
      policy.labswitchSocket = params.value("socket", "");
      auto f = k->create(*p, policy);
      if (!f) {
        error = f.error().message;
        done = true;
        return;
      }
      if (auto snap = (*f)->snapshot(); !snap) {  // refused before anything changed
        error = snap.error().message;
        done = true;
        return;
      }
      auto r = (*f)->run(stop.get_token(), events);
      if (!r) error = r.error().message;
      auto rv = (*f)->revert(events);
      if (!rv) error += rv.error().message;
      done = true;
    });
  }
  ~FaultRun() {
    stop.request_stop();
    if (t.joinable()) t.join();
  }
  int64_t framesSent() const {
    for (const auto& e : events.snapshot())
      if (e.what == "frames_sent") return std::stoll(e.detail.substr(e.detail.rfind(' ') + 1));
    return -1;
  }
};

struct Sample {
  int64_t ns;
  uint64_t victim;
};

// Samples a port's transmitted lossless (priority 3) frames every 20 ms for `ms`.
std::vector<Sample> sampleTx(const std::string& control, const std::string& portName, int ms) {
  std::vector<Sample> out;
  int64_t end = rc::monoNs() + int64_t(ms) * 1'000'000;
  while (rc::monoNs() < end) {
    json p = port(control, portName);
    // Queue 3 only: the port also floods the hosts' IPv6 multicast and ARP (priority 0).
    out.push_back({rc::monoNs(), p["queues"][3]["tx_frames"].get<uint64_t>()});
    sleepMs(20);
  }
  return out;
}

uint64_t deltaBetween(const std::vector<Sample>& s, int64_t from, int64_t to) {
  uint64_t a = 0, b = 0;
  bool haveA = false;
  for (const auto& x : s) {
    if (x.ns >= from && !haveA) {
      a = x.victim;
      haveA = true;
    }
    if (x.ns <= to) b = x.victim;
  }
  return haveA && b > a ? b - a : 0;
}

// The lab switch's PID, as the lab's supervisor last recorded it.
int switchPid(const Lab& lab) {
  std::ifstream in(lab.dir.path + "/lab.json");
  return json::parse(in)["switch"]["proc"]["pid"].get<int>();
}

// Kills the lab's switch and waits until the supervisor's restart answers on the control socket.
void killSwitchAndAwaitRestart(const Lab& lab) {
  int old = switchPid(lab);
  REQUIRE(old > 0);
  REQUIRE(::kill(old, SIGKILL) == 0);
  int fresh = 0;
  for (int i = 0; i < 100 && (fresh == 0 || fresh == old); i++) {
    sleepMs(50);
    fresh = switchPid(lab);
  }
  REQUIRE(fresh != old);
  REQUIRE(fresh > 0);
  json ping;
  for (int i = 0; i < 100; i++) {
    ping = control(lab.control, {{"cmd", "ping"}});
    if (ping["ok"] == true) break;
    sleepMs(50);
  }
  REQUIRE(ping["ok"] == true);
}

}  // namespace

TEST_CASE("a port carries its configured line rate: never 2% over it, at most 5% under it", "[labswitch][rate]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  o.rateBps = 100e6;
  Lab lab(o);
  // 1400-byte datagrams at ~120 Mb/s into a 100 Mb/s port: the queue stays backlogged.
  Child flow = udpFlow(lab.ns(1), lab.addr(2), 9000, 10500, 1400, 0);
  sleepMs(700);
  json a = control(lab.control, {{"cmd", "counters"}, {"port", "n2"}});
  sleepMs(2000);
  json b = control(lab.control, {{"cmd", "counters"}, {"port", "n2"}});
  flow.stop();
  REQUIRE(a["ok"] == true);
  REQUIRE(b["ok"] == true);
  const json &pa = a["ports"][0], &pb = b["ports"][0];
  // The switch's own clock (now_ns) times the window; the line rate includes the 24 bytes of
  // preamble, FCS and inter-frame gap per frame, as a real port's does.
  double frames = double(pb["tx_frames"].get<uint64_t>() - pa["tx_frames"].get<uint64_t>());
  double bytes = double(pb["tx_bytes"].get<uint64_t>() - pa["tx_bytes"].get<uint64_t>());
  double secs = double(b["now_ns"].get<int64_t>() - a["now_ns"].get<int64_t>()) / 1e9;
  double rate = (bytes + 24 * frames) * 8 / secs;
  INFO("measured " << rate / 1e6 << " Mb/s on a 100 Mb/s port over " << secs << " s; queue 0 drops "
                   << pb["queues"][0]["drops"]);
  CHECK(pb["queues"][0]["drops"].get<uint64_t>() > 0);  // it really was backlogged
  // Over the line rate is the pacer's error, and 2 % is its bound. Under it is also the host's:
  // the port sends nothing while the host keeps the switch off its core, and this VM's host
  // takes 2-5 % of an idle core in gaps of up to 18 ms (build/bench/host_hiccups, 2026-11-28;
  // an ASan CI run read 97.83 Mb/s here, 2.2 % under).
  CHECK(rate < 100e6 * 1.02);
  CHECK(rate > 100e6 * 0.95);
  // The switch's own load over the same window: its loop ran the whole time (loop_ns follows
  // its clock), and was busy for part of it, never more than all of it.
  int64_t loop = b["loop_ns"].get<int64_t>() - a["loop_ns"].get<int64_t>();
  int64_t busy = b["busy_ns"].get<int64_t>() - a["busy_ns"].get<int64_t>();
  INFO("switch loop " << loop << " ns, busy " << busy << " ns");
  CHECK(loop == b["now_ns"].get<int64_t>() - a["now_ns"].get<int64_t>());
  CHECK(busy > 0);
  CHECK(busy <= loop);
  CHECK(b["busy_ns"].get<int64_t>() <= b["loop_ns"].get<int64_t>());
}

TEST_CASE("a PFC storm stalls a victim flow between two other hosts; the watchdog ends the stall",
          "[labswitch][pfc]") {
  bool watchdog = GENERATE(false, true);
  rc::lab::UpOptions o;
  o.nodes = 3;
  Lab lab(o);
  json wd = control(lab.control, {{"cmd", "set_watchdog"}, {"port", "*"}, {"enabled", watchdog},
                                  {"detection_ms", 200}, {"restoration_ms", 200}, {"action", "drop"}});
  REQUIRE(wd["ok"] == true);
  // n2 -> n1 fills n1's paused egress queue and so n2's ingress account; the switch pauses
  // n2, and n2's lossless traffic to n3 (the victim) stalls with it.
  Child toStormer = udpFlow(lab.ns(2), lab.addr(1), 9000, 20000, 1000, kDscp26);
  Child victim = udpFlow(lab.ns(2), lab.addr(3), 9001, 2000, 200, kDscp26);
  sleepMs(600);
  json before = port(lab.control, "n3");
  REQUIRE(before["tx_frames"].get<uint64_t>() > 200);  // the victim flows (ARP resolved)

  int64_t stormStart = rc::monoNs();
  const int stormMs = 1500;
  std::vector<Sample> samples;
  {
    FaultRun storm(lab.ns(1), "pfc_storm",
                   {{"priorities", json::array({3})}, {"quanta", 65535}, {"rate", "200"},
                    {"duration", std::to_string(stormMs) + "ms"}, {"max_frames", 100000}});
    samples = sampleTx(lab.control, "n3", stormMs + 700);
    while (!storm.done) sleepMs(10);
    INFO(storm.error);
    REQUIRE(storm.error.empty());
    int64_t sent = storm.framesSent();
    // 200 frames/s for 1.5 s: 301 frames (the first at t = 0), give or take the last slot.
    CHECK(sent >= 295);
    CHECK(sent <= 302);
    json n1 = port(lab.control, "n1");
    // Every storm frame reached the switch (plus the revert's resume frame).
    CHECK(n1["queues"][3]["pfc_rx"].get<int64_t>() == sent + 1);
  }
  int64_t stormEnd = stormStart + int64_t(stormMs) * 1'000'000;
  json n1 = port(lab.control, "n1"), n2 = port(lab.control, "n2");
  INFO("n1 q3: " << n1["queues"][3].dump() << "\nn2 q3: " << n2["queues"][3].dump());
  CHECK(n2["queues"][3]["pfc_tx"].get<uint64_t>() > 0);  // the pause propagated to n2

  // Victim frames per 100 ms before the storm: ~200.
  if (!watchdog) {
    CHECK(n1["queues"][3]["paused_ns"].get<int64_t>() > int64_t(stormMs - 100) * 1'000'000);
    uint64_t during = deltaBetween(samples, stormStart + 300'000'000, stormEnd - 100'000'000);
    CHECK(during == 0);  // stalled for the storm
    uint64_t after = deltaBetween(samples, stormEnd + 300'000'000, stormEnd + 650'000'000);
    CHECK(after > 200);  // and flows again after it
    CHECK(n1["queues"][3]["wd_storms"].get<uint64_t>() == 0);
  } else {
    // Recovery: the victim moves again within detection (200) + poll (10) + margin (290) ms.
    uint64_t late = deltaBetween(samples, stormStart + 500'000'000, stormEnd - 100'000'000);
    CHECK(late > 1000);  // ~2000 frames/s for 0.9 s
    CHECK(n1["queues"][3]["wd_storms"].get<uint64_t>() == 1);
    CHECK(n1["queues"][3]["wd_drops"].get<uint64_t>() > 0);
    // Restoration: no PFC for 200 ms after the storm ended.
    CHECK(n1["queues"][3]["wd_restored"].get<uint64_t>() == 1);
    // First stall-free sample after the storm began, for the record.
    int64_t recovered = 0;
    for (size_t i = 1; i < samples.size(); i++)
      if (samples[i].ns > stormStart + 100'000'000 && samples[i].victim > samples[i - 1].victim &&
          deltaBetween(samples, stormStart + 50'000'000, samples[i - 1].ns) <
              deltaBetween(samples, stormStart + 50'000'000, samples[i].ns)) {
        recovered = samples[i].ns - stormStart;
        break;
      }
    INFO("victim moving again " << recovered / 1'000'000 << " ms after the storm began");
    CHECK(recovered < 500'000'000);
  }
}

TEST_CASE("ecn_shift lowers kmin/kmax during incast: marks rise, depth stays under kmax, exact "
          "restore", "[labswitch][ecn]") {
  rc::lab::UpOptions o;
  o.nodes = 4;
  // The shift goes down from HPCC's 100G profile (400/1600 KiB), as ecn-shallow's does: from
  // the lab's default of 100 KiB a shift to 50 KiB is too small for its marks to rise in every
  // run (CUBIC with RFC 3168 cuts once per window whatever the threshold; one ASan CI run read
  // a marked fraction of 0.00436 before and 0.00434 during).
  o.ecnKminBytes = 400 * 1024;
  o.ecnKmaxBytes = 1600 * 1024;
  o.ecnPmax = 0.2;
  Lab lab(o);
  for (int i = 1; i <= 4; i++)
    REQUIRE(rc::lab::runCommand({"ip", "netns", "exec", lab.ns(i), "sysctl", "-qw", "net.ipv4.tcp_ecn=1"}).ok());
  json before = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n4"}, {"queue", 3}});
  REQUIRE(before["ok"] == true);
  Child sink = tcpSink(lab.ns(4), 5201);
  sleepMs(200);
  std::vector<Child> senders;
  for (int i = 1; i <= 3; i++) senders.push_back(tcpSource(lab.ns(i), lab.addr(4), 5201, kDscp26));
  sleepMs(1000);

  auto marks = [&] { return port(lab.control, "n4")["queues"][3]["ecn_marked"].get<uint64_t>(); };
  auto txq = [&] { return port(lab.control, "n4")["queues"][3]["tx_frames"].get<uint64_t>(); };
  uint64_t m0 = marks(), t0 = txq();
  sleepMs(1500);
  uint64_t m1 = marks(), t1 = txq();

  const uint64_t kmin = 50 * 1024, kmax = 200 * 1024;
  std::vector<uint64_t> depths;
  uint64_t m2 = 0, t2 = 0, m3 = 0, t3 = 0;
  {
    FaultRun shift(lab.ns(1), "ecn_shift",
                   {{"backend", "labswitch"}, {"port", "n4"}, {"queue", 3}, {"kmin", "50KiB"},
                    {"kmax", "200KiB"}, {"pmax", 0.2}, {"socket", lab.control}});
    sleepMs(300);  // the senders react within a few round trips
    REQUIRE(shift.error.empty());
    json now = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n4"}, {"queue", 3}});
    CHECK(now["profiles"][0]["profile"]["kmin"] == kmin);
    CHECK(now["profiles"][0]["profile"]["kmax"] == kmax);
    m2 = marks();
    t2 = txq();
    int64_t end = rc::monoNs() + 1'500'000'000;
    while (rc::monoNs() < end) {
      depths.push_back(port(lab.control, "n4")["queues"][3]["depth_bytes"].get<uint64_t>());
      sleepMs(10);
    }
    m3 = marks();
    t3 = txq();
  }
  senders.clear();
  double before_rate = double(m1 - m0) / double(std::max<uint64_t>(1, t1 - t0));
  double during_rate = double(m3 - m2) / double(std::max<uint64_t>(1, t3 - t2));
  size_t under = size_t(std::count_if(depths.begin(), depths.end(), [&](uint64_t d) { return d < kmax; }));
  uint64_t maxDepth = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
  INFO("marked fraction before " << before_rate << ", during " << during_rate << "; " << under << "/"
                                 << depths.size() << " depth samples under kmax; max sample " << maxDepth);
  CHECK(t3 - t2 > 1000);             // the incast kept running
  CHECK(m3 - m2 > m1 - m0);          // marked counts rise
  CHECK(during_rate > before_rate);
  CHECK(under * 100 >= depths.size() * 95);
  // Reverted exactly: the profile is the one before, field for field.
  json after = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n4"}, {"queue", 3}});
  CHECK(after["profiles"] == before["profiles"]);

  // The tc-red backend on this kernel (no sch_red) fails with a message that says so.
  FaultRun red(lab.ns(1), "ecn_shift",
               {{"backend", "tc-red"}, {"kmin", "50KiB"}, {"kmax", "200KiB"}});
  while (!red.done) sleepMs(10);
  INFO(red.error);
  bool kernelHasRed = red.error.empty();
  if (!kernelHasRed) CHECK(red.error.find("sch_red") != std::string::npos);
}

TEST_CASE("leaf-spine with a flapped uplink: adaptive routing keeps more than ECMP",
          "[labswitch][routing]") {
  rc::lab::UpOptions o;
  o.nodes = 4;
  o.leaves = 2;
  o.spines = 2;
  Lab lab(o);
  json topo = control(lab.control, {{"cmd", "topology"}});
  REQUIRE(topo["ok"] == true);
  REQUIRE(topo["links"].size() == 4);
  // 16 UDP flows leaf1 -> leaf2 (distinct source ports: ECMP spreads them over both spines).
  std::vector<Child> flows;
  for (int i = 0; i < 8; i++) {
    flows.push_back(udpFlow(lab.ns(1), lab.addr(3), 9000, 800, 1000, 0, 50000 + i));
    flows.push_back(udpFlow(lab.ns(2), lab.addr(4), 9000, 800, 1000, 0, 50100 + i));
  }
  sleepMs(800);
  auto sum = [&](const std::vector<std::string>& names, const char* key) {
    uint64_t total = 0;
    for (const auto& n : names) total += port(lab.control, n)[key].get<uint64_t>();
    return total;
  };
  // Sent = what n1 and n2 handed to leaf1; delivered = what leaf2 handed to n3 and n4.
  auto run = [&](const std::string& mode) {
    REQUIRE(control(lab.control, {{"cmd", "set_routing"}, {"mode", mode}})["ok"] == true);
    sleepMs(300);
    uint64_t s0 = sum({"n1", "n2"}, "rx_frames"), d0 = sum({"n3", "n4"}, "tx_frames");
    REQUIRE(control(lab.control, {{"cmd", "set_link"}, {"link", "leaf1-spine1"}, {"up", false}})["ok"] == true);
    sleepMs(1000);
    REQUIRE(control(lab.control, {{"cmd", "set_link"}, {"link", "leaf1-spine1"}, {"up", true}})["ok"] == true);
    sleepMs(1000);
    uint64_t s1 = sum({"n1", "n2"}, "rx_frames"), d1 = sum({"n3", "n4"}, "tx_frames");
    sleepMs(700);  // routing converges before the next round
    return double(d1 - d0) / double(std::max<uint64_t>(1, s1 - s0));
  };
  double ecmp = run("ecmp");
  double adaptive = run("adaptive");
  INFO("delivered/sent during a 1 s uplink flap: ecmp " << ecmp << ", adaptive " << adaptive);
  CHECK(adaptive > 0.97);
  CHECK(adaptive > ecmp + 0.05);
}

TEST_CASE("link_flap on a lab switch port: down for its time, host sees no carrier, restored",
          "[labswitch][link_flap]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  o.switchPorts = GENERATE(as<std::string>{}, "tap", "veth");
  INFO("ports " << o.switchPorts);
  Lab lab(o);
  auto adminUp = [&] {
    json r = control(lab.control, {{"cmd", "get_link"}, {"port", "n2"}});
    return r["ports"][0]["admin_up"].get<bool>();
  };
  REQUIRE(adminUp());
  // Per-port settings: line rate and MTU, with the previous values returned.
  json setPort = control(lab.control, {{"cmd", "set_port"}, {"port", "n1"}, {"rate_bps", 5e8}, {"mtu", 9000}});
  REQUIRE(setPort["ok"] == true);
  CHECK(setPort["previous"][0]["rate_bps"] == 1e9);
  json getPort = control(lab.control, {{"cmd", "get_port"}, {"port", "n1"}});
  CHECK(getPort["ports"][0]["rate_bps"] == 5e8);
  CHECK(getPort["ports"][0]["mtu"] == 9000);
  CHECK(control(lab.control, {{"cmd", "set_port"}, {"port", "n1"}, {"mtu", 10}})["ok"] == false);
  FaultRun flap(lab.ns(1), "link_flap",
                {{"switch_port", "n2"}, {"down", "600ms"}, {"count", 1}, {"socket", lab.control}});
  sleepMs(250);
  CHECK_FALSE(adminUp());
  auto link = rc::lab::runCommand({"ip", "-n", lab.ns(2), "link", "show", "data0"});
  REQUIRE(link.ok());
  CHECK(link->find("NO-CARRIER") != std::string::npos);
  while (!flap.done) sleepMs(10);
  INFO(flap.error);
  CHECK(flap.error.empty());
  CHECK(adminUp());
  int downs = 0, ups = 0;
  for (const auto& e : flap.events.snapshot()) {
    downs += e.what == "down";
    ups += e.what == "up";
  }
  CHECK(downs == 1);
  CHECK(ups == 1);
}

// Two nodes' agents on one switch port at overlapping times (the plan refuses it; two ad-hoc
// injects do not): before, B snapshotted A's change and "restored" it after A's revert, leaving the
// port down or shifted with no journal entry. Now a flap refuses a port already down, and a revert
// restores only over what its own fault set.
TEST_CASE("one lab switch port from two nodes: the port ends as it started", "[labswitch][link_flap][ecn]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  Lab lab(o);
  auto adminUp = [&] {
    json r = control(lab.control, {{"cmd", "get_link"}, {"port", "n2"}});
    return r["ports"][0]["admin_up"].get<bool>();
  };
  SECTION("link_flap") {
    REQUIRE(adminUp());
    FaultRun a(lab.ns(1), "link_flap", {{"switch_port", "n2"}, {"down", "1500ms"}, {"count", 1}, {"socket", lab.control}});
    for (int i = 0; i < 200 && adminUp(); i++) sleepMs(10);
    REQUIRE_FALSE(adminUp());
    FaultRun b(lab.ns(2), "link_flap", {{"switch_port", "n2"}, {"down", "1500ms"}, {"count", 1}, {"socket", lab.control}});
    while (!a.done || !b.done) sleepMs(10);
    INFO("a: " << a.error << "; b: " << b.error);
    CHECK(a.error.empty());
    CHECK_THAT(b.error, Catch::Contains("lab switch port 'n2' is administratively down already"));
    CHECK(adminUp());
    sleepMs(300);
    CHECK(adminUp());
  }
  SECTION("ecn_shift labswitch, the same profile from both") {
    json before = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n2"}, {"queue", 3}});
    REQUIRE(before["ok"] == true);
    json shift = {{"backend", "labswitch"}, {"port", "n2"}, {"queue", 3}, {"kmin", "10KiB"},
                  {"kmax", "20KiB"}, {"pmax", 0.5}, {"socket", lab.control}};
    auto kminNow = [&] {
      return control(lab.control, {{"cmd", "get_ecn"}, {"port", "n2"}, {"queue", 3}})["profiles"][0]["profile"]["kmin"];
    };
    auto a = std::make_unique<FaultRun>(lab.ns(1), "ecn_shift", shift);
    for (int i = 0; i < 200 && kminNow() != 10 * 1024; i++) sleepMs(10);
    REQUIRE(kminNow() == 10 * 1024);
    auto b = std::make_unique<FaultRun>(lab.ns(2), "ecn_shift", shift);  // snapshots A's profile
    sleepMs(300);
    a.reset();  // A stops and restores the original
    json mid = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n2"}, {"queue", 3}});
    CHECK(mid["profiles"] == before["profiles"]);
    b->stop.request_stop();
    while (!b->done) sleepMs(10);
    CHECK_THAT(b->error, Catch::Contains("revert conflict on lab switch port 'n2' queue 3"));
    b.reset();
    json after = control(lab.control, {{"cmd", "get_ecn"}, {"port", "n2"}, {"queue", 3}});
    CHECK(after["profiles"] == before["profiles"]);  // before the fix: A's shifted profile
  }
}

TEST_CASE("the supervisor restarts a killed lab switch, which re-attaches to the hosts' TAPs",
          "[labswitch][supervisor]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  Lab lab(o);
  killSwitchAndAwaitRestart(lab);
  // Traffic flows again through the new process (the hosts kept addresses and neighbours).
  Child flow = udpFlow(lab.ns(1), lab.addr(2), 9000, 1000, 200, 0);
  sleepMs(500);
  CHECK(port(lab.control, "n2")["tx_frames"].get<uint64_t>() > 100);
  flow.stop();
  std::ifstream in(lab.dir.path + "/lab.json");
  CHECK(json::parse(in)["switch"]["restarts"].get<int>() == 1);
}

// A counter of data0 in namespace NS, read by iproute2 (not by our code).
uint64_t hostCounter(const std::string& ns, const std::string& which) {
  auto out = rc::lab::runCommand({"ip", "-n", ns, "-s", "-j", "link", "show", "dev", "data0"});
  REQUIRE(out.ok());
  json j = json::parse(*out);
  const std::string dir = which.substr(0, 2);  // "tx" or "rx"
  return j.at(0).at("stats64").at(dir).at(which.substr(3)).get<uint64_t>();
}

TEST_CASE("lab up --ports veth: hosts reach each other through the switch over AF_PACKET, super-frames counted as "
          "wire frames, a killed switch re-attaches, what a late switch's socket refused is counted, lab down removes the "
          "fabric namespace",
          "[labswitch][veth]") {
  std::string fabricNs;
  {
    rc::lab::UpOptions o;
    o.nodes = 2;
    o.switchPorts = "veth";
    Lab lab(o);
    fabricNs = "/run/netns/rc" + std::to_string(lab.slot) + "-fab";
    REQUIRE(std::filesystem::exists(fabricNs));
    {
      std::ifstream in(lab.dir.path + "/switch.json");
      json cfg = json::parse(in);
      CHECK(cfg["hosts"][0]["io"] == "packet");
      CHECK(cfg["hosts"][0]["ifname"] == "d1");
    }
    // TCP from n1 to n2 at the port's 1G: the host hands over super-frames with offload, and the
    // model counts what it forwards as wire frames of at most the MTU.
    json a1 = port(lab.control, "n1"), a2 = port(lab.control, "n2");
    {
      Child sink = tcpSink(lab.ns(2), 5201);
      sleepMs(200);
      Child source = tcpSource(lab.ns(1), lab.addr(2), 5201, 0);
      sleepMs(1500);
    }
    json b1 = port(lab.control, "n1"), b2 = port(lab.control, "n2");
    const uint64_t rxFrames = b1["rx_frames"].get<uint64_t>() - a1["rx_frames"].get<uint64_t>();
    const uint64_t rxBytes = b1["rx_bytes"].get<uint64_t>() - a1["rx_bytes"].get<uint64_t>();
    const uint64_t txFrames = b2["tx_frames"].get<uint64_t>() - a2["tx_frames"].get<uint64_t>();
    const uint64_t txBytes = b2["tx_bytes"].get<uint64_t>() - a2["tx_bytes"].get<uint64_t>();
    const uint64_t reads = b1["io"]["reads"].get<uint64_t>() - a1["io"]["reads"].get<uint64_t>();
    const uint64_t writes = b2["io"]["writes"].get<uint64_t>() - a2["io"]["writes"].get<uint64_t>();
    const uint64_t writeFrames = b2["io"]["write_frames"].get<uint64_t>() - a2["io"]["write_frames"].get<uint64_t>();
    INFO("n1 received " << rxFrames << " frames, " << rxBytes << " bytes in " << reads << " reads; n2 sent " << txFrames
                        << " frames, " << txBytes << " bytes in " << writes << " writes");
    // The flow ran: > 53 Mb/s over 1.5 s (about 0.5 Gb/s in a plain build; 29 MB in the
    // sanitized build of a busy CI run, where the switch itself runs under ASan).
    CHECK(txBytes > 10'000'000);
    CHECK(rxBytes <= rxFrames * 1514);  // every frame the model took is a wire frame
    CHECK(txBytes <= txFrames * 1514);
    CHECK(writeFrames == txFrames);
    CHECK(rxFrames > reads * 4);  // several wire frames a system call (super-frames, batches)
    CHECK(txFrames > writes * 4);

    // The supervisor restarts a killed switch, which binds to the same veth ends.
    killSwitchAndAwaitRestart(lab);
    {
      Child flow = udpFlow(lab.ns(1), lab.addr(2), 9000, 1000, 200, 0);
      sleepMs(500);
      CHECK(port(lab.control, "n2")["tx_frames"].get<uint64_t>() > 100);
    }

    // A switch that reads late: what overflows its socket queue (the host's NIC ring) is
    // counted in the port's io.ring_drops, and every frame n1's data0 sent is either taken by
    // the model or counted there. The veth itself drops nothing (its tx_dropped stays).
    json c1 = port(lab.control, "n1");
    REQUIRE(c1["io"].contains("ring_drops"));
    const uint64_t sent0 = hostCounter(lab.ns(1), "tx_packets"), dropped0 = hostCounter(lab.ns(1), "tx_dropped");
    const int pid = switchPid(lab);
    REQUIRE(pid > 0);
    struct Resume {  // the switch runs again whatever happens below
      int pid;
      ~Resume() { ::kill(pid, SIGCONT); }
    } resume{pid};
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    {
      // ~30,000 frames of 1.4 KB in 1.5 s: far more than the 16 MiB the socket may hold.
      Child flood = udpFlow(lab.ns(1), lab.addr(2), 9001, 20000, 1400, 0);
      sleepMs(1500);
    }
    REQUIRE(::kill(pid, SIGCONT) == 0);
    sleepMs(500);  // the switch drains what its queue held
    json d1 = port(lab.control, "n1");
    const uint64_t sent = hostCounter(lab.ns(1), "tx_packets") - sent0;
    const uint64_t taken = d1["rx_frames"].get<uint64_t>() - c1["rx_frames"].get<uint64_t>();
    const uint64_t ringDrops = d1["io"]["ring_drops"].get<uint64_t>() - c1["io"]["ring_drops"].get<uint64_t>();
    INFO("n1's data0 sent " << sent << " frames; the switch took " << taken << ", its socket queue refused "
                            << ringDrops);
    CHECK(sent > 10'000);
    CHECK(ringDrops > 1'000);
    // Within a few frames: the two sides' counters are read one after the other, and the host
    // may send a frame of its own (ARP, neighbour discovery) in between.
    CHECK(taken + ringDrops + 5 >= sent);
    CHECK(taken + ringDrops <= sent + 5);
    CHECK(hostCounter(lab.ns(1), "tx_dropped") == dropped0);
  }
  // Lab down (the Lab's end) took the fabric namespace, with the switch's veth ends, away.
  CHECK_FALSE(std::filesystem::exists(fabricNs));
}

TEST_CASE("lab up --ports: tap or veth, veth only with the switch and its offload; refused before anything is made",
          "[labswitch][veth]") {
  LabDir dir;
  rc::lab::UpOptions o;
  o.nodes = 2;
  o.dir = dir.path + "/lab";
  o.agentBinary = "/bin/true";
  struct Bad {
    std::string ports, fabric;
    bool offload;
    const char* says;
  };
  for (const Bad& b : {Bad{"xdp", "switch", true, "--ports 'xdp' is not 'tap' or 'veth'"},
                       Bad{"veth", "bridge", true, "the bridge fabric has no switch process"},
                       Bad{"veth", "switch", false, "leave out --no-offload"}}) {
    o.switchPorts = b.ports;
    o.fabric = b.fabric;
    o.switchOffload = b.offload;
    auto r = rc::lab::up(o);
    INFO(b.ports << " / " << b.fabric);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains(b.says));
    CHECK_FALSE(std::filesystem::exists(o.dir + "/lab.json"));
  }
}

TEST_CASE("lab up --split-cores: the switch on core 0, every host's receive work on the other cores, also after a "
          "restart",
          "[labswitch][split-cores]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  o.splitCores = true;
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    // One core: refused with the reason, and nothing left behind.
    LabDir dir;
    o.dir = dir.path + "/lab";
    o.agentBinary = "/bin/true";
    auto r = rc::lab::up(o);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("--split-cores needs 2 cores or more"));
    return;
  }
  Lab lab(o);
  auto onCoreZeroOnly = [](int pid) {
    cpu_set_t set;
    CPU_ZERO(&set);
    REQUIRE(::sched_getaffinity(pid, sizeof set, &set) == 0);
    return CPU_COUNT(&set) == 1 && CPU_ISSET(0, &set);
  };
  // Every core but 0, as rps_cpus writes it (a hex mask; 2 on a 2-core machine).
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t want = (cores >= 32 ? 0xffffffffull : ((uint64_t(1) << cores) - 1)) & ~uint64_t(1);
  // The thread that writes to the hosts' TAPs (labswitch/host_delivery.hpp) runs on the hosts'
  // cores, every one but 0: its frames then join their receive work there without an interrupt.
  auto deliveryOnHostCores = [&](int pid) {
    std::string tid;
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      std::ifstream comm(t.path() / "comm");
      std::string name;
      std::getline(comm, name);
      if (name == "host-delivery") tid = t.path().filename();
    }
    INFO("switch " << pid << ": its host-delivery thread " << (tid.empty() ? "missing" : tid));
    REQUIRE(!tid.empty());
    cpu_set_t set;
    CPU_ZERO(&set);
    REQUIRE(::sched_getaffinity(std::stoi(tid), sizeof set, &set) == 0);
    // Ahead of the hosts' processes on their core, as the softirq work it replaces was.
    CHECK(::sched_getscheduler(std::stoi(tid)) == SCHED_FIFO);
    uint64_t got = 0;
    for (int c = 0; c < 32 && c < cores; c++)
      if (CPU_ISSET(c, &set)) got |= uint64_t(1) << c;
    return got == want;
  };
  for (int n = 1; n <= 2; n++) {
    auto mask = rc::lab::runCommand({"ip", "netns", "exec", lab.ns(n), "cat", "/sys/class/net/data0/queues/rx-0/rps_cpus"});
    REQUIRE(mask.ok());
    std::string hex = *mask;
    hex.erase(std::remove(hex.begin(), hex.end(), ','), hex.end());
    INFO(lab.ns(n) << " rps_cpus " << *mask);
    CHECK((std::stoull(hex, nullptr, 16) & 0xffffffffull) == want);
  }
  int pid = switchPid(lab);
  REQUIRE(pid > 0);
  CHECK(onCoreZeroOnly(pid));
  CHECK(deliveryOnHostCores(pid));
  // The supervisor's restart reads the same switch.json: pinned again.
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int fresh = 0;
  for (int i = 0; i < 100 && (fresh == 0 || fresh == pid); i++) {
    sleepMs(50);
    fresh = switchPid(lab);
  }
  REQUIRE(fresh > 0);
  REQUIRE(fresh != pid);
  for (int i = 0; i < 100 && control(lab.control, {{"cmd", "ping"}})["ok"] != true; i++) sleepMs(50);
  CHECK(onCoreZeroOnly(fresh));
  CHECK(deliveryOnHostCores(fresh));
  // Traffic still flows through the pinned switch to the steered hosts, and reaches them: the
  // frames the switch sent n2 are received by n2's data0 (written by the delivery thread).
  auto received = [&] {
    auto r = rc::lab::runCommand({"ip", "netns", "exec", lab.ns(2), "cat", "/sys/class/net/data0/statistics/rx_packets"});
    REQUIRE(r.ok());
    return std::stoull(*r);
  };
  auto sentToN2 = [&] { return port(lab.control, "n2")["tx_frames"].get<uint64_t>(); };
  const uint64_t received0 = received(), sent0 = sentToN2();
  Child flow = udpFlow(lab.ns(1), lab.addr(2), 9000, 1000, 200, 0);
  sleepMs(500);
  flow.stop();
  sleepMs(100);
  const uint64_t sent = sentToN2() - sent0;
  CHECK(sent > 100);
  CHECK(received() - received0 >= sent);
}

TEST_CASE("a set_ecn or set_pfc refused on one port changes no port", "[labswitch][ecn]") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  Lab lab(o);
  // n2's queue 3 gets a low kmax / xoff, so a higher kmin / xon for every port ("*") is valid on
  // n1 and refused on n2: the refusal must leave n1 as it was too.
  REQUIRE(control(lab.control, {{"cmd", "set_ecn"}, {"port", "n2"}, {"queue", 3}, {"kmin", 100}, {"kmax", 200}})["ok"] == true);
  REQUIRE(control(lab.control, {{"cmd", "set_pfc"}, {"port", "n2"}, {"priority", 3}, {"xon", 100}, {"xoff", 200}})["ok"] == true);
  json ecnBefore = control(lab.control, {{"cmd", "get_ecn"}, {"port", "*"}, {"queue", 3}});
  json pfcBefore = control(lab.control, {{"cmd", "get_pfc"}, {"port", "*"}, {"priority", 3}});
  REQUIRE(ecnBefore["profiles"].size() >= 2);
  json e = control(lab.control, {{"cmd", "set_ecn"}, {"port", "*"}, {"queue", 3}, {"kmin", 1000}});
  CHECK(e["ok"] == false);
  CHECK_THAT(e.value("error", ""), Catch::Contains("kmin must not exceed kmax"));
  json p = control(lab.control, {{"cmd", "set_pfc"}, {"port", "*"}, {"priority", 3}, {"xon", 1000}});
  CHECK(p["ok"] == false);
  CHECK(control(lab.control, {{"cmd", "get_ecn"}, {"port", "*"}, {"queue", 3}}) == ecnBefore);
  CHECK(control(lab.control, {{"cmd", "get_pfc"}, {"port", "*"}, {"priority", 3}}) == pfcBefore);
}

}  // namespace test_labswitch
