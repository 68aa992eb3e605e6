// The TCP transport: non-blocking sockets, several streams per peer with every message
// striped across them, poll-driven, sending from and receiving into the registered buffer.
#pragma once

#include <netinet/in.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "workload/transport.hpp"

namespace rc::workload {

struct Endpoint {
  std::string address;  // IPv4 literal on the rank's data interface
  uint16_t port = 0;
};
// ENDPOINT as a socket address (both transports bind and dial these), or why it is not one.
Result<sockaddr_in> toAddr(const Endpoint& e);

struct TcpOptions {
  int rank = 0;
  std::vector<Endpoint> world;  // by rank
  int streams = 1;              // connections per peer
  uint64_t tag = 0;             // identifies the workload: connections of others are refused
  int socketBuffer = 4 << 20;   // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning
  int64_t userTimeoutMs = 10'000;  // a connection without progress for this long is lost
  bool checksum = true;
  // DSCP of every data packet. 26 is RoCEv2's usual data class (traffic class 106 with ECT):
  // fabrics, and the lab switch, put it in the lossless queue with PFC and ECN, where the
  // RDMA traffic this workload stands in for would be. 0 = leave the kernel's default.
  int dscp = 26;
};

class TcpTransport : public Transport {
 public:
  // Binds the listener on world[rank] (the data address), so peers can dial right away.
  static Result<std::unique_ptr<TcpTransport>> create(TcpOptions options);
  ~TcpTransport() override;
  std::string name() const override { return "tcp"; }
  bool eagerSends() const override { return true; }  // the socket buffer / mailbox takes it
  Result<void> registerBuffer(std::span<std::byte> buffer) override;
  Result<void> connect(const std::vector<int>& peers, int64_t deadlineMonoNs) override;
  StepResult runStep(std::span<const Op> ops) override;
  void disconnect() override;
  void close() override;
  void interrupt() override;
  uint16_t port() const { return port_; }

  struct Conn;

 private:
  explicit TcpTransport(TcpOptions o);
  void tune(int fd) const;
  bool interrupted() const;

  TcpOptions o_;
  std::span<std::byte> buf_;
  UniqueFD listen_;
  UniqueFD wake_;  // eventfd: readable once interrupt() was called
  uint16_t port_ = 0;
  std::map<int, std::vector<std::unique_ptr<Conn>>> conns_;  // peer -> one per stream
};

}  // namespace rc::workload
