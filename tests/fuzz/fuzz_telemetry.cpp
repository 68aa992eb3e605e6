// Fuzz harness: workload telemetry on both ends. The controller decodes telemetry and
// workload_ended messages from agents; the agent bins received bytes from the start instant a
// workload_start message gives it, and drains them as its reporter does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "agent/workload_manager.hpp"
#include "common/protocol.hpp"
#include "workload/telemetry.hpp"

namespace {

// A fixed agent wall clock (2026-11-24), so that runs replay exactly.
constexpr int64_t kNowNs = 1'795'996'800'000'000'000;

void agentTelemetry(const rc::proto::WorkloadStart& w) {
  auto start = rc::agent::workloadStartNs(w, kNowNs);
  if (!start) return;
  rc::workload::Telemetry t(*start, w.binUs * 1000);
  // Bytes arrive from the agent's clock onwards; the reporter drains every 50 ms.
  for (int64_t ms = 0; ms < 200; ms += 10) {
    t.addBytes(kNowNs + ms * 1'000'000, uint64_t(w.size));
    if (ms % 50 == 0) (void)t.drain(kNowNs + ms * 1'000'000, false);
  }
  auto last = t.drain(kNowNs + 200'000'000, true);
  if (last.binNs != w.binUs * 1000) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rc::proto;
  auto m = parseBody(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!m) return 0;
  if (auto t = parseTelemetry(*m)) {
    // What the agent sends is what the controller reads back.
    auto again = parseTelemetry(toJson(*t));
    if (!again || again->bins != t->bins || again->iterations.size() != t->iterations.size())
      std::abort();
  }
  if (auto e = parseWorkloadEnded(*m)) {
    auto again = parseWorkloadEnded(toJson(*e));
    if (!again || again->endReason != e->endReason) std::abort();
  }
  if (auto env = parseRequest(*m))
    if (auto* w = std::get_if<WorkloadStart>(&env->request)) agentTelemetry(*w);
  return 0;
}
