// Verbs transport: rdma_cm connection set-up (the higher rank dials, buffer address and rkey
// in the CM private data), grants as SENDs, data as RDMA WRITE WITH IMM, all completions on
// one CQ waited for through its completion channel.
//
// Why rdma_cm rather than raw ibverbs with an exchange over the agents' channel: the ranks
// already know each other's data IP addresses (the TCP transport dials the same ones), and
// rdma_cm turns an IP address into the right RoCEv2 GID, path MTU and QP transitions
// (INIT/RTR/RTS) the way every RDMA application on a RoCE fabric does; an out-of-band
// exchange would need GID-index selection by hand and a second round trip through the
// controller on every reconnect.
#include "workload/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <optional>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "workload/checksum.hpp"
#include "workload/collectives.hpp"

namespace rc::workload {

using namespace verbs;

namespace {

constexpr uint32_t kConnMagic = 0x52435643;   // "RCVC"
constexpr uint32_t kGrantMagic = 0x52435647;  // "RCVG"
constexpr uint32_t kByeMagic = 0x52435642;    // "RCVB"
constexpr uint32_t kFlagChecksum = 1;
constexpr uint64_t kWrData = 1ull << 63;   // send wr_id: a data write; low bits: its length
constexpr uint64_t kWrCtrl = 1ull << 62;   // send wr_id: a grant or bye
constexpr uint64_t kWrProbe = 1ull << 61;  // send wr_id: a zero-length write (liveness)

// In the CM private data (56 bytes at most on RoCE): who dials, and where to write.
struct ConnData {
  uint32_t magic, rank;
  uint64_t tag;
  uint32_t index, flags;
  uint64_t addr;
  uint32_t rkey, reserved;
};
static_assert(sizeof(ConnData) == 40);

// A receive slot: a grant (the peer may write LENGTH bytes at OFFSET) or a bye (orderly end).
struct Ctrl {
  uint32_t magic, length;
  uint64_t offset;
};
static_assert(sizeof(Ctrl) == 16);

int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

std::string utcNow() {
  int64_t ns = wallNs();
  time_t s = time_t(ns / 1'000'000'000);
  tm t{};
  gmtime_r(&s, &t);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d.%03d UTC", t.tm_hour, t.tm_min, t.tm_sec,
                int(ns / 1'000'000 % 1000));
  return b;
}

}  // namespace

struct VerbsTransport::Qp {
  // Declaration order is destruction order reversed: the id (and its QP) goes before the
  // control MR its receive WRs point into.
  Mr ctrlMr;
  std::vector<Ctrl> ring;
  CmId id;
  int peer = -1, index = 0;
  bool dialer = false;
  enum class State { resolving, connecting, established, failed } state = State::resolving;
  int64_t retryNs = 0;
  std::string lastError;
  ConnData remote{};
  std::deque<Ctrl> grants;  // received, not yet used: the peer's credits
  int sendsOut = 0;
  bool peerBye = false, disconnected = false;
  // The current step's transfers on this QP (at most one of each).
  struct Rx {
    size_t off = 0, len = 0, got = 0;
  };
  struct Tx {
    size_t off = 0, len = 0, posted = 0, done = 0;
    bool granted = false;
    uint64_t raddr = 0;
  };
  std::optional<Rx> rx;
  std::optional<Tx> tx;
};

VerbsTransport::VerbsTransport(VerbsOptions o) : o_(std::move(o)) {}

VerbsTransport::~VerbsTransport() {
  destroyAll(false);
  pendingRequests_.clear();
}

bool VerbsTransport::interrupted() const {
  pollfd p{wake_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void VerbsTransport::interrupt() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

std::string VerbsTransport::deviceName() const {
  return listener_ && listener_->verbs ? ibv_get_device_name(listener_->verbs->device) : "";
}

Result<std::unique_ptr<VerbsTransport>> VerbsTransport::create(VerbsOptions o) {
  if (o.rank < 0 || size_t(o.rank) >= o.world.size()) return makeError("rank outside the world");
  if (o.qpsPerPeer < 1 || o.qpsPerPeer > 16) return makeError("QPs per peer must be 1 to 16");
  if (o.timeout > 31 || o.retryCount > 7 || o.rnrRetry > 7)
    return makeError("QP timeout must be 0 to 31, retry_cnt and rnr_retry 0 to 7");
  if (o.chunkBytes < 64 || o.chunkBytes > (1u << 30)) return makeError("chunk size out of range");
  std::unique_ptr<VerbsTransport> t(new VerbsTransport(std::move(o)));
  const VerbsOptions& op = t->o_;
  t->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!t->wake_.isValid()) return sysError("eventfd", errno);
  t->channel_.reset(rdma_create_event_channel());
  if (!t->channel_)
    return sysError(
        "cannot open the RDMA connection manager (rdma_create_event_channel; is "
        "rdma_ucm loaded and an RDMA device present?)",
        errno);
  int fl = ::fcntl(t->channel_->fd, F_GETFL);
  ::fcntl(t->channel_->fd, F_SETFL, fl | O_NONBLOCK);
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(t->channel_.get(), &id, nullptr, RDMA_PS_TCP) != 0)
    return sysError("rdma_create_id", errno);
  t->listener_.reset(id);
  const Endpoint& me = op.world[size_t(op.rank)];
  auto sa = toAddr(me);
  if (!sa) return sa.error();
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&*sa)) != 0)
    return sysError("cannot bind the verbs listener to " + me.address + ":" +
                        std::to_string(me.port) + " (is that this node's data address?)",
                    errno);
  if (!id->verbs)
    return makeError("no RDMA device carries the data address " + me.address +
                     ": the verbs transport needs an RDMA device (RoCE: one bound to the data "
                     "interface, e.g. 'rdma link add rxe0 type rxe netdev data0')");
  if (auto r = checkMinus1(rdma_listen(id, 64), "rdma_listen"); !r) return r.error();
  t->port_ = ntohs(rdma_get_src_port(id));
  uint8_t tos = op.tos;
  (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos);
  t->pd_.reset(ibv_alloc_pd(id->verbs));
  if (!t->pd_) return sysError("ibv_alloc_pd on " + t->deviceName(), errno);
  ibv_port_attr pa{};
  if (ibv_query_port(id->verbs, id->port_num, &pa) == 0) t->activeMtu_ = mtuBytes(pa.active_mtu);
  return t;
}

Result<void> VerbsTransport::registerBuffer(std::span<std::byte> b) {
  buf_ = b;
  mr_.reset(ibv_reg_mr(pd_.get(), b.data(), std::max<size_t>(b.size(), 1),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!mr_)
    return sysError("cannot register " + std::to_string(b.size()) + " bytes with " + deviceName() +
                        " (ibv_reg_mr; RLIMIT_MEMLOCK?)",
                    errno);
  return {};
}

Result<void> VerbsTransport::createCq() {
  comp_.reset(ibv_create_comp_channel(pd_->context));
  if (!comp_) return sysError("ibv_create_comp_channel", errno);
  int fl = ::fcntl(comp_->fd, F_GETFL);
  ::fcntl(comp_->fd, F_SETFL, fl | O_NONBLOCK);
  ibv_device_attr da{};
  int maxCqe = ibv_query_device(pd_->context, &da) == 0 ? da.max_cqe : 4096;
  size_t peers = o_.world.size() - 1;
  int want = int(std::min<size_t>(
      size_t(maxCqe), peers * size_t(o_.qpsPerPeer) * size_t(o_.recvDepth + o_.sendDepth + 8)));
  cq_.reset(ibv_create_cq(pd_->context, want, nullptr, comp_.get(), 0));
  if (!cq_) return sysError("ibv_create_cq (" + std::to_string(want) + " entries)", errno);
  return {};
}

Result<void> VerbsTransport::postRecv(Qp& q, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&q.ring[slot]), sizeof(Ctrl), q.ctrlMr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return checkRet(ibv_post_recv(q.id->qp, &wr, &bad), "ibv_post_recv");
}

Result<void> VerbsTransport::setupQp(Qp& q) {
  if (q.id->verbs != pd_->context)
    return makeError("rank " + std::to_string(q.peer) +
                     " is reached through another RDMA "
                     "device than the one on this node's data address");
  uint8_t timeout = o_.timeout;
  if (auto r = checkMinus1(rdma_set_option(q.id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                                           &timeout, sizeof timeout),
                           "rdma_set_option(ACK_TIMEOUT)");
      !r)
    return r.error();
  q.ring.assign(size_t(o_.recvDepth), Ctrl{});
  q.ctrlMr.reset(
      ibv_reg_mr(pd_.get(), q.ring.data(), q.ring.size() * sizeof(Ctrl), IBV_ACCESS_LOCAL_WRITE));
  if (!q.ctrlMr) return sysError("ibv_reg_mr (receive ring)", errno);
  ibv_qp_init_attr a{};
  a.send_cq = cq_.get();
  a.recv_cq = cq_.get();
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = uint32_t(o_.sendDepth + 4);
  a.cap.max_recv_wr = uint32_t(o_.recvDepth);
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = sizeof(Ctrl);
  if (auto r = checkMinus1(rdma_create_qp(q.id.get(), pd_.get(), &a), "rdma_create_qp"); !r)
    return r.error();
  for (uint32_t s = 0; s < uint32_t(o_.recvDepth); s++)
    if (auto r = postRecv(q, s); !r) return r.error();
  return {};
}

void VerbsTransport::handleCmEvents() {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(channel_.get(), &ev) != 0) return;  // EAGAIN: none left
    // Copy what is needed and ack at once: rdma_destroy_id waits for unacked events.
    rdma_cm_event_type type = ev->event;
    int status = ev->status;
    rdma_cm_id* id = ev->id;
    ConnData pd{};
    bool hasPd = ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof pd;
    if (hasPd) std::memcpy(&pd, ev->param.conn.private_data, sizeof pd);
    rdma_ack_cm_event(ev);

    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      auto q = std::make_unique<Qp>();
      q->id.reset(id);
      q->remote = pd;
      bool ok = hasPd && pd.magic == kConnMagic && pd.tag == o_.tag && int(pd.rank) > o_.rank &&
                pd.rank < o_.world.size() && pd.index < uint32_t(o_.qpsPerPeer);
      if (!ok) {
        rdma_reject(id, nullptr, 0);
        continue;  // q's destructor destroys the id
      }
      q->peer = int(pd.rank);
      q->index = int(pd.index);
      id->context = q.get();
      // Requests of a peer that reconnects while we are still in a step wait for connect().
      pendingRequests_.push_back(std::move(q));
      continue;
    }
    auto* q = static_cast<Qp*>(id ? id->context : nullptr);
    if (!q) continue;
    auto fail = [&](std::string why) {
      q->state = Qp::State::failed;
      q->lastError = std::move(why);
      q->retryNs = monoNs() + 100'000'000;
    };
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 2000) != 0)
          fail(std::string("rdma_resolve_route: ") + std::strerror(errno));
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (auto r = setupQp(*q); !r) {
          fail(r.error().message);
          break;
        }
        ConnData mine{kConnMagic,
                      uint32_t(o_.rank),
                      o_.tag,
                      uint32_t(q->index),
                      o_.checksum ? kFlagChecksum : 0,
                      reinterpret_cast<uint64_t>(buf_.data()),
                      mr_->rkey,
                      0};
        rdma_conn_param cp{};
        cp.private_data = &mine;
        cp.private_data_len = sizeof mine;
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        cp.retry_count = o_.retryCount;
        cp.rnr_retry_count = o_.rnrRetry;
        if (rdma_connect(id, &cp) != 0)
          fail(std::string("rdma_connect: ") + std::strerror(errno));
        else
          q->state = Qp::State::connecting;
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        if (q->dialer) {
          if (!hasPd || pd.magic != kConnMagic || pd.tag != o_.tag) {
            fail("the accepting side sent no valid buffer description");
            break;
          }
          q->remote = pd;
        }
        q->state = Qp::State::established;
        break;
      case RDMA_CM_EVENT_DISCONNECTED:
        q->disconnected = true;
        if (q->state != Qp::State::established) fail("disconnected during set-up");
        break;
      case RDMA_CM_EVENT_ADDR_ERROR:
      case RDMA_CM_EVENT_ROUTE_ERROR:
      case RDMA_CM_EVENT_CONNECT_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_REJECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        fail(std::string(rdma_event_str(type)) + " (status " + std::to_string(status) + ")");
        if (q->state == Qp::State::established || type == RDMA_CM_EVENT_DEVICE_REMOVAL)
          q->disconnected = true;
        break;
      default:
        break;
    }
  }
}

Result<void> VerbsTransport::connect(const std::vector<int>& peers, int64_t deadline) {
  if (!mr_) return makeError("connect() before registerBuffer()");
  if (!cq_)
    if (auto r = createCq(); !r) return r.error();
  const int Q = o_.qpsPerPeer;
  std::map<std::pair<int, int>, std::unique_ptr<Qp>> fresh;
  std::vector<std::pair<int, int>> slots;
  for (int p : peers) {
    if (p == o_.rank || p < 0 || size_t(p) >= o_.world.size()) continue;
    for (int k = 0; k < Q; k++) slots.push_back({p, k});
  }
  auto mySa = toAddr(Endpoint{o_.world[size_t(o_.rank)].address, 0});
  if (!mySa) return mySa.error();
  auto acceptPending = [&]() -> Result<void> {
    for (auto& pq : pendingRequests_) {
      auto key = std::make_pair(pq->peer, pq->index);
      if (std::find(slots.begin(), slots.end(), key) == slots.end()) {
        rdma_reject(pq->id.get(), nullptr, 0);
        continue;
      }
      Qp& q = *pq;
      if (auto r = setupQp(q); !r) return r.error();
      ConnData mine{kConnMagic,
                    uint32_t(o_.rank),
                    o_.tag,
                    uint32_t(q.index),
                    o_.checksum ? kFlagChecksum : 0,
                    reinterpret_cast<uint64_t>(buf_.data()),
                    mr_->rkey,
                    0};
      rdma_conn_param cp{};
      cp.private_data = &mine;
      cp.private_data_len = sizeof mine;
      cp.responder_resources = 1;
      cp.initiator_depth = 1;
      cp.rnr_retry_count = o_.rnrRetry;
      if (rdma_accept(q.id.get(), &cp) != 0) continue;  // the requester gave up: drop it
      q.state = Qp::State::connecting;
      fresh[key] = std::move(pq);  // the newest request wins
    }
    pendingRequests_.clear();
    return {};
  };
  auto established = [&] {
    size_t n = 0;
    for (auto& s : slots) {
      auto it = fresh.find(s);
      n += it != fresh.end() && it->second->state == Qp::State::established;
    }
    return n;
  };
  while (established() < slots.size()) {
    if (interrupted()) return makeError("interrupted");
    if (auto r = acceptPending(); !r) return r.error();
    int64_t now = monoNs();
    if (now >= deadline) {
      std::string why;
      for (auto& [k, q] : fresh)
        if (q->state != Qp::State::established && !q->lastError.empty()) {
          why = " (rank " + std::to_string(k.first) + ": " + q->lastError + ")";
          break;
        }
      return makeError("connected " + std::to_string(established()) + " of " +
                       std::to_string(slots.size()) + " queue pairs before the deadline" + why);
    }
    // Dial what is due: lower ranks are dialled, higher ranks dial us.
    for (auto& s : slots) {
      if (s.first > o_.rank) continue;
      auto& q = fresh[s];
      if (q && q->state != Qp::State::failed) continue;
      if (q && q->retryNs > now) continue;
      std::string last = q ? q->lastError : "";
      q = std::make_unique<Qp>();
      q->peer = s.first;
      q->index = s.second;
      q->dialer = true;
      q->lastError = last;
      rdma_cm_id* id = nullptr;
      if (rdma_create_id(channel_.get(), &id, q.get(), RDMA_PS_TCP) != 0)
        return sysError("rdma_create_id", errno);
      q->id.reset(id);
      uint8_t tos = o_.tos;
      (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos);
      auto dst = toAddr(o_.world[size_t(s.first)]);
      if (!dst) return dst.error();
      sockaddr_in src = *mySa;
      if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                            reinterpret_cast<sockaddr*>(&*dst), 2000) != 0) {
        q->state = Qp::State::failed;
        q->lastError = std::string("rdma_resolve_addr: ") + std::strerror(errno);
        q->retryNs = now + 100'000'000;
      }
    }
    pollfd pf[2] = {{wake_.get(), POLLIN, 0}, {channel_->fd, POLLIN, 0}};
    int timeoutMs = int(std::clamp<int64_t>((deadline - now) / 1'000'000 + 1, 1, 50));
    ::poll(pf, 2, timeoutMs);
    handleCmEvents();
    // Our own accepted requests that failed (the requester gave up) leave the slot open.
    for (auto it = fresh.begin(); it != fresh.end();)
      if (!it->second->dialer && it->second->state == Qp::State::failed)
        it = fresh.erase(it);
      else
        ++it;
  }
  qps_ = std::move(fresh);
  // Report what rdma_cm negotiated, once per connect: an operator compares it with NCCL's.
  for (auto& [k, q] : qps_) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(
            q->id->qp, &a,
            IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_AV,
            &ia) == 0 &&
        k.second == 0)
      log::info(
          "verbs: rank {} to rank {} over {}: {} QP(s), qpn {}, path MTU {} (port active "
          "{}), timeout {}, retry_cnt {}, rnr_retry {}, traffic class {}",
          o_.rank, k.first, deviceName(), o_.qpsPerPeer, q->id->qp->qp_num, mtuBytes(a.path_mtu),
          activeMtu_, int(a.timeout), int(a.retry_cnt), int(a.rnr_retry),
          int(a.ah_attr.grh.traffic_class));
  }
  return {};
}

std::vector<VerbsQpInfo> VerbsTransport::qpInfo() const {
  std::vector<VerbsQpInfo> v;
  for (auto& [k, q] : qps_) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (!q->id || !q->id->qp) continue;
    if (ibv_query_qp(
            q->id->qp, &a,
            IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_AV,
            &ia) != 0)
      continue;
    v.push_back({k.first, k.second, q->id->qp->qp_num, mtuBytes(a.path_mtu), activeMtu_,
                 int(a.timeout), int(a.retry_cnt), int(a.rnr_retry),
                 int(a.ah_attr.grh.traffic_class)});
  }
  return v;
}

StepResult VerbsTransport::runStep(std::span<const Op> ops) {
  StepResult res;
  const size_t Q = size_t(o_.qpsPerPeer);
  std::vector<Qp*> involved;
  std::map<uint32_t, Qp*> byNum;
  for (auto& [k, q] : qps_) {
    q->rx.reset();
    q->tx.reset();
    if (q->id && q->id->qp) byNum[q->id->qp->qp_num] = q.get();
  }
  auto lostWith = [&](int peer, std::string why) {
    res.status = StepStatus::peerLost;
    res.error = "rank " + std::to_string(peer) + ": " + why;
    return res;
  };
  auto postCtrl = [&](Qp& q, Ctrl c) -> Result<void> {
    ibv_sge sge{reinterpret_cast<uint64_t>(&c), sizeof c, 0};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = kWrCtrl;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    if (auto r = checkRet(ibv_post_send(q.id->qp, &wr, &bad), "ibv_post_send (grant)"); !r)
      return r.error();
    q.sendsOut++;
    return {};
  };
  for (const auto& op : ops) {
    for (size_t k = 0; k < Q; k++) {
      size_t b = chunkBegin(op.length, Q, k), e = chunkBegin(op.length, Q, k + 1);
      if (e == b) continue;
      auto it = qps_.find({op.peer, int(k)});
      if (it == qps_.end() || it->second->state != Qp::State::established)
        return lostWith(op.peer, "not connected");
      Qp& q = *it->second;
      involved.push_back(&q);
      if (op.kind == Op::Kind::recv) {
        q.rx = Qp::Rx{op.offset + b, e - b, 0};
        // The grant is the credit: the peer writes nothing we have not asked for.
        if (auto r = postCtrl(q, Ctrl{kGrantMagic, uint32_t(e - b), op.offset + b}); !r)
          return lostWith(op.peer, r.error().message);
      } else {
        q.tx = Qp::Tx{op.offset + b, e - b, 0, 0, false, 0};
      }
    }
  }
  auto finished = [](const Qp& q) {
    return (!q.rx || q.rx->got == q.rx->len) && (!q.tx || q.tx->done == q.tx->len);
  };
  int64_t lastProgress = monoNs(), lastProbe = 0;
  const int64_t progressNs = o_.progressTimeoutMs * 1'000'000;
  ibv_wc wcs[32];
  // Handles one completion; false (with RES set) when the step is lost.
  auto process = [&](const ibv_wc& wc) -> bool {
    auto it = byNum.find(wc.qp_num);
    if (it == byNum.end()) return true;  // a QP of an earlier connection
    Qp& q = *it->second;
    if (wc.status != IBV_WC_SUCCESS) {
      // A flush after the peer's bye or disconnect is reported below as that, not as a fault.
      // The flush may come before the CM event that explains it: read those first.
      if (wc.status == IBV_WC_WR_FLUSH_ERR && !q.peerBye && !q.disconnected) handleCmEvents();
      if (wc.status == IBV_WC_WR_FLUSH_ERR && (q.peerBye || q.disconnected)) return true;
      qpErrors_++;
      bool isSend = wc.wr_id & (kWrData | kWrCtrl | kWrProbe);
      lostWith(q.peer, "QP " + std::to_string(q.index) + " (qpn " + std::to_string(wc.qp_num) +
                           ") in error at " + utcNow() + ": " + ibv_wc_status_str(wc.status) +
                           " (status " + std::to_string(int(wc.status)) + ", vendor error " +
                           std::to_string(wc.vendor_err) + ", on a " +
                           (isSend ? "send" : "receive") + ")");
      return false;
    }
    // A probe's ACK shows the peer's QP alive, not that the job moves.
    if (!(wc.wr_id & kWrProbe)) lastProgress = monoNs();
    if (wc.opcode == IBV_WC_RECV) {
      Ctrl c = q.ring[wc.wr_id];
      if (c.magic == kGrantMagic)
        q.grants.push_back(c);
      else if (c.magic == kByeMagic)
        q.peerBye = true;
    } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      if (!q.rx || q.rx->got + wc.byte_len > q.rx->len) {
        lostWith(q.peer, "a write arrived that was not granted (" + std::to_string(wc.byte_len) +
                             " bytes)");
        return false;
      }
      auto& rx = *q.rx;
      if (o_.checksum && (q.remote.flags & kFlagChecksum) &&
          checksum32(buf_.data() + rx.off + rx.got, wc.byte_len) != ntohl(wc.imm_data))
        res.corruptions++;
      rx.got += wc.byte_len;
      if (onReceived_) onReceived_(wc.byte_len);
    } else {
      q.sendsOut--;
      if ((wc.wr_id & kWrData) && q.tx) q.tx->done += size_t(wc.wr_id & ~kWrData);
      return true;
    }
    if (auto r = postRecv(q, uint32_t(wc.wr_id)); !r) {
      lostWith(q.peer, r.error().message);
      return false;
    }
    return true;
  };
  for (;;) {
    // Post writes for which a grant has arrived, as far as the send queue allows.
    for (Qp* q : involved) {
      if (!q->tx) continue;
      auto& tx = *q->tx;
      if (!tx.granted && !q->grants.empty()) {
        Ctrl g = q->grants.front();
        q->grants.pop_front();
        if (g.length != tx.len)
          return lostWith(q->peer, "out-of-step grant (" + std::to_string(g.length) +
                                       " bytes, expected " + std::to_string(tx.len) + ")");
        tx.granted = true;
        tx.raddr = q->remote.addr + g.offset;
      }
      while (tx.granted && tx.posted < tx.len && q->sendsOut < o_.sendDepth) {
        size_t n = std::min(o_.chunkBytes, tx.len - tx.posted);
        std::byte* p = buf_.data() + tx.off + tx.posted;
        ibv_sge sge{reinterpret_cast<uint64_t>(p), uint32_t(n), mr_->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.wr_id = kWrData | n;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htonl(o_.checksum ? checksum32(p, n) : 0);
        wr.wr.rdma.remote_addr = tx.raddr + tx.posted;
        wr.wr.rdma.rkey = q->remote.rkey;
        if (auto r = checkRet(ibv_post_send(q->id->qp, &wr, &bad), "ibv_post_send (write)"); !r)
          return lostWith(q->peer, r.error().message);
        tx.posted += n;
        q->sendsOut++;
      }
    }
    int n = ibv_poll_cq(cq_.get(), 32, wcs);
    if (n < 0) return lostWith(-1, "ibv_poll_cq failed");
    for (int i = 0; i < n; i++)
      if (!process(wcs[i])) return res;
    if (n > 0) continue;  // drain before sleeping
    if (std::all_of(involved.begin(), involved.end(), [&](Qp* q) { return finished(*q); }))
      return res;
    handleCmEvents();
    for (Qp* q : involved) {
      if (finished(*q)) continue;
      if (q->peerBye || q->disconnected) {
        // Between steps (nothing of this step received from it) a peer that said bye has
        // ended its run; anything else is a lost connection.
        bool any = false;
        for (Qp* o : involved)
          if (o->peer == q->peer && o->rx && o->rx->got) any = true;
        res.status = q->peerBye && !any ? StepStatus::peerClosed : StepStatus::peerLost;
        res.error = "rank " + std::to_string(q->peer) +
                    (q->peerBye ? ": closed the connection" : ": connection lost (disconnected)");
        return res;
      }
    }
    // A rank waiting only to receive has nothing in flight, so a peer that vanished (its
    // NIC down, its DREQ lost) would go unnoticed: after a second without completions, a
    // zero-length RDMA WRITE per QP needs an ACK, and ends in IBV_WC_RETRY_EXC_ERR
    // within timeout x retry_cnt if the peer's QP is gone.
    if (int64_t now = monoNs();
        now - lastProgress > 1'000'000'000 && now - lastProbe > 1'000'000'000) {
      lastProbe = now;
      for (Qp* q : involved) {
        if (finished(*q) || q->sendsOut >= o_.sendDepth) continue;
        ibv_send_wr wr{}, *bad = nullptr;
        wr.wr_id = kWrProbe;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = q->remote.addr;
        wr.wr.rdma.rkey = q->remote.rkey;
        if (auto r = checkRet(ibv_post_send(q->id->qp, &wr, &bad), "ibv_post_send (probe)"); !r)
          return lostWith(q->peer, r.error().message);
        q->sendsOut++;
      }
    }
    if (monoNs() - lastProgress > progressNs)
      return lostWith(involved.empty() ? -1 : involved[0]->peer,
                      "no completion for " + std::to_string(o_.progressTimeoutMs) + " ms");
    // Arm the CQ, then look once more: a completion between the last poll and the arm
    // raises no event.
    if (ibv_req_notify_cq(cq_.get(), 0) != 0) return lostWith(-1, "ibv_req_notify_cq failed");
    n = ibv_poll_cq(cq_.get(), 1, wcs);
    if (n > 0) {
      if (!process(wcs[0])) return res;
      continue;
    }
    pollfd pf[3] = {{wake_.get(), POLLIN, 0}, {comp_->fd, POLLIN, 0}, {channel_->fd, POLLIN, 0}};
    ::poll(pf, 3, 100);
    if (pf[0].revents) {
      res.status = StepStatus::stopped;
      return res;
    }
    if (pf[1].revents) {
      ibv_cq* ecq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(comp_.get(), &ecq, &ctx) == 0) ibv_ack_cq_events(ecq, 1);
    }
  }
}

void VerbsTransport::destroyAll(bool orderly) {
  if (orderly && cq_) {
    // Say bye on every QP so that peers tell our end of run from a failure, and wait
    // (bounded) for the sends to complete: then the data before them arrived too.
    int outstanding = 0;
    for (auto& [k, q] : qps_) {
      if (q->state != Qp::State::established || q->disconnected) continue;
      Ctrl c{kByeMagic, 0, 0};
      ibv_sge sge{reinterpret_cast<uint64_t>(&c), sizeof c, 0};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = kWrCtrl;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
      if (ibv_post_send(q->id->qp, &wr, &bad) == 0) outstanding++;
    }
    int64_t until = monoNs() + 1'000'000'000;
    ibv_wc wcs[16];
    while (outstanding > 0 && monoNs() < until) {
      int n = ibv_poll_cq(cq_.get(), 16, wcs);
      if (n < 0) break;
      for (int i = 0; i < n; i++)
        if (wcs[i].wr_id == kWrCtrl) outstanding--;
      if (n == 0) {
        timespec ts{0, 1'000'000};
        ::nanosleep(&ts, nullptr);
      }
    }
  }
  for (auto& [k, q] : qps_)
    if (q->id && q->state == Qp::State::established) rdma_disconnect(q->id.get());
  qps_.clear();
  cq_.reset();
  comp_.reset();
}

void VerbsTransport::disconnect() { destroyAll(false); }

void VerbsTransport::close() { destroyAll(true); }

}  // namespace rc::workload
