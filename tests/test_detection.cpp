// Detection scoring: [[detect]] parsing and validation, alerts matched to the faults of a
// synthetic run (detected, late, missed, cleared, false alarms, precision and recall), and the
// reports that carry them.
#include <catch2/catch.hpp>
#include "test_util.hpp"

#include "controller/score/detection.hpp"
#include "controller/report/report.hpp"
#include "controller/score/score.hpp"
#include "synthetic_run.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_detection {

using namespace rc::controller;
using namespace rc::test;

namespace {

using rctest::kS;

const char* kDetect = kSyntheticDetect;

Playbook detectPlaybook(const std::string& extra = kDetect, int repeat = 1) {
  std::string text = std::string(kSyntheticPlaybook) + extra;
  if (repeat > 1) text.replace(text.find("seed = 7\n"), 9, "seed = 7\nrepeat = " + std::to_string(repeat) + "\n");
  auto pb = parsePlaybook(text, "synthetic.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  return *pb;
}

rc::alerts::AlertEvent event(const RunResult& r, const std::string& node, bool firing, int64_t startsNs,
                             int64_t endsNs = 0, const std::string& source = "alertmanager",
                             const std::string& name = "RdmaLinkDown") {
  return syntheticAlert(r, node, firing, startsNs, endsNs, source, name);
}

RunResult withSource(RunResult r) {
  r.alertSources = {"alertmanager webhook 127.0.0.1:9099"};
  r.alertsUntilNs = r.endedNs;
  return r;
}

}  // namespace

TEST_CASE("[[detect]] parses, with its placeholders and [detection] settings") {
  Playbook pb = detectPlaybook();
  REQUIRE(pb.hasDetections());
  const auto& d = pb.scenarios[0].detections.at(0);
  CHECK(d.steps == std::vector<std::string>{"flap"});
  CHECK(d.withinNs == 10 * kS);
  CHECK(d.clearsWithinNs == 5 * kS);
  CHECK(d.describe() == "RdmaLinkDown{node=\"{target}\"} within 10s, clears within 5s");
  CHECK(pb.detection.scrapeIntervalNs == kS);
  CHECK(pb.detection.evaluationIntervalNs == kS / 2);
  CHECK(pb.detection.falseAlarmMarginNs == 5 * kS);
  CHECK(resolvePlaceholders("{target}/{step}/{kind}/{scenario}", "n2", "flap", "link_flap", "s") ==
        "n2/flap/link_flap/s");
}

TEST_CASE("every [[detect]] error of a file is reported at once, with its position") {
  auto pb = parsePlaybook(std::string(kSyntheticPlaybook) + R"(
[[detect]]
step = "nope"
alert = { alertname = "A" }
within = "10s"
[[detect]]
alert = { node = "{target}" }
within = "10s"
[[detect]]
alert = { alertname = "A", node = "{host}" }
within = "10s"
[[detect]]
alert = { alertname = "A", "bad-label" = "x" }
[[detect]]
alert = { alertname = "A" }
within = 10
colour = "red"
)",
                          "d.toml");
  REQUIRE_FALSE(pb);
  const std::string& m = pb.error().message;
  INFO(m);
  CHECK(m.find("d.toml:47:8: detect step 'nope' is not a step of scenario 'synthetic' (steps: flap)") != std::string::npos);
  CHECK(m.find("detect alert needs alertname") != std::string::npos);
  CHECK(m.find("'{host}': the placeholders are {target}") != std::string::npos);
  CHECK(m.find("'bad-label' is not a Prometheus label name") != std::string::npos);
  CHECK(m.find("detect within must be a duration with a unit in quotes") != std::string::npos);
  CHECK(m.find("unknown key 'colour' in [[detect]]") != std::string::npos);
  // One line per error, each with file:line:col.
  size_t lines = 1 + size_t(std::count(m.begin(), m.end(), '\n'));
  CHECK(lines >= 6);
}

TEST_CASE("an alert that fires and clears in time is a detection with its uncertainty") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));  // fault 10 s .. 12 s on n2
  r.alerts = {event(r, "n2", true, 11'500'000'000), event(r, "n2", false, 11'500'000'000, 12'800'000'000)};
  Scores s = score(r, pb);
  const auto& d = s.detection;
  REQUIRE(d.scored);
  REQUIRE(d.outcomes.size() == 1);
  const auto& o = d.outcomes[0];
  CHECK(o.status == "detected");
  CHECK(o.timeToDetectNs == 1'500'000'000);
  CHECK(o.uncertaintyNs == 1'500'000'000);  // scrape 1 s + evaluation 500 ms
  CHECK(o.timeToClearNs == 800'000'000);
  CHECK(o.cleared);
  CHECK(o.passed);
  CHECK(o.nodes == std::vector<std::string>{"n2"});
  CHECK(o.alert == "RdmaLinkDown{node=\"n2\"}");
  CHECK(d.falseAlarms.empty());
  CHECK(d.total.precision == 1.0);
  CHECK(d.total.recall == 1.0);
  CHECK(d.total.medianTimeToDetectNs == 1'500'000'000);
  // A detection met adds a passed expectation and nothing else.
  Scores plain = score(syntheticRun(syntheticPlaybook(), Shape::cleanStep), syntheticPlaybook());
  CHECK(s.outcome == plain.outcome);
  CHECK(s.verdictsPassed == plain.verdictsPassed + 1);
  CHECK(s.verdictsFailed == plain.verdictsFailed);
}

TEST_CASE("no alert is a miss, and a miss fails the run with exit code 1") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  // The alert fires for the other node: not this fault's detection, and inside a fault
  // window, so not a false alarm either.
  r.alerts = {event(r, "n1", true, 11 * kS)};
  Scores s = score(r, pb);
  REQUIRE(s.detection.outcomes.size() == 1);
  CHECK(s.detection.outcomes[0].status == "missed");
  CHECK_FALSE(s.detection.outcomes[0].passed);
  CHECK(s.detection.falseAlarms.empty());
  CHECK(s.detection.total.recall == 0.0);
  CHECK(s.outcome == Outcome::failed);
  CHECK(exitCodeFor(s.outcome) == 1);
  Scores plain = score(syntheticRun(syntheticPlaybook(), Shape::cleanStep), syntheticPlaybook());
  CHECK(s.verdictsFailed == plain.verdictsFailed + 1);
}

TEST_CASE("a late alert, an alert that does not clear, and one already firing") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  SECTION("late: after within") {
    r.alerts = {event(r, "n2", true, 21 * kS)};
    Scores s = score(r, pb);
    CHECK(s.detection.outcomes.at(0).status == "late");
    CHECK(s.detection.outcomes.at(0).timeToDetectNs == 11 * kS);
    CHECK(s.detection.total.late == 1);
    CHECK(s.detection.total.recall == 1.0);  // found, too late
    CHECK(s.detection.failed == 1);
  }
  SECTION("detected but never cleared") {
    r.alerts = {event(r, "n2", true, 11 * kS)};
    Scores s = score(r, pb);
    const auto& o = s.detection.outcomes.at(0);
    CHECK(o.status == "detected");
    CHECK_FALSE(o.cleared);
    CHECK_FALSE(o.passed);
    CHECK(o.describe().find("not cleared within 5s") != std::string::npos);
  }
  SECTION("already firing before the fault: not its detection") {
    r.alerts = {event(r, "n2", true, 3 * kS)};
    Scores s = score(r, pb);
    const auto& o = s.detection.outcomes.at(0);
    CHECK(o.status == "missed");
    CHECK(o.note.find("already firing") != std::string::npos);
  }
}

TEST_CASE("alerts outside every fault window are false alarms; precision counts them") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  r.alerts = {event(r, "n2", true, 11 * kS), event(r, "n2", false, 11 * kS, 13 * kS),
              // 25 s: 13 s after the revert at 12 s, beyond the 5 s margin.
              event(r, "n1", true, 25 * kS),
              // 16 s: inside the margin: explained by the fault, not counted.
              event(r, "n1", true, 16 * kS, 0, "alertmanager", "RdmaLinkDown"),
              // Not a watched alert name: never a false alarm here.
              event(r, "n1", true, 26 * kS, 0, "alertmanager", "DiskFull")};
  Scores s = score(r, pb);
  const auto& d = s.detection;
  REQUIRE(d.falseAlarms.size() == 1);
  CHECK(d.falseAlarms[0].firedNs == 25 * kS);
  CHECK(d.total.falseAlarms == 1);
  CHECK(d.total.precision == 0.5);
  CHECK(d.total.recall == 1.0);
  CHECK(d.watched == std::vector<std::string>{"RdmaLinkDown"});
  // False alarms are counted and shown, not a failed expectation.
  CHECK(s.detection.failed == 0);
}

TEST_CASE("the same alert from Alertmanager and from a Prometheus poll is one episode") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  r.alerts = {event(r, "n2", true, 11 * kS, 0, "alertmanager"), event(r, "n2", true, 11'300'000'000, 0, "prometheus"),
              event(r, "n2", false, 11'300'000'000, 13 * kS, "prometheus")};
  auto eps = alertEpisodes(r, kS);
  REQUIRE(eps.size() == 1);
  CHECK(eps[0].firedNs == 11 * kS);
  CHECK(eps[0].resolvedNs == 13 * kS);
  CHECK(eps[0].source == "alertmanager+prometheus");
  // A second firing after it resolved is a new episode.
  r.alerts.push_back(event(r, "n2", true, 20 * kS));
  CHECK(alertEpisodes(r, kS).size() == 2);
}

TEST_CASE("without an alert source the detections are not scored and do not fail the run") {
  Playbook pb = detectPlaybook();
  RunResult r = syntheticRun(pb, Shape::cleanStep);
  Scores s = score(r, pb);
  CHECK(s.detection.expected);
  CHECK_FALSE(s.detection.scored);
  CHECK(s.detection.notScoredReason.find("--alertmanager-webhook") != std::string::npos);
  Scores plain = score(syntheticRun(syntheticPlaybook(), Shape::cleanStep), syntheticPlaybook());
  CHECK(s.verdictsPassed == plain.verdictsPassed);
  CHECK(s.verdictsFailed == plain.verdictsFailed);
  json doc = makeResultDocument(r, pb, s);
  CHECK(renderText(doc).find("detection: not scored: no alert source") != std::string::npos);
  CHECK(renderJunit(doc).find("<skipped message=\"no alert source") != std::string::npos);
}

TEST_CASE("the reports carry the detection: JSON, text, JUnit, HTML") {
  Playbook pb = detectPlaybook();
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  r.alertTiming = {kS, kS, "prometheus http://127.0.0.1:9090"};
  r.alerts = {event(r, "n2", true, 11'500'000'000), event(r, "n2", false, 11'500'000'000, 12'800'000'000),
              event(r, "n1", true, 25 * kS)};
  Scores s = score(r, pb);
  json doc = makeResultDocument(r, pb, s);
  const json& d = doc["detection"];
  CHECK(d["scored"] == true);
  CHECK(d["summary"]["detected"] == 1);
  CHECK(d["summary"]["false_alarms"] == 1);
  CHECK(d["expectations"][0]["time_to_detect_ns"] == 1'500'000'000);
  CHECK(d["expectations"][0]["uncertainty_ns"] == 2'000'000'000);
  CHECK(d["alerts"].size() == 2);
  CHECK(d["alerts"][0]["class"] == "detected");
  CHECK(d["alerts"][1]["class"] == "false_alarm");
  REQUIRE(checkResultDocument(doc));

  std::string text = renderText(doc);
  INFO(text);
  CHECK(text.find("RdmaLinkDown{node=\"n2\"}: detected in 1.500s ±2.000s, cleared in 800ms") != std::string::npos);
  CHECK(text.find("FALSE ALARM RdmaLinkDown{node=\"n1\"} fired at +25.000s") != std::string::npos);
  CHECK(text.find("precision 0.50, recall 1.00") != std::string::npos);

  std::string junit = renderJunit(doc);
  CHECK(junit.find("name=\"synthetic / detection\" tests=\"2\" failures=\"0\"") != std::string::npos);

  std::string html = renderHtml(doc);
  CHECK(html.find("<table class=\"detection\">") != std::string::npos);
  CHECK(html.find("class=\"alert-mark alert-detected\"") != std::string::npos);
  CHECK(html.find("class=\"alert-mark alert-false_alarm\"") != std::string::npos);

  // A miss: a failure in JUnit with the playbook line.
  r.alerts.clear();
  json missed = makeResultDocument(r, pb, score(r, pb));
  std::string j2 = renderJunit(missed);
  CHECK(j2.find("type=\"detection\"") != std::string::npos);
  CHECK(j2.find("missed") != std::string::npos);
  CHECK(renderText(missed).find("FAIL ") != std::string::npos);
}

TEST_CASE("repeat rounds get their own summary") {
  Playbook pb = detectPlaybook(kDetect, 2);
  REQUIRE(pb.repeat == 2);
  RunResult r = withSource(syntheticRun(pb, Shape::cleanStep));
  // The synthetic run records only trial 0's faults: add trial 1's, 30 s later.
  const auto& t1 = r.plan.trials.at(1);
  for (const auto& f : t1.faults)
    r.faults.push_back({1, f.step, f.node, f.kind, f.params, f.atNs, t1.startNs + 10 * kS, t1.startNs + 12 * kS, ""});
  r.alerts = {event(r, "n2", true, 11 * kS), event(r, "n2", false, 11 * kS, 13 * kS)};
  r.alertsUntilNs = r.endedNs;
  Scores s = score(r, pb);
  REQUIRE(s.detection.rounds.size() == 2);
  CHECK(s.detection.rounds.at(0).detected == 1);
  CHECK(s.detection.rounds.at(1).missed == 1);
  CHECK(s.detection.total.recall == 0.5);
}

}  // namespace test_detection
