// The playbook's [search] table (what `rdmachaos search` explores) and a search point pinned
// into a plain playbook: the text each trial runs and the reproducer keeps.
#include <cmath>
#include <sstream>

#include "controller/playbook/playbook_parser.hpp"

namespace rc::controller::detail {
namespace {

constexpr size_t kMaxSearchParams = 8;
constexpr int64_t kMaxSearchBudget = 1000;

// A step's parameter a search may move: a number of some unit (not a name, list or switch).
bool searchable(faults::ParamType t) {
  using T = faults::ParamType;
  return t == T::integer || t == T::duration || t == T::size || t == T::rate || t == T::bitRate;
}

std::string stepNames(const Scenario& sc) {
  std::vector<std::string> names;
  for (const auto& s : sc.steps) names.push_back(s.name);
  return names.empty() ? std::string("none") : joinNames(names);
}

}  // namespace

// One [[search.param]]: its path, range, scale and resolution.
SearchParam Parser::searchParam(const toml::node& n, const Playbook& pb, SearchKind kind) const {
  const auto& t = table(n, "[[search.param]]");
  checkKeys(t, {"path", "range", "scale", "resolution"}, "[[search.param]]");
  SearchParam p;
  p.pos = pos(n);
  auto* pa = t.get("path");
  if (!pa)
    fail(n,
         "[[search.param]] needs path = \"steps.<step>.<parameter>\" (or \"workload.size\", "
         "\"workload.streams\")");
  p.path = str(*pa, "[search] param path", 160);
  const Scenario& sc = pb.scenarios.front();
  // How one end of the range is read: as the step's kind or the workload reads that value.
  std::function<double(const toml::node&)> read;
  if (p.path.rfind("steps.", 0) == 0) {
    const std::string rest = p.path.substr(6);
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size())
      fail(*pa, "[search] param path '" + p.path +
                    "' must be steps.<step>.<parameter>, e.g. \"steps.flap.down\"");
    p.step = rest.substr(0, dot);
    p.param = rest.substr(dot + 1);
    auto it = std::find_if(sc.steps.begin(), sc.steps.end(),
                           [&](const Step& s) { return s.name == p.step; });
    if (it == sc.steps.end())
      fail(*pa, "[search] param path '" + p.path + "': no step '" + p.step +
                    "' (steps: " + stepNames(sc) + ")");
    const Step& st = *it;
    const auto* k = faults::findKind(st.kind);
    auto spec = std::find_if(k->params.begin(), k->params.end(),
                             [&](const auto& s) { return s.name == p.param; });
    if (spec == k->params.end()) {
      std::vector<std::string> names;
      for (const auto& s : k->params) names.push_back(s.name);
      fail(*pa, "[search] param path '" + p.path + "': " + st.kind + " has no parameter '" +
                    p.param + "' (known: " + joinNames(names) + ")");
    }
    if (!searchable(spec->type))
      fail(*pa, "[search] param path '" + p.path + "': " + st.kind + " parameter '" + p.param +
                    "' is not a number, a duration or a size: a search moves those only");
    p.unit = spec->type == faults::ParamType::duration ? MetricUnit::duration
             : spec->type == faults::ParamType::size   ? MetricUnit::size
                                                       : MetricUnit::number;
    p.integral = spec->type != faults::ParamType::rate && spec->type != faults::ParamType::bitRate;
    read = [&, st](const toml::node& v) {
      json raw = st.rawParams;
      raw[p.param] = value(v, "[search] range of '" + p.path + "'");
      json norm = normalise(v, st.kind, raw, nullptr);
      if (!norm.contains(p.param) || !norm[p.param].is_number())
        fail(v,
             "[search] range of '" + p.path + "' must be a value of the parameter, e.g. \"500ms\"");
      return norm[p.param].get<double>();
    };
  } else if (p.path == "workload.size") {
    p.step.clear();
    p.param = "size";
    p.unit = MetricUnit::size;
    read = [&](const toml::node& v) {
      return double(
          size(v, "[search] range of workload.size", 1, uint64_t(proto::kMaxWorkloadSize)));
    };
  } else if (p.path == "workload.streams") {
    p.param = "streams";
    read = [&](const toml::node& v) {
      return double(
          integer(v, "[search] range of workload.streams", 1, proto::kMaxWorkloadStreams));
    };
  } else {
    fail(*pa,
         "[search] param path '" + p.path +
             "' is not one a search moves: steps.<step>.<parameter> (e.g. \"steps.flap.down\"), "
             "workload.size or workload.streams");
  }
  if (auto* s = t.get("scale")) {
    const std::string scale = str(*s, "[search] param scale", 16);
    if (scale == "log")
      p.range.scale = search::Scale::log;
    else if (scale != "linear")
      fail(*s, "[search] param scale '" + scale + "' must be \"linear\" or \"log\"");
  }
  auto* r = t.get("range");
  if (!r)
    fail(n, "[[search.param]] '" + p.path +
                "' needs range = [lo, hi], e.g. range = [\"200ms\", \"3s\"]");
  if (!r->is_array() || r->as_array()->size() != 2)
    fail(*r, "[search] range of '" + p.path +
                 "' must be two values [lo, hi], e.g. [\"200ms\", \"3s\"]");
  p.range.lo = read(*r->as_array()->get(0));
  p.range.hi = read(*r->as_array()->get(1));
  if (!(p.range.lo < p.range.hi)) fail(*r, "[search] range of '" + p.path + "' must have lo < hi");
  if (p.range.scale == search::Scale::log && p.range.lo <= 0)
    fail(*r, "[search] range of '" + p.path +
                 "' starts at 0: a log scale needs lo > 0 (or scale = \"linear\")");
  if (auto* res = t.get("resolution")) {
    if (kind != SearchKind::boundary)
      fail(*res,
           "[search] resolution is a boundary's (where bisection stops): drop it for kind = "
           "\"worst\"");
    if (p.range.scale == search::Scale::log) {
      p.resolution =
          number(*res, "[search] resolution of a log range (a ratio less one, e.g. 0.1)", 1e-4, 10);
    } else {
      p.resolution = read(*res);
      if (p.resolution <= 0 || p.resolution >= p.range.hi - p.range.lo)
        fail(*res,
             "[search] resolution of '" + p.path + "' must be above 0 and narrower than the range");
    }
  } else {
    // A twentieth of the range: 4-5 bisections past the ends.
    p.resolution = p.range.scale == search::Scale::log ? std::pow(p.range.hi / p.range.lo, 0.05) - 1
                                                       : (p.range.hi - p.range.lo) / 20;
  }
  return p;
}

// The expectation a boundary search judges: by its metric (one [[expect]] of that metric) or
// by its place (1 = the first [[expect]]).
size_t Parser::searchExpectation(const toml::node& n, const Scenario& sc) const {
  std::vector<std::string> names;
  for (const auto& e : sc.expectations) names.push_back(e.metric);
  const std::string known =
      names.empty() ? "the playbook has no [[expect]]" : "its [[expect]]: " + joinNames(names);
  size_t index = 0;
  if (n.is_integer()) {
    int64_t i = n.as_integer()->get();
    if (i < 1 || size_t(i) > sc.expectations.size())
      fail(n, "[search] expect = " + std::to_string(i) + " is not the place of an [[expect]] (" +
                  known + ")");
    index = size_t(i - 1);
  } else {
    const std::string m =
        str(n, "[search] expect (a metric of an [[expect]], or its place from 1)", 80);
    size_t count = 0;
    for (size_t i = 0; i < sc.expectations.size(); i++)
      if (sc.expectations[i].metric == m) {
        index = i;
        count++;
      }
    if (count == 0)
      fail(n,
           "[search] expect = \"" + m + "\" names no [[expect]] of the playbook (" + known + ")");
    if (count > 1)
      fail(n, "[search] expect = \"" + m + "\": " + std::to_string(count) +
                  " [[expect]] judge that metric; name one by its place, e.g. expect = 1");
  }
  const Expectation& e = sc.expectations[index];
  if (!e.stat.empty())
    fail(n, "[search] expect names " + e.describe() +
                ", judged over repeats: a search repeats each point itself, "
                "so name an expectation without stat");
  return index;
}

SearchSpec Parser::search(const toml::node& n, const toml::table& root, const Playbook& pb) const {
  const auto& t = table(n, "[search]");
  checkKeys(t,
            {"kind", "param", "expect", "fails", "metric", "budget", "seed", "min_repeats",
             "repeat_cap", "coverage"},
            "[search]");
  SearchSpec s;
  s.pos = pos(n);
  s.seed = pb.seed;
  // Each check a part of its own, so that one pass names every error of the table.
  bool ok = true;
  auto check = [&](auto&& f) { ok = part(f) && ok; };
  // What a search needs of the playbook around it: one timeline, whose values it chooses.
  if (auto* sc = root.get("scenario"))
    check([&] {
      fail(*sc, "[search] explores one scenario: write the playbook without [[scenario]] tables");
    });
  if (auto* r = root.get("repeat"))
    check([&] {
      fail(*r,
           "[search] repeats each point itself, as the noise needs (repeat_cap): drop repeat from "
           "the top");
    });
  if (auto* sw = root.get("sweep"))
    check([&] {
      fail(*sw,
           "[search] chooses the values itself: drop the [sweep] (or run the sweep without "
           "[search])");
    });
  if (!ok) throw Fail{""};  // said; the rest names a scenario that is not the search's
  const Scenario& sc = pb.scenarios.front();
  check([&] {
    auto* k = t.get("kind");
    if (!k)
      fail(n,
           "[search] needs kind = \"boundary\" (where an expectation starts to fail) or \"worst\" "
           "(the setting "
           "that maximises a metric)");
    const std::string kind = str(*k, "[search] kind", 16);
    if (kind == "worst")
      s.kind = SearchKind::worst;
    else if (kind != "boundary")
      fail(*k, "[search] kind '" + kind + "' must be \"boundary\" or \"worst\"");
  });
  check([&] {
    auto* ps = t.get("param");
    if (!ps)
      fail(n,
           "[search] needs the parameter(s) it moves: [[search.param]] path = "
           "\"steps.<step>.<parameter>\" "
           "range = [lo, hi]");
    const auto& pa = arrayOfTables(*this, *ps, "search.param");
    if (pa.empty() || pa.size() > kMaxSearchParams) fail(*ps, "[search] moves 1 to 8 parameters");
    if (s.kind == SearchKind::boundary && pa.size() != 1)
      fail(*ps,
           "a boundary search bisects one parameter: keep one [[search.param]] (kind = \"worst\" "
           "takes several)");
    for (const auto& e : pa)
      check([&] {
        SearchParam p = searchParam(e, pb, s.kind);
        for (const auto& q : s.params)
          if (q.path == p.path) fail(e, "[search] param '" + p.path + "' appears twice");
        s.params.push_back(std::move(p));
      });
  });
  auto* ex = t.get("expect");
  auto* fa = t.get("fails");
  auto* me = t.get("metric");
  if (s.kind == SearchKind::boundary) {
    if (me)
      check([&] {
        fail(*me,
             "metric is a worst-case search's: a boundary judges an [[expect]] (expect = \"...\")");
      });
    check([&] {
      if (!ex)
        fail(n,
             "a boundary search needs expect = \"<metric of an [[expect]]>\" (or its place, expect "
             "= 1): the "
             "expectation whose failing it looks for");
      s.expectation = searchExpectation(*ex, sc);
    });
    if (fa)
      check([&] {
        const std::string side = str(*fa, "[search] fails", 8);
        if (side == "below")
          s.failsAbove = false;
        else if (side != "above")
          fail(*fa, "[search] fails = '" + side +
                        "' must be \"above\" (larger values break the expectation, as a "
                        "longer flap does) or \"below\"");
      });
  } else {
    if (ex)
      check([&] {
        fail(*ex, "expect is a boundary search's: a worst case maximises metric = \"...\"");
      });
    if (fa) check([&] { fail(*fa, "fails is a boundary search's: drop it for kind = \"worst\""); });
    check([&] {
      if (!me)
        fail(n,
             "a worst-case search needs metric = \"<metric>\" (the one it maximises, e.g. "
             "\"throughput_loss_pct\")");
      s.metric = str(*me, "[search] metric", 80);
      if (!findMetric(s.metric))
        fail(*me, "unknown metric '" + s.metric + "' (known: " + joinNames(metricNames()) + ")");
    });
  }
  auto* b = t.get("budget");
  if (b)
    check([&] { s.budget = size_t(integer(*b, "[search] budget (trials)", 1, kMaxSearchBudget)); });
  if (auto* v = t.get("seed"))
    check([&] { s.seed = uint64_t(integer(*v, "[search] seed", 0, INT64_MAX)); });
  if (auto* v = t.get("min_repeats"))
    check([&] { s.minRepeats = size_t(integer(*v, "[search] min_repeats", 1, 100)); });
  if (auto* v = t.get("repeat_cap"))
    check([&] { s.repeatCap = size_t(integer(*v, "[search] repeat_cap", 1, 100)); });
  if (auto* v = t.get("coverage"))
    check([&] { s.coverage = number(*v, "[search] coverage", 0.5, 10); });
  if (!ok) throw Fail{""};
  if (s.minRepeats > s.repeatCap)
    fail(t.get("min_repeats") ? *t.get("min_repeats") : n,
         "[search] min_repeats is above repeat_cap");
  if (s.kind == SearchKind::boundary && s.budget < 2)
    fail(b ? *b : n, "[search] budget must cover the range's two ends: budget = 2 or more");
  if (s.kind == SearchKind::worst) {
    // The confirmation re-measures the best 3 points repeat_cap times; two trials explore first.
    const size_t confirm = 3 * s.repeatCap;
    if (s.budget < confirm + 2)
      fail(b ? *b : n,
           "[search] budget = " + std::to_string(s.budget) +
               " leaves nothing to explore: the confirmation takes " + std::to_string(confirm) +
               " trials (3 points x repeat_cap), so budget = " + std::to_string(confirm + 2) +
               " or more");
  }
  return s;
}

void Parser::searchTable(const toml::node& n, const toml::table& root, Playbook& pb) {
  if (!errors_.empty()) {
    note(pos(n),
         "[search] was not checked: it names the playbook's steps and expectations, which have "
         "errors");
    return;
  }
  part([&] { pb.search = search(n, root, pb); });
  if (!pb.search) return;
  // Every corner of the space must give a playbook that runs: checked now, so a search does not
  // stop at its tenth trial on a value the step refuses.
  for (bool hi : {false, true})
    part([&] {
      std::vector<double> corner;
      for (const auto& p : pb.search->params) corner.push_back(hi ? p.range.hi : p.range.lo);
      auto pinned = pinSearchPoint(pb, corner);
      if (!pinned) {
        std::string msg = pinned.error().message;
        // The pinned text's own place means nothing to the reader: the range's does.
        if (auto at = msg.find(": ", pb.path.size());
            msg.rfind(pb.path + ":", 0) == 0 && at != std::string::npos)
          msg = msg.substr(at + 2);
        fail(pb.search->params.front().pos, std::string("[search] at every range's ") +
                                                (hi ? "hi" : "lo") +
                                                " the playbook is not valid: " + msg);
      }
    });
}

}  // namespace rc::controller::detail

namespace rc::controller {
using namespace detail;

double searchGrain(const SearchParam& p, double value) {
  if (!p.integral) return value;
  if (p.unit == MetricUnit::duration) {
    // Whole milliseconds over a range of 100 ms or more, whole microseconds below.
    const double grain = p.range.hi - p.range.lo >= 100 * double(kMs) ? double(kMs) : 1000.0;
    return std::max(grain, std::round(value / grain) * grain);
  }
  return std::round(value);
}

std::string searchValueText(const SearchParam& p, double value) {
  const double v = searchGrain(p, value);
  char buf[64];
  if (p.unit == MetricUnit::duration) {
    const auto ns = int64_t(v);
    if (ns % kSec == 0)
      std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ns / kSec));
    else if (ns % kMs == 0)
      std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ns / kMs));
    else
      std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(ns / 1000));
  } else if (p.integral) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.6g", v);
  }
  return buf;
}

namespace {

// The value of P as the TOML tree holds it: a duration as its text with a unit, the rest as
// numbers.
void setValue(toml::table& t, const SearchParam& p, double value) {
  const double v = searchGrain(p, value);
  if (p.unit == MetricUnit::duration)
    t.insert_or_assign(p.param, searchValueText(p, v));
  else if (p.integral)
    t.insert_or_assign(p.param, int64_t(v));
  else
    t.insert_or_assign(p.param, v);
}

// The [[step]] table of step NAME (unnamed steps are "step<N>", as the parser names them).
toml::table* stepTable(toml::table& root, const std::string& name) {
  auto* steps = root.get_as<toml::array>("step");
  if (!steps) return nullptr;
  for (size_t i = 0; i < steps->size(); i++) {
    auto* t = steps->get_as<toml::table>(i);
    if (!t) continue;
    auto* nm = t->get_as<std::string>("name");
    if ((nm ? nm->get() : "step" + std::to_string(i + 1)) == name) return t;
  }
  return nullptr;
}

}  // namespace

Result<PinnedPlaybook> pinSearchPoint(const Playbook& pb, const std::vector<double>& point,
                                      std::optional<size_t> keepExpectation,
                                      const std::string& header) {
  if (!pb.search) return makeError(pb.path + ": the playbook has no [search] table");
  if (point.size() != pb.search->params.size())
    return makeError("a point of " + std::to_string(point.size()) + " values for " +
                     std::to_string(pb.search->params.size()) + " search parameter(s)");
  toml::table root;
  try {
    root = rc::parseToml(pb.text, pb.path);
  } catch (const toml::parse_error& e) {
    return makeError(pb.path + ": " + std::string(e.description()));
  }
  root.erase("search");
  for (size_t i = 0; i < point.size(); i++) {
    const SearchParam& p = pb.search->params[i];
    toml::table* where = nullptr;
    if (p.step.empty()) {
      where = root.get_as<toml::table>("workload");
    } else if (toml::table* st = stepTable(root, p.step)) {
      if (!st->get("params")) st->insert("params", toml::table{});
      where = st->get_as<toml::table>("params");
    }
    if (!where)
      return makeError(pb.path + ": [search] param '" + p.path + "' is not in the playbook's text");
    setValue(*where, p, point[i]);
  }
  if (keepExpectation) {
    auto* ex = root.get_as<toml::array>("expect");
    if (!ex || *keepExpectation >= ex->size())
      return makeError(pb.path + ": no [[expect]] number " + std::to_string(*keepExpectation + 1));
    toml::array kept;
    kept.push_back(*ex->get(*keepExpectation));
    root.insert_or_assign("expect", std::move(kept));
  }
  std::ostringstream text;
  text << header << toml::toml_formatter(root) << "\n";
  auto parsed = parsePlaybook(text.str(), pb.path);
  if (!parsed) return makeError(parsed.error().message);
  return PinnedPlaybook{text.str(), std::move(*parsed)};
}

}  // namespace rc::controller
