// The poller's loop: one coroutine on the caller's io_context, owning a shared Impl that the
// PrometheusPoller object only points at, so that stop() and destruction never race a poll.
#include "alerts/prometheus_poller.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <map>

#include "alerts/http_client.hpp"
#include "common/clock.hpp"

namespace rc::alerts {

namespace asio = boost::asio;

struct PrometheusPoller::Impl {
  Impl(asio::io_context& ioc, PrometheusUrl u, PrometheusPollerOptions opts)
      : io(ioc), url(std::move(u)), options(std::move(opts)), timer(ioc) {}

  asio::io_context& io;
  PrometheusUrl url;
  PrometheusPollerOptions options;
  asio::steady_timer timer;
  bool stopped = false;
  std::vector<AlertEvent> queue;
  std::deque<std::string> errors;
  uint64_t polls = 0, failed = 0, dropped = 0;
  std::optional<PipelineTiming> timing;
  std::map<std::string, AlertEvent> firing;  // by fingerprint: what the last good poll saw firing

  void enqueue(AlertEvent ev) {
    if (queue.size() >= options.maxQueuedEvents) {
      dropped++;
      if (dropped == 1 || dropped % 1000 == 0)
        keepError("dropped " + std::to_string(dropped) + " alert event(s): " +
                  std::to_string(queue.size()) + " wait to be taken (the bound)");
      return;
    }
    queue.push_back(std::move(ev));
  }

  void keepError(std::string what) {
    errors.push_back(std::move(what));
    while (errors.size() > options.keptErrors) errors.pop_front();
  }

  void fail(std::string what) {
    failed++;
    keepError(std::move(what));
  }

  HttpRequest get(std::string path) const {
    HttpRequest r;
    r.bearerToken = options.bearerToken;
    r.host = url.host;
    r.port = url.port;
    r.target = url.prefix + std::move(path);
    r.timeout = options.requestTimeout;
    r.maxBodyBytes = options.maxResponseBytes;
    return r;
  }

  // This poll's firing alerts against the last poll's: new ones fire, missing ones resolve.
  void update(std::vector<AlertEvent> now, int64_t nowNs) {
    std::map<std::string, AlertEvent> seen;
    for (auto& ev : now) seen.emplace(ev.fingerprint, std::move(ev));
    for (auto it = firing.begin(); it != firing.end();) {
      auto cur = seen.find(it->first);
      // The same labels with a new activeAt: it resolved and fired again between two polls.
      if (cur == seen.end() || cur->second.startsAtUnixNs != it->second.startsAtUnixNs) {
        AlertEvent resolved = it->second;
        resolved.firing = false;
        resolved.endsAtUnixNs = nowNs;
        resolved.receivedUnixNs = nowNs;
        enqueue(std::move(resolved));
        it = firing.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [fp, ev] : seen) {
      if (firing.count(fp)) continue;
      enqueue(ev);
      firing.emplace(fp, std::move(ev));
    }
  }

  // Each interval is read until known (non-zero), then kept: Prometheus says it is ready
  // before its service discovery has found the targets.
  void noteTiming(std::optional<int64_t> scrapeNs, std::optional<int64_t> evaluationNs) {
    if (!timing) {
      if (!evaluationNs) return;
      timing = PipelineTiming{
          .scrapeIntervalNs = 0, .evaluationIntervalNs = 0, .source = "prometheus " + url.text()};
    }
    if (scrapeNs && timing->scrapeIntervalNs == 0) timing->scrapeIntervalNs = *scrapeNs;
    if (evaluationNs && timing->evaluationIntervalNs == 0)
      timing->evaluationIntervalNs = *evaluationNs;
  }
};

namespace {

using PollerImpl = PrometheusPoller::Impl;

// GET PATH and its body, or why not, as an error naming the URL.
asio::awaitable<Result<std::string>> fetchBody(std::shared_ptr<PollerImpl> impl, std::string path) {
  const std::string what = "GET " + impl->url.text() + path;
  auto r = co_await httpRequest(impl->get(path));
  if (!r) co_return makeError(r.error().message);
  if (r->status != 200)
    co_return makeError(what + ": HTTP " + std::to_string(r->status) + ": " +
                        r->body.substr(0, 300));
  co_return std::move(r->body);
}

asio::awaitable<void> pollOnce(std::shared_ptr<PollerImpl> impl) {
  static const std::string kTargets = "/api/v1/targets?state=active",
                           kRules = "/api/v1/rules?type=alert";
  std::optional<int64_t> scrapeNs;
  if (!impl->timing || impl->timing->scrapeIntervalNs == 0) {
    auto body = co_await fetchBody(impl, kTargets);
    if (impl->stopped) co_return;
    if (!body) {
      impl->fail(body.error().message);
    } else if (auto si = parseTargetsScrapeInterval(*body); !si) {
      impl->fail("GET " + impl->url.text() + kTargets + ": " + si.error().message);
    } else {
      scrapeNs = *si;
    }
  }
  auto body = co_await fetchBody(impl, kRules);
  if (impl->stopped) co_return;
  const int64_t answeredNs = wallNs();
  if (!body) {
    impl->fail(body.error().message);
    co_return;
  }
  auto rules = parsePrometheusRules(*body, answeredNs);
  if (!rules) {
    impl->fail("GET " + impl->url.text() + kRules + ": " + rules.error().message);
    co_return;
  }
  impl->polls++;
  impl->noteTiming(scrapeNs, rules->evaluationIntervalNs);
  impl->update(std::move(rules->firing), answeredNs);
}

asio::awaitable<void> pollLoop(std::shared_ptr<PollerImpl> impl) {
  while (!impl->stopped) {
    co_await pollOnce(impl);
    if (impl->stopped) break;
    if (impl->options.onPoll) impl->options.onPoll();
    boost::system::error_code ec;
    impl->timer.expires_after(impl->options.interval);
    co_await impl->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace

PrometheusPoller::PrometheusPoller(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

PrometheusPoller::~PrometheusPoller() { stop(); }

Result<std::unique_ptr<PrometheusPoller>> PrometheusPoller::start(asio::io_context& io,
                                                                  std::string_view url,
                                                                  PrometheusPollerOptions options) {
  auto parsed = parsePrometheusUrl(url);
  if (!parsed) return parsed.error();
  auto impl = std::make_shared<Impl>(io, std::move(*parsed), std::move(options));
  asio::co_spawn(io, pollLoop(impl), [impl](std::exception_ptr p) {
    // Every failure is a value in the loop; this is for the unforeseen (bad_alloc).
    if (p) impl->fail("polling " + impl->url.text() + " stopped by an exception");
  });
  return std::unique_ptr<PrometheusPoller>(new PrometheusPoller(std::move(impl)));
}

std::vector<AlertEvent> PrometheusPoller::take() { return std::exchange(impl_->queue, {}); }

std::optional<PipelineTiming> PrometheusPoller::timing() const { return impl_->timing; }

std::vector<std::string> PrometheusPoller::errors() const {
  return {impl_->errors.begin(), impl_->errors.end()};
}

uint64_t PrometheusPoller::polls() const { return impl_->polls; }

uint64_t PrometheusPoller::failedPolls() const { return impl_->failed; }

std::string PrometheusPoller::url() const { return impl_->url.text(); }

void PrometheusPoller::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->timer.cancel();
}

}  // namespace rc::alerts
