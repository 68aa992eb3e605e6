// alerts/: the Alertmanager webhook parser and receiver, the Prometheus API parsers and
// poller; against a real Prometheus and Alertmanager on loopback where Debian's are installed.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "alerts/http_client.hpp"
#include "alerts/prometheus_api.hpp"
#include "alerts/prometheus_poller.hpp"
#include "alerts/time_text.hpp"
#include "alerts/webhook.hpp"
#include "alerts/webhook_receiver.hpp"
#include "common/clock.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_alerts {

using namespace rc::alerts;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

using rctest::kS;

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

// co_spawn in Boost 1.74 wants a default-constructible result; Result<T> is not.
template <typename T>
asio::awaitable<void> storeResult(std::shared_ptr<std::optional<T>> out, asio::awaitable<T> coro) {
  out->emplace(co_await std::move(coro));
}

// Runs CORO on IO until it ends (the io_context also serves the receiver meanwhile); fails
// the case if it has not ended within LIMIT.
template <typename T>
T runToEnd(asio::io_context& io, asio::awaitable<T> coro, std::chrono::seconds limit = 30s) {
  auto out = std::make_shared<std::optional<T>>();
  auto error = std::make_shared<std::exception_ptr>();
  asio::co_spawn(io, storeResult(out, std::move(coro)), [&io, error](std::exception_ptr p) {
    *error = p;
    io.stop();
  });
  io.restart();
  io.run_for(limit);
  if (*error) std::rethrow_exception(*error);
  REQUIRE(out->has_value());
  return std::move(**out);
}

rc::Result<HttpResponse> post(asio::io_context& io, uint16_t port, std::string body,
                              std::string method = "POST", std::string token = "") {
  HttpRequest r;
  r.bearerToken = std::move(token);
  r.method = std::move(method);
  r.host = "127.0.0.1";
  r.port = port;
  r.target = "/alerts";
  r.body = std::move(body);
  r.contentType = "application/json";
  r.timeout = 10s;
  return runToEnd(io, httpRequest(std::move(r)));
}

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
  auto text = GENERATE(as<std::string>{}, "", "2026-11-26", "2026-11-26T14:30:01",
                       "2026-13-01T00:00:00Z", "2023-02-29T00:00:00Z", "2026-11-26T24:00:00Z",
                       "2026-11-26T14:30:01.Z", "2026-11-26T14:30:01+0200", "2026-11-26T14:30:01Z ",
                       "0001-01-01T00:00:00Z", "2026-11-26T14:30:01+02:60", "x026-11-26T14:30:01Z");
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
  for (const char* bad :
       {"", "s", "1", "1.5s", "30s1m", "1s1s", "1x", "-1s", "99999999999999999999s", "1y1y"}) {
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
      R"({"alerts":[{"status":"firing","labels":{"b":"2","a":"x\"y"},"startsAt":"2026-11-26T14:30:01Z"}]})",
      1);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].fingerprint == R"({a="x\"y", b="2"})");
}

TEST_CASE("bad webhook bodies are errors naming the field and the alert") {
  struct Case {
    std::string body, error;
  };
  const std::string a0 =
      R"({"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-26T14:30:01Z"})";
  auto c = GENERATE_COPY(values<Case>({
      {"", "the body is not JSON"},
      {"{\"alerts\": [", "the body is not JSON"},
      {"not json", "the body is not JSON"},
      {"[]", "the body is array, expected a webhook object"},
      {"{}", "alerts: missing"},
      {R"({"alerts": {}})", "alerts: expected an array, got object"},
      {R"({"version": "3", "alerts": []})",
       "version: \"3\" is not Alertmanager's webhook version 4"},
      {R"({"alerts": [)" + a0 + R"(, 7]})", "alerts[1]: expected an object, got number"},
      {R"({"alerts": [)" + a0 + R"(, {"labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[1].status: missing"},
      {R"({"alerts": [{"status":1,"labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].status: expected a string, got number"},
      {R"({"alerts": [{"status":"pending","labels":{},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].status: expected \"firing\" or \"resolved\""},
      {R"({"alerts": [{"status":"firing","labels":[],"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].labels: expected an object of strings, got array"},
      {R"({"alerts": [{"status":"firing","labels":{"a":1},"startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].labels.a: expected a string, got number"},
      {R"({"alerts": [{"status":"firing","startsAt":"2026-11-26T14:30:01Z"}]})",
       "alerts[0].labels: missing"},
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
  const std::string a =
      R"({"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-26T14:30:01Z"})";
  std::string many = R"({"alerts":[)";
  for (int i = 0; i < 1001; i++) many += (i ? "," : "") + a;
  many += "]}";
  auto r = parseAlertmanagerWebhook(many, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message,
             Catch::Contains("1001 alerts in one post, more than the bound of 1000"));

  std::string labels;
  for (int i = 0; i < 65; i++)
    labels += (i ? "," : "") + std::string("\"l") + std::to_string(i) + "\":\"v\"";
  r = parseAlertmanagerWebhook(R"({"alerts":[{"status":"firing","labels":{)" + labels +
                                   R"(},"startsAt":"2026-11-26T14:30:01Z"}]})",
                               0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message,
             Catch::Contains("alerts[0].labels: 65 labels, more than the bound of 64"));

  r = parseAlertmanagerWebhook(R"({"alerts":[{"status":"firing","labels":{"a":")" +
                                   std::string(5000, 'x') +
                                   R"("},"startsAt":"2026-11-26T14:30:01Z"}]})",
                               0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message,
             Catch::Contains("alerts[0].labels.a: a value of 5000 bytes (bound 4096)"));
}

TEST_CASE("the webhook receiver serves posts on a loopback port and survives bad ones") {
  asio::io_context io;
  WebhookReceiverOptions options;
  options.maxBodyBytes = 64 << 10;
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0", options);
  REQUIRE(rx.ok());
  WebhookReceiver& receiver = **rx;
  REQUIRE(receiver.port() != 0);
  CHECK(receiver.endpoint() == "127.0.0.1:" + std::to_string(receiver.port()));

  const int64_t before = rc::wallNs();
  auto r = post(io, receiver.port(), kWebhook);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  auto events = receiver.take();
  REQUIRE(events.size() == 2);
  CHECK(events[0].labels.at("alertname") == "RdmaLinkDown");
  CHECK(events[0].firing);
  CHECK_FALSE(events[1].firing);
  CHECK(events[0].receivedUnixNs >= before);
  CHECK(events[0].receivedUnixNs <= rc::wallNs());
  CHECK(receiver.take().empty());

  SECTION("a bad body gets 400 with the reason, is kept, and the next post is served") {
    r = post(
        io, receiver.port(),
        R"({"alerts":[{"status":"firing","labels":{"a":1},"startsAt":"2026-11-26T14:30:01Z"}]})");
    REQUIRE(r.ok());
    CHECK(r->status == 400);
    CHECK_THAT(r->body, Catch::Contains("alerts[0].labels.a: expected a string, got number"));
    r = post(io, receiver.port(), "not json");
    REQUIRE(r.ok());
    CHECK(r->status == 400);
    CHECK(receiver.badPosts() == 2);
    REQUIRE(receiver.errors().size() == 2);
    CHECK_THAT(receiver.errors()[0], Catch::Contains("POST /alerts from 127.0.0.1:"));
    CHECK_THAT(receiver.errors()[1], Catch::Contains("the body is not JSON"));
    CHECK(receiver.take().empty());

    r = post(io, receiver.port(), kWebhook);
    REQUIRE(r.ok());
    CHECK(r->status == 200);
    CHECK(receiver.take().size() == 2);
    CHECK(receiver.goodPosts() == 2);
  }
  SECTION("a body over the bound gets 413") {
    std::string huge = R"({"alerts":[],"pad":")" + std::string(100 << 10, 'x') + R"("})";
    r = post(io, receiver.port(), huge);
    REQUIRE(r.ok());
    CHECK(r->status == 413);
    CHECK_THAT(r->body, Catch::Contains("over the bound of 65536 bytes"));
    CHECK(receiver.badPosts() == 1);
    r = post(io, receiver.port(), kWebhook);
    REQUIRE(r.ok());
    CHECK(r->status == 200);
  }
  SECTION("other methods get 405") {
    r = post(io, receiver.port(), "", "GET");
    REQUIRE(r.ok());
    CHECK(r->status == 405);
    CHECK(receiver.take().empty());
  }
  SECTION("only as many errors as the bound are kept") {
    for (int i = 0; i < 25; i++) {
      r = post(io, receiver.port(), "[" + std::to_string(i) + "]");
      REQUIRE(r.ok());
      CHECK(r->status == 400);
    }
    CHECK(receiver.badPosts() == 25);
    CHECK(receiver.errors().size() == 20);
  }
  SECTION("stop() closes the listener and open connections") {
    asio::ip::tcp::socket idle(io);
    idle.connect({asio::ip::make_address("127.0.0.1"), receiver.port()});
    io.restart();
    io.run_for(100ms);  // the receiver accepts it
    receiver.stop();
    io.restart();
    io.run_for(100ms);
    char c;
    boost::system::error_code ec;
    asio::read(idle, asio::buffer(&c, 1), ec);
    CHECK(ec);  // eof or reset: the receiver closed it
    r = post(io, receiver.port(), kWebhook);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("cannot connect"));
  }
}

TEST_CASE(
    "the webhook receiver closes idle connections at the deadline and refuses over the bound") {
  asio::io_context io;
  WebhookReceiverOptions options;
  options.readTimeout = 300ms;
  options.maxConnections = 2;
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0", options);
  REQUIRE(rx.ok());
  WebhookReceiver& receiver = **rx;
  const asio::ip::tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), receiver.port()};
  std::vector<asio::ip::tcp::socket> idle;
  for (int i = 0; i < 3; i++) {
    idle.emplace_back(io);
    idle.back().connect(ep);
    io.restart();
    io.run_for(50ms);  // accepted in this order
  }
  // The third found both slots taken: closed at once, and said so.
  REQUIRE(receiver.errors().size() == 1);
  CHECK_THAT(receiver.errors()[0], Catch::Contains("refused a connection from 127.0.0.1:"));
  CHECK_THAT(receiver.errors()[0], Catch::Contains("2 connections open (the bound)"));
  // The other two, silent, are closed by the read deadline; then posts are served again.
  io.restart();
  io.run_for(1s);
  for (auto& s : idle) {
    char c;
    boost::system::error_code ec;
    s.non_blocking(true);
    asio::read(s, asio::buffer(&c, 1), ec);
    INFO(ec.message());
    CHECK((ec == asio::error::eof || ec == asio::error::connection_reset));
  }
  auto r = post(io, receiver.port(), kWebhook);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

// Anyone who reaches the port could otherwise post alerts and fake detections.
TEST_CASE("the webhook receiver with a bearer token refuses posts without it") {
  rctest::TempDir dir;
  std::ofstream(dir.path + "/token") << "s3cret-token\n";
  auto token = readTokenFile(dir.path + "/token");
  REQUIRE(token.ok());
  CHECK(*token == "s3cret-token");
  std::ofstream(dir.path + "/empty") << "\n";
  CHECK_THAT(readTokenFile(dir.path + "/empty").error().message, Catch::Contains("is empty"));
  std::ofstream(dir.path + "/two") << "a\nb\n";
  CHECK_THAT(readTokenFile(dir.path + "/two").error().message, Catch::Contains("more than one line"));
  CHECK_FALSE(readTokenFile(dir.path + "/missing").ok());

  asio::io_context io;
  WebhookReceiverOptions options;
  options.bearerToken = *token;
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0", options);
  REQUIRE(rx.ok());
  WebhookReceiver& receiver = **rx;
  auto r = post(io, receiver.port(), kWebhook);
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  r = post(io, receiver.port(), kWebhook, "POST", "s3cret-tokem");
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  CHECK(receiver.take().empty());
  CHECK(receiver.badPosts() == 2);
  REQUIRE(receiver.errors().size() == 2);
  CHECK_THAT(receiver.errors()[0], Catch::Contains("refused, no bearer token"));
  CHECK_THAT(receiver.errors()[1], Catch::Contains("refused, a wrong bearer token"));
  r = post(io, receiver.port(), kWebhook, "POST", "s3cret-token");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(receiver.take().size() == 2);
  CHECK(WebhookReceiver::loopbackOnly("127.0.0.1:9099"));
  CHECK(WebhookReceiver::loopbackOnly("[::1]:9099"));
  CHECK_FALSE(WebhookReceiver::loopbackOnly("0.0.0.0:9099"));
  CHECK_FALSE(WebhookReceiver::loopbackOnly("10.1.2.3:9099"));
}

// One client address cannot hold every slot (keep-alive connections held open), and what waits
// to be taken is bounded in bytes too, not only in count.
TEST_CASE("the webhook receiver bounds connections per client and its queue in bytes") {
  asio::io_context io;
  WebhookReceiverOptions options;
  options.maxConnectionsPerClient = 2;
  options.maxQueuedBytes = 2000;
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0", options);
  REQUIRE(rx.ok());
  WebhookReceiver& receiver = **rx;
  const asio::ip::tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), receiver.port()};
  std::vector<asio::ip::tcp::socket> held;
  for (int i = 0; i < 3; i++) {
    held.emplace_back(io);
    held.back().connect(ep);
    io.restart();
    io.run_for(50ms);
  }
  REQUIRE(receiver.errors().size() == 1);
  CHECK_THAT(receiver.errors()[0], Catch::Contains("2 open from 127.0.0.1 (the bound per client)"));
  held.clear();  // closed: the slots come back
  io.restart();
  io.run_for(100ms);
  // kWebhook's two alerts fit; the next posts' do not, by bytes (the count bound is far).
  auto r = post(io, receiver.port(), kWebhook);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  for (int i = 0; i < 4; i++) REQUIRE(post(io, receiver.port(), kWebhook).ok());
  auto events = receiver.take();
  CHECK(events.size() >= 2);
  CHECK(events.size() < 10);
  CHECK_THAT(receiver.errors().back(), Catch::Contains("bytes) wait to be taken (the bound)"));
  REQUIRE(post(io, receiver.port(), kWebhook).ok());  // taken: room again
  CHECK(receiver.take().size() == 2);
}

TEST_CASE("the webhook receiver answers Expect: 100-continue, as curl sends it") {
  asio::io_context io;
  auto rx = WebhookReceiver::start(io, "127.0.0.1:0");
  REQUIRE(rx.ok());
  // The receiver on a thread of its own, the client blocking on this one; joined before the
  // receiver is looked at.
  auto work = asio::make_work_guard(io);
  std::thread server([&io] { io.run_for(20s); });
  std::string reply;
  {
    asio::io_context clientIo;
    asio::ip::tcp::socket s(clientIo);
    s.connect({asio::ip::make_address("127.0.0.1"), (*rx)->port()});
    const std::string body = kWebhook;
    asio::write(s,
                asio::buffer("POST /hook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Expect: 100-continue\r\nConnection: close\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n"));
    boost::system::error_code ec;
    asio::streambuf head;
    asio::read_until(s, head, "\r\n\r\n", ec);
    reply = std::string(asio::buffers_begin(head.data()), asio::buffers_end(head.data()));
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 100 Continue"));
    asio::write(s, asio::buffer(body));
    std::string rest;
    asio::read(s, asio::dynamic_buffer(rest), ec);
    reply += rest;
  }
  asio::post(io, [&] {
    (*rx)->stop();
    work.reset();
    io.stop();
  });
  server.join();
  CHECK_THAT(reply, Catch::Contains("HTTP/1.1 200 OK"));
  CHECK((*rx)->take().size() == 2);
}

TEST_CASE("the webhook receiver's start errors say what is wrong") {
  asio::io_context io;
  for (const char* bad : {"localhost", "127.0.0.1", "localhost:9099", "127.0.0.1:http",
                          "127.0.0.1:70000", "::1:9099"}) {
    INFO(bad);
    auto r = WebhookReceiver::start(io, bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("expected ADDR:PORT, e.g. 127.0.0.1:9099"));
  }
  auto first = WebhookReceiver::start(io, "127.0.0.1:0");
  REQUIRE(first.ok());
  auto second = WebhookReceiver::start(io, (*first)->endpoint());
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(
      second.error().message,
      Catch::Contains("cannot listen for Alertmanager's webhook on " + (*first)->endpoint()));
  CHECK_THAT(second.error().message, Catch::Contains("another process listens there"));
  auto v6 = WebhookReceiver::start(io, "[::1]:0");
  if (v6.ok())
    CHECK((*v6)->endpoint().rfind("[::1]:", 0) == 0);
  else
    CHECK_THAT(v6.error().message, Catch::Contains("[::1]:0"));
}

namespace {

// Prometheus 2.42's answer to /api/v1/rules?type=alert: a firing alert (for: 30s), a pending
// one, and a second group with a longer interval.
const char* kRules = R"({"status":"success","data":{"groups":[
  {"name":"rdma","file":"/etc/prometheus/rdma.yml","interval":1,"limit":0,"evaluationTime":0.0003,
   "lastEvaluation":"2026-11-26T14:30:02.000000001Z","rules":[
    {"state":"firing","name":"RdmaLinkDown","query":"rdma_link_up == 0","duration":30,
     "labels":{"severity":"page"},"annotations":{},"health":"ok","evaluationTime":0.0001,
     "lastEvaluation":"2026-11-26T14:30:02Z","type":"alerting","alerts":[
       {"labels":{"alertname":"RdmaLinkDown","instance":"n2:9465","severity":"page"},"annotations":{},
        "state":"firing","activeAt":"2026-11-26T14:29:31.25Z","value":"0e+00"},
       {"labels":{"alertname":"RdmaLinkDown","instance":"n3:9465","severity":"page"},"annotations":{},
        "state":"pending","activeAt":"2026-11-26T14:30:01Z","value":"0e+00"}]},
    {"state":"inactive","name":"RdmaPfcStorm","query":"x","duration":0,"labels":{},"annotations":{},
     "alerts":[],"health":"ok","type":"alerting"}]},
  {"name":"slow","file":"/etc/prometheus/slow.yml","interval":15.5,"rules":[]}]}})";

const char* kTargets = R"({"status":"success","data":{"activeTargets":[
  {"discoveredLabels":{},"labels":{"job":"a"},"scrapePool":"a","scrapeUrl":"http://127.0.0.1:9090/metrics",
   "globalUrl":"http://h:9090/metrics","lastError":"","lastScrape":"2026-11-26T14:30:01Z",
   "lastScrapeDuration":0.002,"health":"up","scrapeInterval":"15s","scrapeTimeout":"10s"},
  {"labels":{"job":"b"},"scrapeInterval":"1m30s","scrapeTimeout":"10s"},
  {"labels":{"job":"c"},"scrapeInterval":"250ms","scrapeTimeout":"200ms"}],"droppedTargets":[]}})";

}  // namespace

// activeAt near the end of int64 nanoseconds plus a long `for`: the start saturates, never wraps
// to a time in the past (which would count as a detection before the fault).
TEST_CASE("Prometheus's activeAt + for saturates instead of overflowing") {
  const char* rules = R"({"status":"success","data":{"groups":[{"interval":1,"rules":[{"type":"alerting",
    "duration":31536000,"alerts":[{"state":"firing","labels":{"a":"b"},"activeAt":"2261-12-31T23:59:59Z"}]}]}]}})";
  auto r = parsePrometheusRules(rules, 7);
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  REQUIRE(r->firing.size() == 1);
  CHECK(r->firing[0].startsAtUnixNs == INT64_MAX);
}

TEST_CASE("Prometheus's rules answer: firing alerts, their start, the evaluation interval") {
  auto r = parsePrometheusRules(kRules, 7);
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  CHECK(r->evaluationIntervalNs == 15'500'000'000);
  CHECK(r->pending == 1);
  REQUIRE(r->firing.size() == 1);
  const AlertEvent& ev = r->firing[0];
  CHECK(ev.firing);
  CHECK(ev.labels.at("instance") == "n2:9465");
  CHECK(ev.startsAtUnixNs == (k143001 + 0) * kS + 250'000'000);  // activeAt + for: 30s
  CHECK(ev.endsAtUnixNs == 0);
  CHECK(ev.receivedUnixNs == 7);
  CHECK(ev.source == "prometheus");
  CHECK(ev.fingerprint == R"({alertname="RdmaLinkDown", instance="n2:9465", severity="page"})");

  auto empty = parsePrometheusRules(R"({"status":"success","data":{"groups":[]}})", 0);
  REQUIRE(empty.ok());
  CHECK(empty->evaluationIntervalNs == 0);
  CHECK(empty->firing.empty());
}

TEST_CASE("bad rules answers are errors naming the field") {
  struct Case {
    std::string body, error;
  };
  auto c = GENERATE(values<Case>({
      {"<html>", "the answer is not JSON"},
      {R"({"status":"error","errorType":"bad_data","error":"invalid parameter"})",
       "Prometheus answered status \"error\" (bad_data): invalid parameter"},
      {R"({"status":"success"})", "data: missing or not an object"},
      {R"({"status":"success","data":{}})", "data.groups: missing"},
      {R"({"status":"success","data":{"groups":[{"rules":[]}]}})",
       "data.groups[0].interval: missing"},
      {R"({"status":"success","data":{"groups":[{"interval":"1s","rules":[]}]}})",
       "data.groups[0].interval: expected seconds, got string"},
      {R"({"status":"success","data":{"groups":[{"interval":1,"rules":[{"type":"alerting","alerts":[]}]}]}})",
       "data.groups[0].rules[0].duration: missing"},
      {R"({"status":"success","data":{"groups":[{"interval":1,"rules":[{"duration":0,"alerts":[{"state":"firing","labels":{"a":2},"activeAt":"2026-11-26T14:30:01Z"}]}]}]}})",
       "data.groups[0].rules[0].alerts[0].labels.a: expected a string, got number"},
      {R"({"status":"success","data":{"groups":[{"interval":1,"rules":[{"duration":0,"alerts":[{"state":"firing","labels":{},"activeAt":"soon"}]}]}]}})",
       "data.groups[0].rules[0].alerts[0].activeAt: \"soon\" is not an RFC 3339 time"},
  }));
  INFO(c.body);
  auto r = parsePrometheusRules(c.body, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains(c.error));
}

TEST_CASE("the targets answer's longest scrape interval") {
  auto r = parseTargetsScrapeInterval(kTargets);
  INFO((r.ok() ? "" : r.error().message));
  REQUIRE(r.ok());
  CHECK(*r == 90 * kS);
  auto none = parseTargetsScrapeInterval(
      R"({"status":"success","data":{"activeTargets":[],"droppedTargets":[]}})");
  REQUIRE(none.ok());
  CHECK(*none == 0);
  auto bad = parseTargetsScrapeInterval(
      R"({"status":"success","data":{"activeTargets":[{"scrapeInterval":"fast"}]}})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message,
             Catch::Contains(
                 "data.activeTargets[0].scrapeInterval: \"fast\" is not a Prometheus duration"));
  auto old = parseTargetsScrapeInterval(
      R"({"status":"success","data":{"activeTargets":[{"labels":{}}]}})");
  REQUIRE_FALSE(old.ok());
  CHECK_THAT(old.error().message, Catch::Contains("data.activeTargets[0].scrapeInterval: missing"));
}

TEST_CASE("Prometheus URLs") {
  auto u = parsePrometheusUrl("http://127.0.0.1:9090");
  REQUIRE(u.ok());
  CHECK(u->host == "127.0.0.1");
  CHECK(u->port == 9090);
  CHECK(u->prefix.empty());
  CHECK(u->text() == "http://127.0.0.1:9090");
  u = parsePrometheusUrl("http://[::1]:9090/prometheus/");
  REQUIRE(u.ok());
  CHECK(u->host == "::1");
  CHECK(u->prefix == "/prometheus");
  CHECK(u->text() == "http://[::1]:9090/prometheus");
  u = parsePrometheusUrl("http://prom.lab");
  REQUIRE(u.ok());
  CHECK(u->port == 80);

  auto https = parsePrometheusUrl("https://prom.lab:9090");
  REQUIRE_FALSE(https.ok());
  CHECK_THAT(https.error().message, Catch::Contains("https is not supported"));
  for (const char* bad :
       {"", "prom.lab:9090", "http://", "http://:9090", "http://h:", "http://h:0", "http://h:99999",
        "http://u:p@h:9090", "http://h:9090/?x=1", "http://[::1:9090", "http://h h:1"}) {
    INFO(bad);
    auto r = parsePrometheusUrl(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("expected http://HOST:PORT[/prefix]"));
  }
}

TEST_CASE("the poller counts an unreachable Prometheus and goes on polling") {
  asio::io_context io;
  // A port nothing listens on: bound, read and closed again.
  uint16_t port;
  {
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  PrometheusPollerOptions options;
  options.interval = 50ms;
  int polls = 0;
  options.onPoll = [&] {
    if (++polls == 3) io.stop();
  };
  auto poller = PrometheusPoller::start(io, "http://127.0.0.1:" + std::to_string(port), options);
  REQUIRE(poller.ok());
  io.run_for(20s);
  CHECK(polls == 3);
  CHECK((*poller)->polls() == 0);
  CHECK((*poller)->failedPolls() >= 3);
  REQUIRE_FALSE((*poller)->errors().empty());
  CHECK_THAT((*poller)->errors().back(), Catch::Contains("cannot connect"));
  CHECK_FALSE((*poller)->timing().has_value());
  CHECK((*poller)->take().empty());

  auto https = PrometheusPoller::start(io, "https://127.0.0.1:9090");
  REQUIRE_FALSE(https.ok());
  CHECK_THAT(https.error().message, Catch::Contains("https is not supported"));
}

namespace {

// A stand-in Prometheus: answers the targets with TARGETS and each rules request with the
// next of RULES (the last one repeated); a body "500" is answered with HTTP 500.
struct FakePrometheus {
  std::string targets;
  std::vector<std::string> rules;
  size_t rulesServed = 0;
};

asio::awaitable<void> serveFake(std::shared_ptr<FakePrometheus> fake,
                                asio::ip::tcp::socket socket) {
  namespace http = boost::beast::http;
  boost::beast::flat_buffer buffer;
  http::request<http::string_body> req;
  boost::system::error_code ec;
  co_await http::async_read(socket, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  std::string body;
  if (req.target().starts_with("/api/v1/targets")) {
    body = fake->targets;
  } else {
    body = fake->rules[std::min(fake->rulesServed, fake->rules.size() - 1)];
    fake->rulesServed++;
  }
  http::response<http::string_body> res{
      body == "500" ? http::status::internal_server_error : http::status::ok, 11};
  res.body() = body;
  res.keep_alive(false);
  res.prepare_payload();
  co_await http::async_write(socket, res, asio::redirect_error(asio::use_awaitable, ec));
}

asio::awaitable<void> acceptFake(std::shared_ptr<FakePrometheus> fake,
                                 std::shared_ptr<asio::ip::tcp::acceptor> acceptor) {
  for (;;) {
    boost::system::error_code ec;
    auto socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    asio::co_spawn(acceptor->get_executor(), serveFake(fake, std::move(socket)), asio::detached);
  }
}

std::string rulesWith(const std::string& alerts) {
  return R"({"status":"success","data":{"groups":[{"name":"g","interval":2,"rules":[{"type":"alerting","name":"A",)"
         R"("duration":1.5,"alerts":[)" +
         alerts + "]}]}]}}";
}

std::string alertA(const std::string& instance, const std::string& activeAt,
                   const std::string& state = "firing") {
  return R"({"labels":{"alertname":"A","instance":")" + instance + R"("},"state":")" + state +
         R"(","activeAt":")" + activeAt + R"("})";
}

}  // namespace

TEST_CASE(
    "the poller reports each firing once and a resolution when a later good poll no longer sees "
    "it") {
  asio::io_context io;
  auto fake = std::make_shared<FakePrometheus>();
  fake->targets = kTargets;
  const std::string t1 = "2026-11-26T14:30:00Z", t2 = "2026-11-26T14:31:00Z";
  fake->rules = {
      rulesWith(alertA("n1", t1, "pending")),                // 1: pending only
      rulesWith(alertA("n1", t1) + "," + alertA("n2", t1)),  // 2: both fire
      rulesWith(alertA("n1", t1) + "," + alertA("n2", t1)),  // 3: no change
      "500",                                                 // 4: a failed poll resolves nothing
      "{not json",                                           // 5: nor does a bad answer
      rulesWith(alertA("n1", t1)),                           // 6: n2 resolved
      rulesWith(alertA("n1", t2)),                           // 7: n1 resolved and fired again
      rulesWith(""),                                         // 8: n1 resolved
  };
  auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(
      io, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0});
  asio::co_spawn(io, acceptFake(fake, acceptor), asio::detached);

  std::vector<std::vector<AlertEvent>> perPoll;
  std::unique_ptr<PrometheusPoller> poller;
  PrometheusPollerOptions options;
  options.interval = 10ms;
  options.onPoll = [&] {
    perPoll.push_back(poller->take());
    if (perPoll.size() == 9) io.stop();
  };
  auto p = PrometheusPoller::start(
      io, "http://127.0.0.1:" + std::to_string(acceptor->local_endpoint().port()), options);
  REQUIRE(p.ok());
  poller = std::move(*p);
  io.run_for(20s);
  REQUIRE(perPoll.size() == 9);

  auto names = [](const std::vector<AlertEvent>& evs) {
    std::string out;
    for (const auto& e : evs) out += (e.firing ? "+" : "-") + e.labels.at("instance") + " ";
    return out;
  };
  CHECK(names(perPoll[0]) == "");
  CHECK(names(perPoll[1]) == "+n1 +n2 ");
  CHECK(names(perPoll[2]) == "");
  CHECK(names(perPoll[3]) == "");
  CHECK(names(perPoll[4]) == "");
  CHECK(names(perPoll[5]) == "-n2 ");
  CHECK(names(perPoll[6]) == "-n1 +n1 ");
  CHECK(names(perPoll[7]) == "-n1 ");
  CHECK(names(perPoll[8]) == "");

  const AlertEvent& fired = perPoll[1][0];
  CHECK(fired.startsAtUnixNs == (k143001 - 1) * kS + 1'500'000'000);  // activeAt + for: 1.5s
  CHECK(fired.source == "prometheus");
  const AlertEvent& resolved = perPoll[5][0];
  CHECK(resolved.fingerprint == perPoll[1][1].fingerprint);
  CHECK(resolved.startsAtUnixNs == perPoll[1][1].startsAtUnixNs);
  CHECK(resolved.endsAtUnixNs == resolved.receivedUnixNs);
  CHECK(resolved.endsAtUnixNs >= perPoll[1][1].receivedUnixNs);
  CHECK(perPoll[6][1].startsAtUnixNs == (k143001 + 59) * kS + 1'500'000'000);

  CHECK(poller->polls() == 7);
  CHECK(poller->failedPolls() == 2);
  REQUIRE(poller->errors().size() == 2);
  CHECK_THAT(poller->errors()[0], Catch::Contains("/api/v1/rules?type=alert: HTTP 500"));
  CHECK_THAT(poller->errors()[1], Catch::Contains("the answer is not JSON"));
  auto timing = poller->timing();
  REQUIRE(timing.has_value());
  CHECK(timing->scrapeIntervalNs == 90 * kS);
  CHECK(timing->evaluationIntervalNs == 2 * kS);
  CHECK(fake->rulesServed >= 8);
}

}  // namespace test_alerts
