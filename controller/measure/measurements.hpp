// What scoring measures for the job or one node in one trial (ScopeScore) and its parts: the
// baseline's band, a fault's impact, iteration statistics. Plain data: the metric table
// (metrics_table.hpp) reads it, score.hpp computes it, the reports print it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace rc::controller {

// The band the healthy job stays in during the baseline (score.hpp, baselineBand).
struct BaselineBand {
  double floor = 0;
  double holdFloor = 0;
  bool capped = false;
  double lowest = 0;       // lowest smoothed baseline rate (bytes/s)
  int64_t lowestAtNs = 0;  // where it was (the start of its bin)
  size_t pooledOver = 0;   // > 0: widened to the median depth over this many trials
};

// What a fault did to one series. Times in ns on the run timeline, rates in bytes/s.
struct Impact {
  // The judgement's thresholds (bytes/s): a bin below goodRate = min((1-e)B, band floor) is
  // impacted; recovery needs a bin at or above it that starts a hold period whose mean is at
  // or above goodHoldRate = min((1-e)B, band hold floor).
  double goodRate = 0;
  double goodHoldRate = 0;
  int64_t uncertaintyNs = 0;              // of time to impact and recovery time (+/-)
  std::optional<int64_t> timeToImpactNs;  // nullopt: never fell below goodRate
  bool recovered = false;
  std::optional<int64_t> recoveryTimeNs;  // nullopt when not recovered
  int64_t recoveredAtNs = 0;              // start of the held-good stretch (if recovered)
  int64_t windowFromNs = 0;               // the impact window the loss is measured over
  int64_t windowToNs = 0;
  double lossBytes = 0;                   // B x window - bytes moved in it, at least 0
  double lossPct = 0;                     // lossBytes / (B x window) x 100
  int64_t stallNs = 0;                    // time with x < stall_fraction x B in the window
  int64_t longestStallNs = 0;
  double minRate = 0;                     // lowest bin rate in the window
};

struct IterationStats {
  size_t count = 0;
  double p50Ns = 0;
  double p99Ns = 0;
  double maxNs = 0;
};

struct ScopeScore {
  std::string scope;  // "job" or a node name
  std::optional<double> baseline;  // bytes/s
  std::optional<BaselineBand> band;  // how low the healthy job went on its own
  std::optional<Impact> impact;    // nullopt when no fault was applied
  std::optional<IterationStats> baselineIterations;
  std::optional<IterationStats> windowIterations;
  std::map<std::string, int64_t> counterDeltas;
  // Fabric metrics (pause_frames, paused_time, pause_spread_time, ecn_marks, drops; job only:
  // watchdog_detect_time, watchdog_restore_time), where the run has fabric evidence.
  std::map<std::string, double> fabric;
  // Packet fault metrics (packets_acted; with the oracle: gbn_violations, nak_generation_time,
  // nak_reaction_time, timeout_wait), job only, where the trial had packet faults.
  std::map<std::string, double> packet;
  // Job only:
  std::optional<double> busbw;     // bytes/s, from baseline iterations
  std::optional<double> gpuHours;  // per incident, at [cost] gpus
  std::optional<double> cost;      // per incident, at [cost] price
  std::optional<double> gpuHoursPerPeriod;  // x incidents_per_day x days
  std::optional<double> costPerPeriod;
};

}  // namespace rc::controller
