// Helpers shared by the result document and its renderings (report.cpp, report_text.cpp,
// report_html.cpp): number and time formatting, JSON field access, HTML escaping and the NIC
// counters a report lists. Internal to the controller's report files.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/units.hpp"
#include "controller/report/report.hpp"
#include "controller/score/score.hpp"

namespace rc::controller::report_util {

inline json optNum(const std::optional<double>& v) { return v ? json(*v) : json(); }
inline json optInt(const std::optional<int64_t>& v) { return v ? json(*v) : json(); }

// Per-second rates of COUNTER in a sampled series {t_ns: [...], COUNTER: [...]}, at each
// sample after the first (a counter that went back reads as 0).
inline std::vector<std::pair<int64_t, double>> counterRates(const json& q, const char* counter) {
  std::vector<std::pair<int64_t, double>> pts;
  const json& ts = q["t_ns"];
  const json& vs = q[counter];
  for (size_t i = 1; i < ts.size() && i < vs.size(); i++) {
    int64_t dt = ts[i].get<int64_t>() - ts[i - 1].get<int64_t>();
    double dv = vs[i].get<double>() - vs[i - 1].get<double>();
    if (dt > 0) pts.push_back({ts[i].get<int64_t>(), std::max(0.0, dv) * 1e9 / double(dt)});
  }
  return pts;
}

inline json iterJson(const std::optional<IterationStats>& s) {
  if (!s) return json();
  return {{"count", s->count}, {"p50_ns", s->p50Ns}, {"p99_ns", s->p99Ns}, {"max_ns", s->maxNs}};
}

inline json scopeJson(const ScopeScore& s) {
  json j = {{"scope", s.scope},
            {"baseline_Bps", optNum(s.baseline)},
            {"baseline_band", s.band ? json{{"floor_Bps", s.band->floor},
                                            {"hold_floor_Bps", s.band->holdFloor},
                                            {"lowest_Bps", s.band->lowest},
                                            {"lowest_at_ns", s.band->lowestAtNs},
                                            {"capped", s.band->capped},
                                            {"pooled_over_trials", s.band->pooledOver}}
                                     : json()},
            {"iterations", {{"baseline", iterJson(s.baselineIterations)},
                            {"window", iterJson(s.windowIterations)}}},
            {"counters", s.counterDeltas},
            {"fabric", s.fabric},
            {"packet", s.packet},
            {"busbw_Bps", optNum(s.busbw)},
            {"gpu_hours", optNum(s.gpuHours)},
            {"cost", optNum(s.cost)},
            {"gpu_hours_per_period", optNum(s.gpuHoursPerPeriod)},
            {"cost_per_period", optNum(s.costPerPeriod)},
            {"impact", nullptr}};
  if (s.impact) {
    const Impact& im = *s.impact;
    j["impact"] = {{"threshold_Bps", im.goodRate},
                   {"hold_threshold_Bps", im.goodHoldRate},
                   {"uncertainty_ns", im.uncertaintyNs},
                   {"time_to_impact_ns", optInt(im.timeToImpactNs)},
                   {"recovered", im.recovered},
                   {"recovery_time_ns", optInt(im.recoveryTimeNs)},
                   {"recovered_at_ns", im.recovered ? json(im.recoveredAtNs) : json()},
                   {"window_from_ns", im.windowFromNs},
                   {"window_to_ns", im.windowToNs},
                   {"loss_bytes", im.lossBytes},
                   {"loss_pct", im.lossPct},
                   {"stall_ns", im.stallNs},
                   {"longest_stall_ns", im.longestStallNs},
                   {"min_Bps", im.minRate}};
  }
  return j;
}

inline std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0; they can only come from odd input.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') out += "?";
        else out += c;
    }
  }
  return out;
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline std::string str(const json& j, const char* key, std::string def = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}

inline int64_t i64(const json& j, const char* key, int64_t def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : def;
}

inline std::optional<double> num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

inline std::string dur(int64_t ns) { return ns == 0 ? "0s" : formatDuration(Nanos(ns)); }

inline std::string rel(int64_t ns) { return fmt("%+.3fs", double(ns) / 1e9); }
inline std::string rateText(std::optional<double> Bps) {
  if (!Bps) return "–";
  if (*Bps == 0) return "0";
  if (*Bps * 8 < 1e6) return fmt("%.1fkb/s", *Bps * 8 / 1e3);  // formatBitRate stops at b/s
  return formatBitRate(*Bps * 8);
}

inline std::string utc(int64_t unixNs) {
  if (unixNs <= 0) return "unknown";
  std::time_t t = std::time_t(unixNs / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// How much a node's cumulative NIC counter (doc.nic.NODE.KEY) grew between T0 and T1: the last
// samples at or before each instant (the first sample stands in before it).
inline uint64_t nicGrowth(const json& series, const char* key, int64_t t0, int64_t t1) {
  if (!series.is_object() || !series.contains("t_ns") || !series.contains(key)) return 0;
  const json& ts = series["t_ns"];
  const json& vs = series[key];
  auto at = [&](int64_t t) -> uint64_t {
    uint64_t v = vs.empty() ? 0 : vs[0].get<uint64_t>();
    for (size_t i = 0; i < ts.size() && i < vs.size() && ts[i].get<int64_t>() <= t; i++) v = vs[i].get<uint64_t>();
    return v;
  };
  uint64_t a = at(t0), b = at(t1);
  return b > a ? b - a : 0;
}

// A counter an operator reads first in a fault window: errors, retries, sequence trouble,
// timeouts, RNR, pause, ECN, CNPs, drops, link downs; the rest are packet and byte counts.
inline bool evidenceCounter(std::string_view name) {
  if (auto slash = name.find('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  for (std::string_view w : {"err", "retry", "seq", "timeout", "rnr", "duplicate", "pause", "ecn", "cnp", "drop",
                             "discard", "downed"})
    if (name.find(w) != std::string_view::npos) return true;
  return false;
}

inline bool rdmaCounter(std::string_view name) {
  if (auto slash = name.find('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  return name.substr(0, 5) == "rdma.";
}

// One node's moved counters of a fault window (doc: trials[].nic.fault_windows[].nodes.NODE),
// evidence first, then the rest, each group by name.
inline std::vector<std::pair<std::string, uint64_t>> nicWindowItems(const json& counters) {
  std::vector<std::pair<std::string, uint64_t>> items;
  if (!counters.is_object()) return items;
  for (auto it = counters.begin(); it != counters.end(); ++it)
    if (it->is_number_unsigned() || it->is_number_integer()) items.emplace_back(it.key(), it->get<uint64_t>());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return evidenceCounter(a.first) > evidenceCounter(b.first);
  });
  return items;
}

inline std::string nicItemText(const std::pair<std::string, uint64_t>& item) {
  std::string s = item.first;
  s.append(" +").append(std::to_string(item.second));
  return s;
}


// A parameter sweep's curve (e.g. lossy-roce: goodput and iteration p99 against the drop
// probability): per trial with a sweep value, in trial order. Goodput is what the job moved
// while the fault was on (its series' bins from the fault's start to its end, bytes/s), beside
// the trial's own baseline: TCG guests drift from trial to trial, so the ratio is the curve.
// Empty without a parameter sweep (a target sweep is not one).
struct SweepPoint {
  std::string param, value;
  std::optional<double> baseline, goodput, lossPct, p50, p99, acted;
};
inline std::vector<SweepPoint> sweepCurve(const json& doc) {
  std::vector<SweepPoint> out;
  for (const auto& t : doc.value("trials", json::array())) {
    if (!t.contains("sweep") || !t["sweep"].is_object()) continue;
    SweepPoint p;
    p.param = t["sweep"].value("param", "");
    if (p.param == "target") continue;  // a target sweep has its own table (report_targets)
    const json& v = t["sweep"]["value"];
    p.value = v.is_string() ? v.get<std::string>() : v.dump();
    const json& job = t.value("job", json::object());
    if (job.contains("baseline_Bps") && job["baseline_Bps"].is_number()) p.baseline = job["baseline_Bps"].get<double>();
    if (job.contains("impact") && job["impact"].is_object()) p.lossPct = job["impact"].value("loss_pct", 0.0);
    // Goodput: what the job moved while the fault was on (the series' bins in that span).
    const json& series = doc.value("series", json::object());
    const int64_t from = t.value("fault_start_ns", json()).is_number() ? t["fault_start_ns"].get<int64_t>() : -1;
    const int64_t to = t.value("fault_end_ns", json()).is_number() ? t["fault_end_ns"].get<int64_t>() : -1;
    const int64_t bin = series.value("bin_ns", int64_t(0));
    if (from >= 0 && to > from && bin > 0 && series.contains("job") && series["job"].is_array()) {
      const json& bins = series["job"];
      double bytes = 0;
      int64_t n = 0;
      for (int64_t k = from / bin; k < to / bin && k < int64_t(bins.size()); k++, n++) bytes += bins[size_t(k)].get<double>();
      if (n > 0) p.goodput = bytes / (double(n) * double(bin) / 1e9);
    }
    const json& w = job.value("iterations", json::object()).value("window", json());
    if (w.is_object()) {
      p.p50 = w.value("p50_ns", 0.0);
      p.p99 = w.value("p99_ns", 0.0);
    }
    const json& pk = job.value("packet", json::object());
    if (pk.contains("packets_acted")) p.acted = pk["packets_acted"].get<double>();
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace rc::controller
