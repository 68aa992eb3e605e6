// The boundary search: bisection on one parameter for where an expectation starts to fail,
// each point repeated until its verdict is outside the noise.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "controller/search/search.hpp"

namespace rc::controller::search {

void validate(const BoundarySettings& s) {
  validateRange(s.range, "boundary search");
  if (!(s.resolution > 0)) throw std::invalid_argument("boundary search: resolution must be > 0");
  if (s.minRepeats < 1 || s.maxRepeats < s.minRepeats)
    throw std::invalid_argument("boundary search: needs 1 <= min_repeats <= max_repeats");
  if (s.budget < 2)
    throw std::invalid_argument("boundary search: the budget needs 2 trials or more");
  if (!(s.coverage > 0)) throw std::invalid_argument("boundary search: coverage must be > 0");
}

namespace {
bool holds(Op op, double x, double bound) {
  switch (op) {
    case Op::lt:
      return x < bound;
    case Op::le:
      return x <= bound;
    case Op::gt:
      return x > bound;
    case Op::ge:
      return x >= bound;
  }
  return false;
}
}  // namespace

// Decided only when the expectation holds (or fails) at both ends of mean +/- k x u: a band
// that straddles the bound says the noise could put the point on either side.
Verdict decide(const BoundarySettings& s, const Summary& summary) {
  const double band = s.coverage * summary.uncertainty;
  const bool low = holds(s.op, summary.mean - band, s.bound);
  const bool high = holds(s.op, summary.mean + band, s.bound);
  if (low && high) return Verdict::pass;
  if (!low && !high) return Verdict::fail;
  return Verdict::ambiguous;
}

namespace {

class Bisection {
 public:
  Bisection(BoundaryRecord& record, const BoundaryEvaluator& evaluate)
      : s_(record.settings),
        log_(record.trials, [&evaluate](const std::vector<double>& p) { return evaluate(p[0]); }) {}

  BoundaryResult run();

 private:
  const BoundaryPoint& measure(double value);
  double distance(double a, double b) const {
    return s_.range.scale == Scale::log ? std::abs(std::log(b / a)) : std::abs(b - a);
  }
  double midpoint(double a, double b) const {
    return s_.range.scale == Scale::log ? std::sqrt(a * b) : (a + b) / 2;
  }
  double width() const {
    return s_.range.scale == Scale::log ? std::exp(distance(*r_.lastPass, *r_.firstFail)) - 1
                                        : distance(*r_.lastPass, *r_.firstFail);
  }
  std::optional<double> nextProbe() const;
  void endsOutcome(Verdict passEnd, Verdict failEnd);

  const BoundarySettings& s_;
  TrialLog log_;
  BoundaryResult r_;
  // Ambiguous points inside the interval: they move neither end.
  std::vector<double> ambiguous_;
};

const BoundaryPoint& Bisection::measure(double value) {
  BoundaryPoint p{.value = value};
  while (p.measurements.size() < s_.maxRepeats && log_.spent() < s_.budget) {
    p.measurements.push_back(log_.ask({value}));
    p.summary = summarise(p.measurements);
    if (p.measurements.size() < s_.minRepeats) continue;
    p.verdict = decide(s_, p.summary);
    if (p.verdict != Verdict::ambiguous) break;
  }
  if (p.verdict == Verdict::ambiguous && p.measurements.size() < s_.maxRepeats)
    p.verdict = Verdict::unfinished;  // stopped by the budget, not by the cap
  if (p.measurements.size() < s_.minRepeats) p.verdict = Verdict::unfinished;
  r_.points.push_back(std::move(p));
  return r_.points.back();
}

void Bisection::endsOutcome(Verdict passEnd, Verdict failEnd) {
  auto decided = [](Verdict v) { return v == Verdict::pass || v == Verdict::fail; };
  if (!decided(passEnd) || !decided(failEnd))
    r_.outcome = Outcome::undecided;
  else if (passEnd == Verdict::pass && failEnd == Verdict::fail)
    r_.outcome = Outcome::boundary;
  else if (passEnd == Verdict::pass)
    r_.outcome = Outcome::allPass;
  else if (failEnd == Verdict::fail)
    r_.outcome = Outcome::allFail;
  else
    r_.outcome = Outcome::reversed;
}

// The midpoint of the widest gap between the interval's ends and the ambiguous points in it;
// none when every gap is within the resolution (the noise then fills the interval).
std::optional<double> Bisection::nextProbe() const {
  std::vector<double> marks = ambiguous_;
  marks.push_back(*r_.lastPass);
  marks.push_back(*r_.firstFail);
  std::sort(marks.begin(), marks.end());
  double widest = 0;
  std::optional<double> probe;
  for (size_t i = 1; i < marks.size(); i++) {
    const double gap = distance(marks[i - 1], marks[i]);
    const double scaled = s_.range.scale == Scale::log ? std::exp(gap) - 1 : gap;
    if (scaled > s_.resolution && gap > widest) {
      widest = gap;
      probe = midpoint(marks[i - 1], marks[i]);
    }
  }
  return probe;
}

BoundaryResult Bisection::run() {
  const double passEnd = s_.failsAbove ? s_.range.lo : s_.range.hi;
  const double failEnd = s_.failsAbove ? s_.range.hi : s_.range.lo;
  const Verdict pv = measure(passEnd).verdict;
  const Verdict fv = measure(failEnd).verdict;
  endsOutcome(pv, fv);
  if (r_.outcome == Outcome::boundary) {
    r_.lastPass = passEnd;
    r_.firstFail = failEnd;
    while (log_.spent() < s_.budget) {
      const std::optional<double> probe = nextProbe();
      if (!probe) break;
      const Verdict v = measure(*probe).verdict;
      if (v == Verdict::pass) r_.lastPass = *probe;
      if (v == Verdict::fail) r_.firstFail = *probe;
      if (v == Verdict::ambiguous) ambiguous_.push_back(*probe);
      // Ambiguous points the interval has moved past are outside it now.
      std::erase_if(ambiguous_, [&](double a) {
        return distance(a, *r_.lastPass) + distance(a, *r_.firstFail) >
               distance(*r_.lastPass, *r_.firstFail) * (1 + 1e-12);
      });
    }
    r_.narrowed = width() <= s_.resolution;
  }
  r_.trials = log_.spent();
  r_.budgetSpent = r_.trials >= s_.budget && !r_.narrowed;
  return r_;
}

}  // namespace

BoundaryResult runBoundary(BoundaryRecord& record, const BoundaryEvaluator& evaluate) {
  validate(record.settings);
  return Bisection(record, evaluate).run();
}

}  // namespace rc::controller::search
