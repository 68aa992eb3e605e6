// Agents' telemetry onto the run timeline: clock offset, run start, the run's grid.
#include "controller/run/timeline.hpp"

#include <algorithm>
#include <utility>

namespace rc::controller {

NodeTimeline::NodeTimeline(std::string node, TimelineMap map, int64_t binNs)
    : node_(std::move(node)), map_(map), binNs_(binNs) {}

void NodeTimeline::add(const proto::TelemetryMsg& t, int64_t horizonNs) {
  if (!t.bins.empty()) {
    const int64_t first = map_.runNs(t.firstBinNs);
    for (size_t k = 0; k < t.bins.size(); k++)
      addBytes(first + int64_t(k) * t.binNs, t.binNs, double(t.bins[k]), horizonNs);
    const int64_t end = std::min(first + int64_t(t.bins.size()) * t.binNs, horizonNs);
    through_ = through_ ? std::max(*through_, end) : end;
  }
  for (const auto& it : t.iterations)
    iterations_.push_back({node_, it.index, map_.runNs(it.startNs), map_.runNs(it.endNs),
                           uint64_t(it.rxBytes), it.ok});
}

void NodeTimeline::addBytes(int64_t from, int64_t width, double bytes, int64_t horizonNs) {
  if (width <= 0 || binNs_ <= 0) return;
  const int64_t to = from + width;
  const int64_t lo = std::max<int64_t>(from, 0), hi = std::min(to, horizonNs);
  if (hi <= lo) return;
  const size_t need = size_t((hi + binNs_ - 1) / binNs_);
  while (bins_.size() < need) bins_.push_back({int64_t(bins_.size()) * binNs_, 0.0});
  // The share of the agent's bin that overlaps each grid bin: bytes are spread evenly over it.
  for (int64_t k = lo / binNs_; k * binNs_ < hi; k++) {
    const int64_t a = std::max(lo, k * binNs_), b = std::min(hi, (k + 1) * binNs_);
    if (b > a) bins_[size_t(k)].bytes += bytes * double(b - a) / double(width);
  }
}

std::vector<Bin> NodeTimeline::binsUntil(int64_t endNs) const {
  const int64_t n = endNs > 0 && binNs_ > 0 ? (endNs + binNs_ - 1) / binNs_ : 0;
  std::vector<Bin> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; k++) {
    out[size_t(k)].tNs = k * binNs_;
    if (size_t(k) < bins_.size()) out[size_t(k)].bytes = bins_[size_t(k)].bytes;
  }
  return out;
}

}  // namespace rc::controller
