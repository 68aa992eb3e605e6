// agent/agent_metrics: the data plane's series from NIC counters (names, labels, bounds) and
// what an agent's exporter serves for a ConnectX-6 (its captured sysfs tree), over real HTTP.
#include <net/if.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <thread>

#include "agent/agent_metrics.hpp"
#include "http_get.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_agent_metrics {

using namespace rc;
using namespace rc::agent;
using namespace std::chrono_literals;

namespace {


const Series* find(const std::vector<Series>& all, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const auto& s : all)
    if (s.name == name && s.labels == labels) return &s;
  return nullptr;
}

// GETs /metrics until it holds every one of WANTED (the counter thread samples on its own
// schedule), for at most 5 s; the last body.
std::string scrapeUntil(uint16_t port, const std::vector<std::string>& wanted) {
  std::string body;
  auto until = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    body = rctest::httpGet("127.0.0.1", port, "/metrics").body;
    bool all = true;
    for (const auto& w : wanted) all = all && body.find(w) != std::string::npos;
    if (all || std::chrono::steady_clock::now() > until) return body;
    std::this_thread::sleep_for(20ms);
  }
}

}  // namespace

TEST_CASE("PFC pause counters: one series per priority and direction, durations in seconds") {
  counters::Counters c{
      {"rx_prio3_pause", 1200},
      {"tx_prio3_pause", 40},
      {"rx_prio3_pause_duration", 2500000},
      {"tx_prio0_pause_duration", 7},
      {"rx_prio3_pause_transition", 9},  // not a pause count
      {"rx_prio8_pause", 1},             // 8, 12 and X: no such priority
      {"rx_prio12_pause", 1},
      {"rx_prioX_pause", 1},
      {"rx_pause_ctrl_phy", 5},
      {"tx_bytes", 99},
  };
  auto s = dataPlaneSeries("ens1f0np0", c);
  const auto* rx = find(s, "rdmachaos_pfc_pause_frames_total",
                        {{"interface", "ens1f0np0"}, {"priority", "3"}, {"direction", "rx"}});
  REQUIRE(rx);
  CHECK(rx->value == 1200);
  const auto* tx = find(s, "rdmachaos_pfc_pause_frames_total",
                        {{"interface", "ens1f0np0"}, {"priority", "3"}, {"direction", "tx"}});
  REQUIRE(tx);
  CHECK(tx->value == 40);
  const auto* d = find(s, "rdmachaos_pfc_pause_duration_seconds_total",
                       {{"interface", "ens1f0np0"}, {"priority", "3"}, {"direction", "rx"}});
  REQUIRE(d);
  CHECK(d->value == Approx(2.5));
  CHECK(find(s, "rdmachaos_pfc_pause_duration_seconds_total",
             {{"interface", "ens1f0np0"}, {"priority", "0"}, {"direction", "tx"}}));
  // The transition count, priorities 8, 12 and X and the global pause are not series.
  CHECK(s.size() == 4);
}

TEST_CASE("congestion, transport errors, pause storms and drops; absent counters are absent") {
  auto [counter, name,
        labels] = GENERATE(table<std::string, std::string, std::map<std::string, std::string>>({
      {"rdma.np_ecn_marked_roce_packets", "rdmachaos_ecn_marked_packets_total", {}},
      {"rdma.np_cnp_sent", "rdmachaos_cnp_sent_total", {}},
      {"rdma.rp_cnp_handled", "rdmachaos_cnp_handled_total", {}},
      {"rdma.out_of_sequence",
       "rdmachaos_rdma_transport_errors_total",
       {{"counter", "out_of_sequence"}}},
      {"rdma.local_ack_timeout_err",
       "rdmachaos_rdma_transport_errors_total",
       {{"counter", "local_ack_timeout_err"}}},
      {"rdma.rcvd_seq_err", "rdmachaos_rdma_transport_errors_total", {{"counter", "rcvd_seq_err"}}},
      {"tx_pause_storm_warning_events",
       "rdmachaos_pfc_pause_storm_events_total",
       {{"level", "warning"}}},
      {"tx_pause_storm_error_events",
       "rdmachaos_pfc_pause_storm_events_total",
       {{"level", "error"}}},
      {"net.rx_dropped", "rdmachaos_dropped_packets_total", {{"direction", "rx"}}},
      {"net.tx_dropped", "rdmachaos_dropped_packets_total", {{"direction", "tx"}}},
  }));
  CAPTURE(counter);
  auto s = dataPlaneSeries("eth1", {{counter, 31}, {"rdma.port_rcv_data", 5}, {"net.rx_bytes", 5}});
  REQUIRE(s.size() == 1);  // the counters that are no alert's business stay out
  auto want = labels;
  want["interface"] = "eth1";
  CHECK(s[0].name == name);
  CHECK(s[0].labels == want);
  CHECK(s[0].value == 31);
  CHECK(dataPlaneSeries("eth1", {}).empty());
}

TEST_CASE("the series are bounded whatever the driver offers") {
  counters::Counters many;
  for (int i = 0; i < 4000; i++) many["rdma.vendor_counter_" + std::to_string(i)] = 1;
  for (int p = 0; p < 8; p++)
    for (const char* d : {"rx", "tx"}) {
      many[std::string(d) + "_prio" + std::to_string(p) + "_pause"] = 1;
      many[std::string(d) + "_prio" + std::to_string(p) + "_pause_duration"] = 1;
    }
  for (const auto& c : kTransportErrorCounters) many["rdma." + c] = 1;
  auto s = dataPlaneSeries("eth1", many);
  CHECK(s.size() == 32 + kTransportErrorCounters.size());
  CHECK(s.size() <= kMaxSeriesPerInterface);
}

TEST_CASE("linkUp: a missing interface is down, a bad name is an error that names it") {
  auto missing = linkUp("rcnosuch0");
  REQUIRE(missing.ok());
  CHECK_FALSE(*missing);
  for (const char* bad : {"", "a/b", "waytoolonginterfacename0"}) {
    CAPTURE(bad);
    auto r = linkUp(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("'" + std::string(bad) + "'"));
  }
}

TEST_CASE(
    "an agent's exporter serves a ConnectX-6's data plane, and link_up 0 for an interface not "
    "here") {
  auto e = metrics::Exporter::start("127.0.0.1:0");
  REQUIRE(e.ok());
  // The captured tree's interface is not on this machine, so its link reads down; the counters
  // come from the tree (no ethtool: no kernel behind it).
  REQUIRE(::if_nametoindex("ens1f0np0") == 0);
  DataPlaneMetrics dp(**e, {"ens1f0np0"}, {rctest::kConnectx6Sys, false}, 100ms);
  dp.publishLinks();
  auto body = scrapeUntil(
      (*e)->port(), {"rdmachaos_ecn_marked_packets_total", "rdmachaos_dropped_packets_total"});
  CHECK_THAT(body, Catch::Contains("rdmachaos_link_up{interface=\"ens1f0np0\"} 0"));
  CHECK_THAT(body,
             Catch::Contains("rdmachaos_ecn_marked_packets_total{interface=\"ens1f0np0\"} 90417"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_cnp_sent_total{interface=\"ens1f0np0\"} 88213"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_cnp_handled_total{interface=\"ens1f0np0\"} 87950"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_rdma_transport_errors_total{counter=\"out_of_"
                                   "sequence\",interface=\"ens1f0np0\"} 1537"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_rdma_transport_errors_total{counter=\"local_ack_"
                                   "timeout_err\",interface=\"ens1f0np0\"} 41"));
  CHECK_THAT(body,
             Catch::Contains(
                 "rdmachaos_dropped_packets_total{direction=\"rx\",interface=\"ens1f0np0\"} 17"));
  CHECK_THAT(body, Catch::Contains("# TYPE rdmachaos_link_up gauge"));
}

}  // namespace test_agent_metrics
