// Telemetry bins and iteration records shared between the engine thread and a reporter.
#include "workload/telemetry.hpp"

#include <algorithm>

namespace rc::workload {

Telemetry::Telemetry(int64_t originNs, int64_t binNs) : origin_(originNs), binNs_(binNs) {}

void Telemetry::addBytes(int64_t now, uint64_t bytes) {
  // Bytes that arrive before the common start (the first exchange can race it by a clock
  // offset) count in bin 0.
  uint64_t bin = now <= origin_ ? 0 : uint64_t((now - origin_) / binNs_);
  std::lock_guard lock(m_);
  counters_.rxBytes += bytes;
  // A bin already drained cannot grow: count late arrivals in the oldest open bin.
  bin = std::max(bin, firstBin_);
  if (bin - firstBin_ >= bins_.size()) bins_.resize(bin - firstBin_ + 1, 0);
  bins_[bin - firstBin_] += bytes;
}

void Telemetry::addIteration(const IterationRecord& r) {
  std::lock_guard lock(m_);
  records_.push_back(r);
}

void Telemetry::update(const Counters& c) {
  std::lock_guard lock(m_);
  uint64_t rx = counters_.rxBytes;
  counters_ = c;
  counters_.rxBytes = rx;
}

uint64_t Telemetry::rxBytes() {
  std::lock_guard lock(m_);
  return counters_.rxBytes;
}

TelemetryBatch Telemetry::drain(int64_t now, bool final) {
  std::lock_guard lock(m_);
  TelemetryBatch b;
  b.binNs = binNs_;
  b.firstBinNs = origin_ + int64_t(firstBin_) * binNs_;
  // Every bin up to the one containing NOW is closed unless FINAL; empty bins in between are
  // reported as zeros, which is what a stall looks like.
  uint64_t closedEnd = now <= origin_ ? 0 : uint64_t((now - origin_) / binNs_);
  if (final) closedEnd = std::max<uint64_t>(closedEnd, firstBin_ + bins_.size());
  if (closedEnd > firstBin_) {
    size_t n = size_t(closedEnd - firstBin_);
    if (bins_.size() < n) bins_.resize(n, 0);
    b.bins.assign(bins_.begin(), bins_.begin() + long(n));
    bins_.erase(bins_.begin(), bins_.begin() + long(n));
    firstBin_ = closedEnd;
  }
  b.iterations.swap(records_);
  b.counters = counters_;
  return b;
}

}  // namespace rc::workload
