// Skipping a test case in Catch2 v2, which has no SKIP(): RC_SKIP(reason) records the case and
// the reason, passes one assertion (so `-w NoAssertions` does not fail the case) and returns
// from it; the binary's main (catch_main.cpp, netns_main.cpp) then exits 77, meson's skip,
// printing every skipped case and why, unless an assertion failed: a failure wins over a skip.
// So a case whose tool or input is missing is reported as skipped, never as passed.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace rctest {

inline std::vector<std::string>& skippedCases() {
  static std::vector<std::string> skipped;
  return skipped;
}

inline void noteSkip(const std::string& reason) {
  // Built by appending: at -O3 GCC 12 raises a false -Werror=restrict on "x" + std::string.
  std::string line = "\"";
  line += Catch::getResultCapture().getCurrentTestName();
  line += "\": ";
  line += reason;
  auto& skipped = skippedCases();
  if (std::find(skipped.begin(), skipped.end(), line) == skipped.end()) skipped.push_back(line);
}

// The exit status of a run whose Catch2 session returned STATUS.
inline int exitStatus(int status) {
  if (status != 0 || skippedCases().empty()) return status;
  for (const auto& s : skippedCases()) std::printf("SKIP: %s\n", s.c_str());
  std::fflush(stdout);
  return 77;
}

}  // namespace rctest

#define RC_SKIP(reason)                                 \
  do {                                                  \
    const std::string rcSkipReason_ = (reason);         \
    rctest::noteSkip(rcSkipReason_);                    \
    SUCCEED("skipped: " << rcSkipReason_);              \
    return;                                             \
  } while (false)
