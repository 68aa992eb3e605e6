// Text timestamps and durations of the monitoring APIs (RFC 3339, Prometheus durations) to
// Unix nanoseconds, without the C library's locale- and TZ-dependent parsers.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/result.hpp"

namespace rc::alerts {

inline constexpr int64_t kNsPerSecond = 1'000'000'000;

// "2026-11-26T14:30:01.123456789Z", "2026-11-26T16:30:01+02:00": RFC 3339 (a 't' or a space
// for the 'T', a 'z' for the 'Z'; fractional seconds of any length, digits past nanoseconds
// truncated; a leap second 60 counts as the next second). Unix nanoseconds, so years
// 1678..2261 only; Go's zero time "0001-01-01T00:00:00Z" is out of range (isGoZeroTime).
Result<int64_t> parseRfc3339(std::string_view text);

// Go's zero time.Time, which Alertmanager and Prometheus write for "not set".
bool isGoZeroTime(std::string_view text);

// A Prometheus duration ("1s", "250ms", "1m30s", "2h", "1d", "1w", "1y"; units in decreasing
// order, integers only, as Prometheus's model.ParseDuration) in nanoseconds. "0" is 0.
Result<int64_t> parsePromDuration(std::string_view text);

}  // namespace rc::alerts
