// The link_degrade fault: lowers one link's rate for the fault's duration and restores exactly
// what it found: a link trained down, a lost lane. Backends: a lab switch port's line rate
// (set_port), or a real NIC's advertised link modes through ethtool netlink (the speed the link
// retrains at).
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <span>

#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "common/units.hpp"
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

// ---------------------------------------------------------------- a NIC's link modes (ethtool netlink)

// One generic netlink request, built attribute by attribute.
class GenlMessage {
 public:
  GenlMessage(uint16_t family, uint8_t cmd, uint16_t flags) {
    buf_.resize(NLMSG_HDRLEN + GENL_HDRLEN);
    auto* nh = reinterpret_cast<nlmsghdr*>(buf_.data());
    nh->nlmsg_type = family;
    nh->nlmsg_flags = uint16_t(NLM_F_REQUEST | NLM_F_ACK | flags);
    auto* gh = reinterpret_cast<genlmsghdr*>(buf_.data() + NLMSG_HDRLEN);
    gh->cmd = cmd;
    gh->version = family == GENL_ID_CTRL ? 1 : ETHTOOL_GENL_VERSION;
  }
  void put(uint16_t type, const void* data, size_t len) {
    size_t at = buf_.size();
    buf_.resize(at + NLA_ALIGN(NLA_HDRLEN + len));
    auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
    a->nla_type = type;
    a->nla_len = uint16_t(NLA_HDRLEN + len);
    if (len) std::memcpy(buf_.data() + at + NLA_HDRLEN, data, len);
  }
  void putU32(uint16_t type, uint32_t v) { put(type, &v, sizeof v); }
  void putU8(uint16_t type, uint8_t v) { put(type, &v, sizeof v); }
  size_t begin(uint16_t type) {
    size_t at = buf_.size();
    put(uint16_t(type | NLA_F_NESTED), nullptr, 0);
    return at;
  }
  void end(size_t at) { reinterpret_cast<nlattr*>(buf_.data() + at)->nla_len = uint16_t(buf_.size() - at); }
  std::span<const uint8_t> finish(uint32_t seq) {
    auto* nh = reinterpret_cast<nlmsghdr*>(buf_.data());
    nh->nlmsg_len = uint32_t(buf_.size());
    nh->nlmsg_seq = seq;
    return buf_;
  }

 private:
  std::vector<uint8_t> buf_;
};

using Attrs = std::map<uint16_t, std::span<const uint8_t>>;
Attrs parseAttrs(std::span<const uint8_t> data) {
  Attrs out;
  while (data.size() >= NLA_HDRLEN) {
    const auto* a = reinterpret_cast<const nlattr*>(data.data());
    if (a->nla_len < NLA_HDRLEN || a->nla_len > data.size()) break;
    out[uint16_t(a->nla_type & NLA_TYPE_MASK)] = data.subspan(NLA_HDRLEN, a->nla_len - NLA_HDRLEN);
    data = data.subspan(std::min<size_t>(data.size(), NLA_ALIGN(a->nla_len)));
  }
  return out;
}
template <typename T>
std::optional<T> attrValue(const Attrs& a, uint16_t type) {
  auto it = a.find(type);
  if (it == a.end() || it->second.size() < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, it->second.data(), sizeof v);
  return v;
}

// Sends one request on a NETLINK_GENERIC socket of this thread's namespace and returns the
// payloads (after the genetlink header) of the replies, or the kernel's error, with its
// extended ack message where it gave one.
Result<std::vector<std::vector<uint8_t>>> genlCall(GenlMessage& msg) {
  UniqueFD fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC));
  if (!fd.isValid()) return makeError("netlink socket: " + std::string(std::strerror(errno)), errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto req = msg.finish(1);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), req.data(), req.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return makeError("netlink send: " + std::string(std::strerror(errno)), errno);
  std::vector<std::vector<uint8_t>> replies;
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n < 0) return makeError("netlink receive: " + std::string(std::strerror(errno)), errno);
    size_t left = size_t(n);
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(nh, left); nh = NLMSG_NEXT(nh, left)) {
      if (nh->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
        if (e->error == 0) return replies;
        std::string why = std::strerror(-e->error);
        // The extended ack's message (NLMSGERR_ATTR_MSG) after the echoed request header.
        if (nh->nlmsg_flags & NLM_F_ACK_TLVS) {
          size_t off = NLMSG_HDRLEN + sizeof(nlmsgerr);
          if (!(nh->nlmsg_flags & NLM_F_CAPPED)) off += e->msg.nlmsg_len - NLMSG_HDRLEN;
          if (off < nh->nlmsg_len) {
            auto tlv = parseAttrs({reinterpret_cast<const uint8_t*>(nh) + off, nh->nlmsg_len - off});
            if (auto m = tlv.find(NLMSGERR_ATTR_MSG); m != tlv.end() && !m->second.empty())
              why += " (" + std::string(reinterpret_cast<const char*>(m->second.data()), strnlen(reinterpret_cast<const char*>(m->second.data()), m->second.size())) + ")";
          }
        }
        return makeError(why, -e->error);
      }
      if (nh->nlmsg_type == NLMSG_DONE) return replies;
      const uint8_t* p = static_cast<const uint8_t*>(NLMSG_DATA(nh)) + GENL_HDRLEN;
      replies.emplace_back(p, reinterpret_cast<const uint8_t*>(nh) + nh->nlmsg_len);
    }
  }
}

Result<uint16_t> ethtoolFamily() {
  GenlMessage m(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
  m.put(CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME, sizeof ETHTOOL_GENL_NAME);
  auto r = genlCall(m);
  if (!r) return makeError("the kernel has no ethtool netlink family (" + r.error().message + ")", r.error().code);
  for (const auto& reply : *r)
    if (auto id = attrValue<uint16_t>(parseAttrs(reply), CTRL_ATTR_FAMILY_ID)) return *id;
  return makeError("the kernel's answer for the ethtool netlink family holds no id");
}

// A link mode bitset: bit i of words[i / 32].
using Bits = std::vector<uint32_t>;
bool bit(const Bits& b, size_t i) { return i / 32 < b.size() && (b[i / 32] >> (i % 32)) & 1; }
bool anyBit(const Bits& b) {
  return std::any_of(b.begin(), b.end(), [](uint32_t w) { return w != 0; });
}
std::string hexBits(const Bits& b) {
  std::string out;
  char w[9];
  for (uint32_t x : b) {
    std::snprintf(w, sizeof w, "%08x", x);
    out += out.empty() ? w : std::string(",") + w;
  }
  return out;
}
Bits bitsFromJson(const json& j) { return j.get<Bits>(); }

// What LINKMODES_GET reads: autoneg, the advertised modes (compact bitset value) among the
// supported ones (its mask), the speed (Mb/s; SPEED_UNKNOWN without a link) and duplex.
struct LinkModes {
  uint32_t size = 0;
  Bits advertised, supported;
  bool autoneg = false;
  uint32_t speed = uint32_t(SPEED_UNKNOWN);
  uint8_t duplex = DUPLEX_UNKNOWN;
  json toJson() const {
    return {{"size", size}, {"advertised", advertised}, {"supported", supported}, {"autoneg", autoneg},
            {"speed", speed}, {"duplex", duplex}};
  }
  static LinkModes fromJson(const json& j) {
    LinkModes m;
    m.size = j.at("size").get<uint32_t>();
    m.advertised = bitsFromJson(j.at("advertised"));
    m.supported = bitsFromJson(j.at("supported"));
    m.autoneg = j.at("autoneg").get<bool>();
    m.speed = j.at("speed").get<uint32_t>();
    m.duplex = j.at("duplex").get<uint8_t>();
    return m;
  }
};

void putHeader(GenlMessage& m, uint16_t type, int ifindex, uint32_t flags) {
  size_t h = m.begin(type);
  m.putU32(ETHTOOL_A_HEADER_DEV_INDEX, uint32_t(ifindex));
  if (flags) m.putU32(ETHTOOL_A_HEADER_FLAGS, flags);
  m.end(h);
}

Result<LinkModes> readLinkModes(uint16_t family, int ifindex, const std::string& name) {
  GenlMessage m(family, ETHTOOL_MSG_LINKMODES_GET, 0);
  putHeader(m, ETHTOOL_A_LINKMODES_HEADER, ifindex, ETHTOOL_FLAG_COMPACT_BITSETS);
  auto r = genlCall(m);
  if (!r) return makeError("reading the link modes of '" + name + "' (ethtool netlink): " + r.error().message, r.error().code);
  if (r->empty()) return makeError("reading the link modes of '" + name + "': the kernel sent no reply");
  Attrs a = parseAttrs(r->front());
  LinkModes out;
  out.autoneg = attrValue<uint8_t>(a, ETHTOOL_A_LINKMODES_AUTONEG).value_or(0) == AUTONEG_ENABLE;
  out.speed = attrValue<uint32_t>(a, ETHTOOL_A_LINKMODES_SPEED).value_or(uint32_t(SPEED_UNKNOWN));
  out.duplex = attrValue<uint8_t>(a, ETHTOOL_A_LINKMODES_DUPLEX).value_or(DUPLEX_UNKNOWN);
  if (auto ours = a.find(ETHTOOL_A_LINKMODES_OURS); ours != a.end()) {
    Attrs b = parseAttrs(ours->second);
    out.size = attrValue<uint32_t>(b, ETHTOOL_A_BITSET_SIZE).value_or(0);
    auto words = [&](uint16_t type) {
      Bits w((out.size + 31) / 32, 0);
      if (auto it = b.find(type); it != b.end())
        std::memcpy(w.data(), it->second.data(), std::min(it->second.size(), w.size() * 4));
      return w;
    };
    out.advertised = words(ETHTOOL_A_BITSET_VALUE);
    out.supported = words(ETHTOOL_A_BITSET_MASK);
  }
  return out;
}

// The speed (Mb/s) of each link mode, from the kernel's own names ("25000baseCR/Full"); 0 for
// the bits that are not a speed (Autoneg, TP, Pause, FEC_RS, ...).
Result<std::vector<uint32_t>> linkModeSpeeds(uint16_t family, int ifindex) {
  GenlMessage m(family, ETHTOOL_MSG_STRSET_GET, 0);
  putHeader(m, ETHTOOL_A_STRSET_HEADER, ifindex, 0);
  size_t sets = m.begin(ETHTOOL_A_STRSET_STRINGSETS);
  size_t set = m.begin(ETHTOOL_A_STRINGSETS_STRINGSET);
  m.putU32(ETHTOOL_A_STRINGSET_ID, ETH_SS_LINK_MODES);
  m.end(set);
  m.end(sets);
  auto r = genlCall(m);
  if (!r) return makeError("reading the link mode names (ethtool netlink): " + r.error().message, r.error().code);
  std::vector<uint32_t> speeds;
  for (const auto& reply : *r) {
    Attrs top = parseAttrs(reply);
    auto ss = top.find(ETHTOOL_A_STRSET_STRINGSETS);
    if (ss == top.end()) continue;
    Attrs one = parseAttrs(parseAttrs(ss->second)[ETHTOOL_A_STRINGSETS_STRINGSET]);
    auto strings = one.find(ETHTOOL_A_STRINGSET_STRINGS);
    if (strings == one.end()) continue;
    std::span<const uint8_t> rest = strings->second;
    while (rest.size() >= NLA_HDRLEN) {
      const auto* a = reinterpret_cast<const nlattr*>(rest.data());
      if (a->nla_len < NLA_HDRLEN || a->nla_len > rest.size()) break;
      Attrs str = parseAttrs(rest.subspan(NLA_HDRLEN, a->nla_len - NLA_HDRLEN));
      auto index = attrValue<uint32_t>(str, ETHTOOL_A_STRING_INDEX);
      auto value = str.find(ETHTOOL_A_STRING_VALUE);
      if (index && value != str.end() && *index < 4096) {
        if (speeds.size() <= *index) speeds.resize(*index + 1, 0);
        speeds[*index] = uint32_t(std::strtoul(reinterpret_cast<const char*>(value->second.data()), nullptr, 10));
      }
      rest = rest.subspan(std::min<size_t>(rest.size(), NLA_ALIGN(a->nla_len)));
    }
  }
  return speeds;
}

Result<void> writeLinkModes(uint16_t family, int ifindex, const std::string& name, const LinkModes& to) {
  GenlMessage m(family, ETHTOOL_MSG_LINKMODES_SET, 0);
  putHeader(m, ETHTOOL_A_LINKMODES_HEADER, ifindex, 0);
  m.putU8(ETHTOOL_A_LINKMODES_AUTONEG, to.autoneg ? AUTONEG_ENABLE : AUTONEG_DISABLE);
  if (to.autoneg) {
    // The whole advertised set (value under an all-ones mask): exactly TO's modes.
    size_t ours = m.begin(ETHTOOL_A_LINKMODES_OURS);
    m.putU32(ETHTOOL_A_BITSET_SIZE, to.size);
    m.put(ETHTOOL_A_BITSET_VALUE, to.advertised.data(), to.advertised.size() * 4);
    Bits all(to.advertised.size(), 0xffffffffu);
    if (to.size % 32) all.back() = (1u << (to.size % 32)) - 1;
    m.put(ETHTOOL_A_BITSET_MASK, all.data(), all.size() * 4);
    m.end(ours);
  } else {
    if (to.speed != uint32_t(SPEED_UNKNOWN)) m.putU32(ETHTOOL_A_LINKMODES_SPEED, to.speed);
    if (to.duplex != DUPLEX_UNKNOWN) m.putU8(ETHTOOL_A_LINKMODES_DUPLEX, to.duplex);
  }
  auto r = genlCall(m);
  if (!r)
    return makeError("setting the link modes of '" + name + "' (ethtool netlink): " + r.error().message +
                         (r.error().code == EOPNOTSUPP ? "; its driver cannot change them" : ""),
                     r.error().code);
  return {};
}

bool sameModes(const LinkModes& a, const LinkModes& b) {
  if (a.autoneg != b.autoneg) return false;
  if (a.autoneg) return a.advertised == b.advertised;
  return a.speed == b.speed && a.duplex == b.duplex;
}

// The modes this fault sets on a link found as FOUND: with autoneg, the advertised modes of at
// most TARGET Mb/s (and every bit that is not a speed: pause, port, FEC); without, the fastest
// supported speed of at most TARGET. An error, touching nothing, where there is none.
Result<LinkModes> degradedModes(const LinkModes& found, const std::vector<uint32_t>& speeds, double targetMbps,
                                const std::string& name) {
  if (!anyBit(found.supported))
    return makeError("link_degrade: interface '" + name + "' reports no link modes its driver supports (a veth, a " +
                         "tun or a bridge has none): its rate cannot be lowered by retraining; refused, nothing "
                         "changed. Degrade the switch port facing it instead (switch_port)",
                     EOPNOTSUPP);
  LinkModes to = found;
  auto speedOf = [&](size_t i) { return i < speeds.size() ? speeds[i] : 0u; };
  if (found.autoneg) {
    bool anySpeed = false;
    for (size_t i = 0; i < found.size; i++) {
      if (!bit(found.advertised, i) || speedOf(i) == 0) continue;
      if (double(speedOf(i)) > targetMbps) to.advertised[i / 32] &= ~(1u << (i % 32));
      else anySpeed = true;
    }
    if (!anySpeed)
      return makeError("link_degrade: interface '" + name + "' advertises no link mode at or below " +
                           formatBitRate(targetMbps * 1e6) + "; refused, nothing changed",
                       EINVAL);
    if (to.advertised == found.advertised)
      return makeError("link_degrade: every mode interface '" + name + "' advertises is at or below " +
                           formatBitRate(targetMbps * 1e6) + " already: nothing to degrade; refused",
                       EBUSY);
    return to;
  }
  uint32_t best = 0;
  for (size_t i = 0; i < found.size; i++)
    if (bit(found.supported, i) && speedOf(i) > 0 && double(speedOf(i)) <= targetMbps) best = std::max(best, speedOf(i));
  if (best == 0 || best >= found.speed)
    return makeError("link_degrade: interface '" + name + "' (autoneg off, " + std::to_string(found.speed) +
                         " Mb/s) supports no slower speed at or below " + formatBitRate(targetMbps * 1e6) +
                         "; refused, nothing changed",
                     EINVAL);
  to.speed = best;
  return to;
}

// The target rate (Mb/s) for a link found at FOUND.
Result<double> targetMbps(const DegradeParams& p, const LinkModes& found, const std::string& name) {
  if (p.rateBps) return *p.rateBps / 1e6;
  if (found.speed == uint32_t(SPEED_UNKNOWN) || found.speed == 0)
    return makeError("link_degrade: interface '" + name + "' has no known speed (no link?): a fraction of it is " +
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
    return makeError("reverting link_degrade on '" + name + "': " + link.error().message, link.error().code);
  }
  if (link->name != name)
    return makeError("link_degrade revert: ifindex " + std::to_string(ifindex) + " is now '" + link->name +
                         "', not '" + name + "' as journaled: left alone; check the link modes of '" + name +
                         "' by hand (`ethtool " + name + "`)",
                     kRevertConflict);
  auto family = ethtoolFamily();
  if (!family) return makeError("reverting link_degrade on '" + name + "': " + family.error().message, family.error().code);
  const LinkModes found = LinkModes::fromJson(snap.at("modes")), applied = LinkModes::fromJson(snap.at("applied"));
  auto now = readLinkModes(*family, ifindex, name);
  if (!now) return makeError("reverting link_degrade: " + now.error().message, now.error().code);
  if (sameModes(*now, found)) return {};
  if (!sameModes(*now, applied))
    return makeError("link_degrade revert conflict on interface '" + name + "': its link modes (" + hexBits(now->advertised) +
                         ", autoneg " + (now->autoneg ? "on" : "off") +
                         ") are neither what this fault set nor what it found; another fault or an operator changed "
                         "them since: left as they are",
                     kRevertConflict);
  if (auto w = writeLinkModes(*family, ifindex, name, found); !w)
    return makeError("reverting link_degrade: " + w.error().message, w.error().code);
  if (events) events->add(Event{wallNs(), "reverted", name + " link modes restored", false});
  return {};
}

class NicDegrade final : public Fault {
 public:
  NicDegrade(json params, DegradeParams p, std::string interface, int ifindex)
      : params_(std::move(params)), p_(std::move(p)), interface_(std::move(interface)), ifindex_(ifindex) {}
  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    auto family = ethtoolFamily();
    if (!family) return makeError("link_degrade: " + family.error().message, family.error().code);
    auto found = readLinkModes(*family, ifindex_, interface_);
    if (!found) return makeError("link_degrade: " + found.error().message, found.error().code);
    auto speeds = linkModeSpeeds(*family, ifindex_);
    if (!speeds) return makeError("link_degrade: " + speeds.error().message, speeds.error().code);
    auto target = targetMbps(p_, *found, interface_);
    if (!target) return target.error();
    auto to = degradedModes(*found, *speeds, *target, interface_);
    if (!to) return to.error();
    json s = {{"backend", "ethtool"}, {"interface", interface_}, {"ifindex", ifindex_},
              {"modes", found->toJson()}, {"applied", to->toJson()}};
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
    if (auto w = writeLinkModes(family, ifindex_, interface_, to); !w) return makeError("link_degrade: " + w.error().message, w.error().code);
    events.add(Event{wallNs(), "applied", describe(), false});
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

  std::vector<std::string> targets() const override { return {"the link modes of interface '" + interface_ + "'"}; }

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
    .summary = "lowers one link's rate (a lab switch port's, or a NIC's link modes) for its duration and restores "
               "exactly what it found",
    .params = {
        {.name = "fraction", .type = ParamType::rate,
         .help = "the share of the port's rate it keeps, above 0 and below 1 (0.5: half); or set rate", .min = 0,
         .max = 1, .optional = true},
        {.name = "rate", .type = ParamType::bitRate, .help = "the rate it drops to (e.g. \"500M\" or \"500Mbps\"); or set fraction",
         .min = kMinRateBps, .max = kMaxRateBps, .optional = true},
        {.name = "switch_port", .type = ParamType::string,
         .help = "the lab switch port (n2, leaf1:spine1; default: the one facing this host)", .optional = true},
        {.name = "interface", .type = ParamType::string,
         .help = "instead of a switch port: a NIC whose advertised link modes are lowered (ethtool netlink; the link "
                 "retrains slower)",
         .optional = true},
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
      if (const std::string iface = stringParam(params, "interface"); !iface.empty()) {
        if (params.contains("switch_port"))
          return makeError("link_degrade: set 'interface' (a NIC's link modes) or 'switch_port' (a lab switch port), "
                           "not both");
        if (auto ok = checkInterface(policy, iface); !ok) return makeError("link_degrade: " + ok.error().message, EPERM);
        auto link = nl::getLink(iface);
        if (!link) return makeError("link_degrade: " + link.error().message, link.error().code);
        // Reads (touches nothing) whether the driver has link modes to lower: refused now, with the
        // reason, where it has none.
        auto family = ethtoolFamily();
        if (!family) return makeError("link_degrade: " + family.error().message, family.error().code);
        auto modes = readLinkModes(*family, link->ifindex, iface);
        if (!modes) return makeError("link_degrade: " + modes.error().message, modes.error().code);
        if (!anyBit(modes->supported)) {
          auto refused = degradedModes(*modes, {}, 0, iface);
          return refused.error();
        }
        return std::unique_ptr<Fault>(std::make_unique<NicDegrade>(params, std::move(p), iface, link->ifindex));
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
        if (snapshot.is_object() && snapshot.value("backend", "") == "ethtool") return restoreNic(snapshot, nullptr);
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
      if (!stringParam(params, "interface").empty()) return "the link modes of " + planInterface(params);
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
