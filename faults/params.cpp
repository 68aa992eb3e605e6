// Parameter normalisation shared by every fault kind, and the interface and address policy checks.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "common/units.hpp"
#include "faults/fault.hpp"

namespace rc::faults {
namespace {

std::string where(std::string_view kind, const std::string& name) {
  return std::string(kind) + " parameter '" + name + "'";
}

Result<double> toNumber(std::string_view kind, const ParamSpec& spec, const json& v, ParamsFrom from) {
  std::string w = where(kind, spec.name);
  if (v.is_number()) {
    if (spec.type == ParamType::duration && !(from == ParamsFrom::normalised && v.is_number_integer()))
      return makeError(w + " must be a duration with a unit, e.g. \"500ms\"");
    return v.get<double>();
  }
  if (!v.is_string()) return makeError(w + " has the wrong type");
  const auto& s = v.get_ref<const std::string&>();
  switch (spec.type) {
    case ParamType::duration: {
      auto d = parseDuration(s);
      if (!d) return makeError(w + ": " + d.error().message);
      return double(d->count());
    }
    case ParamType::size: {
      auto b = parseSize(s);
      if (!b) return makeError(w + ": " + b.error().message);
      return double(*b);
    }
    case ParamType::rate: {
      auto r = parsePerSecond(s);
      if (!r) return makeError(w + ": " + r.error().message);
      return *r;
    }
    case ParamType::bitRate: {
      auto r = parseBitRate(s);
      if (!r) return makeError(w + ": " + r.error().message);
      return double(*r);
    }
    case ParamType::integer: {
      try {
        size_t used = 0;
        long long n = std::stoll(s, &used);
        if (used == s.size()) return double(n);
      } catch (...) {
      }
      return makeError(w + " = '" + s + "' is not an integer");
    }
    default:
      return makeError(w + " has the wrong type");
  }
}

std::string show(const ParamSpec& spec, double v) {
  if (spec.type == ParamType::duration) return formatDuration(Nanos(int64_t(v)));
  if (spec.type == ParamType::size) return formatSize(uint64_t(v));
  if (spec.type == ParamType::bitRate) return formatBitRate(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Result<void> checkInterface(const Policy& policy, const std::string& name) {
  if (name.empty()) return makeError("no interface given and the agent has no default data interface");
  if (std::find(policy.protectedInterfaces.begin(), policy.protectedInterfaces.end(), name) !=
      policy.protectedInterfaces.end())
    return makeError("interface '" + name +
                     "' is protected (management or default route); faults never touch it. "
                     "Pick a data interface from the agent's allowlist");
  if (std::find(policy.allowlist.begin(), policy.allowlist.end(), name) ==
      policy.allowlist.end()) {
    std::string list;
    for (const auto& a : policy.allowlist) list += (list.empty() ? "" : ", ") + a;
    return makeError("interface '" + name + "' is not in the agent's allowlist [" + list +
                     "]; add it to 'allow_interfaces' in the agent config to permit faults");
  }
  return {};
}

Result<Ipv4Prefix> parseIpv4Prefix(const std::string& text) {
  auto bad = [&] {
    return makeError("'" + text + "' is not an IPv4 prefix such as \"10.0.0.0/16\"", EINVAL);
  };
  auto slash = text.find('/');
  if (slash == std::string::npos || slash + 1 >= text.size() || text.size() - slash > 3) return bad();
  in_addr a{};
  if (::inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return bad();
  int len = 0;
  for (char c : text.substr(slash + 1)) {
    if (c < '0' || c > '9') return bad();
    len = len * 10 + (c - '0');
  }
  if (len > 32) return bad();
  return Ipv4Prefix{ntohl(a.s_addr), len};
}

Result<void> checkDataAddress(const Policy& policy, const std::string& address) {
  in_addr a{};
  if (::inet_pton(AF_INET, address.c_str(), &a) != 1)
    return makeError("'" + address + "' is not an IPv4 address", EINVAL);
  std::vector<Ipv4Prefix> subnets;
  std::string shown;
  auto add = [&](Ipv4Prefix p, const std::string& text) {
    subnets.push_back(p);
    shown += (shown.empty() ? "" : ", ") + text;
  };
  if (!policy.dataSubnets.empty()) {
    for (const auto& s : policy.dataSubnets)
      if (auto p = parseIpv4Prefix(s)) add(*p, s);
  } else {
    // What the kernel holds now: an address moved or added since the agent started counts.
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
      for (auto* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask) continue;
        if (std::find(policy.allowlist.begin(), policy.allowlist.end(), i->ifa_name) == policy.allowlist.end() ||
            std::find(policy.protectedInterfaces.begin(), policy.protectedInterfaces.end(), i->ifa_name) !=
                policy.protectedInterfaces.end())
          continue;
        uint32_t addr = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
        uint32_t mask = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
        int len = __builtin_popcount(mask);
        in_addr net{htonl(addr & mask)};
        char text[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &net, text, sizeof text);
        add(Ipv4Prefix{addr & mask, len}, std::string(text) + "/" + std::to_string(len) + " (" + i->ifa_name + ")");
      }
      ::freeifaddrs(list);
    }
  }
  for (const auto& p : subnets)
    if (p.contains(ntohl(a.s_addr))) return {};
  return makeError("'" + address + "' is outside this agent's data subnets (" +
                       (shown.empty() ? std::string("none: no allowed interface has an IPv4 address") : shown) +
                       "); faults send traffic only to the data fabric. To allow more, list the fabric's "
                       "subnets in the agent config: [interfaces] data_subnets = [\"10.0.0.0/16\"]",
                   EPERM);
}

Result<json> normaliseParams(std::string_view kind, const std::vector<ParamSpec>& specs,
                             const json& raw, ParamsFrom from) {
  if (!raw.is_object()) return makeError(std::string(kind) + " parameters must be a table");
  for (auto it = raw.begin(); it != raw.end(); ++it) {
    bool known = std::any_of(specs.begin(), specs.end(),
                             [&](const ParamSpec& s) { return s.name == it.key(); });
    if (!known) {
      std::string names;
      for (const auto& s : specs) names += (names.empty() ? "" : ", ") + s.name;
      return makeError(std::string(kind) + " has no parameter '" + it.key() + "' (known: " +
                       names + ")");
    }
  }
  json out = json::object();
  for (const auto& spec : specs) {
    auto it = raw.find(spec.name);
    if (it == raw.end()) {
      if (!spec.defaultValue.is_null())
        out[spec.name] = spec.defaultValue;
      else if (!spec.optional)
        return makeError(where(kind, spec.name) + " is required");
      continue;
    }
    const json& v = *it;
    std::string w = where(kind, spec.name);
    switch (spec.type) {
      case ParamType::string:
        if (!v.is_string() || v.get_ref<const std::string&>().size() > 256)
          return makeError(w + " must be a string of at most 256 characters");
        if (!spec.choices.empty() &&
            std::find(spec.choices.begin(), spec.choices.end(), v.get<std::string>()) == spec.choices.end()) {
          std::string names;
          for (const auto& c : spec.choices) names += (names.empty() ? "" : ", ") + c;
          return makeError(w + " = '" + v.get<std::string>() + "' is not one of " + names);
        }
        out[spec.name] = v;
        break;
      case ParamType::boolean:
        if (v.is_boolean())
          out[spec.name] = v;
        else if (v == "true" || v == "false")
          out[spec.name] = (v == "true");
        else
          return makeError(w + " must be true or false");
        break;
      case ParamType::intList: {
        json list = json::array();
        json src = v;
        if (v.is_string()) {  // "3" or "3,4" or "[3,4]" from --set
          std::string s = v;
          s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '[' || c == ']' || c == ' '; }), s.end());
          src = json::array();
          size_t pos = 0;
          while (pos <= s.size() && !s.empty()) {
            size_t comma = s.find(',', pos);
            std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            try {
              size_t used = 0;
              long long n = std::stoll(item, &used);
              if (used != item.size()) throw std::invalid_argument("junk");
              src.push_back(n);
            } catch (...) {
              return makeError(w + " = '" + std::string(v) + "' must be a list of integers like [3] or 3,4");
            }
            if (comma == std::string::npos) break;
            pos = comma + 1;
          }
        }
        if (!src.is_array() || src.empty() || src.size() > 64)
          return makeError(w + " must be a non-empty list of integers");
        for (const auto& x : src) {
          if (!x.is_number_integer()) return makeError(w + " must be a list of integers");
          double n = x.get<double>();
          if (n < spec.min || n > spec.max)
            return makeError(w + " value " + show(spec, n) + " is out of range [" +
                             show(spec, spec.min) + ", " + show(spec, spec.max) + "]");
          list.push_back(x);
        }
        out[spec.name] = list;
        break;
      }
      default: {
        auto n = toNumber(kind, spec, v, from);
        if (!n) return n.error();
        if (*n < spec.min || *n > spec.max)
          return makeError(w + " = " + show(spec, *n) + " is out of range [" +
                           show(spec, spec.min) + ", " + show(spec, spec.max) + "]");
        if (spec.type == ParamType::rate)
          out[spec.name] = *n;
        else
          out[spec.name] = int64_t(std::llround(*n));
      }
    }
  }
  return out;
}

std::vector<std::string> pickInOrder(const std::vector<std::string>& pool, size_t k, const Draw& below) {
  k = std::min(k, pool.size());
  std::vector<std::string> drawn = pool;
  if (below)
    for (size_t i = 0; i < k; i++) std::swap(drawn[i], drawn[i + below(drawn.size() - i)]);
  std::vector<std::string> chosen(drawn.begin(), drawn.begin() + std::ptrdiff_t(k));
  std::vector<std::string> out;
  for (const auto& n : pool)
    if (std::find(chosen.begin(), chosen.end(), n) != chosen.end()) out.push_back(n);
  return out;
}

Result<int64_t> intParam(std::string_view kind, const json& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end() || !it->is_number_integer())
    return makeError(std::string(kind) + " parameter '" + key + "' must be normalised to an integer");
  return it->get<int64_t>();
}

bool hasActiveRdmaPort(const json& capabilities) {
  if (!capabilities.is_object()) return false;
  for (const auto& d : capabilities.value("rdma_devices", json::array()))
    for (const auto& p : d.value("ports", json::array()))
      if (p.is_object() && p.value("state", "").find("ACTIVE") != std::string::npos) return true;
  return false;
}

std::string stringParam(const json& params, const char* key) {
  auto it = params.find(key);
  return it != params.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string planInterface(const json& params) {
  std::string i = stringParam(params, "interface");
  return i.empty() ? std::string("the default interface") : "interface '" + i + "'";
}

}  // namespace rc::faults
