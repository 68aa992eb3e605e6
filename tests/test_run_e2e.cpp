// Playbook runs end to end on the namespace lab: quickstart's scores agree with the link's
// real down time; an expectation that cannot hold exits 1 with a JUnit failure; a guardrail
// abort and Ctrl-C exit 2 with every fault reverted and a partial report written; a verbs
// workload on nodes without an RDMA device is refused, naming one, before anything starts.
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_run_e2e {

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using rctest::readFile;

rctest::Lab& sharedLab() {
  static rctest::Lab instance("rc-run", [] {
    rc::lab::UpOptions o;
    o.nodes = 3;
    return o;
  }());
  return instance;
}

struct Run {
  int code = -1;
  std::string out, err;
};

// Runs `rdmachaos run PLAYBOOK` into REPORT; SIGINT after INTERRUPT_AFTER if non-zero.
Run runPlaybook(const std::string& playbook, const std::string& report,
                std::chrono::milliseconds interruptAfter = 0ms, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"run", playbook, "--inventory", sharedLab().inventory(), "--report-dir", report};
  args.insert(args.end(), extra.begin(), extra.end());
  rctest::Proc p = rctest::spawnCli(sharedLab().dir(), args);
  if (interruptAfter > 0ms) {
    std::this_thread::sleep_for(interruptAfter);
    kill(p.pid, SIGINT);
  }
  int code = rctest::waitCli(p, 180s);
  return {code, readFile(p.out), readFile(p.err)};
}

void requireEverythingReverted() { rctest::checkEverythingReverted(sharedLab()); }

std::string writePlaybook(const std::string& name, const std::string& body) {
  std::string path = sharedLab().dir() + "/" + name + ".toml";
  std::ofstream(path) << body;
  return path;
}

const char* kShortRun = R"(
name = "%NAME%"
[workload]
kind = "allreduce"
size = "1MiB"
nodes = "all"
[scoring]
warmup = "1s"
smooth = "250ms"
epsilon = 0.25
%EXTRA%
[[phase]]
name = "baseline"
duration = "4s"
[[phase]]
name = "fault"
duration = "6s"
[[step]]
kind = "link_flap"
target = "n3"
phase = "fault"
at = "500ms"
for = "3s"
params = { down = "1s" }
%EXPECT%
)";

std::string shortRun(const std::string& name, const std::string& extra, const std::string& expect) {
  std::string s = kShortRun;
  auto put = [&](const std::string& key, const std::string& v) { s.replace(s.find(key), key.size(), v); };
  put("%NAME%", name);
  put("%EXTRA%", extra);
  put("%EXPECT%", expect);
  return writePlaybook(name, s);
}

// Whether this kernel caps a socket's retransmission timer as the TCP workload asks it to
// (TCP_RTO_MAX_MS = 1 s, Linux 6.15+; workload/tcp_transport.cpp sets it best effort).
bool kernelCapsRetransmissionTimer() {
#ifndef TCP_RTO_MAX_MS
  constexpr int TCP_RTO_MAX_MS = 44;
#endif
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int ms = 1000;
  const bool ok = ::setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &ms, sizeof ms) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("quickstart: reported impact and recovery agree with the link's real down time") {
  std::string report = sharedLab().dir() + "/quickstart";
  auto r = runPlaybook(rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/quickstart.toml", report);
  INFO(r.err);
  INFO(r.out);
  REQUIRE((r.code == 0 || r.code == 1));  // 1 only if this noisy machine missed a bound
  json doc = json::parse(readFile(report + "/result.json"));
  REQUIRE(doc["faults"].size() == 1);
  const json& f = doc["faults"][0];
  // Ground truth: the kernel-observed down and up of n2's link, on the controller's timeline.
  int64_t down = f["applied_ns"], up = f["reverted_ns"];
  int64_t bin = doc["series"]["bin_ns"];
  int64_t uncertainty = 0;
  for (const auto& c : doc["clocks"]) uncertainty = std::max<int64_t>(uncertainty, c["uncertainty_ns"]);
  // Never early (beyond the clocks' uncertainty), and late by tens of milliseconds at most:
  // the agent's fault thread woke 20-37 ms late under load and ASan on this shared machine; a
  // clock offset applied the wrong way or a schedule that waits on something else is far
  // beyond. Never shorter than asked: both instants are the agent's own (one clock, one
  // offset), and the up is planned from the instant the down took effect (an ASan CI run held
  // 1969.8 ms when it was planned from before the change; 1 ms for the fault's reading of
  // its wall and steady clocks one after the other).
  const int64_t late = down - f["scheduled_ns"].get<int64_t>();
  std::printf("[run-e2e] link down %.1f ms after its scheduled instant, held %.1f ms (asked 2000 ms; clock "
              "uncertainty %.1f ms)\n", late / 1e6, (up - down) / 1e6, uncertainty / 1e6);
  CHECK(late >= -uncertainty);
  CHECK(late < 100'000'000);
  CHECK(up - down >= 2'000'000'000 - 1'000'000);
  CHECK(up - down < 3'000'000'000);
  // What the agent recorded rides along: the link's down and up, at the times above.
  bool sawDown = false;
  for (const auto& e : f["events"])
    if (e["what"] == "down" && e["t_ns"] == down) sawDown = true;
  INFO("the fault's events: " << f["events"].dump());
  CHECK(sawDown);
  const json& trial = doc["trials"][0];
  CHECK(trial["fault_start_ns"] == down);
  CHECK(trial["fault_end_ns"] == up);
  const json& impact = trial["job"]["impact"];
  // Impact: the job stops moving data as the link goes down, within a bin (plus half the
  // smoothing window the playbook asks for) and the clock uncertainty.
  int64_t smoothHalf = 125'000'000;
  CHECK(impact["time_to_impact_ns"].get<int64_t>() <= bin + smoothHalf + uncertainty);
  // The stall covers the down time: at least the 2 s minus a bin, and the job recovers.
  CHECK(impact["stall_ns"].get<int64_t>() >= (up - down) - bin - uncertainty);
  REQUIRE(impact["recovered"] == true);
  // Recovery against the link's own up instant, from both sides. First when the job moved data
  // again: the first bin after the link's return from which the next 100 ms carry at least half
  // the baseline's bytes. The TCP workload caps each flow's retransmission timer at 1 s
  // (TCP_RTO_MAX_MS, docs/workloads.md), so a flow's first retry after the link is back comes
  // within 1 s; the rest of what the outage lost can wait one more capped timer (`ss -ti` on a
  // lab run: a flow's head retransmission acked 0.4 s after the link was up, its backoff reset
  // but its timer still at the backed-off 1 s, the job stalled 0.64 s more). So the job
  // resumes within two capped timers of the link's return. A kernel without the cap doubles
  // the timer while the link is down: past the outage, the pending one is at most twice the
  // outage plus Linux's first 200 ms.
  const int64_t timerCap = kernelCapsRetransmissionTimer() ? 1'000'000'000 : 2 * (up - down) + 200'000'000;
  const json& jobBins = doc["series"]["job"];
  const double perBin = trial["job"]["baseline_Bps"].get<double>() * double(bin) / 1e9;
  const size_t window = size_t(100'000'000 / bin);
  int64_t resumedAt = -1;
  for (size_t i = size_t(up / bin); resumedAt < 0 && i + window <= jobBins.size(); i++) {
    double moved = 0;
    for (size_t k = i; k < i + window; k++) moved += jobBins[k].get<double>();
    if (moved >= 0.5 * perBin * double(window)) resumedAt = int64_t(i) * bin;
  }
  const int64_t recoveredAt = impact["recovered_at_ns"].get<int64_t>();
  std::printf("[run-e2e] the job moved again %.1f ms after the link came back up; recovered (the scorer's: back in "
              "its band for the 1 s hold) %.1f ms after it\n",
              (resumedAt - up) / 1e6, (recoveredAt - up) / 1e6);
  REQUIRE(resumedAt >= 0);
  CHECK(resumedAt <= up + 2 * timerCap + bin + uncertainty);
  // The scorer's recovery: not before the link's return (within the smoothing and a bin), and
  // not before the job moved again (its smoothing is centred: half a window early at most).
  CHECK(recoveredAt >= up - smoothHalf - bin - uncertainty);
  CHECK(recoveredAt >= resumedAt - smoothHalf - bin - uncertainty);
  // How late after that is the job's doing, not the clock's: a rehearsal on a noisy day read the
  // job moving again 1.16 s after the link's return and then running at 1.5-2.0 Gb/s against its
  // 2.03 Gb/s floor for 5 s (recovery 6.47 s after the return). So it is checked against the
  // job's own bytes: from the recovery on, the hold's 1 s moved at least the floor it was judged
  // against (10 % allowed for the smoothing at the edges), and a recovery later than one hold
  // after the job moved again had a quarter second in between below that floor.
  // The scorer has two floors: one for a bin of the smoothed rate, one for the hold's mean; a
  // candidate it passed over was under one of them.
  const double holdFloorBps = impact["hold_threshold_Bps"].get<double>();
  const double floorBps = std::max(impact["threshold_Bps"].get<double>(), holdFloorBps);
  auto meanBps = [&](int64_t from, int64_t to) {
    double bytes = 0;
    const size_t i1 = std::min(jobBins.size(), size_t(to / bin));
    for (size_t i = size_t(from / bin); i < i1; i++) bytes += jobBins[i].get<double>();
    return bytes / (double(to - from) / 1e9);
  };
  const int64_t hold = 1'000'000'000;
  REQUIRE(recoveredAt + hold <= int64_t(jobBins.size()) * bin);
  CHECK(meanBps(recoveredAt, recoveredAt + hold) >= 0.9 * holdFloorBps);
  if (recoveredAt > resumedAt + hold + smoothHalf + bin + uncertainty) {
    double lowest = floorBps * 10;
    for (int64_t t = resumedAt; t + 2 * smoothHalf <= recoveredAt; t += bin) lowest = std::min(lowest, meanBps(t, t + 2 * smoothHalf));
    INFO("recovered " << (recoveredAt - resumedAt) / 1e6 << " ms after the job moved again; its lowest 250 ms in between "
         << lowest * 8 / 1e9 << " Gb/s against the " << floorBps * 8 / 1e9 << " Gb/s floor");
    CHECK(lowest < floorBps);
  }
  // The loss against the flap's size (docs/scoring.md, "How the scores are checked"): at least
  // the baseline's bytes over the down time less a bin, less the job's own noise over the impact
  // window (B minus its hold floor, times the window). The truth suite reads a flap's loss as B
  // times the wire's outage within 2 %; the outage is never shorter than the down time.
  {
    const double b = trial["job"]["baseline_Bps"].get<double>();
    const double impactNs = impact["window_to_ns"].get<double>() - impact["window_from_ns"].get<double>();
    const double noise = std::max(0.0, b - holdFloorBps) * impactNs / 1e9;
    const double atLeast = b * double(up - down - bin) / 1e9 - noise;
    std::printf("[run-e2e] loss %.1f MB; the down time's at the baseline %.1f MB, less the job's noise %.1f MB\n",
                impact["loss_bytes"].get<double>() / 1e6, b * double(up - down) / 1e15, noise / 1e6);
    CHECK(impact["loss_bytes"].get<double>() >= atLeast);
  }
  // The agents' NIC counters of their data interface (the lab's TAP: sysfs statistics only):
  // per trial, the wire bytes received cover at least the workload's payload.
  REQUIRE(doc["counters"].size() >= 2);
  for (const auto& c : doc["counters"]) {
    INFO("node " << c["node"]);
    const json& d = c["delta"];
    REQUIRE(d.contains("net.rx_bytes"));
    REQUIRE(d.contains("workload_rx_bytes"));
    CHECK(d["workload_rx_bytes"].get<int64_t>() > 0);
    CHECK(d["net.rx_bytes"].get<int64_t>() >= d["workload_rx_bytes"].get<int64_t>());
    CHECK(d["net.rx_packets"].get<int64_t>() > 0);
    // a TAP has no ethtool table and no RDMA port: nothing but net.* from the NIC
    for (auto it = c["after"].begin(); it != c["after"].end(); ++it)
      CHECK((it.key().rfind("net.", 0) == 0 || it.key().rfind("workload_", 0) == 0));
  }
  // and their samples, about every 100 ms over the run
  REQUIRE(doc["nic"].is_object());
  for (auto it = doc["nic"].begin(); it != doc["nic"].end(); ++it) {
    INFO("node " << it.key());
    CHECK((*it)["t_ns"].size() > size_t(doc["series"]["job"].size() * bin / 200'000'000));
  }
  CHECK(fs::exists(report + "/report.html"));
  CHECK(fs::exists(report + "/junit.xml"));
  requireEverythingReverted();
}

TEST_CASE("an expectation that cannot hold exits 1 and JUnit shows the failure") {
  std::string pb = shortRun("impossible", "", R"([[expect]]
metric = "stall_time"
op = "<="
bound = "1ms")");
  std::string report = sharedLab().dir() + "/impossible";
  auto r = runPlaybook(pb, report);
  INFO(r.err);
  CHECK(r.code == 1);
  std::string junit = readFile(report + "/junit.xml");
  CHECK_THAT(junit, Catch::Contains("<failure"));
  CHECK_THAT(junit, Catch::Contains("stall_time"));
  requireEverythingReverted();
}

// Acceptance against a baseline (issue 25): a run with the link down 1 s is the baseline; the
// same playbook with the link down 3 s, run with --baseline, stalls 2 s longer: the comparison
// names the job's stall time as worse beyond the noise, and the run, whose own expectations
// all pass, exits 1. compare on the baseline with itself: all the same, exit 0. A baseline
// that cannot be read stops the run before anything starts.
TEST_CASE("run --baseline: a longer outage than the baseline's fails the run; compare of a run with itself passes") {
  std::string pb1 = shortRun("accept", "", "");
  std::string golden = sharedLab().dir() + "/accept-golden";
  auto r1 = runPlaybook(pb1, golden);
  INFO(r1.err);
  REQUIRE(r1.code == 0);
  std::string body = readFile(pb1);
  body.replace(body.find("down = \"1s\""), 12, "down = \"3s\"");
  std::string pb3 = sharedLab().dir() + "/accept-3s.toml";
  std::ofstream(pb3) << body;
  std::string report = sharedLab().dir() + "/accept-3s";
  auto r3 = runPlaybook(pb3, report, 0ms, {"--baseline", golden + "/result.json"});
  INFO(r3.out);
  INFO(r3.err);
  CHECK(r3.code == 1);
  CHECK_THAT(r3.out, Catch::Contains("== against the baseline =="));
  json cmp = json::parse(readFile(report + "/compare.json"));
  CHECK(cmp["outcome"]["exit_code"] == 1);
  std::string stallVerdict;
  for (const auto& row : cmp["rows"])
    if (row["scope"] == "job" && row["metric"] == "stall_time") stallVerdict = row["verdict"];
  CHECK(stallVerdict == "worse");
  CHECK(fs::exists(report + "/compare-junit.xml"));
  // The baseline against itself.
  std::string out, err;
  rctest::Proc p = rctest::spawnCli(sharedLab().dir(), {"compare", golden + "/result.json", golden + "/result.json"});
  int rc = rctest::waitCli(p, 60s);
  INFO(readFile(p.out) << readFile(p.err));
  CHECK(rc == 0);
  CHECK_THAT(readFile(p.out), Catch::Contains("0 worse, 0 better"));
  // A baseline that is not there: exit 2 at once, no report directory, no fault.
  std::string never = sharedLab().dir() + "/accept-never";
  auto bad = runPlaybook(pb1, never, 0ms, {"--baseline", sharedLab().dir() + "/no-such.json"});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--baseline: cannot read"));
  CHECK_FALSE(fs::exists(never));
  requireEverythingReverted();
}

TEST_CASE("a guardrail abort exits 2, reverts everything and writes a partial report") {
  std::string pb = shortRun("floor", "[guardrails]\nmin_baseline = \"1000Gbps\"\n", "");
  std::string report = sharedLab().dir() + "/floor";
  auto r = runPlaybook(pb, report);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("below the floor"));
  json doc = json::parse(readFile(report + "/result.json"));
  CHECK_THAT(doc["run"]["abort_reason"].get<std::string>(), Catch::Contains("below the floor"));
  requireEverythingReverted();
}

TEST_CASE("a report directory that holds anything is refused before anything runs; --force replaces a run's reports") {
  std::string pb = shortRun("reused", "[guardrails]\nmin_baseline = \"1000Gbps\"\n", "");
  std::string report = sharedLab().dir() + "/reused";
  fs::create_directories(report);
  std::ofstream(report + "/notes.txt") << "mine";
  auto names = [&] {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(report)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  };
  // Before: the run went ahead and wrote its three files beside the user's.
  auto r = runPlaybook(pb, report);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("'" + report + "' is not empty") && Catch::Contains("--force"));
  CHECK_THAT(r.err, !Catch::Contains("running '"));  // refused before the run began
  CHECK(names() == std::vector<std::string>{"notes.txt"});
  // --force never replaces what is not a report.
  r = runPlaybook(pb, report, 0ms, {"--force"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("'notes.txt'") && Catch::Contains("not a report of a run"));
  CHECK(names() == std::vector<std::string>{"notes.txt"});
  // A previous run's reports are replaced whole (this run aborts on its guardrail, and reports).
  fs::remove(report + "/notes.txt");
  std::ofstream(report + "/result.json") << "{}";
  r = runPlaybook(pb, report, 0ms, {"--force"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("below the floor"));
  CHECK(names() == std::vector<std::string>{"junit.xml", "report.html", "result.json"});
  json doc = json::parse(readFile(report + "/result.json"));
  CHECK(doc["playbook"]["name"] == "reused");
  for (const auto& e : fs::directory_iterator(sharedLab().dir()))
    CHECK_THAT(e.path().filename().string(), !Catch::Contains(".partial-"));
  requireEverythingReverted();
}

TEST_CASE("Ctrl-C during the fault reverts everything, exits 2, keeps a partial report") {
  std::string pb = shortRun("interrupted", "", "");
  std::string report = sharedLab().dir() + "/interrupted";
  // The flap starts 4.5 s after the workload (which starts 1 s after the command): interrupt
  // while n3's link is down.
  auto r = runPlaybook(pb, report, 6500ms);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("interrupted"));
  json doc = json::parse(readFile(report + "/result.json"));
  CHECK(doc["run"]["abort_reason"] == "interrupted by the operator");
  requireEverythingReverted();
}

// Issue 11: the inventory cannot say which node has an RDMA device, so the run refuses
// transport = "verbs" from what the agents report in their hello, before anything starts.
// The namespace lab has no RDMA device at all: the run must name a node and start nothing (no
// workload on any agent, no fault scheduled, nothing journaled).
TEST_CASE("a verbs playbook on nodes without an RDMA device is refused naming the node; nothing starts") {
  std::string pb = writePlaybook("verbs-refused", R"(
name = "verbs-refused"
[workload]
kind = "allreduce"
size = "1MiB"
nodes = "all"
transport = "verbs"
[[phase]]
name = "baseline"
duration = "2s"
[[phase]]
name = "fault"
duration = "2s"
[[step]]
kind = "link_flap"
target = "n3"
phase = "fault"
at = "500ms"
for = "1s"
params = { down = "500ms" }
)");
  std::map<std::string, size_t> logBefore;
  for (const auto& n : sharedLab().nodes()) logBefore[n.name] = readFile(n.log).size();
  std::string report = sharedLab().dir() + "/verbs-refused";
  auto r = runPlaybook(pb, report);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.out + r.err, Catch::Matches(R"([\s\S]*node 'n[123]' has no RDMA device with an ACTIVE port[\s\S]*)"));
  json doc = json::parse(readFile(report + "/result.json"));
  std::string why = doc["run"]["abort_reason"];
  CHECK_THAT(why, Catch::Contains("workload did not start: node 'n"));
  CHECK_THAT(why, Catch::Contains("transport \"verbs\" needs one on every workload node; nothing was started"));
  CHECK(doc["faults"].empty());
  for (const auto& n : sharedLab().nodes()) {
    std::string log = readFile(n.log).substr(logBefore[n.name]);
    INFO("node " << n.name << " log since: " << log);
    CHECK(log.find("workload '") == std::string::npos);  // no workload started, none ended
    CHECK(log.find("schedul") == std::string::npos);
  }
  requireEverythingReverted();
}

}  // namespace test_run_e2e
