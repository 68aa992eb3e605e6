// Tests of the soft-RoCE lab (lab up --soft-roce): QEMU guests boot with rxe0 ACTIVE and their
// agents reachable; lab down (also after kill -9 of `lab up`) leaves no process or file. The
// vm suite; exits 77 with a reason where QEMU, the guest kernel or root is missing.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include "catch_session.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "lab/process.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace rctest;

namespace {

// The CLI's output files: outside every lab directory, whose emptiness the tests check.
const std::string& cliDir() {
  static struct Holder {
    std::string path;
    Holder() {
      char tmpl[] = "/tmp/rc-test-vm-cli-XXXXXX";
      if (::mkdtemp(tmpl)) path = tmpl;
    }
    ~Holder() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } holder;
  return holder.path;
}

// One three-guest lab shared by the test cases that need it (booting guests is the slow part),
// booted by the first that asks; main() takes it down if a test case did not. Most cases pick
// n1 and n2 by name; n3 makes the 3-guest collectives and a node whose agent can be killed
// without disturbing the others.
constexpr int kSharedNodes = 3;
std::unique_ptr<Lab> theLab;
std::unique_ptr<Lab>& sharedLab() {
  auto& lab = theLab;
  if (!lab) {
    rc::lab::UpOptions o;
    o.nodes = kSharedNodes;
    o.softRoce = true;
    auto t0 = std::chrono::steady_clock::now();
    lab = std::make_unique<Lab>("rc-test-vm", o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("soft-RoCE lab with %d guests up in %.1f s (rxe0 ACTIVE, agents listening)\n", kSharedNodes, s);
  }
  return lab;
}

long rssKiB(int pid) {
  std::string status = readFile("/proc/" + std::to_string(pid) + "/status");
  auto at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 6));
}

// Every entry of DIR, recursively (what a lab left behind).
std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    out.push_back(it->path().string());
  return out;
}

// What of a lab remains: its recorded processes and every file in its directory.
void checkNothingLeft(const std::string& dir, const std::vector<rc::lab::ProcRecord>& procs) {
  for (const auto& p : procs) {
    INFO("process " << p.pid << " " << rc::lab::describeCommand(p.cmdline));
    CHECK_FALSE(rc::lab::stillRunning(p));
  }
  auto left = leftovers(dir);
  for (const auto& f : left) INFO("left behind: " << f);
  CHECK(left.empty());
}

// One request to the lab switch's control socket, one response line.
json switchRequest(const std::string& path, const json& req) {
  rc::UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  std::string line = req.dump() + "\n";
  REQUIRE(::write(fd.get(), line.data(), line.size()) == ssize_t(line.size()));
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    REQUIRE(n > 0);
    in.append(buf, size_t(n));
  }
  return json::parse(in.substr(0, in.find('\n')));
}

// The same without assertions, for clean-ups in destructors: false when it did not answer ok.
bool trySwitchRequest(const std::string& path, const json& req) {
  rc::UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return false;
  std::string line = req.dump() + "\n";
  if (::write(fd.get(), line.data(), line.size()) != ssize_t(line.size())) return false;
  std::string in;
  char buf[4096];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return false;
    in.append(buf, size_t(n));
  }
  return json::parse(in.substr(0, in.find('\n')), nullptr, false).value("ok", false);
}

uint64_t switchTxBytes(const std::string& control, const std::string& portName) {
  json r = switchRequest(control, {{"cmd", "counters"}, {"port", portName}});
  REQUIRE(r["ok"] == true);
  return r["ports"][0]["tx_bytes"].get<uint64_t>();
}

std::vector<rc::lab::ProcRecord> processesOf(const rc::lab::LabState& s) {
  std::vector<rc::lab::ProcRecord> procs{s.sw.proc};
  for (const auto& n : s.nodes) procs.push_back(n.vm);
  return procs;
}

}  // namespace

TEST_CASE(
    "a missing guest kernel is a clear error naming scripts/install-deps; nothing is created") {
  std::string dir = cliDir() + "/no-kernel-lab";
  ::setenv("RDMACHAOS_KERNEL_DIR", (cliDir() + "/no-such-kernel").c_str(), 1);
  rc::lab::UpOptions o;
  o.nodes = 1;
  o.softRoce = true;
  o.dir = dir;
  o.agentBinary = env("RDMACHAOS_AGENT");
  auto r = rc::lab::up(o);
  ::unsetenv("RDMACHAOS_KERNEL_DIR");
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.find("scripts/install-deps") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("a lab up that fails half-way removes its guests and every file") {
  std::string dir = cliDir() + "/failing-lab";
  rc::lab::UpOptions o;
  o.nodes = 1;
  o.softRoce = true;
  o.dir = dir;
  o.agentBinary = env("RDMACHAOS_AGENT");
  o.switchBinary = "/bin/false";  // a switch that exits at once: the guest never gets a carrier
  auto r = rc::lab::up(o);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message);
  CHECK(r.error().message.find("lab switch") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
  // The QEMU it started is gone too: no live process's command line names the directory.
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = readFile(e.path().string() + "/cmdline");
    INFO("pid " << name);
    CHECK(cmd.find("addr.path=" + dir + "/") == std::string::npos);
  }
}

// Every process whose command line names PATH (what a lab under PATH would still run).
std::vector<std::string> processesNaming(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::string cmd = readFile(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(path) != std::string::npos) out.push_back(pid + ": " + cmd);
  }
  return out;
}

// `rdmachaos demo --soft-roce` (issue 11): its own 2-guest lab up, the verbs quickstart scored,
// lab down; only the report stays. Before the shared lab boots (one lab at a time on the
// 2-core machines); about 40 s on a quiet machine.
TEST_CASE("demo --soft-roce: lab up, a scored verbs quickstart, lab down with only the report left",
          "[demo]") {
  theLab.reset();  // one lab at a time (normally none is up yet: this case runs before the others)
  std::string dir = cliDir() + "/demo";
  struct Down {  // a demo killed half-way leaves its guests: take them down
    std::string dir;
    ~Down() {
      if (fs::exists(dir + "/lab.json")) {
        std::string out, err;
        runCli(cliDir(), {"lab", "down", "--dir", dir}, &out, &err);
      }
    }
  } down{dir};
  auto t0 = std::chrono::steady_clock::now();
  Proc demo = spawnCli(cliDir(), {"demo", "--soft-roce", "--dir", dir});
  int rc = waitCli(demo, 300s);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = readFile(demo.out), err = readFile(demo.err);
  INFO("stdout: " << out << "\nstderr: " << err);
  std::printf("demo --soft-roce: exit %d in %.1f s\n", rc, s);
  // Scored: every expectation met (0) or one missed on a noisy machine (1).
  REQUIRE((rc == 0 || rc == 1));
  CHECK_THAT(out, Catch::Contains("rxe0:ACTIVE"));
  CHECK_THAT(out, Catch::Contains("playbook quickstart-soft-roce: "));
  CHECK_THAT(out + err, Catch::Contains("is down"));
  json result = json::parse(readFile(dir + "/report/result.json"));
  CHECK(result["trials"][0]["job"]["baseline_Bps"].get<double>() > 0);
  CHECK(result["faults"].size() == 1);
  // RDMA counters as evidence (issue 11): the flap's window holds, per guest, rxe's counters
  // that moved while the port was held down and after (the all-reduce runs on both, so at
  // least their packet counters move), and the summary prints them.
  const json& windows = result["trials"][0]["nic"]["fault_windows"];
  REQUIRE(windows.size() == 1);
  for (const char* node : {"n1", "n2"}) {
    const json moved = windows[0]["nodes"].value(node, json::object());
    INFO(node << "'s counters that moved in the flap's window: " << moved.dump());
    bool rdma = false;
    for (auto it = moved.begin(); it != moved.end(); ++it) rdma = rdma || it.key().rfind("rdma.", 0) == 0;
    CHECK(rdma);
  }
  CHECK_THAT(out, Catch::Contains("NIC counters    while flap-n2-switch-port (link_flap on n2) was on"));
  CHECK_THAT(out, Catch::Contains("rdma."));
  // Only the report stays; no process of the lab runs.
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename() == "report");
  auto procs = processesNaming(dir);
  for (const auto& p : procs) INFO("still running: " << p);
  CHECK(procs.empty());
}

TEST_CASE("guests boot; every agent shows rxe0 with its port ACTIVE") {
  auto& lab = sharedLab();
  auto st = rc::lab::loadState(lab->dir());
  REQUIRE(st.ok());
  REQUIRE(st->kind == "vm");
  REQUIRE(st->nodes.size() == size_t(kSharedNodes));
  for (const auto& n : st->nodes) {
    INFO("node " << n.name);
    CHECK(rc::lab::stillRunning(n.vm));
    long rss = rssKiB(n.vm.pid);
    std::printf("%s: QEMU pid %d, RSS %ld MiB\n", n.name.c_str(), n.vm.pid, rss / 1024);
    // -m 512 plus a 64 MiB translation cache: a guest must stay well under 1 GiB.
    CHECK(rss > 0);
    CHECK(rss < 1024 * 1024);
  }
  CHECK(rc::lab::stillRunning(st->sw.proc));

  std::string out, err;
  // --timeout 30s: an agent's first hello scans its RDMA devices, which over 9p under TCG, with
  // three guests just booted on two cores, took more than the default 5 s (seen: n3).
  int rc = runCli(cliDir(), {"agents", "--inventory", lab->inventory(), "--json", "--timeout", "30s"}, &out, &err);
  INFO("stderr: " << err);
  REQUIRE(rc == 0);
  json agents = json::parse(out);
  REQUIRE(agents.size() == size_t(kSharedNodes));
  for (const auto& a : agents) {
    INFO("agent " << a.dump());
    const json& devs = a["capabilities"]["rdma_devices"];
    REQUIRE(devs.size() == 1);
    CHECK(devs[0]["name"] == "rxe0");
    REQUIRE(devs[0]["ports"].size() == 1);
    CHECK(devs[0]["ports"][0]["state"].get<std::string>().find("ACTIVE") != std::string::npos);
    CHECK(devs[0]["ports"][0]["link_layer"] == "Ethernet");
  }
  // The table an operator reads names the device and its state.
  rc = runCli(cliDir(), {"agents", "--inventory", lab->inventory(), "--timeout", "30s"}, &out, &err);
  CHECK(rc == 0);
  CHECK(out.find("rxe0:ACTIVE") != std::string::npos);

  rc = runCli(cliDir(), {"lab", "status", "--dir", lab->dir()}, &out, &err);
  INFO("lab status:\n" << out);
  CHECK(rc == 0);
  for (const auto& n : st->nodes) {
    auto line = out.find("\n" + n.name + " ");
    REQUIRE(line != std::string::npos);
    std::string row = out.substr(line + 1, out.find('\n', line + 1) - line - 1);
    CHECK(row.find(std::to_string(n.vm.pid)) != std::string::npos);
    CHECK(row.find("rxe0") != std::string::npos);
    CHECK(row.find("ACTIVE") != std::string::npos);
  }
}

TEST_CASE("the guests' data NICs are ports of the lab switch: a workload crosses it") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  uint64_t before1 = switchTxBytes(control, "n1"), before2 = switchTxBytes(control, "n2");
  std::string out, err;
  int rc = runCli(cliDir(),
                  {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node", "n2", "--kind",
                   "allreduce", "--size", "256KiB", "--for", "3s"},
                  &out, &err);
  INFO("stdout: " << out << "\nstderr: " << err);
  CHECK(rc == 0);
  CHECK(out.find("result verified") != std::string::npos);
  // Every byte between the guests went through the switch, both ways.
  uint64_t sent1 = switchTxBytes(control, "n1") - before1;
  uint64_t sent2 = switchTxBytes(control, "n2") - before2;
  std::printf("workload through the switch: %.1f MB to n1, %.1f MB to n2\n", sent1 / 1e6,
              sent2 / 1e6);
  CHECK(sent1 > 256 * 1024);
  CHECK(sent2 > 256 * 1024);
}

// Every collective over verbs (issue 11): the all-reduce on 2 and on 3 guests, the other
// collectives on the ranks they take (pairwise needs an even count: n1 -> n2; incast: n1 and n2
// into n3, the last rank). Each verified, its bins summing to the bytes it received, and
// every payload byte through the lab switch.
TEST_CASE("a verbs workload between the guests: RC QPs, WRITE WITH IMM, verified, via the switch",
          "[verbs]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  // allreduce is the ring (both directions); allgather the ring's second half; alltoall,
  // incast and pairwise use the other plans.
  auto [kind, size, world] = GENERATE(table<std::string, std::string, int>({{"allreduce", "256KiB", 2},
                                                                            {"allreduce", "256KiB", 3},
                                                                            {"allgather", "256KiB", 3},
                                                                            {"alltoall", "128KiB", 3},
                                                                            {"incast", "128KiB", 3},
                                                                            {"pairwise", "128KiB", 2}}));
  INFO("kind " << kind << " on " << world << " guests");
  std::vector<std::string> ports;
  for (int i = 1; i <= world; i++) ports.push_back("n" + std::to_string(i));
  std::vector<uint64_t> before;
  for (const auto& p : ports) before.push_back(switchTxBytes(control, p));
  // A count of iterations, not a duration: an agent's first verbs workload spends seconds
  // opening the device list (below), which would eat a short duration.
  std::vector<std::string> args = {"workload", "--inventory", lab->inventory()};
  for (const auto& p : ports) args.insert(args.end(), {"--node", p});
  // --timeout 30s: an agent's first verbs workload opens the RDMA device list, which loads
  // every rdma-core provider over 9p under TCG (seen: more than 5 s).
  args.insert(args.end(), {"--transport", "verbs", "--kind", kind, "--size", size, "--streams", "2",
                           "--iterations", "8", "--timeout", "30s", "--json"});
  std::string out, err;
  auto t0 = std::chrono::steady_clock::now();
  int rc = runCli(cliDir(), args, &out, &err);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("stdout: " << out << "\nstderr: " << err);
  REQUIRE(rc == 0);
  json r = json::parse(out);
  INFO("summary: " << r["summary"].dump());
  CHECK(r["summary"]["ok"] == true);
  CHECK(r["summary"]["iterations"].get<int64_t>() >= 8);
  CHECK(r["summary"]["busbw_Bps"].get<double>() > 0);
  REQUIRE(r["nodes"].size() == size_t(world));
  uint64_t rx = 0;
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    CHECK(n["counters"]["corruptions"] == 0);
    CHECK(n["counters"]["verify_failures"] == 0);
    CHECK(n["counters"]["iterations"].get<int64_t>() == 8);
    uint64_t nodeRx = n["counters"]["rx_bytes"].get<uint64_t>(), binned = 0;
    for (const auto& b : n["bins"]) binned += b[1].get<uint64_t>();
    // The bins hold every byte the node received. Only pairwise's rank 0 and incast's
    // senders receive nothing.
    const int rank = n["rank"].get<int>();
    const bool receives = kind == "pairwise" ? rank == 1 : kind == "incast" ? rank == world - 1 : true;
    CHECK((nodeRx > 0) == receives);
    CHECK(binned == nodeRx);
    rx += nodeRx;
  }
  // RoCEv2 between the guests crossed the switch, to every port that receives.
  uint64_t sent = 0;
  std::string perPort;
  for (size_t i = 0; i < ports.size(); i++) {
    uint64_t d = switchTxBytes(control, ports[i]) - before[i];
    sent += d;
    perPort += " " + ports[i] + " " + std::to_string(d / 1000) + " kB";
    CHECK(d > 0);  // at least the ACKs
  }
  std::printf("verbs %s on %d guests in %.1f s: to%s through the switch, %.2f MB received, "
              "busbw %.1f Mb/s (iteration p50 %.0f ms)\n",
              kind.c_str(), world, took, perPort.c_str(), rx / 1e6, r["summary"]["busbw_Bps"].get<double>() * 8 / 1e6,
              r["summary"]["p50_ns"].get<double>() / 1e6);
  // Every payload byte crossed the switch (plus headers and ACKs).
  CHECK(sent > rx);
}

// The QP attributes and the traffic class a workload asks for are the ones rxe gives its QPs
// (ibv_query_qp, logged by the agent at connect), and the RoCEv2 frames carry the class: the
// lab switch queues them by DSCP (48: queue 6). Not the defaults (14, 7, 7, DSCP 26), and not
// so short that a TCG guest's stall ends a QP: timeout 10 with 3 retries (~17 ms without an
// ACK) did, under load, and the job then failed to reconnect within its deadline.
TEST_CASE("verbs QP attributes and DSCP from the command line reach rxe's QPs and the wire") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto queue6 = [&](const std::string& port) {
    json r = switchRequest(control, {{"cmd", "counters"}, {"port", port}});
    REQUIRE(r["ok"] == true);
    for (auto& q : r["ports"][0]["queues"])
      if (q["queue"] == 6) return q["tx_bytes"].get<uint64_t>();
    return uint64_t(0);
  };
  auto n2 = lab->node("n2");
  const size_t logBefore = readFile(n2.guestDir + "/agent.log").size();
  uint64_t before = queue6("n2");
  std::string out, err;
  int rc = runCli(cliDir(),
                  {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node", "n2", "--transport",
                   "verbs", "--kind", "allreduce", "--size", "128KiB", "--iterations", "4", "--timeout", "30s", "--qp-timeout", "16",
                   "--qp-retry-cnt", "3", "--qp-rnr-retry", "5", "--dscp", "48", "--json"},
                  &out, &err);
  INFO("stdout: " << out << "\nstderr: " << err);
  REQUIRE(rc == 0);
  std::string log = readFile(n2.guestDir + "/agent.log").substr(logBefore);
  INFO("n2's agent log since: " << log);
  CHECK_THAT(log, Catch::Contains("timeout 16, retry_cnt 3, rnr_retry 5, traffic class 192"));
  uint64_t rx = 0;
  json r = json::parse(out);  // named: a range-for over a member of a temporary would dangle
  for (const auto& n : r["nodes"])
    if (n["node"] == "n2") rx = n["counters"]["rx_bytes"].get<uint64_t>();
  CHECK(rx > 0);
  uint64_t q6 = queue6("n2") - before;
  std::printf("verbs with DSCP 48: %llu B to n2 through the switch's queue 6, %llu B received\n",
              (unsigned long long)q6, (unsigned long long)rx);
  CHECK(q6 >= rx);  // every payload byte to n2 went through queue 6
}

// What the guest reports in DIR/nodes/NODE/guest/status (key=value lines, every 2 s).
std::string guestReport(const rc::lab::NodeRecord& n, const std::string& key) {
  std::istringstream in(readFile(n.guestDir + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  return "";
}

TEST_CASE("a link flap of a guest's data NIC takes rxe0's port down and back") {
  auto& lab = sharedLab();
  auto n1 = lab->node("n1");
  REQUIRE(guestReport(n1, "link_downed") == "0");
  std::string out, err;
  Proc inject = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s",
                                    "--node", "n1", "--set", "down=4s", "--for", "30s"});
  // rxe raises IB_EVENT_PORT_ERR and counts link_downed when its netdev goes down.
  bool downed = eventually([&] { return guestReport(n1, "link_downed") == "1"; }, 20s, 100ms);
  int rc = waitCli(inject);
  INFO("inject stdout: " << readFile(inject.out) << "\nstderr: " << readFile(inject.err));
  CHECK(rc == 0);
  CHECK(downed);
  bool active = eventually(
      [&] { return guestReport(n1, "port_state").find("ACTIVE") != std::string::npos; }, 20s,
      100ms);
  CHECK(active);
}

// The node whose NIC goes down fails its sends while its RoCEv2 GID is gone ("local QP
// operation error ... at HH:MM:SS UTC"); its peer, waiting in a step, must notice before its
// progress timeout, and the QPs must come back although rxe on the flapped guest answers no
// CM MAD after such a flap (the transport sets QPs up over TCP: docs/workloads.md).
TEST_CASE("a verbs QP in error after a data NIC flap is reported, re-created, and the job completes",
          "[qp-error]") {
  auto& lab = sharedLab();
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  // 3 s down is six times what timeout 14 x retry_cnt 7 should allow (about 0.5 s), but
  // rxe in the lab's 6.1 kernel keeps retrying: ib_write_bw between two guests rode out the
  // same flap with retry_exceeded_err 0 (completer_retry_err rising). So the peer is not
  // expected to see IBV_WC_RETRY_EXC_ERR; it learns from the flapped node's control
  // connection, which that node closes when it drops its QPs.
  auto connects = [&] {
    std::string log = readFile(n1.guestDir + "/agent.log");
    size_t k = 0;
    for (size_t at = log.find("verbs: rank"); at != std::string::npos;
         at = log.find("verbs: rank", at + 1))
      k++;
    return k;
  };
  const size_t connectsBefore = connects();
  Proc wl = spawnCli(cliDir(), {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node",
                                "n2", "--transport", "verbs", "--kind", "allreduce", "--size", "64KiB", "--for", "18s",
                                "--reconnect-timeout", "10s", "--timeout", "30s", "--json"});
  // Flap once the QPs carry traffic (a fresh guest's first verbs use takes seconds): a flap
  // before the connection would only delay it. 18 s: the flap comes 5-6 s after the QPs
  // connect on a loaded host, and the QPs must be set up again before the job's end (with a
  // 12 s job, seen twice with the three-guest lab: the job ran out during the reconnect, n2
  // counting no error).
  CHECK(eventually([&] { return connects() > connectsBefore; }, 20s, 100ms));
  std::this_thread::sleep_for(1s);
  Proc inject = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s",
                                    "--node", "n1", "--set", "down=3s", "--for", "30s"});
  int irc = waitCli(inject);
  INFO("inject stdout: " << readFile(inject.out) << "\nstderr: " << readFile(inject.err));
  CHECK(irc == 0);
  int rc = waitCli(wl);
  std::string out = readFile(wl.out);
  INFO("workload stdout: " << out << "\nstderr: " << readFile(wl.err));
  REQUIRE(rc == 0);
  json r = json::parse(out);
  int64_t reconnects = 0;
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    CHECK(n["counters"]["errors"].get<int64_t>() >= 1);
    reconnects += n["counters"]["reconnects"].get<int64_t>();
  }
  CHECK(reconnects >= 1);
  // The agents logged the QP error with its status string and time.
  std::string logs = readFile(n1.guestDir + "/agent.log") + readFile(n2.guestDir + "/agent.log");
  {
    // What each rank saw, for the record (and for a failure below).
    std::istringstream in(logs);
    std::string l;
    while (std::getline(in, l))
      if (l.find("lost a connection") != std::string::npos) std::printf("%s\n", l.c_str());
  }
  // The flapped node reports either a QP in error (a send posted while its GID was gone:
  // "local QP operation error", or rxe giving up: "transport retry counter exceeded"), with
  // its status, or, when it had nothing posted that could fail (it waited to receive), its
  // own port going down, which a silent step looks at once a second.
  auto at = logs.find("in error at");
  auto portAt = logs.find("is down at");
  REQUIRE((at != std::string::npos || portAt != std::string::npos));
  auto lineAt = [&](size_t k) {
    return logs.substr(logs.rfind('\n', k) + 1, logs.find('\n', k) - logs.rfind('\n', k));
  };
  if (at != std::string::npos) {
    std::string line = lineAt(at);
    std::printf("QP error as the agent logged it: %s", line.c_str());
    // The status string and number, and the time.
    CHECK(line.find("(status ") != std::string::npos);
    CHECK(line.find(" UTC: ") != std::string::npos);
    bool rxeStatus = line.find("local QP operation error") != std::string::npos ||
                     line.find("transport retry counter exceeded") != std::string::npos;
    CHECK(rxeStatus);
  } else {
    std::string line = lineAt(portAt);
    std::printf("port loss as the agent logged it: %s", line.c_str());
    // On n1, with the device and port, the time, and what was wrong with the port.
    CHECK(line.find("agent n1") != std::string::npos);
    CHECK(line.find(" port 1 is down at ") != std::string::npos);
    CHECK(line.find(" UTC (") != std::string::npos);
    bool why = line.find("(port state ") != std::string::npos || line.find("RoCEv2 GID for") != std::string::npos;
    CHECK(why);
  }
  // The peer noticed before its progress timeout (10 s here): from its QP or from the
  // flapped node's control connection, not from "no completion for ... ms".
  std::string log2 = readFile(n2.guestDir + "/agent.log");
  auto lost = log2.rfind("lost a connection");
  REQUIRE(lost != std::string::npos);
  std::string line2 = log2.substr(lost, log2.find('\n', lost) - lost);
  CHECK(line2.find("no completion for") == std::string::npos);
}

// Acceptance 3 of issue 11: a 2 s flap of a guest's switch port during a verbs all-reduce.
// QEMU keeps the guest NIC's carrier up, so rxe sees no port event: its QPs retransmit into
// the dead port. The stall must show in the job's series over the flap, and the job must move
// again afterwards and complete, verified.
TEST_CASE("a 2 s flap of a guest's switch port stalls a verbs all-reduce; the job comes back",
          "[switch-flap]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto adminUp = [&] {
    json r = switchRequest(control, {{"cmd", "counters"}, {"port", "n2"}});
    REQUIRE(r["ok"] == true);
    return r["ports"][0]["admin_up"].get<bool>();
  };
  auto n1 = lab->node("n1");
  auto connects = [&] {
    std::string log = readFile(n1.guestDir + "/agent.log");
    size_t k = 0;
    for (size_t at = log.find("verbs: rank"); at != std::string::npos; at = log.find("verbs: rank", at + 1)) k++;
    return k;
  };
  const size_t connectsBefore = connects();
  Proc wl = spawnCli(cliDir(), {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node", "n2",
                                "--transport", "verbs", "--kind", "allreduce", "--size", "256KiB", "--for", "14s",
                                "--reconnect-timeout", "10s", "--timeout", "30s", "--json"});
  // Flap once the QPs carry traffic (a guest's first verbs use takes seconds).
  CHECK(eventually([&] { return connects() > connectsBefore; }, 20s, 100ms));
  std::this_thread::sleep_for(2s);
  Proc inject = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2",
                                    "--set", "switch_port=n2", "--set", "down=2s", "--for", "30s"});
  // When the port was down, on the host's clock (the controller's series use the same clock).
  int64_t downNs = 0, upNs = 0;
  CHECK(eventually([&] { return !adminUp(); }, 20s, 20ms));
  downNs = rc::wallNs();
  CHECK(eventually([&] { return adminUp(); }, 20s, 20ms));
  upNs = rc::wallNs();
  int irc = waitCli(inject);
  INFO("inject stdout: " << readFile(inject.out) << "\nstderr: " << readFile(inject.err));
  CHECK(irc == 0);
  int rc = waitCli(wl);
  std::string out = readFile(wl.out);
  INFO("workload stderr: " << readFile(wl.err));
  REQUIRE(rc == 0);
  json r = json::parse(out);
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
  }
  // The job's series: bytes received by both nodes per bin (controller clock).
  std::map<int64_t, uint64_t> job;
  for (const auto& n : r["nodes"])
    for (const auto& b : n["bins"]) job[b[0].get<int64_t>()] += b[1].get<uint64_t>();
  const int64_t binNs = r["bin_ns"].get<int64_t>();
  uint64_t before = 0, during = 0, after = 0;
  int64_t beforeNs = 0, duringNs = 0, afterNs = 0;
  // The run of empty bins around the middle of the flap: the stall the flap caused.
  const int64_t mid = (downNs + upNs) / 2;
  int64_t runStart = 0, stallStart = 0, stallEnd = 0;
  for (const auto& [t, bytes] : job) {
    if (t >= downNs - 3'000'000'000 && t < downNs) before += bytes, beforeNs += binNs;
    // Inside the flap, away from its edges (the switch's admin state is polled every 20 ms).
    if (t >= downNs + 200'000'000 && t < upNs - 200'000'000) during += bytes, duringNs += binNs;
    if (t >= upNs && t < upNs + 6'000'000'000) after += bytes, afterNs += binNs;
    if (bytes == 0) {
      if (runStart == 0) runStart = t;
      if (runStart <= mid && t + binNs > mid) stallStart = runStart;
      if (stallStart == runStart && stallStart != 0) stallEnd = t + binNs;
    } else {
      runStart = 0;
    }
  }
  double rateBefore = beforeNs ? before * 1e9 / beforeNs : 0;
  double rateDuring = duringNs ? during * 1e9 / duringNs : 0;
  double rateAfter = afterNs ? after * 1e9 / afterNs : 0;
  std::printf("switch-port flap of n2 (down %.2f s): job %.1f Mb/s before, %.2f Mb/s during, %.1f Mb/s "
              "in the 6 s after; the stall over it: %.2f s, from %.2f s after the port went down to "
              "%.2f s after it came up\n",
              (upNs - downNs) / 1e9, rateBefore * 8 / 1e6, rateDuring * 8 / 1e6, rateAfter * 8 / 1e6,
              (stallEnd - stallStart) / 1e9, (stallStart - downNs) / 1e9, (stallEnd - upNs) / 1e9);
  REQUIRE(rateBefore > 0);
  // A stall over the flap: nothing crosses a port that is down, and the empty bins around
  // its middle span about the flap (its edges are known to the 20 ms the admin state is polled).
  CHECK(rateDuring < 0.1 * rateBefore);
  REQUIRE(stallStart != 0);
  CHECK(stallEnd - stallStart >= upNs - downNs - 400'000'000);
  CHECK(stallStart <= downNs + 400'000'000);
  // The job came back: it moves data again after the port is up.
  CHECK(after > 0);
}

// Acceptance 3 of issue 11, second half: with a short QP timeout (qp_timeout 16, 268 ms per
// try, and retry_cnt 1 instead of NCCL's 7) a switch port held down for 6 s ends the QPs that
// write into it in IBV_WC_RETRY_EXC_ERR, reported with its status string and time; the engine
// re-creates its QPs once the port is back and the job completes, verified (the errors are
// asserted from the hold on, not inside it: see below). QEMU keeps the
// guest NIC's carrier up, so rxe sees no port event: what ends the QPs is the transport's own
// retry limit. (rxe at retry_cnt 7 retries without end, so the default never ends a QP, see
// [switch-flap]; qp_timeout 10 with retry_cnt 1 ended QPs every few hundred ms on the TCG
// guests without any fault, and 14 (67 ms a try) ended two QPs in the 3 s before the hold in
// 1 of 4 runs on a quiet host, the second so close to it that no QP was up during the hold, so
// none could end there: docs/soft-roce.md.)
TEST_CASE("a short QP timeout: a 6 s switch-port hold ends the QPs in error; the job re-creates them and completes",
          "[qp-timeout]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto adminUp = [&] {
    json r = switchRequest(control, {{"cmd", "counters"}, {"port", "n2"}});
    REQUIRE(r["ok"] == true);
    return r["ports"][0]["admin_up"].get<bool>();
  };
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  const size_t log1Before = readFile(n1.guestDir + "/agent.log").size();
  const size_t log2Before = readFile(n2.guestDir + "/agent.log").size();
  auto connects = [&] {
    std::string log = readFile(n1.guestDir + "/agent.log").substr(log1Before);
    size_t k = 0;
    for (size_t at = log.find("verbs: rank"); at != std::string::npos; at = log.find("verbs: rank", at + 1)) k++;
    return k;
  };
  Proc wl = spawnCli(cliDir(), {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node", "n2",
                                "--transport", "verbs", "--kind", "allreduce", "--size", "128KiB", "--for", "22s",
                                "--qp-timeout", "16", "--qp-retry-cnt", "1", "--reconnect-timeout", "20s",
                                "--timeout", "60s", "--json"});
  CHECK(eventually([&] { return connects() > 0; }, 20s, 100ms));
  std::this_thread::sleep_for(2s);
  const size_t connectsAtFlap = connects();
  Proc inject = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2",
                                    "--set", "switch_port=n2", "--set", "down=6s", "--for", "30s"});
  int64_t downNs = 0, upNs = 0;
  CHECK(eventually([&] { return !adminUp(); }, 20s, 20ms));
  downNs = rc::wallNs();
  // What the agents logged before the port went down: losses there are not the hold's.
  const size_t log1AtDown = readFile(n1.guestDir + "/agent.log").size() - log1Before;
  const size_t log2AtDown = readFile(n2.guestDir + "/agent.log").size() - log2Before;
  CHECK(eventually([&] { return adminUp(); }, 20s, 20ms));
  upNs = rc::wallNs();
  int irc = waitCli(inject);
  INFO("inject stdout: " << readFile(inject.out) << "\nstderr: " << readFile(inject.err));
  CHECK(irc == 0);
  int rc = waitCli(wl);
  std::string out = readFile(wl.out);
  std::string log1 = readFile(n1.guestDir + "/agent.log").substr(log1Before);
  std::string log2 = readFile(n2.guestDir + "/agent.log").substr(log2Before);
  INFO("workload stderr: " << readFile(wl.err) << "\nn1's agent log: " << log1 << "\nn2's agent log: " << log2);
  // What each rank saw, for the record (and for a failure below).
  // Lost connections before the hold, and QP errors and other losses from it on.
  std::string errorLines, lostLines, beforeLines;
  for (const auto& [name, log, atDown] : {std::tuple{"n1", log1, log1AtDown}, std::tuple{"n2", log2, log2AtDown}}) {
    std::istringstream in(log);
    size_t at = 0;
    for (std::string l; std::getline(in, l); at += l.size() + 1) {
      if (l.find("lost a connection") == std::string::npos) continue;
      if (at < atDown) {
        beforeLines += std::string(name) + ": " + l + "\n";
        continue;
      }
      (l.find("in error at") != std::string::npos ? errorLines : lostLines) += std::string(name) + ": " + l + "\n";
    }
  }
  std::printf("short QP timeout (16, retry_cnt 1), n2's switch port down %.2f s; lost connections before it:\n%s"
              "QP errors from it on:\n%sother losses from it on:\n%s",
              (upNs - downNs) / 1e9, beforeLines.c_str(), errorLines.c_str(), lostLines.c_str());
  REQUIRE(rc == 0);
  json r = json::parse(out);
  int64_t reconnects = 0, errors = 0;
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    errors += n["counters"]["errors"].get<int64_t>();
    reconnects += n["counters"]["reconnects"].get<int64_t>();
  }
  // The job's bytes after the port came back.
  uint64_t after = 0;
  int64_t firstAfter = 0;
  for (const auto& n : r["nodes"])
    for (const auto& b : n["bins"])
      if (int64_t t = b[0].get<int64_t>(); t >= upNs && b[1].get<uint64_t>() > 0) {
        after += b[1].get<uint64_t>();
        if (firstAfter == 0 || t < firstAfter) firstAfter = t;
      }
  std::printf("errors %lld, reconnects %lld, QP set-ups from the hold on %zu; %.3f MB moved after the port came "
              "up, the first of it %.2f s after\n",
              (long long)errors, (long long)reconnects, connects() - connectsAtFlap, after / 1e6,
              firstAfter ? (firstAfter - upNs) / 1e9 : -1.0);
  CHECK(errors >= 1);
  CHECK(reconnects >= 1);
  CHECK(after > 0);
  // The hold ended a QP at its retry limit, reported with its status string and number and
  // the time: "QP 0 (qpn 46) in error at 18:40:08.937 UTC: transport retry counter exceeded
  // (status 12, vendor error 0, on a send)".
  REQUIRE_FALSE(errorLines.empty());
  CHECK_THAT(errorLines, Catch::Contains("transport retry counter exceeded (status 12"));
  CHECK_THAT(errorLines, Catch::Contains(" UTC: "));
  // When, on the host's clock: the agent's UTC time less its clock offset (measured by the
  // controller, in the result), for the record. Not asserted: at this setting QPs also end
  // without any fault on a loaded host, and a QP being set up again when the port goes down
  // waits for it (set-up is over TCP), so the hold's error can come after it (seen: +7.1 s,
  // +8.1 s, +8.7 s after a 6 s hold, with 16 errors in the job).
  std::map<std::string, int64_t> offset;
  for (const auto& n : r["nodes"]) offset[n["node"].get<std::string>()] = n["clock_offset_ns"].get<int64_t>();
  int duringHold = 0;
  std::string whens;
  {
    std::istringstream in(errorLines);
    for (std::string l; std::getline(in, l);) {
      if (l.find("transport retry counter exceeded") == std::string::npos) continue;
      auto at = l.find("in error at ");
      int h = 0, m = 0, sec = 0, ms = 0;
      if (at == std::string::npos ||
          std::sscanf(l.c_str() + at + 12, "%d:%d:%d.%d", &h, &m, &sec, &ms) != 4)
        continue;
      const int64_t day = 86'400'000'000'000;
      int64_t t = downNs - downNs % day + ((h * 60 + m) * 60 + sec) * 1'000'000'000LL + ms * 1'000'000LL;
      if (t - downNs > day / 2) t -= day;
      if (downNs - t > day / 2) t += day;
      t -= offset[l.substr(0, 2)];
      if (t >= downNs - 200'000'000 && t <= upNs + 200'000'000) duringHold++;
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s %+.2f s", l.substr(0, 2).c_str(), (t - downNs) / 1e9);
      whens += buf;
    }
  }
  std::printf("retry-exceeded errors, from the port going down (%.2f s held):%s; %d inside the hold\n",
              (upNs - downNs) / 1e9, whens.c_str(), duringHold);
  // And the engine set its QPs up again afterwards (the agent logs every set-up).
  CHECK(connects() > connectsAtFlap);
}

// Acceptance 4 of issue 11, in the shape two guests allow: n2's agent floods pause frames on
// priority 3 from its data NIC (a NIC stuck sending PFC) while n1 writes to n2 over RDMA (DSCP
// 26: the switch's queue 3). The switch honours the pause: its queue towards n2 stops and the
// RDMA flow stalls for the storm. With the switch's watchdog on (action forward: ignore the
// stuck host's pauses once detected), the flow to n2 moves again during the storm. (The
// namespace lab's test, tests/test_labswitch.cpp, has the third host a victim job needs with
// action drop; a guest's virtio NIC honours no PFC, so a pause cannot spread to a guest.)
TEST_CASE("a PFC storm from a guest stalls RDMA through its switch port; with the watchdog on it moves again",
          "[pfc-storm]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  const bool watchdog = GENERATE(false, true);
  INFO("watchdog " << (watchdog ? "on (forward)" : "off"));
  auto q3 = [&](const std::string& port) {
    json r = switchRequest(control, {{"cmd", "counters"}, {"port", port}});
    REQUIRE(r["ok"] == true);
    for (auto& q : r["ports"][0]["queues"])
      if (q["queue"] == 3) return q;
    return json::object();
  };
  json was = switchRequest(control, {{"cmd", "get_watchdog"}, {"port", "n2"}, {"priority", 3}});
  INFO("watchdog before: " << was.dump());
  REQUIRE(was["ok"] == true);
  REQUIRE(was["watchdogs"].size() == 1);
  struct Restore {
    std::string control;
    json was;
    ~Restore() {
      json back = {{"cmd", "set_watchdog"}, {"port", "n2"}, {"priority", 3}};
      for (const char* k : {"enabled", "detection_ms", "restoration_ms", "action"})
        if (was.contains(k)) back[k] = was[k];
      if (!trySwitchRequest(control, back)) std::printf("could not restore n2's watchdog: %s\n", back.dump().c_str());
    }
  } restore{control, was["watchdogs"][0]};
  json set = switchRequest(control, {{"cmd", "set_watchdog"}, {"port", "n2"}, {"priority", 3},
                                     {"enabled", watchdog}, {"detection_ms", 200},
                                     {"restoration_ms", 200}, {"action", "forward"}});
  REQUIRE(set["ok"] == true);
  // n2's port at 100 Mb/s for this case (the verbs job moves 20-40 Mb/s on these guests, so
  // the rate does not hold it back): a pause frame of 65535 quanta then holds the port 335 ms
  // instead of 33.5 ms, so a storm sender inside a TCG guest that three busy guests delay by
  // more than 33 ms still holds the port paused throughout (a CI run saw 9 storm gaps at
  // 1 Gb/s and RDMA leaking through at a fifth of its rate: the storm's quality, not the
  // switch's behaviour, which is what this case is about).
  json port = switchRequest(control, {{"cmd", "get_port"}, {"port", "n2"}});
  REQUIRE(port["ok"] == true);
  INFO("port before: " << port.dump());
  double rateWas = 0;
  for (const auto& p : port["ports"]) rateWas = p.value("rate_bps", 0.0);
  REQUIRE(rateWas > 0);
  struct RestoreRate {
    std::string control;
    double rate;
    ~RestoreRate() {
      json back = {{"cmd", "set_port"}, {"port", "n2"}, {"rate_bps", rate}};
      if (!trySwitchRequest(control, back)) std::printf("could not restore n2's rate: %s\n", back.dump().c_str());
    }
  } restoreRate{control, rateWas};
  REQUIRE(switchRequest(control, {{"cmd", "set_port"}, {"port", "n2"}, {"rate_bps", 100e6}})["ok"] == true);
  const json before3 = q3("n2");

  auto n1 = lab->node("n1");
  auto connects = [&] {
    std::string log = readFile(n1.guestDir + "/agent.log");
    size_t k = 0;
    for (size_t at = log.find("verbs: rank"); at != std::string::npos; at = log.find("verbs: rank", at + 1)) k++;
    return k;
  };
  const size_t connectsBefore = connects();
  Proc wl = spawnCli(cliDir(), {"workload", "--inventory", lab->inventory(), "--transport", "verbs",
                                "--kind", "pairwise", "--node", "n1", "--node", "n2", "--size", "256KiB",
                                "--for", "13s", "--reconnect-timeout", "10s", "--timeout", "30s", "--json"});
  CHECK(eventually([&] { return connects() > connectsBefore; }, 20s, 100ms));
  std::this_thread::sleep_for(2s);
  Proc storm = spawnCli(cliDir(), {"inject", "pfc_storm", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2",
                                   "--set", "duration=3s", "--set", "rate=1000", "--for", "10s"});
  // The storm on the wire, on the host's clock: from the first pause frame the switch counted
  // on n2's queue 3 to the last.
  int64_t startNs = 0, endNs = 0;
  uint64_t lastRx = before3["pfc_rx"].get<uint64_t>();
  const int64_t giveUp = rc::wallNs() + 20'000'000'000;
  while (rc::wallNs() < giveUp) {
    uint64_t rx = q3("n2")["pfc_rx"].get<uint64_t>();
    int64_t now = rc::wallNs();
    if (rx != lastRx) {
      if (startNs == 0) startNs = now;
      endNs = now;
      lastRx = rx;
    } else if (startNs != 0 && now - endNs > 500'000'000) {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  int irc = waitCli(storm);
  INFO("inject stdout: " << readFile(storm.out) << "\nstderr: " << readFile(storm.err));
  CHECK(irc == 0);
  int rc = waitCli(wl);
  std::string out = readFile(wl.out);
  INFO("workload stderr: " << readFile(wl.err));
  REQUIRE(rc == 0);
  REQUIRE(startNs != 0);
  REQUIRE(endNs - startNs > 2'000'000'000);
  json r = json::parse(out);
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
  }
  // What n2 received, per second, before, during (from 0.5 s into the storm: past the
  // watchdog's 200 ms detection) and after the storm.
  uint64_t before = 0, during = 0, after = 0;
  int64_t beforeNs = 0, duringNs = 0, afterNs = 0;
  const int64_t binNs = r["bin_ns"].get<int64_t>();
  for (const auto& n : r["nodes"]) {
    if (n["node"] != "n2") continue;
    for (const auto& b : n["bins"]) {
      int64_t t = b[0].get<int64_t>();
      uint64_t bytes = b[1].get<uint64_t>();
      if (t >= startNs - 2'000'000'000 && t < startNs) before += bytes, beforeNs += binNs;
      if (t >= startNs + 500'000'000 && t < endNs - 100'000'000) during += bytes, duringNs += binNs;
      if (t >= endNs + 500'000'000 && t < endNs + 3'500'000'000) after += bytes, afterNs += binNs;
    }
  }
  double rb = beforeNs ? before * 1e9 / beforeNs : 0, rd = duringNs ? during * 1e9 / duringNs : 0,
         ra = afterNs ? after * 1e9 / afterNs : 0;
  const json after3 = q3("n2");
  INFO("n2 queue 3 after: " << after3.dump());
  std::printf("PFC storm from n2 (%.2f s on the wire), watchdog %s: RDMA to n2 %.1f Mb/s before, %.2f Mb/s "
              "during, %.1f Mb/s after; queue 3 paused %.2f s, watchdog storms %llu\n",
              (endNs - startNs) / 1e9, watchdog ? "on (forward)" : "off", rb * 8 / 1e6, rd * 8 / 1e6,
              ra * 8 / 1e6,
              (after3["paused_ns"].get<int64_t>() - before3["paused_ns"].get<int64_t>()) / 1e9,
              (unsigned long long)(after3["wd_storms"].get<uint64_t>() - before3["wd_storms"].get<uint64_t>()));
  REQUIRE(rb > 0);
  CHECK(ra > 0);  // moving after the storm either way
  // The storm held the port paused throughout (no frame came after the one before had run
  // out): the condition this case needs, from the switch's ground truth.
  CHECK(after3["storm_gaps"].get<uint64_t>() == before3["storm_gaps"].get<uint64_t>());
  if (!watchdog) {
    CHECK(rd < 0.1 * rb);  // stalled for the storm
    CHECK(after3["paused_ns"].get<int64_t>() - before3["paused_ns"].get<int64_t>() > 2'000'000'000);
    CHECK(after3["wd_storms"] == before3["wd_storms"]);
  } else {
    CHECK(rd > 0.25 * rb);  // moving again during the storm
    CHECK(after3["wd_storms"].get<uint64_t>() > before3["wd_storms"].get<uint64_t>());
  }
}

// Acceptance 5 of issue 11: perftest (Debian's ib_write_bw) as the workload of a playbook. The
// agents run the client on n1 and the server on n2, parse the client's per-second report into
// 10 ms bins, and the run is scored like the built-in workload.
TEST_CASE("a perftest ib_write_bw workload runs under a playbook and is scored", "[perftest]") {
  auto& lab = sharedLab();
  std::string dir = cliDir() + "/perftest";
  fs::create_directories(dir);
  std::string pb = dir + "/perftest.toml";
  {
    std::ofstream f(pb);
    f << R"(name = "perftest-smoke"
description = "ib_write_bw between the two guests; a noop fault; scored like any workload"
[workload]
kind = "perftest"
test = "ib_write_bw"
size = "64KiB"
nodes = ["n1", "n2"]
[scoring]
bin = "10ms"
warmup = "5s"      # perftest's start on a TCG guest (device list, QP exchange) takes seconds
hold = "1s"
smooth = "1s"      # perftest reports once a second
epsilon = 0.3
[[phase]]
name = "baseline"
duration = "10s"
[[phase]]
name = "fault"
duration = "2s"
[[phase]]
name = "recovery"
duration = "3s"
[[step]]
name = "nothing"
kind = "noop"
target = "n2"
phase = "fault"
at = "0s"
for = "2s"
[[expect]]
metric = "throughput_loss_pct"
op = "<"
bound = 50
)";
  }
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  const size_t log1Before = readFile(n1.guestDir + "/agent.log").size();
  const size_t log2Before = readFile(n2.guestDir + "/agent.log").size();
  std::string out, err;
  int rc = runCli(cliDir(), {"run", pb, "--inventory", lab->inventory(), "--timeout", "30s", "--report-dir", dir + "/report"},
                  &out, &err);
  // rxe between TCG guests sometimes ends an ib_write_bw early: the client's WRITE completes
  // with status 9 (remote invalid request) and both ends exit (docs/soft-roce.md; one 20 s run
  // in five). The workload reports that as an error naming the node, as it must; it is not
  // what this case is about, so one run more tells it from a perftest workload that never works.
  if (auto at = err.find("before the end of the run"); rc == 2 && at != std::string::npos) {
    std::printf("perftest ended early (%s); once more\n", err.substr(at > 300 ? at - 300 : 0, 400).c_str());
    std::fflush(stdout);
    out.clear();
    err.clear();
    rc = runCli(cliDir(), {"run", pb, "--inventory", lab->inventory(), "--timeout", "30s", "--report-dir", dir + "/report-again"},
                &out, &err);
    fs::remove_all(dir + "/report");
    fs::rename(dir + "/report-again", dir + "/report");
  }
  std::string log1 = readFile(n1.guestDir + "/agent.log").substr(log1Before);
  std::string log2 = readFile(n2.guestDir + "/agent.log").substr(log2Before);
  INFO("stdout: " << out << "\nstderr: " << err << "\nn1's agent log: " << log1 << "\nn2's agent log: " << log2);
  // Scored: every expectation met (0) or one missed (1), with a report either way.
  REQUIRE((rc == 0 || rc == 1));
  // The client ran on n1 against the server on n2, with the fixed program and its report mode.
  CHECK_THAT(log1, Catch::Contains("perftest ib_write_bw (client) on 198.19.0.11: running /usr/bin/ib_write_bw"));
  CHECK_THAT(log1, Catch::Contains("--run_infinitely -D 1 198.19.0.12"));
  CHECK_THAT(log1, Catch::Contains("first report"));
  CHECK_THAT(log2, Catch::Contains("perftest ib_write_bw (server) on 198.19.0.12: running"));
  json result = json::parse(readFile(dir + "/report/result.json"));
  const json& trial = result["trials"][0];
  INFO("trial: " << trial.dump().substr(0, 4000));
  double baseline = trial["job"]["baseline_Bps"].get<double>();
  std::printf("perftest ib_write_bw under a playbook: exit %d, baseline %.1f Mb/s\n", rc,
              baseline * 8 / 1e6);
  // A soft-RoCE link between TCG guests moves tens to hundreds of Mb/s.
  CHECK(baseline * 8 > 1e6);
  CHECK(baseline * 8 < 10e9);
}

// The number after NAME in a guest's `rdma resource show rxe0` line ("0: rxe0: pd 1 cq 2 qp 1
// cm_id 0 mr 0 ctx 0 srq 0"), or -1 when the guest did not report one.
long rdmaResource(const rc::lab::NodeRecord& n, const std::string& name) {
  std::string res = guestReport(n, "rdma_res");
  auto at = res.find(" " + name + " ");
  return at == std::string::npos ? -1 : std::stol(res.substr(at + name.size() + 2));
}

// The number before " B (" in an event detail such as "12345 B (12.1KiB) by RDMA WRITE ...".
uint64_t bytesIn(const std::string& detail) {
  auto at = detail.find(" B (");
  if (at == std::string::npos) return 0;
  auto from = detail.rfind(' ', at - 1);
  return std::stoull(detail.substr(from == std::string::npos ? 0 : from + 1, at));
}

const json* faultEvent(const json& fault, const std::string& what) {
  for (const auto& e : fault["events"])
    if (e["what"] == what) return &e;
  return nullptr;
}

// The incast fault over verbs (issue 11): with both guests' rxe0 ACTIVE, transport "auto"
// becomes "verbs" for the receiver and the sender together; n2's QPs RDMA WRITE into n1 while
// a verbs all-reduce runs. Ground truth: the switch's meter of RoCEv2 (UDP 4791) frames
// leaving n1's port carried at least the job's bytes into n1 plus what the sink reports, and
// afterwards neither guest holds a QP (but the kernel's GSI QP), an MR or an rdma_cm id.
TEST_CASE("incast over verbs during a verbs workload: RDMA WRITEs reach the receiver; nothing stays behind",
          "[incast-verbs]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  // What the guests' RDMA devices hold (the status is rewritten every 2 s): QPs, MRs and
  // rdma_cm ids. Once the fault and the job are over, the only QP left is the kernel's own
  // (GSI, QP1), and no MR or rdma_cm id remains. (PDs and device contexts are not counted:
  // librdmacm keeps one of each open in an agent for the rest of its life once it used it.)
  auto held = [&](const rc::lab::NodeRecord& n) {
    return std::vector<long>{rdmaResource(n, "qp"), rdmaResource(n, "mr"), rdmaResource(n, "cm_id")};
  };
  const std::vector<long> idle{1, 0, 0};
  INFO("before: n1 " << guestReport(n1, "rdma_res") << "; n2 " << guestReport(n2, "rdma_res"));
  json set = switchRequest(control, {{"cmd", "set_meter"}, {"port", "n1"}, {"l4_dst", 4791}});
  REQUIRE(set["ok"] == true);
  struct DropMeter {
    std::string control;
    ~DropMeter() { trySwitchRequest(control, {{"cmd", "del_meter"}, {"port", "n1"}, {"l4_dst", 4791}}); }
  } dropMeter{control};
  auto connects = [&] {
    std::string log = readFile(n1.guestDir + "/agent.log");
    size_t k = 0;
    for (size_t at = log.find("verbs: rank"); at != std::string::npos; at = log.find("verbs: rank", at + 1)) k++;
    return k;
  };
  const size_t connectsBefore = connects();
  Proc wl = spawnCli(cliDir(), {"workload", "--inventory", lab->inventory(), "--node", "n1", "--node", "n2",
                                "--transport", "verbs", "--kind", "allreduce", "--size", "128KiB", "--for", "10s",
                                "--reconnect-timeout", "10s", "--timeout", "30s", "--json"});
  CHECK(eventually([&] { return connects() > connectsBefore; }, 20s, 100ms));
  std::this_thread::sleep_for(1s);
  std::string out, err;
  int irc = runCli(cliDir(),
                   {"inject", "incast", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2", "--set", "receiver=n1",
                    "--set", "fan_in=2", "--set", "size=256KiB", "--for", "3s", "--json"},
                   &out, &err);
  INFO("inject stdout: " << out << "\nstderr: " << err);
  int rc = waitCli(wl);
  std::string wout = readFile(wl.out);
  INFO("workload stderr: " << readFile(wl.err));
  REQUIRE(irc == 0);
  REQUIRE(rc == 0);
  json report = json::parse(out);
  REQUIRE(report["nodes"].size() == 2);
  uint64_t received = 0, sent = 0;
  for (const auto& n : report["nodes"]) {
    const json& f = n["fault"];
    CAPTURE(n["node"], f.dump());
    CHECK(f.value("error", "") == "");
    CHECK(f["params"]["transport"] == "verbs");  // "auto", decided by the controller for both
    if (n["node"] == "n1") {
      CHECK(f["params"]["role"] == "receiver");
      const json* got = faultEvent(f, "received");
      REQUIRE(got);
      std::string d = (*got)["detail"];
      CHECK_THAT(d, Catch::Contains("by RDMA WRITE on 2 flows"));
      received = bytesIn(d);
    } else {
      CHECK(f["params"]["role"] == "sender");
      const json* c = faultEvent(f, "connected");
      REQUIRE(c);
      CHECK_THAT((*c)["detail"].get<std::string>(), Catch::StartsWith("2 QPs -> " + n1.dataAddress));
      const json* s = faultEvent(f, "sent");
      REQUIRE(s);
      std::string d = (*s)["detail"];
      CHECK_THAT(d, Catch::Contains("written by RDMA WRITE"));
      CHECK(faultEvent(f, "qp_error") == nullptr);
      sent = bytesIn(d);
    }
  }
  json r = json::parse(wout);
  uint64_t jobInto1 = 0;
  for (const auto& n : r["nodes"]) {
    INFO("node " << n["node"] << ": " << n["error"]);
    CHECK(n["end_reason"] == "completed");
    CHECK(n["verified"] == true);
    if (n["node"] == "n1") jobInto1 = n["counters"]["rx_bytes"].get<uint64_t>();
  }
  json meters = switchRequest(control, {{"cmd", "meters"}});
  uint64_t roce = 0;
  for (const auto& m : meters["meters"])
    if (m["port"] == "n1" && m["l4_dst"] == 4791) roce = m["bytes"].get<uint64_t>();
  std::printf("incast over verbs (2 QPs n2 -> n1, 256 KiB bursts, 3 s) beside a verbs all-reduce: sink %llu B, "
              "sender %llu B completed; the job %llu B into n1; RoCEv2 frames to n1's port %llu B\n",
              (unsigned long long)received, (unsigned long long)sent, (unsigned long long)jobInto1,
              (unsigned long long)roce);
  // The sink counts what the sender's completions reported (every 200 ms and at the end).
  CHECK(received > 0);
  CHECK(received <= sent);
  // Every payload byte into n1, the job's and the incast's, crossed n1's port as RoCEv2.
  CHECK(roce >= jobInto1 + received);
  // Nothing stays behind: every QP, MR and rdma_cm id of the fault (and of the job) is gone.
  bool clean = eventually([&] { return held(n1) == idle && held(n2) == idle; }, 20s, 200ms);
  INFO("after: n1 " << guestReport(n1, "rdma_res") << "; n2 " << guestReport(n2, "rdma_res"));
  CHECK(clean);
}

// A verbs incast whose sender's data NIC goes down for 3 s: its QPs fail (rxe: "local QP
// operation error" while the GID is gone, or a QP that rxe retries without end: no completion
// for 5 s), the fault counts and reports each with its status and time, sets the flows up
// again once the NIC is back, and runs to its end.
TEST_CASE("incast over verbs: a QP error is reported, the flow set up again, nothing left behind",
          "[incast-verbs][qp-error]") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  json set = switchRequest(control, {{"cmd", "set_meter"}, {"port", "n1"}, {"l4_dst", 4791}});
  REQUIRE(set["ok"] == true);
  struct DropMeter {
    std::string control;
    ~DropMeter() { trySwitchRequest(control, {{"cmd", "del_meter"}, {"port", "n1"}, {"l4_dst", 4791}}); }
  } dropMeter{control};
  auto roceTo1 = [&] {
    json m = switchRequest(control, {{"cmd", "meters"}});
    for (const auto& x : m["meters"])
      if (x["port"] == "n1" && x["l4_dst"] == 4791) return x["bytes"].get<uint64_t>();
    return uint64_t(0);
  };
  Proc incast = spawnCli(cliDir(), {"inject", "incast", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2", "--set",
                                    "receiver=n1", "--set", "fan_in=2", "--set", "size=256KiB", "--set",
                                    "transport=verbs", "--for", "20s", "--json"});
  // Flap once the WRITEs flow. 20 s, not 12: when rxe errors one flow and retries the other
  // without end, the sender drops that one as stalled only 5 s after its last completion; a
  // 12 s incast then ended before any WRITE flowed again (a CI run, 0 B after the flap).
  CHECK(eventually([&] { return roceTo1() > (1u << 20); }, 20s, 100ms));
  std::string fout, ferr;
  int frc = runCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2", "--set",
                              "down=3s", "--for", "30s"},
                   &fout, &ferr);
  INFO("link_flap stdout: " << fout << "\nstderr: " << ferr);
  CHECK(frc == 0);
  const uint64_t afterFlap = roceTo1();
  int irc = waitCli(incast);
  std::string out = readFile(incast.out);
  INFO("incast stdout: " << out << "\nstderr: " << readFile(incast.err));
  REQUIRE(irc == 0);
  json report = json::parse(out);
  std::string sentDetail, errors;
  uint64_t received = 0;
  for (const auto& n : report["nodes"]) {
    const json& f = n["fault"];
    CHECK(f.value("error", "") == "");  // the fault ran to its end: no crash, no give-up
    if (n["node"] == "n1") {
      if (const json* got = faultEvent(f, "received")) received = bytesIn((*got)["detail"]);
      continue;
    }
    for (const auto& e : f["events"])
      if (e["what"] == "qp_error") errors += e["detail"].get<std::string>() + "\n";
    if (const json* s = faultEvent(f, "sent")) sentDetail = (*s)["detail"];
  }
  std::printf("verbs incast, n2's data NIC down 3 s: QP errors reported:\n%s n2 sent: %s\n n1 received %llu B; "
              "RoCEv2 to n1 after the flap: %llu B\n",
              errors.c_str(), sentDetail.c_str(), (unsigned long long)received,
              (unsigned long long)(roceTo1() - afterFlap));
  REQUIRE_FALSE(errors.empty());
  // Each with its status (rxe: "local QP operation error (status 2)"), or as a stall where rxe
  // kept retrying with no completion at all; and when.
  std::istringstream lines(errors);
  for (std::string l; std::getline(lines, l);) {
    CHECK(l.find(" UTC") != std::string::npos);
    CHECK((l.find("(status ") != std::string::npos || l.find("no completion for") != std::string::npos));
  }
  CHECK_THAT(sentDetail, Catch::Contains(" QP errors"));
  CHECK_THAT(sentDetail, Catch::Matches(R"([\s\S]*QPs set up again [1-9][\s\S]*)"));
  CHECK(received > 0);
  // The flows moved again after the flap.
  CHECK(roceTo1() > afterFlap);
  auto held = [&](const rc::lab::NodeRecord& n) {
    return std::vector<long>{rdmaResource(n, "qp"), rdmaResource(n, "mr"), rdmaResource(n, "cm_id")};
  };
  const std::vector<long> idle{1, 0, 0};
  bool clean = eventually([&] { return held(n1) == idle && held(n2) == idle; }, 20s, 200ms);
  INFO("after: n1 " << guestReport(n1, "rdma_res") << "; n2 " << guestReport(n2, "rdma_res"));
  CHECK(clean);
}

// A multi-party fault refused on one party runs on none: with n2's data NIC down, n2 refuses
// the verbs incast's sender part (no ACTIVE RDMA port, or no route), and n1's sink, already
// scheduled, is reverted before its instant rather than listening alone for the whole window.
TEST_CASE("a verbs incast whose sender is refused (its NIC down) runs on no node, and says so",
          "[incast-verbs][refused]") {
  auto& lab = sharedLab();
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  Proc flap = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s",
                                  "--node", "n2", "--set", "down=10s", "--for", "30s"});
  struct WaitFlap {  // the flap's inject ends (its link up) also when a REQUIRE below fails
    Proc& p;
    bool done = false;
    ~WaitFlap() {
      if (!done) waitCli(p);
    }
  } waitFlap{flap};
  REQUIRE(eventually([&] { return guestReport(n2, "port_state").find("ACTIVE") == std::string::npos; }, 20s, 100ms));
  std::string out, err;
  int rc = runCli(cliDir(), {"inject", "incast", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n2",
                             "--set", "receiver=n1", "--set", "fan_in=2", "--set", "transport=verbs", "--for", "20s",
                             "--json"},
                  &out, &err);
  INFO("incast stdout: " << out << "\nstderr: " << err);
  CHECK(rc == 2);
  // n2 refuses at schedule time: "no RDMA device with an ACTIVE port" while rxe0 is down, or
  // "no route to the receiver" once the kernel removed the route with the link.
  CHECK_THAT(err, Catch::Contains("rdmachaos: refused: n2: incast: "));
  CHECK_THAT(err, Catch::Contains("incast refused on 1 of 2 nodes: reverting it on the other 1 before it starts"));
  json report = json::parse(out);
  REQUIRE(report["nodes"].size() == 1);  // n1: scheduled, then reverted
  const json& n = report["nodes"][0];
  CHECK(n["node"] == "n1");
  CHECK(n["fault"]["end_reason"] != "completed");  // the agent says "reverted"
  // Reverted before its instant (inject leaves 1 s between the schedule and the instant when a
  // fault has several nodes); should a refusal come later than that, the part runs only until
  // the revert arrives, far from its 20 s, and inject says so.
  if (int64_t applied = n["fault"].value("applied_ns", int64_t(0)); applied != 0) {
    CHECK(n["fault"]["ended_ns"].get<int64_t>() - applied < int64_t(2e9));
    CHECK_THAT(err, Catch::Contains("n1: its part started before the revert arrived and ran "));
  } else {
    CHECK(faultEvent(n["fault"], "listening") == nullptr);  // the sink never ran
  }
  CHECK(rdmaResource(n1, "qp") == 1);  // only rxe's own QP1
  waitFlap.done = true;
  int frc = waitCli(flap);
  INFO("link_flap stderr: " << readFile(flap.err));
  CHECK(frc == 0);
  CHECK(eventually([&] { return guestReport(n2, "port_state").find("ACTIVE") != std::string::npos; }, 20s, 100ms));
}

TEST_CASE("link_flap of a guest's lab switch port, injected through the guest's agent") {
  auto& lab = sharedLab();
  std::string control = lab->switchControl();
  auto adminUp = [&] {
    json r = switchRequest(control, {{"cmd", "counters"}, {"port", "n2"}});
    REQUIRE(r["ok"] == true);
    return r["ports"][0]["admin_up"].get<bool>();
  };
  REQUIRE(adminUp());
  // The agent in guest n2 drives the switch on the host (QEMU's guestfwd relay).
  Proc inject = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s",
                                    "--node", "n2", "--set", "switch_port=n2", "--set", "down=3s",
                                    "--for", "30s"});
  bool wentDown = eventually([&] { return !adminUp(); }, 20s, 50ms);
  int rc = waitCli(inject);
  INFO("inject stdout: " << readFile(inject.out) << "\nstderr: " << readFile(inject.err));
  CHECK(rc == 0);
  CHECK(wentDown);
  CHECK(adminUp());
}

// The guest's init restarts its agent, and the agent's journal (in the guest's tmpfs)
// outlives it: kill -9 of n3's agent while it holds n3's data NIC down must bring the agent
// back, and the new agent must revert the fault from its journal before it serves anyone.
// The kill goes through the lab's hook: the host writes the signal's name into the node's
// share (DIR/nodes/n3/guest/signal-agent), the guest's init sends it to the agent.
TEST_CASE("kill -9 of a guest's agent during a fault: the guest restarts it, the journal reverts the fault",
          "[agent-restart]") {
  auto& lab = sharedLab();
  auto n3 = lab->node("n3");
  auto restarts = [&] {
    std::string r = guestReport(n3, "agent_restarts");
    return r.empty() ? -1 : std::stoi(r);
  };
  REQUIRE(eventually([&] { return guestReport(n3, "agent_listening") == "yes"; }, 20s, 100ms));
  const int restartsBefore = restarts();
  const std::string pidBefore = guestReport(n3, "agent_pid");
  REQUIRE(restartsBefore >= 0);
  REQUIRE_FALSE(pidBefore.empty());
  const size_t logBefore = readFile(n3.guestDir + "/agent.log").size();
  const size_t initBefore = readFile(n3.guestDir + "/init.log").size();
  // A long link-down of n3's data NIC, held by a controller for the whole test.
  Proc ctl = spawnCli(cliDir(), {"inject", "link_flap", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n3", "--set",
                                 "down=60s", "--for", "90s"});
  struct StopCtl {
    Proc& p;
    ~StopCtl() {
      if (p.pid > 0 && ::kill(p.pid, SIGKILL) == 0) ::waitpid(p.pid, nullptr, 0);
    }
  } stopCtl{ctl};
  bool down = eventually([&] { return guestReport(n3, "data0") == "down"; }, 30s, 100ms);
  INFO("inject stderr: " << readFile(ctl.err));
  REQUIRE(down);
  CHECK(guestReport(n3, "port_state").find("ACTIVE") == std::string::npos);
  {
    std::ofstream f(n3.guestDir + "/signal-agent");
    f << "KILL\n";
  }
  // The init restarts the agent (a new pid, one restart more); the data NIC comes back up with
  // it, though the controller's lease still holds: the new agent reverted the journal.
  bool back = eventually([&] { return restarts() > restartsBefore && guestReport(n3, "agent_listening") == "yes"; },
                         60s, 100ms);
  std::string init = readFile(n3.guestDir + "/init.log").substr(initBefore);
  std::string log = readFile(n3.guestDir + "/agent.log").substr(logBefore);
  INFO("n3's init.log since: " << init << "\nn3's agent.log since: " << log);
  REQUIRE(back);
  CHECK(guestReport(n3, "agent_pid") != pidBefore);
  CHECK_THAT(init, Catch::Contains("sent SIGKILL to the agent (pid " + pidBefore + ")"));
  CHECK_THAT(init, Catch::Contains("agent exited with status 137"));  // 128 + SIGKILL
  bool up = eventually([&] { return guestReport(n3, "data0") == "up"; }, 20s, 100ms);
  CHECK(up);
  log = readFile(n3.guestDir + "/agent.log").substr(logBefore);
  CHECK_THAT(log, Catch::Contains("reverted journaled fault"));
  CHECK_THAT(log, Catch::Contains("link_flap"));
  bool active = eventually([&] { return guestReport(n3, "port_state").find("ACTIVE") != std::string::npos; }, 20s,
                           100ms);
  CHECK(active);
  {
    auto at = log.find("reverted journaled fault");
    if (at != std::string::npos)
      std::printf("n3's agent after kill -9 (restart %d): %s\n", restarts(),
                  log.substr(at, log.find('\n', at) - at).c_str());
  }
  // The controller that held the fault hears of its end; the agent is reachable again, with
  // rxe0 ACTIVE.
  std::string out, err;
  // A restarted agent's first hello scans its RDMA devices again: slow under TCG.
  int rc = runCli(cliDir(), {"agents", "--inventory", lab->inventory(), "--json", "--timeout", "30s"}, &out, &err);
  INFO("agents stderr: " << err);
  INFO("n3's init.log since, after `agents`: " << readFile(n3.guestDir + "/init.log").substr(initBefore));
  INFO("n3's agent.log since, after `agents`: " << readFile(n3.guestDir + "/agent.log").substr(logBefore));
  INFO("n3's status: " << readFile(n3.guestDir + "/status"));
  REQUIRE(rc == 0);
  bool seen = false;
  for (const auto& a : json::parse(out))
    if (a.value("node", "") == "n3") {
      seen = true;
      INFO("n3: " << a.dump());
      const json& devs = a["capabilities"]["rdma_devices"];
      REQUIRE(devs.size() == 1);
      CHECK(devs[0]["ports"][0]["state"].get<std::string>().find("ACTIVE") != std::string::npos);
    }
  CHECK(seen);
}

// Runs SCRIPT in the guest of N (the lab's guest-run hook, looked at every 2 s) and returns its
// output, ending with "status=N".
std::string guestRun(const rc::lab::NodeRecord& n, const std::string& script) {
  const std::string result = n.guestDir + "/guest-run.out";
  fs::remove(result);
  {
    std::ofstream f(n.guestDir + "/guest-run.tmp");
    f << script << "\n";
  }
  fs::rename(n.guestDir + "/guest-run.tmp", n.guestDir + "/guest-run");
  bool done = eventually([&] { return fs::exists(result); }, 60s, 100ms);
  INFO("guest script: " << script);
  REQUIRE(done);
  return readFile(result);
}

// tc-red on a real kernel: sch_red and fq are in the guests' 6.1 kernel. A tuned fq (a limit that
// is not its default, its own handle) under the fault, the agent killed with -9 while RED is
// the root: the restarted agent's replay must bring back fq exactly, as `tc -j qdisc show` prints
// it. Before, the snapshot kept only the kind, and fq came back with the kernel's defaults.
TEST_CASE("kill -9 of a guest's agent under a tc-red ecn_shift: the replay restores the tuned fq exactly",
          "[tc-red]") {
  auto& lab = sharedLab();
  auto n3 = lab->node("n3");
  REQUIRE(eventually([&] { return guestReport(n3, "agent_listening") == "yes"; }, 60s, 100ms));
  // Whatever happens, data0 gets the kernel's default root back at the end.
  struct Default {
    const rc::lab::NodeRecord& n;
    ~Default() {
      std::ofstream(n.guestDir + "/guest-run") << "tc qdisc del dev data0 root\n";
    }
  } restoreDefault{n3};
  std::string set = guestRun(n3, "modprobe sch_fq; modprobe sch_red; "
                                 "tc qdisc replace dev data0 root fq limit 4321 flow_limit 77 && "
                                 "tc -j qdisc show dev data0");
  REQUIRE(set.find("status=0") != std::string::npos);
  const std::string before = set.substr(0, set.find("status="));
  INFO("before: " << before);
  REQUIRE(before.find("\"kind\":\"fq\"") != std::string::npos);
  REQUIRE(before.find("\"limit\":4321") != std::string::npos);
  const size_t logBefore = readFile(n3.guestDir + "/agent.log").size();
  const int restartsBefore = std::stoi(guestReport(n3, "agent_restarts"));
  Proc ctl = spawnCli(cliDir(), {"inject", "ecn_shift", "--inventory", lab->inventory(), "--timeout", "30s", "--node",
                                 "n3", "--set", "backend=tc-red", "--set", "kmin=100KiB", "--set", "kmax=400KiB",
                                 "--for", "120s"});
  struct StopCtl {
    Proc& p;
    ~StopCtl() {
      if (p.pid > 0 && ::kill(p.pid, SIGKILL) == 0) ::waitpid(p.pid, nullptr, 0);
    }
  } stopCtl{ctl};
  std::string during;
  bool red = eventually([&] {
    during = guestRun(n3, "tc -j qdisc show dev data0");
    return during.find("\"kind\":\"red\"") != std::string::npos;
  }, 60s, 500ms);
  INFO("inject stderr: " << readFile(ctl.err) << "\nqdiscs: " << during);
  REQUIRE(red);
  {
    std::ofstream f(n3.guestDir + "/signal-agent");
    f << "KILL\n";
  }
  bool back = eventually([&] {
    std::string r = guestReport(n3, "agent_restarts");
    return !r.empty() && std::stoi(r) > restartsBefore && guestReport(n3, "agent_listening") == "yes";
  }, 60s, 100ms);
  std::string log = readFile(n3.guestDir + "/agent.log").substr(logBefore);
  INFO("n3's agent.log since: " << log);
  REQUIRE(back);
  CHECK_THAT(log, Catch::Contains("reverted journaled fault") && Catch::Contains("ecn_shift"));
  std::string after = guestRun(n3, "tc -j qdisc show dev data0");
  after = after.substr(0, after.find("status="));
  CHECK(after == before);
  std::printf("n3's data0 after kill -9 under tc-red and the replay: %s", after.c_str());
}

// Issue 23, on rxe: the lab switch drops, corrupts and delays the 200th RDMA WRITE packet of
// n1 while a verbs all-reduce runs (playbooks/gbn.toml); the go-back-N oracle reads each
// rule's capture. A drop gives a NAK naming the dropped PSN and a retransmission from it; the
// job's data is verified throughout. What rxe does about the corrupted and the delayed frame
// is printed (the oracle's lines), as the issue asks.
TEST_CASE("packet faults on rxe: a dropped WRITE is NAKed and resent from its PSN; the job verified", "[packet]") {
  auto& lab = sharedLab();
  std::string dir = cliDir() + "/gbn";
  std::string out, err;
  int rc = runCli(cliDir(), {"run", env("RDMACHAOS_SOURCE_DIR") + "/playbooks/gbn.toml", "--inventory",
                             lab->inventory(), "--timeout", "30s", "--report-dir", dir},
                  &out, &err);
  INFO("stdout: " << out << "\nstderr: " << err);
  std::printf("%s", out.substr(out.find("packet fault"), out.find("NIC counters") - out.find("packet fault")).c_str());
  json r = json::parse(readFile(dir + "/result.json"));
  REQUIRE(r.contains("packet_faults"));
  REQUIRE(r["packet_faults"].size() == 3);
  for (const auto& p : r["packet_faults"]) {
    INFO(p.dump(2).substr(0, 3000));
    CHECK(p["acted"] == 1);
    REQUIRE(p["capture"].is_string());
    CHECK(fs::file_size(dir + "/" + p["capture"].get<std::string>()) > 1000);
    REQUIRE(p.contains("oracle"));
    size_t episodes = 0;
    for (const auto& fl : p["oracle"]["flows"])
      for (const auto& e : fl["episodes"]) {
        episodes++;
        CHECK(e["delivered"] == true);
        if (p["action"] == "drop" && e["by_timeout"] == true) {
          // No packet followed the taken one, so nothing out of sequence reached the responder
          // and it sent no NAK: the requester's retransmission timer fired and went back to its
          // oldest unacknowledged PSN, the taken one or before it (an ACK not yet sent: the
          // oracle's rule). Seen in a CI rehearsal on 2026-11-29: back to 11978109 for 11978136.
          CHECK(e["nak_psn"].is_null());
          const int64_t back = (e["first_psn"].get<int64_t>() - e["retransmit_psn"].get<int64_t>()) & 0xffffff;
          CHECK(back < (1 << 23));  // at or before the taken PSN, modulo 2^24
          CHECK(e["timeout_wait_ns"].get<int64_t>() > 0);
        } else if (p["action"] == "drop") {
          // The responder NAKs the first missing PSN; the requester goes back to it, or further
          // back when its retry timer fired while the NAK was on its way (to its oldest
          // unacknowledged PSN: once in 11 runs on 2026-11-28, 53 PSNs before the NAK's).
          CHECK(e["nak_psn"] == e["first_psn"]);
          const int64_t back = (e["nak_psn"].get<int64_t>() - e["retransmit_psn"].get<int64_t>()) & 0xffffff;
          CHECK(back < (1 << 23));  // at or before the NAK's PSN, modulo 2^24
          CHECK(e["duplicates"].get<int64_t>() >= back);
          CHECK(e["nak_generation_ns"].get<int64_t>() > 0);
          CHECK(e["nak_reaction_ns"].get<int64_t>() > 0);
        }
      }
    CHECK(episodes == 1);
  }
  // The job's data stayed right: no corruption on any node, and no iteration failed but one
  // whose connection loss the node detected and set up again (a reconnect). The faults' own
  // effect is the oracle's above. Not "no failed iteration": in 2 of 11 runs on one lab
  // (2026-11-28) and in a CI rehearsal, n2's data write to n3, a pair no rule watches, ended
  // in "remote invalid request error (status 9)" in the baseline or after the faults, and the
  // job reconnected and went on, verified (docs/status.md).
  for (const auto& c : r["counters"]) {
    INFO(c.dump());
    CHECK(c["delta"].value("workload_corruptions", 0) == 0);
    CHECK(c["delta"].value("workload_failed_iterations", 0) <= c["delta"].value("workload_reconnects", 0));
  }
  // rxe went back N each time: the oracle found nothing, so the playbook passed.
  CHECK(r["outcome"]["verdict"] == "passed");
  CHECK(rc == 0);
  CHECK_THAT(readFile(dir + "/report.html"), Catch::Contains("capture-t0-drop-write-n1.pcapng"));
  // Wireshark's dissector reads the switch's capture as RoCE.
  if (std::system("command -v tshark > /dev/null 2>&1") == 0) {
    std::string t = dir + "/tshark.txt";
    std::system(("tshark -r " + dir + "/capture-t0-drop-write-n1.pcapng -Y 'infiniband.bth.opcode == 17' -T fields "
                 "-e infiniband.bth.psn > " + t + " 2>/dev/null").c_str());
    CHECK(readFile(t).size() > 0);
  }
}

// lossy-roce's sweep of the drop probability runs to a report whose curve falls: at 5 % the
// job moves less while the rule is on than at 0 (the control: a rule that takes nothing), and
// the rule acts on more frames as the probability rises. (Against the control rather than each
// trial's baseline: the TCG guests' throughput drifts from trial to trial.)
TEST_CASE("lossy-roce: the loss sweep runs to a report; goodput falls as loss rises", "[packet]") {
  auto& lab = sharedLab();
  std::string dir = cliDir() + "/lossy";
  // Four trials of 23 s: longer than runCli's 90 s.
  Proc run = spawnCli(cliDir(), {"run", env("RDMACHAOS_SOURCE_DIR") + "/playbooks/lossy-roce.toml", "--inventory",
                                 lab->inventory(), "--timeout", "30s", "--report-dir", dir});
  int rc = waitCli(run, std::chrono::seconds(300));
  std::string out = readFile(run.out), err = readFile(run.err);
  INFO("stdout: " << out << "\nstderr: " << err);
  CHECK(rc != 2);
  auto at = out.find("sweep of probability");
  REQUIRE(at != std::string::npos);
  std::printf("%s", out.substr(at, out.find("\n\n", at) - at + 1).c_str());
  json r = json::parse(readFile(dir + "/result.json"));
  const json& series = r["series"];
  const int64_t bin = series["bin_ns"];
  std::vector<double> goodputs, acted;
  for (const auto& t : r["trials"]) {
    REQUIRE(t["fault_start_ns"].is_number());
    int64_t from = t["fault_start_ns"], to = t["fault_end_ns"];
    double bytes = 0;
    for (int64_t k = from / bin; k < to / bin; k++) bytes += series["job"][size_t(k)].get<double>();
    double goodput = bytes / (double(to / bin - from / bin) * double(bin) / 1e9);
    goodputs.push_back(goodput);
    acted.push_back(t["job"]["packet"].value("packets_acted", -1.0));
  }
  REQUIRE(goodputs.size() == 4);
  CHECK(acted[0] == 0);
  for (size_t i = 1; i < acted.size(); i++) CHECK(acted[i] >= acted[i - 1]);
  CHECK(acted[3] > 50);
  CHECK(goodputs[3] < goodputs[0]);
  std::printf("lossy-roce's verdict: %s (exit %d)\n", r["outcome"].value("verdict", "?").c_str(), rc);
  CHECK_THAT(readFile(dir + "/report.html"), Catch::Contains("Sweep of probability"));
}

// Open MPI over UCX on rxe, started by rdmachaos (issue 53's vm point): n1's agent runs mpirun,
// whose daemon reaches n2 over ssh to the guest's dropbear; the ranks' all-reduce goes through
// pml ucx on rc_verbs. The 2 s flap of n2's switch port stalls the job, rxe's RC retries (UCX's
// transport waits, it does not fail), and the job resumes; the dropped SEND is NAKed and resent
// from its PSN. Every rank reported and checked its sums, and nothing of the job is left.
TEST_CASE("mpi-ucx-roce: Open MPI over UCX on rxe survives a flap and a dropped SEND; what UCX did is in the report",
          "[mpi]") {
  auto& lab = sharedLab();
  auto n1 = lab->node("n1"), n2 = lab->node("n2");
  const size_t logBefore = readFile(n1.guestDir + "/agent.log").size();
  std::string dir = cliDir() + "/mpi-ucx";
  Proc run = spawnCli(cliDir(), {"run", env("RDMACHAOS_SOURCE_DIR") + "/playbooks/mpi-ucx-roce.toml", "--inventory",
                                 lab->inventory(), "--timeout", "30s", "--report-dir", dir});
  int rc = waitCli(run, std::chrono::seconds(240));
  std::string out = readFile(run.out), err = readFile(run.err);
  INFO("stdout: " << out << "\nstderr: " << err);
  const std::string log = readFile(n1.guestDir + "/agent.log").substr(logBefore);
  INFO("n1's agent log: " << log);
  // The transport the job ran on, as rank 0's agent started it.
  CHECK_THAT(log, Catch::Contains("(Open MPI pml ucx, UCX_TLS=rc_verbs,ud_verbs,self on rxe0:1)"));
  CHECK_THAT(log, Catch::Contains(" 0 errors, 0 corruptions"));
  json r = json::parse(readFile(dir + "/result.json"));
  REQUIRE(r["trials"].size() == 1);
  const json& t = r["trials"][0];
  CHECK(t["problems"].empty());
  // The report's line on the job: its transport and how it ended, in the trial and on the terminal.
  REQUIRE(t.contains("job_notes"));
  const std::string note = t["job_notes"][0];
  CHECK_THAT(note, Catch::StartsWith("the job, on n1: Open MPI pml ucx, UCX_TLS=rc_verbs,ud_verbs,self on rxe0:1; "));
  CHECK_THAT(note, Catch::Contains("no rank failed") || Catch::Contains("every rank finished"));
  CHECK_THAT(out, Catch::Contains("  the job, on n1: Open MPI pml ucx"));
  // The flap hit the job (a stall about its outage) and it came back: UCX resumed.
  CHECK(t["job"]["impact"]["longest_stall_ns"].get<int64_t>() >= 1'500'000'000);
  CHECK(t["job"]["impact"]["recovered"] == true);
  // What UCX's RC transport did meanwhile: rxe's retransmission timer fired (its retries), and
  // no QP gave up (a retry-exceeded error would have ended the job with UCX's error).
  int64_t retries = 0, exceeded = 0;
  for (const auto& w : t["nic"]["fault_windows"])
    if (w["step"] == "flap-n2")
      for (const auto& [node, c] : w["nodes"].items()) {
        retries += c.value("rdma.completer_retry_err", int64_t(0));
        exceeded += c.value("rdma.retry_exceeded_err", int64_t(0));
      }
  CHECK(retries >= 1);
  CHECK(exceeded == 0);
  // The dropped SEND: one frame taken, NAKed, resent from its PSN, the oracle satisfied.
  REQUIRE(r["packet_faults"].size() == 1);
  const json& p = r["packet_faults"][0];
  INFO(p.dump(2).substr(0, 3000));
  CHECK(p["acted"] == 1);
  size_t episodes = 0;
  for (const auto& fl : p["oracle"]["flows"])
    for (const auto& e : fl["episodes"]) {
      episodes++;
      CHECK(e["delivered"] == true);
    }
  CHECK(episodes == 1);
  CHECK(r["outcome"]["verdict"] == "passed");
  CHECK(rc == 0);
  // Nothing of the job outlives it in either guest: mpirun, its daemon, the ranks, the ssh.
  for (const auto& n : {n1, n2}) {
    const std::string left = guestRun(n, "pgrep -a -f 'orted|observe_mpi_job|mpirun|ssh -F' | grep -v pgrep || true");
    INFO(n.name << ": " << left);
    CHECK(left.find("orted") == std::string::npos);
    CHECK(left.find("observe_mpi_job") == std::string::npos);
    CHECK(left.find("mpirun") == std::string::npos);
  }
}

// A packet fault whose agent is killed (-9): the restarted agent deletes the rule by the name
// its journal holds, so the switch keeps none (long before the rule's own lifetime).
TEST_CASE("kill -9 of a guest's agent under a packet fault leaves no rule in the switch", "[packet]") {
  auto& lab = sharedLab();
  auto n3 = lab->node("n3");
  std::string control = lab->switchControl();
  auto rules = [&] {
    json r = switchRequest(control, {{"cmd", "packet_rules"}});
    REQUIRE(r["ok"] == true);
    return r["rules"].size();
  };
  REQUIRE(eventually([&] { return guestReport(n3, "agent_listening") == "yes"; }, 20s, 100ms));
  const std::string restartsBefore = guestReport(n3, "agent_restarts");
  const size_t logBefore = readFile(n3.guestDir + "/agent.log").size();
  Proc ctl = spawnCli(cliDir(), {"inject", "packet", "--inventory", lab->inventory(), "--timeout", "30s", "--node", "n3",
                                 "--set", "protocol=roce", "--set", "action=drop", "--set", "select=probability",
                                 "--set", "probability=0.001", "--set", "duration=300s", "--for", "300s"});
  struct StopCtl {
    Proc& p;
    ~StopCtl() {
      if (p.pid > 0 && ::kill(p.pid, SIGKILL) == 0) ::waitpid(p.pid, nullptr, 0);
    }
  } stopCtl{ctl};
  bool added = eventually([&] { return rules() == 1; }, 60s, 100ms);
  INFO("inject stderr: " << readFile(ctl.err));
  REQUIRE(added);
  {
    std::ofstream f(n3.guestDir + "/signal-agent");
    f << "KILL\n";
  }
  bool gone = eventually([&] { return rules() == 0; }, 90s, 200ms);
  std::string log = readFile(n3.guestDir + "/agent.log").substr(logBefore);
  INFO("n3's agent.log since: " << log);
  REQUIRE(gone);
  // The guest's init restarted it (its status file is written every few seconds).
  CHECK(eventually([&] { return guestReport(n3, "agent_restarts") != restartsBefore; }, 30s, 200ms));
  // The restarted agent logs the revert; the guest's log reaches the host a moment later (a
  // fresh-clone CI read it the instant the rule was gone, before the line arrived).
  bool logged = eventually(
      [&] {
        log = readFile(n3.guestDir + "/agent.log").substr(logBefore);
        return log.find("reverted journaled fault") != std::string::npos;
      },
      30s, 200ms);
  INFO("n3's agent.log since, later: " << log);
  CHECK(logged);
  CHECK_THAT(log, Catch::Contains("(packet)"));
  REQUIRE(eventually([&] { return guestReport(n3, "agent_listening") == "yes"; }, 60s, 100ms));
}

TEST_CASE("lab down stops every guest and the switch and removes every file") {
  auto& lab = sharedLab();
  std::string dir = lab->dir();
  auto st = rc::lab::loadState(dir);
  REQUIRE(st.ok());
  auto procs = processesOf(*st);
  std::string out, err;
  int rc = runCli(cliDir(), {"lab", "down", "--dir", dir}, &out, &err);
  INFO("stderr: " << err);
  CHECK(rc == 0);
  checkNothingLeft(dir, procs);
  lab.reset();
}

TEST_CASE("lab down after kill -9 of lab up leaves nothing") {
  char tmpl[] = "/tmp/rc-test-vmk-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  std::string logs = dir + ".cli";
  fs::create_directories(logs);
  struct Cleanup {
    std::string dir, logs;
    ~Cleanup() {
      (void)rc::lab::down(dir);
      std::error_code ec;
      fs::remove_all(dir, ec);
      fs::remove_all(logs, ec);
    }
  } cleanup{dir, logs};

  Proc up = spawnCli(logs, {"lab", "up", "--soft-roce", "--nodes", "1", "--dir", dir});
  // Kill it once its guest is recorded and running (mid-boot): the worst moment to crash.
  rc::lab::LabState seen;
  bool started = eventually(
      [&] {
        auto st = rc::lab::loadState(dir);
        if (!st || st->nodes.empty() || !rc::lab::stillRunning(st->nodes[0].vm)) return false;
        seen = *st;
        return true;
      },
      60s, 20ms);
  ::kill(up.pid, SIGKILL);
  int status = 0;
  ::waitpid(up.pid, &status, 0);
  INFO("lab up stderr: " << readFile(up.err));
  REQUIRE(started);
  auto procs = processesOf(seen);
  // The guest outlives the killed command: it is the lab's, not the command's.
  CHECK(rc::lab::stillRunning(seen.nodes[0].vm));

  std::string out, err;
  int rc = runCli(logs, {"lab", "down", "--dir", dir}, &out, &err);
  INFO("lab down stderr: " << err);
  CHECK(rc == 0);
  auto st = rc::lab::loadState(dir);
  if (st) procs = processesOf(*st);  // the switch may have been recorded after we looked
  checkNothingLeft(dir, procs);
}

int main(int argc, char* argv[]) {
  if (::geteuid() != 0) {
    std::printf(
        "SKIP: the vm tests need root (the guest kernel's modules are installed by "
        "scripts/install-deps as root)\n");
    return 77;
  }
  if (std::system("command -v qemu-system-x86_64 >/dev/null 2>&1") != 0) {
    std::printf("SKIP: QEMU (qemu-system-x86_64) is not installed; run scripts/install-deps\n");
    return 77;
  }
  std::string kdir = env("RDMACHAOS_KERNEL_DIR");
  if (kdir.empty()) kdir = "/var/cache/rdmachaos/kernel";
  if (::access((kdir + "/version").c_str(), R_OK) != 0) {
    std::printf("SKIP: no guest kernel in %s; run scripts/install-deps\n", kdir.c_str());
    return 77;
  }
  if (env("RDMACHAOS_CLI").empty() || env("RDMACHAOS_AGENT").empty()) {
    std::printf("SKIP: RDMACHAOS_CLI / RDMACHAOS_AGENT not set (run through meson test)\n");
    return 77;
  }
  int rc = rctest::runCatch(argc, argv);
  theLab.reset();
  return rc;
}
