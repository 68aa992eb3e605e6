// Process helpers for the lab: command runner, process identity, pidfd-based stopping.
#include "lab/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/clock.hpp"

namespace rc::lab {
namespace {

int pidfdOpen(pid_t pid) { return int(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfdSignal(int fd, int sig) {
  return int(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Field 22 of /proc/PID/stat; the comm field (2) may hold spaces and parentheses, so parse
// from the last ')'. Zombies count as gone: they run nothing and cannot be killed twice.
uint64_t startTimeOf(pid_t pid, bool* zombie) {
  std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  rest >> field;  // field 3: state
  *zombie = field == "Z" || field == "X";
  for (int i = 4; i <= 22; i++) rest >> field;
  try {
    return std::stoull(field);
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::string describeCommand(const std::vector<std::string>& argv) {
  std::string s = "`";
  for (size_t i = 0; i < argv.size(); i++) s += (i ? " " : "") + argv[i];
  return s + "`";
}

Result<std::string> runCommand(const std::vector<std::string>& argv, int timeoutMs) {
  int outPipe[2], errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0)
    return makeError("pipe: " + std::string(strerror(errno)), errno);
  UniqueFD outR(outPipe[0]), outW(outPipe[1]);
  if (::pipe2(errPipe, O_CLOEXEC) != 0)
    return makeError("pipe: " + std::string(strerror(errno)), errno);
  UniqueFD errR(errPipe[0]), errW(errPipe[1]);

  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0)
    return makeError("cannot fork for " + describeCommand(argv) + ": " + strerror(errno), errno);
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(outW.get(), 1);
    ::dup2(errW.get(), 2);
    closeAllExcept({0, 1, 2});
    ::execvp(args[0], args.data());
    dprintf(2, "cannot execute %s: %s\n", args[0], strerror(errno));
    ::_exit(127);
  }
  outW.reset();
  errW.reset();

  // The child's exit is watched through a pidfd beside its pipes, so a command that closes its
  // output and hangs (or one that hangs with it open) is killed at the deadline, not waited on.
  UniqueFD pidfd(pidfdOpen(pid));
  const int64_t deadline = monoNs() + int64_t(timeoutMs) * 1'000'000;
  std::string out, err;
  pollfd fds[3] = {{outR.get(), POLLIN, 0}, {errR.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
  int open = 2;
  bool exited = !pidfd.isValid();  // without pidfds (old kernel): wait for the pipes only
  bool timedOut = false;
  char buf[4096];
  while (open > 0 || !exited) {
    int64_t left = (deadline - monoNs()) / 1'000'000;
    if (left <= 0) {
      timedOut = true;
      break;
    }
    int n = ::poll(fds, 3, int(std::min<int64_t>(left, INT_MAX)));
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[2].fd >= 0 && fds[2].revents) {
      exited = true;
      fds[2].fd = -1;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? out : err).append(buf, size_t(r));
      } else if (r == 0 || errno != EINTR) {
        fds[i].fd = -1;
        open--;
      }
    }
    // An exited command whose pipes a grandchild still holds: what it wrote is read; done.
    if (exited && open > 0 && n > 0 && fds[0].revents == 0 && fds[1].revents == 0) break;
  }
  if (timedOut) {
    // Our own child, still unreaped, so its pid cannot have been reused.
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return makeError(describeCommand(argv) + " did not finish within " +
                         std::to_string(timeoutMs / 1000.0).substr(0, 4) + " s; killed it",
                     ETIMEDOUT);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  std::string why = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status));
  return makeError(
      describeCommand(argv) + " failed (" + why + ")" + (err.empty() ? std::string() : ": " + err),
      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

ProcRecord identify(pid_t pid) {
  ProcRecord r;
  r.pid = pid;
  bool zombie = false;
  r.startTime = startTimeOf(pid, &zombie);
  if (zombie) r.startTime = 0;
  std::string raw = readFile("/proc/" + std::to_string(pid) + "/cmdline");
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t end = raw.find('\0', pos);
    if (end == std::string::npos) end = raw.size();
    r.cmdline.push_back(raw.substr(pos, end - pos));
    pos = end + 1;
  }
  return r;
}

bool stillRunning(const ProcRecord& record, const std::string& mustContain) {
  if (record.pid <= 0 || record.startTime == 0) return false;
  ProcRecord now = identify(record.pid);
  if (now.startTime != record.startTime) return false;
  if (now.cmdline == record.cmdline) return true;
  return !mustContain.empty() &&
         std::find(now.cmdline.begin(), now.cmdline.end(), mustContain) != now.cmdline.end();
}

std::vector<std::string> stopProcesses(const std::vector<ProcRecord>& records,
                                       const std::vector<std::string>& mustContain, int graceMs) {
  // Open the pidfd first and check identity afterwards: a signal through a pidfd can only
  // reach the process we verified, even if the pid is reused in between.
  std::vector<UniqueFD> fds;
  std::vector<const ProcRecord*> targets;
  for (size_t i = 0; i < records.size(); i++) {
    const auto& rec = records[i];
    if (rec.pid <= 0) continue;
    UniqueFD fd(pidfdOpen(rec.pid));
    if (!fd.isValid()) continue;  // ESRCH: already gone
    if (!stillRunning(rec, i < mustContain.size() ? mustContain[i] : std::string())) continue;
    if (pidfdSignal(fd.get(), SIGTERM) != 0) continue;
    fds.push_back(std::move(fd));
    targets.push_back(&rec);
  }
  int64_t deadline = monoNs() + int64_t(graceMs) * 1'000'000;
  std::vector<bool> exited(fds.size(), false);
  auto pending = [&] { return std::count(exited.begin(), exited.end(), false); };
  while (pending() > 0) {
    int64_t left = (deadline - monoNs()) / 1'000'000;
    if (left <= 0) break;
    std::vector<pollfd> pfds;
    std::vector<size_t> index;
    for (size_t i = 0; i < fds.size(); i++) {
      if (exited[i]) continue;
      pfds.push_back({fds[i].get(), POLLIN, 0});
      index.push_back(i);
    }
    int n = ::poll(pfds.data(), pfds.size(), int(std::min<int64_t>(left, INT_MAX)));
    if (n < 0 && errno != EINTR) break;
    for (size_t j = 0; j < pfds.size(); j++)
      if (pfds[j].revents) exited[index[j]] = true;
  }
  std::vector<std::string> survivors;
  for (size_t i = 0; i < fds.size(); i++) {
    if (exited[i]) continue;
    pidfdSignal(fds[i].get(), SIGKILL);
    pollfd p{fds[i].get(), POLLIN, 0};
    // SIGKILL cannot be refused; only a task stuck in the kernel (D state) outlives this.
    if (::poll(&p, 1, 2000) <= 0) survivors.push_back("pid " + std::to_string(targets[i]->pid));
  }
  return survivors;
}

void closeAllExcept(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned first = 0;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (unsigned(fd) > first) ::close_range(first, unsigned(fd) - 1, 0);
    first = unsigned(fd) + 1;
  }
  ::close_range(first, ~0U, 0);
}

int threadCount() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') n++;
    ::closedir(d);
  }
  return n;
}

}  // namespace rc::lab
