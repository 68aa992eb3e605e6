// Synthetic runs for the scoring, report and browser tests: a small playbook, an inventory,
// and a RunResult whose series follow a known shape, so every score has an exact answer.
#pragma once

#include <algorithm>
#include <map>
#include <string>

#include "controller/fleet/inventory.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/run/run_result.hpp"

namespace rc::test {

using namespace rc::controller;

inline const char* kSyntheticInventory = R"(
[tls]
ca = "ca.pem"
cert = "controller.pem"
key = "controller.key"
[[node]]
name = "n1"
address = "198.18.1.11"
data_interfaces = ["data0"]
roles = ["worker"]
[[node]]
name = "n2"
address = "198.18.1.12"
data_interfaces = ["data0"]
roles = ["worker"]
)";

// 30 s trial: baseline 0-10 s (warm-up 1 s), fault phase 10-15 s, recovery 15-30 s; 100 ms
// bins; a 2 s link flap on n2 at 10 s.
inline const char* kSyntheticPlaybook = R"(name = "synthetic"
description = "a 2 s link flap under an all-reduce, with known answers"
seed = 7
[workload]
kind = "allreduce"
size = "4MiB"
streams = 2
nodes = "worker"
[scoring]
bin = "100ms"
warmup = "1s"
hold = "1s"
[cost]
gpus = 1024
price_per_gpu_hour = 2.0
[[phase]]
name = "baseline"
duration = "10s"
[[phase]]
name = "fault"
duration = "5s"
[[phase]]
name = "recovery"
duration = "15s"
[[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
for = "2s"
target = "n2"
params = { down = "2s" }
[[expect]]
metric = "recovery_time"
op = "<="
bound = "1s"
[[expect]]
metric = "throughput_loss_pct"
op = "<"
bound = 90
[[expect]]
metric = "recovery_time"
scope = "n1"
op = "<="
bound = "1s"
)";

// Bytes per 100 ms bin as a function of the bin index (bins 100..119 are the fault).
enum class Shape { cleanStep, slowRamp, neverRecovers, noisyBaseline, noEffect, spreadThenBusy };

inline double shapeBytes(Shape s, int i) {
  switch (s) {
    case Shape::cleanStep:  // out for the fault and 500 ms more
      return i >= 100 && i < 125 ? 0 : 1000;
    case Shape::spreadThenBusy:  // stalled by a storm's spread until the watchdog acts (10-10.2 s),
                                 // then a longer stall of a busy host (10.5-11.5 s)
      return (i >= 100 && i < 102) || (i >= 105 && i < 115) ? 0 : 1000;
    case Shape::slowRamp:  // out for the fault, then 10 % more per bin
      if (i >= 100 && i < 120) return 0;
      if (i >= 120 && i < 130) return 100.0 * (i - 119);
      return 1000;
    case Shape::neverRecovers:
      if (i >= 100 && i < 120) return 0;
      return i >= 120 ? 500 : 1000;
    case Shape::noisyBaseline:  // +-3 % noise; out for 1 s only (the fault ends at 11 s)
      if (i >= 100 && i < 110) return 0;
      return i % 3 == 0 ? 970 : i % 3 == 1 ? 1000 : 1030;
    case Shape::noEffect:
      return 1000;
  }
  return 0;
}

// A [[detect]] on the synthetic playbook's flap, to append to its text: RdmaLinkDown on the
// faulted node within 10 s, clearing within 5 s; scrape 1 s + evaluation 500 ms.
inline const char* kSyntheticDetect = R"(
[detection]
scrape_interval = "1s"
evaluation_interval = "500ms"
false_alarm_margin = "5s"
[[detect]]
step = "flap"
alert = { alertname = "RdmaLinkDown", node = "{target}" }
within = "10s"
clears_within = "5s"
)";

// An alert event of RUN as a source reports it, times from the run start.
inline rc::alerts::AlertEvent syntheticAlert(const RunResult& r, const std::string& node, bool firing, int64_t startsNs,
                                             int64_t endsNs = 0, const std::string& source = "alertmanager",
                                             const std::string& name = "RdmaLinkDown") {
  rc::alerts::AlertEvent e;
  e.labels = {{"alertname", name}, {"node", node}, {"instance", node + ":9465"}, {"severity", "critical"}};
  e.firing = firing;
  e.startsAtUnixNs = r.startedUnixNs + startsNs;
  e.endsAtUnixNs = endsNs ? r.startedUnixNs + endsNs : 0;
  e.receivedUnixNs = r.startedUnixNs + (firing ? startsNs : endsNs) + 50'000'000;
  e.source = source;
  e.fingerprint = source + node;
  return e;
}

inline Inventory syntheticInventory() { return *parseInventory(kSyntheticInventory, "/lab/inventory.toml"); }
inline Playbook syntheticPlaybook() { return *parsePlaybook(kSyntheticPlaybook, "synthetic.toml"); }

// A complete run in the given shape; the fault is applied at faultStartNs and reverted at faultEndNs.
// scale multiplies every byte count (1.25e5 turns 1000 bytes per bin into 10 Gb/s).
inline RunResult syntheticRun(const Playbook& pb, Shape shape, int64_t faultStartNs = 10'000'000'000,
                              int64_t faultEndNs = 12'000'000'000, double scale = 1) {
  RunResult r;
  r.plan = *resolvePlan(pb, syntheticInventory());
  r.inventoryPath = "/lab/inventory.toml";
  r.inventoryNodes = syntheticInventory().nodes;
  r.startedUnixNs = 1'700'000'000'000'000'000;
  r.binNs = 100'000'000;
  r.endedNs = r.plan.durationNs;
  for (const auto& node : r.plan.workloadNodes) {
    auto& bins = r.series[node];
    for (int i = 0; i < 300; i++) bins.push_back({int64_t(i) * r.binNs, shapeBytes(shape, i) * scale});
  }
  // One 100 ms iteration per bin while traffic flows; an outage stretches the iteration that
  // was in flight until the first bin with traffic again.
  int64_t it = 0, pending = -1;
  for (int i = 0; i < 300; i++) {
    if (shapeBytes(shape, i) == 0) {
      if (pending < 0) pending = int64_t(i) * r.binNs;
      continue;
    }
    int64_t start = pending >= 0 ? pending : int64_t(i) * r.binNs;
    pending = -1;
    for (const auto& node : r.plan.workloadNodes)
      r.iterations.push_back({node, it, start, int64_t(i + 1) * r.binNs});
    it++;
  }
  for (const auto& f : r.plan.trials[0].faults)
    r.faults.push_back({0, f.step, f.node, f.kind, f.params, f.atNs, faultStartNs, faultEndNs, ""});
  for (const auto& node : r.plan.workloadNodes)
    r.counters.push_back({0, node, {{"link_downed", 3}, {"rx_packets", 1000}},
                          {{"link_downed", node == "n2" ? 4u : 3u}, {"rx_packets", 61000}}});
  r.clocks = {{"n1", 120'000, 35'000, 70'000}, {"n2", -80'000, 40'000, 80'000}};
  return r;
}

// Adds the lab switch's view of a PFC storm on n2's queue 3 from 10 s to 12 s to RUN: 3,000
// pause frames a second received on n2's port, the watchdog detecting it 200 ms after it began
// and restoring the queue 200 ms after it ended, n1 held in XOFF for 200 ms, and ECN marks on
// n1's queue 3. Samples every 100 ms, as the runner takes them.
inline void addStormEvidence(RunResult& r) {
  r.fabric.source = "labswitch /lab/switch.sock";
  for (int64_t t = 0; t <= 30'000'000'000; t += 100'000'000) {
    auto within = [&](int64_t a, int64_t b) { return std::clamp<int64_t>(t, a, b) - a; };
    FabricSample n2;
    n2.tNs = t;
    n2.port = "n2";
    n2.queue = 3;
    n2.pfcRx = uint64_t(within(10'000'000'000, 12'000'000'000) / 1'000'000 * 3);  // 3 per ms
    n2.pausedNs = within(10'000'000'000, 10'200'000'000);
    r.fabric.samples.push_back(n2);
    FabricSample n1;
    n1.tNs = t;
    n1.port = "n1";
    n1.queue = 3;
    n1.xoffNs = within(10'000'000'000, 10'200'000'000);
    n1.ecnMarked = uint64_t(within(10'000'000'000, 12'000'000'000) / 10'000'000);  // 100 per s
    r.fabric.samples.push_back(n1);
  }
  r.fabric.events = {{10'000'000'000, "pfc_rx_start", "n2", 3},
                     {10'200'000'000, "wd_detect", "n2", 3},
                     {12'000'000'000, "pfc_rx_end", "n2", 3},
                     {12'200'000'000, "wd_restore", "n2", 3}};
}

// Adds soft-RoCE (rxe) counters to RUN as the agents send them: a sample every 100 ms from 0 to
// 30 s holding only the values that changed (the first, all). The known answers over the
// fault window (10 s, 12 s]:
//   n1: rdma.sent_pkts +200 (10 a sample, all the time), rdma.completer_retry_err +10 (one a
//       sample in 10-11 s only), net.rx_bytes +20000 (1000 a sample); rdma.retry_exceeded_err
//       moves only outside (at 5 s and 20 s); the samples of 11.1-11.3 s never arrive.
//   n2: rdma.rcvd_seq_err +7 (1000 from the start, reset to 3 at 10.5 s, 7 at 11 s),
//       rdma.out_of_seq_request +12 (first seen at 11.2 s with 40, 52 at 11.5 s);
//       rdma.rcvd_pkts stands still in the window (10 a sample outside it).
inline void addRxeCounters(RunResult& r) {
  auto clampK = [](int k, int a, int b) { return std::clamp(k, a, b) - a; };
  std::map<std::string, std::map<std::string, uint64_t>> sent;  // node -> what the agent sent last
  for (int k = 0; k <= 300; k++) {
    std::map<std::string, std::map<std::string, uint64_t>> now;
    now["n1"]["rdma.sent_pkts"] = uint64_t(10 * k);
    now["n1"]["rdma.completer_retry_err"] = uint64_t(clampK(k, 100, 110));
    now["n1"]["rdma.retry_exceeded_err"] = uint64_t((k >= 50) + (k >= 200));
    now["n1"]["net.rx_bytes"] = uint64_t(1000 * k);
    now["n2"]["rdma.rcvd_pkts"] = uint64_t(10 * (k - clampK(k, 100, 120)));
    now["n2"]["rdma.rcvd_seq_err"] = k < 105 ? 1000 : k < 110 ? 3 : 7;
    if (k >= 112) now["n2"]["rdma.out_of_seq_request"] = k < 115 ? 40 : 52;
    for (auto& [node, values] : now) {
      if (node == "n1" && k >= 111 && k <= 113) continue;  // lost: the next sample carries the change
      NicSample s{int64_t(k) * 100'000'000, {}};
      for (const auto& [name, v] : values) {
        auto [it, added] = sent[node].try_emplace(name, v);
        if (added || it->second != v) s.values[name] = it->second = v;
      }
      r.nicSamples[node].push_back(std::move(s));
    }
  }
}

}  // namespace rc::test
