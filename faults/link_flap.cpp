// The link_flap fault: takes an interface administratively down and up again, N times.
#include <net/if.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>

#include "common/clock.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "faults/netlink.hpp"

namespace rc::faults {
namespace {

using Clock = std::chrono::steady_clock;

// The kernel notifies synchronously with the change; two seconds only covers a machine
// that is badly overloaded, and bounds how long a stop request can go unnoticed.
constexpr auto kNotifyTimeout = std::chrono::seconds(2);

struct FlapParams {
  std::string interface;
  int64_t downNs = 0;
  int64_t upNs = 0;
  int64_t jitterNs = 0;
  int64_t count = 0;
  uint64_t seed = 0;
};

// Sleeps until the instant or until stop is requested; true if stopped.
bool sleepUntil(std::stop_token& stop, Clock::time_point until) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_until(lock, stop, until, [] { return false; });
  return stop.stop_requested();
}

// The steady-clock instant of a CLOCK_REALTIME time recorded a moment ago.
Clock::time_point steadyOf(int64_t wallAt) {
  return Clock::now() - std::chrono::nanoseconds(std::max<int64_t>(0, wallNs() - wallAt));
}

// A flap train, for an interface and for a lab switch port alike. set(up) changes the link and
// returns the CLOCK_REALTIME instant the change took effect (as its event records it). Each step
// is planned from the previous step's planned instant, so scheduling delays do not add up over a
// long train, but never from before the change took effect: a down that took effect late (the
// thread woke late, the kernel's notification came late) still stays down as long as asked, so
// the recorded down and up are never closer than the parameter (an ASan run on a loaded machine
// recorded a 2 s down 30 ms short when the hold was planned from before the change).
template <class Set>
Result<void> runTrain(std::stop_token& stop, const FlapParams& p, Set set) {
  std::mt19937_64 rng(p.seed);
  std::uniform_int_distribution<int64_t> extra(0, p.jitterNs);
  auto planned = Clock::now();
  for (int64_t i = 0; i < p.count; ++i) {
    if (stop.stop_requested()) return {};
    auto down = set(false);
    if (!down) return down.error();
    planned = std::max(planned, steadyOf(*down)) + std::chrono::nanoseconds(p.downNs + extra(rng));
    if (sleepUntil(stop, planned)) return {};
    auto up = set(true);
    if (!up) return up.error();
    if (i + 1 < p.count) {
      planned = std::max(planned, steadyOf(*up)) + std::chrono::nanoseconds(p.upNs + extra(rng));
      if (sleepUntil(stop, planned)) return {};
    }
  }
  return {};
}

// What revert needs, also as stored in the journal.
struct AdminSnapshot {
  std::string name;
  int ifindex = 0;
  bool adminUp = false;

  json toJson() const {
    return json{{"interface", name}, {"ifindex", ifindex}, {"admin_up", adminUp}};
  }
};

const ParamSpec* findSpec(const std::vector<ParamSpec>& specs, std::string_view name) {
  for (const auto& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

// create() is documented to take normalised parameters, but it is also the last gate before
// the kernel, so it re-checks types and bounds rather than trusting its caller.
Result<int64_t> readInt(const json& p, const std::vector<ParamSpec>& specs, std::string_view name) {
  const ParamSpec* spec = findSpec(specs, name);
  std::string w = "link_flap parameter '" + std::string(name) + "'";
  auto it = p.find(std::string(name));
  json v = it != p.end() ? *it : (spec ? spec->defaultValue : json());
  if (!v.is_number_integer())
    return makeError(w + " must be normalised to an integer (nanoseconds for durations)");
  int64_t n = v.get<int64_t>();
  if (spec && (double(n) < spec->min || double(n) > spec->max))
    return makeError(w + " is out of range");
  return n;
}

Result<FlapParams> readParams(const json& p, const std::vector<ParamSpec>& specs,
                              const Policy& policy) {
  if (!p.is_object()) return makeError("link_flap parameters must be a table");
  FlapParams out;
  if (auto it = p.find("interface"); it != p.end() && !it->is_null()) {
    if (!it->is_string()) return makeError("link_flap parameter 'interface' must be a string");
    out.interface = it->get<std::string>();
  } else {
    out.interface = policy.defaultInterface;
  }
  auto down = readInt(p, specs, "down");
  if (!down) return down.error();
  auto up = readInt(p, specs, "up");
  if (!up) return up.error();
  auto jitter = readInt(p, specs, "jitter");
  if (!jitter) return jitter.error();
  auto count = readInt(p, specs, "count");
  if (!count) return count.error();
  auto seed = readInt(p, specs, "seed");
  if (!seed) return seed.error();
  out.downNs = *down;
  out.upNs = *up;
  out.jitterNs = *jitter;
  out.count = *count;
  out.seed = uint64_t(*seed);
  return out;
}

Result<AdminSnapshot> parseSnapshot(const json& s) {
  const std::string fix =
      "; check the interface by hand with 'ip link' and bring it up with 'ip link set <name> up'";
  if (!s.is_object()) return makeError("link_flap journal snapshot is not an object" + fix);
  auto name = s.find("interface");
  auto index = s.find("ifindex");
  auto admin = s.find("admin_up");
  if (name == s.end() || !name->is_string() || index == s.end() || !index->is_number_integer() ||
      admin == s.end() || !admin->is_boolean())
    return makeError("link_flap journal snapshot lacks 'interface', 'ifindex' or 'admin_up'" + fix);
  AdminSnapshot out{name->get<std::string>(), index->get<int>(), admin->get<bool>()};
  if (out.ifindex <= 0) return makeError("link_flap journal snapshot has an invalid ifindex" + fix);
  return out;
}

// "500ms", "1s", "1.5s": short forms for describe(), exact for whole units.
std::string shortDuration(int64_t ns) {
  struct Unit {
    int64_t ns;
    const char* suffix;
  };
  static constexpr Unit units[] = {{3'600'000'000'000, "h"},
                                   {60'000'000'000, "m"},
                                   {1'000'000'000, "s"},
                                   {1'000'000, "ms"},
                                   {1'000, "us"}};
  if (ns == 0) return "0s";
  for (const auto& u : units)
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.suffix;
  if (ns >= 1'000'000'000) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3gs", double(ns) / 1e9);
    return buf;
  }
  return std::to_string(ns) + "ns";
}

// Checks that ifindex still is the interface the snapshot named: an index can be reused
// after the original interface went away, and a different interface must not be touched.
Result<nl::LinkInfo> sameInterface(const AdminSnapshot& s) {
  auto link = nl::getLink(s.ifindex);
  if (!link) {
    if (link.error().code == ENODEV)
      return makeError("interface '" + s.name + "' (ifindex " + std::to_string(s.ifindex) +
                           ") is gone; there is nothing to restore. If it was recreated, check "
                           "its admin state with 'ip link show " +
                           s.name + "'",
                       ENODEV);
    return makeError("cannot read interface '" + s.name + "': " + link.error().message,
                     link.error().code);
  }
  if (link->name != s.name)
    return makeError("ifindex " + std::to_string(s.ifindex) + " is now '" + link->name +
                         "', not '" + s.name +
                         "': the interface was renamed or replaced, so it is left alone; "
                         "check '" +
                         s.name + "' by hand",
                     ESTALE);
  return link;
}

// Brings the link back to the snapshot's admin state. Does nothing (and logs nothing) when
// it already is there, which is what makes revert idempotent.
Result<void> restore(const AdminSnapshot& s, EventLog* events) {
  auto link = sameInterface(s);
  if (!link) return link.error();
  if (link->adminUp == s.adminUp) return {};
  // Restoring matters more than observing it: without a monitor, still restore.
  auto monitor = nl::LinkMonitor::open();
  auto set = nl::setAdminState(s.ifindex, s.adminUp);
  if (!set) return makeError("reverting link_flap: " + set.error().message, set.error().code);
  Event e{wallNs(), "reverted", s.name, false};
  if (monitor) {
    auto seen = monitor->waitFor(
        s.ifindex, [&](const nl::LinkEvent& ev) { return ev.adminUp == s.adminUp; },
        Clock::now() + kNotifyTimeout);
    if (seen) {
      e.timeNs = seen->timeNs;
      e.kernelTime = seen->kernelTime;
    }
  }
  auto after = nl::getLink(s.ifindex);
  if (!after) return makeError("reverting link_flap: " + after.error().message, after.error().code);
  if (after->adminUp != s.adminUp)
    return makeError("reverting link_flap: interface '" + s.name + "' is still admin-" +
                     (after->adminUp ? "up" : "down") +
                     " after the change; set it by hand with "
                     "'ip link set " +
                     s.name + (s.adminUp ? " up'" : " down'"));
  if (events) events->add(std::move(e));
  return {};
}

class LinkFlap final : public Fault {
 public:
  LinkFlap(json params, FlapParams p) : params_(std::move(params)), p_(std::move(p)) {}

  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto link = nl::getLink(p_.interface);
    if (!link) return makeError("link_flap snapshot: " + link.error().message, link.error().code);
    AdminSnapshot s{link->name, link->ifindex, link->adminUp};
    std::lock_guard lock(m_);
    snap_ = s;
    return s.toJson();
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    std::optional<AdminSnapshot> snap;
    {
      std::lock_guard lock(m_);
      snap = snap_;
    }
    if (!snap) {
      // The manager snapshots first; without one, take it here so revert still has it.
      auto s = snapshot();
      if (!s) return s.error();
      std::lock_guard lock(m_);
      snap = snap_;
    }
    // Opened before the first change, so its notification cannot be missed.
    auto monitor = nl::LinkMonitor::open();
    if (!monitor)
      return makeError("link_flap on '" + snap->name + "': " + monitor.error().message,
                       monitor.error().code);

    return runTrain(stop, p_, [&](bool up) { return flip(*monitor, *snap, up, events); });
  }

  Result<void> revert(EventLog& events) override {
    std::optional<AdminSnapshot> snap;
    {
      std::lock_guard lock(m_);
      snap = snap_;
    }
    // No snapshot means run never got as far as touching the link.
    if (!snap) return {};
    return restore(*snap, &events);
  }

  std::string describe() const override {
    // A single flap has no "up between flaps": don't print one.
    std::string d = "link_flap " + p_.interface + ": " +
                    (p_.count == 1 ? "down " + shortDuration(p_.downNs)
                                   : std::to_string(p_.count) + " x (down " +
                                         shortDuration(p_.downNs) + ", up " +
                                         shortDuration(p_.upNs) + ")");
    if (p_.jitterNs > 0)
      d += " + jitter " + shortDuration(p_.jitterNs) + " (seed " + std::to_string(p_.seed) + ")";
    return d;
  }

  std::vector<std::string> targets() const override { return {"interface '" + p_.interface + "'"}; }

 private:
  // Sets the admin state and waits for the kernel to announce it, recording when it did;
  // returns that instant.
  Result<int64_t> flip(nl::LinkMonitor& monitor, const AdminSnapshot& s, bool up, EventLog& events) {
    const char* what = up ? "up" : "down";
    auto link = sameInterface(s);
    if (!link) return makeError("link_flap: " + link.error().message, link.error().code);
    if (link->adminUp == up) {
      // The kernel sends no notification for a change that changes nothing (e.g. the link
      // was admin-down before the fault); record the step at the time it was due.
      const int64_t now = wallNs();
      events.add(Event{now, what, s.name + " (already admin-" + what + ")", false});
      return now;
    }
    auto set = nl::setAdminState(s.ifindex, up);
    if (!set) return makeError("link_flap: " + set.error().message, set.error().code);
    auto seen = monitor.waitFor(
        s.ifindex, [up](const nl::LinkEvent& ev) { return ev.adminUp == up; },
        Clock::now() + kNotifyTimeout);
    if (!seen)
      return makeError("link_flap: set '" + s.name + "' " + what +
                           " but the kernel did not confirm it within 2 s (" +
                           seen.error().message + ")",
                       seen.error().code);
    events.add(Event{seen->timeNs, what, s.name, seen->kernelTime});
    return seen->timeNs;
  }

  json params_;
  FlapParams p_;
  std::mutex m_;
  std::optional<AdminSnapshot> snap_;
};


// The same flap train on a lab switch port or inter-switch link, through the switch's control
// socket: a port name ("n2", "leaf1:spine1") or a link name ("leaf1-spine1", both ends).
swproto::GetLinkRequest switchSelector(const std::string& target) {
  if (target.find('-') != std::string::npos && target.find(':') == std::string::npos) return {.link = target};
  return {.port = target};
}

// Restores the ports' admin state as the snapshot found it (always up: a flap refuses a port that
// is down). With CHECK (a live fault; not after a crash, where what it set last is unknown), a
// port that reads neither as found nor as LAST_SET (what this fault set last; none: it set
// nothing) was changed by another owner since (another node flapping the same port, an
// operator) and is left as it is, a conflict.
Result<void> restoreSwitch(const json& snap, EventLog* events, bool check = false,
                           std::optional<bool> lastSet = std::nullopt) {
  std::string sock = snap.value("socket", "");
  const std::string target = snap.value("switch_port", "");
  if (check) {
    auto now = labswitchCall(sock, switchSelector(target));
    if (!now) return makeError("reverting link_flap: " + now.error().message, now.error().code);
    for (const auto& p : snap.at("ports")) {
      const std::string port = p.at("port").get<std::string>();
      const bool found = p.at("admin_up").get<bool>();
      for (const auto& cur : now->ports)
        if (cur.port == port && cur.adminUp != found && (!lastSet || cur.adminUp != *lastSet))
          return makeError("link_flap revert conflict on lab switch port '" + port + "': it is admin " +
                               (cur.adminUp ? "up" : "down") + ", which this fault neither set last nor found; " +
                               "another fault or an operator changed it since: left as it is",
                           kRevertConflict);
    }
  }
  for (const auto& p : snap.at("ports")) {
    auto r = labswitchCall(
        sock, swproto::SetLinkRequest{.port = p.at("port").get<std::string>(), .up = p.at("admin_up").get<bool>()});
    if (!r) return makeError("reverting link_flap: " + r.error().message, r.error().code);
  }
  if (events) events->add(Event{wallNs(), "reverted", target, false});
  return {};
}

class SwitchPortFlap final : public Fault {
 public:
  SwitchPortFlap(json params, FlapParams p, std::string target, std::string socket,
                 std::vector<std::string> ports)
      : params_(std::move(params)),
        p_(std::move(p)),
        target_(std::move(target)),
        socket_(std::move(socket)),
        ports_(std::move(ports)) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto r = labswitchCall(socket_, switchSelector(target_));
    if (!r) return makeError("link_flap snapshot: " + r.error().message, r.error().code);
    // A port already down is held by someone (another node's flap of the same port, an
    // operator): flapping it would bring it up, and this fault's revert would then restore
    // "down" over the other owner's restore. Refused, touching nothing.
    for (const auto& port : r->ports)
      if (!port.adminUp)
        return makeError("link_flap: lab switch port '" + port.port + "' is administratively down already " +
                             "(another fault holds it, or an operator): a flap would bring it up; refused, nothing "
                             "changed. Flap it once it is up again",
                         EBUSY);
    json s = {{"switch_port", target_}, {"socket", socket_}, {"ports", swproto::toJson(*r)["ports"]}};
    std::lock_guard lock(m_);
    snap_ = s;
    return s;
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    {
      std::lock_guard lock(m_);
      if (!snap_) return makeError("link_flap: run without a snapshot");
    }
    return runTrain(stop, p_, [&](bool up) { return set(up, events); });
  }

  Result<void> revert(EventLog& events) override {
    std::optional<json> s;
    {
      std::lock_guard lock(m_);
      s = snap_;
    }
    std::optional<bool> last;
    {
      std::lock_guard lock(m_);
      last = lastSet_;
    }
    if (!s) return {};
    return restoreSwitch(*s, &events, true, last);
  }

  std::string describe() const override {
    return "link_flap switch " + target_ + ": " + std::to_string(p_.count) + " x (down " +
           shortDuration(p_.downNs) + ", up " + shortDuration(p_.upNs) + ")";
  }

  // Every port the selector names, so a link and one of its ends are the same target.
  std::vector<std::string> targets() const override {
    std::vector<std::string> out;
    for (const auto& port : ports_) out.push_back("lab switch port '" + port + "'");
    return out;
  }

 private:
  // Returns the instant the change took effect.
  Result<int64_t> set(bool up, EventLog& events) {
    swproto::GetLinkRequest where = switchSelector(target_);
    {
      std::lock_guard lock(m_);
      lastSet_ = up;  // before the call: a set whose answer was lost may still have landed
    }
    auto r = labswitchCall(socket_, swproto::SetLinkRequest{.port = where.port, .link = where.link, .up = up});
    if (!r) return makeError("link_flap: " + r.error().message, r.error().code);
    // The switch applies the change before it answers, so this is when it took effect.
    const int64_t now = wallNs();
    events.add(Event{now, up ? "up" : "down", target_, false});
    return now;
  }

  json params_;
  FlapParams p_;
  std::string target_, socket_;
  std::vector<std::string> ports_;
  std::mutex m_;
  std::optional<json> snap_;
  std::optional<bool> lastSet_;  // the admin state this fault set last
};

}  // namespace

extern const FaultKind kind_link_flap;
const FaultKind kind_link_flap{
    .name = "link_flap",
    .summary = "takes an interface administratively down and up again, count times",
    .params = {
        {.name = "interface", .type = ParamType::string,
         .help = "interface to flap (default: the agent's first data interface)", .optional = true},
        {.name = "down", .type = ParamType::duration, .help = "time the link stays down in each flap",
         .defaultValue = int64_t(1e9), .min = 1 * kParamMs, .max = kParamHour},
        {.name = "count", .type = ParamType::integer, .help = "number of flaps in the train", .defaultValue = 1,
         .min = 1, .max = 1000},
        {.name = "up", .type = ParamType::duration, .help = "time the link stays up between flaps of a train",
         .defaultValue = int64_t(1e9), .min = 1 * kParamMs, .max = kParamHour},
        {.name = "jitter", .type = ParamType::duration,
         .help = "uniform random extra in [0, jitter] added to every down and up time", .defaultValue = int64_t(0),
         .min = 0, .max = kParamHour},
        {.name = "seed", .type = ParamType::integer, .help = "seed of the jitter's random generator (mt19937_64)",
         .defaultValue = 1, .min = 0, .max = 9007199254740991.0},
        {.name = "switch_port", .type = ParamType::string,
         .help = "instead of an interface: a lab switch port (n2, leaf1:spine1) or link (leaf1-spine1)",
         .optional = true},
        {.name = "socket", .type = ParamType::string,
         .help = "lab switch control socket: only the one of the agent's configuration ([lab] switch_socket), "
                 "which is the default",
         .optional = true},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      auto p = readParams(params, kind_link_flap.params, policy);
      if (!p) return p.error();
      if (auto it = params.find("switch_port"); it != params.end() && it->is_string()) {
        auto sock = labswitchSocket(params.value("socket", ""), policy);
        if (!sock) return makeError("link_flap: " + sock.error().message);
        // Reads (touches nothing) which ports the selector names: they are the targets.
        auto got = labswitchCall(*sock, switchSelector(it->get<std::string>()));
        if (!got) return makeError("link_flap: " + got.error().message, got.error().code);
        std::vector<std::string> ports;
        for (const auto& port : got->ports) ports.push_back(port.port);
        if (ports.empty())
          return makeError("link_flap: the lab switch names no port for '" +
                           it->get<std::string>() + "'");
        json resolved = params;
        resolved["socket"] = *sock;
        resolved.erase("interface");
        return std::unique_ptr<Fault>(std::make_unique<SwitchPortFlap>(
            std::move(resolved), std::move(*p), it->get<std::string>(), *sock, std::move(ports)));
      }
      if (auto ok = checkInterface(policy, p->interface); !ok)
        return makeError("link_flap: " + ok.error().message, EPERM);
      auto link = nl::getLink(p->interface);
      if (!link) return makeError("link_flap: " + link.error().message, link.error().code);
      json resolved = params;
      resolved["interface"] = p->interface;  // the journal must name what was touched
      return std::unique_ptr<Fault>(std::make_unique<LinkFlap>(std::move(resolved), std::move(*p)));
    },
    .revertRecord = [](const json& /*params*/, const json& snapshot, const Policy& /*policy*/) -> Result<void> {
      if (snapshot.is_object() && snapshot.contains("switch_port")) {
        try {
          return restoreSwitch(snapshot, nullptr);
        } catch (const std::exception& e) {
          return makeError(std::string("link_flap journal snapshot is incomplete: ") + e.what());
        }
      }
      auto s = parseSnapshot(snapshot);
      if (!s) return s.error();
      return restore(*s, nullptr);
    },
    .planTarget = [](const json& params) {
      std::string port = stringParam(params, "switch_port");
      return port.empty() ? planInterface(params) : "lab switch port '" + port + "'";
    },
    // A switch port or link is the same whichever node's agent flaps it; a link (leaf1-spine1)
    // is both its end ports, so that it meets a flap of either end.
    .fabricTargets = [](const json& params) {
      std::vector<std::string> out;
      const std::string port = stringParam(params, "switch_port");
      if (port.empty()) return out;
      if (auto dash = port.find('-'); dash != std::string::npos && port.find(':') == std::string::npos) {
        const std::string a = port.substr(0, dash), b = port.substr(dash + 1);
        out.push_back("the admin state of lab switch port '" + a + ":" + b + "'");
        out.push_back("the admin state of lab switch port '" + b + ":" + a + "'");
      } else {
        out.push_back("the admin state of lab switch port '" + port + "'");
      }
      return out;
    },
};

}  // namespace rc::faults
