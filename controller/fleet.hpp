// Sessions from the controller to its agents: TLS connect with deadlines, request/reply
// multiplexing, unsolicited events, clock offset probes and heartbeats. One io_context.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/result.hpp"
#include "controller/inventory.hpp"

namespace rc::controller {

using json = nlohmann::json;
using Duration = std::chrono::steady_clock::duration;

class AgentClient {
 public:
  AgentClient(boost::asio::io_context& io, boost::asio::ssl::context& tls, Node node,
              std::string controllerId);
  ~AgentClient();

  // TCP connect, TLS handshake (the agent's certificate must name this node), hello.
  boost::asio::awaitable<Result<void>> connect(Duration timeout);
  // One request and its reply body (or the agent's error).
  boost::asio::awaitable<Result<json>> request(std::string type, json body, Duration timeout);
  // NTP-style probes; keeps the minimum-RTT estimate.
  boost::asio::awaitable<Result<ClockEstimate>> probeClock(int probes, Duration timeout);
  // Sends heartbeats every lease/3 until close(); a failure is reported through onLost.
  void startHeartbeats();
  void close();

  // Adds a handler for unsolicited messages from the agent ("fault_ended", "telemetry",
  // "workload_ended"); every handler sees every message.
  void onEvent(std::function<void(const json&)> handler);
  void onLost(std::function<void(const std::string& why)> handler);

  const Node& node() const;
  const json& hello() const;  // the agent's hello reply (version, capabilities)
  const ClockEstimate& clock() const;
  bool connected() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// All agents of a selection, connected concurrently.
class Fleet {
 public:
  Fleet(boost::asio::io_context& io, boost::asio::ssl::context& tls, std::string controllerId);
  // Connects to every node concurrently and probes clocks. Nodes that fail are reported in
  // errors() and left out of clients().
  boost::asio::awaitable<void> connect(const std::vector<const Node*>& nodes, Duration timeout,
                                       int clockProbes = 8);
  std::vector<std::shared_ptr<AgentClient>>& clients() { return clients_; }
  const std::vector<std::pair<std::string, std::string>>& errors() const { return errors_; }
  std::shared_ptr<AgentClient> find(const std::string& node) const;

 private:
  boost::asio::io_context& io_;
  boost::asio::ssl::context& tls_;
  std::string controllerId_;
  std::vector<std::shared_ptr<AgentClient>> clients_;
  std::vector<std::pair<std::string, std::string>> errors_;
};

// Runs every task concurrently on IO and returns when all have finished.
boost::asio::awaitable<void> whenAll(boost::asio::io_context& io,
                                     std::vector<std::function<boost::asio::awaitable<void>()>> tasks);

// A controller id unique to this run: host name, pid and a random suffix.
std::string newControllerId();

}  // namespace rc::controller
