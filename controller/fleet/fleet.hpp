// Sessions from the controller to its agents: TLS connect with deadlines, request/reply
// multiplexing, unsolicited events, clock offset probes and heartbeats. One io_context.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "common/result.hpp"
#include "controller/fleet/inventory.hpp"

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
  // The same, every step within DEADLINE; a step that runs past it fails with "timed out
  // after TOTAL" (TOTAL: the deadline the caller set, as the user gave it).
  boost::asio::awaitable<Result<void>> connect(std::chrono::steady_clock::time_point deadline,
                                               Duration total);
  // One request and its reply body (or the agent's error).
  boost::asio::awaitable<Result<json>> request(std::string type, json body, Duration timeout);
  // NTP-style probes; keeps the minimum-RTT estimate.
  boost::asio::awaitable<Result<ClockEstimate>> probeClock(int probes, Duration timeout);
  boost::asio::awaitable<Result<ClockEstimate>> probeClock(int probes,
                                                           std::chrono::steady_clock::time_point deadline,
                                                           Duration total);
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

// Where a fleet's connect stands: how many agents answered, failed, and which still wait.
struct ConnectProgress {
  size_t total = 0, connected = 0, failed = 0;
  std::vector<std::string> waiting;  // names of the nodes not finished yet
  Duration elapsed{};
  // tick: a second passed; connected: every connect attempt has finished (some clocks may
  // still be probed); done: the end.
  enum class Event { tick, connected, done } event = Event::tick;
  bool done = false;  // event == done
};
using ConnectProgressFn = std::function<void(const ConnectProgress&)>;
// Prints a progress line to stderr each second while agents are still waited for, and a last
// one if any was printed (a small, quick fleet prints nothing).
ConnectProgressFn stderrConnectProgress();

// All agents of a selection, connected concurrently.
class Fleet {
 public:
  Fleet(boost::asio::io_context& io, boost::asio::ssl::context& tls, std::string controllerId);
  // Connects to every node concurrently and probes each one's clock once it is connected,
  // kClockProbeWindow agents at a time, all within one deadline TIMEOUT from now: an agent that has not connected and answered its probes by then fails with
  // "timed out after TIMEOUT", whichever step it was in. Nodes that fail are reported in
  // errors() and left out of clients(). PROGRESS, if set, is called once a second while
  // agents are still waited for, once when every connect attempt has finished, and once at the
  // end.
  boost::asio::awaitable<void> connect(const std::vector<const Node*>& nodes, Duration timeout,
                                       int clockProbes = 8, ConnectProgressFn progress = {});
  std::vector<std::shared_ptr<AgentClient>>& clients() { return clients_; }
  const std::vector<std::pair<std::string, std::string>>& errors() const { return errors_; }
  std::shared_ptr<AgentClient> find(const std::string& node) const;

 private:
  boost::asio::io_context& io_;
  boost::asio::ssl::context& tls_;
  std::string controllerId_;
  std::vector<std::shared_ptr<AgentClient>> clients_;
  std::vector<std::pair<std::string, std::string>> errors_;
  mutable std::unordered_map<std::string, size_t> byName_;  // index into clients_, rebuilt when stale
};

// At most LIMIT holders at once among the coroutines of one io_context; the others wait in the
// order they came. Every acquire() is matched by one release().
class AsyncGate {
 public:
  AsyncGate(boost::asio::io_context& io, size_t limit);
  boost::asio::awaitable<void> acquire();
  void release();
  size_t holders() const { return holders_; }
  size_t waiting() const { return waiters_.size(); }

 private:
  boost::asio::io_context& io_;
  size_t limit_, holders_ = 0;
  std::deque<std::shared_ptr<boost::asio::steady_timer>> waiters_;  // first come, first served
};

// How many agents measure their clock offset at once in Fleet::connect (see there).
inline constexpr size_t kClockProbeWindow = 16;

// Runs every task concurrently on IO and returns when all have finished.
boost::asio::awaitable<void> whenAll(boost::asio::io_context& io,
                                     std::vector<std::function<boost::asio::awaitable<void>()>> tasks);

// A controller id unique to this run: host name, pid and a random suffix.
std::string newControllerId();

}  // namespace rc::controller
