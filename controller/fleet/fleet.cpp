// Controller-side agent sessions over TLS with Asio coroutines.
#include "controller/fleet/fleet.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>

#include "common/channel.hpp"
#include "common/log.hpp"
#include "common/tls.hpp"
#include "common/units.hpp"

namespace rc::controller {

using namespace std::chrono_literals;

struct AgentClient::Impl : std::enable_shared_from_this<Impl> {
  struct Pending {
    explicit Pending(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
    std::optional<json> reply;
    std::string failure;
  };

  asio::io_context& io;
  asio::ssl::context& tls;
  Node node;
  std::string controllerId;
  std::unique_ptr<SslStream> stream;
  bool open = false;
  bool closing = false;
  uint64_t nextId = 1;
  std::map<uint64_t, std::shared_ptr<Pending>> pending;
  std::deque<std::string> outbox;
  asio::steady_timer wake;
  asio::steady_timer heartbeatTimer;
  json helloReply;
  ClockEstimate clock;
  int64_t leaseMs = 5000;
  std::vector<std::function<void(const json&)>> eventHandlers;
  std::function<void(const std::string&)> lostHandler;

  Impl(asio::io_context& i, asio::ssl::context& t, Node n, std::string id)
      : io(i), tls(t), node(std::move(n)), controllerId(std::move(id)), wake(i), heartbeatTimer(i) {}

  std::string name() const { return node.name + " (" + node.address + ":" + std::to_string(node.port) + ")"; }

  void fail(const std::string& why) {
    bool wasOpen = open;
    open = false;
    for (auto& [id, p] : pending) {
      p->failure = why;
      p->timer.cancel();
    }
    wake.cancel();
    heartbeatTimer.cancel();
    if (wasOpen && !closing && lostHandler) lostHandler(why);
  }

  asio::awaitable<void> reader() {
    auto self = shared_from_this();
    while (open) {
      auto msg = co_await readMessage(*stream);
      if (!msg) {
        fail(closing ? "closed" : "connection lost: " + msg.error().message);
        break;
      }
      const json& m = *msg;
      uint64_t id = m.contains("id") && m["id"].is_number_unsigned() ? m["id"].get<uint64_t>() : 0;
      if (id != 0) {
        if (auto it = pending.find(id); it != pending.end()) {
          it->second->reply = m;
          it->second->timer.cancel();
        }
        continue;
      }
      if (m.value("type", "") == "error")
        log::warn("{} reported: {}", node.name, m.value("message", std::string("?")));
      else
        for (auto& h : std::vector(eventHandlers)) h(m);
    }
  }

  asio::awaitable<void> writer() {
    auto self = shared_from_this();
    while (open || (!outbox.empty() && stream)) {
      while (!outbox.empty() && open) {
        std::string frame = std::move(outbox.front());
        outbox.pop_front();
        Result<void> r;
        {
          OpDeadline d(*stream, 10s);
          r = co_await writeFrame(*stream, frame);
        }
        if (!r) {
          fail("write failed: " + r.error().message);
          break;
        }
      }
      if (!open || closing) break;
      boost::system::error_code ec;
      wake.expires_at(std::chrono::steady_clock::time_point::max());
      co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (closing && stream) {
      boost::system::error_code ec;
      {
        OpDeadline d(*stream, 1s);
        co_await stream->async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
      }
      stream->lowest_layer().close(ec);
    }
  }

  void send(const json& m) {
    outbox.push_back(proto::encodeFrame(m));
    wake.cancel();
  }

  asio::awaitable<Result<json>> request(std::string type, json body, Duration timeout) {
    auto self = shared_from_this();
    if (!open) co_return makeError(node.name + ": not connected");
    uint64_t id = nextId++;
    auto p = std::make_shared<Pending>(io);
    pending[id] = p;
    send(proto::makeRequest(id, type, std::move(body)));
    p->timer.expires_after(timeout);
    boost::system::error_code ec;
    co_await p->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    pending.erase(id);
    if (p->reply) {
      auto r = proto::parseReply(*p->reply, id, type);
      if (!r) co_return makeError(node.name + ": " + r.error().message);
      co_return std::move(*r);
    }
    if (!p->failure.empty()) co_return makeError(node.name + ": " + p->failure);
    co_return makeError(node.name + " did not answer '" + type + "' within " +
                        formatDuration(std::chrono::duration_cast<Nanos>(timeout)));
  }

  // TCP connect, TLS handshake and hello, all within one DEADLINE (TOTAL: how long the caller
  // allowed, for the error message): a step never gets a fresh timeout of its own, so a peer
  // that accepts TCP and then says nothing costs one deadline, not one per step.
  asio::awaitable<Result<void>> connect(std::chrono::steady_clock::time_point deadline, Duration total) {
    auto self = shared_from_this();
    auto left = [deadline] {
      return std::max<Duration>(deadline - std::chrono::steady_clock::now(), Duration::zero());
    };
    auto expired = [deadline] { return std::chrono::steady_clock::now() >= deadline; };
    std::string after = "timed out after " + formatDuration(std::chrono::duration_cast<Nanos>(total));
    stream = std::make_unique<SslStream>(io, tls);
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = co_await resolver.async_resolve(
        node.address, std::to_string(node.port), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return makeError("cannot resolve " + name() + ": " + ec.message());
    {
      OpDeadline d(*stream, left());
      co_await asio::async_connect(stream->lowest_layer(), endpoints,
                                   asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec)
      co_return makeError("cannot reach agent " + name() + ": " + (expired() ? after : ec.message()) +
                          " (is rdmachaos-agent running there, and the address right?)");
    if (auto r = tls::expectPeerName(stream->native_handle(), node.name); !r)
      co_return makeError(node.name + ": " + r.error().message);
    {
      OpDeadline d(*stream, left());
      co_await stream->async_handshake(asio::ssl::stream_base::client,
                                       asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec && expired())
      co_return makeError("TLS handshake with " + name() + " " + after +
                          " (it accepted the connection but did not answer: is that port an "
                          "rdmachaos agent, and is it overloaded?)");
    if (ec)
      co_return makeError("TLS handshake with " + name() + " failed: " + ec.message() +
                          " (is its certificate from the inventory's CA and named '" + node.name +
                          "'?)");
    open = true;
    asio::co_spawn(io, reader(), asio::detached);
    asio::co_spawn(io, writer(), asio::detached);
    json helloBody = proto::toJson(proto::Hello{controllerId, {proto::kVersion}});
    auto hello = co_await request("hello", std::move(helloBody), left());
    if (!hello && expired()) co_return makeError(node.name + ": hello " + after);
    if (!hello) co_return hello.error();
    helloReply = *hello;
    leaseMs = helloReply.value("lease_ms", int64_t(5000));
    co_return Result<void>{};
  }

  asio::awaitable<void> heartbeats() {
    auto self = shared_from_this();
    auto period = std::chrono::milliseconds(std::max<int64_t>(leaseMs / 3, 50));
    while (open && !closing) {
      heartbeatTimer.expires_after(period);
      boost::system::error_code ec;
      co_await heartbeatTimer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (!open || closing) break;
      auto r = co_await request("heartbeat", json::object(), std::chrono::milliseconds(leaseMs));
      if (!r && open && !closing) {
        // No reply within a whole lease: the agent has let this controller's lease expire
        // (and reverted its faults), or the management path is cut without a reset that TCP
        // would notice. Either way the agent is lost to this run: say so now, not when the
        // kernel gives up on the connection minutes later.
        log::warn("heartbeat to {} failed: {}", node.name, r.error().message);
        fail("no heartbeat reply within the lease (" + std::to_string(leaseMs) + " ms): " + r.error().message);
        if (stream) stream->lowest_layer().close(ec);
        break;
      }
    }
  }

  void close() {
    if (closing) return;
    closing = true;
    heartbeatTimer.cancel();
    wake.cancel();
    if (stream && !open) {
      boost::system::error_code ec;
      stream->lowest_layer().close(ec);
    }
  }
};

AgentClient::AgentClient(asio::io_context& io, asio::ssl::context& tls, Node node,
                         std::string controllerId)
    : impl_(std::make_shared<Impl>(io, tls, std::move(node), std::move(controllerId))) {}

AgentClient::~AgentClient() { impl_->close(); }

asio::awaitable<Result<void>> AgentClient::connect(Duration timeout) {
  return impl_->connect(std::chrono::steady_clock::now() + timeout, timeout);
}

asio::awaitable<Result<void>> AgentClient::connect(std::chrono::steady_clock::time_point deadline,
                                                   Duration total) {
  return impl_->connect(deadline, total);
}

asio::awaitable<Result<json>> AgentClient::request(std::string type, json body, Duration timeout) {
  return impl_->request(std::move(type), std::move(body), timeout);
}

asio::awaitable<Result<ClockEstimate>> AgentClient::probeClock(int probes, Duration timeout) {
  return probeClock(probes, std::chrono::steady_clock::now() + timeout, timeout);
}

asio::awaitable<Result<ClockEstimate>> AgentClient::probeClock(int probes,
                                                               std::chrono::steady_clock::time_point deadline,
                                                               Duration total) {
  auto impl = impl_;
  std::vector<ClockProbe> samples;
  for (int i = 0; i < probes; i++) {
    ClockProbe p;
    p.t0 = wallNs();
    json body = proto::toJson(proto::ClockReq{p.t0});
    auto left = std::max<Duration>(deadline - std::chrono::steady_clock::now(), Duration::zero());
    auto r = co_await impl->request("clock", std::move(body), left);
    p.t3 = wallNs();
    if (!r && std::chrono::steady_clock::now() >= deadline)
      co_return makeError(impl->node.name + ": clock probes timed out after " +
                          formatDuration(std::chrono::duration_cast<Nanos>(total)));
    if (!r) co_return r.error();
    p.t1 = r->value("t1", int64_t(0));
    p.t2 = r->value("t2", int64_t(0));
    samples.push_back(p);
  }
  impl->clock = estimateOffset(samples);
  co_return impl->clock;
}

void AgentClient::startHeartbeats() { asio::co_spawn(impl_->io, impl_->heartbeats(), asio::detached); }
void AgentClient::close() {
  // Handlers capture their owner's state: once closed, nothing may call them any more.
  impl_->eventHandlers.clear();
  impl_->lostHandler = nullptr;
  impl_->close();
}
void AgentClient::onEvent(std::function<void(const json&)> h) { impl_->eventHandlers.push_back(std::move(h)); }
void AgentClient::onLost(std::function<void(const std::string&)> h) { impl_->lostHandler = std::move(h); }
const Node& AgentClient::node() const { return impl_->node; }
const json& AgentClient::hello() const { return impl_->helloReply; }
const ClockEstimate& AgentClient::clock() const { return impl_->clock; }
bool AgentClient::connected() const { return impl_->open; }

Fleet::Fleet(asio::io_context& io, asio::ssl::context& tls, std::string controllerId)
    : io_(io), tls_(tls), controllerId_(std::move(controllerId)) {}

asio::awaitable<void> Fleet::connect(const std::vector<const Node*>& nodes, Duration timeout,
                                     int clockProbes, ConnectProgressFn progress) {
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout;
  std::vector<std::shared_ptr<AgentClient>> slots(nodes.size());
  std::vector<std::string> errs(nodes.size());
  std::vector<bool> finished(nodes.size(), false);
  size_t done = 0;
  asio::steady_timer tick(io_);
  auto report = [&](ConnectProgress::Event event) {
    ConnectProgress p;
    p.total = nodes.size();
    for (size_t i = 0; i < nodes.size(); i++) {
      if (!finished[i]) p.waiting.push_back(nodes[i]->name);
      else if (slots[i]) p.connected++;
      else p.failed++;
    }
    p.elapsed = std::chrono::steady_clock::now() - start;
    p.event = event;
    p.done = event == ConnectProgress::Event::done;
    progress(p);
  };
  // Connects all at once; clocks a few agents at a time, each as soon as it is connected (an
  // agent that never answers must not hold the others' probes until the deadline). A probe
  // measures the network only if this one event loop answers it at once: with every agent
  // probing together, each reply waits in the loop behind all the others, its round trip
  // holds that queue, and the minimum-RTT estimate with it (fleet_scale, 1,024 agents probing
  // together: offsets uncertain by up to ±56 ms).
  size_t connectsDone = 0;
  AsyncGate window(io_, kClockProbeWindow);
  std::vector<std::function<asio::awaitable<void>()>> tasks;
  for (size_t i = 0; i < nodes.size(); i++) {
    tasks.push_back([&, i]() -> asio::awaitable<void> {
      auto c = std::make_shared<AgentClient>(io_, tls_, *nodes[i], controllerId_);
      auto r = co_await c->connect(deadline, timeout);
      if (++connectsDone == nodes.size() && progress) report(ConnectProgress::Event::connected);
      if (!r) {
        errs[i] = r.error().message;
      } else if (clockProbes > 0) {
        co_await window.acquire();
        auto clk = co_await c->probeClock(clockProbes, deadline, timeout);
        window.release();
        if (!clk) errs[i] = clk.error().message;
        else slots[i] = c;
      } else {
        slots[i] = c;
      }
      if (!slots[i]) c->close();
      finished[i] = true;
      if (++done == nodes.size()) tick.cancel();
    });
  }
  if (progress && !nodes.empty())
    tasks.push_back([&]() -> asio::awaitable<void> {
      while (done < nodes.size()) {
        tick.expires_after(1s);
        boost::system::error_code ec;
        co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (done < nodes.size()) report(ConnectProgress::Event::tick);
      }
    });
  co_await whenAll(io_, std::move(tasks));
  if (progress) report(ConnectProgress::Event::done);
  for (size_t i = 0; i < nodes.size(); i++) {
    if (slots[i])
      clients_.push_back(slots[i]);
    else
      errors_.emplace_back(nodes[i]->name, errs[i]);
  }
}

ConnectProgressFn stderrConnectProgress() {
  auto printed = std::make_shared<bool>(false);
  return [printed](const ConnectProgress& p) {
    if (p.event == ConnectProgress::Event::connected) return;
    if (p.done && !*printed) return;
    *printed = true;
    std::string waiting;
    for (size_t i = 0; i < p.waiting.size() && i < 5; i++) waiting += (i ? ", " : "") + p.waiting[i];
    if (p.waiting.size() > 5) waiting += ", ...";
    double s = std::chrono::duration<double>(p.elapsed).count();
    if (p.done)
      std::fprintf(stderr, "connected to %zu of %zu agents in %.1f s, %zu unreachable\n", p.connected,
                   p.total, s, p.failed);
    else
      std::fprintf(stderr, "connecting: %zu of %zu agents connected, %zu unreachable, waiting for %zu (%s) after %.1f s\n",
                   p.connected, p.total, p.failed, p.waiting.size(), waiting.c_str(), s);
  };
}

std::shared_ptr<AgentClient> Fleet::find(const std::string& node) const {
  // By name in a map: a run looks up every fault's node, and a listing every node, so a scan
  // would cost N x N on a large fleet.
  if (byName_.size() != clients_.size()) {
    byName_.clear();
    for (size_t i = 0; i < clients_.size(); i++) byName_.emplace(clients_[i]->node().name, i);
  }
  auto it = byName_.find(node);
  return it == byName_.end() ? nullptr : clients_[it->second];
}

AsyncGate::AsyncGate(asio::io_context& io, size_t limit) : io_(io), limit_(std::max<size_t>(limit, 1)) {}

asio::awaitable<void> AsyncGate::acquire() {
  if (holders_ < limit_ && waiters_.empty()) {
    holders_++;
    co_return;
  }
  auto t = std::make_shared<asio::steady_timer>(io_);
  t->expires_at(std::chrono::steady_clock::time_point::max());
  waiters_.push_back(t);
  boost::system::error_code ec;
  // Woken only by release(), which hands its place over (holders_ stays the same).
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

void AsyncGate::release() {
  if (!waiters_.empty()) {
    auto next = waiters_.front();
    waiters_.pop_front();
    next->cancel();
  } else if (holders_ > 0) {
    holders_--;
  }
}

asio::awaitable<void> whenAll(asio::io_context& io,
                              std::vector<std::function<asio::awaitable<void>()>> tasks) {
  if (tasks.empty()) co_return;
  auto remaining = std::make_shared<size_t>(tasks.size());
  auto done = std::make_shared<asio::steady_timer>(io);
  done->expires_at(std::chrono::steady_clock::time_point::max());
  for (auto& t : tasks) {
    asio::co_spawn(io, t(), [remaining, done](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error("internal error in a concurrent task: {}", ex.what());
        }
      }
      if (--*remaining == 0) done->cancel();
    });
  }
  boost::system::error_code ec;
  while (*remaining > 0) co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

std::string newControllerId() {
  char host[64] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string h;
  for (char* p = host; *p && h.size() < 24; p++)
    h += (std::isalnum(static_cast<unsigned char>(*p)) || *p == '-') ? *p : '-';
  // 64 random bits: the tail names this run's fault ids, which must not collide with another
  // controller's (or an earlier run's entry still in an agent's journal).
  return "ctl-" + h + "-" + std::to_string(::getpid()) + "-" + proto::randomToken();
}

}  // namespace rc::controller
