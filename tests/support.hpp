// The e2e tests' shared harness on the namespace lab: the environment meson passes, a lab that
// is always taken down, the real CLI in a child process, and polled checks of what the kernel
// and the agents report.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lab/lab.hpp"
#include "lab/lab_state.hpp"

namespace rctest {

using namespace std::chrono_literals;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A lab in a fresh /tmp/PREFIX-XXXXXX, with the agent meson built. Taken down and its
// directory removed when the object goes, also after a failed assertion; and if this process
// dies first (a fatal signal, meson's timeout), a guardian process takes the lab down.
class Lab {
 public:
  Lab(const char* prefix, rc::lab::UpOptions options) {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) FAIL("mkdtemp " << tmpl << ": " << std::strerror(errno));
    dir_ = tmpl;
    options.dir = dir_;
    if (options.agentBinary.empty()) options.agentBinary = env("RDMACHAOS_AGENT");
    startGuardian();
    auto r = rc::lab::up(options);
    if (!r) {
      // The destructor does not run for a throwing constructor: clean up here.
      stopGuardian();
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      FAIL("lab up failed: " << r.error().message);
    }
    inventory_ = *r;
  }
  ~Lab() {
    auto r = rc::lab::down(dir_);
    if (!r) std::fprintf(stderr, "lab down %s: %s\n", dir_.c_str(), r.error().message.c_str());
    stopGuardian();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& inventory() const { return inventory_; }
  std::string switchControl() const { return dir_ + "/switch.sock"; }

  std::vector<rc::lab::NodeRecord> nodes() const {
    auto st = rc::lab::loadState(dir_);
    REQUIRE(st.ok());
    return st->nodes;
  }
  rc::lab::NodeRecord node(const std::string& name) const {
    for (const auto& n : nodes())
      if (n.name == name) return n;
    FAIL("no node " << name);
    return {};
  }

 private:
  // A child in its own session (meson kills the test's process group) that waits for
  // end-of-file on a pipe only this process holds open, i.e. for this process to die, and then
  // runs `rdmachaos lab down` on the directory and removes it.
  void startGuardian() {
    std::string cli = env("RDMACHAOS_CLI");
    int fds[2];
    if (cli.empty() || ::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setsid();
      ::close(fds[1]);
      char c;
      ssize_t n;
      do n = ::read(fds[0], &c, 1);
      while (n > 0 || (n < 0 && errno == EINTR));
      ::execl("/bin/sh", "sh", "-c", "\"$0\" lab down --dir \"$1\" && rm -rf -- \"$1\"",
              cli.c_str(), dir_.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(fds[0]);
    if (pid < 0) {
      ::close(fds[1]);
      return;
    }
    guardian_ = pid;
    guardianPipe_ = fds[1];
  }
  void stopGuardian() {
    if (guardian_ <= 0) return;
    ::kill(guardian_, SIGKILL);
    ::waitpid(guardian_, nullptr, 0);
    ::close(guardianPipe_);
    guardian_ = -1;
  }

  std::string dir_, inventory_;
  pid_t guardian_ = -1;
  int guardianPipe_ = -1;
};

// A CLI process whose stdout and stderr go to files.
struct Proc {
  pid_t pid = -1;
  std::string out, err;
};

// Starts `rdmachaos ARGS...` (RDMACHAOS_CLI), its output in DIR/cli-N.out and .err.
inline Proc spawnCli(const std::string& dir, std::vector<std::string> args) {
  static int counter = 0;
  Proc p;
  std::string base = dir + "/cli-" + std::to_string(++counter);
  p.out = base + ".out";
  p.err = base + ".err";
  std::string cli = env("RDMACHAOS_CLI");
  REQUIRE_FALSE(cli.empty());
  args.insert(args.begin(), cli);
  p.pid = fork();
  REQUIRE(p.pid >= 0);
  if (p.pid == 0) {
    int o = ::open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

// Waits for P and returns its exit code (128 + signal if killed). A process still running
// after LIMIT is hung: it is killed and the test fails, so the lab can still be taken down.
inline int waitCli(Proc& p, std::chrono::seconds limit = 90s) {
  auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(p.pid, &status, WNOHANG) == p.pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(10ms);
  }
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &status, 0);
  FAIL("CLI did not finish within " << limit.count() << " s; stderr: " << readFile(p.err));
  return -1;
}

inline int runCli(const std::string& dir, std::vector<std::string> args, std::string* out = nullptr,
                  std::string* err = nullptr) {
  Proc p = spawnCli(dir, std::move(args));
  int rc = waitCli(p);
  if (out) *out = readFile(p.out);
  if (err) *err = readFile(p.err);
  return rc;
}

// Admin state of IFNAME in namespace NS, read by iproute2 (not by our code).
inline bool linkUp(const std::string& ns, const std::string& ifname = "data0") {
  std::string cmd = "ip -n " + ns + " -o link show dev " + ifname + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f);
  char buf[1024] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  pclose(f);
  std::string s(buf, n);
  auto lt = s.find('<'), gt = s.find('>');
  REQUIRE(lt != std::string::npos);
  // Appended, not "," + substr: GCC 12's false -Wrestrict at -O3 (PR 105651) breaks a release build.
  std::string flags(1, ',');
  flags.append(s, lt + 1, gt - lt - 1).push_back(',');
  return flags.find(",UP,") != std::string::npos;
}

// True once F() is; polls every STEP up to LIMIT.
template <typename F>
bool eventually(F f, std::chrono::milliseconds limit = std::chrono::seconds(10), std::chrono::milliseconds step = 5ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(step);
  }
  return f();
}

// Nothing of a fault is left: every host's data link is up and every agent's journal empty.
inline void checkEverythingReverted(const Lab& lab) {
  for (const auto& n : lab.nodes()) {
    INFO("node " << n.name);
    CHECK(linkUp(n.netns));
    auto journal = std::filesystem::path(n.config).parent_path() / "state" / "journal";
    CHECK(std::filesystem::is_empty(journal));
  }
}

}  // namespace rctest
