// Scoring of a run: the definitions of docs/scoring.md, as pure functions over series.
#include "controller/score.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/units.hpp"
#include "faults/fault.hpp"

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
    case WorkloadKind::pairwise:
    case WorkloadKind::perftest: return 1;
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
  size_t first = lo;  // the bin of x[0]
  if (x.size() > 2 * half) {
    x = std::vector<double>(x.begin() + std::ptrdiff_t(half), x.end() - std::ptrdiff_t(half));
    first += half;
  }
  if (x.empty()) return std::nullopt;
  // The band's depth below B: the deeper of kBandSigmas robust standard deviations (median
  // absolute deviation x 1.4826, so a rare outlier does not widen it) and the lowest value
  // seen, pushed a quarter further (an extreme-value margin: the next stretch of the same
  // noise reaches a little beyond the lowest of the last one).
  BaselineBand band;
  auto floorOf = [&](const std::vector<double>& v) {
    std::vector<double> dev;
    dev.reserve(v.size());
    for (double y : v) dev.push_back(std::abs(y - baseline));
    double sigma = 1.4826 * median(dev).value_or(0);
    double lowest = *std::min_element(v.begin(), v.end());
    double depth = std::max(kBandSigmas * sigma, kBandMargin * std::max(0.0, baseline - lowest));
    if (depth > kBandMaxDepth * baseline) {
      depth = kBandMaxDepth * baseline;
      band.capped = true;
    }
    return std::max(0.0, baseline - depth);
  };
  band.floor = floorOf(x);
  {
    auto it = std::min_element(x.begin(), x.end());
    band.lowest = *it;
    band.lowestAtNs = g.timeOf(first + size_t(it - x.begin()));
  }
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

std::pair<double, double> bandDepth(const BaselineBand& band, double baseline) {
  if (baseline <= 0) return {0, 0};
  return {1 - band.floor / baseline, 1 - band.holdFloor / baseline};
}

BaselineBand widenBand(BaselineBand band, double baseline, const std::vector<std::pair<double, double>>& depths) {
  if (depths.size() < 3 || baseline <= 0) return band;
  std::vector<double> f, h;
  for (const auto& [a, b] : depths) {
    f.push_back(a);
    h.push_back(b);
  }
  double typical = std::min(kBandMaxDepth, *median(f)), typicalHold = std::min(kBandMaxDepth, *median(h));
  auto [own, ownHold] = bandDepth(band, baseline);
  if (typical > own) band.floor = baseline * (1 - typical);
  if (typicalHold > ownHold) band.holdFloor = baseline * (1 - typicalHold);
  if (typical > own || typicalHold > ownHold) band.pooledOver = depths.size();
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

std::optional<BusyShare> switchBusy(const std::vector<SwitchLoad>& load, int64_t fromNs, int64_t toNs) {
  if (load.size() < 2) return std::nullopt;
  // The last sample at or before FROM and the first at or after TO, so a window shorter than
  // the sampling still spans two.
  size_t a = 0, b = 0;
  for (size_t i = 0; i < load.size(); i++) {
    if (load[i].tNs <= fromNs) a = i;
    if (load[i].tNs <= toNs) b = i;
  }
  if (b + 1 < load.size() && load[b].tNs < toNs) b++;
  if (b <= a) return std::nullopt;
  auto share = [&](size_t i, size_t j) -> std::optional<double> {
    int64_t loop = load[j].loopNs - load[i].loopNs, busy = load[j].busyNs - load[i].busyNs;
    // A restarted switch starts its counts again: no share across it.
    if (loop <= 0 || busy < 0) return std::nullopt;
    return std::clamp(double(busy) / double(loop) * 100, 0.0, 100.0);
  };
  auto whole = share(a, b);
  if (!whole) return std::nullopt;
  BusyShare out{*whole, *whole, load[a].tNs, load[b].tNs};
  // The busiest span of at least 1 s from each sample on (the whole window when it is shorter).
  constexpr int64_t kSecond = 1'000'000'000;
  for (size_t i = a, j = a + 1; i < b; i++) {
    j = std::max(j, i + 1);
    while (j < b && load[j].tNs - load[i].tNs < kSecond) j++;
    if (load[j].tNs - load[i].tNs < kSecond) break;  // less than a second left
    if (auto sh = share(i, j)) out.peakPct = std::max(out.peakPct, *sh);
  }
  return out;
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
    case Outcome::inconclusive: return "inconclusive";
    case Outcome::error: return "error";
  }
  return "?";
}

int exitCodeFor(Outcome o) {
  switch (o) {
    case Outcome::passed: return 0;
    case Outcome::failed: return 1;
    case Outcome::inconclusive: return 2;  // nothing was verified: not a pass, not the fabric's failure
    case Outcome::error: return 2;
  }
  return 2;
}

std::optional<WireSpan> wireSpan(const FabricEvidence& f, const std::string& port, int l4Dst, int64_t fromNs,
                                 int64_t toNs) {
  std::optional<WireSpan> out;
  bool open = false;
  for (const auto& e : f.events) {
    if (e.port != port || e.l4Dst != l4Dst) continue;
    if (e.what == "flow_start" && e.tNs >= fromNs && e.tNs < toNs) {
      if (!out) out = WireSpan{e.tNs, std::nullopt, 0};
      out->episodes++;
      out->lastNs.reset();
      open = true;
    } else if (e.what == "flow_end" && open) {
      out->lastNs = e.tNs;
      open = false;
    }
  }
  return out;
}

std::optional<int> faultMeterPort(const std::string& kind, const std::string& role, const json& params) {
  const faults::FaultKind* k = faults::findKind(kind);
  if (!k || !k->wireMeter) return std::nullopt;
  return k->wireMeter(role, params);
}

std::optional<WireSpan> faultWire(const RunResult& run, const FaultRecord& f, int64_t trialEndNs) {
  auto port = faultMeterPort(f.kind, f.role, f.params);
  if (!port || !f.appliedNs) return std::nullopt;
  // From a little before the apply: the sink is applied first, the senders' first frames may
  // beat the sink's own record by the agents' clock offsets.
  return wireSpan(run.fabric, f.node, *port, *f.appliedNs - 100'000'000, trialEndNs);
}

std::vector<FabricDelta> fabricDeltas(const FabricEvidence& f, int64_t fromNs, int64_t toNs) {
  // The last sample at or before each edge (cumulative counters), per (port, queue).
  std::map<std::pair<std::string, int>, std::pair<const FabricSample*, const FabricSample*>> edges;
  std::map<std::pair<std::string, int>, const FabricSample*> first;
  std::map<std::pair<std::string, int>, uint64_t> depth;
  for (const auto& s : f.samples) {
    auto key = std::make_pair(s.port, s.queue);
    first.try_emplace(key, &s);
    auto& [a, b] = edges[key];
    if (s.tNs <= fromNs) a = &s;
    if (s.tNs <= toNs) b = &s;
    if (s.tNs >= fromNs && s.tNs <= toNs) depth[key] = std::max(depth[key], s.depthBytes);
  }
  std::vector<FabricDelta> out;
  for (const auto& [key, e] : edges) {
    const FabricSample* a = e.first;
    const FabricSample* b = e.second;
    if (!b) continue;
    // A window that starts before the first sample (the run's first moments) counts from it.
    if (!a) a = first[key];
    FabricDelta d;
    d.port = key.first;
    d.queue = key.second;
    d.pfcRx = b->pfcRx - std::min(b->pfcRx, a->pfcRx);
    d.pfcTx = b->pfcTx - std::min(b->pfcTx, a->pfcTx);
    d.ecnMarked = b->ecnMarked - std::min(b->ecnMarked, a->ecnMarked);
    d.drops = (b->drops + b->wdDrops) - std::min(b->drops + b->wdDrops, a->drops + a->wdDrops);
    d.pausedNs = std::max<int64_t>(0, b->pausedNs - a->pausedNs);
    d.xoffNs = std::max<int64_t>(0, b->xoffNs - a->xoffNs);
    d.stormGaps = b->stormGaps - std::min(b->stormGaps, a->stormGaps);
    d.maxDepthBytes = depth[key];
    if (d.any()) out.push_back(d);
  }
  return out;
}

std::map<std::string, uint64_t> nicDeltas(const std::vector<NicSample>& samples, int64_t fromNs, int64_t toNs) {
  // In time order: one agent's samples arrive in order, but their times are mapped through a
  // clock offset and a reordered pair must not read as a reset.
  std::vector<const NicSample*> ordered;
  ordered.reserve(samples.size());
  for (const auto& s : samples) ordered.push_back(&s);
  std::stable_sort(ordered.begin(), ordered.end(), [](const NicSample* a, const NicSample* b) { return a->tNs < b->tNs; });
  std::map<std::string, uint64_t> last, grown;
  for (const NicSample* s : ordered) {
    if (s->tNs > toNs) break;
    const bool inside = s->tNs > fromNs;
    for (const auto& [name, v] : s->values) {
      auto [it, first] = last.try_emplace(name, v);
      if (first) continue;
      if (inside) {
        // A value below the last one is a counter that was reset: it counted up from 0 to v.
        uint64_t g = v >= it->second ? v - it->second : v;
        if (g > 0) grown[name] += g;
      }
      it->second = v;
    }
  }
  return grown;
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
  // Per node, then the job as the bin-wise sum.
  auto trialGrids = [&](const Trial& t) {
    std::vector<Grid> grids;
    for (const auto& name : run.plan.workloadNodes) {
      auto it = run.series.find(name);
      static const std::vector<Bin> none;
      grids.push_back(toGrid(it == run.series.end() ? none : it->second, w, t.startNs, t.endNs));
    }
    Grid job = sumGrids(grids);
    job.startNs = t.startNs;
    job.binNs = w;
    return std::pair{std::move(grids), std::move(job)};
  };
  // Each scope's band depth in every completed trial: a trial's band is widened to the run's
  // typical depth (widenBand).
  std::map<std::string, std::vector<std::pair<double, double>>> depths;
  for (const auto& t : run.plan.trials) {
    if (run.endedNs < t.endNs) continue;
    auto [grids, jobGrid] = trialGrids(t);
    auto add = [&](const std::string& scope, const Grid& g) {
      auto b = baselineRate(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs);
      if (!b || *b <= 0) return;
      if (auto band = baselineBand(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs, ss.holdNs, *b))
        depths[scope].push_back(bandDepth(*band, *b));
    };
    for (size_t k = 0; k < grids.size(); k++) add(run.plan.workloadNodes[k], grids[k]);
    add("job", jobGrid);
  }

  for (const auto& t : run.plan.trials) {
    TrialScore ts;
    ts.trial = t.index;
    ts.label = t.label();
    ts.completed = run.endedNs >= t.endNs;
    // The nodes' NIC and RDMA counters while each fault was on. Evidence rather than a score,
    // so also for a trial cut short (what the NICs saw before an abort is the first question).
    if (!run.nicSamples.empty())
      for (const auto& f : run.faults) {
        if (f.trial != t.index || !f.appliedNs) continue;
        NicWindow win{f.step, f.node, f.kind, f.role, *f.appliedNs,
                      f.revertedNs.value_or(std::min(t.endNs, std::max(run.endedNs, *f.appliedNs))), {}};
        for (const auto& [node, samples] : run.nicSamples)
          if (auto d = nicDeltas(samples, win.fromNs, win.toNs); !d.empty()) win.nodes[node] = std::move(d);
        ts.nicWindows.push_back(std::move(win));
      }
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

    auto [grids, jobGrid] = trialGrids(t);
    const std::vector<std::string>& nodes = run.plan.workloadNodes;
    int64_t clockUncertaintyNs = 0;
    for (const auto& c : run.clocks) clockUncertaintyNs = std::max(clockUncertaintyNs, c.uncertaintyNs);

    auto scoreScope = [&](const std::string& scope, const Grid& g, std::vector<double> baseIter,
                          auto windowIter) {
      ScopeScore sc;
      sc.scope = scope;
      sc.baseline = baselineRate(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs);
      if (sc.baseline) {
        sc.band = baselineBand(g, t.baselineFromNs, t.baselineToNs, ss.smoothNs, ss.holdNs, *sc.baseline);
        if (sc.band) sc.band = widenBand(*sc.band, *sc.baseline, depths[scope]);
      }
      sc.baselineIterations = iterationStats(baseIter);
      if (sc.baseline && *sc.baseline > 0 && ts.faultStartNs) {
        sc.impact = scoreImpact(g, *sc.baseline, *ts.faultStartNs, *ts.faultEndNs, ss, sc.band);
        // Fault instants and bins come from different agents' clocks, each mapped onto the
        // controller's with an offset known to within its own uncertainty: the worst of them
        // adds to every time read between the two.
        sc.impact->uncertaintyNs += clockUncertaintyNs;
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

    // Fabric evidence: deltas per port and queue over the trial, metrics per scope (a node's
    // scope is its own switch port, named like the node on the lab), watchdog episodes.
    if (!run.fabric.source.empty()) {
      ts.fabric.source = run.fabric.source;
      ts.fabric.trial = fabricDeltas(run.fabric, t.startNs, t.endNs);
      {
        int64_t from = ts.faultStartNs.value_or(t.startNs), to = ts.faultEndNs.value_or(t.endNs);
        if (auto b = switchBusy(run.fabric.load, from, to)) {
          ts.fabric.switchBusyPct = b->pct;
          ts.fabric.switchBusyPeakPct = b->peakPct;
          ts.fabric.switchBusyFromNs = b->fromNs;
          ts.fabric.switchBusyToNs = b->toNs;
        }
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
      // Storms that began in this trial, matched with the watchdog's instants on the same queue.
      const double stalled = ts.job.baseline ? ss.stallFraction * *ts.job.baseline : 0;
      for (const auto& e : run.fabric.events) {
        if (e.what != "pfc_rx_start" || e.tNs < t.startNs || e.tNs >= t.endNs) continue;
        WatchdogEpisode ep{e.port, e.priority, e.tNs, {}, {}, {}, {}, {}};
        for (const auto& x : run.fabric.events) {
          if (x.port != e.port || x.priority != e.priority || x.tNs < e.tNs) continue;
          if (x.what == "pfc_rx_end" && !ep.stormEndNs) ep.stormEndNs = x.tNs;
          if (x.what == "wd_detect" && !ep.detectNs && !ep.stormEndNs) ep.detectNs = x.tNs;
          if (x.what == "wd_restore" && ep.detectNs && !ep.restoreNs) ep.restoreNs = x.tNs;
        }
        // The data plane: the job's longest stall that begins while the storm is on (a bursty
        // job's short gaps between iterations are stalls too; the storm's spread is the long
        // one), and the instant its traffic moves again. Only stalls that begin before the
        // watchdog acted count: one that begins after it (a busy host, another fault) is not
        // the storm's spread, whatever its length.
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
        ts.fabric.watchdog.push_back(ep);
      }
      for (const auto& ep : ts.fabric.watchdog) {
        if (ep.detectNs && !ts.job.fabric.count("watchdog_detect_time"))
          ts.job.fabric["watchdog_detect_time"] = double(*ep.detectNs - ep.stormStartNs);
        if (ep.restoreNs && ep.stormEndNs && !ts.job.fabric.count("watchdog_restore_time"))
          ts.job.fabric["watchdog_restore_time"] = double(*ep.restoreNs - *ep.stormEndNs);
      }
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
    auto judge = [&](const Expectation& e) {
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
        v.measuredText = whyMissing(e.metric, *sc);
      }
      return v;
    };
    if (scen)
      for (const auto& e : scen->requirements) {
        ts.conditions.push_back(judge(e));
        if (!ts.conditions.back().passed) ts.conditionReached = false;
      }
    if (scen && !ts.conditionReached) {
      // What never happened is not scored: a watchdog that was never needed is not verified.
      for (const auto& e : scen->expectations) {
        if (!e.stat.empty()) continue;  // judged over the repeated trials, below
        Verdict v = judge(e);
        v.passed = false;
        v.measuredText = "not scored: condition not reached (measured " + v.measuredText + ")";
        out.verdictsNotScored++;
        ts.verdicts.push_back(std::move(v));
      }
    } else if (scen)
      for (const auto& e : scen->expectations) {
        if (!e.stat.empty()) continue;  // judged over the repeated trials, below
        Verdict v = judge(e);
        (v.passed ? out.verdictsPassed : out.verdictsFailed)++;
        ts.verdicts.push_back(std::move(v));
      }
    out.trials.push_back(std::move(ts));
  }

  // Repeatability: the completed trials of each scenario (and sweep value) side by side, and
  // the scenario's stat = "cv" expectations judged on them.
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
    for (const auto& s : pb.scenarios)
      if (s.name == rg.scenario)
        for (const auto& e : s.expectations) {
          if (e.stat != "cv") continue;
          Verdict v;
          v.metric = "cv(" + e.metric + ")";
          v.scope = e.scope;
          v.op = toString(e.op);
          v.bound = e.bound;
          v.boundText = e.boundText;
          v.pos = e.pos;
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

  // The monitoring's expectations count like the fabric's: a missed or late alert fails the run.
  out.detection = scoreDetection(run, pb);
  out.verdictsPassed += out.detection.passed;
  out.verdictsFailed += out.detection.failed;

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
  } else if (std::any_of(out.trials.begin(), out.trials.end(), [](const TrialScore& t) { return !t.conditionReached; })) {
    out.outcome = Outcome::inconclusive;
    for (const auto& t : out.trials)
      if (!t.conditionReached) {
        for (const auto& c : t.conditions)
          if (!c.passed) {
            out.reason = t.label + ": condition not reached: " + c.metric + " " + c.op + " " + c.boundText + " (" +
                         c.scope + ") measured " + c.measuredText;
            break;
          }
        break;
      }
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
