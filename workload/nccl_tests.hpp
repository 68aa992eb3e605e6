// nccl-tests' report (all_reduce_perf, all_gather_perf, alltoall_perf, ... from NVIDIA's
// nccl-tests) read into figures a trial can carry: one row per message size with the
// out-of-place and in-place time, algorithm and bus bandwidth and wrong-value count, and the
// summary lines ("# Out of bounds values", "# Avg bus bandwidth"). Acceptance teams run these
// programs as they are; rdmachaos reads what they print rather than asking them to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace rc::workload {

struct NcclTestsHalf {
  double timeUs = 0;                   // the column's unit ("(us)"; "(ms)" in old releases) as µs
  double algbwGBps = 0;                // GB/s as printed (10^9 bytes a second)
  double busbwGBps = 0;
  std::optional<uint64_t> wrong;       // "#wrong"; absent when validation was off ("N/A")
  std::optional<double> maxError;      // old releases print "error" (the largest deviation)
};

struct NcclTestsRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;   // "float", "half", ...
  std::string redop;  // "sum", "none" for data movement
  int root = -1;
  NcclTestsHalf outOfPlace, inPlace;
  int line = 0;  // 1-based line of the text it came from
};

struct NcclTestsReport {
  // From "# nThread 1 nGpus 1 minBytes 8 maxBytes ... iters: 20 ... validation: 1 ...", where present.
  int nThread = 0, nGpus = 0, iters = 0, warmupIters = 0;
  bool validation = true;
  std::vector<std::string> devices;  // "#  Rank  0 Group  0 Pid ... on HOST device 0 [...] NAME", trimmed
  std::vector<NcclTestsRow> rows;
  std::optional<uint64_t> outOfBounds;  // "# Out of bounds values : N OK|FAILED"
  std::optional<double> avgBusbwGBps;   // "# Avg bus bandwidth    : X"
  // Lines that say the program failed: "NCCL failure", "CUDA failure", "Test failure",
  // "Test NCCL failure", each with its line number.
  std::vector<std::string> failures;

  // The program printed its summary: it ran to its end (a killed or hung run stops before).
  bool complete() const { return avgBusbwGBps.has_value(); }
  uint64_t wrongTotal() const;
  // The largest-message row (what an acceptance bound is usually written against), or null.
  const NcclTestsRow* largest() const;
  // What is wrong with the run, one sentence each: failures, wrong values, out-of-bounds values,
  // a missing summary. Empty for a clean, complete run.
  std::vector<std::string> problems() const;
};

// Reads the whole of an nccl-tests program's standard output (other lines, such as NCCL's own
// "NCCL INFO" or mpirun's, may be interleaved and are skipped). An error names the line and
// what it expected when there is no table, or a table row does not match its header.
Result<NcclTestsReport> parseNcclTests(std::string_view text);

}  // namespace rc::workload
