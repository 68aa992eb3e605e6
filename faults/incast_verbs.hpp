// The incast fault's verbs generator (transport = "verbs"): the senders' flows are RC queue
// pairs that RDMA WRITE into one registered region of the receiver (faults/incast.cpp picks it).
//
// Set-up runs over TCP on the sink's port, from the sender's data address (QP number, PSN,
// GID one way; QP number, PSN, GID, region address and rkey back), and that connection stays
// open: the sender reports the bytes its completed writes carried on it (an RC WRITE completes
// only once the receiver's NIC acknowledged it), so the sink's record counts what arrived,
// and its end tells either side that the other is gone. Built only with rdma-core.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "faults/fault.hpp"

namespace rc::faults::incast_verbs {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string receiver;  // the receiver's data address, for messages
  in_addr receiverAddr{};
  uint16_t port = 0;  // the sink's TCP set-up port
  in_addr localAddr{};  // this node's data address (the receiver's own, on the sink)
  int flows = 0;        // per sender
  int fanIn = 0;        // the sink accepts at most this many flows
  int64_t sizeBytes = 0;   // per flow per burst
  int64_t intervalNs = 0;  // 0 = back to back
  int dscp = 26;           // the QPs' traffic class is dscp << 2 (rxe copies it to the IP header)
  std::vector<in_addr> from;  // the sink accepts flows only from these (empty = any)
};

// Whether an RDMA device with an ACTIVE port carries ADDR (transport = "auto" decided on the
// agent itself, when the controller did not decide for the whole step).
bool carries(in_addr addr);

// The receiver's side until END or STOP (WAKEFD becomes readable on stop): accepts flows,
// gives each a QP into the region, records "received" with what the senders reported. Returns
// the bytes received.
Result<uint64_t> sink(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events);

// A sender's side: o.flows QPs, each writing sizeBytes per burst. A QP that fails is counted,
// reported with its status ("qp_error" events) and set up again after a second; the sink going
// away ends the sender normally. Returns the bytes its completed writes carried.
Result<uint64_t> send(const Options& o, std::stop_token& stop, int wakeFd, Clock::time_point end, EventLog& events);

}  // namespace rc::faults::incast_verbs
