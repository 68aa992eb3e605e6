// Workload kind perftest: an external kind; the agent runs ib_write_bw, ib_read_bw or ib_send_bw
// (workload/perftest.hpp) between two nodes instead of the engine.
#include <unistd.h>

#include <algorithm>

#include "workload/kinds.hpp"
#include "workload/perftest.hpp"

namespace rc::workload {
namespace {

class PerftestRun final : public ExternalRun {
 public:
  PerftestRun(PerftestRunSpec spec, uint64_t memory, uint16_t port)
      : spec_(std::move(spec)), memory_(memory), port_(port) {}
  uint64_t memory() const override { return memory_; }
  uint16_t port() const override { return port_; }
  // A report fills the seconds before it, and comes up to a period late.
  int64_t drainLagNs() const override { return int64_t(spec_.options.reportSeconds) * 2'000'000'000 + 500'000'000; }
  std::string describe() const override { return std::string(spec_.options.program.test); }
  Summary run(int64_t startNs, int64_t durationNs, Telemetry& telemetry, const std::atomic<bool>& stop) override {
    spec_.startNs = startNs;
    spec_.durationNs = durationNs;
    return runPerftest(spec_, telemetry, stop);
  }

 private:
  PerftestRunSpec spec_;
  uint64_t memory_;
  uint16_t port_;
};

// Two ranks, rank 0 the client (it sends, as in pairwise), rank 1 the server; the program from
// the fixed list, the device and GID from the node's data address.
Result<std::unique_ptr<ExternalRun>> preparePerftest(const proto::WorkloadStart& r) {
  auto program = perftestProgram(r.perftest);
  if (!program)
    return makeError("perftest test '" + r.perftest + "' is not one this agent runs (known: " + perftestTests() + ")");
  if (r.world.size() != 2)
    return makeError("a perftest workload runs between exactly 2 nodes (client and server), not " +
                     std::to_string(r.world.size()));
  if (r.durationMs == 0) return makeError("a perftest workload runs for a duration, not a count of iterations");
  if (r.streams > proto::kMaxVerbsQps) return makeError("a perftest workload runs 1 to 16 QPs (streams)");
  if (::access(std::string(program->path).c_str(), X_OK) != 0)
    return makeError(std::string(program->path) + " is not installed on this node: install Debian's perftest package");
  const std::string& self = r.world[size_t(r.rank)].address;
  auto gid = findRoceGid("/sys", self);
  if (!gid) return makeError("cannot run perftest on this node: " + gid.error().message);
  PerftestRunSpec p;
  p.options.program = *program;
  p.options.server = r.rank == 1;
  p.options.serverAddress = r.world[1].address;
  p.options.port = uint16_t(r.world[1].port);
  p.options.gid = *gid;
  p.options.size = uint64_t(r.size);
  p.options.qps = r.streams;
  p.options.dscp = r.qp.dscp;
  p.options.qpTimeout = r.qp.timeout;
  p.node = self;
  // The client prints the reports (the server of a bandwidth test prints none per period).
  p.countsBytes = !p.options.server;
  p.connectWindowNs = std::max<int64_t>(r.reconnectTimeoutMs, 20'000) * 1'000'000;
  p.firstReportNs = p.connectWindowNs + 10'000'000'000;
  // perftest allocates its own buffers: about size per QP on each end.
  const uint64_t memory = uint64_t(r.size) * uint64_t(r.streams);
  return std::unique_ptr<ExternalRun>(std::make_unique<PerftestRun>(std::move(p), memory, uint16_t(r.world[1].port)));
}

const External kPerftest{
    .defaultProgram = "ib_write_bw",
    .knowsProgram = [](std::string_view program) { return perftestProgram(program).has_value(); },
    .programs = perftestTests,
    .maxStreams = proto::kMaxVerbsQps,
    .streamsAre = "its QPs, -q",
    .qpTimeoutIs = "-u",
    .ranksShort = "client, then server",
    .ranksLong = "the first the client, the second the server",
    .prepare = preparePerftest,
};

}  // namespace

extern const Kind kind_perftest;
const Kind kind_perftest{
    .name = "perftest",
    .summary = "runs ib_write_bw, ib_read_bw or ib_send_bw (--test) between 2 nodes over RDMA, for a duration",
    .bus = [](double) { return 1.0; },
    .external = &kPerftest,
};

}  // namespace rc::workload
