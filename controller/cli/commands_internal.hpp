// What the command files share: the CLI's error line and duration flags.
#pragma once

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "common/result.hpp"
#include "common/units.hpp"
#include "controller/cli/commands.hpp"
#include "controller/fleet/fleet.hpp"  // Duration
#include "controller/run/run_result.hpp"

namespace rc::controller {

// A --flag duration that must be positive, as the clock's Duration.
inline Result<Duration> durationArg(const std::string& text, const std::string& flag) {
  auto d = parseDuration(text);
  if (!d) return makeError(flag + ": " + d.error().message);
  if (d->count() <= 0) return makeError(flag + " must be greater than zero");
  return std::chrono::duration_cast<Duration>(*d);
}

// A run's coroutine that ended by an exception: the run's result says so (its abort reason).
inline void abortOnException(std::exception_ptr e, RunResult& r) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    r.abortReason = std::string("internal error: ") + ex.what();
  }
}

// Prints the error on stderr and returns the error exit code.
inline int fail(const std::string& message) {
  std::fprintf(stderr, "rdmachaos: %s\n", message.c_str());
  return kExitError;
}

}  // namespace rc::controller
