// Parsing Prometheus's API answers with every field checked: the server is the system under
// test, and a surprising answer must become an error the run reports, not an exception.
#include "alerts/prometheus_api.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "alerts/time_text.hpp"
#include "alerts/webhook.hpp"

namespace rc::alerts {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxDepth = 32;

// The `data` of a success answer; an error answer's type and message as the error.
Result<json> successData(std::string_view body) {
  json doc;
  bool tooDeep = false;
  try {
    doc = json::parse(body.begin(), body.end(), [&](int depth, json::parse_event_t, json&) {
      if (size_t(depth) > kMaxDepth) tooDeep = true;
      return !tooDeep;
    });
  } catch (const json::exception& e) {
    return makeError(std::string("the answer is not JSON: ") + e.what());
  }
  if (tooDeep)
    return makeError("the answer nests deeper than " + std::to_string(kMaxDepth) + " levels");
  if (!doc.is_object())
    return makeError(std::string("the answer is ") + doc.type_name() + ", expected an object");
  auto status = doc.find("status");
  if (status == doc.end() || !status->is_string())
    return fieldError("status", "missing or not a string");
  if (*status != "success") {
    std::string type = doc.value("errorType", std::string("?")),
                error = doc.value("error", std::string("?"));
    return makeError("Prometheus answered status \"" + status->get<std::string>().substr(0, 32) +
                     "\" (" + type.substr(0, 64) + "): " + error.substr(0, 512));
  }
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_object())
    return fieldError("data", "missing or not an object");
  return std::move(*data);
}

Result<const json*> arrayField(const json& obj, const char* name, const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end()) return fieldError(where + name, "missing");
  if (!it->is_array())
    return fieldError(where + name, std::string("expected an array, got ") + it->type_name());
  return &*it;
}

Result<double> secondsField(const json& obj, const char* name, const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end()) return fieldError(where + name, "missing");
  if (!it->is_number())
    return fieldError(where + name, std::string("expected seconds, got ") + it->type_name());
  const double s = it->get<double>();
  if (!std::isfinite(s) || s < 0 || s > 1e9)
    return fieldError(where + name, "out of range: " + std::to_string(s));
  return s;
}

}  // namespace

std::string PrometheusUrl::text() const {
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port) + prefix;
}

Result<PrometheusUrl> parsePrometheusUrl(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return makeError("Prometheus URL \"" + std::string(url.substr(0, 200)) + "\": " + why +
                     " (expected http://HOST:PORT[/prefix], e.g. http://127.0.0.1:9090)");
  };
  if (url.substr(0, 8) == "https://")
    return bad(
        "https is not supported; give Prometheus's plain-HTTP address, or a local proxy to it");
  if (url.substr(0, 7) != "http://") return bad("not an http:// URL");
  std::string_view rest = url.substr(7);
  if (rest.find_first_of("?#") != std::string_view::npos)
    return bad("a query or fragment is not supported");
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos)
    return bad("credentials in the URL are not supported");
  PrometheusUrl out;
  std::string_view portText;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("text after the IPv6 address");
      portText = after.substr(1);
      if (portText.empty()) return bad("an empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      portText = authority.substr(colon + 1);
      if (portText.empty()) return bad("an empty port");
    }
  }
  if (out.host.empty()) return bad("no host");
  for (char c : out.host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_'))
      return bad("\"" + out.host + "\" is not a host name or address");
  if (!portText.empty()) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || end != portText.data() + portText.size() || port == 0 || port > 65535)
      return bad("\"" + std::string(portText) + "\" is not a port number");
    out.port = uint16_t(port);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.prefix = std::string(path);
  return out;
}

Result<PrometheusRules> parsePrometheusRules(std::string_view body, int64_t nowUnixNs) {
  auto data = successData(body);
  if (!data) return data.error();
  auto groups = arrayField(*data, "groups", "data.");
  if (!groups) return groups.error();
  PrometheusRules out;
  std::set<std::string> seen;  // one event per identity, should two rules yield the same labels
  WebhookLimits limits;
  for (size_t g = 0; g < (*groups)->size(); g++) {
    const json& group = (**groups)[g];
    const std::string gw = "data.groups[" + std::to_string(g) + "].";
    if (!group.is_object()) return fieldError(gw.substr(0, gw.size() - 1), "expected an object");
    auto interval = secondsField(group, "interval", gw);
    if (!interval) return interval.error();
    out.evaluationIntervalNs =
        std::max(out.evaluationIntervalNs, int64_t(std::llround(*interval * kNsPerSecond)));
    auto rules = arrayField(group, "rules", gw);
    if (!rules) return rules.error();
    for (size_t r = 0; r < (*rules)->size(); r++) {
      const json& rule = (**rules)[r];
      const std::string rw = gw + "rules[" + std::to_string(r) + "].";
      if (!rule.is_object()) return fieldError(rw.substr(0, rw.size() - 1), "expected an object");
      // Without ?type=alert (or from a proxy that drops it) recording rules come too.
      if (auto type = rule.find("type"); type != rule.end() && *type != "alerting") continue;
      auto duration = secondsField(rule, "duration", rw);
      if (!duration) return duration.error();
      const int64_t forNs = int64_t(std::llround(*duration * kNsPerSecond));
      auto alerts = arrayField(rule, "alerts", rw);
      if (!alerts) return alerts.error();
      for (size_t a = 0; a < (*alerts)->size(); a++) {
        const json& alert = (**alerts)[a];
        const std::string aw = rw + "alerts[" + std::to_string(a) + "].";
        if (!alert.is_object())
          return fieldError(aw.substr(0, aw.size() - 1), "expected an object");
        auto state = alert.find("state");
        if (state == alert.end() || !state->is_string())
          return fieldError(aw + "state", "missing or not a string");
        if (*state != "firing") {
          if (*state == "pending") out.pending++;
          continue;
        }
        AlertEvent ev;
        ev.source = "prometheus";
        ev.receivedUnixNs = nowUnixNs;
        auto labels = alert.find("labels");
        if (labels == alert.end() || !labels->is_object())
          return fieldError(aw + "labels", "missing or not an object");
        if (labels->size() > limits.maxLabels)
          return fieldError(aw + "labels", std::to_string(labels->size()) +
                                               " labels, more than the bound of " +
                                               std::to_string(limits.maxLabels));
        for (const auto& [name, value] : labels->items()) {
          if (!value.is_string())
            return fieldError(aw + "labels." + name,
                              std::string("expected a string, got ") + value.type_name());
          ev.labels.emplace(name, value.get<std::string>());
        }
        auto activeAt = alert.find("activeAt");
        if (activeAt == alert.end() || !activeAt->is_string())
          return fieldError(aw + "activeAt", "missing or not a string");
        if (!isGoZeroTime(activeAt->get_ref<const std::string&>())) {
          auto t = parseRfc3339(activeAt->get_ref<const std::string&>());
          if (!t) return fieldError(aw + "activeAt", t.error().message);
          // Saturated: a far-future activeAt (or a huge `for`) must not wrap to the past.
          int64_t at = 0;
          ev.startsAtUnixNs = __builtin_add_overflow(*t, forNs, &at) ? (forNs > 0 ? INT64_MAX : INT64_MIN) : at;
        }
        ev.fingerprint = labelsFingerprint(ev.labels);
        if (seen.insert(ev.fingerprint).second) out.firing.push_back(std::move(ev));
      }
    }
  }
  return out;
}

Result<int64_t> parseTargetsScrapeInterval(std::string_view body) {
  auto data = successData(body);
  if (!data) return data.error();
  auto targets = arrayField(*data, "activeTargets", "data.");
  if (!targets) return targets.error();
  int64_t longest = 0;
  for (size_t i = 0; i < (*targets)->size(); i++) {
    const json& t = (**targets)[i];
    const std::string where = "data.activeTargets[" + std::to_string(i) + "].scrapeInterval";
    if (!t.is_object())
      return fieldError("data.activeTargets[" + std::to_string(i) + "]", "expected an object");
    auto si = t.find("scrapeInterval");
    if (si == t.end()) return fieldError(where, "missing (Prometheus older than 2.36?)");
    if (!si->is_string())
      return fieldError(where, std::string("expected a duration string, got ") + si->type_name());
    auto ns = parsePromDuration(si->get_ref<const std::string&>());
    if (!ns) return fieldError(where, ns.error().message);
    longest = std::max(longest, *ns);
  }
  return longest;
}

}  // namespace rc::alerts
