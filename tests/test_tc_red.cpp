// ecn_shift's tc-red snapshot and restore against a real kernel's qdiscs, in a private network
// namespace. The build machines' kernel has no sch_red (docs/lab.md), so a tbf root stands in
// for the fault's RED here; the soft-RoCE vm case applies real RED.
#include <sched.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "faults/fault.hpp"
#include "faults/netlink.hpp"
#include "faults/tc_red.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_tc_red {

using namespace rc;
using namespace rc::faults;

namespace {

// Once per process: a private namespace (nothing outside it is touched).
void privateNamespace() {
  static bool done = [] {
    if (unshare(CLONE_NEWNET) != 0) return false;
    return std::system("ip link set lo up") == 0;
  }();
  REQUIRE(done);
}

using rctest::sh;

std::string out(const std::string& cmd) {
  std::string s;
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  REQUIRE(p);
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p.get())) s.append(buf.data(), n);
  return s;
}

// A veth pair rct0 <-> rct1 (QUEUES transmit queues), removed at the end, also on failure.
struct RedVeth {
  int ifindex = 0;
  explicit RedVeth(int queues = 1) {
    (void)std::system("ip link del rct0 >/dev/null 2>&1");
    sh("ip link add rct0 numtxqueues " + std::to_string(queues) + " type veth peer name rct1 numtxqueues " +
       std::to_string(queues) + " && ip link set rct0 up && ip link set rct1 up");
    auto l = nl::getLink("rct0");
    REQUIRE(l.ok());
    ifindex = l->ifindex;
  }
  ~RedVeth() { (void)std::system("ip link del rct0 >/dev/null 2>&1"); }
};

const std::string kShow = "tc -j qdisc show dev rct0";
// What the fault's RED does to the root, with a qdisc this kernel has.
const std::string kStandIn = "tc qdisc replace dev rct0 root tbf rate 1mbit burst 32k latency 400ms";

}  // namespace

TEST_CASE("tc-red restores the whole qdisc tree exactly: kind, handle and options", "[tc-red]") {
  privateNamespace();
  struct Case {
    const char* name;
    int queues;
    const char* setup;
  };
  auto c = GENERATE(Case{"the kernel's noqueue (handle 0)", 1, "true"},
                    Case{"a bfifo with a non-default limit, and an ingress qdisc", 1,
                         "tc qdisc replace dev rct0 root bfifo limit 12345 && tc qdisc add dev rct0 ingress"},
                    Case{"a pfifo_fast an operator set (its own handle)", 1, "tc qdisc replace dev rct0 root handle 5: pfifo_fast"},
                    Case{"mq with per-queue children, one of them tuned", 4,
                         "tc qdisc replace dev rct0 root handle 7: mq && "
                         "tc qdisc replace dev rct0 parent 7:2 handle 72: bfifo limit 999"});
  INFO(c.name);
  RedVeth v(c.queues);
  sh(c.setup);
  const std::string before = out(kShow);
  auto tree = tcred::listQdiscs(v.ifindex);
  REQUIRE(tree.ok());
  CHECK(tcred::unrestorable(*tree).empty());
  sh(kStandIn);
  REQUIRE(out(kShow) != before);
  auto r = tcred::restoreTree(v.ifindex, "rct0", *tree, "tbf");
  INFO((r ? std::string() : r.error().message));
  REQUIRE(r.ok());
  CHECK(out(kShow) == before);
  // Idempotent: a second revert (a replay after a crash between revert and unjournal) is a no-op.
  REQUIRE(tcred::restoreTree(v.ifindex, "rct0", *tree, "tbf").ok());
  CHECK(out(kShow) == before);
}

TEST_CASE("tc-red refuses before applying where it could not restore exactly", "[tc-red]") {
  privateNamespace();
  RedVeth v;
  sh("tc qdisc replace dev rct0 root handle 1: htb && tc class add dev rct0 parent 1: classid 1:1 htb rate 1mbit");
  auto tree = tcred::listQdiscs(v.ifindex);
  REQUIRE(tree.ok());
  CHECK_THAT(tcred::unrestorable(*tree), Catch::Contains("'htb' 1:0 root has classes"));
  // Through the fault: its snapshot (taken before anything changes) says why and what to do.
  const FaultKind* k = findKind("ecn_shift");
  auto p = normaliseParams("ecn_shift", k->params,
                           {{"backend", "tc-red"}, {"interface", "rct0"}, {"kmin", "100KiB"}, {"kmax", "400KiB"}});
  REQUIRE(p.ok());
  Policy policy{{"rct0"}, {"lo"}, "rct0"};
  auto f = k->create(*p, policy);
  REQUIRE(f.ok());
  auto snap = (*f)->snapshot();
  REQUIRE_FALSE(snap.ok());
  CHECK_THAT(snap.error().message, Catch::Contains("cannot be restored exactly") &&
                                       Catch::Contains("has classes") && Catch::Contains("tc qdisc del dev rct0 root"));
  // A tree it can restore is journaled whole.
  sh("tc qdisc replace dev rct0 root bfifo limit 4242");
  auto ok = (*f)->snapshot();
  REQUIRE(ok.ok());
  REQUIRE((*ok)["qdiscs"].size() == 1);
  CHECK((*ok)["qdiscs"][0]["kind"] == "bfifo");
  CHECK_FALSE((*ok)["qdiscs"][0]["options"].get<std::string>().empty());
}

TEST_CASE("a tc-red revert that cannot restore is an error; only a gone interface is done", "[tc-red]") {
  privateNamespace();
  const FaultKind* k = findKind("ecn_shift");
  RedVeth v;
  // A journal entry as an agent wrote it before the whole tree was journaled: the kernel's
  // noqueue, under a RED this machine cannot create; someone has set another root since.
  json legacy = {{"backend", "tc-red"}, {"interface", "rct0"}, {"ifindex", v.ifindex}, {"root_kind", "noqueue"}};
  sh("tc qdisc replace dev rct0 root bfifo limit 1000");
  auto r = k->revertRecord(json::object(), legacy, Policy{});
  CHECK_FALSE(r.ok());  // was: success, and the journal entry deleted
  // The same with the whole tree journaled: not the fault's qdisc, not the snapshot's: left
  // alone, and an error naming both.
  auto tree = tcred::listQdiscs(v.ifindex);
  REQUIRE(tree.ok());
  sh("tc qdisc replace dev rct0 root pfifo limit 7");
  const std::string now = out(kShow);
  auto r2 = tcred::restoreTree(v.ifindex, "rct0", *tree, "tbf");
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.error().message, Catch::Contains("neither") && Catch::Contains("'pfifo'") && Catch::Contains("'bfifo'"));
  CHECK(out(kShow) == now);
  // The interface is gone, and its qdiscs with it: nothing left to restore.
  (void)std::system("ip link del rct0");
  CHECK(tcred::restoreTree(v.ifindex, "rct0", *tree, "tbf").ok());
  CHECK(k->revertRecord(json::object(), legacy, Policy{}).ok());
}

// After a reboot or a re-created NIC the journaled index can name another interface: the revert
// checks the name too, and a stale entry touches nothing (before, it "restored" the journaled
// tree onto whatever interface now had that index).
TEST_CASE("a tc-red revert whose ifindex names another interface now touches nothing", "[tc-red]") {
  privateNamespace();
  const FaultKind* k = findKind("ecn_shift");
  int index = 0;
  json snap;
  {
    RedVeth v(4);
    index = v.ifindex;
    sh("tc qdisc replace dev rct0 root handle 7: mq && tc qdisc replace dev rct0 parent 7:2 handle 72: bfifo limit 999");
    auto p = normaliseParams("ecn_shift", k->params,
                             {{"backend", "tc-red"}, {"interface", "rct0"}, {"kmin", "100KiB"}, {"kmax", "400KiB"}});
    REQUIRE(p.ok());
    auto f = k->create(*p, Policy{{"rct0"}, {"lo"}, "rct0"});
    REQUIRE(f.ok());
    auto s = (*f)->snapshot();
    REQUIRE(s.ok());
    snap = *s;
  }
  // Another interface takes the index, with a tree of the same shape but other children.
  sh("ip link add imp0 index " + std::to_string(index) +
     " numtxqueues 4 type veth peer name imp1 numtxqueues 4 && ip link set imp0 up && ip link set imp1 up && "
     "tc qdisc replace dev imp0 root handle 7: mq");
  const std::string before = out("tc -j qdisc show dev imp0");
  auto r = k->revertRecord(json::object(), snap, Policy{});
  const std::string after = out("tc -j qdisc show dev imp0");
  (void)std::system("ip link del imp0 >/dev/null 2>&1");
  CHECK(before.find("bfifo") == std::string::npos);
  CHECK(after == before);  // before the fix: imp0's 7:2 became rct0's bfifo limit 999
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kRevertConflict);
  CHECK_THAT(r.error().message, Catch::Contains("ifindex " + std::to_string(index) + " is now 'imp0', not 'rct0'"));
}

TEST_CASE("two tc-red dumps at once each read their own interface", "[tc-red]") {
  privateNamespace();
  // Two rails ending together: two reverts read the qdiscs at the same time (the dump used to
  // go through one static buffer shared by every thread).
  (void)std::system("ip link del rcx0 >/dev/null 2>&1; ip link del rcy0 >/dev/null 2>&1");
  sh("ip link add rcx0 type veth peer name rcx1 && ip link add rcy0 type veth peer name rcy1 && "
     "tc qdisc replace dev rcx0 root bfifo limit 1111 && tc qdisc replace dev rcy0 root pfifo limit 22");
  struct Gone {
    ~Gone() { (void)std::system("ip link del rcx0 >/dev/null 2>&1; ip link del rcy0 >/dev/null 2>&1"); }
  } gone;
  int x = nl::getLink("rcx0")->ifindex, y = nl::getLink("rcy0")->ifindex;
  std::atomic<int> wrong{0};
  auto reader = [&](int ifindex, const char* kind) {
    for (int i = 0; i < 1500; i++) {
      auto k = tcred::rootKind(ifindex);
      if (!k || *k != kind) wrong++;
    }
  };
  std::thread a(reader, x, "bfifo"), b(reader, y, "pfifo");
  a.join();
  b.join();
  CHECK(wrong == 0);
}

}  // namespace test_tc_red
