// Runs collective workloads on this node for their controllers: each on its own threads
// (engine + telemetry reporter), bounded by a maximum duration, stopped on request, when the
// owner's lease runs out, and on shutdown. Independent of the network layer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol.hpp"

namespace rc::agent {

using json = nlohmann::json;

// The common start of a workload on this agent's clock (NOW_NS): its telemetry bins count from
// there.
Result<int64_t> workloadStartNs(const proto::WorkloadStart& request, int64_t nowNs);

// The NIC and RDMA counters that ride along with the telemetry (counters/nic_counters.hpp).
struct CounterOptions {
  std::vector<std::string> interfaces;  // the node's data interfaces; none: no counters
  std::chrono::milliseconds interval{100};
  std::string sysRoot = "/sys";
  bool ethtool = true;
};

// The memory limit of the cgroup this process is in: the smallest memory.max (cgroup v2) or
// memory.limit_in_bytes (v1) from its own cgroup up to the root, read under SYS_FS_CGROUP
// with the paths of PROC_SELF_CGROUP (the text of /proc/self/cgroup). None when unlimited.
std::optional<uint64_t> cgroupMemoryLimit(const std::string& procSelfCgroup,
                                          const std::string& sysFsCgroup = "/sys/fs/cgroup");
// The default workload budget: a quarter of what this process may use, the host's physical
// memory or its cgroup's limit (a pod's, a unit's MemoryMax=) when that is smaller.
uint64_t defaultMemoryBudget(uint64_t physicalBytes, std::optional<uint64_t> cgroupLimit);

class WorkloadManager {
 public:
  // Called from workload threads with a message for the session that started it.
  using Emit = std::function<void(nlohmann::json message)>;

  // COUNTERS: NIC counters sampled with the telemetry. MEMORY_BUDGET: bytes of workload
  // buffers this agent holds at once, over all its workloads (0: defaultMemoryBudget() of
  // this host and cgroup).
  WorkloadManager(std::chrono::milliseconds leaseTimeout, std::chrono::milliseconds maxDuration,
                  CounterOptions counters = {}, uint64_t memoryBudget = 0);
  ~WorkloadManager();  // stops everything and waits
  WorkloadManager(const WorkloadManager&) = delete;
  WorkloadManager& operator=(const WorkloadManager&) = delete;

  // Validates, binds the data listener and starts the workload; returns its record.
  Result<nlohmann::json> start(const std::string& owner, const proto::WorkloadStart& request,
                               Emit emit);
  // Asks a running workload to stop; its workload_ended message follows.
  Result<void> stop(const std::string& workloadId);
  void heartbeat(const std::string& owner);
  size_t activeCount() const;
  nlohmann::json list() const;
  void shutdown();

  // Called by start() with the workload's id where it creates what the workload needs (its
  // transport, buffers and counter samplers), outside the manager's lock; what it throws is
  // what creating would have thrown. For the tests (a slow RDMA device, an allocation that
  // fails); the agent sets none. Set it before starting.
  using CreateHook = std::function<void(const std::string& workloadId)>;
  void setCreateHook(CreateHook hook) { createHook_ = std::move(hook); }

 private:
  struct Entry;
  void watch(std::stop_token stop);
  void reapLocked();
  Result<json> abandon(const std::shared_ptr<Entry>& e, Error why);

  std::chrono::milliseconds leaseTimeout_, maxDuration_;
  CounterOptions counters_;
  uint64_t memoryBudget_ = 0;
  mutable std::mutex m_;
  std::condition_variable_any cv_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::map<std::string, std::chrono::steady_clock::time_point> leases_;
  uint64_t generation_ = 0;
  size_t creating_ = 0;  // starts between their reservation and their commit
  bool shuttingDown_ = false;
  CreateHook createHook_;
  std::jthread watcher_;
};

}  // namespace rc::agent
