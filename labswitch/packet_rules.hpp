// Packet faults in the lab switch: rules that select frames on one host port (ingress = from
// the host, egress = to the host) by protocol, addresses, ports, DSCP or priority and, for
// RoCEv2, by BTH fields (opcode class, destination QP, PSN range); pick some of the matches
// (the n-th, every k-th, a burst of m from the n-th, or each with probability p from a seeded
// generator); and act on them: drop, ecn_mark, corrupt (the ICRC then fails), delay, duplicate,
// reorder. Every acted-on frame is an event; a rule may capture its port's frames as pcapng.
// The choice depends only on the sequence of matching frames and the seed, never on time, so
// the same traffic gives the same picks. A rule ends by itself at its expiry: a rule nobody
// deletes (its agent killed) still leaves the switch. See docs/faults/packet.md.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/pcapng.hpp"
#include "common/result.hpp"
#include "common/roce.hpp"

namespace rc::labswitch {

using json = nlohmann::json;

enum class PacketProtocol { any, roce, tcp, udp };
enum class PickMode { all, nth, every, burst, probability };
// none: a capture-only rule (a playbook step's `capture = true`): it matches and counts, acts on
// nothing.
enum class PacketAction { drop, ecnMark, corrupt, delay, duplicate, reorder, none };

const char* protocolName(PacketProtocol p);
const char* modeName(PickMode m);
const char* actionName(PacketAction a);

struct PacketSelector {
  PacketProtocol protocol = PacketProtocol::roce;
  std::optional<uint32_t> srcIp, dstIp;  // host byte order
  int srcPort = -1, dstPort = -1;        // TCP/UDP; -1 any
  int dscp = -1, priority = -1;
  std::optional<roce::OpClass> opClass;  // RoCE only
  int64_t qpn = -1;                      // RoCE destination QP; -1 any
  int64_t psnMin = -1, psnMax = -1;      // RoCE PSN range, inclusive; -1 open
  // RoCE requests: Lumina's "iteration" of a PSN. first: a PSN above every PSN the rule has
  // seen on that QP (requester, responder, destination QP) so far, i.e. not a resend; resend:
  // the others; any: both. Needs the rule to see the flow from its start (or from any point:
  // the first frame seen of a flow counts as a first transmission).
  enum class Transmission { any, first, resend } transmission = Transmission::any;
};

struct PacketRuleSpec {
  std::string name;  // [A-Za-z0-9_-]{1,64}, chosen by the agent (its journal keeps it)
  std::string port;  // a host port of the switch
  bool ingress = true;
  PacketSelector select;
  PickMode mode = PickMode::all;
  uint64_t n = 1, every = 1, burst = 1;
  double probability = 0;
  uint64_t seed = 1;
  PacketAction action = PacketAction::drop;
  int64_t delayNs = 1'000'000;  // delay: how long; reorder: at most this long behind
  int reorderDepth = 1;         // reorder: frames the held one waits behind
  uint64_t maxActions = 1'000'000;
  int64_t lifetimeNs = 10'000'000'000;  // the switch deletes the rule itself after this
  bool capture = true;
  uint64_t captureLimit = 16ull << 20;
};

// Parses an add_packet_rule request's "rule" object; errors name the field and the fix.
Result<PacketRuleSpec> parseRuleSpec(const json& j);

// Whether a frame (at priority PRIO, as the switch classified it) matches SEL's fields.
// BTH is the frame's RoCEv2 view, if it has one. RESEND: whether a RoCE request is a resend
// (PsnTracker), for sel.transmission.
bool selectorMatches(const PacketSelector& sel, const uint8_t* frame, size_t len, int prio,
                     const std::optional<roce::Bth>& bth, bool resend = false);

// The highest PSN each RoCE request flow (requester, responder, destination QP) has sent, as
// one rule saw it: a request whose PSN is not above it is a resend. Bounded: past kMaxFlows
// flows, new ones are not tracked (their frames count as first transmissions).
class PsnTracker {
 public:
  static constexpr size_t kMaxFlows = 4096;
  // Records the request and returns whether it was a resend.
  bool resend(const roce::Bth& b);

 private:
  std::unordered_map<uint64_t, uint32_t> highest_;  // key: hash of the flow
};
// Whether the frame belongs in a capture of a rule with SEL: its protocol (RoCEv2 frames of a
// RoCE rule, the TCP/UDP 5-tuple of others), in both directions.
bool captureMatches(const PacketSelector& sel, const uint8_t* frame, size_t len);

// The pick of a rule's matches: deterministic in the match's index and the seed.
class Picker {
 public:
  explicit Picker(const PacketRuleSpec& s) : spec_(&s) {}
  // Counts one match; true when the rule acts on it.
  bool next();
  uint64_t matched() const { return matched_; }

 private:
  const PacketRuleSpec* spec_;
  uint64_t matched_ = 0;
};

// In-place actions on one frame. ecn_mark: CE on an ECN-capable IPv4 frame (false if it is
// not); corrupt: one payload bit flipped (RoCE: the ICRC then fails; a frame without payload
// has a bit of its ICRC flipped; TCP/UDP: a payload bit, the checksum then fails).
bool markFrame(std::vector<uint8_t>& frame);
bool corruptFrame(std::vector<uint8_t>& frame);

// One frame a rule acted on (result.json's events).
struct PacketEvent {
  int64_t wallNs = 0;
  std::string rule, port, direction, action, flow, opcode;
  int64_t qpn = -1, psn = -1;
};
json toJson(const PacketEvent& e);

// The rules of one switch and the frames they hold (delay, reorder).
class PacketRules {
 public:
  using Emit = std::function<void(int port, bool ingress, std::vector<uint8_t> frame)>;
  static constexpr size_t kMaxRules = 16;
  static constexpr size_t kMaxEvents = 1000;  // per rule; the total counts the rest
  static constexpr size_t kMaxHeld = 4096;    // frames held per rule (delay): past it, sent

  // Whether any rule acts or captures at port PI (either direction): the data path's check.
  bool watches(int pi) const { return pi >= 0 && size_t(pi) < watched_.size() && watched_[size_t(pi)] > 0; }
  bool empty() const { return rules_.empty(); }
  // Whether a rule corrupts TCP frames (their checksum must then be checked before a TAP with
  // offload joins them into one write: TcpCoalescer::setVerify).
  bool corruptsTcp() const;

  // Passes a frame at (PI, INGRESS) through the rules: the frames to forward now go to OUT
  // (none if dropped or held, two if duplicated). WALL converts monotonic time for events.
  void process(int pi, bool ingress, std::vector<uint8_t> frame, int prio, int64_t now, int64_t wallNow,
               std::vector<std::vector<uint8_t>>& out);
  // Frames whose hold ended by NOW go to EMIT (they pass no rule again); expired rules end.
  // Returns when the next held frame is due (INT64_MAX: none).
  int64_t releaseDue(int64_t now, int64_t wallNow, const Emit& emit);
  // When releaseDue() has work: a held frame's time or a rule's expiry (INT64_MAX: none). The
  // switch's loop sets its timer to it, so it must never be left in the past: a deleted rule's
  // expiry would wake the loop every microsecond.
  int64_t nextDue() const { return nextDue_; }

  // Control: add (PI = the port's index, CAPTUREDIR where pcapng files go), delete by name
  // (an unknown name is answered ok with "absent", so revert is idempotent), list.
  json add(const PacketRuleSpec& spec, int pi, const std::string& captureDir, int64_t now);
  json remove(const std::string& name, bool withEvents, int64_t now, int64_t wallNow, const Emit& emit);
  json list(bool withEvents) const;

 private:
  struct Held {
    int64_t due = 0;
    std::vector<uint8_t> frame;
    int behind = 0;  // reorder: frames still to pass first
  };
  struct Rule {
    PacketRuleSpec spec;
    int pi = -1;
    Picker picker;
    uint64_t acted = 0, notApplicable = 0;
    std::vector<PacketEvent> events;
    std::deque<Held> held;
    int64_t expiresAt = 0, addedAt = 0;
    std::unique_ptr<pcapng::Writer> capture;
    PsnTracker psns;
    std::string capturePath;
    explicit Rule(PacketRuleSpec s) : spec(std::move(s)), picker(spec) {}
  };
  json describe(const Rule& r, bool withEvents) const;
  void end(Rule& r, int64_t wallNow, const Emit& emit);
  void recount();
  void recomputeDue();

  std::vector<std::unique_ptr<Rule>> rules_;
  std::vector<int> watched_;  // rules per port index
  int64_t nextDue_ = INT64_MAX;
};

}  // namespace rc::labswitch
