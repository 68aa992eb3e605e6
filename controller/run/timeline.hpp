// The one place where an agent's telemetry becomes the run's timeline: its clock onto the
// controller's (the node's clock offset), the controller's clock onto the run's (t = 0 at the
// workload's common start), its bins onto the run's grid and its iterations onto the timeline.
//
// Everything downstream (the live guardrails and progress line, `rdmachaos workload`, the
// RunResult, the scorer and the reports) reads what this builds: dense Bins from t = 0 and
// IterationSpans, both on the run timeline. Nothing else shifts or re-bins telemetry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol.hpp"
#include "controller/run/run_result.hpp"

namespace rc::controller {

// How one node's agent times map onto the run timeline.
struct TimelineMap {
  int64_t offsetNs = 0;  // agent clock - controller clock, as measured when connecting
  int64_t startNs = 0;   // the run's t = 0 on the controller's clock
  int64_t runNs(int64_t agentNs) const { return agentNs - offsetNs - startNs; }
  // A run time back on the controller's clock (what `rdmachaos workload --json` prints).
  int64_t controllerNs(int64_t runNs) const { return runNs + startNs; }
};

// One node's telemetry on the run timeline. The agent's bins are aligned to its own clock;
// each lands on the grid bins it overlaps, its bytes split in proportion to the overlap (with
// the offset the agent was given at the start and a grid of the agent's width, that is one
// bin onto one). What falls before t = 0 or past the horizon is dropped.
class NodeTimeline {
 public:
  NodeTimeline() = default;
  // BIN_NS: the run's grid.
  NodeTimeline(std::string node, TimelineMap map, int64_t binNs);

  // Adds one telemetry message's bins and iterations (failed ones too: see IterationSpan::ok).
  // HORIZON_NS: the run time past which bins are ignored, the caller's now plus a margin (an
  // agent cannot have counted bytes in the future); it bounds the grid whatever times an
  // agent sends.
  void add(const proto::TelemetryMsg& t, int64_t horizonNs);

  const std::string& node() const { return node_; }
  const TimelineMap& map() const { return map_; }
  int64_t binNs() const { return binNs_; }
  // bins()[k] covers [k binNs, (k + 1) binNs); a bin no telemetry reached holds 0 bytes.
  const std::vector<Bin>& bins() const { return bins_; }
  const std::vector<IterationSpan>& iterations() const { return iterations_; }
  // The end of the newest bin the agent reported (run timeline); empty before its first bin.
  std::optional<int64_t> throughNs() const { return through_; }
  // The bins covering exactly [0, END_NS) (zeros where nothing was reported): the run's series.
  std::vector<Bin> binsUntil(int64_t endNs) const;

 private:
  void addBytes(int64_t fromNs, int64_t widthNs, double bytes, int64_t horizonNs);

  std::string node_;
  TimelineMap map_;
  int64_t binNs_ = 10'000'000;
  std::vector<Bin> bins_;
  std::vector<IterationSpan> iterations_;
  std::optional<int64_t> through_;
};

}  // namespace rc::controller
