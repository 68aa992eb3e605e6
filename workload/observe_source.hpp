// Where the `observed` workload kind reads a real job's records: the agent's local intake
// (agent/observe_intake.hpp) registers itself here, so that the kind stays one file of workload/
// and the intake stays the agent's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <map>
#include <utility>

#include "workload/engine.hpp"  // Summary
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

// One job's records as the `observed` and `mpi` kinds score them: each operation's bytes spread
// over its own time into the workload's telemetry, and the ranks seen on this node.
class JobReader {
 public:
  JobReader(ObserveSource* source, std::string job) : source_(source), job_(std::move(job)) {}
  void skipBacklog();                          // records from before the workload are not its
  void read(Telemetry& telemetry, Summary& s);  // what arrived since the last read
  bool anyRank() const { return !ranks_.empty(); }
  size_t rankCount() const { return ranks_.size(); }
  // "JOB rank R (pid P, N operations[, the last T ms before the end])", for the log.
  std::string seen(int64_t endNs, bool stopped) const;

 private:
  ObserveSource* source_;
  std::string job_;
  std::map<std::pair<std::string, uint32_t>, ObservedStream::Rank> ranks_;  // (job, rank)
};

// The process's source (the agent's intake), or null when the agent has none. Set once at
// start-up, before any workload runs; the source outlives every workload.
void setObserveSource(ObserveSource* source);
ObserveSource* observeSource();

}  // namespace rc::workload
