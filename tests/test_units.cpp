// Unit parsing: durations, sizes, rates, with exact values and clear errors.
#include <catch2/catch.hpp>

#include "common/units.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_units {

using namespace rc;

TEST_CASE("durations parse to exact nanoseconds") {
  auto [text, ns] = GENERATE(table<std::string, int64_t>({
      {"500ms", 500'000'000},
      {"30s", 30'000'000'000},
      {"250us", 250'000},
      {"1.5s", 1'500'000'000},
      {"2m", 120'000'000'000},
      {"1h", 3'600'000'000'000},
      {"0", 0},
      {"7ns", 7},
  }));
  auto d = parseDuration(text);
  REQUIRE(d.ok());
  CHECK(d->count() == ns);
}

TEST_CASE("bad durations are refused with a message naming the problem") {
  auto [text, fragment] = GENERATE(table<std::string, std::string>({
      {"500", "needs a unit"},
      {"5 parsecs", "unknown unit"},
      {"", "empty"},
      {"-1s", "must start with a number"},
      {"ms", "must start with a number"},
      {"99999999999h", "too large"},
  }));
  auto d = parseDuration(text);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.error().message, Catch::Contains(fragment));
}

TEST_CASE("sizes, bit rates and per-second rates") {
  CHECK(*parseSize("4MiB") == 4u * 1024 * 1024);
  CHECK(*parseSize("64KiB") == 65536u);
  CHECK(*parseSize("1kB") == 1000u);
  CHECK(*parseSize("4096") == 4096u);
  CHECK_FALSE(parseSize("4 furlongs").ok());
  CHECK_FALSE(parseSize("0.5B").ok());
  CHECK(*parseBitRate("1Gbps") == 1'000'000'000u);
  CHECK(*parseBitRate("100Mbps") == 100'000'000u);
  CHECK_FALSE(parseBitRate("1GB").ok());
  CHECK(*parseBitRate("500M") == 500'000'000u);  // as `lab up --rate` and link_degrade's rate take it
  CHECK(*parseBitRate("25G") == 25'000'000'000u);
  CHECK(*parsePerSecond("5000/s") == Approx(5000));
  CHECK(*parsePerSecond("12") == Approx(12));
  CHECK_FALSE(parsePerSecond("5000/min").ok());
}

TEST_CASE("formatting") {
  CHECK(formatDuration(Nanos(1'500'000'000)) == "1.500s");
  CHECK(formatDuration(Nanos(250'000'000)) == "250ms");
  CHECK(formatSize(4u << 20) == "4.0MiB");
  CHECK(formatBitRate(9.41e9) == "9.41Gb/s");
}

}  // namespace test_units
