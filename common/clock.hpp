// Clocks: wall-clock nanoseconds for cross-node timestamps, and offset estimation.
#pragma once

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace rc {

// Nanoseconds since the epoch on CLOCK_REALTIME: the clock agents and the controller share
// (through the measured offset) to place events on one timeline.
inline int64_t wallNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// This instant's wall-clock time of day, "08:05:21.249 UTC": what an error message that an
// operator lines up with logs carries.
inline std::string utcNow() {
  int64_t ns = wallNs();
  time_t s = time_t(ns / 1'000'000'000);
  tm t{};
  gmtime_r(&s, &t);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d.%03d UTC", t.tm_hour, t.tm_min, t.tm_sec, int(ns / 1'000'000 % 1000));
  return b;
}

// One NTP-style probe: t0 controller send, t1 agent receive, t2 agent send, t3 controller
// receive (t0/t3 on the controller's clock, t1/t2 on the agent's).
struct ClockProbe {
  int64_t t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  int64_t rtt() const { return (t3 - t0) - (t2 - t1); }
  // agent clock - controller clock
  int64_t offset() const { return ((t1 - t0) + (t2 - t3)) / 2; }
};

struct ClockEstimate {
  int64_t offsetNs = 0;       // agent - controller
  int64_t uncertaintyNs = 0;  // half the best round trip: the true offset lies within +/- this
  int64_t rttNs = 0;          // best round trip
  int samples = 0;
};

// Minimum-RTT filter: the probe that spent least time in flight bounds the offset best.
ClockEstimate estimateOffset(const std::vector<ClockProbe>& probes);

}  // namespace rc
