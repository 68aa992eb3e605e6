// Agent configuration parsing with bounds on every value.
#include "agent/config.hpp"

#include <arpa/inet.h>

#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/units.hpp"

namespace rc::agent {
namespace {

std::string at(const std::string& src, const toml::source_region& r) {
  return src + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

struct Reader {
  const std::string& src;
  std::optional<Error> err;

  void fail(const std::string& where, const std::string& msg) {
    if (!err) err = makeError(where + ": " + msg);
  }

  void checkKeys(const toml::table& t, const std::string& section,
                 std::initializer_list<std::string_view> known) {
    for (auto&& [k, v] : t) {
      bool ok = false;
      for (auto n : known) ok = ok || k.str() == n;
      if (!ok) {
        std::string names;
        for (auto n : known) names += (names.empty() ? "" : ", ") + std::string(n);
        fail(at(src, v.source()), "unknown key '" + std::string(k.str()) + "' in [" + section +
                                      "] (known: " + names + ")");
      }
    }
  }

  std::string str(const toml::table& t, std::string_view key, const std::string& section,
                   bool required, std::string dflt = "") {
    auto* n = t.get(key);
    if (!n) {
      if (required) fail(src, "missing key '" + std::string(key) + "' in [" + section + "]");
      return dflt;
    }
    if (!n->is_string()) {
      fail(at(src, n->source()), "'" + std::string(key) + "' must be a string");
      return dflt;
    }
    return n->as_string()->get();
  }

  std::vector<std::string> strList(const toml::table& t, std::string_view key,
                                   const std::string& section) {
    std::vector<std::string> out;
    auto* n = t.get(key);
    if (!n) return out;
    auto* arr = n->as_array();
    if (!arr) {
      fail(at(src, n->source()), "'" + std::string(key) + "' in [" + section +
                                     "] must be a list of interface names, e.g. [\"eth1\"]");
      return out;
    }
    for (auto& e : *arr) {
      if (!e.is_string() || e.as_string()->get().empty() || e.as_string()->get().size() > 15) {
        fail(at(src, e.source()), "interface names are strings of 1-15 characters");
        continue;
      }
      out.push_back(e.as_string()->get());
    }
    return out;
  }

  std::chrono::milliseconds dur(const toml::table& t, std::string_view key, std::chrono::milliseconds dflt,
                                std::chrono::milliseconds lo, std::chrono::milliseconds hi) {
    auto* n = t.get(key);
    if (!n) return dflt;
    if (!n->is_string()) {
      fail(at(src, n->source()), "'" + std::string(key) + "' must be a duration string like \"5s\"");
      return dflt;
    }
    auto d = parseDuration(n->as_string()->get());
    if (!d) {
      fail(at(src, n->source()), d.error().message);
      return dflt;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    if (ms < lo || ms > hi) {
      fail(at(src, n->source()), "'" + std::string(key) + "' = " + formatDuration(*d) +
                                     " is out of range [" + formatDuration(lo) + ", " +
                                     formatDuration(hi) + "]");
      return dflt;
    }
    return ms;
  }
};

}  // namespace

Result<Config> parseConfig(const std::string& text, const std::string& src) {
  toml::table root;
  try {
    root = toml::parse(text, src);
  } catch (const toml::parse_error& e) {
    return makeError(src + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  Reader r{src, std::nullopt};
  Config c;
  r.checkKeys(root, "top level", {"agent", "tls", "interfaces"});
  static const toml::table empty;
  auto section = [&](std::string_view name) -> const toml::table& {
    auto* n = root.get(name);
    if (!n) {
      r.fail(src, "missing section [" + std::string(name) + "]");
      return empty;
    }
    if (!n->is_table()) {
      r.fail(at(src, n->source()), "'" + std::string(name) + "' must be a table");
      return empty;
    }
    return *n->as_table();
  };
  const auto& a = section("agent");
  r.checkKeys(a, "agent", {"node", "listen", "state_dir", "lease_timeout", "max_fault_lifetime",
                           "max_connections"});
  c.node = r.str(a, "node", "agent", true);
  if (!c.node.empty() && c.node.size() > 63) r.fail(src, "[agent] node name is longer than 63 characters");
  std::string listen = r.str(a, "listen", "agent", true);
  c.stateDir = r.str(a, "state_dir", "agent", true);
  c.leaseTimeout = r.dur(a, "lease_timeout", c.leaseTimeout, std::chrono::milliseconds(200),
                         std::chrono::minutes(10));
  c.maxFaultLifetime = r.dur(a, "max_fault_lifetime", c.maxFaultLifetime,
                             std::chrono::seconds(1), std::chrono::hours(24));
  if (auto* mc = a.get("max_connections")) {
    auto v = mc->value<int64_t>();
    if (!v || *v < 1 || *v > 100000)
      r.fail(at(src, mc->source()), "'max_connections' must be an integer in [1, 100000]");
    else
      c.maxConnections = size_t(*v);
  }
  if (!listen.empty()) {
    // "ADDR:PORT" or "[V6]:PORT"
    std::string host, port;
    if (listen.front() == '[') {
      auto close = listen.find(']');
      if (close != std::string::npos && close + 1 < listen.size() && listen[close + 1] == ':') {
        host = listen.substr(1, close - 1);
        port = listen.substr(close + 2);
      }
    } else if (auto colon = listen.rfind(':'); colon != std::string::npos) {
      host = listen.substr(0, colon);
      port = listen.substr(colon + 1);
    }
    unsigned char buf[16];
    bool hostOk = inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
    int portNum = -1;
    try {
      size_t used = 0;
      portNum = std::stoi(port, &used);
      if (used != port.size()) portNum = -1;
    } catch (...) {
    }
    if (!hostOk || portNum < 0 || portNum > 65535)
      r.fail(src, "[agent] listen = \"" + listen +
                      "\" must be an IP address and port, e.g. \"198.18.1.11:7470\" or \"[::1]:7470\"");
    c.listenAddress = host;
    c.listenPort = uint16_t(portNum < 0 ? 0 : portNum);
  }
  const auto& t = section("tls");
  r.checkKeys(t, "tls", {"ca", "cert", "key"});
  c.tls.caFile = r.str(t, "ca", "tls", true);
  c.tls.certFile = r.str(t, "cert", "tls", true);
  c.tls.keyFile = r.str(t, "key", "tls", true);
  const auto& i = section("interfaces");
  r.checkKeys(i, "interfaces", {"data", "allow", "protected", "allow_default_route"});
  c.dataInterfaces = r.strList(i, "data", "interfaces");
  c.allowInterfaces = r.strList(i, "allow", "interfaces");
  c.protectedInterfaces = r.strList(i, "protected", "interfaces");
  if (auto* n = i.get("allow_default_route")) {
    if (!n->is_boolean())
      r.fail(at(src, n->source()), "'allow_default_route' must be true or false");
    else
      c.allowDefaultRoute = n->as_boolean()->get();
  }
  for (const auto& p : c.protectedInterfaces)
    for (const auto& al : c.allowInterfaces)
      if (p == al)
        r.fail(src, "[interfaces] '" + p +
                        "' is both allowed and protected: remove it from one of the lists");
  if (r.err) return *r.err;
  return c;
}

Result<Config> loadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read agent config '" + path + "': check the path given to --config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseConfig(ss.str(), path);
}

}  // namespace rc::agent
