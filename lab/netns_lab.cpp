// The namespace lab: builds node namespaces, a management bridge and a data fabric with
// iproute2, starts the agents under a supervisor, and tears everything down from lab.json.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.hpp"
#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "lab/lab_files.hpp"
#include "lab/lab_util.hpp"
#include "lab/lab_kind.hpp"
#include "lab/process.hpp"
#include "lab/supervisor.hpp"

namespace rc::lab {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxSlots = 200;
constexpr int kMaxNodes = 32;
constexpr int kReadyTimeoutMs = 10'000;
constexpr int kNetnsStopGraceMs = 15'000;  // the supervisor itself gives agents 10 s
constexpr int kHostTxRing = 10'000;  // frames in each host TAP's transmit ring (buildSwitchFabric)
const char* kSlotDir = "/run/rdmachaos/labs";

// Every name and address of slot k, in one place so that up, down and status agree.
struct Names {
  int slot;
  std::string prefix() const { return "rc" + std::to_string(slot) + "-"; }
  std::string nodeNs(int i) const { return prefix() + "n" + std::to_string(i); }
  std::string fabricNs() const { return prefix() + "fab"; }
  std::string mgmtBridge() const { return prefix() + "mgmt"; }
  std::string mgmtVeth(int i) const { return prefix() + "m" + std::to_string(i); }
  std::string fabricPort(int i) const { return "d" + std::to_string(i); }
  std::string bridgeAddress() const { return "198.18." + std::to_string(slot) + ".1"; }
  std::string mgmtAddress(int i) const {
    return "198.18." + std::to_string(slot) + "." + std::to_string(10 + i);
  }
  std::string dataAddress(int i) const {
    return "198.19." + std::to_string(slot) + "." + std::to_string(10 + i);
  }
};

Result<void> ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  auto r = runCommand(args);
  if (!r) return r.error();
  return {};
}

// DIR/lab.json exists and its supervisor or one of its agents is still alive.
bool labRunning(const LabState& s) {
  if (stillRunning(s.supervisor)) return true;
  if (s.fabric == "switch" && stillRunning(s.sw.proc, s.sw.config)) return true;
  for (const auto& n : s.nodes)
    if (stillRunning(n.agent, n.config)) return true;
  return false;
}

// ---- slot allocation -------------------------------------------------------------------

struct Prefix {
  uint32_t addr;
  int len;
};

std::optional<Prefix> parsePrefix(const std::string& text) {
  std::string a = text;
  int len = 32;
  if (auto slash = text.find('/'); slash != std::string::npos) {
    a = text.substr(0, slash);
    try {
      len = std::stoi(text.substr(slash + 1));
    } catch (...) {
      return std::nullopt;
    }
  }
  in_addr in{};
  if (::inet_pton(AF_INET, a.c_str(), &in) != 1 || len < 0 || len > 32) return std::nullopt;
  return Prefix{ntohl(in.s_addr), len};
}

bool overlaps(Prefix a, Prefix b) {
  int len = std::min(a.len, b.len);
  uint32_t mask = len == 0 ? 0 : ~uint32_t(0) << (32 - len);
  return (a.addr & mask) == (b.addr & mask);
}

// Destinations of every IPv4 route of the host (all tables) except default routes: a lab
// subnet must not shadow or be shadowed by anything the host already routes.
Result<std::vector<Prefix>> hostRoutes() {
  auto out = runCommand({"ip", "-4", "-o", "route", "show", "table", "all"});
  if (!out) return out.error();
  static const std::vector<std::string> types = {
      "unicast",   "local",    "broadcast", "multicast", "unreachable",
      "blackhole", "prohibit", "throw",     "nat",       "anycast"};
  std::vector<Prefix> routes;
  std::istringstream lines(*out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string dst;
    words >> dst;
    if (std::find(types.begin(), types.end(), dst) != types.end()) words >> dst;
    if (dst.empty() || dst == "default") continue;
    if (auto p = parsePrefix(dst); p && p->len > 0) routes.push_back(*p);
  }
  return routes;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

bool anyWithPrefix(const std::vector<std::string>& names, const std::string& prefix) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
}

std::string slotPath(int k) { return std::string(kSlotDir) + "/" + std::to_string(k); }

// A slot file is stale when the DIR it names no longer holds a lab in that slot.
bool slotStale(int k) {
  std::string owner = readText(slotPath(k));
  while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
  if (owner.empty()) return true;
  auto s = loadState(owner);
  return !s || s->slot != k;
}

// Picks a free slot, records it in lab.json, then claims the slot file. Called with the
// global slot lock held, so stale-slot reclaiming cannot race another `lab up`.
Result<void> claimSlot(LabState& state) {
  auto routes = hostRoutes();
  if (!routes) return routes.error();
  auto links = listDir("/sys/class/net");
  auto namespaces = listDir("/run/netns");
  for (int k = 1; k <= kMaxSlots; k++) {
    Names names{k};
    if (anyWithPrefix(links, names.prefix()) || anyWithPrefix(namespaces, names.prefix())) continue;
    auto mgmt = parsePrefix("198.18." + std::to_string(k) + ".0/24");
    auto data = parsePrefix("198.19." + std::to_string(k) + ".0/24");
    if (std::any_of(routes->begin(), routes->end(),
                    [&](Prefix p) { return overlaps(p, *mgmt) || overlaps(p, *data); }))
      continue;
    std::string path = slotPath(k);
    if (::access(path.c_str(), F_OK) == 0) {
      if (!slotStale(k)) continue;
      log::info("reclaiming stale lab slot {} (its lab directory '{}' has no lab)", k,
                readText(path).substr(0, readText(path).find('\n')));
      ::unlink(path.c_str());
    }
    state.slot = k;
    state.slotFile = path;
    if (auto r = saveState(state); !r) return r;
    // The slot is claimed by creating its file, never over another lab's (RENAME_NOREPLACE).
    auto claimed = writeFileAtomic(path, state.dir + "\n", {.mode = 0644, .replace = false});
    if (!claimed) {
      if (claimed.error().code == EEXIST) continue;
      return makeError("cannot create lab slot file: " + claimed.error().message, claimed.error().code);
    }
    return {};
  }
  return makeError("no free lab slot: all " + std::to_string(kMaxSlots) +
                   " slots are taken or their 198.18.k.0/24 / 198.19.k.0/24 subnets are routed on "
                   "this host; see " +
                   std::string(kSlotDir) + " and `ip netns list`");
}

// ---- building --------------------------------------------------------------------------

// Writes a sysctl of a network namespace: /proc/sys/net shows the namespace of the opener,
// so a child enters the namespace and writes there (no dependency on procps' sysctl).
Result<void> netnsSysctl(const std::string& ns, const std::string& key, const std::string& value) {
  std::string path = "/proc/sys/" + key;
  std::string nsPath = "/run/netns/" + ns;
  pid_t pid = ::fork();
  if (pid < 0) return makeError(errnoText("cannot fork to set", path), errno);
  if (pid == 0) {
    int nsFd = ::open(nsPath.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsFd < 0 || ::setns(nsFd, CLONE_NEWNET) != 0) ::_exit(2);
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, value.data(), value.size()) != ssize_t(value.size())) ::_exit(3);
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError("cannot set " + path + " = " + value + " in namespace " + ns);
  return {};
}

// Strict ARP on both planes: with Linux's default weak-host ARP, a node would answer for its
// data address on the management network, and the two networks would leak into each other.
Result<void> strictArp(const std::string& ns, const std::string& dev) {
  if (auto r = netnsSysctl(ns, "net/ipv4/conf/" + dev + "/arp_ignore", "1"); !r) return r;
  return netnsSysctl(ns, "net/ipv4/conf/" + dev + "/arp_announce", "2");
}

Result<void> buildManagement(const Names& names, int nodes) {
  std::string br = names.mgmtBridge();
  if (auto r = ip({"link", "add", br, "type", "bridge"}); !r) return r;
  if (auto r = ip({"addr", "add", names.bridgeAddress() + "/24", "dev", br}); !r) return r;
  if (auto r = ip({"link", "set", br, "up"}); !r) return r;
  std::string arp = "/proc/sys/net/ipv4/conf/" + br + "/arp_ignore";
  if (UniqueFD fd(::open(arp.c_str(), O_WRONLY | O_CLOEXEC)); fd.isValid())
    (void)!::write(fd.get(), "1", 1);
  for (int i = 1; i <= nodes; i++) {
    std::string ns = names.nodeNs(i), veth = names.mgmtVeth(i);
    if (auto r = ip({"link", "add", veth, "type", "veth", "peer", "name", "mgmt0", "netns", ns});
        !r)
      return r;
    if (auto r = ip({"link", "set", veth, "master", br, "up"}); !r) return r;
    if (auto r = ip({"-n", ns, "addr", "add", names.mgmtAddress(i) + "/24", "dev", "mgmt0"}); !r)
      return r;
    if (auto r = ip({"-n", ns, "link", "set", "mgmt0", "up"}); !r) return r;
    if (auto r = strictArp(ns, "mgmt0"); !r) return r;
  }
  return {};
}

// The data fabric: today a Linux bridge in its own namespace. The userspace lab switch will
// replace this one function (TAP ports instead of veth ends on br0); nodes keep data0.
Result<void> buildFabric(const Names& names, int nodes) {
  std::string fab = names.fabricNs();
  if (auto r = ip({"-n", fab, "link", "add", "br0", "type", "bridge"}); !r) return r;
  if (auto r = ip({"-n", fab, "link", "set", "br0", "up"}); !r) return r;
  for (int i = 1; i <= nodes; i++) {
    std::string ns = names.nodeNs(i), port = names.fabricPort(i);
    if (auto r = ip({"-n", fab, "link", "add", port, "mtu", "1500", "type", "veth", "peer", "name",
                     "data0", "mtu", "1500", "netns", ns});
        !r)
      return r;
    if (auto r = ip({"-n", fab, "link", "set", port, "master", "br0", "up"}); !r) return r;
    if (auto r = ip({"-n", ns, "addr", "add", names.dataAddress(i) + "/24", "dev", "data0"}); !r)
      return r;
    if (auto r = ip({"-n", ns, "link", "set", "data0", "up"}); !r) return r;
    if (auto r = strictArp(ns, "data0"); !r) return r;
  }
  return {};
}

// The data fabric through rdmachaos-labswitch: each node's data0 is a persistent TAP (made
// by `ip tuntap`, so it lives and dies with the node's namespace), or with VETH one end of a
// veth pair whose other end lives in the fabric namespace; the switch process attaches to all
// of them. A restarted switch re-attaches; the hosts keep addresses and ARP.
Result<void> buildSwitchFabric(const Names& names, int nodes, bool veth) {
  if (veth) {
    // The switch's ends live in the fabric namespace, which has no address on them: nothing of
    // its own (no IPv6 router solicitations, no neighbour discovery) goes to the hosts.
    for (const char* key : {"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"})
      if (auto r = netnsSysctl(names.fabricNs(), key, "1"); !r) return r;
  }
  for (int i = 1; i <= nodes; i++) {
    std::string ns = names.nodeNs(i);
    if (veth) {
      // data0 is a veth whose other end (dI) the switch reads with AF_PACKET. A veth has no
      // transmit ring: what the switch reads late waits in its socket's receive queue.
      std::string fab = names.fabricNs(), port = names.fabricPort(i);
      if (auto r = ip({"-n", fab, "link", "add", port, "mtu", "1500", "type", "veth", "peer", "name", "data0", "mtu",
                       "1500", "netns", ns});
          !r)
        return r;
      if (auto r = ip({"-n", fab, "link", "set", port, "up"}); !r) return r;
    } else {
      if (auto r = ip({"-n", ns, "tuntap", "add", "dev", "data0", "mode", "tap"}); !r) return r;
      if (auto r = ip({"-n", ns, "link", "set", "data0", "mtu", "1500"}); !r) return r;
      // The host NIC's transmit ring. A TAP drops what its ring cannot take (it never stops the
      // host's queue), so a burst the switch reads late is lost there, lossless class or not:
      // with the default 1,000 frames an incast run lost 1,300-8,500 frames per host at the
      // TAP, and the victim job's retransmission timeouts set its iteration p99. 10,000 frames
      // (15 MB) absorb the switch's scheduling gaps on a busy 2-core machine, as a RoCE NIC's
      // queues hold a paused priority's frames instead of dropping them.
      if (auto r = ip({"-n", ns, "link", "set", "data0", "txqueuelen", std::to_string(kHostTxRing)}); !r) return r;
    }
    if (auto r = ip({"-n", ns, "addr", "add", names.dataAddress(i) + "/24", "dev", "data0"}); !r)
      return r;
    if (auto r = ip({"-n", ns, "link", "set", "data0", "up"}); !r) return r;
    if (auto r = strictArp(ns, "data0"); !r) return r;
  }
  return {};
}

// --split-cores: each host's receive work on every core but the switch's (core 0). A TAP write
// then queues the frame for another core (RPS on the host's data0) and returns, instead of
// running the host's TCP stack, its wake-up and the ACK it sends in the switch's time. The
// write goes through `ip netns exec`, which mounts the namespace's own /sys.
Result<void> steerHostReceive(const Names& names, int nodes) {
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);  // 2 or more: netns::up refuses fewer
  char mask[32];
  // Cores 1..N-1, of the first 32 (rps_cpus takes a hex mask; longer ones come in comma groups).
  uint64_t bits = cores >= 64 ? ~uint64_t(1) : ((uint64_t(1) << cores) - 1) & ~uint64_t(1);
  std::snprintf(mask, sizeof mask, "%llx", static_cast<unsigned long long>(bits & 0xffffffffull));
  for (int i = 1; i <= nodes; i++)
    if (auto r = ip({"netns", "exec", names.nodeNs(i), "sh", "-c",
                     std::string("echo ") + mask + " > /sys/class/net/data0/queues/rx-0/rps_cpus"});
        !r)
      return makeError("lab up: --split-cores: cannot steer " + names.nodeNs(i) + "'s receive work: " + r.error().message);
  return {};
}

std::string switchConfig(const LabState& s, const UpOptions& o) {
  nlohmann::json hosts = nlohmann::json::array();
  Names names{s.slot};
  for (size_t i = 0; i < s.nodes.size(); i++) {
    const auto& n = s.nodes[i];
    if (o.switchPorts == "veth")
      hosts.push_back({{"name", n.name}, {"netns", "/run/netns/" + names.fabricNs()},
                       {"ifname", names.fabricPort(int(i) + 1)}, {"io", "packet"},
                       {"host_netns", "/run/netns/" + n.netns}});
    else
      hosts.push_back({{"name", n.name}, {"netns", "/run/netns/" + n.netns}, {"ifname", "data0"}});
  }
  nlohmann::json j = {{"control", s.sw.control}, {"rate_bps", o.rateBps}, {"mtu", 1500},
                      {"leaves", o.leaves},      {"spines", o.spines},     {"routing", o.routing},
                      {"hosts", hosts}, {"offload", o.switchOffload},
                      {"delivery_hold_us", double(o.deliveryHoldNs) / 1e3},
                      {"tcp_ack_priority", o.tcpAckPriority}, {"cpu", o.splitCores ? 0 : -1},
                      {"ecn", {{"enabled", o.ecnEnabled}, {"kmin", o.ecnKminBytes}, {"kmax", o.ecnKmaxBytes},
                               {"pmax", o.ecnPmax}}}};
  return j.dump(2) + "\n";
}

// Waits (bounded, best effort) until the switch accepts on its control socket.
void waitForSwitch(const LabState& s) {
  int64_t deadline = monoNs() + 10'000'000'000;
  while (monoNs() < deadline) {
    UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, s.sw.control.c_str(), sizeof sa.sun_path - 1);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return;
    ::poll(nullptr, 0, 50);
  }
  log::warn("the lab switch does not accept on {} after 10 s (continuing; see {})", s.sw.control,
            s.sw.log);
}

Result<std::string> resolveSwitchBinary(const UpOptions& o, const std::string& agentBinary) {
  std::vector<std::string> cands;
  if (!o.switchBinary.empty()) {
    cands.push_back(o.switchBinary);
  } else {
    if (const char* env = std::getenv("RDMACHAOS_LABSWITCH"); env && *env) cands.push_back(env);
    std::string dir = agentBinary.substr(0, agentBinary.rfind('/'));
    cands.push_back(dir + "/rdmachaos-labswitch");
    cands.push_back(dir + "/../labswitch/rdmachaos-labswitch");
    cands.push_back("rdmachaos-labswitch");
  }
  for (const auto& c : cands)
    if (auto r = resolveBinary(c)) return r;
  return makeError("the lab switch binary (rdmachaos-labswitch) was not found; build it (ninja -C "
                   "build labswitch/rdmachaos-labswitch), set RDMACHAOS_LABSWITCH, or use --fabric bridge");
}

std::string agentConfig(const LabState& s, const NodeRecord& n, std::chrono::milliseconds lease, int metricsPort) {
  const bool onSwitch = s.fabric == "switch" && !s.sw.control.empty();
  std::string text = agentConfigText(
      s, n,
      {.heading = "rdmachaos-agent configuration for lab node " + n.name + " (written by `rdmachaos lab up`)",
       .listen = n.mgmtAddress + ":" + std::to_string(kAgentPort),
       .stateDir = tomlString(s.dir + "/nodes/" + n.name + "/state"),
       .metrics = metricsPort > 0 ? n.mgmtAddress + ":" + std::to_string(metricsPort) : "",
       // The only lab switch socket this agent's faults may use, and the port facing its host.
       .switchSocket = onSwitch ? s.sw.control : "",
       // One per node: a job's ranks in this node's namespace send their records here.
       .observeSocket = s.dir + "/nodes/" + n.name + "/observe.sock"},
      lease);
  // The command backend of ecn_shift, on the lab switch, written as an operator writes one for
  // a real switch's CLI: `backend = "command"`, `command = "labswitch"`, `port = "n1"`.
  if (onSwitch && !s.sw.binary.empty()) {
    const std::string head = tomlString(s.sw.binary) + ", \"--ecn-profile\", " + tomlString(s.sw.control);
    text += "[ecn_commands.labswitch]\n"
            "snapshot = [" + head + ", \"show\", \"{port}\", \"{queue}\"]\n"
            "apply = [" + head + ", \"set\", \"{port}\", \"{queue}\", \"{kmin}\", \"{kmax}\", \"{pmax}\"]\n"
            "revert = [" + head + ", \"restore\", \"{port}\", \"{queue}\", \"{snapshot}\"]\n";
  }
  text += netnsMpiSection(s, n);
  return text;
}

std::string inventory(const LabState& s) {
  return inventoryText(s, "rdmachaos inventory for the lab in " + s.dir, "slot = " + std::to_string(s.slot) + "\n",
                       [](const NodeRecord& n) { return InventoryNodeSpec{.address = tomlString(n.mgmtAddress)}; });
}

// Waits (bounded) until every agent accepts TCP on its management address. Best effort: an
// agent that never listens (a stand-in, or one that fails at start) only costs a warning.
void waitForAgents(const LabState& s) {
  struct Probe {
    const NodeRecord* node;
    UniqueFD fd;
    int64_t nextTryNs = 0;
    bool ready = false;
  };
  std::vector<Probe> probes;
  for (const auto& n : s.nodes) probes.push_back({&n, UniqueFD(), 0, false});
  int64_t deadline = monoNs() + int64_t(kReadyTimeoutMs) * 1'000'000;
  auto pending = [&] {
    return std::any_of(probes.begin(), probes.end(), [](const Probe& p) { return !p.ready; });
  };
  while (pending() && monoNs() < deadline) {
    int64_t now = monoNs();
    for (auto& p : probes) {
      if (p.ready || p.fd.isValid() || p.nextTryNs > now) continue;
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(kAgentPort);
      ::inet_pton(AF_INET, p.node->mgmtAddress.c_str(), &sa.sin_addr);
      p.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!p.fd.isValid()) continue;
      if (::connect(p.fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
        p.ready = true;
        p.fd.reset();
      } else if (errno != EINPROGRESS) {
        p.fd.reset();
        p.nextTryNs = now + 100'000'000;
      }
    }
    // Sleep in poll() until a connect completes or the next retry is due.
    std::vector<pollfd> pfds;
    std::vector<Probe*> owners;
    int64_t wake = deadline;
    for (auto& p : probes) {
      if (p.ready) continue;
      if (p.fd.isValid()) {
        pfds.push_back({p.fd.get(), POLLOUT, 0});
        owners.push_back(&p);
      } else {
        wake = std::min(wake, p.nextTryNs);
      }
    }
    int timeoutMs = int(std::max<int64_t>(1, (wake - monoNs()) / 1'000'000));
    int n = ::poll(pfds.data(), pfds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < pfds.size(); i++) {
      if (!pfds[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(owners[i]->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      owners[i]->fd.reset();
      if (err == 0)
        owners[i]->ready = true;
      else
        owners[i]->nextTryNs = monoNs() + 100'000'000;
    }
  }
  for (const auto& p : probes)
    if (!p.ready)
      log::warn("agent {} does not accept on {}:{} after {} s (continuing; see {})", p.node->name,
                p.node->mgmtAddress, kAgentPort, kReadyTimeoutMs / 1000, p.node->log);
}

// ---- teardown --------------------------------------------------------------------------

bool linkExists(const std::string& name) { return ::if_nametoindex(name.c_str()) != 0; }
bool netnsExists(const std::string& name) {
  return ::access(("/run/netns/" + name).c_str(), F_OK) == 0;
}

// lab.json is only acted on when every name in it is one this lab makes for its slot:
// `lab down` deletes namespaces and links and stops processes as root, and must never be led
// to delete the host's own interfaces or another lab's, whatever the file says.
Result<void> onlyOwnNames(const LabState& s, const std::string& dir) {
  auto refuse = [&](const std::string& what) -> Result<void> {
    return makeError("'" + statePath(dir) + "' names " + what +
                     ", which no lab in this directory makes; refusing to act on it (check the "
                     "file, and `ip netns list` / `ip link` for rc" +
                     std::to_string(s.slot) + "-* objects)");
  };
  if (s.slot < 1 || s.slot > kMaxSlots) return refuse("slot " + std::to_string(s.slot));
  if (s.dir != dir) return refuse("the directory '" + s.dir + "'");
  if (!s.slotFile.empty() && s.slotFile != slotPath(s.slot)) return refuse("the slot file '" + s.slotFile + "'");
  if (s.nodes.size() > size_t(kMaxNodes)) return refuse(std::to_string(s.nodes.size()) + " nodes");
  Names names{s.slot};
  auto ownNs = [&](const std::string& n) {
    if (n == names.fabricNs()) return true;
    for (int i = 1; i <= kMaxNodes; i++)
      if (n == names.nodeNs(i)) return true;
    return false;
  };
  auto ownLink = [&](const std::string& n) {
    if (n == names.mgmtBridge()) return true;
    for (int i = 1; i <= kMaxNodes; i++)
      if (n == names.mgmtVeth(i)) return true;
    return false;
  };
  for (const auto& ns : s.namespaces)
    if (!ownNs(ns)) return refuse("the namespace '" + ns + "'");
  for (const auto& l : s.rootLinks)
    if (!ownLink(l)) return refuse("the link '" + l + "'");
  for (const auto& n : s.nodes)
    if (!n.config.empty() && n.config != dir + "/nodes/" + n.name + "/agent.toml")
      return refuse("the agent configuration '" + n.config + "'");
  return {};
}

}  // namespace

// lab down of a namespace lab, with DIR's lock held (lab.cpp checked that STATE is DIR's).
Result<void> netns::downLocked(const LabState& state) {
  LabState s = state;
  const std::string dir = s.dir;
  if (auto r = onlyOwnNames(s, dir); !r) return r.error();
  std::vector<std::string> problems;

  // The supervisor first: it stops the agents itself (SIGTERM, so they revert their faults)
  // and would otherwise restart the ones we kill.
  if (stillRunning(s.supervisor)) {
    log::info("stopping lab supervisor (pid {})", s.supervisor.pid);
    for (auto& p : stopProcesses({s.supervisor}, {""}, kNetnsStopGraceMs))
      problems.push_back("supervisor " + p + " did not exit");
    if (auto again = loadState(dir)) s.nodes = again->nodes;
  }
  // Agents left behind by a supervisor that died (kill -9) or never got to stop them.
  std::vector<ProcRecord> agents;
  std::vector<std::string> configs;
  for (const auto& n : s.nodes) {
    agents.push_back(n.agent);
    configs.push_back(n.config);
  }
  for (auto& p : stopProcesses(agents, configs, 10'000))
    problems.push_back("agent " + p + " did not exit");
  if (s.fabric == "switch")
    for (auto& p : stopProcesses({s.sw.proc}, {s.sw.config}, 10'000))
      problems.push_back("lab switch " + p + " did not exit");

  // Root links before namespaces: deleting a veth is synchronous, while the devices of a
  // deleted namespace disappear later, from a kernel work queue.
  for (auto it = s.rootLinks.rbegin(); it != s.rootLinks.rend(); ++it) {
    if (!linkExists(*it)) continue;
    if (auto r = ip({"link", "del", *it}); !r && linkExists(*it))
      problems.push_back(r.error().message);
  }
  for (const auto& ns : s.namespaces) {
    if (!netnsExists(ns)) continue;
    if (auto r = ip({"netns", "del", ns}); !r && netnsExists(ns))
      problems.push_back(r.error().message);
  }
  if (!s.slotFile.empty()) {
    auto lock = FileLock::acquire(std::string(kSlotDir) + "/.lock", true);
    std::string owner = readText(s.slotFile);
    // Only our own claim: after a crash the slot may since have been reclaimed by another lab.
    if (owner == s.dir + "\n" && ::unlink(s.slotFile.c_str()) != 0 && errno != ENOENT)
      problems.push_back(errnoText("cannot remove", s.slotFile));
  }
  if (!problems.empty()) {
    std::string msg =
        "lab down in " + dir + " left things behind (lab.json kept; run `lab down` again):";
    for (auto& p : problems) msg += "\n  " + p;
    return makeError(msg);
  }
  ::unlink((dir + "/inventory.toml").c_str());
  if (::unlink(statePath(dir).c_str()) != 0 && errno != ENOENT)
    return makeError(errnoText("cannot remove", statePath(dir)), errno);
  log::info("lab in {} (slot {}) is down", dir, s.slot);
  return {};
}

namespace {

Result<std::string> build(const UpOptions& options, LabState& s, const std::string& agentBinary) {
  s.agentBinary = agentBinary;
  s.fabric = options.fabric;
  s.rateBps = options.fabric == "switch" ? options.rateBps : 0;
  s.ports = options.fabric == "switch" ? options.switchPorts : "";
  if (s.fabric == "switch") {
    auto sw = resolveSwitchBinary(options, agentBinary);
    if (!sw) return sw.error();
    s.sw.binary = *sw;
    s.sw.config = s.dir + "/switch.json";
    s.sw.control = s.dir + "/switch.sock";
    s.sw.log = s.dir + "/switch.log";
  }
  s.phase = "building";
  {
    if (auto r = mkdirs(kSlotDir, 0755); !r) return r.error();
    auto slotLock = FileLock::acquire(std::string(kSlotDir) + "/.lock", true);
    if (!slotLock) return slotLock.error();
    if (auto r = claimSlot(s); !r) return r.error();
  }
  Names names{s.slot};
  for (int i = 1; i <= options.nodes; i++) {
    NodeRecord n;
    n.name = "n" + std::to_string(i);
    n.netns = names.nodeNs(i);
    n.mgmtAddress = names.mgmtAddress(i);
    n.dataAddress = names.dataAddress(i);
    n.config = s.dir + "/nodes/" + n.name + "/agent.toml";
    n.log = s.dir + "/nodes/" + n.name + "/agent.log";
    s.nodes.push_back(n);
    s.namespaces.push_back(n.netns);
  }
  if (s.fabric == "bridge" || options.switchPorts == "veth") s.namespaces.push_back(names.fabricNs());
  s.rootLinks.push_back(names.mgmtBridge());
  for (int i = 1; i <= options.nodes; i++) s.rootLinks.push_back(names.mgmtVeth(i));
  // Everything is listed before the first object exists.
  if (auto r = saveState(s); !r) return r.error();
  log::info("lab slot {}: building {} node(s) in {}", s.slot, options.nodes, s.dir);

  for (const auto& ns : s.namespaces) {
    if (auto r = ip({"netns", "add", ns}); !r) return r.error();
    if (auto r = ip({"-n", ns, "link", "set", "lo", "up"}); !r) return r.error();
  }
  if (auto r = buildManagement(names, options.nodes); !r) return r.error();
  for (int i = 1; i <= options.nodes; i++) {
    const std::string ns = names.nodeNs(i);
    // ECN-capable TCP on the hosts, so workload traffic reacts to marks from the fabric; and a
    // loss/ECN-based congestion control rather than the host's default (BBR here): BBR
    // ignores ECN and drains its queue for 200 ms every 10 s (ProbeRTT), which shows in every
    // series as a dip at 10 s. A new namespace may only accept some (here: reno, not cubic).
    if (auto r = netnsSysctl(ns, "net/ipv4/tcp_ecn", "1"); !r) return r.error();
    // No memory between connections: by default TCP caches each peer's ssthresh and RTT when a
    // connection closes and starts the next one to that peer from them, so a trial after an
    // ECN or flap fault would begin with the window that fault had cut, and a playbook's
    // figures would depend on what ran before it on the same lab. Every trial's connections
    // start alike.
    if (auto r = netnsSysctl(ns, "net/ipv4/tcp_no_metrics_save", "1"); !r) return r.error();
    if (!netnsSysctl(ns, "net/ipv4/tcp_congestion_control", "cubic") &&
        !netnsSysctl(ns, "net/ipv4/tcp_congestion_control", "reno"))
      log::warn("lab: cannot choose cubic or reno in {}; TCP keeps the kernel's default", ns);
  }
  if (s.fabric == "bridge") {
    if (auto r = buildFabric(names, options.nodes); !r) return r.error();
  } else {
    if (auto r = buildSwitchFabric(names, options.nodes, options.switchPorts == "veth"); !r) return r.error();
    if (options.splitCores)
      if (auto r = steerHostReceive(names, options.nodes); !r) return r.error();
    if (auto r = writeFile(s.sw.config, switchConfig(s, options)); !r) return r.error();
  }

  log::info("lab slot {}: certificates in {}/pki", s.slot, s.dir);
  if (auto r = createLabCerts(s); !r) return r.error();

  for (const auto& n : s.nodes) {
    std::string nodeDir = s.dir + "/nodes/" + n.name;
    if (auto r = mkdirs(nodeDir + "/state", 0700); !r) return r.error();
    if (auto r = writeFile(n.config, agentConfig(s, n, options.leaseTimeout, options.agentMetricsPort)); !r) return r.error();
  }
  std::string inventoryPath = s.dir + "/inventory.toml";
  if (auto r = writeFile(inventoryPath, inventory(s)); !r) return r.error();

  log::info("lab slot {}: starting {} agent(s) ({})", s.slot, s.nodes.size(), agentBinary);
  if (auto r = startSupervisor(s); !r) return r.error();
  if (s.fabric == "switch") waitForSwitch(s);
  waitForAgents(s);
  return inventoryPath;
}

}  // namespace

Result<std::string> netns::up(const UpOptions& options) {
  if (options.nodes < 1 || options.nodes > kMaxNodes)
    return makeError("lab up: --nodes " + std::to_string(options.nodes) +
                     " is out of range; use 1.." + std::to_string(kMaxNodes));
  if (options.dir.empty()) return makeError("lab up: no lab directory given (--dir DIR)");
  if (options.fabric != "switch" && options.fabric != "bridge")
    return makeError("lab up: fabric '" + options.fabric + "' is not 'switch' or 'bridge'");
  if (options.fabric == "switch" && options.spines > 0 &&
      (options.leaves < 1 || options.nodes % options.leaves != 0))
    return makeError("lab up: " + std::to_string(options.nodes) + " node(s) do not divide into " +
                     std::to_string(options.leaves) + " leaves; pick --nodes as a multiple");
  if (options.switchPorts != "tap" && options.switchPorts != "veth")
    return makeError("lab up: --ports '" + options.switchPorts + "' is not 'tap' or 'veth'");
  if (options.switchPorts == "veth" && options.fabric != "switch")
    return makeError("lab up: --ports veth sets how the lab switch reaches its hosts; the bridge fabric has no switch "
                     "process (leave it out)");
  if (options.switchPorts == "veth" && !options.switchOffload)
    return makeError("lab up: --ports veth always carries segmentation offload; leave out --no-offload, or use --ports tap");
  if (options.splitCores && options.fabric != "switch")
    return makeError("lab up: --split-cores sets the lab switch's core and its hosts' receive work; the bridge fabric "
                     "has no switch process (leave it out)");
  if (options.splitCores && ::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    return makeError("lab up: --split-cores needs 2 cores or more (this machine has " +
                     std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + "; leave it out)");
  if (::geteuid() != 0)
    return makeError("lab up needs root (CAP_NET_ADMIN) to create namespaces; run with sudo");
  auto binary = resolveBinary(options.agentBinary);
  if (!binary) return binary.error();
  if (int n = threadCount(); n > 1)
    return makeError("lab up must run before the process starts threads (found " +
                     std::to_string(n) + "): the lab supervisor is forked from it");

  std::string dir = absoluteDir(options.dir);
  if (auto r = trustedDir(dir); !r) return r.error();
  auto dirLock = FileLock::acquire(dir + "/.lab.lock", false);
  if (!dirLock)
    return makeError("another `rdmachaos lab` command is working on " + dir + "; try again");

  if (auto old = loadState(dir)) {
    if (old->kind != kNetnsKind.name)
      return makeError("a " + labKindText(old->kind) + " is in " + dir + "; run `rdmachaos lab down --dir " +
                       dir + "` first");
    if (labRunning(*old))
      return makeError("lab already up in " + dir + "; run `rdmachaos lab down --dir " + dir +
                       "` first");
    log::info("cleaning up the remains of an earlier lab in {}", dir);
    if (auto r = downLockedDir(dir); !r) return r.error();
  } else if (old.error().code != ENOENT) {
    return old.error();
  }

  LabState s;
  s.dir = dir;
  auto result = build(options, s, *binary);
  if (!result) {
    log::error("lab up failed: {}; removing what was created", result.error().message);
    if (auto r = downLockedDir(dir); !r) log::error("{}", r.error().message);
    return result.error();
  }
  log::info("lab slot {} is up: {} node(s); inventory {}", s.slot, s.nodes.size(), *result);
  return result;
}

Result<std::string> netns::status(const LabState& s) {
  Names names{s.slot};
  std::ostringstream o;
  bool supAlive = stillRunning(s.supervisor);
  o << "lab in " << s.dir << ": slot " << s.slot << ", " << s.nodes.size() << " node(s), "
    << (s.phase == "running" ? "" : "phase " + s.phase + ", ") << "supervisor ";
  if (supAlive)
    o << "pid " << s.supervisor.pid << " (running)\n";
  else
    o << "not running"
      << (s.supervisor.pid ? " (was pid " + std::to_string(s.supervisor.pid) + ")" : "")
      << "; agents are no longer restarted\n";
  o << "management: bridge " << names.mgmtBridge() << " " << names.bridgeAddress() << "/24"
    << (linkExists(names.mgmtBridge()) ? "" : " (missing)") << "\n";
  if (s.fabric == "switch")
    o << "data: lab switch " << (stillRunning(s.sw.proc, s.sw.config) ? "pid " + std::to_string(s.sw.proc.pid) + " (running)" : "not running")
      << ", restarts " << s.sw.restarts << ", control " << s.sw.control << ", ports "
      << (std::find(s.namespaces.begin(), s.namespaces.end(), names.fabricNs()) != s.namespaces.end()
              ? "veth pairs from namespace " + names.fabricNs()
              : std::string("TAPs"))
      << ", 198.19." << s.slot << ".0/24\n";
  else
    o << "data: bridge br0 in namespace " << names.fabricNs()
      << (netnsExists(names.fabricNs()) ? "" : " (missing)") << ", 198.19." << s.slot << ".0/24\n";
  o << "inventory: " << s.dir << "/inventory.toml\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-10s %-15s %-15s %-8s %-6s %s\n", "NODE", "NAMESPACE",
                "MGMT", "DATA", "PID", "ALIVE", "RESTARTS");
  o << line;
  for (const auto& n : s.nodes) {
    bool alive = stillRunning(n.agent, n.config);
    std::string ns = n.netns + (netnsExists(n.netns) ? "" : "?");
    std::snprintf(line, sizeof line, "%-5s %-10s %-15s %-15s %-8s %-6s %d\n", n.name.c_str(),
                  ns.c_str(), n.mgmtAddress.c_str(), n.dataAddress.c_str(),
                  n.agent.pid ? std::to_string(n.agent.pid).c_str() : "-", alive ? "yes" : "no",
                  n.restarts);
    o << line;
  }
  return o.str();
}

}  // namespace rc::lab
