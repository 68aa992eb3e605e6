// alerts/ against the real thing: Debian's Prometheus (the poller sees an always-firing and a
// blinking alert, and reads the pipeline's intervals) and Alertmanager (its webhook reaches the
// receiver, firing then resolved). Each daemon runs on loopback from a scratch directory, is
// stopped by its PID and the directory removed, even when a check fails; skips with 77 and the
// reason where a binary is missing.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alerts/http_client.hpp"
#include "alerts/prometheus_poller.hpp"
#include "alerts/webhook_receiver.hpp"
#include "common/clock.hpp"
#include "http_get.hpp"
#include "monitoring.hpp"
#include "skip.hpp"

using namespace rc::alerts;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

using rctest::freeLoopbackPort;
using rctest::kS;

using rctest::TempDir;

std::string rfc3339(int64_t unixNs) {
  time_t s = time_t(unixNs / kS);
  tm t{};
  ::gmtime_r(&s, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                int(unixNs % kS / 1'000'000));
  return buf;
}

template <typename T>
asio::awaitable<void> storeResult(std::shared_ptr<std::optional<T>> out, asio::awaitable<T> coro) {
  out->emplace(co_await std::move(coro));
}

}  // namespace

TEST_CASE("the poller reports a real Prometheus's firing and resolved alerts and its intervals") {
  if (::access(rctest::kPrometheusBin, X_OK) != 0)
    RC_SKIP(std::string(rctest::kPrometheusBin) + " is missing (apt-get install prometheus)");
  TempDir dir;
  const int port = freeLoopbackPort();
  std::ofstream(dir.path + "/rules.yml")
      << "groups:\n"
      << "  - name: rdmachaos-test\n"
      << "    interval: 1s\n"
      << "    rules:\n"
      << "      - alert: AlwaysOn\n"
      << "        expr: vector(1)\n"
      << "        for: 0s\n"
      // On for 3 s of every 6: a firing and a resolution to see.
      << "      - alert: Blinking\n"
      << "        expr: vector(time()) % 6 < 3\n"
      << "        for: 0s\n";
  std::ofstream(dir.path + "/prometheus.yml")
      << "global:\n"
      << "  scrape_interval: 1s\n"
      << "  evaluation_interval: 1s\n"
      << "rule_files: ['" << dir.path << "/rules.yml']\n"
      << "scrape_configs:\n"
      << "  - job_name: prometheus\n"
      << "    static_configs: [{targets: ['127.0.0.1:" << port << "']}]\n";
  rctest::Prometheus prom(dir.path, dir.path + "/prometheus.yml", port);
  INFO(prom.logText());
  REQUIRE(rctest::waitReady([&] { return prom.ready(); }, 60s));

  asio::io_context io;
  std::vector<AlertEvent> events;
  std::unique_ptr<PrometheusPoller> poller;
  // Done when AlwaysOn fired, Blinking fired and then resolved, and both intervals are known.
  auto done = [&] {
    bool always = false, blinkFired = false, blinkResolved = false;
    for (const auto& e : events) {
      if (e.labels.at("alertname") == "AlwaysOn" && e.firing) always = true;
      if (e.labels.at("alertname") == "Blinking" && e.firing) blinkFired = true;
      if (e.labels.at("alertname") == "Blinking" && !e.firing && blinkFired) blinkResolved = true;
    }
    auto t = poller->timing();
    return always && blinkResolved && t && t->scrapeIntervalNs != 0 && t->evaluationIntervalNs != 0;
  };
  PrometheusPollerOptions options;
  options.interval = 200ms;
  options.onPoll = [&] {
    for (auto& e : poller->take()) events.push_back(std::move(e));
    if (done()) io.stop();
  };
  const int64_t started = rc::wallNs();
  auto p = PrometheusPoller::start(io, "http://127.0.0.1:" + std::to_string(port), options);
  REQUIRE(p.ok());
  poller = std::move(*p);
  io.run_for(60s);
  poller->stop();
  std::string seen;
  for (const auto& e : events) seen += (e.firing ? "firing " : "resolved ") + e.fingerprint + "\n";
  for (const auto& e : poller->errors()) seen += "error: " + e + "\n";
  INFO(seen);
  REQUIRE(done());

  const int64_t now = rc::wallNs();
  for (const auto& e : events) {
    CHECK(e.source == "prometheus");
    CHECK(e.receivedUnixNs >= started);
    CHECK(e.receivedUnixNs <= now);
    // Generous sanity only: the rules fire within seconds of Prometheus's start.
    CHECK(e.startsAtUnixNs > started - 30 * kS);
    CHECK(e.startsAtUnixNs < now + 30 * kS);
  }
  const AlertEvent* always = nullptr;
  for (const auto& e : events)
    if (e.labels.at("alertname") == "AlwaysOn") {
      CHECK(always == nullptr);  // reported once while it stays firing
      always = &e;
    }
  REQUIRE(always != nullptr);
  CHECK(always->firing);
  CHECK(always->fingerprint == R"({alertname="AlwaysOn"})");
  // Blinking's resolution pairs with the firing before it.
  const AlertEvent *fired = nullptr, *resolved = nullptr;
  for (const auto& e : events)
    if (e.labels.at("alertname") == "Blinking") {
      if (e.firing && !resolved) fired = &e;
      if (!e.firing && fired && !resolved) resolved = &e;
    }
  REQUIRE(resolved != nullptr);
  CHECK(resolved->fingerprint == fired->fingerprint);
  CHECK(resolved->startsAtUnixNs == fired->startsAtUnixNs);
  CHECK(resolved->endsAtUnixNs > fired->startsAtUnixNs);

  auto timing = poller->timing();
  REQUIRE(timing.has_value());
  CHECK(timing->scrapeIntervalNs == 1 * kS);
  CHECK(timing->evaluationIntervalNs == 1 * kS);
  CHECK(timing->source == "prometheus http://127.0.0.1:" + std::to_string(port));
}

TEST_CASE("a real Alertmanager's webhook reaches the receiver: firing, then resolved") {
  if (::access(rctest::kAlertmanagerBin, X_OK) != 0)
    RC_SKIP(std::string(rctest::kAlertmanagerBin) + " is missing (apt-get install prometheus-alertmanager)");
  TempDir dir;
  asio::io_context io;
  std::vector<AlertEvent> events;
  std::unique_ptr<WebhookReceiver> receiver;
  auto done = [&] {
    bool fired = false;
    for (const auto& e : events) {
      if (e.firing)
        fired = true;
      else if (fired)
        return true;
    }
    return false;
  };
  WebhookReceiverOptions options;
  options.onPost = [&] {
    for (auto& e : receiver->take()) events.push_back(std::move(e));
    if (done()) io.stop();
  };
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0", options);
  REQUIRE(rx.ok());
  receiver = std::move(*rx);

  const int port = freeLoopbackPort();
  rctest::writeAlertmanagerConfig(dir.path + "/alertmanager.yml", receiver->endpoint(), "alertname");
  // No cluster listener (monitoring.hpp): its default is a fixed port (9094) on every address.
  rctest::Alertmanager am(dir.path, dir.path + "/alertmanager.yml", port);
  INFO(am.logText());
  REQUIRE(rctest::waitReady([&] { return am.ready(); }, 60s));

  const int64_t startsAt = rc::wallNs();
  HttpRequest post;
  post.method = "POST";
  post.host = "127.0.0.1";
  post.port = uint16_t(port);
  post.target = "/api/v2/alerts";
  post.contentType = "application/json";
  post.timeout = 10s;
  post.body =
      R"([{"labels":{"alertname":"GameDayTest","severity":"page"},"annotations":{"summary":"test"},)"
      R"("startsAt":")" +
      rfc3339(startsAt) + R"(","endsAt":")" + rfc3339(startsAt + 3 * kS) + R"("}])";
  auto answer = std::make_shared<std::optional<rc::Result<HttpResponse>>>();
  asio::co_spawn(io, storeResult(answer, httpRequest(post)), [](std::exception_ptr p) {
    if (p) std::rethrow_exception(p);
  });
  io.run_for(60s);
  receiver->stop();
  REQUIRE(answer->has_value());
  INFO(((*answer)->ok() ? "" : (*answer)->error().message));
  REQUIRE((*answer)->ok());
  INFO((**answer)->body);
  CHECK((**answer)->status == 200);
  std::string seen;
  for (const auto& e : events) seen += (e.firing ? "firing " : "resolved ") + e.fingerprint + "\n";
  for (const auto& e : receiver->errors()) seen += "error: " + e + "\n";
  INFO(seen);
  REQUIRE(done());
  CHECK(receiver->badPosts() == 0);

  const AlertEvent& fired = events.front();
  CHECK(fired.firing);
  CHECK(fired.source == "alertmanager");
  CHECK(fired.labels.at("alertname") == "GameDayTest");
  CHECK(fired.labels.at("severity") == "page");
  // Alertmanager keeps the startsAt we posted (to the millisecond we wrote).
  CHECK(fired.startsAtUnixNs == startsAt / 1'000'000 * 1'000'000);
  CHECK(fired.endsAtUnixNs == 0);
  CHECK_FALSE(fired.fingerprint.empty());
  const AlertEvent* resolved = nullptr;
  for (const auto& e : events)
    if (!e.firing) resolved = &e;
  REQUIRE(resolved != nullptr);
  CHECK(resolved->fingerprint == fired.fingerprint);
  CHECK(resolved->endsAtUnixNs == (startsAt + 3 * kS) / 1'000'000 * 1'000'000);
  CHECK(resolved->receivedUnixNs >= resolved->endsAtUnixNs);
}
