// Runner helpers: telemetry bins of any alignment re-binned onto the run's grid.
#include <catch2/catch.hpp>

#include <set>

#include "common/protocol.hpp"
#include "controller/fleet.hpp"
#include "controller/run_playbook.hpp"

using namespace rc::controller;

TEST_CASE("rebin keeps every byte inside the window and splits by overlap") {
  // Samples of 10 ms starting 3 ms after the origin; grid of 10 ms.
  std::vector<std::pair<int64_t, double>> samples;
  const int64_t origin = 1'000'000'000'000;
  for (int i = 0; i < 10; i++) samples.emplace_back(origin + 3'000'000 + i * 10'000'000, 100.0);
  auto bins = rebin(samples, 10'000'000, origin, 10'000'000, 120'000'000);
  REQUIRE(bins.size() == 12);
  CHECK(bins[0].tNs == 0);
  CHECK(bins[1].tNs == 10'000'000);
  CHECK(bins[0].bytes == Approx(70));   // 7 ms of the first sample
  CHECK(bins[1].bytes == Approx(100));  // 3 ms of the first + 7 ms of the second
  CHECK(bins[10].bytes == Approx(30));  // the last 3 ms of the last sample
  CHECK(bins[11].bytes == Approx(0));
  double total = 0;
  for (const auto& b : bins) total += b.bytes;
  CHECK(total == Approx(1000));
}

TEST_CASE("rebin drops what falls outside the run and tolerates coarser samples") {
  std::vector<std::pair<int64_t, double>> samples = {{-50, 10.0}, {0, 40.0}, {1000, 5.0}};
  auto bins = rebin(samples, 40, 0, 10, 40);
  REQUIRE(bins.size() == 4);
  for (const auto& b : bins) CHECK(b.bytes == Approx(10));
}

TEST_CASE("controller ids end in 64 random bits, so fault ids do not collide across runs") {
  std::set<std::string> tails;
  for (int i = 0; i < 1000; i++) {
    std::string id = newControllerId();
    CHECK(rc::proto::validId(id));
    auto dash = id.rfind('-');
    REQUIRE(dash != std::string::npos);
    std::string tail = id.substr(dash + 1);
    CHECK(tail.size() == 16);
    tails.insert(tail);
  }
  CHECK(tails.size() == 1000);
}
