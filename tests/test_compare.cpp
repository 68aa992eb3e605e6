// compare and baseline merge on result documents made by the scorer from synthetic series
// (tests/synthetic_run.hpp), so every verdict has a known answer.
#include <catch2/catch.hpp>

#include "controller/report/compare.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_targets.hpp"
#include "controller/score/score.hpp"
#include "synthetic_run.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_compare {

using namespace rc::controller;
using rc::test::Shape;

namespace {

// The synthetic run (a 2 s flap from 10 s; the job out until 12.5 s), with node N's traffic
// held off for EXTRA bins more (100 ms each) after the job came back.
json documentWith(const std::string& node = "", int extra = 0) {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  if (!node.empty())
    for (int i = 125; i < 125 + extra; i++) run.series[node][size_t(i)].bytes = 0;
  json doc = makeResultDocument(run, pb, score(run, pb));
  // On RDMA's transport the noise is the scorer's alone (TCP's retransmission backoff adds to
  // it: the case "a TCP job's return after an outage...").
  doc["playbook"]["workload"]["transport"] = "verbs";
  return doc;
}

MetricTable table(const json& doc) {
  auto t = metricTableOf(doc);
  REQUIRE(t);
  return *t;
}

const CompareRow* row(const CompareOutcome& c, const std::string& scope, const std::string& metric) {
  for (const auto& r : c.rows)
    if (r.key.scope == scope && r.key.metric == metric) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("the same run twice: every value the same within noise, exit 0") {
  json a = documentWith(), b = documentWith();
  auto c = compareTables(table(a), table(b), {}, "a", "b");
  CHECK(c.worse == 0);
  CHECK(c.better == 0);
  CHECK(c.missing == 0);
  CHECK(c.same == int(c.rows.size()));
  CHECK(c.rows.size() >= 12);  // job and two nodes, several metrics each
  CHECK(c.exitCode() == 0);
  // A recovery time carries its uncertainty as noise.
  const CompareRow* r = row(c, "job", "recovery_time");
  REQUIRE(r);
  CHECK(*r->base.value == Approx(500e6).margin(150e6));
  CHECK(r->base.noise > 0);
}

TEST_CASE("a node that recovers 2 s later is worse beyond the noise; a difference inside it is the same") {
  json base = documentWith();
  auto late = compareTables(table(base), table(documentWith("n2", 20)), {}, "golden", "late n2");
  const CompareRow* n2 = row(late, "n2", "recovery_time");
  const CompareRow* n1 = row(late, "n1", "recovery_time");
  REQUIRE(n2);
  REQUIRE(n1);
  INFO(renderCompareText(late));
  CHECK(n2->verdict == "worse");
  CHECK(*n2->diff == Approx(2e9).margin(150e6));
  CHECK(n1->verdict == "same within noise");  // the other node is named as it is
  CHECK(late.exitCode() == 1);
  CHECK(renderCompareText(late).find("n2       recovery_time") != std::string::npos);
  // The per-scope table: the worse ones first (job and n2), n1 the same.
  std::string text = renderCompareText(late);
  auto at = [&](const std::string& s) { return text.find(s); };
  CHECK(at("\n  n2        WORSE (") != std::string::npos);
  CHECK(at("\n  n1        same within noise") != std::string::npos);
  CHECK(at("\n  n2        WORSE (") < at("\n  n1        same within noise"));
  // 100 ms later: inside the two recovery times' uncertainty (bin + smoothing each).
  auto near = compareTables(table(base), table(documentWith("n2", 1)), {}, "golden", "n2 100 ms later");
  const CompareRow* n2near = row(near, "n2", "recovery_time");
  REQUIRE(n2near);
  CHECK(*n2near->diff == Approx(100e6).margin(1e6));
  CHECK(n2near->verdict == "same within noise");
}

TEST_CASE("a node or trial missing from the result is reported by name and fails") {
  json base = documentWith(), res = documentWith();
  json& nodes = res["trials"][0]["nodes"];
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const json& n) { return n["scope"] == "n2"; }), nodes.end());
  auto c = compareTables(table(base), table(res), {}, "base", "without n2");
  CHECK(c.missing > 0);
  const CompareRow* r = row(c, "n2", "recovery_time");
  REQUIRE(r);
  CHECK(r->verdict == "missing in result");
  std::string text = renderCompareText(c);
  CHECK(text.find("missing: recovery_time of n2 in trial " + base["trials"][0]["label"].get<std::string>()) !=
        std::string::npos);
  CHECK(c.exitCode() == 1);
}

TEST_CASE("rules: variance and bounds pass and fail with their line in the rules file") {
  const std::string rules = R"(# acceptance rules
[[rule]]
metric = "recovery_time"
scope = "nodes"
variance = "+20%"

[[rule]]
metric = "throughput_loss_pct"
scope = "job"
op = "<="
bound = 100

[[rule]]
metric = "recovery_time"
scope = "nodes"
variance = "+20%"
exempt = ["n2"]
)";
  auto parsed = parseCompareRules(rules, "rules.toml");
  REQUIRE(parsed);
  REQUIRE(parsed->size() == 3);
  CHECK((*parsed)[0].where == "rules.toml:2:1");
  json base = documentWith();
  auto c = compareTables(table(base), table(documentWith("n2", 20)), *parsed, "golden", "late n2");
  INFO(renderCompareText(c));
  CHECK(c.rulesGiven);
  CHECK(c.rulesFailed == 1);  // n2's recovery, beyond +20 % and the noise, under the first rule only
  CHECK(c.rulesPassed == 3);  // n1 under both recovery rules; the job's loss bound
  const CompareRow* n2 = row(c, "n2", "recovery_time");
  REQUIRE(n2);
  REQUIRE(n2->checks.size() == 1);  // exempt from the third
  CHECK_FALSE(n2->checks[0].passed);
  CHECK(n2->checks[0].where == "rules.toml:2:1");
  CHECK(renderCompareText(c).find("FAILED rules.toml:2:1: recovery_time variance +20% [nodes] on n2") != std::string::npos);
  CHECK(c.exitCode() == 1);
  // The same run against itself passes every rule.
  auto same = compareTables(table(base), table(documentWith()), *parsed, "golden", "same");
  CHECK(same.rulesFailed == 0);
  CHECK(same.exitCode() == 0);
  // JSON and JUnit carry it: a test case per rule check.
  json d = compareDocument(c);
  CHECK(d["schema"] == kCompareSchema);
  CHECK(d["outcome"]["exit_code"] == 1);
  std::string x = renderCompareJunit(c);
  CHECK(x.find("tests=\"4\" failures=\"1\"") != std::string::npos);
  CHECK(x.find("rules.toml:2:1") != std::string::npos);
}

TEST_CASE("rules files: every error with its position") {
  auto r = parseCompareRules(R"([[rule]]
metric = "recovery"
variance = "+20%"
[[rule]]
metric = "recovery_time"
variance = "20"
[[rule]]
metric = "min_throughput"
op = "<"
bound = "fast"
[[rule]]
metric = "stall_time"
colour = 1
variance = "-5%"
)",
                             "r.toml");
  REQUIRE_FALSE(r);
  INFO(r.error().message);
  std::string m = r.error().message;
  CHECK(std::count(m.begin(), m.end(), '\n') == 3);
  CHECK(m.find("r.toml:2:10: metric 'recovery' is not compared (known: recovery_time,") == 0);
  CHECK(m.find("\nr.toml:6:12: variance '20' must be a signed percentage") != std::string::npos);
  CHECK(m.find("\nr.toml:10:9: bound of min_throughput must be a bit rate") != std::string::npos);
  CHECK(m.find("\nr.toml:13:10: unknown key 'colour' in [[rule]]") != std::string::npos);
}

TEST_CASE("baseline merge: per value the median and range of the runs; compare reads it") {
  json a = documentWith(), b = documentWith("n2", 2), c = documentWith("n2", 4);
  auto g = mergeGolden({a, b, c}, {"a.json", "b.json", "c.json"});
  REQUIRE(g);
  CHECK((*g)["schema"] == kGoldenSchema);
  CHECK((*g)["runs"] == 3);
  CHECK((*g)["sources"][2]["path"] == "c.json");
  MetricTable t = table(*g);
  const std::string trial = a["trials"][0]["label"];
  const MetricValue& n2 = t.at({trial, "n2", "recovery_time"});
  CHECK(n2.runs == 3);
  CHECK(*n2.value == Approx(700e6).margin(1e6));  // 0.5, 0.7, 0.9 s
  CHECK(n2.lo == Approx(500e6).margin(1e6));
  CHECK(n2.hi == Approx(900e6).margin(1e6));
  CHECK(n2.noise >= 200e6);  // at least half the range
  // A run inside the golden spread is the same; one 2 s late is worse.
  auto ok = compareTables(t, table(documentWith("n2", 3)), {}, "golden", "n2 0.8 s");
  CHECK(row(ok, "n2", "recovery_time")->verdict == "same within noise");
  auto bad = compareTables(t, table(documentWith("n2", 20)), {}, "golden", "n2 2.5 s");
  CHECK(row(bad, "n2", "recovery_time")->verdict == "worse");
  CHECK(row(bad, "n1", "recovery_time")->verdict == "same within noise");
  // Skewed runs (0.5, 0.5 and 2.5 s): a value the runs themselves gave is the same, though it
  // is further from their median than the noise; one beyond them is worse.
  auto skewed = mergeGolden({a, documentWith("n2", 0), documentWith("n2", 20)}, {"a", "b", "c"});
  REQUIRE(skewed);
  MetricTable st = table(*skewed);
  CHECK(st.at({trial, "n2", "recovery_time"}).hi == Approx(2.5e9).margin(1e6));
  auto atHi = compareTables(st, table(documentWith("n2", 20)), {}, "golden", "n2 2.5 s");
  CHECK(row(atHi, "n2", "recovery_time")->verdict == "same within noise");
  auto beyond = compareTables(st, table(documentWith("n2", 40)), {}, "golden", "n2 4.5 s");
  CHECK(row(beyond, "n2", "recovery_time")->verdict == "worse");
  // Runs of another playbook do not merge.
  json other = documentWith();
  other["playbook"]["name"] = "other";
  auto refused = mergeGolden({a, other}, {"a.json", "o.json"});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("o.json: a run of 'other', not of 'synthetic'") == 0);
}

TEST_CASE("compare's page: both runs' series overlaid per trial; a golden baseline's note") {
  json base = documentWith(), late = documentWith("n2", 20);
  auto c = compareTables(table(base), table(late), {}, "golden", "late n2");
  std::string page = renderOverlayHtml(base, late, "base.json", "late.json", "failed", renderCompareText(c));
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = 0; (at = page.find(what, at)) != std::string::npos; at += what.size()) n++;
    return n;
  };
  const size_t charts = count("<svg class=\"chart\"");
  CHECK(charts >= 3);  // the job and two nodes
  CHECK(count("class=\"series overlay\"") == charts);
  CHECK(count("<path class=\"series\" ") == charts);
  CHECK(page.find("id=\"verdict\">FAILED") != std::string::npos);
  CHECK(page.find("WORSE") != std::string::npos);  // the comparison's table is on the page
  CHECK(page.find("id=\"no-overlay\"") == std::string::npos);
  // n2's two lines differ where it was held off: the result's is at zero there, the baseline's not.
  auto pathOf = [&](const std::string& chartId, const std::string& cls) {
    size_t at = page.find("id=\"" + chartId + "\"");
    REQUIRE(at != std::string::npos);
    at = page.find("<path class=\"" + cls + "\"", at);
    REQUIRE(at != std::string::npos);
    size_t d = page.find(" d=\"", at) + 4;
    return page.substr(d, page.find('"', d) - d);
  };
  CHECK(pathOf("overlay-0-n2", "series") != pathOf("overlay-0-n2", "series overlay"));
  CHECK(pathOf("overlay-0-n1", "series") == pathOf("overlay-0-n1", "series overlay"));
  // A golden baseline keeps no series: the result alone, and the page says why.
  auto golden = mergeGolden({base, documentWith()}, {"a.json", "b.json"});
  REQUIRE(golden);
  std::string alone = renderOverlayHtml(*golden, late, "golden.json", "late.json", "failed", "");
  CHECK(alone.find("id=\"no-overlay\"") != std::string::npos);
  CHECK(alone.find("class=\"series overlay\"") == std::string::npos);
  CHECK(alone.find("<path class=\"series\" ") != std::string::npos);
}

namespace {

// A target sweep over n1..n3 made of the synthetic trial, its expectations all met: LATE's
// trial is the one of a run whose n2 came back EXTRA bins late; ONLY, if set, keeps that
// target's trial alone.
json sweepDocument(const std::string& late = "", int extra = 0, const std::string& only = "") {
  json doc = documentWith();
  json trials = json::array();
  for (const std::string node : {"n1", "n2", "n3"}) {
    if (!only.empty() && node != only) continue;
    json t = (node == late ? documentWith("n2", extra) : doc)["trials"][0];
    t["index"] = trials.size();
    t["label"] = "flap target=" + node;
    t["sweep"] = {{"param", "target"}, {"value", node}};
    for (auto& v : t["verdicts"]) v["passed"] = true;
    trials.push_back(t);
  }
  doc["trials"] = trials;
  doc["targets"] = targetTable(doc["trials"]);
  return doc;
}

// A sweep over targets n1..n4 in which node n2 (a bystander in every trial but n2's) is held
// off EXTRA[target] bins more in that target's trial.
json sweepWith(const std::map<std::string, int>& extra) {
  json trials = json::array();
  for (const std::string node : {"n1", "n2", "n3", "n4"}) {
    auto e = extra.find(node);
    json t = documentWith("n2", e == extra.end() ? 0 : e->second)["trials"][0];
    t["index"] = trials.size();
    t["label"] = "flap target=" + node;
    t["sweep"] = {{"param", "target"}, {"value", node}};
    trials.push_back(t);
  }
  json doc = documentWith();
  doc["trials"] = trials;
  doc["targets"] = targetTable(doc["trials"]);
  return doc;
}

}  // namespace

TEST_CASE("a target sweep's table against a baseline: the target worse beyond noise is named and first") {
  json base = sweepDocument(), res = sweepDocument("n3", 20);
  REQUIRE(res["targets"].size() == 3);
  auto c = compareTables(table(base), table(res), {}, "golden", "n3 late");
  addTargetsVsBaseline(res, c);
  const json& rows = res["targets"];
  INFO(rows.dump(2));
  // Every trial passed its expectations: n3 is first for being worse than the baseline alone.
  CHECK(rows[0]["target"] == "n3");
  CHECK(rows[0]["verdict"] == "passed");
  CHECK(rows[0]["vs_baseline"]["verdict"] == "worse");
  CHECK(rows[0]["vs_baseline"]["worse"].get<int>() > 0);
  const std::string metric = rows[0]["vs_baseline"]["metric"];
  CHECK(rows[0]["vs_baseline"]["difference"].get<double>() * (metric == "min_throughput" || metric == "baseline" ? -1 : 1) > 0);
  CHECK_THAT(rows[0]["vs_baseline"]["text"].get<std::string>(), Catch::EndsWith(" worse"));
  CHECK_THAT(rows[0]["vs_baseline"]["text"].get<std::string>(), Catch::StartsWith(metric));
  // The others, by name, the same within noise.
  CHECK(rows[1]["target"] == "n1");
  CHECK(rows[2]["target"] == "n2");
  for (size_t i = 1; i < 3; i++) {
    CHECK(rows[i]["vs_baseline"]["verdict"] == "same within noise");
    CHECK(rows[i]["vs_baseline"]["text"] == "same within noise");
    CHECK(rows[i]["vs_baseline"]["metric"].is_null());
  }
  // The terminal summary, the HTML table and the result document all carry the column.
  std::string text = renderText(res);
  CHECK_THAT(text, Catch::Contains("; worse than the baseline: n3\n"));
  CHECK_THAT(text, Catch::Contains("vs baseline"));
  auto n3 = text.find("\n  n3 "), n1 = text.find("\n  n1 ");
  REQUIRE(n3 != std::string::npos);
  CHECK(n3 < n1);
  CHECK(text.find("WORSE", n3) < n1);
  std::string html = renderHtml(res);
  CHECK_THAT(html, Catch::Contains("<th>vs baseline</th>"));
  CHECK_THAT(html, Catch::Contains("<span class=\"badge failed\">worse</span> " + metric));
  // Without a baseline, no column.
  CHECK_THAT(renderText(sweepDocument()), !Catch::Contains("vs baseline"));
  CHECK_THAT(renderHtml(sweepDocument()), !Catch::Contains("<th>vs baseline</th>"));
}

TEST_CASE("a target sweep's table against a baseline: better, and a target the baseline lacks") {
  // A trial's verdict is its worst row's; the metric named is the one that moved most.
  auto rowOf = [](const std::string& trial, const std::string& scope, const std::string& metric, double base,
                  double result, const std::string& verdict) {
    CompareRow r;
    r.key = {trial, scope, metric};
    r.base.value = base;
    r.result.value = result;
    r.diff = result - base;
    r.verdict = verdict;
    return r;
  };
  CompareOutcome c;
  c.rows = {rowOf("a", "job", "recovery_time", 2e9, 1e9, "better"), rowOf("a", "n1", "stall_time", 1e9, 0.8e9, "better"),
            rowOf("a", "job", "baseline", 1e9, 1e9, "same within noise"),
            rowOf("b", "job", "recovery_time", 2e9, 1e9, "better"), rowOf("b", "n2", "min_throughput", 1e9, 0.7e9, "worse"),
            rowOf("c", "job", "stall_time", 0, 0.5e9, "worse"), rowOf("c", "job", "recovery_time", 1e9, 1.5e9, "worse")};
  json a = trialVsBaseline(c, "a");
  CHECK(a["verdict"] == "better");
  CHECK(a["metric"] == "recovery_time");
  CHECK(a["difference_pct"].get<double>() == Approx(-50));
  CHECK(a["text"] == "recovery_time -50% better");
  CHECK(a["better"] == 2);
  CHECK(a["same"] == 1);
  json b = trialVsBaseline(c, "b");  // better by 50 %, worse by 30 %: worse
  CHECK(b["verdict"] == "worse");
  CHECK(b["text"] == "min_throughput (n2) -30% worse");
  json st = trialVsBaseline(c, "c");  // from a baseline of 0: the change itself, first
  CHECK(st["metric"] == "stall_time");
  CHECK(st["difference_pct"].is_null());
  CHECK_THAT(st["text"].get<std::string>(), Catch::StartsWith("stall_time +") && Catch::EndsWith(" worse"));
  CHECK(trialVsBaseline(c, "d")["verdict"] == "missing in baseline");
  // A baseline of n1's trial alone: n2 and n3 are missing in it, and n1 is the same.
  json res2 = sweepDocument();
  auto c2 = compareTables(table(sweepDocument("", 0, "n1")), table(res2), {}, "n1 only", "all");
  addTargetsVsBaseline(res2, c2);
  std::map<std::string, std::string> vs;
  for (const auto& r : res2["targets"]) vs[r["target"]] = r["vs_baseline"]["verdict"];
  CHECK(vs == std::map<std::string, std::string>{
                  {"n1", "same within noise"}, {"n2", "missing in baseline"}, {"n3", "missing in baseline"}});
}

TEST_CASE("a target sweep's golden baseline pools the peers: a value another target gave is no change, one beyond all is") {
  // Three golden runs: n2 recovers 0.9 s after the job in n3's trial, 0.5 s in the others
  // (the spread of the lab's recoveries, which one node's three runs need not show).
  json r1 = sweepWith({{"n3", 4}}), r2 = sweepWith({{"n3", 4}}), r3 = sweepWith({{"n3", 4}});
  auto g = mergeGolden({r1, r2, r3}, {"r1", "r2", "r3"});
  REQUIRE(g);
  REQUIRE((*g).contains("targets"));
  CHECK((*g)["targets"].size() == 4);
  MetricTable t = table(*g);
  const MetricValue& n4 = t.at({"flap target=n4", "n2", "recovery_time"});
  CHECK(n4.samples.size() == 3);
  CHECK(n4.hi == Approx(500e6).margin(1e6));  // n4's own runs: 0.5 s only
  // Bystander n2 in n1, n3 and n4's trials, n1 in n2, n3 and n4's: 6 values a run, 18.
  CHECK(n4.peerSamples == 18);
  CHECK(n4.peerLo == Approx(500e6).margin(1e6));
  CHECK(n4.peerHi == Approx(900e6).margin(1e6));

  // n2 0.9 s in n4's trial: outside n4's own runs, but a value its peers gave: the same.
  auto mode = compareTables(t, table(sweepWith({{"n4", 4}})), {}, "golden", "n4's trial at 0.9 s");
  const CompareRow* r = nullptr;
  for (const auto& x : mode.rows)
    if (x.key.trial == "flap target=n4" && x.key.scope == "n2" && x.key.metric == "recovery_time") r = &x;
  REQUIRE(r);
  CHECK(*r->diff == Approx(400e6).margin(1e6));
  CHECK(*r->diff > r->base.noise + r->result.noise);  // beyond the noise of its own runs
  CHECK(r->verdict == "same within noise");
  CHECK(mode.worse == 0);
  CHECK(mode.exitCode() == 0);
  json modeDoc = compareDocument(mode);
  bool peersListed = false;
  for (const auto& row : modeDoc["rows"])
    peersListed = peersListed || (row["baseline"].is_object() && row["baseline"].contains("peers"));
  CHECK(peersListed);

  // 2.5 s in n4's trial: beyond its own runs and every peer's: worse, n4 alone.
  json res = sweepWith({{"n4", 20}});
  auto late = compareTables(t, table(res), {}, "golden", "n4's trial late");
  addTargetsVsBaseline(res, late);
  std::map<std::string, std::string> vs;
  for (const auto& row : res["targets"]) vs[row["target"]] = row["vs_baseline"]["verdict"];
  CHECK(vs == std::map<std::string, std::string>{{"n1", "same within noise"}, {"n2", "same within noise"},
                                                 {"n3", "same within noise"}, {"n4", "worse"}});
  CHECK(late.exitCode() == 1);

  // Without a target table (not a sweep), no pool: 0.9 s in n4's trial is judged against n4's
  // own runs alone, and is worse.
  auto strip = [](json d) {
    d.erase("targets");
    return d;
  };
  auto gPlain = mergeGolden({strip(r1), strip(r2), strip(r3)}, {"r1", "r2", "r3"});
  REQUIRE(gPlain);
  CHECK_FALSE((*gPlain).contains("targets"));
  MetricTable own = table(*gPlain);
  CHECK(own.at({"flap target=n4", "n2", "recovery_time"}).peerSamples == 0);
  auto alone = compareTables(own, table(strip(sweepWith({{"n4", 4}}))), {}, "golden", "n4's trial at 0.9 s");
  CHECK(alone.worse > 0);
}

TEST_CASE("a TCP job's return after an outage moves by its retransmission timer: within it is noise, beyond it worse") {
  auto tcp = [](json d) {
    d["playbook"]["workload"]["transport"] = "tcp";
    return d;
  };
  json base = documentWith();
  CHECK(makeResultDocument(rc::test::syntheticRun(rc::test::syntheticPlaybook(), Shape::cleanStep),
                           rc::test::syntheticPlaybook(),
                           score(rc::test::syntheticRun(rc::test::syntheticPlaybook(), Shape::cleanStep),
                                 rc::test::syntheticPlaybook()))["playbook"]["workload"]["transport"] == "tcp");
  // The synthetic flap is 2 s down: TCP tries again up to 2.2 s after the link is back, so each
  // value that counts the return carries half of that (1.1 s) besides the scorer's uncertainty.
  MetricTable tb = table(tcp(base));
  const MetricValue& rec = tb.at({base["trials"][0]["label"], "n2", "recovery_time"});
  MetricTable vb = table(base);
  const MetricValue& vrec = vb.at({base["trials"][0]["label"], "n2", "recovery_time"});
  CHECK(rec.noise == Approx(vrec.noise + 1.1e9).margin(1e6));
  CHECK(tb.at({base["trials"][0]["label"], "job", "baseline"}).noise ==
        Approx(table(base).at({base["trials"][0]["label"], "job", "baseline"}).noise));  // not a return
  // n2 back 1 s later: worse on verbs (beyond the scorer's noise), the same on TCP.
  auto verbs1 = compareTables(table(base), table(documentWith("n2", 10)), {}, "golden", "n2 1 s later");
  CHECK(row(verbs1, "n2", "recovery_time")->verdict == "worse");
  auto tcp1 = compareTables(tb, table(tcp(documentWith("n2", 10))), {}, "golden", "n2 1 s later");
  CHECK(row(tcp1, "n2", "recovery_time")->verdict == "same within noise");
  CHECK(tcp1.worse == 0);
  // 4 s later: beyond what the timer explains, worse on TCP too.
  auto tcp4 = compareTables(tb, table(tcp(documentWith("n2", 40))), {}, "golden", "n2 4 s later");
  CHECK(row(tcp4, "n2", "recovery_time")->verdict == "worse");
  CHECK(tcp4.exitCode() == 1);
  // A longer outage is another fault: its stall 1 s longer is not excused by the timer (the
  // 2 s flap of the baseline against a 3 s one: the same shape, the outage's own second more).
  json longer = tcp(documentWith("n2", 10));
  for (auto& f : longer["faults"])
    if (f["kind"] == "link_flap") f["params"]["down"] = 3'000'000'000LL;
  auto other = compareTables(tb, table(longer), {}, "golden", "a 3 s flap");
  const CompareRow* r3 = row(other, "n2", "recovery_time");
  CHECK(r3->verdict == "worse");
  CHECK(r3->base.noise == Approx(vrec.noise).margin(1e6));  // the timer's part taken out
}

}  // namespace test_compare
