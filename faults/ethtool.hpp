// A NIC's link modes through ethtool netlink (the generic netlink family "ethtool"), on a raw
// NETLINK_GENERIC socket of the calling thread's network namespace: what link_degrade reads,
// sets and restores. Errors are values naming the interface and, where the kernel gave one, its
// extended ack message.
#pragma once

#include <linux/ethtool.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::faults::ethtool {

using json = nlohmann::json;

using Bits = std::vector<uint32_t>;  // a link mode bitset: bit i of words[i / 32]
bool bit(const Bits& b, size_t i);
bool anyBit(const Bits& b);
std::string hexBits(const Bits& b);

// What LINKMODES_GET reads: autoneg, the advertised modes (compact bitset value) among the
// supported ones (its mask), the speed (Mb/s; SPEED_UNKNOWN without a link) and duplex.
struct LinkModes {
  uint32_t size = 0;
  Bits advertised, supported;
  bool autoneg = false;
  uint32_t speed = uint32_t(SPEED_UNKNOWN);
  uint8_t duplex = DUPLEX_UNKNOWN;
  json toJson() const {
    return {{"size", size},       {"advertised", advertised}, {"supported", supported},
            {"autoneg", autoneg}, {"speed", speed},           {"duplex", duplex}};
  }
  static LinkModes fromJson(const json& j) {
    LinkModes m;
    m.size = j.at("size").get<uint32_t>();
    m.advertised = j.at("advertised").get<Bits>();
    m.supported = j.at("supported").get<Bits>();
    m.autoneg = j.at("autoneg").get<bool>();
    m.speed = j.at("speed").get<uint32_t>();
    m.duplex = j.at("duplex").get<uint8_t>();
    return m;
  }
};

// The ethtool family's id.
Result<uint16_t> family();
// LINKMODES_GET in compact bitsets.
Result<LinkModes> readLinkModes(uint16_t family, int ifindex, const std::string& name);
// The speed (Mb/s) of each link mode bit, from the kernel's own names; 0 for bits that are not a
// speed.
Result<std::vector<uint32_t>> linkModeSpeeds(uint16_t family, int ifindex);
// LINKMODES_SET: with autoneg, exactly TO's advertised modes; without, its speed and duplex.
Result<void> writeLinkModes(uint16_t family, int ifindex, const std::string& name,
                            const LinkModes& to);

}  // namespace rc::faults::ethtool
