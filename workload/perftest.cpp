// perftest as a workload: a fixed program list, its arguments, the report parser, and a
// runner that keeps the program on a pseudo-terminal (so its stdio is line-buffered and each
// report arrives when printed) and turns its rows into telemetry.
#include "workload/perftest.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"

namespace rc::workload {

namespace {

constexpr int64_t kEndGraceNs = 2'000'000'000;

constexpr std::array<PerftestProgram, 3> kPrograms{{
    {"ib_write_bw", "/usr/bin/ib_write_bw", false},
    {"ib_read_bw", "/usr/bin/ib_read_bw", true},
    {"ib_send_bw", "/usr/bin/ib_send_bw", false},
}};

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\r') j++;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// The last lines a program printed, for an error that says what it said.
std::string tailOf(const std::deque<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l;
  return out.empty() ? "(no output)" : out;
}

// A child on a pseudo-terminal in its own session; killed (the whole group) when dropped.
class Child {
 public:
  static Result<Child> spawn(const std::vector<std::string>& argv) {
    UniqueFD master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    // A system with devpts mounted but no /dev/ptmx node: its own multiplexer.
    if (master.get() < 0 && errno == ENOENT)
      master = UniqueFD(::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (master.get() < 0)
      return makeError(std::string("cannot open a pseudo-terminal (/dev/ptmx; is devpts mounted?): ") +
                       strerror(errno));
    if (::grantpt(master.get()) != 0 || ::unlockpt(master.get()) != 0)
      return makeError(std::string("cannot unlock a pseudo-terminal: ") + strerror(errno));
    char name[128];
    if (::ptsname_r(master.get(), name, sizeof name) != 0)
      return makeError(std::string("cannot name a pseudo-terminal: ") + strerror(errno));
    UniqueFD slave(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (slave.get() < 0) return makeError(std::string("cannot open ") + name + ": " + strerror(errno));
    // No output processing: lines end in '\n' as printed.
    termios t{};
    if (::tcgetattr(slave.get(), &t) == 0) {
      t.c_oflag &= ~tcflag_t(OPOST);
      t.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG);
      (void)::tcsetattr(slave.get(), TCSANOW, &t);
    }
    // Everything the child needs is prepared before fork: the agent has threads.
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    char path[] = "PATH=/usr/bin:/bin";
    char* envp[] = {path, nullptr};
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return makeError(std::string("cannot fork: ") + strerror(errno));
    if (pid == 0) {
      ::setsid();
      // Dies with the agent: a perftest must never outlive the workload that started it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      int in = ::open("/dev/null", O_RDONLY);
      if (in < 0 || ::dup2(in, 0) < 0 || ::dup2(slave.get(), 1) < 0 || ::dup2(slave.get(), 2) < 0)
        ::_exit(127);
      closeDescriptorsAbove2();
      ::execve(args[0], args.data(), envp);
      dprintf(2, "cannot execute %s: %s\n", args[0], strerror(errno));
      ::_exit(127);
    }
    Child c;
    c.pid_ = pid;
    c.master_ = std::move(master);
    return c;
  }
  Child() = default;
  Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)), master_(std::move(o.master_)) {}
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      stop();
      pid_ = std::exchange(o.pid_, -1);
      master_ = std::move(o.master_);
    }
    return *this;
  }
  ~Child() { stop(); }
  int fd() const { return master_.get(); }
  bool running() const { return pid_ > 0; }
  // Non-blocking: the exit status once it ended.
  std::optional<int> reap() {
    if (pid_ <= 0) return std::nullopt;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    return status;
  }
  // SIGTERM to its group, SIGKILL after 2 s.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    for (int i = 0; i < 200; i++) {
      if (reap()) return;
      ::usleep(10'000);
    }
    ::kill(-pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  UniqueFD master_;
};

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

}  // namespace

std::optional<PerftestProgram> perftestProgram(std::string_view test) {
  for (const auto& p : kPrograms)
    if (p.test == test) return p;
  return std::nullopt;
}

std::string perftestTests() {
  std::string out;
  for (const auto& p : kPrograms) out += (out.empty() ? "" : ", ") + std::string(p.test);
  return out;
}

std::optional<PerftestSample> PerftestParser::feed(std::string_view line) {
  if (line.find("Correlation coefficient r^2") != std::string_view::npos) {
    const size_t from = line.find_first_not_of(' ');
    clockFailure_ = std::string(line.substr(from == std::string_view::npos ? 0 : from));
    return std::nullopt;
  }
  if (line.find("#bytes") != std::string_view::npos) {
    auto at = line.find("BW average[");
    if (at != std::string_view::npos) {
      std::string_view unit = line.substr(at + 11);
      unit = unit.substr(0, unit.find(']'));
      // perftest's MB is MiB (its --help: "MiB=2^20 byte"); Gb is 10^9 bits.
      if (unit == "Gb/sec") unitBytesPerSec_ = 1e9 / 8;
      else if (unit == "MB/sec" || unit == "MiB/sec") unitBytesPerSec_ = 1048576.0;
    }
    return std::nullopt;
  }
  if (unitBytesPerSec_ <= 0) return std::nullopt;
  auto w = words(line);
  if (w.size() < 5) return std::nullopt;
  PerftestSample s;
  double peak = 0, avg = 0, rate = 0;
  if (!parseNumber(w[0], s.msgBytes) || !parseNumber(w[1], s.iterations) ||
      !parseNumber(w[2], peak) || !parseNumber(w[3], avg) || !parseNumber(w[4], rate))
    return std::nullopt;
  if (s.msgBytes == 0 || avg < 0) return std::nullopt;
  s.avgBytesPerSec = avg * unitBytesPerSec_;
  // Every rate 0 with messages counted: perftest's cycles-per-second calibration failed (it
  // says so in the line before) and it divided by nothing. The messages went over the wire in
  // the report period all the same (a capture with a working clock: 57 x 64 KiB in a row whose
  // BW average is 3.67 MB/s, tests/data/perftest/README.md).
  if (avg == 0 && peak == 0 && rate == 0 && s.iterations > 0 && !clockFailure_.empty() &&
      reportSeconds_ > 0) {
    s.avgBytesPerSec = double(s.iterations) * double(s.msgBytes) / reportSeconds_;
    s.rateFromIterations = true;
  }
  return s;
}

Result<RoceGid> findRoceGid(const std::string& sysRoot, const std::string& ipv4) {
  in_addr a{};
  if (::inet_pton(AF_INET, ipv4.c_str(), &a) != 1)
    return makeError("'" + ipv4 + "' is not an IPv4 address");
  const auto* b = reinterpret_cast<const unsigned char*>(&a.s_addr);
  // sysfs prints a GID as eight groups of four hex digits.
  char want[64];
  std::snprintf(want, sizeof want, "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", b[0], b[1],
                b[2], b[3]);
  const std::string base = sysRoot + "/class/infiniband";
  DIR* dir = ::opendir(base.c_str());
  if (!dir) return makeError("no RDMA device on this node (" + base + " is missing)");
  std::vector<std::string> devices;
  while (dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') devices.emplace_back(e->d_name);
  ::closedir(dir);
  std::sort(devices.begin(), devices.end());
  for (const auto& dev : devices)
    for (int port = 1; port <= 2; port++) {
      const std::string p = base + "/" + dev + "/ports/" + std::to_string(port);
      if (::access(p.c_str(), F_OK) != 0) continue;
      // Entry by entry, stopping at the match (reading the whole table is slow in a guest).
      for (int i = 0, empty = 0; i < 256 && empty < 8; i++) {
        std::string gid = readLine(p + "/gids/" + std::to_string(i));
        if (gid.empty() || gid == "0000:0000:0000:0000:0000:0000:0000:0000") {
          empty++;
          continue;
        }
        if (gid != want) continue;
        std::string type = readLine(p + "/gid_attrs/types/" + std::to_string(i));
        std::transform(type.begin(), type.end(), type.begin(), ::tolower);
        if (type.find("v2") == std::string::npos) continue;
        return RoceGid{dev, port, i};
      }
    }
  return makeError("no RDMA device has a RoCEv2 GID for " + ipv4 +
                   " (is rxe/the NIC's RoCE up on the data interface?)");
}

std::vector<std::string> perftestArgs(const PerftestOptions& o) {
  std::vector<std::string> a{std::string(o.program.path),
                             "-d", o.gid.device,
                             "-i", std::to_string(o.gid.port),
                             "-x", std::to_string(o.gid.index),
                             "-p", std::to_string(o.port),
                             "-s", std::to_string(o.size),
                             "-q", std::to_string(o.qps),
                             "-u", std::to_string(o.qpTimeout),
                             "--tclass=" + std::to_string(o.dscp << 2),
                             "--report_gbits",
                             "-F",
                             "--run_infinitely",
                             "-D", std::to_string(o.reportSeconds)};
  if (!o.server) a.push_back(o.serverAddress);
  return a;
}

Summary runPerftest(const PerftestRunSpec& spec, Telemetry& tel, const std::atomic<bool>& stop) {
  Summary sum;
  Counters& c = sum.counters;
  const auto& o = spec.options;
  const std::string who = "perftest " + std::string(o.program.test) + " (" +
                          (o.server ? "server" : "client") + ") on " + spec.node;
  auto fail = [&](std::string why) {
    sum.endReason = "error";
    sum.error = std::move(why);
    sum.verified = false;
    c.errors++;
    tel.update(c);
    return sum;
  };
  const int64_t endNs = spec.startNs + spec.durationNs;
  while (!stop.load() && wallNs() < spec.startNs) ::usleep(10'000);
  if (stop.load()) {
    sum.endReason = "stopped";
    return sum;
  }
  const auto argv = perftestArgs(o);
  {
    std::string cmd;
    for (const auto& x : argv) cmd += (cmd.empty() ? "" : " ") + x;
    log::info("{}: running {}", who, cmd);
  }

  std::deque<std::string> lastLines;
  PerftestParser parser(o.reportSeconds);
  bool saidClock = false;
  uint64_t reports = 0;
  int64_t prevReportNs = 0;
  uint64_t index = 0;
  for (int attempt = 0;; attempt++) {
    auto child = Child::spawn(argv);
    if (!child) return fail(who + ": " + child.error().message);
    std::string pending;
    int64_t launched = wallNs();
    if (prevReportNs == 0) prevReportNs = launched;
    std::optional<int> status;
    bool ended = false;
    // Reads what the program printed (waiting up to WAIT_MS) and handles every whole line;
    // false when there was nothing to read.
    auto pump = [&](int waitMs) -> bool {
      pollfd p{child->fd(), POLLIN, 0};
      bool got = false;
      if (::poll(&p, 1, waitMs) > 0) {
        char buf[4096];
        ssize_t k = ::read(child->fd(), buf, sizeof buf);
        // EIO: every holder of the terminal's other end has gone (the program ended).
        if (k > 0) {
          pending.append(buf, size_t(k));
          got = true;
        } else if (waitMs > 0) {
          ::usleep(20'000);
        }
      }
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty()) continue;
        log::info("{}: {}", who, line);
        lastLines.push_back(line);
        if (lastLines.size() > 6) lastLines.pop_front();
        const bool header = line.find("#bytes") != std::string::npos;
        auto s = parser.feed(line);
        // The measurement starts when the header is printed (after the QP exchange).
        if (header) prevReportNs = wallNs();
        if (!s) continue;
        if (reports == 0) log::info("{}: first report: {}", who, line);
        if (s->rateFromIterations && !saidClock) {
          saidClock = true;
          log::warn("{}: perftest could not calibrate its clock ({}) and printed 0 for every "
                    "rate; the rate is taken as #iterations x #bytes per {} s report period",
                    who, parser.clockFailure(), o.reportSeconds);
        }
        const int64_t now = wallNs();
        reports++;
        if (!spec.countsBytes) continue;
        // The row covers the time since the previous row (or the header), and its bytes are
        // its BW average over that time. Not #iterations x #bytes, and not the average times
        // the -D period: on the lab's TCG guests rows come every 2-4 s, each counting the
        // iterations of about one second, while the lab switch carried the average rate
        // the whole time (tests/data/perftest/README.md).
        const int64_t from = prevReportNs;
        const int64_t span = std::max<int64_t>(now - from, 1);
        const uint64_t bytes = uint64_t(s->avgBytesPerSec * double(span) / 1e9);
        const int64_t bin = tel.binNs();
        const int64_t pieces = std::max<int64_t>(1, span / bin);
        uint64_t given = 0;
        for (int64_t k = 0; k < pieces; k++) {
          uint64_t part = bytes * uint64_t(k + 1) / uint64_t(pieces) - given;
          given += part;
          tel.addBytes(from + k * span / pieces, part);
        }
        IterationRecord rec;
        rec.index = index++;
        rec.startNs = from;
        rec.endNs = now;
        rec.rxBytes = bytes;
        rec.ok = true;
        tel.addIteration(rec);
        c.iterations++;
        tel.update(c);
        prevReportNs = now;
      }
      return got;
    };
    while (!stop.load() && !status) {
      if (wallNs() >= endNs) {
        ended = true;
        break;
      }
      if (spec.countsBytes && reports == 0 && wallNs() >= launched + spec.firstReportNs)
        return fail(who + " printed no report within " +
                    std::to_string(spec.firstReportNs / 1'000'000'000) + " s: " + tailOf(lastLines));
      pump(100);
      status = child->reap();
      // What it printed before it ended is still in the terminal: read it all.
      if (status)
        while (pump(0)) {
        }
    }
    if (stop.load()) {
      sum.endReason = "stopped";
      return sum;
    }
    if (ended) break;
    // The program ended by itself. Near the end that is the other end stopping first (the
    // ends' clocks agree to well within this), not a failure.
    const std::string how = describeStatus(*status);
    if (reports > 0 || o.server)
      if (wallNs() >= endNs - kEndGraceNs) break;
    // A client that never connected dials again while the server may still be starting.
    if (!o.server && reports == 0 && wallNs() < spec.startNs + spec.connectWindowNs) {
      if (attempt == 0 || attempt % 10 == 0)
        log::info("{} {} before connecting ({}); dialling again", who, how, tailOf(lastLines));
      ::usleep(500'000);
      continue;
    }
    return fail(who + " " + how + " before the end of the run: " + tailOf(lastLines));
  }
  if (spec.countsBytes && reports == 0)
    return fail(who + " printed no report during the run: " + tailOf(lastLines));
  sum.endReason = "completed";
  tel.update(c);
  return sum;
}

}  // namespace rc::workload
