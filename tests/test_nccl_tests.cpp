// Tests of the nccl-tests report reader (workload/nccl_tests.hpp) on output written from the
// format nccl-tests prints today (its README and doc/PERFORMANCE.md: a header of the run, the
// devices, a two-group table out of place and in place, the out-of-bounds and average bus
// bandwidth summary), and on the ways a real run goes wrong: wrong values, a killed run, NCCL's
// own failure line, other programs' lines in between.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "controller/report/report.hpp"
#include "controller/run/nccl_tests_output.hpp"
#include "controller/score/score.hpp"
#include "synthetic_run.hpp"
#include "test_util.hpp"
#include "workload/nccl_tests.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_nccl_tests {

using namespace rc::workload;

namespace {

// all_reduce_perf -b 1M -e 64M -f 4 -g 1 under mpirun on two hosts, with NCCL_DEBUG=INFO lines
// in between as they come when a user leaves it on.
const char* kAllReduce = R"(# nThread 1 nGpus 1 minBytes 1048576 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41211 on    gpu-a1 device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  38102 on    gpu-a2 device  0 [0x1b] NVIDIA H100 80GB HBM3
gpu-a1:41211:41211 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
gpu-a1:41211:41211 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    61.20   17.13   17.13      0    60.85   17.23   17.23      0
     4194304       1048576     float     sum      -1    138.4   30.31   30.31      0    137.9   30.42   30.42      0
    16777216       4194304     float     sum      -1    427.7   39.23   39.23      0    426.1   39.37   39.37      0
    67108864      16777216     float     sum      -1     1593   42.13   42.13      0     1588   42.26   42.26      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 32.2587
#
)";

}  // namespace

TEST_CASE("nccl-tests: a clean all-reduce run reads into its rows and summary", "[nccl_tests]") {
  auto r = parseNcclTests(kAllReduce);
  REQUIRE(r.ok());
  CHECK(r->nThread == 1);
  CHECK(r->nGpus == 1);
  CHECK(r->warmupIters == 5);
  CHECK(r->iters == 20);
  CHECK(r->validation);
  REQUIRE(r->devices.size() == 2);
  CHECK(r->devices[1] == "Rank 1 Group 0 Pid 38102 on gpu-a2 device 0 [0x1b] NVIDIA H100 80GB HBM3");
  REQUIRE(r->rows.size() == 4);
  const auto& first = r->rows[0];
  CHECK(first.bytes == 1048576);
  CHECK(first.count == 262144);
  CHECK(first.type == "float");
  CHECK(first.redop == "sum");
  CHECK(first.root == -1);
  CHECK(first.outOfPlace.timeUs == Approx(61.20));
  CHECK(first.outOfPlace.algbwGBps == Approx(17.13));
  CHECK(first.inPlace.busbwGBps == Approx(17.23));
  CHECK(first.outOfPlace.wrong == uint64_t(0));
  CHECK(first.line == 12);
  // A time printed without decimals (nccl-tests drops them at 4 digits and more).
  REQUIRE(r->largest() != nullptr);
  CHECK(r->largest()->bytes == 67108864);
  CHECK(r->largest()->outOfPlace.timeUs == Approx(1593));
  CHECK(r->largest()->inPlace.busbwGBps == Approx(42.26));
  CHECK(r->outOfBounds == uint64_t(0));
  REQUIRE(r->avgBusbwGBps.has_value());
  CHECK(*r->avgBusbwGBps == Approx(32.2587));
  CHECK(r->complete());
  CHECK(r->wrongTotal() == 0);
  CHECK(r->failures.empty());
  CHECK(r->problems().empty());
}

TEST_CASE("nccl-tests: data movement without validation (redop none, #wrong N/A), a rooted collective", "[nccl_tests]") {
  const char* gather = R"(# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 50 agg iters: 1 validation: 0 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         512            16     float    none      -1    12.10    0.04    0.04    N/A    11.95    0.04    0.04    N/A
        1024            32     float    none      -1    12.33    0.08    0.07    N/A    12.01    0.09    0.07    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0550
)";
  auto r = parseNcclTests(gather);
  REQUIRE(r.ok());
  CHECK_FALSE(r->validation);
  CHECK(r->nGpus == 8);
  CHECK(r->iters == 50);
  REQUIRE(r->rows.size() == 2);
  CHECK(r->rows[0].redop == "none");
  CHECK_FALSE(r->rows[0].outOfPlace.wrong.has_value());
  CHECK_FALSE(r->rows[1].inPlace.wrong.has_value());
  CHECK(r->problems().empty());

  const char* bcast = R"(#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float    none       0    310.2   27.04   27.04      0    309.8   27.08   27.08      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 27.06
)";
  auto b = parseNcclTests(bcast);
  REQUIRE(b.ok());
  REQUIRE(b->rows.size() == 1);
  CHECK(b->rows[0].root == 0);
}

TEST_CASE("nccl-tests: wrong values and out-of-bounds values are problems naming the size and line", "[nccl_tests]") {
  const char* corrupt = R"(#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    61.20   17.13   17.13      0    60.85   17.23   17.23      0
     4194304       1048576     float     sum      -1    138.4   30.31   30.31     12    137.9   30.42   30.42      3
# Out of bounds values : 15 FAILED
# Avg bus bandwidth    : 23.77
)";
  auto r = parseNcclTests(corrupt);
  REQUIRE(r.ok());
  CHECK(r->complete());
  CHECK(r->wrongTotal() == 15);
  CHECK(r->outOfBounds == uint64_t(15));
  auto p = r->problems();
  REQUIRE(p.size() == 2);
  CHECK_THAT(p[0], Catch::Contains("15 wrong value(s) at 4194304 B (line 4)"));
  CHECK_THAT(p[1], Catch::Contains("15 out-of-bounds value(s)"));
}

TEST_CASE("nccl-tests: a run killed mid-table, and one that failed in NCCL, say so", "[nccl_tests]") {
  // Killed while printing its third row: the rows before it stand, the run is not complete.
  std::string text = kAllReduce;
  text = text.substr(0, text.find("    16777216       4194304     float     sum      -1    427.7")) +
         "    16777216       4194304     float     sum      -1    427.7   39.23\n";
  auto r = parseNcclTests(text);
  REQUIRE(r.ok());
  CHECK(r->rows.size() == 2);
  CHECK_FALSE(r->complete());
  auto p = r->problems();
  REQUIRE(p.size() == 1);
  CHECK_THAT(p[0], Catch::Contains("ended before its summary") && Catch::Contains("after 2 size(s)"));

  // NCCL's error path: the failure line each rank prints, before any row.
  const char* failed = R"(# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41211 on    gpu-a1 device  0 [0x1b] NVIDIA H100 80GB HBM3
gpu-a1: Test NCCL failure common.cu:1005 'remote process exited or there was a network error / '
 .. gpu-a1 pid 41211: Test failure common.cu:891
)";
  auto f = parseNcclTests(failed);
  REQUIRE(f.ok());
  CHECK(f->rows.empty());
  REQUIRE(f->failures.size() == 2);
  CHECK_THAT(f->failures[0], Catch::StartsWith("line 5: gpu-a1: Test NCCL failure common.cu:1005"));
  auto fp = f->problems();
  REQUIRE(fp.size() == 3);
  CHECK_THAT(fp[2], Catch::Contains("before its first size"));
}

TEST_CASE("nccl-tests: an older release's layout (no root, an error column) reads by column name", "[nccl_tests]") {
  // Releases before the #wrong count printed the largest deviation ("error") and no root.
  const char* old = R"(#                                                 out-of-place                    in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     2097152        524288   float     sum    210.5    9.96   14.94  4e-07    209.8    9.99   14.99  4e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 14.965
)";
  auto p = parseNcclTests(old);
  REQUIRE(p.ok());
  REQUIRE(p->rows.size() == 1);
  CHECK(p->rows[0].root == -1);
  CHECK_FALSE(p->rows[0].outOfPlace.wrong.has_value());
  REQUIRE(p->rows[0].outOfPlace.maxError.has_value());
  CHECK(*p->rows[0].outOfPlace.maxError == Approx(4e-7));
  CHECK(p->rows[0].inPlace.busbwGBps == Approx(14.99));
  CHECK(p->problems().empty());

  // A header naming columns nccl-tests never prints is refused, naming the line, not read by guess.
  std::string odd = old;
  odd.replace(odd.find("algbw   busbw  error     time"), 5, "speed");
  auto r = parseNcclTests(odd);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::StartsWith("line 2: a table header nccl-tests does not print"));
}

TEST_CASE("nccl-tests: output that is not a report is an error naming the line and the fix", "[nccl_tests]") {
  auto none = parseNcclTests("hello\nworld\n");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("no nccl-tests table") && Catch::Contains("all_reduce_perf"));

  // A short row in the middle of the table (two outputs interleaved, or an edited file).
  std::string text = kAllReduce;
  const std::string row = "     4194304       1048576     float     sum      -1    138.4   30.31   30.31      0";
  text.replace(text.find(row), row.size() + std::string("    137.9   30.42   30.42      0").size(), "     4194304       1048576     float");
  auto shortRow = parseNcclTests(text);
  REQUIRE_FALSE(shortRow.ok());
  CHECK_THAT(shortRow.error().message, Catch::StartsWith("line 13: 3 fields where the header (line 10) names 13"));

  std::string bad = kAllReduce;
  bad.replace(bad.find("138.4"), 5, "1x8.4");
  auto badNumber = parseNcclTests(bad);
  REQUIRE_FALSE(badNumber.ok());
  CHECK(badNumber.error().message == "line 13: column time is \"1x8.4\", not a number");

  std::string noAvg = kAllReduce;
  noAvg.replace(noAvg.find("32.2587"), 7, "fast");
  auto badAvg = parseNcclTests(noAvg);
  REQUIRE_FALSE(badAvg.ok());
  CHECK_THAT(badAvg.error().message, Catch::StartsWith("line 17: \"# Avg bus bandwidth\" without a number"));
}

TEST_CASE("run --nccl-tests-output: the table beside the scores; wrong values make the run an error", "[nccl_tests]") {
  using namespace rc::controller;
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult clean = rc::test::syntheticRun(pb, rc::test::Shape::noEffect);
  const Scores before = score(clean, pb);
  REQUIRE(before.outcome == Outcome::passed);

  auto rep = parseNcclTests(kAllReduce);
  REQUIRE(rep.ok());
  clean.ncclTests = RunResult::NcclTests{"/shared/nccl.log", *rep, ""};
  Scores s = score(clean, pb);
  CHECK(s.outcome == Outcome::passed);
  json doc = makeResultDocument(clean, pb, s);
  REQUIRE(doc.contains("nccl_tests"));
  CHECK(doc["nccl_tests"]["rows"].size() == 4);
  CHECK(doc["nccl_tests"]["rows"][3]["in_place"]["busbw_GBps"] == Approx(42.26));
  CHECK(doc["nccl_tests"]["avg_busbw_GBps"] == Approx(32.2587));
  CHECK(doc["nccl_tests"]["complete"] == true);
  const std::string text = renderText(doc);
  CHECK_THAT(text, Catch::Contains("nccl-tests (/shared/nccl.log)"));
  CHECK_THAT(text, Catch::Contains("avg bus bandwidth 32.259 GB/s; 0 wrong value(s)"));
  CHECK_THAT(text, Catch::Contains("      67108864      1593.0    42.13    42.13       0"));

  // The same run, but the collective returned wrong values: an error of the run, named.
  std::string corrupt = kAllReduce;
  corrupt.replace(corrupt.find("39.23      0"), 12, "39.23      7");
  auto bad = parseNcclTests(corrupt);
  REQUIRE(bad.ok());
  RunResult run = rc::test::syntheticRun(pb, rc::test::Shape::noEffect);
  run.ncclTests = RunResult::NcclTests{"/shared/nccl.log", *bad, ""};
  Scores e = score(run, pb);
  CHECK(e.outcome == Outcome::error);
  CHECK_THAT(e.reason, Catch::Contains("7 wrong value(s) at 16777216 B (line 14)") &&
                           Catch::Contains("(/shared/nccl.log)"));

  // A file that was never written is an error too: the run was asked to read it.
  RunResult missing = rc::test::syntheticRun(pb, rc::test::Shape::noEffect);
  missing.ncclTests = readNcclTestsOutput("/nonexistent-rc-dir/nccl.log", std::chrono::milliseconds(0));
  CHECK_FALSE(missing.ncclTests->report.has_value());
  Scores m = score(missing, pb);
  CHECK(m.outcome == Outcome::error);
  CHECK_THAT(m.reason, Catch::Contains("nccl-tests output /nonexistent-rc-dir/nccl.log: No such file or directory"));
}

TEST_CASE("run --nccl-tests-output waits for the job's summary line, and checks the path before the run", "[nccl_tests]") {
  using namespace rc::controller;
  rctest::TempDir dir;
  const std::string file = dir.path + "/nccl.log";
  std::string text = kAllReduce;
  const size_t summary = text.find("# Out of bounds");
  { std::ofstream(file) << text.substr(0, summary); }
  // The job prints its last lines a little after the run ended.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    std::ofstream(file, std::ios::app) << text.substr(summary);
  });
  int notes = 0;
  auto got = readNcclTestsOutput(file, std::chrono::seconds(20), [&](int) { notes++; });
  late.join();
  REQUIRE(got.report.has_value());
  CHECK(got.report->complete());
  CHECK(got.report->rows.size() == 4);
  CHECK(notes >= 1);  // it said it was waiting

  // Still without a summary when the wait ends: read as it is, and that is a problem.
  { std::ofstream(file) << text.substr(0, summary); }
  auto cut = readNcclTestsOutput(file, std::chrono::milliseconds(300));
  REQUIRE(cut.report.has_value());
  CHECK_FALSE(cut.report->complete());
  CHECK_THAT(cut.report->problems().back(), Catch::Contains("ended before its summary"));

  CHECK(checkNcclTestsOutputPath(file).ok());
  auto isDir = checkNcclTestsOutputPath(dir.path);
  REQUIRE_FALSE(isDir.ok());
  CHECK_THAT(isDir.error().message, Catch::Contains("is a directory"));
  auto noParent = checkNcclTestsOutputPath(dir.path + "/no/such/nccl.log");
  REQUIRE_FALSE(noParent.ok());
  CHECK_THAT(noParent.error().message, Catch::Contains("does not exist"));
}

}  // namespace test_nccl_tests
