// A real Prometheus server (Debian's `prometheus`) scrapes a playbook run on the namespace lab
// through `rdmachaos run --metrics`, and every lab agent's own exporter (`[agent] metrics`);
// its HTTP API then returns the series that moved during the fault: the run's active faults
// and job throughput, and the flapped node's agent's active faults. Root, namespaces and the
// prometheus binary (scripts/install-deps); skips with 77 and the reason otherwise.
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include "catch_session.hpp"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_get.hpp"
#include "monitoring.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

using rctest::freeLoopbackPort;
using rctest::Prometheus;
constexpr int kAgentMetricsPort = 9465;

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* kPlaybook = R"(
name = "prometheus-scrape"
[workload]
kind = "allreduce"
size = "1MiB"
nodes = "all"
[scoring]
warmup = "1s"
smooth = "250ms"
epsilon = 0.25
[[phase]]
name = "baseline"
duration = "4s"
[[phase]]
name = "fault"
duration = "6s"
[[step]]
kind = "link_flap"
target = "n2"
phase = "fault"
at = "500ms"
for = "4s"
params = { down = "2s" }
)";

}  // namespace

TEST_CASE("a real Prometheus scrapes a lab run and the agents; its API shows what moved during the fault") {
  rc::lab::UpOptions o;
  o.nodes = 2;
  o.agentMetricsPort = kAgentMetricsPort;
  rctest::Lab lab("rc-prom", o);
  const int runPort = freeLoopbackPort(), promPort = freeLoopbackPort();

  std::string agents;
  for (const auto& n : lab.nodes())
    agents += (agents.empty() ? "'" : ", '") + n.mgmtAddress + ":" + std::to_string(kAgentMetricsPort) + "'";
  std::string config = lab.dir() + "/prometheus.yml";
  std::ofstream(config) << "global:\n"
                        << "  scrape_interval: 250ms\n"
                        << "  scrape_timeout: 200ms\n"
                        << "scrape_configs:\n"
                        << "  - job_name: rdmachaos-run\n"
                        << "    static_configs: [{targets: ['127.0.0.1:" << runPort << "']}]\n"
                        << "  - job_name: rdmachaos-agent\n"
                        << "    static_configs: [{targets: [" << agents << "]}]\n";
  Prometheus prom(lab.dir(), config, promPort);
  auto until = std::chrono::steady_clock::now() + 90s;
  while (!prom.ready() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(200ms);
  INFO(rctest::readFile(prom.log()));
  REQUIRE(prom.ready());
  // Both agents are up as Prometheus sees them before the run starts.
  double agentsUp = 0;
  while (agentsUp < 2 && std::chrono::steady_clock::now() < until) {
    agentsUp = 0;
    for (auto& s : prom.query("up{job=\"rdmachaos-agent\"}")) agentsUp += std::stod(s["value"][1].get<std::string>());
    std::this_thread::sleep_for(250ms);
  }
  REQUIRE(agentsUp == 2);

  std::string playbook = lab.dir() + "/prometheus-scrape.toml";
  std::ofstream(playbook) << kPlaybook;
  const double from = unixNow();
  rctest::Proc p = rctest::spawnCli(lab.dir(), {"run", playbook, "--inventory", lab.inventory(), "--report-dir",
                                                lab.dir() + "/report", "--metrics",
                                                "127.0.0.1:" + std::to_string(runPort)});
  int code = rctest::waitCli(p, 180s);
  INFO(rctest::readFile(p.err));
  REQUIRE((code == 0 || code == 1));
  CHECK_THAT(rctest::readFile(p.err), Catch::Contains("serving the live run's metrics for Prometheus on port"));
  std::this_thread::sleep_for(1s);  // the agents' last values after the fault ended
  const double to = unixNow();

  // The run's own series: the fault came on and went off, and the job's throughput fell
  // while it was on (n2's link was down for 2 s of a 2-node all-reduce).
  json active = prom.range("rdmachaos_faults_active", from, to, 0.25);
  json thr = prom.range("rdmachaos_job_throughput_bits_per_second", from, to, 0.25);
  REQUIRE(active.size() == 1);
  REQUIRE(thr.size() == 1);
  std::map<double, double> on, bps;
  for (auto& v : active[0]["values"]) on[v[0].get<double>()] = std::stod(v[1].get<std::string>());
  for (auto& v : thr[0]["values"]) bps[v[0].get<double>()] = std::stod(v[1].get<std::string>());
  double maxOn = 0, firstOn = -1, lastOn = -1;
  for (auto& [t, v] : on) {
    maxOn = std::max(maxOn, v);
    if (v >= 1 && firstOn < 0) firstOn = t;
    if (v >= 1) lastOn = t;
  }
  CHECK(maxOn == 1);
  CHECK(on.begin()->second == 0);   // off before the fault
  CHECK(on.rbegin()->second == 0);  // and off after it
  double peakBefore = 0, lowDuring = 1e18;
  for (auto& [t, v] : bps) {
    if (firstOn > 0 && t < firstOn) peakBefore = std::max(peakBefore, v);
    if (t >= firstOn && t <= lastOn) lowDuring = std::min(lowDuring, v);
  }
  std::printf("[prometheus] run: fault on for %.2f s in the scrapes; job throughput peak before %.0f Mb/s, "
              "lowest while on %.0f Mb/s\n", lastOn - firstOn, peakBefore / 1e6, lowDuring / 1e6);
  CHECK(peakBefore > 0);
  CHECK(lowDuring < 0.5 * peakBefore);

  // Per node, the phase, the counters and the guardrails are there too.
  CHECK(prom.range("rdmachaos_node_throughput_bits_per_second", from, to, 0.25).size() == 2);
  CHECK(prom.range("rdmachaos_run_phase{phase=\"fault\"}", from, to, 0.25).size() == 1);
  CHECK(prom.range("rdmachaos_node_counter{counter=\"workload_rx_bytes\"}", from, to, 0.25).size() == 2);
  CHECK(prom.range("rdmachaos_run_aborted", from, to, 0.25).size() == 1);

  // The flapped node's agent: one active fault while it was on, none at the end, nothing
  // left in its journal; the other agent had none.
  std::string n2 = lab.node("n2").mgmtAddress + ":" + std::to_string(kAgentMetricsPort);
  json agentActive = prom.range("rdmachaos_agent_faults_active", from, to, 0.25);
  REQUIRE(agentActive.size() == 2);
  for (auto& series : agentActive) {
    double peak = 0, last = -1;
    for (auto& v : series["values"]) {
      peak = std::max(peak, std::stod(v[1].get<std::string>()));
      last = std::stod(v[1].get<std::string>());
    }
    INFO("agent " << series["metric"]["instance"]);
    CHECK(peak == (series["metric"]["instance"] == n2 ? 1 : 0));
    CHECK(last == 0);
  }
  json journal = prom.query("rdmachaos_agent_journal_entries");
  REQUIRE(journal.size() == 2);
  for (auto& s : journal) CHECK(s["value"][1] == "0");
  rctest::checkEverythingReverted(lab);
}

int main(int argc, char* argv[]) {
  if (geteuid() != 0) {
    std::printf("SKIP: the Prometheus test runs the namespace lab, which needs root\n");
    return 77;
  }
  if (::access(rctest::kPrometheusBin, X_OK) != 0) {
    std::printf("SKIP: %s is not installed; run scripts/install-deps (Debian's prometheus)\n", rctest::kPrometheusBin);
    return 77;
  }
  return rctest::runCatch(argc, argv);
}
