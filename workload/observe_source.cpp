// The process's observe source (workload/observe_source.hpp).
#include "workload/observe_source.hpp"

#include <algorithm>
#include <atomic>

#include "common/clock.hpp"

namespace rc::workload {
namespace {
std::atomic<ObserveSource*> gSource{nullptr};

// An operation's bytes spread evenly over its own time, as the engine's bytes arrive while an
// iteration runs: binned at its end alone, a job of a few operations a second would read as a
// series of spikes and stalls between them.
void spread(Telemetry& telemetry, const IterationRecord& r) {
  const int64_t bin = telemetry.binNs();
  if (r.endNs <= r.startNs || bin <= 0 || (r.endNs - r.startNs) / bin > 100'000) {
    telemetry.addBytes(r.endNs, r.rxBytes);
    return;
  }
  uint64_t given = 0;
  for (int64_t t = r.startNs; t < r.endNs;) {
    const int64_t next = std::min(r.endNs, (t / bin + 1) * bin);
    const uint64_t upto = uint64_t(double(r.rxBytes) * double(next - r.startNs) / double(r.endNs - r.startNs));
    if (upto > given) telemetry.addBytes(t, upto - given);
    given = std::max(given, upto);
    t = next;
  }
  if (given < r.rxBytes) telemetry.addBytes(r.endNs, r.rxBytes - given);
}

}  // namespace

void JobReader::skipBacklog() { (void)source_->drain(wallNs()); }

void JobReader::read(Telemetry& telemetry, Summary& s) {
  for (auto& st : source_->drain(wallNs())) {
    if (!job_.empty() && st.jobId != job_) continue;
    const TelemetryBatch& b = st.telemetry;
    for (const auto& r : b.iterations) {
      spread(telemetry, r);
      telemetry.addIteration(r);
      s.counters.iterations += r.ok ? 1 : 0;
      s.counters.failedIterations += r.ok ? 0 : 1;
    }
    for (const auto& r : st.ranks) {
      auto& seen = ranks_[{st.jobId, r.rank}];
      seen.rank = r.rank;
      seen.pid = r.pid;
      seen.ops += r.ops;
      seen.lastEndNs = std::max(seen.lastEndNs, r.lastEndNs);
    }
  }
  telemetry.update(s.counters);
}

std::string JobReader::seen(int64_t endNs, bool stopped) const {
  std::string out;
  for (const auto& [key, r] : ranks_) {
    out += (out.empty() ? "" : ", ") + key.first + " rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
           ", " + std::to_string(r.ops) + " operations";
    if (r.lastEndNs < endNs - 5'000'000'000 && !stopped)
      out += ", the last " + std::to_string((endNs - r.lastEndNs) / 1'000'000) + " ms before the end";
    out += ")";
  }
  return out;
}

void setObserveSource(ObserveSource* source) { gSource.store(source); }
ObserveSource* observeSource() { return gSource.load(); }

}  // namespace rc::workload
