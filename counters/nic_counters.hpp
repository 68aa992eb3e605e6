// NIC and RDMA counters of one data interface: sysfs net statistics, ethtool statistics (the
// kernel's ioctl, not the ethtool program) and the RDMA port's counters and hw_counters.
//
// Counter names in a sample:
//   net.<name>   /sys/class/net/IF/statistics/<name>           (rx_bytes, tx_packets, ...)
//   <name>       ethtool statistics, as `ethtool -S` names them (rx_prio3_pause, ...)
//   rdma.<name>  /sys/class/infiniband/DEV/ports/N/counters/<name> and .../hw_counters/<name>
//                of the RDMA port behind IF (port_rcv_data, np_ecn_marked_roce_packets, ...)
// Whatever a driver does not offer is simply not in the sample: absent names are never an
// error; only an interface that is not there is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/result.hpp"
#include "common/unique_fd.hpp"

namespace rc::counters {

using Counters = std::map<std::string, uint64_t>;

// Bounds on what one sample takes from the kernel (a driver with more is truncated, not fatal).
inline constexpr size_t kMaxCountersPerSource = 4096;
inline constexpr size_t kMaxNameLength = 64;

struct RdmaPort {
  std::string device;  // e.g. "mlx5_0"
  int port = 0;        // 1-based, as in sysfs
};

// Reads every regular file in DIR as a decimal counter into OUT under PREFIX + file name.
// Files that vanish, cannot be read or do not hold a number are skipped. False if DIR cannot be
// listed (absent), which callers treat as "this source has nothing".
bool readCounterDir(const std::string& dir, const std::string& prefix, Counters& out);

// /sys/class/net/IF/statistics under SYSROOT ("/sys" on a live system). An error when the
// interface is not there.
Result<Counters> readNetStatistics(const std::string& sysRoot, const std::string& ifname);

// The RDMA port behind IF: a port whose GID table names IF as its netdev (RoCE), else the
// device linked from IF's PCI device (IPoIB: port = dev_port + 1). None when there is none.
std::optional<RdmaPort> rdmaPortOf(const std::string& sysRoot, const std::string& ifname);

// counters/ and hw_counters/ of PORT, as rdma.<name>. Empty when the port has neither.
Counters readRdmaPort(const std::string& sysRoot, const RdmaPort& port);

// N ethtool statistics: names as the kernel returns them (N slots of ETH_GSTRING_LEN bytes,
// NUL-padded, not NUL-terminated when a name fills its slot) and their values.
Counters decodeEthtoolStats(const char* names, size_t n, const uint64_t* values);

// An AF_INET datagram socket for the ethtool ioctl, in the caller's network namespace.
class EthtoolSocket {
 public:
  static Result<EthtoolSocket> open();
  // The interface's ethtool statistics; empty when its driver has none (EOPNOTSUPP). An error
  // when the interface is not there or the kernel refuses.
  Result<Counters> stats(const std::string& ifname) const;

 private:
  explicit EthtoolSocket(UniqueFD fd) : fd_(std::move(fd)) {}
  UniqueFD fd_;
};

struct SamplerOptions {
  std::string sysRoot = "/sys";
  bool ethtool = true;  // off for a captured sysfs tree, which has no kernel behind it
};

// Samples one data interface. The RDMA port behind it is looked up once, at creation.
class NicSampler {
 public:
  static Result<NicSampler> create(std::string ifname, SamplerOptions options = {});
  // Everything present now: net statistics, ethtool statistics, RDMA port counters.
  Result<Counters> sample() const;

  const std::string& ifname() const { return ifname_; }
  const std::optional<RdmaPort>& rdmaPort() const { return rdma_; }

 private:
  NicSampler() = default;
  std::string ifname_;
  SamplerOptions options_;
  std::optional<RdmaPort> rdma_;
  std::optional<EthtoolSocket> ethtool_;
};

}  // namespace rc::counters
