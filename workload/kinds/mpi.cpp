// Workload kind mpi: rank 0's agent starts one Open MPI job across the workload's nodes (mpirun,
// ranks in the playbook's order, the launcher template of its [mpi] configuration), running the
// MPI benchmark for the workload's duration; every agent scores the job's records from its own
// intake as the `observed` kind does, and the job's exit, Open MPI's words and its output's tail
// end the trial when it fails (docs/workloads.md, "The mpi kind").
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "workload/kinds.hpp"
#include "workload/mpi_launch.hpp"
#include "workload/observe_source.hpp"

extern char** environ;

namespace rc::workload {
namespace {

constexpr size_t kOutputTail = 64 * 1024;  // what is kept of mpirun's output
constexpr int64_t kExitGraceNs = 20'000'000'000;  // the job's own end after the workload's: launch time

// mpirun, started in a process group of its own; what it printed (stdout and stderr, its tail).
class Mpirun {
 public:
  Mpirun() = default;
  Mpirun(const Mpirun&) = delete;
  Mpirun& operator=(const Mpirun&) = delete;
  ~Mpirun() { kill(); }

  // PATH runs with ARGV (argv[0] its name only: Open MPI takes an absolute argv[0] as --prefix and
  // then sends its daemons a remote command of shell assignments, which no shell here reads).
  Result<void> start(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return makeError("mpi: cannot create a pipe: " + std::string(std::strerror(errno)));
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]), ::close(fds[1]);
      return makeError("mpi: cannot fork mpirun: " + std::string(std::strerror(errno)));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      // An agent killed with -9 never runs kill() below: mpirun then gets SIGTERM when the
      // thread that started it dies (it stays alive while the job runs), and takes its daemons
      // and ranks down with it. The agent may have died before the prctl: then exit at once.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
      const int in = ::open("/dev/null", O_RDONLY);
      ::dup2(in, 0), ::dup2(fds[1], 1), ::dup2(fds[1], 2);
      ::execve(path.c_str(), args.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    pid_ = pid;
    out_ = fds[0];
    return {};
  }

  // Reads what is there; true once mpirun has exited (STATUS set).
  bool poll() {
    drain();
    if (pid_ <= 0) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = st;
      pid_ = -1;
      drain();
      return true;
    }
    return false;
  }

  // mpirun first (it takes its daemons and ranks down), then whatever is left of its group.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 50 && !poll(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      status_ = st;
      pid_ = -1;
    }
    drain();
  }

  int status() const { return status_; }
  const std::string& output() const { return text_; }

 private:
  void drain() {
    if (out_ < 0) return;
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) {
        if (n == 0) ::close(out_), out_ = -1;
        break;
      }
      text_.append(buf, size_t(n));
      if (text_.size() > kOutputTail) text_.erase(0, text_.size() - kOutputTail);
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = 0;
  std::string text_;
};

std::string exitText(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + (abbrev ? " (SIG" + std::string(abbrev) + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

// The last LINES lines of TEXT, at most 800 characters, on one line.
std::string tail(const std::string& text, int lines) {
  size_t at = text.size();
  while (at > 0 && (text[at - 1] == '\n' || text[at - 1] == ' ')) at--;
  size_t from = at;
  for (int n = 0; n < lines && from > 0; n++) {
    from = text.rfind('\n', from - 1);
    if (from == std::string::npos) {
      from = 0;
      break;
    }
  }
  std::string t = text.substr(from, at - from);
  for (char& c : t)
    if (c == '\n') c = '|';
  while (!t.empty() && (t.front() == '|' || t.front() == ' ')) t.erase(0, 1);
  return t.size() > 800 ? "..." + t.substr(t.size() - 800) : t;
}

class MpiRun final : public ExternalRun {
 public:
  MpiRun(ObserveSource* source, const proto::WorkloadStart& r, const MpiSettings* settings)
      : source_(source), job_(r.workloadId), rank_(r.rank), settings_(settings), start_(r) {}
  uint64_t memory() const override { return 0; }
  uint16_t port() const override { return 0; }
  int64_t drainLagNs() const override { return 500'000'000; }
  std::string describe() const override {
    return rank_ == 0 ? "an Open MPI job of " + std::to_string(start_.world.size()) + " ranks (" + settings_->program +
                            ") started by this agent over " + transportText() + ", reporting to " + source_->where()
                      : "rank " + std::to_string(rank_) + " of an Open MPI job, reporting to " + source_->where();
  }

  Summary run(int64_t startNs, int64_t durationNs, Telemetry& telemetry, const std::atomic<bool>& stop) override {
    Summary s;
    JobReader reader(source_, job_);
    reader.skipBacklog();
    const int64_t endNs = startNs + durationNs;
    auto job = std::make_unique<Mpirun>();
    auto launch = [&]() -> Result<void> {
      // The benchmark counts its seconds from its own start, which is before the workload's
      // (the lead) or after it (mpirun's launch): it runs to the workload's end and a second on.
      const double seconds = double(std::max<int64_t>(endNs - wallNs(), 0)) / 1e9 + 1.0;
      return job->start(settings_->mpirun, argv(seconds), env());
    };
    if (rank_ == 0) {
      if (auto r = launch(); !r) {
        s.endReason = "error";
        s.error = r.error().message;
        return s;
      }
      log::info("mpi workload '{}': started mpirun across {} ({})", job_, hosts(), transportText());
    }
    bool exited = false, relaunched = false;
    for (;;) {
      const bool last = stop.load() || wallNs() >= endNs;
      reader.read(telemetry, s);
      if (rank_ == 0 && !exited && job->poll()) {
        exited = true;
        // Open MPI's daemons sometimes fail to call back on the lab's busy 2 cores (about one
        // launch in ten, cause not found): one more launch while no rank has run yet, said in the
        // log. Any other end of the job, or a second failed launch, is the job's failure.
        if (!last && !relaunched && !reader.anyRank() &&
            job->output().find("unable to reliably start one or more daemons") != std::string::npos) {
          log::warn("mpi workload '{}': mpirun could not start its daemons ({}); launching once more", job_,
                    tail(job->output(), 2));
          relaunched = true;
          job = std::make_unique<Mpirun>();
          if (auto r = launch(); !r) {
            s.endReason = "error";
            s.error = r.error().message;
            return s;
          }
          exited = false;
          continue;
        }
        // A job that ends before its workload has failed, whatever its status says.
        if (!last) break;
      }
      if (last) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    s.endReason = stop.load() ? "stopped" : "completed";
    if (rank_ == 0) {
      const bool early = exited && !stop.load() && wallNs() < endNs;
      if (stop.load()) job->kill();
      // The benchmark runs for the duration from its own start: give it its launch time to end.
      const int64_t deadline = wallNs() + kExitGraceNs;
      while (!exited && wallNs() < deadline) {
        exited = job->poll();
        if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!exited) job->kill();
      reader.read(telemetry, s);
      judge(*job, exited, early, stop.load(), s);
    } else if (!reader.anyRank() && !stop.load()) {
      s.endReason = "error";
      s.error = "no rank of the MPI job reported to " + source_->where() +
                ": did it start on this node? (rank 0's agent has mpirun's output)";
    }
    const std::string seen = reader.seen(endNs, stop.load());
    log::info("mpi workload '{}': {}", job_, seen.empty() ? std::string("no rank reported here") : "seen " + seen);
    if (rank_ == 0) s.note = note(*job, stop.load(), s, seen);
    return s;
  }

 private:
  // The report's line on the job (rank 0): how its ranks talked, how it ended, and anything
  // Open MPI or UCX said on the way, also when it went on (a UCX warning after a retry).
  std::string note(const Mpirun& job, bool stopped, const Summary& s, const std::string& seen) const {
    std::string n = transportText() + "; ";
    if (s.endReason == "error")
      n += "it failed (the problem above says how)";
    else if (stopped)
      n += "it ran to the run's end (the agent then stopped mpirun), no rank failed" +
           (seen.empty() ? std::string() : "; records here: " + seen);
    else
      n += "mpirun exited with status 0, every rank finished with its all-reduces right";
    if (s.endReason != "error")
      if (const std::string said = mpiFailure(job.output()); !said.empty()) n += "; it said: " + said;
    return n;
  }

  // How the ranks talk, as the report names it.
  std::string transportText() const {
    if (start_.transport != "ucx") return "Open MPI ob1, btl tcp";
    std::string devs;
    for (const auto& d : settings_->ucxDevices) devs += (devs.empty() ? "" : ",") + d;
    return "Open MPI pml ucx, UCX_TLS=" + settings_->ucxTls + " on " + devs;
  }

  std::string hosts() const {
    std::string h;
    for (const auto& n : start_.nodes) h += (h.empty() ? "" : ",") + n;
    return h;
  }

  std::vector<std::string> argv(double seconds) const {
    // The data plane only, by interface name: Open MPI 4.1's address (CIDR) form excluded the
    // management interface too in the lab; mpirun's own connections stay off the data plane
    // (unless [mpi] oob_interfaces puts them somewhere), so a flap hits the job, not its launch.
    auto names = [](const std::vector<std::string>& list) {
      std::string out;
      for (const auto& i : list) out += (out.empty() ? "" : ",") + i;
      return out;
    };
    const std::string data = names(settings_->dataInterfaces);
    std::vector<std::string> a = {"mpirun"};
    if (::geteuid() == 0) a.push_back("--allow-run-as-root");
    const std::vector<std::string> rest = {
        "-np", std::to_string(start_.world.size()), "--host", hosts(), "--map-by", "node",
        // Every host through the launcher, the local one too: the template decides where it runs.
        "--mca", "plm_rsh_agent", settings_->launchHelper, "--mca", "routed", "direct",
        // IPv4 only, as the data plane: a daemon that tried the management interface's IPv6
        // address (link-local, maybe still tentative after the lab came up) found "no route" to
        // mpirun in one of five lab runs.
        "--mca", "oob_tcp_disable_ipv6_family", "1", "-x", "RDMACHAOS_OBSERVE_JOB=" + job_};
    a.insert(a.end(), rest.begin(), rest.end());
    if (settings_->oobInterfaces.empty())
      a.insert(a.end(), {"--mca", "oob_tcp_if_exclude", "lo," + data});
    else
      a.insert(a.end(), {"--mca", "oob_tcp_if_include", names(settings_->oobInterfaces)});
    if (!settings_->tmpdir.empty()) a.insert(a.end(), {"--mca", "orte_tmpdir_base", settings_->tmpdir});
    if (start_.transport == "ucx") {
      // pml ucx carries the ranks' messages; no BTL but self is needed (one rank per node).
      a.insert(a.end(), {"--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "ucx", "-x",
                         "UCX_NET_DEVICES=" + names(settings_->ucxDevices), "-x", "UCX_TLS=" + settings_->ucxTls});
      for (const auto& e : settings_->ucxEnv) a.insert(a.end(), {"-x", e});
    } else {
      a.insert(a.end(), {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", data, "--mca", "pml", "ob1"});
    }
    if (!settings_->preload.empty()) {
      std::string pre;
      for (const auto& p : settings_->preload) pre += (pre.empty() ? "" : ":") + p;
      a.insert(a.end(), {"-x", "LD_PRELOAD=" + pre});
    }
    a.push_back(settings_->program);
    a.push_back(std::to_string(seconds));
    a.push_back(std::to_string(start_.size));
    return a;
  }

  std::vector<std::string> env() const {
    std::vector<std::string> e;
    bool socket = false;
    for (char** p = environ; *p; p++) {
      std::string v(*p);
      socket = socket || v.rfind("RDMACHAOS_OBSERVE_SOCKET=", 0) == 0;
      if (v.rfind(std::string(kLauncherEnv) + "=", 0) != 0 && v.rfind("LD_PRELOAD=", 0) != 0) e.push_back(v);
    }
    // Ranks on this node, which mpirun starts itself when the node is its own (by host name).
    if (!socket && !settings_->observeSocket.empty()) e.push_back("RDMACHAOS_OBSERVE_SOCKET=" + settings_->observeSocket);
    e.push_back(std::string(kLauncherEnv) + "=" + encodeLauncher(settings_->launcher));
    return e;
  }

  // The job's end into S: every rank counted its all-reduces and checked them, mpirun's status.
  void judge(const Mpirun& job, bool exited, bool early, bool stopped, Summary& s) const {
    const std::string& out = job.output();
    static const std::regex line(R"(rank (\d+) ops (\d+) wrong (\d+))");
    std::set<int> finished;
    long wrong = 0;
    for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
      finished.insert(std::stoi((*it)[1]));
      wrong += std::stol((*it)[3]);
    }
    s.verified = wrong == 0;
    if (stopped) return;
    std::string why;
    if (!exited)
      why = "mpirun did not end within " + std::to_string(kExitGraceNs / 1'000'000'000) +
            " s of the workload's end (killed): the job hung";
    else if (job.status() != 0)
      why = "mpirun " + exitText(job.status());
    else if (early)
      why = "mpirun exited (status 0) before the workload's end";
    else if (finished.size() != start_.world.size())
      why = "only " + std::to_string(finished.size()) + " of " + std::to_string(start_.world.size()) +
            " ranks printed their count";
    else if (wrong)
      why = std::to_string(wrong) + " all-reduces returned wrong data";
    if (why.empty()) {
      log::info("mpi workload '{}': mpirun exited with status 0, {} ranks finished", job_, finished.size());
      return;
    }
    s.endReason = "error";
    s.counters.errors += 1;
    s.error = "the MPI job failed: " + why;
    if (const std::string said = mpiFailure(out); !said.empty()) s.error += "; Open MPI: " + said;
    if (!out.empty()) s.error += "; its output ended: " + tail(out, 4);
    log::error("mpi workload '{}': {}", job_, s.error);
  }

  ObserveSource* source_;
  std::string job_;
  int rank_;
  const MpiSettings* settings_;
  proto::WorkloadStart start_;
};

Result<void> mpiTransport(std::string_view transport) {
  if (transport == "tcp" || transport == "ucx") return {};
  return makeError("kind \"mpi\" takes transport = \"tcp\" (Open MPI's btl tcp on the data interfaces) or \"ucx\" "
                   "(pml ucx on the RDMA ports of [mpi] ucx_devices), not '" + std::string(transport) + "'");
}

Result<std::unique_ptr<ExternalRun>> prepareMpi(const proto::WorkloadStart& r) {
  ObserveSource* source = observeSource();
  if (!source)
    return makeError("this agent has no observe intake ([observe] in its configuration): the MPI job's ranks "
                     "would have nothing to report to");
  if (r.durationMs == 0) return makeError("an mpi workload runs for a duration, not a count of iterations");
  if (auto t = mpiTransport(r.transport); !t) return t.error();
  const MpiSettings* settings = mpiSettings();
  if (r.rank == 0) {
    if (!settings || settings->program.empty() || settings->launcher.empty())
      return makeError("this agent (rank 0 of the mpi workload, which starts mpirun) has no [mpi] section with "
                       "program and launcher in its configuration (docs/workloads.md, \"The mpi kind\")");
    if (settings->dataInterfaces.empty())
      return makeError("this agent (rank 0 of the mpi workload) has no data interfaces ([interfaces] data) for "
                       "Open MPI's transport");
    if (r.transport == "ucx" && settings->ucxDevices.empty())
      return makeError("this agent (rank 0 of the mpi workload) has no [mpi] ucx_devices for transport \"ucx\": name "
                       "the RDMA ports UCX may use, e.g. ucx_devices = [\"mlx5_0:1\"] (`ucx_info -d` lists them)");
    if (r.nodes.size() != r.world.size())
      return makeError("the workload_start of an mpi workload names no nodes for mpirun's hosts");
    for (const auto& path : {settings->mpirun, settings->program, settings->launchHelper})
      if (::access(path.c_str(), X_OK) != 0)
        return makeError("mpi: '" + path + "' is not an executable file on this node (" + std::strerror(errno) +
                         "): install Open MPI (openmpi-bin) and the benchmark, or fix [mpi] in the configuration");
  }
  return std::unique_ptr<ExternalRun>(std::make_unique<MpiRun>(source, r, settings));
}

const External kMpi{
    .ranks = 0,
    .rdma = false,
    .programIs = "benchmark",
    .defaultProgram = "",
    .knowsProgram = [](std::string_view) { return false; },
    .programs = [] { return std::string("none: the agent's [mpi] program runs, an all-reduce of size"); },
    .maxStreams = 1,
    .streamsAre = "Open MPI's own connections",
    .qpTimeoutIs = "Open MPI's own setting",
    .ranksShort = "the job's ranks",
    .ranksLong = "one rank on each workload node, in the playbook's order",
    .checkTransport = mpiTransport,
    .launches = true,
    .prepare = prepareMpi,
};

}  // namespace

extern const Kind kind_mpi;
const Kind kind_mpi{
    .name = "mpi",
    .summary = "starts an Open MPI all-reduce job across the nodes (mpirun) and scores the records its ranks report",
    // Scored as `observed` scores a job's records; every record is one all-reduce of the size
    // (tests/observe_mpi_job.c), so nccl-tests' all-reduce factor applies.
    .bus = [](double n) { return 2 * (n - 1) / n; },
    .external = &kMpi,
};

}  // namespace rc::workload
