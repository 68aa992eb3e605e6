// Process helpers for the lab: running iproute2 without a shell, recognising our own processes
// by pid + start time + command line, and stopping them through pidfds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "common/unique_fd.hpp"

namespace rc::lab {

// A process the lab started, as recorded in lab.json. The start time (clock ticks since boot,
// /proc/PID/stat field 22) makes the record immune to PID reuse.
struct ProcRecord {
  int pid = 0;
  uint64_t startTime = 0;
  std::vector<std::string> cmdline;
};

// "`ip link add ...`", for messages.
std::string describeCommand(const std::vector<std::string>& argv);

// Runs argv (PATH lookup, no shell) and returns its stdout; a non-zero exit becomes an error
// naming the command and quoting its stderr. A command still running after TIMEOUT_MS is
// killed and reported (error code ETIMEDOUT): a wedged `ip` must not wedge `lab up`/`down`.
Result<std::string> runCommand(const std::vector<std::string>& argv, int timeoutMs = 30'000);

// Start time and command line of a live (non-zombie) process; startTime 0 if it is gone.
ProcRecord identify(pid_t pid);

// True if `record` still names the process it was taken from: same start time, and the
// command line equals the recorded one or (for interpreters, which rewrite argv[0]) contains
// `mustContain` as one argument.
bool stillRunning(const ProcRecord& record, const std::string& mustContain = {});

// Sends SIGTERM to every process that stillRunning() recognises, waits up to `grace` ms for
// them to exit (pidfd poll, no sleeping), then SIGKILLs the rest. `mustContain[i]` belongs to
// `records[i]`. Returns a description of processes that survived SIGKILL (normally empty).
std::vector<std::string> stopProcesses(const std::vector<ProcRecord>& records,
                                       const std::vector<std::string>& mustContain, int graceMs);

// Closes every descriptor except those in keep (used after fork, before exec or a daemon loop).
void closeAllExcept(std::vector<int> keep);

// Number of threads of this process (fork without exec is only safe with one).
int threadCount();

}  // namespace rc::lab
