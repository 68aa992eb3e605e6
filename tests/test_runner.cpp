// Runner helpers: telemetry bins of any alignment re-binned onto the run's grid.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "common/protocol.hpp"
#include "controller/fleet.hpp"
#include "controller/run_playbook.hpp"

using namespace rc::controller;

TEST_CASE("rebin keeps every byte inside the window and splits by overlap") {
  // Samples of 10 ms starting 3 ms after the origin; grid of 10 ms.
  std::vector<std::pair<int64_t, double>> samples;
  const int64_t origin = 1'000'000'000'000;
  for (int i = 0; i < 10; i++) samples.emplace_back(origin + 3'000'000 + i * 10'000'000, 100.0);
  auto bins = rebin(samples, 10'000'000, origin, 10'000'000, 120'000'000);
  REQUIRE(bins.size() == 12);
  CHECK(bins[0].tNs == 0);
  CHECK(bins[1].tNs == 10'000'000);
  CHECK(bins[0].bytes == Approx(70));   // 7 ms of the first sample
  CHECK(bins[1].bytes == Approx(100));  // 3 ms of the first + 7 ms of the second
  CHECK(bins[10].bytes == Approx(30));  // the last 3 ms of the last sample
  CHECK(bins[11].bytes == Approx(0));
  double total = 0;
  for (const auto& b : bins) total += b.bytes;
  CHECK(total == Approx(1000));
}

TEST_CASE("rebin drops what falls outside the run and tolerates coarser samples") {
  std::vector<std::pair<int64_t, double>> samples = {{-50, 10.0}, {0, 40.0}, {1000, 5.0}};
  auto bins = rebin(samples, 40, 0, 10, 40);
  REQUIRE(bins.size() == 4);
  for (const auto& b : bins) CHECK(b.bytes == Approx(10));
}

TEST_CASE("controller ids end in 64 random bits, so fault ids do not collide across runs") {
  std::set<std::string> tails;
  for (int i = 0; i < 1000; i++) {
    std::string id = newControllerId();
    CHECK(rc::proto::validId(id));
    auto dash = id.rfind('-');
    REQUIRE(dash != std::string::npos);
    std::string tail = id.substr(dash + 1);
    CHECK(tail.size() == 16);
    tails.insert(tail);
  }
  CHECK(tails.size() == 1000);
}

TEST_CASE("run --metrics exports at most a cap of counter series per node, the telling ones first") {
  // An mlx5 port's ethtool statistics: a few dozen per queue, for each of 64 queues, beside the
  // port-wide ones. Before, every one became a series of every node.
  std::map<std::string, uint64_t> c;
  for (int q = 0; q < 64; q++)
    for (const char* what : {"packets", "bytes", "csum_none", "xdp_drop", "wqe_err"}) {
      c["rx" + std::to_string(q) + "_" + what] = 1;
      c["tx" + std::to_string(q) + "_" + what] = 1;
    }
  for (int k = 0; k < 300; k++) c["port_stat_" + std::to_string(1000 + k)] = 2;
  c["rx_prio3_pause"] = 3;
  c["data0.ch7_events"] = 1;
  c["rdma.np_ecn_marked_roce_packets"] = 4;
  c["net.rx_dropped"] = 5;
  c["workload_errors"] = 0;
  size_t dropped = 0;
  auto kept = exportedCounters(c, kMaxCounterSeriesPerNode, dropped);
  CHECK(kept.size() == kMaxCounterSeriesPerNode);
  CHECK(dropped == c.size() - kMaxCounterSeriesPerNode);
  REQUIRE(kept.size() >= 4);
  CHECK(kept[0].first == "workload_errors");
  CHECK(kept[1].first == "rdma.np_ecn_marked_roce_packets");
  CHECK(kept[2].first == "net.rx_dropped");
  auto has = [&](const std::string& name) {
    return std::any_of(kept.begin(), kept.end(), [&](const auto& p) { return p.first == name; });
  };
  CHECK(has("rx_prio3_pause"));  // port-wide: kept before any per-queue one
  CHECK(has("port_stat_1299"));
  // With room for exactly the port-wide ones: no per-queue name, an interface's prefix or not.
  auto portWide = exportedCounters(c, 304, dropped);
  CHECK(portWide.size() == 304);
  for (const auto& [name, v] : portWide) {
    CAPTURE(name);
    CHECK(name.find("_packets") == (name.rfind("rdma.", 0) == 0 ? name.size() - 8 : std::string::npos));
    CHECK(name != "data0.ch7_events");
  }
  // Under the cap, every one, none dropped.
  std::map<std::string, uint64_t> few = {{"a", 1}, {"rx1_bytes", 2}};
  CHECK(exportedCounters(few, kMaxCounterSeriesPerNode, dropped).size() == 2);
  CHECK(dropped == 0);
}
