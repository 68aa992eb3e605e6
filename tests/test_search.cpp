// The search engine on synthetic objectives with known answers and seeded Gaussian noise:
// the boundary's interval, the worst case's best point, determinism, resuming after a crash.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <stdexcept>

#include "controller/search/search.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_search {

using namespace rc::controller::search;

namespace {

// Noise that depends only on the seed and the trial's index, so a resumed evaluator that
// starts at the record's trial count answers as the uninterrupted one did.
double noise(uint64_t seed, size_t index, double sigma) {
  std::mt19937_64 g(seed * 0x9E3779B97F4A7C15ULL + index);
  return std::normal_distribution<double>(0, sigma)(g);
}

// A recovery time that grows as 2 x value, crossing the bound 7.4 at 3.7.
struct Recovery {
  uint64_t seed;
  size_t next = 0;
  double sigma = 0.3;
  Evaluation operator()(double x) { return {2 * x + noise(seed, next++, sigma), sigma}; }
};

BoundarySettings recoverySettings() {
  return BoundarySettings{.range = {.lo = 0, .hi = 10, .scale = Scale::linear},
                          .op = Op::lt,
                          .bound = 7.4,
                          .failsAbove = true,
                          .resolution = 0.1,
                          .budget = 400,
                          .minRepeats = 1,
                          .maxRepeats = 16,
                          .coverage = 3};
}

size_t measurementsIn(const BoundaryResult& r) {
  size_t n = 0;
  for (const BoundaryPoint& p : r.points) n += p.measurements.size();
  return n;
}

// A metric with its maximum 100 at (6.5, 30): one linear parameter on [0, 10], one log on
// [1, 1000].
struct Hill {
  uint64_t seed;
  size_t next = 0;
  double sigma = 1;
  Evaluation operator()(const std::vector<double>& p) {
    const double dx = p[0] - 6.5, dy = std::log10(p[1] / 30);
    return {100 - 4 * dx * dx - 25 * dy * dy + noise(seed, next++, sigma), sigma};
  }
};

WorstSettings hillSettings(uint64_t seed) {
  return WorstSettings{
      .parameters = {{.name = "x", .range = {.lo = 0, .hi = 10, .scale = Scale::linear}},
                     {.name = "y", .range = {.lo = 1, .hi = 1000, .scale = Scale::log}}},
      .seed = seed,
      .budget = 200};
}

// The distance in the unit square, where both parameters count alike.
double unitDistance(const WorstSettings& s, const std::vector<double>& a,
                    const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); i++) {
    const double d = toUnit(s.parameters[i].range, a[i]) - toUnit(s.parameters[i].range, b[i]);
    sum += d * d;
  }
  return std::sqrt(sum);
}

}  // namespace

TEST_CASE("a point is decided only outside the noise") {
  BoundarySettings s = recoverySettings();
  CHECK(decide(s, {.mean = 6.0, .uncertainty = 0.4}) == Verdict::pass);  // 6 + 1.2 < 7.4
  CHECK(decide(s, {.mean = 6.5, .uncertainty = 0.4}) == Verdict::ambiguous);
  CHECK(decide(s, {.mean = 8.7, .uncertainty = 0.4}) == Verdict::fail);  // 8.7 - 1.2 >= 7.4
  // Repeats shrink the uncertainty: four trials of +/-1 that agree are +/-0.5.
  const Summary four = summarise({{5, 1}, {5, 1}, {5, 1}, {5, 1}});
  CHECK(four.mean == 5);
  CHECK(four.uncertainty == Approx(0.5));
  // A spread larger than the trials claim widens the band.
  CHECK(summarise({{4, 0.1}, {6, 0.1}}).uncertainty > 0.9);
}

TEST_CASE("the boundary's interval holds the true boundary in 19 of 20 seeded runs") {
  int held = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    BoundaryRecord record{.settings = recoverySettings()};
    const BoundaryResult r = runBoundary(record, Recovery{.seed = seed});
    REQUIRE(r.outcome == Outcome::boundary);
    if (*r.lastPass <= 3.7 && 3.7 <= *r.firstFail) held++;
    // Narrow, so the count above is not won by a wide interval. At the repeat cap a point's
    // uncertainty is about sqrt(0.3^2 + 0.3^2) / 4 = 0.106, so one within 3 x 0.106 / 2 = 0.16
    // of the boundary may stay ambiguous; the decided ends lie outside that band, each at most
    // a resolution-wide gap further: 2 x (0.16 + 0.1) = 0.52, and the means' own noise.
    CHECK(*r.firstFail - *r.lastPass < 0.65);
    CHECK(r.trials == measurementsIn(r));
    CHECK(r.trials == record.trials.size());
    CHECK(r.trials <= 400);
  }
  CHECK(held >= 19);
}

TEST_CASE("without noise the interval narrows to the resolution around the boundary") {
  BoundaryRecord record{.settings = recoverySettings()};
  const BoundaryResult r = runBoundary(record, [](double x) { return Evaluation{2 * x, 0}; });
  REQUIRE(r.outcome == Outcome::boundary);
  CHECK(r.narrowed);
  CHECK_FALSE(r.budgetSpent);
  CHECK(*r.lastPass < 3.7);
  CHECK(*r.firstFail >= 3.7);
  CHECK(*r.firstFail - *r.lastPass <= 0.1);
  for (const BoundaryPoint& p : r.points) CHECK(p.measurements.size() == 1);
}

TEST_CASE("a log-scale boundary bisects by ratios") {
  // A loss metric 10 x log10(x / 0.03) + noise: the expectation "<= 0" breaks at 0.03.
  BoundarySettings s{.range = {.lo = 0.001, .hi = 10, .scale = Scale::log},
                     .op = Op::le,
                     .bound = 0,
                     .failsAbove = true,
                     .resolution = 0.1,
                     .budget = 300,
                     .maxRepeats = 12};
  int held = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    BoundaryRecord record{.settings = s};
    size_t next = 0;
    const BoundaryResult r = runBoundary(record, [&](double x) {
      return Evaluation{10 * std::log10(x / 0.03) + noise(seed, next++, 0.2), 0.2};
    });
    REQUIRE(r.outcome == Outcome::boundary);
    REQUIRE(r.points.size() >= 3);
    // The first probe is the geometric midpoint of the ends, not the arithmetic one.
    CHECK(r.points[2].value == Approx(0.1));
    if (*r.lastPass <= 0.03 && 0.03 <= *r.firstFail) held++;
    CHECK(*r.firstFail / *r.lastPass < 1.3);
  }
  CHECK(held >= 19);
}

TEST_CASE("no boundary inside the range is said so") {
  struct Row {
    double slope;
    bool failsAbove;
    Outcome outcome;
  };
  const Row row = GENERATE(Row{0.1, true, Outcome::allPass},  // 0..1: below 7.4 throughout
                           Row{0.1, false, Outcome::allPass},
                           Row{5, false, Outcome::reversed});  // fails above, searched as below
  BoundarySettings s = recoverySettings();
  s.failsAbove = row.failsAbove;
  BoundaryRecord record{.settings = s};
  const BoundaryResult r = runBoundary(record, [&](double x) {
    return Evaluation{row.slope * x, 0.01};
  });
  CHECK(r.outcome == row.outcome);
  CHECK_FALSE(r.lastPass.has_value());
  CHECK_FALSE(r.firstFail.has_value());
  CHECK(r.points.size() == 2);  // the ends only
}

TEST_CASE("a range that fails throughout is all-fail") {
  BoundaryRecord record{.settings = recoverySettings()};
  const BoundaryResult r = runBoundary(record, [](double x) { return Evaluation{10 + x, 0.1}; });
  CHECK(r.outcome == Outcome::allFail);
  CHECK(r.points.size() == 2);
  CHECK(r.points[0].verdict == Verdict::fail);
  CHECK(r.points[1].verdict == Verdict::fail);
}

TEST_CASE("the largest passing value when smaller values fail") {
  // A bandwidth that falls as loss grows: "bandwidth > 60" fails from 4 up.
  BoundarySettings s = recoverySettings();
  s.op = Op::gt;
  s.bound = 60;
  s.failsAbove = true;
  BoundaryRecord record{.settings = s};
  const BoundaryResult r = runBoundary(record, [](double x) {
    return Evaluation{100 - 10 * x, 0};
  });
  REQUIRE(r.outcome == Outcome::boundary);
  CHECK(*r.lastPass < 4);
  CHECK(*r.firstFail >= 4);
  // And the other way round: a metric that passes only above 4.
  s.op = Op::lt;
  s.bound = 60;
  s.failsAbove = false;
  BoundaryRecord below{.settings = s};
  const BoundaryResult b = runBoundary(below, [](double x) { return Evaluation{100 - 10 * x, 0}; });
  REQUIRE(b.outcome == Outcome::boundary);
  CHECK(*b.lastPass > 4);
  CHECK(*b.firstFail <= 4);
  CHECK(*b.firstFail < *b.lastPass);
}

TEST_CASE("ambiguous points move neither end of the interval") {
  // The metric sits on the bound over [4, 6]: no number of repeats decides a point there.
  BoundarySettings s = recoverySettings();
  s.maxRepeats = 4;
  BoundaryRecord record{.settings = s};
  const BoundaryResult r = runBoundary(record, [](double x) {
    const double v = x < 4 ? 7.4 - (4 - x) : x > 6 ? 7.4 + (x - 6) : 7.4;
    return Evaluation{v, 0.05};
  });
  REQUIRE(r.outcome == Outcome::boundary);
  size_t ambiguous = 0;
  for (const BoundaryPoint& p : r.points) {
    if (p.verdict != Verdict::ambiguous) continue;
    ambiguous++;
    CHECK(p.measurements.size() == 4);  // repeated to the cap
    CHECK(*r.lastPass < p.value);
    CHECK(p.value < *r.firstFail);
  }
  CHECK(ambiguous > 0);
  CHECK(*r.lastPass <= 4);
  CHECK(*r.firstFail >= 6);
  // The noise fills the interval, so it stops short of the resolution, not at the budget.
  CHECK_FALSE(r.narrowed);
  CHECK_FALSE(r.budgetSpent);
}

TEST_CASE("the budget stops the boundary search") {
  BoundarySettings s = recoverySettings();
  s.budget = 6;
  BoundaryRecord record{.settings = s};
  const BoundaryResult r = runBoundary(record, Recovery{.seed = 3});
  CHECK(r.trials == 6);
  CHECK(r.budgetSpent);
  CHECK_FALSE(r.narrowed);
  // 0 and 10, then 5 (fails) and 2.5 (passes); 3.75 sits on the bound and had two trials
  // left: cut off undecided, it moves neither end.
  REQUIRE(r.points.size() == 5);
  CHECK(r.points.back().value == 3.75);
  CHECK(r.points.back().verdict == Verdict::unfinished);
  CHECK(*r.lastPass == 2.5);
  CHECK(*r.firstFail == 5);
}

TEST_CASE("the worst case lies near the true maximum, every point kept") {
  for (uint64_t seed = 1; seed <= 5; seed++) {
    WorstRecord record{.settings = hillSettings(seed)};
    const WorstResult r = runWorst(record, Hill{.seed = seed});
    const WorstPoint& best = r.points[r.best];
    // Within 0.1 of the maximum in the unit square: 1 in x, 0.3 decades in y.
    CHECK(unitDistance(record.settings, best.parameters, {6.5, 30}) < 0.1);
    CHECK(best.measurements.size() == 1 + 3);  // explored once, confirmed three times
    size_t measured = 0;
    for (const WorstPoint& p : r.points) measured += p.measurements.size();
    CHECK(measured == 200);
    CHECK(r.trials == 200);
    CHECK(r.points.size() == 200 - 3 * 3);  // each explored point once, kept
  }
}

TEST_CASE("the same seed evaluates the same points; another seed others") {
  WorstRecord a{.settings = hillSettings(7)}, b{.settings = hillSettings(7)},
      c{.settings = hillSettings(8)};
  runWorst(a, Hill{.seed = 7});
  runWorst(b, Hill{.seed = 7});
  runWorst(c, Hill{.seed = 7});
  REQUIRE(a.trials.size() == b.trials.size());
  for (size_t i = 0; i < a.trials.size(); i++) CHECK(a.trials[i].point == b.trials[i].point);
  CHECK(a.trials[0].point != c.trials[0].point);
}

TEST_CASE("a search resumed from its JSON record after a crash evaluates the same points") {
  const size_t crashAfter = GENERATE(0, 1, 17, 60);
  SECTION("boundary") {
    BoundaryRecord whole{.settings = recoverySettings()};
    const BoundaryResult expected = runBoundary(whole, Recovery{.seed = 11});
    REQUIRE(expected.trials > 60);
    BoundaryRecord crashed{.settings = recoverySettings()};
    Recovery first{.seed = 11};
    CHECK_THROWS_AS(runBoundary(crashed,
                                [&](double x) {
                                  if (first.next == crashAfter)
                                    throw std::runtime_error("controller stopped");
                                  return first(x);
                                }),
                    std::runtime_error);
    REQUIRE(crashed.trials.size() == crashAfter);
    BoundaryRecord resumed = boundaryRecordFromJson(nlohmann::json::parse(toJson(crashed).dump()));
    size_t asked = 0;
    Recovery rest{.seed = 11, .next = crashAfter};
    const BoundaryResult r = runBoundary(resumed, [&](double x) {
      asked++;
      return rest(x);
    });
    CHECK(asked == expected.trials - crashAfter);  // the recorded trials were not asked again
    REQUIRE(resumed.trials.size() == whole.trials.size());
    for (size_t i = 0; i < whole.trials.size(); i++) {
      CHECK(resumed.trials[i].point == whole.trials[i].point);
      CHECK(resumed.trials[i].answer.value == whole.trials[i].answer.value);
    }
    CHECK(*r.lastPass == *expected.lastPass);
    CHECK(*r.firstFail == *expected.firstFail);
  }
  SECTION("worst case") {
    WorstRecord whole{.settings = hillSettings(5)};
    const WorstResult expected = runWorst(whole, Hill{.seed = 5});
    WorstRecord crashed{.settings = hillSettings(5)};
    Hill first{.seed = 5};
    CHECK_THROWS_AS(runWorst(crashed,
                             [&](const std::vector<double>& p) {
                               if (first.next == crashAfter)
                                 throw std::runtime_error("controller stopped");
                               return first(p);
                             }),
                    std::runtime_error);
    WorstRecord resumed = worstRecordFromJson(nlohmann::json::parse(toJson(crashed).dump()));
    size_t asked = 0;
    Hill rest{.seed = 5, .next = crashAfter};
    const WorstResult r = runWorst(resumed, [&](const std::vector<double>& p) {
      asked++;
      return rest(p);
    });
    CHECK(asked == 200 - crashAfter);
    REQUIRE(r.points.size() == expected.points.size());
    for (size_t i = 0; i < r.points.size(); i++) {
      CHECK(r.points[i].parameters == expected.points[i].parameters);
      CHECK(r.points[i].measurements.size() == expected.points[i].measurements.size());
    }
    CHECK(r.best == expected.best);
  }
}

TEST_CASE("a record replays only under the settings that made it") {
  BoundaryRecord record{.settings = recoverySettings()};
  runBoundary(record, Recovery{.seed = 2});
  BoundarySettings other = recoverySettings();
  other.range.hi = 20;
  BoundaryRecord moved{.settings = other, .trials = record.trials};
  CHECK_THROWS_AS(runBoundary(moved, Recovery{.seed = 2}), std::invalid_argument);
  nlohmann::json j = toJson(record);
  j["kind"] = "worst";
  CHECK_THROWS_AS(boundaryRecordFromJson(j), std::invalid_argument);
  j = toJson(record);
  j["settings"]["range"]["lo"] = 20;
  CHECK_THROWS_AS(boundaryRecordFromJson(j), std::invalid_argument);
}

}  // namespace test_search
