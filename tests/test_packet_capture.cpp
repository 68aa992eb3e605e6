// The lab switch's packet-rule captures, read by Debian's tshark: Wireshark's InfiniBand
// dissector must decode the BTH (opcode, destination QP, PSN) and the AETH of the frames a rule
// captured, with the switch's comment on the acted-on frame and each frame's direction. Skips
// (exit 77) where tshark is not installed (scripts/install-deps installs it).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "labswitch/packet_rules.hpp"
#include "roce_frames.hpp"
#include "skip.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_packet_capture {

using namespace rc;
using namespace rc::labswitch;

namespace {

std::string run(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

}  // namespace

TEST_CASE("tshark decodes the BTH of a packet rule's capture", "[capture]") {
  if (std::system("command -v tshark > /dev/null 2>&1") != 0) {
    RC_SKIP("tshark is not installed (scripts/install-deps installs it)");
  }
  char tmpl[] = "/tmp/rc-capture-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  struct Remove {  // also after a failed REQUIRE
    std::string path;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove{dir};
  PacketRules rules;
  auto spec = parseRuleSpec({{"name", "gbn"}, {"port", "n1"}, {"action", "drop"}, {"opcode", "write"},
                             {"select", "nth"}, {"n", 2}});
  REQUIRE(spec);
  REQUIRE(rules.add(*spec, 0, dir, 0)["ok"] == true);
  std::vector<std::vector<uint8_t>> out;
  int64_t wall = 1'700'000'000'000'000'000;
  for (uint32_t psn = 7; psn <= 9; psn++) {
    rctest::RoceSpec s;
    s.opcode = psn == 7 ? 0x06 : 0x07;  // WRITE_FIRST, WRITE_MIDDLE
    s.qpn = 0x42;
    s.psn = psn;
    s.payload = 1024;
    rules.process(0, true, rctest::roceFrame(s), 3, 0, wall += 1000, out);
  }
  rctest::RoceSpec nak;
  nak.opcode = 0x11;
  nak.syndrome = 0x60;
  nak.qpn = 0x24;
  nak.psn = 8;
  nak.src = 0x0a000002;
  nak.dst = 0x0a000001;
  rules.process(0, false, rctest::roceFrame(nak), 3, 0, wall += 1000, out);
  auto d = rules.remove("gbn", false, 0, 0, [](int, bool, std::vector<uint8_t>) {});
  std::string path = d["rule"]["capture"];
  std::string fields = run("tshark -r " + path +
                           " -Y infiniband -T fields -E separator=, -e infiniband.bth.opcode -e infiniband.bth.destqp"
                           " -e infiniband.bth.psn -e infiniband.aeth.syndrome -e frame.comment"
                           " -e frame.packet_flags_direction 2>/dev/null");
  INFO(fields);
  std::istringstream lines(fields);
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l);
  REQUIRE(got.size() == 4);
  CHECK(got[0] == "6,0x000042,7,,,0x00000001");
  CHECK(got[1] == "7,0x000042,8,,rdmachaos rule gbn: drop,0x00000001");
  CHECK(got[2] == "7,0x000042,9,,,0x00000001");
  CHECK(got[3] == "17,0x000024,8,96,,0x00000002");  // NAK, PSN sequence error (syndrome 0x60)
}

}  // namespace test_packet_capture
