// The lab switch's event loop: epoll over ports, timers, signals and control clients.
#include "labswitch/switch_fabric.hpp"

#include <fcntl.h>
#include <poll.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <unordered_map>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/pfc.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/switch_packet.hpp"
#include "labswitch/switch_port.hpp"

namespace rc::labswitch {

Result<void> Fabric::serve() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFD sig(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  UniqueFD ep(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFD pollTimer(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!sig.isValid() || !ep.isValid() || !pollTimer.isValid())
    return makeError(std::string("cannot create the event loop: ") + std::strerror(errno), errno);
  ep_ = ep.get();
  itimerspec period{};
  period.it_interval.tv_sec = cfg_.pollNs / 1'000'000'000;
  period.it_interval.tv_nsec = cfg_.pollNs % 1'000'000'000;
  period.it_value = period.it_interval;
  ::timerfd_settime(pollTimer.get(), 0, &period, nullptr);
  if (auto r = listenControl(); !r) return r;

  watch(sig.get(), kSignal);
  watch(pollTimer.get(), kPollTimer);
  watch(control_.get(), kListen);
  for (size_t i = 0; i < ports_.size(); i++)
    if (ports_[i].io) watch(ports_[i].io->fd(), kPortBase + uint64_t(i));

  log::info("forwarding: {} switch(es), {} port(s), {} link(s), routing {}, control {}",
            switches_.size(), ports_.size(), links_.size(), adaptive_ ? "adaptive" : "ecmp",
            cfg_.control);
  std::vector<std::vector<uint8_t>> batch;
  epoll_event evs[64];
  // The transmit schedule's next instant is epoll's own timeout (epoll_pwait2 takes
  // nanoseconds): no timer to set. A timerfd set on most passes cost 8-12 % of the switch's
  // CPU here (a system call, and PVM's interrupt enabling on the way out). The timer slack
  // (50 us by default) would make every wake-up late by up to that much: 1 ns instead.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  loopStartNs_ = monoNs();
  for (;;) {
    int64_t waitFrom = monoNs();
    timespec timeout{}, *wait = nullptr;
    if (nextWake_ != INT64_MAX) {
      const int64_t left = std::max<int64_t>(0, nextWake_ - waitFrom);
      timeout.tv_sec = time_t(left / 1'000'000'000);
      timeout.tv_nsec = long(left % 1'000'000'000);
      wait = &timeout;
    }
    int n = ::epoll_pwait2(ep_, evs, 64, wait, nullptr);
    idleNs_ += monoNs() - waitFrom;
    if (n < 0) {
      if (errno == EINTR) continue;
      return makeError(std::string("epoll_pwait2: ") + std::strerror(errno), errno);
    }
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      int64_t now = monoNs();
      if (tag == kSignal) {
        log::info("stopping on a signal");
        ::unlink(cfg_.control.c_str());
        return {};
      } else if (tag == kPollTimer) {
        uint64_t x;
        (void)!::read(pollTimer.get(), &x, sizeof x);
        tick(now);
      } else if (tag == kListen) {
        accept();
      } else if (tag >= kClientBase && tag < kPortBase) {
        clientReadable(int(tag - kClientBase));
      } else if (tag >= kPortBase) {
        int pi = int(tag - kPortBase);
        batch.clear();
        auto got = ports_[size_t(pi)].io->readBatch(batch, kReadBatch);
        if (!got) {
          log::error("{}", got.error().message);
          // A guest that went away: stop watching its socket rather than spin on EOF.
          if (got.error().code == EPIPE) {
            Port& dead = ports_[size_t(pi)];
            ::epoll_ctl(ep_, EPOLL_CTL_DEL, dead.io->fd(), nullptr);
            dead.closed = true;
          }
          continue;
        }
        for (auto& f : batch) fromHost(pi, std::move(f), now);
      }
    }
    int64_t now = monoNs();
    if (!packetRules_.empty() && now >= packetRules_.nextDue()) releasePackets(now);
    int64_t due = flushPorts(now);
    int64_t wake = pump(now);
    // What the pass sent to each host goes out (a TAP with offload joins it first, and holds a
    // TCP run up to Config::deliveryHoldNs so that one write carries it).
    due = std::min(due, flushPorts(now));
    if (delivery_) delivery_->kick();  // the pass's writes to the hosts, one wake-up at most
    setWake(std::min({wake, due, packetRules_.nextDue()}), now);
    updateReading();
  }
}

int64_t Fabric::flushPorts(int64_t now) {
  int64_t due = INT64_MAX;
  for (auto& p : ports_)
    if (p.io && !p.closed) due = std::min(due, p.io->flushDue(now));
  return due;
}

int64_t Fabric::pump(int64_t now) {
  int64_t wake = INT64_MAX;
  // A frame delivered over an internal link can queue on a port served earlier in the
  // pass; passes repeat until nothing moves, and the last pass computes the wake-up.
  for (int pass = 0; pass < 8; pass++) {
    wake = INT64_MAX;
    bool moved = false;
    for (size_t pi = 0; pi < ports_.size(); pi++) {
      Port& p = ports_[pi];
      // PFC refreshes are due at half the pause time, which at high rates is far below
      // the poll interval: they are part of the transmit schedule.
      for (int prio = 0; prio < kPriorities; prio++) {
        Queue& q = p.q[prio];
        if (!q.xoff) continue;
        if (now >= q.xoffRefreshAt) sendPfc(int(pi), prio, true, now);
        wake = std::min(wake, q.xoffRefreshAt);
      }
      for (;;) {
        bool backlog = false;
        for (const auto& q : p.q) backlog |= !q.frames.empty();
        if (!backlog) {
          p.busy = false;
          break;
        }
        if (p.nextTxNs > double(now + kTxSlackNs)) {
          // Woken when the next frame is due (not kTxSlackNs before it): the wake-up then sends
          // every frame due within the slack, a burst that a TAP with offload joins into one
          // write, instead of one frame per wake-up.
          wake = std::min(wake, int64_t(p.nextTxNs));
          break;
        }
        int prio = pickQueue(p, now);
        if (prio < 0) {
          p.busy = false;
          // Everything waiting is paused: wake when the first pause ends.
          for (const auto& q : p.q)
            if (!q.frames.empty() && q.pausedUntil > now) wake = std::min(wake, q.pausedUntil);
          break;
        }
        transmit(int(pi), prio, now);
        moved = true;
      }
    }
    if (!moved) break;
    wake = std::min(wake, now + 1000);  // still moving after the last pass: come back soon
  }
  return wake;
}

void Fabric::setWake(int64_t wake, int64_t now) { nextWake_ = wake <= now ? now + 1000 : wake; }

// Stops reading a host whose NIC model holds too much, and resumes when it drained: the
// host's own TAP queue then fills, which is what a paused NIC does to its host.
void Fabric::updateReading() {
  for (size_t pi = 0; pi < ports_.size(); pi++) {
    Port& p = ports_[pi];
    if (!p.io || p.closed) continue;
    bool want = p.held < kHostHoldFrames;
    if (want == p.reading) continue;
    p.reading = want;
    epoll_event ev{};
    ev.events = want ? uint32_t(EPOLLIN) : 0u;
    ev.data.u64 = kPortBase + pi;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, p.io->fd(), &ev);
  }
}

void Fabric::watch(int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
}

}  // namespace rc::labswitch
