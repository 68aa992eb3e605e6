// Scoring: baseline, time to impact, recovery, loss, stalls, iteration tails, counters, cost,
// and expectations turned into verdicts. Pure functions over series; see docs/scoring.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/score/detection.hpp"
#include "controller/measure/measurements.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/run/run_result.hpp"
#include "controller/measure/series.hpp"

namespace rc::controller {

// ---------------------------------------------------------------- building blocks
// The series, its grid, band and statistics: controller/measure/series.hpp.

// Scores grid g (covering the trial up to endNs) against baseline B for a fault that was
// applied at faultStartNs and reverted at faultEndNs.
// BAND (from baselineBand) calibrates the thresholds on the baseline's own noise: a job back
// in its normal band counts as recovered even where that band dips below (1-e)B. Without it,
// the thresholds are (1-e)B alone.
Impact scoreImpact(const Grid& g, double baseline, int64_t faultStartNs, int64_t faultEndNs,
                   const ScoringSettings& s, std::optional<BaselineBand> band = std::nullopt);

std::optional<IterationStats> iterationStats(const std::vector<double>& durationsNs);

// ---------------------------------------------------------------- scoring a run

// What the fabric saw in one window, per switch port and queue (counter deltas).
struct FabricDelta {
  std::string port;
  int queue = 0;
  uint64_t pfcRx = 0, pfcTx = 0, ecnMarked = 0, drops = 0;
  int64_t pausedNs = 0, xoffNs = 0;
  uint64_t maxDepthBytes = 0;
  uint64_t stormGaps = 0;  // gaps in received PFC longer than the pause the frame before asked for
  bool any() const { return pfcRx || pfcTx || ecnMarked || drops || pausedNs || xoffNs; }
};
// Deltas of every (port, queue) that moved in [fromNs, toNs).
std::vector<FabricDelta> fabricDeltas(const FabricEvidence& f, int64_t fromNs, int64_t toNs);
// The switch's busy share between the load samples nearest FROM and TO (percent), and the
// busiest span of at least 1 s between samples in it; nullopt without two samples there.
struct BusyShare {
  double pct = 0, peakPct = 0;
  int64_t fromNs = 0, toNs = 0;
};
std::optional<BusyShare> switchBusy(const std::vector<SwitchLoad>& load, int64_t fromNs, int64_t toNs);
// At or above this busy share the lab switch is taken as saturated (said in the report).
constexpr double kSwitchSaturatedPct = 95;

// Metered traffic on the wire (the switch's flow_start/flow_end events for PORT and L4DST):
// its first frame at or after FROM_NS and the end of its last episode that began before TO_NS.
// lastNs is empty while the traffic still flowed at the end of the evidence.
struct WireSpan {
  int64_t firstNs = 0;
  std::optional<int64_t> lastNs;
  int episodes = 0;
};
std::optional<WireSpan> wireSpan(const FabricEvidence& f, const std::string& port, int l4Dst, int64_t fromNs,
                                 int64_t toNs);
// The wire span of the traffic fault F put on the fabric, for the kinds that are metered (an
// incast's record on its receiver), up to TRIAL_END_NS; empty for the others.
std::optional<WireSpan> faultWire(const RunResult& run, const FaultRecord& f, int64_t trialEndNs);

// A PFC watchdog episode on one port and priority: the storm on the wire (first and last PFC
// frame received), the watchdog's own detect and restore instants, and the data plane's view:
// when the job's traffic moved again after the storm began (the end of the job's first stall
// after the storm start). Times on the run timeline; durations derived in the report.
struct WatchdogEpisode {
  std::string port;
  int priority = 0;
  int64_t stormStartNs = 0;
  std::optional<int64_t> stormEndNs, detectNs, restoreNs, dataPlaneMovingNs;
  // Restoration seen in the data plane: the first metered frame delivered to the stormed port
  // after the storm ended (the traffic towards the stuck host, held or dropped until the queue
  // is restored); empty without a meter on the port or when that traffic was never held.
  std::optional<int64_t> dataPlaneDeliveredNs;
};

// How much each of a node's NIC and RDMA counters grew in the window (fromNs, toNs], from its
// samples (NicSample: changed values only), with the edges read like fabricDeltas reads the
// switch's: the last value at or before each edge; a counter first seen inside the window
// counts from that first value (the agent sends every value it has in its first sample, so
// that is a counter that appeared, not growth). A counter that went back (a driver reload, a
// reset by hand) counts from 0 again: the value it reached after the reset is growth, never a
// negative delta. Only counters that moved are in the map. Resolution: one sample interval.
std::map<std::string, uint64_t> nicDeltas(const std::vector<NicSample>& samples, int64_t fromNs, int64_t toNs);

// The nodes' NIC and RDMA counter deltas while one fault was on: from the instant it was
// applied to the instant it was reverted (the trial's end, or the run's if it ended first,
// when never reverted), the window the switch's per-fault deltas use.
struct NicWindow {
  std::string step, node, kind, role;  // the fault record's
  int64_t fromNs = 0, toNs = 0;
  std::map<std::string, std::map<std::string, uint64_t>> nodes;  // node -> counter -> delta (moved only)
};

struct FabricScore {
  std::string source;                     // empty: no fabric evidence for this run
  std::vector<FabricDelta> trial;         // over the trial
  std::vector<WatchdogEpisode> watchdog;  // storms that began in the trial
  // The lab switch's busy share (SwitchLoad) over the fault window (the trial when no fault
  // was applied), and the busiest second in it; absent without load samples.
  std::optional<double> switchBusyPct, switchBusyPeakPct;
  int64_t switchBusyFromNs = 0, switchBusyToNs = 0;
};

struct Verdict {
  std::string metric;
  std::string scope;
  std::string op;
  double bound = 0;
  std::string boundText;
  std::optional<double> measured;
  std::string measuredText;  // "3.210s", "not recovered", ...
  bool passed = false;
  SourcePos pos;
  std::string describe() const;  // "recovery_time <= 2s (job): measured 0.52s"
};

struct TrialScore {
  int trial = 0;
  std::string label;
  bool completed = false;
  std::optional<int64_t> faultStartNs;  // first fault actually applied
  std::optional<int64_t> faultEndNs;    // last fault actually reverted
  std::vector<std::string> problems;    // faults that failed, guardrails crossed: errors
  std::vector<std::string> jobNotes;    // what a job the run launched did ("the job, on n1: ...")
  ScopeScore job;
  std::vector<ScopeScore> nodes;
  FabricScore fabric;
  // Per applied fault of the trial, in record order; also for a trial that did not complete
  // (the counters are evidence, not a score). Empty where no node sent NIC counters.
  std::vector<NicWindow> nicWindows;
  // The scenario's [[require]] checks; when one fails, the trial is not scored: its
  // expectations' verdicts say "not scored: condition not reached" and count as neither.
  std::vector<Verdict> conditions;
  bool conditionReached = true;
  std::vector<Verdict> verdicts;
};

// inconclusive: a trial did not reach its scenario's condition, so nothing was verified.
enum class Outcome { passed, failed, inconclusive, error };
const char* toString(Outcome o);

// The completed trials of one scenario (and sweep value) side by side: per repeatable job
// metric its values, mean, sample standard deviation and coefficient of variation, and the
// verdicts of the scenario's stat = "cv" expectations.
struct RepeatMetric {
  std::string metric, bmwg;
  std::vector<double> values;
  double mean = 0, stddev = 0;
  std::optional<double> cvPct;  // empty when the mean is 0
};
struct RepeatGroup {
  std::string key;  // "scenario" or "scenario param=value"
  std::string scenario;
  size_t trials = 0;
  std::vector<RepeatMetric> metrics;
  std::vector<Verdict> verdicts;
};

struct Scores {
  std::vector<TrialScore> trials;
  std::vector<RepeatGroup> repeatability;  // groups of 2 or more trials
  DetectionScore detection;  // the [[detect]] expectations: the monitoring's score
  Outcome outcome = Outcome::passed;
  std::string reason;  // why error/failed, one line
  int verdictsPassed = 0;
  int verdictsFailed = 0;
  int verdictsNotScored = 0;
};

Scores score(const RunResult& run, const Playbook& playbook);

// CLI exit code of the contract: 0 every expectation met, 1 one failed, 2 error or aborted.
int exitCodeFor(Outcome o);

}  // namespace rc::controller
