// The thread that writes the switch's frames to its hosts' TAPs (see host_delivery.hpp).
#include "labswitch/host_delivery.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace rc::labswitch {

HostDelivery::HostDelivery(const cpu_set_t& cores) {
  // The thread inherits the mask in force when it is made: all blocked, then restored here.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { loop(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (CPU_COUNT(&cores) > 0) (void)::pthread_setaffinity_np(thread_.native_handle(), sizeof cores, &cores);
  // A frame for a host is due now, as the hosts' softirq work it replaces ran at once: the
  // thread takes its core ahead of the hosts' own processes (best effort: unprivileged, it
  // keeps the switch's priority).
  sched_param prio{.sched_priority = 1};
  (void)::pthread_setschedparam(thread_.native_handle(), SCHED_FIFO, &prio);
  ::pthread_setname_np(thread_.native_handle(), "host-delivery");
}

HostDelivery::~HostDelivery() {
  kick();
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void HostDelivery::post(int fd, const void* head, size_t headLen, const void* body, size_t bodyLen) {
  const size_t off = pending_.bytes.size();
  pending_.bytes.resize(off + headLen + bodyLen);
  if (headLen) std::memcpy(pending_.bytes.data() + off, head, headLen);
  if (bodyLen) std::memcpy(pending_.bytes.data() + off + headLen, body, bodyLen);
  pending_.items.push_back({fd, uint32_t(off), uint32_t(headLen + bodyLen)});
}

void HostDelivery::kick() {
  if (pending_.items.empty()) return;
  bool wake;
  {
    std::lock_guard lk(m_);
    if (shared_.items.empty()) {
      std::swap(shared_, pending_);  // pending_ takes the emptied batch's buffers back
    } else {
      // The thread has not taken the last hand-over yet: this one joins it.
      const size_t base = shared_.bytes.size();
      shared_.bytes.insert(shared_.bytes.end(), pending_.bytes.begin(), pending_.bytes.end());
      for (Item it : pending_.items) {
        it.off += uint32_t(base);
        shared_.items.push_back(it);
      }
    }
    wake = !writing_;
    if (wake) stats_.wakes++;
  }
  pending_.clear();
  if (wake) work_.notify_one();
}

void HostDelivery::drain() {
  kick();
  std::unique_lock lk(m_);
  done_.wait(lk, [this] { return shared_.items.empty() && !writing_; });
}

HostDelivery::Stats HostDelivery::stats() {
  std::lock_guard lk(m_);
  return stats_;
}

void HostDelivery::loop() {
  Batch work;
  std::unique_lock lk(m_);
  for (;;) {
    work_.wait(lk, [this] { return stop_ || !shared_.items.empty(); });
    if (shared_.items.empty()) return;  // stopping, nothing left
    std::swap(work, shared_);
    writing_ = true;
    lk.unlock();
    uint64_t failed = 0;
    for (const Item& it : work.items) {
      ssize_t r;
      do r = ::write(it.fd, work.bytes.data() + it.off, it.len);
      while (r < 0 && errno == EINTR);
      // A TAP takes a frame whole or refuses it (EIO while its carrier is down: the frame is
      // lost on the cable, as a synchronous write's was).
      if (r != ssize_t(it.len)) failed++;
    }
    const uint64_t written = work.items.size();
    work.clear();
    lk.lock();
    writing_ = false;
    stats_.writes += written;
    stats_.failed += failed;
    // Picks up what came while it wrote before sleeping (the predicate above).
    done_.notify_all();
  }
}

}  // namespace rc::labswitch
