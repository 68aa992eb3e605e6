// The metric table (see metrics_table.hpp): one row per metric, owned by scoring.
#include "controller/measure/metrics_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/units.hpp"
#include "controller/measure/measurements.hpp"

namespace rc::controller {
namespace {

using Value = std::optional<double>;

template <typename T>
Value opt(const std::optional<T>& o) {
  if (o) return double(*o);
  return std::nullopt;
}

// Impact metrics exist once a fault was applied in the trial.
template <typename F>
Value impact(const ScopeScore& s, F f) {
  if (!s.impact) return std::nullopt;
  return f(*s.impact);
}
template <typename F>
Value window(const ScopeScore& s, F f) {
  if (!s.windowIterations) return std::nullopt;
  return f(*s.windowIterations);
}
Value fabric(const ScopeScore& s, std::string_view name) {
  auto f = s.fabric.find(std::string(name));
  if (f == s.fabric.end()) return std::nullopt;
  return f->second;
}

Value packet(const ScopeScore& s, std::string_view name) {
  auto f = s.packet.find(std::string(name));
  if (f == s.packet.end()) return std::nullopt;
  return f->second;
}
std::string noPacket(const ScopeScore& s) { return s.scope == "job" ? "no packet fault in the trial" : "job only"; }
std::string noOracle(const ScopeScore& s) {
  if (s.scope != "job") return "job only";
  return s.packet.empty() ? "no packet fault in the trial" : "no RoCE capture to judge (protocol roce, capture = true)";
}

// The reasons, from the most particular to the general.
std::string noBaselineOr(const ScopeScore& s, const char* reason) { return s.baseline ? reason : "no baseline"; }
std::string noFault(const ScopeScore& s) { return noBaselineOr(s, "no fault applied"); }
std::string noIterations(const ScopeScore& s) { return noBaselineOr(s, "no iterations"); }
std::string noFabric(const ScopeScore&) {
  return "no fabric evidence (the inventory names no lab switch: [lab] switch_control)";
}

const std::vector<MetricRow>& rows() {
  using U = MetricUnit;
  static const std::vector<MetricRow> t = {
      {"baseline", U::rate, "median throughput of the baseline phase after warm-up",
       [](const ScopeScore& s, std::string_view) { return s.baseline; },
       [](const ScopeScore&) { return std::string("no baseline"); }, 1, "throughput"},
      {"time_to_impact", U::duration, "fault start until throughput first drops below (1-e)B",
       [](const ScopeScore& s, std::string_view) {
         return impact(s, [](const Impact& i) { return opt(i.timeToImpactNs); });
       },
       [](const ScopeScore& s) { return s.impact ? std::string("no impact") : noFault(s); }, 3, ""},
      {"recovery_time", U::duration, "fault end until throughput holds >= (1-e)B; fails if never",
       [](const ScopeScore& s, std::string_view) {
         return impact(s, [](const Impact& i) { return opt(i.recoveryTimeNs); });
       },
       [](const ScopeScore& s) { return s.impact ? std::string("not recovered") : noFault(s); }, 4,
       "link failure recovery time"},
      {"throughput_loss_bytes", U::size, "integral of (B - x)+ over the impact window",
       [](const ScopeScore& s, std::string_view) { return impact(s, [](const Impact& i) { return Value(i.lossBytes); }); },
       noFault},
      {"throughput_loss_pct", U::percent, "loss as a percentage of B x window",
       [](const ScopeScore& s, std::string_view) { return impact(s, [](const Impact& i) { return Value(i.lossPct); }); },
       noFault, 5, ""},
      {"stall_time", U::duration, "time with x < stall_fraction x B after the fault start",
       [](const ScopeScore& s, std::string_view) {
         return impact(s, [](const Impact& i) { return Value(double(i.stallNs)); });
       },
       noFault, 11, ""},
      {"longest_stall", U::duration, "longest contiguous stall",
       [](const ScopeScore& s, std::string_view) {
         return impact(s, [](const Impact& i) { return Value(double(i.longestStallNs)); });
       },
       noFault, 6, ""},
      {"min_throughput", U::rate, "lowest bin after the fault start",
       [](const ScopeScore& s, std::string_view) { return impact(s, [](const Impact& i) { return Value(i.minRate); }); },
       noFault},
      {"iteration_p50", U::duration, "median iteration time in the impact window",
       [](const ScopeScore& s, std::string_view) {
         return window(s, [](const IterationStats& w) { return Value(w.p50Ns); });
       },
       noIterations},
      {"iteration_p99", U::duration, "99th percentile iteration time in the impact window",
       [](const ScopeScore& s, std::string_view) {
         return window(s, [](const IterationStats& w) { return Value(w.p99Ns); });
       },
       noIterations},
      {"iteration_max", U::duration, "slowest iteration in the impact window",
       [](const ScopeScore& s, std::string_view) {
         return window(s, [](const IterationStats& w) { return Value(w.maxNs); });
       },
       noIterations},
      {"iteration_p99_ratio", U::number, "iteration p99 in the window / baseline p50",
       [](const ScopeScore& s, std::string_view) -> Value {
         if (!s.windowIterations || !s.baselineIterations || s.baselineIterations->p50Ns <= 0) return std::nullopt;
         return s.windowIterations->p99Ns / s.baselineIterations->p50Ns;
       },
       noIterations, 7, "job completion time inflation (p99 iteration / baseline p50)"},
      {"busbw", U::rate, "bus bandwidth of the baseline (nccl-tests definition), job only",
       [](const ScopeScore& s, std::string_view) { return s.busbw; }, noIterations, 2, "bus bandwidth"},
      {"gpu_hours", U::number, "GPU-hours lost per incident at [cost] gpus, job only",
       [](const ScopeScore& s, std::string_view) { return s.gpuHours; },
       [](const ScopeScore& s) { return noBaselineOr(s, "no [cost] gpus"); }, 12, ""},
      {"cost", U::number, "money lost per incident at [cost] price, job only",
       [](const ScopeScore& s, std::string_view) { return s.cost; },
       [](const ScopeScore& s) { return noBaselineOr(s, "no [cost] gpus"); }},
      {"pause_frames", U::number, "PFC frames the fabric received in the trial (the lab switch; a node: its port)",
       fabric, noFabric, 8, "PFC pause frames"},
      {"paused_time", U::duration, "time the fabric's egress queues were paused by PFC, summed over queues", fabric,
       noFabric},
      {"pause_spread_time", U::duration,
       "time the fabric held senders in XOFF (the pause spreading upstream), summed over ports", fabric, noFabric},
      {"ecn_marks", U::number, "packets the fabric ECN-marked in the trial", fabric, noFabric, 9, "ECN marked packets"},
      {"drops", U::number, "packets the fabric dropped in the trial (tail drops and watchdog drops)", fabric,
       noFabric},
      {"watchdog_detect_time", U::duration,
       "PFC storm start (first frame on the wire) until the switch's watchdog detected it, job only", fabric,
       [](const ScopeScore& s) { return s.fabric.empty() ? noFabric(s) : "the watchdog never fired"; }, 10, ""},
      {"watchdog_restore_time", U::duration,
       "PFC storm end (last frame on the wire) until the switch's watchdog restored the queue, job only", fabric,
       [](const ScopeScore& s) {
         return s.fabric.empty() ? noFabric(s) : "no watchdog restoration after a storm's end";
       }},
      {"packets_acted", U::number, "frames the trial's packet faults acted on (the lab switch), job only", packet,
       noPacket},
      {"gbn_violations", U::number,
       "the go-back-N oracle's findings over the trial's RoCE packet faults (docs/faults/packet.md), job only",
       packet, noOracle},
      {"nak_generation_time", U::duration, "acted-on frame to the responder's NAK, largest over the trial's losses",
       packet, [](const ScopeScore& s) { return s.packet.count("gbn_violations") ? "no NAK" : noOracle(s); }},
      {"nak_reaction_time", U::duration, "NAK to the requester's retransmission, largest over the trial's losses",
       packet, [](const ScopeScore& s) { return s.packet.count("gbn_violations") ? "no NAK answered" : noOracle(s); }},
      {"timeout_wait", U::duration, "acted-on frame to a retransmission without NAK (the QP's timeout), largest",
       packet, [](const ScopeScore& s) { return s.packet.count("gbn_violations") ? "no timeout retransmission" : noOracle(s); }},
      {"counter.", U::number, "counter delta over the trial",
       [](const ScopeScore& s, std::string_view name) -> Value {
         auto it = s.counterDeltas.find(std::string(name.substr(8)));
         if (it == s.counterDeltas.end()) return std::nullopt;
         return double(it->second);
       },
       [](const ScopeScore& s) { return noBaselineOr(s, "counter not reported"); }},
  };
  return t;
}

bool isFamily(const MetricRow& r) { return !r.name.empty() && r.name.back() == '.'; }

bool validMember(std::string_view m) {
  return !m.empty() && m.size() <= 64 && std::all_of(m.begin(), m.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-';
  });
}

const char* unitName(MetricUnit u) {
  switch (u) {
    case MetricUnit::duration: return "duration";
    case MetricUnit::size: return "size";
    case MetricUnit::rate: return "rate";
    case MetricUnit::percent: return "percent";
    case MetricUnit::number: return "number";
  }
  return "?";
}

}  // namespace

const std::vector<MetricRow>& metricTable() { return rows(); }

const MetricRow* findMetric(std::string_view name) {
  for (const auto& r : rows()) {
    if (!isFamily(r) && r.name == name) return &r;
    if (isFamily(r) && name.rfind(r.name, 0) == 0 && validMember(name.substr(r.name.size()))) return &r;
  }
  return nullptr;
}

std::vector<std::string> metricNames() {
  std::vector<std::string> out;
  for (const auto& r : rows()) out.push_back(isFamily(r) ? r.name + "<name>" : r.name);
  return out;
}

std::optional<double> metricValue(const ScopeScore& s, std::string_view name) {
  const MetricRow* r = findMetric(name);
  if (!r) return std::nullopt;
  return r->value(s, name);
}

std::string whyMissing(std::string_view name, const ScopeScore& s) {
  const MetricRow* r = findMetric(name);
  return r ? r->whyMissing(s) : "unknown metric";
}

double metricUncertainty(const ScopeScore& s, std::string_view name) {
  if (!s.impact) return 0;
  const Impact& im = *s.impact;
  if (name == "time_to_impact" || name == "recovery_time" || name == "stall_time" || name == "longest_stall")
    return double(im.uncertaintyNs);
  // A loss is read against the baseline: the job's own band below it is as much noise.
  const double depth = s.baseline && s.band ? std::max(0.0, *s.baseline - s.band->floor) : 0;
  if (name == "throughput_loss_pct") return s.baseline && *s.baseline > 0 ? depth / *s.baseline * 100 : 0;
  if (name == "throughput_loss_bytes") return depth * double(im.windowToNs - im.windowFromNs) / 1e9;
  return 0;
}

std::string formatMetric(MetricUnit unit, double v) {
  char buf[64];
  switch (unit) {
    case MetricUnit::duration: return formatDuration(Nanos(int64_t(std::llround(v))));
    case MetricUnit::size: return formatSize(uint64_t(std::max(0.0, std::round(v))));
    case MetricUnit::rate: return formatBitRate(v * 8);
    case MetricUnit::percent: std::snprintf(buf, sizeof buf, "%.2f%%", v); return buf;
    case MetricUnit::number: std::snprintf(buf, sizeof buf, "%.4g", v); return buf;
  }
  return "?";
}

const std::vector<RepeatableMetric>& repeatableMetrics() {
  static const std::vector<RepeatableMetric> m = [] {
    std::vector<const MetricRow*> shown;
    for (const auto& r : rows())
      if (r.repeatOrder > 0) shown.push_back(&r);
    std::sort(shown.begin(), shown.end(), [](auto* a, auto* b) { return a->repeatOrder < b->repeatOrder; });
    std::vector<RepeatableMetric> out;
    for (const auto* r : shown) out.push_back({r->name, r->bmwg});
    return out;
  }();
  return m;
}

std::string metricsHelp() {
  std::string out = "\nMetrics an [[expect]] may name (metric = \"...\"; bounds in the metric's unit):\n";
  for (const auto& r : rows()) {
    char line[512];
    std::string name = isFamily(r) ? r.name + "<name>" : r.name;
    std::snprintf(line, sizeof line, "  %-22s %-8s %s\n", name.c_str(), unitName(r.unit), r.help.c_str());
    out += line;
  }
  return out;
}

}  // namespace rc::controller
