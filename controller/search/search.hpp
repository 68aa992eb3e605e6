// The search engine: a boundary by bisection on one parameter and a worst case over several,
// both over a caller's evaluator, both resumable from their record (docs/search.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rc::controller::search {

enum class Scale { linear, log };

// A parameter's range. Log ranges need lo > 0 and move by ratios.
struct Range {
  double lo = 0;
  double hi = 1;
  Scale scale = Scale::linear;
};

// One trial's answer: the metric's value and its uncertainty (+/-), as the scorer reports them.
struct Evaluation {
  double value = 0;
  double uncertainty = 0;
};

// One trial asked of the evaluator: where, and what it answered.
struct Trial {
  std::vector<double> point;
  Evaluation answer;
};

// The repeats of one point summarised: their mean and the uncertainty of that mean.
struct Summary {
  double mean = 0;
  double uncertainty = 0;
};
Summary summarise(const std::vector<Evaluation>& measurements);

// The position of X in RANGE on [0, 1], by the range's scale, and back.
double toUnit(const Range& range, double x);
double fromUnit(const Range& range, double u);
// Throws std::invalid_argument naming WHAT when RANGE is empty or a log range reaches 0.
void validateRange(const Range& range, const std::string& what);

// --- boundary ---------------------------------------------------------------------------

// The expectation a point is judged by: metric OP bound holds (pass) or not (fail).
enum class Op { lt, le, gt, ge };
enum class Verdict {
  pass,
  fail,
  ambiguous,   // still within the noise at the repeat cap
  unfinished,  // the budget ran out before the point was decided
};

struct BoundarySettings {
  Range range;
  Op op = Op::lt;
  double bound = 0;
  // Which side of the boundary fails: true when larger values fail (a longer flap).
  bool failsAbove = true;
  // Stop when the interval is this narrow: a width for linear ranges, a ratio less one for log
  // ranges (0.05: the ends within 5% of each other).
  double resolution = 0;
  size_t budget = 100;    // trials in all, each repeat one trial
  size_t minRepeats = 1;  // trials before a point may be decided
  size_t maxRepeats = 8;  // trials after which an undecided point is ambiguous
  // The coverage factor k: a point is decided when mean +/- k x uncertainty lies on one side.
  double coverage = 3;
};

struct BoundaryPoint {
  double value = 0;
  std::vector<Evaluation> measurements;
  Summary summary;
  Verdict verdict = Verdict::unfinished;
};

enum class Outcome {
  boundary,   // the pass end passes, the fail end fails: the interval holds the boundary
  allPass,    // both ends pass: no boundary inside the range
  allFail,    // both ends fail: no boundary inside the range
  reversed,   // the pass end fails and the fail end passes: failsAbove is the wrong way round
  undecided,  // an end stayed ambiguous or unfinished
};

struct BoundaryResult {
  Outcome outcome = Outcome::undecided;
  // The interval: the decided passing point nearest the boundary and the decided failing one
  // (both set for Outcome::boundary only).
  std::optional<double> lastPass;
  std::optional<double> firstFail;
  bool narrowed = false;              // the interval reached the resolution
  bool budgetSpent = false;           // the budget stopped the search
  std::vector<BoundaryPoint> points;  // in the order evaluated
  size_t trials = 0;
};

// Settings and every trial so far: what resuming needs.
struct BoundaryRecord {
  BoundarySettings settings;
  std::vector<Trial> trials;
};

using BoundaryEvaluator = std::function<Evaluation(double value)>;

// Runs (or resumes) the search of RECORD: its recorded trials are replayed without calling
// EVALUATE, then the search continues, appending each new trial to RECORD as it is answered,
// so the record is whole when EVALUATE throws. Throws std::invalid_argument for bad settings
// or a record whose trials are not the ones these settings ask for.
BoundaryResult runBoundary(BoundaryRecord& record, const BoundaryEvaluator& evaluate);
void validate(const BoundarySettings& settings);
// Whether a point with SUMMARY is decided under SETTINGS' expectation and coverage.
Verdict decide(const BoundarySettings& settings, const Summary& summary);

// --- worst case -------------------------------------------------------------------------

struct Parameter {
  std::string name;
  Range range;
};

struct WorstSettings {
  std::vector<Parameter> parameters;
  uint64_t seed = 1;
  size_t budget = 200;  // trials in all, the confirmation's included
  // At the end the top confirmTop points are measured confirmRepeats more times each and the
  // best is chosen by its mean, so one lucky trial does not name the worst case.
  size_t confirmTop = 3;
  size_t confirmRepeats = 3;
  double initialStep = 0.25;  // the proposal's spread at the start, in unit-cube lengths
  double minStep = 0.02;      // and at the end
  double temperature = 0.2;   // the start's temperature, as a share of the values' spread
};

struct WorstPoint {
  std::vector<double> parameters;
  std::vector<Evaluation> measurements;
  Summary summary;
};

struct WorstResult {
  std::vector<WorstPoint> points;  // in the order first evaluated
  size_t best = 0;                 // index into points
  size_t trials = 0;
};

struct WorstRecord {
  WorstSettings settings;
  std::vector<Trial> trials;
};

using WorstEvaluator = std::function<Evaluation(const std::vector<double>& parameters)>;

// As runBoundary, for the worst case: the point that maximises the metric.
WorstResult runWorst(WorstRecord& record, const WorstEvaluator& evaluate);
void validate(const WorstSettings& settings);

// --- records as JSON --------------------------------------------------------------------

nlohmann::json toJson(const BoundaryRecord& record);
nlohmann::json toJson(const WorstRecord& record);
// Throw nlohmann::json::exception for a malformed record, std::invalid_argument for one
// whose settings do not validate.
BoundaryRecord boundaryRecordFromJson(const nlohmann::json& j);
WorstRecord worstRecordFromJson(const nlohmann::json& j);

// The trials a search asks for, in order: recorded answers are given back (after checking
// the point is the one recorded), the rest are asked of the evaluator and recorded.
class TrialLog {
 public:
  using Ask = std::function<Evaluation(const std::vector<double>&)>;
  TrialLog(std::vector<Trial>& trials, Ask ask) : trials_(trials), ask_(std::move(ask)) {}
  Evaluation ask(const std::vector<double>& point);
  size_t spent() const { return next_; }

 private:
  std::vector<Trial>& trials_;
  Ask ask_;
  size_t next_ = 0;
};

}  // namespace rc::controller::search
