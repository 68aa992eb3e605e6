// The Beast client behind httpRequest: the stream's own expiry covers connect, write and read;
// a timer covers name resolution, which the stream does not see and which runs on a thread.
#include "alerts/http_client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "common/unique_fd.hpp"

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
    // getaddrinfo blocks and cannot be cancelled (asio's resolver runs it on a thread of its own
    // and completes only when it returns, whatever cancel() says): it runs on a detached thread
    // here, which wakes this coroutine through an eventfd; at the deadline the coroutine goes
    // on without it, and the thread ends by itself, touching only what it shares.
    struct Lookup {
      UniqueFD wake;
      std::mutex m;
      bool done = false;
      std::vector<tcp::endpoint> endpoints;
      std::string error;
    };
    auto lookup = std::make_shared<Lookup>();
    lookup->wake = UniqueFD(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (lookup->wake.get() < 0) co_return fail("eventfd: " + std::string(std::strerror(errno)));
    asio::posix::stream_descriptor waiter(ex, ::dup(lookup->wake.get()));
    try {
      std::thread([lookup, host = request.host, port = request.port] {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
        std::lock_guard lock(lookup->m);
        if (rc != 0) {
          lookup->error = ::gai_strerror(rc);
        } else {
          for (addrinfo* a = res; a; a = a->ai_next) {
            if (a->ai_family == AF_INET)
              lookup->endpoints.emplace_back(
                  asio::ip::address_v4(ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr)), port);
            else if (a->ai_family == AF_INET6) {
              asio::ip::address_v6::bytes_type b;
              std::memcpy(b.data(), &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, b.size());
              lookup->endpoints.emplace_back(asio::ip::address_v6(b), port);
            }
          }
          ::freeaddrinfo(res);
        }
        lookup->done = true;
        const uint64_t one = 1;
        (void)!::write(lookup->wake.get(), &one, sizeof one);
      }).detach();
    } catch (const std::system_error& e) {
      co_return fail(std::string("cannot start a name lookup: ") + e.what());
    }
    asio::steady_timer guard(ex, deadline);
    auto live = std::make_shared<bool>(true);
    guard.async_wait([live, &waiter](boost::system::error_code e) {
      if (!e && *live) waiter.cancel();
    });
    co_await waiter.async_wait(asio::posix::stream_descriptor::wait_read,
                               asio::redirect_error(asio::use_awaitable, ec));
    *live = false;
    guard.cancel();
    std::lock_guard lock(lookup->m);
    if (!lookup->done) co_return fail("resolving the name: " + timedOut);
    if (!lookup->error.empty()) co_return fail("cannot resolve \"" + request.host + "\": " + lookup->error);
    endpoints = lookup->endpoints;
    if (endpoints.empty()) co_return fail("cannot resolve \"" + request.host + "\": no address");
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
  if (!request.bearerToken.empty()) req.set(http::field::authorization, "Bearer " + request.bearerToken);
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
