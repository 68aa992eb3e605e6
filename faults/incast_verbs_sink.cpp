// The incast verbs generator's receiving side (see incast_verbs.hpp for the protocol): the
// sink accepts the senders' set-up connections, gives each flow an RC QP into one registered
// region, and records what the senders' progress reports say arrived.
//
// As in incast_verbs.cpp, the verbs owners are declared in dependency order, so leaving sink()
// on any path destroys the QPs before their CQ, the CQ before the MR, the MR before its memory
// and PD, and the PD before the device's rdma_cm id.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/unique_fd.hpp"
#include "common/units.hpp"
#include "common/verbs_handles.hpp"
#include "faults/incast_verbs_internal.hpp"

namespace rc::faults::incast_verbs {

namespace {

constexpr size_t kMaxRegion = 4 << 20;   // the sink's region; every flow writes over it
constexpr auto kHelloPatience = std::chrono::seconds(2);   // a set-up connection that says nothing
constexpr auto kLinger = std::chrono::milliseconds(500);   // for the senders' close after the farewell

struct SinkFlow {
  UniqueFD ctl;
  rc::verbs::QpHandle qp;
  in_addr peer{};
  Clock::time_point since;
  uint32_t index = 0;  // the sender's flow number (Hello::flow)
  uint8_t in[sizeof(Hello)] = {};
  size_t have = 0;
  bool established = false;
  Progress last{};
};

using SinkFlows = std::vector<std::unique_ptr<SinkFlow>>;

// What the sink counts, for its "received" record.
struct SinkTally {
  uint64_t closedBytes = 0;  // what the senders last reported on the flows that ended
  size_t accepted = 0, strangers = 0, extra = 0, bad = 0;
  size_t replaced = 0;
  size_t starved = 0;  // accept() out of descriptors
};

// The verbs side every flow's set-up uses: the device, and the region every flow writes into.
struct SinkRegion {
  Device& d;
  const rc::verbs::Pd& pd;
  const rc::verbs::Cq& cq;
  const rc::verbs::Mr& mr;
  const std::vector<uint8_t>& region;
  size_t regionLen;
};

void retireSinkFlow(SinkFlow& f, SinkTally& t) {
  if (!f.ctl.isValid()) return;  // once
  t.closedBytes += f.last.bytes;
  f.qp.reset();
  f.ctl.reset();
}

// The sink's end on a flow: the farewell, so the sender tells this end from a failed flow,
// and the sending side shut; the connection stays open for the linger (see sink()). A flow
// not yet set up goes at once.
void sayFarewell(SinkFlow& f, SinkTally& t) {
  if (!f.ctl.isValid()) return;
  if (!f.established) {
    retireSinkFlow(f, t);
    return;
  }
  Bye b{kByeMagic, 0, f.last.bytes};
  (void)sendRecord(f.ctl.get(), &b, sizeof b);
  ::shutdown(f.ctl.get(), SHUT_WR);
}

// The set-up listener on the receiver's data address, and the "listening" record.
Result<UniqueFD> openSinkListener(const Options& o, size_t regionLen, const Device& d,
                                  EventLog& events) {
  UniqueFD listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.isValid()) return rc::verbs::sysError("incast (verbs) sink: socket", errno);
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
  if (::listen(listener.get(), SOMAXCONN) != 0) return rc::verbs::sysError("incast (verbs) sink: listen", errno);
  events.add(Event{wallNs(), "listening",
                   o.receiver + ":" + std::to_string(o.port) + " (verbs set-up; RDMA WRITEs into " +
                       formatSize(regionLen) + " on " + d.name() + ")",
                   false});
  return listener;
}

// Takes the set-up connections waiting on the listener. Out of descriptors, the listener is
// left out of the poll until LISTENAGAIN.
void acceptSinkFlows(int listenFd, const Options& o, SinkFlows& flows, SinkTally& t,
                     Clock::time_point& listenAgain) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    UniqueFD conn(::accept4(listenFd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.isValid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        t.starved++;
        listenAgain = Clock::now() + std::chrono::milliseconds(100);
      }
      break;
    }
    if (!o.from.empty() && std::none_of(o.from.begin(), o.from.end(),
                                        [&](in_addr a) { return a.s_addr == peer.sin_addr.s_addr; })) {
      t.strangers++;
      continue;
    }
    // Room for every flow and for each to be set up again while its old connection's close
    // is still on its way; which flow a connection is, its Hello says (fan_in is checked then).
    size_t live = size_t(std::count_if(flows.begin(), flows.end(), [](auto& f) { return f->ctl.isValid(); }));
    if (live >= 2 * size_t(o.fanIn)) {
      t.extra++;
      continue;
    }
    int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto f = std::make_unique<SinkFlow>();
    f->ctl = std::move(conn);
    f->peer = peer.sin_addr;
    f->since = Clock::now();
    flows.push_back(std::move(f));
  }
}

// A sender's Hello (in F's input) gets its flow a QP into the region and the sink's Reply;
// false when the flow was refused (and retired).
bool establishSinkFlow(SinkFlow& f, const Options& o, const SinkRegion& s, SinkFlows& flows,
                       SinkTally& t, EventLog& events) {
  Hello h;
  std::memcpy(&h, f.in, sizeof h);
  if (h.magic != kHelloMagic) {  // not an incast sender (a TCP incast's flow, a stranger)
    t.bad++;
    retireSinkFlow(f, t);
    return false;
  }
  // A sender setting a flow up again has dropped that flow's old QP and connection, whose
  // close may not have arrived yet (after its NIC flapped, TCP retransmits it with
  // back-off): that old connection goes, and only that one. (Taking the sender's oldest
  // connection instead closed a healthy flow, which its sender took for the sink's end:
  // a verbs incast that stopped after a flap.)
  f.index = h.flow;
  for (auto& g : flows)
    if (g.get() != &f && g->ctl.isValid() && g->established && g->peer.s_addr == f.peer.s_addr &&
        g->index == h.flow) {
      retireSinkFlow(*g, t);
      t.replaced++;
    }
  if (std::count_if(flows.begin(), flows.end(),
                    [](auto& g) { return g->ctl.isValid() && g->established; }) >= o.fanIn) {
    t.extra++;
    retireSinkFlow(f, t);
    return false;
  }
  auto fresh = refreshPort(s.d, o.receiverAddr);  // our NIC may have flapped since the last flow
  auto qp = fresh ? createQp(s.d, s.pd.get(), s.cq.get(), 1) : Result<rc::verbs::QpHandle>(fresh.error());
  uint32_t psn = randomPsn();
  Result<void> ok = qp ? toRts(s.d, qp->get(), h.qpn, h.psn, h.gid, psn, o.dscp) : Result<void>(qp.error());
  if (!ok) {
    events.add(Event{wallNs(), "error", "flow from " + addrText(f.peer) + ": " + ok.error().message, false});
    t.bad++;
    retireSinkFlow(f, t);
    return false;
  }
  f.qp = std::move(*qp);
  Reply rep{kReplyMagic, f.qp->qp_num, psn, s.mr->rkey, reinterpret_cast<uint64_t>(s.region.data()), s.regionLen, {}};
  std::memcpy(rep.gid, s.d.gid, 16);
  if (!sendRecord(f.ctl.get(), &rep, sizeof rep)) {
    t.bad++;
    retireSinkFlow(f, t);
    return false;
  }
  f.established = true;
  t.accepted++;
  return true;
}

// Reads what a flow's sender sent (at most 64 records a pass): its Hello first, then its
// progress reports. A close or a record that is not the next one retires the flow.
void serveSinkFlow(SinkFlow& f, const Options& o, const SinkRegion& s, SinkFlows& flows,
                   SinkTally& t, EventLog& events) {
  for (int k = 0; k < 64 && f.ctl.isValid(); k++) {
    size_t want = f.established ? sizeof(Progress) : sizeof(Hello);
    ssize_t r = ::recv(f.ctl.get(), f.in + f.have, want - f.have, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (r <= 0) {  // the sender closed (its fault ended) or reset
      retireSinkFlow(f, t);
      break;
    }
    f.have += size_t(r);
    if (f.have < want) continue;
    f.have = 0;
    if (f.established) {
      Progress p;
      std::memcpy(&p, f.in, sizeof p);
      if (p.magic != kProgressMagic) {
        t.bad++;
        retireSinkFlow(f, t);
        break;
      }
      f.last = p;
      continue;
    }
    if (!establishSinkFlow(f, o, s, flows, t, events)) break;
  }
}

// The "received" record: what the senders reported, and why connections were refused.
// Returns the bytes received.
uint64_t recordSinkEnd(const SinkTally& t, EventLog& events) {
  const uint64_t bytes = t.closedBytes;
  std::string why;
  auto add = [&](size_t k, const std::string& what) {
    if (k) why += (why.empty() ? " (" : ", ") + std::to_string(k) + " refused: " + what;
  };
  add(t.strangers, "not from a sender");
  add(t.extra, "more than fan_in");
  add(t.bad, "no valid verbs set-up");
  add(t.starved, "out of descriptors");
  if (!why.empty()) why += ")";
  events.add(Event{wallNs(), "received",
                   std::to_string(bytes) + " B (" + formatSize(bytes) + ") by RDMA WRITE on " +
                       std::to_string(t.accepted) + " flows, as the senders' completions report" +
                       (t.replaced ? "; " + std::to_string(t.replaced) + " flows set up again by their sender" : std::string()) +
                       why,
                   false});
  return bytes;
}

}  // namespace

Result<uint64_t> sink(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
  auto dev = openDevice(o.receiverAddr);
  if (!dev) return dev.error();
  Device& d = **dev;
  rc::verbs::Pd pd(ibv_alloc_pd(d.id->verbs));
  if (!pd) return rc::verbs::sysError("incast (verbs): ibv_alloc_pd on " + d.name(), errno);
  const size_t regionLen = std::clamp<size_t>(size_t(o.sizeBytes), kChunk, kMaxRegion);
  std::vector<uint8_t> region(regionLen);
  rc::verbs::Mr mr(ibv_reg_mr(pd.get(), region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!mr)
    return rc::verbs::sysError("incast (verbs): cannot register " + formatSize(regionLen) + " with " + d.name(), errno);
  // The sink's QPs post nothing; a QP needs a CQ all the same.
  rc::verbs::Cq cq(ibv_create_cq(d.id->verbs, 4, nullptr, nullptr, 0));
  if (!cq) return rc::verbs::sysError("incast (verbs): ibv_create_cq on " + d.name(), errno);

  auto listener = openSinkListener(o, regionLen, d, events);
  if (!listener) return listener.error();
  const SinkRegion s{d, pd, cq, mr, region, regionLen};

  SinkFlows flows;
  SinkTally t;
  std::vector<pollfd> pfds;
  // Out of descriptors: the listener stays readable, so it is left out of the poll for a while
  // instead of spinning on accept at full speed (as the TCP sink does, faults/incast.cpp).
  Clock::time_point listenAgain{};
  while (!stop.stop_requested() && Clock::now() < end) {
    const bool listen = Clock::now() >= listenAgain;
    pfds.clear();
    pfds.push_back({wakeFd, POLLIN, 0});
    pfds.push_back({listen ? listener->get() : -1, POLLIN, 0});
    for (auto& f : flows) pfds.push_back({f->ctl.get(), POLLIN, 0});
    int wait = std::min(msUntil(end), 200);
    if (!listen) wait = std::min(wait, msUntil(listenAgain));
    int n = ::poll(pfds.data(), pfds.size(), wait);
    if (n < 0) {
      if (errno == EINTR) continue;
      return rc::verbs::sysError("incast (verbs) sink: poll", errno);
    }
    if (pfds[1].revents & POLLIN) acceptSinkFlows(listener->get(), o, flows, t, listenAgain);
    for (size_t i = 2; i < pfds.size(); i++) {
      SinkFlow& f = *flows[i - 2];
      if (!f.ctl.isValid()) continue;
      if (!f.established && Clock::now() - f.since > kHelloPatience) {
        t.bad++;
        retireSinkFlow(f, t);
        continue;
      }
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      serveSinkFlow(f, o, s, flows, t, events);
    }
    flows.erase(std::remove_if(flows.begin(), flows.end(), [](auto& f) { return !f->ctl.isValid(); }), flows.end());
  }
  // The farewells, then a linger: each flow's connection stays open, its QP too, and its
  // sender's last reports are read until the sender closes (it does on the farewell) or
  // kLinger passes. Closing at once reset any connection whose reports were still on their
  // way (a close with unread input is a reset), and a reset destroys the farewell if the
  // sender has not read it yet: the sender took the end for a failed flow ("qp_error").
  for (auto& f : flows) sayFarewell(*f, t);
  const auto lingerUntil = Clock::now() + kLinger;
  for (;;) {
    pfds.clear();
    for (auto& f : flows)
      if (f->ctl.isValid()) pfds.push_back({f->ctl.get(), POLLIN, 0});
    if (pfds.empty() || Clock::now() >= lingerUntil) break;
    if (::poll(pfds.data(), pfds.size(), msUntil(lingerUntil)) < 0 && errno != EINTR) break;
    for (auto& f : flows)
      if (f->ctl.isValid()) serveSinkFlow(*f, o, s, flows, t, events);  // to EOF: retired
  }
  for (auto& f : flows) retireSinkFlow(*f, t);
  flows.clear();
  return recordSinkEnd(t, events);
}

}  // namespace rc::faults::incast_verbs
