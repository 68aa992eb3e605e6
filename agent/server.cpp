// TLS server and protocol dispatch for the agent.
#include "agent/server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <deque>
#include <map>
#include <set>

#include "agent/capabilities.hpp"
#include "agent/reply_budget.hpp"
#include "agent/session_work.hpp"
#include "common/channel.hpp"
#include "common/clock.hpp"
#include "common/fd_reserve.hpp"
#include "common/log.hpp"
#include "common/tls.hpp"
#include "rdmachaos_config.h"

namespace rc::agent {

using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// Replies and telemetry queued for one controller: far above what a reading peer leaves queued
// (telemetry is sent in pages of at most a frame), small beside the agent's memory.
constexpr size_t kMaxOutboxBytes = 16u << 20;
// All sessions together: max_connections (64 by default) non-reading sessions must not make the
// agent hold a gigabyte (a pod's memory budget is far less; deploy/kubernetes).
constexpr size_t kMaxQueuedReplyBytes = 64u << 20;
// Connections still in their TLS handshake are counted apart from sessions (max_connections
// counts only authenticated ones), so a peer without a certificate never takes a controller's
// slot. A peer that opens connections and sends nothing holds each for the handshake's 10 s:
// from one address at most kMaxHandshakesPerAddress, in all at most kMaxHandshakes. When
// those are taken, a new connection replaces the oldest handshake if that one has waited
// kHandshakeRecycleAfter (a controller's handshake takes milliseconds, even on a TCG guest),
// so that silent connections from many addresses cannot lock controllers out.
constexpr size_t kMaxHandshakesPerAddress = 4;
constexpr size_t kMaxHandshakes = 16;
constexpr auto kHandshakeRecycleAfter = std::chrono::seconds(2);
// Authenticated sessions from one address: a controller host runs a few controllers, not
// hundreds; a peer with a valid certificate gone wrong must leave max_connections to others.
constexpr size_t kMaxSessionsPerAddress = 16;
// Requests of one session waiting for the worker pool (schedule, workload_start, capabilities):
// room for a controller that schedules its whole limit of faults at once, and a bound for a peer
// that pipelines without reading (the rest is refused at once, on the loop).
constexpr size_t kMaxQueuedWork = 2 * proto::kMaxActiveFaults;

// A log line that may repeat at the peer's will (failed handshakes, refused connections): at
// most one per 10 s, with how many were held back.
struct ThrottledLog {
  std::chrono::steady_clock::time_point next{};
  uint64_t held = 0;
  // Whether a line may go out now; HELD_BACK is then how many did not since the last one.
  bool allow(uint64_t& heldBack) {
    auto now = std::chrono::steady_clock::now();
    if (now < next) {
      held++;
      return false;
    }
    heldBack = held;
    held = 0;
    next = now + std::chrono::seconds(10);
    return true;
  }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& server, tcp::socket socket, asio::ssl::context& tls);
  asio::awaitable<void> run();
  void close();
  // Closes and drops what is queued (nothing more is queued either): for a peer that does not
  // read, whose replies the agent will not hold.
  void shed(const std::string& why);
  uint64_t budgetId() const { return budgetId_; }
  size_t queuedBytes() const { return outboxBytes_; }
  const std::string& owner() const { return owner_; }
  const std::string& peer() const { return peer_; }
  void endHandshake();  // frees its address's handshake slot (once)
  void endSession();    // frees its session slot, if it was given one (once)
  // Ends a handshake that has waited too long, for a newer connection: closes the socket (the
  // pending handshake then fails) and frees the slot at once.
  void abortHandshake();
  bool handshaking() const { return handshaking_; }
  std::chrono::steady_clock::time_point handshakeSince() const { return handshakeSince_; }
  const std::string& peerAddress() const { return peerAddress_; }

 private:
  asio::awaitable<void> writer();
  asio::awaitable<json> scanCapabilities();
  void send(const json& message);
  void handle(const json& message);
  void dispatch(const proto::Envelope& env);

  Server::Impl& server_;
  SslStream stream_;
  std::string peer_;
  std::string peerAddress_;   // without the port: handshake slots are per address
  bool handshaking_ = false;  // holds one of its address's handshake slots
  bool inSession_ = false;    // holds a session slot (after its handshake)
  std::chrono::steady_clock::time_point handshakeSince_ = std::chrono::steady_clock::now();
  // The verified client certificate's fingerprint: who the peer is. Leases and fault ownership
  // are bound to it; the controller id a peer claims in hello only tells its runs apart.
  std::string principal_;
  std::string owner_;  // "<controller id from hello>@<principal_>"
  bool greeted_ = false;
  bool closing_ = false;
  bool writerDone_ = false;
  int64_t receivedNs_ = 0;
  json helloCapabilities_;  // scanned off the loop before hello is dispatched
  std::deque<std::string> outbox_;
  size_t outboxBytes_ = 0;
  uint64_t budgetId_ = 0;  // this session's share of the agent's ReplyBudget
  bool shed_ = false;
  asio::steady_timer wake_;  // signals the writer: outbox has data or closing
  std::shared_ptr<SessionWork> work_;  // this session's turn at the worker pool
};

}  // namespace

struct Server::Impl {
  asio::io_context& io;
  const Config& config;
  FaultManager& manager;
  WorkloadManager& workloads;
  asio::ssl::context& tls;
  tcp::acceptor acceptor;
  std::set<std::shared_ptr<Session>> sessions;
  ReplyBudget replies{kMaxOutboxBytes, kMaxQueuedReplyBytes};
  int64_t startedNs = wallNs();
  uint64_t acceptFailures = 0;  // since the last log line
  std::chrono::steady_clock::time_point nextAcceptLog{};
  std::map<std::string, size_t> handshakes;  // per peer address, connections in their handshake
  size_t handshaking = 0;                    // all of them
  std::map<std::string, size_t> established;  // per peer address, authenticated sessions
  size_t sessionSlots = 0;                      // all of them (max_connections counts these)
  // Refusals for want of a handshake slot and for want of a session slot are logged apart: a
  // flood of silent connections must not hide that a certificate holder was turned away.
  ThrottledLog handshakeFailedLog, refusedLog, sessionRefusedLog;
  // Work that can block (a schedule's journal fsync and netlink checks, the capability scan
  // of hello and of the capabilities request, binding a workload's transport or opening an RDMA device) runs here, off the event loop:
  // heartbeats, clock probes and reverts of every session go on meanwhile. Declared last, so
  // it is joined first when the server goes.
  asio::thread_pool blocking{2};

  Impl(asio::io_context& i, const Config& c, FaultManager& m, WorkloadManager& w,
       asio::ssl::context& t)
      : io(i), config(c), manager(m), workloads(w), tls(t), acceptor(i) {}

  asio::awaitable<void> acceptLoop();
  // Why a connection from ADDRESS may not have a session now (empty: it may).
  std::string sessionRefusal(const std::string& address) const;
  // Logs a refusal at a bounded rate (once per 10 s with a count).
  void logRefusal(ThrottledLog& throttle, const std::string& what);
  // Ends S's slots and forgets it.
  void drop(const std::shared_ptr<Session>& s);
};

namespace {

Session::Session(Server::Impl& server, tcp::socket socket, asio::ssl::context& tls)
    : server_(server),
      stream_(std::move(socket), tls),
      wake_(server.io),
      work_(std::make_shared<SessionWork>(server.io.get_executor(), server.blocking.get_executor(), kMaxQueuedWork)) {
  boost::system::error_code ec;
  auto ep = stream_.lowest_layer().remote_endpoint(ec);
  peerAddress_ = ec ? "unknown peer" : ep.address().to_string();
  peer_ = ec ? peerAddress_ : peerAddress_ + ":" + std::to_string(ep.port());
  wake_.expires_at(std::chrono::steady_clock::time_point::max());
  budgetId_ = server_.replies.open();
  server_.handshakes[peerAddress_]++;
  server_.handshaking++;
  handshaking_ = true;
}

void Session::endHandshake() {
  if (!handshaking_) return;
  handshaking_ = false;
  server_.handshaking--;
  auto it = server_.handshakes.find(peerAddress_);
  if (it != server_.handshakes.end() && --it->second == 0) server_.handshakes.erase(it);
}

void Session::endSession() {
  if (!inSession_) return;
  inSession_ = false;
  server_.sessionSlots--;
  auto it = server_.established.find(peerAddress_);
  if (it != server_.established.end() && --it->second == 0) server_.established.erase(it);
}

void Session::abortHandshake() {
  endHandshake();
  boost::system::error_code ignored;
  stream_.lowest_layer().close(ignored);
}

void Session::shed(const std::string& why) {
  if (!shed_) log::warn("{}", why);
  shed_ = true;
  outbox_.clear();
  server_.replies.release(budgetId_, outboxBytes_);
  outboxBytes_ = 0;
  close();
}

void Session::close() {
  closing_ = true;
  wake_.cancel();
  // What it asked and the pool has not started is for nobody now.
  work_->cancel();
}

void Session::send(const json& message) {
  if (writerDone_) return;
  // Never a frame the controller refuses (it would drop the connection): long event lists are
  // cut, and what still does not fit becomes an error reply naming the request.
  auto frame = proto::encodeBoundedFrame(message);
  if (!frame) {
    uint64_t id = message.contains("id") && message["id"].is_number_unsigned() ? message["id"].get<uint64_t>() : 0;
    log::warn("reply to '{}' not sent: {}", peer_, frame.error().message);
    frame = proto::encodeFrame(proto::makeError(id, proto::kErrFailed, frame.error().message));
  }
  // A peer that does not read its replies must not make the agent hold them without bound:
  // past the limit it is disconnected (its lease runs on, and expires, as for a lost peer).
  // Past the agent's bound for all sessions, the session holding the most is cut (ReplyBudget).
  if (shed_ || !server_.replies.known(budgetId_)) return;  // cut, or already dropped
  while (auto cut = server_.replies.take(budgetId_, frame->size())) {
    if (*cut == budgetId_) {
      shed(outboxBytes_ + frame->size() > server_.replies.perSessionLimit()
               ? "controller '" + owner_ + "' (" + peer_ + ") does not read: " + std::to_string(outboxBytes_) +
                     " bytes queued; disconnecting it"
               : "replies queued for controllers reached the agent's bound of " +
                     std::to_string(server_.replies.totalLimit() >> 20) + " MiB; disconnecting controller '" +
                     owner_ + "' (" + peer_ + "), which holds the most: " + std::to_string(outboxBytes_) + " bytes");
      return;
    }
    std::shared_ptr<Session> other;
    for (const auto& x : server_.sessions)
      if (x->budgetId() == *cut) other = x;
    if (!other) {
      server_.replies.close(*cut);  // not a session any more: its bytes are nobody's
      continue;
    }
    other->shed("replies queued for controllers reached the agent's bound of " +
                std::to_string(server_.replies.totalLimit() >> 20) + " MiB; disconnecting controller '" +
                other->owner() + "' (" + other->peer() + "), which holds the most: " +
                std::to_string(other->queuedBytes()) + " bytes");
  }
  outboxBytes_ += frame->size();
  outbox_.push_back(std::move(*frame));
  wake_.cancel();
}

asio::awaitable<void> Session::writer() {
  auto self = shared_from_this();
  for (;;) {
    while (!outbox_.empty()) {
      std::string frame = std::move(outbox_.front());
      outbox_.pop_front();
      outboxBytes_ -= frame.size();
      server_.replies.release(budgetId_, frame.size());
      Result<void> r;
      {
        OpDeadline d(stream_, 10s);
        r = co_await writeFrame(stream_, frame);
      }
      if (!r) {
        closing_ = true;
        outbox_.clear();
        server_.replies.release(budgetId_, outboxBytes_);
        outboxBytes_ = 0;
        break;
      }
    }
    if (closing_) break;
    boost::system::error_code ec;
    wake_.expires_at(std::chrono::steady_clock::time_point::max());
    co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  writerDone_ = true;
  {
    OpDeadline d(stream_, 2s);
    boost::system::error_code ec;
    co_await stream_.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
  }
  boost::system::error_code ignored;
  stream_.lowest_layer().close(ignored);
}

// The scan as a coroutine of its own on the pool (arguments by value: the session may go).
asio::awaitable<json> capabilityScan(Config config, faults::Policy policy) {
  try {
    co_return capabilities(config, policy);
  } catch (const std::exception& ex) {
    log::error("capability scan failed: {}", ex.what());
    co_return json{{"node", config.node}, {"error", std::string("capability scan failed: ") + ex.what()}};
  }
}

asio::awaitable<json> Session::scanCapabilities() {
  co_return co_await asio::co_spawn(server_.blocking.get_executor(),
                                    capabilityScan(server_.config, server_.manager.policy()),
                                    asio::use_awaitable);
}

asio::awaitable<void> Session::run() {
  auto self = shared_from_this();
  boost::system::error_code ec;
  {
    OpDeadline d(stream_, 10s);
    co_await stream_.async_handshake(asio::ssl::stream_base::server,
                                     asio::redirect_error(asio::use_awaitable, ec));
  }
  endHandshake();
  if (ec) {
    // Unauthenticated peers get nothing: no reply, just a closed socket (and no log flood).
    if (uint64_t held = 0; server_.handshakeFailedLog.allow(held))
      log::warn("TLS handshake with {} failed: {}{}", peer_, ec.message(),
                held ? fmt::format(" ({} more failed handshakes since the last report)", held) : "");
    boost::system::error_code ignored;
    stream_.lowest_layer().close(ignored);
    server_.drop(self);
    co_return;
  }
  principal_ = tls::peerFingerprint(stream_.native_handle());
  if (principal_.empty()) {
    // The handshake verified a certificate, so this cannot happen; never serve without one.
    log::warn("closing {}: no verified client certificate", peer_);
    boost::system::error_code ignored;
    stream_.lowest_layer().close(ignored);
    server_.drop(self);
    co_return;
  }
  // Checked again now that it is authenticated: other handshakes may have ended first.
  if (auto why = server_.sessionRefusal(peerAddress_); !why.empty()) {
    server_.logRefusal(server_.sessionRefusedLog, "a session from " + peer_ + ": " + why);
    boost::system::error_code ignored;
    stream_.lowest_layer().close(ignored);
    server_.drop(self);
    co_return;
  }
  inSession_ = true;
  server_.sessionSlots++;
  server_.established[peerAddress_]++;
  log::info("controller connected from {} (certificate '{}', {})", peer_,
            tls::peerCommonName(stream_.native_handle()), principal_);
  asio::co_spawn(server_.io, writer(), asio::detached);

  // A silent controller is dropped after a few lease periods; its lease expires sooner.
  auto idle = std::max<std::chrono::steady_clock::duration>(server_.config.leaseTimeout * 3, 30s);
  while (!closing_) {
    Result<json> msg = makeError("unset");
    {
      OpDeadline d(stream_, idle);
      msg = co_await readMessage(stream_);
    }
    receivedNs_ = wallNs();
    if (msg && !greeted_ && msg->is_object()) {
      // hello carries the capability scan (a netlink dump, sysfs reads that take seconds under
      // TCG): run on the blocking pool while this session's reading waits, so its replies keep
      // their order and every other session's heartbeats are served meanwhile.
      auto t = msg->find("type");
      if (t != msg->end() && t->is_string() && *t == "hello") helloCapabilities_ = co_await scanCapabilities();
    }
    if (!msg) {
      if (msg.error().code == kProtocolError) {
        log::warn("closing {}: {}", peer_, msg.error().message);
        send(proto::makeError(0, proto::kErrBadMessage, msg.error().message));
      }
      break;
    }
    handle(*msg);
  }
  close();
  server_.drop(self);
  if (!owner_.empty()) log::info("controller '{}' at {} disconnected", owner_, peer_);
}

void Session::handle(const json& message) {
  uint64_t id = 0;
  if (message.contains("id") && message["id"].is_number_unsigned()) id = message["id"].get<uint64_t>();
  auto env = proto::parseRequest(message);
  if (!env) {
    bool version = env.error().code == 1;
    send(proto::makeError(id, version ? proto::kErrVersion : proto::kErrBadMessage,
                          env.error().message));
    if (version) close();
    return;
  }
  if (!greeted_ && env->type != "hello") {
    send(proto::makeError(env->id, proto::kErrNotHello, "the first message must be 'hello'"));
    close();
    return;
  }
  // Exception barrier: a handler that throws (an allocation, a thread that cannot be created,
  // a reply that cannot be encoded) answers with an error; the session and every fault go on.
  try {
    dispatch(*env);
  } catch (const std::exception& ex) {
    log::error("handling '{}' from {} failed: {}", env->type, peer_, ex.what());
    try {
      send(proto::makeError(env->id, proto::kErrFailed,
                            "the agent failed handling '" + env->type + "': " + ex.what()));
    } catch (const std::exception&) {
      close();  // not even an error reply can be sent: end this session, nothing else
    }
  }
}

void Session::dispatch(const proto::Envelope& env) {
  auto& mgr = server_.manager;
  const uint64_t id = env.id;
  std::weak_ptr<Session> weak = weak_from_this();
  // Completion from a fault thread: hop back onto the loop before touching the session.
  auto later = [this, weak, id](std::string type) {
    return [this, weak, id, type, &io = server_.io](json body) {
      asio::post(io, [this, weak, id, type, body = std::move(body)]() {
        if (auto s = weak.lock()) send(proto::makeReply(id, type, body));
      });
    };
  };

  // Runs WORK (returning the reply or error to send) on the blocking pool, in this session's
  // turn (SessionWork), then sends its result from the loop if this session is still there.
  auto offLoop = [this, weak, id, type = env.type](auto work) {
    bool queued = work_->add(
        [id, type, work = std::move(work)]() mutable {
          try {  // the exception barrier of the pool: an error reply, never std::terminate
            return work();
          } catch (const std::exception& ex) {
            log::error("handling '{}' failed: {}", type, ex.what());
            return proto::makeError(id, proto::kErrFailed, "the agent failed handling '" + type + "': " + ex.what());
          }
        },
        [weak](json reply) {
          if (auto s = weak.lock()) s->send(reply);
        });
    if (!queued)
      send(proto::makeError(id, proto::kErrRefused,
                            "'" + type + "' refused: this controller already has " + std::to_string(kMaxQueuedWork) +
                                " requests waiting for the agent's worker threads (schedule, workload_start, "
                                "capabilities); wait for their replies before sending more"));
  };

  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, proto::Hello>) {
          if (greeted_) {
            send(proto::makeError(id, proto::kErrBadMessage, "'hello' was already sent"));
            return;
          }
          bool speaks = std::find(r.versions.begin(), r.versions.end(), proto::kVersion) !=
                        r.versions.end();
          if (!speaks) {
            send(proto::makeError(id, proto::kErrVersion,
                                  "no common protocol version: this agent speaks " +
                                      std::to_string(proto::kVersion)));
            close();
            return;
          }
          greeted_ = true;
          // Bound to the certificate: another certificate claiming this id gets another lease.
          owner_ = r.controllerId + "@" + principal_;
          mgr.heartbeat(owner_);
          server_.workloads.heartbeat(owner_);
          // Answered in order (a client may pipeline its first requests behind hello).
          send(proto::makeReply(id, "hello",
                                {{"version", proto::kVersion},
                                 {"node", server_.config.node},
                                 {"agent_version", RDMACHAOS_VERSION},
                                 {"lease_ms", mgr.leaseTimeout().count()},
                                 {"capabilities", std::move(helloCapabilities_)}}));
        } else if constexpr (std::is_same_v<T, proto::ClockReq>) {
          send(proto::makeReply(id, "clock", {{"t0", r.t0}, {"t1", receivedNs_}, {"t2", wallNs()}}));
        } else if constexpr (std::is_same_v<T, proto::Heartbeat>) {
          mgr.heartbeat(owner_);
          server_.workloads.heartbeat(owner_);
          send(proto::makeReply(id, "heartbeat", {{"lease_ms", mgr.leaseTimeout().count()}}));
        } else if constexpr (std::is_same_v<T, proto::Schedule>) {
          // The scheduling session hears when the fault ends (completed, reverted, expired).
          auto ended = [weak, &io = server_.io](json record) {
            asio::post(io, [weak, record = std::move(record)]() {
              if (auto s = weak.lock())
                s->send(proto::toJson(proto::FaultEnded{record.value("fault", std::string()), record}));
            });
          };
          offLoop([id, r, ended, owner = owner_, &mgr] {
            auto rec = mgr.schedule(owner, r, ended);
            if (!rec) {
              log::warn("refused {} from '{}': {}", r.kind, owner, rec.error().message);
              return proto::makeError(id, proto::kErrRefused, rec.error().message);
            }
            return proto::makeReply(id, "schedule", {{"fault", *rec}});
          });
        } else if constexpr (std::is_same_v<T, proto::Revert>) {
          auto done = later("revert");
          auto res = mgr.revert(r.faultId, [done](json rec) { done(json{{"fault", rec}}); });
          if (!res) send(proto::makeError(id, proto::kErrNotFound, res.error().message));
        } else if constexpr (std::is_same_v<T, proto::RevertAll>) {
          auto done = later("revert_all");
          // Only the faults of the caller's certificate, unless it asks for every controller's.
          log::info("controller '{}' asked to revert {}", owner_,
                    r.all ? "every controller's faults" : "its certificate's faults");
          mgr.revertAll(r.all ? nullptr : &principal_, "reverted", [done](json recs) {
            done(json{{"faults", recs}});
          });
        } else if constexpr (std::is_same_v<T, proto::ListFaults>) {
          send(proto::makeReply(id, "list", {{"faults", mgr.list()}}));
        } else if constexpr (std::is_same_v<T, proto::GetFault>) {
          auto rec = mgr.get(r.faultId);
          if (!rec)
            send(proto::makeError(id, proto::kErrNotFound, rec.error().message));
          else
            send(proto::makeReply(id, "get", {{"fault", *rec}}));
        } else if constexpr (std::is_same_v<T, proto::Status>) {
          json st = mgr.status();
          st["node"] = server_.config.node;
          st["uptime_ms"] = (wallNs() - server_.startedNs) / 1'000'000;
          st["sessions"] = server_.sessions.size();
          st["workloads"] = server_.workloads.list();
          send(proto::makeReply(id, "status", st));
        } else if constexpr (std::is_same_v<T, proto::WorkloadStart>) {
          // Telemetry and the end go to the session that started it, from workload threads.
          auto emit = [weak, &io = server_.io](json m) {
            asio::post(io, [weak, m = std::move(m)]() {
              if (auto s = weak.lock()) s->send(m);
            });
          };
          offLoop([id, r, emit, owner = owner_, &workloads = server_.workloads] {
            auto rec = workloads.start(owner, r, emit);
            if (!rec) {
              log::warn("refused workload '{}' from '{}': {}", r.workloadId, owner, rec.error().message);
              return proto::makeError(id, proto::kErrRefused, rec.error().message);
            }
            return proto::makeReply(id, "workload_start", *rec);
          });
        } else if constexpr (std::is_same_v<T, proto::WorkloadStop>) {
          auto res = server_.workloads.stop(r.workloadId);
          if (!res)
            send(proto::makeError(id, proto::kErrNotFound, res.error().message));
          else
            send(proto::makeReply(id, "workload_stop", {{"workload", r.workloadId}}));
        } else if constexpr (std::is_same_v<T, proto::Capabilities>) {
          offLoop([id, &cfg = server_.config, &mgr] {
            return proto::makeReply(id, "capabilities", {{"capabilities", capabilities(cfg, mgr.policy())}});
          });
        }
      },
      env.request);
}

}  // namespace

asio::awaitable<void> Server::Impl::acceptLoop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of descriptors (or memory) the listener stays ready: accepting again at once would
      // spin and log at full speed. Pause, and log once per 10 s with a count.
      const bool starved = ec == asio::error::no_descriptors || ec.value() == ENFILE ||
                           ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
      acceptFailures++;
      auto now = std::chrono::steady_clock::now();
      if (now >= nextAcceptLog) {
        log::warn("accept failed: {} ({} time(s) since the last report){}", ec.message(), acceptFailures,
                  starved ? "; pausing new connections for 100 ms" : "");
        acceptFailures = 0;
        nextAcceptLog = now + 10s;
      }
      if (starved) {
        asio::steady_timer pause(io, 100ms);
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      continue;
    }
    std::string address = "unknown peer";
    if (auto ep = socket.remote_endpoint(ec); !ec) address = ep.address().to_string();
    // The descriptors kept for reverts come first: a connection that would leave the reserve
    // short is refused (and its descriptor goes back to the reserve).
    if (!fdReserve().refill()) {
      socket.close(ec);
      (void)fdReserve().refill();
      logRefusal(refusedLog, "a connection from " + address +
                                 ": the agent is short of descriptors (it keeps some for reverts)");
      continue;
    }
    std::string why = sessionRefusal(address);
    ThrottledLog& throttle = why.empty() ? refusedLog : sessionRefusedLog;
    if (auto it = handshakes.find(address); why.empty() && it != handshakes.end() && it->second >= kMaxHandshakesPerAddress)
      why = std::to_string(it->second) + " of its connections are still in their TLS handshake";
    if (why.empty() && handshaking >= kMaxHandshakes) {
      // Every handshake slot taken: the oldest gives way if it has waited long enough.
      std::shared_ptr<Session> oldest;
      for (const auto& x : sessions)
        if (x->handshaking() && (!oldest || x->handshakeSince() < oldest->handshakeSince())) oldest = x;
      if (oldest && std::chrono::steady_clock::now() - oldest->handshakeSince() >= kHandshakeRecycleAfter)
        oldest->abortHandshake();
      else
        why = std::to_string(handshaking) + " connections are in their TLS handshake (at most " +
              std::to_string(kMaxHandshakes) + ")";
    }
    if (!why.empty()) {
      logRefusal(throttle, "a connection from " + address + ": " + why);
      socket.close(ec);
      continue;
    }
    auto s = std::make_shared<Session>(*this, std::move(socket), tls);
    sessions.insert(s);
    // A session that ends by an exception is logged and its slot freed; the others go on.
    asio::co_spawn(io, s->run(), [this, s](std::exception_ptr p) {
      if (!p) return;
      try {
        std::rethrow_exception(p);
      } catch (const std::exception& ex) {
        log::error("session ended by an exception: {}", ex.what());
      } catch (...) {
        log::error("session ended by an unknown exception");
      }
      s->close();
      drop(s);
    });
  }
}

std::string Server::Impl::sessionRefusal(const std::string& address) const {
  if (sessionSlots >= config.maxConnections)
    return std::to_string(sessionSlots) + " sessions open (max_connections)";
  if (auto it = established.find(address); it != established.end() && it->second >= kMaxSessionsPerAddress)
    return std::to_string(it->second) + " sessions open from that address (at most " +
           std::to_string(kMaxSessionsPerAddress) + " per address)";
  return {};
}

void Server::Impl::logRefusal(ThrottledLog& throttle, const std::string& what) {
  if (uint64_t held = 0; throttle.allow(held))
    log::warn("refusing {}{}", what, held ? fmt::format("; {} more refused since the last report", held) : "");
}

void Server::Impl::drop(const std::shared_ptr<Session>& s) {
  s->endHandshake();
  s->endSession();
  replies.close(s->budgetId());
  sessions.erase(s);
}

Server::Server(asio::io_context& io, const Config& config, FaultManager& manager,
               WorkloadManager& workloads, asio::ssl::context& tls)
    : impl_(std::make_unique<Impl>(io, config, manager, workloads, tls)) {}

Server::~Server() = default;

Result<void> Server::start() {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(impl_->config.listenAddress, ec);
  if (ec) return makeError("bad listen address '" + impl_->config.listenAddress + "'");
  tcp::endpoint ep(addr, impl_->config.listenPort);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return makeError("cannot listen on " + impl_->config.listenAddress + ":" +
                     std::to_string(impl_->config.listenPort) + ": " + ec.message() +
                     " (is the address configured on this node, and the port free?)");
  asio::co_spawn(impl_->io, impl_->acceptLoop(), asio::detached);
  log::info("listening on {}:{}", impl_->config.listenAddress, a.local_endpoint(ec).port());
  return {};
}

void Server::stopAccepting() {
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

void Server::stop() {
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  for (auto& s : std::set<std::shared_ptr<Session>>(impl_->sessions)) s->close();
}

size_t Server::sessionCount() const { return impl_->sessions.size(); }

}  // namespace rc::agent
