// Runs one collective workload on this rank: waits for the common start, connects, loops
// iterations of steps over a transport, survives lost connections, and records telemetry.
#pragma once

#include <atomic>
#include <string>

#include "workload/collectives.hpp"
#include "workload/telemetry.hpp"
#include "workload/transport.hpp"

namespace rc::workload {

struct RunSpec {
  Shape shape;
  uint64_t iterations = 0;        // 0: run for DURATION_NS
  int64_t durationNs = 0;
  int64_t startNs = 0;            // common start, agent wall clock
  int64_t reconnectTimeoutNs = 10'000'000'000;
};

struct Summary {
  Counters counters;
  bool verified = true;   // every completed iteration produced the right result
  std::string endReason;  // completed, stopped, error
  std::string error;      // set when endReason is "error"
};

// Runs to the end (iterations or duration), until STOP becomes true (the caller also calls
// transport.interrupt()), or until a peer stays unreachable past the reconnect timeout.
Summary runWorkload(const RunSpec& spec, Transport& transport, Telemetry& telemetry,
                    const std::atomic<bool>& stop);

}  // namespace rc::workload
