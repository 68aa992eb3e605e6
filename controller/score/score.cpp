// Scoring of a run: the definitions of docs/scoring.md, as pure functions over series.
#include "controller/score/score.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/units.hpp"
#include "controller/run/fabric_sampler.hpp"

namespace rc::controller {

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

}  // namespace rc::controller
