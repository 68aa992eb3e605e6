// Runs one collective workload on this rank: waits for the common start, connects, loops
// iterations of steps over a transport, survives lost connections, and records telemetry.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "workload/collectives.hpp"
#include "workload/telemetry.hpp"
#include "workload/transport.hpp"

namespace rc::workload {

struct RunSpec {
  Shape shape;
  uint64_t iterations = 0;        // 0: run for DURATION_NS
  int64_t durationNs = 0;
  int64_t startNs = 0;            // common start, agent wall clock
  int64_t reconnectTimeoutNs = 10'000'000'000;
};

struct Summary {
  Counters counters;
  bool verified = true;   // every completed iteration produced the right result
  std::string endReason;  // completed, stopped, error
  std::string error;      // set when endReason is "error"
  // What a job the workload launched did, in its own terms, whatever its end (the mpi kind's
  // rank 0: its transport, mpirun's exit, the ranks that finished): the report's "the job" line.
  std::string note;
};

// The one buffer a run of SHAPE uses (the collective's part and the resync words), allocated
// and zeroed now: the agent does it before it replies, so that a node without the memory
// answers with an error instead of failing later on the engine's thread.
Result<std::vector<std::byte>> allocateRunBuffer(const Shape& shape);

// Runs to the end (iterations or duration), until STOP becomes true (the caller also calls
// transport.interrupt()), or until a peer stays unreachable past the reconnect timeout.
// BUFFER: from allocateRunBuffer(spec.shape); empty: allocated here (a failure ends the run
// with an error).
Summary runWorkload(const RunSpec& spec, Transport& transport, Telemetry& telemetry,
                    const std::atomic<bool>& stop, std::vector<std::byte> buffer = {});

}  // namespace rc::workload
