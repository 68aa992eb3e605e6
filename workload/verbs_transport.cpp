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
//
// This file: creating the transport, its CQ, the steps and the teardown; the QPs' set-up and
// connect() are in verbs_transport_connect.cpp.
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

#include "common/clock.hpp"
#include "common/log.hpp"
#include "workload/checksum.hpp"
#include "workload/collectives.hpp"
#include "workload/verbs_transport_internal.hpp"

namespace rc::workload {

using namespace verbs;

namespace {

constexpr uint32_t kGrantMagic = 0x52435647;  // "RCVG"
constexpr uint32_t kByeMagic = 0x52435642;    // "RCVB"
constexpr uint64_t kWrData = 1ull << 63;   // send wr_id: a data write; low bits: its length
constexpr uint64_t kWrCtrl = 1ull << 62;   // send wr_id: a grant or bye
constexpr uint64_t kWrProbe = 1ull << 61;  // send wr_id: a zero-length write (liveness)


}  // namespace

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

std::optional<std::string> VerbsTransport::portLoss() const {
  ibv_context* ctx = bound_->verbs;
  const uint8_t port = bound_->port_num;
  const std::string where = deviceName() + " port " + std::to_string(port);
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa) != 0) return std::nullopt;  // cannot tell: judge by completions
  if (pa.state != IBV_PORT_ACTIVE)
    return where + " is down at " + utcNow() + " (port state " + ibv_port_state_str(pa.state) + ")";
  ibv_gid g{};
  if (ibv_query_gid(ctx, port, gidIndex_, &g) != 0 || std::memcmp(&g, &gid_, sizeof g) != 0)
    return where + " is down at " + utcNow() + " (its RoCEv2 GID for " +
           o_.world[size_t(o_.rank)].address + " at index " + std::to_string(gidIndex_) + " is gone)";
  return std::nullopt;
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
// ---------------------------------------------------------------- runStep's steps

namespace {

// One runStep's state, shared by its steps below.
struct VerbsStepRun {
  StepResult res;
  std::vector<VerbsTransport::Qp*> involved;      // the QPs this step's ops use
  std::map<uint32_t, VerbsTransport::Qp*> byNum;  // the connection's QPs by QP number
  int64_t lastProgress = 0, lastProbe = 0, lastPortCheck = 0;
};

// The step is lost with PEER (RES says why); returns RES.
StepResult loseStep(StepResult& res, int peer, std::string why) {
  res.status = StepStatus::peerLost;
  res.error = "rank " + std::to_string(peer) + ": " + why;
  return res;
}

Result<void> postCtrlSend(VerbsTransport::Qp& q, Ctrl c) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&c), sizeof c, 0};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = kWrCtrl;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  if (auto r = verbs::checkRet(ibv_post_send(q.qp.get(), &wr, &bad), "ibv_post_send (control)"); !r)
    return r.error();
  q.sendsOut++;
  return {};
}

// Gives each QP its part of the step's ops (Q stripes per peer) and grants the receives; false
// (with run.res set) when a peer is not connected or a grant cannot be posted.
bool assignStepOps(std::span<const Op> ops, VerbsQps& qps, size_t Q, VerbsStepRun& run) {
  for (const auto& op : ops) {
    for (size_t k = 0; k < Q; k++) {
      size_t b = chunkBegin(op.length, Q, k), e = chunkBegin(op.length, Q, k + 1);
      if (e == b) continue;
      auto it = qps.find({op.peer, int(k)});
      if (it == qps.end() || it->second->state != VerbsTransport::Qp::State::established) {
        loseStep(run.res, op.peer, "not connected");
        return false;
      }
      VerbsTransport::Qp& q = *it->second;
      run.involved.push_back(&q);
      if (op.kind == Op::Kind::recv) {
        q.rx = VerbsTransport::Qp::Rx{op.offset + b, e - b, 0};
        // The grant is the credit: the peer writes nothing we have not asked for.
        if (auto r = postCtrlSend(q, Ctrl{kGrantMagic, uint32_t(e - b), op.offset + b}); !r) {
          loseStep(run.res, op.peer, r.error().message);
          return false;
        }
      } else {
        q.tx = VerbsTransport::Qp::Tx{op.offset + b, e - b, 0, 0, false, 0};
      }
    }
  }
  return true;
}

bool stepQpFinished(const VerbsTransport::Qp& q) {
  return (!q.rx || q.rx->got == q.rx->len) && (!q.tx || q.tx->done == q.tx->len);
}

// Handles one completion; false (with run.res set) when the step is lost.
bool takeStepCompletion(const ibv_wc& wc, VerbsStepRun& run, VerbsQps& qps, uint64_t& qpErrors,
                        const VerbsOptions& o, std::span<std::byte> buf,
                        const OnReceived& onReceived) {
  auto it = run.byNum.find(wc.qp_num);
  if (it == run.byNum.end()) return true;  // a QP of an earlier connection
  VerbsTransport::Qp& q = *it->second;
  if (wc.status != IBV_WC_SUCCESS) {
    // A flush after the peer's bye or disconnect is reported below as that, not as a fault.
    // The flush may come before the closed control connection that explains it: look.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && !q.peerBye && !q.disconnected) markClosedControls(qps);
    if (wc.status == IBV_WC_WR_FLUSH_ERR && (q.peerBye || q.disconnected)) return true;
    qpErrors++;
    bool isSend = wc.wr_id & (kWrData | kWrCtrl | kWrProbe);
    loseStep(run.res, q.peer,
             "QP " + std::to_string(q.index) + " (qpn " + std::to_string(wc.qp_num) +
                 ") in error at " + utcNow() + ": " + ibv_wc_status_str(wc.status) + " (status " +
                 std::to_string(int(wc.status)) + ", vendor error " +
                 std::to_string(wc.vendor_err) + ", on a " +
                 (!isSend                    ? "receive"
                  : (wc.wr_id & kWrProbe)    ? "send: a zero-length probe write"
                  : (wc.wr_id & kWrCtrl)     ? "send: a grant or bye"
                  : "send: a data write of " + std::to_string(wc.wr_id & ~kWrData) + " bytes") + ")");
    return false;
  }
  // A probe's ACK shows the peer's QP alive, not that the job moves.
  if (!(wc.wr_id & kWrProbe)) run.lastProgress = monoNs();
  if (wc.opcode == IBV_WC_RECV) {
    Ctrl c = q.ring[wc.wr_id];
    if (c.magic == kGrantMagic)
      q.grants.push_back(c);
    else if (c.magic == kByeMagic)
      q.peerBye = true;
  } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    if (!q.rx || q.rx->got + wc.byte_len > q.rx->len) {
      loseStep(run.res, q.peer,
               "a write arrived that was not granted (" + std::to_string(wc.byte_len) + " bytes)");
      return false;
    }
    auto& rx = *q.rx;
    if (o.checksum && (q.remote.flags & kFlagChecksum) &&
        checksum32(buf.data() + rx.off + rx.got, wc.byte_len) != ntohl(wc.imm_data))
      run.res.corruptions++;
    rx.got += wc.byte_len;
    if (onReceived) onReceived(wc.byte_len);
  } else {
    q.sendsOut--;
    if ((wc.wr_id & kWrData) && q.tx) q.tx->done += size_t(wc.wr_id & ~kWrData);
    return true;
  }
  if (auto r = postRingRecv(q, uint32_t(wc.wr_id)); !r) {
    loseStep(run.res, q.peer, r.error().message);
    return false;
  }
  return true;
}

// Posts writes for which a grant has arrived, as far as the send queue allows; false (with
// run.res set) when a grant is out of step or a post fails.
bool postGrantedWrites(VerbsStepRun& run, const VerbsOptions& o, std::span<std::byte> buf,
                       const verbs::Mr& mr) {
  for (VerbsTransport::Qp* q : run.involved) {
    if (!q->tx) continue;
    auto& tx = *q->tx;
    if (!tx.granted && !q->grants.empty()) {
      Ctrl g = q->grants.front();
      q->grants.pop_front();
      if (g.length != tx.len) {
        loseStep(run.res, q->peer,
                 "out-of-step grant (" + std::to_string(g.length) + " bytes, expected " +
                     std::to_string(tx.len) + ")");
        return false;
      }
      tx.granted = true;
      tx.raddr = q->remote.addr + g.offset;
    }
    while (tx.granted && tx.posted < tx.len && q->sendsOut < o.sendDepth) {
      size_t n = std::min(o.chunkBytes, tx.len - tx.posted);
      std::byte* p = buf.data() + tx.off + tx.posted;
      ibv_sge sge{reinterpret_cast<uint64_t>(p), uint32_t(n), mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = kWrData | n;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(o.checksum ? checksum32(p, n) : 0);
      wr.wr.rdma.remote_addr = tx.raddr + tx.posted;
      wr.wr.rdma.rkey = q->remote.rkey;
      if (auto r = verbs::checkRet(ibv_post_send(q->qp.get(), &wr, &bad), "ibv_post_send (write)");
          !r) {
        loseStep(run.res, q->peer, r.error().message);
        return false;
      }
      tx.posted += n;
      q->sendsOut++;
    }
  }
  return true;
}

// An unfinished QP whose peer said bye or is disconnected ends the step; true (with run.res
// set) when one did.
bool stepPeerGone(VerbsStepRun& run) {
  for (VerbsTransport::Qp* q : run.involved) {
    if (stepQpFinished(*q)) continue;
    if (q->peerBye || q->disconnected) {
      // Between steps (nothing of this step received from it) a peer that said bye has
      // ended its run; anything else is a lost connection.
      bool any = false;
      for (VerbsTransport::Qp* o : run.involved)
        if (o->peer == q->peer && o->rx && o->rx->got) any = true;
      run.res.status = q->peerBye && !any ? StepStatus::peerClosed : StepStatus::peerLost;
      run.res.error = "rank " + std::to_string(q->peer) +
                      (q->peerBye ? ": closed the connection" : ": connection lost (disconnected)");
      return true;
    }
  }
  return false;
}

// A rank waiting only to receive has nothing in flight, so a peer that vanished (its
// NIC down, its control connection's end not yet through) would go unnoticed: after a
// second without completions, a
// zero-length RDMA WRITE per QP needs an ACK, and ends in IBV_WC_RETRY_EXC_ERR
// within timeout x retry_cnt if the peer's QP is gone. False (with run.res set) when a probe
// cannot be posted.
bool probeSilentPeers(VerbsStepRun& run, int sendDepth) {
  if (int64_t now = monoNs();
      now - run.lastProgress > 1'000'000'000 && now - run.lastProbe > 1'000'000'000) {
    run.lastProbe = now;
    for (VerbsTransport::Qp* q : run.involved) {
      if (stepQpFinished(*q) || q->sendsOut >= sendDepth) continue;
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = kWrProbe;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = q->remote.addr;
      wr.wr.rdma.rkey = q->remote.rkey;
      if (auto r = verbs::checkRet(ibv_post_send(q->qp.get(), &wr, &bad), "ibv_post_send (probe)");
          !r) {
        loseStep(run.res, q->peer, r.error().message);
        return false;
      }
      q->sendsOut++;
    }
  }
  return true;
}

// Sleeps (at most 100 ms) until a completion event, a set-up request, a control connection's
// end or interrupt(); true when interrupted. The CQ event is taken and acknowledged here.
bool waitForStepEvent(int wakeFd, const verbs::CompChannel& comp, int listenFd,
                      const VerbsQps& qps) {
  std::vector<pollfd> pf = {{wakeFd, POLLIN, 0}, {comp->fd, POLLIN, 0}, {listenFd, POLLIN, 0}};
  for (auto& [k, q] : qps)
    if (!q->disconnected && q->ctl.isValid()) pf.push_back({q->ctl.get(), POLLIN, 0});
  ::poll(pf.data(), nfds_t(pf.size()), 100);
  if (pf[0].revents) return true;
  if (pf[1].revents) {
    ibv_cq* ecq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(comp.get(), &ecq, &ctx) == 0) ibv_ack_cq_events(ecq, 1);
  }
  return false;
}

}  // namespace

StepResult VerbsTransport::runStep(std::span<const Op> ops) {
  VerbsStepRun run;
  for (auto& [k, q] : qps_) {
    q->rx.reset();
    q->tx.reset();
    if (q->qp) run.byNum[q->qp->qp_num] = q.get();
  }
  if (!assignStepOps(ops, qps_, size_t(o_.qpsPerPeer), run)) return run.res;
  run.lastProgress = monoNs();
  const int64_t progressNs = o_.progressTimeoutMs * 1'000'000;
  ibv_wc wcs[32];
  auto process = [&](const ibv_wc& wc) {
    return takeStepCompletion(wc, run, qps_, qpErrors_, o_, buf_, onReceived_);
  };
  for (;;) {
    if (!postGrantedWrites(run, o_, buf_, mr_)) return run.res;
    int n = ibv_poll_cq(cq_.get(), 32, wcs);
    if (n < 0) return loseStep(run.res, -1, "ibv_poll_cq failed");
    for (int i = 0; i < n; i++)
      if (!process(wcs[i])) return run.res;
    if (n > 0) continue;  // drain before sleeping
    if (std::all_of(run.involved.begin(), run.involved.end(),
                    [](Qp* q) { return stepQpFinished(*q); }))
      return run.res;
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
          run.res.status = StepStatus::peerLost;
          run.res.error = "rank " + std::to_string(pq->peer) +
                          ": reconnects (its end of our queue pairs is gone)";
          return run.res;
        }
    if (stepPeerGone(run)) return run.res;
    // A step silent for over a second looks at its own port every half second: a node whose
    // NIC went down may have nothing posted that could fail (it waits to receive, or rxe keeps
    // retrying its sends), and would otherwise learn of it only from its progress timeout.
    if (int64_t now = monoNs();
        now - run.lastProgress > 1'000'000'000 && now - run.lastPortCheck > 500'000'000) {
      run.lastPortCheck = now;
      if (auto why = portLoss())
        return loseStep(run.res, run.involved.empty() ? -1 : run.involved[0]->peer, *why);
    }
    if (!probeSilentPeers(run, o_.sendDepth)) return run.res;
    if (monoNs() - run.lastProgress > progressNs)
      return loseStep(run.res, run.involved.empty() ? -1 : run.involved[0]->peer,
                      "no completion for " + std::to_string(o_.progressTimeoutMs) + " ms");
    // Arm the CQ, then look once more: a completion between the last poll and the arm
    // raises no event.
    if (ibv_req_notify_cq(cq_.get(), 0) != 0)
      return loseStep(run.res, -1, "ibv_req_notify_cq failed");
    n = ibv_poll_cq(cq_.get(), 1, wcs);
    if (n > 0) {
      if (!process(wcs[0])) return run.res;
      continue;
    }
    if (waitForStepEvent(wake_.get(), comp_, listen_.get(), qps_)) {
      run.res.status = StepStatus::stopped;
      return run.res;
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
      if (postCtrlSend(*q, Ctrl{kByeMagic, 0, 0})) outstanding++;
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
