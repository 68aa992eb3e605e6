// The playbook parser: TOML to a Playbook; every error says file:line:col and what to write instead.
#include "controller/playbook.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/protocol.hpp"
#include "common/toml_text.hpp"
#include "common/units.hpp"
#include "controller/playbook_internal.hpp"
#include "faults/fault.hpp"
#include "workload/perftest.hpp"

namespace rc::controller {
namespace {

using namespace detail;

class Parser {
 public:
  explicit Parser(std::string path) : path_(std::move(path)) {}

  std::string at(const toml::source_region& r) const {
    return path_ + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  }
  std::string at(const SourcePos& p) const {
    return path_ + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
  }
  [[noreturn]] void fail(const toml::node& n, const std::string& msg) const {
    throw Fail{at(n.source()) + ": " + msg};
  }
  [[noreturn]] void fail(const SourcePos& p, const std::string& msg) const {
    throw Fail{at(p) + ": " + msg};
  }
  static SourcePos pos(const toml::node& n) {
    return {int(n.source().begin.line), int(n.source().begin.column)};
  }

  // Runs one part of the playbook (a table, a step, an expectation...): its error is recorded
  // and parsing goes on with the next part, so that one pass reports every error of a file.
  // False when the part failed.
  template <class F>
  bool part(F&& f) const {
    try {
      f();
      return true;
    } catch (const Fail& e) {
      errors_.push_back(e.message);
      return false;
    }
  }
  // Every recorded error, sorted by position, one per line; none: empty.
  std::string errors() const;

  // Unknown keys are recorded (each of them) and otherwise ignored.
  void checkKeys(const toml::table& t, std::initializer_list<const char*> known,
                 const std::string& what) const {
    for (auto&& [k, v] : t) {
      // A copy: clang 14 cannot capture a structured binding.
      const std::string_view key = k.str();
      bool ok = std::any_of(known.begin(), known.end(), [&](const char* n) { return key == n; });
      if (!ok) {
        std::vector<std::string> names(known.begin(), known.end());
        errors_.push_back(at(v.source()) + ": unknown key '" + std::string(k.str()) + "' in " + what + " (known: " +
                          joinNames(names) + ")");
      }
    }
  }

  const toml::table& table(const toml::node& n, const std::string& what) const {
    if (!n.is_table()) fail(n, what + " must be a table");
    return *n.as_table();
  }

  std::string str(const toml::node& n, const std::string& what, size_t maxLen = 128) const {
    if (!n.is_string()) fail(n, what + " must be a string");
    const std::string& s = n.as_string()->get();
    if (s.size() > maxLen)
      fail(n, what + " is longer than " + std::to_string(maxLen) + " characters");
    return s;
  }

  std::string name(const toml::node& n, const std::string& what) const {
    std::string s = str(n, what, 64);
    bool ok = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!ok) fail(n, what + " '" + s + "' must be 1-64 characters of A-Z a-z 0-9 - _ .");
    return s;
  }

  int64_t integer(const toml::node& n, const std::string& what, int64_t lo, int64_t hi) const {
    auto v = n.value_exact<int64_t>();
    if (!v) fail(n, what + " must be an integer");
    if (*v < lo || *v > hi)
      fail(n, what + " = " + std::to_string(*v) + " is out of range [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
    return *v;
  }

  double number(const toml::node& n, const std::string& what, double lo, double hi) const {
    std::optional<double> v;
    if (n.is_integer()) v = double(n.as_integer()->get());
    if (n.is_floating_point()) v = n.as_floating_point()->get();
    if (!v) fail(n, what + " must be a number");
    if (!std::isfinite(*v) || *v < lo || *v > hi) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " = %g is out of range [%g, %g]", *v, lo, hi);
      fail(n, what + buf);
    }
    return *v;
  }

  bool boolean(const toml::node& n, const std::string& what) const {
    if (!n.is_boolean()) fail(n, what + " must be true or false");
    return n.as_boolean()->get();
  }

  int64_t duration(const toml::node& n, const std::string& what, int64_t lo, int64_t hi) const {
    if (n.is_integer() || n.is_floating_point())
      fail(n, what + " must be a duration with a unit in quotes, e.g. \"500ms\" or \"10s\"");
    if (!n.is_string()) fail(n, what + " must be a duration string, e.g. \"500ms\"");
    auto d = parseDuration(n.as_string()->get());
    if (!d) fail(n, what + ": " + d.error().message);
    int64_t v = d->count();
    if (v < lo || v > hi)
      fail(n, what + " = " + fmtDur(v) + " is out of range [" + fmtDur(lo) + ", " + fmtDur(hi) + "]");
    return v;
  }

  uint64_t size(const toml::node& n, const std::string& what, uint64_t lo, uint64_t hi) const {
    uint64_t v = 0;
    if (auto i = n.value_exact<int64_t>()) {
      if (*i < 0) fail(n, what + " must not be negative");
      v = uint64_t(*i);
    } else if (n.is_string()) {
      auto s = parseSize(n.as_string()->get());
      if (!s) fail(n, what + ": " + s.error().message);
      v = *s;
    } else {
      fail(n, what + " must be a size, e.g. \"4MiB\"");
    }
    if (v < lo || v > hi)
      fail(n, what + " = " + formatSize(v) + " is out of range [" + formatSize(lo) + ", " +
                  formatSize(hi) + "]");
    return v;
  }

  // Bit rates are written as on a datasheet ("1Gbps"); scoring works in bytes per second.
  double bitRateAsBytes(const toml::node& n, const std::string& what) const {
    if (!n.is_string()) fail(n, what + " must be a bit rate in quotes, e.g. \"10Gbps\"");
    auto r = parseBitRate(n.as_string()->get());
    if (!r) fail(n, what + ": " + r.error().message);
    if (*r > 100'000'000'000'000ull) fail(n, what + " is above 100Tbps");
    return double(*r) / 8.0;
  }

  json value(const toml::node& n, const std::string& what) const {
    if (n.is_string()) return n.as_string()->get();
    if (n.is_integer()) return n.as_integer()->get();
    if (n.is_floating_point()) return n.as_floating_point()->get();
    if (n.is_boolean()) return n.as_boolean()->get();
    if (n.is_array()) {
      const auto& a = *n.as_array();
      if (a.size() > 64) fail(n, what + " has more than 64 elements");
      json out = json::array();
      for (const auto& e : a) {
        if (e.is_array() || e.is_table()) fail(e, what + " must be a flat list");
        out.push_back(value(e, what));
      }
      return out;
    }
    fail(n, what + " must be a string, number, boolean or list");
  }

  Selector selector(const toml::node& n, const std::string& what) const {
    Selector s;
    s.pos = pos(n);
    auto addNames = [&](const toml::node& v) {
      if (v.is_string()) {
        s.names.push_back(name(v, what));
      } else if (v.is_array()) {
        const auto& a = *v.as_array();
        if (a.empty()) fail(v, what + " must name at least one node, role or 'all'");
        if (a.size() > kMaxSelectorNames) fail(v, what + " lists more than 1024 names");
        for (const auto& e : a) s.names.push_back(name(e, what));
      } else {
        fail(v, what + " must be a node name, a role, \"all\", a list of them, or "
                       "{ random = K, from = \"role\" }");
      }
    };
    if (n.is_table()) {
      const auto& t = *n.as_table();
      checkKeys(t, {"random", "from"}, what);
      auto* k = t.get("random");
      if (!k) fail(n, what + " table needs random = K (how many nodes to pick)");
      s.random = int(integer(*k, what + " random", 1, 100000));
      if (auto* from = t.get("from"))
        addNames(*from);
      else
        s.names = {"all"};
    } else {
      addNames(n);
    }
    return s;
  }

  Playbook parse(const std::string& text);

 private:
  Scenario scenario(const toml::table& t, const std::string& name, const SourcePos& p,
                    const Playbook& pb) const;
  Phase phase(const toml::node& n) const;
  Step step(const toml::node& n, size_t index, const Scenario& sc) const;
  Expectation expectation(const toml::node& n, const std::string& what = "expect") const;
  Sweep sweep(const toml::node& n, const Scenario& sc) const;
  DetectExpectation detect(const toml::node& n, const Scenario& sc) const;
  void detectionSettings(const toml::node& n, DetectionSettings& d) const;
  void workload(const toml::node& wl, Workload& w) const;
  void guardrails(const toml::node& g, Guardrails& gr) const;
  void scoring(const toml::node& s, ScoringSettings& sc) const;
  void cost(const toml::node& c, CostSettings& co) const;
  void scenarios(const toml::node& scs, bool inlineForm, Playbook& pb);
  void checkTimeline(const Playbook& pb);
  json normalise(const toml::node& where, const std::string& kind, const json& raw,
                 const toml::table* rawTable) const;

  std::string path_;
  mutable std::vector<std::string> errors_;
};

std::string Parser::errors() const {
  // "PATH:LINE:COL: message": by line, then column; the same message once.
  auto key = [&](const std::string& m) {
    int line = 0, col = 0;
    if (m.compare(0, path_.size() + 1, path_ + ":") == 0)
      std::sscanf(m.c_str() + path_.size() + 1, "%d:%d", &line, &col);
    return std::pair{line, col};
  };
  std::vector<std::string> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (const auto& m : sorted) out += (out.empty() ? "" : "\n") + m;
  return out;
}

const toml::array& arrayOfTables(const Parser& p, const toml::node& n, const std::string& what) {
  if (!n.is_array_of_tables()) p.fail(n, what + " must be written as [[" + what + "]] tables");
  return *n.as_array();
}

Phase Parser::phase(const toml::node& n) const {
  const auto& t = table(n, "phase");
  checkKeys(t, {"name", "duration"}, "[[phase]]");
  Phase ph;
  ph.pos = pos(n);
  auto* nm = t.get("name");
  if (!nm) fail(n, "[[phase]] needs a name, e.g. name = \"baseline\"");
  ph.name = name(*nm, "phase name");
  auto* d = t.get("duration");
  if (!d) fail(n, "phase '" + ph.name + "' needs a duration, e.g. duration = \"10s\"");
  ph.durationNs = duration(*d, "phase '" + ph.name + "' duration", 100 * kMs, kDay);
  return ph;
}

json Parser::normalise(const toml::node& where, const std::string& kind, const json& raw,
                       const toml::table* rawTable) const {
  const faults::FaultKind* k = faults::findKind(kind);
  auto r = faults::normaliseParams(kind, k->params, raw);
  if (r) return *r;
  // Point at the parameter the message names, when it is in the table as written.
  if (rawTable)
    for (auto&& [key, v] : *rawTable) {
      // Appended, not "'" + key: GCC 12 at -O2 reports a false -Wrestrict in operator+(const
      // char*, string&&) (GCC PR 105651), which breaks a release build.
      std::string quoted(1, '\'');
      quoted.append(key.str());
      quoted.push_back('\'');
      if (r.error().message.find(quoted) != std::string::npos) fail(v, r.error().message);
    }
  fail(where, r.error().message);
}

Step Parser::step(const toml::node& n, size_t index, const Scenario& sc) const {
  const auto& t = table(n, "step");
  checkKeys(t, {"name", "kind", "target", "phase", "at", "for", "params"}, "[[step]]");
  Step s;
  s.pos = pos(n);
  s.name = "step" + std::to_string(index + 1);
  if (auto* nm = t.get("name")) s.name = name(*nm, "step name");
  auto* kind = t.get("kind");
  if (!kind) fail(n, "step '" + s.name + "' needs a fault kind, e.g. kind = \"link_flap\"");
  s.kind = str(*kind, "step kind", 64);
  if (!faults::findKind(s.kind)) {
    std::vector<std::string> known;
    for (const auto* k : faults::registry()) known.push_back(k->name);
    fail(*kind, "unknown fault kind '" + s.kind + "' (known: " + joinNames(known) + ")");
  }
  const toml::table* rawTable = nullptr;
  if (auto* p = t.get("params")) {
    rawTable = &table(*p, "step '" + s.name + "' params");
    for (auto&& [k, v] : *rawTable) s.rawParams[std::string(k.str())] = value(v, s.kind + " parameter '" + std::string(k.str()) + "'");
  }
  s.params = normalise(rawTable ? static_cast<const toml::node&>(*rawTable) : n, s.kind, s.rawParams, rawTable);

  auto* target = t.get("target");
  if (!target) fail(n, "step '" + s.name + "' needs a target: a node, a role, \"all\" or { random = K, from = \"role\" }");
  s.target = selector(*target, "step '" + s.name + "' target");

  // Where the step sits on the timeline.
  int64_t phaseStart = 0, phaseEnd = sc.durationNs();
  if (auto* ph = t.get("phase")) {
    s.phase = str(*ph, "step phase", 64);
    int64_t cursor = 0;
    bool found = false;
    std::vector<std::string> names;
    for (const auto& p : sc.phases) {
      names.push_back(p.name);
      if (p.name == s.phase) {
        phaseStart = cursor;
        phaseEnd = cursor + p.durationNs;
        found = true;
      }
      cursor += p.durationNs;
    }
    if (!found) fail(*ph, "no phase '" + s.phase + "' (phases: " + joinNames(names) + ")");
  }
  if (auto* a = t.get("at")) {
    if (a->is_table()) {
      const auto& at = *a->as_table();
      checkKeys(at, {"between"}, "step at");
      auto* b = at.get("between");
      if (!b || !b->is_array() || b->as_array()->size() != 2)
        fail(*a, "step at as a table is { between = [\"5s\", \"20s\"] } (a seeded random time)");
      s.atNs = duration(*b->as_array()->get(0), "step at", 0, kDay);
      s.atMaxNs = duration(*b->as_array()->get(1), "step at", 0, kDay);
      if (s.atMaxNs <= s.atNs) fail(*b, "step at: the window's end must be after its start");
    } else {
      s.atNs = s.atMaxNs = duration(*a, "step at", 0, kDay);
    }
  }
  const int64_t baselineEnd = sc.phases.front().durationNs;
  const int64_t start = phaseStart + s.atNs;
  if (start < baselineEnd)
    fail(t.get("at") ? *t.get("at") : n,
         "step '" + s.name + "' starts at " + fmtDur(start) + ", inside the baseline phase '" +
             sc.phases.front().name + "' (0s.." + fmtDur(baselineEnd) +
             "): faults start after the baseline; set phase = \"...\" or a later at");
  const int64_t latest = phaseStart + s.atMaxNs;
  if (latest >= sc.durationNs())
    fail(t.get("at") ? *t.get("at") : n, "step '" + s.name + "' starts at " + fmtDur(latest) +
                                             ", at or after the end of the timeline (" +
                                             fmtDur(sc.durationNs()) + ")");
  if (auto* f = t.get("for")) {
    s.forNs = duration(*f, "step '" + s.name + "' for", kMs, kDay);
    // An agent reverts a fault at its max_fault_lifetime whatever the step asked for.
    if (s.forNs > kAgentLifetimeNs)
      fail(*f, "step '" + s.name + "' for = " + fmtDur(s.forNs) + " is longer than an agent keeps a fault (" +
                   fmtDur(kAgentLifetimeNs) + ", [agent] max_fault_lifetime's default): set for = \"" +
                   fmtDur(kAgentLifetimeNs) + "\" or less, or split the step");
  } else {
    s.forNs = (phaseEnd > latest ? phaseEnd : sc.durationNs()) - latest;
  }
  if (latest + s.forNs > sc.durationNs())
    fail(t.get("for") ? *t.get("for") : n,
         "step '" + s.name + "' may run until " + fmtDur(latest + s.forNs) +
             ", after the timeline ends at " + fmtDur(sc.durationNs()) +
             ": shorten 'for' or lengthen the phases (faults are reverted before scoring ends)");
  // Checks across parameters, the kind's own (incast: fan_in spread evenly over the senders).
  if (const auto* k = faults::findKind(s.kind); k && k->check)
    if (auto ok = k->check(s.params); !ok) {
      // The message names the parameter first: point at its value where the step has one.
      const std::string& msg = ok.error().message;
      const toml::node* at = rawTable ? rawTable->get(msg.substr(0, msg.find(' '))) : nullptr;
      fail(at ? *at : n, "step '" + s.name + "' " + msg);
    }
  // A kind with its own duration must fit inside the lifetime the step grants it.
  if (s.params.contains("duration") && s.params["duration"].is_number_integer() &&
      s.params["duration"].get<int64_t>() > s.forNs)
    fail(rawTable && rawTable->get("duration") ? *rawTable->get("duration") : n,
         "step '" + s.name + "' duration " + fmtDur(s.params["duration"].get<int64_t>()) +
             " is longer than its lifetime 'for' = " + fmtDur(s.forNs));
  return s;
}

Expectation Parser::expectation(const toml::node& n, const std::string& what) const {
  const auto& t = table(n, what);
  const std::string tbl = "[[" + what + "]]";
  if (what == "expect")
    checkKeys(t, {"metric", "op", "bound", "scope", "stat"}, tbl);
  else
    checkKeys(t, {"metric", "op", "bound", "scope"}, tbl);
  Expectation e;
  e.pos = pos(n);
  auto* m = t.get("metric");
  if (!m) fail(n, tbl + " needs a metric, e.g. metric = \"recovery_time\"");
  e.metric = str(*m, what + " metric", 80);
  auto info = findMetric(e.metric);
  if (!info) {
    fail(*m, "unknown metric '" + e.metric + "' (known: " + joinNames(metricNames()) + ")");
  }
  auto* op = t.get("op");
  if (!op) fail(n, tbl + " needs op = \"<\", \"<=\", \">\" or \">=\"");
  std::string o = str(*op, what + " op", 4);
  if (o == "<") e.op = Comparison::less;
  else if (o == "<=") e.op = Comparison::lessEqual;
  else if (o == ">") e.op = Comparison::greater;
  else if (o == ">=") e.op = Comparison::greaterEqual;
  else fail(*op, "op '" + o + "' is not a comparison: use <, <=, > or >=");
  auto* b = t.get("bound");
  if (!b) fail(n, tbl + " needs a bound, e.g. bound = \"2s\"");
  const std::string boundOf = "bound of " + e.metric;
  if (auto* st = t.get("stat")) {
    e.stat = str(*st, "expect stat", 8);
    if (e.stat != "cv") fail(*st, "stat '" + e.stat + "' is not known: use stat = \"cv\" (coefficient of variation over repeated trials)");
    bool repeatable = false;
    std::vector<std::string> names;
    for (const auto& r : repeatableMetrics()) {
      repeatable |= e.metric == r.metric;
      names.push_back(r.metric);
    }
    if (!repeatable) fail(*m, "stat = \"cv\" needs a job metric shown over repeats (" + joinNames(names) + ")");
    // A CV is a percentage of the mean, whatever the metric's unit.
    e.bound = number(*b, "bound of the CV of " + e.metric + " (percent)", 0, 1000);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g%%", e.bound);
    e.boundText = buf;
    if (auto* s = t.get("scope")) e.scope = name(*s, what + " scope");
    if (e.scope != "job") fail(*t.get("scope"), "stat = \"cv\" is judged on the job: leave scope out");
    return e;
  }
  switch (info->unit) {
    case MetricUnit::duration:
      e.bound = double(duration(*b, boundOf, 0, kDay));
      e.boundText = fmtDur(int64_t(e.bound));
      break;
    case MetricUnit::size:
      e.bound = double(size(*b, boundOf, 0, uint64_t(1) << 60));
      e.boundText = formatSize(uint64_t(e.bound));
      break;
    case MetricUnit::rate:
      e.bound = bitRateAsBytes(*b, boundOf);
      e.boundText = formatBitRate(e.bound * 8);
      break;
    case MetricUnit::percent:
      e.bound = number(*b, boundOf, 0, 100);
      e.boundText = b->is_integer() ? std::to_string(b->as_integer()->get()) + "%" : "";
      if (e.boundText.empty()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g%%", e.bound);
        e.boundText = buf;
      }
      break;
    case MetricUnit::number: {
      e.bound = number(*b, boundOf, 0, 1e18);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", e.bound);
      e.boundText = buf;
      break;
    }
  }
  if (auto* s = t.get("scope")) e.scope = name(*s, what + " scope");
  return e;
}

Sweep Parser::sweep(const toml::node& n, const Scenario& sc) const {
  const auto& t = table(n, "sweep");
  checkKeys(t, {"step", "param", "values", "over", "per_trial"}, "[sweep]");
  Sweep sw;
  sw.pos = pos(n);
  auto* st = t.get("step");
  auto* pa = t.get("param");
  auto* va = t.get("values");
  auto* ov = t.get("over");
  auto findStep = [&]() {
    sw.step = str(*st, "sweep step", 64);
    auto it = std::find_if(sc.steps.begin(), sc.steps.end(), [&](const Step& s) { return s.name == sw.step; });
    if (it == sc.steps.end()) {
      std::vector<std::string> names;
      for (const auto& s : sc.steps) names.push_back(s.name);
      fail(*st, "[sweep] step '" + sw.step + "' is not a step of this scenario (steps: " + joinNames(names) + ")");
    }
    return it;
  };
  if (ov) {
    // A target sweep: the step runs on each of its targets in turn.
    if (str(*ov, "sweep over", 16) != "target")
      fail(*ov, "[sweep] over must be \"target\" (or leave it out and sweep a parameter with param and values)");
    if (pa || va) fail(pa ? *pa : *va, "[sweep] over = \"target\" takes its values from the step's target: drop param and values");
    if (!st) fail(n, "[sweep] over = \"target\" needs step = \"<step name>\"");
    auto it = findStep();
    if (it->target.random > 0)
      fail(it->target.pos, "step '" + it->name + "' is swept over its targets, each in turn: drop random = " +
                               std::to_string(it->target.random) + " from its target");
    sw.overTargets = true;
    sw.param = "target";
    if (auto* k = t.get("per_trial")) {
      auto v = k->value<int64_t>();
      if (!v || *v < 1 || *v > 64) fail(*k, "[sweep] per_trial must be an integer in [1, 64]: targets faulted together");
      sw.perTrial = int(*v);
    }
    return sw;
  }
  if (auto* k = t.get("per_trial")) fail(*k, "[sweep] per_trial goes with over = \"target\"");
  if (!st || !pa || !va)
    fail(n, "[sweep] needs step = \"<step name>\", param = \"<fault parameter>\" and values = [...], "
            "or step and over = \"target\"");
  sw.param = str(*pa, "sweep param", 64);
  auto it = findStep();
  const auto* kind = faults::findKind(it->kind);
  bool known = std::any_of(kind->params.begin(), kind->params.end(),
                           [&](const faults::ParamSpec& p) { return p.name == sw.param; });
  if (!known) {
    std::vector<std::string> names;
    for (const auto& p : kind->params) names.push_back(p.name);
    fail(*pa, it->kind + " has no parameter '" + sw.param + "' (known: " + joinNames(names) + ")");
  }
  if (!va->is_array() || va->as_array()->empty())
    fail(*va, "[sweep] values must be a non-empty list");
  if (va->as_array()->size() > kMaxSweepValues) fail(*va, "[sweep] has more than 64 values");
  for (const auto& v : *va->as_array()) {
    json raw = it->rawParams;
    raw[sw.param] = value(v, "sweep value");
    normalise(v, it->kind, raw, nullptr);
    sw.values.push_back(raw[sw.param]);
  }
  return sw;
}

// Alert label names and values as Prometheus allows them (names: [a-zA-Z_][a-zA-Z0-9_]*).
bool labelName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (size_t i = 0; i < s.size(); i++) {
    char c = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

DetectExpectation Parser::detect(const toml::node& n, const Scenario& sc) const {
  const auto& t = table(n, "detect");
  checkKeys(t, {"step", "alert", "within", "clears_within"}, "[[detect]]");
  DetectExpectation d;
  d.pos = pos(n);
  if (auto* st = t.get("step")) {
    std::vector<std::string> names;
    for (const auto& s : sc.steps) names.push_back(s.name);
    auto one = [&](const toml::node& v) {
      std::string nm = name(v, "detect step");
      if (std::find(names.begin(), names.end(), nm) == names.end())
        fail(v, "detect step '" + nm + "' is not a step of " +
                    (sc.name.empty() ? std::string("the playbook") : "scenario '" + sc.name + "'") + " (steps: " +
                    (names.empty() ? std::string("none") : joinNames(names)) + ")");
      d.steps.push_back(nm);
    };
    if (st->is_array()) {
      if (st->as_array()->empty()) fail(*st, "detect step must name at least one step (leave it out for every step)");
      for (const auto& e : *st->as_array()) one(e);
    } else {
      one(*st);
    }
  } else if (sc.steps.empty()) {
    fail(n, "[[detect]] has no step to watch: the scenario has no [[step]]");
  }
  auto* al = t.get("alert");
  if (!al)
    fail(n, "[[detect]] needs alert = { alertname = \"RdmaLinkDown\", node = \"{target}\" } (the labels the alert must carry)");
  const auto& at = table(*al, "detect alert");
  if (at.empty()) fail(*al, "detect alert must name at least alertname = \"...\"");
  if (at.size() > 32) fail(*al, "detect alert has more than 32 labels");
  for (auto&& [k, v] : at) {
    const std::string key(k.str());
    if (!labelName(key))
      fail(v, "detect alert label '" + key + "' is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)");
    std::string val = str(v, "detect alert label '" + key + "'", 256);
    // Placeholders: every {...} must be one the runner fills in.
    for (size_t i = val.find('{'); i != std::string::npos; i = val.find('{', i + 1)) {
      size_t j = val.find('}', i);
      std::string ph = j == std::string::npos ? val.substr(i) : val.substr(i, j - i + 1);
      if (ph != "{target}" && ph != "{step}" && ph != "{kind}" && ph != "{scenario}")
        fail(v, "detect alert label '" + key + "' has '" + ph +
                    "': the placeholders are {target} (the faulted node), {step}, {kind} and {scenario}");
    }
    d.match.emplace_back(key, std::move(val));
  }
  if (!at.get("alertname")) fail(*al, "detect alert needs alertname = \"...\" (which alert the monitoring must raise)");
  auto* w = t.get("within");
  if (!w) fail(n, "[[detect]] needs within = \"30s\" (from the fault's applied instant to the alert firing)");
  d.withinNs = duration(*w, "detect within", kMs, kHour);
  if (auto* c = t.get("clears_within")) d.clearsWithinNs = duration(*c, "detect clears_within", kMs, kHour);
  return d;
}

void Parser::detectionSettings(const toml::node& n, DetectionSettings& d) const {
  const auto& t = table(n, "detection");
  checkKeys(t, {"scrape_interval", "evaluation_interval", "clock_skew", "false_alarms", "false_alarm_margin", "watch"},
            "[detection]");
  d.pos = pos(n);
  if (auto* v = t.get("scrape_interval")) d.scrapeIntervalNs = duration(*v, "scrape_interval", kMs, kHour);
  if (auto* v = t.get("evaluation_interval")) d.evaluationIntervalNs = duration(*v, "evaluation_interval", kMs, kHour);
  if (auto* v = t.get("clock_skew")) d.clockSkewNs = duration(*v, "clock_skew", 0, kHour);
  if (auto* v = t.get("false_alarms")) d.falseAlarms = boolean(*v, "false_alarms");
  if (auto* v = t.get("false_alarm_margin")) d.falseAlarmMarginNs = duration(*v, "false_alarm_margin", 0, kDay);
  if (auto* v = t.get("watch")) {
    if (!v->is_array()) fail(*v, "watch must be a list of alert names, e.g. watch = [\"RdmaLinkDown\"]");
    if (v->as_array()->size() > 256) fail(*v, "watch lists more than 256 alert names");
    for (const auto& e : *v->as_array()) d.watch.push_back(str(e, "watch alert name", 256));
  }
}

Scenario Parser::scenario(const toml::table& t, const std::string& nm, const SourcePos& p,
                          const Playbook&) const {
  Scenario sc;
  sc.name = nm;
  sc.pos = p;
  // Each phase, step, expectation and the sweep is a part of its own (Parser::part). Steps and
  // the sweep are placed on the phases' timeline: with a phase in error they are not checked
  // (their errors would be the phase's, said again).
  bool timeline = part([&] {
    auto* phases = t.get("phase");
    if (!phases)
      fail(p, (nm.empty() ? std::string("the playbook") : "scenario '" + nm + "'") +
                  " has no [[phase]]: the first phase is the baseline, e.g. [[phase]] name = \"baseline\" duration = \"10s\"");
    const auto& pa = arrayOfTables(*this, *phases, "phase");
    if (pa.size() > kMaxPhases) fail(*phases, "more than 32 phases");
  });
  if (timeline) {
    const auto& pa = *t.get("phase")->as_array();
    std::set<std::string> seen;
    for (const auto& ph : pa)
      timeline = part([&] {
                   Phase x = phase(ph);
                   if (!seen.insert(x.name).second) fail(ph, "phase '" + x.name + "' appears twice");
                   sc.phases.push_back(std::move(x));
                 }) &&
                 timeline;
  }
  if (sc.phases.empty()) timeline = false;
  if (auto* steps = t.get("step"); steps && timeline) {
    const toml::array* sa = nullptr;
    if (part([&] {
          sa = &arrayOfTables(*this, *steps, "step");
          if (sa->size() > kMaxSteps) fail(*steps, "more than 256 steps");
        })) {
      std::set<std::string> names;
      for (size_t i = 0; i < sa->size(); i++)
        part([&] {
          Step x = step(*sa->get(i), i, sc);
          if (!names.insert(x.name).second) fail(*sa->get(i), "step name '" + x.name + "' appears twice");
          sc.steps.push_back(std::move(x));
        });
    }
  }
  auto expectations = [&](const char* key, const char* what, const char* plural, std::vector<Expectation>& out) {
    auto* ex = t.get(key);
    if (!ex) return;
    const toml::array* ea = nullptr;
    if (!part([&] {
          ea = &arrayOfTables(*this, *ex, what);
          if (ea->size() > kMaxExpectations) fail(*ex, std::string("more than 256 ") + plural);
        }))
      return;
    for (const auto& e : *ea) part([&] { out.push_back(expectation(e, what)); });
  };
  expectations("expect", "expect", "expectations", sc.expectations);
  expectations("require", "require", "requirements", sc.requirements);
  if (auto* sw = t.get("sweep"); sw && timeline) part([&] { sc.sweep = sweep(*sw, sc); });
  // After the steps: a [[detect]] names them.
  if (auto* de = t.get("detect"); de && timeline) {
    const toml::array* da = nullptr;
    if (part([&] {
          da = &arrayOfTables(*this, *de, "detect");
          if (da->size() > kMaxExpectations) fail(*de, "more than 256 [[detect]] tables");
        }))
      for (const auto& e : *da) part([&] { sc.detections.push_back(detect(e, sc)); });
  }
  return sc;
}

void Parser::workload(const toml::node& wlNode, Workload& w) const {
  const toml::node* wl = &wlNode;
  const auto& t = table(*wl, "workload");
  checkKeys(t, {"kind", "size", "streams", "nodes", "transport", "dscp", "qp_timeout", "qp_retry_cnt", "qp_rnr_retry",
                "test"},
            "[workload]");
  auto* k = t.get("kind");
  if (!k) fail(*wl, "[workload] needs kind = \"allreduce\" (or allgather, alltoall, incast, pairwise, perftest)");
  auto kind = workloadKindFromString(str(*k, "workload kind", 32));
  if (!kind)
    fail(*k, "workload kind '" + k->as_string()->get() +
                 "' is unknown (known: allreduce, allgather, alltoall, incast, pairwise, perftest)");
  w.kind = *kind;
  // perftest: which program of the agents' fixed list (they run nothing else).
  if (*kind == WorkloadKind::perftest) w.test = "ib_write_bw";
  if (auto* te = t.get("test")) {
    if (*kind != WorkloadKind::perftest) fail(*te, "test names a perftest program: it needs kind = \"perftest\"");
    w.test = str(*te, "workload test", 32);
    if (!rc::workload::perftestProgram(w.test))
      fail(*te, "perftest test '" + w.test + "' is unknown (known: " + rc::workload::perftestTests() + ")");
  }
  // Parsed wider than an agent accepts, so that the message can say what an agent accepts.
  if (auto* s = t.get("size")) {
    w.sizeBytes = size(*s, "workload size", 1, uint64_t(16) << 30);
    if (w.sizeBytes > uint64_t(proto::kMaxWorkloadSize))
      fail(*s, "workload size " + formatSize(w.sizeBytes) + " is more than an agent accepts (" +
                   formatSize(uint64_t(proto::kMaxWorkloadSize)) +
                   " per rank's message): lower size, e.g. size = \"256MiB\"");
  }
  if (auto* s = t.get("streams")) {
    w.streams = int(integer(*s, "workload streams", 1, 1024));
    if (w.streams > proto::kMaxWorkloadStreams)
      fail(*s, "workload streams = " + std::to_string(w.streams) + " is more than an agent opens (" +
                   std::to_string(proto::kMaxWorkloadStreams) + " connections per peer): lower streams");
  }
  if (auto* tr = t.get("transport")) {
    w.transport = str(*tr, "workload transport", 16);
    if (w.transport != "tcp" && w.transport != "verbs")
      fail(*tr, "workload transport '" + w.transport + "' is unknown (known: tcp, verbs)");
    if (w.transport == "verbs" && w.streams > 16)
      fail(*tr, "workload streams must be 1 to 16 with transport = \"verbs\" (QPs per peer)");
  }
  // The traffic class of both transports, and the verbs QPs' attributes (NCCL's defaults).
  if (auto* d = t.get("dscp")) w.qp.dscp = int(integer(*d, "workload dscp", 0, 63));
  if (auto* q = t.get("qp_timeout")) w.qp.timeout = int(integer(*q, "workload qp_timeout", 0, 31));
  if (auto* q = t.get("qp_retry_cnt")) w.qp.retryCount = int(integer(*q, "workload qp_retry_cnt", 0, 7));
  if (auto* q = t.get("qp_rnr_retry")) w.qp.rnrRetry = int(integer(*q, "workload qp_rnr_retry", 0, 7));
  if (*kind == WorkloadKind::perftest && w.streams > 16)
    fail(*wl, "workload streams must be 1 to 16 with kind = \"perftest\" (its QPs, -q)");
  if (auto* tr = t.get("transport"); tr && *kind == WorkloadKind::perftest)
    fail(*tr, "kind = \"perftest\" always runs over RDMA: leave transport out");
  for (const char* key : {"qp_retry_cnt", "qp_rnr_retry"})
    if (auto* q = t.get(key); q && *kind == WorkloadKind::perftest)
      fail(*q, std::string(key) + " is not a perftest option (perftest sets its own; qp_timeout is its -u)");
  for (const char* key : {"qp_timeout", "qp_retry_cnt", "qp_rnr_retry"})
    if (auto* q = t.get(key); q && w.transport != "verbs" && *kind != WorkloadKind::perftest)
      fail(*q, std::string(key) + " sets a verbs QP attribute: it needs transport = \"verbs\"");
  w.nodes.names = {"all"};
  w.nodes.pos = pos(*wl);
  if (auto* n = t.get("nodes")) {
    w.nodes = selector(*n, "workload nodes");
    if (w.nodes.random) fail(*n, "workload nodes cannot be a random pick");
  }
}

void Parser::guardrails(const toml::node& gNode, Guardrails& gr) const {
  const toml::node* g = &gNode;
  const auto& t = table(*g, "guardrails");
  checkKeys(t, {"min_baseline", "abort_on_agent_loss", "max_stall"}, "[guardrails]");
  if (auto* v = t.get("min_baseline")) gr.minBaselineBytesPerSec = bitRateAsBytes(*v, "min_baseline");
  if (auto* v = t.get("abort_on_agent_loss")) gr.abortOnAgentLoss = boolean(*v, "abort_on_agent_loss");
  if (auto* v = t.get("max_stall")) gr.maxStallNs = duration(*v, "max_stall", 10 * kMs, kHour);
}

void Parser::scoring(const toml::node& sNode, ScoringSettings& sc) const {
  const toml::node* s = &sNode;
  const auto& t = table(*s, "scoring");
  checkKeys(t, {"bin", "warmup", "epsilon", "hold", "smooth", "stall_fraction"}, "[scoring]");
  if (auto* v = t.get("bin")) sc.binNs = duration(*v, "bin", kMs, 10 * kSec);
  if (auto* v = t.get("warmup")) sc.warmupNs = duration(*v, "warmup", 0, kHour);
  if (auto* v = t.get("epsilon")) sc.epsilon = number(*v, "epsilon", 0.001, 0.5);
  if (auto* v = t.get("hold")) sc.holdNs = duration(*v, "hold", kMs, kHour);
  if (auto* v = t.get("smooth")) sc.smoothNs = duration(*v, "smooth", 0, 10 * kSec);
  if (auto* v = t.get("stall_fraction")) sc.stallFraction = number(*v, "stall_fraction", 0.001, 0.9);
  if (sc.holdNs < sc.binNs)
    fail(*s, "hold (" + fmtDur(sc.holdNs) + ") must be at least one bin (" + fmtDur(sc.binNs) + ")");
  if (sc.stallFraction >= 1 - sc.epsilon)
    fail(*s, "stall_fraction must be below the recovery threshold 1 - epsilon");
}

void Parser::cost(const toml::node& cNode, CostSettings& co) const {
  const toml::node* c = &cNode;
  const auto& t = table(*c, "cost");
  checkKeys(t, {"gpus", "price_per_gpu_hour", "currency", "incidents_per_day", "days"}, "[cost]");
  if (auto* v = t.get("gpus")) co.gpus = integer(*v, "gpus", 0, 10'000'000);
  if (auto* v = t.get("price_per_gpu_hour")) co.pricePerGpuHour = number(*v, "price_per_gpu_hour", 0, 10000);
  if (auto* v = t.get("currency")) co.currency = str(*v, "currency", 8);
  if (auto* v = t.get("incidents_per_day")) co.incidentsPerDay = number(*v, "incidents_per_day", 0, 100000);
  if (auto* v = t.get("days")) co.days = number(*v, "days", 0, 3650);
}

// [[scenario]] tables: each with its own phases, steps, expectations, sweep and detects.
void Parser::scenarios(const toml::node& scsNode, bool inlineForm, Playbook& pb) {
  const toml::node* scs = &scsNode;
  const toml::array* sa = nullptr;
  bool ok = part([&] {
    if (inlineForm)
      fail(*scs, "use either [[scenario]] tables or top-level [[phase]]/[[step]]/[[expect]]/[[require]]/[[detect]], not both");
    sa = &arrayOfTables(*this, *scs, "scenario");
    if (sa->size() > kMaxScenarios) fail(*scs, "more than 64 scenarios");
  });
  std::set<std::string> names;
  for (size_t i = 0; ok && i < sa->size(); i++) {
    const toml::node& s = *sa->get(i);
    const auto& t = *s.as_table();
    checkKeys(t, {"name", "phase", "step", "expect", "require", "sweep", "detect"}, "[[scenario]]");
    std::string scName;
    if (!part([&] {
          auto* n = t.get("name");
          if (!n) fail(s, "[[scenario]] needs a name");
          scName = name(*n, "scenario name");
          if (!names.insert(scName).second) fail(*n, "scenario '" + scName + "' appears twice");
        }))
      scName = "#" + std::to_string(i + 1);  // its other parts are still checked
    pb.scenarios.push_back(scenario(t, scName, pos(s), pb));
  }
}

// The whole timeline: cv needs repeats, warm-up inside the baseline phase, trials and run time bounded.
void Parser::checkTimeline(const Playbook& pb) {
  size_t trials = 0;
  int64_t total = 0;
  for (const auto& sc : pb.scenarios) {
    for (const auto& e : sc.expectations)
      if (e.stat == "cv" && pb.repeat < 2)
        part([&] {
          fail(e.pos, "stat = \"cv\" on " + e.metric + " needs repeated trials: set repeat = 3 (or more) at the top");
        });
    if (sc.phases.empty()) continue;  // its error is recorded
    part([&] {
      if (pb.scoring.warmupNs >= sc.phases.front().durationNs)
        fail(sc.phases.front().pos, "warm-up (" + fmtDur(pb.scoring.warmupNs) +
                                        ") leaves nothing of the baseline phase '" + sc.phases.front().name + "' (" +
                                        fmtDur(sc.phases.front().durationNs) +
                                        "): lengthen it or lower [scoring] warmup");
    });
    // A target sweep's size is known once bound to an inventory: resolvePlan checks it again.
    size_t n = std::max<size_t>(1, sc.sweep ? sc.sweep->values.size() : 1) * size_t(pb.repeat);
    trials += n;
    total += int64_t(n) * sc.durationNs();
    if (!part([&] {
          if (trials > kMaxTrials) fail(sc.pos, "the playbook expands to more than 1000 trials");
          if (total > kMaxRunNs) fail(sc.pos, "the playbook runs for more than 7 days (" + fmtDur(total) + "); split it");
          if (auto why = runTooLong(total, trials); !why.empty()) fail(sc.pos, why);
        }))
      break;  // said once
  }
}

Playbook Parser::parse(const std::string& text) {
  toml::table root;
  try {
    root = rc::parseToml(text, path_);
  } catch (const toml::parse_error& e) {
    throw Fail{at(e.source()) + ": " + std::string(e.description())};
  }
  checkKeys(root,
            {"name", "description", "seed", "repeat", "workload", "guardrails", "scoring", "cost",
             "phase", "step", "expect", "require", "sweep", "detect", "detection", "scenario"},
            "the playbook");
  Playbook pb;
  pb.path = path_;
  pb.text = text;
  part([&] {
    auto* nm = root.get("name");
    if (!nm) throw Fail{path_ + ":1:1: the playbook needs a name, e.g. name = \"link-flap-recovery\""};
    pb.name = name(*nm, "name");
  });
  if (auto* d = root.get("description")) part([&] { pb.description = str(*d, "description", 4096); });
  if (auto* s = root.get("seed")) part([&] { pb.seed = uint64_t(integer(*s, "seed", 0, INT64_MAX)); });
  if (auto* r = root.get("repeat")) part([&] { pb.repeat = int(integer(*r, "repeat", 1, 100)); });

  part([&] {
    auto* wl = root.get("workload");
    if (!wl) throw Fail{path_ + ":1:1: the playbook needs a [workload] table (kind, size, streams, nodes)"};
    workload(*wl, pb.workload);
  });
  if (auto* g = root.get("guardrails")) part([&] {
    guardrails(*g, pb.guardrails);
  });
  if (auto* s = root.get("scoring")) part([&] {
    scoring(*s, pb.scoring);
  });
  if (auto* d = root.get("detection")) part([&] { detectionSettings(*d, pb.detection); });
  if (auto* c = root.get("cost")) part([&] {
    cost(*c, pb.cost);
  });

  const bool inlineForm =
      root.get("phase") || root.get("step") || root.get("expect") || root.get("require") || root.get("sweep") ||
      root.get("detect");
  if (auto* scs = root.get("scenario"))
    scenarios(*scs, inlineForm, pb);
  else
    pb.scenarios.push_back(scenario(root, pb.name, SourcePos{1, 1}, pb));

  checkTimeline(pb);
  if (auto all = errors(); !all.empty()) throw Fail{all};
  return pb;
}

}  // namespace

const char* toString(WorkloadKind k) {
  switch (k) {
    case WorkloadKind::allreduce: return "allreduce";
    case WorkloadKind::allgather: return "allgather";
    case WorkloadKind::alltoall: return "alltoall";
    case WorkloadKind::incast: return "incast";
    case WorkloadKind::pairwise: return "pairwise";
    case WorkloadKind::perftest: return "perftest";
  }
  return "?";
}

std::optional<WorkloadKind> workloadKindFromString(std::string_view s) {
  for (auto k : {WorkloadKind::allreduce, WorkloadKind::allgather, WorkloadKind::alltoall,
                 WorkloadKind::incast, WorkloadKind::pairwise, WorkloadKind::perftest})
    if (s == toString(k)) return k;
  return std::nullopt;
}

const char* toString(Comparison c) {
  switch (c) {
    case Comparison::less: return "<";
    case Comparison::lessEqual: return "<=";
    case Comparison::greater: return ">";
    case Comparison::greaterEqual: return ">=";
  }
  return "?";
}

std::string Selector::describe() const {
  std::string base = names.size() == 1 ? names.front() : "[" + joinNames(names) + "]";
  if (random) return "random " + std::to_string(random) + " of " + base;
  return base;
}

std::string Expectation::describe() const {
  return (stat.empty() ? metric : stat + "(" + metric + ") over repeats") + " " + toString(op) + " " + boundText +
         " (" + scope + ")";
}

int64_t Scenario::durationNs() const {
  int64_t d = 0;
  for (const auto& p : phases) d += p.durationNs;
  return d;
}

bool Playbook::hasDetections() const {
  return std::any_of(scenarios.begin(), scenarios.end(), [](const Scenario& s) { return !s.detections.empty(); });
}

std::string DetectExpectation::describe() const {
  std::string name, labels;
  for (const auto& [k, v] : match) {
    if (k == "alertname") name = v;
    else labels += (labels.empty() ? "" : ", ") + k + "=\"" + v + "\"";
  }
  std::string out = name + (labels.empty() ? "" : "{" + labels + "}") + " within " + fmtDur(withinNs);
  if (clearsWithinNs) out += ", clears within " + fmtDur(*clearsWithinNs);
  return out;
}

std::vector<std::string> Playbook::faultKinds() const {
  std::vector<std::string> out;
  for (const auto& sc : scenarios)
    for (const auto& s : sc.steps)
      if (std::find(out.begin(), out.end(), s.kind) == out.end()) out.push_back(s.kind);
  return out;
}

Result<Playbook> parsePlaybook(const std::string& text, const std::string& path) {
  if (text.size() > 1 << 20) return makeError(path + ": playbook is larger than 1 MiB");
  try {
    return Parser(path).parse(text);
  } catch (const Fail& f) {
    return makeError(f.message);
  }
}

Result<Playbook> loadPlaybook(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read playbook '" + path + "': check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return parsePlaybook(ss.str(), path);
}

}  // namespace rc::controller
