// The go-back-N oracle: from a lab switch capture (pcapng, docs/faults/packet.md), what a
// RoCE transport did about each frame a packet rule dropped, corrupted, delayed or reordered,
// with times, and whether that is what the InfiniBand specification asks of a reliable
// connection (IBA 9.7: go-back-N). The questions and latencies are Lumina's (SIGCOMM'23):
//   NAK generation  the acted-on frame at the switch to the responder's NAK at the switch;
//   NAK reaction    the NAK to the requester's first retransmission;
//   timeout wait    with no NAK, the acted-on frame to the retransmission.
// Verdict rules (each named in the report; a violation is a finding about the transport,
// not an error of rdmachaos):
//   one_nak_outstanding            one sequence-error NAK per missing PSN, until an ACK passes it
//                                  (a NAK naming a later PSN is a new gap, counted apart)
//   nak_names_first_missing_psn    the NAK names the first PSN the rule took away
//   retransmission_restarts_at_nak the requester's retransmission starts at the NAK's PSN or
//                                  before it (its oldest unacknowledged PSN, where a retry timer
//                                  that fired while the NAK was on its way goes back: duplicates);
//                                  when its timer fired first (no NAK at the switch yet), at the
//                                  taken PSN or before it. Resuming after it skips a PSN: violated
//   acted_frames_delivered         every taken PSN is sent again, released, or acknowledged (a
//                                  resend the switch took may have reached the responder before)
// A request flow (requester -> responder, by addresses and destination QP) is paired with the
// response flow whose ACK PSNs fall in its PSN range (one QP per host pair pairs trivially).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/pcapng.hpp"

namespace rc::oracle {

using json = nlohmann::json;

enum class Outcome { pass, fail, notApplicable };

struct RuleVerdict {
  std::string rule;  // one of the four names above
  Outcome outcome = Outcome::notApplicable;
  std::string detail;
};

// One loss episode: the frames a rule took away before the requester went back.
struct Episode {
  std::string action;       // drop, corrupt, delay, reorder
  int64_t timeNs = 0;       // the first acted-on frame at the switch
  uint32_t firstPsn = 0;    // the first PSN taken away
  std::vector<uint32_t> psns;
  std::string opcode;
  bool onResend = false;    // the first taken frame was itself a resend (its PSN sent before)
  int naks = 0;                       // sequence-error NAKs naming the first NAK's PSN
  int otherNaks = 0;                  // ... naming other PSNs (new gaps), until an ACK passes
  std::optional<uint32_t> nakPsn;     // the first one's PSN
  int64_t nakTimeNs = -1;
  int64_t nakGenerationNs = -1, nakReactionNs = -1, timeoutWaitNs = -1;
  std::optional<uint32_t> retransmitPsn;
  int64_t retransmitTimeNs = -1;
  bool byTimeout = false;             // retransmitted without a NAK (or before it)
  std::optional<uint32_t> ackedPsn;   // the highest PSN an ACK named before the retransmission
  bool delivered = false;             // every taken PSN seen again
  uint64_t resentFrames = 0, resentBytes = 0, duplicates = 0;
  std::vector<RuleVerdict> verdicts;
};

struct QpFlow {
  std::string requester, responder;  // IPv4 addresses
  uint32_t qpn = 0;                  // the responder's QP (BTH destination QP of requests)
  std::optional<uint32_t> ackQpn;    // the requester's QP (of the paired responses)
  uint64_t requests = 0, responses = 0, naks = 0;
  std::vector<Episode> episodes;
};

struct Report {
  std::vector<QpFlow> flows;
  std::vector<std::string> findings;  // each violated rule, in words
  uint64_t frames = 0, actedFrames = 0;
  bool pass() const { return findings.empty(); }
};

// Analyses RECORDS (a capture's frames in time order; acted-on frames carry the switch's
// "rdmachaos rule NAME: ACTION" comment).
Report analyse(const std::vector<pcapng::Record>& records);
// The rule acted_frames_delivered allows a frame that never came again when its QP errored
// out instead; the capture cannot tell, the job can. With EVIDENCE (what the job reported, e.g.
// "the job re-created its QPs 2 times"), that rule's failures pass, saying so; the findings
// are collected again. Empty evidence changes nothing.
void acceptQpErrors(Report& r, const std::string& evidence);
// Rebuilds r.findings from the verdicts.
void collectFindings(Report& r);
json toJson(const Report& r);
// The report's lines: per QP and episode what happened, the verdicts, then the findings.
std::string toText(const Report& r);
const char* outcomeName(Outcome o);

}  // namespace rc::oracle
