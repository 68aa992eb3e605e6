// The shipped lab playbooks run from the repository on the namespace lab, each to its verdict:
// exit 0 with a verdict for every expectation, every fault applied and reverted, and nothing
// left behind (links up, journals empty). adaptive-routing also runs with ECMP and
// pfc-storm-watchdog without the watchdog, where each must fail: the playbooks measure the
// mechanism they are about, not the lab's luck.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

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
};
// link-flap-recovery, pfc-storm-watchdog, ecn-threshold-sweep, game-day, incast and
// acceptance-suite: one switch.
const Topology kOneSwitch{"one switch, 3 nodes", 3, 0, 0, "ecmp"};
// adaptive-routing: two paths between the leaves, so that one uplink can go down.
const Topology kLeafSpine{"leaf-spine 2x2, 4 nodes, adaptive routing", 4, 2, 2, "adaptive"};

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
};

// Runs playbooks/NAME.toml on LAB into LAB/REPORT and checks what every run must show,
// whatever its verdict: each trial completed with a verdict per expectation, each fault
// applied and reverted, nothing left behind. PLANNED_S is the playbook's length; a run that
// takes far longer is hung, and is killed so that the lab still comes down.
Run runPlaybook(const rctest::Lab& lab, const std::string& name, const std::string& report,
                int plannedS) {
  std::string playbook = rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/" + name + ".toml";
  std::string dir = lab.dir() + "/" + report;
  std::printf("[lab-playbooks] %s: running (about %d s) on %s\n", report.c_str(), plannedS,
              lab.dir().c_str());
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  rctest::Proc p = rctest::spawnCli(
      lab.dir(), {"run", playbook, "--inventory", lab.inventory(), "--report-dir", dir});
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
  // Not const: operator[] of a const json asserts on a missing key, and an abort would leave
  // the lab to the guardian instead of failing the test.
  json& doc = r.doc;
  CHECK(doc["outcome"]["exit_code"] == r.code);
  CHECK(doc["run"]["abort_reason"] == "");

  // A verdict for every expectation of every trial's scenario, and one only.
  std::map<std::string, json> scenarios;
  for (auto& s : doc["playbook"]["scenarios"]) scenarios[s["name"]] = s;
  size_t plannedFaults = 0;
  for (auto& t : doc["plan"]["trials"]) plannedFaults += t["faults"].size();
  REQUIRE(doc["trials"].size() == doc["plan"]["trials"].size());
  for (auto& t : doc["trials"]) {
    INFO("trial " << t["label"]);
    CHECK(t["completed"] == true);
    CHECK(t["problems"].empty());
    json& expected = scenarios[t["scenario"]]["expectations"];
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

// The metrics of the expectations that failed, in any trial.
std::set<std::string> failedMetrics(json doc) {
  std::set<std::string> out;
  for (auto& t : doc["trials"])
    for (auto& v : t["verdicts"])
      if (v["passed"] == false) out.insert(v.value("metric", "?"));
  return out;
}

void passes(const Topology& topo, const std::string& name, int plannedS) {
  auto& lab = labFor(topo);
  Run r = runPlaybook(lab, name, name, plannedS);
  INFO("failed expectations: " << json(failedMetrics(r.doc)).dump());
  CHECK(r.code == 0);
  CHECK(r.doc["outcome"]["verdict"] == "passed");
}

}  // namespace

TEST_CASE("link-flap-recovery passes on the lab", "[playbooks][one-switch]") {
  passes(kOneSwitch, "link-flap-recovery", 135);
}

TEST_CASE("pfc-storm-watchdog passes with the PFC watchdog and fails without it",
          "[playbooks][one-switch]") {
  passes(kOneSwitch, "pfc-storm-watchdog", 30);
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
  Run r = runPlaybook(lab, "pfc-storm-watchdog", "pfc-storm-watchdog-off", 30);
  CHECK(r.code == 1);
  CHECK(failedMetrics(r.doc).count("longest_stall") == 1);
}

TEST_CASE("ecn-threshold-sweep passes on the lab", "[playbooks][one-switch]") {
  passes(kOneSwitch, "ecn-threshold-sweep", 120);
}

TEST_CASE("game-day passes on the lab", "[playbooks][one-switch]") {
  passes(kOneSwitch, "game-day", 195);
}

TEST_CASE("incast passes on the lab", "[playbooks][one-switch]") {
  passes(kOneSwitch, "incast", 30);
}

TEST_CASE("acceptance-suite passes on the lab", "[playbooks][one-switch]") {
  passes(kOneSwitch, "acceptance-suite", 96);
}

TEST_CASE("adaptive-routing passes with adaptive routing and fails with ECMP",
          "[playbooks][leaf-spine]") {
  auto& lab = labFor(kLeafSpine);
  REQUIRE(control(lab, {{"cmd", "get_routing"}})["mode"] == "adaptive");
  {
    Run r = runPlaybook(lab, "adaptive-routing", "adaptive-routing", 56);
    INFO("failed expectations: " << json(failedMetrics(r.doc)).dump());
    CHECK(r.code == 0);
  }
  // The same fabric with ECMP: flows hashed onto the dead uplink are lost until routing
  // converges, and the job stalls for longer than the playbook allows.
  REQUIRE(control(lab, {{"cmd", "set_routing"}, {"mode", "ecmp"}})["ok"] == true);
  Run r = runPlaybook(lab, "adaptive-routing", "adaptive-routing-ecmp", 56);
  CHECK(r.code == 1);
  CHECK(failedMetrics(r.doc).count("longest_stall") == 1);
}
