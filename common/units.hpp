// Parsing and printing of the units users write: "500ms", "30s", "4MiB", "1Gbps", "5000/s".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace rc {

using Nanos = std::chrono::nanoseconds;

// "250us", "500ms", "2s", "1m", "1h"; a plain "0" is zero. Errors say what was expected.
Result<Nanos> parseDuration(std::string_view text);
// "4096", "64KiB", "4MiB", "1GiB", "1kB", "1MB" (SI and IEC).
Result<uint64_t> parseSize(std::string_view text);
// "100Mbps", "1Gbps", "25Gbps", "1000bps" (or "100M", "25G") -> bits per second.
Result<uint64_t> parseBitRate(std::string_view text);
// "5000/s" or "5000" -> events per second.
Result<double> parsePerSecond(std::string_view text);

std::string formatDuration(Nanos d);  // "1.500s", "250ms", "12.3us"
std::string formatSize(uint64_t bytes);  // "4.0MiB"
std::string formatBitRate(double bitsPerSecond);  // "9.41Gb/s"

}  // namespace rc
