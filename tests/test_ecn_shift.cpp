// Unit tests of ecn_shift's pieces that need no switch or root: the RED/ECN rtnetlink message,
// the command backend's exact snapshot/apply/revert, and parameter errors.
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/unique_fd.hpp"
#include "faults/fault.hpp"
#include "faults/tc_red.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_ecn_shift {

using namespace rc::faults;
using nlohmann::json;

namespace {

std::map<int, std::vector<uint8_t>> attrs(const uint8_t* data, int len) {
  std::map<int, std::vector<uint8_t>> out;
  for (auto* a = reinterpret_cast<const rtattr*>(data); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    auto* p = static_cast<const uint8_t*>(RTA_DATA(a));
    out[a->rta_type] = std::vector<uint8_t>(p, p + RTA_PAYLOAD(a));
  }
  return out;
}

// An agent whose configuration names SOCKET and PORT under [lab] (empty: no lab switch).
rc::Result<std::unique_ptr<Fault>> make(json raw, std::string socket = "/run/lab/switch.sock",
                                        std::string port = "") {
  const FaultKind* k = findKind("ecn_shift");
  REQUIRE(k != nullptr);
  auto p = normaliseParams("ecn_shift", k->params, raw);
  if (!p) return p.error();
  Policy policy{{"data0"}, {"mgmt0"}, "data0"};
  policy.labswitchSocket = std::move(socket);
  policy.labswitchPort = std::move(port);
  return k->create(*p, policy);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("tc-red builds a root RED qdisc with ECN, the thresholds and max_P", "[ecn_shift]") {
  tcred::RedParams p{7, 100'000, 400'000, 0.2, 1000};
  auto msg = tcred::buildAddRed(p, 42);
  REQUIRE(msg.ok());
  auto* h = reinterpret_cast<const nlmsghdr*>(msg->data());
  CHECK(h->nlmsg_len == msg->size());
  CHECK(h->nlmsg_type == RTM_NEWQDISC);
  CHECK(h->nlmsg_seq == 42);
  CHECK((h->nlmsg_flags & (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK)) ==
        (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK));
  auto* tm = static_cast<const tcmsg*>(NLMSG_DATA(h));
  CHECK(tm->tcm_ifindex == 7);
  CHECK(tm->tcm_parent == TC_H_ROOT);
  const uint8_t* a = reinterpret_cast<const uint8_t*>(tm) + NLMSG_ALIGN(sizeof *tm);
  auto top = attrs(a, int(h->nlmsg_len - NLMSG_LENGTH(sizeof *tm)));
  REQUIRE(top.count(TCA_KIND));
  CHECK(std::string(reinterpret_cast<const char*>(top[TCA_KIND].data())) == "red");
  REQUIRE(top.count(TCA_OPTIONS));
  auto opts = attrs(top[TCA_OPTIONS].data(), int(top[TCA_OPTIONS].size()));
  REQUIRE(opts[TCA_RED_PARMS].size() == sizeof(tc_red_qopt));
  tc_red_qopt q;
  std::memcpy(&q, opts[TCA_RED_PARMS].data(), sizeof q);
  CHECK(q.qth_min == 100'000);
  CHECK(q.qth_max == 400'000);
  CHECK(q.limit == 1'600'000);
  CHECK(q.flags == TC_RED_ECN);
  CHECK(q.Wlog == tcred::redWlog(100'000, 400'000, 1000));
  CHECK(q.Plog == tcred::redPlog(100'000, 400'000, 0.2));
  CHECK(opts[TCA_RED_STAB].size() == 256);
  REQUIRE(opts[TCA_RED_MAX_P].size() == 4);
  uint32_t maxP;
  std::memcpy(&maxP, opts[TCA_RED_MAX_P].data(), 4);
  CHECK(std::abs(double(maxP) / 4294967296.0 - 0.2) < 1e-6);
  // 2^-Plog times the span (kmax - kmin) is about pmax: the kernel's probability at kmax.
  CHECK(std::ldexp(300'000.0, -q.Plog) > 0.1);
  CHECK(std::ldexp(300'000.0, -q.Plog) <= 0.2);
}

TEST_CASE("tc-red refuses impossible thresholds and deletes only the root", "[ecn_shift]") {
  CHECK_FALSE(tcred::buildAddRed({7, 0, 400, 0.1, 1000}, 1).ok());
  CHECK_FALSE(tcred::buildAddRed({7, 500, 400, 0.1, 1000}, 1).ok());
  CHECK_FALSE(tcred::buildAddRed({7, 100, 400, 0, 1000}, 1).ok());
  auto del = tcred::buildDeleteRoot(9, 3);
  auto* h = reinterpret_cast<const nlmsghdr*>(del.data());
  CHECK(h->nlmsg_type == RTM_DELQDISC);
  CHECK(static_cast<const tcmsg*>(NLMSG_DATA(h))->tcm_parent == TC_H_ROOT);
}

// Templates as a node's operator writes them: argv lists, no shell, values as arguments.
Policy commandPolicy(const std::string& state) {
  Policy policy{{"data0"}, {"mgmt0"}, "data0"};
  policy.ecnCommands["lossless"] = {
      {"/bin/cat", state},
      {"/bin/sh", "-c", "printf 'kmin=%s kmax=%s pmax=%s port=%s\\n' \"$1\" \"$2\" \"$3\" \"$4\" > \"$5\"",
       "sh", "{kmin}", "{kmax}", "{pmax}", "{port}", state},
      {"/bin/sh", "-c", "printf %s \"$1\" > \"$2\"", "sh", "{snapshot}", state}};
  return policy;
}

rc::Result<std::unique_ptr<Fault>> makeWith(json raw, const Policy& policy) {
  const FaultKind* k = findKind("ecn_shift");
  auto p = normaliseParams("ecn_shift", k->params, raw);
  if (!p) return p.error();
  return k->create(*p, policy);
}

TEST_CASE("the command backend snapshots, applies and restores exactly", "[ecn_shift]") {
  char tmpl[] = "/tmp/rc-test-ecn-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl, state = dir + "/profile";
  std::ofstream(state) << "kmin=1048576 kmax=2097152 pmax=0.05";
  Policy policy = commandPolicy(state);
  auto f = makeWith({{"backend", "command"}, {"command", "lossless"}, {"port", "Ethernet0"},
                     {"kmin", "100KiB"}, {"kmax", "400KiB"}, {"pmax", 0.2}},
                    policy);
  REQUIRE(f.ok());
  auto snap = (*f)->snapshot();
  REQUIRE(snap.ok());
  CHECK((*snap)["output"] == "kmin=1048576 kmax=2097152 pmax=0.05");
  // The journal names the template and the values, never a command line.
  CHECK((*snap)["command"] == "lossless");
  CHECK((*snap)["values"]["port"] == "Ethernet0");
  CHECK((*snap)["values"]["kmin"] == "102400");
  CHECK_FALSE((*snap).dump().find("/bin/sh") != std::string::npos);
  EventLog events;
  std::stop_source stop;
  std::thread t([&] { (void)(*f)->run(stop.get_token(), events); });
  for (int i = 0; i < 200 && slurp(state).find("102400") == std::string::npos; i++) usleep(10'000);
  CHECK(slurp(state) == "kmin=102400 kmax=409600 pmax=0.2 port=Ethernet0\n");
  stop.request_stop();
  t.join();
  REQUIRE((*f)->revert(events).ok());
  CHECK(slurp(state) == "kmin=1048576 kmax=2097152 pmax=0.05");
  // From the journal (after a crash): the same restore, with the template of the agent's
  // configuration; without it, nothing runs.
  std::ofstream(state) << "changed";
  REQUIRE(findKind("ecn_shift")->revertRecord((*f)->params(), *snap, policy).ok());
  CHECK(slurp(state) == "kmin=1048576 kmax=2097152 pmax=0.05");
  std::ofstream(state) << "changed";
  CHECK_FALSE(findKind("ecn_shift")->revertRecord((*f)->params(), *snap, Policy{}).ok());
  CHECK(slurp(state) == "changed");
  std::filesystem::remove_all(dir);
}

// Two nodes' agents shifting one switch port through the command backend at overlapping times
// (the plan refuses it; an ad-hoc inject from two controllers does not): each snapshots what the
// other set. A revert restores only over what its own fault set; otherwise it is a conflict.
TEST_CASE("two agents on one switch port: the port ends as it started, or the conflict is named", "[ecn_shift]") {
  char tmpl[] = "/tmp/rc-test-ecn-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmpl};  // also when a REQUIRE fails
  std::string dir = tmpl, state = dir + "/profile";
  const std::string original = "kmin=1048576 kmax=2097152 pmax=0.05";
  Policy policy = commandPolicy(state);
  auto shift = [&](const char* kmin) {
    auto f = makeWith({{"backend", "command"}, {"command", "lossless"}, {"port", "Ethernet0"}, {"kmin", kmin},
                       {"kmax", "400KiB"}, {"pmax", 0.2}},
                      policy);
    REQUIRE(f.ok());
    return std::move(*f);
  };
  struct Holder {
    std::unique_ptr<Fault> f;
    EventLog events;
    std::stop_source stop;
    std::thread t;
    void start() {
      REQUIRE(f->snapshot().ok());
      t = std::thread([this] { (void)f->run(stop.get_token(), events); });
    }
    void stopRun() {
      stop.request_stop();
      t.join();
    }
  };
  auto awaitState = [&](const std::string& part) {
    for (int i = 0; i < 300 && slurp(state).find(part) == std::string::npos; i++) usleep(10'000);
    REQUIRE(slurp(state).find(part) != std::string::npos);
  };
  SECTION("the same shift from both: A restores the original, B finds a third value and touches nothing") {
    std::ofstream(state) << original;
    Holder a{shift("100KiB")}, b{shift("100KiB")};
    a.start();
    awaitState("kmin=102400");
    b.start();  // B's snapshot is A's shifted profile
    usleep(100'000);
    a.stopRun();
    REQUIRE(a.f->revert(a.events).ok());
    CHECK(slurp(state) == original);
    b.stopRun();
    auto rb = b.f->revert(b.events);
    REQUIRE_FALSE(rb.ok());
    CHECK(rb.error().code == kRevertConflict);
    CHECK_THAT(rb.error().message, Catch::Contains("revert conflict on 'Ethernet0'") && Catch::Contains("left as it is"));
    CHECK(slurp(state) == original);  // before the fix: A's shifted profile, "restored" by B
  }
  SECTION("two shifts: A's revert waits for B's, then restores the original") {
    std::ofstream(state) << original;
    Holder a{shift("100KiB")}, b{shift("200KiB")};
    a.start();
    awaitState("kmin=102400");
    b.start();
    awaitState("kmin=204800");
    a.stopRun();
    auto first = a.f->revert(a.events);  // the port holds B's profile: not A's to restore
    REQUIRE_FALSE(first.ok());
    CHECK(first.error().code == kRevertConflict);
    CHECK(slurp(state).find("kmin=204800") != std::string::npos);
    b.stopRun();
    REQUIRE(b.f->revert(b.events).ok());  // back to A's profile, as B found it
    CHECK(slurp(state).find("kmin=102400") != std::string::npos);
    REQUIRE(a.f->revert(a.events).ok());  // the retry: A's own profile, restored
    CHECK(slurp(state) == original);
    REQUIRE(a.f->revert(a.events).ok());  // idempotent
    CHECK(slurp(state) == original);
  }
  std::filesystem::remove_all(dir);
}

// A command that leaves a child behind (an ssh in the background) loses it when it returns; a
// snapshot printing more than 64 KiB is refused, not cut.
TEST_CASE("the command backend kills what its command left behind and refuses a long snapshot", "[ecn_shift]") {
  char tmpl[] = "/tmp/rc-test-ecn-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmpl};  // also when a REQUIRE fails
  std::string dir = tmpl, state = dir + "/profile", late = dir + "/late";
  std::ofstream(state) << "before";
  Policy policy{{"data0"}, {"mgmt0"}, "data0"};
  // apply: writes at once, and puts a child in the background that would write 1 s later.
  policy.ecnCommands["slow"] = {
      {"/bin/cat", state},
      {"/bin/sh", "-c", "echo applied > \"$1\"; (sleep 1; echo late > \"$2\") </dev/null >/dev/null 2>&1 &", "sh", state,
       late},
      {"/bin/sh", "-c", "printf %s \"$1\" > \"$2\"", "sh", "{snapshot}", state}};
  policy.ecnCommands["long"] = {{"/usr/bin/head", "-c", "70000", "/dev/zero"}, {"/bin/true"}, {"/bin/true"}};
  auto f = makeWith({{"backend", "command"}, {"command", "slow"}, {"port", "Ethernet0"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}},
                    policy);
  REQUIRE(f.ok());
  REQUIRE((*f)->snapshot().ok());
  EventLog events;
  std::stop_source stop;
  std::thread t([&] { (void)(*f)->run(stop.get_token(), events); });
  for (int i = 0; i < 300 && slurp(state) != "applied\n"; i++) usleep(10'000);
  CHECK(slurp(state) == "applied\n");
  stop.request_stop();
  t.join();
  REQUIRE((*f)->revert(events).ok());
  usleep(1'500'000);  // past the background child's second
  CHECK_FALSE(std::filesystem::exists(late));
  CHECK(slurp(state) == "before");
  auto g = makeWith({{"backend", "command"}, {"command", "long"}, {"port", "Ethernet0"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}},
                    policy);
  REQUIRE(g.ok());
  auto snap = (*g)->snapshot();
  REQUIRE_FALSE(snap.ok());
  CHECK_THAT(snap.error().message, Catch::Contains("more than 64 KiB"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the command backend runs only the agent's own templates", "[ecn_shift]") {
  char tmpl[] = "/tmp/rc-test-ecn-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl, state = dir + "/profile", pwned = dir + "/pwned";
  std::ofstream(state) << "before";
  json base = {{"backend", "command"}, {"port", "Ethernet0"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}};
  // Off when the configuration has no templates.
  json named = base;
  named["command"] = "lossless";
  auto off = makeWith(named, Policy{{"data0"}, {"mgmt0"}, "data0"});
  REQUIRE_FALSE(off.ok());
  CHECK_THAT(off.error().message, Catch::Contains("command backend is off"));
  Policy policy = commandPolicy(state);
  // A name the configuration does not have is refused, listing the ones it has.
  json unknown = base;
  unknown["command"] = "touch " + pwned;
  auto u = makeWith(unknown, policy);
  REQUIRE_FALSE(u.ok());
  CHECK_THAT(u.error().message, Catch::Contains("(it has: lossless)"));
  // Commands from the controller are not parameters at all any more.
  json old = named;
  old["apply_command"] = "touch " + pwned;
  CHECK_FALSE(makeWith(old, policy).ok());
  // Values are checked: no option, no shell syntax, no spaces.
  for (const char* port : {"-rf", "n1; touch /tmp/x", "$(touch /tmp/x)", "a b", "`id`", ""}) {
    json bad = named;
    bad["port"] = port;
    auto r = makeWith(bad, policy);
    CHECK_FALSE(r.ok());
  }
  CHECK_FALSE(std::filesystem::exists(pwned));
  CHECK(slurp(state) == "before");
  std::filesystem::remove_all(dir);
}

TEST_CASE("the command backend's port is a plain name, never a path", "[ecn_shift]") {
  Policy policy = commandPolicy("/nonexistent/profile");
  json base = {{"backend", "command"}, {"command", "lossless"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}};
  // Before, '/' and '..' were allowed anywhere, and a template that puts {port} in a path went
  // wherever these lead. A '/' inside a name (Ethernet1/1, as SONiC and EOS name ports) stays.
  for (const char* port : {"../../etc/passwd", "a/../b", "/etc", "..", "Ethernet..0", ".hidden", "Ethernet1/", "a//b"}) {
    json bad = base;
    bad["port"] = port;
    auto r = makeWith(bad, policy);
    CAPTURE(port);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("'port' = '" + std::string(port) + "'") &&
                                      Catch::Contains("hold no '..' or '//' (a switch port name such as Ethernet1/1, never a path)"));
  }
  for (const char* port : {"Ethernet0", "Ethernet1.2", "Po1:3", "swp1s0", "e_1-2", "Ethernet1/1", "Ethernet1/1/2"}) {
    json good = base;
    good["port"] = port;
    CAPTURE(port);
    CHECK(makeWith(good, policy).ok());
  }
}

TEST_CASE("a command template's child inherits none of the agent's descriptors", "[ecn_shift]") {
  // A socket as Boost.Asio accepts them (no CLOEXEC), and a plain file: before, the child of a
  // template held both (the agent's TLS sessions and listeners, for as long as it ran).
  rc::UniqueFD sock(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(sock.isValid());
  char name[] = "/tmp/rc-test-inherited-XXXXXX";
  rc::UniqueFD file(::mkstemp(name));
  REQUIRE(file.isValid());
  struct Gone {
    const char* path;
    ~Gone() { ::unlink(path); }
  } gone{name};
  Policy policy{{"data0"}, {"mgmt0"}, "data0"};
  // What the child has open, as the kernel lists it (its own directory read included).
  policy.ecnCommands["probe"] = {{"/bin/sh", "-c", "ls -l /proc/$$/fd"}, {"/bin/true"}, {"/bin/true"}};
  auto f = makeWith({{"backend", "command"}, {"command", "probe"}, {"port", "Ethernet0"}, {"kmin", "1KiB"},
                     {"kmax", "2KiB"}},
                    policy);
  REQUIRE(f.ok());
  auto snap = (*f)->snapshot();
  REQUIRE(snap.ok());
  const std::string fds = (*snap)["output"].get<std::string>();
  INFO(fds);
  CHECK_THAT(fds, Catch::Contains(" 1 -> pipe:"));  // the output pipe: the listing is the child's
  CHECK_THAT(fds, !Catch::Contains("socket:"));
  CHECK_THAT(fds, !Catch::Contains(name));
}

TEST_CASE("ecn_shift names what is missing", "[ecn_shift]") {
  auto noSocket = make({{"port", "n1"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}}, "");
  REQUIRE_FALSE(noSocket.ok());
  CHECK(noSocket.error().message.find("[lab] switch_socket") != std::string::npos);
  auto noPort = make({{"kmin", "1KiB"}, {"kmax", "2KiB"}});
  REQUIRE_FALSE(noPort.ok());
  CHECK(noPort.error().message.find("'port'") != std::string::npos);
  // Under the lab, an agent's own port is the default.
  auto ownPort = make({{"kmin", "1KiB"}, {"kmax", "2KiB"}}, "/run/lab/switch.sock", "n3");
  REQUIRE(ownPort.ok());
  CHECK((*ownPort)->params()["port"] == "n3");
  CHECK((*ownPort)->params()["socket"] == "/run/lab/switch.sock");
  auto bad = make({{"backend", "snmp"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("labswitch, tc-red or command") != std::string::npos);
  auto order = make({{"port", "n1"}, {"kmin", "4KiB"}, {"kmax", "2KiB"}});
  REQUIRE_FALSE(order.ok());
  auto noCmd = make({{"backend", "command"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}});
  REQUIRE_FALSE(noCmd.ok());
  CHECK(noCmd.error().message.find("command backend is off") != std::string::npos);
}

TEST_CASE("the socket parameter may only name the agent's own lab switch socket", "[ecn_shift]") {
  // A controller must not make the root agent connect to a socket of its choosing.
  for (const char* other : {"/run/docker.sock", "/run/lab/switch.sock/../../docker.sock",
                            "/run/lab/switch.sock2", "relative.sock"}) {
    auto f = make({{"port", "n1"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}, {"socket", other}});
    REQUIRE_FALSE(f.ok());
    CHECK_THAT(f.error().message, Catch::Contains("not the lab switch socket of this agent's "
                                                  "configuration"));
  }
  auto same = make({{"port", "n1"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}, {"socket", "/run/lab/switch.sock"}});
  REQUIRE(same.ok());
  // link_flap's switch_port is held to the same rule.
  const FaultKind* lf = findKind("link_flap");
  auto p = normaliseParams("link_flap", lf->params,
                           {{"switch_port", "n1"}, {"socket", "/run/docker.sock"}});
  REQUIRE(p.ok());
  Policy policy{{"data0"}, {"mgmt0"}, "data0"};
  policy.labswitchSocket = "/run/lab/switch.sock";
  auto flap = lf->create(*p, policy);
  REQUIRE_FALSE(flap.ok());
  CHECK_THAT(flap.error().message, Catch::Contains("'/run/docker.sock' is not the lab switch socket"));
  policy.labswitchSocket.clear();
  auto none = lf->create(*p, policy);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("has no lab switch"));
}

TEST_CASE("port \"*\" is refused: it would shift every switch port under a target named \"*\"", "[ecn_shift]") {
  // The lab switch reads "*" as every port, so a fault on "*" would hold port n1's queue 3
  // without colliding with a fault on n1 queue 3, and their reverts would fight.
  auto star = make({{"port", "*"}, {"queue", 3}, {"kmin", "1KiB"}, {"kmax", "2KiB"}});
  REQUIRE_FALSE(star.ok());
  CHECK_THAT(star.error().message, Catch::Contains("port \"*\"") && Catch::Contains("name one port"));
  // validate says it too (the kind's check, shared with the playbook parser).
  const FaultKind* k = findKind("ecn_shift");
  auto p = normaliseParams("ecn_shift", k->params, {{"port", "*"}, {"kmin", "1KiB"}, {"kmax", "2KiB"}});
  REQUIRE(p.ok());
  REQUIRE(k->check);
  auto checked = k->check(*p);
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.error().message, Catch::StartsWith("port"));
  // One named port is fine.
  CHECK(make({{"port", "n1"}, {"queue", 3}, {"kmin", "1KiB"}, {"kmax", "2KiB"}}).ok());
}

}  // namespace test_ecn_shift
