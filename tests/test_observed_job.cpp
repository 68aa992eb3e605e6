// A real job watched, not run: Open MPI from Debian over TCP, one rank per namespace-lab node,
// launched as a user would (mpirun with an exec into each namespace), its all-reduce loop
// reporting through librdmachaos-observe-mpi.so to each node's agent; playbooks/observed-job.toml
// (kind "observed") scores a 2 s link flap on n2 from the job's own records, and the same run
// with a noop reads no impact. Each agent received exactly the operations the program counted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "asan_runtime.hpp"
#include "http_get.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "skip.hpp"
#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_observed_job {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr int kMetricsPort = 9477;

// The counter NAME on NODE's agent (its /metrics on the management network), or -1.
double agentCounter(const rc::lab::NodeRecord& n, const std::string& name) {
  auto r = rctest::httpRequest("GET", n.mgmtAddress, kMetricsPort, "/metrics");
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0 || line.rfind(name + "{", 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

// The /24 of an address "A.B.C.D" as "A.B.C.0/24".
std::string subnet24(const std::string& a) { return a.substr(0, a.rfind('.')) + ".0/24"; }

}  // namespace

TEST_CASE("an Open MPI job watched through its own records: a flap scored, a noop reads nothing, every record counted",
          "[observed]") {
  const std::string build = rctest::env("RDMACHAOS_BUILD_DIR"), source = rctest::env("RDMACHAOS_SOURCE_DIR");
  const std::string job = build + "/tests/observe_mpi_job", lib = build + "/observe/librdmachaos-observe-mpi.so";
  if (::geteuid() != 0) RC_SKIP("needs root for the namespace lab");
  if (::access("/usr/bin/mpirun", X_OK) != 0) RC_SKIP("no /usr/bin/mpirun: scripts/install-deps installs openmpi-bin");
  if (::access(job.c_str(), X_OK) != 0 || ::access(lib.c_str(), R_OK) != 0)
    RC_SKIP("the MPI job or librdmachaos-observe-mpi.so was not built (libopenmpi-dev missing at meson setup)");

  // The MPI job is not sanitized: in an ASan build, ASan's runtime goes before the PMPI library.
  const auto asan = rctest::asanRuntime();
  if (!asan) RC_SKIP("a sanitized build, and `cc -print-file-name=libasan.so` names no runtime to preload");
  rc::lab::UpOptions o;
  o.nodes = 3;
  o.agentMetricsPort = kMetricsPort;
  rctest::Lab lab("rc-observed", o);
  const auto nodes = lab.nodes();
  REQUIRE(nodes.size() == 3);

  // The launcher mpirun runs for each host: an exec into that host's namespace, the remote
  // command handed to a shell as ssh would (docs/workloads.md, "Your own job").
  const std::string nsexec = lab.dir() + "/nsexec";
  {
    std::ofstream s(nsexec);
    s << "#!/bin/sh\nh=$1; shift\ncase \"$h\" in\n";
    for (const auto& n : nodes) s << "  " << n.name << ") ns=" << n.netns << " ;;\n";
    s << "  *) echo \"nsexec: unknown host $h\" >&2; exit 2 ;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n";
  }
  fs::permissions(nsexec, fs::perms::owner_all);
  // Each rank reports to its own node's agent: rank r runs on n(r+1) (--host n1,n2,n3).
  const std::string app = lab.dir() + "/app";
  {
    std::ofstream s(app);
    s << "#!/bin/sh\nexport RDMACHAOS_OBSERVE_SOCKET=" << lab.dir()
      << "/nodes/n$((OMPI_COMM_WORLD_RANK + 1))/observe.sock\nexport RDMACHAOS_OBSERVE_JOB=lab-mpi\nexport LD_PRELOAD="
      << (asan->empty() ? lib : *asan + ":" + lib) << "\n"
      << (asan->empty() ? "" : "export ASAN_OPTIONS=detect_leaks=0\n") << "exec " << job << " \"$@\"\n";
  }
  fs::permissions(app, fs::perms::owner_all);

  // Two runs of about 30 s each, and the connections before them.
  const std::string mpiOut = lab.dir() + "/mpirun.out", mpiErr = lab.dir() + "/mpirun.err";
  pid_t mpi = ::fork();
  REQUIRE(mpi >= 0);
  if (mpi == 0) {
    ::setpgid(0, 0);
    int out = ::open(mpiOut.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), err = ::open(mpiErr.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1), ::dup2(err, 2);
    std::vector<std::string> args = {"/usr/bin/mpirun", "--allow-run-as-root", "-np", "3", "--host", "n1,n2,n3",
                                     "--mca", "plm_rsh_agent", nsexec, "--mca", "routed", "direct",
                                     "--mca", "oob_tcp_if_include", subnet24(nodes[0].mgmtAddress),
                                     "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include",
                                     subnet24(nodes[0].dataAddress), "--mca", "pml", "ob1", app, "80", "4194304"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reap{mpi};
  // Every rank reports before the runs start.
  bool reporting = rctest::eventually(
      [&] {
        for (const auto& n : nodes)
          if (agentCounter(n, "rdmachaos_agent_observe_records_total") <= 0) return false;
        return true;
      },
      30s, 200ms);
  INFO("mpirun stderr: " << rctest::readFile(mpiErr));
  REQUIRE(reporting);

  auto runPlaybook = [&](const std::string& text, const std::string& name) {
    const std::string pb = lab.dir() + "/" + name + ".toml", report = lab.dir() + "/" + name;
    std::ofstream(pb) << text;
    std::string out, err;
    int rc = rctest::runCli(lab.dir(), {"run", pb, "--inventory", lab.inventory(), "--report-dir", report}, &out, &err);
    INFO(name << ": exit " << rc << "\n" << out << "\n" << err);
    std::ifstream in(report + "/result.json");
    REQUIRE(in);
    return std::pair{rc, json::parse(in)};
  };
  std::ifstream shipped(source + "/playbooks/observed-job.toml");
  std::stringstream text;
  text << shipped.rdbuf();

  // The flap: scored from the job's own records.
  auto [rc, flap] = runPlaybook(text.str(), "flap");
  CHECK(rc == 0);
  const json& trial = flap["trials"][0];
  const json& impact = trial["job"]["impact"];
  const json& fault = flap["faults"][0];
  const int64_t down = fault["applied_ns"], up = fault["reverted_ns"], D = up - down;
  const int64_t bin = flap["series"]["bin_ns"];
  // Open MPI's sockets keep Linux's own retransmission timer: while the link is down it backs
  // off from 200 ms, so the one pending when it returns is at most 2 D + 200 ms; the job moves
  // again within two of those after the link is back.
  const int64_t timer = 2 * D + 200'000'000;
  const int64_t stall = impact.value("stall_ns", int64_t(0));
  std::printf("[observed] MPI all-reduce, n2 down %.0f ms: time to impact %.0f ms, stall %.0f ms (truth: [%.0f, %.0f] ms), "
              "recovered %s, loss %.1f %%\n",
              D / 1e6, impact.value("time_to_impact_ns", int64_t(-1)) / 1e6, stall / 1e6, (D - bin) / 1e6,
              (D + 2 * timer + bin) / 1e6, impact.value("recovered", false) ? "yes" : "no",
              impact.value("loss_pct", -1.0));
  CHECK(trial["problems"].empty());
  CHECK(stall >= D - bin - 250'000'000);  // a bin and half the smoothing window early at most
  CHECK(stall <= D + 2 * timer + bin);
  CHECK(impact["recovered"] == true);

  // The same job with a noop: no impact.
  std::string noop = text.str();
  noop.replace(noop.find("kind = \"link_flap\""), std::string("kind = \"link_flap\"").size(), "kind = \"noop\"");
  noop.replace(noop.find("params = { down = \"2s\", count = 1 }"), std::string("params = { down = \"2s\", count = 1 }").size(),
               "");
  auto [rc2, quiet] = runPlaybook(noop, "noop");
  CHECK(rc2 == 0);
  const json& qi = quiet["trials"][0]["job"]["impact"];
  std::printf("[observed] the same job, a noop: impact %s, stall %.0f ms, loss %.1f %%\n",
              qi.value("impacted", false) ? "yes" : "no", qi.value("stall_ns", int64_t(0)) / 1e6, qi.value("loss_pct", -1.0));
  // No stall of the fault's size: a noop's is 0 on a quiet host, and 180 ms in the sanitized
  // build of a busy CI run (three ranks and two agents on two cores); the flap's is at least D.
  CHECK(qi.value("stall_ns", int64_t(0)) < D / 2);
  CHECK(quiet["trials"][0]["problems"].empty());

  // Every operation the program counted reached its node's agent, none dropped.
  int status = 0;
  for (int i = 0; i < 900 && ::waitpid(mpi, &status, WNOHANG) == 0; i++) std::this_thread::sleep_for(100ms);
  reap.pid = -1;
  const std::string printed = rctest::readFile(mpiOut);
  INFO("mpirun stdout: " << printed << "\nstderr: " << rctest::readFile(mpiErr));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::map<int, long> ops;
  std::regex line(R"(rank (\d+) ops (\d+) wrong (\d+))");
  for (std::sregex_iterator it(printed.begin(), printed.end(), line), end; it != end; ++it) {
    ops[std::stoi((*it)[1])] = std::stol((*it)[2]);
    CHECK((*it)[3] == "0");
  }
  REQUIRE(ops.size() == 3);
  for (int r = 0; r < 3; r++) {
    const auto& n = nodes[size_t(r)];
    // The agent publishes its counters every 250 ms: the job's last records may come after the
    // job's exit by that much.
    rctest::eventually([&] { return agentCounter(n, "rdmachaos_agent_observe_records_total") >= double(ops[r]); }, 5s,
                       100ms);
    const double got = agentCounter(n, "rdmachaos_agent_observe_records_total");
    std::printf("[observed] %s: rank %d counted %ld operations; its agent received %.0f, the sender dropped %.0f\n",
                n.name.c_str(), r, ops[r], got, agentCounter(n, "rdmachaos_agent_observe_sender_dropped_total"));
    CHECK(got == double(ops[r]));
    CHECK(agentCounter(n, "rdmachaos_agent_observe_sender_dropped_total") == 0);
  }
}

}  // namespace test_observed_job
