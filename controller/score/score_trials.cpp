// score(): a run's scores as named steps over each trial (grids, bands, impact, fabric,
// guardrails, expectations), then the repeats and one outcome. The measures each step uses
// (grids, baseline band, impact, switch load, fabric deltas) are in score.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/units.hpp"
#include "controller/score/score.hpp"

namespace rc::controller {
namespace {

// Baseline iterations are those that ended inside the baseline; window iterations are those
// that overlap the impact window, so the one stuck across an outage is counted.
enum class Pick { endedIn, overlaps };

bool picked(Pick how, int64_t start, int64_t end, int64_t from, int64_t to) {
  if (how == Pick::endedIn) return end > from && end <= to;
  return end > from && start < to;
}

std::vector<double> nodeIterations(const RunResult& run, const std::string& node, Pick how,
                                   int64_t from, int64_t to) {
  std::vector<double> d;
  for (const auto& r : run.iterations)
    if (r.node == node && picked(how, r.startNs, r.endNs, from, to)) d.push_back(double(r.endNs - r.startNs));
  return d;
}

// A collective iteration is as slow as its slowest rank: span from the first start to the last end.
std::vector<double> jobIterations(const RunResult& run, Pick how, int64_t from, int64_t to) {
  std::map<int64_t, std::pair<int64_t, int64_t>> span;
  for (const auto& r : run.iterations) {
    auto [it, fresh] = span.try_emplace(r.iteration, r.startNs, r.endNs);
    if (!fresh) {
      it->second.first = std::min(it->second.first, r.startNs);
      it->second.second = std::max(it->second.second, r.endNs);
    }
  }
  std::vector<double> d;
  for (const auto& [i, se] : span)
    if (picked(how, se.first, se.second, from, to)) d.push_back(double(se.second - se.first));
  return d;
}

bool compare(double v, Comparison op, double bound) {
  switch (op) {
    case Comparison::less: return v < bound;
    case Comparison::lessEqual: return v <= bound;
    case Comparison::greater: return v > bound;
    case Comparison::greaterEqual: return v >= bound;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------- score's steps

namespace {

// 1. Grids: per node, then the job as the bin-wise sum, over one trial.
struct TrialGrids {
  std::vector<Grid> nodes;
  Grid job;
};

TrialGrids trialGrids(const RunResult& run, int64_t binNs, const Trial& t) {
  TrialGrids g;
  for (const auto& name : run.plan.workloadNodes) {
    auto it = run.series.find(name);
    static const std::vector<Bin> none;
    g.nodes.push_back(toGrid(it == run.series.end() ? none : it->second, binNs, t.startNs, t.endNs));
  }
  g.job = sumGrids(g.nodes);
  g.job.startNs = t.startNs;
  g.job.binNs = binNs;
  return g;
}

// 2. Bands: each scope's band depth in every completed trial, so that a trial's band can be
// widened to the run's typical depth (widenBand).
using BandDepths = std::map<std::string, std::vector<std::pair<double, double>>>;

BandDepths bandDepths(const RunResult& run, const ScoringSettings& ss, int64_t binNs) {
  BandDepths depths;
  for (const auto& t : run.plan.trials) {
    if (run.endedNs < t.endNs) continue;
    TrialGrids g = trialGrids(run, binNs, t);
    auto add = [&](const std::string& scope, const Grid& grid) {
      auto b = baselineRate(grid, t.baselineFromNs, t.baselineToNs, ss.smoothNs);
      if (!b || *b <= 0) return;
      if (auto band = baselineBand(grid, t.baselineFromNs, t.baselineToNs, ss.smoothNs, ss.holdNs, *b))
        depths[scope].push_back(bandDepth(*band, *b));
    };
    for (size_t k = 0; k < g.nodes.size(); k++) add(run.plan.workloadNodes[k], g.nodes[k]);
    add("job", g.job);
  }
  return depths;
}

// The nodes' NIC and RDMA counters while each fault was on. Evidence rather than a score, so
// also for a trial cut short (what the NICs saw before an abort is the first question).
void addNicWindows(const RunResult& run, const Trial& t, TrialScore& ts) {
  if (run.nicSamples.empty()) return;
  for (const auto& f : run.faults) {
    if (f.trial != t.index || !f.appliedNs) continue;
    NicWindow win{f.step, f.node, f.kind, f.role, *f.appliedNs,
                  f.revertedNs.value_or(std::min(t.endNs, std::max(run.endedNs, *f.appliedNs))), {}};
    for (const auto& [node, samples] : run.nicSamples)
      if (auto d = nicDeltas(samples, win.fromNs, win.toNs); !d.empty()) win.nodes[node] = std::move(d);
    ts.nicWindows.push_back(std::move(win));
  }
}

// The trial's fault window: the first applied instant to the last revert; a fault that failed,
// never applied or has no revert instant is a problem of the trial.
void faultWindow(const RunResult& run, const Trial& t, TrialScore& ts) {
  for (const auto& f : run.faults) {
    if (f.trial != t.index) continue;
    const std::string what = f.kind + " on " + f.node + " (step " + f.step + ")";
    if (!f.error.empty()) {
      ts.problems.push_back(what + " failed: " + f.error);
      continue;
    }
    if (!f.appliedNs) {
      ts.problems.push_back(what + " was never applied");
      continue;
    }
    ts.faultStartNs = std::min(ts.faultStartNs.value_or(*f.appliedNs), *f.appliedNs);
    if (!f.revertedNs) ts.problems.push_back(what + " has no revert time: scored until the trial end");
    int64_t end = f.revertedNs.value_or(t.endNs);
    ts.faultEndNs = std::max(ts.faultEndNs.value_or(end), end);
  }
}

// 3. Impact: every scope's baseline, band, impact and iterations; the job's busbw and cost.
void scoreScopes(const RunResult& run, const Playbook& pb, const Trial& t, const TrialGrids& g, BandDepths& depths,
                 TrialScore& ts) {
  const ScoringSettings& ss = pb.scoring;
  int64_t clockUncertaintyNs = 0;
  for (const auto& c : run.clocks) clockUncertaintyNs = std::max(clockUncertaintyNs, c.uncertaintyNs);
  auto scoreScope = [&](const std::string& scope, const Grid& grid, std::vector<double> baseIter, auto windowIter) {
    ScopeScore sc;
    sc.scope = scope;
    sc.baseline = baselineRate(grid, t.baselineFromNs, t.baselineToNs, ss.smoothNs);
    if (sc.baseline) {
      sc.band = baselineBand(grid, t.baselineFromNs, t.baselineToNs, ss.smoothNs, ss.holdNs, *sc.baseline);
      if (sc.band) sc.band = widenBand(*sc.band, *sc.baseline, depths[scope]);
    }
    sc.baselineIterations = iterationStats(baseIter);
    if (sc.baseline && *sc.baseline > 0 && ts.faultStartNs) {
      sc.impact = scoreImpact(grid, *sc.baseline, *ts.faultStartNs, *ts.faultEndNs, ss, sc.band);
      // Fault instants and bins come from different agents' clocks, each mapped onto the
      // controller's with an offset known to within its own uncertainty: the worst of them
      // adds to every time read between the two.
      sc.impact->uncertaintyNs += clockUncertaintyNs;
      sc.windowIterations =
          iterationStats(windowIter(sc.impact->windowFromNs, std::max(sc.impact->windowToNs, *ts.faultEndNs)));
    }
    return sc;
  };
  const std::vector<std::string>& nodes = run.plan.workloadNodes;
  for (size_t k = 0; k < nodes.size(); k++) {
    const std::string& node = nodes[k];
    ScopeScore sc = scoreScope(node, g.nodes[k], nodeIterations(run, node, Pick::endedIn, t.baselineFromNs, t.baselineToNs),
                               [&](int64_t a, int64_t b) { return nodeIterations(run, node, Pick::overlaps, a, b); });
    for (const auto& c : run.counters)
      if (c.trial == t.index && c.node == node)
        for (const auto& [name, after] : c.after) {
          auto b = c.before.find(name);
          if (b != c.before.end()) sc.counterDeltas[name] = int64_t(after) - int64_t(b->second);
        }
    ts.nodes.push_back(std::move(sc));
  }
  ts.job = scoreScope("job", g.job, jobIterations(run, Pick::endedIn, t.baselineFromNs, t.baselineToNs),
                      [&](int64_t a, int64_t b) { return jobIterations(run, Pick::overlaps, a, b); });
  for (const auto& n : ts.nodes)
    for (const auto& [name, d] : n.counterDeltas) ts.job.counterDeltas[name] += d;
  if (ts.job.baselineIterations && ts.job.baselineIterations->p50Ns > 0) {
    double algbw = double(pb.workload.sizeBytes) / (ts.job.baselineIterations->p50Ns / 1e9);
    ts.job.busbw = algbw * pb.workload.kind->busFactor(nodes.size());
  }
  if (pb.cost.gpus > 0 && ts.job.impact && ts.job.baseline && *ts.job.baseline > 0) {
    // The bytes lost are worth lossBytes / B seconds of the whole job at full speed, and
    // every GPU of the job waits for them.
    double lostSeconds = ts.job.impact->lossBytes / *ts.job.baseline;
    ts.job.gpuHours = double(pb.cost.gpus) * lostSeconds / 3600;
    ts.job.cost = *ts.job.gpuHours * pb.cost.pricePerGpuHour;
    ts.job.gpuHoursPerPeriod = *ts.job.gpuHours * pb.cost.incidentsPerDay * pb.cost.days;
    ts.job.costPerPeriod = *ts.job.cost * pb.cost.incidentsPerDay * pb.cost.days;
  }
}

// One PFC storm that began at E, matched with the watchdog's instants on the same queue, and
// the data plane's side of it from the job's grid.
WatchdogEpisode watchdogEpisode(const RunResult& run, const Trial& t, const FabricEvent& e, const Grid& jobGrid,
                                double stalled) {
  WatchdogEpisode ep{e.port, e.priority, e.tNs, {}, {}, {}, {}, {}};
  for (const auto& x : run.fabric.events) {
    if (x.port != e.port || x.priority != e.priority || x.tNs < e.tNs) continue;
    if (x.what == "pfc_rx_end" && !ep.stormEndNs) ep.stormEndNs = x.tNs;
    if (x.what == "wd_detect" && !ep.detectNs && !ep.stormEndNs) ep.detectNs = x.tNs;
    if (x.what == "wd_restore" && ep.detectNs && !ep.restoreNs) ep.restoreNs = x.tNs;
  }
  // The data plane: the job's longest stall that begins while the storm is on (a bursty job's
  // short gaps between iterations are stalls too; the storm's spread is the long one), and the
  // instant its traffic moves again. Only stalls that begin before the watchdog acted count:
  // one that begins after it (a busy host, another fault) is not the storm's spread, whatever
  // its length.
  if (stalled > 0) {
    int64_t stormEnd = ep.stormEndNs.value_or(t.endNs);
    int64_t beganBy = ep.detectNs ? std::min(*ep.detectNs, stormEnd) : stormEnd;
    size_t bestEnd = 0, bestLen = 0;
    for (size_t i = binFrom(jobGrid, e.tNs); i < jobGrid.size() && jobGrid.timeOf(i) < beganBy;) {
      if (jobGrid.rate(i) >= stalled) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < jobGrid.size() && jobGrid.rate(j) < stalled) j++;
      if (j - i > bestLen && j < jobGrid.size()) {
        bestLen = j - i;
        bestEnd = j;
      }
      i = j;
    }
    if (bestLen > 0) ep.dataPlaneMovingNs = jobGrid.timeOf(bestEnd);
  }
  if (ep.stormEndNs) {
    bool flowing = false;
    for (const auto& x : run.fabric.events) {
      if (x.port != e.port || (x.what != "flow_start" && x.what != "flow_end")) continue;
      if (x.tNs < *ep.stormEndNs) {
        flowing = x.what == "flow_start";
      } else if (x.what == "flow_start" && !flowing && x.tNs < t.endNs) {
        ep.dataPlaneDeliveredNs = x.tNs;
        break;
      }
    }
  }
  return ep;
}

// 4. Fabric evidence: deltas per port and queue over the trial, metrics per scope (a node's
// scope is its own switch port, named like the node on the lab), watchdog episodes.
void scoreFabric(const RunResult& run, const ScoringSettings& ss, const Trial& t, const Grid& jobGrid, TrialScore& ts) {
  if (run.fabric.source.empty()) return;
  ts.fabric.source = run.fabric.source;
  ts.fabric.trial = fabricDeltas(run.fabric, t.startNs, t.endNs);
  if (auto b = switchBusy(run.fabric.load, ts.faultStartNs.value_or(t.startNs), ts.faultEndNs.value_or(t.endNs))) {
    ts.fabric.switchBusyPct = b->pct;
    ts.fabric.switchBusyPeakPct = b->peakPct;
    ts.fabric.switchBusyFromNs = b->fromNs;
    ts.fabric.switchBusyToNs = b->toNs;
  }
  auto fill = [](ScopeScore& sc, const std::vector<FabricDelta>& ds, const std::string& port) {
    double pause = 0, paused = 0, spread = 0, ecn = 0, drops = 0;
    for (const auto& d : ds) {
      if (!port.empty() && d.port != port) continue;
      pause += double(d.pfcRx);
      paused += double(d.pausedNs);
      spread += double(d.xoffNs);
      ecn += double(d.ecnMarked);
      drops += double(d.drops);
    }
    sc.fabric["pause_frames"] = pause;
    sc.fabric["paused_time"] = paused;
    sc.fabric["pause_spread_time"] = spread;
    sc.fabric["ecn_marks"] = ecn;
    sc.fabric["drops"] = drops;
  };
  fill(ts.job, ts.fabric.trial, "");
  for (auto& n : ts.nodes) fill(n, ts.fabric.trial, n.scope);
  // Storms that began in this trial.
  const double stalled = ts.job.baseline ? ss.stallFraction * *ts.job.baseline : 0;
  for (const auto& e : run.fabric.events)
    if (e.what == "pfc_rx_start" && e.tNs >= t.startNs && e.tNs < t.endNs)
      ts.fabric.watchdog.push_back(watchdogEpisode(run, t, e, jobGrid, stalled));
  for (const auto& ep : ts.fabric.watchdog) {
    if (ep.detectNs && !ts.job.fabric.count("watchdog_detect_time"))
      ts.job.fabric["watchdog_detect_time"] = double(*ep.detectNs - ep.stormStartNs);
    if (ep.restoreNs && ep.stormEndNs && !ts.job.fabric.count("watchdog_restore_time"))
      ts.job.fabric["watchdog_restore_time"] = double(*ep.restoreNs - *ep.stormEndNs);
  }
}

// 5. Packet faults: frames acted on, and the go-back-N oracle's findings and
// largest latencies over the trial's packet faults, for the job.
void scorePackets(const RunResult& run, const Trial& t, TrialScore& ts) {
  bool any = false;
  double acted = 0, findings = 0, gen = -1, react = -1, wait = -1;
  bool oracle = false;
  for (const auto& p : run.packets) {
    if (p.trial != t.index) continue;
    any = true;
    acted += double(p.acted);
    if (!p.oracle) continue;
    oracle = true;
    findings += p.findings;
    gen = std::max(gen, p.nakGenerationMaxNs);
    react = std::max(react, p.nakReactionMaxNs);
    wait = std::max(wait, p.timeoutWaitMaxNs);
  }
  if (!any) return;
  ts.job.packet["packets_acted"] = acted;
  if (!oracle) return;
  ts.job.packet["gbn_violations"] = findings;
  if (gen >= 0) ts.job.packet["nak_generation_time"] = gen;
  if (react >= 0) ts.job.packet["nak_reaction_time"] = react;
  if (wait >= 0) ts.job.packet["timeout_wait"] = wait;
}

// Guardrails, checked again on the data: the runner aborts live, this catches the rest.
void checkGuardrails(const Playbook& pb, TrialScore& ts) {
  if (pb.guardrails.minBaselineBytesPerSec > 0 && ts.job.baseline.value_or(0) < pb.guardrails.minBaselineBytesPerSec)
    ts.problems.push_back("baseline " + formatMetric(MetricUnit::rate, ts.job.baseline.value_or(0)) +
                          " is below the guardrail floor " +
                          formatMetric(MetricUnit::rate, pb.guardrails.minBaselineBytesPerSec));
  if (pb.guardrails.maxStallNs > 0 && ts.job.impact && ts.job.impact->longestStallNs > pb.guardrails.maxStallNs)
    ts.problems.push_back("the job stalled for " + formatDuration(Nanos(ts.job.impact->longestStallNs)) +
                          ", longer than the guardrail max_stall " + formatDuration(Nanos(pb.guardrails.maxStallNs)));
}

// A verdict's bound, as written, for expectation E.
Verdict verdictOf(const Expectation& e) {
  Verdict v;
  v.metric = e.metric;
  v.scope = e.scope;
  v.op = toString(e.op);
  v.bound = e.bound;
  v.boundText = e.boundText;
  v.pos = e.pos;
  return v;
}

// 5. Expectations: the scenario's conditions, then its expectations (those over repeated
// trials wait for scoreRepeats). What never happened is not scored: a watchdog that was never
// needed is not verified.
void judgeTrial(const Playbook& pb, const Trial& t, TrialScore& ts, Scores& out) {
  const Scenario* scen = nullptr;
  for (const auto& s : pb.scenarios)
    if (s.name == t.scenario) scen = &s;
  if (!scen) return;
  auto judge = [&](const Expectation& e) {
    Verdict v = verdictOf(e);
    const ScopeScore* sc = e.scope == "job" ? &ts.job : nullptr;
    for (const auto& n : ts.nodes)
      if (n.scope == e.scope) sc = &n;
    if (!sc) {
      v.measuredText = "no such scope";
    } else if (auto m = metricValue(*sc, e.metric)) {
      v.measured = *m;
      v.measuredText = formatMetric(findMetric(e.metric)->unit, *m);
      v.passed = compare(*m, e.op, e.bound);
    } else {
      v.measuredText = whyMissing(e.metric, *sc);
    }
    return v;
  };
  for (const auto& e : scen->requirements) {
    ts.conditions.push_back(judge(e));
    if (!ts.conditions.back().passed) ts.conditionReached = false;
  }
  for (const auto& e : scen->expectations) {
    if (!e.stat.empty()) continue;  // judged over the repeated trials
    Verdict v = judge(e);
    if (!ts.conditionReached) {
      v.passed = false;
      v.measuredText = "not scored: condition not reached (measured " + v.measuredText + ")";
      out.verdictsNotScored++;
    } else {
      (v.passed ? out.verdictsPassed : out.verdictsFailed)++;
    }
    ts.verdicts.push_back(std::move(v));
  }
}

// A job the run did not start (kind "observed") can be missing from a node, or end early: a
// trial in which a node's ranks reported nothing, or stopped reporting well before its end, is
// a problem of the trial, never a healthy score of the ranks that did report.
void checkObservedRanks(const RunResult& run, const Playbook& pb, const Trial& t, const TrialGrids& g,
                        TrialScore& ts) {
  if (pb.workload.kind->name != "observed" && pb.workload.kind->name != "mpi") return;
  constexpr int64_t kQuietNs = 5'000'000'000;  // longer than any stall a flap of a few seconds causes
  for (size_t i = 0; i < g.nodes.size() && i < run.plan.workloadNodes.size(); i++) {
    const Grid& grid = g.nodes[i];
    const std::string& node = run.plan.workloadNodes[i];
    size_t last = grid.size();
    for (size_t k = 0; k < grid.size(); k++)
      if (grid.bytes[k] > 0) last = k;
    if (last == grid.size()) {
      ts.problems.push_back("no rank on " + node +
                            " reported an operation in this trial: is the job running there, with librdmachaos-observe "
                            "loaded and RDMACHAOS_OBSERVE_SOCKET naming that node's agent?");
    } else if (grid.timeOf(last) + grid.binNs < t.endNs - kQuietNs) {
      ts.problems.push_back("the job's ranks on " + node + " stopped reporting " +
                            formatDuration(Nanos(t.endNs - grid.timeOf(last) - grid.binNs)) +
                            " before the trial's end: the job ended early or hung");
    }
  }
}

TrialScore scoreTrial(const RunResult& run, const Playbook& pb, const Trial& t, int64_t binNs, BandDepths& depths,
                      Scores& out) {
  TrialScore ts;
  ts.trial = t.index;
  ts.label = t.label();
  ts.completed = run.endedNs >= t.endNs;
  addNicWindows(run, t, ts);
  // A job the run started that failed (its exit, the rank and signal that ended it) is the
  // trial's problem, also when it ended the run: its series alone would read as a stall.
  if (const auto* ext = pb.workload.kind->external; ext && ext->launches)
    for (const auto& [node, error] : run.workloadErrors) ts.problems.push_back("the job, on " + node + ": " + error);
  for (const auto& [node, note] : run.workloadNotes) ts.jobNotes.push_back("the job, on " + node + ": " + note);
  if (!ts.completed) {
    ts.problems.push_back("trial did not complete" + (run.abortReason.empty() ? std::string() : ": " + run.abortReason));
    return ts;
  }
  faultWindow(run, t, ts);
  TrialGrids g = trialGrids(run, binNs, t);
  checkObservedRanks(run, pb, t, g, ts);
  scoreScopes(run, pb, t, g, depths, ts);
  scoreFabric(run, pb.scoring, t, g.job, ts);
  scorePackets(run, t, ts);
  checkGuardrails(pb, ts);
  judgeTrial(pb, t, ts, out);
  return ts;
}

// 6. Repeats: the completed trials of each scenario (and sweep value) side by side, and the
// scenario's stat = "cv" expectations judged on them.
RepeatGroup repeatGroup(const RunResult& run, const std::string& key, const std::vector<const TrialScore*>& g) {
  RepeatGroup rg;
  rg.key = key;
  rg.scenario = run.plan.trials.at(size_t(g.front()->trial)).scenario;
  rg.trials = g.size();
  for (const auto& m : repeatableMetrics()) {
    RepeatMetric rm;
    rm.metric = m.metric;
    rm.bmwg = m.bmwg;
    for (const auto* ts : g)
      if (ts->conditionReached)
        if (auto x = metricValue(ts->job, m.metric)) rm.values.push_back(*x);
    if (rm.values.size() < 2) continue;
    for (double x : rm.values) rm.mean += x;
    rm.mean /= double(rm.values.size());
    double var = 0;
    for (double x : rm.values) var += (x - rm.mean) * (x - rm.mean);
    rm.stddev = std::sqrt(var / double(rm.values.size() - 1));
    if (rm.mean != 0) rm.cvPct = rm.stddev / std::abs(rm.mean) * 100;
    rg.metrics.push_back(std::move(rm));
  }
  return rg;
}

// A stat = "median" expectation judged on the median of the group's trials that reached their
// condition. A trial without a value (not recovered, no impact) counts as failing the bound: it
// sorts past every value on the side the bound forbids, so it can never help the median pass.
Verdict medianVerdict(const Expectation& e, const std::vector<const TrialScore*>& g) {
  Verdict v = verdictOf(e);
  v.metric = "median(" + e.metric + ")";
  const bool upper = e.op == Comparison::less || e.op == Comparison::lessEqual;
  std::vector<double> xs;
  for (const auto* ts : g) {
    if (!ts->conditionReached) continue;
    if (auto x = metricValue(ts->job, e.metric)) {
      xs.push_back(*x);
    } else {
      xs.push_back(upper ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
    }
  }
  if (xs.size() < 3) {
    v.measuredText = std::to_string(xs.size()) + " trial(s) reached their condition: a median needs 3";
    return v;
  }
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  // Of an even count, the middle value on the side the bound forbids (never a mean with an infinity).
  const double med = n % 2 ? xs[n / 2] : (upper ? xs[n / 2] : xs[n / 2 - 1]);
  const auto* info = findMetric(e.metric);
  std::string values;
  for (double x : xs)
    values += (values.empty() ? "" : ", ") + (std::isinf(x) ? std::string("none") : formatMetric(info->unit, x));
  v.measuredText = (std::isinf(med) ? std::string("none") : formatMetric(info->unit, med)) + " over " +
                   std::to_string(n) + " trials (" + values + ")";
  if (!std::isinf(med)) v.measured = med;
  v.passed = !std::isinf(med) && compare(med, e.op, e.bound);
  return v;
}

void scoreRepeats(const RunResult& run, const Playbook& pb, Scores& out) {
  std::map<std::string, std::vector<const TrialScore*>> groups;
  std::vector<std::string> order;
  for (const auto& ts : out.trials) {
    if (!ts.completed) continue;
    const Trial& t = run.plan.trials.at(size_t(ts.trial));
    std::string key = t.scenario + (t.sweepParam.empty() ? "" : " " + t.sweepParam + "=" + t.sweepValue.dump());
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&ts);
  }
  for (const auto& key : order) {
    const auto& g = groups[key];
    if (g.size() < 2) continue;
    RepeatGroup rg = repeatGroup(run, key, g);
    for (const auto& s : pb.scenarios)
      if (s.name == rg.scenario)
        for (const auto& e : s.expectations) {
          if (e.stat == "median") {
            rg.verdicts.push_back(medianVerdict(e, g));
            (rg.verdicts.back().passed ? out.verdictsPassed : out.verdictsFailed)++;
            continue;
          }
          if (e.stat != "cv") continue;
          Verdict v = verdictOf(e);
          v.metric = "cv(" + e.metric + ")";
          auto it = std::find_if(rg.metrics.begin(), rg.metrics.end(),
                                 [&](const RepeatMetric& rm) { return rm.metric == e.metric; });
          if (it == rg.metrics.end()) {
            v.measuredText = "fewer than 2 trials with a value of " + e.metric;
          } else if (!it->cvPct) {
            v.measuredText = "no CV: the mean is 0";
          } else {
            v.measured = *it->cvPct;
            v.measuredText = formatMetric(MetricUnit::percent, *it->cvPct) + " over " +
                             std::to_string(it->values.size()) + " trials";
            v.passed = compare(*it->cvPct, e.op, e.bound);
          }
          (v.passed ? out.verdictsPassed : out.verdictsFailed)++;
          rg.verdicts.push_back(std::move(v));
        }
    out.repeatability.push_back(std::move(rg));
  }
}

// The job's own nccl-tests report (`run --nccl-tests-output`) covers the whole job, so what is
// wrong in it (wrong values, NCCL's failure, no summary, an unreadable file) is a problem of the
// run's last completed trial: the run is an error, never a pass beside a corrupt collective.
void addNcclTestsProblems(const RunResult& run, Scores& out) {
  if (!run.ncclTests) return;
  auto last = std::find_if(out.trials.rbegin(), out.trials.rend(), [](const TrialScore& t) { return t.completed; });
  if (last == out.trials.rend()) return;  // the run's own problem already says why
  if (!run.ncclTests->report) {
    last->problems.push_back("nccl-tests output " + run.ncclTests->error);
    return;
  }
  for (const auto& p : run.ncclTests->report->problems())
    last->problems.push_back(p + " (" + run.ncclTests->file + ")");
}

// 7. One outcome: an error (abort, failed fault, guardrail) outranks a condition not reached,
// which outranks a failed expectation.
void decideOutcome(const RunResult& run, Scores& out) {
  std::string firstProblem;
  for (const auto& t : out.trials)
    if (!t.problems.empty() && firstProblem.empty()) firstProblem = t.label + ": " + t.problems.front();
  auto unreached = std::find_if(out.trials.begin(), out.trials.end(), [](const TrialScore& t) { return !t.conditionReached; });
  if (!run.abortReason.empty()) {
    out.outcome = Outcome::error;
    out.reason = "aborted: " + run.abortReason;
  } else if (!firstProblem.empty()) {
    out.outcome = Outcome::error;
    out.reason = firstProblem;
  } else if (unreached != out.trials.end()) {
    out.outcome = Outcome::inconclusive;
    for (const auto& c : unreached->conditions)
      if (!c.passed) {
        out.reason = unreached->label + ": condition not reached: " + c.metric + " " + c.op + " " + c.boundText +
                     " (" + c.scope + ") measured " + c.measuredText;
        break;
      }
  } else if (out.verdictsFailed > 0) {
    out.outcome = Outcome::failed;
    out.reason = std::to_string(out.verdictsFailed) + " of " + std::to_string(out.verdictsFailed + out.verdictsPassed) +
                 " expectations failed";
  } else {
    out.outcome = Outcome::passed;
    out.reason = std::to_string(out.verdictsPassed) + " expectations met";
  }
}

}  // namespace

Scores score(const RunResult& run, const Playbook& pb) {
  Scores out;
  const int64_t binNs = run.binNs > 0 ? run.binNs : pb.scoring.binNs;
  BandDepths depths = bandDepths(run, pb.scoring, binNs);
  for (const auto& t : run.plan.trials) out.trials.push_back(scoreTrial(run, pb, t, binNs, depths, out));
  scoreRepeats(run, pb, out);
  // The monitoring's expectations count like the fabric's: a missed or late alert fails the run.
  out.detection = scoreDetection(run, pb);
  out.verdictsPassed += out.detection.passed;
  out.verdictsFailed += out.detection.failed;
  addNcclTestsProblems(run, out);
  decideOutcome(run, out);
  return out;
}

}  // namespace rc::controller
