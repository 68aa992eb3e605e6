// A few descriptors held open on /dev/null so that reverting a fault never fails for want of one.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "common/unique_fd.hpp"

namespace rc {

// Sessions, workloads and incast flows can use every descriptor the process may open; a revert
// then needs one more (a netlink socket, the lab switch's control socket, a command's pipe)
// and fails with EMFILE, leaving the fault applied. The reserve is closed while reverts run
// (Use) and opened again after; the agent refuses new connections while it cannot be refilled.
class FdReserve {
 public:
  FdReserve() = default;
  FdReserve(const FdReserve&) = delete;
  FdReserve& operator=(const FdReserve&) = delete;

  // Holds COUNT descriptors from now on (as many as it can open now; refill() tries again).
  void setWanted(size_t count);
  size_t wanted() const;
  size_t held() const;
  // Opens descriptors up to the wanted count; returns false if it cannot (the process is short
  // of descriptors). While a revert uses the reserve, it is refilled when that ends.
  bool refill();

  // The reserve released for a revert while it lives (several at once share it); refilled when
  // the last one ends.
  class Use {
   public:
    explicit Use(FdReserve& reserve);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    FdReserve& reserve_;
  };

 private:
  bool refillLocked();
  mutable std::mutex m_;
  size_t wanted_ = 0;
  size_t users_ = 0;  // reverts running on the released reserve
  std::vector<UniqueFD> fds_;
};

// The agent's reserve (empty, and so free, until setWanted()).
FdReserve& fdReserve();

}  // namespace rc
