// Fuzz harness: what the monitoring under test sends rdmachaos (Alertmanager's webhook body,
// Prometheus's rules and targets answers, their timestamps and durations, the server's URL).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "alerts/prometheus_api.hpp"
#include "alerts/time_text.hpp"
#include "alerts/webhook.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)rc::alerts::parseAlertmanagerWebhook(text, 0);
  (void)rc::alerts::parsePrometheusRules(text, 0);
  (void)rc::alerts::parseTargetsScrapeInterval(text);
  (void)rc::alerts::parseRfc3339(text);
  (void)rc::alerts::parsePromDuration(text);
  if (auto u = rc::alerts::parsePrometheusUrl(text)) (void)u->text();
  return 0;
}
