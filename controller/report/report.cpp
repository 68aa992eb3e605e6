// The result document: made from a run and its scores, checked and loaded (docs/result-schema.md).
// Its renderings: report_text.cpp (text, JUnit) and report_html.cpp (the HTML page).
#include "controller/report/report.hpp"
#include "controller/report/report_detection.hpp"
#include "controller/report/report_targets.hpp"

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
#include "controller/report/report_util.hpp"

namespace rc::controller {
using namespace report_util;

std::string xmlEscape(std::string_view s) { return esc(s); }

namespace {

json expectationsJson(const std::vector<Expectation>& es) {
  json ex = json::array();
  for (const auto& e : es) {
    ex.push_back({{"metric", e.metric}, {"scope", e.scope}, {"op", toString(e.op)}, {"bound", e.bound},
                  {"bound_text", e.boundText}});
    // Judged once over the repeated trials (under repeatability), not in each trial.
    if (!e.stat.empty()) ex.back()["stat"] = e.stat;
  }
  return ex;
}

json playbookJson(const Playbook& pb) {
  json scens = json::array();
  for (const auto& sc : pb.scenarios)
    scens.push_back({{"name", sc.name}, {"duration_ns", sc.durationNs()}, {"expectations", expectationsJson(sc.expectations)},
                     {"requirements", expectationsJson(sc.requirements)}});
  return {{"name", pb.name},
          {"description", pb.description},
          {"path", pb.path},
          {"seed", pb.seed},
          {"repeat", pb.repeat},
          {"text", pb.text},
          {"workload", {{"kind", pb.workload.kind->name}, {"size_bytes", pb.workload.sizeBytes},
                        {"streams", pb.workload.streams}, {"nodes", pb.workload.nodes.describe()},
                        {"transport", pb.workload.transport}}},
          {"scoring", {{"bin_ns", pb.scoring.binNs}, {"warmup_ns", pb.scoring.warmupNs},
                       {"epsilon", pb.scoring.epsilon}, {"hold_ns", pb.scoring.holdNs},
                       {"smooth_ns", pb.scoring.smoothNs}, {"stall_fraction", pb.scoring.stallFraction}}},
          {"guardrails", {{"min_baseline_Bps", pb.guardrails.minBaselineBytesPerSec},
                          {"abort_on_agent_loss", pb.guardrails.abortOnAgentLoss},
                          {"max_stall_ns", pb.guardrails.maxStallNs}}},
          {"cost", {{"gpus", pb.cost.gpus}, {"price_per_gpu_hour", pb.cost.pricePerGpuHour},
                    {"currency", pb.cost.currency}, {"incidents_per_day", pb.cost.incidentsPerDay},
                    {"days", pb.cost.days}}},
          {"scenarios", scens}};
}

// Dense series from t = 0 over what was run: easy to plot and to re-score elsewhere.
json seriesJson(const RunResult& run, const Playbook& pb) {
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
  return series;
}

json faultsJson(const RunResult& run) {
  json faults = json::array();
  for (const auto& f : run.faults) {
    json events = json::array();
    for (const auto& e : f.events) events.push_back({{"t_ns", e.tNs}, {"what", e.what}, {"detail", e.detail}});
    faults.push_back({{"trial", f.trial}, {"step", f.step}, {"node", f.node}, {"kind", f.kind}, {"role", f.role},
                      {"params", f.params}, {"scheduled_ns", f.scheduledNs}, {"applied_ns", optInt(f.appliedNs)},
                      {"reverted_ns", optInt(f.revertedNs)}, {"error", f.error}, {"events", events}});
  }
  return faults;
}

json countersJson(const RunResult& run) {
  json counters = json::array();
  for (const auto& c : run.counters) {
    json delta = json::object();
    for (const auto& [k, a] : c.after)
      if (auto b = c.before.find(k); b != c.before.end()) delta[k] = int64_t(a) - int64_t(b->second);
    counters.push_back({{"trial", c.trial}, {"node", c.node}, {"before", c.before}, {"after", c.after}, {"delta", delta}});
  }
  return counters;
}

// Fabric evidence: events, and per (port, queue) series of the cumulative counters.
json fabricJson(const FabricEvidence& f) {
  json fabric = {{"source", f.source}, {"error", f.error}};
  json fevents = json::array();
  for (const auto& e : f.events) {
    fevents.push_back({{"t_ns", e.tNs}, {"what", e.what}, {"port", e.port}, {"priority", e.priority}});
    if (e.l4Dst >= 0) fevents.back()["l4_dst"] = e.l4Dst;
  }
  fabric["events"] = fevents;
  json fseries = json::object();
  for (const auto& x : f.samples) {
    json& q = fseries[x.port + "/" + std::to_string(x.queue)];
    if (q.is_null())
      q = {{"port", x.port},           {"queue", x.queue},          {"t_ns", json::array()},
           {"pfc_rx", json::array()},  {"pfc_tx", json::array()},   {"ecn_marked", json::array()},
           {"drops", json::array()},   {"paused_ns", json::array()}, {"xoff_ns", json::array()},
           {"depth_bytes", json::array()}};
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
  return fabric;
}

// The nodes' own NIC and RDMA counters (sampled by the agents), cumulative, per node.
json nicJson(const RunResult& run) {
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
  return nic;
}

json verdictJson(const Verdict& v) {
  return {{"metric", v.metric},   {"scope", v.scope},
          {"op", v.op},           {"bound", v.bound},
          {"bound_text", v.boundText}, {"measured", optNum(v.measured)},
          {"measured_text", v.measuredText}, {"passed", v.passed},
          {"line", v.pos.line},   {"column", v.pos.column}};
}

json verdictsJson(const std::vector<Verdict>& vs) {
  json out = json::array();
  for (const auto& v : vs) out.push_back(verdictJson(v));
  return out;
}

json deltaJson(const FabricDelta& d) {
  return {{"port", d.port},       {"queue", d.queue},         {"pfc_rx", d.pfcRx},
          {"pfc_tx", d.pfcTx},    {"ecn_marked", d.ecnMarked}, {"drops", d.drops},
          {"paused_ns", d.pausedNs}, {"xoff_ns", d.xoffNs},   {"max_depth_bytes", d.maxDepthBytes},
          {"storm_gaps", d.stormGaps}};
}

// Per fault window (applied to reverted), what the fabric saw while each fault was on.
json faultWindowsJson(const RunResult& run, const TrialScore& ts, const Trial& t) {
  json fw = json::array();
  if (ts.fabric.source.empty()) return fw;
  for (const auto& f : run.faults) {
    if (f.trial != ts.trial || !f.appliedNs) continue;
    json ds = json::array();
    for (const auto& d : fabricDeltas(run.fabric, *f.appliedNs, f.revertedNs.value_or(t.endNs))) ds.push_back(deltaJson(d));
    fw.push_back({{"step", f.step}, {"node", f.node}, {"kind", f.kind}, {"from_ns", *f.appliedNs},
                  {"to_ns", f.revertedNs.value_or(t.endNs)}, {"deltas", ds}});
    // Ground truth for traffic a fault puts on the wire (an incast into its receiver).
    if (auto span = faultWire(run, f, t.endNs))
      fw.back()["wire"] = {{"port", f.node}, {"l4_dst", f.params.value("port", 0)}, {"first_ns", span->firstNs},
                           {"last_ns", optInt(span->lastNs)}, {"episodes", span->episodes}};
  }
  return fw;
}

json watchdogJson(const std::vector<WatchdogEpisode>& eps) {
  json wd = json::array();
  auto since = [](std::optional<int64_t> a, std::optional<int64_t> b) -> json { return a && b ? json(*a - *b) : json(); };
  for (const auto& ep : eps)
    wd.push_back({{"port", ep.port},
                  {"priority", ep.priority},
                  {"storm_start_ns", ep.stormStartNs},
                  {"storm_end_ns", optInt(ep.stormEndNs)},
                  {"detect_ns", optInt(ep.detectNs)},
                  {"restore_ns", optInt(ep.restoreNs)},
                  {"data_plane_moving_ns", optInt(ep.dataPlaneMovingNs)},
                  {"detect_time_ns", since(ep.detectNs, ep.stormStartNs)},
                  {"restore_time_ns", since(ep.restoreNs, ep.stormEndNs)},
                  {"data_plane_detect_time_ns", since(ep.dataPlaneMovingNs, ep.stormStartNs)},
                  {"data_plane_delivered_ns", optInt(ep.dataPlaneDeliveredNs)},
                  {"data_plane_restore_time_ns", since(ep.dataPlaneDeliveredNs, ep.stormEndNs)}});
  return wd;
}

// result.json's "nccl_tests": the job's own table (GB/s as nccl-tests prints them, 10^9 B/s).
json ncclTestsJson(const RunResult::NcclTests& n) {
  json out = {{"file", n.file}};
  if (!n.report) {
    out["error"] = n.error;
    return out;
  }
  const auto& r = *n.report;
  auto half = [](const workload::NcclTestsHalf& h) {
    json j = {{"time_us", h.timeUs}, {"algbw_GBps", h.algbwGBps}, {"busbw_GBps", h.busbwGBps}};
    j["wrong"] = h.wrong ? json(*h.wrong) : json(nullptr);
    if (h.maxError) j["max_error"] = *h.maxError;
    return j;
  };
  json rows = json::array();
  for (const auto& row : r.rows)
    rows.push_back({{"bytes", row.bytes}, {"count", row.count}, {"type", row.type}, {"redop", row.redop},
                    {"root", row.root}, {"out_of_place", half(row.outOfPlace)}, {"in_place", half(row.inPlace)}});
  out["rows"] = rows;
  out["devices"] = r.devices;
  out["iters"] = r.iters;
  out["validation"] = r.validation;
  out["complete"] = r.complete();
  out["avg_busbw_GBps"] = r.avgBusbwGBps ? json(*r.avgBusbwGBps) : json(nullptr);
  out["out_of_bounds"] = r.outOfBounds ? json(*r.outOfBounds) : json(nullptr);
  out["wrong"] = r.wrongTotal();
  out["failures"] = r.failures;
  out["problems"] = r.problems();
  return out;
}

json trialJson(const RunResult& run, const json& plannedTrials, const TrialScore& ts) {
  const Trial& t = run.plan.trials.at(size_t(ts.trial));
  json jt = plannedTrials[size_t(ts.trial)];
  jt.erase("faults");  // the planned faults are in plan; the real ones in faults
  jt["completed"] = ts.completed;
  jt["fault_start_ns"] = optInt(ts.faultStartNs);
  jt["fault_end_ns"] = optInt(ts.faultEndNs);
  jt["problems"] = ts.problems;
  if (!ts.jobNotes.empty()) jt["job_notes"] = ts.jobNotes;
  jt["job"] = scopeJson(ts.job);
  json ns = json::array();
  for (const auto& n : ts.nodes) ns.push_back(scopeJson(n));
  jt["nodes"] = ns;
  jt["verdicts"] = verdictsJson(ts.verdicts);
  jt["condition"] = {{"reached", ts.conditionReached}, {"checks", verdictsJson(ts.conditions)}};
  json fd = json::array();
  for (const auto& d : ts.fabric.trial) fd.push_back(deltaJson(d));
  jt["fabric"] = {{"source", ts.fabric.source},
                  {"deltas", fd},
                  {"fault_windows", faultWindowsJson(run, ts, t)},
                  {"watchdog", watchdogJson(ts.fabric.watchdog)}};
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
  return jt;
}

// Repeatability (computed by the scorer): trials of one scenario side by side, per job metric
// mean, sample standard deviation and CV, and the stat = "median" and "cv" expectations' verdicts.
json repeatabilityJson(const Scores& scores) {
  json rep = json::array();
  for (const auto& g : scores.repeatability) {
    json metrics = json::array();
    for (const auto& m : g.metrics) {
      // The median of the values present (a stat = "median" verdict also counts trials without one).
      std::vector<double> sorted = m.values;
      std::sort(sorted.begin(), sorted.end());
      const size_t n = sorted.size();
      const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
      metrics.push_back({{"metric", m.metric}, {"bmwg_name", m.bmwg}, {"n", n}, {"values", m.values},
                         {"mean", m.mean}, {"median", median}, {"stddev", m.stddev},
                         {"cv_pct", m.cvPct ? json(*m.cvPct) : json()}});
    }
    rep.push_back({{"group", g.key}, {"trials", g.trials}, {"metrics", metrics}, {"verdicts", verdictsJson(g.verdicts)}});
  }
  return rep;
}

}  // namespace

json makeResultDocument(const RunResult& run, const Playbook& pb, const Scores& scores) {
  json doc;
  doc["schema"] = kResultSchema;
  doc["generator"] = {{"tool", "rdmachaos"}, {"version", RDMACHAOS_VERSION}};
  doc["playbook"] = playbookJson(pb);
  json nodes = json::array();
  for (const auto& n : run.inventoryNodes)
    nodes.push_back({{"name", n.name}, {"address", n.address}, {"port", n.port}, {"roles", n.roles},
                     {"data_interfaces", n.dataInterfaces}});
  doc["inventory"] = {{"path", run.inventoryPath}, {"nodes", nodes}};
  doc["run"] = {{"started_unix_ns", run.startedUnixNs},
                {"ended_ns", run.endedNs},
                {"planned_ns", run.plan.durationNs},
                {"abort_reason", run.abortReason}};
  json clocks = json::array();
  for (const auto& c : run.clocks)
    clocks.push_back({{"node", c.node}, {"offset_ns", c.offsetNs}, {"uncertainty_ns", c.uncertaintyNs}, {"rtt_ns", c.rttNs}});
  doc["clocks"] = clocks;
  doc["plan"] = toJson(run.plan);
  doc["series"] = seriesJson(run, pb);
  json iters = json::array();
  for (const auto& r : run.iterations)
    iters.push_back({{"node", r.node}, {"iteration", r.iteration}, {"start_ns", r.startNs}, {"end_ns", r.endNs}});
  doc["iterations"] = iters;
  doc["faults"] = faultsJson(run);
  if (!run.packets.empty()) doc["packet_faults"] = packetFaultsJson(run.packets);
  if (run.ncclTests) doc["nccl_tests"] = ncclTestsJson(*run.ncclTests);
  doc["counters"] = countersJson(run);
  doc["fabric"] = fabricJson(run.fabric);
  doc["nic"] = nicJson(run);
  json trials = json::array();
  for (const auto& ts : scores.trials) trials.push_back(trialJson(run, doc["plan"]["trials"], ts));
  doc["trials"] = trials;
  if (json targets = targetTable(trials); !targets.empty()) doc["targets"] = targets;
  doc["repeatability"] = repeatabilityJson(scores);
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

}  // namespace rc::controller
