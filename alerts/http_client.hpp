// One HTTP/1.1 request over Boost.Beast with a deadline on the whole exchange: what the
// Prometheus poller (and the tests, posting to Alertmanager) need, no more.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/result.hpp"

namespace rc::alerts {

struct HttpRequest {
  std::string method = "GET";  // GET or POST
  std::string host;            // a name, an IPv4 address or an IPv6 one (no brackets)
  uint16_t port = 80;
  std::string target = "/";  // path and query
  std::string body;
  std::string contentType;  // for a body
  std::string bearerToken;  // non-empty: sent as "Authorization: Bearer TOKEN"
  // The whole exchange: resolve, connect, send, read the answer.
  std::chrono::milliseconds timeout{2000};
  size_t maxBodyBytes = 16 << 20;  // of the answer
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// An answer of any status is a value; no answer (refused, reset, timed out, over the bound,
// not HTTP) is an error that says which request and why. Runs on the caller's executor.
boost::asio::awaitable<Result<HttpResponse>> httpRequest(HttpRequest request);

}  // namespace rc::alerts
