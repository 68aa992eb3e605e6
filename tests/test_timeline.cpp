// The run's timeline: agents' telemetry through the clock offset and the run start onto the
// run's grid (controller/run/timeline.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "common/protocol.hpp"
#include "controller/run/timeline.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_timeline {

using namespace rc::controller;

namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kStart = 1'700'000'000'000'000'000;  // the run's t = 0, controller clock
constexpr int64_t kFar = 3'600'000 * kMs;               // a horizon that cuts nothing

rc::proto::TelemetryMsg message(int64_t firstBinNs, int64_t binNs, std::vector<int64_t> bins) {
  rc::proto::TelemetryMsg t;
  t.workloadId = "wl-1";
  t.firstBinNs = firstBinNs;
  t.binNs = binNs;
  t.bins = std::move(bins);
  return t;
}

double total(const std::vector<Bin>& bins) {
  double sum = 0;
  for (const auto& b : bins) sum += b.bytes;
  return sum;
}

}  // namespace

TEST_CASE("an agent's bins land on the run's grid through its clock offset and the run start") {
  // The agent's clock is 250 ms ahead of the controller's; its bins are 10 ms wide and start
  // 4 ms after t = 0, so every one straddles two grid bins of 10 ms.
  const int64_t offset = 250 * kMs;
  NodeTimeline tl("n1", {offset, kStart}, 10 * kMs);
  const int64_t agentZero = kStart + offset;  // t = 0 on the agent's clock
  tl.add(message(agentZero + 4 * kMs, 10 * kMs, {100, 0, 50}), kFar);
  // Then nothing for 20 ms (the agent had closed no bin then), and one more bin at 54 ms.
  tl.add(message(agentZero + 54 * kMs, 10 * kMs, {10}), kFar);

  const auto& bins = tl.bins();
  REQUIRE(bins.size() == 7);  // [0, 70 ms): the last agent bin ends at 64 ms
  for (size_t k = 0; k < bins.size(); k++) CHECK(bins[k].tNs == int64_t(k) * 10 * kMs);
  CHECK(bins[0].bytes == Approx(60));  // 6 ms of the first agent bin
  CHECK(bins[1].bytes == Approx(40));  // its last 4 ms, and the empty agent bin
  CHECK(bins[2].bytes == Approx(30));  // 6 ms of the 50-byte bin
  CHECK(bins[3].bytes == Approx(20));
  CHECK(bins[4].bytes == 0);  // no telemetry reached [40, 50 ms): present, and 0
  CHECK(bins[5].bytes == Approx(6));
  CHECK(bins[6].bytes == Approx(4));
  CHECK(total(bins) == Approx(160));  // every byte is somewhere
  REQUIRE(tl.throughNs());
  CHECK(*tl.throughNs() == 64 * kMs);

  // The run's series covers exactly [0, end): padded with zeros, or cut.
  auto longer = tl.binsUntil(100 * kMs);
  REQUIRE(longer.size() == 10);
  CHECK(longer[6].bytes == Approx(4));
  CHECK(longer[9].tNs == 90 * kMs);
  CHECK(longer[9].bytes == 0);
  auto shorter = tl.binsUntil(35 * kMs);
  REQUIRE(shorter.size() == 4);  // the bin that holds the end is in
  CHECK(shorter[3].bytes == Approx(20));
  CHECK(tl.binsUntil(0).empty());
}

TEST_CASE("iterations move onto the run timeline by the clock offset and the run start") {
  const int64_t offset = -3 * kMs;  // the agent's clock behind the controller's
  NodeTimeline tl("n2", {offset, kStart}, 10 * kMs);
  auto t = message(0, 10 * kMs, {});
  t.iterations = {{7, kStart + offset + 5 * kMs, kStart + offset + 17 * kMs, 4096, true},
                  {8, kStart + offset + 17 * kMs, kStart + offset + 40 * kMs, 1024, false}};
  tl.add(t, kFar);
  CHECK(tl.bins().empty());
  CHECK_FALSE(tl.throughNs());  // iterations alone say nothing about the bins
  REQUIRE(tl.iterations().size() == 2);
  const auto& a = tl.iterations()[0];
  CHECK(a.node == "n2");
  CHECK(a.iteration == 7);
  CHECK(a.startNs == 5 * kMs);
  CHECK(a.endNs == 17 * kMs);
  CHECK(a.rxBytes == 4096);
  CHECK(a.ok);
  const auto& b = tl.iterations()[1];
  CHECK(b.iteration == 8);
  CHECK(b.startNs == 17 * kMs);
  CHECK(b.endNs == 40 * kMs);
  CHECK_FALSE(b.ok);  // kept: the live statistics skip it, the run's result leaves it out
  // And back onto the controller's clock (what `rdmachaos workload --json` prints).
  CHECK(tl.map().controllerNs(a.startNs) == kStart + 5 * kMs);
}

TEST_CASE("with the offset the agent was given, its bins are the run's bins one to one") {
  const int64_t offset = 123'456;
  NodeTimeline tl("n1", {offset, kStart}, 10 * kMs);
  tl.add(message(kStart + offset, 10 * kMs, {1000, 2000, 3000}), kFar);
  tl.add(message(kStart + offset + 30 * kMs, 10 * kMs, {4000}), kFar);
  REQUIRE(tl.bins().size() == 4);
  for (size_t k = 0; k < 4; k++) CHECK(tl.bins()[k].bytes == double(1000 * (k + 1)));
}

TEST_CASE("bytes before t = 0 and past the horizon are dropped; coarser agent bins spread") {
  NodeTimeline tl("n1", {0, kStart}, 10 * kMs);
  // 40 ms agent bins from -40 ms: the first lies wholly before t = 0, the second spreads over
  // four grid bins, the third starts at the horizon.
  tl.add(message(kStart - 40 * kMs, 40 * kMs, {10, 40, 5}), 40 * kMs);
  REQUIRE(tl.bins().size() == 4);
  for (const auto& b : tl.bins()) CHECK(b.bytes == Approx(10));
  REQUIRE(tl.throughNs());
  CHECK(*tl.throughNs() == 40 * kMs);  // not past the horizon
  // Times far in the future (a broken clock) do not grow the grid.
  tl.add(message(kStart + 86'400'000 * kMs, 10 * kMs, {1}), 100 * kMs);
  CHECK(tl.bins().size() == 4);
  // Half a bin before t = 0: the half after it counts.
  NodeTimeline half("n1", {0, kStart}, 10 * kMs);
  half.add(message(kStart - 5 * kMs, 10 * kMs, {8}), kFar);
  REQUIRE(half.bins().size() == 1);
  CHECK(half.bins()[0].bytes == Approx(4));
}

}  // namespace test_timeline
