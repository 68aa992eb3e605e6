// The incast fault's verbs generator: RC QPs set up over TCP, RDMA WRITEs from every sender's
// flows into one registered region of the receiver (see incast_verbs.hpp for the protocol).
//
// Every verbs handle is a move-only owner (common/verbs_handles.hpp) declared in dependency
// order, so leaving a function on any path destroys the QPs before their CQ, the CQ before
// its channel, the MR before its memory and PD, and the PD before the device's rdma_cm id:
// nothing outlives the fault (and if the agent dies, the kernel frees them with its process).
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

namespace rc::faults::incast_verbs {

using namespace rc::verbs;

namespace {

constexpr uint32_t kHelloMagic = 0x52434948;     // "RCIH": a sender's QP
constexpr uint32_t kReplyMagic = 0x52434952;     // "RCIR": the sink's QP and region
constexpr uint32_t kProgressMagic = 0x52434950;  // "RCIP": bytes completed so far
constexpr uint32_t kByeMagic = 0x52434945;       // "RCIE": the sink's incast ended
constexpr size_t kChunk = 64 << 10;      // one RDMA WRITE
constexpr int kDepth = 16;               // writes in flight per flow
constexpr size_t kMaxRegion = 4 << 20;   // the sink's region; every flow writes over it
constexpr auto kConnectPatience = std::chrono::seconds(3);  // the sink starts at the same instant
constexpr auto kHelloPatience = std::chrono::seconds(2);   // a set-up connection that says nothing
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

// Both ends are x86-64 nodes of one lab or cluster: host byte order, as the workload's set-up.
struct Hello {
  uint32_t magic, flow, qpn, psn;
  uint8_t gid[16];
};
struct Reply {
  uint32_t magic, qpn, psn, rkey;
  uint64_t addr, length;
  uint8_t gid[16];
};
struct Progress {
  uint32_t magic, qpErrors;  // the sender's QP errors so far (its own record reports them)
  uint64_t bytes;  // cumulative on this connection
};
// The sink's last word on every flow when its incast ends (lifetime, revert): a set-up
// connection that closes without it is a failed flow, which its sender sets up again.
struct Bye {
  uint32_t magic, reserved;
  uint64_t bytes;  // what the sink counted on this connection
};
static_assert(sizeof(Hello) == 32 && sizeof(Reply) == 48 && sizeof(Progress) == 16 && sizeof(Bye) == 16);

std::string addrText(in_addr a) {
  char b[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

std::string utcNow() {
  int64_t ns = wallNs();
  time_t s = time_t(ns / 1'000'000'000);
  tm t{};
  gmtime_r(&s, &t);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d.%03d UTC", t.tm_hour, t.tm_min, t.tm_sec, int(ns / 1'000'000 % 1000));
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

// The RDMA device and port behind a local address (rdma_bind_addr sends nothing), its
// RoCEv2 GID for that address and the port's active MTU.
struct Device {
  EventChannel channel;
  CmId id;
  int gidIndex = -1;
  uint8_t gid[16] = {};
  ibv_mtu mtu = IBV_MTU_1024;
  bool active = false;
  std::string name() const { return id && id->verbs ? ibv_get_device_name(id->verbs->device) : "?"; }
};

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
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.pkey_index = 0;
  m.port_num = dev.id->port_num;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (auto r = checkRet(ibv_modify_qp(qp.get(), &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                        "incast (verbs): ibv_modify_qp (INIT)");
      !r)
    return r.error();
  return qp;
}

// RTR towards the peer (the kernel resolves its MAC from the GID), then RTS with NCCL's
// defaults (timeout 14: 67 ms per try, 7 retries, RNR retried forever), as the workload's QPs.
Result<void> toRts(const Device& dev, ibv_qp* qp, uint32_t remoteQpn, uint32_t remotePsn, const uint8_t* remoteGid,
                   uint32_t psn, int dscp) {
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = dev.mtu;
  m.dest_qp_num = remoteQpn;
  m.rq_psn = remotePsn & 0xffffff;
  m.max_dest_rd_atomic = 1;
  m.min_rnr_timer = 12;
  m.ah_attr.is_global = 1;
  std::memcpy(m.ah_attr.grh.dgid.raw, remoteGid, 16);
  m.ah_attr.grh.sgid_index = uint8_t(dev.gidIndex);
  m.ah_attr.grh.hop_limit = 64;
  m.ah_attr.grh.traffic_class = uint8_t(dscp << 2);
  m.ah_attr.port_num = dev.id->port_num;
  if (auto r = checkRet(ibv_modify_qp(qp, &m,
                                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
                        "incast (verbs): ibv_modify_qp (RTR)");
      !r)
    return r;
  ibv_qp_attr t{};
  t.qp_state = IBV_QPS_RTS;
  t.timeout = 14;
  t.retry_cnt = 7;
  t.rnr_retry = 7;
  t.sq_psn = psn;
  t.max_rd_atomic = 1;
  return checkRet(ibv_modify_qp(qp, &t,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC),
                  "incast (verbs): ibv_modify_qp (RTS)");
}

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

// A whole small record on a non-blocking socket whose buffer has room for it (set-up
// records and progress reports are tens of bytes; a full buffer means a dead peer).
bool sendRecord(int fd, const void* p, size_t n) {
  return ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(n);
}

// ---------------------------------------------------------------- the receiver's sink

struct SinkFlow {
  UniqueFD ctl;
  QpHandle qp;
  in_addr peer{};
  Clock::time_point since;
  uint32_t index = 0;  // the sender's flow number (Hello::flow)
  uint8_t in[sizeof(Hello)] = {};
  size_t have = 0;
  bool established = false;
  Progress last{};
};

}  // namespace

bool carries(in_addr addr) {
  if (::access("/sys/class/infiniband", F_OK) != 0) return false;  // no RDMA device at all: ask nothing
  auto d = openDevice(addr);
  return d && (*d)->active;
}

Result<uint64_t> sink(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
  auto dev = openDevice(o.receiverAddr);
  if (!dev) return dev.error();
  Device& d = **dev;
  Pd pd(ibv_alloc_pd(d.id->verbs));
  if (!pd) return sysError("incast (verbs): ibv_alloc_pd on " + d.name(), errno);
  const size_t regionLen = std::clamp<size_t>(size_t(o.sizeBytes), kChunk, kMaxRegion);
  std::vector<uint8_t> region(regionLen);
  Mr mr(ibv_reg_mr(pd.get(), region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!mr) return sysError("incast (verbs): cannot register " + formatSize(regionLen) + " with " + d.name(), errno);
  // The sink's QPs post nothing; a QP needs a CQ all the same.
  Cq cq(ibv_create_cq(d.id->verbs, 4, nullptr, nullptr, 0));
  if (!cq) return sysError("incast (verbs): ibv_create_cq on " + d.name(), errno);

  UniqueFD listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.isValid()) return sysError("incast (verbs) sink: socket", errno);
  int one = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(o.port);
  sa.sin_addr = o.receiverAddr;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return makeError("incast (verbs) sink: cannot listen on " + o.receiver + ":" + std::to_string(o.port) + ": " +
                         errnoText(errno) + " (pick another port with port = N)",
                     errno);
  if (::listen(listener.get(), SOMAXCONN) != 0) return sysError("incast (verbs) sink: listen", errno);
  events.add(Event{wallNs(), "listening",
                   o.receiver + ":" + std::to_string(o.port) + " (verbs set-up; RDMA WRITEs into " +
                       formatSize(regionLen) + " on " + d.name() + ")",
                   false});

  std::vector<std::unique_ptr<SinkFlow>> flows;
  uint64_t closedBytes = 0;
  size_t accepted = 0, strangers = 0, extra = 0, bad = 0;
  size_t replaced = 0;
  auto retire = [&](SinkFlow& f) {
    if (!f.ctl.isValid()) return;  // once
    closedBytes += f.last.bytes;
    f.qp.reset();
    f.ctl.reset();
  };
  // The sink's end on a flow: the sender's unread reports are taken first (a close with unread
  // input is a reset), then the farewell, so the sender tells this end from a failed flow.
  auto farewell = [&](SinkFlow& f) {
    if (!f.ctl.isValid()) return;
    if (f.established) {
      uint8_t scratch[256];
      while (::recv(f.ctl.get(), scratch, sizeof scratch, MSG_DONTWAIT) > 0) {
      }
      Bye b{kByeMagic, 0, f.last.bytes};
      (void)sendRecord(f.ctl.get(), &b, sizeof b);
      ::shutdown(f.ctl.get(), SHUT_WR);
    }
    retire(f);
  };
  std::vector<pollfd> pfds;
  // Out of descriptors: the listener stays readable, so it is left out of the poll for a while
  // instead of spinning on accept at full speed (as the TCP sink does, faults/incast.cpp).
  size_t starved = 0;
  Clock::time_point listenAgain{};
  while (!stop.stop_requested() && Clock::now() < end) {
    const bool listen = Clock::now() >= listenAgain;
    pfds.clear();
    pfds.push_back({wakeFd, POLLIN, 0});
    pfds.push_back({listen ? listener.get() : -1, POLLIN, 0});
    for (auto& f : flows) pfds.push_back({f->ctl.get(), POLLIN, 0});
    int wait = std::min(msUntil(end), 200);
    if (!listen) wait = std::min(wait, msUntil(listenAgain));
    int n = ::poll(pfds.data(), pfds.size(), wait);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sysError("incast (verbs) sink: poll", errno);
    }
    if (pfds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        UniqueFD conn(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!conn.isValid()) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            starved++;
            listenAgain = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        if (!o.from.empty() && std::none_of(o.from.begin(), o.from.end(),
                                            [&](in_addr a) { return a.s_addr == peer.sin_addr.s_addr; })) {
          strangers++;
          continue;
        }
        // Room for every flow and for each to be set up again while its old connection's close
        // is still on its way; which flow a connection is, its Hello says (fan_in is checked then).
        size_t live = size_t(std::count_if(flows.begin(), flows.end(), [](auto& f) { return f->ctl.isValid(); }));
        if (live >= 2 * size_t(o.fanIn)) {
          extra++;
          continue;
        }
        ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto f = std::make_unique<SinkFlow>();
        f->ctl = std::move(conn);
        f->peer = peer.sin_addr;
        f->since = Clock::now();
        flows.push_back(std::move(f));
      }
    }
    for (size_t i = 2; i < pfds.size(); i++) {
      SinkFlow& f = *flows[i - 2];
      if (!f.ctl.isValid()) continue;
      if (!f.established && Clock::now() - f.since > kHelloPatience) {
        bad++;
        retire(f);
        continue;
      }
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      for (int k = 0; k < 64 && f.ctl.isValid(); k++) {
        size_t want = f.established ? sizeof(Progress) : sizeof(Hello);
        ssize_t r = ::recv(f.ctl.get(), f.in + f.have, want - f.have, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (r <= 0) {  // the sender closed (its fault ended) or reset
          retire(f);
          break;
        }
        f.have += size_t(r);
        if (f.have < want) continue;
        f.have = 0;
        if (f.established) {
          Progress p;
          std::memcpy(&p, f.in, sizeof p);
          if (p.magic != kProgressMagic) {
            bad++;
            retire(f);
            break;
          }
          f.last = p;
          continue;
        }
        Hello h;
        std::memcpy(&h, f.in, sizeof h);
        if (h.magic != kHelloMagic) {  // not an incast sender (a TCP incast's flow, a stranger)
          bad++;
          retire(f);
          break;
        }
        // A sender setting a flow up again has dropped that flow's old QP and connection, whose
        // close may not have arrived yet (after its NIC flapped, TCP retransmits it with
        // back-off): that old connection goes, and only that one. (Taking the sender's oldest
        // connection instead closed a healthy flow, which its sender took for the sink's end:
        // a verbs incast that stopped after a flap, issue 20.)
        f.index = h.flow;
        for (auto& g : flows)
          if (g.get() != &f && g->ctl.isValid() && g->established && g->peer.s_addr == f.peer.s_addr &&
              g->index == h.flow) {
            retire(*g);
            replaced++;
          }
        if (std::count_if(flows.begin(), flows.end(),
                          [](auto& g) { return g->ctl.isValid() && g->established; }) >= o.fanIn) {
          extra++;
          retire(f);
          break;
        }
        auto fresh = refreshPort(d, o.receiverAddr);  // our NIC may have flapped since the last flow
        auto qp = fresh ? createQp(d, pd.get(), cq.get(), 1) : Result<QpHandle>(fresh.error());
        uint32_t psn = randomPsn();
        Result<void> ok = qp ? toRts(d, qp->get(), h.qpn, h.psn, h.gid, psn, o.dscp) : Result<void>(qp.error());
        if (!ok) {
          events.add(Event{wallNs(), "error", "flow from " + addrText(f.peer) + ": " + ok.error().message, false});
          bad++;
          retire(f);
          break;
        }
        f.qp = std::move(*qp);
        Reply rep{kReplyMagic, f.qp->qp_num, psn, mr->rkey, reinterpret_cast<uint64_t>(region.data()), regionLen, {}};
        std::memcpy(rep.gid, d.gid, 16);
        if (!sendRecord(f.ctl.get(), &rep, sizeof rep)) {
          bad++;
          retire(f);
          break;
        }
        f.established = true;
        accepted++;
      }
    }
    flows.erase(std::remove_if(flows.begin(), flows.end(), [](auto& f) { return !f->ctl.isValid(); }), flows.end());
  }
  for (auto& f : flows) farewell(*f);
  flows.clear();
  const uint64_t bytes = closedBytes;
  std::string why;
  auto add = [&](size_t k, const std::string& what) {
    if (k) why += (why.empty() ? " (" : ", ") + std::to_string(k) + " refused: " + what;
  };
  add(strangers, "not from a sender");
  add(extra, "more than fan_in");
  add(bad, "no valid verbs set-up");
  add(starved, "out of descriptors");
  if (!why.empty()) why += ")";
  events.add(Event{wallNs(), "received",
                   std::to_string(bytes) + " B (" + formatSize(bytes) + ") by RDMA WRITE on " +
                       std::to_string(accepted) + " flows, as the senders' completions report" +
                       (replaced ? "; " + std::to_string(replaced) + " flows set up again by their sender" : std::string()) +
                       why,
                   false});
  return bytes;
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
  // Every CQ event taken is acknowledged before the CQ goes (ibv_destroy_cq waits for that).
  struct AckOnExit {
    ibv_cq* cq;
    unsigned n = 0;
    ~AckOnExit() {
      if (n) ibv_ack_cq_events(cq, n);
    }
  } acks{cq.get()};
  std::vector<SendFlow> flows(size_t(o.flows));

  // One flow: TCP from the data address to the sink, our QP, its reply, our QP to RTS.
  auto connectFlow = [&](size_t i, Clock::time_point giveUp) -> Result<void> {
    SendFlow& f = flows[i];
    f.qp.reset();
    f.ctl.reset();
    f.up = false;
    f.gen++;
    f.inflight = 0;
    f.connBytes = 0;
    f.have = 0;
    sockaddr_in to{}, from{};
    to.sin_family = from.sin_family = AF_INET;
    to.sin_port = htons(o.port);
    to.sin_addr = o.receiverAddr;
    from.sin_addr = o.localAddr;
    for (;;) {
      if (stop.stop_requested()) return makeError("incast (verbs): stopped while connecting", EINTR);
      f.ctl.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!f.ctl.isValid()) return sysError("incast (verbs): socket", errno);
      int one = 1;
      ::setsockopt(f.ctl.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::bind(f.ctl.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
        return sysError("incast (verbs): cannot bind to " + addrText(o.localAddr), errno);
      int err = 0;
      if (::connect(f.ctl.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          auto w = waitFd(f.ctl.get(), POLLOUT, wakeFd, giveUp, "connecting to " + o.receiver);
          if (!w) return w;
          socklen_t len = sizeof err;
          ::getsockopt(f.ctl.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
      if (err == 0) break;
      if (Clock::now() >= giveUp)
        return makeError("incast (verbs): " + o.receiver + ":" + std::to_string(o.port) + " did not accept (" +
                             errnoText(err) + "); the receiver runs the sink only while the same incast fault runs there",
                         err);
      pollfd pf{wakeFd, POLLIN, 0};
      ::poll(&pf, 1, 20);  // refused: the sink starts at the same instant and may be a moment late
    }
    if (auto r = refreshPort(d, o.localAddr); !r) return r;
    auto qp = createQp(d, pd.get(), cq.get(), kDepth + 1);
    if (!qp) return qp.error();
    f.qp = std::move(*qp);
    uint32_t psn = randomPsn();
    Hello h{kHelloMagic, uint32_t(i), f.qp->qp_num, psn, {}};
    std::memcpy(h.gid, d.gid, 16);
    if (!sendRecord(f.ctl.get(), &h, sizeof h)) return sysError("incast (verbs): sending the QP description", errno);
    Reply rep{};
    if (auto r = recvAll(f.ctl.get(), &rep, sizeof rep, wakeFd, giveUp, "waiting for the sink's QP"); !r) return r;
    if (rep.magic != kReplyMagic || rep.length < chunk)
      return makeError("incast (verbs): " + o.receiver + ":" + std::to_string(o.port) +
                       " answered with no valid verbs sink record (is its incast transport \"verbs\" too?)");
    if (auto r = toRts(d, f.qp.get(), rep.qpn, rep.psn, rep.gid, psn, o.dscp); !r) return r;
    f.raddr = rep.addr;
    f.rlen = rep.length;
    f.rkey = rep.rkey;
    f.off = 0;
    f.up = true;
    return {};
  };

  for (size_t i = 0; i < flows.size(); i++)
    if (auto r = connectFlow(i, Clock::now() + kConnectPatience); !r) return r.error();
  for (auto& f : flows) f.lastCompletion = Clock::now();
  events.add(Event{wallNs(), "connected",
                   std::to_string(o.flows) + " QPs -> " + o.receiver + " (RDMA WRITE, set up on port " +
                       std::to_string(o.port) + ", " + d.name() + ")",
                   false});

  uint64_t bytes = 0, qpErrors = 0, reconnects = 0, failedReconnects = 0;
  std::string ended;
  // For the check that the traffic flowed again after the last QP error.
  Clock::time_point lastWrite = Clock::now(), lastErrorAt{};
  std::string lastError;
  std::vector<int64_t> burstNs;
  auto lastReport = Clock::now();

  auto reportFlow = [&](SendFlow& f) {
    Progress p{kProgressMagic, uint32_t(qpErrors), f.connBytes};
    (void)sendRecord(f.ctl.get(), &p, sizeof p);
  };
  auto report = [&] {
    for (auto& f : flows)
      if (f.up) reportFlow(f);
    lastReport = Clock::now();
  };
  // A flow whose QP failed, stalled or lost its set-up connection: counted, reported with
  // why and when, its QP and connection closed (the sink keeps what it last heard), and set up
  // again after a second while the other flows carry on.
  auto dropFlow = [&](size_t i, const std::string& why) {
    SendFlow& f = flows[i];
    qpErrors++;
    lastErrorAt = Clock::now();
    lastError = "flow " + std::to_string(i) + ": " + why + " at " + utcNow();
    events.add(Event{wallNs(), "qp_error", "flow " + std::to_string(i) + " -> " + o.receiver + ": " + why + " at " + utcNow(),
                     false});
    reportFlow(f);
    f.qp.reset();
    f.ctl.reset();
    f.up = false;
    f.gen++;  // its writes still in the CQ are ignored
    f.left = 0;
    f.inflight = 0;
    f.retryAt = Clock::now() + kRetryFlowAfter;
  };
  auto postWrites = [&](size_t i) -> void {
    SendFlow& f = flows[i];
    while (f.up && f.left > 0 && f.inflight < kDepth) {
      size_t len = size_t(std::min<int64_t>(f.left, int64_t(chunk)));
      if (f.off + len > f.rlen) f.off = 0;
      ibv_sge sge{reinterpret_cast<uint64_t>(source.data()), uint32_t(len), mr->lkey};
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
  };
  // Takes every completion there is; false when polling the CQ failed.
  auto reap = [&]() -> bool {
    ibv_wc wc[32];
    for (;;) {
      int n = ibv_poll_cq(cq.get(), 32, wc);
      if (n < 0) return false;
      for (int k = 0; k < n; k++) {
        size_t i = size_t(wc[k].wr_id >> 48);
        uint32_t gen = uint32_t(wc[k].wr_id >> 32) & 0xffff;
        if (i >= flows.size() || !flows[i].up || gen != (flows[i].gen & 0xffff)) continue;  // a dropped QP's
        SendFlow& f = flows[i];
        if (wc[k].status == IBV_WC_SUCCESS) {
          f.inflight--;
          f.lastCompletion = lastWrite = Clock::now();
          uint64_t len = wc[k].wr_id & 0xffffffffu;
          f.connBytes += len;
          bytes += len;
          continue;
        }
        dropFlow(i, std::string(ibv_wc_status_str(wc[k].status)) + " (status " + std::to_string(int(wc[k].status)) +
                        ")");
      }
      if (n < 32) return true;
    }
  };
  // rxe may retry a QP without end (seen after a flap of the sender's NIC, no error ever
  // completing its writes): writes in flight with no completion for kStall mean a dead QP.
  auto dropStalled = [&] {
    auto now = Clock::now();
    for (size_t i = 0; i < flows.size(); i++) {
      SendFlow& f = flows[i];
      if (f.up && f.inflight > 0 && now - f.lastCompletion >= kStall)
        dropFlow(i, "no completion for " + formatDuration(kStall) + " with " + std::to_string(f.inflight) +
                        " WRITEs in flight (the QP stalled)");
    }
  };
  // Flows whose retry time came get a new QP (a new set-up); with JOIN, they take their part
  // of the burst under way.
  auto setUpAgain = [&](bool join) {
    for (size_t i = 0; i < flows.size() && !stop.stop_requested(); i++) {
      if (flows[i].up || Clock::now() < flows[i].retryAt) continue;
      auto r = connectFlow(i, std::min(end, Clock::now() + kConnectPatience));
      if (r) {
        reconnects++;
        flows[i].lastCompletion = Clock::now();
        if (join) flows[i].left = o.sizeBytes;
      } else {
        failedReconnects++;
        flows[i].ctl.reset();
        flows[i].qp.reset();
        flows[i].retryAt = Clock::now() + kRetryFlowAfter;
      }
    }
  };
  // Waits for a completion, the wake fd (unless WAKE is false: once stopped it stays
  // readable), a set-up connection becoming readable, or UNTIL.
  auto wait = [&](Clock::time_point until, bool wake) -> Result<void> {
    if (auto r = checkRet(ibv_req_notify_cq(cq.get(), 0), "incast (verbs): ibv_req_notify_cq"); !r) return r;
    if (!reap()) return makeError("incast (verbs): ibv_poll_cq failed");  // arrived before the request
    std::vector<pollfd> pfds{{wake ? wakeFd : -1, POLLIN, 0}, {comp->fd, POLLIN, 0}};
    std::vector<size_t> which;  // pfds[2 + k] is flows[which[k]]'s connection
    for (size_t i = 0; i < flows.size(); i++)
      if (flows[i].up) {
        pfds.push_back({flows[i].ctl.get(), POLLIN, 0});
        which.push_back(i);
      }
    int n = ::poll(pfds.data(), pfds.size(), msUntil(until));
    if (n < 0 && errno != EINTR) return sysError("incast (verbs): poll", errno);
    if (pfds[1].revents & POLLIN) {
      ibv_cq* evCq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(comp.get(), &evCq, &ctx) == 0) acks.n++;
    }
    for (size_t k = 0; k < which.size(); k++) {
      SendFlow& f = flows[which[k]];
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
          ended = "receiver closed the flow (its incast ended)";
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
  };

  Result<void> failure;
  auto t0 = Clock::now();
  int64_t burst = 0;
  while (!stop.stop_requested() && Clock::now() < end && ended.empty() && failure) {
    if (o.intervalNs > 0) {
      auto slot = t0 + std::chrono::nanoseconds(o.intervalNs * burst);
      while (Clock::now() < slot && !stop.stop_requested() && Clock::now() < end) {
        pollfd pf{wakeFd, POLLIN, 0};
        ::poll(&pf, 1, msUntil(std::min(slot, end)));
      }
      if (stop.stop_requested() || Clock::now() >= end) break;
      auto late = Clock::now() - t0;
      burst = std::max<int64_t>(burst, std::chrono::duration_cast<std::chrono::nanoseconds>(late).count() / o.intervalNs);
    }
    setUpAgain(false);
    auto bStart = Clock::now();
    bool any = false;
    for (size_t i = 0; i < flows.size(); i++) {
      flows[i].left = flows[i].up ? o.sizeBytes : 0;
      any = any || flows[i].up;
    }
    if (!any) {  // every QP failed: wait for the next set-up attempt
      auto next = end;
      for (auto& f : flows) next = std::min(next, f.retryAt);
      pollfd pf{wakeFd, POLLIN, 0};
      ::poll(&pf, 1, msUntil(next));
      continue;
    }
    for (;;) {
      setUpAgain(true);
      bool busy = false;
      for (size_t i = 0; i < flows.size(); i++) {
        postWrites(i);
        busy = busy || (flows[i].up && (flows[i].left > 0 || flows[i].inflight > 0));
      }
      if (!busy || stop.stop_requested() || Clock::now() >= end || !ended.empty()) break;
      if (Clock::now() - lastReport >= kReportEvery) report();
      failure = wait(std::min(end, lastReport + kReportEvery), true);
      if (!failure) break;
    }
    // A burst counts when every flow that is up wrote its part (and one was).
    bool completed = std::any_of(flows.begin(), flows.end(), [](const SendFlow& f) { return f.up; }) &&
                     std::all_of(flows.begin(), flows.end(),
                                 [](const SendFlow& f) { return !f.up || (f.left == 0 && f.inflight == 0); });
    if (completed && ended.empty() && !stop.stop_requested() && Clock::now() < end) {
      burstNs.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - bStart).count());
      burst++;
    }
    if (Clock::now() - lastReport >= kReportEvery) report();
  }
  // Writes still in flight complete (or not) within a moment; then the last report.
  auto drainUntil = Clock::now() + kDrain;
  while (failure && ended.empty() && Clock::now() < drainUntil &&
         std::any_of(flows.begin(), flows.end(), [](const SendFlow& f) { return f.up && f.inflight > 0; })) {
    auto w = wait(drainUntil, false);
    if (!w) break;
  }
  if (ended.empty()) report();
  flows.clear();  // QPs and set-up connections go first

  std::string summary = std::to_string(burstNs.size()) + " bursts, " + std::to_string(bytes) + " B (" +
                        formatSize(bytes) + ") written by RDMA WRITE (completed)";
  if (!burstNs.empty()) {
    std::sort(burstNs.begin(), burstNs.end());
    summary += ", burst time p50 " + formatDuration(Nanos(burstNs[burstNs.size() / 2])) + " max " +
               formatDuration(Nanos(burstNs.back()));
  }
  if (qpErrors) summary += ", " + std::to_string(qpErrors) + " QP errors";
  if (reconnects || failedReconnects)
    summary += ", QPs set up again " + std::to_string(reconnects) + " times" +
               (failedReconnects ? " (" + std::to_string(failedReconnects) + " attempts failed)" : std::string());
  if (!ended.empty()) summary += "; " + ended;
  // A QP error after which no WRITE completed again, with time enough to recover: the traffic
  // cannot flow (rxe wedged every new QP, or every set-up failed). Said, never silent.
  const auto endedAt = Clock::now();
  const bool flowedAgain = qpErrors == 0 || lastWrite > lastErrorAt;
  if (!flowedAgain) {
    summary += "; no WRITE completed in the " + formatDuration(std::chrono::duration_cast<Nanos>(endedAt - lastErrorAt)) +
               " after the last QP error";
  }
  events.add(Event{wallNs(), "sent", summary, false});
  if (!failure) return failure.error();
  if (!flowedAgain && endedAt - lastErrorAt >= kNoRecovery)
    return makeError("incast (verbs): the traffic to " + o.receiver + " did not flow again: no RDMA WRITE completed in the " +
                     formatDuration(std::chrono::duration_cast<Nanos>(endedAt - lastErrorAt)) +
                     " after the last QP error (" + lastError + "); QPs set up again " + std::to_string(reconnects) +
                     " times, " + std::to_string(failedReconnects) + " attempts failed",
                     EIO);
  return bytes;
}

}  // namespace rc::faults::incast_verbs
