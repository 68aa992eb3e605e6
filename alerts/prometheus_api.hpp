// Prometheus's HTTP API as the poller reads it: the server's URL, the alerting rules
// (/api/v1/rules?type=alert) and the active targets' scrape intervals (/api/v1/targets),
// parsed apart from any I/O so that each is testable on a saved answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "alerts/alert_event.hpp"
#include "common/result.hpp"

namespace rc::alerts {

struct PrometheusUrl {
  std::string host;          // a name, an IPv4 or an IPv6 address (without brackets)
  uint16_t port = 80;        // as in any http:// URL when the URL has none
  std::string prefix;        // "" or "/prometheus" (--web.route-prefix), no trailing '/'
  std::string text() const;  // "http://HOST:PORT[/prefix]"
};

// "http://HOST[:PORT][/prefix]"; https, credentials, queries and fragments are errors that
// say so.
Result<PrometheusUrl> parsePrometheusUrl(std::string_view url);

struct PrometheusRules {
  // The longest evaluation interval of the rule groups; 0 with no groups.
  int64_t evaluationIntervalNs = 0;
  // One event per firing alert: startsAtUnixNs = activeAt + the rule's `for`, receivedUnixNs
  // = NOWUNIXNS, source "prometheus", fingerprint = labelsFingerprint(labels).
  std::vector<AlertEvent> firing;
  size_t pending = 0;  // alerts still waiting out their `for`
};

// The answer of GET /api/v1/rules?type=alert. Errors name the field, e.g.
// "data.groups[0].rules[2].alerts[1].activeAt: ...", and an error status's errorType and error.
Result<PrometheusRules> parsePrometheusRules(std::string_view body, int64_t nowUnixNs);

// The answer of GET /api/v1/targets?state=active: the longest scrapeInterval of the active
// targets, in nanoseconds; 0 when there are none.
Result<int64_t> parseTargetsScrapeInterval(std::string_view body);

}  // namespace rc::alerts
