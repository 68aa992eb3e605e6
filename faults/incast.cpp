// The incast fault: many flows converge on one receiver in synchronised bursts (the classic
// many-to-one pattern that overflows the receiver's switch port, triggers PFC and ECN marks,
// and hurts every job that shares the port).
//
// One kind, two roles, chosen by the node itself: the node that owns the `receiver` address runs
// the sink (accepts the flows and discards the data); every other node is a sender and opens
// fan_in / senders flows to it, each writing `size` bytes per burst, bursts back to back
// (or every `interval` from the common start instant, so senders stay in step). The controller
// turns a receiver node name into its data address and schedules the sink with the senders.
//
// Flows are TCP where the nodes have no RDMA device. With transport = "verbs" (what "auto", the
// default, becomes when the receiver and every sender have an RDMA device with an ACTIVE port)
// they are RC queue pairs doing RDMA WRITEs into the receiver (faults/incast_verbs.cpp). With
// transport = "udp" they are UDP datagrams that never back
// off, the way RoCEv2 traffic without DCQCN behaves: the only thing that slows a sender is its
// own NIC being paused. A scenario that needs a paused queue to spread upstream (the PFC
// watchdog's) needs that; TCP backs off and may never fill the senders' ingress.
//
// Safety: the traffic leaves only through an allowlisted data interface (the one that holds the
// local end of the path to the receiver), and nothing outlives the fault: the sockets are the
// whole state, closed when the fault ends and by the kernel if the agent dies.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <vector>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/unique_fd.hpp"
#include "common/units.hpp"
#include "faults/fault.hpp"
#include "rdmachaos_config.h"
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
#include "faults/incast_verbs.hpp"
#endif

namespace rc::faults {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxFlowsPerSender = 512;  // well inside the agent's file descriptor limit
constexpr int kMaxSinkConnections = 4096;
constexpr auto kSinkGrace = std::chrono::milliseconds(500);  // see run(): the senders start after the sink
constexpr auto kConnectPatience = std::chrono::seconds(3);  // the sink starts at the same instant
constexpr size_t kChunk = 256 * 1024;
constexpr size_t kDatagram = 1400;  // UDP payload: fits the lab's 1500-byte MTU with headers

struct IncastParams {
  std::string receiver;  // IPv4 literal once bound by the controller
  in_addr receiverAddr{};
  uint16_t port = 0;
  int senders = 0;
  int fanIn = 0;
  int flows = 0;  // per sender
  int64_t sizeBytes = 0;
  int dscp = 0;
  int64_t durationNs = 0;  // 0 = until stopped
  int64_t intervalNs = 0;  // 0 = back to back
  bool isReceiver = false;
  bool udp = false;
  bool verbs = false;
  std::string interface;  // the data interface the traffic uses
  in_addr localAddr{};
  std::vector<in_addr> from;  // the sink accepts flows only from these (empty = any)
};

bool sameAddr(in_addr a, in_addr b) { return a.s_addr == b.s_addr; }

// The interface that holds LOCAL (an IPv4 address of this host), or "".
std::string interfaceOf(in_addr local) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (auto* a = list; a; a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == local.s_addr) {
      name = a->ifa_name;
      break;
    }
  ::freeifaddrs(list);
  return name;
}

// The local address the kernel would use to reach TO (a UDP connect sends nothing).
Result<in_addr> localEndTowards(in_addr to, uint16_t port) {
  UniqueFD fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.isValid()) return makeError("incast: cannot open a socket: " + errnoText(errno), errno);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = to;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return makeError("incast: no route to the receiver " + std::string(inet_ntoa(to)) + ": " + errnoText(errno),
                     errno);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len) != 0)
    return makeError("incast: cannot read the local end of the path: " + errnoText(errno), errno);
  return me.sin_addr;
}

// Wakes a poll() when stop is requested.
class StopWake {
 public:
  explicit StopWake(std::stop_token stop)
      : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        cb_(stop, [this] {
          uint64_t one = 1;
          [[maybe_unused]] auto r = ::write(fd_.get(), &one, sizeof one);
        }) {}
  int fd() const { return fd_.get(); }

 private:
  UniqueFD fd_;
  std::stop_callback<std::function<void()>> cb_;
};

int msUntil(Clock::time_point t) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::clamp<int64_t>(d + 1, 0, 1000));
}

class Incast final : public Fault {
 public:
  Incast(json params, IncastParams p) : params_(std::move(params)), p_(std::move(p)) {}

  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    // Nothing on the fabric to restore: the sockets are the whole state and die with the fault.
    return json{{"role", p_.isReceiver ? "receiver" : "sender"}, {"interface", p_.interface}};
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    StopWake wake(stop);
    if (wake.fd() < 0) return makeError("incast: cannot create an eventfd: " + errnoText(errno), errno);
    auto end = p_.durationNs > 0 ? Clock::now() + std::chrono::nanoseconds(p_.durationNs)
                                 : Clock::time_point::max();
    // The sink is applied first and the senders after it, on other agents, each starting its own
    // DURATION then: a sink that closed at its own DURATION missed their last bursts (the truth
    // suite's sink read 280 of the 300 datagrams the switch metered). It reads on for a grace
    // after, still ended by the fault's revert.
    if (p_.isReceiver && end != Clock::time_point::max()) end += kSinkGrace;
    if (p_.verbs) return runVerbs(stop, wake.fd(), end, events);
    if (p_.isReceiver) return p_.udp ? udpSink(stop, wake.fd(), end, events) : sink(stop, wake.fd(), end, events);
    return send(stop, wake.fd(), end, events);
  }

  Result<void> revert(EventLog& events) override {
    // run() closed every socket on its way out; this only records the end.
    events.add(Event{wallNs(), "reverted", p_.interface, false});
    return {};
  }

  std::string describe() const override {
    std::string to = p_.receiver + ":" + std::to_string(p_.port) + (p_.udp ? "/udp" : p_.verbs ? "/verbs" : "");
    if (p_.isReceiver)
      return "incast sink on " + to + " (" + p_.interface + "), expecting " + std::to_string(p_.fanIn) + " flows";
    return "incast " + std::to_string(p_.flows) + " of " + std::to_string(p_.fanIn) + " flows -> " + to + " from " +
           p_.interface + ", " + formatSize(uint64_t(p_.sizeBytes)) + " per flow per burst, DSCP " +
           std::to_string(p_.dscp);
  }

 private:
  sockaddr_in receiverSockaddr() const {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(p_.port);
    sa.sin_addr = p_.receiverAddr;
    return sa;
  }

#if RDMACHAOS_HAVE_VERBS_TRANSPORT
  Result<void> runVerbs(std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
    incast_verbs::Options o;
    o.receiver = p_.receiver;
    o.receiverAddr = p_.receiverAddr;
    o.port = p_.port;
    o.localAddr = p_.localAddr;
    o.flows = p_.flows;
    o.fanIn = p_.fanIn;
    o.sizeBytes = p_.sizeBytes;
    o.intervalNs = p_.intervalNs;
    o.dscp = p_.dscp;
    o.from = p_.from;
    auto bytes = p_.isReceiver ? incast_verbs::sink(o, stop, wakeFd, end, events)
                               : incast_verbs::send(o, stop, wakeFd, end, events);
    if (!bytes) return bytes.error();
    std::lock_guard lock(m_);
    bytes_ = *bytes;
    return {};
  }
#else
  Result<void> runVerbs(std::stop_token&, int, Clock::time_point, EventLog&) {
    return makeError("incast: transport \"verbs\" needs an agent built with rdma-core");
  }
#endif

  // ------------------------------------------------------------ the receiver's sink
  static std::string refusals(size_t strangers, size_t extra, size_t starved) {
    std::string r;
    auto add = [&](size_t n, const std::string& why) {
      if (n) r += (r.empty() ? " (" : ", ") + std::to_string(n) + " refused: " + why;
    };
    add(strangers, "not from a sender");
    add(extra, "more than fan_in");
    add(starved, "out of descriptors");
    return r.empty() ? r : r + ")";
  }

  Result<void> sink(std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
    UniqueFD listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener.isValid()) return makeError("incast sink: cannot open a socket: " + errnoText(errno), errno);
    int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = receiverSockaddr();
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      return makeError("incast sink: cannot listen on " + p_.receiver + ":" + std::to_string(p_.port) + ": " +
                           errnoText(errno) + " (pick another port with port = N)",
                       errno);
    if (::listen(listener.get(), SOMAXCONN) != 0)
      return makeError("incast sink: listen failed: " + errnoText(errno), errno);
    events.add(Event{wallNs(), "listening", p_.receiver + ":" + std::to_string(p_.port), false});

    std::vector<UniqueFD> conns;
    std::vector<uint8_t> buf(kChunk);
    uint64_t bytes = 0;
    size_t accepted = 0, strangers = 0, extra = 0, starved = 0;
    // Out of descriptors: the listener stays readable, so it is left out of the poll for a
    // while instead of spinning on accept (and logging) at full speed.
    Clock::time_point listenAgain{};
    std::vector<pollfd> pfds;
    while (!stop.stop_requested() && Clock::now() < end) {
      const bool listen = Clock::now() >= listenAgain;
      pfds.clear();
      pfds.push_back({wakeFd, POLLIN, 0});
      pfds.push_back({listen ? listener.get() : -1, POLLIN, 0});
      for (auto& c : conns) pfds.push_back({c.get(), POLLIN, 0});
      int wait = msUntil(end);
      if (!listen) wait = std::min(wait, int(std::chrono::ceil<std::chrono::milliseconds>(listenAgain - Clock::now()).count()));
      int n = ::poll(pfds.data(), pfds.size(), wait);
      if (n < 0) {
        if (errno == EINTR) continue;
        return makeError("incast sink: poll failed: " + errnoText(errno), errno);
      }
      if (pfds[1].revents & POLLIN) {
        for (;;) {
          sockaddr_in peer{};
          socklen_t len = sizeof peer;
          int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
              starved++;
              listenAgain = Clock::now() + std::chrono::milliseconds(100);
            }
            break;
          }
          UniqueFD conn(fd);
          // Only the senders the controller bound, and no more flows than fan_in: anyone else
          // on the fabric could otherwise hold the root agent's descriptors.
          if (!p_.from.empty() && std::none_of(p_.from.begin(), p_.from.end(),
                                               [&](in_addr a) { return sameAddr(a, peer.sin_addr); })) {
            strangers++;
            continue;
          }
          if (conns.size() >= size_t(std::min(p_.fanIn, kMaxSinkConnections))) {
            extra++;
            continue;
          }
          conns.push_back(std::move(conn));
          accepted++;
        }
      }
      // Drain what arrived; drop the connections their senders closed.
      for (size_t i = 2; i < pfds.size(); i++) {
        if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto& c = conns[i - 2];
        for (int k = 0; k < 16; k++) {
          ssize_t r = ::recv(c.get(), buf.data(), buf.size(), MSG_DONTWAIT);
          if (r > 0) {
            bytes += uint64_t(r);
            continue;
          }
          if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.reset();
          break;
        }
      }
      conns.erase(std::remove_if(conns.begin(), conns.end(), [](const UniqueFD& c) { return !c.isValid(); }),
                  conns.end());
    }
    events.add(Event{wallNs(), "received",
                     std::to_string(bytes) + " B (" + formatSize(bytes) + ") on " + std::to_string(accepted) +
                         " flows" + refusals(strangers, extra, starved),
                     false});
    {
      std::lock_guard lock(m_);
      bytes_ = bytes;
    }
    return {};
  }

  // A UDP sink: one socket bound to the receiver's address; reads and discards. It exists so
  // that the receiver answers no datagram with ICMP port-unreachable.
  Result<void> udpSink(std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
    UniqueFD sock(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!sock.isValid()) return makeError("incast sink: cannot open a socket: " + errnoText(errno), errno);
    int rcvbuf = 4 << 20;
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    // The kernel counts the datagrams it dropped for this socket (its buffer full) and says so
    // with each one read: the record then tells those apart from datagrams that never came.
    int on = 1;
    const bool countsDrops = ::setsockopt(sock.get(), SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on) == 0;
    sockaddr_in sa = receiverSockaddr();
    if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      return makeError("incast sink: cannot bind UDP " + p_.receiver + ":" + std::to_string(p_.port) + ": " +
                           errnoText(errno) + " (pick another port with port = N)",
                       errno);
    events.add(Event{wallNs(), "listening", p_.receiver + ":" + std::to_string(p_.port) + "/udp", false});
    std::vector<uint8_t> buf(65536);
    uint64_t bytes = 0, datagrams = 0, strangers = 0;
    uint32_t dropped = 0;  // SO_RXQ_OVFL: the socket's drops so far, as the last datagram said
    std::vector<uint16_t> sources;  // distinct source ports seen (bounded by fan_in)
    while (!stop.stop_requested() && Clock::now() < end) {
      pollfd pfds[2] = {{wakeFd, POLLIN, 0}, {sock.get(), POLLIN, 0}};
      int n = ::poll(pfds, 2, msUntil(end));
      if (n < 0) {
        if (errno == EINTR) continue;
        return makeError("incast sink: poll failed: " + errnoText(errno), errno);
      }
      if (!(pfds[1].revents & POLLIN)) continue;
      for (int k = 0; k < 256; k++) {
        sockaddr_in from{};
        iovec iov{buf.data(), buf.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint32_t))];
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t r = ::recvmsg(sock.get(), &msg, MSG_DONTWAIT);
        if (r < 0) break;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
          if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL)
            std::memcpy(&dropped, CMSG_DATA(c), sizeof dropped);
        if (!p_.from.empty() &&
            std::none_of(p_.from.begin(), p_.from.end(), [&](in_addr a) { return sameAddr(a, from.sin_addr); })) {
          strangers++;
          continue;
        }
        bytes += uint64_t(r);
        datagrams++;
        uint16_t port = ntohs(from.sin_port);
        if (sources.size() < size_t(p_.fanIn) && std::find(sources.begin(), sources.end(), port) == sources.end())
          sources.push_back(port);
      }
    }
    events.add(Event{wallNs(), "received",
                     std::to_string(bytes) + " B (" + formatSize(bytes) + ") in " + std::to_string(datagrams) +
                         " datagrams from " + std::to_string(sources.size()) + " flows" +
                         (strangers ? " (" + std::to_string(strangers) + " datagrams ignored: not from a sender)" : "") +
                         (!countsDrops ? "; the kernel does not count this socket's drops"
                                       : "; " + std::to_string(dropped) +
                                             " datagrams dropped by this host before the sink read them (its "
                                             "socket buffer full)"),
                     false});
    {
      std::lock_guard lock(m_);
      bytes_ = bytes;
    }
    return {};
  }

  // ------------------------------------------------------------ a sender
  struct Flow {
    UniqueFD fd;
    int64_t left = 0;  // bytes of this burst still to write
  };

  // Connects every flow, retrying while the sink is not listening yet.
  Result<std::vector<Flow>> connectFlows(std::stop_token& stop, int wakeFd) {
    std::vector<Flow> flows(size_t(p_.flows));
    auto giveUp = Clock::now() + kConnectPatience;
    int tos = p_.dscp << 2;
    sockaddr_in to = receiverSockaddr();
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr = p_.localAddr;
    for (auto& f : flows) {
      for (;;) {
        if (stop.stop_requested()) return makeError("incast: stopped while connecting");
        f.fd.reset(::socket(AF_INET, (p_.udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!f.fd.isValid()) return makeError("incast: cannot open a socket: " + errnoText(errno), errno);
        ::setsockopt(f.fd.get(), IPPROTO_IP, IP_TOS, &tos, sizeof tos);
        if (::bind(f.fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
          return makeError("incast: cannot bind to " + std::string(inet_ntoa(p_.localAddr)) + ": " + errnoText(errno),
                           errno);
        int err = 0;
        if (::connect(f.fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
          err = errno;
          if (err == EINPROGRESS) {
            pollfd pf[2] = {{f.fd.get(), POLLOUT, 0}, {wakeFd, POLLIN, 0}};
            ::poll(pf, 2, msUntil(giveUp));
            socklen_t len = sizeof err;
            if (pf[0].revents) {
              ::getsockopt(f.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            } else {
              err = ETIMEDOUT;
            }
          }
        }
        if (err == 0) break;
        if (Clock::now() >= giveUp)
          return makeError("incast: " + p_.receiver + ":" + std::to_string(p_.port) + " did not accept for " +
                               std::to_string(kConnectPatience.count()) + " s (" + errnoText(err) +
                               "); the receiver node runs the sink only while the same incast fault runs there",
                           err);
        // Refused: the sink starts at the same instant and may be a moment late.
        pollfd pf{wakeFd, POLLIN, 0};
        ::poll(&pf, 1, 20);
      }
    }
    return flows;
  }

  Result<void> send(std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events) {
    auto flows = connectFlows(stop, wakeFd);
    if (!flows) return flows.error();
    auto t0 = Clock::now();
    events.add(Event{wallNs(), "connected",
                     std::to_string(p_.flows) + " flows -> " + p_.receiver + ":" + std::to_string(p_.port), false});
    static const std::vector<uint8_t> zeros(kChunk, 0);
    std::vector<pollfd> pfds;
    std::vector<int64_t> burstNs;
    uint64_t bytes = 0, icmpRefused = 0;
    std::string ended = "";
    Result<void> result;
    int64_t burst = 0;
    while (!stop.stop_requested() && Clock::now() < end && ended.empty()) {
      // The next burst starts now (back to back) or at its slot on the common schedule.
      if (p_.intervalNs > 0) {
        auto slot = t0 + std::chrono::nanoseconds(p_.intervalNs * burst);
        while (Clock::now() < slot && !stop.stop_requested() && Clock::now() < end) {
          pollfd pf{wakeFd, POLLIN, 0};
          ::poll(&pf, 1, msUntil(std::min(slot, end)));
        }
        if (stop.stop_requested() || Clock::now() >= end) break;
        // A burst that overran its slot pushes the next ones to the following free slot.
        auto late = Clock::now() - t0;
        burst = std::max<int64_t>(burst, std::chrono::duration_cast<std::chrono::nanoseconds>(late).count() / p_.intervalNs);
      }
      auto bStart = Clock::now();
      for (auto& f : *flows) f.left = p_.sizeBytes;
      size_t open = flows->size();
      while (open > 0 && !stop.stop_requested() && Clock::now() < end) {
        pfds.clear();
        pfds.push_back({wakeFd, POLLIN, 0});
        for (auto& f : *flows)
          if (f.left > 0) pfds.push_back({f.fd.get(), POLLOUT, 0});
        int n = ::poll(pfds.data(), pfds.size(), msUntil(end));
        if (n < 0 && errno != EINTR) return makeError("incast: poll failed: " + errnoText(errno), errno);
        for (size_t i = 1; i < pfds.size(); i++) {
          if (!pfds[i].revents) continue;
          auto& f = *std::find_if(flows->begin(), flows->end(), [&](const Flow& x) { return x.fd.get() == pfds[i].fd; });
          while (f.left > 0) {
            size_t chunk = p_.udp ? kDatagram : kChunk;
            ssize_t w = ::send(f.fd.get(), zeros.data(), size_t(std::min<int64_t>(f.left, int64_t(chunk))),
                               MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) {
              f.left -= w;
              bytes += uint64_t(w);
              continue;
            }
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENOBUFS)) break;
            // UDP: an ICMP port-unreachable (the sink not bound yet, or already gone) is
            // reported on the next send. Datagrams are fire-and-forget: count it and go on.
            if (p_.udp && w < 0 && errno == ECONNREFUSED) {
              icmpRefused++;
              continue;
            }
            // The sink went away: its fault ended (or was reverted) a moment before ours.
            ended = "receiver closed the flow (" + errnoText(errno) + ")";
            f.left = 0;
            break;
          }
          if (f.left == 0) open--;
        }
        if (!ended.empty()) break;
      }
      if (open == 0 && ended.empty()) {
        burstNs.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - bStart).count());
        burst++;
      }
    }
    std::string summary = std::to_string(burstNs.size()) + " bursts, " + std::to_string(bytes) + " B (" +
                        formatSize(bytes) + ") sent";
    if (!burstNs.empty()) {
      std::sort(burstNs.begin(), burstNs.end());
      summary += ", burst time p50 " + formatDuration(Nanos(burstNs[burstNs.size() / 2])) + " max " +
                 formatDuration(Nanos(burstNs.back()));
    }
    if (icmpRefused) summary += ", " + std::to_string(icmpRefused) + " datagrams refused by the receiver (ICMP)";
    if (!ended.empty()) summary += "; " + ended;
    events.add(Event{wallNs(), "sent", summary, false});
    {
      std::lock_guard lock(m_);
      bytes_ = bytes;
    }
    return result;
  }

  json params_;
  IncastParams p_;
  std::mutex m_;
  uint64_t bytes_ = 0;
};

// fan_in flows spread evenly over the senders (0 senders = not resolved yet: any fan_in).
Result<void> checkIncast(const json& params) {
  int64_t senders = params.value("senders", int64_t(0)), fanIn = params.value("fan_in", int64_t(0));
  if (senders > 0 && fanIn % senders != 0)
    return makeError("fan_in " + std::to_string(fanIn) + " must be a multiple of senders " + std::to_string(senders) +
                     " (each sender opens fan_in / senders flows)");
  return {};
}

// The controller's side: the receiver node name becomes its data address; the senders are a
// seeded pick among the targets (never the receiver); the receiver's sink comes first, at the
// same instant, so it listens while the senders connect.
Result<std::vector<BoundTarget>> bindIncast(const json& params, const std::vector<std::string>& targets,
                                            const std::vector<BindNode>& nodes, const Draw& below) {
  std::string receiver = params.value("receiver", std::string());
  auto rx = std::find_if(nodes.begin(), nodes.end(), [&](const BindNode& n) { return n.name == receiver; });
  if (rx == nodes.end()) {
    std::string names;
    for (const auto& n : nodes) names += (names.empty() ? "" : ", ") + n.name;
    return makeError("incast receiver '" + receiver + "' is not a node of the inventory (" + names + ")");
  }
  if (rx->dataAddresses.empty())
    return makeError("incast receiver '" + receiver +
                     "' has no data_addresses in the inventory: the flows go to its data address");
  std::vector<std::string> pool;
  for (const auto& t : targets)
    if (t != receiver) pool.push_back(t);
  int64_t asked = params.value("senders", int64_t(0));
  int64_t want = asked == 0 ? int64_t(pool.size()) : asked;
  if (pool.empty() || want > int64_t(pool.size()))
    return makeError("incast needs " + std::to_string(std::max<int64_t>(want, 1)) +
                     " sender(s) among the targets other than the receiver '" + receiver + "', which has " +
                     std::to_string(pool.size()) + ": widen the target or lower senders");
  // Without a seeded draw (inject), the targets are the senders: a smaller count is a mistake.
  if (!below && want < int64_t(pool.size()))
    return makeError("incast: senders=" + std::to_string(asked) + " but --node names " + std::to_string(pool.size()) +
                     " sender node(s); drop --set senders (every --node but the receiver sends) or name that many "
                     "nodes");
  int64_t fanIn = params.value("fan_in", int64_t(0));
  if (fanIn % want != 0)
    return makeError("incast fan_in " + std::to_string(fanIn) + " must be a multiple of the " + std::to_string(want) +
                     " senders (each sender opens fan_in / senders flows)");
  // All of the pool needs no draw (and consumes none of the seeded sequence).
  auto picked = pickInOrder(pool, size_t(want), size_t(want) < pool.size() ? below : nullptr);
  json wire = params;
  wire["receiver"] = rx->dataAddresses[0];
  wire["senders"] = want;
  // The sink accepts flows only from the picked senders' data addresses; a sender the
  // inventory gives none for leaves the sink open to any (it cannot be told apart).
  std::string from;
  bool everySenderKnown = true;
  for (const auto& name : picked) {
    auto n = std::find_if(nodes.begin(), nodes.end(), [&](const BindNode& b) { return b.name == name; });
    if (n == nodes.end() || n->dataAddresses.empty()) everySenderKnown = false;
    if (n != nodes.end())
      for (const auto& a : n->dataAddresses) from += (from.empty() ? "" : ",") + a;
  }
  if (everySenderKnown && params.value("from", std::string()).empty()) wire["from"] = from;
  std::vector<BoundTarget> out;
  out.push_back({receiver, wire, "sink"});
  for (const auto& n : picked) out.push_back({n, wire, "sender"});
  return out;
}

// transport = "auto" becomes one choice for the whole step: verbs only where the receiver and
// every sender have an ACTIVE RDMA port (a verbs sender cannot write into a TCP sink).
void settleIncast(const std::vector<json*>& params, const std::vector<json>& capabilities) {
  bool verbs = !params.empty();
  for (const auto& caps : capabilities) verbs = verbs && hasActiveRdmaPort(caps);
  for (json* p : params)
    if (p && p->value("transport", "") == "auto") (*p)["transport"] = verbs ? "verbs" : "tcp";
}

// The sink's TCP or UDP port is metered on the receiver's switch port. A verbs incast's data is
// RoCEv2 on UDP 4791 like the workload's: no meter tells them apart, so it has none.
std::optional<int> incastWireMeter(const std::string& role, const json& params) {
  if (role != "sink" || !params.is_object() || params.value("transport", "") == "verbs") return std::nullopt;
  auto port = params.find("port");
  if (port == params.end() || !port->is_number_integer()) return std::nullopt;
  return port->get<int>();
}

}  // namespace

extern const FaultKind kind_incast;
const FaultKind kind_incast{
    .name = "incast",
    .summary = "many flows converge on one receiver in synchronised bursts (buffer overflow, PFC, ECN marks)",
    .params = {
        {.name = "receiver", .type = ParamType::string,
         .help = "the node the flows converge on (a node name in playbooks and inject; its data address on the wire)"},
        {.name = "senders", .type = ParamType::integer,
         .help = "how many of the targeted nodes send (0 = every targeted node but the receiver)", .defaultValue = 0,
         .min = 0, .max = 4096},
        {.name = "fan_in", .type = ParamType::integer,
         .help = "flows converging on the receiver, spread evenly over the senders", .defaultValue = 8, .min = 1,
         .max = 4096},
        {.name = "size", .type = ParamType::size, .help = "bytes each flow writes per burst",
         .defaultValue = int64_t(1) << 20, .min = 1024, .max = double(1ull << 30)},
        {.name = "interval", .type = ParamType::duration,
         .help = "a burst starts every interval from the common start (0 = back to back)", .defaultValue = 0,
         .min = 0, .max = 60e9},
        {.name = "duration", .type = ParamType::duration,
         .help = "how long the incast lasts (default: until the step's `for` ends)", .min = kParamMs,
         .max = kParamHour, .optional = true},
        {.name = "dscp", .type = ParamType::integer, .help = "DSCP of the flows (26 = the usual RoCE class)",
         .defaultValue = 26, .min = 0, .max = 63},
        {.name = "port", .type = ParamType::integer, .help = "TCP or UDP port of the receiver's sink",
         .defaultValue = 7490, .min = 1024, .max = 65535},
        {.name = "from", .type = ParamType::string,
         .help = "data addresses the sink accepts flows from, comma-separated (the controller sets the senders'; "
                 "empty = any)",
         .defaultValue = ""},
        {.name = "transport", .type = ParamType::string,
         .help = "auto (verbs where the receiver and every sender have an RDMA device with an ACTIVE port, else "
                 "tcp), verbs (RC QPs doing RDMA WRITEs into the receiver), tcp (flows back off under congestion) "
                 "or udp (datagrams at the burst schedule that never back off, like RoCEv2 without DCQCN)",
         .defaultValue = "auto", .choices = {"auto", "verbs", "tcp", "udp"}},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      if (!params.is_object()) return makeError("incast parameters must be a table");
      IncastParams p;
      auto rec = params.find("receiver");
      if (rec == params.end() || !rec->is_string()) return makeError("incast parameter 'receiver' is required");
      p.receiver = rec->get<std::string>();
      if (::inet_pton(AF_INET, p.receiver.c_str(), &p.receiverAddr) != 1)
        return makeError("incast: receiver '" + p.receiver +
                         "' is not an IPv4 address; the controller turns a node name into its data address, "
                         "so schedule incast through `rdmachaos inject` or a playbook");
      for (const char* key : {"senders", "fan_in", "size", "interval", "dscp", "port"})
        if (auto v = intParam("incast", params, key); !v) return v.error();
      p.senders = params["senders"].get<int>();
      p.fanIn = params["fan_in"].get<int>();
      p.sizeBytes = params["size"].get<int64_t>();
      p.intervalNs = params["interval"].get<int64_t>();
      p.dscp = params["dscp"].get<int>();
      p.port = uint16_t(params["port"].get<int>());
      auto tr = params.find("transport");
      std::string transport = tr != params.end() && tr->is_string() ? tr->get<std::string>() : "auto";
      if (transport != "auto" && transport != "verbs" && transport != "tcp" && transport != "udp")
        return makeError("incast parameter 'transport' must be \"auto\", \"verbs\", \"tcp\" or \"udp\"");
      p.udp = transport == "udp";
      p.verbs = transport == "verbs";
#if !RDMACHAOS_HAVE_VERBS_TRANSPORT
      if (p.verbs)
        return makeError("incast: transport \"verbs\" needs an agent built with rdma-core (libibverbs-dev, "
                         "librdmacm-dev); use transport = \"tcp\"");
#endif
      if (auto f = params.find("from"); f != params.end() && f->is_string()) {
        std::string list = f->get<std::string>();
        size_t start = 0;
        while (start < list.size()) {
          size_t comma = list.find(',', start);
          std::string one = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          in_addr a{};
          if (::inet_pton(AF_INET, one.c_str(), &a) != 1)
            return makeError("incast parameter 'from': '" + one + "' is not an IPv4 address (a comma-separated list)");
          if (p.from.size() >= 4096) return makeError("incast parameter 'from' lists more than 4096 addresses");
          p.from.push_back(a);
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      }
      if (auto d = params.find("duration"); d != params.end() && d->is_number_integer()) p.durationNs = d->get<int64_t>();
      if (p.senders < 1 || p.senders > 4096)
        return makeError("incast: senders must be resolved to 1..4096 by the controller before it reaches an agent");
      if (auto ok = checkIncast(params); !ok || p.fanIn < 1 || p.fanIn > 4096)
        return makeError("incast: " + (ok ? "fan_in must be in 1..4096" : ok.error().message));
      p.flows = p.fanIn / p.senders;
      if (p.flows > kMaxFlowsPerSender)
        return makeError("incast: " + std::to_string(p.flows) + " flows per sender is more than " +
                         std::to_string(kMaxFlowsPerSender) + "; add senders or lower fan_in");
      if (p.sizeBytes < 1024 || p.dscp < 0 || p.dscp > 63 || p.intervalNs < 0 || p.port < 1024)
        return makeError("incast: a parameter is out of range (see `rdmachaos inject --help`)");
      // Which role, and through which interface: the local end of the path to the receiver.
      std::string own = interfaceOf(p.receiverAddr);
      if (!own.empty()) {
        p.isReceiver = true;
        p.interface = own;
        p.localAddr = p.receiverAddr;
      } else {
        auto local = localEndTowards(p.receiverAddr, p.port);
        if (!local) return local.error();
        p.localAddr = *local;
        p.interface = interfaceOf(*local);
        if (p.interface.empty())
          return makeError("incast: cannot tell which interface reaches " + p.receiver);
      }
      if (auto ok = checkInterface(policy, p.interface); !ok)
        return makeError("incast: the path to " + p.receiver + " leaves through " + p.interface + ": " +
                         ok.error().message,
                         EPERM);
      // Only hosts of the data fabric: a certified controller must not be able to point a flood
      // of flows at any address this node can route to (a storage array, a gateway, the internet).
      if (auto ok = checkDataAddress(policy, p.receiver); !ok)
        return makeError("incast: receiver " + ok.error().message, ok.error().code);
      // "auto" that reached an agent (the controller decides it for the whole step from the
      // agents' capabilities): this node's own device decides.
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
      if (transport == "auto") p.verbs = incast_verbs::carries(p.localAddr);
#endif
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
      // Refused here, before the instant, rather than failing when it runs.
      if (p.verbs && transport == "verbs" && !incast_verbs::carries(p.localAddr))
        return makeError("incast: transport \"verbs\" but no RDMA device with an ACTIVE port carries " +
                         std::string(inet_ntoa(p.localAddr)) + " (this node's end of the path to " + p.receiver +
                         "); use transport = \"tcp\" or \"auto\"");
#endif
      json resolved = params;
      resolved["transport"] = p.verbs ? "verbs" : p.udp ? "udp" : "tcp";
      resolved["role"] = p.isReceiver ? "receiver" : "sender";
      resolved["interface"] = p.interface;
      return std::unique_ptr<Fault>(std::make_unique<Incast>(std::move(resolved), std::move(p)));
    },
    .revertRecord = [](const json& /*params*/, const json& /*snapshot*/, const Policy& /*policy*/) -> Result<void> {
      // The agent died: its sockets died with it. Nothing on the fabric to restore.
      return {};
    },
    .check = checkIncast,
    .bind = bindIncast,
    .settle = settleIncast,
    .wireMeter = incastWireMeter,
};

}  // namespace rc::faults
