// The result document as a self-contained HTML page with SVG charts, and the overlay of two runs.
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
#include "controller/report/report_charts.hpp"
#include "controller/report/report_util.hpp"

namespace rc::controller {
using namespace report_util;
using namespace report_charts;

namespace {

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

namespace {

// One trial of the page: its document, index and span, and the faults that shade its charts.
struct TrialView {
  const json& doc;
  const json& t;
  int idx = 0;
  int64_t t0 = 0, t1 = 0, binNs = 1;
  double epsilon = 0.05;

  // This trial's faults as shades of a chart of NODE ("" = the job: every fault at full
  // strength; a node's chart: its own faults strong, the others' faint).
  std::vector<Shade> shades(const std::string& node) const {
    std::vector<Shade> out;
    for (const auto& f : doc["faults"]) {
      if (i64(f, "trial", -1) != idx || !f["applied_ns"].is_number()) continue;
      int64_t a = f["applied_ns"].get<int64_t>();
      int64_t r = f["reverted_ns"].is_number() ? f["reverted_ns"].get<int64_t>() : t1;
      out.push_back({a, r,
                     str(f, "kind") + " on " + str(f, "node") + " (step " + str(f, "step") + "): applied " + rel(a - t0) +
                         ", reverted " + rel(r - t0),
                     node.empty() || str(f, "node") == node});
    }
    return out;
  }
};

// The page's head: the playbook, its verdict and the run's facts, and the charts' legend.
void headerHtml(std::ostream& h, const json& doc) {
  const json& pb = doc["playbook"];
  const json& oc = doc["outcome"];
  const json& series = doc["series"];
  const int64_t binNs = series["bin_ns"].get<int64_t>();
  const std::string verdict = str(oc, "verdict", "error");
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
}

// A trial's title, its problems and conditions, and its cards (baseline, impact, cost).
void trialHeadHtml(std::ostream& h, const TrialView& view) {
  const json& t = view.t;
  const json& pb = view.doc["playbook"];
  const json& job = t["job"];
  const json& im = job.value("impact", json());
  const int idx = view.idx;
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
  for (const auto& p : t.value("job_notes", json::array())) h << "<div class=\"muted\">" << esc(p.get<std::string>()) << "</div>\n";
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
}

// The job's throughput chart and each node's, with baseline, threshold, recovery and alerts.
void trialChartsHtml(std::ostream& h, const TrialView& view) {
  const json& t = view.t;
  const json& doc = view.doc;
  const json& series = doc["series"];
  const json& job = t["job"];
  const json& im = job.value("impact", json());
  const int idx = view.idx;
  const int64_t binNs = view.binNs, t0 = view.t0, t1 = view.t1;
  const double epsilon = view.epsilon;
  ChartInput base;
  base.binNs = binNs;
  base.t0 = t0;
  base.t1 = t1;
  base.epsilon = epsilon;
  for (const auto& ph : t.value("phases", json::array())) base.phases.push_back({str(ph, "name"), i64(ph, "start_ns")});
  if (im.is_object()) {
    base.faultEnd = num(t, "fault_end_ns") ? std::optional<int64_t>(i64(t, "fault_end_ns")) : std::nullopt;
  }
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
    c.shades = view.shades("");
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
    c.shades = view.shades(node);
    marks(c, n);
    h << chart(c);
  }
}

// The nodes' NIC counters beside the throughput: pause frames, ECN-marked packets and CNPs
// per second for every node whose counters moved in this trial.
void nicChartHtml(std::ostream& h, const TrialView& view) {
  const json& doc = view.doc;
  const int idx = view.idx;
  const int64_t t0 = view.t0, t1 = view.t1;
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
                        t0, t1, view.shades(""), lines);
    }
  }
}

// The fabric's own view beside the throughput: pause frames and ECN marks per second for
// every switch queue that moved in this trial, and the deltas per queue.
void fabricHtml(std::ostream& h, const TrialView& view) {
  const json& t = view.t;
  const json& doc = view.doc;
  const int idx = view.idx;
  const int64_t t0 = view.t0, t1 = view.t1;
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
                      t0, t1, view.shades(""), lines);
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
}

// The nodes' NIC and RDMA counters per fault window, beside the switch's view: every
// counter that moved, the evidence (errors, retries, pause, ECN, CNPs, drops) first.
void nicWindowsHtml(std::ostream& h, const TrialView& view) {
  const json& t = view.t;
  const int64_t t0 = view.t0;
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
}

// The trial's expectations, each with its playbook line.
void verdictsHtml(std::ostream& h, const json& t) {
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
}

// Every scope's scores side by side: the job, then each node.
void scopesHtml(std::ostream& h, const json& t) {
  const json& job = t["job"];
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
}

// The trial's packet faults: counts, the capture (a file beside the report) and the oracle.
void packetHtml(std::ostream& h, const TrialView& view) {
  if (!view.doc.contains("packet_faults")) return;
  bool head = false;
  for (const auto& p : view.doc["packet_faults"]) {
    if (p.value("trial", -1) != view.idx) continue;
    if (!head) h << "<h3>Packet faults</h3>\n";
    head = true;
    h << "<p>" << esc(str(p, "step")) << " on " << esc(str(p, "node")) << ": " << esc(str(p, "action"))
      << " acted on " << p.value("acted", uint64_t(0)) << " of " << p.value("matched", uint64_t(0))
      << " matching frames";
    if (p.contains("capture") && p["capture"].is_string())
      h << "; capture <a href=\"" << esc(str(p, "capture")) << "\">" << esc(str(p, "capture")) << "</a>";
    if (p.contains("capture_error")) h << " (" << esc(str(p, "capture_error")) << ")";
    h << "</p>\n";
    if (!str(p, "oracle_text").empty()) h << "<pre class=\"oracle\">" << esc(str(p, "oracle_text")) << "</pre>\n";
  }
}

// The trial's faults, times from the trial's start.
void faultsHtml(std::ostream& h, const TrialView& view) {
  const int idx = view.idx;
  const int64_t t0 = view.t0;
  const json& faults = view.doc["faults"];
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
}

// Counter deltas: one row per node, one column per counter any node reported.
void countersHtml(std::ostream& h, const TrialView& view) {
  const json& doc = view.doc;
  const int idx = view.idx;
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
}

// Repeatability: every trial of a scenario side by side, with mean, stddev, CV and verdicts.
void repeatabilityHtml(std::ostream& h, const json& doc) {
  for (const auto& g : doc.value("repeatability", json::array())) {
    h << "<h2>Repeatability: " << esc(str(g, "group")) << " over " << g.value("trials", 0)
      << " trials</h2>\n<table class=\"repeatability\"><tr><th>metric</th><th>per trial</th><th>mean</th>"
         "<th>median</th><th>stddev</th><th>CV</th><th>BMWG name</th></tr>\n";
    for (const auto& m : g["metrics"]) {
      auto info = findMetric(str(m, "metric"));
      MetricUnit unit = info ? info->unit : MetricUnit::number;
      std::string values;
      for (const auto& v : m["values"]) values += (values.empty() ? "" : " · ") + formatMetric(unit, v.get<double>());
      double cv = m["cv_pct"].is_number() ? m["cv_pct"].get<double>() : -1;
      h << "<tr><td>" << esc(str(m, "metric")) << "</td><td>" << esc(values) << "</td><td class=\"num\">"
        << esc(formatMetric(unit, m["mean"].get<double>())) << "</td><td class=\"num\">"
        << (m.contains("median") ? esc(formatMetric(unit, m["median"].get<double>())) : "-") << "</td><td class=\"num\">"
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
}

// The agents' clock offsets, and the inventory the run used.
void clocksAndInventoryHtml(std::ostream& h, const json& doc) {
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
}

}  // namespace

// A parameter sweep's curve: goodput (bars to scale) and iteration times per value.
void sweepHtml(std::ostream& h, const json& doc) {
  auto curve = sweepCurve(doc);
  if (curve.empty()) return;
  double top = 0;
  for (const auto& p : curve) top = std::max({top, p.baseline.value_or(0), p.goodput.value_or(0)});
  auto f = [](MetricUnit u, const std::optional<double>& v) { return v ? formatMetric(u, *v) : std::string("-"); };
  h << "<section><h2>Sweep of " << esc(curve[0].param) << "</h2>\n<table class=\"sweep\"><tr><th>"
    << esc(curve[0].param) << "</th><th>goodput while the fault was on</th><th></th><th>baseline</th><th>loss</th>"
    << "<th>iteration p50</th><th>iteration p99</th><th>frames acted on</th></tr>\n";
  for (const auto& p : curve) {
    int width = top > 0 && p.goodput ? int(200 * *p.goodput / top) : 0;
    h << "<tr><td>" << esc(p.value) << "</td><td>" << f(MetricUnit::rate, p.goodput)
      << "</td><td><div style=\"background:#4a7;height:10px;width:" << width << "px\"></div></td><td>"
      << f(MetricUnit::rate, p.baseline) << "</td><td>" << f(MetricUnit::percent, p.lossPct) << "</td><td>"
      << f(MetricUnit::duration, p.p50) << "</td><td>" << f(MetricUnit::duration, p.p99) << "</td><td>"
      << (p.acted ? std::to_string(int64_t(*p.acted)) : "-") << "</td></tr>\n";
  }
  h << "</table></section>\n";
}

std::string renderHtml(const json& doc) {
  const json& pb = doc["playbook"];
  std::ostringstream h;
  headerHtml(h, doc);
  for (const auto& t : doc["trials"]) {
    TrialView view{doc, t};
    view.idx = int(i64(t, "index"));
    view.t0 = i64(t, "start_ns");
    view.t1 = i64(t, "end_ns");
    view.binNs = doc["series"]["bin_ns"].get<int64_t>();
    view.epsilon = pb.contains("scoring") ? pb["scoring"].value("epsilon", 0.05) : 0.05;
    trialHeadHtml(h, view);
    trialChartsHtml(h, view);
    nicChartHtml(h, view);
    fabricHtml(h, view);
    nicWindowsHtml(h, view);
    verdictsHtml(h, t);
    scopesHtml(h, t);
    faultsHtml(h, view);
    packetHtml(h, view);
    countersHtml(h, view);
    h << "</section>\n";
  }
  sweepHtml(h, doc);
  h << targetsHtml(doc);
  repeatabilityHtml(h, doc);
  h << detectionHtml(doc);
  clocksAndInventoryHtml(h, doc);
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
