// alerts/: the Alertmanager webhook parser and receiver, the Prometheus API parsers and
// poller; against a real Prometheus and Alertmanager on loopback where Debian's are installed.
#include <catch2/catch.hpp>
#include <string>

#include "alerts/time_text.hpp"
#include "alerts/webhook.hpp"

using namespace rc::alerts;

namespace {

constexpr int64_t kS = 1'000'000'000;

// A post as Alertmanager 0.25 sends it: one firing and one resolved alert.
const char* kWebhook = R"({
  "receiver": "rdmachaos",
  "status": "firing",
  "alerts": [
    {
      "status": "firing",
      "labels": {"alertname": "RdmaLinkDown", "instance": "n2:9465", "severity": "page"},
      "annotations": {"summary": "n2's link is down"},
      "startsAt": "2026-11-26T14:30:01.123456789Z",
      "endsAt": "0001-01-01T00:00:00Z",
      "generatorURL": "http://prometheus:9090/graph?g0.expr=up+%3D%3D+0",
      "fingerprint": "5f0a1b2c3d4e5f60"
    },
    {
      "status": "resolved",
      "labels": {"alertname": "RdmaPfcStorm", "instance": "n1:9465"},
      "annotations": {},
      "startsAt": "2026-11-26T16:29:00.5+02:00",
      "endsAt": "2026-11-26T14:31:02.25Z",
      "generatorURL": "",
      "fingerprint": "0123456789abcdef"
    }
  ],
  "groupLabels": {"alertname": "RdmaLinkDown"},
  "commonLabels": {},
  "commonAnnotations": {},
  "externalURL": "http://alertmanager:9093",
  "version": "4",
  "groupKey": "{}:{alertname=\"RdmaLinkDown\"}",
  "truncatedAlerts": 0
})";

// 2026-11-26T14:30:01Z in Unix seconds (date -u -d 2026-11-26T14:30:01Z +%s).
constexpr int64_t k143001 = 1795703401;

}  // namespace

TEST_CASE("RFC 3339 times to Unix nanoseconds") {
  struct Case {
    const char* text;
    int64_t ns;
  };
  auto c = GENERATE(values<Case>({
      {"1970-01-01T00:00:00Z", 0},
      {"2026-11-26T14:30:01Z", k143001 * kS},
      {"2026-11-26T14:30:01.5Z", k143001 * kS + 500'000'000},
      {"2026-11-26T14:30:01.123456789Z", k143001 * kS + 123'456'789},
      // Digits past nanoseconds are truncated.
      {"2026-11-26T14:30:01.1234567891234z", k143001 * kS + 123'456'789},
      {"2026-11-26t16:30:01.000001+02:00", k143001 * kS + 1'000},
      {"2026-11-26 09:00:01-05:30", k143001 * kS},
      {"2024-02-29T00:00:00Z", 1709164800 * kS},
      {"1969-12-31T23:59:59.5Z", -500'000'000},
      {"2000-03-01T00:00:00+00:00", 951868800 * kS},
  }));
  INFO(c.text);
  auto r = parseRfc3339(c.text);
  REQUIRE(r.ok());
  CHECK(*r == c.ns);
}

TEST_CASE("malformed RFC 3339 times are errors that quote the text") {
  auto text = GENERATE(as<std::string>{}, "", "2026-11-26", "2026-11-26T14:30:01", "2026-13-01T00:00:00Z",
                       "2023-02-29T00:00:00Z", "2026-11-26T24:00:00Z", "2026-11-26T14:30:01.Z",
                       "2026-11-26T14:30:01+0200", "2026-11-26T14:30:01Z ", "0001-01-01T00:00:00Z",
                       "2026-11-26T14:30:01+02:60", "x026-11-26T14:30:01Z");
  INFO(text);
  auto r = parseRfc3339(text);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("is not an RFC 3339 time"));
}

TEST_CASE("Prometheus durations") {
  CHECK(*parsePromDuration("1s") == kS);
  CHECK(*parsePromDuration("15s") == 15 * kS);
  CHECK(*parsePromDuration("250ms") == 250'000'000);
  CHECK(*parsePromDuration("1m30s") == 90 * kS);
  CHECK(*parsePromDuration("1h1m1s1ms") == 3661 * kS + 1'000'000);
  CHECK(*parsePromDuration("2d") == 2 * 86400 * kS);
  CHECK(*parsePromDuration("0") == 0);
  CHECK(*parsePromDuration("0s") == 0);
  for (const char* bad : {"", "s", "1", "1.5s", "30s1m", "1s1s", "1x", "-1s", "99999999999999999999s", "1y1y"}) {
    INFO(bad);
    auto r = parsePromDuration(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("is not a Prometheus duration"));
  }
}

TEST_CASE("an Alertmanager webhook post becomes firing and resolved events") {
  auto r = parseAlertmanagerWebhook(kWebhook, 42);
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  const AlertEvent& f = (*r)[0];
  CHECK(f.firing);
  CHECK(f.labels.at("alertname") == "RdmaLinkDown");
  CHECK(f.labels.at("severity") == "page");
  CHECK(f.labels.size() == 3);
  CHECK(f.startsAtUnixNs == k143001 * kS + 123'456'789);
  CHECK(f.endsAtUnixNs == 0);
  CHECK(f.receivedUnixNs == 42);
  CHECK(f.source == "alertmanager");
  CHECK(f.fingerprint == "5f0a1b2c3d4e5f60");
  const AlertEvent& res = (*r)[1];
  CHECK_FALSE(res.firing);
  CHECK(res.startsAtUnixNs == (k143001 - 61) * kS + 500'000'000);
  CHECK(res.endsAtUnixNs == (k143001 + 61) * kS + 250'000'000);
  CHECK(res.fingerprint == "0123456789abcdef");
}

TEST_CASE("a post without fingerprints gets the labels as identity") {
  auto r = parseAlertmanagerWebhook(
      R"({"alerts":[{"status":"firing","labels":{"b":"2","a":"x\"y"},"startsAt":"2026-11-26T14:30:01Z"}]})", 1);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].fingerprint == R"({a="x\"y", b="2"})");
}

TEST_CASE("bad webhook bodies are errors naming the field and the alert") {
  struct Case {
    std::string body, error;
  };
  const std::string a0 = R"({"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-26T14:30:01Z"})";
  auto c = GENERATE_COPY(values<Case>({
      {"", "the body is not JSON"},
      {"{\"alerts\": [", "the body is not JSON"},
      {"not json", "the body is not JSON"},
      {"[]", "the body is array, expected a webhook object"},
      {"{}", "alerts: missing"},
      {R"({"alerts": {}})", "alerts: expected an array, got object"},
      {R"({"version": "3", "alerts": []})", "version: \"3\" is not Alertmanager's webhook version 4"},
      {R"({"alerts": [)" + a0 + R"(, 7]})", "alerts[1]: expected an object, got number"},
      {R"({"alerts": [)" + a0 + R"(, {"labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})", "alerts[1].status: missing"},
      {R"({"alerts": [{"status":1,"labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].status: expected a string, got number"},
      {R"({"alerts": [{"status":"pending","labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].status: expected \"firing\" or \"resolved\""},
      {R"({"alerts": [{"status":"firing","labels":[],"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].labels: expected an object of strings, got array"},
      {R"({"alerts": [{"status":"firing","labels":{"a":1},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].labels.a: expected a string, got number"},
      {R"({"alerts": [{"status":"firing","startsAt":"2026-11-26T14:30:01Z"}]})", "alerts[0].labels: missing"},
      {R"({"alerts": [{"status":"firing","labels":{}}]})", "alerts[0].startsAt: missing"},
      {R"({"alerts": [{"status":"firing","labels":{},"startsAt":"yesterday"}]})",
       "alerts[0].startsAt: \"yesterday\" is not an RFC 3339 time"},
      {R"({"alerts": [{"status":"resolved","labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].endsAt: missing"},
      {R"({"alerts": [{"status":"resolved","labels":{},"startsAt":"2026-11-26T14:30:01Z","endsAt":"2026-11-26"}]})",
       "alerts[0].endsAt: \"2026-11-26\" is not an RFC 3339 time"},
      {R"({"alerts": [{"status":"firing","labels":{},"startsAt":"2026-11-26T14:30:01Z","fingerprint":5}]})",
       "alerts[0].fingerprint: expected a string, got number"},
      {std::string(100, '[') + std::string(100, ']'), "nests deeper than 32 levels"},
  }));
  INFO(c.body.substr(0, 200));
  auto r = parseAlertmanagerWebhook(c.body, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains(c.error));
}

TEST_CASE("webhook posts over the bounds are refused") {
  const std::string a = R"({"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-26T14:30:01Z"})";
  std::string many = R"({"alerts":[)";
  for (int i = 0; i < 1001; i++) many += (i ? "," : "") + a;
  many += "]}";
  auto r = parseAlertmanagerWebhook(many, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("1001 alerts in one post, more than the bound of 1000"));

  std::string labels;
  for (int i = 0; i < 65; i++) labels += (i ? "," : "") + std::string("\"l") + std::to_string(i) + "\":\"v\"";
  r = parseAlertmanagerWebhook(R"({"alerts":[{"status":"firing","labels":{)" + labels +
                                   R"(},"startsAt":"2026-11-26T14:30:01Z"}]})",
                               0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("alerts[0].labels: 65 labels, more than the bound of 64"));

  r = parseAlertmanagerWebhook(R"({"alerts":[{"status":"firing","labels":{"a":")" + std::string(5000, 'x') +
                                   R"("},"startsAt":"2026-11-26T14:30:01Z"}]})",
                               0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("alerts[0].labels.a: a value of 5000 bytes (bound 4096)"));
}
