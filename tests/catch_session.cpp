// Catch2's implementation, compiled once for both mains (the unit suite's and the netns
// suite's): each compiled it before, the two largest test objects of a cold build (71 s and
// 115 s on 2 busy cores).
#define CATCH_CONFIG_RUNNER
#include "catch_session.hpp"

#include <catch2/catch.hpp>

#include "failure_recap.hpp"
#include "skip.hpp"

int rctest::runCatch(int argc, char* argv[]) { return exitStatus(Catch::Session().run(argc, argv)); }
