// What the playbook parser and the planner share: limits, the internal failure that carries
// file:line:col, and the way durations and names are printed in messages.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/protocol.hpp"
#include "common/units.hpp"
#include "controller/playbook/playbook.hpp"

namespace rc::controller::detail {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kHour = 3600 * kSec;
constexpr int64_t kDay = 24 * kHour;

constexpr size_t kMaxScenarios = 64;
constexpr size_t kMaxPhases = 32;
constexpr size_t kMaxSteps = 256;
constexpr size_t kMaxExpectations = 256;
constexpr size_t kMaxSweepValues = 64;
constexpr size_t kMaxTrials = 1000;
constexpr size_t kMaxSelectorNames = 1024;
constexpr size_t kMaxPlannedFaults = 100000;
constexpr int64_t kMaxRunNs = 7 * kDay;

// Parsing is a deep, linear walk where any value can be wrong; an internal exception keeps
// the walk readable. It never leaves this file: parsePlaybook/resolvePlan turn it into a
// Result, as everything at a library edge is.
struct Fail {
  std::string message;
};

// An agent's default max_fault_lifetime, in the units of the plan.
constexpr int64_t kAgentLifetimeNs = proto::kDefaultMaxFaultLifetimeMs * kMs;

// Why a run of RUN_NS over TRIALS trials is longer than an agent runs its workload (empty: it
// is not). The run's workload lasts the whole run, and an agent refuses one longer than its
// max_fault_lifetime: found when planning, so the run does not abort at its start.
std::string runTooLong(int64_t runNs, size_t trials);

inline std::string fmtDur(int64_t ns) {
  // Whole seconds and milliseconds print the way users write them.
  char buf[48];
  if (ns > 0 && ns % kHour == 0) {
    std::snprintf(buf, sizeof buf, "%lldh", static_cast<long long>(ns / kHour));
    return buf;
  }
  if (ns > 0 && ns % (60 * kSec) == 0) {
    std::snprintf(buf, sizeof buf, "%lldm", static_cast<long long>(ns / (60 * kSec)));
    return buf;
  }
  if (ns % kSec == 0) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ns / kSec));
    return buf;
  }
  if (ns % kMs == 0 && ns < 10 * kSec) {
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ns / kMs));
    return buf;
  }
  return formatDuration(Nanos(ns));
}

inline std::string fmtOffset(int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "+%.3fs", double(ns) / 1e9);
  return buf;
}

inline std::string joinNames(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

inline std::string showValue(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Where a playbook value came from, for errors the planner finds after parsing.
struct SourceFile {
  std::string path;
  std::string at(const SourcePos& p) const {
    return path + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
  }
  [[noreturn]] void fail(const SourcePos& p, const std::string& msg) const { throw Fail{at(p) + ": " + msg}; }
};

}  // namespace rc::controller::detail
