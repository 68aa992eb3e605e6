// Tests of perftest as a workload: the report parser on output captured from the soft-RoCE lab
// (tests/data/perftest/), the GID look-up on a sysfs tree, the argument vector, and the runner
// (bins, records, errors naming the node) with stand-in programs that replay captured output.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "workload/perftest.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_perftest {

namespace fs = std::filesystem;
using namespace rc::workload;

namespace {

const std::string kData = std::string(RDMACHAOS_SOURCE_ROOT) + "/tests/data/perftest";

std::vector<std::string> linesOf(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

using rctest::TempDir;

void writeFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A stand-in for a perftest program: a shell script at PATH (made executable).
std::string script(const TempDir& d, const std::string& name, const std::string& body) {
  std::string p = d.path + "/" + name;
  writeFile(p, "#!/bin/sh\n" + body);
  ::chmod(p.c_str(), 0755);
  return p;
}

PerftestRunSpec specFor(const std::string& programPath, bool server, int64_t durationNs) {
  static std::string path;
  path = programPath;
  PerftestRunSpec s;
  s.options.program = {"ib_write_bw", path, false};
  s.options.server = server;
  s.options.serverAddress = "198.19.0.12";
  s.options.gid = {"rxe0", 1, 1};
  s.startNs = rc::wallNs();
  s.durationNs = durationNs;
  s.node = "198.19.0.11";
  s.countsBytes = !server;
  s.connectWindowNs = 2'000'000'000;
  s.firstReportNs = 3'000'000'000;
  return s;
}

}  // namespace

TEST_CASE("only the fixed perftest programs, at their fixed paths") {
  for (const char* t : {"ib_write_bw", "ib_read_bw", "ib_send_bw"}) {
    auto p = perftestProgram(t);
    REQUIRE(p);
    CHECK(p->path == std::string("/usr/bin/") + t);
  }
  CHECK_FALSE(perftestProgram("ib_write_lat"));
  CHECK_FALSE(perftestProgram("/usr/bin/ib_write_bw"));
  CHECK_FALSE(perftestProgram("ib_write_bw; rm -rf /"));
  CHECK(perftestProgram("ib_read_bw")->clientReceives);
  CHECK(perftestTests() == "ib_write_bw, ib_read_bw, ib_send_bw");
}

TEST_CASE("the argument vector: fixed program, device, GID, size, QPs, class, report every second") {
  PerftestOptions o;
  o.program = *perftestProgram("ib_send_bw");
  o.gid = {"rxe0", 1, 1};
  o.size = 1 << 20;
  o.qps = 2;
  o.dscp = 26;
  o.port = 7480;
  o.serverAddress = "198.19.0.12";
  auto client = perftestArgs(o);
  std::string joined;
  for (const auto& a : client) joined += a + " ";
  CHECK(client.front() == "/usr/bin/ib_send_bw");
  CHECK(client.back() == "198.19.0.12");
  CHECK_THAT(joined, Catch::Contains("-d rxe0 -i 1 -x 1 -p 7480 -s 1048576 -q 2 -u 14 --tclass=104"));
  CHECK_THAT(joined, Catch::Contains("--report_gbits -F --run_infinitely -D 1"));
  o.server = true;
  auto server = perftestArgs(o);
  CHECK(server.size() == client.size() - 1);
  CHECK(server.back() == "1");
}

TEST_CASE("the parser reads the report rows of output captured from the lab") {
  auto file = GENERATE(as<std::string>{}, "ib_write_bw-client.txt", "ib_read_bw-client.txt",
                       "ib_send_bw-client.txt");
  INFO(file);
  PerftestParser p;
  size_t rows = 0;
  for (const auto& l : linesOf(kData + "/" + file)) {
    auto s = p.feed(l);
    if (!s) continue;
    rows++;
    CHECK(s->msgBytes == 65536);
    CHECK(s->iterations > 0);
    // A soft-RoCE link between TCG guests: tens to hundreds of Mb/s.
    CHECK(s->avgBytesPerSec > 1e6 / 8);
    CHECK(s->avgBytesPerSec < 10e9 / 8);
  }
  CHECK(p.sawHeader());
  CHECK(rows >= 2);
}

TEST_CASE("the parser: unit from the header, nothing before it, no row from other lines") {
  PerftestParser p;
  CHECK_FALSE(p.feed(" 65536      3000             0.00               0.19                 0.000365"));
  CHECK_FALSE(p.feed(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"));
  CHECK(p.sawHeader());
  auto s = p.feed(" 65536      3000             0.00               25.00                 0.000400");
  REQUIRE(s);
  CHECK(s->avgBytesPerSec == Approx(25.0 * 1048576));
  CHECK_FALSE(p.feed("---------------------------------------------------------------------------------------"));
  CHECK_FALSE(p.feed(" Mtu             : 1024[B]"));
  CHECK_FALSE(p.feed(" local address: LID 0000 QPN 0x0011 PSN 0x25e1a RKey 0x0012e9 VAddr 0x007f"));
  CHECK_FALSE(p.feed(" 65536 3000 abc 0.19 0.0003"));
}

TEST_CASE("the RoCEv2 GID of the data address, from a sysfs tree") {
  TempDir d;
  std::string port = d.path + "/class/infiniband/rxe0/ports/1";
  writeFile(port + "/gids/0", "fe80:0000:0000:0000:5054:00ff:fe00:0b01\n");
  writeFile(port + "/gid_attrs/types/0", "RoCE v2\n");
  writeFile(port + "/gids/1", "0000:0000:0000:0000:0000:ffff:c613:000b\n");
  writeFile(port + "/gid_attrs/types/1", "RoCE v2\n");
  auto g = findRoceGid(d.path, "198.19.0.11");
  REQUIRE(g);
  CHECK(g->device == "rxe0");
  CHECK(g->port == 1);
  CHECK(g->index == 1);
  auto none = findRoceGid(d.path, "198.19.0.12");
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("198.19.0.12"));
  CHECK_FALSE(findRoceGid(d.path + "/nothing", "198.19.0.11"));
  CHECK_FALSE(findRoceGid(d.path, "not-an-address"));
}

TEST_CASE("the runner turns replayed report rows into bins and records") {
  TempDir d;
  // The captured client output, one line every 50 ms (report rows every 0.25 s).
  std::string prog = script(d, "replay", "while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.05; done < " +
                                             kData + "/ib_write_bw-client.txt\nsleep 30\n");
  auto spec = specFor(prog, false, 4'000'000'000);
  Telemetry tel(spec.startNs, 10'000'000);
  std::atomic<bool> stop{false};
  Summary s = runPerftest(spec, tel, stop);
  INFO(s.error);
  CHECK(s.endReason == "completed");
  auto b = tel.drain(rc::wallNs(), true);
  uint64_t binned = 0;
  for (auto x : b.bins) binned += x;
  // One record per row; each holds the row's BW average over the time since the previous row
  // (or the header), and the bins hold exactly the records' bytes.
  PerftestParser p;
  std::vector<double> rates;
  for (const auto& l : linesOf(kData + "/ib_write_bw-client.txt"))
    if (auto r = p.feed(l)) rates.push_back(r->avgBytesPerSec);
  REQUIRE(b.iterations.size() == rates.size());
  uint64_t recorded = 0;
  for (size_t k = 0; k < rates.size(); k++) {
    const auto& r = b.iterations[k];
    INFO("row " << k);
    CHECK(r.index == k);
    CHECK(r.endNs > r.startNs);
    if (k > 0) CHECK(r.startNs == b.iterations[k - 1].endNs);
    CHECK(double(r.rxBytes) == Approx(rates[k] * double(r.endNs - r.startNs) / 1e9).margin(1));
    recorded += r.rxBytes;
  }
  CHECK(binned == recorded);
  CHECK(recorded > 0);
  CHECK(b.counters.rxBytes == binned);
  CHECK(s.counters.iterations == rates.size());
}

TEST_CASE("a clock perftest could not calibrate: the rate is #iterations x #bytes per period") {
  // Captured in the vm suite on a loaded host: perftest printed "Correlation coefficient r^2:
  // 0.68 < 0.9" before each row and 0 for every rate; the run scored a 0 b/s baseline.
  PerftestParser p(1);
  std::vector<PerftestSample> rows;
  for (const auto& l : linesOf(kData + "/ib_write_bw-client-clock.txt"))
    if (auto s = p.feed(l)) rows.push_back(*s);
  REQUIRE(rows.size() == 3);
  CHECK_THAT(p.clockFailure(), Catch::StartsWith("Correlation coefficient r^2: 0.5"));
  CHECK(rows[0].rateFromIterations);
  CHECK(rows[0].avgBytesPerSec == Approx(67.0 * 65536));
  CHECK(rows[2].avgBytesPerSec == Approx(38.0 * 65536));
  // A 2 s period halves it.
  PerftestParser two(2);
  for (const auto& l : linesOf(kData + "/ib_write_bw-client-clock.txt"))
    if (auto s = two.feed(l)) CHECK(s->avgBytesPerSec == Approx(double(s->iterations) * 65536 / 2));
  // With a working clock the printed rate stands, even where it differs from the count.
  PerftestParser fine(1);
  for (const auto& l : linesOf(kData + "/ib_write_bw-client.txt"))
    if (auto s = fine.feed(l)) CHECK_FALSE(s->rateFromIterations);
  // A zero row without the calibration message is not rewritten (nothing moved is 0).
  PerftestParser quiet(1);
  quiet.feed(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]");
  auto z = quiet.feed(" 65536      67           0.000000            0.000000            0.000000");
  REQUIRE(z);
  CHECK_FALSE(z->rateFromIterations);
  CHECK(z->avgBytesPerSec == 0);
}

TEST_CASE("the runner scores a perftest whose clock failed by its counted messages") {
  TempDir d;
  std::string prog = script(d, "replay", "while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.05; done < " +
                                             kData + "/ib_write_bw-client-clock.txt\nsleep 30\n");
  auto spec = specFor(prog, false, 3'000'000'000);
  Telemetry tel(spec.startNs, 10'000'000);
  std::atomic<bool> stop{false};
  Summary s = runPerftest(spec, tel, stop);
  INFO(s.error);
  CHECK(s.endReason == "completed");
  auto b = tel.drain(rc::wallNs(), true);
  REQUIRE(b.iterations.size() == 3);
  uint64_t binned = 0;
  for (auto x : b.bins) binned += x;
  CHECK(binned > 0);
  // Row 0 covers the time since the header: 67 x 64 KiB per second over that span.
  const auto& r = b.iterations[0];
  CHECK(double(r.rxBytes) == Approx(67.0 * 65536 * double(r.endNs - r.startNs) / 1e9).margin(1));
}

TEST_CASE("captured failures: the rows before them still parse; the error lines are no rows") {
  PerftestParser client, server;
  size_t rows = 0;
  for (const auto& l : linesOf(kData + "/ib_write_bw-client-error.txt")) rows += client.feed(l).has_value();
  CHECK(rows >= 2);
  // The server of a bandwidth test prints the header and no row, in every capture.
  for (const char* f : {"ib_write_bw-server.txt", "ib_write_bw-server-error.txt"})
    for (const auto& l : linesOf(kData + "/" + f)) CHECK_FALSE(server.feed(l));
  CHECK(server.sawHeader());
}

TEST_CASE("a perftest that dies is an error naming the node and what it printed") {
  TempDir d;
  std::string prog = script(d, "dies", "echo ' Couldn'\"'\"'t allocate MR'\nexit 1\n");
  auto spec = specFor(prog, true, 4'000'000'000);
  Telemetry tel(spec.startNs, 10'000'000);
  std::atomic<bool> stop{false};
  Summary s = runPerftest(spec, tel, stop);
  CHECK(s.endReason == "error");
  CHECK_THAT(s.error, Catch::Contains("perftest ib_write_bw (server) on 198.19.0.11 exited with status 1"));
  CHECK_THAT(s.error, Catch::Contains("allocate MR"));
  CHECK(s.counters.errors == 1);
}

TEST_CASE("a client that never connects, or prints no report, is an error naming the node") {
  TempDir d;
  SECTION("never connects: dials again within the window, then fails") {
    std::string prog = script(d, "refused", "echo ' Couldn'\"'\"'t connect to 198.19.0.12:18515'\nexit 1\n");
    auto spec = specFor(prog, false, 6'000'000'000);
    Telemetry tel(spec.startNs, 10'000'000);
    std::atomic<bool> stop{false};
    Summary s = runPerftest(spec, tel, stop);
    CHECK(s.endReason == "error");
    CHECK_THAT(s.error, Catch::Contains("(client) on 198.19.0.11 exited with status 1"));
    CHECK_THAT(s.error, Catch::Contains("connect to 198.19.0.12"));
  }
  SECTION("prints nothing") {
    std::string prog = script(d, "silent", "sleep 30\n");
    auto spec = specFor(prog, false, 6'000'000'000);
    Telemetry tel(spec.startNs, 10'000'000);
    std::atomic<bool> stop{false};
    Summary s = runPerftest(spec, tel, stop);
    CHECK(s.endReason == "error");
    CHECK_THAT(s.error, Catch::Contains("(client) on 198.19.0.11 printed no report within 3 s"));
  }
}

TEST_CASE("a stop request ends the program and the run as stopped") {
  TempDir d;
  std::string prog = script(d, "server", "sleep 30\n");
  auto spec = specFor(prog, true, 20'000'000'000);
  Telemetry tel(spec.startNs, 10'000'000);
  std::atomic<bool> stop{false};
  std::thread t([&] {
    ::usleep(300'000);
    stop = true;
  });
  Summary s = runPerftest(spec, tel, stop);
  t.join();
  CHECK(s.endReason == "stopped");
}

}  // namespace test_perftest
