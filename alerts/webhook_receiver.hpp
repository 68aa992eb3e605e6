// An HTTP server for Alertmanager's webhook: every POST's alerts are queued as AlertEvents for
// the run to take; a bad post is answered 400, counted and kept, and never stops the run.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alerts/alert_event.hpp"
#include "alerts/webhook.hpp"
#include "common/result.hpp"

namespace rc::alerts {

struct WebhookReceiverOptions {
  size_t maxBodyBytes = 1 << 20;                  // larger bodies get 413
  std::chrono::milliseconds readTimeout{10'000};  // per request, headers and body
  std::chrono::milliseconds writeTimeout{5'000};  // per answer
  size_t maxConnections = 32;                     // more are closed at once (and kept as errors)
  size_t maxConnectionsPerClient = 4;             // from one address: one client cannot hold every slot
  size_t maxQueuedEvents = 100'000;  // until take(); the excess is dropped, as an error
  size_t maxQueuedBytes = 16 << 20;  // the same, by the events' labels and text
  // Non-empty: a post must carry "Authorization: Bearer TOKEN" (Alertmanager's
  // http_config.authorization with credentials_file); others get 401 and are kept as errors.
  std::string bearerToken;
  size_t keptErrors = 20;            // the last ones, for errors()
  WebhookLimits limits;
  // Called on the io_context after every post, good or bad (a test or a run can wake on it).
  std::function<void()> onPost;
};

// A bearer token from FILE (one line of printable ASCII, at most 4 KiB; a trailing newline
// dropped), as Alertmanager's credentials_file holds it; errors name the file and what is wrong.
Result<std::string> readTokenFile(const std::string& file);

// Single-threaded: every member is called on the io_context's thread. Destroy it before the
// io_context.
class WebhookReceiver {
 public:
  // Whether ENDPOINT's address is a loopback one (only this host can post there).
  static bool loopbackOnly(std::string_view endpoint);
  // Listens on ENDPOINT, "ADDR:PORT" ("127.0.0.1:9099", "[::1]:0"; port 0 picks a free one),
  // serving on IO. Errors: an endpoint that does not parse, or one we cannot listen on.
  static Result<std::unique_ptr<WebhookReceiver>> start(boost::asio::io_context& io,
                                                        std::string_view endpoint,
                                                        WebhookReceiverOptions options = {});
  ~WebhookReceiver();  // stop()s
  WebhookReceiver(const WebhookReceiver&) = delete;
  WebhookReceiver& operator=(const WebhookReceiver&) = delete;

  uint16_t port() const;         // the bound port
  std::string endpoint() const;  // "ADDR:PORT" as bound, e.g. for Alertmanager's webhook url

  // The events received since the last take(), oldest first.
  std::vector<AlertEvent> take();
  // The last keptErrors problems (bad bodies, oversized posts, refused connections, dropped
  // events), oldest first, each saying what and from whom.
  std::vector<std::string> errors() const;
  uint64_t goodPosts() const;
  uint64_t badPosts() const;  // every one since start, not only the kept ones

  // Closes the listener and every open connection; idempotent. Events already queued stay.
  void stop();

  struct Impl;

 private:
  explicit WebhookReceiver(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace rc::alerts
