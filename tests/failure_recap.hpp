// A Catch2 listener that repeats every failed assertion at the end of the run, just above the
// totals: CI keeps only the tail of a long test's output (the lab playbooks print ~1,000 lines),
// and a failure printed in the middle of it was lost (a CI run said "1 failed" and nothing more).
#pragma once
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace rctest {
struct FailureRecap : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  std::string testCase;
  std::vector<std::string> failures;

  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    testCase = info.name;
    TestEventListenerBase::testCaseStarting(info);
  }
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const auto& r = stats.assertionResult;
    if (r.isOk()) return true;
    std::string line = "  " + std::string(r.getSourceInfo().file) + ":" + std::to_string(r.getSourceInfo().line) +
                       " in \"" + testCase + "\": " + r.getExpressionInMacro();
    if (r.hasExpandedExpression()) line += "  with  " + r.getExpandedExpression();
    if (r.hasMessage()) line += "  message: " + r.getMessage();
    for (const auto& m : stats.infoMessages) line += "  info: " + m.message;
    failures.push_back(std::move(line));
    return true;
  }
  void testRunEnded(Catch::TestRunStats const& stats) override {
    if (!failures.empty()) {
      std::printf("\nfailed assertions of this run (%zu), repeated:\n", failures.size());
      for (const auto& f : failures) std::printf("%s\n", f.c_str());
      std::fflush(stdout);
    }
    TestEventListenerBase::testRunEnded(stats);
  }
};
CATCH_REGISTER_LISTENER(FailureRecap)
}  // namespace rctest
