// An in-process transport for unit tests: ranks are threads of one process and messages
// are copied through per-pair mailboxes. Faults are simulated by dropping a rank's links.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "workload/transport.hpp"

namespace rc::workload {

// Shared by every rank of one test world.
class InprocFabric {
 public:
  struct Message {
    uint64_t gen;  // link generation it was sent on: older ones are dropped unread
    std::vector<std::byte> data;
    uint32_t sum;
  };
  std::mutex m;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Message>> boxes;  // (from, to)
  // A link is up once both ends asked for it; either end's disconnect takes it down, and
  // the other end sees that as a lost connection (as with a closed socket).
  struct Link {
    bool up = false;
    bool closed = false;  // taken down by close() (the end of a run), not disconnect()
    uint64_t gen = 0;
    bool want[2] = {false, false};  // [lower rank, higher rank]
  };
  std::map<std::pair<int, int>, Link> links;  // (lower, higher)
  // Test hook: flips one byte of the next message from this rank (then resets to -1).
  int corruptNextFrom = -1;
};

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocFabric> fabric, int rank);
  std::string name() const override { return "inproc"; }
  bool eagerSends() const override { return true; }  // the socket buffer / mailbox takes it
  Result<void> registerBuffer(std::span<std::byte> buffer) override;
  Result<void> connect(const std::vector<int>& peers, int64_t deadlineMonoNs) override;
  StepResult runStep(std::span<const Op> ops) override;
  void disconnect() override;
  void close() override;
  void interrupt() override;

 private:
  std::shared_ptr<InprocFabric> f_;
  int rank_;
  std::span<std::byte> buf_;
  std::vector<int> peers_;
  std::map<int, uint64_t> linkGens_;  // generation of each link when we connected
  std::atomic<bool> interrupted_{false};
};

}  // namespace rc::workload
