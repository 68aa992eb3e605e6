// Verbs transport: RC QPs set up over TCP between the ranks' data addresses (the higher rank
// dials; QP number, PSN, GID, buffer address and rkey exchanged there; INIT/RTR/RTS by hand),
// grants as SENDs, data as RDMA WRITE WITH IMM, all completions on one CQ waited for through
// its completion channel.
//
// Why not rdma_cm's connection manager: on the soft-RoCE lab, after a guest's data NIC went
// down and up while its QPs carried traffic, rxe on that guest dropped every CM MAD that
// arrived for it (its rcvd_pkts stayed still while the UDP datagrams arrived, data QPs set up
// without the CM worked), so rdma_connect between the two guests timed out for good while TCP
// between them worked. The set-up here needs only TCP and the data QPs. rdma_cm is still used
// to find the RDMA device and port behind the data address (rdma_bind_addr: no MADs).
#include "workload/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>

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
constexpr uint8_t kReady = 'R';               // the dialer's QP is in RTS: the last set-up byte
constexpr uint64_t kWrData = 1ull << 63;   // send wr_id: a data write; low bits: its length
constexpr uint64_t kWrCtrl = 1ull << 62;   // send wr_id: a grant or bye
constexpr uint64_t kWrProbe = 1ull << 61;  // send wr_id: a zero-length write (liveness)
// A set-up connection whose first record does not arrive within this is dropped.
constexpr int64_t kRecordNs = 2'000'000'000;

// What each side of a set-up connection sends (the dialer first): who it is, its QP, and
// where to write. Both ends are x86-64 guests/hosts of one lab or cluster: host byte order.
struct ConnData {
  uint32_t magic, rank;
  uint64_t tag;
  uint32_t index, flags;
  uint64_t addr;
  uint32_t rkey, qpn;
  uint32_t psn, reserved;
  uint8_t gid[16];
};
static_assert(sizeof(ConnData) == 64);

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

uint32_t randomPsn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffff;
}

}  // namespace

struct VerbsTransport::Qp {
  // Declaration order is destruction order reversed: the QP goes before the control MR its
  // receive WRs point into.
  Mr ctrlMr;
  std::vector<Ctrl> ring;
  QpHandle qp;
  UniqueFD ctl;  // the set-up connection, kept open: its end tells the peer we are gone
  int peer = -1, index = 0;
  bool dialer = false;
  enum class State { idle, established, failed } state = State::idle;
  int64_t retryNs = 0;
  std::string lastError;
  uint32_t psn = 0;
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
  return bound_ && bound_->verbs ? ibv_get_device_name(bound_->verbs->device) : "";
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
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(t->channel_.get(), &id, nullptr, RDMA_PS_TCP) != 0)
    return sysError("rdma_create_id", errno);
  t->bound_.reset(id);
  const Endpoint& me = op.world[size_t(op.rank)];
  auto sa = toAddr(Endpoint{me.address, 0});
  if (!sa) return sa.error();
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&*sa)) != 0)
    return sysError("cannot find the RDMA device of " + me.address +
                        " (rdma_bind_addr; is that this node's data address?)",
                    errno);
  if (!id->verbs)
    return makeError("no RDMA device carries the data address " + me.address +
                     ": the verbs transport needs an RDMA device (RoCE: one bound to the data "
                     "interface, e.g. 'rdma link add rxe0 type rxe netdev data0')");
  if (auto r = t->findGid(); !r) return r.error();
  t->pd_.reset(ibv_alloc_pd(id->verbs));
  if (!t->pd_) return sysError("ibv_alloc_pd on " + t->deviceName(), errno);
  auto lsa = toAddr(me);
  if (!lsa) return lsa.error();
  t->listen_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!t->listen_.isValid()) return sysError("socket", errno);
  int one = 1;
  ::setsockopt(t->listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(t->listen_.get(), reinterpret_cast<sockaddr*>(&*lsa), sizeof *lsa) != 0)
    return sysError("cannot bind the verbs set-up listener to " + me.address + ":" +
                        std::to_string(me.port) + " (is the port free?)",
                    errno);
  if (::listen(t->listen_.get(), 64) != 0) return sysError("listen", errno);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(t->listen_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  t->port_ = ntohs(bound.sin_port);
  return t;
}

Result<void> VerbsTransport::findGid() {
  ibv_context* ctx = bound_->verbs;
  const uint8_t port = bound_->port_num;
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa) != 0)
    return sysError("ibv_query_port on " + deviceName(), errno);
  activeMtu_ = mtuBytes(pa.active_mtu);
  pathMtu_ = pa.active_mtu;
  auto sa = toAddr(Endpoint{o_.world[size_t(o_.rank)].address, 0});
  if (!sa) return sa.error();
  ibv_gid want{};  // RoCEv2's GID of an IPv4 address: ::ffff:a.b.c.d
  want.raw[10] = want.raw[11] = 0xff;
  std::memcpy(&want.raw[12], &sa->sin_addr, 4);
  if (int i = roceV2GidIndex(ctx, port, pa.gid_tbl_len, sa->sin_addr); i >= 0) {
    gidIndex_ = i;
    gid_ = want;
    return {};
  }
  return makeError(deviceName() + " port " + std::to_string(port) + " has no RoCEv2 GID for " +
                   o_.world[size_t(o_.rank)].address + " (is its port active?)");
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
  return checkRet(ibv_post_recv(q.qp.get(), &wr, &bad), "ibv_post_recv");
}

// A QP in INIT with its receives posted: what the peer needs to know of it is its number.
Result<void> VerbsTransport::createQp(Qp& q) {
  q.ring.assign(size_t(o_.recvDepth), Ctrl{});
  q.ctrlMr.reset(
      // As an int: rdma-core's ibv_reg_mr macro ANDs the flags with an enum of another type,
      // which clang rejects for a bare enumerator (-Wdeprecated-enum-enum-conversion).
      ibv_reg_mr(pd_.get(), q.ring.data(), q.ring.size() * sizeof(Ctrl), int{IBV_ACCESS_LOCAL_WRITE}));
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
  q.qp.reset(ibv_create_qp(pd_.get(), &a));
  if (!q.qp) return sysError("ibv_create_qp on " + deviceName(), errno);
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.pkey_index = 0;
  m.port_num = bound_->port_num;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (auto r = checkRet(ibv_modify_qp(q.qp.get(), &m,
                                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                          IBV_QP_ACCESS_FLAGS),
                        "ibv_modify_qp (INIT)");
      !r)
    return r.error();
  q.psn = randomPsn();
  for (uint32_t s = 0; s < uint32_t(o_.recvDepth); s++)
    if (auto r = postRecv(q, s); !r) return r.error();
  return {};
}

// RTR towards q.remote (the kernel resolves the peer's MAC from its GID), then RTS with
// NCCL's timeout and retry counts.
Result<void> VerbsTransport::toRts(Qp& q) {
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = pathMtu_;
  m.dest_qp_num = q.remote.qpn;
  m.rq_psn = q.remote.psn & 0xffffff;
  m.max_dest_rd_atomic = 1;
  m.min_rnr_timer = 12;
  m.ah_attr.is_global = 1;
  std::memcpy(m.ah_attr.grh.dgid.raw, q.remote.gid, 16);
  m.ah_attr.grh.sgid_index = uint8_t(gidIndex_);
  m.ah_attr.grh.hop_limit = 64;
  m.ah_attr.grh.traffic_class = o_.tos;
  m.ah_attr.port_num = bound_->port_num;
  if (auto r = checkRet(
          ibv_modify_qp(q.qp.get(), &m,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
          "ibv_modify_qp (RTR)");
      !r)
    return r.error();
  ibv_qp_attr t{};
  t.qp_state = IBV_QPS_RTS;
  t.timeout = o_.timeout;
  t.retry_cnt = o_.retryCount;
  t.rnr_retry = o_.rnrRetry;
  t.sq_psn = q.psn;
  t.max_rd_atomic = 1;
  return checkRet(ibv_modify_qp(q.qp.get(), &t,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                  "ibv_modify_qp (RTS)");
}

Result<void> VerbsTransport::waitFd(int fd, short events, int64_t deadline, const char* what) {
  for (;;) {
    int64_t now = monoNs();
    if (now >= deadline) return makeError(std::string("timed out ") + what, ETIMEDOUT);
    pollfd pf[2] = {{fd, events, 0}, {wake_.get(), POLLIN, 0}};
    int ms = int(std::clamp<int64_t>((deadline - now) / 1'000'000 + 1, 1, 100));
    int n = ::poll(pf, 2, ms);
    if (n < 0 && errno != EINTR) return sysError("poll", errno);
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
    if (k < 0 && errno != EAGAIN && errno != EINTR) return sysError("send (set-up)", errno);
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
    if (errno != EAGAIN && errno != EINTR) return sysError("recv (set-up)", errno);
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
  if (!q.ctl.isValid()) return sysError("socket", errno);
  int one = 1;
  ::setsockopt(q.ctl.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // From the data address: the set-up takes the path the QPs take.
  if (::bind(q.ctl.get(), reinterpret_cast<sockaddr*>(&*src), sizeof *src) != 0)
    return sysError("bind (set-up)", errno);
  if (::connect(q.ctl.get(), reinterpret_cast<sockaddr*>(&*dst), sizeof *dst) != 0 &&
      errno != EINPROGRESS)
    return sysError("connect to " + o_.world[size_t(q.peer)].address, errno);
  if (auto r = waitFd(q.ctl.get(), POLLOUT, std::min(deadline, monoNs() + kRecordNs),
                      "connecting the set-up connection");
      !r)
    return r;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(q.ctl.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return sysError("connect to " + o_.world[size_t(q.peer)].address, err);
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

void VerbsTransport::checkControl() {
  for (auto& [k, q] : qps_) {
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

std::vector<VerbsQpInfo> VerbsTransport::qpInfo() const {
  std::vector<VerbsQpInfo> v;
  for (auto& [k, q] : qps_) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (!q->qp) continue;
    if (ibv_query_qp(
            q->qp.get(), &a,
            IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_AV,
            &ia) != 0)
      continue;
    v.push_back({k.first, k.second, q->qp->qp_num, mtuBytes(a.path_mtu), activeMtu_,
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
    if (q->qp) byNum[q->qp->qp_num] = q.get();
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
    if (auto r = checkRet(ibv_post_send(q.qp.get(), &wr, &bad), "ibv_post_send (grant)"); !r)
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
      // The flush may come before the closed control connection that explains it: look.
      if (wc.status == IBV_WC_WR_FLUSH_ERR && !q.peerBye && !q.disconnected) checkControl();
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
        if (auto r = checkRet(ibv_post_send(q->qp.get(), &wr, &bad), "ibv_post_send (write)"); !r)
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
    // A peer that closed its control connections has dropped its QPs. A completion of its
    // bye can still be on its way into the CQ: drain once more before judging.
    {
      size_t gone = 0, after = 0;
      for (auto& [k, q] : qps_) gone += q->disconnected;
      checkControl();
      for (auto& [k, q] : qps_) after += q->disconnected;
      if (after > gone) continue;
    }
    // A peer that dials us again has dropped its QPs too (its request waits for connect()).
    if (takeRequests() > 0)
      for (auto& pq : pendingRequests_)
        if (qps_.count({pq->peer, pq->index})) {
          res.status = StepStatus::peerLost;
          res.error = "rank " + std::to_string(pq->peer) +
                      ": reconnects (its end of our queue pairs is gone)";
          return res;
        }
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
    // NIC down, its control connection's end not yet through) would go unnoticed: after a
    // second without completions, a
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
        if (auto r = checkRet(ibv_post_send(q->qp.get(), &wr, &bad), "ibv_post_send (probe)"); !r)
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
    std::vector<pollfd> pf = {
        {wake_.get(), POLLIN, 0}, {comp_->fd, POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    for (auto& [k, q] : qps_)
      if (!q->disconnected && q->ctl.isValid()) pf.push_back({q->ctl.get(), POLLIN, 0});
    ::poll(pf.data(), nfds_t(pf.size()), 100);
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
      if (ibv_post_send(q->qp.get(), &wr, &bad) == 0) outstanding++;
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
  // Closing the control connections tells the peers at once (also when this process dies);
  // the QPs go with them.
  qps_.clear();
  cq_.reset();
  comp_.reset();
}

void VerbsTransport::disconnect() { destroyAll(false); }

void VerbsTransport::close() { destroyAll(true); }

}  // namespace rc::workload
