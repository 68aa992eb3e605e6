// The link_degrade fault: lowers one link's rate (a lab switch port's line rate) for the fault's
// duration and restores exactly the rate it found: a link trained down, a lost lane.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>

#include "common/clock.hpp"
#include "common/units.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"

namespace rc::faults {
namespace {

// The lab switch's own bounds of a port's rate (labswitch/switch_control.cpp, set_port).
constexpr double kMinRateBps = 1e6;
constexpr double kMaxRateBps = 400e9;

// Two rates read back through JSON are the same number; the tolerance only keeps a rate the
// switch stored as a double from reading as someone else's change.
bool sameRate(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 1e-3; }

std::string showRate(double bps) { return formatBitRate(bps); }

struct DegradeParams {
  std::optional<double> fraction;  // of the rate found at the snapshot
  std::optional<double> rateBps;   // absolute
  std::optional<int64_t> durationNs;
  std::string port, socket;
};

// A port name the switch reads as one port: "*" is every port, which one fault must not hold.
Result<void> checkPort(const std::string& port) {
  if (port == "*")
    return makeError("switch_port \"*\" (every switch port) is not allowed: link_degrade slows one link; name one "
                     "port (e.g. n2), or leave it out so that each agent degrades the port facing its own host");
  if (port.find('-') != std::string::npos && port.find(':') == std::string::npos)
    return makeError("switch_port '" + port + "' names an inter-switch link; link_degrade takes one port (e.g. " +
                     "leaf1:spine1 for that end of the link)");
  return {};
}

// Checks across parameters, for validate, the controller and create() alike.
Result<void> checkParams(const json& p) {
  if (!p.is_object()) return makeError("link_degrade parameters must be a table");
  const bool hasFraction = p.contains("fraction") && p["fraction"].is_number();
  const bool hasRate = p.contains("rate") && p["rate"].is_number();
  if (hasFraction == hasRate)
    return makeError("link_degrade needs exactly one of 'fraction' (of the port's rate, e.g. 0.5) and 'rate' "
                     "(absolute, e.g. \"500M\")");
  if (hasFraction) {
    const double f = p["fraction"].get<double>();
    if (!(f > 0 && f < 1))
      return makeError("link_degrade 'fraction' = " + p["fraction"].dump() +
                       " must be above 0 and below 1: the rate is lowered to that share of what it was");
  }
  if (auto port = stringParam(p, "switch_port"); !port.empty())
    if (auto ok = checkPort(port); !ok) return makeError("link_degrade: " + ok.error().message);
  return {};
}

// The rate this fault sets on a port found at FOUND_BPS, or an error naming why it cannot.
Result<double> degradedRate(const DegradeParams& p, double foundBps, const std::string& port) {
  double to = p.rateBps ? *p.rateBps : foundBps * p.fraction.value_or(1);
  if (to < kMinRateBps)
    return makeError("link_degrade: lab switch port '" + port + "' at " + showRate(foundBps) + " would go to " +
                     showRate(to) + ", below the switch's lowest rate (1 Mb/s); use a larger fraction or rate");
  if (to >= foundBps)
    return makeError("link_degrade: lab switch port '" + port + "' runs at " + showRate(foundBps) +
                         " already, not above the " + showRate(to) +
                         " asked: nothing to degrade (another fault may hold it lowered); refused, nothing changed",
                     EBUSY);
  return to;
}

// The port's rate now, through get_port.
Result<double> currentRate(const std::string& socket, const std::string& port) {
  auto r = labswitchCall(socket, swproto::GetPortRequest{.port = port});
  if (!r) return r.error();
  if (r->ports.size() != 1)
    return makeError("the lab switch names " + std::to_string(r->ports.size()) + " ports for '" + port + "', not one");
  return r->ports[0].rateBps;
}

// Restores the snapshot's rate where the port still runs at APPLIED (the rate this fault set;
// nullopt: it set nothing). A port already at the snapshot's rate is restored (idempotent); one
// at a third rate was changed by someone else since (another fault, an operator): left as it is,
// a conflict.
Result<void> restore(const json& snap, std::optional<double> applied, EventLog* events) {
  const std::string socket = snap.at("socket").get<std::string>();
  const std::string port = snap.at("switch_port").get<std::string>();
  const double found = snap.at("rate_bps").get<double>();
  auto now = currentRate(socket, port);
  if (!now) return makeError("reverting link_degrade: " + now.error().message, now.error().code);
  if (sameRate(*now, found)) return {};
  if (!applied || !sameRate(*now, *applied))
    return makeError("link_degrade revert conflict on lab switch port '" + port + "': it runs at " + showRate(*now) +
                         ", neither the " + (applied ? showRate(*applied) : std::string("(nothing)")) +
                         " this fault set nor the " + showRate(found) +
                         " it found; another fault or an operator changed it since: left as it is",
                     kRevertConflict);
  auto r = labswitchCall(socket, swproto::SetPortRequest{.port = port, .rateBps = found});
  if (!r) return makeError("reverting link_degrade: " + r.error().message, r.error().code);
  if (events) events->add(Event{wallNs(), "reverted", port + " back to " + showRate(found), false});
  return {};
}

class SwitchPortDegrade final : public Fault {
 public:
  SwitchPortDegrade(json params, DegradeParams p) : params_(std::move(params)), p_(std::move(p)) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto found = currentRate(p_.socket, p_.port);
    if (!found) return makeError("link_degrade snapshot: " + found.error().message, found.error().code);
    auto to = degradedRate(p_, *found, p_.port);
    if (!to) return to.error();
    // The rate it will set is journaled with the one it found: after a crash, the revert
    // restores only over its own change.
    json s = {{"backend", "labswitch"}, {"socket", p_.socket}, {"switch_port", p_.port}, {"rate_bps", *found},
              {"applied_bps", *to}};
    std::lock_guard lock(m_);
    snap_ = s;
    return s;
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    double to = 0;
    {
      std::lock_guard lock(m_);
      if (!snap_) return makeError("link_degrade: run without a snapshot");
      to = snap_->at("applied_bps").get<double>();
      applied_ = to;  // before the call: a set whose answer was lost may still have landed
    }
    auto r = labswitchCall(p_.socket, swproto::SetPortRequest{.port = p_.port, .rateBps = to});
    if (!r) return makeError("link_degrade: " + r.error().message, r.error().code);
    events.add(Event{wallNs(), "applied", describe(), false});
    // Holds for its duration, or until the manager stops it (the fault's --for or lifetime).
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    if (p_.durationNs)
      cv.wait_for(lock, stop, std::chrono::nanoseconds(*p_.durationNs), [] { return false; });
    else
      cv.wait(lock, stop, [] { return false; });
    return {};
  }

  Result<void> revert(EventLog& events) override {
    std::optional<json> s;
    std::optional<double> applied;
    {
      std::lock_guard lock(m_);
      s = snap_;
      applied = applied_;
    }
    if (!s) return {};
    return restore(*s, applied, &events);
  }

  std::string describe() const override {
    char frac[32] = "";
    if (p_.fraction) std::snprintf(frac, sizeof frac, "x %g", *p_.fraction);
    return "link_degrade switch " + p_.port + ": rate " + (p_.rateBps ? showRate(*p_.rateBps) : std::string(frac)) +
           (p_.durationNs ? " for " + formatDuration(Nanos(*p_.durationNs)) : "");
  }

  std::vector<std::string> targets() const override { return {"the rate of lab switch port '" + p_.port + "'"}; }

 private:
  json params_;
  DegradeParams p_;
  std::mutex m_;
  std::optional<json> snap_;
  std::optional<double> applied_;  // the rate this fault set
};

}  // namespace

extern const FaultKind kind_link_degrade;
const FaultKind kind_link_degrade{
    .name = "link_degrade",
    .summary = "lowers one link's rate (a lab switch port) for its duration and restores exactly the rate it found",
    .params = {
        {.name = "fraction", .type = ParamType::rate,
         .help = "the share of the port's rate it keeps, above 0 and below 1 (0.5: half); or set rate", .min = 0,
         .max = 1, .optional = true},
        {.name = "rate", .type = ParamType::bitRate, .help = "the rate it drops to (e.g. \"500M\" or \"500Mbps\"); or set fraction",
         .min = kMinRateBps, .max = kMaxRateBps, .optional = true},
        {.name = "switch_port", .type = ParamType::string,
         .help = "the lab switch port (n2, leaf1:spine1; default: the one facing this host)", .optional = true},
        {.name = "duration", .type = ParamType::duration,
         .help = "how long the rate stays lowered (default: until the fault's --for or lifetime ends)",
         .min = 1 * kParamMs, .max = kParamHour, .optional = true},
        {.name = "socket", .type = ParamType::string,
         .help = "lab switch control socket: only the one of the agent's configuration ([lab] switch_socket), "
                 "which is the default",
         .optional = true},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      if (auto ok = checkParams(params); !ok) return ok.error();
      DegradeParams p;
      if (params.contains("fraction")) p.fraction = params["fraction"].get<double>();
      if (params.contains("rate")) {
        p.rateBps = params["rate"].get<double>();
        if (!(*p.rateBps >= kMinRateBps && *p.rateBps <= kMaxRateBps))
          return makeError("link_degrade 'rate' must be within 1 Mb/s and 400 Gb/s");
      }
      if (auto d = params.find("duration"); d != params.end() && !d->is_null()) {
        if (!d->is_number_integer() || d->get<int64_t>() <= 0)
          return makeError("link_degrade 'duration' must be normalised to a positive integer (ns)");
        p.durationNs = d->get<int64_t>();
      }
      p.port = labswitchHostPort(stringParam(params, "switch_port"), policy);
      if (p.port.empty())
        return makeError("link_degrade: set 'switch_port' (a lab switch port such as n2); only agents under "
                         "`rdmachaos lab up` know their own port");
      if (auto ok = checkPort(p.port); !ok) return makeError("link_degrade: " + ok.error().message);
      auto sock = labswitchSocket(stringParam(params, "socket"), policy);
      if (!sock) return makeError("link_degrade: " + sock.error().message);
      p.socket = *sock;
      // Reads (touches nothing) that the port is one port of this switch.
      if (auto r = currentRate(p.socket, p.port); !r) return makeError("link_degrade: " + r.error().message, r.error().code);
      json resolved = params;
      resolved["switch_port"] = p.port;  // the journal names what was touched
      resolved["socket"] = p.socket;
      return std::unique_ptr<Fault>(std::make_unique<SwitchPortDegrade>(std::move(resolved), std::move(p)));
    },
    .revertRecord = [](const json& /*params*/, const json& snapshot, const Policy& /*policy*/) -> Result<void> {
      try {
        // What it set is journaled with what it found, so after a crash too it restores only
        // over its own change.
        return restore(snapshot, snapshot.at("applied_bps").get<double>(), nullptr);
      } catch (const std::exception& e) {
        return makeError(std::string("link_degrade journal snapshot is incomplete: ") + e.what() +
                         "; check the port's rate with the switch's get_port and set it back with set_port");
      }
    },
    .check = checkParams,
    .planTarget = [](const json& params) {
      std::string port = stringParam(params, "switch_port");
      return port.empty() ? std::string("the rate of its switch port") : "the rate of lab switch port '" + port + "'";
    },
    // A port named in the parameters is the same switch port whichever node's agent degrades it.
    .fabricTargets = [](const json& params) {
      std::vector<std::string> out;
      const std::string port = stringParam(params, "switch_port");
      if (!port.empty()) out.push_back("the rate of lab switch port '" + port + "'");
      return out;
    },
};

}  // namespace rc::faults
