// Alertmanager's webhook post (payload version 4) to AlertEvents: the parsing alone, so that
// the receiver, the tests and a fuzzer share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "alerts/alert_event.hpp"
#include "common/result.hpp"

namespace rc::alerts {

// A parse error that names the JSON field it is about ("alerts[2].labels: ...").
inline Error fieldError(const std::string& field, const std::string& why) {
  return makeError(field + ": " + why);
}

// Bounds on what one post may carry: a misconfigured or hostile sender gets an error, not
// our memory.
struct WebhookLimits {
  size_t maxAlerts = 1000;
  size_t maxLabels = 64;        // per alert
  size_t maxLabelBytes = 4096;  // name or value
  size_t maxNestingDepth = 32;  // of the JSON document
};

// The alerts of one post, in the post's order. Each event's receivedUnixNs is RECEIVEDUNIXNS
// and its source "alertmanager"; a firing alert's endsAtUnixNs is 0 (Alertmanager writes the
// time it would expire, not an end). An error names the field and the alert's index, e.g.
// "alerts[3].labels.severity: expected a string, got number". Never throws.
Result<std::vector<AlertEvent>> parseAlertmanagerWebhook(std::string_view body,
                                                         int64_t receivedUnixNs,
                                                         const WebhookLimits& limits = {});

// The identity the rules API poller gives an alert (Alertmanager's own fingerprint is a hash
// we cannot recompute): the sorted labels as {name="value", ...}, values escaped as in PromQL.
std::string labelsFingerprint(const std::map<std::string, std::string>& labels);

}  // namespace rc::alerts
