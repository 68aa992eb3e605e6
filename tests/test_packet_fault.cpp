// The packet fault on the namespace lab (root and namespaces; netns suite): `rdmachaos inject
// packet` through real agents drops chosen TCP frames in the lab switch while a TCP flow runs;
// its events name each dropped frame, its capture holds the flow's frames with the drops
// commented, the rule is gone from the switch afterwards, a second packet fault on the same
// port is refused while the first holds it, and a rule whose agent never deletes it ends in
// the switch by itself.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/pcapng.hpp"
#include "common/roce.hpp"
#include "lab_traffic.hpp"
#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_packet_fault {

using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

constexpr int kPort = 5301;

rctest::Lab& sharedLab() {
  static rctest::Lab instance("rc-packet", [] {
    rc::lab::UpOptions o;
    o.nodes = 2;
    return o;
  }());
  return instance;
}

json rules() {
  json r = labtest::control(sharedLab().switchControl(), {{"cmd", "packet_rules"}});
  REQUIRE(r["ok"] == true);
  return r["rules"];
}

std::vector<json> eventsOf(const json& report, const std::string& what) {
  std::vector<json> out;
  for (const auto& e : report["nodes"][0]["fault"]["events"])
    if (e["what"] == what) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("inject packet drops every 50th frame of a TCP flow, reports and captures each, and leaves no rule") {
  auto n1 = sharedLab().node("n1"), n2 = sharedLab().node("n2");
  auto sink = labtest::tcpSink(n2.netns, kPort);
  labtest::sleepMs(200);
  auto source = labtest::tcpSource(n1.netns, n2.dataAddress, kPort, 0);
  labtest::sleepMs(500);
  std::string out, err;
  int rc = rctest::runCli(sharedLab().dir(),
                          {"inject", "packet", "--inventory", sharedLab().inventory(), "--node", "n1", "--set",
                           "protocol=tcp", "--set", "dst_port=" + std::to_string(kPort), "--set", "select=every",
                           "--set", "every=50", "--set", "action=drop", "--set", "duration=2s", "--set",
                           "max_actions=40", "--for", "2s", "--json"},
                          &out, &err);
  INFO("stderr: " << err << "\nstdout: " << out.substr(0, 4000));
  REQUIRE(rc == 0);
  json report = json::parse(out);
  auto drops = eventsOf(report, "packet_drop");
  REQUIRE(drops.size() == 40);  // max_actions bounds them; a 2 s flow has far more than 2000 frames
  // Built by appending: at -O3 GCC 12 raises a false -Werror=restrict on ":" + std::string.
  std::string flowEnd = ":";
  flowEnd += std::to_string(kPort);
  flowEnd += " tcp";
  for (const auto& d : drops) {
    json e = json::parse(d["detail"].get<std::string>());
    CHECK(e["direction"] == "ingress");
    CHECK(e["port"] == "n1");
    CHECK_THAT(e["flow"].get<std::string>(), Catch::EndsWith(flowEnd));
  }
  auto summary = eventsOf(report, "packet_summary");
  REQUIRE(summary.size() == 1);
  CHECK_THAT(summary[0]["detail"].get<std::string>(), Catch::Contains("acted 40"));
  auto capture = eventsOf(report, "capture");
  REQUIRE(capture.size() == 1);
  std::string path = capture[0]["detail"];
  auto recs = rc::pcapng::read(path);
  REQUIRE(recs);
  size_t commented = 0, toPort = 0, fromPort = 0;
  for (const auto& r : *recs) {
    auto fl = rc::roce::flowOf(r.data.data(), r.data.size());
    REQUIRE(fl);
    CHECK(fl->protocol == 6);
    if (r.comment.rfind("rdmachaos rule rc-", 0) == 0 && r.comment.size() > 6 &&
        r.comment.compare(r.comment.size() - 6, 6, ": drop") == 0)
      commented++;
    if (fl->dstPort == kPort) toPort++;
    if (fl->srcPort == kPort) fromPort++;
  }
  CHECK(commented == 40);
  CHECK(toPort > 2000);
  CHECK(fromPort > 0);  // the ACKs coming back: both directions of the port
  CHECK(rules().empty());
  std::filesystem::remove(path);
}

TEST_CASE("a second packet fault on a port held by one is refused, naming it") {
  rctest::Proc first = rctest::spawnCli(sharedLab().dir(), {"inject", "packet", "--inventory", sharedLab().inventory(), "--node",
                                                      "n1", "--set", "protocol=udp", "--set", "action=drop",
                                                      "--set", "duration=20s", "--set", "capture=false", "--for", "20s"});
  REQUIRE(rctest::eventually([] { return rules().size() == 1; }, 15s, 50ms));
  std::string err;
  int rc = rctest::runCli(sharedLab().dir(),
                          {"inject", "packet", "--inventory", sharedLab().inventory(), "--node", "n1", "--set",
                           "protocol=tcp", "--set", "action=drop", "--for", "2s"},
                          nullptr, &err);
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("is held by fault"));
  ::kill(first.pid, SIGTERM);
  rctest::waitCli(first);
  CHECK(rctest::eventually([] { return rules().empty(); }, 15s, 50ms));
}

// A deleted rule leaves nothing behind in the switch's loop either: its expiry once stayed the
// loop's next wake-up, and past it the loop woke every microsecond (a busy switch that slowed
// the soft-RoCE guests after every packet fault).
TEST_CASE("a TCP frame the switch corrupts is dropped by the host's TCP, not joined into a verified write") {
  // With offload the switch joins a flow's frames into one write that the host takes as
  // checksummed (CHECKSUM_PARTIAL). A corrupted frame must not be joined: its host's TCP then
  // finds the bad checksum, drops the frame and has it sent again, and the job's own payload
  // checksums and results never see it. (Before the fix: of 300 corrupted frames the hosts'
  // TCP caught 3, the job counted 166 corrupt chunks and 10 wrong results.)
  json add = labtest::control(sharedLab().switchControl(),
                              {{"cmd", "add_packet_rule"},
                               {"rule", {{"name", "bits"}, {"port", "n2"}, {"direction", "egress"}, {"protocol", "tcp"},
                                         {"action", "corrupt"}, {"select", "every"}, {"every", 100},
                                         {"max_actions", 200}, {"capture", false}}}});
  REQUIRE(add["ok"] == true);
  std::string out, err;
  int rc = rctest::runCli(sharedLab().dir(),
                          {"workload", "--inventory", sharedLab().inventory(), "--kind", "allreduce", "--size", "4MiB",
                           "--for", "4s", "--node", "n1", "--node", "n2", "--json"},
                          &out, &err);
  json listed = rules();
  REQUIRE(labtest::control(sharedLab().switchControl(), {{"cmd", "del_packet_rule"}, {"name", "bits"}})["ok"] == true);
  INFO("stderr: " << err << "\nstdout: " << out.substr(0, 2000));
  REQUIRE(rc == 0);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["acted"].get<int64_t>() == 200);  // 4 s of a 1G job carry far more than 20,000 frames
  json w = json::parse(out);
  for (const auto& n : w["nodes"]) {
    INFO("node " << n["node"] << ": " << n["counters"].dump());
    CHECK(n["counters"]["corruptions"] == 0);
    CHECK(n["counters"]["verify_failures"] == 0);
    CHECK(n["counters"]["iterations"].get<int64_t>() > 0);
  }
}

TEST_CASE("after a rule is deleted and its old expiry has passed, the switch's loop is idle") {
  json add = labtest::control(sharedLab().switchControl(),
                              {{"cmd", "add_packet_rule"},
                               {"rule", {{"name", "brief"}, {"port", "n1"}, {"protocol", "udp"}, {"action", "drop"},
                                         {"lifetime_ns", 200'000'000}, {"capture", false}}}});
  REQUIRE(add["ok"] == true);
  REQUIRE(labtest::control(sharedLab().switchControl(), {{"cmd", "del_packet_rule"}, {"name", "brief"}})["ok"] == true);
  labtest::sleepMs(400);  // past the deleted rule's expiry
  auto busy = [] {
    json c = labtest::control(sharedLab().switchControl(), {{"cmd", "counters"}, {"port", "n1"}});
    REQUIRE(c["ok"] == true);
    return std::pair<int64_t, int64_t>(c["loop_ns"].get<int64_t>(), c["busy_ns"].get<int64_t>());
  };
  auto [l0, b0] = busy();
  labtest::sleepMs(1000);
  auto [l1, b1] = busy();
  double share = double(b1 - b0) / double(l1 - l0);
  INFO("the switch's loop was busy " << share * 100 << " % of an idle second");
  CHECK(share < 0.2);
}

TEST_CASE("a rule nobody deletes ends in the switch at its lifetime") {
  json add = labtest::control(sharedLab().switchControl(),
                              {{"cmd", "add_packet_rule"},
                               {"rule", {{"name", "orphan"}, {"port", "n2"}, {"protocol", "tcp"}, {"action", "drop"},
                                         {"lifetime_ns", 300'000'000}, {"capture", false}}}});
  REQUIRE(add["ok"] == true);
  CHECK(rules().size() == 1);
  CHECK(rctest::eventually([] { return rules().empty(); }, 5s, 20ms));
  // Bad input changes nothing and says what to fix.
  json bad = labtest::control(sharedLab().switchControl(),
                              {{"cmd", "add_packet_rule"}, {"rule", {{"name", "x"}, {"port", "n9"}, {"action", "drop"}}}});
  CHECK(bad["ok"] == false);
  CHECK_THAT(bad["error"].get<std::string>(), Catch::Contains("not a host port"));
  CHECK(rules().empty());
}

TEST_CASE("gbn.toml is refused on a lab without RDMA devices, before anything starts") {
  std::string out, err;
  int rc = rctest::runCli(sharedLab().dir(),
                          {"run", rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/gbn.toml", "--inventory",
                           sharedLab().inventory(), "--report-dir", sharedLab().dir() + "/gbn-report"},
                          &out, &err);
  INFO("stdout: " << out << "\nstderr: " << err);
  CHECK(rc == 2);
  CHECK_THAT(out + err, Catch::Contains("no RDMA device with an ACTIVE port"));
  CHECK_THAT(out, Catch::Contains("nothing was started"));
  CHECK(rules().empty());
}

}  // namespace test_packet_fault
