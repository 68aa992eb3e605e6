// Workloads end to end on the namespace lab: real agents, real TCP on the data fabric, the
// real CLI. Correct results for 2..4 ranks, telemetry that adds up, a link flap visible in
// the series, and a workload stopped by the lease when its controller dies.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "faults/labswitch_client.hpp"
#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_workload_e2e {

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using rctest::Proc;
using rctest::readFile;
using rctest::waitCli;

// One 4-node lab for the binary, removed at exit, also after failures.
rctest::Lab& sharedLab() {
  static rctest::Lab instance("rc-wl", [] {
    rc::lab::UpOptions o;
    o.nodes = 4;
    return o;
  }());
  return instance;
}

Proc spawnCli(std::vector<std::string> args) { return rctest::spawnCli(sharedLab().dir(), std::move(args)); }

json runWorkload(std::vector<std::string> args, int expect = 0) {
  args.insert(args.begin(), {"workload", "--inventory", sharedLab().inventory(), "--json"});
  Proc p = spawnCli(args);
  int rc = waitCli(p);
  INFO("stderr: " << readFile(p.err));
  REQUIRE(rc == expect);
  return json::parse(readFile(p.out));
}

// Every node's series: bins add up to the bytes it received, time goes forward.
void checkSeries(const json& w, bool exact) {
  for (const auto& n : w["nodes"]) {
    INFO(n["node"]);
    uint64_t sum = 0;
    int64_t last = INT64_MIN;
    for (const auto& b : n["bins"]) {
      CHECK(b[0].get<int64_t>() > last);
      last = b[0].get<int64_t>();
      sum += b[1].get<uint64_t>();
    }
    CHECK(sum == n["counters"]["rx_bytes"].get<uint64_t>());
    int64_t lastEnd = INT64_MIN;
    uint64_t iterBytes = 0;
    for (const auto& it : n["iterations"]) {
      CHECK(it["start_ns"].get<int64_t>() >= lastEnd);
      CHECK(it["end_ns"].get<int64_t>() >= it["start_ns"].get<int64_t>());
      lastEnd = it["end_ns"].get<int64_t>();
      iterBytes += it["rx_bytes"].get<uint64_t>();
    }
    // Completed iterations account for all of it, except what arrived for an iteration a
    // rank abandoned (a lost connection, or the end of a timed run while a peer finished).
    CHECK(iterBytes <= sum);
    if (exact) CHECK(iterBytes == sum);
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("all-reduce over TCP on the lab is exact for 2, 3 and 4 ranks") {
  int world = GENERATE(2, 3, 4);
  std::vector<std::string> args = {"--kind", "allreduce", "--size", "1000004", "--iterations", "20",
                                   "--streams", "2"};
  // (Appended, not "n" + to_string: GCC 12's false -Wrestrict at -O3, PR 105651.)
  for (int i = 1; i <= world; i++) args.insert(args.end(), {"--node", std::string("n").append(std::to_string(i))});
  json w = runWorkload(args);
  REQUIRE(w["nodes"].size() == size_t(world));
  for (const auto& n : w["nodes"]) {
    INFO(n.dump());
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    CHECK(n["counters"]["iterations"] == 20);
    CHECK(n["counters"]["corruptions"] == 0);
    CHECK(n["iterations"].size() == 20);
  }
  CHECK(w["bus_factor"].get<double>() == Approx(2.0 * (world - 1) / world));
  checkSeries(w, true);
}

TEST_CASE("all-gather, all-to-all and incast verify on 4 lab hosts") {
  std::string kind = GENERATE(as<std::string>{}, "allgather", "alltoall", "incast");
  json w = runWorkload({"--kind", kind, "--size", "1MiB", "--iterations", "10", "--fan-in", "2"});
  for (const auto& n : w["nodes"]) {
    INFO(kind << " " << n.dump());
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    CHECK(n["counters"]["iterations"] == 10);
  }
  checkSeries(w, true);
}

TEST_CASE("a 2 s link flap during an all-reduce shows as a stall, then recovery") {
  Proc wl = spawnCli({"workload", "--inventory", sharedLab().inventory(), "--json", "--kind", "allreduce",
                      "--size", "4MiB", "--for", "12s"});
  std::this_thread::sleep_for(3s);
  Proc inj = spawnCli({"inject", "link_flap", "--inventory", sharedLab().inventory(), "--node", "n2",
                       "--set", "down=2s", "--for", "10s", "--json"});
  REQUIRE(waitCli(inj) == 0);
  REQUIRE(waitCli(wl) == 0);
  json w = json::parse(readFile(wl.out));
  json report = json::parse(readFile(inj.out));
  // The kernel-observed flap on the controller's timeline.
  const auto& node = report["nodes"][0];
  int64_t off = node["clock_offset_ns"].get<int64_t>(), down = 0, up = 0;
  for (const auto& e : node["fault"]["events"]) {
    if (e["what"] == "down") down = e["t_ns"].get<int64_t>() - off;
    if (e["what"] == "up") up = e["t_ns"].get<int64_t>() - off;
  }
  REQUIRE(down > 0);
  REQUIRE(up > down);
  checkSeries(w, false);
  // Job throughput: all nodes' bytes in 100 ms windows (10 bins), on the controller clock.
  const int64_t win = 100'000'000;
  std::map<int64_t, double> agg;
  for (const auto& n : w["nodes"])
    for (const auto& b : n["bins"]) agg[b[0].get<int64_t>() / win] += b[1].get<double>();
  auto windowMedian = [&](int64_t from, int64_t to) {
    std::vector<double> v;
    for (int64_t k = from / win; k < to / win; k++) v.push_back(agg.count(k) ? agg[k] : 0.0);
    return median(v);
  };
  int64_t start = w["start_ns"].get<int64_t>();
  double baseline = windowMedian(start + 500'000'000, down - 100'000'000);
  double during = windowMedian(down + 200'000'000, up - 100'000'000);
  // Back near baseline within a few seconds of the link's return: the best 1 s window starting
  // 0.5-4 s after it (TCP's retransmit timer decides exactly when; slower under sanitizers).
  double after = 0;
  for (int64_t s0 = up + 500'000'000; s0 <= up + 4'000'000'000; s0 += win)
    after = std::max(after, windowMedian(s0, s0 + 1'000'000'000));
  INFO("baseline " << baseline << " B/100ms, during " << during << ", after " << after);
  REQUIRE(baseline > 0);
  CHECK(during < 0.1 * baseline);
  CHECK(after > 0.5 * baseline);
  for (const auto& n : w["nodes"]) {
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
  }
}

TEST_CASE("kill -9 of the controller: the lease stops the workload on every agent") {
  Proc wl = spawnCli({"workload", "--inventory", sharedLab().inventory(), "--kind", "allreduce", "--size",
                      "1MiB", "--for", "120s"});
  // Running once a live line appears.
  auto end = std::chrono::steady_clock::now() + 20s;
  while (readFile(wl.out).find("busbw") == std::string::npos && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(50ms);
  REQUIRE(readFile(wl.out).find("busbw") != std::string::npos);
  kill(wl.pid, SIGKILL);
  waitCli(wl);
  // Within the 5 s lease (plus the end of an iteration) every agent has stopped it.
  auto stopped = [&] {
    for (const char* n : {"n1", "n2", "n3", "n4"})
      if (readFile(sharedLab().node(n).log).find("ended (lease_expired)") == std::string::npos)
        return false;
    return true;
  };
  end = std::chrono::steady_clock::now() + 15s;
  while (!stopped() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(100ms);
  CHECK(stopped());
  // Nothing is left running: the same port takes a new workload at once.
  json w = runWorkload({"--kind", "allreduce", "--size", "64KiB", "--iterations", "5"});
  for (const auto& n : w["nodes"]) CHECK(n["end_reason"] == "completed");
}

TEST_CASE("connections killed under a running all-reduce are re-established and counted") {
  Proc wl = spawnCli({"workload", "--inventory", sharedLab().inventory(), "--json", "--kind", "allreduce",
                      "--size", "1MiB", "--for", "5s", "--streams", "2"});
  std::this_thread::sleep_for(2s);
  // Abort every data connection of n2 (sock_diag destroy: both ends see a reset).
  std::string cmd = "ip netns exec " + sharedLab().node("n2").netns +
                    " ss -K -t '( sport = :7480 or dport = :7480 )' >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  REQUIRE(waitCli(wl) == 0);
  json w = json::parse(readFile(wl.out));
  int64_t reconnects = 0, failed = 0;
  for (const auto& n : w["nodes"]) {
    INFO(n.dump());
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    reconnects += n["counters"]["reconnects"].get<int64_t>();
    failed += n["counters"]["failed_iterations"].get<int64_t>();
  }
  CHECK(reconnects >= 1);
  CHECK(failed >= 1);
  checkSeries(w, false);
}

// The lab switch's transmitted bytes per queue of port PORT (the default map puts DSCP 26 in
// queue 3 and DSCP 48 in queue 6).
std::vector<double> queueTxBytes(const std::string& port) {
  auto r = rc::faults::labswitchCall(sharedLab().switchControl(), rc::swproto::CountersRequest{.port = port});
  REQUIRE(r.ok());
  std::vector<double> out(8, 0);
  for (const auto& p : r->ports)
    for (const auto& q : p.queues) out[size_t(q.queue)] = double(q.txBytes);
  return out;
}

TEST_CASE("--dscp puts the workload's traffic in the switch queue of that class") {
  auto run = [](std::vector<std::string> extra) {
    auto before = queueTxBytes("n2");
    std::vector<std::string> args = {"--kind", "allreduce", "--size", "4MiB", "--iterations", "10",
                                     "--node", "n1", "--node", "n2"};
    args.insert(args.end(), extra.begin(), extra.end());
    json w = runWorkload(args);
    auto after = queueTxBytes("n2");
    double rx = 0;
    for (const auto& n : w["nodes"])
      if (n["node"] == "n2") rx = n["counters"]["rx_bytes"].get<double>();
    REQUIRE(rx > 0);
    std::vector<double> delta(8);
    for (size_t q = 0; q < 8; q++) delta[q] = after[q] - before[q];
    return std::pair{rx, delta};
  };
  auto [rxDefault, dDefault] = run({});
  INFO("default: n2 received " << rxDefault << " B; queue 3 sent " << dDefault[3] << " B, queue 6 " << dDefault[6]);
  CHECK(dDefault[3] >= rxDefault);  // DSCP 26 by default: RoCEv2's lossless class
  // Queue 6 carries only n2's share of pure TCP ACKs (the lab's --ack-priority rule): a few
  // dozen bytes per data segment received by n1, not data.
  CHECK(dDefault[6] > 0);
  CHECK(dDefault[6] < 0.01 * rxDefault);
  auto [rx48, d48] = run({"--dscp", "48"});
  INFO("--dscp 48: n2 received " << rx48 << " B; queue 3 sent " << d48[3] << " B, queue 6 " << d48[6]);
  CHECK(d48[6] >= rx48);
  CHECK(d48[3] < 0.01 * rx48);
  // Out of range, or a QP attribute without verbs: refused before anything starts.
  Proc bad = spawnCli({"workload", "--inventory", sharedLab().inventory(), "--iterations", "1", "--dscp", "64"});
  CHECK(waitCli(bad) == 2);
  CHECK_THAT(readFile(bad.err), Catch::Contains("--dscp must be 0 to 63"));
  Proc qp = spawnCli({"workload", "--inventory", sharedLab().inventory(), "--iterations", "1", "--qp-timeout", "8"});
  CHECK(waitCli(qp) == 2);
  CHECK_THAT(readFile(qp.err), Catch::Contains("add --transport verbs"));
}

}  // namespace test_workload_e2e
