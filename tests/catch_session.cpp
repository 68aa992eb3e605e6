// Catch2's implementation, compiled once for both mains (the unit suite's and the netns
// suite's): each compiled it before, the two largest test objects of a cold build (71 s and
// 115 s on 2 busy cores).
#define CATCH_CONFIG_RUNNER
#include "catch_session.hpp"

#include <catch2/catch.hpp>

#include "failure_recap.hpp"
#include "skip.hpp"

int rctest::runCatch(int argc, char* argv[]) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  // A test spec that selects no case fails (exit 2), whatever else -w asked for: Catch2 2.13
  // takes a single -w, and without NoTests such a run exits 0, a test that ran nothing passing.
  auto& data = session.configData();
  data.warnings = static_cast<Catch::WarnAbout::What>(data.warnings | Catch::WarnAbout::NoTests);
  return exitStatus(session.run());
}
