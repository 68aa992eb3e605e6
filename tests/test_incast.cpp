// The incast fault on the namespace lab, through the real CLI and agents: fan_in flows of the
// requested class converge on the receiver's switch port, the sink gets what the senders wrote,
// and nothing is left listening or journaled afterwards. Bad requests change nothing.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_incast {

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using rctest::env;
using rctest::readFile;

struct Lab {
  std::string dir, inventory;
  rc::lab::LabState state;
  Lab() {
    char tmpl[] = "/tmp/rc-incast-XXXXXX";
    dir = ::mkdtemp(tmpl);
    rc::lab::UpOptions o;
    o.nodes = 4;
    o.dir = dir;
    o.agentBinary = env("RDMACHAOS_AGENT");
    auto r = rc::lab::up(o);
    if (!r) {
      fs::remove_all(dir);  // the destructor does not run when the constructor fails
      FAIL("lab up failed: " << r.error().message);
    }
    inventory = *r;
    auto st = rc::lab::loadState(dir);
    if (!st) FAIL("lab state: " << st.error().message);
    state = *st;
  }
  ~Lab() {
    (void)rc::lab::down(dir);
    fs::remove_all(dir);
  }
};

Lab& sharedLab() {
  static Lab instance;
  return instance;
}

struct Cli {
  int code = -1;
  std::string out, err;
};

// Runs the rdmachaos CLI with ARGS (no shell), capturing stdout and stderr.
Cli cli(std::vector<std::string> args) {
  std::string out = sharedLab().dir + "/cli.out", err = sharedLab().dir + "/cli.err";
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    FILE* o = std::freopen(out.c_str(), "w", stdout);
    FILE* e = std::freopen(err.c_str(), "w", stderr);
    (void)o;
    (void)e;
    std::string bin = env("RDMACHAOS_CLI");
    std::vector<char*> argv{bin.data()};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out), readFile(err)};
}

json port(const std::string& name) {
  auto r = rc::faults::labswitchCall(sharedLab().state.sw.control, rc::swproto::CountersRequest{.port = name});
  REQUIRE(r);
  REQUIRE(r->ports.size() == 1);
  return rc::swproto::toJson(*r)["ports"][0];
}

uint64_t queueTx(const json& p, int q) { return p["queues"][q]["tx_bytes"].get<uint64_t>(); }

// The number before " B" in an event detail such as "12345 B (12.1KiB) on 6 flows".
uint64_t bytesIn(const std::string& detail) {
  std::smatch m;
  REQUIRE(std::regex_search(detail, m, std::regex(R"((\d+) B \()")));
  return std::stoull(m[1]);
}

const json* event(const json& fault, const std::string& what) {
  for (const auto& e : fault["events"])
    if (e["what"] == what) return &e;
  return nullptr;
}

bool listening(const std::string& fromNs, const std::string& address, int port) {
  std::string cmd = "ip netns exec " + fromNs + " timeout 2 bash -c 'exec 3<>/dev/tcp/" + address + "/" +
                    std::to_string(port) + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

void requireJournalsEmpty() {
  for (const auto& n : sharedLab().state.nodes) {
    auto journal = fs::path(n.config).parent_path() / "state" / "journal";
    CHECK(fs::is_empty(journal));
  }
}

}  // namespace

TEST_CASE("incast: fan_in flows converge on the receiver's port, and nothing stays behind", "[incast]") {
  auto& L = sharedLab();
  const auto& rx = L.state.nodes[0];  // n1
  json before = json::array();
  for (const auto& n : L.state.nodes) before.push_back(port(n.name));

  auto r = cli({"inject", "incast", "--inventory", L.inventory, "--node", "n2,n3,n4", "--set", "receiver=n1",
                "--set", "fan_in=6", "--set", "size=1MiB", "--for", "2s", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json report = json::parse(r.out);
  REQUIRE(report["nodes"].size() == 4);

  uint64_t sent = 0, received = 0;
  for (const auto& n : report["nodes"]) {
    const json& f = n["fault"];
    CAPTURE(n["node"], f.dump());
    CHECK(f.value("error", "") == "");
    if (n["node"] == "n1") {
      CHECK(f["end_reason"] == "lifetime");
      CHECK(f["params"]["role"] == "receiver");
      const json* got = event(f, "received");
      REQUIRE(got);
      // Every flow of every sender reached the sink.
      CHECK_THAT((*got)["detail"].get<std::string>(), Catch::Contains("on 6 flows"));
      received = bytesIn((*got)["detail"]);
    } else {
      CHECK(f["params"]["role"] == "sender");
      CHECK(f["params"]["receiver"] == rx.dataAddress);
      const json* c = event(f, "connected");
      REQUIRE(c);
      CHECK_THAT((*c)["detail"].get<std::string>(), Catch::StartsWith("2 flows -> " + rx.dataAddress + ":7490"));
      const json* s = event(f, "sent");
      REQUIRE(s);
      std::smatch m;
      std::string d = (*s)["detail"];
      // Its lifetime ended it, or the sink's ended a moment earlier (the same instant on
      // another agent) and the sender stopped on the closed flow, saying so.
      if (f["end_reason"] != "lifetime") {
        CHECK(f["end_reason"] == "completed");
        CHECK_THAT(d, Catch::Contains("receiver closed the flow"));
      }
      REQUIRE(std::regex_search(d, m, std::regex(R"(^(\d+) bursts)")));
      CHECK(std::stoi(m[1]) >= 1);
      sent += bytesIn(d);
    }
  }
  // The sink got what was written, less what was still in socket buffers when the fault ended
  // (at most a few MiB per flow).
  CHECK(received > 0);
  CHECK(received <= sent);
  CHECK(sent - received < uint64_t(6) * 8 * 1024 * 1024);
  CHECK(received > sent / 2);

  // On the switch: the bytes left through n1's port in the RoCE class (DSCP 26 -> queue 3),
  // and a queue built there; the senders' ports carried only the sink's ACKs.
  json after = port("n1");
  uint64_t toReceiver = queueTx(after, 3) - queueTx(before[0], 3);
  CHECK(toReceiver >= received);
  CHECK(after["queues"][3]["max_depth_bytes"].get<uint64_t>() > 64 * 1024);
  for (size_t i = 1; i < 4; i++) {
    json p = port(L.state.nodes[i].name);
    CHECK(queueTx(p, 3) - queueTx(before[i], 3) < toReceiver / 10);
  }

  // Reverted: nothing listens on the sink's port any more, nothing is journaled.
  CHECK_FALSE(listening(L.state.nodes[1].netns, rx.dataAddress, 7490));
  requireJournalsEmpty();
}

TEST_CASE("incast: an interval paces synchronised bursts on the common clock", "[incast]") {
  auto& L = sharedLab();
  auto r = cli({"inject", "incast", "--inventory", L.inventory, "--node", "n2", "--node", "n3", "--set",
                "receiver=n1", "--set", "fan_in=2", "--set", "size=256KiB", "--set", "interval=200ms", "--set",
                "duration=1s", "--for", "2s", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json report = json::parse(r.out);
  for (const auto& n : report["nodes"]) {
    const json& f = n["fault"];
    CAPTURE(f.dump());
    if (n["node"] == "n1") {
      // The sink's own duration ended it, before the lifetime.
      CHECK(f["end_reason"] == "completed");
      continue;
    }
    CHECK(f["end_reason"] == "completed");
    std::smatch m;
    const json* s = event(f, "sent");
    REQUIRE(s);
    std::string d = (*s)["detail"];
    REQUIRE(std::regex_search(d, m, std::regex(R"(^(\d+) bursts)")));
    // Slots at 0, 200, 400, 600, 800 ms of a 1 s incast: at most 5 bursts of 256 KiB (back to
    // back, a 1 Gb/s port would take hundreds); fewer only if the machine stalled past a slot.
    int bursts = std::stoi(m[1]);
    CHECK(bursts >= 1);
    CHECK(bursts <= 5);
    CHECK(bytesIn(d) == uint64_t(bursts) * 256 * 1024);
  }
  requireJournalsEmpty();
}

// What a TCP connection from namespace NS to ADDRESS:PORT meets: no listener, a sink that
// closes it at once, or one that accepts and holds it.
enum class Probe { noListener, closed, held, error };
Probe probe(const std::string& ns, const std::string& address, int port) {
  std::string py = "import socket,sys\n"
                   "s=socket.socket(); s.settimeout(1.5)\n"
                   "try: s.connect(('" + address + "'," + std::to_string(port) + "))\n"
                   "except ConnectionRefusedError: sys.exit(3)\n"
                   "try: d=s.recv(1)\n"
                   "except socket.timeout: sys.exit(4)\n"
                   "except ConnectionResetError: sys.exit(5)\n"
                   "sys.exit(5 if d==b'' else 6)\n";
  std::string cmd = "ip netns exec " + ns + " python3 -c \"" + py + "\"";
  int st = std::system(cmd.c_str());
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return code == 3 ? Probe::noListener : code == 4 ? Probe::held : code == 5 ? Probe::closed : Probe::error;
}

TEST_CASE("incast: the sink accepts only its senders", "[incast]") {
  auto& L = sharedLab();
  const auto& rx = L.state.nodes[0];        // n1
  const auto& stranger = L.state.nodes[3];  // n4: on the fabric, not a sender
  Cli r;
  std::thread inject([&] {
    r = cli({"inject", "incast", "--inventory", L.inventory, "--node", "n2,n3", "--set", "receiver=n1", "--set",
             "fan_in=2", "--set", "size=64KiB", "--set", "interval=100ms", "--set", "port=7495", "--for", "5s",
             "--json"});
  });
  // Until the sink listens a connection meets no listener; then the sink must close it at once
  // (before the fix it accepted anyone, up to 4096 flows, and held them).
  Probe seen = Probe::noListener;
  for (int i = 0; i < 40 && seen == Probe::noListener; i++) {
    seen = probe(stranger.netns, rx.dataAddress, 7495);
    if (seen == Probe::noListener) std::this_thread::sleep_for(100ms);
  }
  inject.join();
  CHECK(seen == Probe::closed);
  INFO(r.err);
  REQUIRE(r.code == 0);
  json report = json::parse(r.out);
  bool sawSink = false;
  for (const auto& n : report["nodes"]) {
    if (n["node"] != "n1") continue;
    sawSink = true;
    const json* got = event(n["fault"], "received");
    REQUIRE(got);
    std::string d = (*got)["detail"];
    CAPTURE(d);
    CHECK_THAT(d, Catch::Contains("on 2 flows"));
    CHECK_THAT(d, Catch::Contains("refused: not from a sender"));
  }
  CHECK(sawSink);
  requireJournalsEmpty();
}

TEST_CASE("incast over UDP: datagrams that never back off reach the sink in the RoCE class", "[incast]") {
  auto& L = sharedLab();
  const auto& rx = L.state.nodes[0];  // n1
  json before = port("n1");
  // 100 ms slots of 128 KiB per flow, 4 flows: ~42 Mb/s, far below the port's rate, so
  // nothing is lost on the way and the sink's count can be compared with the senders'.
  auto r = cli({"inject", "incast", "--inventory", L.inventory, "--node", "n2,n3", "--set", "receiver=n1", "--set",
                "fan_in=4", "--set", "size=128KiB", "--set", "interval=100ms", "--set", "transport=udp", "--set",
                "duration=1s", "--for", "2s", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json report = json::parse(r.out);
  uint64_t sent = 0, received = 0;
  for (const auto& n : report["nodes"]) {
    const json& f = n["fault"];
    CAPTURE(n["node"], f.dump());
    CHECK(f.value("error", "") == "");
    if (n["node"] == "n1") {
      CHECK(f["params"]["role"] == "receiver");
      const json* l = event(f, "listening");
      REQUIRE(l);
      CHECK((*l)["detail"] == rx.dataAddress + ":7490/udp");
      const json* got = event(f, "received");
      REQUIRE(got);
      CHECK_THAT((*got)["detail"].get<std::string>(), Catch::Contains("from 4 flows"));
      received = bytesIn((*got)["detail"]);
    } else {
      const json* s = event(f, "sent");
      REQUIRE(s);
      sent += bytesIn((*s)["detail"]);
    }
  }
  CHECK(sent > 0);
  // UDP keeps no state past the fault: a datagram in flight when the sink closed is lost, and
  // a datagram sent before the sink bound is refused. Nearly all arrive at this rate.
  CHECK(received <= sent);
  CHECK(received >= sent * 9 / 10);
  // On the wire: DSCP 26 -> queue 3 of n1's port.
  json after = port("n1");
  CHECK(queueTx(after, 3) - queueTx(before, 3) >= received);
  requireJournalsEmpty();
}

TEST_CASE("incast: bad requests are refused before any agent is asked", "[incast]") {
  auto& L = sharedLab();
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Bad> cases = {
      {{"--node", "n2", "--set", "receiver=n9"}, "incast receiver 'n9' is not a node of the inventory (n1, n2, n3, n4)"},
      {{"--node", "n1"}, "incast parameter 'receiver' is required"},
      {{"--node", "n1", "--set", "receiver=n1"}, "incast needs 1 sender(s) among the targets other than the receiver 'n1'"},
      {{"--node", "n2,n3", "--set", "receiver=n1", "--set", "fan_in=3"},
       "incast fan_in 3 must be a multiple of the 2 senders"},
      {{"--node", "n2,n3", "--set", "receiver=n1", "--set", "senders=1"},
       "inject incast: senders=1 but --node names 2 sender node(s)"},
      {{"--node", "n2", "--set", "receiver=n1", "--set", "dscp=64"}, "incast parameter 'dscp' = 64 is out of range [0, 63]"},
  };
  auto scheduledSoFar = [&] {
    size_t count = 0;
    for (const auto& n : L.state.nodes) {
      std::string log = readFile(n.log);
      for (size_t at = log.find("scheduled "); at != std::string::npos; at = log.find("scheduled ", at + 1)) count++;
    }
    return count;
  };
  size_t scheduledBefore = scheduledSoFar();
  for (auto& c : cases) {
    std::vector<std::string> args = {"inject", "incast", "--inventory", L.inventory, "--for", "2s"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = cli(args);
    CAPTURE(c.message, r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.message));
  }
  // Nothing was scheduled anywhere.
  CHECK(scheduledSoFar() == scheduledBefore);
  requireJournalsEmpty();
}

// Issue 26, item 9: before, an agent sent incast flows to any IPv4 address it had a route to,
// through an allowed interface: a gateway on the data fabric made every host behind it a
// target (a storage array, another tenant, the internet). Now only its data subnets.
TEST_CASE("incast: a receiver outside the agent's data subnets is refused, even with a route to it", "[incast]") {
  const rc::faults::FaultKind* kind = rc::faults::findKind("incast");
  REQUIRE(kind != nullptr);
  char tmpl[] = "/tmp/rc-incast-subnet-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  struct Gone {
    std::string d;
    ~Gone() { fs::remove_all(d); }
  } gone{dir};
  // In a child in a network namespace of its own (gone with it): a data interface with
  // 10.200.0.1/24 (a veth) and a route to 10.201.0.0/24 through a gateway on it. Each verdict
  // goes to a file.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNET) != 0) _exit(10);
    if (std::system("ip link add dum0 type veth peer name dum1 && ip addr add 10.200.0.1/24 dev dum0 && "
                    "ip link set dum1 up && ip link set dum0 up && ip route add 10.201.0.0/24 via 10.200.0.2 dev dum0") != 0)
      _exit(11);
    auto verdict = [&](const std::string& name, const std::string& receiver, std::vector<std::string> subnets) {
      rc::faults::Policy policy;
      policy.allowlist = {"dum0"};
      policy.dataSubnets = std::move(subnets);
      std::string out;
      try {
        auto p = rc::faults::normaliseParams("incast", kind->params, json{{"receiver", receiver}, {"senders", 1}});
        auto f = p ? kind->create(*p, policy) : rc::Result<std::unique_ptr<rc::faults::Fault>>(p.error());
        out = f ? "accepted as " + (*f)->params().value("role", std::string()) : f.error().message;
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
      }
      std::ofstream(dir + "/" + name) << out;
    };
    verdict("routed", "10.201.0.5", {});
    verdict("on-link", "10.200.0.7", {});
    verdict("listed", "10.201.0.5", {"10.201.0.0/24"});
    verdict("not-listed", "10.200.0.7", {"10.201.0.0/24"});
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK_THAT(readFile(dir + "/routed"),
             Catch::Contains("incast: receiver '10.201.0.5' is outside this agent's data subnets (10.200.0.0/24 (dum0))") &&
                 Catch::Contains("[interfaces] data_subnets"));
  CHECK(readFile(dir + "/on-link") == "accepted as sender");
  // An operator whose fabric is routed (a /31 per NIC, a subnet per rack) lists its subnets.
  CHECK(readFile(dir + "/listed") == "accepted as sender");
  CHECK_THAT(readFile(dir + "/not-listed"),
             Catch::Contains("'10.200.0.7' is outside this agent's data subnets (10.201.0.0/24)"));
}

}  // namespace test_incast
