// The webhook receiver's server: an accept loop and one coroutine per connection, all on the
// caller's io_context; the shared Impl outlives the object until its coroutines have ended.
#include "alerts/webhook_receiver.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <charconv>
#include <deque>
#include <map>

#include "common/clock.hpp"

namespace rc::alerts {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct WebhookReceiver::Impl {
  Impl(asio::io_context& ioc, WebhookReceiverOptions opts)
      : io(ioc), options(std::move(opts)), acceptor(ioc) {}

  asio::io_context& io;
  WebhookReceiverOptions options;
  tcp::acceptor acceptor;
  tcp::endpoint bound;
  bool stopped = false;
  std::vector<AlertEvent> queue;
  size_t queuedBytes = 0;
  std::map<std::string, size_t> perClient;  // open connections by remote address
  std::deque<std::string> errors;
  uint64_t good = 0, bad = 0;
  uint64_t nextConnection = 0;
  std::map<uint64_t, beast::tcp_stream*> connections;  // open ones, for stop()

  void keepError(std::string e) {
    errors.push_back(std::move(e));
    while (errors.size() > options.keptErrors) errors.pop_front();
  }
  void notePost() {
    if (options.onPost) options.onPost();
  }
};

namespace {

using ReceiverImpl = WebhookReceiver::Impl;

// What an event holds in memory, roughly: its labels and text, and the record itself.
size_t eventBytes(const AlertEvent& e) {
  size_t n = sizeof(AlertEvent) + e.fingerprint.size() + e.source.size();
  for (const auto& [k, v] : e.labels) n += k.size() + v.size() + 64;
  return n;
}

// Compares every byte whatever the first difference: the time says nothing of the token.
bool sameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); i++) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

Result<tcp::endpoint> parseEndpoint(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return makeError(
        "webhook endpoint \"" + std::string(text) + "\": " + why +
        " (expected ADDR:PORT, e.g. 127.0.0.1:9099, or [::1]:9099; port 0 picks a free one)");
  };
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = text.substr(0, colon), portText = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string_view::npos)
    return bad("an IPv6 address needs brackets");
  unsigned port = 0;
  auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (portText.empty() || ec != std::errc() || end != portText.data() + portText.size() ||
      port > 65535)
    return bad("\"" + std::string(portText) + "\" is not a port number");
  boost::system::error_code aec;
  auto addr = asio::ip::make_address(std::string(host), aec);
  if (aec) return bad("\"" + std::string(host) + "\" is not an IP address");
  return tcp::endpoint(addr, uint16_t(port));
}

std::string endpointText(const tcp::endpoint& ep) {
  const std::string a = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + a + "]" : a) + ":" + std::to_string(ep.port());
}

http::response<http::string_body> answer(http::status status, std::string text, bool keepAlive) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "rdmachaos");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  if (status == http::status::method_not_allowed) res.set(http::field::allow, "POST");
  res.keep_alive(keepAlive);
  res.body() = std::move(text) + "\n";
  res.prepare_payload();
  return res;
}

// After refusing a body we have not read, close gracefully: a close with unread data sends a
// reset, which can reach the client before our 413 and hide it. Read and drop what the
// client still sends, for a bounded time and amount.
asio::awaitable<void> drainAndClose(beast::tcp_stream& stream, size_t maxBytes) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(std::chrono::seconds(2));
  char sink[16384];
  for (size_t total = 0; total < maxBytes;) {
    size_t n = co_await stream.async_read_some(asio::buffer(sink),
                                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    total += n;
  }
  stream.socket().close(ec);
}

asio::awaitable<void> serveConnection(std::shared_ptr<ReceiverImpl> impl, tcp::socket socket) {
  boost::system::error_code ec;
  std::string peer = "unknown peer";
  if (auto ep = socket.remote_endpoint(ec); !ec) peer = endpointText(ep);
  std::string client = peer;
  if (auto ep = socket.remote_endpoint(ec); !ec) client = ep.address().to_string();
  beast::tcp_stream stream(std::move(socket));
  const uint64_t id = impl->nextConnection++;
  impl->connections.emplace(id, &stream);
  impl->perClient[client]++;
  struct Unregister {
    ReceiverImpl& impl;
    uint64_t id;
    std::string client;
    ~Unregister() {
      impl.connections.erase(id);
      if (auto it = impl.perClient.find(client); it != impl.perClient.end() && --it->second == 0)
        impl.perClient.erase(it);
    }
  } unregister{*impl, id, client};

  beast::flat_buffer buffer;
  while (!impl->stopped) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(impl->options.maxBodyBytes);
    // One deadline for the whole request: the stream's expiry holds across operations.
    stream.expires_after(impl->options.readTimeout);
    co_await http::async_read_header(stream, buffer, parser,
                                     asio::redirect_error(asio::use_awaitable, ec));
    // curl (not Alertmanager) asks before sending a body over 1 KiB, and waits a second
    // for an answer that never comes unless we give it.
    if (!ec && parser.get().method() == http::verb::post &&
        beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> cont{http::status::continue_, 11};
      co_await http::async_write(stream, cont, asio::redirect_error(asio::use_awaitable, ec));
    }
    if (!ec && !parser.is_done())
      co_await http::async_read(stream, buffer, parser,
                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof || impl->stopped)
      break;
    auto& req = parser.get();
    const std::string what =
        std::string(req.method_string()) + " " + std::string(req.target()) + " from " + peer;
    if (ec == http::error::body_limit) {
      impl->bad++;
      std::string size = req.has_content_length()
                             ? req[http::field::content_length].to_string() + " bytes"
                             : "a body";
      std::string msg = what + ": " + size + ", over the bound of " +
                        std::to_string(impl->options.maxBodyBytes) +
                        " bytes (lower Alertmanager's max_alerts, or raise the receiver's bound)";
      impl->keepError(msg);
      impl->notePost();
      auto res = answer(http::status::payload_too_large, msg, false);
      stream.expires_after(impl->options.writeTimeout);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (!ec) co_await drainAndClose(stream, 4 * impl->options.maxBodyBytes);
      break;
    }
    if (ec) {
      // Not HTTP, or broken mid-way: say so if we still can, and close.
      impl->bad++;
      impl->keepError("a request from " + peer + " that is not HTTP/1.1: " + ec.message());
      impl->notePost();
      auto res =
          answer(http::status::bad_request, "not an HTTP/1.1 request: " + ec.message(), false);
      stream.expires_after(impl->options.writeTimeout);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    const bool keepAlive = req.keep_alive();
    http::response<http::string_body> res;
    const std::string auth(req[http::field::authorization]);
    if (!impl->options.bearerToken.empty() &&
        !(auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ") &&
          sameSecret(auth.substr(7), impl->options.bearerToken))) {
      impl->bad++;
      impl->keepError(what + ": refused, " + (auth.empty() ? "no" : "a wrong") +
                      " bearer token (Alertmanager's http_config.authorization.credentials_file)");
      impl->notePost();
      res = answer(http::status::unauthorized, "a bearer token is required", false);
      res.set(http::field::www_authenticate, "Bearer");
      stream.expires_after(impl->options.writeTimeout);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    if (req.method() != http::verb::post) {
      res = answer(http::status::method_not_allowed,
                   "only POST (Alertmanager's webhook) is served here", keepAlive);
    } else {
      auto events = parseAlertmanagerWebhook(req.body(), wallNs(), impl->options.limits);
      if (!events) {
        impl->bad++;
        impl->keepError(what + ": " + events.error().message);
        res = answer(http::status::bad_request, events.error().message, keepAlive);
      } else {
        impl->good++;
        const size_t room = impl->options.maxQueuedEvents -
                            std::min(impl->options.maxQueuedEvents, impl->queue.size());
        size_t kept = 0;
        for (; kept < events->size() && kept < room; kept++) {
          const size_t bytes = eventBytes((*events)[kept]);
          if (impl->queuedBytes + bytes > impl->options.maxQueuedBytes) break;
          impl->queuedBytes += bytes;
          impl->queue.push_back(std::move((*events)[kept]));
        }
        if (kept < events->size())
          impl->keepError(what + ": dropped " + std::to_string(events->size() - kept) + " of its " +
                          std::to_string(events->size()) + " alerts: " + std::to_string(impl->queue.size()) +
                          " events (" + std::to_string(impl->queuedBytes) +
                          " bytes) wait to be taken (the bound)");
        res = answer(http::status::ok, "ok: " + std::to_string(events->size()) + " alert(s)",
                     keepAlive);
      }
      impl->notePost();
    }
    stream.expires_after(impl->options.writeTimeout);
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !keepAlive) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.socket().close(ec);
}

asio::awaitable<void> acceptLoop(std::shared_ptr<ReceiverImpl> impl) {
  while (!impl->stopped) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await impl->acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (impl->stopped || ec == asio::error::operation_aborted || !impl->acceptor.is_open())
      co_return;
    if (ec) {
      // Out of descriptors the listener stays ready: pause rather than spin.
      impl->keepError("accepting a connection: " + ec.message());
      asio::steady_timer pause(impl->io, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    std::string peer = "unknown peer", client = peer;
    if (auto ep = socket.remote_endpoint(ec); !ec) peer = endpointText(ep), client = ep.address().to_string();
    if (impl->connections.size() >= impl->options.maxConnections) {
      impl->keepError("refused a connection from " + peer + ": " +
                      std::to_string(impl->connections.size()) + " connections open (the bound)");
      socket.close(ec);
      continue;
    }
    if (auto it = impl->perClient.find(client);
        it != impl->perClient.end() && it->second >= impl->options.maxConnectionsPerClient) {
      impl->keepError("refused a connection from " + peer + ": " + std::to_string(it->second) + " open from " +
                      client + " (the bound per client)");
      socket.close(ec);
      continue;
    }
    asio::co_spawn(
        impl->io, serveConnection(impl, std::move(socket)), [impl](std::exception_ptr p) {
          // Every error is a value above; this is for the unforeseen (bad_alloc), kept not thrown.
          if (!p) return;
          try {
            std::rethrow_exception(p);
          } catch (const std::exception& e) {
            impl->keepError(std::string("a connection ended by an exception: ") + e.what());
          } catch (...) {
            impl->keepError("a connection ended by an unknown exception");
          }
        });
  }
}

}  // namespace

Result<std::string> readTokenFile(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "re");
  if (!f) return makeError("cannot read '" + file + "': " + std::strerror(errno), errno);
  char buf[4097];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  if (n > 4096) return makeError("'" + file + "' is longer than 4 KiB: a bearer token file holds one token");
  std::string token(buf, n);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return makeError("'" + file + "' is empty: write the token in it");
  for (char c : token)
    if (c < 0x21 || c > 0x7e)
      return makeError("'" + file + "' holds more than one line or a character that is not printable ASCII: "
                       "a bearer token file holds the token alone");
  return token;
}

WebhookReceiver::WebhookReceiver(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

WebhookReceiver::~WebhookReceiver() { stop(); }

Result<std::unique_ptr<WebhookReceiver>> WebhookReceiver::start(asio::io_context& io,
                                                                std::string_view endpoint,
                                                                WebhookReceiverOptions options) {
  auto ep = parseEndpoint(endpoint);
  if (!ep) return ep.error();
  auto impl = std::make_shared<Impl>(io, std::move(options));
  boost::system::error_code ec;
  auto fail = [&](const std::string& step) {
    std::string hint;
    if (ec == asio::error::address_in_use)
      hint = " (another process listens there: pick another port, or 0 for a free one)";
    else if (ec.value() == EADDRNOTAVAIL)
      hint = " (no interface of this host has that address)";
    else if (ec == asio::error::access_denied)
      hint = " (ports below 1024 need privileges)";
    return makeError("cannot listen for Alertmanager's webhook on " + endpointText(*ep) + ": " +
                         step + ": " + ec.message() + hint,
                     ec.value());
  };
  impl->acceptor.open(ep->protocol(), ec);
  if (ec) return fail("socket");
  impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) return fail("SO_REUSEADDR");
  impl->acceptor.bind(*ep, ec);
  if (ec) return fail("bind");
  impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  impl->bound = impl->acceptor.local_endpoint(ec);
  if (ec) return fail("getsockname");
  asio::co_spawn(io, acceptLoop(impl), [impl](std::exception_ptr p) {
    if (p)
      impl->keepError("the webhook listener stopped by an exception; no more posts are received");
  });
  return std::unique_ptr<WebhookReceiver>(new WebhookReceiver(std::move(impl)));
}

uint16_t WebhookReceiver::port() const { return impl_->bound.port(); }

std::string WebhookReceiver::endpoint() const { return endpointText(impl_->bound); }

std::vector<AlertEvent> WebhookReceiver::take() {
  impl_->queuedBytes = 0;
  return std::exchange(impl_->queue, {});
}

bool WebhookReceiver::loopbackOnly(std::string_view endpoint) {
  auto ep = parseEndpoint(endpoint);
  return ep && ep->address().is_loopback();
}

std::vector<std::string> WebhookReceiver::errors() const {
  return {impl_->errors.begin(), impl_->errors.end()};
}

uint64_t WebhookReceiver::goodPosts() const { return impl_->good; }

uint64_t WebhookReceiver::badPosts() const { return impl_->bad; }

void WebhookReceiver::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  // Closing cancels each connection's pending read or write; its coroutine then ends and
  // unregisters itself.
  for (auto& [id, stream] : impl_->connections) stream->socket().close(ec);
}

}  // namespace rc::alerts
