// Comparing runs: a result (or a golden baseline merged from several runs) against another,
// metric by metric, trial by trial, scope by scope, beyond the noise of either; rules in TOML
// decide pass or fail (docs/acceptance.md).
#pragma once

#include <compare>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::controller {

using json = nlohmann::json;

inline constexpr const char* kGoldenSchema = "rdmachaos-golden/1";
inline constexpr const char* kCompareSchema = "rdmachaos-compare/1";

// Where a value is: the trial's label, the scope (job or a node) and the metric's name.
struct MetricKey {
  std::string trial, scope, metric;
  auto operator<=>(const MetricKey&) const = default;
};

// A scored value and its noise (+-, in the metric's units). A golden baseline's value is the
// median of its runs, lo..hi their range. Absent value: not measured, or "not recovered"
// (notRecovered: a recovery that never came, worse than any time).
struct MetricValue {
  std::optional<double> value;
  bool notRecovered = false;
  double noise = 0;
  int runs = 1;
  double lo = 0, hi = 0;
  std::vector<double> samples;  // every run's value (one for a result; a golden's "values")
  // In a target sweep the targets are peers: the range of this metric over every target's
  // trial, in the same role (the job, the target node, a bystander node), outliers beyond
  // Tukey's fences left out; peerSamples 0 when there is no such pool (docs/acceptance.md).
  int peerSamples = 0;
  double peerLo = 0, peerHi = 0;
  // TCP's retransmission timer (compare.cpp, retryNoiseNs): the trial's term, which names its
  // outage, and the part of `noise` it makes. Noise only between runs of the same outage: two
  // runs of different outages are different faults, and their difference is not excused by it.
  double retryNs = 0, retryPart = 0;
};
using MetricTable = std::map<MetricKey, MetricValue>;

// The compared metrics, in report order: a duration, percent or rate, and which way is worse.
struct CompareMetric {
  const char* name;
  int worse;  // +1: higher is worse; -1: lower is worse
};
const std::vector<CompareMetric>& compareMetrics();

// A run's table from its result document, or a golden baseline's from its own document.
Result<MetricTable> metricTableOf(const json& doc);
// What a document is, for the header: "result of 'PLAYBOOK'" or "golden baseline of N runs".
std::string describeDocument(const json& doc);

// `rdmachaos baseline merge`: a golden baseline of several results of one playbook (per value
// the median, the range, and a noise that is the larger of the runs' own median noise and half
// the range). NAMES are the documents' paths, for the record.
Result<json> mergeGolden(const std::vector<json>& docs, const std::vector<std::string>& names);

// A rule of a rules file. variancePct: the change allowed, signed in the direction it is
// allowed ("+20%": at most 20 % above the baseline; "-5%": at most 5 % below); op/bound: the
// result's value against a fixed bound; exempt: scopes the rule skips.
struct CompareRule {
  std::string metric;
  std::string scope = "*";  // "*", "job", "nodes" (every node), or a node name
  std::string trial;        // "" = every trial
  std::optional<double> variancePct;
  std::string op;  // "", "<", "<=", ">", ">="
  double bound = 0;
  std::string text;  // as written, for reports
  std::vector<std::string> exempt;
  std::string where;  // "rules.toml:3:1"
};
// Errors as file:line:col, every one of the file.
Result<std::vector<CompareRule>> parseCompareRules(const std::string& text, const std::string& path);

struct RuleCheck {
  std::string rule, where;
  bool passed = false;
  std::string why;
};

struct CompareRow {
  MetricKey key;
  MetricValue base, result;
  std::optional<double> diff;  // result - baseline
  std::string verdict;         // "worse", "better", "same within noise", "missing in result", ...
  std::vector<RuleCheck> checks;
};

struct CompareOutcome {
  std::string baseline, result;  // what each document is
  std::vector<CompareRow> rows;
  bool rulesGiven = false;
  int worse = 0, better = 0, same = 0, missing = 0, rulesFailed = 0, rulesPassed = 0;
  int exitCode() const;  // 1: a rule failed (without rules: a value worse beyond noise, or missing)
};

CompareOutcome compareTables(const MetricTable& base, const MetricTable& result, const std::vector<CompareRule>& rules,
                             std::string baselineName, std::string resultName);

std::string renderCompareText(const CompareOutcome& c);
json compareDocument(const CompareOutcome& c);
std::string renderCompareJunit(const CompareOutcome& c);

}  // namespace rc::controller
