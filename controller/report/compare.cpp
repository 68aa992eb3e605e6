// compare and baseline merge: result documents to metric tables, tables against each other,
// rules from TOML, and the text, JSON and JUnit of a comparison (see compare.hpp).
#include "controller/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <toml++/toml.h>

#include "common/toml_text.hpp"
#include "common/units.hpp"
#include "controller/measure/metrics_table.hpp"
#include "controller/report/report.hpp"

namespace rc::controller {
namespace {

const json* member(const json& o, const char* k) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(k);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}
std::optional<double> number(const json& o, const char* k) {
  const json* v = member(o, k);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

// The healthy job's own depth below its baseline (B - band floor), in bytes per second.
double bandDepth(const json& scope) {
  auto b = number(scope, "baseline_Bps");
  const json* band = member(scope, "baseline_band");
  if (!b || !band) return 0;
  auto floor = number(*band, "floor_Bps");
  return floor ? std::max(0.0, *b - *floor) : 0;
}

// Fewer iterations than this in a fault window: its p50 is one of them, not a median.
constexpr int kFewIterations = 10;

// Every compared metric of one scope of one trial.
// How far a TCP job's return after an outage moves on its own: Linux retransmits a lost
// segment after 200 ms, then at doubling intervals while nothing is acknowledged, so a flow
// tries again anywhere from 0 to about the outage + 200 ms after the link is back (the lab's
// recoveries after its 1 s flap: 0.51 to 1.03 s). Half that span is the noise of every value
// that counts the return. RDMA's RC transport retries at its fixed QP timeout: nothing is added
// for verbs. The outage: a link_flap's `down`, a pfc_storm's time on.
int64_t retryNoiseNs(const json& doc, const json& trial) {
  const json* pb = member(doc, "playbook");
  const json* wl = pb ? member(*pb, "workload") : nullptr;
  if (wl && wl->value("transport", std::string("tcp")) != "tcp") return 0;
  const json* faults = member(doc, "faults");
  if (!faults || !faults->is_array()) return 0;
  const int index = trial.value("index", -1);
  int64_t outage = 0;
  for (const auto& f : *faults) {
    if (!f.is_object() || f.value("trial", -2) != index) continue;
    const std::string kind = f.value("kind", std::string());
    if (kind == "link_flap" && f.contains("params") && f["params"].is_object())
      outage = std::max(outage, int64_t(number(f["params"], "down").value_or(0)));
    if (kind == "pfc_storm") {
      auto a = number(f, "applied_ns"), r = number(f, "reverted_ns");
      if (a && r) outage = std::max(outage, int64_t(*r - *a));
    }
  }
  return outage > 0 ? (outage + 200'000'000) / 2 : 0;
}

void addScope(MetricTable& t, const std::string& trial, const json& s, double retry) {
  const std::string scope = s.value("scope", std::string());
  auto put = [&](const char* metric, std::optional<double> v, double noise, bool notRecovered = false,
                 double retryPart = 0) {
    if (!v && !notRecovered) return;
    MetricValue m;
    m.value = v;
    m.notRecovered = notRecovered;
    m.noise = std::max(0.0, noise);
    m.retryNs = retry;
    m.retryPart = std::min(m.noise, std::max(0.0, retryPart));
    m.lo = m.hi = v.value_or(0);
    if (v) m.samples = {*v};
    t[{trial, scope, metric}] = m;
  };
  const auto baseline = number(s, "baseline_Bps");
  const double depth = bandDepth(s);
  put("baseline", baseline, depth);
  const json* impact = member(s, "impact");
  const double u = impact ? number(*impact, "uncertainty_ns").value_or(0) : 0;
  if (impact) {
    const bool recovered = impact->value("recovered", false);
    put("recovery_time", recovered ? number(*impact, "recovery_time_ns") : std::nullopt, u + retry, !recovered, retry);
    // Loss as a share depends on the window (fault start to recovery), so the bytes lost are
    // compared too; their noise is the healthy band's depth over that window.
    // A later return (retry) costs the baseline's rate for that long.
    const double window = (number(*impact, "window_to_ns").value_or(0) - number(*impact, "window_from_ns").value_or(0)) / 1e9;
    const double pctRetry = window > 0 ? retry / 1e9 / window * 100 : 0, bytesRetry = baseline.value_or(0) * retry / 1e9;
    put("throughput_loss_pct", number(*impact, "loss_pct"),
        (baseline && *baseline > 0 ? depth / *baseline * 100 : 0) + pctRetry, false, pctRetry);
    put("throughput_loss_bytes", number(*impact, "loss_bytes"), depth * std::max(0.0, window) + bytesRetry, false,
        bytesRetry);
    put("stall_time", number(*impact, "stall_ns"), u + retry, false, retry);
    put("longest_stall", number(*impact, "longest_stall_ns"), u + retry, false, retry);
    put("min_throughput", number(*impact, "min_Bps"), depth);
  }
  if (const json* it = member(s, "iterations")) {
    double spread = 0, baseP50 = 0;  // the baseline's own p50..p99
    if (const json* b = member(*it, "baseline")) {
      baseP50 = number(*b, "p50_ns").value_or(0);
      spread = number(*b, "p99_ns").value_or(0) - baseP50;
    }
    if (const json* w = member(*it, "window")) {
      // The window's slowest iteration spans the stall, known to the trial's uncertainty.
      const double tail0 = std::max(spread, u), tail = tail0 + retry;
      // A fault window of a few iterations (the stalled one and some healthy ones) has no stable
      // median: its p50 is the fast or the stalled one from run to run (0.12 s, then 1.6 s, on
      // the lab), anywhere from the healthy p50 to the window's slowest.
      double p50noise = tail, p50noise0 = tail0;
      if (w->value("count", 0) < kFewIterations) {
        p50noise = std::max(p50noise, number(*w, "max_ns").value_or(0) - baseP50);
        p50noise0 = std::max(p50noise0, number(*w, "max_ns").value_or(0) - baseP50);
      }
      put("iteration_p50", number(*w, "p50_ns"), p50noise, false, p50noise - p50noise0);
      put("iteration_p99", number(*w, "p99_ns"), tail, false, retry);
      put("iteration_max", number(*w, "max_ns"), tail, false, retry);
    }
  }
  if (auto busbw = number(s, "busbw_Bps"); busbw && baseline && *baseline > 0)
    put("busbw", busbw, depth / *baseline * *busbw);
}

int worseOf(const std::string& metric) {
  for (const auto& m : compareMetrics())
    if (metric == m.name) return m.worse;
  return 1;
}

std::string fmt(const std::string& metric, double v) {
  const MetricRow* row = findMetric(metric);
  return formatMetric(row ? row->unit : MetricUnit::number, v);
}

std::string fmtValue(const std::string& metric, const MetricValue& m) {
  if (m.notRecovered && !m.value) return "not recovered";
  if (!m.value) return "-";
  std::string s = fmt(metric, *m.value);
  if (m.noise > 0) s += " ± " + fmt(metric, m.noise);
  return s;
}

std::string fmtDiff(const std::string& metric, double d, double base) {
  std::string s = (d >= 0 ? "+" : "-") + fmt(metric, std::fabs(d));
  if (base != 0) {
    char b[32];
    std::snprintf(b, sizeof b, " (%+.1f%%)", d / std::fabs(base) * 100);
    s += b;
  }
  return s;
}

bool scopeMatches(const CompareRule& r, const std::string& scope) {
  if (std::find(r.exempt.begin(), r.exempt.end(), scope) != r.exempt.end()) return false;
  if (r.scope == "*") return true;
  if (r.scope == "nodes") return scope != "job";
  return r.scope == scope;
}

RuleCheck check(const CompareRule& r, const CompareRow& row) {
  RuleCheck c{r.text, r.where, false, ""};
  const std::string& m = row.key.metric;
  if (!row.result.value && !row.result.notRecovered) {
    c.why = "no value in the result";
    return c;
  }
  if (r.variancePct) {
    if (!row.base.value && !row.base.notRecovered) {
      c.why = "no value in the baseline";
      return c;
    }
    if (row.result.notRecovered || row.base.notRecovered) {
      c.passed = row.base.notRecovered || !row.result.notRecovered;
      c.why = row.result.notRecovered ? (c.passed ? "not recovered in either" : "not recovered (baseline: " +
                                                                                   fmtValue(m, row.base) + ")")
                                      : "recovered (baseline: not recovered)";
      return c;
    }
    const double base = *row.base.value, res = *row.result.value, lim = *r.variancePct / 100;
    const double allowed = base + std::fabs(base) * lim;  // the furthest value the rule allows
    const bool beyondLimit = lim >= 0 ? res > allowed : res < allowed;
    const bool beyondNoise = std::fabs(res - base) > row.base.noise + row.result.noise;
    c.passed = !(beyondLimit && beyondNoise);
    c.why = fmtDiff(m, res - base, base) + (beyondLimit ? (beyondNoise ? ", beyond the allowed change and the noise"
                                                                       : ", beyond the allowed change but within the noise")
                                                        : ", within the allowed change");
    return c;
  }
  if (row.result.notRecovered) {
    c.passed = r.op == ">" || r.op == ">=";
    c.why = "not recovered";
    return c;
  }
  const double v = *row.result.value;
  c.passed = r.op == "<" ? v < r.bound : r.op == "<=" ? v <= r.bound : r.op == ">" ? v > r.bound : v >= r.bound;
  c.why = "measured " + fmt(m, v);
  return c;
}


// Fewer values than this in a pool of peers: no range is taken from it.
constexpr int kPeerPool = 4;

// A target sweep's trials are peers (SuperBench's golden baseline is one per metric over the
// fleet, not one per node): each value learns the range its metric took in every target's
// trial, in the same role (the job, the target node, a bystander node), as a golden's own runs
// give theirs: a value some peer's run gave is no change. The lab's recoveries after a 1 s flap
// spread from 0.51 to 1.03 s (TCP's retransmission timer, doubling while the link is down, sets
// when a flow tries again), three runs of one node seldom show that spread, twelve of four peers
// mostly do.
void addPeerRanges(MetricTable& t, const json& doc) {
  const json* targets = member(doc, "targets");
  if (!targets || !targets->is_array()) return;
  std::map<std::string, std::string> targetOf;  // trial label -> its target
  for (const auto& r : *targets)
    if (r.is_object() && r.contains("label") && r.contains("target") && r["label"].is_string() && r["target"].is_string())
      targetOf[r["label"].get<std::string>()] = r["target"].get<std::string>();
  if (targetOf.size() < 2) return;
  auto roleOf = [&](const MetricKey& k) -> std::optional<std::string> {
    auto at = targetOf.find(k.trial);
    if (at == targetOf.end()) return std::nullopt;
    const std::string role = k.scope == "job" ? "job" : k.scope == at->second ? "target" : "node";
    return role + "/" + k.metric;
  };
  std::map<std::string, std::vector<double>> pools;
  for (const auto& [k, v] : t)
    if (auto role = roleOf(k)) pools[*role].insert(pools[*role].end(), v.samples.begin(), v.samples.end());
  std::map<std::string, std::pair<double, double>> ranges;
  for (auto& [role, x] : pools) {
    if (int(x.size()) < kPeerPool) continue;
    std::sort(x.begin(), x.end());
    ranges[role] = {x.front(), x.back()};
  }
  for (auto& [k, v] : t)
    if (auto role = roleOf(k); role && ranges.count(*role)) {
      v.peerSamples = int(pools[*role].size());
      std::tie(v.peerLo, v.peerHi) = ranges[*role];
    }
}

}  // namespace

const std::vector<CompareMetric>& compareMetrics() {
  static const std::vector<CompareMetric> m = {
      {"recovery_time", 1}, {"throughput_loss_bytes", 1}, {"throughput_loss_pct", 1}, {"stall_time", 1}, {"longest_stall", 1},
      {"min_throughput", -1}, {"baseline", -1},       {"busbw", -1},          {"iteration_p50", 1},
      {"iteration_p99", 1},   {"iteration_max", 1},
  };
  return m;
}

Result<MetricTable> metricTableOf(const json& doc) {
  MetricTable t;
  if (doc.value("schema", std::string()) == kGoldenSchema) {
    const json* rows = member(doc, "metrics");
    if (!rows || !rows->is_array()) return makeError("golden baseline without its metrics[]");
    for (const auto& r : *rows) {
      if (!r.is_object() || !r.contains("trial") || !r.contains("scope") || !r.contains("metric"))
        return makeError("golden baseline: a metrics[] entry without trial, scope and metric");
      MetricValue v;
      v.value = number(r, "median");
      v.notRecovered = r.value("not_recovered", false);
      v.noise = number(r, "noise").value_or(0);
      v.retryNs = number(r, "retry_ns").value_or(0);
      v.retryPart = std::min(v.noise, number(r, "retry_part").value_or(0));
      v.runs = r.value("n", 1);
      v.lo = number(r, "lo").value_or(v.value.value_or(0));
      v.hi = number(r, "hi").value_or(v.value.value_or(0));
      if (const json* vals = member(r, "values"); vals && vals->is_array())
        for (const auto& x : *vals)
          if (x.is_number()) v.samples.push_back(x.get<double>());
      if (v.samples.empty() && v.value) v.samples = {v.lo, *v.value, v.hi};
      t[{r["trial"].get<std::string>(), r["scope"].get<std::string>(), r["metric"].get<std::string>()}] = v;
    }
    addPeerRanges(t, doc);
    return t;
  }
  if (auto ok = checkResultDocument(doc); !ok) return ok.error();
  for (const auto& trial : doc["trials"]) {
    const std::string label = trial.value("label", std::string());
    const double retry = double(retryNoiseNs(doc, trial));
    if (const json* job = member(trial, "job")) addScope(t, label, *job, retry);
    if (const json* nodes = member(trial, "nodes"))
      for (const auto& n : *nodes) addScope(t, label, n, retry);
  }
  addPeerRanges(t, doc);
  return t;
}

std::string describeDocument(const json& doc) {
  if (doc.value("schema", std::string()) == kGoldenSchema)
    return "golden baseline of " + std::to_string(doc.value("runs", 0)) + " runs of '" +
           doc.value("playbook", std::string("?")) + "'";
  std::string name = "?";
  if (const json* pb = member(doc, "playbook")) name = pb->value("name", name);
  return "result of '" + name + "'";
}

Result<json> mergeGolden(const std::vector<json>& docs, const std::vector<std::string>& names) {
  if (docs.empty()) return makeError("baseline merge needs at least one result document");
  std::string playbook;
  std::map<MetricKey, std::vector<MetricValue>> all;
  json sources = json::array();
  for (size_t i = 0; i < docs.size(); i++) {
    if (docs[i].value("schema", std::string()) == kGoldenSchema)
      return makeError(names[i] + ": a golden baseline; merge the result documents it was made of");
    auto t = metricTableOf(docs[i]);
    if (!t) return makeError(names[i] + ": " + t.error().message);
    const std::string pb = docs[i]["playbook"].value("name", std::string());
    if (i == 0) playbook = pb;
    if (pb != playbook)
      return makeError(names[i] + ": a run of '" + pb + "', not of '" + playbook +
                       "': a golden baseline is made of runs of one playbook");
    for (auto& [k, v] : *t) all[k].push_back(v);
    sources.push_back({{"path", names[i]},
                       {"started_unix_ns", docs[i]["run"].value("started_unix_ns", int64_t(0))},
                       {"verdict", docs[i]["outcome"].value("verdict", std::string())}});
  }
  json metrics = json::array();
  for (auto& [k, vs] : all) {
    std::vector<double> values, noises, retries, retryParts;
    size_t notRecovered = 0;
    for (const auto& v : vs) {
      if (v.value) values.push_back(*v.value);
      if (v.notRecovered) notRecovered++;
      noises.push_back(v.noise);
      retries.push_back(v.retryNs);
      retryParts.push_back(v.retryPart);
    }
    auto median = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      size_t n = x.size();
      return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
    };
    json row = {{"trial", k.trial}, {"scope", k.scope}, {"metric", k.metric}, {"n", vs.size()}};
    if (notRecovered * 2 > vs.size() || values.empty()) {
      row["median"] = nullptr;  // most runs did not recover
      row["not_recovered"] = true;
    } else {
      auto [lo, hi] = std::minmax_element(values.begin(), values.end());
      row["median"] = median(values);
      row["lo"] = *lo;
      row["hi"] = *hi;
      row["noise"] = std::max(median(noises), (*hi - *lo) / 2);
      if (median(retries) > 0) {  // runs of one playbook: one outage
        row["retry_ns"] = median(retries);
        row["retry_part"] = median(retryParts);
      }
      std::sort(values.begin(), values.end());
      row["values"] = values;
      if (notRecovered) row["not_recovered_runs"] = notRecovered;
    }
    metrics.push_back(std::move(row));
  }
  // A target sweep's trials and their targets, so that compare can pool the peers' values.
  json targets = json::array();
  if (const json* rows = member(docs[0], "targets"); rows && rows->is_array())
    for (const auto& r : *rows)
      if (r.is_object() && r.contains("label") && r.contains("target"))
        targets.push_back({{"label", r["label"]}, {"target", r["target"]}});
  json golden = {{"schema", kGoldenSchema},
                 {"playbook", playbook},
                 {"runs", docs.size()},
                 {"sources", std::move(sources)},
                 {"metrics", std::move(metrics)}};
  if (!targets.empty()) golden["targets"] = std::move(targets);
  return golden;
}

Result<std::vector<CompareRule>> parseCompareRules(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = rc::parseToml(text, path);
  } catch (const toml::parse_error& e) {
    return makeError(path + ":" + std::to_string(e.source().begin.line) + ":" + std::to_string(e.source().begin.column) +
                     ": " + std::string(e.description()));
  }
  std::vector<std::string> errors;
  auto at = [&](const toml::node& n) {
    return path + ":" + std::to_string(n.source().begin.line) + ":" + std::to_string(n.source().begin.column);
  };
  std::vector<CompareRule> rules;
  for (auto&& [k, v] : root)
    if (k.str() != "rule") errors.push_back(at(v) + ": unknown key '" + std::string(k.str()) + "' (rules are [[rule]] tables)");
  const toml::node* rs = root.get("rule");
  if (rs && !rs->is_array_of_tables()) errors.push_back(at(*rs) + ": rules must be written as [[rule]] tables");
  std::vector<std::string> metricNames;
  for (const auto& m : compareMetrics()) metricNames.push_back(m.name);
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (rs && rs->is_array_of_tables())
    for (const auto& node : *rs->as_array()) {
      const auto& t = *node.as_table();
      CompareRule r;
      r.where = at(node);
      bool ok = true;
      auto err = [&](const toml::node& n, const std::string& m) {
        errors.push_back(at(n) + ": " + m);
        ok = false;
      };
      for (auto&& [k, v] : t) {
        const std::string key(k.str());
        if (key != "metric" && key != "scope" && key != "trial" && key != "variance" && key != "op" && key != "bound" &&
            key != "exempt")
          err(v, "unknown key '" + key + "' in [[rule]] (known: metric, scope, trial, variance, op, bound, exempt)");
      }
      const toml::node* m = t.get("metric");
      if (!m || !m->is_string()) {
        err(node, "[[rule]] needs metric = \"...\" (one of " + joined(metricNames) + ")");
        continue;
      }
      r.metric = m->as_string()->get();
      if (std::find(metricNames.begin(), metricNames.end(), r.metric) == metricNames.end()) {
        err(*m, "metric '" + r.metric + "' is not compared (known: " + joined(metricNames) + ")");
        continue;
      }
      if (auto* s = t.get("scope")) {
        if (!s->is_string()) err(*s, "scope must be \"*\", \"job\", \"nodes\" or a node name");
        else r.scope = s->as_string()->get();
      }
      if (auto* s = t.get("trial")) {
        if (!s->is_string()) err(*s, "trial must be a trial's label as the report prints it");
        else r.trial = s->as_string()->get();
      }
      if (auto* e = t.get("exempt")) {
        if (!e->is_array()) err(*e, "exempt must be a list of node names, e.g. [\"n4\"]");
        else
          for (const auto& x : *e->as_array()) {
            if (!x.is_string()) err(x, "exempt must list node names");
            else r.exempt.push_back(x.as_string()->get());
          }
      }
      const toml::node* var = t.get("variance");
      const toml::node* op = t.get("op");
      const toml::node* bound = t.get("bound");
      if (var && (op || bound)) err(*var, "a rule has either variance or op and bound, not both: split it in two");
      if (!var && !op) err(node, "[[rule]] needs variance = \"+20%\" (change allowed against the baseline) or op and bound");
      if (var) {
        std::string s = var->is_string() ? var->as_string()->get() : "";
        double pct = 0;
        char sign = s.empty() ? 0 : s[0];
        if ((sign != '+' && sign != '-') || s.back() != '%' || std::sscanf(s.c_str(), "%lf", &pct) != 1 ||
            std::fabs(pct) > 1000)
          err(*var, "variance '" + s + "' must be a signed percentage in quotes: \"+20%\" (at most 20 % above the "
                    "baseline) or \"-5%\" (at most 5 % below)");
        else {
          r.variancePct = pct;
          r.text = r.metric + " variance " + s;
        }
      }
      if (op) {
        std::string o = op->is_string() ? op->as_string()->get() : "";
        if (o != "<" && o != "<=" && o != ">" && o != ">=") err(*op, "op '" + o + "' is not one of <, <=, >, >=");
        r.op = o;
        if (!bound) {
          err(*op, "op needs a bound, e.g. bound = \"2s\"");
        } else {
          const MetricRow* row = findMetric(r.metric);
          MetricUnit u = row ? row->unit : MetricUnit::number;
          std::string b = bound->is_string() ? bound->as_string()->get() : "";
          if (u == MetricUnit::duration) {
            auto d = parseDuration(b);
            if (!d) err(*bound, "bound of " + r.metric + " must be a duration in quotes, e.g. \"2s\"");
            else r.bound = double(d->count());
          } else if (u == MetricUnit::rate) {
            auto br = parseBitRate(b);
            if (!br) err(*bound, "bound of " + r.metric + " must be a bit rate in quotes, e.g. \"10Gbps\"");
            else r.bound = double(*br) / 8;
          } else if (auto x = bound->value<double>()) {
            r.bound = *x;
          } else {
            err(*bound, "bound of " + r.metric + " must be a number");
          }
          r.text = r.metric + " " + r.op + " " + (b.empty() ? fmt(r.metric, r.bound) : b);
        }
      }
      r.text += " [" + r.scope + "]";
      if (ok) rules.push_back(std::move(r));
    }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end(), [&](const std::string& a, const std::string& b) {
      int la = 0, ca = 0, lb = 0, cb = 0;
      std::sscanf(a.c_str() + path.size() + 1, "%d:%d", &la, &ca);
      std::sscanf(b.c_str() + path.size() + 1, "%d:%d", &lb, &cb);
      return std::pair{la, ca} < std::pair{lb, cb};
    });
    std::string all;
    for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e;
    return makeError(all);
  }
  return rules;
}

int CompareOutcome::exitCode() const {
  if (rulesGiven) return rulesFailed ? 1 : 0;
  return worse || missing ? 1 : 0;
}

CompareOutcome compareTables(const MetricTable& base, const MetricTable& result, const std::vector<CompareRule>& rules,
                             std::string baselineName, std::string resultName) {
  CompareOutcome c;
  c.baseline = std::move(baselineName);
  c.result = std::move(resultName);
  c.rulesGiven = !rules.empty();
  std::set<MetricKey> keys;
  for (const auto& [k, v] : base) keys.insert(k);
  for (const auto& [k, v] : result) keys.insert(k);
  for (const auto& k : keys) {
    CompareRow row;
    row.key = k;
    auto b = base.find(k), r = result.find(k);
    if (b != base.end()) row.base = b->second;
    if (r != result.end()) row.result = r->second;
    const bool hasB = b != base.end(), hasR = r != result.end();
    if (!hasR) {
      row.verdict = "missing in result";
      c.missing++;
    } else if (!hasB) {
      row.verdict = "missing in baseline";
    } else if (row.base.notRecovered || row.result.notRecovered) {
      row.verdict = row.base.notRecovered == row.result.notRecovered ? "same within noise"
                    : row.result.notRecovered                       ? "worse"
                                                                    : "better";
    } else {
      // TCP's retry timer is noise between runs of one outage only (compare.hpp, retryNs).
      if (std::fabs(row.base.retryNs - row.result.retryNs) > 1e6) {
        row.base.noise -= row.base.retryPart;
        row.result.noise -= row.result.retryPart;
        row.base.retryPart = row.result.retryPart = 0;
      }
      const double d = *row.result.value - *row.base.value;
      row.diff = d;
      // A golden baseline's runs gave every value of lo..hi: one of them again is no change,
      // however skewed the runs were around their median (a job's p50 over a handful of
      // iterations flips between a fast and a stalled one).
      const double v = *row.result.value, rn = row.result.noise;
      const bool insideRuns = row.base.runs > 1 && v >= row.base.lo - rn && v <= row.base.hi + rn;
      // Or one its peers gave (a target sweep: the same metric of every target, same role).
      const bool insidePeers = row.base.peerSamples >= kPeerPool && v >= row.base.peerLo - rn && v <= row.base.peerHi + rn;
      if (std::fabs(d) <= row.base.noise + row.result.noise || insideRuns || insidePeers)
        row.verdict = "same within noise";
      else
        row.verdict = d * worseOf(k.metric) > 0 ? "worse" : "better";
    }
    if (row.verdict == "worse") c.worse++;
    if (row.verdict == "better") c.better++;
    if (row.verdict == "same within noise") c.same++;
    for (const auto& rule : rules) {
      if (rule.metric != k.metric || !scopeMatches(rule, k.scope) || (!rule.trial.empty() && rule.trial != k.trial))
        continue;
      if (!hasB && rule.variancePct) continue;  // a node the baseline lacks: nothing to vary from (listed as missing)
      row.checks.push_back(check(rule, row));
      (row.checks.back().passed ? c.rulesPassed : c.rulesFailed)++;
    }
    c.rows.push_back(std::move(row));
  }
  // Worse first, then missing, better, same; within each in key order.
  auto rank = [](const CompareRow& r) {
    bool failed = std::any_of(r.checks.begin(), r.checks.end(), [](const RuleCheck& x) { return !x.passed; });
    if (failed) return 0;
    if (r.verdict == "worse") return 1;
    if (r.verdict.rfind("missing", 0) == 0) return 2;
    if (r.verdict == "better") return 3;
    return 4;
  };
  std::stable_sort(c.rows.begin(), c.rows.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return c;
}

std::string renderCompareText(const CompareOutcome& c) {
  std::string out = "baseline: " + c.baseline + "\nresult:   " + c.result + "\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-24s %-8s %-20s %-24s %-24s %-22s %s\n", "trial", "scope", "metric", "baseline",
                "result", "difference", "verdict");
  out += line;
  for (const auto& r : c.rows) {
    std::string diff = r.diff ? fmtDiff(r.key.metric, *r.diff, r.base.value.value_or(0)) : "";
    std::string verdict = r.verdict;
    for (auto& v : verdict) v = r.verdict == "worse" ? char(std::toupper(static_cast<unsigned char>(v))) : v;
    std::snprintf(line, sizeof line, "%-24s %-8s %-20s %-24s %-24s %-22s %s\n", r.key.trial.substr(0, 24).c_str(),
                  r.key.scope.substr(0, 8).c_str(), r.key.metric.c_str(), fmtValue(r.key.metric, r.base).c_str(),
                  fmtValue(r.key.metric, r.result).c_str(), diff.c_str(), verdict.c_str());
    out += line;
  }
  // Per scope (the job, each node), the worst verdict over its trials and metrics: failures
  // first, then by name; for an acceptance sweep, the node table against the baseline.
  struct Summary {
    int rank = 9;
    std::string what;
  };
  std::map<std::string, Summary> perScope;
  for (const auto& r : c.rows) {
    bool failed = std::any_of(r.checks.begin(), r.checks.end(), [](const RuleCheck& x) { return !x.passed; });
    int rank = failed ? 0 : r.verdict == "worse" ? 1 : r.verdict == "missing in result" ? 2 : r.verdict == "better" ? 3 : 4;
    Summary& s = perScope[r.key.scope];
    if (rank < s.rank) {
      s.rank = rank;
      const char* label[] = {"RULE FAILED", "WORSE", "MISSING", "better", "same within noise"};
      s.what = label[rank];
      if (rank <= 3 && rank != 2 && r.diff) s.what += " (" + r.key.metric + " " + fmtDiff(r.key.metric, *r.diff, r.base.value.value_or(0)) + ")";
      else if (rank <= 1) s.what += " (" + r.key.metric + ": " + fmtValue(r.key.metric, r.result) + ")";
      else if (rank == 2) s.what += " (" + r.key.metric + ")";
    }
  }
  std::vector<std::pair<std::string, Summary>> scopes(perScope.begin(), perScope.end());
  std::stable_sort(scopes.begin(), scopes.end(), [](const auto& a, const auto& b) { return a.second.rank < b.second.rank; });
  out += "\nvs baseline, per scope (worst over trials and metrics):\n";
  for (const auto& [scope, s] : scopes) out += "  " + scope + std::string(scope.size() < 10 ? 10 - scope.size() : 1, ' ') + s.what + "\n";
  out += "\n";
  std::snprintf(line, sizeof line, "%d worse, %d better, %d same within noise, %d missing in the result\n", c.worse,
                c.better, c.same, c.missing);
  out += line;
  for (const auto& r : c.rows)
    if (r.verdict == "missing in result")
      out += "  missing: " + r.key.metric + " of " + r.key.scope + " in trial " + r.key.trial + "\n";
  if (c.rulesGiven) {
    std::snprintf(line, sizeof line, "rules: %d checks passed, %d failed\n", c.rulesPassed, c.rulesFailed);
    out += line;
    for (const auto& r : c.rows)
      for (const auto& x : r.checks)
        if (!x.passed)
          out += "  FAILED " + x.where + ": " + x.rule + " on " + r.key.scope + " (trial " + r.key.trial + "): " + x.why +
                 "\n";
  } else {
    out += "no rules given: a value worse beyond the noise of both runs, or missing in the result, fails\n";
  }
  out += std::string("outcome: ") + (c.exitCode() ? "failed" : "passed") + "\n";
  return out;
}

json compareDocument(const CompareOutcome& c) {
  json rows = json::array();
  auto value = [](const MetricValue& v) -> json {
    if (!v.value && !v.notRecovered) return nullptr;
    json o = {{"value", v.value ? json(*v.value) : json(nullptr)}, {"noise", v.noise}};
    if (v.notRecovered) o["not_recovered"] = true;
    if (v.runs > 1) o.update({{"runs", v.runs}, {"lo", v.lo}, {"hi", v.hi}});
    if (v.peerSamples > 0) o["peers"] = {{"values", v.peerSamples}, {"lo", v.peerLo}, {"hi", v.peerHi}};
    return o;
  };
  for (const auto& r : c.rows) {
    json checks = json::array();
    for (const auto& x : r.checks) checks.push_back({{"rule", x.rule}, {"where", x.where}, {"passed", x.passed}, {"why", x.why}});
    rows.push_back({{"trial", r.key.trial},
                    {"scope", r.key.scope},
                    {"metric", r.key.metric},
                    {"baseline", value(r.base)},
                    {"result", value(r.result)},
                    {"difference", r.diff ? json(*r.diff) : json(nullptr)},
                    {"verdict", r.verdict},
                    {"checks", std::move(checks)}});
  }
  return {{"schema", kCompareSchema},
          {"baseline", c.baseline},
          {"result", c.result},
          {"rows", std::move(rows)},
          {"outcome",
           {{"verdict", c.exitCode() ? "failed" : "passed"},
            {"exit_code", c.exitCode()},
            {"worse", c.worse},
            {"better", c.better},
            {"same", c.same},
            {"missing", c.missing},
            {"rules_given", c.rulesGiven},
            {"rule_checks_passed", c.rulesPassed},
            {"rule_checks_failed", c.rulesFailed}}}};
}

std::string renderCompareJunit(const CompareOutcome& c) {
  // One test case per rule check; without rules, one per compared value (worse or missing fails).
  std::string cases;
  int tests = 0, failures = 0;
  for (const auto& r : c.rows) {
    const std::string at = r.key.trial + " " + r.key.scope + " " + r.key.metric;
    if (c.rulesGiven) {
      for (const auto& x : r.checks) {
        tests++;
        cases += "  <testcase classname=\"compare\" name=\"" + xmlEscape(at + ": " + x.rule) + "\"";
        if (x.passed) {
          cases += "/>\n";
        } else {
          failures++;
          cases += ">\n    <failure message=\"" + xmlEscape(x.why + " (" + x.where + ")") + "\"/>\n  </testcase>\n";
        }
      }
      continue;
    }
    tests++;
    cases += "  <testcase classname=\"compare\" name=\"" + xmlEscape(at + ": not worse than the baseline") + "\"";
    if (r.verdict == "worse" || r.verdict == "missing in result") {
      failures++;
      cases += ">\n    <failure message=\"" +
               xmlEscape(r.verdict + ": baseline " + fmtValue(r.key.metric, r.base) + ", result " +
                   fmtValue(r.key.metric, r.result)) +
               "\"/>\n  </testcase>\n";
    } else {
      cases += "/>\n";
    }
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"" + xmlEscape("compare: " + c.result + " vs " + c.baseline) +
         "\" tests=\"" + std::to_string(tests) + "\" failures=\"" + std::to_string(failures) + "\">\n" + cases +
         "</testsuite>\n";
}

}  // namespace rc::controller
