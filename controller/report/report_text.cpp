// The result document as the terminal summary (`rdmachaos report`, the end of `run`).
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

// ---------------------------------------------------------------- text

namespace {

// One verdict's line: ok or FAIL, the expectation as written, what was measured.
void verdictLine(std::ostream& o, const json& v) {
  o << "  " << (v.value("passed", false) ? "ok   " : "FAIL ") << str(v, "metric") << " " << str(v, "op") << " "
    << str(v, "bound_text") << " (" << str(v, "scope") << "): " << str(v, "measured_text") << "\n";
}

// The trial's baseline, its own band, busbw and a noisy-baseline warning.
void baselineText(std::ostream& o, const json& t, const json& job) {
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
}

// The job's impact: threshold, time to impact, recovery, loss, stall; the cost extrapolated.
void impactText(std::ostream& o, const json& pb, const json& job) {
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
}

// Each node's NIC counters (pause, ECN, CNPs) that grew over the trial.
void nicTotalsText(std::ostream& o, const json& doc, const json& t) {
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
}

// The fabric's evidence: PFC, ECN, drops, storm quality, pause spread, the switch's load, the
// watchdog's episodes, and the wire's ground truth for traffic a fault put on it.
void fabricText(std::ostream& o, const json& t, const json& job) {
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
}

// Per fault window, each node's RDMA counters and the NIC's evidence (pause, ECN, errors,
// drops) that moved; the rest (byte and packet counts of net.* and ethtool) are counted only:
// every moved counter is in result.json.
void nicWindowsText(std::ostream& o, const json& t) {
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
}

// Problems, conditions and verdicts of one trial.
void verdictsText(std::ostream& o, const json& t) {
  for (const auto& p : t["problems"]) o << "  ERROR " << p.get<std::string>() << "\n";
  for (const auto& p : t.value("job_notes", json::array())) o << "  " << p.get<std::string>() << "\n";
  const json cond = t.value("condition", json::object());
  for (const auto& c : cond.value("checks", json::array()))
    o << "  " << (c.value("passed", false) ? "met  " : "NOT  ") << "condition " << str(c, "metric") << " "
      << str(c, "op") << " " << str(c, "bound_text") << " (" << str(c, "scope") << "): " << str(c, "measured_text")
      << "\n";
  if (!cond.value("reached", true))
    o << "  CONDITION NOT REACHED: the scenario did not happen, so its expectations are not scored\n";
  for (const auto& v : t["verdicts"]) verdictLine(o, v);
}

void repeatabilityText(std::ostream& o, const json& doc) {
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
      o << "  " << name << " " << values << "  mean " << formatMetric(unit, m["mean"].get<double>())
        << (m.contains("median") ? ", median " + formatMetric(unit, m["median"].get<double>()) : "") << ", sd " << formatMetric(unit, m["stddev"].get<double>())
        << ", CV " << cv << (str(m, "bmwg_name").empty() ? "" : "  [BMWG: " + str(m, "bmwg_name") + "]") << "\n";
    }
    for (const auto& v : g.value("verdicts", json::array())) verdictLine(o, v);
  }
}

}  // namespace

// The trial's packet faults: what each acted on, its capture, and the go-back-N oracle.
static void packetText(std::ostream& o, const json& doc, const json& t) {
  if (!doc.contains("packet_faults")) return;
  for (const auto& p : doc["packet_faults"]) {
    if (p.value("trial", -1) != t.value("index", -2)) continue;
    o << "  packet fault " << str(p, "step") << " on " << str(p, "node") << ": " << str(p, "action") << " acted on "
      << p.value("acted", uint64_t(0)) << " of " << p.value("matched", uint64_t(0)) << " matching frames";
    if (p.contains("capture") && p["capture"].is_string()) o << "; capture " << str(p, "capture");
    o << "\n";
    if (p.contains("capture_error")) o << "    (" << str(p, "capture_error") << ")\n";
    std::istringstream lines(str(p, "oracle_text"));
    for (std::string l; std::getline(lines, l);) o << "    " << l << "\n";
  }
}

// The job's own nccl-tests table, as nccl-tests reads: one line per size, then its summary.
static void ncclTestsText(std::ostream& o, const json& doc) {
  if (!doc.contains("nccl_tests")) return;
  const json& n = doc["nccl_tests"];
  o << "\nnccl-tests (" << str(n, "file") << ")\n";
  if (n.contains("error")) {
    o << "  not read: " << str(n, "error") << "\n";
    return;
  }
  char line[200];
  std::snprintf(line, sizeof line, "  %12s  %10s %8s %8s %7s  %10s %8s %8s %7s\n", "size (B)", "time (us)", "algbw",
                "busbw", "#wrong", "time (us)", "algbw", "busbw", "#wrong");
  o << "  out of place / in place, GB/s\n" << line;
  auto wrong = [](const json& h) { return h["wrong"].is_number() ? std::to_string(h["wrong"].get<uint64_t>()) : std::string("N/A"); };
  for (const auto& r : n.value("rows", json::array())) {
    const json &a = r["out_of_place"], &b = r["in_place"];
    std::snprintf(line, sizeof line, "  %12llu  %10.1f %8.2f %8.2f %7s  %10.1f %8.2f %8.2f %7s\n",
                  (unsigned long long)r["bytes"].get<uint64_t>(), a["time_us"].get<double>(), a["algbw_GBps"].get<double>(),
                  a["busbw_GBps"].get<double>(), wrong(a).c_str(), b["time_us"].get<double>(), b["algbw_GBps"].get<double>(),
                  b["busbw_GBps"].get<double>(), wrong(b).c_str());
    o << line;
  }
  if (n["avg_busbw_GBps"].is_number()) {
    std::snprintf(line, sizeof line, "  avg bus bandwidth %.3f GB/s; %llu wrong value(s)\n", n["avg_busbw_GBps"].get<double>(),
                  (unsigned long long)n.value("wrong", uint64_t(0)));
    o << line;
  }
  for (const auto& p : n.value("problems", json::array())) o << "  ERROR " << p.get<std::string>() << "\n";
}

std::string renderText(const json& doc) {
  std::ostringstream o;
  const json& pb = doc["playbook"];
  const json& oc = doc["outcome"];
  o << "playbook " << str(pb, "name") << ": " << str(oc, "verdict") << " (" << str(oc, "reason") << ")\n";
  for (const auto& t : doc["trials"]) {
    const json& job = t["job"];
    o << "\n" << str(t, "label") << "\n";
    baselineText(o, t, job);
    impactText(o, pb, job);
    nicTotalsText(o, doc, t);
    fabricText(o, t, job);
    packetText(o, doc, t);
    nicWindowsText(o, t);
    verdictsText(o, t);
  }
  // A parameter sweep's curve, one line per point.
  if (auto curve = sweepCurve(doc); !curve.empty()) {
    auto f = [](MetricUnit u, const std::optional<double>& v) { return v ? formatMetric(u, *v) : std::string("-"); };
    o << "\nsweep of " << curve[0].param << ": goodput while the fault was on and iteration times per value\n";
    for (const auto& p : curve) {
      std::string v = p.value;
      v.resize(std::max<size_t>(v.size(), 10), ' ');
      std::optional<double> share;
      if (p.goodput && p.baseline && *p.baseline > 0) share = 100 * *p.goodput / *p.baseline;
      o << "  " << v << " goodput " << f(MetricUnit::rate, p.goodput) << " (" << f(MetricUnit::percent, share)
        << " of its baseline " << f(MetricUnit::rate, p.baseline) << "; loss " << f(MetricUnit::percent, p.lossPct)
        << "), iteration p50 " << f(MetricUnit::duration, p.p50)
        << " p99 " << f(MetricUnit::duration, p.p99);
      if (p.acted) o << ", frames acted on " << int64_t(*p.acted);
      o << "\n";
    }
  }
  // The target sweep's table: what failed, by name, first.
  o << targetsText(doc);
  ncclTestsText(o, doc);
  repeatabilityText(o, doc);
  o << detectionText(doc);
  std::string abort = str(doc["run"], "abort_reason");
  if (!abort.empty()) o << "\nrun aborted: " << abort << "\n";
  return o.str();
}

// ---------------------------------------------------------------- HTML

}  // namespace rc::controller
