// Alertmanager webhook JSON to AlertEvents, with every field checked: the body comes from the
// network, and a bad one must become an error value the run reports, never an exception.
#include "alerts/webhook.hpp"

#include <nlohmann/json.hpp>

#include "alerts/time_text.hpp"

namespace rc::alerts {
namespace {

using json = nlohmann::json;

std::string typeName(const json& j) { return j.type_name(); }

// LABELS (an object of strings) into OUT, within the limits; FIELD names it in errors.
Result<void> readLabels(const json& labels, const std::string& field, const WebhookLimits& limits,
                        std::map<std::string, std::string>& out) {
  if (!labels.is_object())
    return fieldError(field, "expected an object of strings, got " + typeName(labels));
  if (labels.size() > limits.maxLabels)
    return fieldError(field, std::to_string(labels.size()) + " labels, more than the bound of " +
                                 std::to_string(limits.maxLabels));
  for (const auto& [name, value] : labels.items()) {
    if (name.size() > limits.maxLabelBytes)
      return fieldError(field, "a label name of " + std::to_string(name.size()) + " bytes (bound " +
                                   std::to_string(limits.maxLabelBytes) + ")");
    if (!value.is_string())
      return fieldError(field + "." + name, "expected a string, got " + typeName(value));
    const auto& v = value.get_ref<const std::string&>();
    if (v.size() > limits.maxLabelBytes)
      return fieldError(field + "." + name, "a value of " + std::to_string(v.size()) +
                                                " bytes (bound " +
                                                std::to_string(limits.maxLabelBytes) + ")");
    out.emplace(name, v);
  }
  return {};
}

Result<const std::string*> stringField(const json& obj, const char* name,
                                       const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end()) return fieldError(where + name, "missing");
  if (!it->is_string()) return fieldError(where + name, "expected a string, got " + typeName(*it));
  return &it->get_ref<const std::string&>();
}

Result<AlertEvent> readAlert(const json& a, const std::string& where, int64_t receivedUnixNs,
                             const WebhookLimits& limits) {
  if (!a.is_object())
    return fieldError(where.substr(0, where.size() - 1), "expected an object, got " + typeName(a));
  AlertEvent ev;
  ev.source = "alertmanager";
  ev.receivedUnixNs = receivedUnixNs;

  auto status = stringField(a, "status", where);
  if (!status) return status.error();
  if (**status == "firing")
    ev.firing = true;
  else if (**status == "resolved")
    ev.firing = false;
  else
    return fieldError(where + "status", "expected \"firing\" or \"resolved\", got \"" +
                                            (*status)->substr(0, 64) + "\"");

  auto labels = a.find("labels");
  if (labels == a.end()) return fieldError(where + "labels", "missing");
  if (auto r = readLabels(*labels, where + "labels", limits, ev.labels); !r) return r.error();
  // Annotations are not kept, but a malformed object says the sender is not Alertmanager.
  if (auto ann = a.find("annotations"); ann != a.end() && !ann->is_object() && !ann->is_null())
    return fieldError(where + "annotations", "expected an object, got " + typeName(*ann));

  auto startsAt = stringField(a, "startsAt", where);
  if (!startsAt) return startsAt.error();
  if (!isGoZeroTime(**startsAt)) {
    auto t = parseRfc3339(**startsAt);
    if (!t) return fieldError(where + "startsAt", t.error().message);
    ev.startsAtUnixNs = *t;
  }
  // endsAt matters for a resolved alert only; a firing one carries its expiry time.
  if (!ev.firing) {
    auto endsAt = stringField(a, "endsAt", where);
    if (!endsAt) return endsAt.error();
    if (!isGoZeroTime(**endsAt)) {
      auto t = parseRfc3339(**endsAt);
      if (!t) return fieldError(where + "endsAt", t.error().message);
      ev.endsAtUnixNs = *t;
    }
  } else if (auto e = a.find("endsAt"); e != a.end() && !e->is_string()) {
    return fieldError(where + "endsAt", "expected a string, got " + typeName(*e));
  }
  // Alertmanager has sent a fingerprint since 0.19; an older or hand-made post gets the label
  // identity instead, which pairs its firing and resolved posts just as well.
  if (auto fp = a.find("fingerprint"); fp != a.end()) {
    if (!fp->is_string())
      return fieldError(where + "fingerprint", "expected a string, got " + typeName(*fp));
    ev.fingerprint = fp->get<std::string>();
  }
  if (ev.fingerprint.empty()) ev.fingerprint = labelsFingerprint(ev.labels);
  return ev;
}

}  // namespace

std::string labelsFingerprint(const std::map<std::string, std::string>& labels) {
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ", ";
    out += name + "=\"";
    for (char c : value) {
      if (c == '\\' || c == '"')
        out += '\\', out += c;
      else if (c == '\n')
        out += "\\n";
      else
        out += c;
    }
    out += '"';
  }
  return out + "}";
}

Result<std::vector<AlertEvent>> parseAlertmanagerWebhook(std::string_view body,
                                                         int64_t receivedUnixNs,
                                                         const WebhookLimits& limits) {
  json doc;
  bool tooDeep = false;
  try {
    // The callback bounds the nesting: nlohmann's parser keeps a stack as deep as the input.
    doc = json::parse(body.begin(), body.end(), [&](int depth, json::parse_event_t, json&) {
      if (size_t(depth) > limits.maxNestingDepth) tooDeep = true;
      return !tooDeep;
    });
  } catch (const json::exception& e) {
    return makeError(std::string("the body is not JSON: ") + e.what());
  }
  if (tooDeep)
    return makeError("the body nests deeper than " + std::to_string(limits.maxNestingDepth) +
                     " levels");
  if (!doc.is_object())
    return makeError("the body is " + typeName(doc) + ", expected a webhook object");
  if (auto v = doc.find("version"); v != doc.end()) {
    if (!v->is_string()) return fieldError("version", "expected a string, got " + typeName(*v));
    if (*v != "4")
      return fieldError("version",
                        "\"" + v->get<std::string>().substr(0, 16) +
                            "\" is not Alertmanager's webhook version 4, the one understood here");
  }
  auto alerts = doc.find("alerts");
  if (alerts == doc.end()) return fieldError("alerts", "missing");
  if (!alerts->is_array())
    return fieldError("alerts", "expected an array, got " + typeName(*alerts));
  if (alerts->size() > limits.maxAlerts)
    return fieldError(
        "alerts", std::to_string(alerts->size()) + " alerts in one post, more than the bound of " +
                      std::to_string(limits.maxAlerts) + " (lower Alertmanager's max_alerts)");
  std::vector<AlertEvent> out;
  out.reserve(alerts->size());
  for (size_t i = 0; i < alerts->size(); i++) {
    auto ev = readAlert((*alerts)[i], "alerts[" + std::to_string(i) + "].", receivedUnixNs, limits);
    if (!ev) return ev.error();
    out.push_back(std::move(*ev));
  }
  return out;
}

}  // namespace rc::alerts
