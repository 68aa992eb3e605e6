// Protocol framing and strict request parsing.
#include "common/protocol.hpp"

#include <cctype>

#include <tuple>

#include <cstdio>
#include <random>
#include <set>

namespace rc::proto {
namespace {

// Checks that an object has only the allowed keys (besides the envelope's).
Result<void> onlyKeys(const json& j, std::initializer_list<std::string_view> allowed) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "v" || k == "id" || k == "type") continue;
    bool found = false;
    for (auto a : allowed) found = found || (k == a);
    if (!found) return rc::makeError("unknown field '" + k + "'");
  }
  return {};
}

Result<std::string> getString(const json& j, const char* key, size_t maxLen, bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return rc::makeError(std::string("missing field '") + key + "'");
    return std::string();
  }
  if (!it->is_string()) return rc::makeError(std::string("field '") + key + "' must be a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > maxLen)
    return rc::makeError(std::string("field '") + key + "' is longer than " +
                         std::to_string(maxLen) + " bytes");
  return s;
}

Result<int64_t> getInt(const json& j, const char* key, int64_t lo, int64_t hi, bool required,
                       int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return rc::makeError(std::string("missing field '") + key + "'");
    return dflt;
  }
  if (!it->is_number_integer())
    return rc::makeError(std::string("field '") + key + "' must be an integer");
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                  ? INT64_MAX
                  : it->get<int64_t>();
  if (v < lo || v > hi)
    return rc::makeError(std::string("field '") + key + "' = " + std::to_string(v) +
                         " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "]");
  return v;
}

Result<std::string> getId(const json& j, const char* key) {
  auto s = getString(j, key, kMaxIdLength, true);
  if (!s) return s;
  if (!validId(*s))
    return rc::makeError(std::string("field '") + key +
                         "' must be 1-64 characters of A-Z a-z 0-9 . _ -");
  return s;
}

}  // namespace

bool validId(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {
// Cuts every "events" array deeper than nothing but objects and arrays (at most a few levels:
// reply -> faults -> fault -> events) to its first and last KEEP entries.
void capEvents(json& j, size_t keep, int depth) {
  if (depth > 4) return;
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "events" && it->is_array() && it->size() > 2 * keep) {
        json& ev = *it;
        size_t omitted = ev.size() - 2 * keep;
        json cut = json::array();
        for (size_t i = 0; i < keep; i++) cut.push_back(std::move(ev[i]));
        for (size_t i = ev.size() - keep; i < ev.size(); i++) cut.push_back(std::move(ev[i]));
        ev = std::move(cut);
        j["events_omitted"] = j.value("events_omitted", size_t(0)) + omitted;  // cut again: add up
        break;  // the iterator is spent after the insertion above
      }
    }
    for (auto& [k, v] : j.items())
      if (k != "events") capEvents(v, keep, depth + 1);
  } else if (j.is_array()) {
    for (auto& v : j) capEvents(v, keep, depth + 1);
  }
}
}  // namespace

Result<std::string> encodeBoundedFrame(json message) {
  std::string frame = encodeFrame(message);
  if (frame.size() - 4 <= kMaxFrameBytes) return frame;
  for (size_t keep : {kKeptEvents, size_t(10), size_t(0)}) {
    capEvents(message, keep, 0);
    frame = encodeFrame(message);
    if (frame.size() - 4 <= kMaxFrameBytes) return frame;
  }
  return rc::makeError("the reply would be " + std::to_string(frame.size()) + " bytes, over the " +
                   std::to_string(kMaxFrameBytes) + "-byte frame limit even without its events");
}

std::string encodeFrame(const json& message) {
  std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  uint32_t n = uint32_t(body.size());
  std::string out;
  out.reserve(4 + body.size());
  out.push_back(char((n >> 24) & 0xff));
  out.push_back(char((n >> 16) & 0xff));
  out.push_back(char((n >> 8) & 0xff));
  out.push_back(char(n & 0xff));
  out += body;
  return out;
}

uint32_t decodeLength(const unsigned char h[4]) {
  return (uint32_t(h[0]) << 24) | (uint32_t(h[1]) << 16) | (uint32_t(h[2]) << 8) | uint32_t(h[3]);
}

Result<void> checkDepth(std::string_view body, size_t maxDepth) {
  size_t depth = 0;
  bool inString = false, escaped = false;
  for (char c : body) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return rc::makeError("message nests arrays or objects deeper than " +
                             std::to_string(maxDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return {};
}

std::string randomToken() {
  // libstdc++'s random_device reads the kernel's CSPRNG (getrandom) on Linux.
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) | uint64_t(rd());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Result<json> parseBody(std::string_view body) {
  if (auto deep = checkDepth(body); !deep) return deep.error();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return rc::makeError("message is not valid JSON");
  if (!j.is_object()) return rc::makeError("message must be a JSON object");
  return j;
}

std::optional<Result<json>> FrameDecoder::next() {
  if (buf_.size() < 4) return std::nullopt;
  uint32_t n = decodeLength(reinterpret_cast<const unsigned char*>(buf_.data()));
  if (n > kMaxFrameBytes)
    return Result<json>(rc::makeError("frame of " + std::to_string(n) + " bytes exceeds the " +
                                      std::to_string(kMaxFrameBytes) + "-byte limit"));
  if (buf_.size() < 4 + size_t(n)) return std::nullopt;
  auto body = parseBody(std::string_view(buf_).substr(4, n));
  buf_.erase(0, 4 + size_t(n));
  return body;
}

namespace {

Result<Hello> parseHello(const json& m) {
  if (auto r = onlyKeys(m, {"controller", "versions"}); !r) return r.error();
  Hello h;
  auto c = getId(m, "controller");
  if (!c) return c.error();
  h.controllerId = *c;
  auto it = m.find("versions");
  if (it == m.end() || !it->is_array() || it->empty() || it->size() > 16)
    return rc::makeError("field 'versions' must be a non-empty array of at most 16 integers");
  for (const auto& x : *it) {
    if (!x.is_number_integer()) return rc::makeError("field 'versions' must hold integers");
    h.versions.push_back(x.get<int>());
  }
  return h;
}

Result<Schedule> parseSchedule(const json& m) {
  if (auto r = onlyKeys(m, {"fault", "kind", "params", "start_ns", "clock_offset_ns",
                            "lifetime_ms"});
      !r)
    return r.error();
  Schedule s;
  auto f = getId(m, "fault");
  if (!f) return f.error();
  s.faultId = *f;
  auto k = getString(m, "kind", 32, true);
  if (!k) return k.error();
  s.kind = *k;
  if (auto it = m.find("params"); it != m.end()) {
    if (!it->is_object()) return rc::makeError("field 'params' must be an object");
    if (it->size() > kMaxParams) return rc::makeError("field 'params' has too many entries");
    s.params = *it;
  }
  // Start times within about 290 years of the epoch, offsets within a day, lifetimes
  // within a day: anything else is a bug or an attack.
  auto st = getInt(m, "start_ns", 0, INT64_MAX / 2, false);
  if (!st) return st.error();
  s.startNs = *st;
  auto off = getInt(m, "clock_offset_ns", -86'400'000'000'000, 86'400'000'000'000, false);
  if (!off) return off.error();
  s.clockOffsetNs = *off;
  auto lt = getInt(m, "lifetime_ms", 1, 86'400'000, true);
  if (!lt) return lt.error();
  s.lifetimeMs = *lt;
  return s;
}

// The workload's world: ranks 0..n-1 in order, each an address and a port.
Result<std::vector<WorldMember>> parseWorld(const json& m) {
  std::vector<WorldMember> world;
  auto wit = m.find("world");
  if (wit == m.end() || !wit->is_array() || wit->size() < 2 || wit->size() > kMaxWorld)
    return rc::makeError("field 'world' must be an array of 2 to " + std::to_string(kMaxWorld) +
                         " members");
  for (const auto& x : *wit) {
    if (!x.is_object()) return rc::makeError("field 'world' must hold objects");
    if (auto r = onlyKeys(x, {"rank", "address", "port"}); !r)
      return rc::makeError("world member: " + r.error().message);
    WorldMember mb;
    auto rk = getInt(x, "rank", 0, int64_t(kMaxWorld) - 1, true);
    if (!rk) return rc::makeError("world member: " + rk.error().message);
    auto ad = getString(x, "address", 64, true);
    if (!ad) return rc::makeError("world member: " + ad.error().message);
    auto pt = getInt(x, "port", 1, 65535, true);
    if (!pt) return rc::makeError("world member: " + pt.error().message);
    mb.rank = int(*rk);
    mb.address = *ad;
    mb.port = int(*pt);
    if (mb.rank != int(world.size()))
      return rc::makeError("field 'world' must list ranks 0..n-1 in order");
    world.push_back(std::move(mb));
  }
  return world;
}

Result<WorkloadStart> parseWorkloadStart(const json& m) {
  if (auto r = onlyKeys(m, {"workload", "kind", "rank", "world", "size", "iterations",
                            "duration_ms", "streams", "incast_receiver", "fan_in", "bin_us",
                            "reconnect_timeout_ms", "start_ns", "clock_offset_ns", "checksum",
                            "transport", "dscp", "qp_timeout", "qp_retry_cnt", "qp_rnr_retry",
                            "perftest", "job", "nodes"});
      !r)
    return r.error();
  WorkloadStart w;
  auto wid = getId(m, "workload");
  if (!wid) return wid.error();
  w.workloadId = *wid;
  auto k = getString(m, "kind", 32, true);
  if (!k) return k.error();
  w.kind = *k;
  auto world = parseWorld(m);
  if (!world) return world.error();
  w.world = std::move(*world);
  const int64_t n = int64_t(w.world.size());
  auto rk = getInt(m, "rank", 0, n - 1, true);
  if (!rk) return rk.error();
  w.rank = int(*rk);
  auto sz = getInt(m, "size", 1, kMaxWorkloadSize, true);
  if (!sz) return sz.error();
  w.size = *sz;
  auto it = getInt(m, "iterations", 0, 1'000'000'000, false);
  if (!it) return it.error();
  w.iterations = *it;
  auto du = getInt(m, "duration_ms", 0, 86'400'000, false);
  if (!du) return du.error();
  w.durationMs = *du;
  if ((w.iterations == 0) == (w.durationMs == 0))
    return rc::makeError("exactly one of 'iterations' and 'duration_ms' must be set");
  auto st = getInt(m, "streams", 1, kMaxWorkloadStreams, false, 1);
  if (!st) return st.error();
  w.streams = int(*st);
  auto ir = getInt(m, "incast_receiver", 0, n - 1, false);
  if (!ir) return ir.error();
  w.incastReceiver = int(*ir);
  auto fi = getInt(m, "fan_in", 0, n - 1, false);
  if (!fi) return fi.error();
  w.fanIn = int(*fi);
  auto bu = getInt(m, "bin_us", 100, 1'000'000, false, 10'000);
  if (!bu) return bu.error();
  w.binUs = *bu;
  auto rt = getInt(m, "reconnect_timeout_ms", 100, 600'000, false, 10'000);
  if (!rt) return rt.error();
  w.reconnectTimeoutMs = *rt;
  auto sn = getInt(m, "start_ns", 0, INT64_MAX / 2, false);
  if (!sn) return sn.error();
  w.startNs = *sn;
  auto off = getInt(m, "clock_offset_ns", -86'400'000'000'000, 86'400'000'000'000, false);
  if (!off) return off.error();
  w.clockOffsetNs = *off;
  if (auto c = m.find("checksum"); c != m.end()) {
    if (!c->is_boolean()) return rc::makeError("field 'checksum' must be true or false");
    w.checksum = c->get<bool>();
  }
  auto tr = getString(m, "transport", 16, false);
  if (!tr) return tr.error();
  if (!tr->empty()) w.transport = *tr;
  // "ucx" is Open MPI's pml ucx, which only the mpi kind's job speaks.
  if (w.transport != "tcp" && w.transport != "verbs" && !(w.transport == "ucx" && w.kind == "mpi"))
    return rc::makeError("field 'transport' must be \"tcp\" or \"verbs\" (or \"ucx\" for kind \"mpi\"), not '" +
                         w.transport + "'");
  for (auto [key, field, hi] : {std::tuple{"dscp", &w.qp.dscp, 63}, std::tuple{"qp_timeout", &w.qp.timeout, 31},
                                std::tuple{"qp_retry_cnt", &w.qp.retryCount, 7},
                                std::tuple{"qp_rnr_retry", &w.qp.rnrRetry, 7}}) {
    auto q = getInt(m, key, 0, hi, false, *field);
    if (!q) return q.error();
    *field = int(*q);
  }
  // Which perftest program: a name the agent looks up in its own fixed list, never a path.
  auto pt = getString(m, "perftest", 32, false);
  if (!pt) return pt.error();
  w.perftest = *pt;
  if (w.kind == "perftest" && w.perftest.empty()) w.perftest = "ib_write_bw";
  if (w.kind != "perftest" && !w.perftest.empty())
    return rc::makeError("field 'perftest' is only for kind \"perftest\"");
  // Which job's records an observed workload counts: an id as the observe library sends it.
  auto job = getString(m, "job", 128, false);
  if (!job) return job.error();
  for (char c : *job)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != ':' && c != '/')
      return rc::makeError("field 'job' must be letters, digits and . _ - : / (a job id)");
  w.job = *job;
  if (w.kind != "observed" && !w.job.empty()) return rc::makeError("field 'job' is only for kind \"observed\"");
  // The nodes' names, which rank 0's MPI launcher puts in its template ({host}): never a path
  // or an option.
  if (auto nd = m.find("nodes"); nd != m.end()) {
    if (w.kind != "mpi") return rc::makeError("field 'nodes' is only for kind \"mpi\"");
    if (!nd->is_array() || nd->size() != w.world.size())
      return rc::makeError("field 'nodes' must list one name per rank of 'world'");
    for (const auto& e : *nd) {
      if (!e.is_string() || e.get<std::string>().empty() || e.get<std::string>().size() > 64 ||
          e.get<std::string>().front() == '-')
        return rc::makeError("field 'nodes' must list node names of 1-64 letters, digits and . _ -");
      for (char c : e.get<std::string>())
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
          return rc::makeError("field 'nodes' must list node names of 1-64 letters, digits and . _ -");
      w.nodes.push_back(e.get<std::string>());
    }
  }
  return w;
}

}  // namespace

Result<Envelope> parseRequest(const json& m) {
  if (!m.is_object()) return rc::makeError("message must be a JSON object");
  Envelope env;
  auto v = getInt(m, "v", 0, 1000, true);
  if (!v) return v.error();
  env.version = int(*v);
  auto id = getInt(m, "id", 0, INT64_MAX, true);
  if (!id) return id.error();
  env.id = uint64_t(*id);
  auto type = getString(m, "type", 32, true);
  if (!type) return type.error();
  env.type = *type;
  if (env.version != kVersion && env.type != "hello")
    return rc::makeError("protocol version " + std::to_string(env.version) +
                         " is not spoken here (this agent speaks " + std::to_string(kVersion) +
                         ")",
                         1);

  const std::string& t = env.type;
  if (t == "hello") {
    auto h = parseHello(m);
    if (!h) return h.error();
    env.request = std::move(*h);
  } else if (t == "clock") {
    if (auto r = onlyKeys(m, {"t0"}); !r) return r.error();
    auto t0 = getInt(m, "t0", 0, INT64_MAX, true);
    if (!t0) return t0.error();
    env.request = ClockReq{*t0};
  } else if (t == "heartbeat") {
    if (auto r = onlyKeys(m, {}); !r) return r.error();
    env.request = Heartbeat{};
  } else if (t == "schedule") {
    auto s = parseSchedule(m);
    if (!s) return s.error();
    env.request = std::move(*s);
  } else if (t == "revert" || t == "get") {
    if (auto r = onlyKeys(m, {"fault"}); !r) return r.error();
    auto f = getId(m, "fault");
    if (!f) return f.error();
    if (t == "revert")
      env.request = Revert{*f};
    else
      env.request = GetFault{*f};
  } else if (t == "revert_all") {
    if (auto r = onlyKeys(m, {"all"}); !r) return r.error();
    RevertAll ra;
    if (m.contains("all")) {
      if (!m["all"].is_boolean()) return rc::makeError("field 'all' must be a boolean");
      ra.all = m["all"].get<bool>();
    }
    env.request = ra;
  } else if (t == "list" || t == "status" || t == "capabilities") {
    if (auto r = onlyKeys(m, {}); !r) return r.error();
    if (t == "list") env.request = ListFaults{};
    if (t == "status") env.request = Status{};
    if (t == "capabilities") env.request = Capabilities{};
  } else if (t == "workload_start") {
    auto w = parseWorkloadStart(m);
    if (!w) return w.error();
    env.request = std::move(*w);
  } else if (t == "workload_stop") {
    if (auto r = onlyKeys(m, {"workload"}); !r) return r.error();
    auto wid = getId(m, "workload");
    if (!wid) return wid.error();
    env.request = WorkloadStop{*wid};
  } else {
    return rc::makeError("unknown message type '" + t + "'");
  }
  return env;
}

json makeRequest(uint64_t id, std::string_view type, json body) {
  body["v"] = kVersion;
  body["id"] = id;
  body["type"] = type;
  return body;
}

json makeReply(uint64_t id, std::string_view requestType, json body) {
  body["v"] = kVersion;
  body["id"] = id;
  body["type"] = std::string(requestType) + ".ok";
  return body;
}

json makeError(uint64_t id, std::string_view code, std::string_view message) {
  return json{{"v", kVersion}, {"id", id}, {"type", "error"}, {"code", code}, {"message", message}};
}

Result<json> parseReply(const json& m, uint64_t expectedId, std::string_view requestType) {
  if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
    return rc::makeError("agent sent a reply without a type");
  const auto& type = m["type"].get_ref<const std::string&>();
  if (m.contains("id") && m["id"].is_number_unsigned() && m["id"].get<uint64_t>() != expectedId)
    return rc::makeError("agent replied to request " + std::to_string(m["id"].get<uint64_t>()) +
                         ", expected " + std::to_string(expectedId));
  if (type == "error") {
    std::string msg = m.value("message", std::string("unspecified error"));
    std::string code = m.value("code", std::string("error"));
    return rc::makeError(msg + " [" + code + "]");
  }
  if (type != std::string(requestType) + ".ok")
    return rc::makeError("agent replied '" + type + "' to '" + std::string(requestType) + "'");
  return m;
}

namespace {

json countersJson(const TelemetryCounters& c) {
  return json{{"iterations", c.iterations},   {"failed_iterations", c.failedIterations},
              {"verify_failures", c.verifyFailures}, {"errors", c.errors},
              {"corruptions", c.corruptions}, {"reconnects", c.reconnects},
              {"rx_bytes", c.rxBytes}};
}

Result<TelemetryCounters> parseCounters(const json& m) {
  auto it = m.find("counters");
  if (it == m.end() || !it->is_object()) return rc::makeError("field 'counters' must be an object");
  const json& j = *it;
  if (auto r = onlyKeys(j, {"iterations", "failed_iterations", "verify_failures", "errors",
                            "corruptions", "reconnects", "rx_bytes"});
      !r)
    return r.error();
  TelemetryCounters c;
  struct F {
    const char* key;
    int64_t* dst;
  };
  for (F f : {F{"iterations", &c.iterations}, F{"failed_iterations", &c.failedIterations},
              F{"verify_failures", &c.verifyFailures}, F{"errors", &c.errors},
              F{"corruptions", &c.corruptions}, F{"reconnects", &c.reconnects},
              F{"rx_bytes", &c.rxBytes}}) {
    auto v = getInt(j, f.key, 0, INT64_MAX, true);
    if (!v) return v.error();
    *f.dst = *v;
  }
  return c;
}

Result<void> checkEvent(const json& m, const char* type) {
  if (!m.is_object()) return rc::makeError("message must be a JSON object");
  auto v = getInt(m, "v", kVersion, kVersion, true);
  if (!v) return v.error();
  auto id = getInt(m, "id", 0, 0, true);
  if (!id) return id.error();
  auto t = getString(m, "type", 32, true);
  if (!t) return t.error();
  if (*t != type) return rc::makeError(std::string("expected a '") + type + "' message");
  return {};
}

}  // namespace

int64_t lifetimeMsFor(int64_t forNs) { return std::max<int64_t>(1, (forNs + 999'999) / 1'000'000); }

json toJson(const Schedule& s) {
  return json{{"fault", s.faultId},
              {"kind", s.kind},
              {"params", s.params},
              {"start_ns", s.startNs},
              {"clock_offset_ns", s.clockOffsetNs},
              {"lifetime_ms", s.lifetimeMs}};
}

json toJson(const Hello& h) { return json{{"controller", h.controllerId}, {"versions", h.versions}}; }
json toJson(const ClockReq& c) { return json{{"t0", c.t0}}; }
json toJson(const Revert& r) { return json{{"fault", r.faultId}}; }
json toJson(const RevertAll& r) { return json{{"all", r.all}}; }
json toJson(const GetFault& g) { return json{{"fault", g.faultId}}; }

json toJson(const WorkloadStart& w) {
  json world = json::array();
  for (const auto& m : w.world) world.push_back(json{{"rank", m.rank}, {"address", m.address}, {"port", m.port}});
  json j{{"workload", w.workloadId},
         {"kind", w.kind},
         {"rank", w.rank},
         {"world", std::move(world)},
         {"size", w.size},
         {"streams", w.streams},
         {"incast_receiver", w.incastReceiver},
         {"fan_in", w.fanIn},
         {"bin_us", w.binUs},
         {"reconnect_timeout_ms", w.reconnectTimeoutMs},
         {"start_ns", w.startNs},
         {"clock_offset_ns", w.clockOffsetNs},
         {"checksum", w.checksum},
         {"transport", w.transport},
         {"dscp", w.qp.dscp},
         {"qp_timeout", w.qp.timeout},
         {"qp_retry_cnt", w.qp.retryCount},
         {"qp_rnr_retry", w.qp.rnrRetry}};
  if (!w.perftest.empty()) j["perftest"] = w.perftest;
  if (!w.job.empty()) j["job"] = w.job;
  if (!w.nodes.empty()) j["nodes"] = w.nodes;
  // Exactly one of the two bounds is sent.
  if (w.iterations)
    j["iterations"] = w.iterations;
  else
    j["duration_ms"] = w.durationMs;
  return j;
}

json toJson(const WorkloadStop& w) { return json{{"workload", w.workloadId}}; }

json toJson(const TelemetryMsg& t) {
  json its = json::array();
  for (const auto& i : t.iterations)
    its.push_back(json{{"i", i.index}, {"start_ns", i.startNs}, {"end_ns", i.endNs},
                       {"rx_bytes", i.rxBytes}, {"ok", i.ok}});
  json j{{"v", kVersion},          {"id", 0},
         {"type", "telemetry"},    {"workload", t.workloadId},
         {"rank", t.rank},         {"seq", t.seq},
         {"first_bin_ns", t.firstBinNs}, {"bin_ns", t.binNs},
         {"bins", t.bins},         {"iterations", its},
         {"counters", countersJson(t.counters)}};
  if (t.nic) j["nic"] = json{{"t_ns", t.nic->tNs}, {"values", t.nic->values}};
  return j;
}

json toJson(const WorkloadEnded& e) {
  json j{{"v", kVersion},          {"id", 0},
         {"type", "workload_ended"}, {"workload", e.workloadId},
         {"rank", e.rank},         {"end_reason", e.endReason},
         {"error", e.error},       {"verified", e.verified},
         {"counters", countersJson(e.counters)}};
  if (!e.note.empty()) j["note"] = e.note;
  return j;
}

Result<TelemetryMsg> parseTelemetry(const json& m) {
  if (auto r = checkEvent(m, "telemetry"); !r) return r.error();
  if (auto r = onlyKeys(m, {"workload", "rank", "seq", "first_bin_ns", "bin_ns", "bins",
                            "iterations", "counters", "nic"});
      !r)
    return r.error();
  TelemetryMsg t;
  auto id = getId(m, "workload");
  if (!id) return id.error();
  t.workloadId = *id;
  auto rk = getInt(m, "rank", 0, int64_t(kMaxWorld) - 1, true);
  if (!rk) return rk.error();
  t.rank = int(*rk);
  auto sq = getInt(m, "seq", 0, INT64_MAX, true);
  if (!sq) return sq.error();
  t.seq = *sq;
  auto fb = getInt(m, "first_bin_ns", 0, INT64_MAX / 2, true);
  if (!fb) return fb.error();
  t.firstBinNs = *fb;
  auto bw = getInt(m, "bin_ns", 100'000, 1'000'000'000, true);
  if (!bw) return bw.error();
  t.binNs = *bw;
  auto bins = m.find("bins");
  if (bins == m.end() || !bins->is_array() || bins->size() > kMaxTelemetryBins)
    return rc::makeError("field 'bins' must be an array of at most " +
                         std::to_string(kMaxTelemetryBins) + " byte counts");
  for (const auto& b : *bins) {
    if (!b.is_number_integer() || (!b.is_number_unsigned() && b.get<int64_t>() < 0))
      return rc::makeError("field 'bins' must hold byte counts");
    t.bins.push_back(b.is_number_unsigned()
                         ? int64_t(std::min<uint64_t>(b.get<uint64_t>(), uint64_t(INT64_MAX)))
                         : b.get<int64_t>());
  }
  auto its = m.find("iterations");
  if (its == m.end() || !its->is_array() || its->size() > kMaxTelemetryIterations)
    return rc::makeError("field 'iterations' must be an array of at most " +
                         std::to_string(kMaxTelemetryIterations) + " records");
  for (const auto& x : *its) {
    if (!x.is_object()) return rc::makeError("field 'iterations' must hold objects");
    if (auto r = onlyKeys(x, {"i", "start_ns", "end_ns", "rx_bytes", "ok"}); !r) return r.error();
    TelemetryIteration it;
    auto i = getInt(x, "i", 0, INT64_MAX, true);
    auto s = getInt(x, "start_ns", 0, INT64_MAX / 2, true);
    auto e = getInt(x, "end_ns", 0, INT64_MAX / 2, true);
    auto b = getInt(x, "rx_bytes", 0, INT64_MAX, true);
    for (const auto* r : {&i, &s, &e, &b})
      if (!*r) return r->error();
    if (*e < *s) return rc::makeError("an iteration ends before it starts");
    auto ok = x.find("ok");
    if (ok == x.end() || !ok->is_boolean()) return rc::makeError("field 'ok' must be true or false");
    it.index = *i;
    it.startNs = *s;
    it.endNs = *e;
    it.rxBytes = *b;
    it.ok = ok->get<bool>();
    t.iterations.push_back(it);
  }
  auto c = parseCounters(m);
  if (!c) return c.error();
  t.counters = *c;
  if (auto n = m.find("nic"); n != m.end()) {
    if (!n->is_object()) return rc::makeError("field 'nic' must be an object");
    if (auto r = onlyKeys(*n, {"t_ns", "values"}); !r) return r.error();
    NicSample ns;
    auto tn = getInt(*n, "t_ns", 0, INT64_MAX / 2, true);
    if (!tn) return tn.error();
    ns.tNs = *tn;
    auto v = n->find("values");
    if (v == n->end() || !v->is_object() || v->size() > kMaxNicCounters)
      return rc::makeError("field 'nic.values' must be an object of at most " +
                           std::to_string(kMaxNicCounters) + " counters");
    for (const auto& [name, val] : v->items()) {
      if (name.empty() || name.size() > kMaxNicCounterName)
        return rc::makeError("a NIC counter name must have 1 to " +
                             std::to_string(kMaxNicCounterName) + " characters");
      if (!val.is_number_unsigned() && !(val.is_number_integer() && val.get<int64_t>() >= 0))
        return rc::makeError("NIC counter '" + name + "' must be a non-negative integer");
      ns.values[name] = val.get<uint64_t>();
    }
    t.nic = std::move(ns);
  }
  return t;
}

json toJson(const FaultEnded& e) {
  return json{{"v", kVersion}, {"id", 0}, {"type", "fault_ended"}, {"fault", e.record}};
}

Result<FaultEnded> parseFaultEnded(const json& m) {
  if (auto r = checkEvent(m, "fault_ended"); !r) return r.error();
  if (auto r = onlyKeys(m, {"fault"}); !r) return r.error();
  auto f = m.find("fault");
  if (f == m.end() || !f->is_object()) return rc::makeError("fault_ended needs 'fault', the fault record (an object)");
  auto id = getId(*f, "fault");
  if (!id) return id.error();
  return FaultEnded{*id, *f};
}

Result<WorkloadEnded> parseWorkloadEnded(const json& m) {
  if (auto r = checkEvent(m, "workload_ended"); !r) return r.error();
  if (auto r = onlyKeys(m, {"workload", "rank", "end_reason", "error", "note", "verified", "counters"}); !r)
    return r.error();
  WorkloadEnded e;
  auto id = getId(m, "workload");
  if (!id) return id.error();
  e.workloadId = *id;
  auto rk = getInt(m, "rank", 0, int64_t(kMaxWorld) - 1, true);
  if (!rk) return rk.error();
  e.rank = int(*rk);
  auto why = getString(m, "end_reason", 32, true);
  if (!why) return why.error();
  e.endReason = *why;
  auto err = getString(m, "error", 1024, false);
  if (!err) return err.error();
  e.error = *err;
  auto note = getString(m, "note", 1024, false);
  if (!note) return note.error();
  e.note = *note;
  auto v = m.find("verified");
  if (v == m.end() || !v->is_boolean()) return rc::makeError("field 'verified' must be true or false");
  e.verified = v->get<bool>();
  auto c = parseCounters(m);
  if (!c) return c.error();
  e.counters = *c;
  return e;
}

}  // namespace rc::proto
