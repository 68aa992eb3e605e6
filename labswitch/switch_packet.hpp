// Frame inspection for the lab switch: priority classification, ECN CE marking with the IPv4
// checksum fixed, and the 5-tuple hash that ECMP and flowlet routing use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace rc::labswitch {

// DSCP -> priority. Default: everything 0, DSCP 26 (RoCE data) -> 3, DSCP 48 (CNP) -> 6.
using DscpMap = std::array<uint8_t, 64>;
DscpMap defaultDscpMap();

// How the switch gives a frame its priority: the DSCP map, and an optional ACL rule that puts
// pure TCP ACKs (no payload; no SYN, FIN or RST) in a priority of their own, as a switch's
// traffic-class ACL matching TCP flags and length does.
struct Classes {
  DscpMap dscp = defaultDscpMap();
  int tcpAckPriority = -1;  // 0-7; -1: pure ACKs go by their DSCP like any frame
};

// The frame's priority: the PCP of an 802.1Q tag if present, else the ACL rule for pure TCP
// ACKs if set, else the DSCP of an IPv4 header mapped through the DSCP map, else 0.
int classify(const uint8_t* frame, size_t len, const Classes& classes);
inline int classify(const uint8_t* frame, size_t len, const DscpMap& dscpMap) {
  return classify(frame, len, Classes{.dscp = dscpMap});
}

// True for an IPv4 TCP segment that carries no payload and no SYN, FIN or RST: a pure ACK.
bool isPureTcpAck(const uint8_t* frame, size_t len);

enum class Ecn { notIpv4, notEct, ect, ce };
Ecn ecnOf(const uint8_t* frame, size_t len);
// ECT(0)/ECT(1) -> CE, with the IPv4 header checksum updated (RFC 1624). True if marked.
bool markCe(uint8_t* frame, size_t len);

// Hash of (src ip, dst ip, protocol, src port, dst port) for IPv4 TCP/UDP (the RoCEv2 UDP
// source port carries a QP's entropy); other frames hash their MAC addresses.
uint32_t flowHash(const uint8_t* frame, size_t len);

// The destination port of an IPv4 TCP or UDP frame (first fragment), or -1.
int l4DstPort(const uint8_t* frame, size_t len);

inline bool isMulticast(const uint8_t* frame) { return frame[0] & 1; }

}  // namespace rc::labswitch
