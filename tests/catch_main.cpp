// Catch2 v2 main for the unit suite: Catch2 itself is compiled once, in catch_session.cpp.
#include "catch_session.hpp"

int main(int argc, char* argv[]) { return rctest::runCatch(argc, argv); }
