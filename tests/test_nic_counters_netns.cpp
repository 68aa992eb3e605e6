// NIC counter sampling on real veth links in a private network namespace, with that
// namespace's own sysfs mounted on /sys (as the lab's agents see it): the netdev statistics
// and the driver's ethtool statistics move when frames cross the link.
#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/unique_fd.hpp"
#include "counters/nic_counters.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_nic_counters_netns {

using namespace rc;
using namespace rc::counters;
using namespace std::chrono_literals;

namespace {

// Moves this process, before any thread exists, into a fresh network namespace and a private
// mount namespace with a sysfs of the new network namespace on /sys (like `ip netns exec`).
// Everything the tests create dies with the process; the host's interfaces are out of reach.
void enterPrivateNamespaces() {
  static const std::string failed = []() -> std::string {
    if (::unshare(CLONE_NEWNET | CLONE_NEWNS) != 0)
      return std::string("unshare: ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string("make / private: ") + std::strerror(errno);
    if (::umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL)
      return std::string("umount /sys: ") + std::strerror(errno);
    if (::mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0)
      return std::string("mount sysfs: ") + std::strerror(errno);
    return "";
  }();
  INFO(failed);
  REQUIRE(failed.empty());
}

using rctest::sh;

// veth rcn0 <-> rcn1, up, fresh for each test. GRO on rcn1 puts its receive path on NAPI, where
// veth counts every frame in its per-queue ethtool statistics; veth hands a frame to NAPI only
// when its sender does no TSO, so TSO is off on rcn0.
struct CounterVeth {
  CounterVeth() {
    enterPrivateNamespaces();
    (void)std::system("ip link del rcn0 >/dev/null 2>&1");
    sh("ip link add rcn0 type veth peer name rcn1");
    sh("ip link set rcn0 up");
    sh("ip link set rcn1 up");
    setFeature("rcn1", ETHTOOL_SGRO, true);
    setFeature("rcn0", ETHTOOL_STSO, false);
    ifindex0 = int(::if_nametoindex("rcn0"));
    REQUIRE(ifindex0 > 0);
  }
  ~CounterVeth() { (void)std::system("ip link del rcn0 >/dev/null 2>&1"); }

  // The legacy ethtool ioctl, so the test needs no ethtool program.
  static void setFeature(const std::string& ifname, uint32_t cmd, bool on) {
    UniqueFD fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd.isValid());
    ethtool_value v{};
    v.cmd = cmd;
    v.data = on ? 1 : 0;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&v);
    INFO("ethtool command " << cmd << " on " << ifname << ": " << std::strerror(errno));
    REQUIRE(::ioctl(fd.get(), SIOCETHTOOL, &ifr) == 0);
  }

  int ifindex0 = 0;
};

// Sends N Ethernet frames of SIZE bytes out of IFNAME through a packet socket.
void sendFrames(const std::string& ifname, int n, size_t size) {
  UniqueFD fd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  REQUIRE(fd.isValid());
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(::if_nametoindex(ifname.c_str()));
  to.sll_halen = ETH_ALEN;
  REQUIRE(to.sll_ifindex > 0);
  std::vector<uint8_t> frame(size, 0);
  const uint8_t dst[ETH_ALEN] = {0x02, 0, 0, 0, 0, 0x42};  // a local unicast nobody owns
  const uint8_t src[ETH_ALEN] = {0x02, 0, 0, 0, 0, 0x41};
  std::memcpy(frame.data(), dst, ETH_ALEN);
  std::memcpy(frame.data() + ETH_ALEN, src, ETH_ALEN);
  frame[12] = 0x88;  // local experimental ethertype 0x88b5: no stack consumes it
  frame[13] = 0xb5;
  std::memcpy(to.sll_addr, dst, ETH_ALEN);
  for (int i = 0; i < n; i++)
    REQUIRE(::sendto(fd.get(), frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to),
                     sizeof to) == ssize_t(frame.size()));
}

uint64_t delta(const Counters& before, const Counters& after, const std::string& name) {
  INFO("counter " << name);
  REQUIRE(before.count(name) == 1);
  REQUIRE(after.count(name) == 1);
  return after.at(name) - before.at(name);
}

}  // namespace

TEST_CASE("veth: netdev and ethtool statistics move with the frames that cross the link") {
  CounterVeth veth;
  auto rx = NicSampler::create("rcn1");  // the default: /sys and the ethtool ioctl
  REQUIRE(rx.ok());
  auto tx = NicSampler::create("rcn0");
  REQUIRE(tx.ok());
  CHECK_FALSE(rx->rdmaPort());  // veth has no RDMA device

  auto rx0 = rx->sample();
  auto tx0 = tx->sample();
  REQUIRE(rx0.ok());
  REQUIRE(tx0.ok());
  // veth's ethtool table: its peer's ifindex, then per-queue counters.
  REQUIRE(rx0->count("peer_ifindex") == 1);
  CHECK(rx0->at("peer_ifindex") == uint64_t(veth.ifindex0));

  constexpr int kFrames = 300;
  constexpr size_t kSize = 1000;
  sendFrames("rcn0", kFrames, kSize);

  // Receive runs in softirq context, after sendto returned: wait (bounded) until it shows.
  Counters rx1, tx1;
  auto until = std::chrono::steady_clock::now() + 3s;
  do {
    auto r = rx->sample();
    REQUIRE(r.ok());
    rx1 = *r;
    if (rx1.at("net.rx_packets") - rx0->at("net.rx_packets") >= kFrames &&
        rx1.count("rx_queue_0_xdp_packets") &&
        rx1.at("rx_queue_0_xdp_packets") - rx0->at("rx_queue_0_xdp_packets") >= kFrames)
      break;
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < until);
  auto t = tx->sample();
  REQUIRE(t.ok());
  tx1 = *t;

  // sysfs netdev statistics on both ends (on its NAPI path veth counts bytes after the
  // Ethernet header, and its tx figures are its peer's rx)
  constexpr uint64_t kPayload = kFrames * (kSize - ETH_HLEN);
  CHECK(delta(*tx0, tx1, "net.tx_packets") >= kFrames);
  CHECK(delta(*tx0, tx1, "net.tx_bytes") >= kPayload);
  CHECK(delta(*rx0, rx1, "net.rx_packets") >= kFrames);
  CHECK(delta(*rx0, rx1, "net.rx_bytes") >= kPayload);
  // and the driver's own ethtool statistics of the receiving queue
  CHECK(delta(*rx0, rx1, "rx_queue_0_xdp_packets") >= kFrames);
  CHECK(delta(*rx0, rx1, "rx_queue_0_xdp_bytes") >= kPayload);
  // a quiet link's counters do not move by themselves
  CHECK(delta(*tx0, tx1, "net.rx_errors") == 0);
}

TEST_CASE("an interface removed under the sampler is an error that names it") {
  auto s = [] {
    CounterVeth veth;
    auto r = NicSampler::create("rcn0");
    REQUIRE(r.ok());
    REQUIRE(r->sample().ok());
    return std::move(*r);
  }();  // the pair is deleted here
  auto c = s.sample();
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message, Catch::Contains("'rcn0'"));
}

}  // namespace test_nic_counters_netns
