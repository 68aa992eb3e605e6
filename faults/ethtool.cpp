// ethtool netlink: the generic netlink messages link_degrade needs (faults/ethtool.hpp).
#include "faults/ethtool.hpp"

#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <span>

#include "common/unique_fd.hpp"

namespace rc::faults::ethtool {
namespace {

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
  void end(size_t at) {
    reinterpret_cast<nlattr*>(buf_.data() + at)->nla_len = uint16_t(buf_.size() - at);
  }
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
  if (!fd.isValid())
    return makeError("netlink socket: " + std::string(std::strerror(errno)), errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto req = msg.finish(1);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), req.data(), req.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0)
    return makeError("netlink send: " + std::string(std::strerror(errno)), errno);
  std::vector<std::vector<uint8_t>> replies;
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n < 0) return makeError("netlink receive: " + std::string(std::strerror(errno)), errno);
    size_t left = size_t(n);
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(nh, left);
         nh = NLMSG_NEXT(nh, left)) {
      if (nh->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
        if (e->error == 0) return replies;
        std::string why = std::strerror(-e->error);
        // The extended ack's message (NLMSGERR_ATTR_MSG) after the echoed request header.
        if (nh->nlmsg_flags & NLM_F_ACK_TLVS) {
          size_t off = NLMSG_HDRLEN + sizeof(nlmsgerr);
          if (!(nh->nlmsg_flags & NLM_F_CAPPED)) off += e->msg.nlmsg_len - NLMSG_HDRLEN;
          if (off < nh->nlmsg_len) {
            auto tlv =
                parseAttrs({reinterpret_cast<const uint8_t*>(nh) + off, nh->nlmsg_len - off});
            if (auto m = tlv.find(NLMSGERR_ATTR_MSG); m != tlv.end() && !m->second.empty())
              why += " (" +
                     std::string(reinterpret_cast<const char*>(m->second.data()),
                                 strnlen(reinterpret_cast<const char*>(m->second.data()),
                                         m->second.size())) +
                     ")";
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

void putHeader(GenlMessage& m, uint16_t type, int ifindex, uint32_t flags) {
  size_t h = m.begin(type);
  m.putU32(ETHTOOL_A_HEADER_DEV_INDEX, uint32_t(ifindex));
  if (flags) m.putU32(ETHTOOL_A_HEADER_FLAGS, flags);
  m.end(h);
}

}  // namespace

Result<uint16_t> family() {
  GenlMessage m(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
  m.put(CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME, sizeof ETHTOOL_GENL_NAME);
  auto r = genlCall(m);
  if (!r)
    return makeError("the kernel has no ethtool netlink family (" + r.error().message + ")",
                     r.error().code);
  for (const auto& reply : *r)
    if (auto id = attrValue<uint16_t>(parseAttrs(reply), CTRL_ATTR_FAMILY_ID)) return *id;
  return makeError("the kernel's answer for the ethtool netlink family holds no id");
}

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

Result<LinkModes> readLinkModes(uint16_t family, int ifindex, const std::string& name) {
  GenlMessage m(family, ETHTOOL_MSG_LINKMODES_GET, 0);
  putHeader(m, ETHTOOL_A_LINKMODES_HEADER, ifindex, ETHTOOL_FLAG_COMPACT_BITSETS);
  auto r = genlCall(m);
  if (!r)
    return makeError(
        "reading the link modes of '" + name + "' (ethtool netlink): " + r.error().message,
        r.error().code);
  if (r->empty())
    return makeError("reading the link modes of '" + name + "': the kernel sent no reply");
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
  if (!r)
    return makeError("reading the link mode names (ethtool netlink): " + r.error().message,
                     r.error().code);
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
        speeds[*index] = uint32_t(
            std::strtoul(reinterpret_cast<const char*>(value->second.data()), nullptr, 10));
      }
      rest = rest.subspan(std::min<size_t>(rest.size(), NLA_ALIGN(a->nla_len)));
    }
  }
  return speeds;
}

Result<void> writeLinkModes(uint16_t family, int ifindex, const std::string& name,
                            const LinkModes& to) {
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
    return makeError("setting the link modes of '" + name +
                         "' (ethtool netlink): " + r.error().message +
                         (r.error().code == EOPNOTSUPP ? "; its driver cannot change them" : ""),
                     r.error().code);
  return {};
}

}  // namespace rc::faults::ethtool
