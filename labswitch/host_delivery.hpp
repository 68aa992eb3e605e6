// Hands what the switch writes to its hosts' TAPs to a thread on the hosts' cores (`lab up
// --split-cores`), so the hosts' receive work runs there without an interrupt per write.
//
// Why: a TAP write runs the receiving host's stack, and with the hosts' receive work steered to
// the other core (RPS) every write sends that core an inter-processor interrupt, a hypercall on
// this project's machines (the profile is in bench/README.md, "the delivery thread"). Written
// from a thread that runs on the hosts' core, the frame is queued on that core's own backlog
// (no interrupt), and the switch wakes the thread at most once per loop pass, and not at all
// while it is writing.
//
// The model is untouched: every queue, pacing instant, mark, pause and counter acts in the
// switch's loop as before; only the system call that hands a finished frame to the host moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sched.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace rc::labswitch {

class HostDelivery {
 public:
  // The thread runs on CORES (none set: wherever the scheduler puts it); it starts with every
  // signal blocked, so that the switch's signalfd alone takes SIGTERM and SIGINT.
  explicit HostDelivery(const cpu_set_t& cores);
  ~HostDelivery();  // writes what was posted, then stops the thread
  HostDelivery(const HostDelivery&) = delete;
  HostDelivery& operator=(const HostDelivery&) = delete;

  // Keeps a copy of HEAD then BODY, to be written to FD as one frame; goes at the next kick().
  // Switch thread only.
  void post(int fd, const void* head, size_t headLen, const void* body, size_t bodyLen);
  // Hands what was posted since the last kick to the thread, waking it if it sleeps. Switch
  // thread only; once per loop pass.
  void kick();
  // Returns once everything posted so far is written (before a port's descriptor closes).
  void drain();

  struct Stats {
    uint64_t wakes = 0;     // times kick() woke the sleeping thread
    uint64_t writes = 0;    // frames written
    uint64_t failed = 0;    // writes the host refused (a TAP down: a frame lost on the cable)
  };
  Stats stats();

 private:
  struct Item {
    int fd;
    uint32_t off, len;
  };
  struct Batch {
    std::vector<uint8_t> bytes;
    std::vector<Item> items;
    void clear() {
      bytes.clear();
      items.clear();
    }
  };
  void loop();

  Batch pending_;  // the switch's, since its last kick()
  std::mutex m_;
  std::condition_variable work_, done_;
  Batch shared_;  // handed over, not yet taken by the thread (under m_)
  bool writing_ = false, stop_ = false;
  Stats stats_;  // under m_
  std::thread thread_;
};

}  // namespace rc::labswitch
