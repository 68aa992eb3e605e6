// Unit tests of the lab switch's frame inspection, of PFC frames, and of its storm accounting.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/pfc.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/switch.hpp"
#include "labswitch/switch_fabric.hpp"
#include "labswitch/switch_packet.hpp"
#include "tests/roce_frames.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_switch_packet {

using namespace rc::labswitch;

namespace {

uint16_t ipChecksum(const uint8_t* h, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i < len; i += 2) sum += uint32_t(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

// An Ethernet + IPv4 + UDP frame with a valid header checksum.
std::vector<uint8_t> udpFrame(uint8_t tos, uint16_t sport, bool vlan = false, uint8_t pcp = 0) {
  std::vector<uint8_t> f(vlan ? 64 : 60, 0);
  size_t o = 12;
  if (vlan) {
    f[12] = 0x81;
    f[13] = 0x00;
    f[14] = uint8_t(pcp << 5);
    o = 16;
  }
  f[o] = 0x08;
  f[o + 1] = 0x00;
  uint8_t* ip = f.data() + o + 2;
  ip[0] = 0x45;
  ip[1] = tos;
  ip[3] = 46;
  ip[8] = 64;
  ip[9] = 17;
  ip[12] = 10, ip[15] = 1, ip[16] = 10, ip[19] = 2;
  uint16_t c = ipChecksum(ip, 20);
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
  ip[20] = uint8_t(sport >> 8);
  ip[21] = uint8_t(sport);
  ip[22] = 0x12;
  ip[23] = 0xb7;  // 4791
  return f;
}

}  // namespace

TEST_CASE("priority: PCP when tagged, else DSCP through the map", "[switch]") {
  auto map = defaultDscpMap();
  CHECK(classify(udpFrame(26 << 2, 1).data(), 60, map) == 3);
  CHECK(classify(udpFrame(48 << 2, 1).data(), 60, map) == 6);
  CHECK(classify(udpFrame(0, 1).data(), 60, map) == 0);
  CHECK(classify(udpFrame(26 << 2, 1, true, 5).data(), 64, map) == 5);
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  CHECK(classify(arp.data(), arp.size(), map) == 0);
}

TEST_CASE("pure TCP ACKs: their own priority when the ACL rule is set, else by DSCP", "[switch]") {
  constexpr uint8_t kAck = 0x10, kSyn = 0x02, kFin = 0x01, kRst = 0x04, kPsh = 0x08;
  auto seg = [](size_t payload, uint8_t flags, uint8_t tos = 26 << 2) {
    auto f = rctest::tcpFrame(40000, 7480, payload, tos);
    f[14 + 33] = flags;
    return f;
  };
  auto pureAck = seg(0, kAck);
  CHECK(isPureTcpAck(pureAck.data(), pureAck.size()));
  // A frame padded to Ethernet's 60-byte minimum is still a pure ACK (IPv4 says 40 bytes).
  auto padded = pureAck;
  padded.resize(60, 0);
  CHECK(isPureTcpAck(padded.data(), padded.size()));
  for (const auto& f : {seg(1, kAck), seg(1448, kAck | kPsh), seg(0, kAck | kSyn), seg(0, kAck | kFin),
                        seg(0, kAck | kRst), seg(0, 0)})
    CHECK_FALSE(isPureTcpAck(f.data(), f.size()));
  auto udp = udpFrame(26 << 2, 1);
  CHECK_FALSE(isPureTcpAck(udp.data(), udp.size()));
  // A pure ACK with TCP options (timestamps: data offset 8 words) and no payload.
  auto withOptions = seg(12, kAck);
  withOptions[14 + 32] = 0x80;
  CHECK(isPureTcpAck(withOptions.data(), withOptions.size()));

  Classes byDscp;  // the rule off: DSCP 26 is priority 3 for data and ACKs alike
  CHECK(classify(pureAck.data(), pureAck.size(), byDscp) == 3);
  Classes acl{.tcpAckPriority = 6};
  CHECK(classify(pureAck.data(), pureAck.size(), acl) == 6);
  auto data = seg(1448, kAck);
  CHECK(classify(data.data(), data.size(), acl) == 3);
  auto syn = seg(0, kSyn);
  CHECK(classify(syn.data(), syn.size(), acl) == 3);
  CHECK(classify(udp.data(), udp.size(), acl) == 3);
  // A tag's PCP still wins over the rule.
  auto tagged = udpFrame(26 << 2, 1, true, 5);
  CHECK(classify(tagged.data(), tagged.size(), acl) == 5);
}

TEST_CASE("switch.json: tcp_ack_priority is 0-7 or -1, and off when absent", "[switch]") {
  nlohmann::json j = {{"control", "/tmp/x.sock"}, {"hosts", {{{"name", "n1"}, {"netns", "/run/netns/x"}}}}};
  auto absent = parseConfig(j);
  REQUIRE(absent.ok());
  CHECK(absent->tcpAckPriority == -1);
  j["tcp_ack_priority"] = 6;
  auto six = parseConfig(j);
  REQUIRE(six.ok());
  CHECK(six->tcpAckPriority == 6);
  for (int bad : {8, -2}) {
    j["tcp_ack_priority"] = bad;
    auto r = parseConfig(j);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("tcp_ack_priority must be 0-7"));
  }
}

TEST_CASE("switch.json: a host's io is tap (default) or packet, and packet always with offload", "[switch]") {
  nlohmann::json j = {{"control", "/tmp/x.sock"}, {"hosts", {{{"name", "n1"}, {"netns", "/run/netns/x"}}}}};
  auto absent = parseConfig(j);
  REQUIRE(absent.ok());
  CHECK(absent->hosts[0].io == "tap");
  j["hosts"][0]["io"] = "packet";
  j["hosts"][0]["ifname"] = "d1";
  j["hosts"][0]["host_netns"] = "/run/netns/y";
  auto packet = parseConfig(j);
  REQUIRE(packet.ok());
  CHECK(packet->hosts[0].io == "packet");
  CHECK(packet->hosts[0].ifname == "d1");
  CHECK(packet->hosts[0].hostNetns == "/run/netns/y");
  j["offload"] = false;
  auto noOffload = parseConfig(j);
  REQUIRE_FALSE(noOffload.ok());
  CHECK_THAT(noOffload.error().message, Catch::Contains("host 'n1'") && Catch::Contains("offload"));
  j["offload"] = true;
  j["hosts"][0]["io"] = "xdp";
  auto bad = parseConfig(j);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("io 'xdp' is not 'tap' or 'packet'"));
}

TEST_CASE("switch.json: cpu is a core or -1, and none when absent", "[switch]") {
  nlohmann::json j = {{"control", "/tmp/x.sock"}, {"hosts", {{{"name", "n1"}, {"netns", "/run/netns/x"}}}}};
  auto absent = parseConfig(j);
  REQUIRE(absent.ok());
  CHECK(absent->cpu == -1);
  CHECK(absent->deliveryThread);  // used only with a core set
  j["cpu"] = 0;
  auto zero = parseConfig(j);
  REQUIRE(zero.ok());
  CHECK(zero->cpu == 0);
  j["delivery_thread"] = false;
  auto inlineWrites = parseConfig(j);
  REQUIRE(inlineWrites.ok());
  CHECK_FALSE(inlineWrites->deliveryThread);
  j["delivery_thread"] = "no";
  CHECK_FALSE(parseConfig(j).ok());
  j.erase("delivery_thread");
  for (int bad : {-2, 1 << 20}) {
    j["cpu"] = bad;
    auto r = parseConfig(j);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("cpu must be a core number"));
  }
}

TEST_CASE("ECT becomes CE with a valid IPv4 checksum; non-ECT and CE are left alone", "[switch]") {
  for (uint8_t ecn : {1, 2}) {
    auto f = udpFrame(uint8_t(26 << 2 | ecn), 1);
    CHECK(ecnOf(f.data(), f.size()) == Ecn::ect);
    REQUIRE(markCe(f.data(), f.size()));
    CHECK(ecnOf(f.data(), f.size()) == Ecn::ce);
    CHECK((f[15] >> 2) == 26);  // DSCP kept
    CHECK(ipChecksum(f.data() + 14, 20) == 0);
  }
  auto plain = udpFrame(26 << 2, 1);
  CHECK_FALSE(markCe(plain.data(), plain.size()));
  auto ce = udpFrame(26 << 2 | 3, 1);
  CHECK_FALSE(markCe(ce.data(), ce.size()));
}

TEST_CASE("the flow hash includes the RoCE UDP source port", "[switch]") {
  auto a = udpFrame(0, 1000), b = udpFrame(0, 1001);
  CHECK(flowHash(a.data(), a.size()) == flowHash(a.data(), a.size()));
  CHECK(flowHash(a.data(), a.size()) != flowHash(b.data(), b.size()));
  int buckets[4] = {};
  for (uint16_t s = 0; s < 400; s++) {
    auto f = udpFrame(0, uint16_t(49152 + s));
    buckets[flowHash(f.data(), f.size()) % 4]++;
  }
  for (int n : buckets) CHECK(n > 60);  // spread, not polarised
}

TEST_CASE("PFC frames round-trip; one quantum is 512 bit times", "[switch]") {
  uint8_t src[6] = {2, 0, 0, 0, 0, 1};
  rc::pfc::Frame f;
  f.enableVector = 1 << 3;
  f.quanta[3] = 65535;
  uint8_t buf[rc::pfc::kFrameSize];
  rc::pfc::build(buf, src, f);
  CHECK(buf[0] == 0x01);
  CHECK(buf[5] == 0x01);
  CHECK(buf[12] == 0x88);
  CHECK(buf[13] == 0x08);
  auto p = rc::pfc::parse(buf, sizeof buf);
  REQUIRE(p.has_value());
  CHECK(p->enableVector == 8);
  CHECK(p->quanta[3] == 65535);
  CHECK(rc::pfc::quantaToNs(65535, 100e9) == 335539);  // 335 us at 100G
  CHECK_FALSE(rc::pfc::parse(udpFrame(0, 1).data(), 60).has_value());
}

TEST_CASE("storm gaps: a pause frame after the previous frame's own pause ran out is a gap", "[switch]") {
  // One switch, one host port whose NIC is a stream socket (the soft-RoCE guests' kind): the
  // test listens where QEMU would, and feeds the port's received PFC frames at chosen instants.
  char dir[] = "/tmp/rc-stormgap-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/n1.sock";
  struct Cleanup {
    std::string dir, path;
    ~Cleanup() {
      ::unlink(path.c_str());
      ::rmdir(dir.c_str());
    }
  } cleanup{dir, path};
  rc::UniqueFD listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(listener.isValid());
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);

  Config cfg;
  cfg.rateBps = 1e9;
  cfg.hosts.push_back(HostPort{"n1", "", "", path});
  Fabric fab(cfg);
  REQUIRE(fab.build());

  auto frame = [](uint16_t quanta) {
    rc::pfc::Frame f;
    f.enableVector = 1 << 3;
    f.quanta[3] = quanta;
    return f;
  };
  auto gaps = [&](int64_t now) {
    auto c = fab.counters({.port = "n1"}, now);
    REQUIRE(c);
    return c->ports.at(0).queues.at(3).stormGaps;
  };
  // 65535 quanta at 1 Gb/s: 33.55 ms of pause; 1000 quanta: 0.512 ms.
  const int64_t full = rc::pfc::quantaToNs(65535, 1e9), small = rc::pfc::quantaToNs(1000, 1e9);
  REQUIRE(full == 33'553'920);
  REQUIRE(small == 512'000);
  int64_t t = 1'000'000'000;
  // A storm that refreshes its pause before it runs out holds the port: no gap.
  for (int i = 0; i < 10; i++, t += 10'000'000) fab.onPfc(0, frame(65535), t);
  CHECK(gaps(t) == 0);
  // One frame late by 1 ns after the last one's full pause: one gap.
  t = t - 10'000'000 + full + 1;
  fab.onPfc(0, frame(65535), t);
  CHECK(gaps(t) == 1);
  // Frames of 1000 quanta 1 ms apart leave the port free to send 0.488 ms of every
  // millisecond: each is a gap, although 1 ms is far shorter than the longest pause (the old
  // rule, which judged every gap against 65535 quanta, counted none of them).
  t += 1'000'000;
  fab.onPfc(0, frame(1000), t);  // after a full pause still running: not a gap
  CHECK(gaps(t) == 1);
  for (int i = 0; i < 5; i++) {
    t += 1'000'000;
    fab.onPfc(0, frame(1000), t);
  }
  CHECK(gaps(t) == 6);
  // The same frames 0.5 ms apart keep the port paused: no new gap.
  for (int i = 0; i < 5; i++) {
    t += 500'000;
    fab.onPfc(0, frame(1000), t);
  }
  CHECK(gaps(t) == 6);
  // A resume frame long after the storm's last pause ran out (a revert) is no gap.
  t += 400'000'000;
  fab.onPfc(0, frame(0), t);
  CHECK(gaps(t) == 6);
}

}  // namespace test_switch_packet
