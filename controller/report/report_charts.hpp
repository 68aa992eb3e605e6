// The report's SVG charts: a trial's throughput (with its baseline, threshold, fault windows,
// phases, recovery and alerts, and optionally another run's series under it), and counter
// rates (PFC, ECN, drops, CNPs) as steps. Internal to the controller's report files.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/report/report_detection.hpp"

namespace rc::controller::report_charts {
using json = nlohmann::json;

struct Shade {
  int64_t fromNs, toNs;
  std::string title;
  bool strong;
};

struct ChartInput {
  std::string id;
  std::string title;
  std::vector<double> bytes;  // the trial's bins
  int64_t binNs = 1;
  int64_t t0 = 0, t1 = 1;     // trial span (run timeline)
  std::optional<double> baseline;  // bytes/s
  std::optional<double> threshold;  // bytes/s: the judgement's (band-calibrated) threshold
  double epsilon = 0.05;
  std::vector<std::pair<std::string, int64_t>> phases;  // name, start
  std::vector<Shade> shades;
  std::optional<int64_t> faultEnd;
  std::optional<int64_t> recoveredAt;
  bool notRecovered = false;
  int height = 260;
  // Another run's bins over the same time from its trial's start (compare's page): drawn as a
  // dashed line under the series, with the two names in a legend.
  std::vector<double> overlay;
  std::string seriesName, overlayName;
  std::vector<AlertMarker> alerts;  // the monitoring's alerts, from t0
};

// A counter series of the fabric: per-second rates between consecutive samples of a cumulative
// counter, drawn as steps.
struct CounterLine {
  std::string cls;    // pfc, ecn, drops
  std::string label;  // "n2/q3 PFC frames received"
  std::vector<std::pair<int64_t, double>> points;  // (t, per second) on the run timeline
};

// A trial's throughput chart.
std::string chart(const ChartInput& c);
// Counter rates by line, with the faults as shades.
std::string counterChart(const std::string& id, const std::string& title, int64_t t0, int64_t t1,
                         const std::vector<Shade>& shades, const std::vector<CounterLine>& lines);
// The bins of ARR (bytes per bin from t = 0) from FROM to TO.
std::vector<double> slice(const json& arr, int64_t binNs, int64_t from, int64_t to);

}  // namespace rc::controller::report_charts
