// NIC counter sampling on the ConnectX-6 sysfs tree in tests/data/connectx6, ethtool decoding
// with mlx5's names, and absent counters being skipped.
#include <linux/ethtool.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "counters/nic_counters.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_nic_counters {

namespace fs = std::filesystem;
using namespace rc::counters;

namespace {


// A writable copy of the captured tree, removed when the test ends (also on failure).
struct TreeCopy {
  fs::path root;
  TreeCopy() {
    std::string tmpl = (fs::temp_directory_path() / "rc-nic-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()));
    root = tmpl;
    fs::copy(rctest::kConnectx6Sys, root, fs::copy_options::recursive);
  }
  ~TreeCopy() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void write(const std::string& rel, const std::string& text) {
    std::ofstream(root / rel) << text;
  }
};

}  // namespace

TEST_CASE("the RDMA port behind a netdev comes from its GID table") {
  auto p0 = rdmaPortOf(rctest::kConnectx6Sys, "ens1f0np0");
  REQUIRE(p0);
  CHECK(p0->device == "mlx5_0");
  CHECK(p0->port == 1);
  auto p1 = rdmaPortOf(rctest::kConnectx6Sys, "ens1f1np1");
  REQUIRE(p1);
  CHECK(p1->device == "mlx5_1");
  CHECK_FALSE(rdmaPortOf(rctest::kConnectx6Sys, "eth9"));
  CHECK_FALSE(rdmaPortOf(rctest::kConnectx6Sys, "../net"));
}

TEST_CASE("a ConnectX-6 sample has net statistics, port counters and hw_counters") {
  auto s = NicSampler::create("ens1f0np0", {rctest::kConnectx6Sys, false});
  REQUIRE(s.ok());
  REQUIRE(s->rdmaPort());
  auto c = s->sample();
  REQUIRE(c.ok());
  const Counters& m = *c;
  // netdev statistics
  CHECK(m.at("net.rx_bytes") == 918273645501ull);
  CHECK(m.at("net.tx_packets") == 210033871ull);
  CHECK(m.at("net.rx_dropped") == 17);
  CHECK(m.count("net.rx_nohandler") == 1);
  // the IB port counters
  CHECK(m.at("rdma.port_rcv_data") == 229568411375ull);
  CHECK(m.at("rdma.port_xmit_data") == 218628084980ull);
  CHECK(m.at("rdma.link_downed") == 1);
  // the congestion and transport hw_counters the report needs
  CHECK(m.at("rdma.np_ecn_marked_roce_packets") == 90417);
  CHECK(m.at("rdma.np_cnp_sent") == 88213);
  CHECK(m.at("rdma.rp_cnp_handled") == 87950);
  CHECK(m.at("rdma.out_of_sequence") == 1537);
  CHECK(m.at("rdma.packet_seq_err") == 29);
  CHECK(m.at("rdma.local_ack_timeout_err") == 41);
  // a setting, not a counter; and nothing but counters
  CHECK(m.count("rdma.lifespan") == 0);
  CHECK(m.count("net.mtu") == 0);
  CHECK(m.count("rdma.state") == 0);
  CHECK(m.size() == 24 + 21 + 29);
}

TEST_CASE("each netdev reads its own RDMA port") {
  auto s = NicSampler::create("ens1f1np1", {rctest::kConnectx6Sys, false});
  REQUIRE(s.ok());
  auto c = s->sample();
  REQUIRE(c.ok());
  CHECK(c->at("rdma.np_cnp_sent") == 88213 / 7);
  CHECK(c->at("net.rx_bytes") == 918273645501ull / 3);
}

TEST_CASE("absent and unreadable counters are skipped, never an error") {
  TreeCopy t;
  const std::string port = "class/infiniband/mlx5_0/ports/1";
  SECTION("no hw_counters (an older kernel or a non-mlx5 NIC)") {
    fs::remove_all(t.root / port / "hw_counters");
    auto s = NicSampler::create("ens1f0np0", {t.root.string(), false});
    REQUIRE(s.ok());
    auto c = s->sample();
    REQUIRE(c.ok());
    CHECK(c->count("rdma.np_cnp_sent") == 0);
    CHECK(c->at("rdma.port_rcv_data") == 229568411375ull);
  }
  SECTION("no RDMA device at all (a plain Ethernet NIC)") {
    fs::remove_all(t.root / "class/infiniband");
    auto s = NicSampler::create("ens1f0np0", {t.root.string(), false});
    REQUIRE(s.ok());
    CHECK_FALSE(s->rdmaPort());
    auto c = s->sample();
    REQUIRE(c.ok());
    CHECK(c->size() == 24);
  }
  SECTION("files that are not numbers, empty, or directories") {
    t.write(port + "/hw_counters/out_of_sequence", "n/a\n");
    t.write(port + "/hw_counters/np_cnp_sent", "");
    t.write(port + "/hw_counters/rp_cnp_handled", "99999999999999999999999\n");  // > 2^64
    fs::create_directory(t.root / port / "hw_counters" / "subdir");
    auto s = NicSampler::create("ens1f0np0", {t.root.string(), false});
    REQUIRE(s.ok());
    auto c = s->sample();
    REQUIRE(c.ok());
    CHECK(c->count("rdma.out_of_sequence") == 0);
    CHECK(c->count("rdma.np_cnp_sent") == 0);
    CHECK(c->count("rdma.rp_cnp_handled") == 0);
    CHECK(c->count("rdma.subdir") == 0);
    CHECK(c->at("rdma.packet_seq_err") == 29);
  }
  SECTION("a counter that appears between samples shows up in the next one") {
    auto s = NicSampler::create("ens1f0np0", {t.root.string(), false});
    REQUIRE(s.ok());
    REQUIRE(s->sample()->count("rdma.roce_new_counter") == 0);
    t.write(port + "/hw_counters/roce_new_counter", "5\n");
    CHECK(s->sample()->at("rdma.roce_new_counter") == 5);
  }
  SECTION("an interface that went away is an error that names it") {
    auto s = NicSampler::create("ens1f0np0", {t.root.string(), false});
    REQUIRE(s.ok());
    fs::remove_all(t.root / "class/net/ens1f0np0");
    auto c = s->sample();
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().message, Catch::Contains("'ens1f0np0'"));
  }
}

TEST_CASE("an interface that is not there, or not a name, is refused") {
  auto name = GENERATE(as<std::string>{}, "eth42", "", "..", "a/b", "averyveryverylongname");
  auto s = NicSampler::create(name, {rctest::kConnectx6Sys, false});
  CHECK_FALSE(s.ok());
}

TEST_CASE("ethtool statistics decode with mlx5's names, including a name that fills its slot") {
  std::vector<std::string> names = {"rx_prio3_pause",
                                    "tx_prio3_pause",
                                    "rx_prio3_pause_duration",
                                    "tx_pause_storm_warning_events",
                                    "tx_pause_storm_error_events",
                                    "rx_vport_rdma_unicast_packets",
                                    "  ch0_rx_packets",
                                    "",
                                    std::string(ETH_GSTRING_LEN, 'x')};
  std::vector<char> blob(names.size() * ETH_GSTRING_LEN, '\0');
  std::vector<uint64_t> values;
  for (size_t i = 0; i < names.size(); i++) {
    std::memcpy(blob.data() + i * ETH_GSTRING_LEN, names[i].data(), names[i].size());
    values.push_back(1000 + i);
  }
  Counters c = decodeEthtoolStats(blob.data(), names.size(), values.data());
  CHECK(c.at("rx_prio3_pause") == 1000);
  CHECK(c.at("tx_prio3_pause") == 1001);
  CHECK(c.at("rx_prio3_pause_duration") == 1002);
  CHECK(c.at("tx_pause_storm_warning_events") == 1003);
  CHECK(c.at("tx_pause_storm_error_events") == 1004);
  CHECK(c.at("ch0_rx_packets") == 1006);
  CHECK(c.at(std::string(ETH_GSTRING_LEN, 'x')) == 1008);
  CHECK(c.size() == 8);  // the empty name is dropped
}

TEST_CASE("ethtool statistics of an interface without a driver table are empty, not an error") {
  // Loopback has no ethtool statistics; it is in every network namespace.
  auto sock = EthtoolSocket::open();
  REQUIRE(sock.ok());
  auto c = sock->stats("lo");
  REQUIRE(c.ok());
  CHECK(c->empty());
  auto missing = sock->stats("rcnosuchif0");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ENODEV);
}

}  // namespace test_nic_counters
