// Workload kind observed: nothing is started. The agent scores whatever a real job (NCCL, MPI,
// a program calling the observe C API) reports to its local intake while the workload runs: the
// same telemetry as the engine's, from the job's own operations (docs/workloads.md, "Your own job").
#include <chrono>
#include <cctype>
#include <thread>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "workload/kinds.hpp"
#include "workload/observe_source.hpp"

namespace rc::workload {
namespace {

class ObservedRun final : public ExternalRun {
 public:
  ObservedRun(ObserveSource* source, std::string job) : source_(source), job_(std::move(job)) {}
  uint64_t memory() const override { return 0; }
  uint16_t port() const override { return 0; }
  // A record comes when its operation ends, and the intake hands over bins closed a tick ago.
  int64_t drainLagNs() const override { return 500'000'000; }
  std::string describe() const override {
    return "the job " + (job_.empty() ? std::string("(any)") : "'" + job_ + "'") + " reporting to " + source_->where();
  }

  Summary run(int64_t startNs, int64_t durationNs, Telemetry& telemetry, const std::atomic<bool>& stop) override {
    Summary s;
    JobReader reader(source_, job_);
    reader.skipBacklog();
    const int64_t endNs = startNs + durationNs;
    for (;;) {
      const bool last = stop.load() || wallNs() >= endNs;
      reader.read(telemetry, s);
      if (last) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    s.endReason = stop.load() ? "stopped" : "completed";
    // What this node saw, for the log and the controller: how many ranks, and which stopped early.
    const std::string seen = reader.seen(endNs, stop.load());
    if (!reader.anyRank()) {
      s.endReason = "error";
      s.error = "no rank reported to " + source_->where() + (job_.empty() ? std::string() : " for job '" + job_ + "'") +
                " during the workload: is the job running on this node with librdmachaos-observe loaded?";
    }
    log::info("observed workload: {}", seen.empty() ? std::string("no rank reported") : "seen " + seen);
    return s;
  }

 private:
  ObserveSource* source_;
  std::string job_;
};

Result<std::unique_ptr<ExternalRun>> prepareObserved(const proto::WorkloadStart& r) {
  ObserveSource* source = observeSource();
  if (!source)
    return makeError("this agent has no observe intake ([observe] in its configuration): an observed workload "
                     "has nothing to read");
  if (r.durationMs == 0) return makeError("an observed workload runs for a duration, not a count of iterations");
  return std::unique_ptr<ExternalRun>(std::make_unique<ObservedRun>(source, r.job));
}

bool knownJob(std::string_view job) {
  if (job.size() > 128) return false;
  for (char c : job)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != ':' && c != '/')
      return false;
  return true;
}

const External kObserved{
    .ranks = 0,
    .rdma = false,
    .programIs = "job id",
    .defaultProgram = "",
    .knowsProgram = knownJob,
    .programs = [] { return std::string("a job id of letters, digits and . _ - : /, or none for any job"); },
    .maxStreams = 1,
    .streamsAre = "the job's own",
    .qpTimeoutIs = "the job's own setting",
    .ranksShort = "the job's ranks",
    .ranksLong = "every node where the job's ranks run",
    .prepare = prepareObserved,
};

}  // namespace

extern const Kind kind_observed;
const Kind kind_observed{
    .name = "observed",
    .summary = "starts nothing: scores the operations a real job (NCCL, MPI, the C API) reports to each agent",
    .bus = [](double) { return 1.0; },
    .external = &kObserved,
};

}  // namespace rc::workload
