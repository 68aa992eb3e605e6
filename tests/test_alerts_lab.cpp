// Game days that score the monitoring: a real Prometheus scrapes the namespace lab's agents
// every second and evaluates the starter rules (deploy/prometheus/rdmachaos-rules.yml) every
// second; a real Alertmanager (group_wait 0) posts to the run's webhook. A link flap must be
// detected within scrape + evaluation + group interval and clear after the revert; an alert no
// rule raises is missed (exit 1, named in the report and JUnit); an alert that fires with no
// fault on is a false alarm; the game-day playbook gets precision and recall over 3 rounds.
// Root, namespaces, prometheus and prometheus-alertmanager (scripts/install-deps); skips with
// 77 and the reason otherwise.
#include <unistd.h>

#include <catch2/catch.hpp>
#include "catch_session.hpp"
#include "test_util.hpp"
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_get.hpp"
#include "monitoring.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

constexpr int kAgentMetricsPort = 9466;
using rctest::kS;

std::string rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The monitoring of a lab: Prometheus scraping every agent (with a `node` label, as
// docs/deploy.md says to) and evaluating the starter rules every second, Alertmanager
// notifying WEBHOOK_PORT on loopback with group_wait 0 and group_interval 1s.
struct Monitoring {
  int promPort = rctest::freeLoopbackPort();
  int amPort = rctest::freeLoopbackPort();
  int webhookPort = rctest::freeLoopbackPort();
  std::unique_ptr<rctest::Alertmanager> am;
  std::unique_ptr<rctest::Prometheus> prom;

  explicit Monitoring(const rctest::Lab& lab) {
    const std::string dir = lab.dir();
    rctest::writeAlertmanagerConfig(dir + "/alertmanager.yml", "127.0.0.1:" + std::to_string(webhookPort));
    std::string targets;
    for (const auto& n : lab.nodes())
      targets += "      - targets: ['" + n.mgmtAddress + ":" + std::to_string(kAgentMetricsPort) +
                 "']\n        labels: {node: '" + n.name + "'}\n";
    // The starter rules as shipped, evaluated every second as on a game day (the file's group
    // interval is 5 s, for sites whose global evaluation interval is Prometheus's 1 m).
    std::string rules = rctest::readFile(rctest::env("RDMACHAOS_SOURCE_DIR") + "/deploy/prometheus/rdmachaos-rules.yml");
    const std::string groupInterval = "    interval: 5s\n";
    REQUIRE(rules.find(groupInterval) != std::string::npos);
    rules.replace(rules.find(groupInterval), groupInterval.size(), "    interval: 1s\n");
    std::ofstream(dir + "/rdmachaos-rules.yml") << rules;
    std::ofstream(dir + "/prometheus.yml")
        << "global:\n"
        << "  scrape_interval: 1s\n"
        << "  scrape_timeout: 900ms\n"
        << "  evaluation_interval: 1s\n"
        << "rule_files: ['" << dir << "/rdmachaos-rules.yml']\n"
        << "alerting:\n"
        << "  alertmanagers:\n"
        << "    - static_configs: [{targets: ['127.0.0.1:" << amPort << "']}]\n"
        << "scrape_configs:\n"
        << "  - job_name: rdmachaos-agent\n"
        << "    static_configs:\n"
        << targets;
    am = std::make_unique<rctest::Alertmanager>(dir, dir + "/alertmanager.yml", amPort);
    prom = std::make_unique<rctest::Prometheus>(dir, dir + "/prometheus.yml", promPort);
    {
      INFO(rctest::readFile(am->log()));
      REQUIRE(rctest::waitReady([&] { return am->ready(); }, 60s));
    }
    INFO(rctest::readFile(prom->log()));
    REQUIRE(rctest::waitReady([&] { return prom->ready(); }, 90s));
    // Every agent's link gauge is scraped before a run starts, and the rules are loaded.
    const size_t nodes = lab.nodes().size();
    REQUIRE(rctest::waitReady([&] { return prom->query("rdmachaos_link_up == 1").size() == nodes; }, 60s));
    REQUIRE(rctest::waitReady(
        [&] {
          auto r = rctest::httpGet("127.0.0.1", promPort, "/api/v1/rules?type=alert");
          return r.status == 200 && r.body.find("RdmaLinkDown") != std::string::npos;
        },
        30s));
  }

  // An alert posted straight to Alertmanager, as a rule outside rdmachaos's set would raise it.
  void postAlert(const json& labels, std::chrono::seconds lasting) const {
    auto now = std::chrono::system_clock::now();
    json body = json::array({{{"labels", labels},
                              {"annotations", {{"summary", "posted by the test"}}},
                              {"startsAt", rfc3339(now)},
                              {"endsAt", rfc3339(now + lasting)}}});
    auto r = rctest::httpPost("127.0.0.1", amPort, "/api/v2/alerts", body.dump());
    INFO("POST /api/v2/alerts: " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
  }

  std::vector<std::string> sourceArgs() const {
    return {"--alertmanager-webhook", "127.0.0.1:" + std::to_string(webhookPort), "--prometheus",
            "http://127.0.0.1:" + std::to_string(promPort)};
  }
};

const char* kPlaybook = R"(
name = "detect-lab"
[workload]
kind = "allreduce"
size = "1MiB"
nodes = "all"
[scoring]
warmup = "1s"
smooth = "250ms"
epsilon = 0.3
[detection]
false_alarm_margin = "3s"
[[phase]]
name = "baseline"
duration = "14s"
[[phase]]
name = "fault"
duration = "16s"
[[step]]
name = "flap"
kind = "link_flap"
target = "n2"
phase = "fault"
at = "1s"
for = "5s"
params = { down = "4s" }
[[step]]
name = "quiet"
kind = "noop"
target = "n3"
phase = "fault"
at = "8s"
for = "3s"
[[detect]]
step = "flap"
alert = { alertname = "RdmaLinkDown", node = "{target}" }
within = "10s"
clears_within = "10s"
[[detect]]
step = "flap"
alert = { alertname = "RdmaNoSuchAlert", node = "{target}" }
within = "5s"
)";

}  // namespace

TEST_CASE("a flap is detected by the real monitoring; a missing alert fails; a stray alert is a false alarm") {
  rc::lab::UpOptions o;
  o.nodes = 3;
  o.agentMetricsPort = kAgentMetricsPort;
  rctest::Lab lab("rc-alerts", o);
  Monitoring mon(lab);

  std::string playbook = lab.dir() + "/detect-lab.toml";
  std::ofstream(playbook) << kPlaybook;
  std::vector<std::string> args = {"run", playbook, "--inventory", lab.inventory(), "--report-dir",
                                   lab.dir() + "/report"};
  for (auto& a : mon.sourceArgs()) args.push_back(a);
  rctest::Proc p = rctest::spawnCli(lab.dir(), args);
  // A stray alert in the baseline, well before the fault (at 15 s) and its 3 s margin.
  std::this_thread::sleep_for(5s);
  mon.postAlert({{"alertname", "RdmaLinkDown"}, {"node", "n3"}, {"interface", "data0"}}, 2s);
  // A broken post to the run's webhook: refused with its reason, and the run goes on.
  auto bad = rctest::httpPost("127.0.0.1", mon.webhookPort, "/alerts", "{\"alerts\": [{\"status\": 7}]}");
  CHECK(bad.status == 400);
  int code = rctest::waitCli(p, 240s);
  const std::string out = rctest::readFile(p.out), err = rctest::readFile(p.err);
  INFO(err << out);
  CHECK(code == 1);  // RdmaNoSuchAlert was missed

  json doc = json::parse(rctest::readFile(lab.dir() + "/report/result.json"));
  const json& d = doc["detection"];
  INFO(d.dump(2));
  REQUIRE(d["scored"] == true);
  CHECK(d["timing"]["scrape_interval_ns"] == kS);
  CHECK(d["timing"]["evaluation_interval_ns"] == kS);
  REQUIRE(d["expectations"].size() == 2);
  for (const auto& e : d["expectations"]) {
    if (e["match"]["alertname"] == "RdmaLinkDown") {
      CHECK(e["match"]["node"] == "n2");
      CHECK(e["status"] == "detected");
      // Between 0 and scrape (1 s) + evaluation (1 s) + Alertmanager's group interval (1 s),
      // and the uncertainty says the first two.
      REQUIRE(e["time_to_detect_ns"].is_number());
      CHECK(e["time_to_detect_ns"].get<int64_t>() >= 0);
      CHECK(e["time_to_detect_ns"].get<int64_t>() <= 3 * kS);
      CHECK(e["uncertainty_ns"] == 2 * kS);
      CHECK(e["cleared"] == true);
      REQUIRE(e["time_to_clear_ns"].is_number());
      CHECK(e["time_to_clear_ns"].get<int64_t>() <= 3 * kS);
      CHECK(e["passed"] == true);
    } else {
      CHECK(e["match"]["alertname"] == "RdmaNoSuchAlert");
      CHECK(e["status"] == "missed");
      CHECK(e["passed"] == false);
    }
  }
  // The noop step raised nothing; the stray alert is the one false alarm.
  REQUIRE(d["false_alarms"].size() == 1);
  CHECK(d["false_alarms"][0]["labels"]["node"] == "n3");
  for (const auto& a : d["alerts"])
    if (a["labels"].value("node", "") == "n3") CHECK(a["class"] == "false_alarm");
  CHECK(d["summary"]["detected"] == 1);
  CHECK(d["summary"]["missed"] == 1);
  CHECK(d["summary"]["false_alarms"] == 1);
  CHECK(d["summary"]["precision"] == 0.5);
  REQUIRE(d["errors"].size() == 1);
  CHECK_THAT(d["errors"][0].get<std::string>(), Catch::Contains("alertmanager webhook: "));
  CHECK(d["summary"]["recall"] == 0.5);
  CHECK_THAT(out, Catch::Contains("step flap on n2: RdmaNoSuchAlert{node=\"n2\"}: missed (within 5s)"));
  CHECK_THAT(out, Catch::Contains("FALSE ALARM RdmaLinkDown{interface=\"data0\", node=\"n3\"}"));
  std::string junit = rctest::readFile(lab.dir() + "/report/junit.xml");
  CHECK_THAT(junit, Catch::Contains("RdmaNoSuchAlert"));
  CHECK_THAT(junit, Catch::Contains("type=\"detection\""));
  std::string html = rctest::readFile(lab.dir() + "/report/report.html");
  CHECK_THAT(html, Catch::Contains("<table class=\"detection\">"));
  CHECK_THAT(html, Catch::Contains("alert-mark alert-detected"));
  rctest::checkEverythingReverted(lab);
}

TEST_CASE("the game-day playbook scores its detections over three rounds") {
  rc::lab::UpOptions o;
  o.nodes = 4;
  o.agentMetricsPort = kAgentMetricsPort;
  rctest::Lab lab("rc-gameday", o);
  Monitoring mon(lab);
  std::vector<std::string> args = {"run", rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/game-day.toml",
                                   "--inventory", lab.inventory(), "--report-dir", lab.dir() + "/report"};
  for (auto& a : mon.sourceArgs()) args.push_back(a);
  rctest::Proc p = rctest::spawnCli(lab.dir(), args);
  int code = rctest::waitCli(p, 600s);
  const std::string out = rctest::readFile(p.out);
  INFO(rctest::readFile(p.err) << out);
  CHECK((code == 0 || code == 1));
  json doc = json::parse(rctest::readFile(lab.dir() + "/report/result.json"));
  const json& d = doc["detection"];
  INFO(d.dump(2));
  REQUIRE(d["scored"] == true);
  REQUIRE(d["rounds"].size() == 3);
  for (const auto& r : d["rounds"]) {
    CHECK(r["expected"].get<int>() > 0);
    CHECK(r["precision"].is_number());
    CHECK(r["recall"].is_number());
  }
  CHECK(d["summary"]["recall"].is_number());
  std::printf("[alerts] game-day: %s\n", d["summary"].dump().c_str());
  for (const auto& e : d["expectations"])
    if (e["status"] != "detected")
      std::printf("[alerts] game-day round %d step %s on %s: %s %s %s\n", e["repeat"].get<int>() + 1,
                  e["step"].get<std::string>().c_str(), e["nodes"].dump().c_str(), e["status"].get<std::string>().c_str(),
                  e["expectation"].get<std::string>().c_str(), e["note"].get<std::string>().c_str());
  CHECK_THAT(out, Catch::Contains("round 3: "));
  rctest::checkEverythingReverted(lab);
}

int main(int argc, char* argv[]) {
  if (geteuid() != 0) {
    std::printf("SKIP: the alerts suite runs the namespace lab, which needs root\n");
    return 77;
  }
  for (const char* bin : {rctest::kPrometheusBin, rctest::kAlertmanagerBin})
    if (::access(bin, X_OK) != 0) {
      std::printf("SKIP: %s is not installed; run scripts/install-deps (Debian's prometheus, prometheus-alertmanager)\n",
                  bin);
      return 77;
    }
  return rctest::runCatch(argc, argv);
}
