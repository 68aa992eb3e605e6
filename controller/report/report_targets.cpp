// The target sweep's table: result.json's "targets", its column against a baseline, its text
// and its HTML (see report_targets.hpp).
#include "controller/report/report_targets.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/units.hpp"
#include "controller/measure/metrics_table.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_util.hpp"

namespace rc::controller {
namespace {

using json = nlohmann::json;

using report_util::dur;
using report_util::str;
std::string pct(const char* f, double v) {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string showTarget(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string recoveryText(const json& r) {
  if (!r.value("impacted", false)) return "no impact";
  const json& x = r["recovery_time_ns"];
  return x.is_number() ? dur(x.get<int64_t>()) : "NOT RECOVERED";
}

// How far a row moved from the baseline, to pick the one that decides a trial's verdict: the
// change relative to the baseline's value; a recovery that never came, or a value moved off a
// baseline of 0, outranks any share.
double severity(const CompareRow& r) {
  if (r.result.notRecovered != r.base.notRecovered) return 1e18;
  if (!r.diff) return 0;
  const double base = std::fabs(r.base.value.value_or(0));
  return base > 0 ? std::fabs(*r.diff) / base : 1e12 + std::fabs(*r.diff);
}

std::string differenceText(const CompareRow& r) {
  if (r.result.notRecovered && !r.base.notRecovered) return "not recovered";
  if (r.base.notRecovered && !r.result.notRecovered) return "recovered (baseline: not recovered)";
  if (!r.diff) return "";
  const double base = r.base.value.value_or(0);
  if (base != 0) return pct("%+.0f%%", *r.diff / std::fabs(base) * 100);
  const MetricRow* m = findMetric(r.key.metric);
  return (*r.diff >= 0 ? "+" : "-") +
         formatMetric(m ? m->unit : MetricUnit::number, std::fabs(*r.diff));
}

bool failing(const json& row) {
  if (row.value("verdict", "") != "passed") return true;
  const json vs = row.value("vs_baseline", json());
  if (!vs.is_object()) return false;
  const std::string v = vs.value("verdict", "");
  return v == "worse" || v == "missing in result";
}

}  // namespace

const char* trialVerdict(const json& t) {
  if (!t.value("problems", json::array()).empty()) return "error";
  if (!t.value("condition", json::object()).value("reached", true)) return "inconclusive";
  for (const auto& v : t.value("verdicts", json::array()))
    if (!v.value("passed", false)) return "failed";
  return "passed";
}

// Target sweeps: failures first, then the slowest to recover (never recovered counts as the
// slowest), so the report opens on what to fix.
json targetTable(const json& trials) {
  json rows = json::array();
  for (const auto& t : trials) {
    const json sweep = t.value("sweep", json());
    if (!sweep.is_object() || sweep.value("param", "") != "target") continue;
    json missed = json::array();
    for (const auto& v : t.value("verdicts", json::array()))
      if (!v.value("passed", false))
        missed.push_back(str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text") + ": " +
                         str(v, "measured_text"));
    const json im = t.value("job", json::object()).value("impact", json());
    auto field = [&](const char* k) { return im.is_object() && im.contains(k) ? im[k] : json(); };
    rows.push_back({{"target", sweep.value("value", json())},
                    {"trial", t.value("index", 0)},
                    {"label", str(t, "label")},
                    {"verdict", trialVerdict(t)},
                    {"missed", missed},
                    {"recovery_time_ns", field("recovery_time_ns")},
                    {"longest_stall_ns", field("longest_stall_ns")},
                    {"loss_pct", field("loss_pct")},
                    {"impacted", im.is_object()}});
  }
  auto rank = [](const json& r) {
    std::string v = r.value("verdict", "");
    return v == "failed" ? 0 : v == "error" ? 1 : v == "inconclusive" ? 2 : 3;
  };
  auto recovery = [](const json& r) {
    if (!r.value("impacted", false)) return 0.0;
    const json& x = r["recovery_time_ns"];
    return x.is_number() ? x.get<double>() : 1e30;  // impacted and never recovered: the worst
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return recovery(a) > recovery(b);
  });
  return rows;
}

json trialVsBaseline(const CompareOutcome& c, const std::string& label) {
  // Worse first, then values the result lacks, better, the same; within one, the largest change.
  auto rank = [](const std::string& v) {
    return v == "worse"               ? 0
           : v == "missing in result" ? 1
           : v == "better"            ? 2
           : v == "same within noise" ? 3
                                      : 4;
  };
  const CompareRow* pick = nullptr;
  int rows = 0, worse = 0, better = 0, same = 0, missingInBaseline = 0;
  for (const auto& r : c.rows) {
    if (r.key.trial != label) continue;
    rows++;
    worse += r.verdict == "worse";
    better += r.verdict == "better";
    same += r.verdict == "same within noise";
    missingInBaseline += r.verdict == "missing in baseline";
    if (!pick || rank(r.verdict) < rank(pick->verdict) ||
        (rank(r.verdict) == rank(pick->verdict) && severity(r) > severity(*pick)))
      pick = &r;
  }
  json out = {{"verdict", "missing in baseline"},
              {"metric", nullptr},
              {"scope", nullptr},
              {"difference", nullptr},
              {"difference_pct", nullptr},
              {"worse", worse},
              {"better", better},
              {"same", same},
              {"text", "missing in baseline"}};
  if (!pick || missingInBaseline == rows) return out;  // the baseline has nothing of this trial
  out["verdict"] = pick->verdict;
  if (pick->verdict == "same within noise") {
    out["text"] = "same within noise";
    return out;
  }
  out["metric"] = pick->key.metric;
  out["scope"] = pick->key.scope;
  if (pick->diff) {
    out["difference"] = *pick->diff;
    if (pick->base.value && *pick->base.value != 0)
      out["difference_pct"] = *pick->diff / std::fabs(*pick->base.value) * 100;
  }
  const std::string where = pick->key.scope == "job" ? "" : " (" + pick->key.scope + ")";
  if (pick->verdict == "missing in result")
    out["text"] = "missing in result: " + pick->key.metric + where;
  else
    out["text"] = pick->key.metric + where + " " + differenceText(*pick) + " " + pick->verdict;
  return out;
}

void addTargetsVsBaseline(json& doc, const CompareOutcome& c) {
  if (!doc.contains("targets") || !doc["targets"].is_array()) return;
  json& rows = doc["targets"];
  for (auto& r : rows) r["vs_baseline"] = trialVsBaseline(c, str(r, "label"));
  std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    if (failing(a) != failing(b)) return failing(a);
    return showTarget(a["target"]) < showTarget(b["target"]);
  });
}

std::string targetsText(const json& doc) {
  if (!doc.contains("targets")) return "";
  const json& rows = doc["targets"];
  std::ostringstream o;
  size_t failed = 0;
  bool vs = false;
  std::string worse;
  for (const auto& r : rows) {
    failed += r.value("verdict", "") == "passed" ? 0 : 1;
    if (r.contains("vs_baseline")) {
      vs = true;
      const std::string v = r["vs_baseline"].value("verdict", "");
      if (v == "worse" || v == "missing in result")
        worse += (worse.empty() ? "" : ", ") + showTarget(r["target"]);
    }
  }
  o << "\ntargets: " << rows.size() - failed << " of " << rows.size() << " passed";
  if (failed) o << "; not passed: ";
  bool first = true;
  for (const auto& r : rows)
    if (r.value("verdict", "") != "passed") {
      o << (first ? "" : ", ") << showTarget(r["target"]);
      first = false;
    }
  if (vs) o << "; worse than the baseline: " << (worse.empty() ? "none" : worse);
  auto col = [](std::string s, size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s + " ";
  };
  o << "\n  target        verdict       recovery      longest stall  loss      "
    << (vs ? col("vs baseline", 34) : "") << "missed\n";
  for (const auto& r : rows) {
    std::string missed;
    for (const auto& m : r["missed"]) missed += (missed.empty() ? "" : "; ") + m.get<std::string>();
    std::string against;
    if (vs) {
      against = r.contains("vs_baseline") ? str(r["vs_baseline"], "text") : "-";
      // Shouted, as compare prints it: the rows to look at first.
      if (r.contains("vs_baseline") && r["vs_baseline"].value("verdict", "") == "worse" &&
          against.size() >= 5)
        against.replace(against.size() - 5, 5, "WORSE");
      against = col(against, 34);
    }
    std::string line =
        "  " + col(showTarget(r["target"]), 13) + col(str(r, "verdict"), 13) +
        col(recoveryText(r), 13) +
        col(r["longest_stall_ns"].is_number() ? dur(r["longest_stall_ns"].get<int64_t>()) : "-",
            14) +
        col(r["loss_pct"].is_number() ? pct("%.1f%%", r["loss_pct"].get<double>()) : "-", 9) +
        against + missed;
    line.erase(line.find_last_not_of(' ') + 1);
    o << line << "\n";
  }
  return o.str();
}

std::string targetsHtml(const json& doc) {
  if (!doc.contains("targets")) return "";
  bool vs = false;
  for (const auto& r : doc["targets"]) vs = vs || r.contains("vs_baseline");
  std::ostringstream h;
  h << "<h2>Targets, failures first</h2>\n<table "
       "class=\"targets\"><tr><th>target</th><th>verdict</th>"
       "<th>recovery</th><th>longest stall</th><th>loss</th>"
    << (vs ? "<th>vs baseline</th>" : "") << "<th>missed</th></tr>\n";
  for (const auto& r : doc["targets"]) {
    std::string v = str(r, "verdict");
    h << "<tr><td><a href=\"#trial-" << r.value("trial", 0) << "\">"
      << xmlEscape(showTarget(r["target"])) << "</a></td>"
      << "<td><span class=\"badge " << xmlEscape(v) << "\">" << xmlEscape(v) << "</span></td><td>"
      << xmlEscape(recoveryText(r)) << "</td><td>"
      << (r["longest_stall_ns"].is_number() ? xmlEscape(dur(r["longest_stall_ns"].get<int64_t>()))
                                            : "–")
      << "</td><td>"
      << (r["loss_pct"].is_number() ? pct("%.1f%%", r["loss_pct"].get<double>()) : "–") << "</td>";
    if (vs) {
      const json against = r.value("vs_baseline", json());
      const std::string verdict = against.is_object() ? against.value("verdict", "") : "";
      // The badge classes of the trial verdicts: worse reads as failed, better as passed.
      const char* cls = verdict == "worse" || verdict == "missing in result" ? "failed"
                        : verdict == "better"                                ? "passed"
                                                                             : "inconclusive";
      h << "<td class=\"vs-baseline\">";
      if (against.is_object())
        h << "<span class=\"badge " << cls << "\">" << xmlEscape(verdict) << "</span> "
          << (verdict == "same within noise" || verdict == "missing in baseline"
                  ? ""
                  : xmlEscape(str(against, "text")));
      else
        h << "–";
      h << "</td>";
    }
    h << "<td>";
    for (const auto& m : r["missed"]) h << xmlEscape(m.get<std::string>()) << "<br>";
    h << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

}  // namespace rc::controller
