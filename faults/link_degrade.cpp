// The link_degrade fault: lowers one link's rate for the fault's duration and restores exactly
// what it found: a link trained down, a lost lane. Backends: a lab switch port's line rate
// (set_port), or a real NIC's advertised link modes through ethtool netlink (the speed the link
// retrains at).
#include <linux/ethtool.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/clock.hpp"
#include "common/units.hpp"
#include "faults/ethtool.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "faults/netlink.hpp"

namespace rc::faults {
namespace {

// The lab switch's own bounds of a port's rate (labswitch/switch_control.cpp, set_port).
constexpr double kMinRateBps = 1e6;
constexpr double kMaxRateBps = 400e9;

// Two rates read back through JSON are the same number; the tolerance only keeps a rate the
// switch stored as a double from reading as someone else's change.
bool sameRate(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 1e-3;
}

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
    return makeError(
        "switch_port \"*\" (every switch port) is not allowed: link_degrade slows one link; name "
        "one "
        "port (e.g. n2), or leave it out so that each agent degrades the port facing its own host");
  if (port.find('-') != std::string::npos && port.find(':') == std::string::npos)
    return makeError("switch_port '" + port +
                     "' names an inter-switch link; link_degrade takes one port (e.g. " +
                     "leaf1:spine1 for that end of the link)");
  return {};
}

// Checks across parameters, for validate, the controller and create() alike.
Result<void> checkParams(const json& p) {
  if (!p.is_object()) return makeError("link_degrade parameters must be a table");
  const bool hasFraction = p.contains("fraction") && p["fraction"].is_number();
  const bool hasRate = p.contains("rate") && p["rate"].is_number();
  if (hasFraction == hasRate)
    return makeError(
        "link_degrade needs exactly one of 'fraction' (of the port's rate, e.g. 0.5) and 'rate' "
        "(absolute, e.g. \"500M\")");
  if (hasFraction) {
    const double f = p["fraction"].get<double>();
    if (!(f > 0 && f < 1))
      return makeError(
          "link_degrade 'fraction' = " + p["fraction"].dump() +
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
    return makeError("link_degrade: lab switch port '" + port + "' at " + showRate(foundBps) +
                     " would go to " + showRate(to) +
                     ", below the switch's lowest rate (1 Mb/s); use a larger fraction or rate");
  if (to >= foundBps)
    return makeError("link_degrade: lab switch port '" + port + "' runs at " + showRate(foundBps) +
                         " already, not above the " + showRate(to) +
                         " asked: nothing to degrade (another fault may hold it lowered); refused, "
                         "nothing changed",
                     EBUSY);
  return to;
}

// The port's rate now, through get_port.
Result<double> currentRate(const std::string& socket, const std::string& port) {
  auto r = labswitchCall(socket, swproto::GetPortRequest{.port = port});
  if (!r) return r.error();
  if (r->ports.size() != 1)
    return makeError("the lab switch names " + std::to_string(r->ports.size()) + " ports for '" +
                     port + "', not one");
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
    return makeError("link_degrade revert conflict on lab switch port '" + port + "': it runs at " +
                         showRate(*now) + ", neither the " +
                         (applied ? showRate(*applied) : std::string("(nothing)")) +
                         " this fault set nor the " + showRate(found) +
                         " it found; another fault or an operator changed it since: left as it is",
                     kRevertConflict);
  auto r = labswitchCall(socket, swproto::SetPortRequest{.port = port, .rateBps = found});
  if (!r) return makeError("reverting link_degrade: " + r.error().message, r.error().code);
  if (events) events->add(Event{wallNs(), "reverted", port + " back to " + showRate(found), false});
  return {};
}

// Holds a degrade for DURATION (none: until stopped), or until the manager stops it (the
// fault's --for or lifetime).
void holdUntil(std::stop_token stop, std::optional<int64_t> durationNs) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  if (durationNs)
    cv.wait_for(lock, stop, std::chrono::nanoseconds(*durationNs), [] { return false; });
  else
    cv.wait(lock, stop, [] { return false; });
}

class SwitchPortDegrade final : public Fault {
 public:
  SwitchPortDegrade(json params, DegradeParams p) : params_(std::move(params)), p_(std::move(p)) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto found = currentRate(p_.socket, p_.port);
    if (!found)
      return makeError("link_degrade snapshot: " + found.error().message, found.error().code);
    auto to = degradedRate(p_, *found, p_.port);
    if (!to) return to.error();
    // The rate it will set is journaled with the one it found: after a crash, the revert
    // restores only over its own change.
    json s = {{"backend", "labswitch"},
              {"socket", p_.socket},
              {"switch_port", p_.port},
              {"rate_bps", *found},
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
    holdUntil(stop, p_.durationNs);
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
    return "link_degrade switch " + p_.port + ": rate " +
           (p_.rateBps ? showRate(*p_.rateBps) : std::string(frac)) +
           (p_.durationNs ? " for " + formatDuration(Nanos(*p_.durationNs)) : "");
  }

  std::vector<std::string> targets() const override {
    return {"the rate of lab switch port '" + p_.port + "'"};
  }

 private:
  json params_;
  DegradeParams p_;
  std::mutex m_;
  std::optional<json> snap_;
  std::optional<double> applied_;  // the rate this fault set
};

// ---------------------------------------------------------------- a NIC's link modes

using ethtool::anyBit;
using ethtool::bit;
using ethtool::Bits;
using ethtool::hexBits;
using ethtool::LinkModes;

bool sameModes(const LinkModes& a, const LinkModes& b) {
  if (a.autoneg != b.autoneg) return false;
  if (a.autoneg) return a.advertised == b.advertised;
  return a.speed == b.speed && a.duplex == b.duplex;
}

// The modes this fault sets on a link found as FOUND: with autoneg, the advertised modes of at
// most TARGET Mb/s (and every bit that is not a speed: pause, port, FEC); without, the fastest
// supported speed of at most TARGET. An error, touching nothing, where there is none.
Result<LinkModes> degradedModes(const LinkModes& found, const std::vector<uint32_t>& speeds,
                                double targetMbps, const std::string& name) {
  if (!anyBit(found.supported))
    return makeError(
        "link_degrade: interface '" + name +
            "' reports no link modes its driver supports (a veth, a " +
            "tun or a bridge has none): its rate cannot be lowered by retraining; refused, nothing "
            "changed. Degrade the switch port facing it instead (switch_port)",
        EOPNOTSUPP);
  LinkModes to = found;
  auto speedOf = [&](size_t i) { return i < speeds.size() ? speeds[i] : 0u; };
  if (found.autoneg) {
    bool anySpeed = false;
    for (size_t i = 0; i < found.size; i++) {
      if (!bit(found.advertised, i) || speedOf(i) == 0) continue;
      if (double(speedOf(i)) > targetMbps)
        to.advertised[i / 32] &= ~(1u << (i % 32));
      else
        anySpeed = true;
    }
    if (!anySpeed)
      return makeError("link_degrade: interface '" + name +
                           "' advertises no link mode at or below " +
                           formatBitRate(targetMbps * 1e6) + "; refused, nothing changed",
                       EINVAL);
    if (to.advertised == found.advertised)
      return makeError("link_degrade: every mode interface '" + name +
                           "' advertises is at or below " + formatBitRate(targetMbps * 1e6) +
                           " already: nothing to degrade; refused",
                       EBUSY);
    return to;
  }
  uint32_t best = 0;
  for (size_t i = 0; i < found.size; i++)
    if (bit(found.supported, i) && speedOf(i) > 0 && double(speedOf(i)) <= targetMbps)
      best = std::max(best, speedOf(i));
  if (best == 0 || best >= found.speed)
    return makeError("link_degrade: interface '" + name + "' (autoneg off, " +
                         std::to_string(found.speed) +
                         " Mb/s) supports no slower speed at or below " +
                         formatBitRate(targetMbps * 1e6) + "; refused, nothing changed",
                     EINVAL);
  to.speed = best;
  return to;
}

// The target rate (Mb/s) for a link found at FOUND.
Result<double> targetMbps(const DegradeParams& p, const LinkModes& found, const std::string& name) {
  if (p.rateBps) return *p.rateBps / 1e6;
  if (found.speed == uint32_t(SPEED_UNKNOWN) || found.speed == 0)
    return makeError("link_degrade: interface '" + name +
                     "' has no known speed (no link?): a fraction of it is " +
                     "undefined; set 'rate' instead");
  return double(found.speed) * p.fraction.value_or(1);
}

// Restores the snapshot's modes where the interface (still the journaled one) holds APPLIED.
Result<void> restoreNic(const json& snap, EventLog* events) {
  const std::string name = snap.at("interface").get<std::string>();
  const int ifindex = snap.at("ifindex").get<int>();
  auto link = nl::getLink(ifindex);
  if (!link) {
    if (link.error().code == ENODEV) return {};  // gone: nothing left to restore
    return makeError("reverting link_degrade on '" + name + "': " + link.error().message,
                     link.error().code);
  }
  if (link->name != name)
    return makeError("link_degrade revert: ifindex " + std::to_string(ifindex) + " is now '" +
                         link->name + "', not '" + name +
                         "' as journaled: left alone; check the link modes of '" + name +
                         "' by hand (`ethtool " + name + "`)",
                     kRevertConflict);
  auto family = ethtool::family();
  if (!family)
    return makeError("reverting link_degrade on '" + name + "': " + family.error().message,
                     family.error().code);
  const LinkModes found = LinkModes::fromJson(snap.at("modes")),
                  applied = LinkModes::fromJson(snap.at("applied"));
  auto now = ethtool::readLinkModes(*family, ifindex, name);
  if (!now) return makeError("reverting link_degrade: " + now.error().message, now.error().code);
  if (sameModes(*now, found)) return {};
  if (!sameModes(*now, applied))
    return makeError("link_degrade revert conflict on interface '" + name + "': its link modes (" +
                         hexBits(now->advertised) + ", autoneg " + (now->autoneg ? "on" : "off") +
                         ") are neither what this fault set nor what it found; another fault or an "
                         "operator changed "
                         "them since: left as they are",
                     kRevertConflict);
  if (auto w = ethtool::writeLinkModes(*family, ifindex, name, found); !w)
    return makeError("reverting link_degrade: " + w.error().message, w.error().code);
  if (events) events->add(Event{wallNs(), "reverted", name + " link modes restored", false});
  return {};
}

class NicDegrade final : public Fault {
 public:
  NicDegrade(json params, DegradeParams p, std::string interface, int ifindex)
      : params_(std::move(params)),
        p_(std::move(p)),
        interface_(std::move(interface)),
        ifindex_(ifindex) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto family = ethtool::family();
    if (!family) return makeError("link_degrade: " + family.error().message, family.error().code);
    auto found = ethtool::readLinkModes(*family, ifindex_, interface_);
    if (!found) return makeError("link_degrade: " + found.error().message, found.error().code);
    auto speeds = ethtool::linkModeSpeeds(*family, ifindex_);
    if (!speeds) return makeError("link_degrade: " + speeds.error().message, speeds.error().code);
    auto target = targetMbps(p_, *found, interface_);
    if (!target) return target.error();
    auto to = degradedModes(*found, *speeds, *target, interface_);
    if (!to) return to.error();
    json s = {{"backend", "ethtool"},
              {"interface", interface_},
              {"ifindex", ifindex_},
              {"modes", found->toJson()},
              {"applied", to->toJson()}};
    std::lock_guard lock(m_);
    snap_ = s;
    family_ = *family;
    return s;
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    LinkModes to;
    uint16_t family = 0;
    {
      std::lock_guard lock(m_);
      if (!snap_) return makeError("link_degrade: run without a snapshot");
      to = LinkModes::fromJson(snap_->at("applied"));
      family = family_;
    }
    if (auto w = ethtool::writeLinkModes(family, ifindex_, interface_, to); !w)
      return makeError("link_degrade: " + w.error().message, w.error().code);
    events.add(Event{wallNs(), "applied", describe(), false});
    holdUntil(stop, p_.durationNs);
    return {};
  }

  Result<void> revert(EventLog& events) override {
    std::optional<json> s;
    {
      std::lock_guard lock(m_);
      s = snap_;
    }
    if (!s) return {};
    return restoreNic(*s, &events);
  }

  std::string describe() const override {
    char frac[32] = "";
    if (p_.fraction) std::snprintf(frac, sizeof frac, "x %g", *p_.fraction);
    return "link_degrade " + interface_ + ": link modes up to " +
           (p_.rateBps ? showRate(*p_.rateBps) : std::string(frac) + " of its speed") +
           (p_.durationNs ? " for " + formatDuration(Nanos(*p_.durationNs)) : "");
  }

  std::vector<std::string> targets() const override {
    return {"the link modes of interface '" + interface_ + "'"};
  }

 private:
  json params_;
  DegradeParams p_;
  std::string interface_;
  int ifindex_ = 0;
  std::mutex m_;
  std::optional<json> snap_;
  uint16_t family_ = 0;
};

}  // namespace

extern const FaultKind kind_link_degrade;
const FaultKind kind_link_degrade{
    .name = "link_degrade",
    .summary =
        "lowers one link's rate (a lab switch port's, or a NIC's link modes) for its duration and "
        "restores "
        "exactly what it found",
    .params =
        {
            {.name = "fraction",
             .type = ParamType::rate,
             .help = "the share of the port's rate it keeps, above 0 and below 1 (0.5: half); or "
                     "set rate",
             .min = 0,
             .max = 1,
             .optional = true},
            {.name = "rate",
             .type = ParamType::bitRate,
             .help = "the rate it drops to (e.g. \"500M\" or \"500Mbps\"); or set fraction",
             .min = kMinRateBps,
             .max = kMaxRateBps,
             .optional = true},
            {.name = "switch_port",
             .type = ParamType::string,
             .help = "the lab switch port (n2, leaf1:spine1; default: the one facing this host)",
             .optional = true},
            {.name = "interface",
             .type = ParamType::string,
             .help = "instead of a switch port: a NIC whose advertised link modes are lowered "
                     "(ethtool netlink; the link "
                     "retrains slower)",
             .optional = true},
            {.name = "duration",
             .type = ParamType::duration,
             .help = "how long the rate stays lowered (default: until the fault's --for or "
                     "lifetime ends)",
             .min = 1 * kParamMs,
             .max = kParamHour,
             .optional = true},
            {.name = "socket",
             .type = ParamType::string,
             .help = "lab switch control socket: only the one of the agent's configuration ([lab] "
                     "switch_socket), "
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
      if (const std::string iface = stringParam(params, "interface"); !iface.empty()) {
        if (params.contains("switch_port"))
          return makeError(
              "link_degrade: set 'interface' (a NIC's link modes) or 'switch_port' (a lab switch "
              "port), "
              "not both");
        if (auto ok = checkInterface(policy, iface); !ok)
          return makeError("link_degrade: " + ok.error().message, EPERM);
        auto link = nl::getLink(iface);
        if (!link) return makeError("link_degrade: " + link.error().message, link.error().code);
        // Reads (touches nothing) whether the driver has link modes to lower: refused now, with the
        // reason, where it has none.
        auto family = ethtool::family();
        if (!family)
          return makeError("link_degrade: " + family.error().message, family.error().code);
        auto modes = ethtool::readLinkModes(*family, link->ifindex, iface);
        if (!modes) return makeError("link_degrade: " + modes.error().message, modes.error().code);
        if (!anyBit(modes->supported)) {
          auto refused = degradedModes(*modes, {}, 0, iface);
          return refused.error();
        }
        return std::unique_ptr<Fault>(
            std::make_unique<NicDegrade>(params, std::move(p), iface, link->ifindex));
      }
      p.port = labswitchHostPort(stringParam(params, "switch_port"), policy);
      if (p.port.empty())
        return makeError(
            "link_degrade: set 'switch_port' (a lab switch port such as n2); only agents under "
            "`rdmachaos lab up` know their own port");
      if (auto ok = checkPort(p.port); !ok) return makeError("link_degrade: " + ok.error().message);
      auto sock = labswitchSocket(stringParam(params, "socket"), policy);
      if (!sock) return makeError("link_degrade: " + sock.error().message);
      p.socket = *sock;
      // Reads (touches nothing) that the port is one port of this switch.
      if (auto r = currentRate(p.socket, p.port); !r)
        return makeError("link_degrade: " + r.error().message, r.error().code);
      json resolved = params;
      resolved["switch_port"] = p.port;  // the journal names what was touched
      resolved["socket"] = p.socket;
      return std::unique_ptr<Fault>(
          std::make_unique<SwitchPortDegrade>(std::move(resolved), std::move(p)));
    },
    .revertRecord = [](const json& /*params*/, const json& snapshot,
                       const Policy& /*policy*/) -> Result<void> {
      try {
        if (snapshot.is_object() && snapshot.value("backend", "") == "ethtool")
          return restoreNic(snapshot, nullptr);
        // What it set is journaled with what it found, so after a crash too it restores only
        // over its own change.
        return restore(snapshot, snapshot.at("applied_bps").get<double>(), nullptr);
      } catch (const std::exception& e) {
        return makeError(
            std::string("link_degrade journal snapshot is incomplete: ") + e.what() +
            "; check the port's rate with the switch's get_port and set it back with set_port");
      }
    },
    .check = checkParams,
    .planTarget =
        [](const json& params) {
          if (!stringParam(params, "interface").empty())
            return "the link modes of " + planInterface(params);
          std::string port = stringParam(params, "switch_port");
          return port.empty() ? std::string("the rate of its switch port")
                              : "the rate of lab switch port '" + port + "'";
        },
    // A port named in the parameters is the same switch port whichever node's agent degrades it.
    .fabricTargets =
        [](const json& params) {
          std::vector<std::string> out;
          const std::string port = stringParam(params, "switch_port");
          if (!port.empty()) out.push_back("the rate of lab switch port '" + port + "'");
          return out;
        },
};

}  // namespace rc::faults
