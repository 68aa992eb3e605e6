// The shipped lab playbooks run from the repository on the namespace lab, each to a verdict
// for every expectation, with every fault applied and reverted, an effect on the job, and
// nothing left behind (links up, journals empty). The verdict is printed, and required only of
// incast and acceptance-suite (with one re-run: this machine is noisy, and their bounds are
// time bounds). Where a playbook is about a
// mechanism, the test compares it on and off in the same run: adaptive routing against ECMP
// (by the longest stall: the loss is within the lab's noise),
// the PFC watchdog against none.
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "controller/report/report.hpp"
#include "faults/labswitch_client.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

using rctest::readFile;

// The two lab shapes the playbooks need. One lab at a time: the machine has two cores.
struct Topology {
  const char* name;
  int nodes, leaves, spines;
  const char* routing;
  double rateBps = 1e9;
  bool splitCores = false;  // lab up --split-cores
  // lab up --ecn 400KiB,1600KiB,0.2 (HPCC's 100G default, the switch's own) instead of the
  // lab's 100KiB,400KiB,0.2: for the playbooks whose scenario is a shift from that threshold.
  bool hpcc100gEcn = false;
};
// link-flap-recovery and pfc-storm-watchdog: one switch at 1 Gb/s with `--split-cores`, as
// ecn-shallow's lab below. With the switch and the hosts' receive work on one core between
// them, these fault windows' busiest second sat around 50 % and over it in some suites
// (link-flap-recovery 53 %, pfc-storm-watchdog 51 %; issue 21 asks 50 %); split, 45.5 % (worst
// 49.7 %) and 46.7 % (49.5 %), every bound met in every trial (2026-11-28, bench/README.md).
const Topology kOneSwitch{"one switch, 3 nodes, split cores", 3, 0, 0, "ecmp", 1e9, true};
// acceptance-suite: one switch at 1 Gb/s with `--split-cores`, on a lab of its own (as its
// figures were taken). On shared cores its baseline-only trial, the one with no fault to stop
// the job, read a busiest second of 59-78 % in the whole suite runs of 2026-11-29 to 12-07
// (issue 21 asks 50 %). Split without the delivery thread, a recovery after a whole-second
// stall (a flap, a pause) read 2.7-2.8 s against the 2 s bound in 1 of 9 trials (0.5-1.4 s
// shared); split with it (2026-12-07, 10 runs), every bound met in 10 of 10, the recoveries
// 0-1.06 s against bounds of 2-3 s, and that trial's busiest second 34-47 % (bench/README.md).
const Topology kOneSwitchAcceptance{"one switch, 3 nodes, split cores (acceptance-suite)", 3, 0, 0, "ecmp", 1e9,
                                    true};
// noise-floor and game-day: one switch at 600 Mb/s, the cores shared. At 1 Gb/s their fault
// windows' busiest second was 55 % and 58 % (medians of 12 trials each, 4 whole suite runs on
// 2026-11-29; issue 21 asks 50 %): the switch's time follows its writes to the hosts more than
// the bytes, so 800 Mb/s barely helped (49 % and 52 %, worst 56 %). At 600 Mb/s, 40 % and 43 %
// (worst 52 % and 48 %, 9 and 6 trials; bench/README.md, "noise-floor and game-day at 600M"),
// every bound met. Split cores moved game-day's busiest second little (49 % against 48-51 %)
// and gave one recovery of 2.7-2.8 s in 9 trials; noise-floor split read a noop loss of 13.5 %
// in a CI rehearsal (2026-11-28).
const Topology kOneSwitchSlow{"one switch, 3 nodes, 600 Mb/s", 3, 0, 0, "ecmp", 600e6};
// ecn-shallow and ecn-threshold-sweep: one switch at 1 Gb/s with `--split-cores`, the switch on
// core 0 and the hosts' receive work on core 1. The switch pays for the marks more than for the
// bytes (a sender whose window a mark cut pushes more often, and each push ends a write to its
// host, which ran the host's TCP stack in the switch's time): on the shared lab their fault
// windows' busiest second was 53-61 % (issue 21 asks 50 %), and a lower rate did not help
// (700M: 57 % and 49-62 %). With the cores split, 45 % and 39 % (bench/README.md, "Why the
// switch's writes end").
// Their own lab, so that each starts on a lab no other playbook ran on, as their bounds were set.
// Its queues mark at HPCC's 100G default (kmin 400 KiB), as every lab did until 2026-12-04: both
// playbooks move kmin from there (ecn-shallow to 56 KiB, the sweep through 100 KiB-1.6 MiB), and
// their bounds were set so; from the lab's own 100 KiB the shallow shift would cost far less.
const Topology kOneSwitchSplit{"one switch, 3 nodes, split cores (ECN at HPCC's 100G default)", 3, 0, 0, "ecmp", 1e9,
                               true, true};
// incast: one switch at 500 Mb/s. At 1 Gb/s the lab switch spends a whole core during the
// incast (9 flows into n1 beside the job), falls behind its line rate, and the congestion
// moves out of its modelled queues into the hosts' TAP rings and the scheduler: PFC held the
// senders ~50 ms in all, and a few job iterations took 200-650 ms (retransmission timeouts),
// so the job's iteration p99 read 10-65x its baseline in 8 of 11 runs. At 500 Mb/s the switch
// keeps up (~80 % of a core): PFC holds the senders ~1 s, ECN marks ~1,000 frames, and the
// p99 read 6.0-7.0x in 4 of 4 runs (window maximum 130-163 ms), as the fabric's queues set it.
const Topology kOneSwitchIncast{"one switch, 3 nodes, 500 Mb/s", 3, 0, 0, "ecmp", 500e6};
// cluster-acceptance: the leaf-spine at 1 Gb/s, with ECMP as in every suite its bounds were set
// from (it ran after adaptive-routing's ECMP half); it flaps host links, which have one path
// either way, and its fault windows stop the ring (the switch's busiest second is 5-8 %).
const Topology kLeafSpine{"leaf-spine 2x2, 4 nodes, ECMP", 4, 2, 2, "ecmp"};
// adaptive-routing: the same fabric at 200 Mb/s with `--split-cores`. The one switch process
// models three switches on each frame's way (leaf, spine, leaf), and at 1 Gb/s it was 69 % busy
// in the fault windows (busiest second 74 %, 20 trials; issue 21 asks 50 %), at 400 Mb/s still
// 51 % (55 %): its time follows the writes to the hosts more than the bytes. At 200 Mb/s on
// shared cores its busiest second was 42 % (worst 47 %, 20 trials) on 2026-11-28 but 46-59 % in
// the six whole suite runs of 2026-12-07 (adaptive and ECMP halves); split, with the delivery
// thread making the writes from the hosts' core, 26-37 % (12 trials of each half, 2026-12-07),
// every bound as before. The playbook tells the mechanisms apart by loss as well as by the
// stall: adaptive 1-5 % and 0-50 ms, ECMP 12-16 % and 470-590 ms (bench/README.md).
const Topology kLeafSpineAr{"leaf-spine 2x2, 4 nodes, adaptive routing, 200 Mb/s, split cores", 4, 2, 2, "adaptive",
                            200e6, true};

rctest::Lab& labFor(const Topology& t) {
  static std::unique_ptr<rctest::Lab> lab;
  static const Topology* current = nullptr;
  if (current != &t) {
    lab.reset();  // down before the next one comes up
    current = nullptr;
    std::printf("[lab-playbooks] lab up: %s\n", t.name);
    std::fflush(stdout);
    rc::lab::UpOptions o;
    o.nodes = t.nodes;
    o.leaves = t.leaves;
    o.spines = t.spines;
    o.routing = t.routing;
    o.rateBps = t.rateBps;
    o.splitCores = t.splitCores;
    if (t.hpcc100gEcn) {
      o.ecnKminBytes = 400 * 1024;
      o.ecnKmaxBytes = 1600 * 1024;
      o.ecnPmax = 0.2;
    }
    lab = std::make_unique<rctest::Lab>("rc-playbooks", o);
    current = &t;
  }
  return *lab;
}

json control(const rctest::Lab& lab, const json& request) {
  auto r = rc::faults::labswitchRequest(lab.switchControl(), request);
  if (!r) FAIL("lab switch: " << r.error().message);
  return *r;
}

// Every lab link is up: each host's data0, and every switch port and inter-switch link.
void checkLinksUp(const rctest::Lab& lab) {
  rctest::checkEverythingReverted(lab);
  // Named: a range-for over a member of a temporary would outlive the temporary.
  json ports = control(lab, {{"cmd", "get_link"}, {"port", "*"}});
  json topology = control(lab, {{"cmd", "topology"}});
  REQUIRE(ports.contains("ports"));
  for (auto& p : ports["ports"]) {
    INFO("switch port " << p.dump());
    CHECK(p["admin_up"] == true);
  }
  for (auto& l : topology["links"]) {
    INFO("switch link " << l.dump());
    CHECK(l["up"] == true);
  }
}

struct Run {
  int code = -1;
  json doc;
  std::string reportDir;  // result.json, report.html, junit.xml
};

// The report page as a browser builds it (headless chromium's DOM), or the page's own text
// where chromium is not installed (said in the log): the charts are inline SVG either way.
std::string renderedReport(const std::string& reportDir) {
  std::string html = reportDir + "/report.html";
  std::string chromium;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(c, X_OK) == 0) chromium = c;
  if (chromium.empty()) {
    std::printf("[lab-playbooks] chromium is not installed: checking the report's HTML as written\n");
    return readFile(html);
  }
  std::string cmd = "timeout 120 '" + chromium +
                    "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                    "--disable-background-networking --disable-component-update --disable-sync --user-data-dir='" +
                    reportDir + "/chromium-profile' --dump-dom 'file://" + html + "' 2>/dev/null";
  std::string dom;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) dom.append(buf, n);
    ::pclose(p);
  }
  return dom;
}

// A series path of CLS in the rendered report that has points (an M and at least one L).
bool seriesDrawn(const std::string& dom, const std::string& cls) {
  auto at = dom.find("<path class=\"counter " + cls + "\" d=\"M");
  return at != std::string::npos && dom.find('L', at) < dom.find('>', at);
}

// Runs playbooks/NAME.toml on LAB into LAB/REPORT and checks what every run must show,
// whatever its verdict: each trial completed with a verdict per expectation, each fault
// applied and reverted, nothing left behind. PLANNED_S is the playbook's length; a run that
// takes far longer is hung, and is killed so that the lab still comes down.
// DURING, if set, runs in this thread while the CLI does (to act on the fabric at a moment the
// CLI's progress lines name); the CLI is waited for once it returns.
// NAME is a shipped playbook's name, or a path (a copy the test wrote); EXTRA goes to `run`.
Run runPlaybook(const rctest::Lab& lab, const std::string& name, const std::string& report,
                int plannedS, const std::function<void(const rctest::Proc&)>& during = {},
                const std::vector<std::string>& extra = {}) {
  std::string playbook = name.find('/') != std::string::npos
                             ? name
                             : rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/" + name + ".toml";
  std::string dir = lab.dir() + "/" + report;
  std::printf("[lab-playbooks] %s: running (about %d s) on %s\n", report.c_str(), plannedS,
              lab.dir().c_str());
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> args = {"run", playbook, "--inventory", lab.inventory(), "--report-dir", dir};
  args.insert(args.end(), extra.begin(), extra.end());
  rctest::Proc p = rctest::spawnCli(lab.dir(), args);
  if (during) during(p);
  Run r;
  r.code = rctest::waitCli(p, std::chrono::seconds(2 * plannedS + 120));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = readFile(p.out), err = readFile(p.err);
  // The CLI's summary (per trial: scores and one ok/FAIL line per expectation) for the log.
  std::printf("[lab-playbooks] %s: exit %d after %.0f s\n", report.c_str(), r.code, took);
  auto summary = out.find("playbook ");
  std::printf("%s", out.substr(summary == std::string::npos ? 0 : summary).c_str());
  std::fflush(stdout);
  INFO("playbook " << name << "\nstdout:\n" << out << "\nstderr (tail):\n"
                   << err.substr(err.size() > 1500 ? err.size() - 1500 : 0));
  REQUIRE(std::filesystem::exists(dir + "/result.json"));
  r.doc = json::parse(readFile(dir + "/result.json"));
  r.reportDir = dir;
  // Not const: operator[] of a const json asserts on a missing key, and an abort would leave
  // the lab to the guardian instead of failing the test.
  json& doc = r.doc;
  // With --baseline, a comparison that fails turns the run's 0 into 1.
  if (std::find(extra.begin(), extra.end(), "--baseline") == extra.end())
    CHECK(doc["outcome"]["exit_code"] == r.code);
  else
    CHECK(doc["outcome"]["exit_code"] <= r.code);
  CHECK(doc["run"]["abort_reason"] == "");

  // A verdict for every expectation of every trial's scenario, and one only.
  std::map<std::string, json> scenarios;
  for (auto& s : doc["playbook"]["scenarios"]) scenarios[s["name"]] = s;
  size_t plannedFaults = 0;
  for (auto& t : doc["plan"]["trials"]) plannedFaults += t["faults"].size();
  REQUIRE(doc["trials"].size() == doc["plan"]["trials"].size());
  // Each trial judges the expectations without a stat; a stat = "median" or "cv" one is judged
  // once over the scenario's repeated trials, under repeatability.
  // A group is "scenario" or "scenario param=value".
  for (auto& g : doc["repeatability"]) {
    const std::string key = g["group"];
    size_t overRepeats = 0;
    for (auto& [scenarioName, sc] : scenarios)
      if (key == scenarioName || key.rfind(scenarioName + " ", 0) == 0)
        for (auto& e : sc["expectations"])
          if (e.contains("stat")) overRepeats++;
    INFO("repeatability group " << key);
    CHECK(g["verdicts"].size() == overRepeats);
  }
  for (auto& t : doc["trials"]) {
    INFO("trial " << t["label"]);
    CHECK(t["completed"] == true);
    CHECK(t["problems"].empty());
    json expected = json::array();
    for (auto& e : scenarios[t["scenario"]]["expectations"])
      if (!e.contains("stat")) expected.push_back(e);
    REQUIRE(t["verdicts"].size() == expected.size());
    for (size_t i = 0; i < expected.size(); i++) {
      json& v = t["verdicts"][i];
      CHECK(v["metric"] == expected[i]["metric"]);
      CHECK(v["scope"] == expected[i]["scope"]);
      CHECK(v["op"] == expected[i]["op"]);
      CHECK(v["passed"].is_boolean());
    }
  }
  // Every planned fault really happened, with both ends timed.
  CHECK(doc["faults"].size() == plannedFaults);
  for (auto& f : doc["faults"]) {
    INFO("fault " << f.dump());
    CHECK(f["error"] == "");
    REQUIRE(f["applied_ns"].is_number_integer());
    REQUIRE(f["reverted_ns"].is_number_integer());
    CHECK(f["reverted_ns"].get<int64_t>() >= f["applied_ns"].get<int64_t>());
  }
  checkLinksUp(lab);
  return r;
}

// The metrics of the expectations that failed, in any trial or over the repeated trials
// ("median(throughput_loss_pct)").
std::set<std::string> failedMetrics(json doc) {
  std::set<std::string> out;
  for (auto& t : doc["trials"])
    for (auto& v : t["verdicts"])
      if (v["passed"] == false) out.insert(v.value("metric", "?"));
  for (auto& g : doc["repeatability"])
    for (auto& v : g["verdicts"])
      if (v["passed"] == false) out.insert(v.value("metric", "?"));
  return out;
}

// The largest value of a job impact score over the run's trials (0 when no trial has one).
double maxImpact(json doc, const char* key) {
  double out = 0;
  for (auto& t : doc["trials"]) {
    json& im = t["job"]["impact"];
    if (im.is_object() && im[key].is_number()) out = std::max(out, im[key].get<double>());
  }
  return out;
}

// The test's side of a playbook's stat = "median" (controller/score/score_trials.cpp): the middle
// value of a group of repeats, an odd count of trials that each has its value.
double medianOf(std::vector<double> v) {
  REQUIRE(v.size() % 2 == 1);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What a run of a shipped playbook must end in. Its bounds were set from repeated runs on a
// quiet lab, with margin over what they measured (bench/playbook_figures.sh and
// bench/playbooks_suite.sh, 4-10 runs each so far; the reason for each bound is the comment
// beside it, issue 21), so on this lab it passes: a run that misses a bound is a failed test,
// on its one run (no retries). Where the test turns a mechanism off (the watchdog, adaptive
// routing) or holds a node down, the playbook must fail, and the test says which metric.
enum class Expect { pass, fail };

// Runs a shipped playbook to its verdict and checks it: it ran, every expectation got a
// verdict that agrees with the exit code, every fault was applied and reverted, nothing was
// left behind, and the verdict is the expected one. Prints one figures line per trial (its own
// band, the switch's load in the fault window) for bench/playbooks_suite.sh to gather.
Run runs(const Topology& topo, const std::string& name, int plannedS, Expect expect, const std::string& report = "",
         const std::function<void(const rctest::Proc&)>& during = {}) {
  auto& lab = labFor(topo);
  const std::string reportName = report.empty() ? name : report;
  Run r = runPlaybook(lab, name, reportName, plannedS, during);
  auto failed = failedMetrics(r.doc);
  const std::string verdict = r.doc["outcome"]["verdict"].get<std::string>();
  std::printf("[lab-playbooks] %s: verdict %s%s\n", name.c_str(), verdict.c_str(),
              failed.empty() ? "" : (" (missed: " + json(failed).dump() + ")").c_str());
  for (auto& t : r.doc["trials"]) {
    auto num = [](const json& o, const char* key) {
      return o.is_object() && o.contains(key) && o[key].is_number() ? o[key].get<double>() : -1.0;
    };
    const json& job = t["job"];
    double base = num(job, "baseline_Bps");
    double low = job.is_object() && job.contains("baseline_band") ? num(job["baseline_band"], "lowest_Bps") : -1;
    const json& fabric = t["fabric"];
    json busy = fabric.is_object() && fabric.contains("switch_busy") ? fabric["switch_busy"] : json();
    std::printf("[lab-figures] %s | %s | own band %.1f%% | switch busy %.1f%% | busiest second %.1f%% | %s\n",
                reportName.c_str(), t["label"].get<std::string>().c_str(),
                base > 0 && low > 0 ? 100 * (1 - low / base) : -1.0, num(busy, "pct"), num(busy, "peak_pct"),
                verdict.c_str());
  }
  std::fflush(stdout);
  CHECK((r.code == 0 || r.code == 1));
  CHECK((r.code == 0) == failed.empty());
  CHECK(r.doc["outcome"]["verdict"] == (r.code == 0 ? "passed" : "failed"));
  INFO("missed: " << json(failed).dump());
  CHECK(r.code == (expect == Expect::pass ? 0 : 1));
  return r;
}

// In NODE's trial of a target sweep, once the CLI's progress line says its fault phase began,
// NODE's switch port is held down for HOLD (beside the playbook's own fault), then brought
// back. False when the CLI ended, or 150 s passed, before that trial's fault phase.
bool holdPortInTrial(const rctest::Lab& lab, const rctest::Proc& p, const std::string& node,
                     std::chrono::milliseconds hold) {
  const std::string trial = "target=" + node + " #1, trial";
  bool begun = false;
  auto until = std::chrono::steady_clock::now() + 150s;
  while (!begun && std::chrono::steady_clock::now() < until && ::waitpid(p.pid, nullptr, WNOHANG) == 0) {
    std::string err = readFile(p.err);
    for (size_t at = err.find(trial); at != std::string::npos; at = err.find(trial, at + 1)) {
      auto eol = err.find('\n', at);
      if (eol != std::string::npos && err.substr(at, eol - at).find("] fault ") != std::string::npos) begun = true;
    }
    if (!begun) std::this_thread::sleep_for(50ms);
  }
  if (!begun) return false;
  std::printf("[lab-playbooks] %s's switch port held down for %.1f s\n", node.c_str(), hold.count() / 1e3);
  std::fflush(stdout);
  REQUIRE(control(lab, {{"cmd", "set_link"}, {"port", node}, {"up", false}})["ok"] == true);
  std::this_thread::sleep_for(hold);
  REQUIRE(control(lab, {{"cmd", "set_link"}, {"port", node}, {"up", true}})["ok"] == true);
  return true;
}

}  // namespace

// The flaps' own size, held against each trial's scored stall and loss (docs/scoring.md, "How the
// scores are checked", link_flap): U is the union of the trial's link_flap down intervals as the
// agents recorded them (the kernel's down and up), N the number of downs. A ring all-reduce stops
// while any of its links is down and moves again at most two capped TCP retransmission timers
// (1 s, TCP_RTO_MAX_MS) after the link is back: the stall lies within [U - 2N bins (a down or up
// inside a bin that still moved), U + N x (2 x 1 s + a bin)], and the loss within B x those
// bounds, widened by the job's own noise over the impact window (B minus its hold floor, times the
// window). "" when every trial holds, else why not.
std::string flapsAgainstTruth(json doc) {
  const double bin = doc["series"]["bin_ns"].get<double>();
  const double timerCap = 1e9;
  std::string out;
  for (auto& t : doc["trials"]) {
    std::vector<std::pair<double, double>> downs;  // [down, up] of every flap of the trial
    for (auto& f : doc["faults"]) {
      if (f["trial"] != t["index"] || f["kind"] != "link_flap") continue;
      double at = -1;
      for (auto& e : f["events"]) {
        if (e["what"] == "down") at = e["t_ns"].get<double>();
        if (e["what"] == "up" && at >= 0) {
          downs.emplace_back(at, e["t_ns"].get<double>());
          at = -1;
        }
      }
    }
    std::sort(downs.begin(), downs.end());
    double u = 0, reach = -1;
    for (auto [a, b] : downs) {
      if (a > reach) u += b - a, reach = b;
      else if (b > reach) u += b - reach, reach = b;
    }
    const double n = double(downs.size());
    json& job = t["job"];
    json& im = job["impact"];
    if (!im.is_object() || n == 0) {
      out += t["label"].get<std::string>() + ": no impact or no flap recorded; ";
      continue;
    }
    const double b = job["baseline_Bps"].get<double>();
    const double holdFloor = job["baseline_band"]["hold_floor_Bps"].get<double>();
    const double window = im["window_to_ns"].get<double>() - im["window_from_ns"].get<double>();
    const double stall = im["stall_ns"].get<double>(), loss = im["loss_bytes"].get<double>();
    const double lo = u - 2 * n * bin, hi = u + n * (2 * timerCap + bin);
    const double noise = std::max(0.0, b - holdFloor) * window / 1e9;
    std::printf("[lab-playbooks] %s: %0.f flaps down %.3f s in all; stall %.3f s (truth %.3f-%.3f s), loss %.1f MB "
                "(truth %.1f-%.1f MB, noise %.1f MB)\n",
                t["label"].get<std::string>().c_str(), n, u / 1e9, stall / 1e9, lo / 1e9, hi / 1e9, loss / 1e6,
                (b * lo / 1e9 - noise) / 1e6, (b * hi / 1e9 + noise) / 1e6, noise / 1e6);
    if (stall < lo || stall > hi) out += t["label"].get<std::string>() + ": stall outside the flaps' truth; ";
    if (loss < b * lo / 1e9 - noise || loss > b * hi / 1e9 + noise)
      out += t["label"].get<std::string>() + ": loss outside the flaps' truth; ";
  }
  std::fflush(stdout);
  return out;
}

TEST_CASE("link-flap-recovery runs on the lab", "[playbooks][one-switch]") {
  Run r = runs(kOneSwitch, "link-flap-recovery", 135, Expect::pass);
  CHECK(maxImpact(r.doc, "loss_bytes") > 0);  // three 500 ms flaps cost the job something
  const std::string why = flapsAgainstTruth(r.doc);
  INFO(why);
  CHECK(why.empty());
}

// One queue counter of the lab switch for PORT's queue PRIO (0 when absent).
double queueCounter(const rctest::Lab& lab, const std::string& port, int prio, const char* key) {
  json c = control(lab, {{"cmd", "counters"}, {"port", port}});
  for (auto& p : c["ports"])
    for (auto& q : p["queues"])
      if (q["queue"] == prio && q[key].is_number()) return q[key].get<double>();
  return 0;
}

// The switch's ground truth for one run of pfc-storm-watchdog: how long it held each victim
// sender (n1, n3) in XOFF on priority 3, i.e. how far the storm on n2's port spread, and
// how often the watchdog fired on n2's queue 3.
struct Spread {
  double xoffN1Ms = 0, xoffN3Ms = 0, wdStorms = 0;
};
Spread spreadOf(const rctest::Lab& lab, const std::function<void()>& run) {
  auto read = [&] {
    return Spread{queueCounter(lab, "n1", 3, "xoff_ns") / 1e6, queueCounter(lab, "n3", 3, "xoff_ns") / 1e6,
                  queueCounter(lab, "n2", 3, "wd_storms")};
  };
  Spread before = read();
  run();
  Spread after = read();
  Spread d{after.xoffN1Ms - before.xoffN1Ms, after.xoffN3Ms - before.xoffN3Ms, after.wdStorms - before.wdStorms};
  std::printf("[lab-playbooks] switch ground truth: n1 held in XOFF %.0f ms, n3 %.0f ms; watchdog storms on n2 %.0f\n",
              d.xoffN1Ms, d.xoffN3Ms, d.wdStorms);
  std::fflush(stdout);
  return d;
}

// The watchdog's timing from the data plane against the switch's own instants: "" when detection
// and restoration each agree within 10 ms, else why not.
std::string watchdogAgreement(json doc) {
  json& t = doc["trials"][0];
  if (t["fabric"]["watchdog"].empty()) return "no watchdog episode in the result";
  json& ep = t["fabric"]["watchdog"][0];
  for (const char* key : {"detect_time_ns", "data_plane_detect_time_ns", "restore_time_ns", "data_plane_restore_time_ns"})
    if (!ep[key].is_number()) return std::string("no ") + key + " in " + ep.dump();
  double sw = ep["detect_time_ns"].get<double>(), dp = ep["data_plane_detect_time_ns"].get<double>();
  double swr = ep["restore_time_ns"].get<double>(), dpr = ep["data_plane_restore_time_ns"].get<double>();
  std::printf("[lab-playbooks] watchdog: detected %.1f ms after the storm began (switch), traffic moved again after "
              "%.1f ms (data plane); restored %.1f ms after it ended (switch), frames delivered to n2 again after "
              "%.1f ms (data plane)\n",
              sw / 1e6, dp / 1e6, swr / 1e6, dpr / 1e6);
  std::fflush(stdout);
  // The data plane's detection is where the job's stall ends in its series, a bin boundary:
  // known to one bin, so it agrees within a bin and 10 ms more (the job's threads on a host
  // that took gaps of up to 20 ms from a core on 2026-11-29: 11.4 ms in one of 5 suite runs).
  // Its restoration is a frame's instant at the switch, like the switch's own: 10 ms.
  double bin = doc["series"]["bin_ns"].get<double>();
  if (std::abs(sw - dp) > bin + 10e6)
    return "detection: data plane " + std::to_string((dp - sw) / 1e6) + " ms from the switch (allowed: one " +
           std::to_string(bin / 1e6) + " ms bin + 10 ms)";
  if (std::abs(swr - dpr) > 10e6)
    return "restoration: data plane " + std::to_string((dpr - swr) / 1e6) + " ms from the switch";
  return "";
}

TEST_CASE("pfc-storm-watchdog: the watchdog shortens the victim's stall", "[playbooks][one-switch]") {
  Run on;
  Spread withWdSpread = spreadOf(labFor(kOneSwitch), [&] { on = runs(kOneSwitch, "pfc-storm-watchdog", 30, Expect::pass); });
  // The condition the scenario needs happened: the storm spread to the senders (UDP traffic
  // towards n2 does not back off), and the watchdog fired and cut it.
  CHECK(withWdSpread.xoffN1Ms + withWdSpread.xoffN3Ms > 0);
  CHECK(withWdSpread.wdStorms >= 1);
  // The result carries the fabric's evidence: the storm on the wire and the watchdog's own
  // instants; the data plane's views of detection (the victim's traffic moving again, known to
  // one bin of its series) and of restoration (the first frame delivered to the stuck host after
  // the storm) agree with the switch's within 10 ms (detection: plus that bin), on the one run
  // (issue 21: no retries; a job thread the 2-core machine schedules late was seen once in ten
  // runs at load 12, never on a quiet lab).
  std::string why = watchdogAgreement(on.doc);
  INFO(why);
  CHECK(why.empty());
  {
    // The report draws the storm's pause frames beside the throughput, with the deltas.
    std::string dom = renderedReport(on.reportDir);
    CHECK(seriesDrawn(dom, "pfc"));
    CHECK(dom.find("<table class=\"fabric\">") != std::string::npos);
    CHECK(dom.find("frames delivered to n2 again after") != std::string::npos);
    json& t = on.doc["trials"][0];
    // The scenario's conditions (storm on the wire, pause spread to the senders) were met.
    CHECK(t["condition"]["reached"] == true);
    CHECK(t["condition"]["checks"].size() == 2);
    CHECK(t["job"]["fabric"]["pause_frames"].get<double>() > 0);
    CHECK(t["job"]["fabric"]["pause_spread_time"].get<double>() > 0);
  }
  // Without the watchdog the pause spreads to the victim job's senders for the whole storm.
  auto& lab = labFor(kOneSwitch);
  json off = {{"cmd", "set_watchdog"}, {"port", "*"}, {"priority", 3}, {"enabled", false}};
  REQUIRE(control(lab, off)["ok"] == true);
  struct Restore {
    const rctest::Lab& lab;
    ~Restore() {
      (void)rc::faults::labswitchRequest(
          lab.switchControl(),
          {{"cmd", "set_watchdog"}, {"port", "*"}, {"priority", 3}, {"enabled", true}});
    }
  } restore{lab};
  Run r;
  Spread offSpread =
      spreadOf(lab, [&] { r = runs(kOneSwitch, "pfc-storm-watchdog", 30, Expect::fail, "pfc-storm-watchdog-off"); });
  // Without the watchdog both senders stay paused for most of the 3 s storm, and it never fires.
  CHECK(offSpread.xoffN1Ms > 1000);
  CHECK(offSpread.xoffN3Ms > 1000);
  CHECK(offSpread.wdStorms == 0);
  // ... and the report says the watchdog never fired.
  REQUIRE(r.doc["trials"][0]["fabric"]["watchdog"].size() >= 1);
  CHECK(r.doc["trials"][0]["fabric"]["watchdog"][0]["detect_ns"].is_null());
  double withWd = maxImpact(on.doc, "longest_stall_ns"), without = maxImpact(r.doc, "longest_stall_ns");
  std::printf("[lab-playbooks] longest stall: %.0f ms with the watchdog, %.0f ms without\n", withWd / 1e6,
              without / 1e6);
  CHECK(without > 2 * withWd);
  CHECK(failedMetrics(r.doc).count("longest_stall") == 1);  // 3 s of storm against a 400 ms bound
}

// noise-floor (a noop: no cost, no impact, recovery 0 within the stated uncertainty, two trials
// of three) runs in the truth suite, beside the truth it is held to (tests/test_truth.cpp).

TEST_CASE("game-day runs on the lab", "[playbooks][one-switch]") {
  Run r = runs(kOneSwitchSlow, "game-day", 195, Expect::pass);
  CHECK(maxImpact(r.doc, "loss_bytes") > 0);
  const std::string why = flapsAgainstTruth(r.doc);
  INFO(why);
  CHECK(why.empty());
}

// The incast's ground truth: the switch meters its flows into the receiver, so the result says
// when its last frame left the switch. Returns "" when the job's recovery mark agrees with that
// instant within the stated uncertainty, else why not.
std::string incastAgreement(json doc) {
  json& t = doc["trials"][0];
  json wire;
  for (auto& w : t["fabric"]["fault_windows"])
    if (w.contains("wire")) wire = w["wire"];
  if (!wire.is_object()) return "no wire evidence in the result";
  if (!wire["last_ns"].is_number()) return "the incast still flowed when the trial ended";
  json& im = t["job"]["impact"];
  if (!im.is_object() || !im["recovered_at_ns"].is_number()) return "the job did not recover";
  double last = wire["last_ns"].get<double>(), end = t["fault_end_ns"].get<double>();
  double at = im["recovered_at_ns"].get<double>(), pm = im["uncertainty_ns"].get<double>();
  std::printf("[lab-playbooks] incast: last frame on the wire %+.1f ms from the revert; recovery mark %+.1f ms "
              "from it (uncertainty %.0f ms)\n", (last - end) / 1e6, (at - last) / 1e6, pm / 1e6);
  std::fflush(stdout);
  // Both directions. The incast flows until its revert and stops with it: its last frame on
  // the wire lies within 100 ms of the revert, on either side (a CI run: 4.4 ms after). And the
  // job's recovery mark agrees with that last frame itself, before or after it, within the
  // stated uncertainty (the revert instant does not stand in for the wire).
  if (last > end + 100e6) return "incast traffic on the wire " + std::to_string((last - end) / 1e6) + " ms after the revert";
  if (last < end - 100e6)
    return "the incast left the wire " + std::to_string((end - last) / 1e6) + " ms before its revert";
  if (std::abs(at - last) > pm)
    return "recovery mark " + std::to_string((at - last) / 1e6) + " ms from the wire's last frame, beyond +-" +
           std::to_string(pm / 1e6) + " ms";
  return "";
}

TEST_CASE("acceptance-suite runs on the lab, and passes", "[playbooks][one-switch]") {
  // The shipped acceptance playbook passes on the lab (issue 13), on its one run (issue 21).
  Run r = runs(kOneSwitchAcceptance, "acceptance-suite", 96, Expect::pass);
  CHECK(r.doc["trials"].size() == 4);
}

TEST_CASE("ecn-shallow: a mild fault is seen, and passes", "[playbooks][one-switch]") {
  // Issue 21's fault the old lab could not resolve: its trials' own bands were 12-29 % deep.
  // One run, no retries: the playbook's bounds (median loss 2-40 %, median recovery within 500 ms) hold on
  // this lab, and the switch's ground truth agrees: n2's RoCE queue marked
  // many times more frames than any other port's.
  // First on its fresh lab, as its figures were taken: right after ecn-threshold-sweep (whose
  // lowest kmins mark the same hosts' flows for a minute) its loss read 17-27 % (one run,
  // 2026-11-28) against 7-18 % in 30 trials and 12-18 % fresh.
  // The loss is judged on the median of the 3 trials, as the playbook judges it (stat =
  // "median"): one trial of three that catches a host hiccup does not decide it. The switch's
  // ground truth is deterministic and holds in every trial.
  Run r = runs(kOneSwitchSplit, "ecn-shallow", 66, Expect::pass);
  REQUIRE(r.doc["trials"].size() == 3);
  std::vector<double> losses;
  for (const auto& t : r.doc["trials"]) {
    const json& im = t["job"]["impact"];
    REQUIRE(im.is_object());
    double marksN2 = 0, marksOther = 0;
    for (const auto& d : t["fabric"]["deltas"])
      if (d["queue"] == 3) (d["port"] == "n2" ? marksN2 : marksOther) += d["ecn_marked"].get<double>();
    const double loss = im["loss_pct"].get<double>();
    std::printf("[lab-playbooks] ecn-shallow: loss %.1f%% of the baseline; n2's queue marked %.0f frames, "
                "the other ports' %.0f\n", loss, marksN2, marksOther);
    std::fflush(stdout);
    losses.push_back(loss);
    CHECK(marksN2 >= 1000);
    CHECK(marksN2 > 5 * marksOther);
  }
  const double median = medianOf(losses);
  std::printf("[lab-playbooks] ecn-shallow: median loss %.1f%%\n", median);
  CHECK(median > 2);  // above a noop's median (0-1.8 % in noise-floor's runs on a quiet host)
  CHECK(median < 40);
}

TEST_CASE("ecn-threshold-sweep runs on the lab", "[playbooks][one-switch]") {
  // Each kmin three times, judged on the median of its trials (the playbook's stat = "median").
  Run r = runs(kOneSwitchSplit, "ecn-threshold-sweep", 240, Expect::pass);
  REQUIRE(r.doc["trials"].size() == 12);  // 4 kmin values x 3 repeats
  // The sweep acts on the fabric: the higher kmin, the fewer frames the RoCE queue marks. The
  // lowest kmin (100 KiB) must mark more than the highest (800 KiB), and no step up may mark
  // many more than the step before (a quarter more, plus 50 frames, for this lab's swing):
  // each kmin's median of its three trials.
  std::vector<std::pair<std::string, std::vector<double>>> perKmin;  // in the sweep's order
  for (const auto& t : r.doc["trials"]) {
    double m = 0;
    for (const auto& d : t["fabric"]["deltas"])
      if (d["queue"] == 3) m += d["ecn_marked"].get<double>();
    const std::string kmin = t["sweep"]["value"].dump();
    auto it = std::find_if(perKmin.begin(), perKmin.end(), [&](const auto& e) { return e.first == kmin; });
    if (it == perKmin.end()) it = perKmin.insert(perKmin.end(), {kmin, {}});
    it->second.push_back(m);
    std::printf("[lab-playbooks] ecn-threshold-sweep: kmin %s, %.0f frames marked\n", kmin.c_str(), m);
  }
  std::fflush(stdout);
  REQUIRE(perKmin.size() == 4);
  std::vector<std::pair<std::string, double>> marks;
  for (auto& [kmin, ms] : perKmin) {
    REQUIRE(ms.size() == 3);
    marks.push_back({kmin, medianOf(ms)});
  }
  CHECK(marks.front().second > marks.back().second);
  for (size_t i = 1; i < marks.size(); i++) {
    INFO("kmin " << marks[i - 1].first << " marked " << marks[i - 1].second << ", then kmin " << marks[i].first
                 << " marked " << marks[i].second);
    CHECK(marks[i].second <= marks[i - 1].second * 1.25 + 50);
  }
  // The report draws the ECN marks of every trial beside the throughput, with the deltas.
  std::string dom = renderedReport(r.reportDir);
  CHECK(seriesDrawn(dom, "ecn"));
  CHECK(dom.find("<table class=\"fabric\">") != std::string::npos);
}

TEST_CASE("incast runs on the lab, and its recovery agrees with the switch's ground truth", "[playbooks][one-switch]") {
  // One run, no retries (issue 21): it passes, and agrees with the wire.
  Run r = runs(kOneSwitchIncast, "incast", 30, Expect::pass);
  std::string why = incastAgreement(r.doc);
  CHECK(maxImpact(r.doc, "loss_bytes") > 0);  // 8 flows into n1 take bandwidth from the job
  // The switch's own load is evidence in the result (see kOneSwitchIncast).
  const json& busy = r.doc["trials"][0]["fabric"]["switch_busy"];
  REQUIRE(busy.is_object());
  std::printf("[lab-playbooks] incast: lab switch busy %.0f%% of the fault window, busiest second %.0f%%\n",
              busy["pct"].get<double>(), busy["peak_pct"].get<double>());
  std::fflush(stdout);
  INFO(why);
  CHECK(why.empty());
}

TEST_CASE("adaptive-routing: adaptive routing stalls less than ECMP", "[playbooks][leaf-spine]") {
  auto& lab = labFor(kLeafSpineAr);
  REQUIRE(control(lab, {{"cmd", "get_routing"}})["mode"] == "adaptive");
  Run ar = runs(kLeafSpineAr, "adaptive-routing", 56, Expect::pass);
  // The same fabric with ECMP: flows hashed onto the dead uplink are lost until routing
  // converges, and the job stalls for longer than the playbook allows.
  REQUIRE(control(lab, {{"cmd", "set_routing"}, {"mode", "ecmp"}})["ok"] == true);
  Run ecmp = runs(kLeafSpineAr, "adaptive-routing", 56, Expect::fail, "adaptive-routing-ecmp");
  double lossAr = maxImpact(ar.doc, "loss_pct"), lossEcmp = maxImpact(ecmp.doc, "loss_pct");
  double stallAr = maxImpact(ar.doc, "longest_stall_ns"), stallEcmp = maxImpact(ecmp.doc, "longest_stall_ns");
  std::printf("[lab-playbooks] uplink down: loss %.2f%% adaptive, %.2f%% ECMP; longest stall %.0f ms, %.0f ms\n",
              lossAr, lossEcmp, stallAr / 1e6, stallEcmp / 1e6);
  // What the mechanism changes is the stall: ECMP blackholes the flows hashed onto the dead
  // uplink until routing converges (500 ms in the lab), adaptive routing moves them at once.
  // The longest stall shows that on every run (lab runs: 10-20 ms against 540-710 ms). The
  // loss is printed, not compared: over the 5 s fault window a 0.6 s stall is ~12% of the
  // job, less than this 2-core lab's own swing (a CI run measured 17.5% loss with adaptive
  // routing and no stall over 200 ms, and an ECMP trial with a 620 ms stall measured 0%).
  CHECK(stallEcmp > stallAr);
  CHECK(failedMetrics(ecmp.doc).count("longest_stall") == 1);
}

TEST_CASE("cluster-acceptance: a target sweep over every node names the one that failed, alone",
          "[playbooks][leaf-spine]") {
  auto& lab = labFor(kLeafSpine);
  // n3's link comes back late: in n3's own trial, once its fault phase began, its switch port
  // is held down for 4 s beside the playbook's 1 s flap of its NIC. Every other node gets the
  // 1 s flap only.
  bool held = false;
  auto holdN3 = [&](const rctest::Proc& p) { held = holdPortInTrial(lab, p, "n3", 4s); };
  Run r = runs(kLeafSpine, "cluster-acceptance", 62, Expect::fail, "", holdN3);
  REQUIRE(held);
  REQUIRE(r.doc.contains("targets"));
  const json& rows = r.doc["targets"];
  std::set<std::string> targets;
  for (auto& row : rows) targets.insert(row["target"].get<std::string>());
  CHECK(targets == std::set<std::string>{"n1", "n2", "n3", "n4"});  // one row per node
  REQUIRE(rows.size() == 4);
  // n3 fails, by name, first; the others pass (one re-run of the comparison is not needed:
  // a 1 s flap recovers in about 1 s against bounds of 2.5 s and 3 s).
  CHECK(rows[0]["target"] == "n3");
  CHECK(rows[0]["verdict"] == "failed");
  for (size_t i = 1; i < rows.size(); i++) {
    INFO("target " << rows[i].dump());
    CHECK(rows[i]["verdict"] == "passed");
  }
  // The terminal summary and the HTML page open their table on it too.
  CHECK_THAT(rc::controller::renderText(r.doc), Catch::Contains("targets: 3 of 4 passed; not passed: n3"));
  CHECK_THAT(readFile(r.reportDir + "/report.html"), Catch::Contains("<table class=\"targets\">"));
  std::string text;
  for (auto& row : rows) text += row["target"].get<std::string>() + " " + row["verdict"].get<std::string>() + "; ";
  std::printf("[lab-playbooks] cluster-acceptance targets: %s\n", text.c_str());
}

namespace {

// `rdmachaos ARGS...` on LAB, for a minute at most: its exit code, and its output for the log.
int cli(const rctest::Lab& lab, const std::vector<std::string>& args, std::string* out = nullptr) {
  rctest::Proc p = rctest::spawnCli(lab.dir(), args);
  int rc = rctest::waitCli(p, 60s);
  std::string text = readFile(p.out), err = readFile(p.err);
  std::printf("[lab-playbooks] rdmachaos %s: exit %d\n%s%s", args[0].c_str(), rc, text.c_str(), err.c_str());
  std::fflush(stdout);
  if (out) *out = text + err;
  return rc;
}

// The target sweep's "vs baseline" verdict of each target in a comparison's JSON.
std::map<std::string, std::string> verdictsVsBaseline(const json& cmp) {
  std::map<std::string, std::string> out;
  for (const auto& r : cmp.value("targets", json::array()))
    out[r["target"].get<std::string>()] = r["vs_baseline"].value("verdict", "?");
  return out;
}

}  // namespace

TEST_CASE("cluster-acceptance against a golden baseline of three runs: the node held down longer is worse, alone",
          "[playbooks][leaf-spine][.baseline]") {
  auto& lab = labFor(kLeafSpine);
  // The shipped playbook, shortened for a test (trials of 9.5 s instead of 15 s; 38 s a run):
  // five runs of it are the whole case.
  std::string body = readFile(rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/cluster-acceptance.toml");
  auto replace = [&](const std::string& from, const std::string& to) {
    auto at = body.find(from);
    REQUIRE(at != std::string::npos);
    body.replace(at, from.size(), to);
  };
  replace("warmup = \"2s\"", "warmup = \"1500ms\"");
  replace("name = \"baseline\"\nduration = \"6s\"", "name = \"baseline\"\nduration = \"3500ms\"");
  replace("name = \"fault\"\nduration = \"3s\"", "name = \"fault\"\nduration = \"2500ms\"");
  replace("name = \"recovery\"\nduration = \"6s\"", "name = \"recovery\"\nduration = \"3500ms\"");
  replace("for = \"3s\"", "for = \"2s\"");
  const std::string playbook = lab.dir() + "/cluster-acceptance-short.toml";
  std::ofstream(playbook) << body;
  const int plannedS = 40;

  // The golden baseline: three runs of the lab as it is, merged.
  std::vector<std::string> merge = {"baseline", "merge"};
  for (int i = 1; i <= 3; i++) {
    Run g = runPlaybook(lab, playbook, "golden-" + std::to_string(i), plannedS);
    CHECK((g.code == 0 || g.code == 1));
    merge.push_back(g.reportDir + "/result.json");
  }
  const std::string golden = lab.dir() + "/golden.json";
  merge.insert(merge.end(), {"-o", golden});
  REQUIRE(cli(lab, merge) == 0);
  REQUIRE(json::parse(readFile(golden))["runs"] == 3);

  // n3's switch port held down 3 s in its trial (the others: the playbook's 1 s flap alone),
  // run with --baseline: its table says n3 is worse, and only n3. One run, no second try: the
  // other targets are judged against their peers' golden values too (the lab's recoveries
  // spread from 0.51 to 1.03 s; docs/acceptance.md, "Peers in a target sweep").
  bool held = false;
  Run r = runPlaybook(
      lab, playbook, "held-n3", plannedS, [&](const rctest::Proc& p) { held = holdPortInTrial(lab, p, "n3", 3s); },
      {"--baseline", golden});
  REQUIRE(held);
  std::map<std::string, std::string> vs;
  for (const auto& row : r.doc["targets"]) vs[row["target"].get<std::string>()] = row["vs_baseline"]["verdict"];
  CHECK(r.code == 1);
  INFO("result.json targets: " << r.doc["targets"].dump(2));
  CHECK(vs.size() == 4);
  CHECK(vs["n3"] == "worse");
  CHECK(r.doc["targets"][0]["target"] == "n3");  // failures first
  for (const char* n : {"n1", "n2", "n4"}) {
    INFO("target " << n);
    CHECK(vs[n] != "worse");
    CHECK(vs[n] != "missing in result");
  }
  CHECK_THAT(readFile(r.reportDir + "/report.html"), Catch::Contains("<th>vs baseline</th>"));
  CHECK_THAT(rc::controller::renderText(r.doc), Catch::Contains("; worse than the baseline: n3\n"));

  // compare of the same: exit 1, n3 alone worse, in the table and in the rows.
  const std::string heldCmp = lab.dir() + "/compare-held.json";
  CHECK(cli(lab, {"compare", golden, r.reportDir + "/result.json", "--json", heldCmp}) == 1);
  json cmp = json::parse(readFile(heldCmp));
  CHECK(verdictsVsBaseline(cmp) == vs);
  std::set<std::string> worseTrials;
  for (const auto& row : cmp["rows"])
    if (row["verdict"] == "worse") worseTrials.insert(row["trial"].get<std::string>());
  std::string n3Label;
  for (const auto& row : cmp["targets"])
    if (row["target"] == "n3") n3Label = row["label"];
  CHECK(worseTrials == std::set<std::string>{n3Label});

  // Nothing changed: every node the same within noise, exit 0 (one run).
  Run u = runPlaybook(lab, playbook, "unchanged", plannedS);
  const std::string cmpPath = lab.dir() + "/compare-unchanged.json";
  int rc = cli(lab, {"compare", golden, u.reportDir + "/result.json", "--json", cmpPath});
  json same = json::parse(readFile(cmpPath));
  auto verdicts = verdictsVsBaseline(same);
  INFO("targets vs baseline: " << json(verdicts).dump());
  CHECK(verdicts.size() == 4);
  for (const auto& [node, v] : verdicts) {
    INFO("target " << node);
    CHECK(v == "same within noise");
  }
  CHECK(rc == 0);
  CHECK(same["outcome"]["worse"] == 0);
}

// `rdmachaos search` on the lab: search-flap-boundary's bisection over the flap's `down`, then
// its reproducer run on its own with `rdmachaos run`.
namespace search_lab {

// Runs `rdmachaos ARGS` in the lab's directory, up to LIMIT; its stdout and stderr.
int cli(const rctest::Lab& lab, const std::vector<std::string>& args, std::chrono::seconds limit, std::string& out,
        std::string& err) {
  rctest::Proc p = rctest::spawnCli(lab.dir(), args);
  int rc = rctest::waitCli(p, limit);
  out = readFile(p.out);
  err = readFile(p.err);
  return rc;
}

// Every trial the search kept, one line each: where, the metric and its uncertainty.
void printPoints(const json& doc) {
  for (const auto& p : doc["points"]) {
    std::string ms;
    for (const auto& m : p["measurements"]) ms += " " + std::to_string(m["value"].get<double>() / 1e9);
    std::printf("[lab-playbooks] search point %s: %s s (mean %.3f ± %.3f s) %s\n", p["text"].dump().c_str(), ms.c_str(),
                p["mean"].get<double>() / 1e9, p["uncertainty"].get<double>() / 1e9,
                p.value("verdict", std::string()).c_str());
  }
  std::fflush(stdout);
}

}  // namespace search_lab

TEST_CASE("search-flap-boundary: the search finds an interval, and its reproducer fails as it said",
          "[playbooks][one-switch][search]") {
  using namespace search_lab;
  rctest::Lab& lab = labFor(kOneSwitch);
  const auto started = std::chrono::steady_clock::now();
  const std::string playbook = rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/search-flap-boundary.toml";
  const std::string out = lab.dir() + "/search-flap";
  std::string so, se;
  int rc = cli(lab, {"search", playbook, "--inventory", lab.inventory(), "--out", out}, 300s, so, se);
  INFO("stdout:\n" << so << "\nstderr:\n" << se);
  std::printf("%s", so.c_str());
  REQUIRE(rc == 0);
  json doc = json::parse(readFile(out + "/result.json"));
  printPoints(doc);
  const json& oc = doc["outcome"];
  REQUIRE(oc["outcome"] == "boundary");
  const double pass = oc["last_pass"]["value"].get<double>(), failAt = oc["first_fail"]["value"].get<double>();
  CHECK(pass < failAt);
  // Every point on the failing side of the interval failed, every one on the other passed (or
  // stayed within the noise): the record agrees with the interval it reports.
  for (const auto& p : doc["points"]) {
    const double v = p["values"]["steps.flap.down"].get<double>();
    const std::string verdict = p["verdict"];
    if (verdict == "fail") CHECK(v >= failAt);
    if (verdict == "pass") CHECK(v <= pass);
  }
  CHECK(doc["record"]["trials"].size() <= 8);  // the budget
  // The record on disk is the one result.json carries: a resume would replay it all.
  CHECK(json::parse(readFile(out + "/search.json"))["record"] == doc["record"]);
  checkLinksUp(lab);

  // The reproducer: a plain playbook at the fail end, accepted by validate and failing `run`
  // on the expectation the search judged.
  const std::string reproducer = out + "/reproducer.toml";
  REQUIRE(doc["reproducer"] == reproducer);
  REQUIRE(cli(lab, {"validate", reproducer}, 30s, so, se) == 0);
  const std::string reports = lab.dir() + "/search-flap-reproducer";
  rc = cli(lab, {"run", reproducer, "--inventory", lab.inventory(), "--report-dir", reports}, 120s, so, se);
  INFO("reproducer stdout:\n" << so << "\nstderr:\n" << se);
  CHECK(rc == 1);
  json run = json::parse(readFile(reports + "/result.json"));
  REQUIRE(run["trials"].size() == 1);
  const json& trial = run["trials"][0];
  bool judged = false, pinned = false;
  for (const auto& f : run["faults"])
    if (f["step"] == "flap") {
      pinned = true;
      CHECK(f["params"]["down"].get<double>() == failAt);
    }
  CHECK(pinned);
  for (const auto& v : trial["verdicts"])
    if (v["metric"] == "longest_stall") {
      judged = true;
      CHECK_FALSE(v["passed"].get<bool>());
      std::printf("[lab-playbooks] reproducer at %s: %s\n", oc["first_fail"]["text"].get<std::string>().c_str(),
                  v.value("measured_text", std::string()).c_str());
    }
  CHECK(judged);
  checkLinksUp(lab);

  // Resumed from its record, the finished search runs nothing and says the same.
  const auto resumed = std::chrono::steady_clock::now();
  REQUIRE(cli(lab, {"search", playbook, "--inventory", lab.inventory(), "--out", out, "--resume"}, 60s, so, se) == 0);
  CHECK(std::chrono::steady_clock::now() - resumed < 20s);
  json again = json::parse(readFile(out + "/result.json"));
  CHECK(again["outcome"] == doc["outcome"]);
  CHECK(again["record"] == doc["record"]);

  // A larger bound moves the boundary up: the flap that broke 2 s holds 3 s, and the range's
  // other end breaks it, so the 3 s boundary lies above the 2 s one (the ends only: cheap).
  std::string text = readFile(playbook);
  auto swap = [&](const std::string& from, const std::string& to) {
    auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  };
  swap("bound = \"2s\"", "bound = \"3s\"");
  swap("budget = 8", "budget = 2");
  swap("range = [\"200ms\", \"3s\"]", "range = [\"" + oc["first_fail"]["text"].get<std::string>() + "\", \"3s\"]");
  const std::string wider = lab.dir() + "/search-flap-3s.toml", out3 = lab.dir() + "/search-flap-3s";
  std::ofstream(wider) << text;
  rc = cli(lab, {"search", wider, "--inventory", lab.inventory(), "--out", out3}, 180s, so, se);
  INFO("3 s search stdout:\n" << so << "\nstderr:\n" << se);
  std::printf("%s", so.c_str());
  REQUIRE(rc == 0);
  json doc3 = json::parse(readFile(out3 + "/result.json"));
  printPoints(doc3);
  REQUIRE(doc3["outcome"]["outcome"] == "boundary");
  CHECK(doc3["outcome"]["last_pass"]["value"].get<double>() >= failAt);
  checkLinksUp(lab);
  std::printf("[lab-playbooks] search and reproducer: %.0f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  std::fflush(stdout);
}
