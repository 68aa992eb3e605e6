// The verbs transport's connection set-up (see verbs_transport.cpp for why over TCP and not
// rdma_cm): QPs created and moved INIT/RTR/RTS by hand, the dialer's and the acceptor's
// exchange of QP descriptions on the set-up connection, and connect(), which brings every QP
// of a set of peers up by a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <random>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "workload/verbs_transport_internal.hpp"

namespace rc::workload {

namespace {

constexpr uint32_t kConnMagic = 0x52435643;   // "RCVC"
constexpr uint8_t kReady = 'R';               // the dialer's QP is in RTS: the last set-up byte
// A set-up connection whose first record does not arrive within this is dropped.
constexpr int64_t kRecordNs = 2'000'000'000;

uint32_t randomPsn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffff;
}

}  // namespace

Result<void> postRingRecv(VerbsTransport::Qp& q, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&q.ring[slot]), sizeof(Ctrl), q.ctrlMr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return verbs::checkRet(ibv_post_recv(q.qp.get(), &wr, &bad), "ibv_post_recv");
}

Result<void> VerbsTransport::postRecv(Qp& q, uint32_t slot) { return postRingRecv(q, slot); }

// A QP in INIT with its receives posted: what the peer needs to know of it is its number.
Result<void> VerbsTransport::createQp(Qp& q) {
  q.ring.assign(size_t(o_.recvDepth), Ctrl{});
  q.ctrlMr.reset(
      // As an int: rdma-core's ibv_reg_mr macro ANDs the flags with an enum of another type,
      // which clang rejects for a bare enumerator (-Wdeprecated-enum-enum-conversion).
      ibv_reg_mr(pd_.get(), q.ring.data(), q.ring.size() * sizeof(Ctrl), int{IBV_ACCESS_LOCAL_WRITE}));
  if (!q.ctrlMr) return verbs::sysError("ibv_reg_mr (receive ring)", errno);
  ibv_qp_init_attr a{};
  a.send_cq = cq_.get();
  a.recv_cq = cq_.get();
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = uint32_t(o_.sendDepth + 4);
  a.cap.max_recv_wr = uint32_t(o_.recvDepth);
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = sizeof(Ctrl);
  q.qp.reset(ibv_create_qp(pd_.get(), &a));
  if (!q.qp) return verbs::sysError("ibv_create_qp on " + deviceName(), errno);
  if (auto r = verbs::qpToInit(q.qp.get(), bound_->port_num, ""); !r) return r.error();
  q.psn = randomPsn();
  for (uint32_t s = 0; s < uint32_t(o_.recvDepth); s++)
    if (auto r = postRecv(q, s); !r) return r.error();
  return {};
}

// RTR towards q.remote (the kernel resolves the peer's MAC from its GID), then RTS with
// NCCL's timeout and retry counts.
Result<void> VerbsTransport::toRts(Qp& q) {
  return verbs::qpToRts(q.qp.get(), {bound_->port_num, pathMtu_, gidIndex_, o_.tos}, {q.remote.qpn, q.remote.psn, q.remote.gid},
                        q.psn, {o_.timeout, o_.retryCount, o_.rnrRetry}, "");
}

Result<void> VerbsTransport::waitFd(int fd, short events, int64_t deadline, const char* what) {
  for (;;) {
    int64_t now = monoNs();
    if (now >= deadline) return makeError(std::string("timed out ") + what, ETIMEDOUT);
    pollfd pf[2] = {{fd, events, 0}, {wake_.get(), POLLIN, 0}};
    int ms = int(std::clamp<int64_t>((deadline - now) / 1'000'000 + 1, 1, 100));
    int n = ::poll(pf, 2, ms);
    if (n < 0 && errno != EINTR) return verbs::sysError("poll", errno);
    if (pf[1].revents) return makeError("interrupted", EINTR);
    if (n > 0 && pf[0].revents) return {};
  }
}

Result<void> VerbsTransport::sendAll(int fd, const void* p, size_t n, int64_t deadline) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k > 0) {
      c += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EINTR) return verbs::sysError("send (set-up)", errno);
    if (auto r = waitFd(fd, POLLOUT, deadline, "sending the QP description"); !r) return r;
  }
  return {};
}

Result<void> VerbsTransport::recvAll(int fd, void* p, size_t n, int64_t deadline) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k > 0) {
      c += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0) return makeError("the peer closed the set-up connection", ECONNRESET);
    if (errno != EAGAIN && errno != EINTR) return verbs::sysError("recv (set-up)", errno);
    if (auto r = waitFd(fd, POLLIN, deadline, "waiting for the peer's QP description"); !r)
      return r;
  }
  return {};
}

// The dialer: TCP to the peer's listener, our record, its record (it answers once it is in
// connect(), with its QP in RTR), our QP to RTS, then the ready byte.
Result<void> VerbsTransport::dial(Qp& q, int64_t deadline) {
  auto dst = toAddr(o_.world[size_t(q.peer)]);
  if (!dst) return dst.error();
  auto src = toAddr(Endpoint{o_.world[size_t(o_.rank)].address, 0});
  if (!src) return src.error();
  q.ctl.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!q.ctl.isValid()) return verbs::sysError("socket", errno);
  int one = 1;
  ::setsockopt(q.ctl.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // From the data address: the set-up takes the path the QPs take.
  if (::bind(q.ctl.get(), reinterpret_cast<sockaddr*>(&*src), sizeof *src) != 0)
    return verbs::sysError("bind (set-up)", errno);
  if (::connect(q.ctl.get(), reinterpret_cast<sockaddr*>(&*dst), sizeof *dst) != 0 &&
      errno != EINPROGRESS)
    return verbs::sysError("connect to " + o_.world[size_t(q.peer)].address, errno);
  if (auto r = waitFd(q.ctl.get(), POLLOUT, std::min(deadline, monoNs() + kRecordNs),
                      "connecting the set-up connection");
      !r)
    return r;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(q.ctl.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return verbs::sysError("connect to " + o_.world[size_t(q.peer)].address, err);
  if (auto r = createQp(q); !r) return r;
  ConnData mine{kConnMagic, uint32_t(o_.rank), o_.tag, uint32_t(q.index),
                o_.checksum ? kFlagChecksum : 0, reinterpret_cast<uint64_t>(buf_.data()),
                mr_->rkey, q.qp->qp_num, q.psn, 0, {}};
  std::memcpy(mine.gid, gid_.raw, 16);
  if (auto r = sendAll(q.ctl.get(), &mine, sizeof mine, deadline); !r) return r;
  if (auto r = recvAll(q.ctl.get(), &q.remote, sizeof q.remote, deadline); !r) return r;
  if (q.remote.magic != kConnMagic || q.remote.tag != o_.tag ||
      q.remote.rank != uint32_t(q.peer) || q.remote.index != uint32_t(q.index))
    return makeError("the accepting side sent no valid QP description");
  if (auto r = toRts(q); !r) return r;
  return sendAll(q.ctl.get(), &kReady, 1, deadline);
}

// The accepting side of a request taken by takeRequests(): our QP to RTR and RTS, our record,
// then the ready byte (the dialer's QP is in RTS: our first send can be answered).
Result<void> VerbsTransport::accept(Qp& q, int64_t deadline) {
  if (auto r = createQp(q); !r) return r;
  if (auto r = toRts(q); !r) return r;
  ConnData mine{kConnMagic, uint32_t(o_.rank), o_.tag, uint32_t(q.index),
                o_.checksum ? kFlagChecksum : 0, reinterpret_cast<uint64_t>(buf_.data()),
                mr_->rkey, q.qp->qp_num, q.psn, 0, {}};
  std::memcpy(mine.gid, gid_.raw, 16);
  if (auto r = sendAll(q.ctl.get(), &mine, sizeof mine, deadline); !r) return r;
  uint8_t ready = 0;
  if (auto r = recvAll(q.ctl.get(), &ready, 1, deadline); !r) return r;
  if (ready != kReady) return makeError("the dialer sent no ready byte");
  return {};
}

int VerbsTransport::takeRequests() {
  int valid = 0;
  for (;;) {
    UniqueFD fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.isValid()) return valid;  // EAGAIN: none left
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto q = std::make_unique<Qp>();
    q->ctl = std::move(fd);
    if (!recvAll(q->ctl.get(), &q->remote, sizeof q->remote, monoNs() + kRecordNs)) continue;
    const ConnData& pd = q->remote;
    if (pd.magic != kConnMagic || pd.tag != o_.tag || int(pd.rank) <= o_.rank ||
        pd.rank >= o_.world.size() || pd.index >= uint32_t(o_.qpsPerPeer))
      continue;  // another workload's or a stray connection: closed
    q->peer = int(pd.rank);
    q->index = int(pd.index);
    pendingRequests_.push_back(std::move(q));
    valid++;
  }
}

void markClosedControls(VerbsQps& qps) {
  for (auto& [k, q] : qps) {
    if (q->disconnected || !q->ctl.isValid()) continue;
    pollfd p{q->ctl.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    // After the ready byte the peer sends nothing: readable means closed or reset.
    char c;
    ssize_t n = ::recv(q->ctl.get(), &c, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    q->disconnected = true;
  }
}

void VerbsTransport::checkControl() { markClosedControls(qps_); }

Result<void> VerbsTransport::connect(const std::vector<int>& peers, int64_t deadline) {
  if (!mr_) return makeError("connect() before registerBuffer()");
  // A flap of the NIC removes the address's GID while the link is down and adds it back
  // (maybe at another index) when it is up: look it up afresh, waiting for it.
  for (;;) {
    auto r = findGid();
    if (r) break;
    if (monoNs() >= deadline) return r.error();
    pollfd p{wake_.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) return makeError("interrupted");
  }
  if (!cq_)
    if (auto r = createCq(); !r) return r.error();
  const int Q = o_.qpsPerPeer;
  std::map<std::pair<int, int>, std::unique_ptr<Qp>> fresh;
  std::vector<std::pair<int, int>> slots;
  for (int p : peers) {
    if (p == o_.rank || p < 0 || size_t(p) >= o_.world.size()) continue;
    for (int k = 0; k < Q; k++) slots.push_back({p, k});
  }
  auto established = [&] {
    size_t n = 0;
    for (auto& s : slots) {
      auto it = fresh.find(s);
      n += it != fresh.end() && it->second->state == Qp::State::established;
    }
    return n;
  };
  std::string lastError;
  while (established() < slots.size()) {
    if (interrupted()) return makeError("interrupted");
    int64_t now = monoNs();
    if (now >= deadline)
      return makeError("connected " + std::to_string(established()) + " of " +
                       std::to_string(slots.size()) + " queue pairs before the deadline" +
                       (lastError.empty() ? "" : " (" + lastError + ")"));
    // Dial lower ranks first: a rank dials only ranks below it, so the lowest answers at
    // once and every dial ends (within the deadline) without waiting on a cycle.
    for (auto& s : slots) {
      if (s.first > o_.rank) continue;
      auto& q = fresh[s];
      if (q && (q->state == Qp::State::established || q->retryNs > monoNs())) continue;
      q = std::make_unique<Qp>();
      q->peer = s.first;
      q->index = s.second;
      q->dialer = true;
      if (auto r = dial(*q, deadline); !r) {
        if (interrupted()) return makeError("interrupted");
        q->state = Qp::State::failed;
        q->lastError = "rank " + std::to_string(s.first) + ": " + r.error().message;
        lastError = q->lastError;
        q->retryNs = monoNs() + 100'000'000;
        q->qp.reset();
        q->ctl.reset();
        (void)findGid();  // a failed RTR may mean the GID moved
      } else {
        q->state = Qp::State::established;
      }
    }
    // Then answer higher ranks: requests that came while we were in a step, and new ones.
    pollfd pf[2] = {{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    bool waitingForHigher = false;
    for (auto& s : slots)
      if (s.first > o_.rank && (!fresh.count(s) || fresh[s]->state != Qp::State::established))
        waitingForHigher = true;
    if (pendingRequests_.empty() && waitingForHigher) {
      int ms = int(std::clamp<int64_t>((deadline - monoNs()) / 1'000'000 + 1, 1, 50));
      ::poll(pf, 2, ms);
    }
    takeRequests();
    auto pending = std::move(pendingRequests_);
    pendingRequests_.clear();
    for (auto& pq : pending) {
      auto key = std::make_pair(pq->peer, pq->index);
      if (std::find(slots.begin(), slots.end(), key) == slots.end()) continue;  // closed
      if (auto r = accept(*pq, deadline); !r) {
        if (interrupted()) return makeError("interrupted");
        lastError = "rank " + std::to_string(pq->peer) + ": " + r.error().message;
        (void)findGid();
        continue;  // the dialer gave up or failed: it dials again
      }
      pq->state = Qp::State::established;
      fresh[key] = std::move(pq);  // the newest request wins
    }
    if (!waitingForHigher && established() < slots.size()) {
      // Only our own dials are missing and they wait for their retry time.
      timespec ts{0, 20'000'000};
      ::nanosleep(&ts, nullptr);
    }
  }
  qps_ = std::move(fresh);
  // Report the QP attributes once per connect: an operator compares them with NCCL's.
  for (auto& [k, q] : qps_) {
    if (k.second != 0) continue;
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(
            q->qp.get(), &a,
            IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_AV,
            &ia) == 0)
      log::info(
          "verbs: rank {} to rank {} over {}: {} QP(s), qpn {} to qpn {}, path MTU {} (port "
          "active {}), timeout {}, retry_cnt {}, rnr_retry {}, traffic class {}, GID index {}",
          o_.rank, k.first, deviceName(), o_.qpsPerPeer, q->qp->qp_num, q->remote.qpn,
          mtuBytes(a.path_mtu), activeMtu_, int(a.timeout), int(a.retry_cnt), int(a.rnr_retry),
          int(a.ah_attr.grh.traffic_class), gidIndex_);
  }
  return {};
}

}  // namespace rc::workload
