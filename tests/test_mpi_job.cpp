// The mpi workload kind on the namespace lab: rdmachaos starts Open MPI itself (n1's agent runs
// mpirun, its launcher an exec into each node's namespace), playbooks/mpi-flap.toml scores a 2 s
// flap on n2 from the job's own records with every rank reporting, the same job under a noop
// reads no stall of the flap's size, and a job whose rank 1 is SIGKILLed mid-run ends its trial
// with the rank and the signal named.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "asan_runtime.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "skip.hpp"
#include "support.hpp"

namespace test_mpi_job {

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// The pids of PROGRAM's processes that run as MPI rank RANK of a job rdmachaos started (its
// environment names the job's id), found in /proc: the processes this test's lab started.
std::vector<pid_t> rankPids(const std::string& program, int rank) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string base = "/proc/" + std::string(e->d_name);
    std::error_code ec;
    if (std::filesystem::read_symlink(base + "/exe", ec).string() != program || ec) continue;
    const std::string environ = rctest::readFile(base + "/environ");
    const std::string want = std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0';
    if (environ.find(want) != std::string::npos && environ.find("RDMACHAOS_OBSERVE_JOB=") != std::string::npos)
      out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// mpirun, orted and the benchmark's processes whose environment names DIR (the lab's: the
// launcher template and the observe socket carry it), none of the lab's own.
std::vector<pid_t> jobPids(const std::string& dir) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string base = "/proc/" + std::string(e->d_name);
    std::error_code ec;
    const std::string exe = std::filesystem::read_symlink(base + "/exe", ec).filename().string();
    if (ec || (exe != "orterun" && exe != "mpirun" && exe != "orted" && exe != "observe_mpi_job")) continue;
    if (rctest::readFile(base + "/environ").find(dir) != std::string::npos) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

std::string problemsText(const json& trial) {
  std::string all;
  for (const auto& p : trial["problems"]) all += p.get<std::string>() + "\n";
  return all;
}

}  // namespace

TEST_CASE("mpi-flap: an Open MPI job started by rdmachaos, a flap scored, a noop quiet, a killed rank named",
          "[mpi]") {
  const std::string build = rctest::env("RDMACHAOS_BUILD_DIR"), source = rctest::env("RDMACHAOS_SOURCE_DIR");
  const std::string program = build + "/tests/observe_mpi_job", lib = build + "/observe/librdmachaos-observe-mpi.so";
  if (::geteuid() != 0) RC_SKIP("needs root for the namespace lab");
  if (::access("/usr/bin/mpirun", X_OK) != 0) RC_SKIP("no /usr/bin/mpirun: scripts/install-deps installs openmpi-bin");
  if (::access(program.c_str(), X_OK) != 0 || ::access(lib.c_str(), R_OK) != 0)
    RC_SKIP("the MPI benchmark or librdmachaos-observe-mpi.so was not built (libopenmpi-dev missing at meson setup)");
  const auto asan = rctest::asanRuntime();
  if (!asan || !asan->empty())
    RC_SKIP("a sanitized build: the unsanitized MPI ranks cannot load this build's PMPI library (the jobs suite runs "
            "in the plain build)");

  rc::lab::UpOptions o;
  o.nodes = 3;
  rctest::Lab lab("rc-mpi", o);
  REQUIRE(lab.nodes().size() == 3);
  // The lab gave n1's agent (rank 0, which runs mpirun) its [mpi] section.
  const std::string config = rctest::readFile(lab.nodes()[0].config);
  INFO(config);
  REQUIRE(config.find("[mpi]") != std::string::npos);

  // What of the job outlived a failed case (mpirun, its daemons, the ranks: their environment
  // names this lab's directory), stopped by pid before the lab goes.
  struct Sweep {
    std::string dir;
    ~Sweep() {
      for (pid_t pid : jobPids(dir)) ::kill(pid, SIGKILL);
    }
  } sweep{lab.dir()};

  auto runPlaybook = [&](const std::string& text, const std::string& name) {
    const std::string pb = lab.dir() + "/" + name + ".toml", report = lab.dir() + "/" + name;
    std::ofstream(pb) << text;
    std::string out, err;
    int rc = rctest::runCli(lab.dir(), {"run", pb, "--inventory", lab.inventory(), "--report-dir", report}, &out, &err);
    UNSCOPED_INFO(name << ": exit " << rc << "\n" << out << "\n" << err);
    std::ifstream in(report + "/result.json");
    REQUIRE(in);
    return std::pair{rc, json::parse(in)};
  };
  const std::string text = rctest::readFile(source + "/playbooks/mpi-flap.toml");
  REQUIRE_FALSE(text.empty());

  // The flap: impact, stall and recovery from the ranks' records; every rank reported.
  auto [rc, flap] = runPlaybook(text, "flap");
  const json& trial = flap["trials"][0];
  INFO("problems: " << problemsText(trial));
  CHECK(rc == 0);
  CHECK(trial["problems"].empty());
  // The trial's line on the job: its transport and its end.
  REQUIRE(trial.contains("job_notes"));
  CHECK_THAT(trial["job_notes"][0].get<std::string>(), Catch::StartsWith("the job, on n1: Open MPI ob1, btl tcp; "));
  for (const char* node : {"n1", "n2", "n3"}) {
    uint64_t bytes = 0;
    for (const auto& b : flap["series"]["nodes"][node]) bytes += b.get<uint64_t>();
    CAPTURE(node);
    CHECK(bytes > 0);  // its rank's all-reduces reached its own agent
  }
  const json& impact = trial["job"]["impact"];
  const json& fault = flap["faults"][0];
  const int64_t D = int64_t(fault["reverted_ns"]) - int64_t(fault["applied_ns"]);
  const int64_t bin = flap["series"]["bin_ns"];
  // Open MPI's sockets keep Linux's retransmission timer, backed off from 200 ms while the link
  // is down: the job moves again within two of those after the link is back.
  const int64_t timer = 2 * D + 200'000'000;
  const int64_t stall = impact.value("stall_ns", int64_t(0));
  std::printf("[mpi] Open MPI all-reduce started by rdmachaos, n2 down %.0f ms: stall %.0f ms, recovered %s, loss %.1f %%\n",
              D / 1e6, stall / 1e6, impact.value("recovered", false) ? "yes" : "no", impact.value("loss_pct", -1.0));
  CHECK(stall >= D - bin - 250'000'000);
  CHECK(stall <= D + 2 * timer + bin);
  CHECK(impact["recovered"] == true);

  // The same job under a noop: no stall of the flap's size (a busy 2-core host has short ones).
  std::string noop = replaced(text, "kind = \"link_flap\"", "kind = \"noop\"");
  noop = replaced(noop, "params = { down = \"2s\", count = 1 }", "");
  auto [rc2, quiet] = runPlaybook(noop, "noop");
  const json& qt = quiet["trials"][0];
  INFO("noop problems: " << problemsText(qt));
  CHECK(rc2 == 0);
  CHECK(qt["problems"].empty());
  const int64_t quietStall = qt["job"]["impact"].value("stall_ns", int64_t(0));
  std::printf("[mpi] the same job, a noop: stall %.0f ms\n", quietStall / 1e6);
  CHECK(quietStall < D / 2);

  // Rank 1 SIGKILLed mid-run: the trial says which rank and which signal ended the job.
  std::string shortNoop = replaced(noop, "duration = \"10s\"", "duration = \"8s\"");
  shortNoop = replaced(shortNoop, "duration = \"12s\"", "duration = \"4s\"");
  std::vector<pid_t> killed;
  std::thread killer([&] {
    // Once rank 1 runs (after mpirun's launch), well inside the baseline phase.
    for (int i = 0; i < 200 && killed.empty(); i++) {
      std::this_thread::sleep_for(100ms);
      killed = rankPids(program, 1);
    }
    std::this_thread::sleep_for(2s);
    for (pid_t pid : killed) ::kill(pid, SIGKILL);
  });
  auto [rc3, dead] = runPlaybook(shortNoop, "killed");
  killer.join();
  const std::string said = problemsText(dead["trials"][0]);
  INFO("killed run's problems: " << said);
  REQUIRE(killed.size() == 1);
  std::printf("[mpi] rank 1 (pid %d) SIGKILLed: %s", int(killed[0]), said.c_str());
  CHECK(rc3 != 0);
  CHECK(said.find("rank 1") != std::string::npos);
  CHECK(said.find("signal 9 (SIGKILL)") != std::string::npos);
  // The agent reaped the rest of the job: nothing of it outlives its run.
  CHECK(rctest::eventually([&] { return jobPids(lab.dir()).empty(); }, 10s, 200ms));

  // n1's agent, the one that started mpirun, killed with -9 mid-run (the lab's supervisor
  // starts it again): nothing of the job outlives it either.
  pid_t agentPid = 0;
  std::thread agentKiller([&] {
    for (int i = 0; i < 200 && rankPids(program, 0).empty(); i++) std::this_thread::sleep_for(100ms);
    std::this_thread::sleep_for(1s);
    if (auto st = rc::lab::loadState(lab.dir()); st && !st->nodes.empty()) agentPid = st->nodes[0].agent.pid;
    if (agentPid > 0) ::kill(agentPid, SIGKILL);
  });
  const std::string pbLost = lab.dir() + "/agent-killed.toml";
  std::ofstream(pbLost) << shortNoop;
  std::string outLost, errLost;
  const int rc4 = rctest::runCli(lab.dir(), {"run", pbLost, "--inventory", lab.inventory(), "--report-dir",
                                             lab.dir() + "/agent-killed"}, &outLost, &errLost);
  agentKiller.join();
  INFO("agent killed: exit " << rc4 << "\n" << errLost);
  REQUIRE(agentPid > 0);
  CHECK(rc4 != 0);
  std::printf("[mpi] n1's agent (pid %d) killed with -9 mid-run: run exit %d\n", int(agentPid), rc4);
  CHECK(rctest::eventually([&] { return jobPids(lab.dir()).empty(); }, 10s, 200ms));
}

}  // namespace test_mpi_job
