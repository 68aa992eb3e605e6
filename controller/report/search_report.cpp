// A search's settings, progress, result document, summary and reproducer (search_report.hpp).
#include "controller/report/search_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "controller/measure/metrics_table.hpp"

namespace rc::controller {
namespace {

using json = nlohmann::json;

search::Op toOp(Comparison c) {
  switch (c) {
    case Comparison::less:
      return search::Op::lt;
    case Comparison::lessEqual:
      return search::Op::le;
    case Comparison::greater:
      return search::Op::gt;
    case Comparison::greaterEqual:
      return search::Op::ge;
  }
  return search::Op::lt;
}

const char* verdictName(search::Verdict v) {
  switch (v) {
    case search::Verdict::pass:
      return "pass";
    case search::Verdict::fail:
      return "fail";
    case search::Verdict::ambiguous:
      return "ambiguous";
    case search::Verdict::unfinished:
      return "unfinished";
  }
  return "?";
}

const char* outcomeName(search::Outcome o) {
  switch (o) {
    case search::Outcome::boundary:
      return "boundary";
    case search::Outcome::allPass:
      return "all_pass";
    case search::Outcome::allFail:
      return "all_fail";
    case search::Outcome::reversed:
      return "reversed";
    case search::Outcome::undecided:
      return "undecided";
  }
  return "?";
}

// The trials' points with their measurements, in the order first asked.
std::vector<std::pair<std::vector<double>, std::vector<search::Evaluation>>> byPoint(
    const std::vector<search::Trial>& trials) {
  std::vector<std::pair<std::vector<double>, std::vector<search::Evaluation>>> out;
  for (const auto& t : trials) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == t.point; });
    if (it == out.end())
      out.push_back({t.point, {t.answer}});
    else
      it->second.push_back(t.answer);
  }
  return out;
}

std::string rangeText(const SearchParam& p) {
  return "[" + searchValueText(p, p.range.lo) + ", " + searchValueText(p, p.range.hi) + "]" +
         (p.range.scale == search::Scale::log ? " (log)" : "");
}

json pointJson(const Playbook& pb, const std::vector<double>& point,
               const std::vector<search::Evaluation>& ms, const search::Summary& sum) {
  const SearchSpec& s = *pb.search;
  json values = json::object(), text = json::object();
  for (size_t i = 0; i < point.size() && i < s.params.size(); i++) {
    values[s.params[i].path] = searchGrain(s.params[i], point[i]);
    text[s.params[i].path] = searchValueText(s.params[i], point[i]);
  }
  json m = json::array();
  for (const auto& e : ms) m.push_back({{"value", e.value}, {"uncertainty", e.uncertainty}});
  return {{"values", values},
          {"text", text},
          {"measurements", m},
          {"mean", sum.mean},
          {"uncertainty", sum.uncertainty}};
}

}  // namespace

const Expectation& searchExpectation(const Playbook& pb) {
  return pb.scenarios.front().expectations.at(pb.search->expectation);
}

std::string searchMetric(const Playbook& pb) {
  return pb.search->kind == SearchKind::boundary ? searchExpectation(pb).metric : pb.search->metric;
}

std::string searchScope(const Playbook& pb) {
  return pb.search->kind == SearchKind::boundary ? searchExpectation(pb).scope : "job";
}

search::BoundarySettings boundarySettings(const Playbook& pb) {
  const SearchSpec& s = *pb.search;
  const Expectation& e = searchExpectation(pb);
  return {.range = s.params.front().range,
          .op = toOp(e.op),
          .bound = e.bound,
          .failsAbove = s.failsAbove,
          .resolution = s.params.front().resolution,
          .budget = s.budget,
          .minRepeats = s.minRepeats,
          .maxRepeats = s.repeatCap,
          .coverage = s.coverage};
}

search::WorstSettings worstSettings(const Playbook& pb) {
  const SearchSpec& s = *pb.search;
  search::WorstSettings w;
  for (const auto& p : s.params) w.parameters.push_back({.name = p.path, .range = p.range});
  w.seed = s.seed;
  w.budget = s.budget;
  w.confirmTop = 3;
  w.confirmRepeats = s.repeatCap;
  return w;
}

std::string describePoint(const Playbook& pb, const std::vector<double>& point) {
  std::string out;
  for (size_t i = 0; i < point.size() && i < pb.search->params.size(); i++)
    out += (out.empty() ? "" : ", ") + pb.search->params[i].path + " = " +
           searchValueText(pb.search->params[i], point[i]);
  return out;
}

std::string describeMetricValue(const std::string& metric, double value) {
  const MetricRow* row = findMetric(metric);
  return row ? formatMetric(row->unit, value) : std::to_string(value);
}

std::string searchProgress(const Playbook& pb, const std::vector<search::Trial>& trials) {
  const SearchSpec& s = *pb.search;
  const std::string metric = searchMetric(pb);
  std::string out = std::to_string(trials.size()) + "/" + std::to_string(s.budget) + " trials";
  if (trials.empty()) return out;
  const auto& last = trials.back();
  out += "; " + describePoint(pb, last.point) + ": " + metric + " " +
         describeMetricValue(metric, last.answer.value) + " ± " +
         describeMetricValue(metric, last.answer.uncertainty);
  const auto points = byPoint(trials);
  if (s.kind == SearchKind::boundary) {
    const auto settings = boundarySettings(pb);
    const SearchParam& p = s.params.front();
    std::optional<double> pass, fail;
    for (const auto& [pt, ms] : points) {
      const auto v = search::decide(settings, search::summarise(ms));
      const double x = pt.front();
      // The decided pass nearest the failing side, the decided fail nearest the passing side.
      if (v == search::Verdict::pass && (!pass || (s.failsAbove ? x > *pass : x < *pass))) pass = x;
      if (v == search::Verdict::fail && (!fail || (s.failsAbove ? x < *fail : x > *fail))) fail = x;
    }
    out += "; interval ";
    out += pass ? searchValueText(p, *pass) : std::string("?");
    out += " (pass) .. ";
    out += fail ? searchValueText(p, *fail) : std::string("?");
    out += " (fail)";
  } else {
    const std::vector<double>* best = nullptr;
    search::Summary bestSum;
    for (const auto& [pt, ms] : points) {
      auto sum = search::summarise(ms);
      if (!best || sum.mean > bestSum.mean) {
        best = &pt;
        bestSum = sum;
      }
    }
    out += "; worst so far " + describePoint(pb, *best) + ": " +
           describeMetricValue(metric, bestSum.mean);
  }
  return out;
}

Result<std::vector<double>> reproducerPoint(const Playbook& pb, const SearchOutcome& outcome) {
  if (outcome.worst) {
    if (outcome.worst->points.empty()) return makeError("no point was evaluated");
    return outcome.worst->points.at(outcome.worst->best).parameters;
  }
  if (!outcome.boundary) return makeError("the search has no result");
  const auto& b = *outcome.boundary;
  const SearchParam& p = pb.search->params.front();
  switch (b.outcome) {
    case search::Outcome::boundary:
      return std::vector<double>{*b.firstFail};
    case search::Outcome::allFail:
      return std::vector<double>{pb.search->failsAbove ? p.range.lo : p.range.hi};
    case search::Outcome::allPass:
      return makeError("every point passed: nothing inside " + rangeText(p) + " breaks " +
                       searchExpectation(pb).describe() + " (widen the range)");
    case search::Outcome::reversed:
      return makeError("the range's ends are the other way round: the " +
                       std::string(pb.search->failsAbove ? "low" : "high") +
                       " end fails and the other passes (set fails = \"" +
                       (pb.search->failsAbove ? "below" : "above") + "\")");
    case search::Outcome::undecided:
      return makeError(
          "an end of the range stayed within the noise (raise repeat_cap, or widen the range)");
  }
  return makeError("unknown outcome");
}

Result<PinnedPlaybook> makeReproducer(const Playbook& pb, const SearchOutcome& outcome) {
  auto point = reproducerPoint(pb, outcome);
  if (!point) return makeError(point.error().message);
  const std::string metric = searchMetric(pb);
  std::string header = "# Reproducer written by `rdmachaos search " + pb.path + "`: '" + pb.name +
                       "' pinned at\n# " + describePoint(pb, *point) + ".\n";
  std::optional<size_t> keep;
  if (outcome.boundary) {
    keep = pb.search->expectation;
    const auto& b = *outcome.boundary;
    const SearchParam& p = pb.search->params.front();
    if (b.outcome == search::Outcome::boundary)
      header += "# The boundary lies between " + searchValueText(p, *b.lastPass) +
                " (passed) and " + searchValueText(p, *b.firstFail) + " (failed); here " +
                searchExpectation(pb).describe() +
                " failed the search's trials, so this playbook should fail it (exit 1).\n";
    else
      header += "# Every point of " + rangeText(p) + " failed " + searchExpectation(pb).describe() +
                "; this is the least fault tried, so this playbook should fail it (exit 1).\n";
  } else {
    const auto& w = *outcome.worst;
    const auto& best = w.points.at(w.best);
    header += "# The worst point found for " + metric + ": " +
              describeMetricValue(metric, best.summary.mean) + " ± " +
              describeMetricValue(metric, best.summary.uncertainty) + " over " +
              std::to_string(best.measurements.size()) + " trial(s).\n";
  }
  header += "# Not shrunk: the nodes and phases are the searched playbook's.\n\n";
  return pinSearchPoint(pb, *point, keep, header);
}

json makeSearchDocument(const Playbook& pb, const json& record, const SearchOutcome& outcome,
                        const std::string& reproducer, const std::string& noReproducer) {
  const SearchSpec& s = *pb.search;
  json params = json::array();
  for (const auto& p : s.params)
    params.push_back({{"path", p.path},
                      {"lo", p.range.lo},
                      {"hi", p.range.hi},
                      {"scale", p.range.scale == search::Scale::log ? "log" : "linear"},
                      {"range_text", rangeText(p)}});
  json doc = {{"kind", "search"},
              {"search", s.kind == SearchKind::boundary ? "boundary" : "worst"},
              {"playbook", {{"name", pb.name}, {"path", pb.path}}},
              {"metric", searchMetric(pb)},
              {"scope", searchScope(pb)},
              {"parameters", params},
              {"record", record}};
  if (!reproducer.empty())
    doc["reproducer"] = reproducer;
  else
    doc["no_reproducer"] = noReproducer;
  json points = json::array();
  if (outcome.boundary) {
    const auto& b = *outcome.boundary;
    doc["expectation"] = searchExpectation(pb).describe();
    for (const auto& p : b.points) {
      json j = pointJson(pb, {p.value}, p.measurements, p.summary);
      j["verdict"] = verdictName(p.verdict);
      points.push_back(j);
    }
    json out = {{"outcome", outcomeName(b.outcome)},
                {"narrowed", b.narrowed},
                {"budget_spent", b.budgetSpent},
                {"trials", b.trials}};
    const SearchParam& p = s.params.front();
    if (b.lastPass)
      out["last_pass"] = {{"value", searchGrain(p, *b.lastPass)},
                          {"text", searchValueText(p, *b.lastPass)}};
    if (b.firstFail)
      out["first_fail"] = {{"value", searchGrain(p, *b.firstFail)},
                           {"text", searchValueText(p, *b.firstFail)}};
    doc["outcome"] = out;
  } else if (outcome.worst) {
    const auto& w = *outcome.worst;
    for (size_t i = 0; i < w.points.size(); i++) {
      json j = pointJson(pb, w.points[i].parameters, w.points[i].measurements, w.points[i].summary);
      if (i == w.best) j["worst"] = true;
      points.push_back(j);
    }
    json out = {{"outcome", "worst"}, {"trials", w.trials}};
    if (!w.points.empty()) out["worst"] = points.at(w.best);
    doc["outcome"] = out;
  }
  doc["points"] = points;
  return doc;
}

std::string renderSearchText(const json& doc) {
  const std::string metric = doc.value("metric", std::string());
  const json& oc = doc.at("outcome");
  std::string out = "search '" + doc["playbook"].value("name", std::string()) + "' (" +
                    doc.value("search", std::string()) +
                    "): " + std::to_string(oc.value("trials", 0)) + " trial(s), " +
                    std::to_string(doc["points"].size()) + " point(s)\n";
  for (const auto& p : doc["points"]) {
    std::string where;
    for (auto& [k, v] : p["text"].items())
      where += (where.empty() ? "" : ", ") + k + " = " + v.get<std::string>();
    char n[16];
    std::snprintf(n, sizeof n, "%zu", p["measurements"].size());
    out += "  " + where + ": " + metric + " " +
           describeMetricValue(metric, p["mean"].get<double>()) + " ± " +
           describeMetricValue(metric, p["uncertainty"].get<double>()) + " (" + n + " trial(s))";
    if (p.contains("verdict")) out += " " + p["verdict"].get<std::string>();
    if (p.value("worst", false)) out += " <- worst";
    out += "\n";
  }
  const std::string o = oc.value("outcome", std::string());
  if (o == "boundary") {
    out += "boundary of " + doc.value("expectation", std::string()) + ": between " +
           oc["last_pass"]["text"].get<std::string>() + " (passes) and " +
           oc["first_fail"]["text"].get<std::string>() + " (fails)";
    out += oc.value("narrowed", false) ? ", narrowed to the resolution\n"
           : oc.value("budget_spent", false)
               ? ", as far as the budget went\n"
               : ", as narrow as the noise allows (raise repeat_cap to narrow it)\n";
  } else if (o == "worst") {
    std::string where;
    for (auto& [k, v] : oc["worst"]["text"].items())
      where += (where.empty() ? "" : ", ") + k + " = " + v.get<std::string>();
    out += "worst case: " + where + ": " + metric + " " +
           describeMetricValue(metric, oc["worst"]["mean"].get<double>()) + "\n";
  } else {
    out += "no boundary inside the range (" + o + ")\n";
  }
  if (doc.contains("reproducer"))
    out += "reproducer: " + doc["reproducer"].get<std::string>() + "\n";
  else
    out += "no reproducer: " + doc.value("no_reproducer", std::string()) + "\n";
  return out;
}

}  // namespace rc::controller
