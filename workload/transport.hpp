// The transport interface the collectives are written against: one registered buffer, and
// steps of concurrent send/receive ops posted at once, like work requests and completions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::workload {

// A chunk header's flag, in both transports: the sender checksums the chunk.
inline constexpr uint32_t kFlagChecksum = 1;

// One transfer of a step. Offsets are into the registered buffer, so a verbs transport can
// turn a send into an RDMA WRITE WITH IMM from its memory region without any copy.
struct Op {
  enum class Kind : uint8_t { send, recv };
  Kind kind = Kind::send;
  int peer = 0;
  size_t offset = 0;
  size_t length = 0;
};

enum class StepStatus {
  ok,
  peerLost,    // a connection failed: the caller reconnects and restarts the iteration
  peerClosed,  // a peer closed in an orderly way between chunks: it ended its run
  stopped,   // interrupt() was called
};

struct StepResult {
  StepStatus status = StepStatus::ok;
  uint32_t corruptions = 0;  // received chunks whose payload checksum did not match
  std::string error;         // for peerLost: what failed, with which peer
};

// Called by the transport as payload bytes arrive (from the thread running the step), so
// telemetry sees arrivals when they happen rather than when a step completes.
using OnReceived = std::function<void(size_t bytes)>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // Registers the single buffer every op refers to. Called once, before connect().
  virtual Result<void> registerBuffer(std::span<std::byte> buffer) = 0;
  // Establishes (or re-establishes, after disconnect()) connections to PEERS. Returns an
  // error when they are not all up by DEADLINE_MONO_NS (CLOCK_MONOTONIC).
  virtual Result<void> connect(const std::vector<int>& peers, int64_t deadlineMonoNs) = 0;
  // Posts every op of one step and returns when all have completed (or failed). At most one
  // send and one receive per peer per step.
  virtual StepResult runStep(std::span<const Op> ops) = 0;
  // Drops every connection at once (data in flight is lost), so that peers notice and
  // everyone reconnects.
  virtual void disconnect() = 0;
  // Ends the run: data already posted is still delivered, then peers see the end.
  virtual void close() = 0;
  // True when a send completes without the peer's matching receive (data waits in the
  // socket or mailbox), so a step may carry a send the peer receives only steps later. False
  // for a transport that writes only where the peer granted (verbs): each step's send must
  // meet the peer's receive of the same step.
  virtual bool eagerSends() const { return false; }
  // Thread-safe: a blocked connect() or runStep() returns promptly (stopped / an error).
  virtual void interrupt() = 0;
  void setOnReceived(OnReceived f) { onReceived_ = std::move(f); }

 protected:
  OnReceived onReceived_;
};

}  // namespace rc::workload
