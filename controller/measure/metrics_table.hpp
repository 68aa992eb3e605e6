// The metrics an expectation may name, one row each: name, unit, help, how scoring reads its
// value and why a value can be missing. The playbook parser (names, units), the scorer
// (values, reasons), the reports (units, spread over repeats) and `--help` all read this table;
// a new metric is a new row in metrics_table.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rc::controller {

struct ScopeScore;  // score.hpp: what scoring measured for the job or one node in one trial

// Units of a metric, which decide how its bound is written and printed.
enum class MetricUnit { duration, size, rate, percent, number };

struct MetricRow {
  std::string name;  // a row whose name ends in '.' is a family: "counter." matches "counter.<name>"
  MetricUnit unit;
  std::string help;
  // The value scoring measured (NAME is the metric as written: a family row reads its member).
  std::optional<double> (*value)(const ScopeScore& s, std::string_view name);
  // Why value() has none, for the verdict ("no baseline", "not recovered", ...).
  std::string (*whyMissing)(const ScopeScore& s);
  // > 0: a job metric whose spread over repeated trials the report shows (mean, sd, CV), in
  // this order, with the IETF BMWG AI-fabric draft's name where it has one (bmwg).
  int repeatOrder = 0;
  std::string bmwg;
};

// Every row, in the order `--help` and "known: ..." list them (families last).
const std::vector<MetricRow>& metricTable();
// The row NAME is, or belongs to (counter.<name>: 1-64 of A-Z a-z 0-9 _ . -); null if none.
const MetricRow* findMetric(std::string_view name);
// The names an expectation may use, families written as "counter.<name>".
std::vector<std::string> metricNames();

// A metric's value in S, or nullopt (then whyMissing(NAME, S) says why). Unknown names: nullopt.
std::optional<double> metricValue(const ScopeScore& s, std::string_view name);
std::string whyMissing(std::string_view name, const ScopeScore& s);
// The uncertainty (+/-) scoring states for a metric's value in S: the timing uncertainty of the
// impact's times, the baseline band's depth for a loss; 0 where it states none (docs/search.md).
double metricUncertainty(const ScopeScore& s, std::string_view name);
std::string formatMetric(MetricUnit unit, double value);

// Job metrics shown over repeats, in report order (the rows with repeatOrder > 0).
struct RepeatableMetric {
  std::string metric;
  std::string bmwg;
};
const std::vector<RepeatableMetric>& repeatableMetrics();

// `rdmachaos validate/run --help`: every metric with its unit and help.
std::string metricsHelp();

}  // namespace rc::controller
