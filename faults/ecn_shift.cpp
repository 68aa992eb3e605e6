// The ecn_shift fault: moves the ECN marking thresholds (kmin, kmax, pmax) of one queue and
// restores exactly what was there. Backends: the lab switch (control socket), a RED root
// qdisc through rtnetlink (tc-red), or user commands (e.g. SONiC's ecnconfig).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "faults/netlink.hpp"
#include "faults/tc_red.hpp"

namespace rc::faults {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;
constexpr int kCommandTimeoutMs = 30'000;
// Root qdiscs that deleting the root restores exactly (the kernel re-creates the default).
const char* const kDefaultRoots[] = {"noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo"};

struct ShiftParams {
  std::string backend;
  std::string port, socket, interface;
  int queue = 3;
  uint64_t kmin = 0, kmax = 0;
  double pmax = 0;
  std::string snapshotCommand, applyCommand, revertCommand;
};

std::string str(const json& p, const char* key) {
  auto it = p.find(key);
  return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Fills {port} {queue} {kmin} {kmax} {pmax} {interface} {snapshot}, each shell-quoted.
std::string expand(std::string tmpl, const ShiftParams& p, const std::string& snapshot) {
  char pmax[32];
  std::snprintf(pmax, sizeof pmax, "%g", p.pmax);
  const std::pair<const char*, std::string> vars[] = {
      {"{port}", p.port}, {"{queue}", std::to_string(p.queue)}, {"{kmin}", std::to_string(p.kmin)},
      {"{kmax}", std::to_string(p.kmax)}, {"{pmax}", pmax}, {"{interface}", p.interface},
      {"{snapshot}", snapshot}};
  for (const auto& [key, value] : vars) {
    size_t at = 0;
    while ((at = tmpl.find(key, at)) != std::string::npos) {
      std::string q = shellQuote(value);
      tmpl.replace(at, std::strlen(key), q);
      at += q.size();
    }
  }
  return tmpl;
}

// Runs `sh -c command`, returning its stdout (bounded); a non-zero exit is an error quoting
// the command's stderr.
Result<std::string> runShell(const std::string& command) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return makeError("ecn_shift: pipe: " + std::string(std::strerror(errno)), errno);
  UniqueFD outR(out[0]), outW(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return makeError("ecn_shift: pipe: " + std::string(std::strerror(errno)), errno);
  UniqueFD errR(err[0]), errW(err[1]);
  pid_t pid = ::fork();
  if (pid < 0) return makeError("ecn_shift: fork: " + std::string(std::strerror(errno)), errno);
  if (pid == 0) {
    ::dup2(outW.get(), 1);
    ::dup2(errW.get(), 2);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  outW.reset();
  errW.reset();
  std::string o, e;
  int64_t deadline = monoNs() + int64_t(kCommandTimeoutMs) * 1'000'000;
  bool outOpen = true, errOpen = true, timedOut = false;
  while (outOpen || errOpen) {
    pollfd p[2] = {{outOpen ? outR.get() : -1, POLLIN, 0}, {errOpen ? errR.get() : -1, POLLIN, 0}};
    int left = int((deadline - monoNs()) / 1'000'000);
    if (left <= 0 || ::poll(p, 2, left) == 0) {
      timedOut = true;
      break;
    }
    char buf[4096];
    for (int i = 0; i < 2; i++) {
      if (!p[i].revents) continue;
      ssize_t n = ::read(i == 0 ? outR.get() : errR.get(), buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? outOpen : errOpen) = false;
        continue;
      }
      std::string& s = i == 0 ? o : e;
      if (s.size() < kMaxOutput) s.append(buf, size_t(n));
    }
  }
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) return makeError("ecn_shift: command timed out after 30 s: " + command, ETIMEDOUT);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError("ecn_shift: command '" + command + "' failed (status " +
                     std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                     "): " + e.substr(0, 500));
  return o;
}

// The exact previous state, as journaled.
Result<void> restore(const json& snap) {
  std::string backend = str(snap, "backend");
  if (backend == "labswitch") {
    const json& prof = snap.at("profile");
    json req = {{"cmd", "set_ecn"}, {"port", snap.at("port")}, {"queue", snap.at("queue")},
                {"enabled", prof.at("enabled")}, {"kmin", prof.at("kmin")}, {"kmax", prof.at("kmax")},
                {"pmax", prof.at("pmax")}};
    auto r = labswitchRequest(str(snap, "socket"), req);
    if (!r) return makeError("ecn_shift revert: " + r.error().message, r.error().code);
    return {};
  }
  if (backend == "tc-red") {
    int ifindex = snap.at("ifindex").get<int>();
    auto kind = tcred::rootKind(ifindex);
    // Only our own RED is removed; anything else means someone changed the qdisc since.
    if (!kind || *kind != "red") return {};
    return tcred::send(tcred::buildDeleteRoot(ifindex, 2), str(snap, "interface"));
  }
  if (backend == "command") {
    auto r = runShell(str(snap, "revert"));
    if (!r) return r.error();
    return {};
  }
  return makeError("ecn_shift journal snapshot has an unknown backend '" + backend + "'");
}

class EcnShift final : public Fault {
 public:
  EcnShift(json params, ShiftParams p) : params_(std::move(params)), p_(std::move(p)) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    json s = {{"backend", p_.backend}};
    if (p_.backend == "labswitch") {
      auto r = labswitchRequest(p_.socket, {{"cmd", "get_ecn"}, {"port", p_.port}, {"queue", p_.queue}});
      if (!r) return makeError("ecn_shift snapshot: " + r.error().message, r.error().code);
      s["socket"] = p_.socket;
      s["port"] = p_.port;
      s["queue"] = p_.queue;
      s["profile"] = (*r)["profiles"].at(0).at("profile");
    } else if (p_.backend == "tc-red") {
      auto link = nl::getLink(p_.interface);
      if (!link) return makeError("ecn_shift: " + link.error().message, link.error().code);
      auto kind = tcred::rootKind(link->ifindex);
      if (!kind) return kind.error();
      bool isDefault = false;
      for (const char* k : kDefaultRoots) isDefault |= *kind == k;
      if (!isDefault)
        return makeError("ecn_shift tc-red: '" + p_.interface + "' has root qdisc '" + *kind +
                         "', which removing RED would not restore exactly; remove it first or use "
                         "the command backend");
      s["interface"] = p_.interface;
      s["ifindex"] = link->ifindex;
      s["root_kind"] = *kind;
    } else {
      auto out = runShell(expand(p_.snapshotCommand, p_, ""));
      if (!out) return out.error();
      s["output"] = *out;
      s["revert"] = expand(p_.revertCommand, p_, *out);
    }
    std::lock_guard lock(m_);
    snap_ = s;
    return s;
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    {
      std::lock_guard lock(m_);
      if (!snap_) return makeError("ecn_shift: run without a snapshot");
    }
    Result<void> applied;
    if (p_.backend == "labswitch") {
      auto r = labswitchRequest(p_.socket, {{"cmd", "set_ecn"}, {"port", p_.port}, {"queue", p_.queue},
                                            {"enabled", true}, {"kmin", p_.kmin}, {"kmax", p_.kmax},
                                            {"pmax", p_.pmax}});
      if (!r) applied = r.error();
    } else if (p_.backend == "tc-red") {
      auto link = nl::getLink(p_.interface);
      if (!link) return link.error();
      tcred::RedParams rp{link->ifindex, uint32_t(p_.kmin), uint32_t(p_.kmax), p_.pmax, 1000};
      auto msg = tcred::buildAddRed(rp, 1);
      if (!msg) return msg.error();
      applied = tcred::send(*msg, p_.interface);
    } else {
      auto r = runShell(expand(p_.applyCommand, p_, ""));
      if (!r) applied = r.error();
    }
    if (!applied) return applied;
    events.add(Event{wallNs(), "applied", describe(), false});
    // The shift holds until the manager stops it (the fault's --for or lifetime).
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait(lock, stop, [] { return false; });
    return {};
  }

  Result<void> revert(EventLog& events) override {
    std::optional<json> s;
    {
      std::lock_guard lock(m_);
      s = snap_;
    }
    if (!s) return {};
    auto r = restore(*s);
    if (!r) return r;
    events.add(Event{wallNs(), "reverted", p_.backend + " " + (p_.port.empty() ? p_.interface : p_.port), false});
    return {};
  }

  std::string describe() const override {
    char buf[200];
    std::snprintf(buf, sizeof buf, "ecn_shift %s %s queue %d: kmin %llu B, kmax %llu B, pmax %g",
                  p_.backend.c_str(), (p_.port.empty() ? p_.interface : p_.port).c_str(), p_.queue,
                  (unsigned long long)p_.kmin, (unsigned long long)p_.kmax, p_.pmax);
    return buf;
  }

 private:
  json params_;
  ShiftParams p_;
  std::mutex m_;
  std::optional<json> snap_;
};

}  // namespace

extern const FaultKind kEcnShift;
const FaultKind kEcnShift{
    "ecn_shift",
    "moves the ECN marking thresholds of a queue (lab switch, tc RED, or user commands) and restores them",
    {
        {"backend", ParamType::string, "labswitch, tc-red or command", "labswitch"},
        {"port", ParamType::string, "labswitch: the switch port (e.g. n2 or leaf1:spine1; default: the one facing this host)", json(), 0, 0, true},
        {"queue", ParamType::integer, "queue (priority) whose profile moves", 3, 0, 7},
        {"kmin", ParamType::size, "marking starts above this queue depth", json(), 0, 1e12},
        {"kmax", ParamType::size, "every ECT frame is marked above this depth", json(), 0, 1e12},
        {"pmax", ParamType::rate, "marking probability at kmax (0..1)", 0.2, 0, 1},
        {"socket", ParamType::string, "labswitch: control socket (default: the lab's)", json(), 0, 0, true},
        {"interface", ParamType::string, "tc-red: interface (default: the first data interface)", json(), 0, 0, true},
        {"snapshot_command", ParamType::string, "command: prints the current profile", json(), 0, 0, true},
        {"apply_command", ParamType::string, "command: applies {kmin} {kmax} {pmax} to {port} {queue}", json(), 0, 0, true},
        {"revert_command", ParamType::string, "command: restores; {snapshot} is what snapshot_command printed", json(), 0, 0, true},
    },
    [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      if (!params.is_object()) return makeError("ecn_shift parameters must be a table");
      ShiftParams p;
      p.backend = str(params, "backend");
      p.port = str(params, "port");
      p.queue = params.value("queue", 3);
      if (!params.contains("kmin") || !params["kmin"].is_number_integer() || !params.contains("kmax") ||
          !params["kmax"].is_number_integer())
        return makeError("ecn_shift needs kmin and kmax (sizes, e.g. \"100KiB\")");
      p.kmin = params["kmin"].get<uint64_t>();
      p.kmax = params["kmax"].get<uint64_t>();
      p.pmax = params.value("pmax", 0.2);
      if (p.kmin > p.kmax) return makeError("ecn_shift: kmin must not exceed kmax");
      if (!(p.pmax >= 0 && p.pmax <= 1) || p.queue < 0 || p.queue > 7)
        return makeError("ecn_shift: pmax must be within [0, 1] and queue within 0..7");
      json resolved = params;
      if (p.backend == "labswitch") {
        // Without a port, the queue toward this host: so `target = "all"` shifts every host's
        // egress queue, each agent its own.
        p.port = labswitchHostPort(p.port);
        if (p.port.empty())
          return makeError("ecn_shift labswitch: set 'port' (a switch port such as n2); only agents "
                           "under `rdmachaos lab up` know their own port");
        resolved["port"] = p.port;
        auto sock = labswitchSocket(str(params, "socket"));
        if (!sock) return makeError("ecn_shift: " + sock.error().message);
        p.socket = *sock;
        resolved["socket"] = p.socket;
      } else if (p.backend == "tc-red") {
        p.interface = str(params, "interface");
        if (p.interface.empty()) p.interface = policy.defaultInterface;
        if (auto ok = checkInterface(policy, p.interface); !ok)
          return makeError("ecn_shift: " + ok.error().message, EPERM);
        if (p.kmin == 0 || p.kmax <= p.kmin || p.kmax > 0xffffffffu / 4)
          return makeError("ecn_shift tc-red: needs 0 < kmin < kmax <= 1 GiB");
        resolved["interface"] = p.interface;
      } else if (p.backend == "command") {
        p.snapshotCommand = str(params, "snapshot_command");
        p.applyCommand = str(params, "apply_command");
        p.revertCommand = str(params, "revert_command");
        p.interface = policy.defaultInterface;
        if (p.snapshotCommand.empty() || p.applyCommand.empty() || p.revertCommand.empty())
          return makeError("ecn_shift command: set snapshot_command, apply_command and revert_command");
      } else {
        return makeError("ecn_shift: backend '" + p.backend + "' is not labswitch, tc-red or command");
      }
      return std::unique_ptr<Fault>(std::make_unique<EcnShift>(std::move(resolved), std::move(p)));
    },
    [](const json& /*params*/, const json& snapshot) -> Result<void> {
      try {
        return restore(snapshot);
      } catch (const std::exception& e) {
        return makeError(std::string("ecn_shift journal snapshot is incomplete: ") + e.what());
      }
    },
};

}  // namespace rc::faults
