// TCP transport: connection set-up with a hello/ack handshake (the higher rank dials), and
// steps as a poll loop over the streams involved, with per-chunk headers and checksums.
#include "workload/tcp_transport.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "workload/checksum.hpp"
#include "workload/collectives.hpp"

#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44  // Linux 6.15+
#endif

namespace rc::workload {

namespace {

constexpr uint32_t kHelloMagic = 0x52435748;  // "RCWH"
constexpr uint32_t kAckMagic = 0x52435741;    // "RCWA"
constexpr uint32_t kChunkMagic = 0x52435744;  // "RCWD"

struct Hello {
  uint32_t magic, version;
  uint64_t tag;
  uint32_t rank, stream;
};
// A chunk on the wire: header, payload, trailer. The checksum goes in the trailer because it
// is computed as the payload goes out, not in a separate pass over the buffer before.
struct ChunkHeader {
  uint32_t magic, seq;
  uint64_t length;
  uint32_t flags, reserved;
};
struct ChunkTrailer {
  uint32_t sum, magic;
};
static_assert(sizeof(Hello) == 24 && sizeof(ChunkHeader) == 24 && sizeof(ChunkTrailer) == 8);

// TcpTransport::connect's two sides: a stream this rank dials (to a lower rank), and an
// accepted one whose hello has not all arrived.
struct TcpDial {
  int peer, stream;
  UniqueFD fd;
  int state = 0;  // 0 idle, 1 connecting, 2 hello sent (waiting for ack)
  int64_t retryNs = 0;
  std::string lastError;
};
struct TcpPendingAccept {
  UniqueFD fd;
  Hello hello{};
  size_t got = 0;
};

}  // namespace

Result<sockaddr_in> toAddr(const Endpoint& e) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(e.port);
  if (::inet_pton(AF_INET, e.address.c_str(), &sa.sin_addr) != 1)
    return makeError("'" + e.address + "' is not an IPv4 address");
  return sa;
}

struct TcpTransport::Conn {
  UniqueFD fd;
  uint32_t sendSeq = 0, recvSeq = 0;
};

TcpTransport::TcpTransport(TcpOptions o) : o_(std::move(o)) {}
TcpTransport::~TcpTransport() = default;

Result<std::unique_ptr<TcpTransport>> TcpTransport::create(TcpOptions o) {
  if (o.rank < 0 || size_t(o.rank) >= o.world.size()) return makeError("rank outside the world");
  if (o.streams < 1 || o.streams > 64) return makeError("streams must be 1 to 64");
  if (o.dscp < 0 || o.dscp > 63) return makeError("dscp must be 0 to 63");
  std::unique_ptr<TcpTransport> t(new TcpTransport(std::move(o)));
  t->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!t->wake_.isValid()) return makeError("eventfd: " + errnoText(), errno);
  const Endpoint& me = t->o_.world[size_t(t->o_.rank)];
  auto sa = toAddr(me);
  if (!sa) return sa.error();
  t->listen_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!t->listen_.isValid()) return makeError("socket: " + errnoText(), errno);
  int one = 1;
  ::setsockopt(t->listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Accepted sockets inherit buffer sizes from the listener (they matter for the window).
  t->tune(t->listen_.get());
  if (::bind(t->listen_.get(), reinterpret_cast<sockaddr*>(&*sa), sizeof *sa) != 0)
    return makeError("cannot bind the workload listener to " + me.address + ":" +
                         std::to_string(me.port) + ": " + errnoText() +
                         " (is that this node's data address, and the port free?)",
                     errno);
  if (::listen(t->listen_.get(), 256) != 0) return makeError("listen: " + errnoText(), errno);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(t->listen_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  t->port_ = ntohs(bound.sin_port);
  return t;
}

void TcpTransport::tune(int fd) const {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o_.dscp > 0) {
    // The ECN bits of the byte stay the kernel's (TCP sets ECT itself).
    int tos = o_.dscp << 2;
    ::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  }
  if (o_.socketBuffer > 0) {
    // FORCE variants need CAP_NET_ADMIN (the agent has it); fall back to the capped ones.
    if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &o_.socketBuffer, sizeof(int)) != 0)
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o_.socketBuffer, sizeof(int));
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &o_.socketBuffer, sizeof(int)) != 0)
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o_.socketBuffer, sizeof(int));
  }
  unsigned timeout = unsigned(o_.userTimeoutMs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
  // Idle receivers learn about a dead peer from keepalives within the same time.
  int idle = 1, intvl = 1, cnt = int(std::max<int64_t>(1, o_.userTimeoutMs / 1000));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  // Cap the retransmission backoff so that traffic resumes within a second of a link coming
  // back, instead of after a doubling RTO (best effort: needs Linux 6.15).
  int rtoMax = 1000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rtoMax, sizeof rtoMax);
}

bool TcpTransport::interrupted() const {
  pollfd p{wake_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void TcpTransport::interrupt() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

Result<void> TcpTransport::registerBuffer(std::span<std::byte> b) {
  buf_ = b;
  return {};
}

void TcpTransport::disconnect() {
  // Reset rather than close gracefully: peers must notice at once, even mid-transfer.
  for (auto& [peer, streams] : conns_)
    for (auto& c : streams) {
      linger l{1, 0};
      ::setsockopt(c->fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
  conns_.clear();
}

void TcpTransport::close() {
  // A plain close: the kernel still delivers what we queued, then the peer reads EOF.
  conns_.clear();
}

Result<void> TcpTransport::connect(const std::vector<int>& peers, int64_t deadline) {
  const int S = o_.streams;
  std::vector<TcpDial> dials;
  std::vector<TcpPendingAccept> pending;
  std::map<int, std::vector<std::unique_ptr<Conn>>> fresh;
  size_t needed = 0;
  for (int p : peers) {
    if (p == o_.rank || p < 0 || size_t(p) >= o_.world.size()) continue;
    fresh[p].resize(size_t(S));
    needed += size_t(S);
    if (p < o_.rank)
      for (int s = 0; s < S; s++) dials.push_back({p, s, UniqueFD(), 0, 0, {}});
  }
  auto filled = [&] {
    size_t n = 0;
    for (auto& [p, v] : fresh)
      for (auto& c : v) n += c != nullptr;
    return n;
  };
  auto mySa = toAddr(Endpoint{o_.world[size_t(o_.rank)].address, 0});
  if (!mySa) return mySa.error();

  while (filled() < needed) {
    if (interrupted()) return makeError("interrupted");
    int64_t now = monoNs();
    if (now >= deadline) {
      std::string why;
      for (auto& d : dials)
        if (!fresh[d.peer][size_t(d.stream)] && !d.lastError.empty()) {
          why = " (rank " + std::to_string(d.peer) + ": " + d.lastError + ")";
          break;
        }
      return makeError("connected " + std::to_string(filled()) + " of " +
                       std::to_string(needed) + " streams before the deadline" + why);
    }
    // Start dials that are due.
    for (auto& d : dials) {
      if (fresh[d.peer][size_t(d.stream)] || d.state != 0 || d.retryNs > now) continue;
      auto sa = toAddr(o_.world[size_t(d.peer)]);
      if (!sa) return sa.error();
      d.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!d.fd.isValid()) return makeError("socket: " + errnoText(), errno);
      tune(d.fd.get());
      // From our data address, so the traffic cannot take another interface.
      ::bind(d.fd.get(), reinterpret_cast<const sockaddr*>(&*mySa), sizeof *mySa);
      if (::connect(d.fd.get(), reinterpret_cast<sockaddr*>(&*sa), sizeof *sa) != 0 &&
          errno != EINPROGRESS) {
        d.lastError = errnoText();
        d.fd.reset();
        d.retryNs = now + 50'000'000;
        continue;
      }
      d.state = 1;
    }
    std::vector<pollfd> pfds;
    pfds.push_back({wake_.get(), POLLIN, 0});
    pfds.push_back({listen_.get(), POLLIN, 0});
    for (auto& d : dials)
      if (d.state) pfds.push_back({d.fd.get(), short(d.state == 1 ? POLLOUT : POLLIN), 0});
    for (auto& p : pending) pfds.push_back({p.fd.get(), POLLIN, 0});
    int64_t wakeAt = deadline;
    for (auto& d : dials)
      if (d.state == 0 && !fresh[d.peer][size_t(d.stream)]) wakeAt = std::min(wakeAt, d.retryNs);
    int timeoutMs = int(std::clamp<int64_t>((wakeAt - now) / 1'000'000 + 1, 1, 100));
    int n = ::poll(pfds.data(), pfds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) return makeError("poll: " + errnoText(), errno);
    if (n <= 0) continue;
    size_t i = 2;
    for (auto& d : dials) {
      if (!d.state) continue;
      short re = pfds[i++].revents;
      if (!re) continue;
      auto retry = [&](std::string why) {
        d.lastError = std::move(why);
        d.fd.reset();
        d.state = 0;
        d.retryNs = monoNs() + 50'000'000;
      };
      if (d.state == 1) {
        int err = 0;
        socklen_t l = sizeof err;
        ::getsockopt(d.fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
          retry(std::strerror(err));
          continue;
        }
        Hello h{kHelloMagic, 1, o_.tag, uint32_t(o_.rank), uint32_t(d.stream)};
        if (::send(d.fd.get(), &h, sizeof h, MSG_NOSIGNAL) != ssize_t(sizeof h)) {
          retry("hello: " + errnoText());
          continue;
        }
        d.state = 2;
      } else {
        uint32_t ack = 0;
        ssize_t got = ::recv(d.fd.get(), &ack, sizeof ack, MSG_WAITALL);
        if (got != ssize_t(sizeof ack) || ack != kAckMagic) {
          retry(got == 0 ? "closed by the peer during the handshake" : "bad handshake reply");
          continue;
        }
        auto c = std::make_unique<Conn>();
        c->fd = std::move(d.fd);
        fresh[d.peer][size_t(d.stream)] = std::move(c);
        d.state = 0;
      }
    }
    for (auto& p : pending) {
      short re = pfds[i++].revents;
      if (!re) continue;
      ssize_t got = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got,
                           sizeof(Hello) - p.got, 0);
      if (got <= 0) {
        p.fd.reset();
        continue;
      }
      p.got += size_t(got);
      if (p.got < sizeof(Hello)) continue;
      const Hello& h = p.hello;
      int peer = int(h.rank);
      bool ok = h.magic == kHelloMagic && h.version == 1 && h.tag == o_.tag &&
                fresh.count(peer) && peer > o_.rank && h.stream < uint32_t(S);
      // A dial abandoned by its peer may still sit in the backlog: skip it if closed.
      char probe;
      if (ok && ::recv(p.fd.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) ok = false;
      uint32_t ack = kAckMagic;
      if (ok && ::send(p.fd.get(), &ack, sizeof ack, MSG_NOSIGNAL) == ssize_t(sizeof ack)) {
        auto c = std::make_unique<Conn>();
        c->fd = std::move(p.fd);
        fresh[peer][h.stream] = std::move(c);  // the newest connection wins
      }
      p.fd.reset();
    }
    std::erase_if(pending, [](const TcpPendingAccept& p) { return !p.fd.isValid(); });
    if (pfds[1].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        tune(fd);
        pending.push_back({UniqueFD(fd), {}, 0});
      }
    }
  }
  for (auto& [p, v] : fresh) conns_[p] = std::move(v);
  return {};
}

StepResult TcpTransport::runStep(std::span<const Op> ops) {
  StepResult res;
  const size_t S = size_t(o_.streams);
  // One chunk (one stripe of one op) on one stream: header, payload, trailer in that order.
  struct Xfer {
    Conn* c;
    int peer;
    bool send;
    std::byte* p;
    size_t left;
    ChunkHeader hdr;
    size_t hdrDone = 0;
    ChunkTrailer trl{};
    size_t trlDone = 0;
    StreamChecksum sum;
    bool done = false;
  };
  auto end = [&res](StepStatus st, std::string why = {}) {
    res.status = st;
    res.error = std::move(why);
    return res;
  };
  std::vector<Xfer> xs;
  for (const auto& op : ops) {
    auto it = conns_.find(op.peer);
    if (it == conns_.end()) return end(StepStatus::peerLost, "not connected to rank " + std::to_string(op.peer));
    for (size_t k = 0; k < S; k++) {
      size_t b = chunkBegin(op.length, S, k), e = chunkBegin(op.length, S, k + 1);
      if (e == b) continue;
      Xfer x{it->second[k].get(), op.peer, op.kind == Op::Kind::send,
             buf_.data() + op.offset + b, e - b, {}, 0, {}, 0, {}, false};
      if (x.send)
        x.hdr = {kChunkMagic, x.c->sendSeq++, uint64_t(e - b), o_.checksum ? kFlagChecksum : 0, 0};
      xs.push_back(x);
    }
  }
  size_t remaining = xs.size();
  std::vector<pollfd> pfds;
  std::vector<Xfer*> owners;
  auto lost = [&](const Xfer& x, std::string why) {
    return end(StepStatus::peerLost, "rank " + std::to_string(x.peer) + ": " + why);
  };
  auto finishPayload = [&](Xfer& x) {
    if (x.send) x.trl = {x.sum.value(), kChunkMagic};
  };
  while (remaining > 0) {
    pfds.clear();
    owners.clear();
    pfds.push_back({wake_.get(), POLLIN, 0});
    for (auto& x : xs) {
      if (x.done) continue;
      pfds.push_back({x.c->fd.get(), short(x.send ? POLLOUT : POLLIN), 0});
      owners.push_back(&x);
    }
    int n = ::poll(pfds.data(), pfds.size(), 1000);
    if (n < 0 && errno != EINTR) return end(StepStatus::peerLost, "poll: " + errnoText());
    if (pfds[0].revents) return end(StepStatus::stopped);
    for (size_t i = 1; i < pfds.size(); i++) {
      if (!pfds[i].revents) continue;
      Xfer& x = *owners[i - 1];
      int fd = x.c->fd.get();
      const bool sums = x.send ? o_.checksum : (x.hdr.flags & kFlagChecksum);
      if (x.send) {
        iovec iov[3];
        int cnt = 0;
        if (x.hdrDone < sizeof x.hdr)
          iov[cnt++] = {reinterpret_cast<char*>(&x.hdr) + x.hdrDone, sizeof x.hdr - x.hdrDone};
        if (x.left) iov[cnt++] = {x.p, x.left};
        else iov[cnt++] = {reinterpret_cast<char*>(&x.trl) + x.trlDone, sizeof x.trl - x.trlDone};
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = size_t(cnt);
        ssize_t w = ::sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          return lost(x, std::string("send: ") + errnoText());
        }
        size_t used = size_t(w);
        if (x.hdrDone < sizeof x.hdr) {
          size_t h = std::min(used, sizeof x.hdr - x.hdrDone);
          x.hdrDone += h;
          used -= h;
        }
        if (x.left) {
          // The kernel has just read these bytes: summing them now hits the cache.
          if (sums) x.sum.update(x.p, used);
          x.p += used;
          x.left -= used;
          if (!x.left) finishPayload(x);
        } else {
          x.trlDone += used;
        }
        if (x.hdrDone == sizeof x.hdr && x.left == 0 && x.trlDone == sizeof x.trl) {
          x.done = true;
          remaining--;
        }
      } else {
        ssize_t r;
        if (x.hdrDone < sizeof x.hdr)
          r = ::recv(fd, reinterpret_cast<char*>(&x.hdr) + x.hdrDone, sizeof x.hdr - x.hdrDone,
                     MSG_DONTWAIT);
        else if (x.left)
          r = ::recv(fd, x.p, x.left, MSG_DONTWAIT);
        else
          r = ::recv(fd, reinterpret_cast<char*>(&x.trl) + x.trlDone, sizeof x.trl - x.trlDone,
                     MSG_DONTWAIT);
        if (r < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          return lost(x, std::string("receive: ") + errnoText());
        }
        if (r == 0) {
          lost(x, "connection closed by the peer");
          // Between chunks this is close() at the end of the peer's run, not a failure.
          if (x.hdrDone == 0) res.status = StepStatus::peerClosed;
          return res;
        }
        if (x.hdrDone < sizeof x.hdr) {
          x.hdrDone += size_t(r);
          if (x.hdrDone == sizeof x.hdr) {
            if (x.hdr.magic != kChunkMagic || x.hdr.seq != x.c->recvSeq || x.hdr.length != x.left)
              return lost(x, "out-of-step data (seq " + std::to_string(x.hdr.seq) + ", expected " +
                                 std::to_string(x.c->recvSeq) + ")");
            x.c->recvSeq++;
          }
        } else if (x.left) {
          if (x.hdr.flags & kFlagChecksum) x.sum.update(x.p, size_t(r));
          x.p += r;
          x.left -= size_t(r);
          if (onReceived_) onReceived_(size_t(r));
        } else {
          x.trlDone += size_t(r);
          if (x.trlDone == sizeof x.trl) {
            if (x.trl.magic != kChunkMagic) return lost(x, "bad chunk trailer");
            if ((x.hdr.flags & kFlagChecksum) && x.trl.sum != x.sum.value()) res.corruptions++;
            x.done = true;
            remaining--;
          }
        }
      }
    }
  }
  return res;
}

}  // namespace rc::workload
