// The agent's own state for Prometheus (`[agent] metrics`): what an operator's dashboard
// needs to see that no fault is left behind.
#pragma once

#include "agent/fault_manager.hpp"
#include "agent/server.hpp"
#include "agent/workload_manager.hpp"
#include "metrics/exporter.hpp"

namespace rc::agent {

// Sets every agent gauge from the managers' current state (call on the event loop).
void publishAgentMetrics(metrics::Exporter& out, const FaultManager& faults, const Server& server,
                         const WorkloadManager& workloads);

}  // namespace rc::agent
