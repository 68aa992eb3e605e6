// The worst-case search: simulated annealing over several parameters for the setting that
// maximises a metric, then a confirmation of the best few by repeats.
//
// Annealing rather than successive halving: successive halving picks among the points it drew
// at the start, so its answer is no closer to the maximum than its first random draw, and it
// needs a cheaper low-fidelity trial to discard points early, which a fault trial does not
// have. Annealing moves to the neighbours of good points, so a smooth objective is approached
// within the budget, and its acceptance of worse points early on leaves local maxima (as
// Collie's search of NIC workloads does). One trial per point while exploring; the noise is
// answered at the end, where the top points are repeated and the best chosen by its mean.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "controller/search/search.hpp"

namespace rc::controller::search {

void validate(const WorstSettings& s) {
  if (s.parameters.empty()) throw std::invalid_argument("worst-case search: no parameters");
  for (const Parameter& p : s.parameters)
    validateRange(p.range, "worst-case search, \"" + p.name + "\"");
  if (s.confirmTop < 1) throw std::invalid_argument("worst-case search: confirm_top must be >= 1");
  if (s.budget < s.confirmTop * s.confirmRepeats + 2)
    throw std::invalid_argument(
        "worst-case search: the budget must exceed the confirmation's "
        "confirm_top x confirm_repeats trials by 2 or more");
  if (!(s.initialStep > 0) || !(s.minStep > 0) || !(s.temperature >= 0))
    throw std::invalid_argument("worst-case search: steps must be > 0, the temperature >= 0");
}

namespace {

class Annealing {
 public:
  Annealing(WorstRecord& record, const WorstEvaluator& evaluate)
      : s_(record.settings), log_(record.trials, evaluate), rng_(s_.seed) {}

  WorstResult run();

 private:
  size_t measureNew(const std::vector<double>& unit);
  void remeasure(size_t index);
  std::vector<double> propose(const std::vector<double>& from, double step);
  void explore(size_t trials);
  void confirm();

  const WorstSettings& s_;
  TrialLog log_;
  // The only source of randomness: the same seed and the same answers draw the same points.
  std::mt19937_64 rng_;
  WorstResult r_;
  double lowest_ = INFINITY;
  double highest_ = -INFINITY;
};

size_t Annealing::measureNew(const std::vector<double>& unit) {
  WorstPoint p;
  for (size_t i = 0; i < unit.size(); i++)
    p.parameters.push_back(fromUnit(s_.parameters[i].range, unit[i]));
  p.measurements.push_back(log_.ask(p.parameters));
  p.summary = summarise(p.measurements);
  lowest_ = std::min(lowest_, p.summary.mean);
  highest_ = std::max(highest_, p.summary.mean);
  r_.points.push_back(std::move(p));
  return r_.points.size() - 1;
}

void Annealing::remeasure(size_t index) {
  WorstPoint& p = r_.points[index];
  p.measurements.push_back(log_.ask(p.parameters));
  p.summary = summarise(p.measurements);
}

// A Gaussian step in the unit cube, reflected at its faces so the edges are searched as often
// as the inside (clamping would pile points on the faces).
std::vector<double> Annealing::propose(const std::vector<double>& from, double step) {
  std::normal_distribution<double> jump(0, step);
  std::vector<double> to = from;
  for (double& u : to) {
    u += jump(rng_);
    u = std::fmod(std::abs(u), 2.0);
    if (u > 1) u = 2 - u;
  }
  return to;
}

void Annealing::explore(size_t trials) {
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<double> current(s_.parameters.size());
  for (double& u : current) u = uniform(rng_);
  double currentValue = r_.points[measureNew(current)].summary.mean;
  for (size_t i = 1; i < trials; i++) {
    const double left = 1 - double(i) / double(trials);
    const std::vector<double> candidate =
        propose(current, s_.minStep + (s_.initialStep - s_.minStep) * left);
    const double value = r_.points[measureNew(candidate)].summary.mean;
    // The temperature is a share of the values seen so far, so the metric's unit (bytes,
    // seconds, percent) does not change how willing the search is to step down.
    const double temperature = s_.temperature * (highest_ - lowest_) * left;
    const double draw =
        uniform(rng_);  // drawn every step, so the draws do not depend on the branch
    const bool accept = value >= currentValue ||
                        (temperature > 0 && draw < std::exp((value - currentValue) / temperature));
    if (accept) {
      current = candidate;
      currentValue = value;
    }
  }
}

void Annealing::confirm() {
  std::vector<size_t> order(r_.points.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t top = std::min(s_.confirmTop, order.size());
  // Ties broken by index, so the order never depends on the sort's implementation.
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](size_t a, size_t b) {
    const double va = r_.points[a].summary.mean, vb = r_.points[b].summary.mean;
    return va != vb ? va > vb : a < b;
  });
  order.resize(top);
  for (size_t k = 0; k < s_.confirmRepeats; k++)
    for (size_t index : order) remeasure(index);
  r_.best = order.front();
  for (size_t index : order)
    if (r_.points[index].summary.mean > r_.points[r_.best].summary.mean) r_.best = index;
}

WorstResult Annealing::run() {
  explore(s_.budget - s_.confirmTop * s_.confirmRepeats);
  confirm();
  r_.trials = log_.spent();
  return r_;
}

}  // namespace

WorstResult runWorst(WorstRecord& record, const WorstEvaluator& evaluate) {
  validate(record.settings);
  return Annealing(record, evaluate).run();
}

}  // namespace rc::controller::search
