// Scoring: building blocks and whole runs on synthetic series with known answers.
#include <catch2/catch.hpp>
#include "test_util.hpp"

#include <cmath>
#include <random>

#include "controller/report/report.hpp"
#include "controller/score/score.hpp"
#include "controller/run/workload_run.hpp"
#include "synthetic_run.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_score {

using namespace rc::controller;
using rc::test::Shape;

namespace {
using rctest::kMs;
using rctest::kS;
}  // namespace

TEST_CASE("median and nearest-rank percentiles") {
  CHECK(*median({3, 1, 2}) == 2);
  CHECK(*median({4, 1, 3, 2}) == 2.5);
  CHECK_FALSE(median({}).has_value());
  std::vector<double> hundred;
  for (int i = 1; i <= 100; i++) hundred.push_back(i);
  auto [p, want] = GENERATE(table<double, double>({{50, 50}, {99, 99}, {100, 100}, {1, 1}, {99.5, 100}}));
  CHECK(*percentile(hundred, p) == want);
  CHECK(*percentile({5, 1, 9, 7, 3, 2, 8, 6, 4, 10}, 99) == 10);  // p99 of 10 values is the max
}

TEST_CASE("grids: alignment, gaps, sums") {
  std::vector<Bin> bins{{0, 10}, {100, 20}, {250, 5}, {400, 7}};
  Grid g = toGrid(bins, 100, 0, 400);
  REQUIRE(g.size() == 4);
  CHECK(g.bytes == std::vector<double>{10, 20, 5, 0});  // 250 lands in bin 2; 400 is outside
  Grid s = sumGrids({g, g});
  CHECK(s.bytes == std::vector<double>{20, 40, 10, 0});
  CHECK(g.rate(0) == Approx(10 * 1e9 / 100));
}

// Per node (1000 bytes per 100 ms bin = 10 kB/s baseline), fault 10 s - 12 s unless noted.
struct Expected {
  Shape shape;
  std::optional<int64_t> timeToImpact;
  std::optional<int64_t> recovery;
  double lossBytes;
  double lossPct;
  int64_t stall;
  int64_t windowTo;
};

TEST_CASE("impact scores on known shapes") {
  auto e = GENERATE(values<Expected>({
      // Out for 2.5 s: impact at once, recovered 500 ms after the fault, 25 bins lost.
      {Shape::cleanStep, 0, 500 * kMs, 25000, 100, 2500 * kMs, 12500 * kMs},
      // Ramp of 10 % per bin after the fault: good (>= 95 %) from bin 129 = 12.9 s.
      {Shape::slowRamp, 0, 900 * kMs, 24500, 24500.0 / 29000 * 100, 2000 * kMs, 12900 * kMs},
      // Half speed forever: never recovered, loss counted to the trial end (30 s).
      {Shape::neverRecovers, 0, std::nullopt, 110000, 55, 2000 * kMs, 30000 * kMs},
      // Noise within +-3 % never looks like impact; fault ends at 11 s here.
      {Shape::noisyBaseline, 0, 0, 10000, 100, 1000 * kMs, 11000 * kMs},
      // Nothing happens: no impact, recovered at once, no loss.
      {Shape::noEffect, std::nullopt, 0, 0, 0, 0, 12000 * kMs},
  }));
  CAPTURE(int(e.shape));
  Playbook pb = rc::test::syntheticPlaybook();
  int64_t faultEnd = e.shape == Shape::noisyBaseline ? 11 * kS : 12 * kS;
  RunResult run = rc::test::syntheticRun(pb, e.shape, 10 * kS, faultEnd);
  Grid g = toGrid(run.series["n1"], run.binNs, 0, 30 * kS);
  auto B = baselineRate(g, 1 * kS, 10 * kS);
  REQUIRE(B);
  CHECK(*B == Approx(10000));
  Impact im = scoreImpact(g, *B, 10 * kS, faultEnd, pb.scoring);
  CHECK(im.timeToImpactNs == e.timeToImpact);
  CHECK(im.recoveryTimeNs == e.recovery);
  CHECK(im.recovered == e.recovery.has_value());
  CHECK(im.lossBytes == Approx(e.lossBytes));
  CHECK(im.lossPct == Approx(e.lossPct));
  CHECK(im.stallNs == e.stall);
  CHECK(im.longestStallNs == e.stall);
  CHECK(im.windowFromNs == 10 * kS);
  CHECK(im.windowToNs == e.windowTo);
}

TEST_CASE("fault times inside a bin are measured from the actual times") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  Grid g = toGrid(run.series["n1"], run.binNs, 0, 30 * kS);
  // Applied 30 ms before traffic stops: impact is seen in the next bin, 70 ms later.
  Impact im = scoreImpact(g, 10000, 9970 * kMs, 12030 * kMs, pb.scoring);
  CHECK(im.timeToImpactNs == 30 * kMs);  // bin 100 starts 30 ms after 9.97 s
  CHECK(im.recoveryTimeNs == 470 * kMs);
}

TEST_CASE("a whole run: scopes, iterations, counters, cost, verdicts") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  Scores s = score(run, pb);
  REQUIRE(s.trials.size() == 1);
  const TrialScore& t = s.trials[0];
  CHECK(t.completed);
  CHECK(t.problems.empty());
  CHECK(t.faultStartNs == 10 * kS);
  CHECK(t.faultEndNs == 12 * kS);
  CHECK(*t.job.baseline == Approx(20000));  // two nodes
  REQUIRE(t.job.impact);
  CHECK(t.job.impact->recoveryTimeNs == 500 * kMs);
  CHECK(t.job.impact->lossBytes == Approx(50000));
  REQUIRE(t.nodes.size() == 2);
  CHECK(t.nodes[1].scope == "n2");
  CHECK(t.nodes[1].counterDeltas.at("link_downed") == 1);
  CHECK(t.job.counterDeltas.at("rx_packets") == 120000);
  // Baseline iterations are 100 ms; the one in flight during the outage took 10.0 s -> 12.6 s.
  REQUIRE(t.job.baselineIterations);
  CHECK(t.job.baselineIterations->p50Ns == 100 * kMs);
  REQUIRE(t.job.windowIterations);
  CHECK(t.job.windowIterations->maxNs == 2600 * kMs);
  CHECK(*metricValue(t.job, "iteration_p99_ratio") == Approx(26));
  // busbw: 4 MiB per 100 ms iteration is 41.9 MB/s algbw, x 2(2-1)/2 = 1 for two ranks.
  CHECK(*t.job.busbw == Approx(4194304 / 0.1));
  // 50 kB lost at 20 kB/s = 2.5 s of the whole job; 1024 GPUs; 2.0 per GPU-hour.
  CHECK(*t.job.gpuHours == Approx(1024 * 2.5 / 3600));
  CHECK(*t.job.cost == Approx(1024 * 2.5 / 3600 * 2));
  CHECK(*t.job.gpuHoursPerPeriod == Approx(1024 * 2.5 / 3600 * 30));
  // recovery 500 ms <= 1 s passes twice (job, n1); loss 100 % < 90 fails.
  REQUIRE(t.verdicts.size() == 3);
  CHECK(t.verdicts[0].passed);
  CHECK(t.verdicts[0].measuredText == "500ms");
  CHECK_FALSE(t.verdicts[1].passed);
  CHECK(t.verdicts[1].measuredText == "100.00%");
  CHECK(t.verdicts[2].passed);
  CHECK(s.outcome == Outcome::failed);
  CHECK(exitCodeFor(s.outcome) == 1);
  CHECK(s.verdictsPassed == 2);
  CHECK(s.verdictsFailed == 1);
}

TEST_CASE("the agents' clock-offset uncertainty widens every time read between fault and bins", "[score]") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  // The synthetic run's own clocks (35 and 40 us) count already: without any, one bin + half
  // the smoothing; with them, 40 us more.
  const int64_t withSynthetic = score(run, pb).trials[0].job.impact->uncertaintyNs;
  run.clocks.clear();
  const int64_t without = score(run, pb).trials[0].job.impact->uncertaintyNs;
  CHECK(withSynthetic == without + 40'000);
  ClockInfo a, b;
  a.node = "n1";
  a.uncertaintyNs = 40'000;  // 80 us best round trip
  b.node = "n2";
  b.uncertaintyNs = 3 * kMs;  // a slow management path
  run.clocks = {a, b};
  Scores s = score(run, pb);
  // The worst clock counts, once; the answers themselves do not move.
  CHECK(s.trials[0].job.impact->uncertaintyNs == without + 3 * kMs);
  CHECK(s.trials[0].job.impact->recoveryTimeNs == 500 * kMs);
  for (const auto& n : s.trials[0].nodes) CHECK(n.impact->uncertaintyNs == without + 3 * kMs);
}

TEST_CASE("not recovered fails the recovery expectation") {
  Playbook pb = rc::test::syntheticPlaybook();
  Scores s = score(rc::test::syntheticRun(pb, Shape::neverRecovers), pb);
  const Verdict& v = s.trials[0].verdicts[0];
  CHECK_FALSE(v.passed);
  CHECK_FALSE(v.measured.has_value());
  CHECK(v.measuredText == "not recovered");
  CHECK(s.outcome == Outcome::failed);
}

TEST_CASE("no effect passes every expectation") {
  Playbook pb = rc::test::syntheticPlaybook();
  Scores s = score(rc::test::syntheticRun(pb, Shape::noEffect), pb);
  CHECK(s.outcome == Outcome::passed);
  CHECK(exitCodeFor(s.outcome) == 0);
  CHECK_FALSE(s.trials[0].job.impact->timeToImpactNs.has_value());
}

TEST_CASE("errors outrank failures: abort, failed fault, missing revert, guardrail") {
  Playbook pb = rc::test::syntheticPlaybook();
  SECTION("aborted mid-trial") {
    RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
    run.abortReason = "agent n2 lost (lease expired)";
    run.endedNs = 11 * kS;
    Scores s = score(run, pb);
    CHECK(s.outcome == Outcome::error);
    CHECK(s.reason == "aborted: agent n2 lost (lease expired)");
    CHECK_FALSE(s.trials[0].completed);
    CHECK(exitCodeFor(s.outcome) == 2);
  }
  SECTION("a fault that failed to apply") {
    RunResult run = rc::test::syntheticRun(pb, Shape::noEffect);
    run.faults[0].appliedNs.reset();
    run.faults[0].revertedNs.reset();
    run.faults[0].error = "interface 'data0' is not in the agent's allowlist";
    Scores s = score(run, pb);
    CHECK(s.outcome == Outcome::error);
    CHECK(s.reason.find("link_flap on n2 (step flap) failed") != std::string::npos);
  }
  SECTION("baseline below the guardrail floor") {
    pb.guardrails.minBaselineBytesPerSec = 1e6;
    Scores s = score(rc::test::syntheticRun(pb, Shape::noEffect), pb);
    CHECK(s.outcome == Outcome::error);
    CHECK(s.reason.find("below the guardrail floor") != std::string::npos);
  }
  SECTION("a stall longer than max_stall") {
    pb.guardrails.maxStallNs = 1 * kS;
    Scores s = score(rc::test::syntheticRun(pb, Shape::cleanStep), pb);
    CHECK(s.outcome == Outcome::error);
    CHECK(s.reason.find("stalled for 2.500s") != std::string::npos);
  }
}

TEST_CASE("smoothing keeps bursty bins from reading as not recovered") {
  // 10 ms bins alternating 0 and 2x: a healthy bursty job with mean = baseline 1000 B/bin.
  std::vector<Bin> bins;
  for (int i = 0; i < 600; i++) {
    double b = (i % 2 == 0) ? 0.0 : 2000.0;
    if (i >= 200 && i < 300) b = 0;  // the fault: 1 s of nothing
    bins.push_back({int64_t(i) * 10'000'000, b});
  }
  Grid g = toGrid(bins, 10'000'000, 0, 6'000'000'000);
  ScoringSettings raw;
  raw.holdNs = 500'000'000;
  auto strict = scoreImpact(g, 100'000.0, 2'000'000'000, 3'000'000'000, raw);
  CHECK_FALSE(strict.recovered);  // every other raw bin is 0
  ScoringSettings smooth = raw;
  smooth.smoothNs = 100'000'000;  // 11 bins: means of 909 or 1091 B per bin
  smooth.epsilon = 0.1;
  auto im = scoreImpact(g, 100'000.0, 2'000'000'000, 3'000'000'000, smooth);
  REQUIRE(im.recovered);
  CHECK(*im.recoveryTimeNs <= 60'000'000);  // within half a smoothing window of the fault end
  REQUIRE(im.timeToImpactNs);
  CHECK(*im.timeToImpactNs <= 60'000'000);
}

TEST_CASE("a bursty job's baseline is smoothed like the judgement, and loss is net") {
  // 10 ms bins in a 40 ms cycle: three bins of 1333 B and a gap (the iteration's sync), so the
  // median bin (1333 B) is a third above the mean (1000 B). 2 s - 3 s: the fault, nothing moves.
  std::vector<Bin> bins;
  for (int i = 0; i < 600; i++) {
    double b = (i % 4 == 3) ? 0.0 : 4000.0 / 3;
    if (i >= 200 && i < 300) b = 0;
    bins.push_back({int64_t(i) * 10'000'000, b});
  }
  Grid g = toGrid(bins, 10'000'000, 0, 6'000'000'000);
  // Raw: the median bin, which no average of this job can reach.
  CHECK(*baselineRate(g, 0, 2'000'000'000) == Approx(133'333.3).epsilon(1e-3));
  ScoringSettings s;
  s.holdNs = 500'000'000;
  s.smoothNs = 200'000'000;  // 21 bins: 5 or 6 gaps, so the smoothed rate swings by 6 %
  s.epsilon = 0.1;           // ... and the tolerance must be wider than that swing
  auto B = baselineRate(g, 0, 2'000'000'000, s.smoothNs);
  REQUIRE(B);
  CHECK(*B == Approx(100'000).epsilon(0.02));  // the mean rate
  auto im = scoreImpact(g, *B, 2'000'000'000, 3'000'000'000, s);
  REQUIRE(im.recovered);
  CHECK(*im.recoveryTimeNs <= 110'000'000);  // within half a smoothing window of the fault end
  // Net loss: the 1 s outage at the mean rate; the gaps of the healthy cycles are not loss.
  CHECK(im.lossBytes == Approx(100'000).epsilon(0.05));
  // Judged against the raw median instead, the same healthy job never "recovers".
  auto wrong = scoreImpact(g, 133'333.3, 2'000'000'000, 3'000'000'000, s);
  CHECK_FALSE(wrong.recovered);
}

// ---------------------------------------------------------------- noise-calibrated judgement
namespace {

// A 30 s series of 10 ms bins around 1 MB/s with Gaussian noise of SIGMA (relative), with
// SHAPE applied in [faultStart, recoverAt): the rate there is FACTOR of normal.
Grid noisySeries(uint32_t seed, double sigma, int64_t from, int64_t to, double factor) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, sigma);
  Grid g;
  g.binNs = 10 * kMs;
  for (int64_t t = 0; t < 30 * kS; t += g.binNs) {
    double x = std::max(0.0, noise(rng)) * 1e4;  // bytes per 10 ms bin = 1 MB/s
    if (t >= from && t < to) x *= factor;
    g.bytes.push_back(x);
  }
  return g;
}

ScoringSettings judgement(int64_t smoothNs) {
  ScoringSettings s;
  s.binNs = 10 * kMs;
  s.epsilon = 0.05;
  s.holdNs = 1 * kS;
  s.smoothNs = smoothNs;
  return s;
}

Impact judge(const Grid& g, const ScoringSettings& s, int64_t faultStart, int64_t faultEnd, bool calibrated = true) {
  double B = *baselineRate(g, 1 * kS, faultStart, s.smoothNs);
  auto band = baselineBand(g, 1 * kS, faultStart, s.smoothNs, s.holdNs, B);
  REQUIRE(band);
  return scoreImpact(g, B, faultStart, faultEnd, s, calibrated ? band : std::nullopt);
}

}  // namespace

TEST_CASE("a noisy job back in its band at once is recovered at once, within the stated uncertainty") {
  // 10 % noise (sigma), raw 10 ms bins: the healthy job spends a third of its bins below
  // 0.95 B, so "1 s of consecutive bins above (1-e)B" almost never happens.
  auto [sigma, smooth] = GENERATE(table<double, int64_t>({{0.10, 0}, {0.05, 0}, {0.10, 250 * kMs}}));
  CAPTURE(sigma, smooth);
  for (uint32_t seed = 1; seed <= 20; seed++) {
    CAPTURE(seed);
    Grid g = noisySeries(seed, sigma, 10 * kS, 12 * kS, 0.0);  // out for 2 s, then back at once
    ScoringSettings s = judgement(smooth);
    Impact im = judge(g, s, 10 * kS, 12 * kS);
    REQUIRE(im.recovered);
    CHECK(im.uncertaintyNs == 10 * kMs + smooth / 2);
    CHECK(*im.recoveryTimeNs <= im.uncertaintyNs);
    CHECK(*im.timeToImpactNs <= im.uncertaintyNs);
  }
}

TEST_CASE("a noisy job's slow recovery is found within the stated uncertainty") {
  // Stalled 10-12 s, then at 50 % until 13.5 s, then back: recovery 1.5 s.
  for (uint32_t seed = 1; seed <= 20; seed++) {
    CAPTURE(seed);
    Grid g = noisySeries(seed, 0.08, 10 * kS, 12 * kS, 0.0);
    for (int64_t t = 12 * kS; t < 13500 * kMs; t += g.binNs) g.bytes[size_t(t / g.binNs)] *= 0.5;
    ScoringSettings s = judgement(100 * kMs);
    Impact im = judge(g, s, 10 * kS, 12 * kS);
    REQUIRE(im.recovered);
    CHECK(std::abs(*im.recoveryTimeNs - 1500 * kMs) <= im.uncertaintyNs);
  }
}

TEST_CASE("a fault that does nothing reports no impact and recovery 0 in nearly every trial (noise floor)") {
  auto sigma = GENERATE(0.03, 0.10);
  auto smooth = GENERATE(int64_t(0), 250 * kMs);
  CAPTURE(sigma, smooth);
  int impacted = 0, late = 0;
  for (uint32_t seed = 1; seed <= 50; seed++) {
    Grid g = noisySeries(seed, sigma, 0, 0, 1.0);
    Impact im = judge(g, judgement(smooth), 10 * kS, 12 * kS);
    if (im.timeToImpactNs) impacted++;
    if (!im.recovered || *im.recoveryTimeNs > im.uncertaintyNs) late++;
  }
  CHECK(impacted <= 1);  // of 50
  CHECK(late <= 1);
}

TEST_CASE("a baseline that stalls on its own (a disturbance) caps the band, so a fault still shows") {
  // The demo beside a build: the job's baseline stalled for 300 ms at 5 s; before the cap the
  // band's floor was 0 and a 2 s link-down read as "no impact".
  for (uint32_t seed = 1; seed <= 10; seed++) {
    CAPTURE(seed);
    Grid g = noisySeries(seed, 0.05, 10 * kS, 12 * kS, 0.0);
    for (int64_t t = 5 * kS; t < 5300 * kMs; t += g.binNs) g.bytes[size_t(t / g.binNs)] = 0;
    ScoringSettings s = judgement(250 * kMs);
    double B = *baselineRate(g, 1 * kS, 10 * kS, s.smoothNs);
    auto band = baselineBand(g, 1 * kS, 10 * kS, s.smoothNs, s.holdNs, B);
    REQUIRE(band);
    CHECK(band->capped);
    CHECK(band->floor == Approx((1 - kBandMaxDepth) * B));
    CHECK(band->lowestAtNs >= 5 * kS);
    CHECK(band->lowestAtNs < 5300 * kMs);
    CHECK(band->lowest < 0.3 * B);
    Impact im = judge(g, s, 10 * kS, 12 * kS);
    REQUIRE(im.timeToImpactNs);
    CHECK(*im.timeToImpactNs <= im.uncertaintyNs);
    REQUIRE(im.recovered);
    CHECK(*im.recoveryTimeNs <= im.uncertaintyNs);
  }
  // A calm baseline is not capped.
  Grid calm = noisySeries(1, 0.05, 0, 0, 1.0);
  double B = *baselineRate(calm, 1 * kS, 10 * kS, 250 * kMs);
  CHECK_FALSE(baselineBand(calm, 1 * kS, 10 * kS, 250 * kMs, 1 * kS, B)->capped);
}

TEST_CASE("a trial's band is widened to the run's typical depth, never narrowed") {
  BaselineBand calm{.floor = 894, .holdFloor = 950};  // 10.6 % and 5 % below B = 1000
  // The same job's depths in the run's trials (this one included): median 21.5 % and 10 %.
  std::vector<std::pair<double, double>> depths{{0.106, 0.05}, {0.18, 0.08}, {0.25, 0.12}, {0.32, 0.2}};
  BaselineBand w = widenBand(calm, 1000, depths);
  CHECK(w.floor == Approx(785));
  CHECK(w.holdFloor == Approx(900));
  CHECK(w.pooledOver == 4);
  // A trial that is noisier than the run's typical keeps its own band.
  BaselineBand noisy{.floor = 600, .holdFloor = 800};
  BaselineBand n = widenBand(noisy, 1000, depths);
  CHECK(n.floor == 600);
  CHECK(n.holdFloor == 800);
  CHECK(n.pooledOver == 0);
  // Fewer than three trials are no estimate of the typical: unchanged.
  depths.resize(2);
  CHECK(widenBand(calm, 1000, depths).floor == 894);
  // Never past the cap.
  std::vector<std::pair<double, double>> wild{{0.9, 0.9}, {0.8, 0.8}, {0.7, 0.7}};
  CHECK(widenBand(calm, 1000, wild).floor == Approx(1000 * (1 - kBandMaxDepth)));
}

TEST_CASE("fabric evidence: deltas per queue, fabric metrics, and the watchdog's timing next to the data plane's") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  rc::test::addStormEvidence(run);
  // Deltas over the fault window only.
  auto ds = fabricDeltas(run.fabric, 10 * kS, 12 * kS);
  REQUIRE(ds.size() == 2);
  CHECK(ds[0].port == "n1");
  CHECK(ds[0].xoffNs == 200 * kMs);
  CHECK(ds[0].ecnMarked == 200);
  CHECK(ds[1].port == "n2");
  CHECK(ds[1].pfcRx == 6000);
  Scores s = score(run, pb);
  REQUIRE(s.trials.size() == 1);
  const TrialScore& t = s.trials[0];
  CHECK(t.job.fabric.at("pause_frames") == 6000);
  CHECK(t.job.fabric.at("pause_spread_time") == 200 * kMs);
  CHECK(t.job.fabric.at("ecn_marks") == 200);
  CHECK(t.job.fabric.at("watchdog_detect_time") == 200 * kMs);
  CHECK(t.job.fabric.at("watchdog_restore_time") == 200 * kMs);
  CHECK(*metricValue(t.job, "watchdog_detect_time") == 200 * kMs);
  // A node's scope is its own switch port.
  for (const auto& n : t.nodes) CHECK(n.fabric.at("pause_frames") == (n.scope == "n2" ? 6000 : 0));
  REQUIRE(t.fabric.watchdog.size() == 1);
  const auto& ep = t.fabric.watchdog[0];
  CHECK(ep.stormStartNs == 10 * kS);
  CHECK(ep.detectNs == 10200 * kMs);
  CHECK(ep.stormEndNs == 12 * kS);
  CHECK(ep.restoreNs == 12200 * kMs);
  // The data plane: cleanStep's traffic is out from 10 s to 12.5 s and moves again at 12.5 s.
  CHECK(ep.dataPlaneMovingNs == 12500 * kMs);
  // Restoration from the data plane needs metered traffic towards the stormed port: none here.
  CHECK(ep.dataPlaneDeliveredNs == std::nullopt);
  // With it: frames for n2 flowed, stopped when the storm held (then the watchdog dropped)
  // them, and the first one delivered after the storm marks PFC honoured again.
  run.fabric.events.push_back({9 * kS, "flow_start", "n2", 0, 7490});
  run.fabric.events.push_back({10050 * kMs, "flow_end", "n2", 0, 7490});
  run.fabric.events.push_back({12100 * kMs, "flow_start", "n1", 0, 7490});  // another port
  run.fabric.events.push_back({12201 * kMs, "flow_start", "n2", 0, 7490});
  Scores withFlow = score(run, pb);
  CHECK(withFlow.trials[0].fabric.watchdog.at(0).dataPlaneDeliveredNs == 12201 * kMs);
  // Traffic that never stopped (nothing was held) cannot show restoration: no figure.
  run.fabric.events.erase(run.fabric.events.end() - 3);
  Scores flowing = score(run, pb);
  CHECK(flowing.trials[0].fabric.watchdog.at(0).dataPlaneDeliveredNs == std::nullopt);
}

TEST_CASE("NIC counter deltas per fault window: inside counts, outside does not, a reset or a lost sample never goes negative") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  rc::test::addRxeCounters(run);
  const auto& n1 = run.nicSamples.at("n1");
  const auto& n2 = run.nicSamples.at("n2");
  using Deltas = std::map<std::string, uint64_t>;
  // The fault window (10 s, 12 s]: what moved in it, by exactly as much; not what moved only
  // outside it (retry_exceeded_err) or stood still in it (rcvd_pkts).
  CHECK(nicDeltas(n1, 10 * kS, 12 * kS) ==
        Deltas{{"net.rx_bytes", 20000}, {"rdma.completer_retry_err", 10}, {"rdma.sent_pkts", 200}});
  // A reset inside the window counts up from 0 (3, then 4 more), never 7 - 1000; a counter
  // first seen inside it counts from its first value.
  CHECK(nicDeltas(n2, 10 * kS, 12 * kS) == Deltas{{"rdma.out_of_seq_request", 12}, {"rdma.rcvd_seq_err", 7}});
  // Before the fault: the retry counter moved once, the completer's did not.
  Deltas before = nicDeltas(n1, 0, 10 * kS);
  CHECK(before.at("rdma.retry_exceeded_err") == 1);
  CHECK(before.count("rdma.completer_retry_err") == 0);
  CHECK(before.at("rdma.sent_pkts") == 1000);
  // Edges: a sample at the window's start is its "before"; one at its end is in it. A window
  // that starts before the first sample counts from that sample.
  CHECK(nicDeltas(n1, 10 * kS, 10'100 * kMs).at("rdma.completer_retry_err") == 1);
  CHECK(nicDeltas(n1, -5 * kS, kS).at("rdma.sent_pkts") == 100);
  // Nothing moved, no samples, or a window before any: empty, never a zero entry.
  CHECK(nicDeltas(n1, 10 * kS, 10 * kS).empty());
  CHECK(nicDeltas({}, 0, 30 * kS).empty());
  CHECK(nicDeltas(n1, -5 * kS, -kS).empty());
  // Samples out of order (times through a clock offset) read the same.
  std::vector<NicSample> reversed(n2.rbegin(), n2.rend());
  CHECK(nicDeltas(reversed, 10 * kS, 12 * kS) == nicDeltas(n2, 10 * kS, 12 * kS));

  // Scored: one window per applied fault, applied to reverted, per node.
  Scores s = score(run, pb);
  REQUIRE(s.trials.at(0).nicWindows.size() == 1);
  const NicWindow& w = s.trials[0].nicWindows[0];
  CHECK(w.step == "flap");
  CHECK(w.node == "n2");
  CHECK(w.kind == "link_flap");
  CHECK(w.fromNs == 10 * kS);
  CHECK(w.toNs == 12 * kS);
  CHECK(w.nodes.at("n1") == nicDeltas(n1, 10 * kS, 12 * kS));
  CHECK(w.nodes.at("n2").at("rdma.rcvd_seq_err") == 7);
  // Without NIC counters there is no window.
  CHECK(score(rc::test::syntheticRun(pb, Shape::cleanStep), pb).trials.at(0).nicWindows.empty());
  // A run cut short at 11 s with the fault never reverted: the window ends with the run, and
  // the trial that did not complete still has it.
  run.endedNs = 11 * kS;
  run.faults[0].revertedNs.reset();
  Scores cut = score(run, pb);
  REQUIRE(cut.trials.at(0).nicWindows.size() == 1);
  CHECK_FALSE(cut.trials[0].completed);
  CHECK(cut.trials[0].nicWindows[0].toNs == 11 * kS);
  CHECK(cut.trials[0].nicWindows[0].nodes.at("n1").at("rdma.sent_pkts") == 100);
  CHECK(cut.trials[0].nicWindows[0].nodes.at("n1").at("rdma.completer_retry_err") == 10);
  // A fault that was never applied has no window.
  run.faults[0].appliedNs.reset();
  CHECK(score(run, pb).trials.at(0).nicWindows.empty());
}

TEST_CASE("the data plane's detection is the stall the storm caused, not a longer one after the watchdog acted") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::spreadThenBusy);
  rc::test::addStormEvidence(run);  // storm 10-12 s, the watchdog detects it at 10.2 s
  Scores s = score(run, pb);
  CHECK(s.trials[0].fabric.watchdog.at(0).dataPlaneMovingNs == 10200 * kMs);
  // A watchdog that never fired: the storm's longest stall is the one it caused.
  run.fabric.events.erase(run.fabric.events.begin() + 1);
  Scores off = score(run, pb);
  CHECK(off.trials[0].fabric.watchdog.at(0).dataPlaneMovingNs == 11500 * kMs);
}

TEST_CASE("fabric metrics are missing, with a reason, where there is no evidence or the watchdog never fired") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  Scores s = score(run, pb);
  CHECK_FALSE(metricValue(s.trials[0].job, "pause_frames").has_value());
  rc::test::addStormEvidence(run);
  run.fabric.events.erase(run.fabric.events.begin() + 1);  // no wd_detect: the watchdog is off
  Scores s2 = score(run, pb);
  CHECK(s2.trials[0].job.fabric.count("watchdog_detect_time") == 0);
  CHECK(s2.trials[0].fabric.watchdog.at(0).detectNs == std::nullopt);
}

TEST_CASE("a scenario whose condition was not reached is not scored: inconclusive, exit 2, said in every report") {
  std::string text = std::string(rc::test::kSyntheticPlaybook) +
                     "[[require]]\nmetric = \"pause_frames\"\nop = \">\"\nbound = 0\n";
  auto pb = parsePlaybook(text, "conditional.toml");
  REQUIRE(pb);
  REQUIRE(pb->scenarios[0].requirements.size() == 1);
  RunResult run = rc::test::syntheticRun(*pb, Shape::cleanStep);
  // No fabric evidence: no pause frames were seen, so the storm the scenario needs never happened.
  Scores s = score(run, *pb);
  REQUIRE(s.trials.size() == 1);
  const TrialScore& t = s.trials[0];
  CHECK_FALSE(t.conditionReached);
  REQUIRE(t.conditions.size() == 1);
  CHECK_FALSE(t.conditions[0].passed);
  CHECK(s.outcome == Outcome::inconclusive);
  CHECK(exitCodeFor(s.outcome) == 2);
  CHECK(s.verdictsPassed == 0);
  CHECK(s.verdictsFailed == 0);
  CHECK(s.verdictsNotScored == 3);
  for (const auto& v : t.verdicts) CHECK(v.measuredText.rfind("not scored: condition not reached", 0) == 0);
  CHECK(s.reason.find("condition not reached: pause_frames > 0") != std::string::npos);
  json doc = makeResultDocument(run, *pb, s);
  CHECK(doc["outcome"]["verdict"] == "inconclusive");
  CHECK(doc["trials"][0]["condition"]["reached"] == false);
  CHECK(renderText(doc).find("CONDITION NOT REACHED") != std::string::npos);
  std::string junit = renderJunit(doc);
  CHECK(junit.find("skipped=\"3\"") != std::string::npos);
  CHECK(renderHtml(doc).find("CONDITION NOT REACHED") != std::string::npos);

  // With the storm on the wire the condition is met and the expectations are scored as ever.
  rc::test::addStormEvidence(run);
  Scores s2 = score(run, *pb);
  CHECK(s2.trials[0].conditionReached);
  CHECK(s2.verdictsNotScored == 0);
  CHECK(s2.verdictsPassed + s2.verdictsFailed == 3);
  CHECK(s2.outcome != Outcome::inconclusive);
}

TEST_CASE("the wire span of metered traffic: first frame, end of the last burst, open at the end") {
  FabricEvidence f;
  f.source = "labswitch test";
  auto ev = [&](int64_t t, const char* what, const char* port, int l4) { f.events.push_back({t, what, port, 0, l4}); };
  ev(1 * kS, "flow_start", "n1", 7490);  // before the window: an earlier trial's
  ev(2 * kS, "flow_end", "n1", 7490);
  ev(10 * kS, "flow_start", "n1", 7490);
  ev(10 * kS + 5 * kMs, "flow_start", "n2", 7490);  // another port
  ev(11 * kS, "flow_end", "n1", 7490);
  ev(11200 * kMs, "flow_start", "n1", 7490);
  ev(12 * kS + 3 * kMs, "flow_end", "n1", 7490);
  ev(12 * kS + 4 * kMs, "flow_start", "n1", 7491);  // another L4 port
  auto w = wireSpan(f, "n1", 7490, 9 * kS, 20 * kS);
  REQUIRE(w);
  CHECK(w->firstNs == 10 * kS);
  CHECK(w->lastNs == 12 * kS + 3 * kMs);
  CHECK(w->episodes == 2);
  CHECK_FALSE(wireSpan(f, "n3", 7490, 0, 20 * kS));
  auto open = wireSpan(f, "n1", 7491, 0, 20 * kS);
  REQUIRE(open);
  CHECK_FALSE(open->lastNs);  // still on the wire when the evidence ended
}

// The synthetic playbook's repeated trials, trial I in SHAPES[I] at SCALES[I] of its rate (1 when
// not given), each with its flap from 10 s to 12 s.
RunResult repeatedRun(const Playbook& pb, const std::vector<Shape>& shapes, const std::vector<double>& scales = {}) {
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  REQUIRE(run.plan.trials.size() == shapes.size());
  run.faults.clear();
  run.iterations.clear();
  run.counters.clear();
  for (const auto& node : run.plan.workloadNodes) {
    auto& bins = run.series[node];
    bins.clear();
    for (const auto& t : run.plan.trials)
      for (int64_t i = 0; i < (t.endNs - t.startNs) / run.binNs; i++)
        bins.push_back({t.startNs + i * run.binNs, rc::test::shapeBytes(shapes[size_t(t.index)], int(i)) *
                                                      (scales.empty() ? 1.0 : scales[size_t(t.index)])});
  }
  for (const auto& t : run.plan.trials)
    for (const auto& f : t.faults)
      run.faults.push_back({t.index, f.step, f.node, f.kind, f.params, f.atNs, t.startNs + 10 * kS,
                            t.startNs + 12 * kS, ""});
  run.endedNs = run.plan.durationNs;
  return run;
}

// The synthetic playbook with repeat = 3 and EXPECTS appended.
Playbook repeatedPlaybook(const std::string& expects, const char* name) {
  auto pb = parsePlaybook("repeat = 3\n" + std::string(rc::test::kSyntheticPlaybook) + expects, name);
  REQUIRE(pb);
  return *pb;
}

// The one group of repeated trials in S.
const RepeatGroup& onlyGroup(const Scores& s) {
  REQUIRE(s.repeatability.size() == 1);
  return s.repeatability[0];
}

TEST_CASE("repeated trials: mean, sd and CV per metric, and an expectation may bound the CV") {
  const Playbook pb = repeatedPlaybook(
    "[[expect]]\nmetric = \"baseline\"\nstat = \"cv\"\nop = \"<\"\nbound = 5\n"
    "[[expect]]\nmetric = \"baseline\"\nstat = \"cv\"\nop = \"<\"\nbound = 1\n",
    "repeat.toml");
  // Three trials of the clean step at 100 %, 102 % and 98 % of the rate: baseline CV 2 %.
  RunResult run = repeatedRun(pb, {Shape::cleanStep, Shape::cleanStep, Shape::cleanStep}, {1.0, 1.02, 0.98});
  Scores s = score(run, pb);
  REQUIRE(s.trials.size() == 3);
  const RepeatGroup& g = onlyGroup(s);
  CHECK(g.trials == 3);
  auto base = std::find_if(g.metrics.begin(), g.metrics.end(), [](const RepeatMetric& m) { return m.metric == "baseline"; });
  REQUIRE(base != g.metrics.end());
  CHECK(base->values.size() == 3);
  REQUIRE(base->cvPct);
  CHECK(std::abs(*base->cvPct - 2.0) < 0.01);  // sd of {1, 1.02, 0.98} is 0.02 of the mean
  CHECK(base->bmwg == "throughput");
  REQUIRE(g.verdicts.size() == 2);
  CHECK(g.verdicts[0].metric == "cv(baseline)");
  CHECK(g.verdicts[0].passed);       // 2 % < 5 %
  CHECK_FALSE(g.verdicts[1].passed);  // 2 % is not < 1 %
  CHECK(s.outcome == Outcome::failed);
  // Per-trial verdicts leave the CV expectations out: 3 per trial, as the playbook's others.
  for (const auto& t : s.trials) CHECK(t.verdicts.size() == 3);
  json doc = makeResultDocument(run, pb, s);
  CHECK(doc["repeatability"][0]["verdicts"].size() == 2);
  CHECK(renderText(doc).find("FAIL cv(baseline) < 1% (job): 2.00% over 3 trials") != std::string::npos);
  CHECK(renderJunit(doc).find("repeatability of synthetic") != std::string::npos);

  // Without repeats a CV cannot be judged: the playbook is refused, naming the fix.
  auto single = parsePlaybook(std::string(rc::test::kSyntheticPlaybook) +
                                  "[[expect]]\nmetric = \"baseline\"\nstat = \"cv\"\nop = \"<\"\nbound = 5\n",
                              "single.toml");
  REQUIRE_FALSE(single);
  CHECK(single.error().message.find("needs repeated trials: set repeat = 3") != std::string::npos);
  auto badStat = parsePlaybook(std::string(rc::test::kSyntheticPlaybook) +
                                   "[[expect]]\nmetric = \"min_throughput\"\nstat = \"cv\"\nop = \"<\"\nbound = 5\n",
                               "bad.toml");
  REQUIRE_FALSE(badStat);
  CHECK(badStat.error().message.find("stat = \"cv\" needs a job metric shown over repeats") != std::string::npos);
}

TEST_CASE("repeated trials: an expectation may bound the median, where one disturbed trial of three does not decide") {
  const Playbook pb = repeatedPlaybook(
    "[[expect]]\nmetric = \"recovery_time\"\nstat = \"median\"\nop = \"<=\"\nbound = \"1s\"\n"
    "[[expect]]\nmetric = \"recovery_time\"\nstat = \"median\"\nop = \"<=\"\nbound = \"400ms\"\n",
    "median.toml");
  {
    // One trial of three never recovers: per trial it fails, the median (500 ms) meets 1 s.
    Scores s = score(repeatedRun(pb, {Shape::cleanStep, Shape::neverRecovers, Shape::cleanStep}), pb);
    const RepeatGroup& g = onlyGroup(s);
    REQUIRE(g.verdicts.size() == 2);
    CHECK(g.verdicts[0].metric == "median(recovery_time)");
    CHECK(g.verdicts[0].passed);
    REQUIRE(g.verdicts[0].measured);
    CHECK(*g.verdicts[0].measured == Approx(500e6).margin(20e6));
    INFO(g.verdicts[0].measuredText);
    CHECK(g.verdicts[0].measuredText.find("over 3 trials") != std::string::npos);
    CHECK(g.verdicts[0].measuredText.find("none") != std::string::npos);  // the trial that never recovered
    CHECK_FALSE(g.verdicts[1].passed);                                    // 500 ms is over 400 ms
    // Per-trial verdicts leave the median expectations out, as the CV ones.
    for (const auto& t : s.trials) CHECK(t.verdicts.size() == 3);
    json doc = makeResultDocument(repeatedRun(pb, {Shape::cleanStep, Shape::neverRecovers, Shape::cleanStep}), pb, s);
    CHECK(doc["playbook"]["scenarios"][0]["expectations"].back()["stat"] == "median");
    CHECK(renderText(doc).find("FAIL median(recovery_time) <= 400ms (job)") != std::string::npos);
    // The table shows each metric's median of the values present (the two that recovered).
    bool shown = false;
    for (auto& m : doc["repeatability"][0]["metrics"])
      if (m["metric"] == "recovery_time") {
        shown = true;
        CHECK(m["n"] == 2);
        CHECK(m["median"].get<double>() == Approx(500e6).margin(20e6));
      }
    CHECK(shown);
    CHECK(renderText(doc).find(", median 5") != std::string::npos);
  }
  {
    // Two of three never recover: a trial without a value counts against the bound, so the median fails.
    Scores s = score(repeatedRun(pb, {Shape::neverRecovers, Shape::cleanStep, Shape::neverRecovers}), pb);
    const RepeatGroup& g = onlyGroup(s);
    REQUIRE(g.verdicts.size() == 2);
    CHECK_FALSE(g.verdicts[0].passed);
    CHECK_FALSE(g.verdicts[0].measured);
    CHECK(g.verdicts[0].measuredText.rfind("none over 3 trials", 0) == 0);
    CHECK(s.outcome == Outcome::failed);
  }
  // A median needs three trials; it is judged on the job; an unknown stat names both.
  auto two = parsePlaybook("repeat = 2\n" + std::string(rc::test::kSyntheticPlaybook) +
                               "[[expect]]\nmetric = \"recovery_time\"\nstat = \"median\"\nop = \"<\"\nbound = \"1s\"\n",
                           "two.toml");
  REQUIRE_FALSE(two);
  CHECK(two.error().message.find("stat = \"median\" on recovery_time needs repeated trials: set repeat = 3") !=
        std::string::npos);
  auto scoped = parsePlaybook("repeat = 3\n" + std::string(rc::test::kSyntheticPlaybook) +
                                  "[[expect]]\nmetric = \"recovery_time\"\nstat = \"median\"\nscope = \"n1\"\n"
                                  "op = \"<\"\nbound = \"1s\"\n",
                              "scoped.toml");
  REQUIRE_FALSE(scoped);
  CHECK(scoped.error().message.find("stat = \"median\" is judged on the job: leave scope out") != std::string::npos);
  auto unknown = parsePlaybook("repeat = 3\n" + std::string(rc::test::kSyntheticPlaybook) +
                                   "[[expect]]\nmetric = \"recovery_time\"\nstat = \"p90\"\nop = \"<\"\nbound = \"1s\"\n",
                               "unknown.toml");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("use stat = \"median\"") != std::string::npos);
}

TEST_CASE("repeated trials: stall time and GPU-hours may be judged on their median (game-day)") {
  // game-day bounds both on the median of its 3 rounds: a trial whose job stays below its band
  // long after the last flap prices that tail into its lost bytes (GPU-hours) and its stall.
  const Playbook pb = repeatedPlaybook(
    "[[expect]]\nmetric = \"stall_time\"\nstat = \"median\"\nop = \"<\"\nbound = \"1h\"\n"
    "[[expect]]\nmetric = \"gpu_hours\"\nstat = \"median\"\nop = \"<\"\nbound = 1e9\n",
    "median-cost.toml");
  Scores s = score(repeatedRun(pb, {Shape::cleanStep, Shape::neverRecovers, Shape::spreadThenBusy}), pb);
  const RepeatGroup& g = onlyGroup(s);
  REQUIRE(g.verdicts.size() == 2);
  const char* names[] = {"stall_time", "gpu_hours"};
  for (int k = 0; k < 2; k++) {
    INFO(names[k]);
    std::vector<double> perTrial;
    for (const auto& t : s.trials) {
      auto x = metricValue(t.job, names[k]);
      REQUIRE(x);
      perTrial.push_back(*x);
    }
    REQUIRE(perTrial.size() == 3);
    // Three different costs: the median is the middle one, below the costliest trial, which
    // judged per trial would decide a bound between the two alone.
    std::sort(perTrial.begin(), perTrial.end());
    CHECK(perTrial[0] < perTrial[1]);
    CHECK(g.verdicts[size_t(k)].metric == "median(" + std::string(names[k]) + ")");
    REQUIRE(g.verdicts[size_t(k)].measured);
    CHECK(*g.verdicts[size_t(k)].measured == Approx(perTrial[1]));
    CHECK(*g.verdicts[size_t(k)].measured < perTrial[2]);
    CHECK(g.verdicts[size_t(k)].passed);
  }
}

TEST_CASE("live figures stop at the slowest node's newest bin", "[score][live]") {
  WorkloadSeries s;
  s.binNs = 10'000'000;
  s.startNs = 5 * kS;
  CHECK_FALSE(telemetryThroughNs(s));  // nothing reported yet
  // Telemetry of BINS bins of 1000 bytes from 1 s on the run timeline, from an agent whose
  // clock is 2 ms ahead.
  const int64_t offset = 2 * kMs;
  auto telemetry = [&](int64_t fromNs, size_t bins) {
    rc::proto::TelemetryMsg t;
    t.firstBinNs = s.startNs + offset + fromNs;
    t.binNs = s.binNs;
    t.bins.assign(bins, 1000);
    return t;
  };
  NodeSeries a, b, quiet;
  a.node = "n1";
  b.node = "n2";
  quiet.node = "n3";  // no bins yet: not waited for
  for (NodeSeries* n : {&a, &b, &quiet}) n->timeline = NodeTimeline(n->node, {offset, s.startNs}, s.binNs);
  a.timeline.add(telemetry(kS, 100), 100 * kS);
  b.timeline.add(telemetry(kS, 40), 100 * kS);
  s.nodes = {a, b, quiet};
  // n2's newest bin starts at 1.39 s: everything is known up to 1.40 s, not to n1's 2.0 s.
  REQUIRE(telemetryThroughNs(s));
  CHECK(*telemetryThroughNs(s) == 1'400'000'000);
  auto empty = telemetry(1'400'000'000, 1);  // a stalled node still reports (empty) bins
  empty.bins = {0};
  s.nodes[1].timeline.add(empty, 100 * kS);
  CHECK(*telemetryThroughNs(s) == 1'410'000'000);
}

TEST_CASE("the lab switch's load: its busy share over the fault window, the busiest second, and SATURATED in the report") {
  // A switch sampled every 100 ms: busy half the time, all the time from 10 s to 12 s.
  std::vector<SwitchLoad> load;
  int64_t busy = 0;
  for (int64_t t = 0; t <= 20 * kS; t += 100 * kMs) {
    load.push_back({t, t + 5 * kS, busy});  // its loop began 5 s before the run
    busy += (t >= 10 * kS && t < 12 * kS) ? 100 * kMs : 50 * kMs;
  }
  auto fault = switchBusy(load, 10 * kS, 12 * kS);
  REQUIRE(fault);
  CHECK(fault->pct == Approx(100));
  CHECK(fault->peakPct == Approx(100));
  auto whole = switchBusy(load, 0, 20 * kS);
  REQUIRE(whole);
  CHECK(whole->pct == Approx(55));     // 18 s at half, 2 s at all of it
  CHECK(whole->peakPct == Approx(100));  // its busiest second
  auto calm = switchBusy(load, 1 * kS, 9 * kS);
  REQUIRE(calm);
  CHECK(calm->pct == Approx(50));
  CHECK(calm->peakPct == Approx(50));
  // No samples, or one: no figure. A restarted switch (its loop time went back): no share across it.
  CHECK_FALSE(switchBusy({}, 0, 20 * kS));
  CHECK_FALSE(switchBusy({load[0]}, 0, 20 * kS));
  std::vector<SwitchLoad> restarted{{0, 9 * kS, 4 * kS}, {1 * kS, 1 * kS, 1 * kS}};
  CHECK_FALSE(switchBusy(restarted, 0, 1 * kS));

  // Through the scorer and the report: the synthetic run's fault is on from 10 s to 12 s.
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  rc::test::addStormEvidence(run);
  run.fabric.load = load;
  Scores s = score(run, pb);
  REQUIRE(s.trials.at(0).fabric.switchBusyPct);
  CHECK(*s.trials[0].fabric.switchBusyPct == Approx(100));
  nlohmann::json doc = rc::controller::makeResultDocument(run, pb, s);
  CHECK(doc["trials"][0]["fabric"]["switch_busy"]["saturated"] == true);
  std::string text = rc::controller::renderText(doc);
  CHECK_THAT(text, Catch::Contains("switch load     busy 100% of the fault window (busiest second 100%): SATURATED"));
  // A switch with room to spare is reported, not flagged.
  for (auto& l : run.fabric.load) l.busyNs = l.loopNs / 2;
  nlohmann::json quiet = rc::controller::makeResultDocument(run, pb, score(run, pb));
  CHECK(quiet["trials"][0]["fabric"]["switch_busy"]["saturated"] == false);
  std::string qt = rc::controller::renderText(quiet);
  CHECK_THAT(qt, Catch::Contains("switch load     busy 50% of the fault window (busiest second 50%)\n"));
  // Without load samples (an older switch, or no switch): no line.
  run.fabric.load.clear();
  CHECK(rc::controller::renderText(rc::controller::makeResultDocument(run, pb, score(run, pb))).find("switch load") ==
        std::string::npos);
}

}  // namespace test_score
