// rtnetlink helpers over libnl: link queries, admin state changes, the link monitor.
#include "faults/netlink.hpp"

#include <net/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/nexthop.h>
#include <netlink/route/route.h>
#include <netlink/socket.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.hpp"

namespace rc::nl {
namespace {

// libnl reports errors as negative NLE_* codes; operators and callers want errno.
int toErrno(int nlErr) {
  switch (nlErr < 0 ? -nlErr : nlErr) {
    case NLE_OBJ_NOTFOUND:
    case NLE_NODEV:
      return ENODEV;
    case NLE_PERM:
    case NLE_NOACCESS:
      return EPERM;
    case NLE_NOMEM:
      return ENOMEM;
    case NLE_INVAL:
      return EINVAL;
    case NLE_BUSY:
      return EBUSY;
    default:
      return EIO;
  }
}

std::string nlMessage(int nlErr) { return nl_geterror(nlErr); }

std::string describeIndex(int ifindex) {
  return "interface with ifindex " + std::to_string(ifindex);
}

LinkInfo toInfo(rtnl_link* link) {
  LinkInfo info;
  info.ifindex = rtnl_link_get_ifindex(link);
  const char* name = rtnl_link_get_name(link);
  info.name = name ? name : "";
  unsigned flags = rtnl_link_get_flags(link);
  info.adminUp = (flags & IFF_UP) != 0;
  info.operUp = (flags & IFF_RUNNING) != 0;
  info.carrier = rtnl_link_get_carrier(link) != 0;
  info.mtu = rtnl_link_get_mtu(link);
  if (nl_addr* addr = rtnl_link_get_addr(link); addr && nl_addr_get_len(addr) > 0) {
    char buf[128];
    info.mac = nl_addr2str(addr, buf, sizeof buf);
  }
  return info;
}

// Fetches one link by index (if > 0) or name, from the kernel rather than a cache.
Result<LinkObject> fetchLink(NlSocket& sock, int ifindex, const char* name,
                             const std::string& what) {
  rtnl_link* raw = nullptr;
  int err = rtnl_link_get_kernel(sock.get(), ifindex, name, &raw);
  if (err < 0) {
    int code = toErrno(err);
    if (code == ENODEV)
      return makeError(what +
                           " does not exist in this network namespace; check the name with "
                           "'ip link' (or the inventory's interface list)",
                       code);
    return makeError("cannot read " + what + " over netlink: " + nlMessage(err), code);
  }
  return LinkObject(raw);
}

bool validName(const std::string& name) {
  // The kernel's limit: IFNAMSIZ including the terminating NUL, no '/' or whitespace.
  if (name.empty() || name.size() >= IFNAMSIZ) return false;
  return std::none_of(name.begin(), name.end(),
                      [](char c) { return c == '/' || c == ':' || c <= ' '; });
}

}  // namespace

void NlSocket::reset(nl_sock* sock) {
  if (sock_) nl_socket_free(sock_);  // also closes the descriptor
  sock_ = sock;
}

Result<NlSocket> NlSocket::connectRoute() {
  NlSocket s(nl_socket_alloc());
  if (!s.get()) return makeError("cannot allocate a netlink socket (out of memory)", ENOMEM);
  int err = nl_connect(s.get(), NETLINK_ROUTE);
  if (err < 0)
    return makeError("cannot open a NETLINK_ROUTE socket: " + nlMessage(err), toErrno(err));
  return s;
}

void LinkObject::reset(rtnl_link* link) {
  if (link_) rtnl_link_put(link_);
  link_ = link;
}

void Cache::reset(nl_cache* cache) {
  if (cache_) nl_cache_free(cache_);
  cache_ = cache;
}

Result<LinkInfo> getLink(const std::string& name) {
  std::string what = "interface '" + name + "'";
  if (!validName(name))
    return makeError(what +
                         " is not a valid interface name (1-15 characters, no '/', ':' "
                         "or spaces)",
                     EINVAL);
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  auto link = fetchLink(*sock, 0, name.c_str(), what);
  if (!link) return link.error();
  return toInfo(link->get());
}

Result<LinkInfo> getLink(int ifindex) {
  std::string what = describeIndex(ifindex);
  if (ifindex <= 0) return makeError(what + " is not valid (must be > 0)", EINVAL);
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  auto link = fetchLink(*sock, ifindex, nullptr, what);
  if (!link) return link.error();
  return toInfo(link->get());
}

Result<std::vector<LinkInfo>> listLinks() {
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  nl_cache* raw = nullptr;
  int err = rtnl_link_alloc_cache(sock->get(), AF_UNSPEC, &raw);
  if (err < 0)
    return makeError("cannot list interfaces over netlink: " + nlMessage(err), toErrno(err));
  Cache cache(raw);
  std::vector<LinkInfo> out;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o))
    out.push_back(toInfo(reinterpret_cast<rtnl_link*>(o)));
  std::sort(out.begin(), out.end(),
            [](const LinkInfo& a, const LinkInfo& b) { return a.ifindex < b.ifindex; });
  return out;
}

Result<void> setAdminState(int ifindex, bool up) {
  std::string what = describeIndex(ifindex);
  if (ifindex <= 0) return makeError(what + " is not valid (must be > 0)", EINVAL);
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  auto orig = fetchLink(*sock, ifindex, nullptr, what);
  if (!orig) return orig.error();
  const char* name = rtnl_link_get_name(orig->get());
  if (name) what = "interface '" + std::string(name) + "'";

  LinkObject change(rtnl_link_alloc());
  if (!change.get()) return makeError("out of memory building a link change", ENOMEM);
  if (up)
    rtnl_link_set_flags(change.get(), IFF_UP);
  else
    rtnl_link_unset_flags(change.get(), IFF_UP);
  int err = rtnl_link_change(sock->get(), orig->get(), change.get(), 0);
  if (err < 0) {
    int code = toErrno(err);
    std::string verb = up ? "up" : "down";
    if (code == EPERM)
      return makeError("setting " + what + " " + verb +
                           " was refused: the agent needs CAP_NET_ADMIN (run it as root or "
                           "grant the capability)",
                       code);
    if (code == ENODEV)
      return makeError("setting " + what + " " + verb + " failed: the interface is gone", code);
    return makeError("setting " + what + " " + verb + " failed: " + nlMessage(err), code);
  }
  return {};
}

Result<std::string> defaultRouteInterface() {
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  nl_cache* raw = nullptr;
  int err = rtnl_route_alloc_cache(sock->get(), AF_UNSPEC, 0, &raw);
  if (err < 0) return makeError("cannot list routes over netlink: " + nlMessage(err), toErrno(err));
  Cache cache(raw);

  struct Best {
    int ifindex = 0;
    uint32_t metric = 0;
  };
  Best v4, v6;
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* route = reinterpret_cast<rtnl_route*>(o);
    uint8_t family = rtnl_route_get_family(route);
    if (family != AF_INET && family != AF_INET6) continue;
    if (rtnl_route_get_table(route) != RT_TABLE_MAIN) continue;
    if (rtnl_route_get_type(route) != RTN_UNICAST) continue;
    nl_addr* dst = rtnl_route_get_dst(route);
    if (dst && nl_addr_get_prefixlen(dst) != 0) continue;
    // A multipath default route has several next hops; the first with a device stands for
    // it, because protecting one of its interfaces is what the caller is after.
    int ifindex = 0;
    for (int i = 0; i < rtnl_route_get_nnexthops(route) && ifindex <= 0; ++i)
      ifindex = rtnl_route_nh_get_ifindex(rtnl_route_nexthop_n(route, i));
    if (ifindex <= 0) continue;
    Best& best = family == AF_INET ? v4 : v6;
    uint32_t metric = rtnl_route_get_priority(route);
    if (best.ifindex == 0 || metric < best.metric) best = Best{ifindex, metric};
  }
  int ifindex = v4.ifindex ? v4.ifindex : v6.ifindex;
  if (ifindex == 0) return std::string();
  auto link = getLink(ifindex);
  if (!link) return link.error();
  return link->name;
}

Result<LinkMonitor> LinkMonitor::open() {
  auto sock = NlSocket::connectRoute();
  if (!sock) return sock.error();
  nl_socket_disable_seq_check(sock->get());
  int err = nl_socket_add_membership(sock->get(), RTNLGRP_LINK);
  if (err < 0)
    return makeError("cannot subscribe to link notifications (RTNLGRP_LINK): " + nlMessage(err),
                     toErrno(err));
  // A burst of notifications (many links changing at once) must not overflow the queue
  // while the waiting thread is busy; overflow is survivable (see waitFor) but loses times.
  nl_socket_set_buffer_size(sock->get(), 1 << 20, 0);
  // Kernels so far attach no timestamp to netlink messages; ask anyway so a kernel that does
  // gives us its receive time. Failure to set it is not an error.
  int one = 1;
  (void)setsockopt(nl_socket_get_fd(sock->get()), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  LinkMonitor m(std::move(*sock));
  m.buf_.resize(64 * 1024);
  return m;
}

int LinkMonitor::fd() const { return sock_.get() ? nl_socket_get_fd(sock_.get()) : -1; }

Result<void> LinkMonitor::readOnce(std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  auto left = deadline - steady_clock::now();
  if (left <= steady_clock::duration::zero())
    return makeError("timed out waiting for a link notification", ETIMEDOUT);
  auto ns = duration_cast<nanoseconds>(left).count();
  timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
  pollfd p{fd(), POLLIN, 0};
  int r = ppoll(&p, 1, &ts, nullptr);
  if (r < 0) {
    if (errno == EINTR) return {};
    return makeError(std::string("waiting for link notifications failed: ") + std::strerror(errno),
                     errno);
  }
  if (r == 0) return makeError("timed out waiting for a link notification", ETIMEDOUT);

  sockaddr_nl from{};
  alignas(cmsghdr) char control[256];
  iovec iov{buf_.data(), buf_.size()};
  msghdr m{};
  m.msg_name = &from;
  m.msg_namelen = sizeof from;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n = recvmsg(fd(), &m, MSG_DONTWAIT);
  int64_t receivedNs = wallNs();
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return {};
    int e = errno;
    return makeError(std::string("reading link notifications failed: ") + std::strerror(e), e);
  }
  if (m.msg_flags & MSG_TRUNC)
    return makeError("a link notification was larger than the receive buffer", ENOBUFS);
  if (from.nl_pid != 0) return {};  // only the kernel speaks for links

  int64_t timeNs = receivedNs;
  bool kernelTime = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
        c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
      timespec kts{};
      std::memcpy(&kts, CMSG_DATA(c), sizeof kts);
      timeNs = int64_t(kts.tv_sec) * 1'000'000'000 + kts.tv_nsec;
      kernelTime = true;
    }
  }

  int len = int(n);
  // The kernel's NLMSG_OK compares the int length with the __u32 nlmsg_len: clang warns.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf_.data()); NLMSG_OK(h, len);
       h = NLMSG_NEXT(h, len)) {
#pragma GCC diagnostic pop
    if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) continue;
    const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
    Pending pend;
    pend.event.timeNs = timeNs;
    pend.event.kernelTime = kernelTime;
    pend.event.ifindex = ifi->ifi_index;
    pend.event.adminUp = (ifi->ifi_flags & IFF_UP) != 0;
    pend.event.operUp = (ifi->ifi_flags & IFF_RUNNING) != 0;
    pend.deleted = h->nlmsg_type == RTM_DELLINK;
    pending_.push_back(pend);
  }
  return {};
}

Result<LinkEvent> LinkMonitor::waitFor(int ifindex, std::function<bool(const LinkEvent&)> pred,
                                       std::chrono::steady_clock::time_point deadline) {
  if (!sock_.get()) return makeError("link monitor is not open", EBADF);
  for (;;) {
    while (!pending_.empty()) {
      Pending p = pending_.front();
      pending_.pop_front();
      if (p.event.ifindex != ifindex) continue;
      if (p.deleted)
        return makeError(describeIndex(ifindex) +
                             " was deleted (or moved to another namespace) "
                             "while waiting for its state change",
                         ENODEV);
      if (!pred || pred(p.event)) return p.event;
    }
    auto r = readOnce(deadline);
    if (r) continue;
    if (r.error().code != ENOBUFS) {
      if (r.error().code == ETIMEDOUT)
        return makeError(
            "no matching link notification for " + describeIndex(ifindex) + " before the deadline",
            ETIMEDOUT);
      return r.error();
    }
    // The socket overflowed and notifications were lost: the current state stands in for
    // them, timed now, so a change that did happen is not waited for in vain.
    auto link = getLink(ifindex);
    if (!link) return link.error();
    Pending p;
    p.event = LinkEvent{wallNs(), false, ifindex, link->adminUp, link->operUp};
    pending_.push_back(p);
  }
}

}  // namespace rc::nl
