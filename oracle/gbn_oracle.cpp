// The go-back-N oracle (see gbn_oracle.hpp).
#include "oracle/gbn_oracle.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "common/roce.hpp"

namespace rc::oracle {
namespace {

using roce::psnDiff;

struct Frame {
  size_t index = 0;
  int64_t timeNs = 0;
  roce::Bth bth;
  uint32_t length = 0;
  std::string action;  // "" / drop / corrupt / delay / reorder / ecn_mark / duplicate
  bool released = false;  // a held frame the switch let go
};

// "rdmachaos rule NAME: ACTION" -> ACTION; "...: released after its hold" -> released.
void readComment(const std::string& c, Frame& f) {
  const std::string tag = "rdmachaos rule ";
  if (c.rfind(tag, 0) != 0) return;
  auto colon = c.find(": ", tag.size());
  if (colon == std::string::npos) return;
  std::string what = c.substr(colon + 2);
  if (what.rfind("released", 0) == 0)
    f.released = true;
  else
    f.action = what;
}

bool takesAway(const std::string& action) {
  return action == "drop" || action == "corrupt" || action == "delay" || action == "reorder";
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

std::string ms(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", double(ns) / 1e6);
  return b;
}

using Key = std::tuple<uint32_t, uint32_t, uint32_t>;  // src ip, dst ip, destination QP

void judge(Episode& e) {
  RuleVerdict one{"one_nak_outstanding", Outcome::notApplicable, "no sequence-error NAK"};
  std::string others = e.otherNaks ? " (and " + std::to_string(e.otherNaks) + " naming later PSNs: new gaps)" : "";
  if (e.naks == 1) one = {one.rule, Outcome::pass, "one NAK" + others};
  if (e.naks > 1)
    one = {one.rule, Outcome::fail,
           std::to_string(e.naks) + " NAKs naming PSN " + std::to_string(*e.nakPsn) + " before an ACK passed it" + others};
  RuleVerdict names{"nak_names_first_missing_psn", Outcome::notApplicable, "no NAK"};
  if (e.nakPsn)
    names = *e.nakPsn == e.firstPsn
                ? RuleVerdict{names.rule, Outcome::pass, "NAK names PSN " + std::to_string(*e.nakPsn)}
                : RuleVerdict{names.rule, Outcome::fail,
                              "NAK names PSN " + std::to_string(*e.nakPsn) + ", the first missing was " +
                                  std::to_string(e.firstPsn)};
  RuleVerdict restart{"retransmission_restarts_at_nak", Outcome::notApplicable,
                      e.nakPsn ? "no retransmission" : "no NAK"};
  auto psnText = [](uint32_t p) { return std::to_string(p); };
  if (e.byTimeout && e.retransmitPsn) {
    // The retransmission timer fired before a NAK came: the requester goes back to its oldest
    // unacknowledged PSN, which is the taken one or before it (an ACK still in flight to the
    // requester makes it go back further: duplicates, allowed). Resuming after it is the violation.
    std::string acked = e.ackedPsn ? " (acknowledged at the switch up to PSN " + psnText(*e.ackedPsn) + ")" : "";
    restart = psnDiff(*e.retransmitPsn, e.firstPsn) <= 0
                  ? RuleVerdict{restart.rule, Outcome::pass,
                                "timer fired before any NAK: went back to PSN " + psnText(*e.retransmitPsn) +
                                    ", at or before the taken PSN " + psnText(e.firstPsn) + acked}
                  : RuleVerdict{restart.rule, Outcome::fail,
                                "timeout retransmission started at PSN " + psnText(*e.retransmitPsn) +
                                    ", after the taken PSN " + psnText(e.firstPsn) + acked +
                                    " (go-back-N violated: a timeout goes back to the oldest unacknowledged PSN)"};
  } else if (e.nakPsn && e.retransmitPsn) {
    int32_t before = psnDiff(*e.nakPsn, *e.retransmitPsn);
    if (before == 0) {
      restart = {restart.rule, Outcome::pass, "went back to PSN " + psnText(*e.retransmitPsn)};
    } else if (before > 0) {
      // Further back than the NAK asked: duplicates, nothing skipped. A requester whose retry
      // timer fires while the NAK is still on its way goes back to its oldest unacknowledged
      // PSN (rxe: the completer's PSN, which only the NAK would have moved on), and the NAK then
      // arrives at the switch first. Allowed like the timer's own path; the count says how far.
      std::string acked = e.ackedPsn ? ", acknowledged at the switch up to PSN " + psnText(*e.ackedPsn) : "";
      restart = {restart.rule, Outcome::pass,
                 "went back to PSN " + psnText(*e.retransmitPsn) + ", " + std::to_string(before) +
                     " before the NAK's PSN " + psnText(*e.nakPsn) + " (" + ms(e.nakReactionNs) + " after the NAK, " +
                     ms(e.retransmitTimeNs - e.timeNs) + " after the taken frame" + acked +
                     "): its oldest unacknowledged PSN, as a retry timer that fired before the NAK reached the "
                     "requester goes back; duplicates, nothing skipped"};
    } else {
      restart = {restart.rule, Outcome::fail,
                 "retransmission started at PSN " + psnText(*e.retransmitPsn) + ", after the NAK's PSN " +
                     psnText(*e.nakPsn) + " (go-back-N violated: the NAK'd PSN was skipped)"};
    }
  } else if (e.nakPsn && (e.action == "drop" || e.action == "corrupt")) {
    restart = {restart.rule, Outcome::fail, "a NAK but no retransmission in the capture"};
  }
  RuleVerdict delivered{"acted_frames_delivered", Outcome::pass, "every taken PSN was sent again, released or acknowledged"};
  if (!e.delivered)
    delivered = {delivered.rule, Outcome::fail,
                 "PSN " + std::to_string(e.firstPsn) + " (or a later taken one) was neither sent again nor acknowledged in the capture"};
  e.verdicts = {one, names, restart, delivered};
}

// Pairs each response flow with the request flow in the other direction whose PSNs hold its
// ACKs: request key -> response key.
std::map<Key, Key> pairFlows(const std::map<Key, std::vector<Frame>>& requests,
                             const std::map<Key, std::vector<Frame>>& responses) {
  std::map<Key, Key> pairOf;
  for (const auto& [rk, rs] : responses) {
    const Key* best = nullptr;
    size_t bestHits = 0;
    for (const auto& [qk, qs] : requests) {
      if (std::get<0>(qk) != std::get<1>(rk) || std::get<1>(qk) != std::get<0>(rk)) continue;
      uint32_t lo = qs.front().bth.psn, hi = lo;
      for (const auto& f : qs) {
        if (psnDiff(f.bth.psn, lo) < 0) lo = f.bth.psn;
        if (psnDiff(f.bth.psn, hi) > 0) hi = f.bth.psn;
      }
      size_t hits = 0;
      for (const auto& a : rs)
        if (psnDiff(a.bth.psn, lo) >= -1 && psnDiff(a.bth.psn, hi) <= 1) hits++;
      if (!best || hits > bestHits) {
        best = &qk;
        bestHits = hits;
      }
    }
    if (best && bestHits > 0 && !pairOf.count(*best)) pairOf[*best] = rk;
  }
  return pairOf;
}

}  // namespace

const char* outcomeName(Outcome o) {
  switch (o) {
    case Outcome::pass: return "pass";
    case Outcome::fail: return "FAIL";
    default: return "n/a";
  }
}

Report analyse(const std::vector<pcapng::Record>& records) {
  Report rep;
  std::map<Key, std::vector<Frame>> requests, responses;
  for (size_t i = 0; i < records.size(); i++) {
    const auto& r = records[i];
    rep.frames++;
    auto b = roce::parse(r.data.data(), r.data.size());
    if (!b) continue;
    Frame f;
    f.index = i;
    f.timeNs = r.timeNs;
    f.bth = *b;
    f.length = r.originalLength;
    readComment(r.comment, f);
    if (!f.action.empty()) rep.actedFrames++;
    Key k{b->flow.srcIp, b->flow.dstIp, b->destQp};
    if (roce::isRequest(b->opcode))
      requests[k].push_back(std::move(f));
    else if (b->cls == roce::OpClass::ack || b->cls == roce::OpClass::nak || b->cls == roce::OpClass::readResponse)
      responses[k].push_back(std::move(f));
  }
  std::map<Key, Key> pairOf = pairFlows(requests, responses);
  for (auto& [qk, qs] : requests) {
    QpFlow flow;
    flow.requester = roce::ipText(std::get<0>(qk));
    flow.responder = roce::ipText(std::get<1>(qk));
    flow.qpn = std::get<2>(qk);
    flow.requests = qs.size();
    std::vector<const Frame*> acks;
    if (auto p = pairOf.find(qk); p != pairOf.end()) {
      flow.ackQpn = std::get<2>(p->second);
      for (const auto& a : responses[p->second]) acks.push_back(&a);
      flow.responses = acks.size();
    }
    // Merge requests and responses in capture order.
    struct Step {
      const Frame* f;
      bool request;
    };
    std::vector<Step> steps;
    for (const auto& f : qs) steps.push_back({&f, true});
    for (const auto* a : acks) steps.push_back({a, false});
    std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.f->index < b.f->index; });

    std::optional<uint32_t> highest;
    std::optional<uint32_t> ackedUpTo;  // the highest PSN an ACK named so far
    Episode* open = nullptr;         // taking frames, or waiting for the requester to go back
    bool resending = false;          // open's retransmission is under way
    uint32_t resendUpTo = 0;         // the highest PSN sent before it went back
    bool nakCounting = false;        // until an ACK passes the episode's first PSN
    std::set<uint32_t> missing;      // open's taken PSNs not yet seen again
    auto close = [&]() {
      if (!open) return;
      open->delivered = missing.empty();
      judge(*open);
      open = nullptr;
      resending = false;
      nakCounting = false;
      missing.clear();
    };
    for (const auto& s : steps) {
      const Frame& f = *s.f;
      uint32_t psn = f.bth.psn;
      if (!s.request) {
        if (f.bth.nakCode() >= 0) flow.naks++;
        if (!open) continue;
        if (f.bth.nakCode() == 0 && nakCounting) {
          // A NAK naming another PSN is a new gap (in-flight frames after the responder moved
          // on), not the same loss NAKed again.
          if (!open->nakPsn) {
            open->nakPsn = psn;
            open->nakTimeNs = f.timeNs;
            open->nakGenerationNs = f.timeNs - open->timeNs;
          }
          if (psn == *open->nakPsn) open->naks++;
          else open->otherNaks++;
        } else if (f.bth.cls == roce::OpClass::ack && psnDiff(psn, open->firstPsn) >= 0) {
          nakCounting = false;
        }
        // An ACK acknowledges every PSN up to its own: the responder has them.
        if (f.bth.cls == roce::OpClass::ack && (!ackedUpTo || psnDiff(psn, *ackedUpTo) > 0)) ackedUpTo = psn;
        if (f.bth.cls == roce::OpClass::ack)
          for (auto it = missing.begin(); it != missing.end();)
            it = psnDiff(psn, *it) >= 0 ? missing.erase(it) : std::next(it);
        continue;
      }
      if (takesAway(f.action)) {
        if (open && resending) close();
        if (!open) {
          flow.episodes.push_back(Episode{});
          open = &flow.episodes.back();
          open->action = f.action;
          open->timeNs = f.timeNs;
          open->firstPsn = psn;
          open->opcode = roce::opcodeName(f.bth.opcode);
          open->onResend = highest && psnDiff(psn, *highest) <= 0;
          nakCounting = true;
        }
        open->psns.push_back(psn);
        missing.insert(psn);
        if (!highest || psnDiff(psn, *highest) > 0) highest = psn;
        continue;
      }
      if (open) missing.erase(psn);
      if (f.released) continue;  // a held frame let go: not the requester's doing
      // The requester went back: below the highest PSN sent (for a loss in a resend round,
      // back to the taken PSN or before it).
      bool back = open && highest &&
                  (open->onResend ? psnDiff(psn, open->firstPsn) <= 0 : psnDiff(psn, *highest) <= 0);
      if (open && open->onResend && resending && psnDiff(psn, *highest) <= 0) back = true;
      if (back) {
        if (!resending) {
          resending = true;
          resendUpTo = *highest;
          open->retransmitPsn = psn;
          open->retransmitTimeNs = f.timeNs;
          open->byTimeout = !open->nakPsn;
          open->ackedPsn = ackedUpTo;
          if (open->nakPsn) open->nakReactionNs = f.timeNs - open->nakTimeNs;
          else open->timeoutWaitNs = f.timeNs - open->timeNs;
        }
        open->resentFrames++;
        open->resentBytes += f.length;
        if (psnDiff(psn, open->firstPsn) < 0) open->duplicates++;
        continue;
      }
      if (!highest || psnDiff(psn, *highest) > 0) highest = psn;
      if (open && resending && psnDiff(psn, resendUpTo) > 0) close();
    }
    close();
    rep.flows.push_back(std::move(flow));
  }
  collectFindings(rep);
  return rep;
}

void collectFindings(Report& rep) {
  rep.findings.clear();
  for (const auto& fl : rep.flows)
    for (const auto& e : fl.episodes)
      for (const auto& v : e.verdicts)
        if (v.outcome == Outcome::fail)
          rep.findings.push_back("QP " + hex(fl.qpn) + " (" + fl.requester + " > " + fl.responder + "), " + e.action +
                                 " of PSN " + std::to_string(e.firstPsn) + ": " + v.rule + ": " + v.detail);
}

void acceptQpErrors(Report& rep, const std::string& evidence) {
  if (evidence.empty()) return;
  for (auto& fl : rep.flows)
    for (auto& e : fl.episodes)
      for (auto& v : e.verdicts)
        if (v.rule == "acted_frames_delivered" && v.outcome == Outcome::fail) {
          v.outcome = Outcome::pass;
          v.detail = "not delivered in the capture, and the QP errored out: " + evidence;
        }
  collectFindings(rep);
}

json toJson(const Report& r) {
  json flows = json::array();
  for (const auto& fl : r.flows) {
    json eps = json::array();
    for (const auto& e : fl.episodes) {
      json v = json::array();
      for (const auto& x : e.verdicts) v.push_back({{"rule", x.rule}, {"outcome", outcomeName(x.outcome)}, {"detail", x.detail}});
      auto opt = [](int64_t ns) { return ns < 0 ? json(nullptr) : json(ns); };
      eps.push_back({{"action", e.action}, {"time_ns", e.timeNs}, {"first_psn", e.firstPsn}, {"psns", e.psns},
                     {"opcode", e.opcode}, {"on_resend", e.onResend}, {"naks", e.naks}, {"other_naks", e.otherNaks},
                     {"nak_psn", e.nakPsn ? json(*e.nakPsn) : json(nullptr)},
                     {"retransmit_psn", e.retransmitPsn ? json(*e.retransmitPsn) : json(nullptr)},
                     {"by_timeout", e.byTimeout}, {"acked_psn", e.ackedPsn ? json(*e.ackedPsn) : json()}, {"delivered", e.delivered},
                     {"nak_generation_ns", opt(e.nakGenerationNs)}, {"nak_reaction_ns", opt(e.nakReactionNs)},
                     {"timeout_wait_ns", opt(e.timeoutWaitNs)}, {"resent_frames", e.resentFrames},
                     {"resent_bytes", e.resentBytes}, {"duplicates", e.duplicates}, {"verdicts", v}});
    }
    flows.push_back({{"requester", fl.requester}, {"responder", fl.responder}, {"qpn", fl.qpn},
                     {"ack_qpn", fl.ackQpn ? json(*fl.ackQpn) : json(nullptr)}, {"requests", fl.requests},
                     {"responses", fl.responses}, {"naks", fl.naks}, {"episodes", eps}});
  }
  return {{"frames", r.frames}, {"acted_frames", r.actedFrames}, {"flows", flows}, {"findings", r.findings},
          {"pass", r.pass()}};
}

std::string toText(const Report& r) {
  std::string out = "go-back-N oracle: " + std::to_string(r.frames) + " frames, " + std::to_string(r.actedFrames) +
                    " acted on\n";
  for (const auto& fl : r.flows) {
    if (fl.episodes.empty()) continue;
    out += "  QP " + hex(fl.qpn) + " " + fl.requester + " > " + fl.responder + ": " + std::to_string(fl.requests) +
           " requests, " + std::to_string(fl.naks) + " NAKs\n";
    for (const auto& e : fl.episodes) {
      out += "    " + e.action + " " + e.opcode + " PSN " + std::to_string(e.firstPsn);
      if (e.psns.size() > 1) out += " (+" + std::to_string(e.psns.size() - 1) + ")";
      if (e.onResend) out += " (itself a resend)";
      out += ": ";
      if (e.nakPsn) out += "NAK PSN " + std::to_string(*e.nakPsn) + " after " + ms(e.nakGenerationNs);
      else out += "no NAK";
      if (e.retransmitPsn) {
        out += ", resent from PSN " + std::to_string(*e.retransmitPsn) + " ";
        out += e.byTimeout ? "by timeout after " + ms(e.timeoutWaitNs) : ms(e.nakReactionNs) + " after the NAK";
        out += ", " + std::to_string(e.resentFrames) + " frames (" + std::to_string(e.resentBytes) + " B) again";
      } else {
        out += ", no retransmission";
      }
      out += "\n";
      for (const auto& v : e.verdicts)
        out += std::string("      ") + outcomeName(v.outcome) + "  " + v.rule + ": " + v.detail + "\n";
    }
  }
  for (const auto& f : r.findings) out += "  finding: " + f + "\n";
  if (r.actedFrames == 0) out += "  (no frame in the capture was acted on)\n";
  return out;
}

}  // namespace rc::oracle
