// The noop fault: scheduled, journaled, applied and reverted like any other kind, and changes
// nothing. It measures the noise floor of a score: a playbook with a noop step must report no
// impact and a recovery of 0 within the stated uncertainty (docs/scoring.md).
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/clock.hpp"
#include "faults/fault.hpp"

namespace rc::faults {
namespace {

class Noop final : public Fault {
 public:
  explicit Noop(json params) : params_(std::move(params)) {}
  const json& params() const override { return params_; }
  Result<json> snapshot() override { return json::object(); }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    events.add(Event{wallNs(), "applied", "nothing", false});
    auto durationNs = params_.value("duration", int64_t(0));
    auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(durationNs > 0 ? durationNs : int64_t(3600e9));
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_until(lock, stop, end, [] { return false; });
    return {};
  }

  Result<void> revert(EventLog& events) override {
    events.add(Event{wallNs(), "reverted", "nothing", false});
    return {};
  }

  std::string describe() const override { return "noop (changes nothing; measures the score's noise floor)"; }

 private:
  json params_;
};

}  // namespace

extern const FaultKind kind_noop;
const FaultKind kind_noop{
    .name = "noop",
    .summary = "changes nothing, applied and reverted like any fault: the noise floor of recovery and impact",
    .params = {
        {.name = "duration", .type = ParamType::duration,
         .help = "how long it is active (default: until the step's `for` ends)", .min = 1e6, .max = kParamHour,
         .optional = true},
    },
    .create = [](const json& params, const Policy&) -> Result<std::unique_ptr<Fault>> {
      return std::unique_ptr<Fault>(std::make_unique<Noop>(params));
    },
    .revertRecord = [](const json&, const json&, const Policy&) -> Result<void> { return {}; },
};

}  // namespace rc::faults
