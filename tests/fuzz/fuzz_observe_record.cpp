// Fuzz harness: one message on the agent's observe socket, as a local process may send it. A
// record the check accepts must hold every bound the intake's binning relies on, and bins.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "agent/observe_intake.hpp"

namespace {

// A fixed agent wall clock (2026-11-24), so that runs replay exactly; the corpus's records end
// near it.
constexpr int64_t kNowNs = 1'795'996'800'000'000'000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rc::agent::ObserveOptions o;
  auto check = rc::agent::checkRecord(data, size, kNowNs, o);
  if (!check.record) {
    if (check.detail.empty()) std::abort();  // a refusal always says why
    return 0;
  }
  const auto& r = *check.record;
  if (size != sizeof r || r.rank >= r.world_size || r.end_ns < r.start_ns ||
      r.end_ns > kNowNs + o.maxFutureNs || r.end_ns < kNowNs - o.retentionNs ||
      !std::memchr(r.op, 0, sizeof r.op) || !std::memchr(r.job_id, 0, sizeof r.job_id) || r.op[0] == 0)
    std::abort();
  // Binned as the intake bins it: the bins stay within retention and the future bound.
  rc::workload::Telemetry t(r.start_ns - r.start_ns % o.binNs, o.binNs);
  t.addBytes(r.end_ns, r.bytes);
  auto b = t.drain(kNowNs + o.maxFutureNs + o.binNs, true);
  if (b.bins.size() > size_t((o.maxFutureNs + o.maxDurationNs) / o.binNs) + 2) std::abort();
  return 0;
}
