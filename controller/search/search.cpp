// What both searches share: the summary of a point's repeats, scales, the trial log that
// replays a record, and the records' JSON form.
#include "controller/search/search.hpp"

#include <cmath>
#include <stdexcept>

namespace rc::controller::search {

// The mean's uncertainty combines the trials' own (their root mean square) with the spread of
// the repeats (their sample standard deviation), both shrinking as 1/sqrt(n). Both estimate a
// trial's noise: when they agree the sum errs on the wide side, and when the scorer's
// uncertainty understates the spread the spread still widens the band.
Summary summarise(const std::vector<Evaluation>& measurements) {
  Summary s;
  const size_t n = measurements.size();
  if (n == 0) return s;
  double sum = 0, squares = 0;
  for (const Evaluation& e : measurements) {
    sum += e.value;
    squares += e.uncertainty * e.uncertainty;
  }
  s.mean = sum / double(n);
  double spread = 0;
  for (const Evaluation& e : measurements) spread += (e.value - s.mean) * (e.value - s.mean);
  const double variance = n > 1 ? spread / double(n - 1) : 0;
  s.uncertainty = std::sqrt((squares / double(n) + variance) / double(n));
  return s;
}

double toUnit(const Range& range, double x) {
  if (range.scale == Scale::log) return std::log(x / range.lo) / std::log(range.hi / range.lo);
  return (x - range.lo) / (range.hi - range.lo);
}

double fromUnit(const Range& range, double u) {
  if (range.scale == Scale::log) return range.lo * std::pow(range.hi / range.lo, u);
  return range.lo + u * (range.hi - range.lo);
}

void validateRange(const Range& range, const std::string& what) {
  if (!std::isfinite(range.lo) || !std::isfinite(range.hi) || !(range.lo < range.hi))
    throw std::invalid_argument(what + ": the range needs lo < hi, both finite");
  if (range.scale == Scale::log && range.lo <= 0)
    throw std::invalid_argument(what + ": a log range needs lo > 0");
}

Evaluation TrialLog::ask(const std::vector<double>& point) {
  if (next_ < trials_.size()) {
    // A record replays only under the settings that asked for it: another point here means
    // the settings or the engine changed, and its answers would be put to the wrong points.
    if (trials_[next_].point != point)
      throw std::invalid_argument("search record: trial " + std::to_string(next_ + 1) +
                                  " was asked at another point; the record belongs to other "
                                  "settings");
    return trials_[next_++].answer;
  }
  Evaluation answer = ask_(point);
  trials_.push_back(Trial{.point = point, .answer = answer});
  next_++;
  return answer;
}

NLOHMANN_JSON_SERIALIZE_ENUM(Scale, {{Scale::linear, "linear"}, {Scale::log, "log"}})
NLOHMANN_JSON_SERIALIZE_ENUM(Op, {{Op::lt, "<"}, {Op::le, "<="}, {Op::gt, ">"}, {Op::ge, ">="}})
// One field list per type, walked by both the writer and the reader.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Range, lo, hi, scale)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Evaluation, value, uncertainty)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Trial, point, answer)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BoundarySettings, range, op, bound, failsAbove, resolution,
                                   budget, minRepeats, maxRepeats, coverage)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Parameter, name, range)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(WorstSettings, parameters, seed, budget, confirmTop,
                                   confirmRepeats, initialStep, minStep, temperature)

nlohmann::json toJson(const BoundaryRecord& record) {
  return {{"kind", "boundary"}, {"settings", record.settings}, {"trials", record.trials}};
}

nlohmann::json toJson(const WorstRecord& record) {
  return {{"kind", "worst"}, {"settings", record.settings}, {"trials", record.trials}};
}

namespace {
void expectKind(const nlohmann::json& j, const std::string& kind) {
  if (j.at("kind").get<std::string>() != kind)
    throw std::invalid_argument("search record: kind \"" + j.at("kind").get<std::string>() +
                                "\", expected \"" + kind + "\"");
}
}  // namespace

BoundaryRecord boundaryRecordFromJson(const nlohmann::json& j) {
  expectKind(j, "boundary");
  BoundaryRecord r{.settings = j.at("settings").get<BoundarySettings>(),
                   .trials = j.at("trials").get<std::vector<Trial>>()};
  validate(r.settings);
  return r;
}

WorstRecord worstRecordFromJson(const nlohmann::json& j) {
  expectKind(j, "worst");
  WorstRecord r{.settings = j.at("settings").get<WorstSettings>(),
                .trials = j.at("trials").get<std::vector<Trial>>()};
  validate(r.settings);
  return r;
}

}  // namespace rc::controller::search
