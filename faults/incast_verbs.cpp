// The incast fault's verbs generator: RC QPs set up over TCP, RDMA WRITEs from every sender's
// flows into one registered region of the receiver (see incast_verbs.hpp for the protocol).
//
// Every verbs handle is a move-only owner (common/verbs_handles.hpp) declared in dependency
// order, so leaving a function on any path destroys the QPs before their CQ, the CQ before
// its channel, the MR before its memory and PD, and the PD before the device's rdma_cm id:
// nothing outlives the fault (and if the agent dies, the kernel frees them with its process).
//
// This file: the set-up helpers both sides use (incast_verbs_internal.hpp) and the sender; the
// receiver's sink is in incast_verbs_sink.cpp.
#include "faults/incast_verbs.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/unique_fd.hpp"
#include "common/units.hpp"
#include "common/verbs_handles.hpp"
#include "faults/incast_verbs_internal.hpp"

namespace rc::faults::incast_verbs {

using namespace rc::verbs;

namespace {

constexpr int kDepth = 16;               // writes in flight per flow
constexpr auto kConnectPatience = std::chrono::seconds(3);  // the sink starts at the same instant
constexpr auto kReportEvery = std::chrono::milliseconds(200);
constexpr auto kRetryFlowAfter = std::chrono::seconds(1);
constexpr auto kDrain = std::chrono::milliseconds(500);  // writes in flight at the end
// A QP with writes in flight and no completion for this long is dead (rxe may retry forever).
// Far above a burst's time on the lab (p50 30-40 ms, max 0.3 s) and above the QP's own
// give-up (timeout 14 x retry_cnt 7: about 0.5 s) on a NIC that honours it.
constexpr auto kStall = std::chrono::seconds(5);
// Traffic that has not flowed again this long after a QP error (every set-up since failed, or
// every new QP stalled) will not: the sender ends with an error that says so.
constexpr auto kNoRecovery = std::chrono::seconds(10);


}  // namespace

std::string addrText(in_addr a) {
  char b[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

uint32_t randomPsn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffff;
}

int msUntil(Clock::time_point t) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::clamp<int64_t>(d + 1, 0, 1000));
}

// The port's state, MTU and the GID index of ADDR, read again before each set-up: the index
// changes when the NIC flaps (the kernel removes the address's GID and adds it back).
Result<void> refreshPort(Device& d, in_addr addr) {
  ibv_port_attr pa{};
  if (ibv_query_port(d.id->verbs, d.id->port_num, &pa) != 0)
    return sysError("incast (verbs): ibv_query_port on " + d.name(), errno);
  d.active = pa.state == IBV_PORT_ACTIVE;
  d.mtu = pa.active_mtu;
  d.gidIndex = roceV2GidIndex(d.id->verbs, d.id->port_num, pa.gid_tbl_len, addr);
  if (d.gidIndex < 0)
    return makeError("incast (verbs): " + d.name() + " port " + std::to_string(d.id->port_num) +
                     " has no RoCEv2 GID for " + addrText(addr) + " (is its port active?)");
  return {};
}

Result<std::unique_ptr<Device>> openDevice(in_addr addr) {
  auto d = std::make_unique<Device>();
  d->channel.reset(rdma_create_event_channel());
  if (!d->channel)
    return sysError("incast (verbs): cannot open the RDMA connection manager (is an RDMA device present?)", errno);
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(d->channel.get(), &id, nullptr, RDMA_PS_TCP) != 0) return sysError("rdma_create_id", errno);
  d->id.reset(id);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa)) != 0 || !id->verbs)
    return makeError("incast (verbs): no RDMA device carries " + addrText(addr) +
                     " (RoCE: bind one to the data interface, e.g. 'rdma link add rxe0 type rxe netdev data0'; "
                     "or use transport = \"tcp\")");
  d->gid[10] = d->gid[11] = 0xff;
  std::memcpy(&d->gid[12], &addr, 4);
  if (auto r = refreshPort(*d, addr); !r) return r.error();
  return d;
}

Result<QpHandle> createQp(const Device& dev, ibv_pd* pd, ibv_cq* cq, int sendDepth) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = uint32_t(sendDepth);
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  QpHandle qp(ibv_create_qp(pd, &a));
  if (!qp) return sysError("incast (verbs): ibv_create_qp on " + dev.name(), errno);
  if (auto r = rc::verbs::qpToInit(qp.get(), dev.id->port_num, "incast (verbs): "); !r) return r.error();
  return qp;
}

// RTR towards the peer (the kernel resolves its MAC from the GID), then RTS with NCCL's
// defaults (timeout 14: 67 ms per try, 7 retries, RNR retried forever), as the workload's QPs.
Result<void> toRts(const Device& dev, ibv_qp* qp, uint32_t remoteQpn, uint32_t remotePsn, const uint8_t* remoteGid,
                   uint32_t psn, int dscp) {
  return rc::verbs::qpToRts(qp, {dev.id->port_num, dev.mtu, dev.gidIndex, uint8_t(dscp << 2)},
                            {remoteQpn, remotePsn, remoteGid}, psn, {14, 7, 7}, "incast (verbs): ");
}

namespace {

// Waits for FD (EVENTS) until GIVEUP; an error when stopped or timed out.
Result<void> waitFd(int fd, short events, int wakeFd, Clock::time_point giveUp, const std::string& what) {
  for (;;) {
    if (Clock::now() >= giveUp) return makeError("incast (verbs): timed out " + what, ETIMEDOUT);
    pollfd pf[2] = {{fd, events, 0}, {wakeFd, POLLIN, 0}};
    int n = ::poll(pf, 2, msUntil(giveUp));
    if (n < 0 && errno != EINTR) return sysError("incast (verbs): poll", errno);
    if (pf[1].revents) return makeError("incast (verbs): stopped while " + what, EINTR);
    if (n > 0 && pf[0].revents) return {};
  }
}

Result<void> recvAll(int fd, void* p, size_t n, int wakeFd, Clock::time_point giveUp, const std::string& what) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::recv(fd, c, n, MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0) return makeError("incast (verbs): the sink closed the set-up connection while " + what, ECONNRESET);
    if (errno != EAGAIN && errno != EINTR) return sysError("incast (verbs): recv while " + what, errno);
    if (auto r = waitFd(fd, POLLIN, wakeFd, giveUp, what); !r) return r;
  }
  return {};
}

}  // namespace

// A whole small record on a non-blocking socket whose buffer has room for it (set-up
// records and progress reports are tens of bytes; a full buffer means a dead peer).
bool sendRecord(int fd, const void* p, size_t n) {
  return ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(n);
}

bool carries(in_addr addr) {
  if (::access("/sys/class/infiniband", F_OK) != 0) return false;  // no RDMA device at all: ask nothing
  auto d = openDevice(addr);
  return d && (*d)->active;
}

// ---------------------------------------------------------------- a sender

namespace {

struct SendFlow {
  UniqueFD ctl;
  QpHandle qp;
  uint32_t gen = 0;  // bumped when the QP is replaced: older completions are ignored
  bool up = false;
  int64_t left = 0;  // bytes of this burst still to post
  int inflight = 0;
  uint64_t raddr = 0, rlen = 0, off = 0;
  uint32_t rkey = 0;
  uint64_t connBytes = 0;  // completed on this connection (what its progress reports say)
  uint8_t in[sizeof(Bye)] = {};  // the sink's farewell, as it arrives
  size_t have = 0;
  Clock::time_point retryAt{};
  Clock::time_point lastCompletion{};  // or the set-up: for the stall check
};

uint64_t wrId(size_t flow, uint32_t gen, size_t len) {
  return (uint64_t(flow) << 48) | (uint64_t(gen & 0xffff) << 32) | uint64_t(len);
}

// Every CQ event taken is acknowledged before the CQ goes (ibv_destroy_cq waits for that).
struct SendCqAcks {
  ibv_cq* cq;
  unsigned n = 0;
  ~SendCqAcks() {
    if (n) ibv_ack_cq_events(cq, n);
  }
};

// One sender's run over the verbs resources send() owns (and destroys after it, in their
// order): its flows, each a set-up connection and a QP, the bursts, and the "sent" record.
// Its steps share the run's state as members.
class IncastSender {
 public:
  IncastSender(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events,
               Device& d, const Pd& pd, const Mr& mr, const CompChannel& comp, const Cq& cq, SendCqAcks& acks,
               const std::vector<uint8_t>& source, size_t chunk)
      : o_(o), stop_(stop), wakeFd_(wakeFd), end_(end), events_(events), d_(d), pd_(pd), mr_(mr), comp_(comp),
        cq_(cq), acks_(acks), source_(source), chunk_(chunk), flows_(size_t(o.flows)) {}

  // Sets every flow up (the sink starts at the same instant) and records "connected".
  Result<void> connectAll();
  // The bursts, until END, a stop, the sink's end or a failure (returned).
  Result<void> runBursts();
  // Writes still in flight complete (or not) within a moment; then the last report, and the
  // flows' QPs and set-up connections go.
  void drain(const Result<void>& failure);
  // Records "sent"; the bytes the completed writes carried, FAILURE, or the error that the
  // traffic did not flow again after a QP error.
  Result<uint64_t> finish(const Result<void>& failure);

 private:
  Result<void> connectFlow(size_t i, Clock::time_point giveUp);
  void reportFlow(SendFlow& f);
  void report();
  void dropFlow(size_t i, const std::string& why);
  void postWrites(size_t i);
  bool reap();
  void dropStalled();
  void setUpAgain(bool join);
  Result<void> waitForEvents(Clock::time_point until, bool wake);

  const Options& o_;
  std::stop_token& stop_;
  const int wakeFd_;
  const Clock::time_point end_;
  EventLog& events_;
  Device& d_;
  const Pd& pd_;
  const Mr& mr_;
  const CompChannel& comp_;
  const Cq& cq_;
  SendCqAcks& acks_;
  const std::vector<uint8_t>& source_;  // what every write carries (zeros)
  const size_t chunk_;
  std::vector<SendFlow> flows_;
  uint64_t bytes_ = 0, qpErrors_ = 0, reconnects_ = 0, failedReconnects_ = 0;
  std::string ended_;
  // For the check that the traffic flowed again after the last QP error.
  Clock::time_point lastWrite_{}, lastErrorAt_{};
  std::string lastError_;
  std::vector<int64_t> burstNs_;
  Clock::time_point lastReport_{};
};

// One flow: TCP from the data address to the sink, our QP, its reply, our QP to RTS.
Result<void> IncastSender::connectFlow(size_t i, Clock::time_point giveUp) {
  SendFlow& f = flows_[i];
  f.qp.reset();
  f.ctl.reset();
  f.up = false;
  f.gen++;
  f.inflight = 0;
  f.connBytes = 0;
  f.have = 0;
  sockaddr_in to{}, from{};
  to.sin_family = from.sin_family = AF_INET;
  to.sin_port = htons(o_.port);
  to.sin_addr = o_.receiverAddr;
  from.sin_addr = o_.localAddr;
  for (;;) {
    if (stop_.stop_requested()) return makeError("incast (verbs): stopped while connecting", EINTR);
    f.ctl.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!f.ctl.isValid()) return sysError("incast (verbs): socket", errno);
    int one = 1;
    ::setsockopt(f.ctl.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::bind(f.ctl.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
      return sysError("incast (verbs): cannot bind to " + addrText(o_.localAddr), errno);
    int err = 0;
    if (::connect(f.ctl.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        auto w = waitFd(f.ctl.get(), POLLOUT, wakeFd_, giveUp, "connecting to " + o_.receiver);
        if (!w) return w;
        socklen_t len = sizeof err;
        ::getsockopt(f.ctl.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) break;
    if (Clock::now() >= giveUp)
      return makeError("incast (verbs): " + o_.receiver + ":" + std::to_string(o_.port) + " did not accept (" +
                           errnoText(err) + "); the receiver runs the sink only while the same incast fault runs there",
                       err);
    pollfd pf{wakeFd_, POLLIN, 0};
    ::poll(&pf, 1, 20);  // refused: the sink starts at the same instant and may be a moment late
  }
  if (auto r = refreshPort(d_, o_.localAddr); !r) return r;
  auto qp = createQp(d_, pd_.get(), cq_.get(), kDepth + 1);
  if (!qp) return qp.error();
  f.qp = std::move(*qp);
  uint32_t psn = randomPsn();
  Hello h{kHelloMagic, uint32_t(i), f.qp->qp_num, psn, {}};
  std::memcpy(h.gid, d_.gid, 16);
  if (!sendRecord(f.ctl.get(), &h, sizeof h)) return sysError("incast (verbs): sending the QP description", errno);
  Reply rep{};
  if (auto r = recvAll(f.ctl.get(), &rep, sizeof rep, wakeFd_, giveUp, "waiting for the sink's QP"); !r) return r;
  if (rep.magic != kReplyMagic || rep.length < chunk_)
    return makeError("incast (verbs): " + o_.receiver + ":" + std::to_string(o_.port) +
                     " answered with no valid verbs sink record (is its incast transport \"verbs\" too?)");
  if (auto r = toRts(d_, f.qp.get(), rep.qpn, rep.psn, rep.gid, psn, o_.dscp); !r) return r;
  f.raddr = rep.addr;
  f.rlen = rep.length;
  f.rkey = rep.rkey;
  f.off = 0;
  f.up = true;
  return {};
}

void IncastSender::reportFlow(SendFlow& f) {
  Progress p{kProgressMagic, uint32_t(qpErrors_), f.connBytes};
  (void)sendRecord(f.ctl.get(), &p, sizeof p);
}

void IncastSender::report() {
  for (auto& f : flows_)
    if (f.up) reportFlow(f);
  lastReport_ = Clock::now();
}

// A flow whose QP failed, stalled or lost its set-up connection: counted, reported with
// why and when, its QP and connection closed (the sink keeps what it last heard), and set up
// again after a second while the other flows carry on.
void IncastSender::dropFlow(size_t i, const std::string& why) {
  SendFlow& f = flows_[i];
  qpErrors_++;
  lastErrorAt_ = Clock::now();
  lastError_ = "flow " + std::to_string(i) + ": " + why + " at " + utcNow();
  events_.add(Event{wallNs(), "qp_error", "flow " + std::to_string(i) + " -> " + o_.receiver + ": " + why + " at " + utcNow(),
                   false});
  reportFlow(f);
  f.qp.reset();
  f.ctl.reset();
  f.up = false;
  f.gen++;  // its writes still in the CQ are ignored
  f.left = 0;
  f.inflight = 0;
  f.retryAt = Clock::now() + kRetryFlowAfter;
}

void IncastSender::postWrites(size_t i) {
  SendFlow& f = flows_[i];
  while (f.up && f.left > 0 && f.inflight < kDepth) {
    size_t len = size_t(std::min<int64_t>(f.left, int64_t(chunk_)));
    if (f.off + len > f.rlen) f.off = 0;
    ibv_sge sge{reinterpret_cast<uint64_t>(source_.data()), uint32_t(len), mr_->lkey};
    ibv_send_wr wr{}, *badWr = nullptr;
    wr.wr_id = wrId(i, f.gen, len);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = f.raddr + f.off;
    wr.wr.rdma.rkey = f.rkey;
    if (int e = ibv_post_send(f.qp.get(), &wr, &badWr); e != 0) {
      dropFlow(i, "ibv_post_send failed: " + errnoText(e));
      return;
    }
    f.off += len;
    f.left -= int64_t(len);
    f.inflight++;
  }
}

// Takes every completion there is; false when polling the CQ failed.
bool IncastSender::reap() {
  ibv_wc wc[32];
  for (;;) {
    int n = ibv_poll_cq(cq_.get(), 32, wc);
    if (n < 0) return false;
    for (int k = 0; k < n; k++) {
      size_t i = size_t(wc[k].wr_id >> 48);
      uint32_t gen = uint32_t(wc[k].wr_id >> 32) & 0xffff;
      if (i >= flows_.size() || !flows_[i].up || gen != (flows_[i].gen & 0xffff)) continue;  // a dropped QP's
      SendFlow& f = flows_[i];
      if (wc[k].status == IBV_WC_SUCCESS) {
        f.inflight--;
        f.lastCompletion = lastWrite_ = Clock::now();
        uint64_t len = wc[k].wr_id & 0xffffffffu;
        f.connBytes += len;
        bytes_ += len;
        continue;
      }
      dropFlow(i, std::string(ibv_wc_status_str(wc[k].status)) + " (status " + std::to_string(int(wc[k].status)) +
                      ")");
    }
    if (n < 32) return true;
  }
}

// rxe may retry a QP without end (seen after a flap of the sender's NIC, no error ever
// completing its writes): writes in flight with no completion for kStall mean a dead QP.
void IncastSender::dropStalled() {
  auto now = Clock::now();
  for (size_t i = 0; i < flows_.size(); i++) {
    SendFlow& f = flows_[i];
    if (f.up && f.inflight > 0 && now - f.lastCompletion >= kStall)
      dropFlow(i, "no completion for " + formatDuration(kStall) + " with " + std::to_string(f.inflight) +
                      " WRITEs in flight (the QP stalled)");
  }
}

// Flows whose retry time came get a new QP (a new set-up); with JOIN, they take their part
// of the burst under way.
void IncastSender::setUpAgain(bool join) {
  for (size_t i = 0; i < flows_.size() && !stop_.stop_requested(); i++) {
    if (flows_[i].up || Clock::now() < flows_[i].retryAt) continue;
    auto r = connectFlow(i, std::min(end_, Clock::now() + kConnectPatience));
    if (r) {
      reconnects_++;
      flows_[i].lastCompletion = Clock::now();
      if (join) flows_[i].left = o_.sizeBytes;
    } else {
      failedReconnects_++;
      flows_[i].ctl.reset();
      flows_[i].qp.reset();
      flows_[i].retryAt = Clock::now() + kRetryFlowAfter;
    }
  }
}

// Waits for a completion, the wake fd (unless WAKE is false: once stopped it stays
// readable), a set-up connection becoming readable, or UNTIL.
Result<void> IncastSender::waitForEvents(Clock::time_point until, bool wake) {
  if (auto r = checkRet(ibv_req_notify_cq(cq_.get(), 0), "incast (verbs): ibv_req_notify_cq"); !r) return r;
  if (!reap()) return makeError("incast (verbs): ibv_poll_cq failed");  // arrived before the request
  std::vector<pollfd> pfds{{wake ? wakeFd_ : -1, POLLIN, 0}, {comp_->fd, POLLIN, 0}};
  std::vector<size_t> which;  // pfds[2 + k] is flows[which[k]]'s connection
  for (size_t i = 0; i < flows_.size(); i++)
    if (flows_[i].up) {
      pfds.push_back({flows_[i].ctl.get(), POLLIN, 0});
      which.push_back(i);
    }
  int n = ::poll(pfds.data(), pfds.size(), msUntil(until));
  if (n < 0 && errno != EINTR) return sysError("incast (verbs): poll", errno);
  if (pfds[1].revents & POLLIN) {
    ibv_cq* evCq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(comp_.get(), &evCq, &ctx) == 0) acks_.n++;
  }
  for (size_t k = 0; k < which.size(); k++) {
    SendFlow& f = flows_[which[k]];
    if (!(pfds[k + 2].revents & (POLLIN | POLLHUP | POLLERR)) || !f.up) continue;
    // After its reply the sink sends one record, its farewell when its incast ends. A close
    // (or reset) without it is this flow's failure, not the receiver's end: the flow is set
    // up again, and the sink, if it is really gone, refuses that.
    ssize_t r = 0;
    while (f.have < sizeof(Bye) &&
           (r = ::recv(f.ctl.get(), f.in + f.have, sizeof(Bye) - f.have, MSG_DONTWAIT)) > 0)
      f.have += size_t(r);
    if (f.have == sizeof(Bye)) {
      Bye b;
      std::memcpy(&b, f.in, sizeof b);
      if (b.magic == kByeMagic) {
        ended_ = "receiver closed the flow (its incast ended)";
        continue;
      }
      dropFlow(which[k], "the sink sent a record that is not its farewell");
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    dropFlow(which[k], r == 0 ? std::string("the sink closed the set-up connection without ending its incast")
                              : "set-up connection failed: " + errnoText(errno));
  }
  if (!reap()) return makeError("incast (verbs): ibv_poll_cq failed");
  dropStalled();
  return {};
}

Result<void> IncastSender::connectAll() {
  for (size_t i = 0; i < flows_.size(); i++)
    if (auto r = connectFlow(i, Clock::now() + kConnectPatience); !r) return r;
  for (auto& f : flows_) f.lastCompletion = Clock::now();
  events_.add(Event{wallNs(), "connected",
                   std::to_string(o_.flows) + " QPs -> " + o_.receiver + " (RDMA WRITE, set up on port " +
                       std::to_string(o_.port) + ", " + d_.name() + ")",
                   false});
  lastWrite_ = Clock::now();
  lastReport_ = Clock::now();
  return {};
}

Result<void> IncastSender::runBursts() {
  Result<void> failure;
  auto t0 = Clock::now();
  int64_t burst = 0;
  while (!stop_.stop_requested() && Clock::now() < end_ && ended_.empty() && failure) {
    if (o_.intervalNs > 0) {
      auto slot = t0 + std::chrono::nanoseconds(o_.intervalNs * burst);
      while (Clock::now() < slot && !stop_.stop_requested() && Clock::now() < end_) {
        pollfd pf{wakeFd_, POLLIN, 0};
        ::poll(&pf, 1, msUntil(std::min(slot, end_)));
      }
      if (stop_.stop_requested() || Clock::now() >= end_) break;
      auto late = Clock::now() - t0;
      burst = std::max<int64_t>(burst, std::chrono::duration_cast<std::chrono::nanoseconds>(late).count() / o_.intervalNs);
    }
    setUpAgain(false);
    auto bStart = Clock::now();
    bool any = false;
    for (size_t i = 0; i < flows_.size(); i++) {
      flows_[i].left = flows_[i].up ? o_.sizeBytes : 0;
      any = any || flows_[i].up;
    }
    if (!any) {  // every QP failed: wait for the next set-up attempt
      auto next = end_;
      for (auto& f : flows_) next = std::min(next, f.retryAt);
      pollfd pf{wakeFd_, POLLIN, 0};
      ::poll(&pf, 1, msUntil(next));
      continue;
    }
    for (;;) {
      setUpAgain(true);
      bool busy = false;
      for (size_t i = 0; i < flows_.size(); i++) {
        postWrites(i);
        busy = busy || (flows_[i].up && (flows_[i].left > 0 || flows_[i].inflight > 0));
      }
      if (!busy || stop_.stop_requested() || Clock::now() >= end_ || !ended_.empty()) break;
      if (Clock::now() - lastReport_ >= kReportEvery) report();
      failure = waitForEvents(std::min(end_, lastReport_ + kReportEvery), true);
      if (!failure) break;
    }
    // A burst counts when every flow that is up wrote its part (and one was).
    bool completed = std::any_of(flows_.begin(), flows_.end(), [](const SendFlow& f) { return f.up; }) &&
                     std::all_of(flows_.begin(), flows_.end(),
                                 [](const SendFlow& f) { return !f.up || (f.left == 0 && f.inflight == 0); });
    if (completed && ended_.empty() && !stop_.stop_requested() && Clock::now() < end_) {
      burstNs_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - bStart).count());
      burst++;
    }
    if (Clock::now() - lastReport_ >= kReportEvery) report();
  }
  return failure;
}

// Writes still in flight complete (or not) within a moment; then the last report.
void IncastSender::drain(const Result<void>& failure) {
  auto drainUntil = Clock::now() + kDrain;
  while (failure && ended_.empty() && Clock::now() < drainUntil &&
         std::any_of(flows_.begin(), flows_.end(), [](const SendFlow& f) { return f.up && f.inflight > 0; })) {
    auto w = waitForEvents(drainUntil, false);
    if (!w) break;
  }
  if (ended_.empty()) report();
  flows_.clear();  // QPs and set-up connections go first
}

Result<uint64_t> IncastSender::finish(const Result<void>& failure) {
  std::string summary = std::to_string(burstNs_.size()) + " bursts, " + std::to_string(bytes_) + " B (" +
                        formatSize(bytes_) + ") written by RDMA WRITE (completed)";
  if (!burstNs_.empty()) {
    std::sort(burstNs_.begin(), burstNs_.end());
    summary += ", burst time p50 " + formatDuration(Nanos(burstNs_[burstNs_.size() / 2])) + " max " +
               formatDuration(Nanos(burstNs_.back()));
  }
  if (qpErrors_) summary += ", " + std::to_string(qpErrors_) + " QP errors";
  if (reconnects_ || failedReconnects_)
    summary += ", QPs set up again " + std::to_string(reconnects_) + " times" +
               (failedReconnects_ ? " (" + std::to_string(failedReconnects_) + " attempts failed)" : std::string());
  if (!ended_.empty()) summary += "; " + ended_;
  // A QP error after which no WRITE completed again, with time enough to recover: the traffic
  // cannot flow (rxe wedged every new QP, or every set-up failed). Said, never silent.
  const auto endedAt = Clock::now();
  const bool flowedAgain = qpErrors_ == 0 || lastWrite_ > lastErrorAt_;
  if (!flowedAgain) {
    summary += "; no WRITE completed in the " + formatDuration(std::chrono::duration_cast<Nanos>(endedAt - lastErrorAt_)) +
               " after the last QP error";
  }
  events_.add(Event{wallNs(), "sent", summary, false});
  if (!failure) return failure.error();
  if (!flowedAgain && endedAt - lastErrorAt_ >= kNoRecovery)
    return makeError("incast (verbs): the traffic to " + o_.receiver + " did not flow again: no RDMA WRITE completed in the " +
                     formatDuration(std::chrono::duration_cast<Nanos>(endedAt - lastErrorAt_)) +
                     " after the last QP error (" + lastError_ + "); QPs set up again " + std::to_string(reconnects_) +
                     " times, " + std::to_string(failedReconnects_) + " attempts failed",
                     EIO);
  return bytes_;
}

}  // namespace

Result<uint64_t> send(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
  auto dev = openDevice(o.localAddr);
  if (!dev) return dev.error();
  Device& d = **dev;
  Pd pd(ibv_alloc_pd(d.id->verbs));
  if (!pd) return sysError("incast (verbs): ibv_alloc_pd on " + d.name(), errno);
  const size_t chunk = std::min<size_t>(kChunk, size_t(o.sizeBytes));
  std::vector<uint8_t> source(chunk);  // what every write carries (zeros)
  Mr mr(ibv_reg_mr(pd.get(), source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE));
  if (!mr) return sysError("incast (verbs): ibv_reg_mr on " + d.name(), errno);
  CompChannel comp(ibv_create_comp_channel(d.id->verbs));
  if (!comp) return sysError("incast (verbs): ibv_create_comp_channel", errno);
  ::fcntl(comp->fd, F_SETFL, ::fcntl(comp->fd, F_GETFL) | O_NONBLOCK);
  Cq cq(ibv_create_cq(d.id->verbs, o.flows * (kDepth + 1), nullptr, comp.get(), 0));
  if (!cq) return sysError("incast (verbs): ibv_create_cq (" + std::to_string(o.flows * (kDepth + 1)) + ")", errno);
  SendCqAcks acks{cq.get()};
  // Declared after ACKS: its flows' QPs go before the CQ events are acknowledged.
  IncastSender sender(o, stop, wakeFd, end, events, d, pd, mr, comp, cq, acks, source, chunk);
  if (auto r = sender.connectAll(); !r) return r.error();
  Result<void> failure = sender.runBursts();
  sender.drain(failure);
  return sender.finish(failure);
}

}  // namespace rc::faults::incast_verbs
