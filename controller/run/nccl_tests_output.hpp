// The job's own report beside the run's: `run --nccl-tests-output FILE` names the file a
// user's nccl-tests program writes its standard output to; when the run ends the controller
// waits for its summary line (a short while: the job may finish its last size just after the
// run), reads it, and hands it to scoring (wrong values and failures are errors of the run).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "controller/run/run_result.hpp"

namespace rc::controller {

// Reads FILE, waiting up to WAIT for nccl-tests' "# Avg bus bandwidth" line; PROGRESS is
// called about every 5 s of waiting with the seconds left. Never fails: what went wrong
// (missing, unreadable, larger than 64 MiB, not nccl-tests' output) is in the error field.
RunResult::NcclTests readNcclTestsOutput(const std::string& file, std::chrono::milliseconds wait,
                                        const std::function<void(int secondsLeft)>& progress = {});

// The checks `run` makes before anything starts: FILE's directory exists and FILE is not a directory.
Result<void> checkNcclTestsOutputPath(const std::string& file);

}  // namespace rc::controller
