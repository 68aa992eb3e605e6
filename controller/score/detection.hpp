// Detection scoring: did the monitoring under test raise the alert a fault should raise, how
// fast, did it clear, and what fired that no fault explains. Pure functions over a RunResult's
// alert events; see docs/scoring.md ("Detection").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/playbook/playbook.hpp"
#include "controller/run/run_result.hpp"

namespace rc::controller {

// One alert from firing to resolving, its events merged across sources and re-sends. Times on
// the run timeline.
struct AlertEpisode {
  std::map<std::string, std::string> labels;
  std::string source;  // "alertmanager", "prometheus" or both joined by "+"
  int64_t firedNs = 0;
  std::optional<int64_t> resolvedNs;
  int64_t notifiedNs = 0;  // when rdmachaos first heard of it
  std::string name() const;  // alertname{label="v", ...} without the usual noise (instance, job)
};

// Merges a run's alert events into episodes, by labels, in firing order. Events of the same
// alert whose firing instants lie within TOLERANCE_NS (the sources' sampling) are one episode.
std::vector<AlertEpisode> alertEpisodes(const RunResult& run, int64_t toleranceNs);

// What one [[detect]] found for one fault (or the faults of one step that share the resolved
// labels: a detect without {target} over several targets is one alert expected).
struct DetectionOutcome {
  int trial = 0;
  int repeat = 0;
  std::string scenario, step, kind;
  std::vector<std::string> nodes;  // the faulted nodes this outcome covers
  std::string expectation;         // DetectExpectation::describe(), placeholders as written
  std::vector<std::pair<std::string, std::string>> match;  // resolved labels
  int64_t withinNs = 0;
  std::optional<int64_t> clearsWithinNs;
  std::optional<int64_t> appliedNs, revertedNs;
  // "detected", "late", "missed", "not scored" (the fault was never applied, or the run
  // stopped listening before the deadline).
  std::string status = "missed";
  std::optional<int64_t> firedNs, timeToDetectNs;
  std::optional<int64_t> resolvedNs, timeToClearNs;
  bool cleared = false;   // resolved within clears_within (true when no clears_within)
  int64_t uncertaintyNs = 0;  // of the time to detect: scrape + evaluation intervals + clock skew
  std::string alert;          // the matched episode's name()
  std::string note;           // e.g. "already firing when the fault was applied"
  bool passed = false;
  SourcePos pos;
  std::string describe() const;  // "RdmaLinkDown{node="n2"}: detected in 1.52s ±2s, cleared in 0.8s"
};

struct DetectionSummary {
  int expected = 0, detected = 0, late = 0, missed = 0, falseAlarms = 0, notScored = 0;
  std::optional<double> precision, recall;  // 0..1; empty when the denominator is 0
  std::optional<int64_t> medianTimeToDetectNs, worstTimeToDetectNs;
};

struct DetectionScore {
  bool expected = false;  // the playbook has [[detect]]
  bool scored = false;    // ... and the run had an alert source
  std::string notScoredReason;
  std::vector<std::string> sources;
  alerts::PipelineTiming timing;
  int64_t falseAlarmMarginNs = 0;
  std::vector<std::string> watched;  // alert names watched for false alarms
  std::vector<std::string> errors;   // from the sources (bad posts, failed polls)
  std::vector<AlertEpisode> episodes;  // every alert of the run
  std::vector<DetectionOutcome> outcomes;
  std::vector<AlertEpisode> falseAlarms;
  DetectionSummary total;
  std::map<int, DetectionSummary> rounds;  // by repeat index, with repeat > 1
  int passed = 0, failed = 0;
};

DetectionScore scoreDetection(const RunResult& run, const Playbook& playbook);

// The latest instant on the run timeline a run with these faults must keep listening to
// alerts until, so that every [[detect]] can be judged: applied + within and reverted +
// clears_within of every fault a detect watches (plus the clock skew); 0 when none.
int64_t detectionDeadlineNs(const Playbook& playbook, const RunResult& run);

// "{target}" and the others replaced for a fault of STEP in SCENARIO on NODE.
std::string resolvePlaceholders(const std::string& value, const std::string& node, const std::string& step,
                                const std::string& kind, const std::string& scenario);

}  // namespace rc::controller
