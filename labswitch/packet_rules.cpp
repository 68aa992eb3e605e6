// Packet faults in the lab switch (see packet_rules.hpp).
#include "labswitch/packet_rules.hpp"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "labswitch/switch_offload.hpp"
#include "labswitch/switch_packet.hpp"

namespace rc::labswitch {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool validName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '-' || c == '_'; });
}

// An integer field of J in [LO, HI], or DEFAULT when absent; errors name the field.
Result<int64_t> intField(const json& j, const char* key, int64_t def, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_integer())
    return makeError(std::string("packet rule: '") + key + "' must be an integer");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return makeError(std::string("packet rule: '") + key + "' = " + std::to_string(v) + " is out of range [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

Result<std::optional<uint32_t>> ipField(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()))
    return std::optional<uint32_t>();
  in_addr a{};
  if (!it->is_string() || ::inet_pton(AF_INET, it->get<std::string>().c_str(), &a) != 1)
    return makeError(std::string("packet rule: '") + key + "' must be an IPv4 address such as \"10.0.0.2\"");
  return std::optional<uint32_t>(ntohl(a.s_addr));
}

const char* dirName(bool ingress) { return ingress ? "ingress" : "egress"; }

}  // namespace

const char* protocolName(PacketProtocol p) {
  switch (p) {
    case PacketProtocol::any: return "any";
    case PacketProtocol::roce: return "roce";
    case PacketProtocol::tcp: return "tcp";
    default: return "udp";
  }
}
const char* modeName(PickMode m) {
  switch (m) {
    case PickMode::all: return "all";
    case PickMode::nth: return "nth";
    case PickMode::every: return "every";
    case PickMode::burst: return "burst";
    default: return "probability";
  }
}
const char* actionName(PacketAction a) {
  switch (a) {
    case PacketAction::drop: return "drop";
    case PacketAction::ecnMark: return "ecn_mark";
    case PacketAction::corrupt: return "corrupt";
    case PacketAction::delay: return "delay";
    case PacketAction::duplicate: return "duplicate";
    case PacketAction::none: return "none";
    default: return "reorder";
  }
}

Result<PacketRuleSpec> parseRuleSpec(const json& j) {
  if (!j.is_object()) return makeError("packet rule: 'rule' must be an object");
  static const char* known[] = {"name", "port", "direction", "protocol", "src_ip", "dst_ip", "src_port",
                                "dst_port", "dscp", "priority", "opcode", "qpn", "psn_min", "psn_max",
                                "select", "n", "every", "burst", "probability", "seed", "action", "delay_ns",
                                "reorder_depth", "max_actions", "lifetime_ns", "capture", "capture_limit",
                                "transmission"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }))
      return makeError("packet rule: unknown field '" + it.key() + "'");
  PacketRuleSpec s;
  s.name = j.value("name", "");
  if (!validName(s.name)) return makeError("packet rule: 'name' must be 1-64 letters, digits, '-' or '_'");
  s.port = j.value("port", "");
  if (s.port.empty()) return makeError("packet rule: 'port' must name a host port of the switch");
  std::string dir = j.value("direction", "ingress");
  if (dir != "ingress" && dir != "egress")
    return makeError("packet rule: 'direction' = '" + dir + "' is not ingress (from the host) or egress (to it)");
  s.ingress = dir == "ingress";
  std::string proto = j.value("protocol", "roce");
  if (proto == "roce") s.select.protocol = PacketProtocol::roce;
  else if (proto == "tcp") s.select.protocol = PacketProtocol::tcp;
  else if (proto == "udp") s.select.protocol = PacketProtocol::udp;
  else if (proto == "any") s.select.protocol = PacketProtocol::any;
  else return makeError("packet rule: 'protocol' = '" + proto + "' is not roce, tcp, udp or any");
  auto src = ipField(j, "src_ip");
  auto dst = ipField(j, "dst_ip");
  if (!src) return src.error();
  if (!dst) return dst.error();
  s.select.srcIp = *src;
  s.select.dstIp = *dst;
  struct IntField {
    const char* key;
    int64_t def, lo, hi;
    int64_t* out;
  };
  int64_t srcPort, dstPort, dscp, prio, n, every, burst, seed, delay, depth, maxActions, lifetime, limit;
  IntField ints[] = {
      {"src_port", -1, -1, 65535, &srcPort}, {"dst_port", -1, -1, 65535, &dstPort},
      {"dscp", -1, -1, 63, &dscp}, {"priority", -1, -1, 7, &prio},
      {"qpn", -1, -1, 0xffffff, &s.select.qpn}, {"psn_min", -1, -1, 0xffffff, &s.select.psnMin},
      {"psn_max", -1, -1, 0xffffff, &s.select.psnMax}, {"n", 1, 1, int64_t(1) << 40, &n},
      {"every", 1, 1, int64_t(1) << 40, &every}, {"burst", 1, 1, 1'000'000, &burst},
      {"seed", 1, 0, INT64_MAX, &seed}, {"delay_ns", 1'000'000, 1'000, 10'000'000'000, &delay},
      {"reorder_depth", 1, 1, 1000, &depth}, {"max_actions", 1'000'000, 1, 1'000'000'000, &maxActions},
      {"lifetime_ns", 10'000'000'000, 1'000'000, 3'600'000'000'000, &lifetime},
      {"capture_limit", 16 << 20, 4096, int64_t(1) << 30, &limit},
  };
  for (auto& f : ints) {
    auto v = intField(j, f.key, f.def, f.lo, f.hi);
    if (!v) return v.error();
    *f.out = *v;
  }
  s.select.srcPort = int(srcPort);
  s.select.dstPort = int(dstPort);
  s.select.dscp = int(dscp);
  s.select.priority = int(prio);
  s.n = uint64_t(n);
  s.every = uint64_t(every);
  s.burst = uint64_t(burst);
  s.seed = uint64_t(seed);
  s.delayNs = delay;
  s.reorderDepth = int(depth);
  s.maxActions = uint64_t(maxActions);
  s.lifetimeNs = lifetime;
  s.captureLimit = uint64_t(limit);
  if (s.select.psnMin >= 0 && s.select.psnMax >= 0 && s.select.psnMin > s.select.psnMax)
    return makeError("packet rule: 'psn_min' is above 'psn_max'");
  if (j.contains("opcode") && !j["opcode"].is_null()) {
    auto c = j["opcode"].is_string() ? roce::parseClass(j["opcode"].get<std::string>()) : std::nullopt;
    if (!c)
      return makeError("packet rule: 'opcode' must be one of send, write, read_request, read_response, ack, nak, atomic, cnp");
    s.select.opClass = c;
  }
  std::string tx = j.value("transmission", "any");
  if (tx == "any") s.select.transmission = PacketSelector::Transmission::any;
  else if (tx == "first") s.select.transmission = PacketSelector::Transmission::first;
  else if (tx == "resend") s.select.transmission = PacketSelector::Transmission::resend;
  else return makeError("packet rule: 'transmission' = '" + tx + "' is not any, first or resend");
  bool bthSelected = s.select.opClass || s.select.qpn >= 0 || s.select.psnMin >= 0 || s.select.psnMax >= 0 ||
                     s.select.transmission != PacketSelector::Transmission::any;
  if (bthSelected && s.select.protocol != PacketProtocol::roce)
    return makeError("packet rule: 'opcode', 'qpn', 'psn_min'/'psn_max' and 'transmission' select RoCEv2 frames: set protocol = \"roce\"");
  std::string mode = j.value("select", "all");
  if (mode == "all") s.mode = PickMode::all;
  else if (mode == "nth") s.mode = PickMode::nth;
  else if (mode == "every") s.mode = PickMode::every;
  else if (mode == "burst") s.mode = PickMode::burst;
  else if (mode == "probability") s.mode = PickMode::probability;
  else return makeError("packet rule: 'select' = '" + mode + "' is not all, nth, every, burst or probability");
  if (j.contains("probability")) {
    if (!j["probability"].is_number()) return makeError("packet rule: 'probability' must be a number in [0, 1]");
    s.probability = j["probability"].get<double>();
    if (!(s.probability >= 0 && s.probability <= 1))
      return makeError("packet rule: 'probability' must be a number in [0, 1]");
  }
  std::string action = j.value("action", "");
  static const PacketAction actions[] = {PacketAction::drop,      PacketAction::ecnMark, PacketAction::corrupt,
                                         PacketAction::delay,     PacketAction::duplicate, PacketAction::reorder,
                                         PacketAction::none};
  auto a = std::find_if(std::begin(actions), std::end(actions), [&](PacketAction x) { return action == actionName(x); });
  if (a == std::end(actions))
    return makeError("packet rule: 'action' = '" + action +
                     "' is not drop, ecn_mark, corrupt, delay, duplicate, reorder or none (capture only)");
  s.action = *a;
  if (s.action == PacketAction::corrupt && s.select.protocol == PacketProtocol::any)
    return makeError("packet rule: 'corrupt' needs protocol roce, tcp or udp (the frame's checksum it breaks)");
  if (j.contains("capture")) {
    if (!j["capture"].is_boolean()) return makeError("packet rule: 'capture' must be true or false");
    s.capture = j["capture"].get<bool>();
  }
  return s;
}

bool PsnTracker::resend(const roce::Bth& b) {
  uint64_t key = (uint64_t(b.flow.srcIp) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(b.flow.dstIp) << 24) ^ b.destQp;
  auto it = highest_.find(key);
  if (it == highest_.end()) {
    if (highest_.size() < kMaxFlows) highest_.emplace(key, b.psn);
    return false;
  }
  if (roce::psnDiff(b.psn, it->second) > 0) {
    it->second = b.psn;
    return false;
  }
  return true;
}

bool selectorMatches(const PacketSelector& sel, const uint8_t* f, size_t len, int prio,
                     const std::optional<roce::Bth>& bth, bool resend) {
  if (sel.priority >= 0 && prio != sel.priority) return false;
  auto fl = bth ? std::optional<roce::Flow>(bth->flow) : roce::flowOf(f, len);
  if (!fl) return false;
  switch (sel.protocol) {
    case PacketProtocol::roce: if (!bth) return false; break;
    case PacketProtocol::tcp: if (fl->protocol != 6) return false; break;
    case PacketProtocol::udp: if (fl->protocol != 17) return false; break;
    case PacketProtocol::any: break;
  }
  if (sel.srcIp && fl->srcIp != *sel.srcIp) return false;
  if (sel.dstIp && fl->dstIp != *sel.dstIp) return false;
  if (sel.srcPort >= 0 && fl->srcPort != sel.srcPort) return false;
  if (sel.dstPort >= 0 && fl->dstPort != sel.dstPort) return false;
  if (sel.dscp >= 0 && fl->dscp != sel.dscp) return false;
  if (sel.protocol == PacketProtocol::roce) {
    if (sel.opClass && bth->cls != *sel.opClass) return false;
    if (sel.qpn >= 0 && bth->destQp != uint32_t(sel.qpn)) return false;
    if (sel.psnMin >= 0 && bth->psn < uint32_t(sel.psnMin)) return false;
    if (sel.psnMax >= 0 && bth->psn > uint32_t(sel.psnMax)) return false;
    if (sel.transmission == PacketSelector::Transmission::first && resend) return false;
    if (sel.transmission == PacketSelector::Transmission::resend && !resend) return false;
  }
  return true;
}

bool captureMatches(const PacketSelector& sel, const uint8_t* f, size_t len) {
  auto fl = roce::flowOf(f, len);
  if (!fl) return false;
  switch (sel.protocol) {
    case PacketProtocol::roce: return fl->protocol == 17 && fl->dstPort == roce::kUdpPort;
    case PacketProtocol::tcp: return fl->protocol == 6;
    case PacketProtocol::udp: return fl->protocol == 17;
    default: return true;
  }
}

bool Picker::next() {
  uint64_t i = ++matched_;  // 1-based
  const auto& s = *spec_;
  switch (s.mode) {
    case PickMode::all: return true;
    case PickMode::nth: return i == s.n;
    case PickMode::every: return i % s.every == 0;
    case PickMode::burst: return i >= s.n && i < s.n + s.burst;
    case PickMode::probability: {
      // A uniform draw in [0, 1) from (seed, index): the same matches give the same picks.
      double u = double(splitmix64(s.seed * 0x2545f4914f6cdd1dull + i) >> 11) * 0x1.0p-53;
      return u < s.probability;
    }
  }
  return false;
}

bool markFrame(std::vector<uint8_t>& frame) { return markCe(frame.data(), frame.size()); }

bool corruptFrame(std::vector<uint8_t>& frame) {
  if (auto b = roce::parse(frame.data(), frame.size())) {
    size_t at = b->payloadLength > 0 ? b->payloadOffset + b->payloadLength / 2 : b->icrcOffset;
    frame[at] ^= 0x01;
    return true;
  }
  auto fl = roce::flowOf(frame.data(), frame.size());
  if (!fl || (fl->protocol != 6 && fl->protocol != 17)) return false;
  size_t hdr = fl->protocol == 17 ? 8 : size_t(frame[fl->l4Offset + 12] >> 4) * 4;
  size_t end = std::min(frame.size(), fl->ipOffset + fl->ipTotalLength);
  size_t start = fl->l4Offset + hdr;
  if (start >= end) return false;
  if (fl->protocol == 6) completeTcpChecksum(frame.data(), frame.size());  // wrong against a whole checksum
  frame[start + (end - start) / 2] ^= 0x01;
  // A TCP checksum that now reads as partial (its complete value happened to be the pseudo-
  // header's sum: 1 in 65,536) would have the host finish it and take the frame: break the
  // checksum field too, by a change the payload's cannot cancel.
  if (fl->protocol == 6 && tcpChecksumPartial(frame.data(), frame.size())) frame[fl->l4Offset + 16] ^= 0x80;
  return true;
}

bool PacketRules::corruptsTcp() const {
  for (const auto& r : rules_)
    if (r->spec.action == PacketAction::corrupt && r->spec.select.protocol == PacketProtocol::tcp) return true;
  return false;
}

json toJson(const PacketEvent& e) {
  json j = {{"wall_ns", e.wallNs}, {"rule", e.rule}, {"port", e.port}, {"direction", e.direction},
            {"action", e.action}, {"flow", e.flow}};
  if (!e.opcode.empty()) j["opcode"] = e.opcode;
  if (e.qpn >= 0) j["qpn"] = e.qpn;
  if (e.psn >= 0) j["psn"] = e.psn;
  return j;
}

void PacketRules::process(int pi, bool ingress, std::vector<uint8_t> frame, int prio, int64_t now,
                          int64_t wallNow, std::vector<std::vector<uint8_t>>& out) {
  std::optional<roce::Bth> bth;
  // What a rule sees, captures or corrupts is the wire frame with its checksum whole (a
  // segment cut from a host's super-frame arrives partial: switch_offload.hpp).
  completeTcpChecksum(frame.data(), frame.size());
  bool parsed = false;
  auto view = [&]() -> const std::optional<roce::Bth>& {
    if (!parsed) {
      bth = roce::parse(frame.data(), frame.size());
      parsed = true;
    }
    return bth;
  };
  bool acted = false;
  bool forward = true, twice = false;
  std::vector<std::vector<uint8_t>> after;  // reordered frames released behind this one
  for (auto& rp : rules_) {
    Rule& r = *rp;
    if (r.pi != pi) continue;
    bool inCapture = r.capture && captureMatches(r.spec.select, frame.data(), frame.size());
    std::string comment;
    bool sameDir = r.spec.ingress == ingress;
    // Every request of the rule's direction updates its PSN record, matched or not.
    bool resend = false;
    if (sameDir && !frame.empty() && r.spec.select.transmission != PacketSelector::Transmission::any)
      if (const auto& b = view(); b && roce::isRequest(b->opcode)) resend = r.psns.resend(*b);
    bool matches = sameDir && selectorMatches(r.spec.select, frame.data(), frame.size(), prio, view(), resend);
    // Frames this rule holds for reorder wait behind the next matches.
    if (matches && !r.held.empty() && r.spec.action == PacketAction::reorder) {
      for (auto& h : r.held) h.behind--;
      while (!r.held.empty() && r.held.front().behind <= 0) {
        after.push_back(std::move(r.held.front().frame));
        r.held.pop_front();
      }
    }
    if (matches && r.spec.action == PacketAction::none) r.picker.next();  // counted, never acted on
    if (matches && !acted && r.spec.action != PacketAction::none && r.acted < r.spec.maxActions && r.picker.next()) {
      acted = true;
      r.acted++;
      const char* what = actionName(r.spec.action);
      bool applied = true;
      switch (r.spec.action) {
        case PacketAction::drop: forward = false; break;
        case PacketAction::ecnMark: applied = markFrame(frame); break;
        case PacketAction::corrupt: applied = corruptFrame(frame); break;
        case PacketAction::duplicate: twice = true; break;
        case PacketAction::none: break;
        case PacketAction::delay:
        case PacketAction::reorder:
          if (r.held.size() >= kMaxHeld) {
            applied = false;
            break;
          }
          forward = false;
          break;
      }
      if (!applied) {
        r.notApplicable++;
        r.acted--;
        acted = false;
        forward = true;
      } else {
        if (r.events.size() < kMaxEvents) {
          PacketEvent e;
          e.wallNs = wallNow;
          e.rule = r.spec.name;
          e.port = r.spec.port;
          e.direction = dirName(ingress);
          e.action = what;
          if (auto fl = roce::flowOf(frame.data(), frame.size())) e.flow = roce::flowText(*fl);
          if (const auto& b = view()) {
            e.opcode = roce::opcodeName(b->opcode);
            e.qpn = b->destQp;
            e.psn = b->psn;
          }
          r.events.push_back(std::move(e));
        }
        comment = std::string("rdmachaos rule ") + r.spec.name + ": " + what;
      }
    }
    if (inCapture)
      r.capture->write(wallNow, frame.data(), frame.size(),
                       ingress ? pcapng::Direction::inbound : pcapng::Direction::outbound, comment);
    if (!comment.empty() && !forward && (r.spec.action == PacketAction::delay || r.spec.action == PacketAction::reorder)) {
      Held h;
      h.due = now + r.spec.delayNs;
      h.behind = r.spec.action == PacketAction::reorder ? r.spec.reorderDepth : 0;
      h.frame = std::move(frame);
      r.held.push_back(std::move(h));
      nextDue_ = std::min(nextDue_, r.held.back().due);
      frame.clear();
    }
  }
  if (forward) {
    if (twice) out.push_back(frame);
    out.push_back(std::move(frame));
  }
  for (auto& f : after) out.push_back(std::move(f));
}

int64_t PacketRules::releaseDue(int64_t now, int64_t wallNow, const Emit& emit) {
  bool expired = false;
  for (auto& rp : rules_) {
    Rule& r = *rp;
    if (now >= r.expiresAt) {
      expired = true;
      continue;
    }
    // Held frames leave in arrival order once due (a delay is the same for each).
    while (!r.held.empty() && r.held.front().due <= now) {
      auto f = std::move(r.held.front().frame);
      r.held.pop_front();
      if (r.capture && captureMatches(r.spec.select, f.data(), f.size()))
        r.capture->write(wallNow, f.data(), f.size(),
                         r.spec.ingress ? pcapng::Direction::inbound : pcapng::Direction::outbound,
                         "rdmachaos rule " + r.spec.name + ": released after its hold");
      emit(r.pi, r.spec.ingress, std::move(f));
    }
  }
  if (expired) {
    for (auto it = rules_.begin(); it != rules_.end();) {
      if (now >= (*it)->expiresAt) {
        end(**it, wallNow, emit);
        it = rules_.erase(it);
      } else {
        ++it;
      }
    }
    recount();
  }
  recomputeDue();
  return nextDue_;
}

void PacketRules::recomputeDue() {
  nextDue_ = INT64_MAX;
  for (auto& rp : rules_) {
    if (!rp->held.empty()) nextDue_ = std::min(nextDue_, rp->held.front().due);
    nextDue_ = std::min(nextDue_, rp->expiresAt);
  }
}

void PacketRules::end(Rule& r, int64_t wallNow, const Emit& emit) {
  for (auto& h : r.held) emit(r.pi, r.spec.ingress, std::move(h.frame));
  r.held.clear();
  (void)wallNow;
  if (r.capture) r.capture->close();
}

void PacketRules::recount() {
  std::fill(watched_.begin(), watched_.end(), 0);
  for (auto& rp : rules_) {
    if (size_t(rp->pi) >= watched_.size()) watched_.resize(size_t(rp->pi) + 1, 0);
    watched_[size_t(rp->pi)]++;
  }
}

json PacketRules::add(const PacketRuleSpec& spec, int pi, const std::string& captureDir, int64_t now) {
  for (auto& rp : rules_)
    if (rp->spec.name == spec.name)
      return {{"ok", false}, {"error", "a packet rule named '" + spec.name + "' exists (del_packet_rule it first)"}};
  if (rules_.size() >= kMaxRules)
    return {{"ok", false}, {"error", "at most " + std::to_string(kMaxRules) + " packet rules (del_packet_rule one first)"}};
  auto r = std::make_unique<Rule>(spec);
  r->picker = Picker(r->spec);
  r->pi = pi;
  r->addedAt = now;
  r->expiresAt = now + spec.lifetimeNs;
  if (spec.capture) {
    if (::mkdir(captureDir.c_str(), 0755) != 0 && errno != EEXIST)
      return {{"ok", false}, {"error", "cannot create the capture directory '" + captureDir + "': " + std::strerror(errno)}};
    r->capturePath = captureDir + "/packet-" + spec.name + ".pcapng";
    r->capture = std::make_unique<pcapng::Writer>();
    if (auto ok = r->capture->open(r->capturePath, spec.port, 128, spec.captureLimit, "rdmachaos-labswitch"); !ok)
      return {{"ok", false}, {"error", ok.error().message}};
  }
  json d = describe(*r, false);
  rules_.push_back(std::move(r));
  recount();
  nextDue_ = std::min(nextDue_, rules_.back()->expiresAt);
  return {{"ok", true}, {"rule", d}};
}

json PacketRules::remove(const std::string& name, bool withEvents, int64_t now, int64_t wallNow, const Emit& emit) {
  (void)now;
  auto it = std::find_if(rules_.begin(), rules_.end(), [&](const auto& r) { return r->spec.name == name; });
  if (it == rules_.end()) return {{"ok", true}, {"absent", true}};
  end(**it, wallNow, emit);
  json d = describe(**it, withEvents);
  rules_.erase(it);
  recount();
  recomputeDue();
  return {{"ok", true}, {"rule", d}};
}

json PacketRules::list(bool withEvents) const {
  json out = json::array();
  for (const auto& r : rules_) out.push_back(describe(*r, withEvents));
  return {{"ok", true}, {"rules", out}};
}

json PacketRules::describe(const Rule& r, bool withEvents) const {
  const auto& s = r.spec;
  json d = {{"name", s.name}, {"port", s.port}, {"direction", dirName(s.ingress)},
            {"protocol", protocolName(s.select.protocol)}, {"select", modeName(s.mode)},
            {"action", actionName(s.action)}, {"matched", r.picker.matched()}, {"acted", r.acted},
            {"not_applicable", r.notApplicable}, {"held", r.held.size()}};
  if (r.capture) {
    d["capture"] = r.capturePath;
    d["capture_frames"] = r.capture->frames();
    d["capture_skipped"] = r.capture->skipped();
  }
  if (withEvents) {
    json ev = json::array();
    for (const auto& e : r.events) ev.push_back(toJson(e));
    d["events"] = ev;
    d["events_total"] = r.acted;
  }
  return d;
}

}  // namespace rc::labswitch
