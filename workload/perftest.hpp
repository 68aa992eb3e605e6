// perftest (ib_write_bw, ib_read_bw, ib_send_bw from Debian's perftest package) as a workload:
// the fixed list of programs, the arguments the agent builds, the parser of the per-second
// report, and the runner that turns that report into the same telemetry bins as the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "workload/engine.hpp"  // Summary
#include "workload/telemetry.hpp"

namespace rc::workload {

// The programs a perftest workload may run: nothing else is ever executed, and the path is
// fixed (never PATH, never a name from the controller).
struct PerftestProgram {
  std::string_view test;  // what a playbook names: "ib_write_bw"
  std::string_view path;  // where Debian installs it
  bool clientReceives;    // ib_read_bw: the client reads, so the bytes land on the client
};
std::optional<PerftestProgram> perftestProgram(std::string_view test);
std::string perftestTests();  // "ib_write_bw, ib_read_bw, ib_send_bw" for error messages

// One report line of a bandwidth test:
//  " 65536      3000             0.00               0.19                 0.000365"
// (#bytes, #iterations, BW peak, BW average, MsgRate) under a header naming the unit.
struct PerftestSample {
  uint64_t msgBytes = 0;
  uint64_t iterations = 0;
  double avgBytesPerSec = 0;  // BW average, converted from the header's unit
  // perftest could not calibrate its cycle counter ("Correlation coefficient r^2: 0.68 < 0.9",
  // a loaded TCG guest) and printed 0 for every rate: avgBytesPerSec is then #iterations x
  // #bytes over the report period, which is what perftest's own rate is when it can measure it.
  bool rateFromIterations = false;
};

// Fed line by line; knows the unit from the header ("BW average[Gb/sec]" with
// --report_gbits, "BW average[MB/sec]" without) and returns a sample for each report row.
class PerftestParser {
 public:
  // REPORT_SECONDS: the -D period, the time a row's #iterations count.
  explicit PerftestParser(int reportSeconds = 1) : reportSeconds_(reportSeconds) {}
  std::optional<PerftestSample> feed(std::string_view line);
  bool sawHeader() const { return unitBytesPerSec_ > 0; }
  // The last "Correlation coefficient r^2: ..." line (empty while perftest's clock is fine).
  const std::string& clockFailure() const { return clockFailure_; }

 private:
  int reportSeconds_;
  double unitBytesPerSec_ = 0;
  std::string clockFailure_;
};

// The RDMA device, port and GID index whose RoCEv2 GID is ::ffff:IPV4, read from sysfs under
// SYS_ROOT (class/infiniband/DEV/ports/P/gids/I and gid_attrs/types/I).
struct RoceGid {
  std::string device;
  int port = 1;
  int index = 0;
};
Result<RoceGid> findRoceGid(const std::string& sysRoot, const std::string& ipv4);

struct PerftestOptions {
  PerftestProgram program;
  bool server = false;
  std::string serverAddress;  // the client connects here (the server's data address)
  uint16_t port = 18515;      // perftest's TCP port for the QP exchange
  RoceGid gid;
  uint64_t size = 65536;
  int qps = 1;
  int dscp = 26;       // the GRH traffic class is dscp << 2
  int qpTimeout = 14;  // -u
  int reportSeconds = 1;
};
// The argument vector (argv[0] = the program's fixed path): --run_infinitely -D N prints a
// report every N seconds until the agent stops it.
std::vector<std::string> perftestArgs(const PerftestOptions& o);

struct PerftestRunSpec {
  PerftestOptions options;
  int64_t startNs = 0;     // common start, agent wall clock
  int64_t durationNs = 0;
  // The client dials until the server listens: until startNs + connectWindowNs.
  int64_t connectWindowNs = 30'000'000'000;
  // With no report row within this much of the start (or of the connection), the run fails.
  int64_t firstReportNs = 30'000'000'000;
  std::string node;        // named in errors ("perftest ib_write_bw on 198.19.0.11 ...")
  bool countsBytes = true; // this end reports its samples as telemetry (the measuring end)
};

// Runs the program until the duration ends, STOP becomes true, or it fails. Every report row
// becomes bytes spread evenly over the bins since the previous row and one iteration record
// (a report period); the caller drains the telemetry late enough for that (bins of the last
// report period must still be open).
Summary runPerftest(const PerftestRunSpec& spec, Telemetry& telemetry,
                    const std::atomic<bool>& stop);

}  // namespace rc::workload
