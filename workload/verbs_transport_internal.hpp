// What verbs_transport.cpp (steps, teardown) and verbs_transport_connect.cpp (QP set-up over
// TCP) share: the records the two ends exchange, and the per-QP state.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/result.hpp"
#include "common/unique_fd.hpp"
#include "common/verbs_handles.hpp"
#include "workload/verbs_transport.hpp"

namespace rc::workload {

// What each side of a set-up connection sends (the dialer first): who it is, its QP, and
// where to write. Both ends are x86-64 guests/hosts of one lab or cluster: host byte order.
struct ConnData {
  uint32_t magic, rank;
  uint64_t tag;
  uint32_t index, flags;
  uint64_t addr;
  uint32_t rkey, qpn;
  uint32_t psn, reserved;
  uint8_t gid[16];
};
static_assert(sizeof(ConnData) == 64);

// A receive slot: a grant (the peer may write LENGTH bytes at OFFSET) or a bye (orderly end).
struct Ctrl {
  uint32_t magic, length;
  uint64_t offset;
};
static_assert(sizeof(Ctrl) == 16);

inline int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

struct VerbsTransport::Qp {
  // Declaration order is destruction order reversed: the QP goes before the control MR its
  // receive WRs point into.
  verbs::Mr ctrlMr;
  std::vector<Ctrl> ring;
  verbs::QpHandle qp;
  UniqueFD ctl;  // the set-up connection, kept open: its end tells the peer we are gone
  int peer = -1, index = 0;
  bool dialer = false;
  enum class State { idle, established, failed } state = State::idle;
  int64_t retryNs = 0;
  std::string lastError;
  uint32_t psn = 0;
  ConnData remote{};
  std::deque<Ctrl> grants;  // received, not yet used: the peer's credits
  int sendsOut = 0;
  bool peerBye = false, disconnected = false;
  // The current step's transfers on this QP (at most one of each).
  struct Rx {
    size_t off = 0, len = 0, got = 0;
  };
  struct Tx {
    size_t off = 0, len = 0, posted = 0, done = 0;
    bool granted = false;
    uint64_t raddr = 0;
  };
  std::optional<Rx> rx;
  std::optional<Tx> tx;
};

using VerbsQps = std::map<std::pair<int, int>, std::unique_ptr<VerbsTransport::Qp>>;

// Posts receive slot SLOT of Q's control ring (a grant or a bye lands there).
Result<void> postRingRecv(VerbsTransport::Qp& q, uint32_t slot);
// Marks QPs whose control connection the peer closed (or reset) as disconnected.
void markClosedControls(VerbsQps& qps);

}  // namespace rc::workload
