// Clock offset estimation: the minimum-RTT probe decides, with half its RTT as uncertainty.
#include <catch2/catch.hpp>

#include "common/clock.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_clock {

using namespace rc;

TEST_CASE("offset from symmetric probes") {
  // Agent clock is 1000 ns ahead; one-way delay 50 ns each way.
  ClockProbe p{0, 1050, 1060, 110};
  CHECK(p.rtt() == 100);
  CHECK(p.offset() == 1000);
}

TEST_CASE("the probe with the smallest round trip wins") {
  std::vector<ClockProbe> probes = {
      {0, 5000, 5010, 4000},      // slow, asymmetric
      {10000, 11020, 11030, 10050},  // rtt 40: offset ((1020)+(980))/2 = 1000
      {20000, 22000, 22010, 21000},
  };
  auto e = estimateOffset(probes);
  CHECK(e.rttNs == 40);
  CHECK(e.offsetNs == 1000);
  CHECK(e.uncertaintyNs == 20);
  CHECK(e.samples == 3);
}

TEST_CASE("probes with a negative round trip (clock step) are ignored") {
  std::vector<ClockProbe> probes = {{100, 0, 0, 50}, {0, 500, 510, 30}};
  auto e = estimateOffset(probes);
  CHECK(e.rttNs == 20);
  CHECK(e.samples == 1);
}

TEST_CASE("wall and monotonic clocks move forward") {
  auto a = wallNs(), m = monoNs();
  CHECK(wallNs() >= a);
  CHECK(monoNs() >= m);
  CHECK(a > 1'600'000'000'000'000'000);  // after 2020
}

}  // namespace test_clock
