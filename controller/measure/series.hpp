// A node's or the job's throughput series and the statistics scoring and the live run's
// guardrails read off it: the run's bins, a dense grid of them, sums, smoothing, the baseline's
// rate and band, medians and percentiles. Pure functions over plain data (docs/scoring.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "controller/measure/measurements.hpp"

namespace rc::controller {

// Bytes one node received during [tNs, tNs + binNs), on the run timeline (controller/run/timeline.hpp
// puts the agents' bins on the run's grid).
struct Bin {
  int64_t tNs = 0;  // start of the bin
  double bytes = 0;
};

// A dense series of byte counts in bins of binNs starting at startNs.
struct Grid {
  int64_t startNs = 0;
  int64_t binNs = 10'000'000;
  std::vector<double> bytes;
  double rate(size_t i) const { return bytes[i] * 1e9 / double(binNs); }  // bytes/s
  int64_t timeOf(size_t i) const { return startNs + int64_t(i) * binNs; }
  size_t size() const { return bytes.size(); }
};

// The bins of [fromNs, toNs) (both multiples of binNs) as a dense grid; absent bins are 0.
// A bin whose tNs is not a multiple of binNs counts towards the bin it starts in.
Grid toGrid(const std::vector<Bin>& bins, int64_t binNs, int64_t fromNs, int64_t toNs);
// Bin-wise sum of grids on the same timeline (the job's series).
Grid sumGrids(const std::vector<Grid>& grids);
// Index of the bin of G that contains T, clamped to the grid.
size_t binContaining(const Grid& g, int64_t t);
// Index of the first bin of G starting at or after T, clamped to the grid.
size_t binFrom(const Grid& g, int64_t t);

// Median (mean of the two middle values for an even count); nullopt when empty.
std::optional<double> median(std::vector<double> v);
// Nearest-rank percentile, p in (0, 100]: the smallest value with at least p% at or below it.
std::optional<double> percentile(std::vector<double> v, double p);

// Rates (bytes/s) of bins [lo, hi) averaged over a window of SMOOTH_NS centred on each bin,
// clipped to [lo, hi) (0 = the raw rates).
std::vector<double> smoothRates(const Grid& g, int64_t smoothNs, size_t lo, size_t hi);

// Median rate (bytes/s) of the bins that lie wholly in [fromNs, toNs), smoothed like the
// impact and recovery judgement (over SMOOTH_NS, within the window): a bursty collective's
// raw 10 ms bins have a median above their mean, which smoothed rates could never reach.
std::optional<double> baselineRate(const Grid& g, int64_t fromNs, int64_t toNs, int64_t smoothNs = 0);

// The band the healthy job stays in during the baseline, read off its own series (bytes/s):
// - floor: for the smoothed bin rates of the bins wholly in [fromNs, toNs) (leaving out half a
//   smoothing window at each end, where the average is over fewer bins), B minus the deeper of
//   kBandSigmas robust standard deviations and 1.25 x the depth of the lowest rate seen;
// - holdFloor: the same for the mean over a hold period (every hold-long stretch of the
//   baseline).
// A rate or mean at or above these is not evidence of a fault (docs/scoring.md).
// - the depth is capped at kBandMaxDepth x B: a baseline that dipped deeper (a stall from a
//   disturbance outside the job, such as a loaded host) shows an incident, not the job's noise;
//   CAPPED is set, with the lowest rate and its instant, and the report warns.
// - widenBand then widens a trial's band to the run's typical depth for the same scope.
constexpr double kBandSigmas = 3.5;
constexpr double kBandMargin = 1.25;
constexpr double kBandMaxDepth = 0.5;
std::optional<BaselineBand> baselineBand(const Grid& g, int64_t fromNs, int64_t toNs, int64_t smoothNs,
                                         int64_t holdNs, double baseline);

// A band's depth below B relative to B: {floor, hold floor}.
std::pair<double, double> bandDepth(const BaselineBand& band, double baseline);
// BAND widened to the median relative depth of DEPTHS ({floor, hold floor} per trial of the run,
// this one included) where that is deeper; never narrowed, never past kBandMaxDepth. The
// lowest point of one short calm baseline underestimates how far the same job's noise
// reaches (seen: 10.6 % in one trial, 18-32 % in the same run's others); the trials of a run
// are repeated samples of that noise. Fewer than 3 trials: BAND unchanged.
BaselineBand widenBand(BaselineBand band, double baseline, const std::vector<std::pair<double, double>>& depths);

// How far an instant read off a series may be from the true one: one bin, plus half the
// smoothing window (a step in x moves the smoothed series over that span).
int64_t timingUncertaintyNs(const Grid& g, int64_t smoothNs);

}  // namespace rc::controller
