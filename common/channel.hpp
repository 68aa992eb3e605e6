// Framed JSON messages over a TLS stream with Asio coroutines, and per-operation deadlines.
// Include only from session code: it pulls in Asio SSL.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <memory>

#include "common/protocol.hpp"

namespace rc {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SslStream = asio::ssl::stream<tcp::socket>;

// Error codes for readMessage: transport errors end the session quietly; protocol errors get
// an error reply first.
inline constexpr int kIoError = -1;
inline constexpr int kProtocolError = -2;

// Closes the socket if the operation in scope does not finish in time. The pending operation
// then completes with an error, so every read, write and handshake has a deadline.
class OpDeadline {
 public:
  OpDeadline(SslStream& stream, std::chrono::steady_clock::duration timeout)
      : timer_(stream.get_executor()), armed_(std::make_shared<bool>(true)) {
    timer_.expires_after(timeout);
    timer_.async_wait([&stream, armed = armed_](boost::system::error_code ec) {
      if (!ec && *armed) {
        boost::system::error_code ignored;
        stream.lowest_layer().close(ignored);
      }
    });
  }
  ~OpDeadline() {
    *armed_ = false;
    timer_.cancel();
  }
  OpDeadline(const OpDeadline&) = delete;
  OpDeadline& operator=(const OpDeadline&) = delete;

 private:
  asio::steady_timer timer_;
  std::shared_ptr<bool> armed_;
};

inline asio::awaitable<Result<proto::json>> readMessage(SslStream& s) {
  unsigned char header[4];
  boost::system::error_code ec;
  co_await asio::async_read(s, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return makeError(ec.message(), kIoError);
  uint32_t n = proto::decodeLength(header);
  if (n > proto::kMaxFrameBytes)
    co_return makeError("message of " + std::to_string(n) + " bytes exceeds the limit of " +
                            std::to_string(proto::kMaxFrameBytes) + " bytes",
                        kProtocolError);
  std::string body(n, '\0');
  co_await asio::async_read(s, asio::buffer(body), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return makeError(ec.message(), kIoError);
  auto j = proto::parseBody(body);
  if (!j) co_return makeError(j.error().message, kProtocolError);
  co_return std::move(*j);
}

inline asio::awaitable<Result<void>> writeFrame(SslStream& s, const std::string& frame) {
  boost::system::error_code ec;
  co_await asio::async_write(s, asio::buffer(frame), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return makeError(ec.message(), kIoError);
  co_return Result<void>{};
}

}  // namespace rc
