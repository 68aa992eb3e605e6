// Scoring of a run: the definitions of docs/scoring.md, as pure functions over series.
#include "controller/score.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/units.hpp"

namespace rc::controller {
namespace {

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// Index of the bin that contains t, clamped to the grid.
size_t binContaining(const Grid& g, int64_t t) {
  int64_t i = floorDiv(t - g.startNs, g.binNs);
  return size_t(std::clamp<int64_t>(i, 0, int64_t(g.size())));
}

// Index of the first bin starting at or after t.
size_t binFrom(const Grid& g, int64_t t) {
  int64_t i = floorDiv(t - g.startNs + g.binNs - 1, g.binNs);
  return size_t(std::clamp<int64_t>(i, 0, int64_t(g.size())));
}

}  // namespace

Grid toGrid(const std::vector<Bin>& bins, int64_t binNs, int64_t fromNs, int64_t toNs) {
  Grid g;
  g.startNs = fromNs;
  g.binNs = binNs;
  int64_t n = toNs > fromNs ? (toNs - fromNs) / binNs : 0;
  g.bytes.assign(size_t(n), 0.0);
  for (const auto& b : bins) {
    int64_t i = floorDiv(b.tNs - fromNs, binNs);
    if (i >= 0 && i < n) g.bytes[size_t(i)] += b.bytes;
  }
  return g;
}

Grid sumGrids(const std::vector<Grid>& grids) {
  Grid out;
  if (grids.empty()) return out;
  out.startNs = grids.front().startNs;
  out.binNs = grids.front().binNs;
  size_t n = 0;
  for (const auto& g : grids) n = std::max(n, g.size());
  out.bytes.assign(n, 0.0);
  for (const auto& g : grids)
    for (size_t i = 0; i < g.size(); i++) out.bytes[i] += g.bytes[i];
  return out;
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::optional<double> percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  // Rank computed in integers of a per-mille scale so that 99% of 100 values is exactly 99.
  size_t n = v.size();
  long long rank = (static_cast<long long>(std::llround(p * 1000)) * static_cast<long long>(n) + 99999) / 100000;
  rank = std::clamp<long long>(rank, 1, static_cast<long long>(n));
  return v[size_t(rank - 1)];
}

double busBandwidthFactor(WorkloadKind kind, size_t ranks) {
  if (ranks < 1) return 1;
  double n = double(ranks);
  switch (kind) {
    case WorkloadKind::allreduce: return 2 * (n - 1) / n;
    case WorkloadKind::allgather:
    case WorkloadKind::alltoall: return (n - 1) / n;
    case WorkloadKind::incast:
    case WorkloadKind::pairwise: return 1;
  }
  return 1;
}

std::vector<double> smoothRates(const Grid& g, int64_t smoothNs, size_t lo, size_t hi) {
  hi = std::min(hi, g.size());
  lo = std::min(lo, hi);
  std::vector<double> x(hi - lo);
  const size_t half = g.binNs > 0 ? size_t(std::max<int64_t>(0, smoothNs) / g.binNs) / 2 : 0;
  std::vector<double> prefix(hi - lo + 1, 0.0);
  for (size_t i = lo; i < hi; i++) prefix[i - lo + 1] = prefix[i - lo] + g.rate(i);
  for (size_t k = 0; k < x.size(); k++) {
    size_t a = k >= half ? k - half : 0, b = std::min(x.size(), k + half + 1);
    x[k] = (prefix[b] - prefix[a]) / double(b - a);
  }
  return x;
}

std::optional<double> baselineRate(const Grid& g, int64_t fromNs, int64_t toNs, int64_t smoothNs) {
  size_t lo = binFrom(g, fromNs), hi = lo;
  while (hi < g.size() && g.timeOf(hi) + g.binNs <= toNs) hi++;
  return median(smoothRates(g, smoothNs, lo, hi));
}

std::optional<BaselineBand> baselineBand(const Grid& g, int64_t fromNs, int64_t toNs, int64_t smoothNs,
                                         int64_t holdNs, double baseline) {
  size_t lo = binFrom(g, fromNs), hi = lo;
  while (hi < g.size() && g.timeOf(hi) + g.binNs <= toNs) hi++;
  std::vector<double> x = smoothRates(g, smoothNs, lo, hi);
  const size_t half = g.binNs > 0 ? size_t(std::max<int64_t>(0, smoothNs) / g.binNs) / 2 : 0;
  if (x.size() > 2 * half) x = std::vector<double>(x.begin() + std::ptrdiff_t(half), x.end() - std::ptrdiff_t(half));
  if (x.empty()) return std::nullopt;
  // The band's depth below B: the deeper of kBandSigmas robust standard deviations (median
  // absolute deviation x 1.4826, so a rare outlier does not widen it) and the lowest value
  // seen, pushed a quarter further (an extreme-value margin: the next stretch of the same
  // noise reaches a little beyond the lowest of the last one).
  auto floorOf = [&](const std::vector<double>& v) {
    std::vector<double> dev;
    dev.reserve(v.size());
    for (double y : v) dev.push_back(std::abs(y - baseline));
    double sigma = 1.4826 * median(dev).value_or(0);
    double lowest = *std::min_element(v.begin(), v.end());
    double depth = std::max(kBandSigmas * sigma, kBandMargin * std::max(0.0, baseline - lowest));
    return std::max(0.0, baseline - depth);
  };
  BaselineBand band;
  band.floor = floorOf(x);
  const size_t hold = std::max<size_t>(1, size_t((holdNs + g.binNs - 1) / std::max<int64_t>(1, g.binNs)));
  if (x.size() < hold) {
    band.holdFloor = band.floor;
    return band;
  }
  std::vector<double> means;
  double sum = 0;
  for (size_t i = 0; i < x.size(); i++) {
    sum += x[i];
    if (i + 1 > hold) sum -= x[i - hold];
    if (i + 1 >= hold) means.push_back(sum / double(hold));
  }
  band.holdFloor = floorOf(means);
  return band;
}

int64_t timingUncertaintyNs(const Grid& g, int64_t smoothNs) { return g.binNs + std::max<int64_t>(0, smoothNs) / 2; }

Impact scoreImpact(const Grid& g, double B, int64_t faultStartNs, int64_t faultEndNs,
                   const ScoringSettings& s, std::optional<BaselineBand> band) {
  Impact im;
  const double good = std::min((1 - s.epsilon) * B, band ? band->floor : B);
  const double goodHold = std::min((1 - s.epsilon) * B, band ? band->holdFloor : B);
  im.goodRate = good;
  im.goodHoldRate = goodHold;
  im.uncertaintyNs = timingUncertaintyNs(g, s.smoothNs);
  const double stalled = s.stallFraction * B;
  const size_t n = g.size();
  const size_t i0 = binContaining(g, faultStartNs);
  const size_t ie = binContaining(g, faultEndNs);
  const size_t hold = size_t((s.holdNs + g.binNs - 1) / g.binNs);

  // Impact and recovery on the smoothed rate (a centred moving average, like the baseline);
  // loss and stalls on the raw bins.
  const std::vector<double> x = smoothRates(g, s.smoothNs, 0, n);
  // Impact is looked for while the fault is on and for one hold period after it (effects that
  // lag the fault, such as a retransmission timeout); later dips belong to recovery.
  for (size_t i = i0; i < std::min(n, ie + hold); i++)
    if (x[i] < good) {
      im.timeToImpactNs = std::max<int64_t>(0, g.timeOf(i) - faultStartNs);
      break;
    }

  // Recovered at the first good bin from the fault's end that starts a hold period whose mean
  // is good too: the job is back in the band it kept in the baseline and stays there (a mean,
  // not every bin: the healthy job's own bins dip below the floor now and then). The period
  // must fit in the trial, otherwise recovery was not shown.
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + x[i];
  for (size_t i = ie; hold > 0 && i + hold <= n; i++) {
    if (x[i] < good) continue;
    if ((prefix[i + hold] - prefix[i]) / double(hold) < goodHold) continue;
    // ... and a stall inside it is not noise, unless the healthy job stalled like that too.
    bool anyStall = false;
    for (size_t k = i; k < i + hold && !anyStall; k++) anyStall = x[k] < std::min(stalled, good);
    if (anyStall) continue;
    im.recovered = true;
    im.recoveredAtNs = std::max(g.timeOf(i), faultEndNs);
    im.recoveryTimeNs = im.recoveredAtNs - faultEndNs;
    break;
  }

  im.windowFromNs = g.timeOf(i0);
  size_t end = n;
  if (im.recovered) end = std::max(binContaining(g, im.recoveredAtNs), binFrom(g, faultEndNs));
  end = std::clamp(end, i0, n);
  im.windowToNs = g.timeOf(end);
  const double perBin = B * double(g.binNs) / 1e9;
  // Net: what the job would have moved at the baseline minus what it moved. Bursty bins above
  // and below B inside the window cancel, as they do in the baseline.
  const double windowBytes = perBin * double(end - i0);
  double moved = 0;
  for (size_t i = i0; i < end; i++) moved += g.bytes[i];
  im.lossBytes = std::max(0.0, windowBytes - moved);
  im.lossPct = windowBytes > 0 ? im.lossBytes / windowBytes * 100 : 0;

  // Stalls inside the impact window: after recovery, a bursty job's gaps between iterations
  // would otherwise add up to "stall time" for the rest of the trial.
  int64_t current = 0;
  im.minRate = i0 < n ? g.rate(i0) : 0;
  for (size_t i = i0; i < end; i++) {
    im.minRate = std::min(im.minRate, g.rate(i));
    if (g.rate(i) < stalled) {
      im.stallNs += g.binNs;
      current += g.binNs;
      im.longestStallNs = std::max(im.longestStallNs, current);
    } else {
      current = 0;
    }
  }
  return im;
}

std::optional<IterationStats> iterationStats(const std::vector<double>& d) {
  if (d.empty()) return std::nullopt;
  IterationStats s;
  s.count = d.size();
  s.p50Ns = *percentile(d, 50);
  s.p99Ns = *percentile(d, 99);
  s.maxNs = *std::max_element(d.begin(), d.end());
  return s;
}

const char* toString(Outcome o) {
  switch (o) {
    case Outcome::passed: return "passed";
    case Outcome::failed: return "failed";
    case Outcome::error: return "error";
  }
  return "?";
}

int exitCodeFor(Outcome o) {
  switch (o) {
    case Outcome::passed: return 0;
    case Outcome::failed: return 1;
    case Outcome::error: return 2;
  }
  return 2;
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

std::optional<double> metricValue(const ScopeScore& s, std::string_view m) {
  auto opt = [](const auto& o) -> std::optional<double> {
    if (o) return double(*o);
    return std::nullopt;
  };
  if (m == "baseline") return s.baseline;
  if (m == "busbw") return s.busbw;
  if (m == "gpu_hours") return s.gpuHours;
  if (m == "cost") return s.cost;
  if (m.rfind("counter.", 0) == 0) {
    auto it = s.counterDeltas.find(std::string(m.substr(8)));
    if (it == s.counterDeltas.end()) return std::nullopt;
    return double(it->second);
  }
  if (m.rfind("iteration_", 0) == 0) {
    if (!s.windowIterations) return std::nullopt;
    if (m == "iteration_p50") return s.windowIterations->p50Ns;
    if (m == "iteration_p99") return s.windowIterations->p99Ns;
    if (m == "iteration_max") return s.windowIterations->maxNs;
    if (m == "iteration_p99_ratio") {
      if (!s.baselineIterations || s.baselineIterations->p50Ns <= 0) return std::nullopt;
      return s.windowIterations->p99Ns / s.baselineIterations->p50Ns;
    }
    return std::nullopt;
  }
  if (!s.impact) return std::nullopt;
  const Impact& im = *s.impact;
  if (m == "time_to_impact") return opt(im.timeToImpactNs);
  if (m == "recovery_time") return opt(im.recoveryTimeNs);
  if (m == "throughput_loss_bytes") return im.lossBytes;
  if (m == "throughput_loss_pct") return im.lossPct;
  if (m == "stall_time") return double(im.stallNs);
  if (m == "longest_stall") return double(im.longestStallNs);
  if (m == "min_throughput") return im.minRate;
  return std::nullopt;
}

std::string Verdict::describe() const {
  return metric + " " + op + " " + boundText + " (" + scope + "): measured " + measuredText +
         (passed ? " -- ok" : " -- FAILED");
}

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

std::string missingReason(std::string_view metric, const ScopeScore& s) {
  if (metric == "recovery_time" && s.impact) return "not recovered";
  if (metric == "time_to_impact" && s.impact) return "no impact";
  if (!s.baseline) return "no baseline";
  if (metric.rfind("iteration", 0) == 0) return "no iterations";
  if (metric.rfind("counter.", 0) == 0) return "counter not reported";
  if (metric == "gpu_hours" || metric == "cost") return "no [cost] gpus";
  if (metric == "busbw") return "no iterations";
  return "no fault applied";
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

Scores score(const RunResult& run, const Playbook& pb) {
  Scores out;
  const ScoringSettings& ss = pb.scoring;
  const int64_t w = run.binNs > 0 ? run.binNs : ss.binNs;
  for (const auto& t : run.plan.trials) {
    TrialScore ts;
    ts.trial = t.index;
    ts.label = t.label();
    ts.completed = run.endedNs >= t.endNs;
    if (!ts.completed) {
      ts.problems.push_back("trial did not complete" +
                            (run.abortReason.empty() ? std::string() : ": " + run.abortReason));
      out.trials.push_back(std::move(ts));
      continue;
    }

    for (const auto& f : run.faults) {
      if (f.trial != t.index) continue;
      if (!f.error.empty()) {
        ts.problems.push_back(f.kind + " on " + f.node + " (step " + f.step + ") failed: " + f.error);
        continue;
      }
      if (!f.appliedNs) {
        ts.problems.push_back(f.kind + " on " + f.node + " (step " + f.step + ") was never applied");
        continue;
      }
      ts.faultStartNs = std::min(ts.faultStartNs.value_or(*f.appliedNs), *f.appliedNs);
      if (!f.revertedNs) {
        ts.problems.push_back(f.kind + " on " + f.node + " (step " + f.step +
                              ") has no revert time: scored until the trial end");
      }
      int64_t end = f.revertedNs.value_or(t.endNs);
      ts.faultEndNs = std::max(ts.faultEndNs.value_or(end), end);
    }

    // Per node, then the job as the bin-wise sum.
    std::vector<Grid> grids;
    std::vector<std::string> nodes;
    for (const auto& name : run.plan.workloadNodes) {
      auto it = run.series.find(name);
      static const std::vector<Bin> none;
      grids.push_back(toGrid(it == run.series.end() ? none : it->second, w, t.startNs, t.endNs));
      nodes.push_back(name);
    }
    Grid jobGrid = sumGrids(grids);
    jobGrid.startNs = t.startNs;
    jobGrid.binNs = w;

    auto scoreScope = [&](const std::string& scope, const Grid& g, std::vector<double> baseIter,
                          auto windowIter) {
      ScopeScore sc;
      sc.scope = scope;
      sc.baseline = baselineRate(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs);
      if (sc.baseline)
        sc.band = baselineBand(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs, ss.holdNs, *sc.baseline);
      sc.baselineIterations = iterationStats(baseIter);
      if (sc.baseline && *sc.baseline > 0 && ts.faultStartNs) {
        sc.impact = scoreImpact(g, *sc.baseline, *ts.faultStartNs, *ts.faultEndNs, ss, sc.band);
        sc.windowIterations = iterationStats(windowIter(sc.impact->windowFromNs,
                                                        std::max(sc.impact->windowToNs, *ts.faultEndNs)));
      }
      return sc;
    };

    for (size_t k = 0; k < nodes.size(); k++) {
      const std::string& node = nodes[k];
      ScopeScore sc = scoreScope(node, grids[k], nodeIterations(run, node, Pick::endedIn, t.baselineFromNs, t.baselineToNs),
                                 [&](int64_t a, int64_t b) { return nodeIterations(run, node, Pick::overlaps, a, b); });
      for (const auto& c : run.counters)
        if (c.trial == t.index && c.node == node)
          for (const auto& [name, after] : c.after) {
            auto b = c.before.find(name);
            if (b != c.before.end()) sc.counterDeltas[name] = int64_t(after) - int64_t(b->second);
          }
      ts.nodes.push_back(std::move(sc));
    }
    ts.job = scoreScope("job", jobGrid, jobIterations(run, Pick::endedIn, t.baselineFromNs, t.baselineToNs),
                        [&](int64_t a, int64_t b) { return jobIterations(run, Pick::overlaps, a, b); });
    for (const auto& n : ts.nodes)
      for (const auto& [name, d] : n.counterDeltas) ts.job.counterDeltas[name] += d;
    if (ts.job.baselineIterations && ts.job.baselineIterations->p50Ns > 0) {
      double algbw = double(pb.workload.sizeBytes) / (ts.job.baselineIterations->p50Ns / 1e9);
      ts.job.busbw = algbw * busBandwidthFactor(pb.workload.kind, nodes.size());
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

    // Guardrails, checked again on the data: the runner aborts live, this catches the rest.
    if (pb.guardrails.minBaselineBytesPerSec > 0 &&
        ts.job.baseline.value_or(0) < pb.guardrails.minBaselineBytesPerSec)
      ts.problems.push_back("baseline " + formatMetric(MetricUnit::rate, ts.job.baseline.value_or(0)) +
                            " is below the guardrail floor " +
                            formatMetric(MetricUnit::rate, pb.guardrails.minBaselineBytesPerSec));
    if (pb.guardrails.maxStallNs > 0 && ts.job.impact &&
        ts.job.impact->longestStallNs > pb.guardrails.maxStallNs)
      ts.problems.push_back("the job stalled for " + formatDuration(Nanos(ts.job.impact->longestStallNs)) +
                            ", longer than the guardrail max_stall " +
                            formatDuration(Nanos(pb.guardrails.maxStallNs)));

    const Scenario* scen = nullptr;
    for (const auto& s : pb.scenarios)
      if (s.name == t.scenario) scen = &s;
    if (scen)
      for (const auto& e : scen->expectations) {
        Verdict v;
        v.metric = e.metric;
        v.scope = e.scope;
        v.op = toString(e.op);
        v.bound = e.bound;
        v.boundText = e.boundText;
        v.pos = e.pos;
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
          v.measuredText = missingReason(e.metric, *sc);
        }
        (v.passed ? out.verdictsPassed : out.verdictsFailed)++;
        ts.verdicts.push_back(std::move(v));
      }
    out.trials.push_back(std::move(ts));
  }

  // One outcome: an error (abort, failed fault, guardrail) outranks a failed expectation.
  std::string firstProblem;
  for (const auto& t : out.trials)
    if (!t.problems.empty() && firstProblem.empty()) firstProblem = t.label + ": " + t.problems.front();
  if (!run.abortReason.empty()) {
    out.outcome = Outcome::error;
    out.reason = "aborted: " + run.abortReason;
  } else if (!firstProblem.empty()) {
    out.outcome = Outcome::error;
    out.reason = firstProblem;
  } else if (out.verdictsFailed > 0) {
    out.outcome = Outcome::failed;
    out.reason = std::to_string(out.verdictsFailed) + " of " +
                 std::to_string(out.verdictsFailed + out.verdictsPassed) + " expectations failed";
  } else {
    out.outcome = Outcome::passed;
    out.reason = std::to_string(out.verdictsPassed) + " expectations met";
  }
  return out;
}

}  // namespace rc::controller
