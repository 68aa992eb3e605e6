// LinkWatch: rtnetlink link notifications, parsed for the data interfaces' up/down transitions.
#include "agent/link_watch.hpp"

#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/agent_metrics.hpp"
#include "common/errno_text.hpp"
#include "common/log.hpp"

namespace rc::agent {

Result<std::unique_ptr<LinkWatch>> LinkWatch::start(boost::asio::io_context& io, std::vector<std::string> interfaces) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) return makeError("rtnetlink socket for link events: " + errnoText(errno), errno);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    ::close(fd);
    return makeError("subscribing to rtnetlink link events: " + errnoText(e), e);
  }
  std::unique_ptr<LinkWatch> w(new LinkWatch(io, fd, std::move(interfaces)));
  w->read();
  return w;
}

LinkWatch::LinkWatch(boost::asio::io_context& io, int fd, std::vector<std::string> interfaces)
    : sock_(io, fd), buf_(64 * 1024) {
  for (auto& name : interfaces) links_[name] = {};
  for (auto& [name, st] : links_) {
    auto up = linkUp(name);
    st.up = up && *up;
  }
}

LinkWatch::~LinkWatch() {
  boost::system::error_code ec;
  sock_.close(ec);
}

uint64_t LinkWatch::downEvents(const std::string& ifname) const {
  auto it = links_.find(ifname);
  return it == links_.end() ? 0 : it->second.downs;
}

void LinkWatch::observe(const std::string& ifname, bool up) {
  auto it = links_.find(ifname);
  if (it == links_.end()) return;
  if (it->second.up && !up) it->second.downs++;
  it->second.up = up;
}

void LinkWatch::resync() {
  for (auto& [name, st] : links_) {
    auto up = linkUp(name);
    if (up) observe(name, *up);
  }
}

void LinkWatch::consume(const uint8_t* data, size_t len) {
  // Alignment: the kernel hands whole, NLMSG_ALIGNed messages; copy each header out anyway.
  size_t off = 0;
  while (off + sizeof(nlmsghdr) <= len) {
    nlmsghdr h;
    std::memcpy(&h, data + off, sizeof h);
    if (h.nlmsg_len < sizeof(nlmsghdr) || off + h.nlmsg_len > len) return;  // truncated: drop the rest
    if ((h.nlmsg_type == RTM_NEWLINK || h.nlmsg_type == RTM_DELLINK) &&
        h.nlmsg_len >= NLMSG_LENGTH(sizeof(ifinfomsg))) {
      ifinfomsg ifi;
      std::memcpy(&ifi, data + off + NLMSG_HDRLEN, sizeof ifi);
      std::string name;
      size_t a = off + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(ifinfomsg));
      const size_t end = off + h.nlmsg_len;
      while (a + sizeof(rtattr) <= end) {
        rtattr ra;
        std::memcpy(&ra, data + a, sizeof ra);
        if (ra.rta_len < sizeof(rtattr) || a + ra.rta_len > end) break;
        if (ra.rta_type == IFLA_IFNAME) {
          const char* p = reinterpret_cast<const char*>(data + a + RTA_LENGTH(0));
          name.assign(p, strnlen(p, ra.rta_len - RTA_LENGTH(0)));
          break;
        }
        a += RTA_ALIGN(ra.rta_len);
      }
      bool up = h.nlmsg_type == RTM_NEWLINK && (ifi.ifi_flags & IFF_UP) && (ifi.ifi_flags & IFF_RUNNING);
      if (!name.empty()) observe(name, up);
    }
    off += NLMSG_ALIGN(h.nlmsg_len);
  }
}

void LinkWatch::read() {
  sock_.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;  // closed
    for (;;) {
      ssize_t n = ::recv(sock_.native_handle(), buf_.data(), buf_.size(), MSG_DONTWAIT);
      if (n > 0) {
        consume(buf_.data(), size_t(n));
        continue;
      }
      if (n < 0 && errno == ENOBUFS) {
        // The kernel dropped notifications: what they said is gone; the state is not.
        overruns_++;
        resync();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        log::warn("[agent] metrics: reading link events: {}", errnoText(errno));
      break;
    }
    read();
  });
}

}  // namespace rc::agent
