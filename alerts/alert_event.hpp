// One alert's state change as rdmachaos learns it from the monitoring under test: an
// Alertmanager webhook post or a poll of Prometheus's rules API. Times are Unix wall-clock
// nanoseconds (the controller maps them onto the run's timeline with RunResult::startedUnixNs).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rc::alerts {

struct AlertEvent {
  // Every label of the alert, "alertname" included (Prometheus's rule labels plus the series').
  std::map<std::string, std::string> labels;
  bool firing = true;  // false: resolved
  // When the alert began firing, as the monitoring says (Alertmanager's startsAt, which
  // Prometheus sets to the rule evaluation that fired it; from the rules API: activeAt + the
  // rule's `for`). 0 when unknown.
  int64_t startsAtUnixNs = 0;
  // When it resolved (endsAt of a resolved alert; for a poll, the first poll that no longer
  // saw it). 0 while firing or when unknown.
  int64_t endsAtUnixNs = 0;
  int64_t receivedUnixNs = 0;  // when rdmachaos received the post or the poll's answer
  std::string source;          // "alertmanager" or "prometheus"
  // Identity of the alert across its firing and resolved events: Alertmanager's fingerprint,
  // or for a poll the sorted labels joined.
  std::string fingerprint;
};

// The sampling delays of the pipeline that raised the alerts, for the uncertainty of every
// time to detect: a symptom can wait up to one scrape interval to be seen, and up to one
// evaluation interval more to raise its alert. 0 = unknown.
struct PipelineTiming {
  int64_t scrapeIntervalNs = 0;
  int64_t evaluationIntervalNs = 0;
  std::string source;  // where the figures came from: "prometheus <url>", "playbook", ...
};

}  // namespace rc::alerts
