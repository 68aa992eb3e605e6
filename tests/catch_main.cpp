// Catch2 v2 main for the unit suite, compiled once: exits 77 (meson's skip) when a case
// skipped with RC_SKIP and nothing failed (skip.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "failure_recap.hpp"
#include "skip.hpp"

int main(int argc, char* argv[]) { return rctest::exitStatus(Catch::Session().run(argc, argv)); }
