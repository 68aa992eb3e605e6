// The agent's TLS server: accepts controllers, speaks the protocol, dispatches to the
// fault manager. One io_context, one coroutine per session.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <memory>

#include "agent/config.hpp"
#include "agent/fault_manager.hpp"
#include "agent/workload_manager.hpp"

namespace rc::agent {

class Server {
 public:
  Server(boost::asio::io_context& io, const Config& config, FaultManager& manager,
         WorkloadManager& workloads, boost::asio::ssl::context& tls);
  ~Server();
  // Binds and starts accepting. Errors name the address and the likely cause.
  Result<void> start();
  // Closes the listener only: sessions go on (to deliver what is queued) until stop().
  void stopAccepting();
  void stop();
  size_t sessionCount() const;

  struct Impl;  // public so the session type in server.cpp can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rc::agent
