// Polls a Prometheus server's alerting rules on the caller's io_context and turns what it sees
// into AlertEvents: a firing alert once when first seen firing, a resolved one when a later
// poll no longer sees it. Also reads the pipeline's timing (scrape and evaluation intervals).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alerts/alert_event.hpp"
#include "alerts/prometheus_api.hpp"
#include "common/result.hpp"

namespace rc::alerts {

struct PrometheusPollerOptions {
  std::chrono::milliseconds interval{500};         // from the end of one poll to the next
  std::chrono::milliseconds requestTimeout{2000};  // per HTTP request
  size_t maxResponseBytes = 16 << 20;
  std::string bearerToken;           // non-empty: sent with every request (a proxy in front of Prometheus)
  size_t keptErrors = 20;            // the last ones, for errors()
  size_t maxQueuedEvents = 100'000;  // until take(); the excess is dropped, as an error
  // Called on the io_context after every poll, good or failed (a test or a run can wake on it).
  std::function<void()> onPoll;
};

// Single-threaded: every member is called on the io_context's thread. Destroy it before the
// io_context.
class PrometheusPoller {
 public:
  // Starts polling URL ("http://HOST:PORT[/prefix]") on IO at once. Only a URL that does not
  // parse (or https) is an error; an unreachable server is counted and kept, and polling goes on.
  static Result<std::unique_ptr<PrometheusPoller>> start(boost::asio::io_context& io,
                                                         std::string_view url,
                                                         PrometheusPollerOptions options = {});
  ~PrometheusPoller();  // stop()s
  PrometheusPoller(const PrometheusPoller&) = delete;
  PrometheusPoller& operator=(const PrometheusPoller&) = delete;

  // The events since the last take(), oldest first.
  std::vector<AlertEvent> take();
  // The pipeline's timing from the first successful rules poll on; source "prometheus
  // http://HOST:PORT[/prefix]". An interval stays 0 (unknown) until an answer gives it: the
  // targets are asked again on every poll until one is active (Prometheus reports ready
  // before it has discovered them), the rules until a group exists; then each is kept.
  std::optional<PipelineTiming> timing() const;
  // The last keptErrors failures (server down, HTTP status, bad answer) and dropped events,
  // oldest first.
  std::vector<std::string> errors() const;
  uint64_t polls() const;        // successful rules polls
  uint64_t failedPolls() const;  // every failed request since start
  std::string url() const;       // as parsed, "http://HOST:PORT[/prefix]"

  // Stops polling; idempotent. A request in flight ends within requestTimeout and its answer
  // is dropped. Events already queued stay.
  void stop();

  struct Impl;

 private:
  explicit PrometheusPoller(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace rc::alerts
