// The throughput series' building blocks (see series.hpp).
#include "controller/measure/series.hpp"

#include <algorithm>
#include <cmath>

namespace rc::controller {
namespace {

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

size_t binContaining(const Grid& g, int64_t t) {
  int64_t i = floorDiv(t - g.startNs, g.binNs);
  return size_t(std::clamp<int64_t>(i, 0, int64_t(g.size())));
}

size_t binFrom(const Grid& g, int64_t t) {
  int64_t i = floorDiv(t - g.startNs + g.binNs - 1, g.binNs);
  return size_t(std::clamp<int64_t>(i, 0, int64_t(g.size())));
}

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

}  // namespace rc::controller
