// Every change of the data links as the kernel announces it (rtnetlink's link group), so that
// a flap shorter than any polling or scrape interval is still counted: the agent publishes the
// count as rdmachaos_link_down_events_total, which alert rules can turn into "it flapped".
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::agent {

class LinkWatch {
 public:
  // Subscribes to RTNLGRP_LINK in this process's network namespace and starts reading on IO.
  // INTERFACES: the data interfaces counted; their current state is taken as the start.
  static Result<std::unique_ptr<LinkWatch>> start(boost::asio::io_context& io, std::vector<std::string> interfaces);
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // How often IFNAME went from up with carrier (IFF_UP and IFF_RUNNING) to anything else since
  // start, deletion included. 0 for names not watched.
  uint64_t downEvents(const std::string& ifname) const;
  // Times the kernel's queue to us overflowed (ENOBUFS): events may have been lost then; the
  // state is read again, and a link found down counts once.
  uint64_t overruns() const { return overruns_; }

  // Feeds one datagram of rtnetlink messages (public for the unit test of the parser).
  void consume(const uint8_t* data, size_t len);

 private:
  LinkWatch(boost::asio::io_context& io, int fd, std::vector<std::string> interfaces);
  void read();
  void resync();
  void observe(const std::string& ifname, bool up);

  boost::asio::posix::stream_descriptor sock_;
  struct State {
    bool up = false;
    uint64_t downs = 0;
  };
  std::map<std::string, State> links_;
  uint64_t overruns_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace rc::agent
