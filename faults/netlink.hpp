// Link state over rtnetlink (libnl): read, change and watch interfaces in this namespace.
//
// Every function works in the network namespace of the calling thread, as netlink sockets
// do. Errors are values that name the interface and say what to check.
//
// Timestamps of link notifications: a probe on this project's machines (kernel 6.18) got no
// control message at all on rtnetlink multicast messages with SO_TIMESTAMPNS, SO_TIMESTAMP or
// SO_TIMESTAMPING (software RX) enabled: netlink does not stamp what it delivers. LinkMonitor
// still asks for SO_TIMESTAMPNS and uses it if a kernel supplies it (LinkEvent::kernelTime =
// true); otherwise the time is CLOCK_REALTIME taken right after the receive that returned the
// notification (kernelTime = false).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"

struct nl_sock;
struct nl_cache;
struct rtnl_link;

namespace rc::nl {

// Move-only owner of a libnl socket; the socket is connected to NETLINK_ROUTE.
class NlSocket {
 public:
  NlSocket() = default;
  explicit NlSocket(nl_sock* sock) : sock_(sock) {}
  ~NlSocket() { reset(); }
  NlSocket(NlSocket&& other) noexcept : sock_(other.release()) {}
  NlSocket& operator=(NlSocket&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  NlSocket(const NlSocket&) = delete;
  NlSocket& operator=(const NlSocket&) = delete;

  // Allocates and connects a NETLINK_ROUTE socket.
  static Result<NlSocket> connectRoute();

  nl_sock* get() const { return sock_; }
  [[nodiscard]] nl_sock* release() { return std::exchange(sock_, nullptr); }
  void reset(nl_sock* sock = nullptr);

 private:
  nl_sock* sock_ = nullptr;
};

// Move-only owner of an rtnl_link object (one reference).
class LinkObject {
 public:
  LinkObject() = default;
  explicit LinkObject(rtnl_link* link) : link_(link) {}
  ~LinkObject() { reset(); }
  LinkObject(LinkObject&& other) noexcept : link_(other.release()) {}
  LinkObject& operator=(LinkObject&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  LinkObject(const LinkObject&) = delete;
  LinkObject& operator=(const LinkObject&) = delete;

  rtnl_link* get() const { return link_; }
  [[nodiscard]] rtnl_link* release() { return std::exchange(link_, nullptr); }
  void reset(rtnl_link* link = nullptr);

 private:
  rtnl_link* link_ = nullptr;
};

// Move-only owner of a libnl cache.
class Cache {
 public:
  Cache() = default;
  explicit Cache(nl_cache* cache) : cache_(cache) {}
  ~Cache() { reset(); }
  Cache(Cache&& other) noexcept : cache_(other.release()) {}
  Cache& operator=(Cache&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  nl_cache* get() const { return cache_; }
  [[nodiscard]] nl_cache* release() { return std::exchange(cache_, nullptr); }
  void reset(nl_cache* cache = nullptr);

 private:
  nl_cache* cache_ = nullptr;
};

struct LinkInfo {
  int ifindex = 0;
  std::string name;
  bool adminUp = false;  // IFF_UP
  bool operUp = false;   // IFF_RUNNING: operstate UP (or UNKNOWN, as for loopback)
  bool carrier = false;
  unsigned mtu = 0;
  std::string mac;  // "aa:bb:cc:dd:ee:ff"; empty when the link has no hardware address
};

Result<LinkInfo> getLink(const std::string& name);
Result<LinkInfo> getLink(int ifindex);
Result<std::vector<LinkInfo>> listLinks();

// Sets or clears IFF_UP with RTM_NEWLINK. Setting the state the link already has is a
// no-op for the kernel, which then sends no notification.
Result<void> setAdminState(int ifindex, bool up);

// The interface of the IPv4 default route in the main table (the IPv6 one if there is no
// IPv4 default route); the lowest metric wins. "" when there is none.
Result<std::string> defaultRouteInterface();

// One RTM_NEWLINK notification.
struct LinkEvent {
  int64_t timeNs = 0;       // CLOCK_REALTIME ns
  bool kernelTime = false;  // true if timeNs came from the kernel (SO_TIMESTAMPNS)
  int ifindex = 0;
  bool adminUp = false;
  bool operUp = false;
};

// A netlink socket subscribed to RTNLGRP_LINK. Open it BEFORE making the change it is
// meant to observe, so the notification cannot be missed.
class LinkMonitor {
 public:
  static Result<LinkMonitor> open();

  // The first notification for ifindex (queued or future) that satisfies pred. Errors on
  // the deadline, when the link is deleted, or when the socket fails. Notifications it
  // reads for other links, or that do not match, are consumed.
  Result<LinkEvent> waitFor(int ifindex, std::function<bool(const LinkEvent&)> pred,
                            std::chrono::steady_clock::time_point deadline);

  // For an event loop that wants to wait for readability itself.
  int fd() const;

 private:
  explicit LinkMonitor(NlSocket sock) : sock_(std::move(sock)) {}
  // Reads one datagram (blocking until deadline) and queues its link notifications.
  Result<void> readOnce(std::chrono::steady_clock::time_point deadline);

  struct Pending {
    LinkEvent event;
    bool deleted = false;
  };
  NlSocket sock_;
  std::deque<Pending> pending_;
  std::vector<char> buf_;
};

}  // namespace rc::nl
