// Collects fabric evidence during a run: the lab switch's counters and events, sampled on a
// thread of its own (the control socket is blocking I/O, kept off the controller's event loop).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/run/run_result.hpp"

namespace rc::controller {

class FabricSampler {
 public:
  // Starts sampling SOCKET every PERIOD_NS; T0_UNIX_NS is the run's t = 0 (wall clock).
  // METERS are set on the switch for the run (their flow_start/flow_end events land in the
  // evidence) and removed by finish().
  FabricSampler(std::string socket, int64_t t0UnixNs, std::vector<FabricMeter> meters = {},
                int64_t periodNs = 100'000'000);
  ~FabricSampler();
  FabricSampler(const FabricSampler&) = delete;
  FabricSampler& operator=(const FabricSampler&) = delete;
  // Takes a last sample, stops the thread and returns what was collected.
  FabricEvidence finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The L4 port the lab switch meters a fault's own traffic on (FaultKind::wireMeter), if any: the
// run asks the switch to meter it, scoring reads the wire span off those meters.
std::optional<int> faultMeterPort(const std::string& kind, const std::string& role, const json& params);

}  // namespace rc::controller
