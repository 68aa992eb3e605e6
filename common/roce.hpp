// RoCEv2 frames as the lab switch and the go-back-N oracle read them: an Ethernet frame
// (optionally 802.1Q-tagged) carrying IPv4, UDP to port 4791, the InfiniBand Base Transport
// Header (BTH), the extended headers its opcode implies, a payload and the invariant CRC
// (ICRC). Also the IPv4 TCP/UDP 5-tuple of any frame, for the same selectors on TCP jobs.
// References: the InfiniBand Architecture Specification vol. 1 (BTH, AETH, opcodes) and its
// annex A17 (RoCEv2: UDP port 4791, the ICRC over masked IP/UDP/BTH fields).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rc::roce {

constexpr uint16_t kUdpPort = 4791;
constexpr uint32_t kPsnMask = 0xffffff;

// Opcode classes an operator selects by (Lumina's experiments select the same).
enum class OpClass : uint8_t { send, write, readRequest, readResponse, ack, nak, atomic, cnp, other };
const char* className(OpClass c);
std::optional<OpClass> parseClass(const std::string& s);  // "send", "write", "read_request", ...

// An IPv4 frame's addresses and transport ports, where it has them.
struct Flow {
  uint32_t srcIp = 0, dstIp = 0;  // host byte order
  uint8_t protocol = 0;           // 6 TCP, 17 UDP
  uint16_t srcPort = 0, dstPort = 0;
  uint8_t dscp = 0, ecn = 0;
  size_t ipOffset = 0, l4Offset = 0;  // in the frame
  uint16_t ipTotalLength = 0;
};
// The frame's IPv4 flow (first fragments of TCP and UDP carry ports); nullopt for non-IPv4.
std::optional<Flow> flowOf(const uint8_t* frame, size_t len);
// "10.0.0.1:49152 > 10.0.0.2:4791 udp"
std::string flowText(const Flow& f);
std::string ipText(uint32_t hostOrder);

// A RoCEv2 frame's transport headers.
struct Bth {
  Flow flow;
  uint8_t opcode = 0;
  OpClass cls = OpClass::other;
  uint8_t pad = 0;
  uint32_t destQp = 0;
  bool ackRequest = false;
  uint32_t psn = 0;
  size_t bthOffset = 0;      // in the frame
  size_t payloadOffset = 0;  // after the extended headers
  size_t payloadLength = 0;  // without pad and ICRC
  size_t icrcOffset = 0;     // the last 4 bytes of the UDP payload
  bool truncated = false;    // a captured frame cut short: headers only (no payload, no ICRC)
  // AETH (ACK, NAK, read responses, atomic ACK): syndrome and message sequence number.
  bool hasAeth = false;
  uint8_t syndrome = 0;
  uint32_t msn = 0;
  // A NAK's code (syndrome 011xxxxx): 0 PSN sequence error, 1 invalid request, 2 remote
  // access error, 3 remote operational error, 4 invalid RD request; -1 when not a NAK.
  int nakCode() const { return (hasAeth && (syndrome & 0xe0) == 0x60) ? (syndrome & 0x1f) : -1; }
  bool rnrNak() const { return hasAeth && (syndrome & 0xe0) == 0x20; }
};
// The BTH of a RoCEv2 frame (UDP destination port 4791, IPv4), or nullopt. A frame shorter
// than its IP length (a capture's snapshot) parses as `truncated` if its headers are whole.
std::optional<Bth> parse(const uint8_t* frame, size_t len);
// "WRITE_FIRST", "ACKNOWLEDGE", ... or "0x%02x".
std::string opcodeName(uint8_t opcode);
// Whether the opcode starts data a requester sends (SEND/WRITE/READ request/atomic), so that
// its PSN advances the requester's sequence.
bool isRequest(uint8_t opcode);

// The ICRC the frame should carry (annex A17: CRC-32 over 8 bytes of ones, the IPv4 header
// with TOS, TTL and checksum set to ones, the UDP header with its checksum set to ones, the
// BTH with its reserved byte set to ones, and the rest up to the ICRC). A switch may mark ECN
// or change TTL without breaking it.
uint32_t computeIcrc(const uint8_t* frame, size_t len, const Bth& bth);
// The ICRC as the frame carries it (little-endian on the wire, as Ethernet's FCS).
uint32_t storedIcrc(const uint8_t* frame, const Bth& bth);
inline bool icrcValid(const uint8_t* frame, size_t len, const Bth& bth) {
  return !bth.truncated && computeIcrc(frame, len, bth) == storedIcrc(frame, bth);
}
// Writes the computed ICRC into the frame (tests build frames with it).
void writeIcrc(uint8_t* frame, size_t len, const Bth& bth);

// PSN arithmetic modulo 2^24: a - b as a signed distance in (-2^23, 2^23].
int32_t psnDiff(uint32_t a, uint32_t b);

}  // namespace rc::roce
