// Playbooks: the TOML format of a chaos experiment, its parser, and the resolved plan.
//
// A playbook is parsed and fully validated (units, bounds, fault kinds and parameters through
// the fault registry, step placement on the timeline) before anything runs. resolvePlan()
// then binds it to an inventory: selectors become node names, seeded random picks are drawn,
// repeats and sweeps are expanded into trials with absolute offsets from the run start.
// See docs/playbook-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol.hpp"
#include "common/result.hpp"
#include "controller/fleet/inventory.hpp"
#include "controller/measure/metrics_table.hpp"
#include "controller/search/search.hpp"
#include "workload/kinds.hpp"

namespace rc::controller {

using json = nlohmann::json;

// A place in the playbook file, kept so that errors found later (by resolvePlan against an
// inventory) still point at the line the user has to change.
struct SourcePos {
  int line = 0;
  int column = 0;
};

// Which nodes: the union of names, roles and "all"; with random = k, a seeded pick of k of them.
struct Selector {
  std::vector<std::string> names;
  int random = 0;  // 0 = every matching node
  SourcePos pos;
  std::string describe() const;  // "worker", "[n1, n2]", "random 2 of worker"
};

struct Workload {
  const workload::Kind* kind = workload::findKind("allreduce");  // never null
  uint64_t sizeBytes = 4 << 20;
  int streams = 1;
  std::string transport = "tcp";  // tcp, verbs
  Selector nodes;  // default: all
  proto::QpSettings qp;  // dscp (both transports); qp_timeout, qp_retry_cnt, qp_rnr_retry (verbs)
  std::string test;      // an external kind's program (perftest: ib_write_bw (default), ib_read_bw, ib_send_bw)
  // A kind that launches its job (mpi): how long before the run's t = 0 the agents start it, so
  // that its launch (mpirun, its daemons, the transport's wire-up) falls before the baseline.
  // 0: the run's usual lead (1 s).
  int64_t launchNs = 0;
};

struct Phase {
  std::string name;
  int64_t durationNs = 0;
  SourcePos pos;
};

struct Step {
  std::string name;  // unique in its scenario; default "step<N>"
  std::string kind;
  json rawParams = json::object();  // as written (units as strings), for sweeps and reports
  json params = json::object();     // normalised by the fault kind (defaults, ns, bytes)
  Selector target;
  std::string phase;       // offsets are from this phase's start ("" = the timeline start)
  int64_t atNs = 0;        // offset from the phase start
  int64_t atMaxNs = 0;     // == atNs, or the end of a seeded random window
  int64_t forNs = 0;       // maximum lifetime: the agent reverts at the latest then
  // `capture = true`: the parser adds a step "<name>-capture" beside this one, a capture-only
  // packet rule (action none) on the same targets for the same time (docs/faults/packet.md).
  bool capture = false;
  SourcePos pos;
};

enum class Comparison { less, lessEqual, greater, greaterEqual };
const char* toString(Comparison c);

struct Expectation {
  std::string metric;
  std::string stat;  // "" = the metric in each trial; over the repeated trials of the scenario (and
                     // sweep value): "median" = their median (a trial without a value counts as
                     // failing the bound), "cv" = their coefficient of variation (%)
  std::string scope = "job";  // "job" or a node name
  Comparison op = Comparison::lessEqual;
  double bound = 0;          // in the metric's base unit: ns, bytes, bytes/s, percent, count
  std::string boundText;     // as written, for reports
  SourcePos pos;
  std::string describe() const;  // "recovery_time <= 2s (job)"
};

// One fault parameter of one step takes each value in turn: one trial (and one score) per value.
// Or, with over = "target", the step's targets take turns: one trial per target (per_trial at a
// time, in a seeded order), each scored on its own, so an acceptance run names what failed.
struct Sweep {
  std::string step;
  std::string param;         // "target" for a target sweep
  std::vector<json> values;  // as written; empty for a target sweep (known once bound)
  bool overTargets = false;
  int perTrial = 1;          // targets faulted together in one trial of a target sweep
  SourcePos pos;
};

// [[detect]]: the monitoring under test must raise an alert for a step's fault. MATCH holds
// label = value pairs the alert must carry (exact; a value may name the fault with {target},
// {step}, {kind} or {scenario}, replaced per fault); within bounds the time from the fault's
// applied instant to the alert firing, clears_within the time from its revert to the alert
// resolving. See docs/playbook-format.md and docs/scoring.md.
struct DetectExpectation {
  std::vector<std::string> steps;  // empty: every step of the scenario
  std::vector<std::pair<std::string, std::string>> match;
  int64_t withinNs = 0;
  std::optional<int64_t> clearsWithinNs;
  SourcePos pos;
  std::string describe() const;  // "RdmaLinkDown{node=\"{target}\"} within 10s, clears within 30s"
};

struct Scenario {
  std::string name;
  std::vector<Phase> phases;  // the first one is the baseline
  std::vector<Step> steps;
  std::vector<Expectation> expectations;
  // [[require]]: the condition the scenario needs (for a PFC watchdog scenario: the pause
  // spread to the senders). A trial that does not meet it is not scored: "condition not reached".
  std::vector<Expectation> requirements;
  std::optional<Sweep> sweep;
  std::vector<DetectExpectation> detections;
  SourcePos pos;
  int64_t durationNs() const;
};

struct Guardrails {
  double minBaselineBytesPerSec = 0;  // abort when the baseline is below; 0 = no floor
  bool abortOnAgentLoss = true;
  int64_t maxStallNs = 0;  // abort when the job stalls longer; 0 = no bound
};

struct ScoringSettings {
  int64_t binNs = 10'000'000;       // throughput bin width
  int64_t warmupNs = 1'000'000'000;  // start of the baseline phase left out of the baseline
  double epsilon = 0.05;            // recovered when x >= (1 - epsilon) * baseline ...
  int64_t holdNs = 1'000'000'000;   // ... for this long
  // Impact and recovery look at x averaged over this window centred on each bin (0 = the
  // raw bins): collectives move data in bursts, so single small bins are noisy.
  int64_t smoothNs = 0;
  double stallFraction = 0.1;       // stalled while x < stallFraction * baseline
};

struct CostSettings {
  int64_t gpus = 0;               // cluster size the loss is extrapolated to; 0 = no extrapolation
  double pricePerGpuHour = 0;
  std::string currency = "USD";
  double incidentsPerDay = 1;     // how often this fault is expected in production
  double days = 30;               // length of the production run extrapolated to
};

// [detection]: how the alerts of a run are judged as a whole.
struct DetectionSettings {
  // The pipeline's sampling (uncertainty of every time to detect) when `run --prometheus` does
  // not read them from the server; 0 = unknown.
  int64_t scrapeIntervalNs = 0;
  int64_t evaluationIntervalNs = 0;
  // How far the monitoring's clock may be from the controller's (both ways): widens the
  // window an alert may fire in and the uncertainty.
  int64_t clockSkewNs = 0;
  // Alerts that fire outside every fault window (applied .. reverted) widened by this margin
  // are false alarms. Unset: the largest within / clears_within of the playbook (an alert
  // explained by a fault comes no later than that).
  bool falseAlarms = true;
  std::optional<int64_t> falseAlarmMarginNs;
  // Alert names watched for false alarms; empty: every alertname a [[detect]] names.
  std::vector<std::string> watch;
  SourcePos pos;
};

// [lab]: the lab a playbook's bounds were set on. A run on a lab that differs warns before it
// starts (the scores of a lab switch depend on its rate and how many hosts share its core).
struct LabSettings {
  bool present = false;
  SourcePos pos;
  double rateBps = 0;      // 0: not stated
  int nodes = 0;           // 0: not stated
  std::string ports;       // "tap" or "veth"; empty: not stated
};

// [search]: the playbook is the space `rdmachaos search` explores (docs/search.md). Each
// parameter is a step's fault parameter or a workload key, its range in the parameter's
// normalised unit (ns, bytes, a count).
struct SearchParam {
  std::string path;   // as written: "steps.flap.down", "workload.size"
  std::string step;   // the step's name; "" for a workload key
  std::string param;  // the step's parameter or the workload key
  MetricUnit unit = MetricUnit::number;  // duration (ns), size (bytes) or number
  bool integral = true;                  // a point is rounded to a whole unit (ns, byte, count)
  search::Range range;
  // Boundary only: where to stop, a width in the unit (linear) or a ratio less one (log).
  double resolution = 0;
  SourcePos pos;
};

enum class SearchKind { boundary, worst };

struct SearchSpec {
  SearchKind kind = SearchKind::boundary;
  std::vector<SearchParam> params;  // boundary: exactly one
  // boundary: the expectation that must fail (an index into the scenario's expectations) and
  // which side fails.
  size_t expectation = 0;
  bool failsAbove = true;
  // worst: the metric maximised, on the job.
  std::string metric;
  size_t budget = 20;  // trials in all
  uint64_t seed = 1;   // the worst case's draws; default the playbook's seed
  size_t minRepeats = 1;
  size_t repeatCap = 4;  // a point's trials at most (boundary) / confirmation repeats (worst)
  double coverage = 3;
  SourcePos pos;
};

struct Playbook {
  std::string path;
  std::string text;  // the file as read, so results are self-contained
  std::string name;
  std::string description;
  uint64_t seed = 1;
  int repeat = 1;
  Workload workload;
  Guardrails guardrails;
  ScoringSettings scoring;
  CostSettings cost;
  DetectionSettings detection;
  LabSettings lab;
  std::vector<Scenario> scenarios;  // a playbook without [[scenario]] has one, named after it
  std::optional<SearchSpec> search;  // [search]: run by `rdmachaos search`, refused by `run`
  std::vector<std::string> faultKinds() const;  // distinct kinds used, in order of appearance
  bool hasDetections() const;  // any scenario has a [[detect]]
};

Result<Playbook> parsePlaybook(const std::string& text, const std::string& path);
Result<Playbook> loadPlaybook(const std::string& path);

// ---------------------------------------------------------------- a search's points

// A [search] playbook's parameters set to POINT (one value per SearchParam, in its unit, each
// rounded to its grain), as the text of a plain playbook: [search] dropped, and with
// KEEP_EXPECTATION only that one [[expect]] kept. The same text is what a search trial runs and
// what its reproducer holds, so the reproducer is the trial. HEADER (comment lines) goes first.
struct PinnedPlaybook {
  std::string text;
  Playbook playbook;  // the text parsed
};
Result<PinnedPlaybook> pinSearchPoint(const Playbook& pb, const std::vector<double>& point,
                                      std::optional<size_t> keepExpectation = std::nullopt,
                                      const std::string& header = "");
// VALUE of P rounded to its grain, and as a playbook writes it ("1400ms", "4MiB", "3").
double searchGrain(const SearchParam& p, double value);
std::string searchValueText(const SearchParam& p, double value);

// ---------------------------------------------------------------- the resolved plan

struct PlannedPhase {
  std::string name;
  int64_t startNs = 0;  // from the run start
  int64_t endNs = 0;
};

struct PlannedFault {
  std::string step;
  std::string kind;
  std::string node;
  int64_t atNs = 0;   // from the run start
  int64_t forNs = 0;  // maximum lifetime
  json params;        // normalised, sweep value applied
  std::string role;   // "" or, for kinds that involve several parties, e.g. incast: sink, sender
};

struct Trial {
  int index = 0;  // 0-based, in run order
  std::string scenario;
  int repeat = 0;  // 0-based
  std::string sweepParam;  // "" when the scenario has no sweep
  json sweepValue;         // as written
  int64_t startNs = 0;
  int64_t endNs = 0;
  int64_t baselineFromNs = 0;  // baseline phase after warm-up
  int64_t baselineToNs = 0;
  std::vector<PlannedPhase> phases;
  std::vector<PlannedFault> faults;  // in time order
  std::string label() const;  // "link-flap #2 kmin=200KiB"
};

// A run's workload lasts the whole plan and this much more (the last bins drain): an agent
// must accept that long a workload (proto::kDefaultMaxFaultLifetimeMs, checked when planning).
inline constexpr int64_t kRunWorkloadTailNs = 500'000'000;

struct Plan {
  std::string playbook;
  uint64_t seed = 0;
  std::vector<std::string> workloadNodes;
  std::vector<Trial> trials;
  int64_t durationNs = 0;
};

// Binds the playbook to an inventory. Errors (unknown node or role, a random pick larger than
// its pool, an expectation scoped to a node outside the workload) point into the playbook.
Result<Plan> resolvePlan(const Playbook& playbook, const Inventory& inventory);

// The faults one step's targets turn into. Most kinds: one per target with the same parameters.
// incast: the receiver node name becomes its data address, `senders` of the targets other than
// the receiver are picked (with BELOW, a seeded draw; without, the first ones) and the receiver
// runs the sink, so it is scheduled too. Errors name the fix.
struct BoundFault {
  std::string node;
  json params;
  std::string role;  // "" or e.g. "sink" / "sender" for incast
};
Result<std::vector<BoundFault>> bindTargets(const std::string& kind, const json& params,
                                            const std::vector<std::string>& targets, const Inventory& inv,
                                            const std::function<uint64_t(uint64_t)>& below);

// Human-readable plan for `run --dry-run`: every phase and every fault on every node.
std::string formatPlan(const Playbook& playbook, const Plan& plan);

json toJson(const Plan& plan);

// Normalised fault parameters back in the units people write ("down=2s, count=1"), using the
// kind's parameter descriptions when this build registers the kind.
std::string formatParams(const std::string& kind, const json& params);

}  // namespace rc::controller
