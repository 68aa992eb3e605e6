// What the incast verbs generator's two sides share (incast_verbs.cpp: the set-up helpers and
// the sender; incast_verbs_sink.cpp: the receiver's sink): the records of the set-up
// connection, the RDMA device behind a data address, and the QP set-up. Only those two files
// include it.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "common/verbs_handles.hpp"
#include "faults/incast_verbs.hpp"

namespace rc::faults::incast_verbs {

constexpr uint32_t kHelloMagic = 0x52434948;     // "RCIH": a sender's QP
constexpr uint32_t kReplyMagic = 0x52434952;     // "RCIR": the sink's QP and region
constexpr uint32_t kProgressMagic = 0x52434950;  // "RCIP": bytes completed so far
constexpr uint32_t kByeMagic = 0x52434945;       // "RCIE": the sink's incast ended
constexpr size_t kChunk = 64 << 10;      // one RDMA WRITE

// Both ends are x86-64 nodes of one lab or cluster: host byte order, as the workload's set-up.
struct Hello {
  uint32_t magic, flow, qpn, psn;
  uint8_t gid[16];
};
struct Reply {
  uint32_t magic, qpn, psn, rkey;
  uint64_t addr, length;
  uint8_t gid[16];
};
struct Progress {
  uint32_t magic, qpErrors;  // the sender's QP errors so far (its own record reports them)
  uint64_t bytes;  // cumulative on this connection
};
// The sink's last word on every flow when its incast ends (lifetime, revert): a set-up
// connection that closes without it is a failed flow, which its sender sets up again.
struct Bye {
  uint32_t magic, reserved;
  uint64_t bytes;  // what the sink counted on this connection
};
static_assert(sizeof(Hello) == 32 && sizeof(Reply) == 48 && sizeof(Progress) == 16 && sizeof(Bye) == 16);

// The RDMA device and port behind a local address (rdma_bind_addr sends nothing), its
// RoCEv2 GID for that address and the port's active MTU.
struct Device {
  rc::verbs::EventChannel channel;
  rc::verbs::CmId id;
  int gidIndex = -1;
  uint8_t gid[16] = {};
  ibv_mtu mtu = IBV_MTU_1024;
  bool active = false;
  std::string name() const { return id && id->verbs ? ibv_get_device_name(id->verbs->device) : "?"; }
};

std::string addrText(in_addr a);
uint32_t randomPsn();
// Milliseconds until T for poll(), at least 0 and at most a second.
int msUntil(Clock::time_point t);
// The port's state, MTU and ADDR's GID index, read again before each set-up (a flap moves it).
Result<void> refreshPort(Device& d, in_addr addr);
Result<std::unique_ptr<Device>> openDevice(in_addr addr);
// An RC QP in INIT whose peer may RDMA WRITE into this side's region.
Result<rc::verbs::QpHandle> createQp(const Device& dev, ibv_pd* pd, ibv_cq* cq, int sendDepth);
// The QP to RTR towards the peer, then to RTS with NCCL's timeout and retry counts.
Result<void> toRts(const Device& dev, ibv_qp* qp, uint32_t remoteQpn, uint32_t remotePsn,
                   const uint8_t* remoteGid, uint32_t psn, int dscp);
// A whole small record on a non-blocking socket (a full buffer means a dead peer).
bool sendRecord(int fd, const void* p, size_t n);

}  // namespace rc::faults::incast_verbs
