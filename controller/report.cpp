// The result document and its renderings: JUnit XML, a self-contained HTML page, text.
#include "controller/report.hpp"
#include "controller/report_detection.hpp"
#include "controller/report_targets.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/units.hpp"
#include "rdmachaos_config.h"

namespace rc::controller {
namespace {

json optNum(const std::optional<double>& v) { return v ? json(*v) : json(); }
json optInt(const std::optional<int64_t>& v) { return v ? json(*v) : json(); }

// Per-second rates of COUNTER in a sampled series {t_ns: [...], COUNTER: [...]}, at each
// sample after the first (a counter that went back reads as 0).
std::vector<std::pair<int64_t, double>> counterRates(const json& q, const char* counter) {
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

json iterJson(const std::optional<IterationStats>& s) {
  if (!s) return json();
  return {{"count", s->count}, {"p50_ns", s->p50Ns}, {"p99_ns", s->p99Ns}, {"max_ns", s->maxNs}};
}

json scopeJson(const ScopeScore& s) {
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

std::string esc(std::string_view s) {
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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string str(const json& j, const char* key, std::string def = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}

int64_t i64(const json& j, const char* key, int64_t def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : def;
}

std::optional<double> num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string dur(int64_t ns) { return ns == 0 ? "0s" : formatDuration(Nanos(ns)); }

std::string rel(int64_t ns) { return fmt("%+.3fs", double(ns) / 1e9); }
std::string rateText(std::optional<double> Bps) {
  if (!Bps) return "–";
  if (*Bps == 0) return "0";
  if (*Bps * 8 < 1e6) return fmt("%.1fkb/s", *Bps * 8 / 1e3);  // formatBitRate stops at b/s
  return formatBitRate(*Bps * 8);
}

std::string utc(int64_t unixNs) {
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
uint64_t nicGrowth(const json& series, const char* key, int64_t t0, int64_t t1) {
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
bool evidenceCounter(std::string_view name) {
  if (auto slash = name.find('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  for (std::string_view w : {"err", "retry", "seq", "timeout", "rnr", "duplicate", "pause", "ecn", "cnp", "drop",
                             "discard", "downed"})
    if (name.find(w) != std::string_view::npos) return true;
  return false;
}

bool rdmaCounter(std::string_view name) {
  if (auto slash = name.find('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  return name.substr(0, 5) == "rdma.";
}

// One node's moved counters of a fault window (doc: trials[].nic.fault_windows[].nodes.NODE),
// evidence first, then the rest, each group by name.
std::vector<std::pair<std::string, uint64_t>> nicWindowItems(const json& counters) {
  std::vector<std::pair<std::string, uint64_t>> items;
  if (!counters.is_object()) return items;
  for (auto it = counters.begin(); it != counters.end(); ++it)
    if (it->is_number_unsigned() || it->is_number_integer()) items.emplace_back(it.key(), it->get<uint64_t>());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return evidenceCounter(a.first) > evidenceCounter(b.first);
  });
  return items;
}

std::string nicItemText(const std::pair<std::string, uint64_t>& item) {
  std::string s = item.first;
  s.append(" +").append(std::to_string(item.second));
  return s;
}

}  // namespace

std::string xmlEscape(std::string_view s) { return esc(s); }

json makeResultDocument(const RunResult& run, const Playbook& pb, const Scores& scores) {
  json doc;
  doc["schema"] = kResultSchema;
  doc["generator"] = {{"tool", "rdmachaos"}, {"version", RDMACHAOS_VERSION}};
  json scens = json::array();
  for (const auto& sc : pb.scenarios) {
    auto list = [](const std::vector<Expectation>& es) {
      json ex = json::array();
      for (const auto& e : es)
        ex.push_back({{"metric", e.metric}, {"scope", e.scope}, {"op", toString(e.op)},
                      {"bound", e.bound}, {"bound_text", e.boundText}});
      return ex;
    };
    scens.push_back({{"name", sc.name}, {"duration_ns", sc.durationNs()}, {"expectations", list(sc.expectations)},
                     {"requirements", list(sc.requirements)}});
  }
  doc["playbook"] = {
      {"name", pb.name},
      {"description", pb.description},
      {"path", pb.path},
      {"seed", pb.seed},
      {"repeat", pb.repeat},
      {"text", pb.text},
      {"workload", {{"kind", toString(pb.workload.kind)}, {"size_bytes", pb.workload.sizeBytes},
                    {"streams", pb.workload.streams}, {"nodes", pb.workload.nodes.describe()}}},
      {"scoring", {{"bin_ns", pb.scoring.binNs}, {"warmup_ns", pb.scoring.warmupNs},
                   {"epsilon", pb.scoring.epsilon}, {"hold_ns", pb.scoring.holdNs},
                   {"smooth_ns", pb.scoring.smoothNs},
                   {"stall_fraction", pb.scoring.stallFraction}}},
      {"guardrails", {{"min_baseline_Bps", pb.guardrails.minBaselineBytesPerSec},
                      {"abort_on_agent_loss", pb.guardrails.abortOnAgentLoss},
                      {"max_stall_ns", pb.guardrails.maxStallNs}}},
      {"cost", {{"gpus", pb.cost.gpus}, {"price_per_gpu_hour", pb.cost.pricePerGpuHour},
                {"currency", pb.cost.currency}, {"incidents_per_day", pb.cost.incidentsPerDay},
                {"days", pb.cost.days}}},
      {"scenarios", scens}};
  json nodes = json::array();
  for (const auto& n : run.inventoryNodes)
    nodes.push_back({{"name", n.name}, {"address", n.address}, {"port", n.port},
                     {"roles", n.roles}, {"data_interfaces", n.dataInterfaces}});
  doc["inventory"] = {{"path", run.inventoryPath}, {"nodes", nodes}};
  doc["run"] = {{"started_unix_ns", run.startedUnixNs},
                {"ended_ns", run.endedNs},
                {"planned_ns", run.plan.durationNs},
                {"abort_reason", run.abortReason}};
  json clocks = json::array();
  for (const auto& c : run.clocks)
    clocks.push_back({{"node", c.node}, {"offset_ns", c.offsetNs},
                      {"uncertainty_ns", c.uncertaintyNs}, {"rtt_ns", c.rttNs}});
  doc["clocks"] = clocks;
  doc["plan"] = toJson(run.plan);

  // Dense series from t = 0 over what was run: easy to plot and to re-score elsewhere.
  const int64_t w = run.binNs > 0 ? run.binNs : pb.scoring.binNs;
  const int64_t end = std::max<int64_t>(0, run.endedNs / w * w);
  json series = {{"bin_ns", w}, {"start_ns", 0}, {"unit", "bytes per bin"}};
  std::vector<Grid> grids;
  json perNode = json::object();
  for (const auto& name : run.plan.workloadNodes) {
    auto it = run.series.find(name);
    Grid g = toGrid(it == run.series.end() ? std::vector<Bin>{} : it->second, w, 0, end);
    perNode[name] = g.bytes;
    grids.push_back(std::move(g));
  }
  series["nodes"] = perNode;
  series["job"] = sumGrids(grids).bytes;
  doc["series"] = series;

  json iters = json::array();
  for (const auto& r : run.iterations)
    iters.push_back({{"node", r.node}, {"iteration", r.iteration}, {"start_ns", r.startNs}, {"end_ns", r.endNs}});
  doc["iterations"] = iters;
  json faults = json::array();
  for (const auto& f : run.faults) {
    json events = json::array();
    for (const auto& e : f.events) events.push_back({{"t_ns", e.tNs}, {"what", e.what}, {"detail", e.detail}});
    faults.push_back({{"trial", f.trial}, {"step", f.step}, {"node", f.node}, {"kind", f.kind}, {"role", f.role},
                      {"params", f.params}, {"scheduled_ns", f.scheduledNs},
                      {"applied_ns", optInt(f.appliedNs)}, {"reverted_ns", optInt(f.revertedNs)},
                      {"error", f.error}, {"events", events}});
  }
  doc["faults"] = faults;
  json counters = json::array();
  for (const auto& c : run.counters) {
    json delta = json::object();
    for (const auto& [k, a] : c.after)
      if (auto b = c.before.find(k); b != c.before.end()) delta[k] = int64_t(a) - int64_t(b->second);
    counters.push_back({{"trial", c.trial}, {"node", c.node}, {"before", c.before}, {"after", c.after},
                        {"delta", delta}});
  }
  doc["counters"] = counters;

  // Fabric evidence: events, and per (port, queue) series of the cumulative counters.
  json fabric = {{"source", run.fabric.source}, {"error", run.fabric.error}};
  json fevents = json::array();
  for (const auto& e : run.fabric.events) {
    fevents.push_back({{"t_ns", e.tNs}, {"what", e.what}, {"port", e.port}, {"priority", e.priority}});
    if (e.l4Dst >= 0) fevents.back()["l4_dst"] = e.l4Dst;
  }
  fabric["events"] = fevents;
  json fseries = json::object();
  for (const auto& x : run.fabric.samples) {
    json& q = fseries[x.port + "/" + std::to_string(x.queue)];
    if (q.is_null()) q = {{"port", x.port}, {"queue", x.queue}, {"t_ns", json::array()}, {"pfc_rx", json::array()},
                          {"pfc_tx", json::array()}, {"ecn_marked", json::array()}, {"drops", json::array()},
                          {"paused_ns", json::array()}, {"xoff_ns", json::array()}, {"depth_bytes", json::array()}};
    q["t_ns"].push_back(x.tNs);
    q["pfc_rx"].push_back(x.pfcRx);
    q["pfc_tx"].push_back(x.pfcTx);
    q["ecn_marked"].push_back(x.ecnMarked);
    q["drops"].push_back(x.drops + x.wdDrops);
    q["paused_ns"].push_back(x.pausedNs);
    q["xoff_ns"].push_back(x.xoffNs);
    q["depth_bytes"].push_back(x.depthBytes);
  }
  fabric["series"] = fseries;
  doc["fabric"] = fabric;

  // The nodes' own NIC and RDMA counters (sampled by the agents), cumulative, per node.
  json nic = json::object();
  for (const auto& [node, points] : run.nic) {
    json n = {{"t_ns", json::array()}, {"pause_frames", json::array()}, {"ecn_marked", json::array()},
              {"cnp_sent", json::array()}, {"cnp_handled", json::array()}};
    for (const auto& p : points) {
      n["t_ns"].push_back(p.tNs);
      n["pause_frames"].push_back(p.pauseFrames);
      n["ecn_marked"].push_back(p.ecnMarked);
      n["cnp_sent"].push_back(p.cnpSent);
      n["cnp_handled"].push_back(p.cnpHandled);
    }
    nic[node] = n;
  }
  doc["nic"] = nic;

  json trials = json::array();
  for (const auto& ts : scores.trials) {
    const Trial& t = run.plan.trials.at(size_t(ts.trial));
    json jt = toJson(run.plan)["trials"][size_t(ts.trial)];
    jt.erase("faults");  // the planned faults are in plan; the real ones in faults
    jt["completed"] = ts.completed;
    jt["fault_start_ns"] = optInt(ts.faultStartNs);
    jt["fault_end_ns"] = optInt(ts.faultEndNs);
    jt["problems"] = ts.problems;
    jt["job"] = scopeJson(ts.job);
    json ns = json::array();
    for (const auto& n : ts.nodes) ns.push_back(scopeJson(n));
    jt["nodes"] = ns;
    json vs = json::array();
    for (const auto& v : ts.verdicts)
      vs.push_back({{"metric", v.metric}, {"scope", v.scope}, {"op", v.op}, {"bound", v.bound},
                    {"bound_text", v.boundText}, {"measured", optNum(v.measured)},
                    {"measured_text", v.measuredText}, {"passed", v.passed},
                    {"line", v.pos.line}, {"column", v.pos.column}});
    jt["verdicts"] = vs;
    json cs = json::array();
    for (const auto& v : ts.conditions)
      cs.push_back({{"metric", v.metric}, {"scope", v.scope}, {"op", v.op}, {"bound", v.bound},
                    {"bound_text", v.boundText}, {"measured", optNum(v.measured)},
                    {"measured_text", v.measuredText}, {"passed", v.passed},
                    {"line", v.pos.line}, {"column", v.pos.column}});
    jt["condition"] = {{"reached", ts.conditionReached}, {"checks", cs}};
    json fd = json::array();
    for (const auto& d : ts.fabric.trial)
      fd.push_back({{"port", d.port}, {"queue", d.queue}, {"pfc_rx", d.pfcRx}, {"pfc_tx", d.pfcTx},
                    {"ecn_marked", d.ecnMarked}, {"drops", d.drops}, {"paused_ns", d.pausedNs},
                    {"xoff_ns", d.xoffNs}, {"max_depth_bytes", d.maxDepthBytes}, {"storm_gaps", d.stormGaps}});
    // Per fault window (applied to reverted), what the fabric saw while each fault was on.
    json fw = json::array();
    if (!ts.fabric.source.empty())
      for (const auto& f : run.faults) {
        if (f.trial != ts.trial || !f.appliedNs) continue;
        json ds = json::array();
        for (const auto& d : fabricDeltas(run.fabric, *f.appliedNs, f.revertedNs.value_or(t.endNs)))
          ds.push_back({{"port", d.port}, {"queue", d.queue}, {"pfc_rx", d.pfcRx}, {"pfc_tx", d.pfcTx},
                        {"ecn_marked", d.ecnMarked}, {"drops", d.drops}, {"paused_ns", d.pausedNs},
                        {"xoff_ns", d.xoffNs}, {"max_depth_bytes", d.maxDepthBytes}, {"storm_gaps", d.stormGaps}});
        fw.push_back({{"step", f.step}, {"node", f.node}, {"kind", f.kind}, {"from_ns", *f.appliedNs},
                      {"to_ns", f.revertedNs.value_or(t.endNs)}, {"deltas", ds}});
        // Ground truth for traffic a fault puts on the wire (an incast into its receiver).
        if (auto span = faultWire(run, f, t.endNs))
          fw.back()["wire"] = {{"port", f.node}, {"l4_dst", f.params.value("port", 0)}, {"first_ns", span->firstNs},
                               {"last_ns", optInt(span->lastNs)}, {"episodes", span->episodes}};
      }
    json wd = json::array();
    for (const auto& ep : ts.fabric.watchdog) {
      auto since = [](std::optional<int64_t> a, std::optional<int64_t> b) -> json {
        return a && b ? json(*a - *b) : json();
      };
      wd.push_back({{"port", ep.port}, {"priority", ep.priority}, {"storm_start_ns", ep.stormStartNs},
                    {"storm_end_ns", optInt(ep.stormEndNs)}, {"detect_ns", optInt(ep.detectNs)},
                    {"restore_ns", optInt(ep.restoreNs)}, {"data_plane_moving_ns", optInt(ep.dataPlaneMovingNs)},
                    {"detect_time_ns", since(ep.detectNs, ep.stormStartNs)},
                    {"restore_time_ns", since(ep.restoreNs, ep.stormEndNs)},
                    {"data_plane_detect_time_ns", since(ep.dataPlaneMovingNs, ep.stormStartNs)},
                    {"data_plane_delivered_ns", optInt(ep.dataPlaneDeliveredNs)},
                    {"data_plane_restore_time_ns", since(ep.dataPlaneDeliveredNs, ep.stormEndNs)}});
    }
    jt["fabric"] = {{"source", ts.fabric.source}, {"deltas", fd}, {"fault_windows", fw}, {"watchdog", wd}};
    if (ts.fabric.switchBusyPct)
      jt["fabric"]["switch_busy"] = {{"pct", *ts.fabric.switchBusyPct},
                                     {"peak_pct", ts.fabric.switchBusyPeakPct.value_or(*ts.fabric.switchBusyPct)},
                                     {"from_ns", ts.fabric.switchBusyFromNs},
                                     {"to_ns", ts.fabric.switchBusyToNs},
                                     {"saturated", ts.fabric.switchBusyPeakPct.value_or(0) >= kSwitchSaturatedPct}};
    // The nodes' own NIC and RDMA counters over the same windows as the switch's.
    json nw = json::array();
    for (const auto& win : ts.nicWindows)
      nw.push_back({{"step", win.step}, {"node", win.node}, {"kind", win.kind}, {"role", win.role},
                    {"from_ns", win.fromNs}, {"to_ns", win.toNs}, {"nodes", win.nodes}});
    jt["nic"] = {{"fault_windows", nw}};
    (void)t;
    trials.push_back(std::move(jt));
  }
  doc["trials"] = trials;
  if (json targets = targetTable(trials); !targets.empty()) doc["targets"] = targets;

  // Repeatability (computed by the scorer): trials of one scenario side by side, per job metric
  // mean, sample standard deviation and CV, and the stat = "cv" expectations' verdicts.
  json rep = json::array();
  for (const auto& g : scores.repeatability) {
    json metrics = json::array();
    for (const auto& m : g.metrics)
      metrics.push_back({{"metric", m.metric}, {"bmwg_name", m.bmwg}, {"n", m.values.size()}, {"values", m.values},
                         {"mean", m.mean}, {"stddev", m.stddev}, {"cv_pct", m.cvPct ? json(*m.cvPct) : json()}});
    json gv = json::array();
    for (const auto& v : g.verdicts)
      gv.push_back({{"metric", v.metric}, {"scope", v.scope}, {"op", v.op}, {"bound", v.bound},
                    {"bound_text", v.boundText}, {"measured", optNum(v.measured)},
                    {"measured_text", v.measuredText}, {"passed", v.passed},
                    {"line", v.pos.line}, {"column", v.pos.column}});
    rep.push_back({{"group", g.key}, {"trials", g.trials}, {"metrics", metrics}, {"verdicts", gv}});
  }
  doc["repeatability"] = rep;
  doc["detection"] = detectionJson(scores.detection);
  doc["outcome"] = {{"verdict", toString(scores.outcome)},
                    {"reason", scores.reason},
                    {"exit_code", exitCodeFor(scores.outcome)},
                    {"expectations_passed", scores.verdictsPassed},
                    {"expectations_failed", scores.verdictsFailed},
                    {"expectations_not_scored", scores.verdictsNotScored}};
  return doc;
}

Result<void> checkResultDocument(const json& doc) {
  if (!doc.is_object()) return makeError("a result document is a JSON object");
  if (str(doc, "schema") != kResultSchema)
    return makeError("schema is '" + str(doc, "schema", "missing") + "', expected '" + kResultSchema +
                     "': this file was not written by this version of rdmachaos");
  struct Need {
    const char* key;
    json::value_t type;
  };
  for (const Need& n : {Need{"playbook", json::value_t::object}, Need{"run", json::value_t::object},
                        Need{"series", json::value_t::object}, Need{"faults", json::value_t::array},
                        Need{"trials", json::value_t::array}, Need{"outcome", json::value_t::object},
                        Need{"counters", json::value_t::array}, Need{"clocks", json::value_t::array}}) {
    auto it = doc.find(n.key);
    if (it == doc.end() || it->type() != n.type)
      return makeError(std::string("member '") + n.key + "' is missing or has the wrong type");
  }
  const json& s = doc["series"];
  if (!s.contains("bin_ns") || !s["bin_ns"].is_number_integer() || s["bin_ns"].get<int64_t>() <= 0)
    return makeError("series.bin_ns must be a positive integer");
  if (!s.contains("job") || !s["job"].is_array()) return makeError("series.job must be an array");
  if (!s.contains("nodes") || !s["nodes"].is_object()) return makeError("series.nodes must be an object");
  for (const auto& t : doc["trials"]) {
    if (!t.is_object() || !t.contains("start_ns") || !t.contains("end_ns") || !t.contains("job") ||
        !t.contains("verdicts") || !t["verdicts"].is_array())
      return makeError("every trial needs start_ns, end_ns, job and verdicts");
  }
  return {};
}

Result<json> loadResultDocument(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read result '" + path + "': check the path");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::parse_error& e) {
    return makeError(path + ": not JSON: " + e.what());
  }
  if (auto ok = checkResultDocument(doc); !ok) return makeError(path + ": " + ok.error().message);
  return doc;
}

// ---------------------------------------------------------------- JUnit

std::string renderJunit(const json& doc) {
  const json& pb = doc["playbook"];
  const std::string suiteName = str(pb, "name", "playbook");
  std::ostringstream cases;
  int tests = 0, failures = 0, errors = 0;
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  std::ostringstream suites;
  for (const auto& t : doc["trials"]) {
    std::ostringstream tc;
    int tt = 0, tf = 0, te = 0, ts = 0;
    const std::string label = str(t, "label", "trial");
    const std::string cls = "rdmachaos." + suiteName + "." + str(t, "scenario", "scenario");
    // The trial itself is a test case: it errors when it did not complete or a fault failed.
    tt++;
    tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(label + ": trial ran cleanly") << "\">\n";
    if (t.contains("problems") && !t["problems"].empty()) {
      te++;
      std::string all;
      for (const auto& p : t["problems"]) all += p.get<std::string>() + "\n";
      tc << "      <error message=\"" << esc(t["problems"][0].get<std::string>()) << "\">" << esc(all)
         << "</error>\n";
    }
    tc << "    </testcase>\n";
    for (const auto& v : t["verdicts"]) {
      tt++;
      std::string name = str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text") + " [" +
                         str(v, "scope") + "]";
      tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(label + ": " + name) << "\">\n";
      if (!t.value("condition", json::object()).value("reached", true)) {
        ts++;
        tc << "      <skipped message=\"" << esc(str(v, "measured_text")) << "\"/>\n";
      } else if (!v.value("passed", false)) {
        tf++;
        std::string msg = "measured " + str(v, "measured_text") + ", expected " + str(v, "op") + " " +
                          str(v, "bound_text");
        tc << "      <failure message=\"" << esc(msg) << "\" type=\"expectation\">" << esc(name)
           << ": measured " << esc(str(v, "measured_text")) << " (bound " << esc(str(v, "op")) << " "
           << esc(str(v, "bound_text")) << ", playbook line " << v.value("line", 0) << ")</failure>\n";
      }
      tc << "    </testcase>\n";
    }
    suites << "  <testsuite name=\"" << esc(suiteName + " / " + label) << "\" tests=\"" << tt
           << "\" failures=\"" << tf << "\" errors=\"" << te << "\" skipped=\"" << ts << "\">\n"
           << tc.str() << "  </testsuite>\n";
    tests += tt;
    failures += tf;
    errors += te;
  }
  // stat = "cv" expectations: one suite per group of repeated trials.
  for (const auto& g : doc.value("repeatability", json::array())) {
    const auto& gv = g.value("verdicts", json::array());
    if (gv.empty()) continue;
    std::ostringstream tc;
    int tf = 0;
    const std::string cls = "rdmachaos." + suiteName + ".repeatability";
    for (const auto& v : gv) {
      std::string name = str(g, "group") + ": " + str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text");
      tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(name) << "\">\n";
      if (!v.value("passed", false)) {
        tf++;
        tc << "      <failure message=\"" << esc("measured " + str(v, "measured_text")) << "\" type=\"expectation\"/>\n";
      }
      tc << "    </testcase>\n";
    }
    suites << "  <testsuite name=\"" << esc(suiteName + " / repeatability of " + str(g, "group")) << "\" tests=\""
           << gv.size() << "\" failures=\"" << tf << "\" errors=\"0\" skipped=\"0\">\n"
           << tc.str() << "  </testsuite>\n";
    tests += int(gv.size());
    failures += tf;
  }
  int skipped = 0;
  suites << detectionJunit(doc, suiteName, tests, failures, skipped);
  std::string abort = str(doc["run"], "abort_reason");
  if (!abort.empty()) {
    errors++;
    tests++;
    suites << "  <testsuite name=\"" << esc(suiteName + " / run") << "\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\">\n"
           << "    <testcase classname=\"rdmachaos." << esc(suiteName) << "\" name=\"run completes\">\n"
           << "      <error message=\"" << esc("aborted: " + abort) << "\"/>\n    </testcase>\n  </testsuite>\n";
  }
  out << "<testsuites name=\"" << esc(suiteName) << "\" tests=\"" << tests << "\" failures=\"" << failures
      << "\" errors=\"" << errors << "\"" << (skipped ? " skipped=\"" + std::to_string(skipped) + "\"" : std::string()) << ">\n"
      << suites.str() << "</testsuites>\n";
  return out.str();
}

// ---------------------------------------------------------------- text

std::string renderText(const json& doc) {
  std::ostringstream o;
  const json& pb = doc["playbook"];
  const json& oc = doc["outcome"];
  o << "playbook " << str(pb, "name") << ": " << str(oc, "verdict") << " (" << str(oc, "reason") << ")\n";
  for (const auto& t : doc["trials"]) {
    const json& job = t["job"];
    o << "\n" << str(t, "label") << "\n";
    o << "  baseline        " << rateText(num(job, "baseline_Bps")) << " job throughput (median, smoothed)";
    auto base = num(job, "baseline_Bps");
    auto floor = job.contains("baseline_band") && job["baseline_band"].is_object()
                     ? num(job["baseline_band"], "floor_Bps")
                     : std::nullopt;
    const json noBand = json::object();  // value() on a null json throws
    const json& band = job.contains("baseline_band") && job["baseline_band"].is_object() ? job["baseline_band"] : noBand;
    if (base && floor && *base > 0) {
      o << "; its own band reaches down to " << rateText(floor) << " ("
        << fmt("%.1f", (1 - *floor / *base) * 100) << "% below: smaller dips are noise";
      if (auto n = num(band, "pooled_over_trials"); n && *n > 0)
        o << "; widened to the median of this job's " << fmt("%.0f", *n) << " trials";
      o << ")";
    }
    o << "\n";
    // The other named quantity of the live line: bus bandwidth, not the job's throughput.
    if (auto bw = num(job, "busbw_Bps"))
      o << "  busbw           " << rateText(bw) << " bus bandwidth (nccl-tests' definition, from the baseline's "
        << "median iteration)\n";
    if (band.value("capped", false) && base && *base > 0) {
      auto low = num(band, "lowest_Bps");
      o << "  warning         the baseline is noisy: its spread (lowest " << rateText(low) << ", "
        << fmt("%.0f", (1 - low.value_or(0) / *base) * 100) << "% below B, at "
        << dur(i64(band, "lowest_at_ns") - i64(t, "start_ns"))
        << " into the trial, plus the band's margin) would put the band more than "
        << fmt("%.0f", kBandMaxDepth * 100)
        << "% below B, so it is capped there: a smaller impact can go unseen and a slow recovery may be "
           "noise (a disturbed baseline: re-run on a quieter fabric/host)\n";
    }
    if (job["impact"].is_object()) {
      const json& im = job["impact"];
      auto tti = num(im, "time_to_impact_ns");
      auto rec = num(im, "recovery_time_ns");
      std::string pm = im.contains("uncertainty_ns") ? " ± " + dur(i64(im, "uncertainty_ns")) : "";
      o << "  judged against  " << rateText(num(im, "threshold_Bps")) << " (below: impacted; held above: recovered)\n";
      o << "  time to impact  " << (tti ? dur(int64_t(*tti)) + pm : "no impact") << "\n";
      o << "  recovery time   " << (rec ? dur(int64_t(*rec)) + pm : "NOT RECOVERED") << "\n";
      o << "  throughput loss " << formatSize(uint64_t(num(im, "loss_bytes").value_or(0))) << " ("
        << fmt("%.2f", num(im, "loss_pct").value_or(0)) << "% of baseline over "
        << dur(i64(im, "window_to_ns") - i64(im, "window_from_ns")) << ")\n";
      o << "  stall time      " << dur(i64(im, "stall_ns")) << " (longest " << dur(i64(im, "longest_stall_ns")) << ")\n";
    } else {
      o << "  no fault was applied\n";
    }
    if (auto g = num(job, "gpu_hours"))
      o << "  extrapolated    " << fmt("%.3g", *g) << " GPU-hours per incident ("
        << fmt("%.2f", num(job, "cost").value_or(0)) << " " << str(pb["cost"], "currency") << "), "
        << fmt("%.4g", num(job, "gpu_hours_per_period").value_or(0)) << " GPU-hours per period\n";
    if (doc.contains("nic") && doc["nic"].is_object()) {
      const int64_t from = i64(t, "start_ns"), to = i64(t, "end_ns");
      for (auto it = doc["nic"].begin(); it != doc["nic"].end(); ++it) {
        uint64_t pause = nicGrowth(*it, "pause_frames", from, to), ecn = nicGrowth(*it, "ecn_marked", from, to),
                 cnp = nicGrowth(*it, "cnp_sent", from, to), handled = nicGrowth(*it, "cnp_handled", from, to);
        if (pause + ecn + cnp + handled == 0) continue;
        o << "  NIC " << it.key() << std::string(it.key().size() < 11 ? 11 - it.key().size() : 1, ' ') << pause
          << " pause frames, " << ecn << " ECN-marked packets, " << cnp << " CNPs sent, " << handled
          << " CNPs handled\n";
      }
    }
    if (t.contains("fabric") && t["fabric"].is_object() && !str(t["fabric"], "source").empty()) {
      const json& fb = t["fabric"];
      uint64_t pfcRx = 0, ecn = 0, drops = 0, gaps = 0;
      std::string spread;
      for (const auto& d : fb["deltas"]) {
        pfcRx += d.value("pfc_rx", uint64_t(0));
        gaps += d.value("storm_gaps", uint64_t(0));
        ecn += d.value("ecn_marked", uint64_t(0));
        drops += d.value("drops", uint64_t(0));
        if (d.value("xoff_ns", int64_t(0)) > 0)
          spread += " " + str(d, "port") + "/q" + std::to_string(d.value("queue", 0)) + " " +
                    dur(d.value("xoff_ns", int64_t(0)));
      }
      o << "  fabric          " << pfcRx << " PFC frames received, " << ecn << " ECN marks, " << drops
        << " drops (" << str(fb, "source") << ")\n";
      if (pfcRx > 0)
        o << "  storm quality   " << gaps
          << " gap(s) between pause frames longer than the maximum pause time (the port was free to send)\n";
      if (!spread.empty()) o << "  pause spread    senders held in XOFF:" << spread << "\n";
      // The lab switch's own load: a saturated switch, not the line rate, bounded the traffic,
      // and the job's figures then measure this machine's CPU as much as the fabric.
      if (fb.contains("switch_busy") && fb["switch_busy"].is_object()) {
        const json& sb = fb["switch_busy"];
        o << "  switch load     busy " << fmt("%.0f", sb.value("pct", 0.0)) << "% of the "
          << (t.contains("fault_start_ns") && t["fault_start_ns"].is_number() ? "fault window" : "trial")
          << " (busiest second " << fmt("%.0f", sb.value("peak_pct", 0.0)) << "%)";
        if (sb.value("saturated", false))
          o << ": SATURATED, the switch's CPU and not the line rate bounded the traffic; the job's figures "
               "measure this machine (bring the lab up at a lower --rate)";
        o << "\n";
      }
      for (const auto& w : fb["watchdog"]) {
        auto show = [&](const char* k) {
          return w[k].is_number() ? dur(w[k].get<int64_t>()) : std::string("never");
        };
        o << "  PFC watchdog    " << str(w, "port") << " priority " << w.value("priority", 0) << ": detected "
          << show("detect_time_ns") << " after the storm began (data plane: traffic moved again after "
          << show("data_plane_detect_time_ns") << "), restored " << show("restore_time_ns")
          << " after it ended";
        if (w.contains("data_plane_restore_time_ns") && w["data_plane_restore_time_ns"].is_number())
          o << " (data plane: frames delivered to " << str(w, "port") << " again after "
            << show("data_plane_restore_time_ns") << ")";
        o << "\n";
      }
      // Ground truth for traffic a fault put on the wire: when its last frame left the switch,
      // beside the job's recovery mark.
      for (const auto& w : fb["fault_windows"]) {
        if (!w.contains("wire") || !w["wire"].is_object()) continue;
        const json& wi = w["wire"];
        o << "  on the wire     " << str(w, "kind") << " into " << str(wi, "port") << ":" << wi.value("l4_dst", 0)
          << ": " << wi.value("episodes", 0) << " burst(s); ";
        if (!wi["last_ns"].is_number()) {
          o << "still flowing when the trial ended\n";
          continue;
        }
        int64_t last = wi["last_ns"].get<int64_t>(), rev = w.value("to_ns", int64_t(0));
        o << "last frame left the switch " << dur(std::abs(last - rev)) << (last >= rev ? " after" : " before")
          << " the revert";
        if (job["impact"].is_object() && job["impact"]["recovered_at_ns"].is_number()) {
          int64_t at = job["impact"]["recovered_at_ns"].get<int64_t>();
          o << "; the job's recovery mark is " << dur(std::abs(at - last)) << (at >= last ? " after" : " before") << " it";
        }
        o << "\n";
      }
    }
    // Per fault window, each node's RDMA counters and the NIC's evidence (pause, ECN, errors,
    // drops) that moved; the rest (byte and packet counts of net.* and ethtool) are counted
    // only: every moved counter is in result.json.
    if (t.contains("nic") && t["nic"].is_object())
      for (const auto& w : t["nic"].value("fault_windows", json::array())) {
        const int64_t start = i64(t, "start_ns");
        o << "  NIC counters    while " << str(w, "step") << " (" << str(w, "kind") << " on " << str(w, "node");
        if (!str(w, "role").empty()) o << ", " << str(w, "role");
        o << ") was on, " << dur(i64(w, "from_ns") - start) << " to " << dur(i64(w, "to_ns") - start)
          << " into the trial:";
        const json& nodes = w.value("nodes", json::object());
        if (!nodes.is_object() || nodes.empty()) o << " no counter moved on any node";
        o << "\n";
        if (!nodes.is_object()) continue;
        for (auto it = nodes.begin(); it != nodes.end(); ++it) {
          constexpr size_t kShown = 12;  // a line an operator reads; mlx5 moves dozens at once
          std::string line;
          size_t shown = 0, more = 0, others = 0;
          for (const auto& item : nicWindowItems(*it)) {
            if (!rdmaCounter(item.first) && !evidenceCounter(item.first)) {
              others++;
            } else if (shown == kShown) {
              more++;
            } else {
              if (shown++) line.append(", ");
              line.append(nicItemText(item));
            }
          }
          if (more) line.append(", ").append(std::to_string(more)).append(" more");
          if (others) {
            if (!line.empty()) line.append("; ");
            line.append(std::to_string(others)).append(" other NIC counter(s) moved (net.*, ethtool)");
          }
          if (more || others) line.append(": all in result.json");
          o << "    " << it.key() << std::string(it.key().size() < 12 ? 12 - it.key().size() : 1, ' ') << line
            << "\n";
        }
      }
    for (const auto& p : t["problems"]) o << "  ERROR " << p.get<std::string>() << "\n";
    const json cond = t.value("condition", json::object());
    for (const auto& c : cond.value("checks", json::array()))
      o << "  " << (c.value("passed", false) ? "met  " : "NOT  ") << "condition " << str(c, "metric") << " "
        << str(c, "op") << " " << str(c, "bound_text") << " (" << str(c, "scope") << "): " << str(c, "measured_text")
        << "\n";
    if (!cond.value("reached", true))
      o << "  CONDITION NOT REACHED: the scenario did not happen, so its expectations are not scored\n";
    for (const auto& v : t["verdicts"])
      o << "  " << (v.value("passed", false) ? "ok   " : "FAIL ") << str(v, "metric") << " " << str(v, "op") << " "
        << str(v, "bound_text") << " (" << str(v, "scope") << "): " << str(v, "measured_text") << "\n";
  }
  // The target sweep's table: what failed, by name, first.
  o << targetsText(doc);
  // Repeatability: every trial of a scenario side by side, with mean, stddev and CV.
  for (const auto& g : doc.value("repeatability", json::array())) {
    o << "\nrepeatability of " << str(g, "group") << " over " << g.value("trials", 0) << " trials\n";
    for (const auto& m : g["metrics"]) {
      auto info = findMetric(str(m, "metric"));
      MetricUnit unit = info ? info->unit : MetricUnit::number;
      std::string values;
      for (const auto& v : m["values"]) values += (values.empty() ? "" : ", ") + formatMetric(unit, v.get<double>());
      char cv[32] = "-";
      if (m["cv_pct"].is_number()) std::snprintf(cv, sizeof cv, "%.1f%%", m["cv_pct"].get<double>());
      std::string name = str(m, "metric");
      name.resize(std::max<size_t>(name.size(), 20), ' ');
      o << "  " << name << " " << values << "  mean "
        << formatMetric(unit, m["mean"].get<double>()) << ", sd " << formatMetric(unit, m["stddev"].get<double>())
        << ", CV " << cv << (str(m, "bmwg_name").empty() ? "" : "  [BMWG: " + str(m, "bmwg_name") + "]") << "\n";
    }
    for (const auto& v : g.value("verdicts", json::array()))
      o << "  " << (v.value("passed", false) ? "ok   " : "FAIL ") << str(v, "metric") << " " << str(v, "op") << " "
        << str(v, "bound_text") << " (" << str(v, "scope") << "): " << str(v, "measured_text") << "\n";
  }
  o << detectionText(doc);
  std::string abort = str(doc["run"], "abort_reason");
  if (!abort.empty()) o << "\nrun aborted: " << abort << "\n";
  return o.str();
}

// ---------------------------------------------------------------- HTML

namespace {

struct Axis {
  double max = 1;   // in display units
  double step = 1;  // tick step
};

// A round tick step (1, 2 or 5 x 10^k) that gives about `ticks` ticks up to v.
Axis niceAxis(double v, int ticks) {
  if (!(v > 0)) v = 1;
  double raw = v / ticks;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  return {std::ceil(v / step) * step, step};
}

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

std::string chart(const ChartInput& c) {
  const double W = 1120, H = c.height, L = 70, R = 18, T = 24, B = 30;
  const double pw = W - L - R, ph = H - T - B;
  double peak = 0;
  for (double b : c.bytes) peak = std::max(peak, b * 1e9 / double(c.binNs) * 8);
  for (double b : c.overlay) peak = std::max(peak, b * 1e9 / double(c.binNs) * 8);
  if (c.baseline) peak = std::max(peak, *c.baseline * 8);
  const double unit = peak >= 1e9 ? 1e9 : peak >= 1e6 ? 1e6 : 1e3;
  const char* unitName = peak >= 1e9 ? "Gb/s" : peak >= 1e6 ? "Mb/s" : "kb/s";
  Axis ya = niceAxis(peak / unit * 1.08, 4);
  const double span = double(c.t1 - c.t0) / 1e9;
  Axis xa = niceAxis(span, 10);
  auto X = [&](int64_t t) { return L + (double(t - c.t0) / 1e9) / span * pw; };
  auto Y = [&](double bitsPerSec) { return T + ph - std::min(bitsPerSec / unit / ya.max, 1.0) * ph; };
  std::ostringstream s;
  s << "<svg class=\"chart\" id=\"" << esc(c.id) << "\" viewBox=\"0 0 " << W << " " << H
    << "\" width=\"100%\" role=\"img\" aria-label=\"" << esc(c.title) << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  s << "<text x=\"" << L << "\" y=\"15\" class=\"ctitle\">" << esc(c.title) << "</text>\n";
  // Grid and axes.
  for (double v = 0; v <= ya.max + 1e-9; v += ya.step) {
    double y = Y(v * unit);
    s << "<line class=\"grid\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", y) << "\" y2=\""
      << fmt("%.1f", y) << "\"/><text class=\"tick\" x=\"" << L - 6 << "\" y=\"" << fmt("%.1f", y + 4)
      << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
  }
  s << "<text class=\"tick\" x=\"12\" y=\"" << T + ph / 2 << "\" transform=\"rotate(-90 12 " << T + ph / 2
    << ")\" text-anchor=\"middle\">" << unitName << "</text>\n";
  for (double v = 0; v <= span + 1e-9; v += xa.step) {
    double x = L + v / span * pw;
    s << "<line class=\"xtick\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T + ph
      << "\" y2=\"" << T + ph + 4 << "\"/><text class=\"tick\" x=\"" << fmt("%.1f", x) << "\" y=\"" << T + ph + 17
      << "\" text-anchor=\"middle\">" << fmt("%g", v) << "s</text>\n";
  }
  // Fault windows under the data.
  for (const auto& sh : c.shades) {
    double x0 = X(std::max(sh.fromNs, c.t0)), x1 = X(std::min(sh.toNs, c.t1));
    s << "<rect class=\"fault-window" << (sh.strong ? " target" : "") << "\" x=\"" << fmt("%.1f", x0) << "\" y=\"" << T
      << "\" width=\"" << fmt("%.1f", std::max(1.0, x1 - x0)) << "\" height=\"" << ph << "\"><title>"
      << esc(sh.title) << "</title></rect>\n";
  }
  // Phase boundaries and names.
  for (const auto& [name, start] : c.phases) {
    double x = X(start);
    if (start > c.t0)
      s << "<line class=\"phase\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T
        << "\" y2=\"" << T + ph << "\"/>\n";
    s << "<text class=\"phasename\" x=\"" << fmt("%.1f", x + 4) << "\" y=\"" << T + 11 << "\">" << esc(name) << "</text>\n";
  }
  if (c.baseline) {
    double yb = Y(*c.baseline * 8), yt = Y((c.threshold ? *c.threshold : *c.baseline * (1 - c.epsilon)) * 8);
    s << "<line class=\"baseline\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", yb) << "\" y2=\""
      << fmt("%.1f", yb) << "\"><title>baseline " << esc(formatBitRate(*c.baseline * 8)) << "</title></line>\n";
    s << "<line class=\"threshold\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", yt) << "\" y2=\""
      << fmt("%.1f", yt) << "\"><title>impact and recovery threshold: min((1 - " << c.epsilon
      << ") x baseline, the baseline band's floor)</title></line>\n";
  }
  // The series, as steps: a bin is a constant rate over its width. Wide runs are averaged
  // down to about two points per pixel so the page stays light.
  auto steps = [&](const std::vector<double>& bytes) {
    const size_t count = std::min<size_t>(bytes.size(), size_t(std::max<int64_t>(0, (c.t1 - c.t0) / c.binNs)) + 1);
    const size_t stride = std::max<size_t>(1, count / 2200 + 1);
    std::ostringstream out;
    for (size_t i = 0; i < count; i += stride) {
      double sum = 0;
      size_t k = 0;
      for (; k < stride && i + k < count; k++) sum += bytes[i + k];
      double bps = sum / double(k) * 1e9 / double(c.binNs) * 8;
      double xa0 = X(c.t0 + int64_t(i) * c.binNs), xa1 = X(c.t0 + int64_t(i + k) * c.binNs);
      double y = Y(bps);
      out << (i == 0 ? "M" : "L") << fmt("%.1f", xa0) << "," << fmt("%.1f", y) << "L" << fmt("%.1f", xa1) << ","
          << fmt("%.1f", y);
    }
    return out.str();
  };
  if (!c.overlay.empty()) {
    s << "<path class=\"series overlay\" data-bins=\"" << c.overlay.size() << "\" d=\"" << steps(c.overlay)
      << "\"><title>" << esc(c.overlayName) << "</title></path>\n";
    s << "<text class=\"legend overlay\" x=\"" << L + pw - 4 << "\" y=\"15\" text-anchor=\"end\">"
      << "<tspan class=\"legend-series\">━ " << esc(c.seriesName) << "</tspan>   <tspan class=\"legend-overlay\">┅ "
      << esc(c.overlayName) << "</tspan></text>\n";
  }
  size_t n = c.bytes.size();
  std::ostringstream d, area;
  d << steps(c.bytes);
  if (n) {
    area << "M" << L << "," << T + ph << d.str().substr(1).insert(0, "L") << "L" << fmt("%.1f", X(c.t0 + int64_t(n) * c.binNs))
         << "," << T + ph << "Z";
    s << "<path class=\"area\" d=\"" << area.str() << "\"/>\n";
    s << "<path class=\"series\" data-bins=\"" << n << "\" d=\"" << d.str() << "\"/>\n";
  }
  if (c.recoveredAt) {
    double x = X(*c.recoveredAt);
    std::string label = "recovered " + (c.faultEnd ? "+" + formatDuration(Nanos(*c.recoveredAt - *c.faultEnd)) : "");
    s << "<line class=\"recovery-mark\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x) << "\" y1=\"" << T
      << "\" y2=\"" << T + ph << "\"><title>" << esc(label) << " after the fault ended</title></line>\n"
      << "<text class=\"recovery-label\" x=\"" << fmt("%.1f", x + 4) << "\" y=\"" << T + ph - 6 << "\">"
      << esc(label) << "</text>\n";
  } else if (c.notRecovered) {
    s << "<text class=\"recovery-mark not-recovered\" x=\"" << L + pw - 4 << "\" y=\"" << T + 26
      << "\" text-anchor=\"end\">not recovered</text>\n";
  }
  // Alerts: a span from firing to resolving, and a mark at the firing instant.
  for (const auto& a : c.alerts) {
    double x = X(c.t0 + a.firedNs);
    double x1 = a.resolvedNs >= 0 ? X(c.t0 + a.resolvedNs) : L + pw;
    std::string tip = a.name + " (" + (a.kind == "false_alarm" ? std::string("false alarm") : a.kind) + "): fired +" +
                      formatDuration(Nanos(a.firedNs)) +
                      (a.resolvedNs >= 0 ? ", resolved +" + formatDuration(Nanos(a.resolvedNs)) : ", still firing");
    s << "<rect class=\"alert-span alert-" << a.kind << "\" x=\"" << fmt("%.1f", x) << "\" y=\"" << T << "\" width=\""
      << fmt("%.1f", std::max(1.0, x1 - x)) << "\" height=\"6\"><title>" << esc(tip) << "</title></rect>\n"
      << "<line class=\"alert-mark alert-" << a.kind << "\" x1=\"" << fmt("%.1f", x) << "\" x2=\"" << fmt("%.1f", x)
      << "\" y1=\"" << T << "\" y2=\"" << T + ph << "\"><title>" << esc(tip) << "</title></line>\n";
  }
  s << "<rect class=\"frame\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph << "\"/>\n";
  s << "</svg>\n";
  return s.str();
}

// A counter series of the fabric: per-second rates between consecutive samples of a cumulative
// counter, drawn as steps.
struct CounterLine {
  std::string cls;    // pfc, ecn, drops
  std::string label;  // "n2/q3 PFC frames received"
  std::vector<std::pair<int64_t, double>> points;  // (t, per second) on the run timeline
};

std::string counterChart(const std::string& id, const std::string& title, int64_t t0, int64_t t1,
                         const std::vector<Shade>& shades, const std::vector<CounterLine>& lines) {
  const double W = 1120, H = 170, L = 70, R = 18, T = 24, B = 30;
  const double pw = W - L - R, ph = H - T - B;
  double peak = 1;
  for (const auto& l : lines)
    for (const auto& [t, v] : l.points)
      if (t >= t0 && t <= t1) peak = std::max(peak, v);
  Axis ya = niceAxis(peak * 1.08, 4);
  const double span = std::max(1e-9, double(t1 - t0) / 1e9);
  Axis xa = niceAxis(span, 10);
  auto X = [&](int64_t t) { return L + std::clamp(double(t - t0) / 1e9 / span, 0.0, 1.0) * pw; };
  auto Y = [&](double v) { return T + ph - std::min(v / ya.max, 1.0) * ph; };
  std::ostringstream s;
  s << "<svg class=\"chart fabric\" id=\"" << esc(id) << "\" viewBox=\"0 0 " << W << " " << H
    << "\" width=\"100%\" role=\"img\" aria-label=\"" << esc(title) << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  s << "<text x=\"" << L << "\" y=\"15\" class=\"ctitle\">" << esc(title) << "</text>\n";
  for (double v = 0; v <= ya.max + 1e-9; v += ya.step)
    s << "<line class=\"grid\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << fmt("%.1f", Y(v)) << "\" y2=\""
      << fmt("%.1f", Y(v)) << "\"/><text class=\"tick\" x=\"" << L - 6 << "\" y=\"" << fmt("%.1f", Y(v) + 4)
      << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
  s << "<text class=\"tick\" x=\"12\" y=\"" << T + ph / 2 << "\" transform=\"rotate(-90 12 " << T + ph / 2
    << ")\" text-anchor=\"middle\">per s</text>\n";
  for (double v = 0; v <= span + 1e-9; v += xa.step)
    s << "<text class=\"tick\" x=\"" << fmt("%.1f", L + v / span * pw) << "\" y=\"" << T + ph + 17
      << "\" text-anchor=\"middle\">" << fmt("%g", v) << "s</text>\n";
  for (const auto& sh : shades) {
    double x0 = X(std::max(sh.fromNs, t0)), x1 = X(std::min(sh.toNs, t1));
    s << "<rect class=\"fault-window\" x=\"" << fmt("%.1f", x0) << "\" y=\"" << T << "\" width=\""
      << fmt("%.1f", std::max(1.0, x1 - x0)) << "\" height=\"" << ph << "\"><title>" << esc(sh.title)
      << "</title></rect>\n";
  }
  double legendX = L + 8;
  for (const auto& l : lines) {
    std::ostringstream d;
    bool first = true;
    double prevY = Y(0);
    for (const auto& [t, v] : l.points) {
      if (t < t0 || t > t1) continue;
      double x = X(t), y = Y(v);
      if (first) d << "M" << fmt("%.1f", x) << "," << fmt("%.1f", y);
      else d << "L" << fmt("%.1f", x) << "," << fmt("%.1f", prevY) << "L" << fmt("%.1f", x) << "," << fmt("%.1f", y);
      prevY = y;
      first = false;
    }
    if (first) continue;
    s << "<path class=\"counter " << esc(l.cls) << "\" d=\"" << d.str() << "\"><title>" << esc(l.label)
      << "</title></path>\n";
    s << "<text class=\"legend " << esc(l.cls) << "\" x=\"" << fmt("%.0f", legendX) << "\" y=\"" << T + 12 << "\">"
      << esc(l.label) << "</text>\n";
    legendX += 9.0 * double(l.label.size()) + 16;
  }
  s << "<rect class=\"frame\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph << "\"/>\n";
  s << "</svg>\n";
  return s.str();
}

std::vector<double> slice(const json& arr, int64_t binNs, int64_t from, int64_t to) {
  std::vector<double> out;
  if (!arr.is_array()) return out;
  int64_t a = from / binNs, b = to / binNs;
  for (int64_t i = a; i < b; i++)
    out.push_back(size_t(i) < arr.size() && arr[size_t(i)].is_number() ? arr[size_t(i)].get<double>() : 0.0);
  return out;
}

const char* kCss = R"(
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#f6f8fa;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--blue:#0969da}
*{box-sizing:border-box}body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);margin:0;background:#fff}
header{padding:18px 28px;border-bottom:1px solid var(--line);background:var(--bg)}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}h3{font-size:14px;margin:18px 0 6px;color:var(--muted)}
main{padding:8px 28px 40px;max-width:1200px}.muted{color:var(--muted)}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;font-size:13px;color:#fff;vertical-align:middle;margin-left:8px}
.passed{background:var(--ok)}.failed{background:var(--bad)}.error{background:var(--warn)}.inconclusive{background:#6e7781}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 12px;min-width:140px}
.card .k{font-size:12px;color:var(--muted)}.card .v{font-size:18px;font-weight:600;font-variant-numeric:tabular-nums}
.card.bad .v{color:var(--bad)}
table{border-collapse:collapse;margin:6px 0 12px;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:4px 10px;text-align:left;font-size:13px}th{background:var(--bg)}
td.num{text-align:right}.pass{color:var(--ok);font-weight:600}.fail{color:var(--bad);font-weight:600}
.problem{color:var(--warn);font-weight:600}
svg.chart{display:block;margin:6px 0;max-width:1120px}
svg .ctitle{font-size:13px;font-weight:600;fill:var(--fg)}svg .tick{font-size:11px;fill:var(--muted)}
svg .grid{stroke:#eaeef2;stroke-width:1}svg .xtick{stroke:var(--muted)}svg .frame{fill:none;stroke:var(--line)}
svg .series{fill:none;stroke:var(--blue);stroke-width:1.4}
svg .series.overlay{stroke:#8c959f;stroke-dasharray:5 3;stroke-width:1.2}svg .legend-series{fill:var(--blue)}svg .legend-overlay{fill:#6e7781}
svg .counter{fill:none;stroke-width:1.4}svg .counter.pfc{stroke:#cf222e}svg .counter.ecn{stroke:#9a6700}svg .counter.drops{stroke:#6e7781}svg .counter.cnp{stroke:#8250df}
svg .legend{font-size:11px}svg .legend.pfc{fill:#cf222e}svg .legend.ecn{fill:#9a6700}svg .legend.drops{fill:#6e7781}svg .area{fill:var(--blue);opacity:.08}
svg .fault-window{fill:#cf222e;opacity:.12}svg .fault-window.target{opacity:.22}
svg .phase{stroke:#8c959f;stroke-dasharray:3 3}svg .phasename{font-size:11px;fill:var(--muted)}
svg .baseline{stroke:#59636e;stroke-dasharray:6 4}svg .threshold{stroke:#9a6700;stroke-dasharray:2 3}
svg .alert-mark{stroke:#8250df;stroke-width:2;stroke-dasharray:2 2}svg .alert-span{fill:#8250df;opacity:.5}
svg .alert-mark.alert-false_alarm{stroke:#cf222e}svg .alert-span.alert-false_alarm{fill:#cf222e}
svg .alert-mark.alert-late{stroke:#bf8700}svg .alert-span.alert-late{fill:#bf8700}
svg .recovery-mark{stroke:var(--ok);stroke-width:2}svg .recovery-label{font-size:12px;fill:var(--ok);font-weight:600}
svg text.not-recovered{fill:var(--bad);stroke:none;font-size:13px;font-weight:700}
.legend span{margin-right:16px;font-size:12px;color:var(--muted)}.sw{display:inline-block;width:18px;height:10px;vertical-align:middle;margin-right:4px}
details pre{background:var(--bg);padding:10px;border:1px solid var(--line);overflow:auto;font-size:12px}
)";

std::string card(const std::string& k, const std::string& v, bool bad = false) {
  return "<div class=\"card" + std::string(bad ? " bad" : "") + "\"><div class=\"k\">" + esc(k) +
         "</div><div class=\"v\">" + esc(v) + "</div></div>";
}

}  // namespace

std::string renderHtml(const json& doc) {
  const json& pb = doc["playbook"];
  const json& oc = doc["outcome"];
  const json& series = doc["series"];
  const int64_t binNs = series["bin_ns"].get<int64_t>();
  const double epsilon = pb.contains("scoring") ? pb["scoring"].value("epsilon", 0.05) : 0.05;
  const std::string verdict = str(oc, "verdict", "error");
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>rdmachaos: "
    << esc(str(pb, "name")) << " — " << esc(verdict) << "</title>\n<style>" << kCss << "</style></head>\n<body>\n";
  h << "<header><h1>" << esc(str(pb, "name")) << " <span class=\"badge " << esc(verdict) << "\" id=\"verdict\">"
    << esc(verdict == "passed"         ? "PASSED"
           : verdict == "failed"       ? "FAILED"
           : verdict == "inconclusive" ? "CONDITION NOT REACHED"
                                       : "ERROR")
    << "</span></h1>\n";
  if (!str(pb, "description").empty()) h << "<div>" << esc(str(pb, "description")) << "</div>\n";
  const json& run = doc["run"];
  const json& wl = pb.value("workload", json::object());
  h << "<div class=\"muted\">" << esc(str(oc, "reason")) << " · started " << esc(utc(i64(run, "started_unix_ns")))
    << " · ran " << esc(dur(i64(run, "ended_ns"))) << " of " << esc(dur(i64(run, "planned_ns"))) << " · workload "
    << esc(str(wl, "kind")) << " " << esc(formatSize(uint64_t(i64(wl, "size_bytes")))) << " × "
    << i64(wl, "streams", 1) << " stream(s) on " << series["nodes"].size() << " node(s) · seed "
    << i64(pb, "seed") << " · bin " << esc(dur(binNs)) << "</div>\n";
  if (!str(run, "abort_reason").empty())
    h << "<div class=\"problem\">Run aborted: " << esc(str(run, "abort_reason")) << "</div>\n";
  h << "</header>\n<main>\n";
  h << "<div class=\"legend\"><span><i class=\"sw\" style=\"background:#0969da\"></i>throughput</span>"
       "<span><i class=\"sw\" style=\"background:#cf222e;opacity:.3\"></i>fault applied → reverted (agent times)</span>"
       "<span><i class=\"sw\" style=\"border-top:2px dashed #59636e;height:0\"></i>baseline (median after warm-up)</span>"
       "<span><i class=\"sw\" style=\"border-top:2px dotted #9a6700;height:0\"></i>recovery threshold</span>"
       "<span><i class=\"sw\" style=\"background:#1a7f37;width:3px\"></i>recovered</span></div>\n";

  const json& faults = doc["faults"];
  for (const auto& t : doc["trials"]) {
    const int idx = int(i64(t, "index"));
    const int64_t t0 = i64(t, "start_ns"), t1 = i64(t, "end_ns");
    const json& job = t["job"];
    const json& im = job.value("impact", json());
    int met = 0, total = 0;
    for (const auto& v : t["verdicts"]) {
      total++;
      met += v.value("passed", false) ? 1 : 0;
    }
    const bool trialError = !t.value("problems", json::array()).empty();
    const json cond = t.value("condition", json::object());
    const bool reached = cond.value("reached", true);
    const char* tv = trialVerdict(t);
    h << "<section class=\"trial\" id=\"trial-" << idx << "\">\n<h2>Trial " << idx + 1 << ": " << esc(str(t, "label"))
      << " <span class=\"badge " << tv << "\">"
      << (trialError ? "error" : !reached ? "condition not reached" : std::to_string(met) + "/" + std::to_string(total) + " met")
      << "</span></h2>\n";
    for (const auto& p : t.value("problems", json::array()))
      h << "<div class=\"problem\">⚠ " << esc(p.get<std::string>()) << "</div>\n";
    for (const auto& c : cond.value("checks", json::array()))
      h << "<div class=\"" << (c.value("passed", false) ? "muted" : "problem") << " condition\">"
        << (c.value("passed", false) ? "condition met: " : "⚠ condition not reached, expectations not scored: ")
        << esc(str(c, "metric") + " " + str(c, "op") + " " + str(c, "bound_text") + " (" + str(c, "scope") +
               "), measured " + str(c, "measured_text"))
        << "</div>\n";
    h << "<div class=\"cards\">" << card("baseline", rateText(num(job, "baseline_Bps")));
    if (auto bw = num(job, "busbw_Bps")) h << card("bus bandwidth", rateText(bw));
    if (im.is_object()) {
      auto tti = num(im, "time_to_impact_ns");
      auto rec = num(im, "recovery_time_ns");
      std::string pm = im.contains("uncertainty_ns") ? " ± " + dur(i64(im, "uncertainty_ns")) : "";
      h << card("time to impact", tti ? dur(int64_t(*tti)) + pm : "no impact")
        << card("recovery time", rec ? dur(int64_t(*rec)) + pm : "not recovered", !rec)
        << card("throughput loss", fmt("%.2f%%", num(im, "loss_pct").value_or(0)) + " · " +
                                       formatSize(uint64_t(num(im, "loss_bytes").value_or(0))))
        << card("stall time", dur(i64(im, "stall_ns")), i64(im, "stall_ns") > 0);
      const json& wi = job["iterations"].value("window", json());
      const json& bi = job["iterations"].value("baseline", json());
      if (wi.is_object())
        h << card("iteration p99 (base p50)", dur(i64(wi, "p99_ns")) +
                                                  (bi.is_object() ? " (" + dur(i64(bi, "p50_ns")) + ")" : ""));
      if (auto g = num(job, "gpu_hours"))
        h << card("GPU-hours / incident", fmt("%.3g", *g) + " · " + fmt("%.2f", num(job, "cost").value_or(0)) + " " +
                                              str(pb.value("cost", json::object()), "currency"));
    } else {
      h << card("fault", "none applied", true);
    }
    h << "</div>\n";

    ChartInput base;
    base.binNs = binNs;
    base.t0 = t0;
    base.t1 = t1;
    base.epsilon = epsilon;
    for (const auto& ph : t.value("phases", json::array())) base.phases.push_back({str(ph, "name"), i64(ph, "start_ns")});
    if (im.is_object()) {
      base.faultEnd = num(t, "fault_end_ns") ? std::optional<int64_t>(i64(t, "fault_end_ns")) : std::nullopt;
    }
    auto shadesFor = [&](const std::string& node) {
      std::vector<Shade> out;
      for (const auto& f : faults) {
        if (i64(f, "trial", -1) != idx || !f["applied_ns"].is_number()) continue;
        int64_t a = f["applied_ns"].get<int64_t>();
        int64_t r = f["reverted_ns"].is_number() ? f["reverted_ns"].get<int64_t>() : t1;
        out.push_back({a, r,
                       str(f, "kind") + " on " + str(f, "node") + " (step " + str(f, "step") + "): applied " +
                           rel(a - t0) + ", reverted " + rel(r - t0),
                       node.empty() || str(f, "node") == node});
      }
      return out;
    };
    auto marks = [&](ChartInput& c, const json& scope) {
      c.baseline = num(scope, "baseline_Bps");
      const json& sim = scope.value("impact", json());
      if (sim.is_object()) {
        c.threshold = num(sim, "threshold_Bps");
        if (sim.value("recovered", false) && sim["recovered_at_ns"].is_number())
          c.recoveredAt = sim["recovered_at_ns"].get<int64_t>();
        else
          c.notRecovered = true;
      }
    };
    {
      ChartInput c = base;
      c.id = "chart-" + std::to_string(idx) + "-job";
      c.title = "Job throughput (sum of " + std::to_string(series["nodes"].size()) + " nodes), time from trial start";
      c.bytes = slice(series["job"], binNs, t0, t1);
      c.shades = shadesFor("");
      c.alerts = alertMarkers(doc, t0, t1);
      marks(c, job);
      h << chart(c);
    }
    h << "<h3>Per node</h3>\n";
    for (const auto& n : t.value("nodes", json::array())) {
      std::string node = str(n, "scope");
      ChartInput c = base;
      c.id = "chart-" + std::to_string(idx) + "-" + node;
      c.title = node;
      c.height = 150;
      c.bytes = slice(series["nodes"].value(node, json::array()), binNs, t0, t1);
      c.shades = shadesFor(node);
      marks(c, n);
      h << chart(c);
    }

    // The nodes' NIC counters beside the throughput: pause frames, ECN-marked packets and CNPs
    // per second for every node whose counters moved in this trial.
    if (doc.contains("nic") && doc["nic"].is_object()) {
      std::vector<CounterLine> lines;
      for (auto it = doc["nic"].begin(); it != doc["nic"].end(); ++it) {
        const json& q = *it;
        auto rates = [&](const char* counter) { return counterRates(q, counter); };
        const std::string& node = it.key();
        if (nicGrowth(q, "pause_frames", t0, t1) > 0)
          lines.push_back({"pfc", node + " pause frames (NIC)", rates("pause_frames")});
        if (nicGrowth(q, "ecn_marked", t0, t1) > 0)
          lines.push_back({"ecn", node + " ECN-marked packets received (NIC)", rates("ecn_marked")});
        if (nicGrowth(q, "cnp_sent", t0, t1) > 0)
          lines.push_back({"cnp", node + " CNPs sent (NIC)", rates("cnp_sent")});
      }
      if (!lines.empty()) {
        h << "<h3>NIC counters</h3>\n";
        h << counterChart("nic-" + std::to_string(idx), "Pause frames, ECN marks and CNPs per second, by node (NIC counters)",
                          t0, t1, shadesFor(""), lines);
      }
    }

    // The fabric's own view beside the throughput: pause frames and ECN marks per second for
    // every switch queue that moved in this trial, and the deltas per queue.
    if (t.contains("fabric") && t["fabric"].is_object() && !str(t["fabric"], "source").empty() &&
        doc.contains("fabric") && doc["fabric"].contains("series")) {
      const json& fb = t["fabric"];
      std::vector<CounterLine> lines;
      for (const auto& d : fb["deltas"]) {
        std::string key = str(d, "port") + "/" + std::to_string(d.value("queue", 0));
        const json& q = doc["fabric"]["series"].value(key, json());
        if (!q.is_object()) continue;
        auto rates = [&](const char* counter) { return counterRates(q, counter); };
        std::string where = str(d, "port") + " q" + std::to_string(d.value("queue", 0));
        if (d.value("pfc_rx", uint64_t(0)) > 0) lines.push_back({"pfc", where + " PFC frames received", rates("pfc_rx")});
        if (d.value("pfc_tx", uint64_t(0)) > 0) lines.push_back({"pfc", where + " PFC frames sent", rates("pfc_tx")});
        if (d.value("ecn_marked", uint64_t(0)) > 0) lines.push_back({"ecn", where + " ECN marks", rates("ecn_marked")});
        if (d.value("drops", uint64_t(0)) > 0) lines.push_back({"drops", where + " drops", rates("drops")});
      }
      h << "<h3>Fabric (" << esc(str(fb, "source")) << ")</h3>\n";
      h << counterChart("fabric-" + std::to_string(idx), "Pause frames, ECN marks and drops per second, by switch queue",
                        t0, t1, shadesFor(""), lines);
      h << "<table class=\"fabric\"><tr><th>port / queue</th><th>PFC rx</th><th>PFC tx</th><th>paused</th>"
           "<th>senders in XOFF</th><th>ECN marks</th><th>drops</th><th>max depth</th><th>storm gaps</th></tr>\n";
      for (const auto& d : fb["deltas"])
        h << "<tr><td>" << esc(str(d, "port") + " / " + std::to_string(d.value("queue", 0))) << "</td><td class=\"num\">"
          << d.value("pfc_rx", uint64_t(0)) << "</td><td class=\"num\">" << d.value("pfc_tx", uint64_t(0))
          << "</td><td class=\"num\">" << esc(dur(d.value("paused_ns", int64_t(0)))) << "</td><td class=\"num\">"
          << esc(dur(d.value("xoff_ns", int64_t(0)))) << "</td><td class=\"num\">" << d.value("ecn_marked", uint64_t(0))
          << "</td><td class=\"num\">" << d.value("drops", uint64_t(0)) << "</td><td class=\"num\">"
          << esc(formatSize(d.value("max_depth_bytes", uint64_t(0)))) << "</td><td class=\"num\">"
          << d.value("storm_gaps", uint64_t(0)) << "</td></tr>\n";
      h << "</table>\n";
      for (const auto& w : fb["watchdog"]) {
        auto show = [&](const char* k) { return w[k].is_number() ? dur(w[k].get<int64_t>()) : std::string("never"); };
        h << "<p class=\"watchdog\">PFC watchdog on " << esc(str(w, "port")) << " priority " << w.value("priority", 0)
          << ": detected " << esc(show("detect_time_ns")) << " after the storm began (data plane: traffic moved again after "
          << esc(show("data_plane_detect_time_ns")) << "), restored " << esc(show("restore_time_ns"))
          << " after it ended";
        if (w.contains("data_plane_restore_time_ns") && w["data_plane_restore_time_ns"].is_number())
          h << " (data plane: frames delivered to " << esc(str(w, "port")) << " again after "
            << esc(show("data_plane_restore_time_ns")) << ")";
        h << ".</p>\n";
      }
    }

    // The nodes' NIC and RDMA counters per fault window, beside the switch's view: every
    // counter that moved, the evidence (errors, retries, pause, ECN, CNPs, drops) first.
    if (t.contains("nic") && t["nic"].is_object() && !t["nic"].value("fault_windows", json::array()).empty()) {
      h << "<h3>NIC and RDMA counters per fault window</h3>\n<p class=\"muted\">Each node's counter deltas from "
           "the fault's apply to its revert, from the agents' samples (about every 100 ms): the counters that "
           "moved.</p>\n<table class=\"nicwindows\"><tr><th>fault</th><th>window</th><th>node</th>"
           "<th>counters that moved</th></tr>\n";
      for (const auto& w : t["nic"]["fault_windows"]) {
        std::string fault = str(w, "step");
        fault.append(" (").append(str(w, "kind")).append(" on ").append(str(w, "node"));
        if (!str(w, "role").empty()) fault.append(", ").append(str(w, "role"));
        fault.append(")");
        std::string when = rel(i64(w, "from_ns") - t0);
        when.append(" to ").append(rel(i64(w, "to_ns") - t0));
        const json& nodes = w.value("nodes", json::object());
        if (!nodes.is_object() || nodes.empty()) {
          h << "<tr><td>" << esc(fault) << "</td><td class=\"num\">" << esc(when)
            << "</td><td>–</td><td class=\"muted\">no counter moved on any node</td></tr>\n";
          continue;
        }
        for (auto it = nodes.begin(); it != nodes.end(); ++it) {
          std::string cell;
          for (const auto& item : nicWindowItems(*it)) {
            if (!cell.empty()) cell.append(", ");
            cell.append(nicItemText(item));
          }
          h << "<tr><td>" << esc(fault) << "</td><td class=\"num\">" << esc(when) << "</td><td>" << esc(it.key())
            << "</td><td>" << esc(cell) << "</td></tr>\n";
        }
      }
      h << "</table>\n";
    }

    if (!t["verdicts"].empty()) {
      h << "<h3>Expectations</h3>\n<table class=\"verdicts\"><tr><th></th><th>expectation</th><th>scope</th><th>measured</th><th>playbook line</th></tr>\n";
      for (const auto& v : t["verdicts"]) {
        bool ok = v.value("passed", false);
        h << "<tr class=\"" << (ok ? "pass" : "fail") << "\"><td class=\"" << (ok ? "pass" : "fail") << "\">"
          << (ok ? "✓ pass" : "✗ fail") << "</td><td>" << esc(str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text"))
          << "</td><td>" << esc(str(v, "scope")) << "</td><td class=\"num\">" << esc(str(v, "measured_text"))
          << "</td><td class=\"num\">" << i64(v, "line") << "</td></tr>\n";
      }
      h << "</table>\n";
    }
    h << "<h3>Scores per scope</h3>\n<table class=\"scopes\"><tr><th>scope</th><th>baseline</th><th>time to impact</th>"
         "<th>recovery</th><th>loss</th><th>stall</th><th>min</th><th>iter p50 / p99 / max</th></tr>\n";
    std::vector<json> scopes{job};
    for (const auto& n : t.value("nodes", json::array())) scopes.push_back(n);
    for (const auto& sc : scopes) {
      const json& si = sc.value("impact", json());
      const json& wi = sc.value("iterations", json::object()).value("window", json());
      h << "<tr><td>" << esc(str(sc, "scope")) << "</td><td class=\"num\">" << esc(rateText(num(sc, "baseline_Bps")))
        << "</td>";
      if (si.is_object()) {
        auto tti = num(si, "time_to_impact_ns");
        auto rec = num(si, "recovery_time_ns");
        h << "<td class=\"num\">" << esc(tti ? dur(int64_t(*tti)) : "–") << "</td><td class=\"num" << (rec ? "" : " fail")
          << "\">" << esc(rec ? dur(int64_t(*rec)) : "not recovered") << "</td><td class=\"num\">"
          << fmt("%.2f%%", num(si, "loss_pct").value_or(0)) << "</td><td class=\"num\">" << esc(dur(i64(si, "stall_ns")))
          << "</td><td class=\"num\">" << esc(rateText(num(si, "min_Bps"))) << "</td>";
      } else {
        h << "<td>–</td><td>–</td><td>–</td><td>–</td><td>–</td>";
      }
      h << "<td class=\"num\">"
        << (wi.is_object() ? esc(dur(i64(wi, "p50_ns")) + " / " + dur(i64(wi, "p99_ns")) + " / " + dur(i64(wi, "max_ns")))
                           : "–")
        << "</td></tr>\n";
    }
    h << "</table>\n";

    h << "<h3>Faults (times from the trial start)</h3>\n<table class=\"faults\"><tr><th>step</th><th>kind</th><th>node</th>"
         "<th>scheduled</th><th>applied</th><th>reverted</th><th>parameters</th></tr>\n";
    for (const auto& f : faults) {
      if (i64(f, "trial", -1) != idx) continue;
      std::string params = formatParams(str(f, "kind"), f["params"]);
      h << "<tr><td>" << esc(str(f, "step")) << "</td><td>" << esc(str(f, "kind")) << "</td><td>" << esc(str(f, "node"))
        << "</td><td class=\"num\">" << rel(i64(f, "scheduled_ns") - t0) << "</td><td class=\"num\">"
        << (f["applied_ns"].is_number() ? rel(f["applied_ns"].get<int64_t>() - t0) : "<span class=\"fail\">" + esc(str(f, "error", "not applied")) + "</span>")
        << "</td><td class=\"num\">" << (f["reverted_ns"].is_number() ? rel(f["reverted_ns"].get<int64_t>() - t0) : "–")
        << "</td><td>" << esc(params) << "</td></tr>\n";
    }
    h << "</table>\n";

    // Counter deltas: one row per node, one column per counter any node reported.
    std::vector<std::string> names;
    for (const auto& c : doc["counters"])
      if (i64(c, "trial", -1) == idx)
        for (auto it = c["delta"].begin(); it != c["delta"].end(); ++it)
          if (*it != 0 && std::find(names.begin(), names.end(), it.key()) == names.end())
            names.push_back(it.key());
    if (!names.empty()) {
      h << "<h3>Counter deltas over the trial (the counters that moved)</h3>\n<table class=\"counters\"><tr><th>node</th>";
      for (const auto& n : names) h << "<th>" << esc(n) << "</th>";
      h << "</tr>\n";
      for (const auto& c : doc["counters"]) {
        if (i64(c, "trial", -1) != idx) continue;
        h << "<tr><td>" << esc(str(c, "node")) << "</td>";
        for (const auto& n : names)
          h << "<td class=\"num\">" << (c["delta"].contains(n) ? c["delta"][n].dump() : "–") << "</td>";
        h << "</tr>\n";
      }
      h << "</table>\n";
    }
    h << "</section>\n";
  }

  h << targetsHtml(doc);
  for (const auto& g : doc.value("repeatability", json::array())) {
    h << "<h2>Repeatability: " << esc(str(g, "group")) << " over " << g.value("trials", 0)
      << " trials</h2>\n<table class=\"repeatability\"><tr><th>metric</th><th>per trial</th><th>mean</th>"
         "<th>stddev</th><th>CV</th><th>BMWG name</th></tr>\n";
    for (const auto& m : g["metrics"]) {
      auto info = findMetric(str(m, "metric"));
      MetricUnit unit = info ? info->unit : MetricUnit::number;
      std::string values;
      for (const auto& v : m["values"]) values += (values.empty() ? "" : " · ") + formatMetric(unit, v.get<double>());
      double cv = m["cv_pct"].is_number() ? m["cv_pct"].get<double>() : -1;
      h << "<tr><td>" << esc(str(m, "metric")) << "</td><td>" << esc(values) << "</td><td class=\"num\">"
        << esc(formatMetric(unit, m["mean"].get<double>())) << "</td><td class=\"num\">"
        << esc(formatMetric(unit, m["stddev"].get<double>())) << "</td><td class=\"num" << (cv >= 5 ? " bad" : "")
        << "\">" << (cv >= 0 ? esc(fmt("%.1f%%", cv)) : "-") << "</td><td>" << esc(str(m, "bmwg_name")) << "</td></tr>\n";
    }
    h << "</table>\n";
    for (const auto& v : g.value("verdicts", json::array()))
      h << "<div class=\"" << (v.value("passed", false) ? "muted" : "problem") << " cv-verdict\">"
        << (v.value("passed", false) ? "✓ " : "✗ ")
        << esc(str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text") + ": " + str(v, "measured_text") +
               " (playbook line " + std::to_string(v.value("line", 0)) + ")")
        << "</div>\n";
  }

  h << detectionHtml(doc);
  if (!doc["clocks"].empty()) {
    h << "<h2>Clocks</h2>\n<p class=\"muted\">Agent times are mapped onto the controller's timeline with these offsets; "
         "fault times are exact to within the uncertainty.</p>\n<table class=\"clocks\"><tr><th>node</th><th>offset</th>"
         "<th>± uncertainty</th><th>RTT</th></tr>\n";
    for (const auto& c : doc["clocks"])
      h << "<tr><td>" << esc(str(c, "node")) << "</td><td class=\"num\">" << esc(dur(i64(c, "offset_ns")))
        << "</td><td class=\"num\">" << esc(dur(i64(c, "uncertainty_ns"))) << "</td><td class=\"num\">"
        << esc(dur(i64(c, "rtt_ns"))) << "</td></tr>\n";
    h << "</table>\n";
  }
  const json& inv = doc.value("inventory", json::object());
  if (inv.contains("nodes") && !inv["nodes"].empty()) {
    h << "<h2>Inventory</h2>\n<p class=\"muted\">" << esc(str(inv, "path")) << "</p>\n<table class=\"inventory\"><tr><th>node</th>"
         "<th>address</th><th>roles</th><th>data interfaces</th></tr>\n";
    for (const auto& n : inv["nodes"]) {
      std::string roles, ifs;
      for (const auto& r : n.value("roles", json::array())) roles += (roles.empty() ? "" : ", ") + r.get<std::string>();
      for (const auto& r : n.value("data_interfaces", json::array())) ifs += (ifs.empty() ? "" : ", ") + r.get<std::string>();
      h << "<tr><td>" << esc(str(n, "name")) << "</td><td>" << esc(str(n, "address")) << "</td><td>" << esc(roles)
        << "</td><td>" << esc(ifs) << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  h << "<details><summary>Playbook " << esc(str(pb, "path")) << "</summary><pre>" << esc(str(pb, "text"))
    << "</pre></details>\n";
  h << "<p class=\"muted\">Generated by rdmachaos " << esc(str(doc.value("generator", json::object()), "version"))
    << " from a result document (" << kResultSchema << "). Definitions: docs/scoring.md.</p>\n</main>\n</body></html>\n";
  return h.str();
}

std::string renderOverlayHtml(const json& baseDoc, const json& resultDoc, const std::string& baseName,
                              const std::string& resultName, const std::string& verdict, const std::string& summary) {
  const json& pb = resultDoc["playbook"];
  const json& series = resultDoc["series"];
  const int64_t binNs = series["bin_ns"].get<int64_t>();
  // A golden baseline keeps values, not series: its page has the result's series alone.
  const bool baseSeries = baseDoc.contains("series") && baseDoc["series"].is_object() &&
                          baseDoc["series"].value("bin_ns", int64_t(0)) > 0 && baseDoc.contains("trials") &&
                          baseDoc["trials"].is_array();
  const int64_t baseBinNs = baseSeries ? baseDoc["series"]["bin_ns"].get<int64_t>() : binNs;
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>rdmachaos compare: "
    << esc(str(pb, "name")) << " — " << esc(verdict) << "</title>\n<style>" << kCss << "</style></head>\n<body>\n";
  h << "<header><h1>compare: " << esc(str(pb, "name")) << " <span class=\"badge "
    << (verdict == "passed" ? "passed" : "failed") << "\" id=\"verdict\">" << esc(verdict == "passed" ? "PASSED" : "FAILED")
    << "</span></h1>\n<div class=\"muted\">result " << esc(resultName) << " against baseline " << esc(baseName)
    << "</div></header>\n<main>\n<pre id=\"summary\">" << esc(summary) << "</pre>\n";
  if (!baseSeries)
    h << "<div class=\"muted\" id=\"no-overlay\">The baseline holds no series (a golden baseline keeps each "
         "value's median and range): the charts show the result alone.</div>\n";
  if (baseSeries && baseBinNs != binNs)
    h << "<div class=\"muted\">The two runs have different bins (" << esc(dur(baseBinNs)) << " and " << esc(dur(binNs))
      << "): the baseline is drawn at the result's bin width.</div>\n";
  // The baseline's bins of its trial LABEL, from that trial's start, at the result's bin width.
  auto baseBins = [&](const std::string& label, const std::string& node) -> std::vector<double> {
    if (!baseSeries) return {};
    for (const auto& bt : baseDoc["trials"]) {
      if (str(bt, "label") != label) continue;
      const json& arr = node.empty() ? baseDoc["series"].value("job", json::array())
                                     : baseDoc["series"].value("nodes", json::object()).value(node, json::array());
      auto raw = slice(arr, baseBinNs, i64(bt, "start_ns"), i64(bt, "end_ns"));
      if (baseBinNs == binNs) return raw;
      std::vector<double> out;
      const double per = double(binNs) / double(baseBinNs);
      for (double at = 0; at + per <= double(raw.size()) + 1e-9; at += per) {
        double sum = 0;
        for (size_t k = size_t(at); k < size_t(at + per) && k < raw.size(); k++) sum += raw[k];
        out.push_back(sum);
      }
      return out;
    }
    return {};
  };
  for (const auto& t : resultDoc["trials"]) {
    const int idx = int(i64(t, "index"));
    const std::string label = str(t, "label");
    const int64_t t0 = i64(t, "start_ns"), t1 = i64(t, "end_ns");
    h << "<section class=\"trial\" id=\"trial-" << idx << "\">\n<h2>Trial " << idx + 1 << ": " << esc(label) << "</h2>\n";
    ChartInput base;
    base.binNs = binNs;
    base.t0 = t0;
    base.t1 = t1;
    base.seriesName = "result";
    base.overlayName = "baseline";
    for (const auto& ph : t.value("phases", json::array())) base.phases.push_back({str(ph, "name"), i64(ph, "start_ns")});
    {
      ChartInput c = base;
      c.id = "overlay-" + std::to_string(idx) + "-job";
      c.title = "Job throughput, result and baseline, time from trial start";
      c.bytes = slice(series["job"], binNs, t0, t1);
      c.overlay = baseBins(label, "");
      h << chart(c);
    }
    for (const auto& n : t.value("nodes", json::array())) {
      const std::string node = str(n, "scope");
      ChartInput c = base;
      c.id = "overlay-" + std::to_string(idx) + "-" + node;
      c.title = node;
      c.height = 150;
      c.bytes = slice(series["nodes"].value(node, json::array()), binNs, t0, t1);
      c.overlay = baseBins(label, node);
      h << chart(c);
    }
    h << "</section>\n";
  }
  h << "</main>\n</body></html>\n";
  return h.str();
}

}  // namespace rc::controller
