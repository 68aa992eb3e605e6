// Agent configuration parsing with bounds on every value.
#include "agent/config.hpp"

#include <arpa/inet.h>

#include <unistd.h>

#include <cctype>
#include <functional>
#include <type_traits>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/toml_text.hpp"

#include "common/units.hpp"
#include "metrics/exporter.hpp"

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

  // An argv list: argv[0] an absolute path, no shell; only known {placeholders}.
  std::vector<std::string> argv(const toml::table& t, std::string_view key, const std::string& where,
                                bool snapshotAllowed) {
    std::vector<std::string> out;
    std::string what = where + " " + std::string(key);
    auto* n = t.get(key);
    if (!n) {
      fail(src, "missing '" + std::string(key) + "' in " + where +
                    " (an argv list such as [\"/usr/bin/ecnconfig\", \"-l\"])");
      return out;
    }
    auto* arr = n->as_array();
    if (!arr || arr->empty() || arr->size() > 64) {
      fail(at(src, n->source()), what + " must be a list of 1-64 strings (argv; no shell runs it)");
      return out;
    }
    for (auto& e : *arr) {
      if (!e.is_string() || e.as_string()->get().size() > 4096) {
        fail(at(src, e.source()), what + ": every element must be a string of at most 4096 characters");
        return out;
      }
      const std::string& arg = e.as_string()->get();
      for (size_t open = arg.find('{'); open != std::string::npos; open = arg.find('{', open + 1)) {
        size_t close = arg.find('}', open);
        std::string ph = close == std::string::npos ? arg.substr(open) : arg.substr(open, close - open + 1);
        bool known = ph == "{port}" || ph == "{queue}" || ph == "{kmin}" || ph == "{kmax}" ||
                     ph == "{pmax}" || ph == "{interface}" || (snapshotAllowed && ph == "{snapshot}");
        if (!known)
          fail(at(src, e.source()), what + ": unknown placeholder '" + ph +
                                        "' (known: {port} {queue} {kmin} {kmax} {pmax} {interface}" +
                                        (snapshotAllowed ? " {snapshot})" : ")"));
      }
      out.push_back(arg);
    }
    if (!out.empty() && (out.front().empty() || out.front().front() != '/' ||
                         out.front().find('{') != std::string::npos))
      fail(at(src, n->source()), what + ": the program must be an absolute path, e.g. \"/usr/bin/ecnconfig\"");
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

namespace {

// [agent] listen = "ADDR:PORT" or "[V6]:PORT".
void parseListen(Reader& r, const std::string& src, const std::string& listen, Config& c) {
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

// [agent]: the node's name, where it listens, its state, leases, limits and metrics.
void parseAgentSection(Reader& r, const std::string& src, const toml::table& a, Config& c) {
  r.checkKeys(a, "agent", {"node", "listen", "state_dir", "lease_timeout", "max_fault_lifetime",
                           "max_connections", "max_workload_memory", "metrics"});
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
  if (auto* mm = a.get("max_workload_memory")) {
    auto sizeText = mm->value<std::string>();
    auto v = sizeText ? parseSize(*sizeText) : Result<uint64_t>(makeError("not a string"));
    if (!v || *v < (uint64_t(1) << 20))
      r.fail(at(src, mm->source()), "'max_workload_memory' must be a size of at least 1MiB, e.g. \"8GiB\"");
    else
      c.maxWorkloadMemory = *v;
  }
  if (auto* m = a.get("metrics")) {
    auto addr = m->value<std::string>();
    auto ep = addr ? metrics::parseEndpoint(*addr) : Result<metrics::Endpoint>(makeError(
                         "'metrics' must be a string \"ADDR:PORT\", e.g. \"127.0.0.1:9465\""));
    if (!ep)
      r.fail(at(src, m->source()), "[agent] " + ep.error().message);
    else
      c.metrics = *addr;
  }
  if (!listen.empty()) parseListen(r, src, listen, c);
}

// [interfaces]: which interfaces carry data, may be faulted or are protected.
void parseInterfaces(Reader& r, const std::string& src, const toml::table& i, Config& c) {
  r.checkKeys(i, "interfaces", {"data", "allow", "protected", "allow_default_route",
                                 "counter_interval", "data_subnets"});
  c.counterInterval = r.dur(i, "counter_interval", c.counterInterval,
                            std::chrono::milliseconds(50), std::chrono::minutes(1));
  c.dataInterfaces = r.strList(i, "data", "interfaces");
  c.allowInterfaces = r.strList(i, "allow", "interfaces");
  c.protectedInterfaces = r.strList(i, "protected", "interfaces");
  if (auto* n = i.get("data_subnets")) {
    auto* arr = n->as_array();
    if (!arr || arr->size() > 256) r.fail(at(src, n->source()), "'data_subnets' must be a list of at most 256 IPv4 prefixes, e.g. [\"10.0.0.0/16\"]");
    for (size_t k = 0; arr && k < arr->size() && k < 256; k++) {
      auto& e = (*arr)[k];
      auto p = e.is_string() ? faults::parseIpv4Prefix(e.as_string()->get())
                             : Result<faults::Ipv4Prefix>(makeError("an entry is not a string"));
      if (!p)
        r.fail(at(src, e.source()), "[interfaces] data_subnets: " + p.error().message);
      else
        c.dataSubnets.push_back(e.as_string()->get());
    }
  }
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
}

// [lab]: the lab switch's control socket and this node's port on it.
void parseLab(Reader& r, const std::string& src, const toml::node& n, Config& c) {
  if (!n.is_table()) {
    r.fail(at(src, n.source()), "'lab' must be a table");
  } else {
    const auto& l = *n.as_table();
    r.checkKeys(l, "lab", {"switch_socket", "switch_port"});
    c.labswitchSocket = r.str(l, "switch_socket", "lab", false);
    c.labswitchPort = r.str(l, "switch_port", "lab", false);
    // A unix socket path, or tcp:IPV4:PORT (how a soft-RoCE lab guest reaches the switch
    // on its host, docs/soft-roce.md).
    bool tcp = c.labswitchSocket.rfind("tcp:", 0) == 0 && c.labswitchSocket.size() <= 30;
    if (!c.labswitchSocket.empty() && !tcp &&
        (c.labswitchSocket.front() != '/' || c.labswitchSocket.size() > 107))
      r.fail(src, "[lab] switch_socket = \"" + c.labswitchSocket +
                      "\" must be an absolute path of at most 107 characters or tcp:IPV4:PORT");
  }
}

// [ecn_commands.NAME]: a site's command templates for ecn_shift (snapshot, apply, revert).
void parseEcnCommands(Reader& r, const std::string& src, const toml::node& n, Config& c) {
  if (!n.is_table()) {
    r.fail(at(src, n.source()), "'ecn_commands' must be a table of named templates");
  } else {
    for (auto&& [key, value] : *n.as_table()) {
      std::string name(key.str());
      std::string where = "[ecn_commands." + name + "]";
      bool nameOk = !name.empty() && name.size() <= 32;
      for (char ch : name)
        nameOk = nameOk && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-');
      if (!nameOk) {
        r.fail(at(src, value.source()), "command template names are 1-32 characters of A-Z a-z 0-9 _ -");
        continue;
      }
      auto* entry = value.as_table();
      if (!entry) {
        r.fail(at(src, value.source()), where + " must be a table with snapshot, apply and revert");
        continue;
      }
      r.checkKeys(*entry, "ecn_commands." + name, {"snapshot", "apply", "revert"});
      faults::CommandTemplate tmpl;
      tmpl.snapshot = r.argv(*entry, "snapshot", where, false);
      tmpl.apply = r.argv(*entry, "apply", where, false);
      tmpl.revert = r.argv(*entry, "revert", where, true);
      c.ecnCommands[name] = std::move(tmpl);
    }
  }
}

// [observe]: where the local telemetry intake listens, who may send, and its bounds.
void parseObserve(Reader& r, const std::string& src, const toml::node& n, Config& c) {
  if (!n.is_table()) {
    r.fail(at(src, n.source()), "'observe' must be a table");
    return;
  }
  const auto& o = *n.as_table();
  r.checkKeys(o, "observe", {"enabled", "socket", "allow_uids", "max_clients",
                             "max_records_per_second", "max_queued_bytes"});
  auto& oc = c.observe;
  if (auto* e = o.get("enabled")) {
    if (!e->is_boolean())
      r.fail(at(src, e->source()), "[observe] enabled must be true or false");
    else
      oc.enabled = e->as_boolean()->get();
  }
  oc.socket = r.str(o, "socket", "observe", false);
  if (!oc.socket.empty() && (oc.socket.front() != '/' || oc.socket.size() > 107))
    r.fail(src, "[observe] socket = \"" + oc.socket + "\" must be an absolute path of at most 107 characters");
  auto integer = [&](std::string_view key, int64_t lo, int64_t hi, auto& into) {
    auto* v = o.get(key);
    if (!v) return;
    auto x = v->value<int64_t>();
    if (!x || *x < lo || *x > hi || !v->is_integer())
      r.fail(at(src, v->source()), "[observe] " + std::string(key) + " must be an integer in [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    else
      into = static_cast<std::remove_reference_t<decltype(into)>>(*x);
  };
  integer("max_clients", 1, 4096, oc.maxClients);
  integer("max_records_per_second", 1, 10'000'000, oc.maxRecordsPerSecond);
  if (auto* mq = o.get("max_queued_bytes")) {
    auto text = mq->value<std::string>();
    auto v = text ? parseSize(*text) : Result<uint64_t>(makeError("not a string"));
    if (!v || *v < 4096 || *v > (uint64_t(1) << 30))
      r.fail(at(src, mq->source()), "[observe] max_queued_bytes must be a size in [4KiB, 1GiB], e.g. \"4MiB\"");
    else
      oc.maxQueuedBytes = *v;
  }
  if (auto* u = o.get("allow_uids")) {
    auto* arr = u->as_array();
    if (!arr || arr->size() > 64) {
      r.fail(at(src, u->source()), "[observe] allow_uids must be a list of at most 64 uids, e.g. [0, 1000]");
    } else {
      for (auto& e : *arr) {
        auto x = e.value<int64_t>();
        if (!e.is_integer() || !x || *x < 0 || *x > 0xfffffffeLL)
          r.fail(at(src, e.source()), "[observe] allow_uids: a uid is an integer in [0, 4294967294]");
        else
          oc.allowUids.push_back(uint32_t(*x));
      }
    }
  }
}

// [mpi]: mpirun, the benchmark and the launcher template of the `mpi` workload kind, all argv
// run without a shell (workload/mpi_launch.hpp).
void parseMpi(Reader& r, const std::string& src, const toml::node& n, Config& c) {
  if (!n.is_table()) {
    r.fail(at(src, n.source()), "'mpi' must be a table");
    return;
  }
  const auto& m = *n.as_table();
  r.checkKeys(m, "mpi", {"mpirun", "program", "preload", "launcher", "launch_helper", "oob_interfaces", "tmpdir",
                         "ucx_devices", "ucx_tls", "ucx_env"});
  auto& mc = c.mpi;
  c.mpiEnabled = true;
  auto path = [&](std::string_view key, std::string& into, bool required) {
    const std::string v = r.str(m, key, "mpi", required, into);
    if (const auto* node = m.get(key); node && node->is_string()) {
      if (auto ok = workload::checkProgramPath(v, "[mpi] " + std::string(key)); !ok)
        r.fail(at(src, node->source()), ok.error().message);
    }
    into = v;
  };
  path("mpirun", mc.mpirun, false);
  path("program", mc.program, true);
  path("launch_helper", mc.launchHelper, false);
  if (const auto* p = m.get("preload")) {
    const auto* arr = p->as_array();
    if (!arr || arr->size() > 8) {
      r.fail(at(src, p->source()), "[mpi] preload must be a list of at most 8 absolute paths (LD_PRELOAD of each rank)");
    } else {
      for (const auto& e : *arr) {
        const std::string v = e.is_string() ? e.as_string()->get() : std::string();
        if (v.empty() || v.front() != '/' || v.find(':') != std::string::npos || v.find(' ') != std::string::npos)
          r.fail(at(src, e.source()), "[mpi] preload: '" + v + "' is not an absolute path (no ':' or blanks)");
        else
          mc.preload.push_back(v);
      }
    }
  }
  // A list of at most MAX strings, each checked by CHECK (an error message, or empty).
  auto list = [&](std::string_view key, size_t max, std::vector<std::string>& into,
                  const std::function<Result<void>(const std::string&)>& check) {
    const auto* p = m.get(key);
    if (!p) return;
    const auto* arr = p->as_array();
    if (!arr || arr->size() > max) {
      r.fail(at(src, p->source()), "[mpi] " + std::string(key) + " must be a list of at most " + std::to_string(max) + " strings");
      return;
    }
    for (const auto& e : *arr) {
      const std::string v = e.is_string() ? e.as_string()->get() : std::string();
      if (auto ok = e.is_string() ? check(v) : Result<void>(makeError("[mpi] " + std::string(key) + ": an element is not a string"));
          !ok)
        r.fail(at(src, e.source()), ok.error().message);
      else
        into.push_back(v);
    }
  };
  auto interfaceName = [](std::string_view key) {
    return [key](const std::string& v) -> Result<void> {
      if (v.empty() || v.size() > 15 || v.find_first_of(" ,/") != std::string::npos)
        return makeError("[mpi] " + std::string(key) + ": '" + v + "' is not an interface name (1-15 characters, no blanks, commas or '/')");
      return {};
    };
  };
  list("oob_interfaces", 8, mc.oobInterfaces, interfaceName("oob_interfaces"));
  list("ucx_devices", 8, mc.ucxDevices, [](const std::string& v) { return workload::checkUcxDevice(v, "[mpi] ucx_devices"); });
  list("ucx_env", 32, mc.ucxEnv, [](const std::string& v) { return workload::checkUcxSetting(v, "[mpi] ucx_env"); });
  if (const auto* t = m.get("ucx_tls")) {
    const std::string v = r.str(m, "ucx_tls", "mpi", false, mc.ucxTls);
    if (auto ok = workload::checkUcxTls(v, "[mpi] ucx_tls"); t->is_string() && !ok)
      r.fail(at(src, t->source()), ok.error().message);
    else
      mc.ucxTls = v;
  }
  if (const auto* t = m.get("tmpdir")) {
    const std::string v = r.str(m, "tmpdir", "mpi", false, mc.tmpdir);
    if (t->is_string() && (v.empty() || v.front() != '/' || v.find_first_of(" ,'\"") != std::string::npos))
      r.fail(at(src, t->source()), "[mpi] tmpdir: '" + v + "' is not an absolute path (no blanks, commas or quotes): "
             "where Open MPI keeps its session files on every node, e.g. \"/run/tmp\"");
    else
      mc.tmpdir = v;
  }
  const auto* l = m.get("launcher");
  if (!l) {
    r.fail(src, "missing 'launcher' in [mpi]: how mpirun reaches node {host}, e.g. [\"/usr/bin/ssh\", \"{host}\"]");
    return;
  }
  const auto* arr = l->as_array();
  std::vector<std::string> argv;
  bool strings = arr != nullptr;
  if (arr)
    for (const auto& e : *arr) {
      if (!e.is_string()) strings = false;
      else argv.push_back(e.as_string()->get());
    }
  if (!strings)
    r.fail(at(src, l->source()), "[mpi] launcher must be a list of strings (argv; no shell runs it)");
  else if (auto ok = workload::checkLauncher(argv, "[mpi] launcher"); !ok)
    r.fail(at(src, l->source()), ok.error().message);
  else
    mc.launcher = std::move(argv);
}

// What [observe] leaves out: the socket under the state directory, root and the agent's uid.
void defaultObserve(Reader& r, const std::string& src, Config& c) {
  auto& oc = c.observe;
  if (oc.socket.empty() && !c.stateDir.empty()) {
    oc.socket = c.stateDir + "/observe.sock";
    if (oc.enabled && oc.socket.size() > 107)
      r.fail(src, "[observe] the default socket \"" + oc.socket +
                      "\" is longer than 107 characters: set [observe] socket to a shorter path");
  }
  if (oc.allowUids.empty()) {
    oc.allowUids.push_back(0);
    if (::getuid() != 0) oc.allowUids.push_back(uint32_t(::getuid()));
  }
}

}  // namespace

Result<Config> parseConfig(const std::string& text, const std::string& src) {
  toml::table root;
  try {
    root = rc::parseToml(text, src);
  } catch (const toml::parse_error& e) {
    return makeError(src + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  Reader r{src, std::nullopt};
  Config c;
  r.checkKeys(root, "top level", {"agent", "tls", "interfaces", "lab", "ecn_commands", "observe", "mpi"});
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
  parseAgentSection(r, src, a, c);
  const auto& t = section("tls");
  r.checkKeys(t, "tls", {"ca", "cert", "key"});
  c.tls.caFile = r.str(t, "ca", "tls", true);
  c.tls.certFile = r.str(t, "cert", "tls", true);
  c.tls.keyFile = r.str(t, "key", "tls", true);
  const auto& i = section("interfaces");
  parseInterfaces(r, src, i, c);
  if (auto* n = root.get("lab")) parseLab(r, src, *n, c);
  if (auto* n = root.get("ecn_commands")) parseEcnCommands(r, src, *n, c);
  if (auto* n = root.get("observe")) parseObserve(r, src, *n, c);
  if (auto* n = root.get("mpi")) parseMpi(r, src, *n, c);
  defaultObserve(r, src, c);
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

Result<ReplaySettings> loadReplaySettings(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read agent config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  toml::table root;
  try {
    root = rc::parseToml(ss.str(), path);
  } catch (const toml::parse_error& e) {
    return makeError(path + ":" + std::to_string(e.source().begin.line) + ": not TOML (" +
                     std::string(e.description()) + ")");
  }
  ReplaySettings out;
  const toml::table* agent = root["agent"].as_table();
  const toml::node* dir = agent ? agent->get("state_dir") : nullptr;
  if (!dir || !dir->is_string() || dir->as_string()->get().empty())
    return makeError(path + ": no [agent] state_dir string");
  out.stateDir = dir->as_string()->get();
  if (const auto* n = agent->get("node"); n && n->is_string()) out.node = n->as_string()->get();
  // Each part on its own: a part with an error is left out, the others still count.
  auto part = [&](const std::string& what, const auto& read) {
    Reader r{path, std::nullopt};
    read(r);
    if (r.err) out.notes.push_back(what + " left out: " + r.err->message);
    return !r.err;
  };
  if (const auto* i = root["interfaces"].as_table()) {
    part("[interfaces] data", [&](Reader& r) {
      auto v = r.strList(*i, "data", "interfaces");
      if (!r.err && !v.empty()) out.policy.defaultInterface = v.front();
    });
    part("[interfaces] allow", [&](Reader& r) {
      auto v = r.strList(*i, "allow", "interfaces");
      if (!r.err) out.policy.allowlist = v;
    });
    part("[interfaces] protected", [&](Reader& r) {
      auto v = r.strList(*i, "protected", "interfaces");
      if (!r.err) out.policy.protectedInterfaces = v;
    });
  }
  if (const auto* l = root["lab"].as_table()) {
    part("[lab]", [&](Reader& r) {
      auto sock = r.str(*l, "switch_socket", "lab", false);
      auto port = r.str(*l, "switch_port", "lab", false);
      if (!r.err) {
        out.policy.labswitchSocket = sock;
        out.policy.labswitchPort = port;
      }
    });
  }
  if (const auto* e = root["ecn_commands"].as_table()) {
    for (auto&& [key, value] : *e) {
      std::string name(key.str());
      const auto* entry = value.as_table();
      if (!entry) continue;
      std::string where = "[ecn_commands." + name + "]";
      part(where, [&](Reader& r) {
        faults::CommandTemplate tmpl;
        tmpl.snapshot = r.argv(*entry, "snapshot", where, false);
        tmpl.apply = r.argv(*entry, "apply", where, false);
        tmpl.revert = r.argv(*entry, "revert", where, true);
        if (!r.err) out.policy.ecnCommands[name] = std::move(tmpl);
      });
    }
  }
  return out;
}

}  // namespace rc::agent
