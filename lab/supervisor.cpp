// The lab supervisor: signalfd + timerfd event loop that starts, restarts and stops the agents.
#include "lab/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"

namespace rc::lab {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kFirstBackoffMs = 200;
constexpr int64_t kMaxBackoffMs = 2000;
constexpr int64_t kQuickDeathMs = 1000;  // dying sooner than this after start grows the backoff
constexpr int64_t kSupervisorStopGraceMs = 10'000;

// Reads exactly one byte; false on EOF (the other side died) or after timeoutMs (-1: forever).
bool readByte(int fd, char* c, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeoutMs);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    ssize_t r = ::read(fd, c, 1);
    if (r < 0 && errno == EINTR) continue;
    return r == 1;
  }
}

bool writeAllFd(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= size_t(n);
  }
  return true;
}

void resetSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The caller (a CLI or a test runner) may have installed handlers; a daemon and an exec'd
  // agent must start from the defaults.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT, SIGSEGV, SIGABRT, SIGBUS,
                  SIGFPE, SIGILL, SIGUSR1, SIGUSR2, SIGALRM})
    ::signal(sig, SIG_DFL);
}

// Runs in the freshly forked agent child; never returns.
[[noreturn]] void execAgent(const NodeRecord& node, const std::string& binary, int goFd,
                            int restarts, const std::string& switchControl) {
  resetSignals();
  char go = 0;
  // The supervisor records our pid in lab.json before letting us run: if it dies first, we
  // exit instead of becoming an agent nobody knows about.
  if (!readByte(goFd, &go, -1) || go != 'g') ::_exit(0);
  int logFd = ::open(node.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (logFd < 0) ::_exit(126);
  ::dup2(logFd, 1);
  ::dup2(logFd, 2);
  int nullFd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nullFd >= 0) ::dup2(nullFd, 0);
  dprintf(2, "rdmachaos lab: starting agent %s in namespace %s (restart %d)\n", node.name.c_str(),
          node.netns.c_str(), restarts);
  std::string nsPath = "/run/netns/" + node.netns;
  int nsFd = ::open(nsPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsFd < 0 || ::setns(nsFd, CLONE_NEWNET) != 0) {
    dprintf(2, "rdmachaos lab: cannot enter network namespace '%s': %s\n", nsPath.c_str(),
            strerror(errno));
    ::_exit(126);
  }
  // Like `ip netns exec`: a private mount namespace with a sysfs of this network namespace,
  // so the agent's /sys/class/net shows the node's interfaces, not the host's.
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 ||
      ::umount2("/sys", MNT_DETACH) != 0 ||
      ::mount(node.netns.c_str(), "/sys", "sysfs", 0, nullptr) != 0)
    dprintf(2, "rdmachaos lab: warning: cannot remount /sys for namespace %s: %s\n",
            node.netns.c_str(), strerror(errno));
  closeAllExcept({0, 1, 2});
  // Faults that drive the lab switch (ecn_shift's labswitch backend, link_flap's
  // switch_port) find its control socket here unless told otherwise.
  if (!switchControl.empty()) {
    ::setenv("RDMACHAOS_LABSWITCH_SOCKET", switchControl.c_str(), 1);
    // The switch port facing this host has the node's name (ecn_shift's default port).
    ::setenv("RDMACHAOS_LABSWITCH_PORT", node.name.c_str(), 1);
  }
  std::string nodeDir = node.config.substr(0, node.config.rfind('/'));
  if (::chdir(nodeDir.c_str()) != 0) (void)!::chdir("/");
  std::vector<std::string> argv = {binary, "--config", node.config};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  dprintf(2, "rdmachaos lab: cannot execute '%s': %s\n", binary.c_str(), strerror(errno));
  ::_exit(127);
}

// Runs in the freshly forked switch child; never returns. The switch stays in the root
// namespace: it enters each host's namespace only to attach to that host's TAP.
[[noreturn]] void execSwitch(const SwitchRecord& sw, int goFd, int restarts) {
  resetSignals();
  char go = 0;
  if (!readByte(goFd, &go, -1) || go != 'g') ::_exit(0);
  int logFd = ::open(sw.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (logFd < 0) ::_exit(126);
  ::dup2(logFd, 1);
  ::dup2(logFd, 2);
  int nullFd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nullFd >= 0) ::dup2(nullFd, 0);
  dprintf(2, "rdmachaos lab: starting the lab switch (restart %d)\n", restarts);
  // The switch stands in for hardware: line rates and watchdog timing hold only if it gets
  // the CPU when it needs it, also while the hosts' traffic generators compete for it.
  if (::setpriority(PRIO_PROCESS, 0, -10) != 0)
    dprintf(2, "rdmachaos lab: warning: cannot raise the switch's priority: %s\n", strerror(errno));
  closeAllExcept({0, 1, 2});
  std::vector<std::string> argv = {sw.binary, "--config", sw.config};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  dprintf(2, "rdmachaos lab: cannot execute '%s': %s\n", sw.binary.c_str(), strerror(errno));
  ::_exit(127);
}

class Supervisor {
 public:
  Supervisor(LabState state, int readyFd) : state_(std::move(state)), readyFd_(readyFd) {
    // Child i < nodes is node i's agent; the last one, if any, is the lab switch.
    agents_.resize(state_.nodes.size() + (hasSwitch() ? 1 : 0));
  }

  int run() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT}) sigaddset(&mask, sig);
    signalFd_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    timerFd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!signalFd_.isValid() || !timerFd_.isValid()) {
      log::error("cannot create signalfd/timerfd: {}", strerror(errno));
      return 1;
    }
    // The switch first, so the hosts' NICs have carrier when the agents start.
    if (hasSwitch()) start(switchIndex(), false);
    for (size_t i = 0; i < state_.nodes.size(); i++) start(i, false);
    state_.phase = "running";
    save();
    // Tell up() every agent has a recorded pid.
    char ready = 'r';
    writeAllFd(readyFd_, &ready, 1);
    ::close(readyFd_);

    for (;;) {
      armTimer();
      pollfd fds[2] = {{signalFd_.get(), POLLIN, 0}, {timerFd_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        log::error("poll: {}", strerror(errno));
        return 1;
      }
      if (fds[0].revents) onSignals();
      if (fds[1].revents) onTimer();
      if (stopping_ && live() == 0) break;
    }
    for (auto& n : state_.nodes) n.agent = {};
    state_.sw.proc = {};
    state_.supervisor = {};
    save();
    log::info("all agents stopped; supervisor exits");
    return 0;
  }

 private:
  struct Agent {
    pid_t pid = 0;
    int64_t startedNs = 0;
    int64_t backoffMs = 0;
    int64_t restartAtNs = 0;  // 0: no restart pending
  };

  bool hasSwitch() const { return state_.fabric == "switch"; }
  size_t switchIndex() const { return state_.nodes.size(); }
  bool isSwitch(size_t i) const { return hasSwitch() && i == switchIndex(); }
  std::string childName(size_t i) const { return isSwitch(i) ? "lab switch" : "agent " + state_.nodes[i].name; }

  void save() {
    if (auto r = saveState(state_); !r) log::error("{}", r.error().message);
  }

  size_t live() const {
    return size_t(
        std::count_if(agents_.begin(), agents_.end(), [](const Agent& a) { return a.pid > 0; }));
  }

  void start(size_t i, bool isRestart) {
    Agent& a = agents_[i];
    a.restartAtNs = 0;
    std::string name = childName(i);
    int go[2];
    if (::pipe2(go, O_CLOEXEC) != 0) {
      log::error("{}: pipe: {}", name, strerror(errno));
      scheduleRestart(i, 0);
      return;
    }
    UniqueFD goR(go[0]), goW(go[1]);
    int& restartCount = isSwitch(i) ? state_.sw.restarts : state_.nodes[i].restarts;
    int restarts = isRestart ? restartCount + 1 : restartCount;
    pid_t pid = ::fork();
    if (pid < 0) {
      log::error("{}: fork: {}", name, strerror(errno));
      scheduleRestart(i, 0);
      return;
    }
    if (pid == 0) {
      try {
        goW.reset();
        if (isSwitch(i))
          execSwitch(state_.sw, goR.get(), restarts);
        else
          execAgent(state_.nodes[i], state_.agentBinary, goR.get(), restarts,
                    hasSwitch() ? state_.sw.control : std::string());
      } catch (...) {
      }
      ::_exit(127);
    }
    a.pid = pid;
    a.startedNs = monoNs();
    restartCount = restarts;
    ProcRecord rec = identify(pid);
    // Before exec the child still shows our command line; record the one it is about to run.
    if (isSwitch(i)) {
      rec.cmdline = {state_.sw.binary, "--config", state_.sw.config};
      state_.sw.proc = rec;
    } else {
      NodeRecord& node = state_.nodes[i];
      rec.cmdline = {state_.agentBinary, "--config", node.config};
      node.agent = rec;
    }
    save();
    char g = 'g';
    writeAllFd(goW.get(), &g, 1);
    log::info("{} started (pid {}, restarts {})", name, pid, restarts);
  }

  void scheduleRestart(size_t i, int64_t livedMs) {
    Agent& a = agents_[i];
    if (livedMs < kQuickDeathMs && a.backoffMs > 0)
      a.backoffMs = std::min(a.backoffMs * 2, kMaxBackoffMs);
    else
      a.backoffMs = kFirstBackoffMs;
    a.restartAtNs = monoNs() + a.backoffMs * kMs;
    log::info("{}: restart in {} ms", childName(i), a.backoffMs);
  }

  void onSignals() {
    signalfd_siginfo si;
    while (::read(signalFd_.get(), &si, sizeof si) == ssize_t(sizeof si)) {
      if (si.ssi_signo == SIGCHLD) {
        reap();
      } else if (!stopping_) {
        log::info("signal {}: stopping {} agent(s)", int(si.ssi_signo), live());
        stopping_ = true;
        stopDeadlineNs_ = monoNs() + kSupervisorStopGraceMs * kMs;
        for (size_t i = 0; i < agents_.size(); i++) {
          agents_[i].restartAtNs = 0;
          // The switch goes last: agents revert faults through its control socket.
          if (agents_[i].pid > 0 && !isSwitch(i)) ::kill(agents_[i].pid, SIGTERM);
        }
      }
    }
    // SIGCHLD coalesces; reaping after every batch also catches exits merged into one signal.
    reap();
    if (stopping_ && hasSwitch() && agents_[switchIndex()].pid > 0 && live() == 1 && !switchTermed_) {
      switchTermed_ = true;
      ::kill(agents_[switchIndex()].pid, SIGTERM);
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = std::find_if(agents_.begin(), agents_.end(),
                             [&](const Agent& a) { return a.pid == pid; });
      if (it == agents_.end()) continue;
      size_t i = size_t(it - agents_.begin());
      std::string how = WIFEXITED(status)
                            ? "exited with status " + std::to_string(WEXITSTATUS(status))
                            : "was killed by signal " + std::to_string(WTERMSIG(status));
      log::info("{} (pid {}) {}", childName(i), pid, how);
      int64_t livedMs = (monoNs() - it->startedNs) / kMs;
      it->pid = 0;
      if (isSwitch(i))
        state_.sw.proc = {};
      else
        state_.nodes[i].agent = {};
      if (!stopping_) scheduleRestart(i, livedMs);
      save();
    }
  }

  void onTimer() {
    uint64_t expirations;
    (void)!::read(timerFd_.get(), &expirations, sizeof expirations);
    int64_t now = monoNs();
    if (stopping_) {
      if (now >= stopDeadlineNs_ && !killed_) {
        killed_ = true;
        for (auto& a : agents_)
          if (a.pid > 0) {
            log::warn("agent pid {} ignored SIGTERM for {} s; sending SIGKILL", a.pid,
                      kSupervisorStopGraceMs / 1000);
            ::kill(a.pid, SIGKILL);
          }
      }
      return;
    }
    for (size_t i = 0; i < agents_.size(); i++)
      if (agents_[i].restartAtNs != 0 && agents_[i].restartAtNs <= now) start(i, true);
  }

  void armTimer() {
    int64_t next = 0;
    if (stopping_) {
      next = killed_ ? 0 : stopDeadlineNs_;
    } else {
      for (const auto& a : agents_)
        if (a.restartAtNs != 0 && (next == 0 || a.restartAtNs < next)) next = a.restartAtNs;
    }
    itimerspec its{};
    if (next != 0) {
      its.it_value.tv_sec = next / 1'000'000'000;
      its.it_value.tv_nsec = next % 1'000'000'000;
      if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    }
    // monoNs() is CLOCK_MONOTONIC, so an absolute deadline needs no conversion.
    ::timerfd_settime(timerFd_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
  }

  LabState state_;
  int readyFd_;
  std::vector<Agent> agents_;
  UniqueFD signalFd_, timerFd_;
  bool stopping_ = false;
  bool killed_ = false;
  bool switchTermed_ = false;
  int64_t stopDeadlineNs_ = 0;
};

// The daemon side of startSupervisor(); never returns.
[[noreturn]] void supervisorMain(const std::string& dir, int toParent, int fromParent) {
  int code = 1;
  try {
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT}) sigaddset(&mask, sig);
    // Block before announcing our pid: a SIGTERM from `lab down` must queue for the signalfd,
    // not kill us before we can stop the agents.
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    for (int sig : {SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM})
      ::signal(sig, SIG_DFL);

    std::string logPath = dir + "/supervisor.log";
    int logFd = ::open(logPath.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    int nullFd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nullFd >= 0) ::dup2(nullFd, 0);
    // Keeping the caller's stdout/stderr open would make anything reading them (a shell
    // pipeline, meson's test harness) wait for the lab to go down.
    ::dup2(logFd >= 0 ? logFd : nullFd, 1);
    ::dup2(logFd >= 0 ? logFd : nullFd, 2);
    closeAllExcept({0, 1, 2, toParent, fromParent});
    if (::chdir("/") != 0) ::_exit(1);

    int32_t pid = ::getpid();
    char go = 0;
    if (!writeAllFd(toParent, &pid, sizeof pid) || !readByte(fromParent, &go, -1) || go != 'g')
      ::_exit(0);  // up() died before recording us: nobody could stop us, so do not start
    ::close(fromParent);

    auto state = loadState(dir);
    if (!state) {
      log::error("{}", state.error().message);
      ::_exit(1);
    }
    log::setComponent("lab supervisor rc" + std::to_string(state->slot));
    log::info("supervising {} agent(s) for the lab in {}", state->nodes.size(), dir);
    Supervisor sup(std::move(state).value(), toParent);
    code = sup.run();
  } catch (const std::exception& e) {
    log::error("supervisor failed: {}", e.what());
  } catch (...) {
  }
  // _exit: the atexit handlers and buffers belong to the process we were forked from.
  ::_exit(code);
}

}  // namespace

Result<void> startSupervisor(LabState& state) {
  int up[2], down[2];
  if (::pipe2(up, O_CLOEXEC) != 0) return makeError(std::string("pipe: ") + strerror(errno), errno);
  UniqueFD upR(up[0]), upW(up[1]);
  if (::pipe2(down, O_CLOEXEC) != 0)
    return makeError(std::string("pipe: ") + strerror(errno), errno);
  UniqueFD downR(down[0]), downW(down[1]);

  pid_t mid = ::fork();
  if (mid < 0)
    return makeError(std::string("cannot fork the lab supervisor: ") + strerror(errno), errno);
  if (mid == 0) {
    // Double fork: the supervisor is nobody's child but init's, so it outlives `lab up` and a
    // kill -9 of it is reaped by init, not left as a zombie of the caller.
    ::setsid();
    pid_t sup = ::fork();
    if (sup != 0) ::_exit(sup < 0 ? 1 : 0);
    upR.reset();
    downW.reset();
    supervisorMain(state.dir, upW.release(), downR.release());
  }
  int status = 0;
  while (::waitpid(mid, &status, 0) < 0 && errno == EINTR) {
  }
  upW.reset();
  downR.reset();

  std::string seeLog = "; see " + state.dir + "/supervisor.log";
  int32_t pid = 0;
  size_t got = 0;
  while (got < sizeof pid) {
    char c;
    if (!readByte(upR.get(), &c, 5000))
      return makeError("the lab supervisor did not start" + seeLog);
    reinterpret_cast<char*>(&pid)[got++] = c;
  }
  state.supervisor = identify(pid);
  if (auto r = saveState(state); !r) return r;
  char g = 'g';
  if (!writeAllFd(downW.get(), &g, 1))
    return makeError("the lab supervisor exited during start" + seeLog);
  char ready = 0;
  if (!readByte(upR.get(), &ready, 20'000) || ready != 'r')
    return makeError("the lab supervisor did not start the agents" + seeLog);
  auto now = loadState(state.dir);
  if (!now) return now.error();
  state = std::move(now).value();
  return {};
}

}  // namespace rc::lab
