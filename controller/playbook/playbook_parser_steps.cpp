// The playbook parser's steps, expectations, sweeps and detects (the class: playbook_parser.hpp).
#include "controller/playbook/playbook_parser.hpp"

namespace rc::controller::detail {

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

Step Parser::stepOwn(const toml::node& n, size_t index) const {
  const auto& t = table(n, "step");
  checkKeys(t, {"name", "kind", "target", "phase", "at", "for", "params", "capture"}, "[[step]]");
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
  if (auto* c = t.get("capture")) {
    if (!c->is_boolean()) fail(*c, "step '" + s.name + "' capture must be true or false");
    s.capture = c->as_boolean()->get();
    if (s.capture && s.kind == "packet")
      fail(*c, "step '" + s.name + "' is a packet fault, which captures by itself: set params.capture instead");
  }
  return s;
}

void Parser::stepKindCheck(const toml::node& n, const Step& s) const {
  const faults::FaultKind* k = faults::findKind(s.kind);
  if (!k || !k->check) return;
  auto ok = k->check(s.params);
  if (ok) return;
  // The message names the parameter first: point at its value where the step has one.
  const std::string& msg = ok.error().message;
  const toml::table* rawTable = n.is_table() && n.as_table()->get("params") ? n.as_table()->get("params")->as_table() : nullptr;
  const toml::node* at = rawTable ? rawTable->get(msg.substr(0, msg.find(' '))) : nullptr;
  fail(at ? *at : n, "step '" + s.name + "' " + msg);
}

Step Parser::step(const toml::node& n, size_t index, const Scenario& sc) const {
  Step s = stepOwn(n, index);
  const auto& t = *n.as_table();
  const toml::table* rawTable = t.get("params") ? t.get("params")->as_table() : nullptr;

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
  stepKindCheck(n, s);
  // A kind with its own duration must fit inside the lifetime the step grants it.
  if (s.params.contains("duration") && s.params["duration"].is_number_integer() &&
      s.params["duration"].get<int64_t>() > s.forNs)
    fail(rawTable && rawTable->get("duration") ? *rawTable->get("duration") : n,
         "step '" + s.name + "' duration " + fmtDur(s.params["duration"].get<int64_t>()) +
             " is longer than its lifetime 'for' = " + fmtDur(s.forNs));
  // A flap train must fit too: the agent reverts at the lifetime, so a longer train would end
  // cut short, its last flap shorter than written, without a word.
  if (s.kind == "link_flap" && s.params.value("down", json()).is_number_integer() &&
      s.params.value("count", json()).is_number_integer()) {
    const int64_t count = s.params["count"].get<int64_t>();
    const int64_t up = s.params.value("up", json()).is_number_integer() ? s.params["up"].get<int64_t>() : 0;
    const int64_t train = count * s.params["down"].get<int64_t>() + (count - 1) * up;
    if (train > s.forNs)
      fail(rawTable && rawTable->get("down") ? *rawTable->get("down") : n,
           "step '" + s.name + "' flaps for " + fmtDur(train) + " (" + std::to_string(count) + " x down" +
               (count > 1 ? " + " + std::to_string(count - 1) + " x up" : std::string()) +
               ") but its lifetime 'for' is " + fmtDur(s.forNs) +
               ": the agent would cut the train short; lengthen 'for' or shorten the flaps");
  }
  return s;
}

Step captureStep(const Step& s) {
  Step c = s;
  c.name = s.name + "-capture";
  c.kind = "packet";
  c.capture = false;
  c.rawParams = {{"action", "none"}, {"protocol", "roce"}, {"duration", std::to_string(s.forNs) + "ns"}};
  const auto* k = faults::findKind("packet");
  auto p = faults::normaliseParams("packet", k->params, c.rawParams);
  c.params = p ? *p : json::object();
  return c;
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
    if (e.stat != "cv" && e.stat != "median")
      fail(*st, "stat '" + e.stat +
                    "' is not known: use stat = \"median\" (the median over repeated trials) or stat = \"cv\" "
                    "(their coefficient of variation)");
    bool repeatable = false;
    std::vector<std::string> names;
    for (const auto& r : repeatableMetrics()) {
      repeatable |= e.metric == r.metric;
      names.push_back(r.metric);
    }
    if (!repeatable)
      fail(*m, "stat = \"" + e.stat + "\" needs a job metric shown over repeats (" + joinNames(names) + ")");
    if (auto* s = t.get("scope")) e.scope = name(*s, what + " scope");
    if (e.scope != "job") fail(*t.get("scope"), "stat = \"" + e.stat + "\" is judged on the job: leave scope out");
    if (e.stat == "cv") {
      // A CV is a percentage of the mean, whatever the metric's unit.
      e.bound = number(*b, "bound of the CV of " + e.metric + " (percent)", 0, 1000);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g%%", e.bound);
      e.boundText = buf;
      return e;
    }
    // median: the bound is in the metric's own unit, as for one trial (below).
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

}  // namespace rc::controller::detail
