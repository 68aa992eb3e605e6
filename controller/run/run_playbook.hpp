// The live playbook runner: workload + faults at planned instants + guardrails + telemetry,
// collected into a RunResult for scoring and reports.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "controller/fleet/inventory.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/run/run_result.hpp"

namespace rc::metrics {
class Exporter;
}

namespace rc::controller {

struct RunnerOptions {
  std::chrono::milliseconds connectTimeout{5000};
  bool progress = true;  // a live line per second on stderr
  // `run --metrics`: the live run's gauges (phase, trial, throughput, faults, counters,
  // guardrails), set every 100 ms tick; null for none.
  metrics::Exporter* metrics = nullptr;
};

// Runs PLAN on the inventory's agents. Never throws for run-time problems: an agent that
// cannot be reached, a refused fault, a guardrail or Ctrl-C end up in abortReason / the fault
// records, with every fault reverted and the workload stopped.
boost::asio::awaitable<RunResult> executePlan(boost::asio::io_context& io,
                                              const Playbook& playbook, const Plan& plan,
                                              const Inventory& inventory,
                                              boost::asio::ssl::context& tls,
                                              RunnerOptions options);

// `run --metrics` exports at most this many rdmachaos_node_counter series per node: an mlx5
// port's ethtool statistics alone are thousands (a few dozen per queue), and a fleet's
// Prometheus would hold every one of them for every node.
inline constexpr size_t kMaxCounterSeriesPerNode = 512;

// The counters of one node that become series: at most CAP, the workload's first, then the RDMA
// port's (rdma.*), the interface's statistics (net.*), ethtool's by name, and per-queue ones
// (rx3_bytes, tx12_packets, ch5_events) last. DROPPED gets how many were left out.
std::vector<std::pair<std::string, uint64_t>> exportedCounters(const std::map<std::string, uint64_t>& counters,
                                                               size_t cap, size_t& dropped);

}  // namespace rc::controller
