// The detection part of the reports: result.json's "detection", its text, JUnit and HTML.
#include "controller/report/report_detection.hpp"

#include <sstream>

#include "common/units.hpp"
#include "controller/playbook/playbook_internal.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_util.hpp"

namespace rc::controller {
namespace {

using json = nlohmann::json;

json opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(); }
json opt(const std::optional<double>& v) { return v ? json(*v) : json(); }

using report_util::dur;  // formatDuration keeps a negative duration's sign

std::string s(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

json summaryJson(const DetectionSummary& m) {
  return {{"expected", m.expected},
          {"detected", m.detected},
          {"late", m.late},
          {"missed", m.missed},
          {"false_alarms", m.falseAlarms},
          {"not_scored", m.notScored},
          {"precision", opt(m.precision)},
          {"recall", opt(m.recall)},
          {"median_time_to_detect_ns", opt(m.medianTimeToDetectNs)},
          {"worst_time_to_detect_ns", opt(m.worstTimeToDetectNs)}};
}

std::string summaryText(const json& m) {
  std::ostringstream o;
  o << m.value("expected", 0) << " expected, " << m.value("detected", 0) << " detected, " << m.value("late", 0)
    << " late, " << m.value("missed", 0) << " missed, " << m.value("false_alarms", 0) << " false alarm"
    << (m.value("false_alarms", 0) == 1 ? "" : "s");
  char buf[96];
  std::snprintf(buf, sizeof buf, "; precision %s, recall %s",
                m["precision"].is_number() ? (std::to_string(m["precision"].get<double>()).substr(0, 4)).c_str() : "-",
                m["recall"].is_number() ? (std::to_string(m["recall"].get<double>()).substr(0, 4)).c_str() : "-");
  o << buf;
  if (m["median_time_to_detect_ns"].is_number())
    o << "; time to detect median " << dur(m["median_time_to_detect_ns"].get<int64_t>()) << ", worst "
      << dur(m["worst_time_to_detect_ns"].get<int64_t>());
  return o.str();
}

std::string timingText(const json& d) {
  const json& t = d.value("timing", json::object());
  int64_t sc = t.value("scrape_interval_ns", int64_t(0)), ev = t.value("evaluation_interval_ns", int64_t(0));
  if (!sc && !ev) return "pipeline sampling unknown: times to detect carry no uncertainty";
  return "scrape " + dur(sc) + " + evaluation " + dur(ev) + " (" + s(t, "source") + ")";
}

std::string joinList(const json& a) {
  std::string out;
  for (const auto& v : a)
    if (v.is_string()) out += (out.empty() ? "" : ", ") + v.get<std::string>();
  return out;
}

std::string where(const json& e) {
  return "trial " + std::to_string(e.value("trial", 0) + 1) + " step " + s(e, "step") + " on " + joinList(e["nodes"]);
}

// The alert as expected for this fault: its name and resolved labels.
std::string expectedAlert(const json& e) {
  std::string name, rest;
  const json match = e.value("match", json::object());
  for (const auto& [k, v] : match.items()) {
    if (!v.is_string()) continue;
    if (k == "alertname") name = v.get<std::string>();
    else rest += (rest.empty() ? "" : ", ") + k + "=\"" + v.get<std::string>() + "\"";
  }
  return rest.empty() ? name : name + "{" + rest + "}";
}

std::string outcomeText(const json& e) {
  std::string what = s(e, "alert").empty() ? expectedAlert(e) : s(e, "alert");
  std::string st = s(e, "status"), out = what + ": " + st;
  if (e["time_to_detect_ns"].is_number()) {
    out += " in " + dur(e["time_to_detect_ns"].get<int64_t>());
    if (e.value("uncertainty_ns", int64_t(0))) out += " ±" + dur(e["uncertainty_ns"].get<int64_t>());
  }
  if (st == "late" || st == "missed") out += " (within " + detail::fmtDur(e.value("within_ns", int64_t(0))) + ")";
  if (e["clears_within_ns"].is_number() && (st == "detected" || st == "late")) {
    if (e["time_to_clear_ns"].is_number())
      out += ", cleared in " + dur(e["time_to_clear_ns"].get<int64_t>()) +
             (e.value("cleared", false) ? "" : " (within " + detail::fmtDur(e["clears_within_ns"].get<int64_t>()) + ")");
    else if (!e.value("cleared", false))
      out += ", not cleared within " + detail::fmtDur(e["clears_within_ns"].get<int64_t>());
  }
  if (!s(e, "note").empty()) out += "; " + s(e, "note");
  return out;
}

}  // namespace

json detectionJson(const DetectionScore& d) {
  json alerts = json::array();
  auto classOf = [&](const AlertEpisode& ep) -> std::string {
    for (const auto& o : d.outcomes)
      if (o.firedNs && *o.firedNs == ep.firedNs && o.alert == ep.name()) return o.status;
    for (const auto& f : d.falseAlarms)
      if (f.firedNs == ep.firedNs && f.labels == ep.labels) return "false_alarm";
    return "other";
  };
  for (const auto& ep : d.episodes)
    alerts.push_back({{"name", ep.name()},
                      {"labels", ep.labels},
                      {"source", ep.source},
                      {"fired_ns", ep.firedNs},
                      {"resolved_ns", opt(ep.resolvedNs)},
                      {"notified_ns", ep.notifiedNs},
                      {"class", classOf(ep)}});
  json ex = json::array();
  for (const auto& o : d.outcomes) {
    json match = json::object();
    for (const auto& [k, v] : o.match) match[k] = v;
    ex.push_back({{"trial", o.trial},
                  {"repeat", o.repeat},
                  {"scenario", o.scenario},
                  {"step", o.step},
                  {"kind", o.kind},
                  {"nodes", o.nodes},
                  {"expectation", o.expectation},
                  {"match", match},
                  {"within_ns", o.withinNs},
                  {"clears_within_ns", opt(o.clearsWithinNs)},
                  {"applied_ns", opt(o.appliedNs)},
                  {"reverted_ns", opt(o.revertedNs)},
                  {"status", o.status},
                  {"fired_ns", opt(o.firedNs)},
                  {"time_to_detect_ns", opt(o.timeToDetectNs)},
                  {"uncertainty_ns", o.uncertaintyNs},
                  {"resolved_ns", opt(o.resolvedNs)},
                  {"time_to_clear_ns", opt(o.timeToClearNs)},
                  {"cleared", o.cleared},
                  {"alert", o.alert},
                  {"note", o.note},
                  {"passed", o.passed},
                  {"line", o.pos.line},
                  {"column", o.pos.column}});
  }
  json fa = json::array();
  for (const auto& f : d.falseAlarms)
    fa.push_back({{"name", f.name()}, {"labels", f.labels}, {"source", f.source}, {"fired_ns", f.firedNs},
                  {"resolved_ns", opt(f.resolvedNs)}});
  json rounds = json::array();
  for (const auto& [r, m] : d.rounds) {
    json j = summaryJson(m);
    j["repeat"] = r;
    rounds.push_back(std::move(j));
  }
  return {{"expected", d.expected},
          {"scored", d.scored},
          {"not_scored_reason", d.notScoredReason},
          {"sources", d.sources},
          {"timing",
           {{"scrape_interval_ns", d.timing.scrapeIntervalNs},
            {"evaluation_interval_ns", d.timing.evaluationIntervalNs},
            {"source", d.timing.source}}},
          {"false_alarm_margin_ns", d.falseAlarmMarginNs},
          {"watched", d.watched},
          {"errors", d.errors},
          {"alerts", alerts},
          {"expectations", ex},
          {"false_alarms", fa},
          {"summary", summaryJson(d.total)},
          {"rounds", rounds},
          {"passed", d.passed},
          {"failed", d.failed}};
}

std::string detectionText(const json& doc) {
  if (!doc.contains("detection") || !doc["detection"].is_object()) return "";
  const json& d = doc["detection"];
  if (!d.value("expected", false) && d.value("alerts", json::array()).empty()) return "";
  std::ostringstream o;
  o << "\ndetection";
  if (!d.value("scored", false)) {
    o << ": not scored: " << s(d, "not_scored_reason") << "\n";
    return o.str();
  }
  o << " (alerts from " << joinList(d["sources"]) << "; " << timingText(d) << ")\n";
  for (const auto& e : d.value("expectations", json::array())) {
    const char* mark = s(e, "status") == "not scored" ? "--   " : e.value("passed", false) ? "ok   " : "FAIL ";
    o << "  " << mark << where(e) << ": " << outcomeText(e) << "\n";
  }
  const auto& fa = d.value("false_alarms", json::array());
  for (const auto& f : fa)
    o << "  FALSE ALARM " << s(f, "name") << " fired at +" << dur(f.value("fired_ns", int64_t(0)))
      << ", outside every fault window ±" << dur(d.value("false_alarm_margin_ns", int64_t(0))) << "\n";
  o << "  summary: " << summaryText(d["summary"]) << "\n";
  for (const auto& r : d.value("rounds", json::array()))
    o << "  round " << r.value("repeat", 0) + 1 << ": " << summaryText(r) << "\n";
  for (const auto& e : d.value("errors", json::array()))
    if (e.is_string()) o << "  alert source problem: " << e.get<std::string>() << "\n";
  return o.str();
}

std::string detectionJunit(const json& doc, const std::string& suiteName, int& tests, int& failures, int& skipped) {
  if (!doc.contains("detection") || !doc["detection"].is_object()) return "";
  const json& d = doc["detection"];
  if (!d.value("expected", false)) return "";
  std::ostringstream tc;
  int tt = 0, tf = 0, ts = 0;
  const std::string cls = "rdmachaos." + suiteName + ".detection";
  for (const auto& e : d.value("expectations", json::array())) {
    tt++;
    std::string name = where(e) + ": " + s(e, "expectation");
    tc << "    <testcase classname=\"" << xmlEscape(cls) << "\" name=\"" << xmlEscape(name) << "\">\n";
    if (!d.value("scored", false) || s(e, "status") == "not scored") {
      ts++;
      tc << "      <skipped message=\"" << xmlEscape(d.value("scored", false) ? s(e, "note") : s(d, "not_scored_reason"))
         << "\"/>\n";
    } else if (!e.value("passed", false)) {
      tf++;
      tc << "      <failure message=\"" << xmlEscape(outcomeText(e)) << "\" type=\"detection\">"
         << xmlEscape(outcomeText(e)) << " (playbook line " << e.value("line", 0) << ")</failure>\n";
    }
    tc << "    </testcase>\n";
  }
  if (!d.value("scored", false) && d.value("expectations", json::array()).empty()) {
    tt++;
    ts++;
    tc << "    <testcase classname=\"" << xmlEscape(cls) << "\" name=\"detection\">\n      <skipped message=\""
       << xmlEscape(s(d, "not_scored_reason")) << "\"/>\n    </testcase>\n";
  }
  // False alarms are a test of their own: the monitoring must stay quiet outside the faults.
  if (d.value("scored", false)) {
    tt++;
    const auto& fa = d.value("false_alarms", json::array());
    tc << "    <testcase classname=\"" << xmlEscape(cls) << "\" name=\"no false alarms\">\n";
    if (!fa.empty()) {
      std::string names;
      for (const auto& f : fa) names += (names.empty() ? "" : ", ") + s(f, "name");
      tc << "      <system-out>" << xmlEscape(std::to_string(fa.size()) + " false alarm(s): " + names)
         << "</system-out>\n";
    }
    tc << "    </testcase>\n";
  }
  tests += tt;
  failures += tf;
  skipped += ts;
  std::ostringstream out;
  out << "  <testsuite name=\"" << xmlEscape(suiteName + " / detection") << "\" tests=\"" << tt << "\" failures=\""
      << tf << "\" errors=\"0\" skipped=\"" << ts << "\">\n"
      << tc.str() << "  </testsuite>\n";
  return out.str();
}

std::string detectionHtml(const json& doc) {
  if (!doc.contains("detection") || !doc["detection"].is_object()) return "";
  const json& d = doc["detection"];
  if (!d.value("expected", false) && d.value("alerts", json::array()).empty()) return "";
  std::ostringstream h;
  h << "<h2 id=\"detection\">Detection: did the monitoring see the faults?</h2>\n";
  if (!d.value("scored", false)) {
    h << "<p class=\"muted detection-not-scored\">Not scored: " << xmlEscape(s(d, "not_scored_reason")) << "</p>\n";
    return h.str();
  }
  h << "<p class=\"muted\">Alerts from " << xmlEscape(joinList(d["sources"])) << "; " << xmlEscape(timingText(d))
    << ". Summary: " << xmlEscape(summaryText(d["summary"])) << ".</p>\n";
  h << "<table class=\"detection\"><tr><th>trial</th><th>step</th><th>nodes</th><th>expected alert</th>"
       "<th>verdict</th><th>time to detect</th><th>time to clear</th><th>note</th></tr>\n";
  for (const auto& e : d.value("expectations", json::array())) {
    std::string st = s(e, "status");
    bool bad = st != "not scored" && !e.value("passed", false);
    h << "<tr class=\"detection-row " << (bad ? "bad" : st == "not scored" ? "muted" : "ok") << "\"><td>"
      << e.value("trial", 0) + 1 << "</td><td>" << xmlEscape(s(e, "step")) << "</td><td>"
      << xmlEscape(joinList(e["nodes"])) << "</td><td>" << xmlEscape(s(e, "expectation")) << "</td><td>"
      << xmlEscape(st) << "</td><td class=\"num\">";
    if (e["time_to_detect_ns"].is_number())
      h << xmlEscape(dur(e["time_to_detect_ns"].get<int64_t>()) +
                     (e.value("uncertainty_ns", int64_t(0)) ? " ±" + dur(e["uncertainty_ns"].get<int64_t>()) : ""));
    else
      h << "–";
    h << "</td><td class=\"num\">"
      << (e["time_to_clear_ns"].is_number() ? xmlEscape(dur(e["time_to_clear_ns"].get<int64_t>())) : "–")
      << "</td><td>" << xmlEscape(s(e, "note")) << "</td></tr>\n";
  }
  h << "</table>\n";
  const auto& fa = d.value("false_alarms", json::array());
  if (!fa.empty()) {
    h << "<h3>False alarms</h3>\n<table class=\"false-alarms\"><tr><th>alert</th><th>fired</th><th>resolved</th></tr>\n";
    for (const auto& f : fa)
      h << "<tr class=\"bad\"><td>" << xmlEscape(s(f, "name")) << "</td><td class=\"num\">+"
        << xmlEscape(dur(f.value("fired_ns", int64_t(0)))) << "</td><td class=\"num\">"
        << (f["resolved_ns"].is_number() ? "+" + xmlEscape(dur(f["resolved_ns"].get<int64_t>())) : "still firing")
        << "</td></tr>\n";
  }
  if (!fa.empty()) h << "</table>\n";
  const auto& rounds = d.value("rounds", json::array());
  if (!rounds.empty()) {
    h << "<table class=\"detection-rounds\"><tr><th>round</th><th>summary</th></tr>\n";
    for (const auto& r : rounds)
      h << "<tr><td>" << r.value("repeat", 0) + 1 << "</td><td>" << xmlEscape(summaryText(r)) << "</td></tr>\n";
    h << "</table>\n";
  }
  for (const auto& e : d.value("errors", json::array()))
    if (e.is_string()) h << "<div class=\"problem\">alert source: " << xmlEscape(e.get<std::string>()) << "</div>\n";
  return h.str();
}

std::vector<AlertMarker> alertMarkers(const json& doc, int64_t fromNs, int64_t toNs) {
  std::vector<AlertMarker> out;
  if (!doc.contains("detection") || !doc["detection"].is_object()) return out;
  for (const auto& a : doc["detection"].value("alerts", json::array())) {
    int64_t fired = a.value("fired_ns", int64_t(0));
    if (fired < fromNs || fired >= toNs) continue;
    AlertMarker m;
    m.firedNs = fired - fromNs;
    m.resolvedNs = a["resolved_ns"].is_number() ? std::min(a["resolved_ns"].get<int64_t>(), toNs) - fromNs : -1;
    m.name = s(a, "name");
    std::string c = s(a, "class");
    m.kind = c == "detected" || c == "late" || c == "false_alarm" ? c : "other";
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace rc::controller
