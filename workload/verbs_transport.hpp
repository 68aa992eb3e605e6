// The verbs transport: RC queue pairs set up over a TCP connection between the ranks' data
// addresses (QP numbers, PSNs, GIDs exchanged there, QPs moved INIT/RTR/RTS by hand; the TCP
// connection stays open as the QP's control channel), sends as RDMA WRITE WITH IMMEDIATE into the receiver's registered buffer, where the
// receiver grants each write (offset, length) first: the grants are the flow-control credits.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "workload/tcp_transport.hpp"  // Endpoint
#include "workload/transport.hpp"
#include "common/verbs_handles.hpp"

namespace rc::workload {

struct VerbsOptions {
  int rank = 0;
  std::vector<Endpoint> world;  // by rank; the port is the TCP set-up listener's
  int qpsPerPeer = 1;           // each message is striped across them
  uint64_t tag = 0;             // identifies the workload: connections of others are refused
  bool checksum = true;         // a 32-bit sum of each write travels as its immediate
  // NCCL's defaults (NCCL_IB_TIMEOUT 18 in recent releases, 14 before; NCCL_IB_RETRY_CNT 7):
  // 4.096 us x 2^14 = 67 ms per try, 7 retries, so a QP gives up after about half a second
  // without ACKs, and a receiver not ready is retried forever (rnr_retry 7).
  uint8_t timeout = 14;
  uint8_t retryCount = 7;
  uint8_t rnrRetry = 7;
  // DSCP 26 (RoCEv2's usual lossless class) in the upper six bits; rxe copies it to the IP
  // header, so the lab switch puts the traffic in its PFC/ECN queue.
  uint8_t tos = 26 << 2;
  size_t chunkBytes = 64 << 10;        // one WRITE WITH IMM; arrivals are reported per chunk
  int sendDepth = 16;                  // writes in flight per QP
  int recvDepth = 64;                  // receive WRs kept posted per QP (grants and immediates)
  int64_t progressTimeoutMs = 10'000;  // a step with no completion for this long lost a peer
};

// What the last connect() saw of one QP (the attributes it was moved to RTS with).
struct VerbsQpInfo {
  int peer = 0, index = 0;
  uint32_t qpNum = 0;
  int pathMtu = 0, activeMtu = 0;  // bytes
  int timeout = 0, retryCount = 0, rnrRetry = 0, trafficClass = 0;
};

class VerbsTransport : public Transport {
 public:
  // Finds the RDMA device and RoCEv2 GID of world[rank].address and listens there over TCP
  // for set-up connections: fails, naming the address, when no RDMA device carries it.
  static Result<std::unique_ptr<VerbsTransport>> create(VerbsOptions options);
  ~VerbsTransport() override;
  std::string name() const override { return "verbs"; }
  Result<void> registerBuffer(std::span<std::byte> buffer) override;
  Result<void> connect(const std::vector<int>& peers, int64_t deadlineMonoNs) override;
  StepResult runStep(std::span<const Op> ops) override;
  void disconnect() override;
  void close() override;
  void interrupt() override;
  uint16_t port() const { return port_; }
  std::string deviceName() const;
  std::vector<VerbsQpInfo> qpInfo() const;
  uint64_t qpErrors() const { return qpErrors_; }

  struct Qp;

 private:
  explicit VerbsTransport(VerbsOptions o);
  bool interrupted() const;
  Result<void> createCq();
  // This node's RoCEv2 GID for its data address (its index changes when the NIC flaps).
  Result<void> findGid();
  // Why this node's port can carry no RoCE now (its state is not ACTIVE, or its RoCEv2 GID
  // is gone, as during a flap of its NIC), with when; nullopt while it can.
  std::optional<std::string> portLoss() const;
  Result<void> createQp(Qp& q);
  Result<void> toRts(Qp& q);
  Result<void> postRecv(Qp& q, uint32_t slot);
  Result<void> dial(Qp& q, int64_t deadline);
  Result<void> accept(Qp& q, int64_t deadline);
  // Takes set-up connections waiting on the listener (their first record read, bounded)
  // into pendingRequests_; the number of valid ones.
  int takeRequests();
  // Marks QPs whose control connection the peer closed (or reset) as disconnected.
  void checkControl();
  // Waits until FD is ready for EVENTS, DEADLINE passes or interrupt() is called.
  Result<void> waitFd(int fd, short events, int64_t deadline, const char* what);
  Result<void> sendAll(int fd, const void* p, size_t n, int64_t deadline);
  Result<void> recvAll(int fd, void* p, size_t n, int64_t deadline);
  void destroyAll(bool orderly);

  VerbsOptions o_;
  std::span<std::byte> buf_;
  UniqueFD wake_;
  verbs::EventChannel channel_;
  verbs::CmId bound_;  // an rdma_cm id bound to the data address: it names device and port
  UniqueFD listen_;     // TCP: set-up connections from higher ranks
  int gidIndex_ = -1;
  ibv_gid gid_{};
  ibv_mtu pathMtu_ = IBV_MTU_1024;
  verbs::Pd pd_;
  verbs::Mr mr_;
  // Per connect(): the CQ is recreated with the QPs, so no completion of an old QP can
  // be mistaken for one of a new QP.
  verbs::CompChannel comp_;
  verbs::Cq cq_;
  uint16_t port_ = 0;
  int activeMtu_ = 0;
  uint64_t qpErrors_ = 0;
  std::map<std::pair<int, int>, std::unique_ptr<Qp>> qps_;  // (peer, index)
  std::vector<std::unique_ptr<Qp>> pendingRequests_;        // arrived between connect()s
};

}  // namespace rc::workload
