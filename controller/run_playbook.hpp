// The live playbook runner: workload + faults at planned instants + guardrails + telemetry,
// collected into a RunResult for scoring and reports.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>

#include "controller/inventory.hpp"
#include "controller/playbook.hpp"
#include "controller/run_result.hpp"

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

// Re-bins samples of any alignment onto bins of BIN_NS at k x BIN_NS from ORIGIN up to
// ORIGIN + END_NS (so END_NS is relative, like the returned bins' times), splitting
// a sample's bytes in proportion to its overlap with each bin (telemetry bins are aligned to
// the agent's clock, not to the run's).
std::vector<Bin> rebin(const std::vector<std::pair<int64_t, double>>& samples, int64_t sampleNs,
                       int64_t origin, int64_t binNs, int64_t endNs);

}  // namespace rc::controller
