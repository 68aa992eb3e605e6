// The Beast client behind httpRequest: the stream's own expiry covers connect, write and read;
// a timer covers name resolution, which the stream does not see.
#include "alerts/http_client.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <memory>

namespace rc::alerts {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

asio::awaitable<Result<HttpResponse>> httpRequest(HttpRequest request) {
  auto ex = co_await asio::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + request.timeout;
  const std::string authority =
      (request.host.find(':') != std::string::npos ? "[" + request.host + "]" : request.host) +
      ":" + std::to_string(request.port);
  const std::string what = request.method + " http://" + authority + request.target;
  auto fail = [&](const std::string& why) { return makeError(what + ": " + why); };
  const std::string timedOut =
      "no answer within " + std::to_string(request.timeout.count()) + " ms";

  const http::verb verb = http::string_to_verb(request.method);
  if (verb != http::verb::get && verb != http::verb::post)
    co_return fail("only GET and POST are supported");

  boost::system::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  if (auto addr = asio::ip::make_address(request.host, ec); !ec) {
    endpoints.emplace_back(addr, request.port);
  } else {
    tcp::resolver resolver(ex);
    asio::steady_timer guard(ex, deadline);
    // The guard's handler may run after this frame is gone (it was queued before cancel()):
    // it touches the resolver only while `live` says the frame is still there.
    auto live = std::make_shared<bool>(true);
    guard.async_wait([live, &resolver](boost::system::error_code e) {
      if (!e && *live) resolver.cancel();
    });
    auto results = co_await resolver.async_resolve(request.host, std::to_string(request.port),
                                                   asio::redirect_error(asio::use_awaitable, ec));
    *live = false;
    guard.cancel();
    if (ec == asio::error::operation_aborted) co_return fail("resolving the name: " + timedOut);
    if (ec) co_return fail("cannot resolve \"" + request.host + "\": " + ec.message());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }

  beast::tcp_stream stream(ex);
  stream.expires_at(deadline);
  co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == beast::error::timeout) co_return fail("connecting: " + timedOut);
  if (ec) co_return fail("cannot connect: " + ec.message());

  http::request<http::string_body> req{verb, request.target, 11};
  req.set(http::field::host, authority);
  req.set(http::field::user_agent, "rdmachaos");
  req.set(http::field::connection, "close");
  if (!request.body.empty() || request.method == "POST") {
    if (!request.contentType.empty()) req.set(http::field::content_type, request.contentType);
    req.body() = std::move(request.body);
  }
  req.prepare_payload();
  stream.expires_at(deadline);
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == beast::error::timeout) co_return fail("sending: " + timedOut);
  if (ec) co_return fail("sending the request: " + ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(request.maxBodyBytes);
  stream.expires_at(deadline);
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == beast::error::timeout) co_return fail(timedOut);
  if (ec == http::error::body_limit)
    co_return fail("the answer is over the bound of " + std::to_string(request.maxBodyBytes) +
                   " bytes");
  if (ec) co_return fail("reading the answer: " + ec.message());
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  HttpResponse out;
  out.status = int(parser.get().result_int());
  out.body = std::move(parser.get().body());
  co_return out;
}

}  // namespace rc::alerts
