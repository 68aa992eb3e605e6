// The Catch2 session that both test mains run (tests/catch_session.cpp).
#pragma once

namespace rctest {
// Runs the cases ARGV selects, failing (exit 2) when a test spec in it selects none; exits 77
// (meson's skip) when a case skipped with RC_SKIP and nothing failed (skip.hpp). Failed
// assertions are repeated above the totals (failure_recap.hpp).
int runCatch(int argc, char* argv[]);
}  // namespace rctest
