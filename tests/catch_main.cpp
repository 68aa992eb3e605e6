// Catch2 v2 main for the unit suite, compiled once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "failure_recap.hpp"
