// Protocol framing and strict request parsing.
#include "common/protocol.hpp"

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

Result<json> parseBody(std::string_view body) {
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
    env.request = h;
  } else if (t == "clock") {
    if (auto r = onlyKeys(m, {"t0"}); !r) return r.error();
    auto t0 = getInt(m, "t0", 0, INT64_MAX, true);
    if (!t0) return t0.error();
    env.request = ClockReq{*t0};
  } else if (t == "heartbeat") {
    if (auto r = onlyKeys(m, {}); !r) return r.error();
    env.request = Heartbeat{};
  } else if (t == "schedule") {
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
    env.request = std::move(s);
  } else if (t == "revert" || t == "get") {
    if (auto r = onlyKeys(m, {"fault"}); !r) return r.error();
    auto f = getId(m, "fault");
    if (!f) return f.error();
    if (t == "revert")
      env.request = Revert{*f};
    else
      env.request = GetFault{*f};
  } else if (t == "revert_all" || t == "list" || t == "status" || t == "capabilities") {
    if (auto r = onlyKeys(m, {}); !r) return r.error();
    if (t == "revert_all") env.request = RevertAll{};
    if (t == "list") env.request = ListFaults{};
    if (t == "status") env.request = Status{};
    if (t == "capabilities") env.request = Capabilities{};
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

}  // namespace rc::proto
