// The agent's configuration file (TOML), parsed and checked before anything starts.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/protocol.hpp"
#include "common/result.hpp"
#include "common/tls.hpp"
#include "faults/fault.hpp"
#include "workload/mpi_launch.hpp"

namespace rc::agent {

// [observe]: the local telemetry intake (agent/observe_intake.hpp, docs/observe-format.md).
struct ObserveConfig {
  bool enabled = true;
  std::string socket;               // default: STATE_DIR/observe.sock
  std::vector<uint32_t> allowUids;  // default: root and the agent's own uid
  size_t maxClients = 64;
  uint32_t maxRecordsPerSecond = 20000;  // per client
  uint64_t maxQueuedBytes = 4u << 20;
};

struct Config {
  std::string node;                 // this node's name (must match its certificate's SAN)
  std::string listenAddress;        // IPv4/IPv6 literal
  uint16_t listenPort = 7470;
  std::string stateDir;             // journal lives here
  std::chrono::milliseconds leaseTimeout{5000};
  std::chrono::milliseconds maxFaultLifetime{proto::kDefaultMaxFaultLifetimeMs};
  tls::Material tls;
  std::vector<std::string> dataInterfaces;  // first is the default fault target
  std::vector<std::string> allowInterfaces;
  // [interfaces] data_subnets: IPv4 prefixes incast may send to (empty: the allowed interfaces' subnets)
  std::vector<std::string> dataSubnets;
  std::vector<std::string> protectedInterfaces;
  bool allowDefaultRoute = false;
  // How often the data interfaces' NIC and RDMA counters go into the workload telemetry
  // ([interfaces] counter_interval); the telemetry's 50 ms tick is the finest it gets.
  std::chrono::milliseconds counterInterval{100};
  std::string labswitchSocket;  // [lab] switch_socket: the only lab switch faults may drive
  std::string labswitchPort;    // [lab] switch_port: the switch port facing this host
  // [ecn_commands.NAME]: switch command templates for ecn_shift's command backend (off if none)
  std::map<std::string, faults::CommandTemplate> ecnCommands;
  size_t maxConnections = 64;
  // [agent] max_workload_memory: bytes of workload buffers at once (0: a quarter of the RAM)
  uint64_t maxWorkloadMemory = 0;
  // [agent] metrics: ADDR:PORT where the agent serves its state to Prometheus (empty: off)
  std::string metrics;
  ObserveConfig observe;
  // [mpi]: how the `mpi` workload kind starts Open MPI when this agent is rank 0 (off if absent)
  bool mpiEnabled = false;
  workload::MpiSettings mpi;
};

// Parses FILE. Errors read "FILE:LINE:COL: message" (or "FILE: message") and name the fix.
Result<Config> loadConfig(const std::string& path);
Result<Config> parseConfig(const std::string& text, const std::string& sourceName);

// Where the journal is when no config names it: the shipped units' StateDirectory.
inline constexpr const char* kDefaultStateDir = "/var/lib/rdmachaos";

// What the journal's replay needs from a config that loadConfig() refuses (a typo, a missing
// section, a bad value elsewhere): [agent] state_dir and node, and the parts of the policy a
// revert may use ([interfaces], [lab], [ecn_commands]), each taken where it is well-formed
// and left empty (with a note) where it is not. Only TOML syntax and state_dir are required,
// so that one typo does not leave yesterday's faults applied.
struct ReplaySettings {
  std::string node, stateDir;
  faults::Policy policy;
  std::vector<std::string> notes;  // the parts left out, for the log
};
Result<ReplaySettings> loadReplaySettings(const std::string& path);

}  // namespace rc::agent
