// Where the `observed` workload kind reads a real job's records: the agent's local intake
// (agent/observe_intake.hpp) registers itself here, so that the kind stays one file of workload/
// and the intake stays the agent's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/telemetry.hpp"

namespace rc::workload {

// One (job, communicator) as the intake drained it: the engine's telemetry shape (bytes binned by
// each operation's end; one IterationRecord per operation) and the ranks seen on this node.
struct ObservedStream {
  std::string jobId;
  uint64_t commId = 0;
  uint32_t worldSize = 0;
  struct Rank {
    uint32_t rank = 0;
    uint32_t pid = 0;
    uint64_t ops = 0;
    int64_t lastEndNs = 0;  // agent wall clock
  };
  std::vector<Rank> ranks;
  TelemetryBatch telemetry;
};

class ObserveSource {
 public:
  virtual ~ObserveSource() = default;
  // Every stream's bins closed before NOW_NS and its records since the last drain.
  virtual std::vector<ObservedStream> drain(int64_t nowNs) = 0;
  // Where local processes send their records, for messages.
  virtual std::string where() const = 0;
};

// The process's source (the agent's intake), or null when the agent has none. Set once at
// start-up, before any workload runs; the source outlives every workload.
void setObserveSource(ObserveSource* source);
ObserveSource* observeSource();

}  // namespace rc::workload
