// Tests of the namespace lab (rc::lab::up/down/status): topology, reachability, agent
// supervision, crash cleanup and slot allocation. Needs root; runs in the netns suite.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include "support.hpp"
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "lab/process.hpp"
#include "skip.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_lab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Stand-in for rdmachaos-agent, so this test checks the lab's own plumbing alone: listens on
// the address its agent.toml names (so readiness and reachability are real) and exits on SIGTERM. perl is
// Essential in Debian; python3 and nc are not guaranteed.
const char* kStandIn = R"PERL(#!/usr/bin/perl
# Stand-in agent for test_lab: accept connections on agent.listen until SIGTERM.
use strict;
use IO::Socket::INET;
my %args = @ARGV;
open(my $cfg, '<', $args{'--config'}) or die "cannot read config: $!";
my ($listen) = map { /^listen\s*=\s*"([^"]+)"/ ? $1 : () } <$cfg>;
my ($host, $port) = split /:/, $listen;
my $srv = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $port, Listen => 16,
                                ReuseAddr => 1) or die "cannot listen on $listen: $!";
$SIG{TERM} = sub { exit 0 };
print "stand-in agent listening on $listen\n";
while (1) { my $c = $srv->accept; close($c) if $c; }
)PERL";

// A temporary lab directory whose lab is taken down and which is removed even when an
// assertion fails half-way.
struct LabDir {
  std::string path;
  LabDir() {
    char tmpl[] = "/tmp/rc-test-lab-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~LabDir() {
    auto r = rc::lab::down(path);
    if (!r) std::fprintf(stderr, "cleanup: %s\n", r.error().message.c_str());
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  LabDir(const LabDir&) = delete;
  LabDir& operator=(const LabDir&) = delete;
};

// The stand-in script lives in its own temporary directory, shared by all tests.
const std::string& standInAgent() {
  static struct Holder {
    std::string dir, file;
    Holder() {
      char tmpl[] = "/tmp/rc-test-agent-XXXXXX";
      if (::mkdtemp(tmpl)) dir = tmpl;
      file = dir + "/standin-agent";
      std::ofstream(file) << kStandIn;
      fs::permissions(file, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
    }
    ~Holder() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } holder;
  return holder.file;
}

json readState(const std::string& dir) {
  std::ifstream in(dir + "/lab.json");
  return json::parse(in);
}

std::string run(const std::vector<std::string>& argv) {
  auto r = rc::lab::runCommand(argv);
  INFO(rc::lab::describeCommand(argv));
  REQUIRE(r.ok());
  return *r;
}

std::string prefixOf(int slot) { return "rc" + std::to_string(slot) + "-"; }

bool labObjectsExist(int slot) {
  std::string p = prefixOf(slot);
  return run({"ip", "netns", "list"}).find(p) != std::string::npos ||
         run({"ip", "-o", "link", "show"}).find(p) != std::string::npos;
}

bool alive(int pid) { return pid > 0 && rc::lab::identify(pid).startTime != 0; }

uint16_t checksum(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += uint32_t(p[i] << 8 | p[i + 1]);
  if (len & 1) sum += uint32_t(p[len - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(uint16_t(~sum));
}

// One ICMP echo from namespace `ns` ("" = this one), optionally bound to `dev`; true if a
// reply arrives within a second. In a child, so the test process never changes namespace.
bool ping(const std::string& ns, const std::string& addr, const std::string& dev = "") {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (!ns.empty()) {
      int nsFd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY);
      if (nsFd < 0 || ::setns(nsFd, CLONE_NEWNET) != 0) ::_exit(2);
    }
    int s = ::socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    if (s < 0) ::_exit(2);
    if (!dev.empty() &&
        ::setsockopt(s, SOL_SOCKET, SO_BINDTODEVICE, dev.c_str(), socklen_t(dev.size())) != 0)
      ::_exit(2);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    ::inet_pton(AF_INET, addr.c_str(), &to.sin_addr);
    icmphdr req{};
    req.type = ICMP_ECHO;
    req.un.echo.id = htons(uint16_t(::getpid()));
    req.un.echo.sequence = htons(1);
    req.checksum = checksum(&req, sizeof req);
    if (::sendto(s, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0)
      ::_exit(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < deadline) {
      int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline - std::chrono::steady_clock::now())
                         .count());
      pollfd p{s, POLLIN, 0};
      if (::poll(&p, 1, std::max(left, 1)) <= 0) break;
      char buf[1500];
      sockaddr_in from{};
      socklen_t fromLen = sizeof from;
      ssize_t n = ::recvfrom(s, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fromLen);
      if (n < ssize_t(sizeof(iphdr))) continue;
      auto* iph = reinterpret_cast<iphdr*>(buf);
      size_t off = size_t(iph->ihl) * 4;
      if (n < ssize_t(off + sizeof(icmphdr))) continue;
      auto* rep = reinterpret_cast<icmphdr*>(buf + off);
      if (rep->type == ICMP_ECHOREPLY && rep->un.echo.id == req.un.echo.id &&
          from.sin_addr.s_addr == to.sin_addr.s_addr)
        ::_exit(0);
    }
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Reachability that tolerates a lost first packet (ARP, bridge learning).
bool reachable(const std::string& ns, const std::string& addr) {
  for (int i = 0; i < 3; i++)
    if (ping(ns, addr)) return true;
  return false;
}

bool tcpAccepts(const std::string& addr, int port) {
  rc::UniqueFD fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  timeval tv{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
}

using rctest::eventually;

rc::lab::UpOptions options(const LabDir& dir, int nodes,
                           const std::string& agent = standInAgent()) {
  rc::lab::UpOptions o;
  o.nodes = nodes;
  o.dir = dir.path;
  o.agentBinary = agent;
  return o;
}

std::string show(const rc::Result<std::string>& r) { return r ? *r : r.error().message; }

}  // namespace

TEST_CASE("lab up builds the namespace lab; agents are supervised; down removes everything") {
  LabDir dir;
  auto inv = rc::lab::up(options(dir, 3));
  INFO(show(inv));
  REQUIRE(inv.ok());
  CHECK(*inv == dir.path + "/inventory.toml");
  json state = readState(dir.path);
  int k = state["slot"].get<int>();
  REQUIRE(k >= 1);
  REQUIRE(k <= 200);
  std::string p = prefixOf(k), sk = std::to_string(k);

  // (1) namespaces, configs and inventory.
  std::string netns = run({"ip", "netns", "list"});
  for (std::string ns : {p + "n1", p + "n2", p + "n3"}) {
    INFO(ns);
    CHECK(netns.find(ns) != std::string::npos);
  }
  CHECK(fs::exists("/run/rdmachaos/labs/" + sk));
  std::string data0 = run({"ip", "-n", p + "n1", "-o", "link", "show", "data0"});
  CHECK(data0.find("mtu 1500") != std::string::npos);
  // The host NIC's ring absorbs the switch's late reads (a TAP drops what its ring can't take).
  CHECK(data0.find("qlen 10000") != std::string::npos);

  toml::table invToml = toml::parse_file(*inv);
  CHECK(invToml["tls"]["ca"].value_or(std::string()) == "pki/ca.pem");
  CHECK(invToml["tls"]["cert"].value_or(std::string()) == "pki/controller.pem");
  CHECK(invToml["tls"]["key"].value_or(std::string()) == "pki/controller.key");
  CHECK(invToml["lab"]["dir"].value_or(std::string()) == dir.path);
  CHECK(invToml["lab"]["slot"].value_or(0) == k);
  auto* nodes = invToml["node"].as_array();
  REQUIRE(nodes != nullptr);
  REQUIRE(nodes->size() == 3);
  for (int i = 1; i <= 3; i++) {
    auto& node = *(*nodes)[size_t(i - 1)].as_table();
    std::string name = "n" + std::to_string(i);
    std::string mgmt = "198.18." + sk + "." + std::to_string(10 + i);
    std::string data = "198.19." + sk + "." + std::to_string(10 + i);
    CHECK(node["name"].value_or(std::string()) == name);
    CHECK(node["address"].value_or(std::string()) == mgmt);
    CHECK(node["port"].value_or(0) == 7470);
    CHECK(node["data_interfaces"][0].value_or(std::string()) == "data0");
    CHECK(node["data_addresses"][0].value_or(std::string()) == data);
    CHECK(node["roles"][0].value_or(std::string()) == "worker");

    std::string nodeDir = dir.path + "/nodes/" + name;
    toml::table cfg = toml::parse_file(nodeDir + "/agent.toml");
    CHECK(cfg["agent"]["node"].value_or(std::string()) == name);
    CHECK(cfg["agent"]["listen"].value_or(std::string()) == mgmt + ":7470");
    CHECK(cfg["agent"]["state_dir"].value_or(std::string()) == nodeDir + "/state");
    CHECK(cfg["agent"]["lease_timeout"].value_or(std::string()) == "5s");
    CHECK(cfg["agent"]["max_fault_lifetime"].value_or(std::string()) == "10m");
    CHECK(cfg["tls"]["ca"].value_or(std::string()) == dir.path + "/pki/ca.pem");
    CHECK(cfg["tls"]["cert"].value_or(std::string()) == dir.path + "/pki/agent-" + name + ".pem");
    CHECK(cfg["tls"]["key"].value_or(std::string()) == dir.path + "/pki/agent-" + name + ".key");
    CHECK(fs::exists(cfg["tls"]["cert"].value_or(std::string())));
    CHECK(cfg["interfaces"]["data"][0].value_or(std::string()) == "data0");
    CHECK(cfg["interfaces"]["allow"][0].value_or(std::string()) == "data0");
    CHECK(cfg["interfaces"]["protected"][0].value_or(std::string()) == "mgmt0");
    CHECK(cfg["interfaces"]["allow_default_route"].value_or(true) == false);
    CHECK(fs::is_directory(nodeDir + "/state"));
    // Hosts' TCP: ECN on, and no per-peer memory carried from one connection to the next.
    for (auto [key, want] : {std::pair{"net.ipv4.tcp_ecn", "1"}, std::pair{"net.ipv4.tcp_no_metrics_save", "1"}}) {
      INFO(name << " " << key);
      CHECK(run({"ip", "netns", "exec", p + name, "sysctl", "-n", key}) == std::string(want) + "\n");
    }
    // The stand-in listens on the management address: up() waited for it.
    CHECK(tcpAccepts(mgmt, 7470));
  }

  // (2) data network between hosts, management network from the root namespace.
  CHECK(reachable(p + "n1", "198.19." + sk + ".12"));
  CHECK(reachable(p + "n1", "198.19." + sk + ".13"));
  CHECK(reachable(p + "n3", "198.19." + sk + ".12"));
  for (int i = 1; i <= 3; i++) CHECK(reachable("", "198.18." + sk + "." + std::to_string(10 + i)));
  // The root namespace has no address in and no route into the data network (a ping would
  // follow the host's default route out of eth0, so check the routing instead of pinging).
  CHECK(run({"ip", "-o", "-4", "addr", "show"}).find("198.19." + sk + ".") == std::string::npos);
  CHECK(run({"ip", "-o", "route", "get", "198.19." + sk + ".11"}).find(p) == std::string::npos);
  // The planes do not leak into each other through the nodes' ARP (strict ARP on both).
  CHECK_FALSE(ping(p + "n1", "198.19." + sk + ".12", "mgmt0"));
  CHECK_FALSE(ping(p + "n1", "198.18." + sk + ".12", "data0"));

  // (3) kill -9 of an agent: the supervisor restarts it and records the new pid.
  int old = state["nodes"][1]["agent"]["pid"].get<int>();
  REQUIRE(alive(old));
  REQUIRE(::kill(old, SIGKILL) == 0);
  int fresh = 0;
  CHECK(eventually([&] {
    json s = readState(dir.path);
    fresh = s["nodes"][1]["agent"]["pid"].get<int>();
    return fresh != 0 && fresh != old && s["nodes"][1]["restarts"].get<int>() == 1;
  }));
  CHECK(alive(fresh));
  CHECK(eventually([&] { return tcpAccepts("198.18." + sk + ".12", 7470); }));
  auto st = rc::lab::status(dir.path);
  REQUIRE(st.ok());
  INFO(*st);
  CHECK(st->find("slot " + sk) != std::string::npos);
  CHECK(st->find(std::to_string(fresh)) != std::string::npos);
  CHECK(st->find("(running)") != std::string::npos);
  json now = readState(dir.path);
  int supervisor = now["supervisor"]["pid"].get<int>();
  std::vector<int> agents;
  for (auto& n : now["nodes"]) agents.push_back(n["agent"]["pid"].get<int>());

  // (4) down removes every object; a second down is a no-op.
  auto d = rc::lab::down(dir.path);
  INFO((d ? std::string() : d.error().message));
  REQUIRE(d.ok());
  CHECK_FALSE(labObjectsExist(k));
  CHECK_FALSE(fs::exists("/run/rdmachaos/labs/" + sk));
  CHECK_FALSE(fs::exists(dir.path + "/lab.json"));
  CHECK(fs::exists(dir.path + "/nodes/n1/agent.log"));
  CHECK(fs::exists(dir.path + "/pki/ca.pem"));
  CHECK_FALSE(alive(supervisor));
  for (int pid : agents) CHECK_FALSE(alive(pid));
  CHECK(rc::lab::down(dir.path).ok());
  auto none = rc::lab::status(dir.path);
  REQUIRE(none.ok());
  CHECK(none->find("no lab in") != std::string::npos);
}

TEST_CASE("down after kill -9 of the supervisor still stops the agents and removes the lab") {
  LabDir dir;
  auto inv = rc::lab::up(options(dir, 2));
  INFO(show(inv));
  REQUIRE(inv.ok());
  json state = readState(dir.path);
  int k = state["slot"].get<int>();
  int supervisor = state["supervisor"]["pid"].get<int>();
  std::vector<int> agents;
  for (auto& n : state["nodes"]) agents.push_back(n["agent"]["pid"].get<int>());
  REQUIRE(alive(supervisor));
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  CHECK(eventually([&] { return !alive(supervisor); }));
  for (int pid : agents) CHECK(alive(pid));  // orphans: nobody restarts them, down must kill them
  auto st = rc::lab::status(dir.path);
  REQUIRE(st.ok());
  CHECK(st->find("supervisor not running") != std::string::npos);

  auto d = rc::lab::down(dir.path);
  INFO((d ? std::string() : d.error().message));
  REQUIRE(d.ok());
  for (int pid : agents) CHECK_FALSE(alive(pid));
  CHECK_FALSE(labObjectsExist(k));
  CHECK_FALSE(fs::exists("/run/rdmachaos/labs/" + std::to_string(k)));
}

TEST_CASE("two labs coexist in different slots; up refuses a running lab and bad input") {
  LabDir a, b;
  auto invA = rc::lab::up(options(a, 2));
  INFO(show(invA));
  REQUIRE(invA.ok());
  auto invB = rc::lab::up(options(b, 2));
  INFO(show(invB));
  REQUIRE(invB.ok());
  int ka = readState(a.path)["slot"].get<int>();
  int kb = readState(b.path)["slot"].get<int>();
  CHECK(ka != kb);
  CHECK(reachable(prefixOf(ka) + "n1", "198.19." + std::to_string(ka) + ".12"));
  CHECK(reachable(prefixOf(kb) + "n2", "198.19." + std::to_string(kb) + ".11"));

  auto again = rc::lab::up(options(a, 2));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find("lab already up in " + a.path) != std::string::npos);
  CHECK(again.error().message.find("rdmachaos lab down --dir") != std::string::npos);
  CHECK(readState(a.path)["slot"].get<int>() == ka);  // the running lab is untouched

  LabDir c;
  for (int n : {0, 33}) {
    auto bad = rc::lab::up(options(c, n));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("out of range") != std::string::npos);
  }
  auto noAgent = rc::lab::up(options(c, 1, c.path + "/no-such-agent"));
  REQUIRE_FALSE(noAgent.ok());
  CHECK(noAgent.error().message.find("no-such-agent") != std::string::npos);
  CHECK_FALSE(fs::exists(c.path + "/lab.json"));

  REQUIRE(rc::lab::down(a.path).ok());
  REQUIRE(rc::lab::down(b.path).ok());
  CHECK_FALSE(labObjectsExist(ka));
  CHECK_FALSE(labObjectsExist(kb));
}

TEST_CASE("the real agent accepts on its management address in every node") {
  const char* agent = std::getenv("RDMACHAOS_AGENT");
  if (agent == nullptr || !fs::exists(agent)) {
    RC_SKIP("RDMACHAOS_AGENT is not set or names no file (meson sets it to the built agent)");
  }
  LabDir dir;
  auto inv = rc::lab::up(options(dir, 2, agent));
  INFO(show(inv));
  REQUIRE(inv.ok());
  int k = readState(dir.path)["slot"].get<int>();
  for (int i = 1; i <= 2; i++) {
    std::string addr = "198.18." + std::to_string(k) + "." + std::to_string(10 + i);
    INFO("agent n"
         << i << " at " << addr << ":7470; log: "
         << std::ifstream(dir.path + "/nodes/n" + std::to_string(i) + "/agent.log").rdbuf());
    CHECK(eventually([&] { return tcpAccepts(addr, 7470); }));
  }
  json state = readState(dir.path);
  for (auto& n : state["nodes"]) CHECK(n["restarts"].get<int>() == 0);
  REQUIRE(rc::lab::down(dir.path).ok());
  CHECK_FALSE(labObjectsExist(k));
}

TEST_CASE("lab up trusts only a private directory it made; lab down acts only on names a lab makes") {
  LabDir parent;
  auto at = [&](const std::string& dir) {
    rc::lab::UpOptions o;
    o.nodes = 1;
    o.dir = dir;
    o.agentBinary = standInAgent();
    return o;
  };
  auto refused = [&](const std::string& dir, const std::string& why) {
    auto r = rc::lab::up(at(dir));
    INFO(dir << ": " << show(r));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(why) != std::string::npos);
    CHECK(r.error().message.find("--dir") != std::string::npos);  // names the fix
    CHECK_FALSE(fs::exists(dir + "/lab.json"));
    CHECK_FALSE(fs::exists(dir + "/.lab.lock"));
  };
  // A directory another user made (an attacker can pre-create /tmp/rdmachaos-demo).
  std::string foreign = parent.path + "/foreign";
  REQUIRE(::mkdir(foreign.c_str(), 0755) == 0);
  REQUIRE(::chown(foreign.c_str(), 65534, 65534) == 0);
  refused(foreign, "belongs to uid 65534");
  // One anybody can write to.
  std::string open = parent.path + "/open";
  REQUIRE(::mkdir(open.c_str(), 0700) == 0);
  REQUIRE(::chmod(open.c_str(), 0777) == 0);
  refused(open, "writable by other users (mode 0777)");
  // A symbolic link, even to a good directory: nothing is created through it.
  std::string target = parent.path + "/target", link = parent.path + "/link";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  refused(link, "symbolic link");
  CHECK(fs::is_empty(target));
  // `lab down` does not act on a lab.json in a directory it cannot trust (anyone could have
  // written it).
  std::ofstream(open + "/lab.json") << json{{"dir", open}, {"slot", 7}, {"namespaces", {"rc7-n1"}}}.dump();
  auto downOpen = rc::lab::down(open);
  REQUIRE_FALSE(downOpen.ok());
  CHECK(downOpen.error().message.find("writable by other users") != std::string::npos);
  fs::remove(open + "/lab.json");

  // A new lab directory is private to its user.
  std::string fresh = parent.path + "/fresh";
  auto up = rc::lab::up(at(fresh));
  INFO(show(up));
  REQUIRE(up.ok());
  struct stat st {};
  REQUIRE(::stat(fresh.c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  REQUIRE(rc::lab::down(fresh).ok());

  // lab.json that names objects no lab makes (here a namespace of this test's own, and the
  // loopback link): lab down refuses, and they survive.
  std::string victim = "rcvictim" + std::to_string(::getpid());
  run({"ip", "netns", "add", victim});
  struct Remove {
    std::string ns;
    ~Remove() { (void)rc::lab::runCommand({"ip", "netns", "del", ns}); }
  } removeVictim{victim};
  std::string forged = parent.path + "/forged";
  REQUIRE(::mkdir(forged.c_str(), 0700) == 0);
  for (const json& names : {json{{"namespaces", {victim}}}, json{{"root_links", {"lo"}}}}) {
    json state = {{"dir", forged}, {"slot", 7}, {"kind", "netns"}, {"fabric", "bridge"}};
    state.update(names);
    std::ofstream(forged + "/lab.json") << state.dump();
    auto r = rc::lab::down(forged);
    INFO(state.dump());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("no lab in this directory makes") != std::string::npos);
  }
  CHECK(fs::exists("/run/netns/" + victim));
  // ... and one written for another directory (copied or moved) is refused too.
  std::ofstream(forged + "/lab.json") << json{{"dir", "/"}, {"slot", 7}, {"kind", "vm"}}.dump();
  auto moved = rc::lab::down(forged);
  REQUIRE_FALSE(moved.ok());
  CHECK(moved.error().message.find("written for the directory '/'") != std::string::npos);
  fs::remove(forged + "/lab.json");
}

TEST_CASE("lab helper commands have a deadline") {
  // A command that hangs is killed at its deadline and reported, with its output pipes open...
  auto r = rc::lab::runCommand({"sleep", "30"}, 300);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ETIMEDOUT);
  CHECK(r.error().message.find("`sleep 30` did not finish") != std::string::npos);
  // ... or after closing them.
  auto closed = rc::lab::runCommand({"sh", "-c", "exec >&- 2>&-; sleep 30"}, 300);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code == ETIMEDOUT);
  // A command that finishes in time still returns its output, also when a child it left
  // behind holds the pipes.
  auto ok = rc::lab::runCommand({"sh", "-c", "echo hello; sleep 3 &"}, 10'000);
  REQUIRE(ok.ok());
  CHECK(*ok == "hello\n");
}


// A newcomer's `lab up` picks a rate this machine's switch carries, says which and why, and a
// playbook bounded on another lab is told what differs before its run starts.
TEST_CASE("lab up without --rate picks the machine's rate and says so; a playbook's [lab] is checked") {
  const std::string dir = "/tmp/rc-rate-" + std::to_string(::getpid());
  const rc::lab::RateChoice want = rc::lab::chooseRate(4);
  std::string out, err;
  int rc = rctest::runCli(std::filesystem::temp_directory_path().string(),
                          {"lab", "up", "--nodes", "4", "--dir", dir}, &out, &err);
  struct Down {
    std::string dir;
    ~Down() {
      (void)rctest::runCli(std::filesystem::temp_directory_path().string(), {"lab", "down", "--dir", dir});
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } down{dir};
  INFO(err);
  REQUIRE(rc == 0);
  CHECK_THAT(err, Catch::Contains("lab up: " + want.why));
  auto st = rc::lab::loadState(dir);
  REQUIRE(st.ok());
  CHECK(st->rateBps == want.bps);
  CHECK(st->ports == "tap");
  // A playbook stating another rate: the dry run warns, naming both and the command.
  const std::string pb = dir + "/other-rate.toml";
  std::ofstream(pb) << "name = \"other-rate\"\n[lab]\nrate = \"" << (want.bps >= 1e9 ? "200M" : "1G")
                    << "\"\nnodes = 4\n[workload]\nkind = \"allreduce\"\n[[phase]]\nname = \"baseline\"\n"
                       "duration = \"10s\"\n[[phase]]\nname = \"fault\"\nduration = \"5s\"\n[[step]]\nkind = \"noop\"\n"
                       "phase = \"fault\"\ntarget = \"n1\"\n";
  rc = rctest::runCli(std::filesystem::temp_directory_path().string(),
                      {"run", pb, "--inventory", dir + "/inventory.toml", "--dry-run"}, &out, &err);
  INFO(err);
  CHECK(rc == 0);
  CHECK_THAT(err, Catch::Contains("WARNING: 'other-rate' was bounded on a lab of 4 nodes at") &&
                      Catch::Contains("its scores may not hold there"));
}

TEST_CASE("lab up refuses a bad --ack-priority, or one where no lab switch classifies, before creating anything") {
  const std::string dir = "/tmp/rc-ackprio-" + std::to_string(::getpid());
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const Case cases[] = {
      {{"--ack-priority", "8"}, "--ack-priority must be a priority 0-7, or 'dscp'"},
      {{"--ack-priority", "high"}, "--ack-priority must be a priority 0-7, or 'dscp'"},
      {{"--ack-priority", "3", "--fabric", "bridge"}, "--ack-priority sets the lab switch of a namespace lab"},
      {{"--ack-priority", "dscp", "--soft-roce"}, "--ack-priority sets the lab switch of a namespace lab"},
      {{"--split-cores", "--fabric", "bridge"}, "--split-cores sets the lab switch's core"},
      {{"--split-cores", "--soft-roce"}, "--split-cores is for the namespace lab's switch"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"lab", "up", "--nodes", "2", "--dir", dir};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string out, err;
    int rc = rctest::runCli(std::filesystem::temp_directory_path().string(), args, &out, &err);
    INFO("args: " << c.args[0] << " " << c.args[1] << "; stderr: " << err);
    CHECK(rc == 2);
    CHECK_THAT(err, Catch::Contains(c.says));
    CHECK_FALSE(std::filesystem::exists(dir));
  }
}
}  // namespace test_lab
