// Runner helpers: controller ids and the counters `run --metrics` exports.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "common/protocol.hpp"
#include "controller/fleet/fleet.hpp"
#include "controller/run/run_playbook.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_runner {

using namespace rc::controller;

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

}  // namespace test_runner
