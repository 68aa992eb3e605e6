// The ecn_shift fault: moves the ECN marking thresholds (kmin, kmax, pmax) of one queue and
// restores exactly what was there. Backends: the lab switch (control socket), a RED root
// qdisc through rtnetlink (tc-red), or command templates of the agent's own configuration
// (e.g. SONiC's ecnconfig), run as argv without a shell.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
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

struct ShiftParams {
  std::string backend;
  std::string port, socket, interface;
  int queue = 3;
  uint64_t kmin = 0, kmax = 0;
  double pmax = 0;
  std::string command;  // command backend: the name of a template in the agent's config
  CommandTemplate tmpl;
};

// The lab switch reads port "*" as every port: one fault would then hold every queue of that
// priority while its target (and its one-owner rule) named a port called "*", so it would not
// collide with a fault on port n1 of the same queue, and the two reverts would fight.
Result<void> checkLabswitchPort(const std::string& port) {
  if (port == "*")
    return makeError("port \"*\" (every switch port) is not allowed: ecn_shift moves one port's queue; "
                     "name one port (e.g. n2), or leave port out and set target = \"all\" so that "
                     "each agent shifts its own port");
  return {};
}

std::string str(const json& p, const char* key) {
  auto it = p.find(key);
  return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A qdisc tree as journaled: each qdisc's handle, parent, kind and options (hex), so the revert
// re-creates exactly what was there.
json qdiscsJson(const std::vector<tcred::Qdisc>& tree) {
  json out = json::array();
  for (const auto& q : tree) {
    std::string hex;
    char b[3];
    for (uint8_t c : q.options) {
      std::snprintf(b, sizeof b, "%02x", c);
      hex += b;
    }
    out.push_back({{"handle", q.handle}, {"parent", q.parent}, {"kind", q.kind}, {"options", hex}});
  }
  return out;
}

std::vector<tcred::Qdisc> qdiscsFrom(const json& j) {
  std::vector<tcred::Qdisc> out;
  for (const auto& e : j) {
    tcred::Qdisc q;
    q.handle = e.at("handle").get<uint32_t>();
    q.parent = e.at("parent").get<uint32_t>();
    q.kind = e.at("kind").get<std::string>();
    std::string hex = e.at("options").get<std::string>();
    if (hex.size() % 2) throw std::invalid_argument("odd-length qdisc options");
    for (size_t i = 0; i < hex.size(); i += 2) q.options.push_back(uint8_t(std::stoul(hex.substr(i, 2), nullptr, 16)));
    out.push_back(std::move(q));
  }
  return out;
}

// The port, the one value of a command's argv that comes from the controller: a switch's port
// name (Ethernet0, Ethernet1/1, Ethernet1.2, Po1:3), never an option and never a way out of a
// path a template may put it in (/sys/class/net/{port}/..., a state file): no leading '/', '-'
// or '.', no "..", and only these characters.
bool safePort(const std::string& v) {
  if (v.empty() || v.size() > 64 || v.front() == '-' || v.front() == '.' || v.front() == '/' ||
      v.find("..") != std::string::npos || v.find("//") != std::string::npos || v.back() == '/')
    return false;
  for (char c : v)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' && c != '-' && c != '/')
      return false;
  return true;
}

// The values a template is filled with, as journaled.
json commandValues(const ShiftParams& p) {
  char pmax[32];
  std::snprintf(pmax, sizeof pmax, "%g", p.pmax);
  return json{{"port", p.port}, {"queue", std::to_string(p.queue)}, {"kmin", std::to_string(p.kmin)},
              {"kmax", std::to_string(p.kmax)}, {"pmax", pmax}, {"interface", p.interface}};
}

// Replaces {name} inside each element by VALUES[name] (and {snapshot}); no shell ever sees it.
std::vector<std::string> expand(const std::vector<std::string>& argv, const json& values,
                                const std::string& snapshot) {
  std::vector<std::string> out;
  for (std::string arg : argv) {
    for (const char* key : {"port", "queue", "kmin", "kmax", "pmax", "interface", "snapshot"}) {
      std::string token = std::string("{") + key + "}";
      std::string value = std::string(key) == "snapshot" ? snapshot : values.value(key, "");
      for (size_t at = 0; (at = arg.find(token, at)) != std::string::npos; at += value.size())
        arg.replace(at, token.size(), value);
    }
    out.push_back(std::move(arg));
  }
  return out;
}

std::string showArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs ARGV (argv[0] an absolute path, no shell, no PATH search), returning its stdout; a
// non-zero exit is an error quoting the command's stderr. The command runs in a process group
// of its own, and the whole group is killed when it returns or times out: nothing it started (an
// ssh to the switch) outlives it to land a late change after the revert. Output over 64 KiB is
// refused, not cut: a cut snapshot would be "restored" as something that was never there.
Result<std::string> runArgv(const std::vector<std::string>& argv) {
  const std::string command = showArgv(argv);
  if (argv.empty() || argv.front().empty() || argv.front().front() != '/')
    return makeError("ecn_shift: command '" + command + "' does not start with an absolute path");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return makeError("ecn_shift: pipe: " + std::string(std::strerror(errno)), errno);
  UniqueFD outR(out[0]), outW(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return makeError("ecn_shift: pipe: " + std::string(std::strerror(errno)), errno);
  UniqueFD errR(err[0]), errW(err[1]);
  pid_t pid = ::fork();
  if (pid < 0) return makeError("ecn_shift: fork: " + std::string(std::strerror(errno)), errno);
  if (pid == 0) {
    ::setsid();
    ::dup2(outW.get(), 1);
    ::dup2(errW.get(), 2);
    closeDescriptorsAbove2();
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  outW.reset();
  errW.reset();
  std::string o, e;
  int64_t deadline = monoNs() + int64_t(kCommandTimeoutMs) * 1'000'000;
  bool outOpen = true, errOpen = true, timedOut = false, tooLong = false;
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
      if (s.size() + size_t(n) > kMaxOutput) {
        if (i == 0) tooLong = true;
        s.append(buf, kMaxOutput - std::min(kMaxOutput, s.size()));
        continue;
      }
      s.append(buf, size_t(n));
    }
    if (tooLong) break;
  }
  if (timedOut || tooLong) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Whatever of its group is left (a child it put in the background) goes with it; the group's
  // id cannot be reused while any member lives.
  ::kill(-pid, SIGKILL);
  if (timedOut) return makeError("ecn_shift: command timed out after 30 s (its process group was killed): " + command, ETIMEDOUT);
  if (tooLong)
    return makeError("ecn_shift: command '" + command + "' printed more than 64 KiB; a snapshot must be " +
                         "the profile alone (make the template print less)",
                     EMSGSIZE);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError("ecn_shift: command '" + command + "' failed (status " +
                     std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                     "): " + e.substr(0, 500));
  return o;
}

// The template NAME of the policy, or an error naming the configured ones.
Result<const CommandTemplate*> findTemplate(const Policy& policy, const std::string& name) {
  if (policy.ecnCommands.empty())
    return makeError("ecn_shift: the command backend is off: this agent's configuration defines no "
                     "[ecn_commands.NAME] templates",
                     EPERM);
  auto it = policy.ecnCommands.find(name);
  if (it == policy.ecnCommands.end()) {
    std::string names;
    for (const auto& [n, t] : policy.ecnCommands) names += (names.empty() ? "" : ", ") + n;
    return makeError("ecn_shift: no command template '" + name + "' in this agent's configuration "
                     "(it has: " + names + ")",
                     EPERM);
  }
  return &it->second;
}

// Whether IFINDEX still is INTERFACE, as journaled: after a reboot or a re-created NIC the index
// can name another interface, whose qdiscs are not this fault's to touch (a stale entry, touched
// nothing and given up as a conflict). An interface that is gone has nothing left to restore.
Result<void> sameInterface(int ifindex, const std::string& interface) {
  auto link = nl::getLink(ifindex);
  if (!link) {
    if (link.error().code == ENODEV) return {};
    return makeError("tc-red on '" + interface + "': " + link.error().message, link.error().code);
  }
  if (link->name != interface)
    return makeError("tc-red revert: ifindex " + std::to_string(ifindex) + " is now '" + link->name + "', not '" +
                         interface + "' as journaled: the interface was renamed or replaced, so this stale entry " +
                         "touches nothing; check the qdiscs of '" + interface + "' by hand (`tc qdisc show dev " +
                         interface + "`)",
                     kRevertConflict);
  return {};
}

// What an ecn_shift with normalised PARAMS sets on the lab switch.
swproto::EcnSettings appliedProfile(const json& params) {
  return {.enabled = true, .kmin = params.value("kmin", uint64_t(0)), .kmax = params.value("kmax", uint64_t(0)),
          .pmax = params.value("pmax", 0.2)};
}

bool sameProfile(const swproto::EcnSettings& a, const swproto::EcnSettings& b) {
  return a.enabled == b.enabled && a.kmin == b.kmin && a.kmax == b.kmax && std::fabs(a.pmax - b.pmax) < 1e-9;
}

std::string showProfile(const swproto::EcnSettings& p) {
  char buf[120];
  std::snprintf(buf, sizeof buf, "%s kmin %llu kmax %llu pmax %g", p.enabled ? "on" : "off",
                (unsigned long long)p.kmin, (unsigned long long)p.kmax, p.pmax);
  return buf;
}

// The exact previous state, as journaled, restored only where the target still holds what this
// fault set (APPLIED: the profile, or the command backend's snapshot output after the apply;
// null = not known, after a crash for the command backend). Where it already holds the
// snapshot, nothing is left to do; where it holds a third value, another owner changed it since
// (another node's fault on the same switch port, an operator): touched nothing, a conflict.
Result<void> restore(const json& snap, const Policy& policy, const json& applied) {
  std::string backend = str(snap, "backend");
  if (backend == "labswitch") {
    auto prof = swproto::parse<swproto::EcnSettings>(snap.at("profile"));
    if (!prof) return makeError("ecn_shift journal snapshot: " + prof.error().message);
    const std::string port = str(snap, "port");
    const int queue = snap.at("queue").get<int>();
    if (applied.is_object()) {
      auto now = labswitchCall(str(snap, "socket"), swproto::GetEcnRequest{.port = port, .queue = queue});
      if (!now) return makeError("ecn_shift revert: " + now.error().message, now.error().code);
      if (now->profiles.size() != 1)
        return makeError("ecn_shift revert: the lab switch names " + std::to_string(now->profiles.size()) +
                         " queues for port '" + port + "' queue " + std::to_string(queue) + ", not one");
      const swproto::EcnSettings& cur = now->profiles[0].profile;
      if (sameProfile(cur, *prof)) return {};  // already restored
      const swproto::EcnSettings mine = appliedProfile(applied);
      if (!sameProfile(cur, mine))
        return makeError("ecn_shift revert conflict on lab switch port '" + port + "' queue " + std::to_string(queue) +
                             ": it now holds (" + showProfile(cur) + "), neither what this fault set (" +
                             showProfile(mine) + ") nor what it found (" + showProfile(*prof) +
                             "); another fault or an operator changed it since: left as it is",
                         kRevertConflict);
    }
    auto r = labswitchCall(str(snap, "socket"),
                           swproto::SetEcnRequest{.port = port, .queue = queue, .enabled = prof->enabled,
                                                  .kmin = prof->kmin, .kmax = prof->kmax, .pmax = prof->pmax});
    if (!r) return makeError("ecn_shift revert: " + r.error().message, r.error().code);
    return {};
  }
  if (backend == "tc-red") {
    int ifindex = snap.at("ifindex").get<int>();
    const std::string interface = str(snap, "interface");
    if (auto same = sameInterface(ifindex, interface); !same) return same.error();
    if (snap.contains("qdiscs")) return tcred::restoreTree(ifindex, interface, qdiscsFrom(snap.at("qdiscs")));
    // An entry journaled before the tree was: its root was a kernel default, which removing
    // our RED brings back. A failed read is an error (retried), not a success.
    auto kind = tcred::rootKind(ifindex);
    if (!kind) {
      if (auto link = nl::getLink(ifindex); !link && link.error().code == ENODEV) return {};
      return makeError("tc-red revert on '" + interface + "': " + kind.error().message, kind.error().code);
    }
    if (*kind == str(snap, "root_kind")) return {};  // already restored
    if (*kind != "red")
      return makeError("tc-red revert on '" + interface + "': its root qdisc is now '" + *kind +
                           "', neither the RED this fault set nor the '" + str(snap, "root_kind") +
                           "' it replaced; left alone (restore it by hand, and the revert is retried)",
                       EBUSY);
    return tcred::send(tcred::buildDeleteRoot(ifindex, 2), interface);
  }
  if (backend == "command") {
    // The journal names the template and the values, never a command: the command comes from
    // the agent's configuration now, and the values are checked again.
    auto t = findTemplate(policy, str(snap, "command"));
    if (!t) return t.error();
    const json& values = snap.at("values");
    if (!safePort(values.at("port").get<std::string>()))
      return makeError("ecn_shift journal snapshot has an invalid port");
    const std::string found = snap.at("output").get<std::string>();
    if (applied.is_string()) {
      auto now = runArgv(expand((*t)->snapshot, values, ""));
      if (!now) return now.error();
      if (*now == found) return {};  // already restored
      if (*now != applied.get<std::string>())
        return makeError("ecn_shift revert conflict on '" + values.at("port").get<std::string>() + "' queue " +
                             values.value("queue", std::string("?")) + ": the snapshot command now prints '" +
                             now->substr(0, 200) + "', neither what it printed after this fault's apply ('" +
                             applied.get<std::string>().substr(0, 200) + "') nor before it ('" + found.substr(0, 200) +
                             "'); another fault or an operator changed it since: left as it is",
                         kRevertConflict);
    }
    auto r = runArgv(expand((*t)->revert, values, found));
    if (!r) return r.error();
    return {};
  }
  return makeError("ecn_shift journal snapshot has an unknown backend '" + backend + "'");
}

class EcnShift final : public Fault {
 public:
  EcnShift(json params, ShiftParams p, Policy policy)
      : params_(std::move(params)), p_(std::move(p)), policy_(std::move(policy)) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    json s = {{"backend", p_.backend}};
    if (p_.backend == "labswitch") {
      auto r = labswitchCall(p_.socket, swproto::GetEcnRequest{.port = p_.port, .queue = p_.queue});
      if (!r) return makeError("ecn_shift snapshot: " + r.error().message, r.error().code);
      if (r->profiles.size() != 1)
        return makeError("ecn_shift snapshot: the lab switch names " + std::to_string(r->profiles.size()) +
                         " queues for port '" + p_.port + "' queue " + std::to_string(p_.queue) + ", not one");
      s["socket"] = p_.socket;
      s["port"] = p_.port;
      s["queue"] = p_.queue;
      s["profile"] = swproto::toJson(r->profiles[0].profile);
    } else if (p_.backend == "tc-red") {
      auto link = nl::getLink(p_.interface);
      if (!link) return makeError("ecn_shift: " + link.error().message, link.error().code);
      auto tree = tcred::listQdiscs(link->ifindex);
      if (!tree) return tree.error();
      // Refused here, before anything changes, where the revert could not put it all back.
      if (auto why = tcred::unrestorable(*tree); !why.empty())
        return makeError("ecn_shift tc-red: the qdiscs of '" + p_.interface + "' cannot be restored exactly: " +
                         why + "; remove them first (`tc qdisc del dev " + p_.interface +
                         " root`) or use the command backend");
      s["interface"] = p_.interface;
      s["ifindex"] = link->ifindex;
      s["root_kind"] = tree->front().kind;
      s["qdiscs"] = qdiscsJson(*tree);
    } else {
      auto out = runArgv(expand(p_.tmpl.snapshot, commandValues(p_), ""));
      if (!out) return out.error();
      s["command"] = p_.command;
      s["values"] = commandValues(p_);
      s["output"] = *out;
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
      auto r = labswitchCall(p_.socket, swproto::SetEcnRequest{.port = p_.port, .queue = p_.queue, .enabled = true,
                                                               .kmin = p_.kmin, .kmax = p_.kmax, .pmax = p_.pmax});
      if (!r) applied = r.error();
    } else if (p_.backend == "tc-red") {
      // On the snapshot's index, and only while it still is the interface the snapshot read: a
      // name looked up again could be another interface by now.
      int ifindex = 0;
      {
        std::lock_guard lock(m_);
        ifindex = snap_->at("ifindex").get<int>();
      }
      auto link = nl::getLink(ifindex);
      if (!link) return makeError("ecn_shift tc-red: interface '" + p_.interface + "': " + link.error().message,
                                  link.error().code);
      if (link->name != p_.interface)
        return makeError("ecn_shift tc-red: ifindex " + std::to_string(ifindex) + " is now '" + link->name +
                         "', not '" + p_.interface + "' as at the snapshot; nothing applied");
      tcred::RedParams rp{ifindex, uint32_t(p_.kmin), uint32_t(p_.kmax), p_.pmax, 1000};
      auto msg = tcred::buildAddRed(rp, 1);
      if (!msg) return msg.error();
      applied = tcred::send(*msg, p_.interface);
    } else {
      auto r = runArgv(expand(p_.tmpl.apply, commandValues(p_), ""));
      if (!r) applied = r.error();
      // What the target reads as while this fault holds it: the revert restores only over this.
      if (applied) {
        auto now = runArgv(expand(p_.tmpl.snapshot, commandValues(p_), ""));
        std::lock_guard lock(m_);
        if (now) appliedOutput_ = *now;
      }
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
    json applied;
    {
      std::lock_guard lock(m_);
      s = snap_;
      if (p_.backend == "labswitch") applied = params_;
      else if (appliedOutput_) applied = *appliedOutput_;
    }
    if (!s) return {};
    auto r = restore(*s, policy_, applied);
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

  std::vector<std::string> targets() const override {
    if (p_.backend == "tc-red") return {"root qdisc of interface '" + p_.interface + "'"};
    if (p_.backend == "labswitch")
      return {"ECN profile of lab switch port '" + p_.port + "' queue " + std::to_string(p_.queue)};
    return {"ECN profile of '" + p_.port + "' queue " + std::to_string(p_.queue) + " (command backend)"};
  }

 private:
  json params_;
  ShiftParams p_;
  Policy policy_;
  std::mutex m_;
  std::optional<json> snap_;
  std::optional<std::string> appliedOutput_;  // command backend: the snapshot command's output after the apply
};

}  // namespace

extern const FaultKind kind_ecn_shift;
const FaultKind kind_ecn_shift{
    .name = "ecn_shift",
    .summary = "moves the ECN marking thresholds of a queue (lab switch, tc RED, or user commands) and restores them",
    .params = {
        {.name = "backend", .type = ParamType::string, .help = "labswitch, tc-red or command",
         .defaultValue = "labswitch"},
        {.name = "port", .type = ParamType::string,
         .help = "labswitch: the switch port (e.g. n2 or leaf1:spine1; default: the one facing this host)",
         .optional = true},
        {.name = "queue", .type = ParamType::integer, .help = "queue (priority) whose profile moves",
         .defaultValue = 3, .min = 0, .max = 7},
        {.name = "kmin", .type = ParamType::size, .help = "marking starts above this queue depth", .min = 0,
         .max = 1e12},
        {.name = "kmax", .type = ParamType::size, .help = "every ECT frame is marked above this depth", .min = 0,
         .max = 1e12},
        {.name = "pmax", .type = ParamType::rate, .help = "marking probability at kmax (0..1)", .defaultValue = 0.2,
         .min = 0, .max = 1},
        {.name = "socket", .type = ParamType::string,
         .help = "labswitch: control socket; only the agent's own [lab] switch_socket, the default", .optional = true},
        {.name = "interface", .type = ParamType::string,
         .help = "tc-red: interface (default: the first data interface)", .optional = true},
        {.name = "command", .type = ParamType::string,
         .help = "command: the name of a command template in the agent's configuration ([ecn_commands.NAME])",
         .optional = true},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
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
        p.port = labswitchHostPort(p.port, policy);
        if (auto ok = checkLabswitchPort(p.port); !ok) return makeError("ecn_shift: " + ok.error().message);
        if (p.port.empty())
          return makeError("ecn_shift labswitch: set 'port' (a switch port such as n2); only agents "
                           "under `rdmachaos lab up` know their own port");
        resolved["port"] = p.port;
        auto sock = labswitchSocket(str(params, "socket"), policy);
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
        p.command = str(params, "command");
        if (p.command.empty() && !policy.ecnCommands.empty())
          return makeError("ecn_shift command: set 'command' to the name of a template of the "
                           "agent's configuration");
        auto t = findTemplate(policy, p.command);
        if (!t) return t.error();
        p.tmpl = **t;
        if (!safePort(p.port))
          return makeError("ecn_shift command: 'port' = '" + p.port.substr(0, 64) +
                           "' must be 1-64 characters of A-Z a-z 0-9 . _ : - / that do not start with '-', '.' "
                           "or '/', do not end with '/', and hold no '..' or '//' (a switch port name such as "
                           "Ethernet1/1, never a path)");
        p.interface = policy.defaultInterface;
      } else {
        return makeError("ecn_shift: backend '" + p.backend + "' is not labswitch, tc-red or command");
      }
      return std::unique_ptr<Fault>(
          std::make_unique<EcnShift>(std::move(resolved), std::move(p), policy));
    },
    .revertRecord = [](const json& params, const json& snapshot, const Policy& policy) -> Result<void> {
      try {
        // The lab switch's profile this fault set follows from its parameters; the command
        // backend's after-apply output was never journaled, so that revert restores as before.
        return restore(snapshot, policy, str(snapshot, "backend") == "labswitch" ? params : json());
      } catch (const std::exception& e) {
        return makeError(std::string("ecn_shift journal snapshot is incomplete: ") + e.what());
      }
    },
    // check: what validate can refuse before a run
    .check = [](const json& params) -> Result<void> {
      const std::string backend = stringParam(params, "backend");
      if (backend.empty() || backend == "labswitch") return checkLabswitchPort(stringParam(params, "port"));
      return {};
    },
    .planTarget = [](const json& params) {
      auto q = params.find("queue");
      std::string queue = q != params.end() && q->is_number_integer() ? std::to_string(q->get<int>()) : "3";
      if (stringParam(params, "backend") == "tc-red") return "the root qdisc of " + planInterface(params);
      std::string port = stringParam(params, "port");
      return "the ECN profile of " + (port.empty() ? std::string("its switch port") : "port '" + port + "'") +
             " queue " + queue;
    },
    // A port named in the parameters is the same switch port whichever node's agent shifts it
    // (with the command backend too: a switch port name, not this host's).
    .fabricTargets = [](const json& params) {
      std::vector<std::string> out;
      const std::string port = stringParam(params, "port"), backend = stringParam(params, "backend");
      if (port.empty() || backend == "tc-red") return out;
      auto q = params.find("queue");
      std::string queue = q != params.end() && q->is_number_integer() ? std::to_string(q->get<int>()) : "3";
      out.push_back("the ECN profile of " + std::string(backend == "command" ? "switch" : "lab switch") + " port '" +
                    port + "' queue " + queue);
      return out;
    },
};

}  // namespace rc::faults
