// Thread-safe telemetry of one workload on one node: received bytes in fixed time bins
// (counted when they arrive) and per-iteration records, drained by a reporter.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace rc::workload {

struct IterationRecord {
  uint64_t index = 0;
  int64_t startNs = 0;  // agent wall clock
  int64_t endNs = 0;
  uint64_t rxBytes = 0;
  bool ok = true;       // completed and verified
};

struct Counters {
  uint64_t iterations = 0;  // completed
  uint64_t failedIterations = 0;
  uint64_t verifyFailures = 0;
  uint64_t errors = 0;
  uint64_t corruptions = 0;
  uint64_t reconnects = 0;
  uint64_t rxBytes = 0;
};

// What a reporter sends: a run of consecutive bins and the records since the last drain.
struct TelemetryBatch {
  int64_t firstBinNs = 0;  // start of bins[0], agent wall clock
  int64_t binNs = 0;
  std::vector<uint64_t> bins;
  std::vector<IterationRecord> iterations;
  Counters counters;
};

class Telemetry {
 public:
  // Bins start at ORIGIN_NS (agent wall clock) and are BIN_NS wide.
  Telemetry(int64_t originNs, int64_t binNs);
  void addBytes(int64_t nowNs, uint64_t bytes);
  void addIteration(const IterationRecord& r);
  void update(const Counters& c);
  // Bins that ended before NOW_NS (all of them if FINAL) and new records.
  TelemetryBatch drain(int64_t nowNs, bool final);
  int64_t binNs() const { return binNs_; }
  uint64_t rxBytes();

 private:
  std::mutex m_;
  int64_t origin_, binNs_;
  uint64_t firstBin_ = 0;         // index of bins_[0]
  std::deque<uint64_t> bins_;
  std::vector<IterationRecord> records_;
  Counters counters_;
};

}  // namespace rc::workload
