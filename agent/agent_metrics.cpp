// publishAgentMetrics: the fault manager's status, the journal, sessions and workloads as gauges.
#include "agent/agent_metrics.hpp"

namespace rc::agent {

void publishAgentMetrics(metrics::Exporter& out, const FaultManager& faults, const Server& server,
                         const WorkloadManager& workloads) {
  json st = faults.status();
  out.set("rdmachaos_agent_faults_active", "faults applied (or scheduled) and not yet ended",
          st.value("active_faults", 0.0));
  out.set("rdmachaos_agent_journal_entries", "faults in the journal: what a restart would revert",
          double(faults.journalEntries()));
  out.set("rdmachaos_agent_faults_unreverted", "faults whose revert failed and is being retried",
          double(st.value("unreverted", json::array()).size()));
  out.set("rdmachaos_agent_faults_unrevertable", "faults the agent gave up reverting (see `status`)",
          double(st.value("unrevertable", json::array()).size()));
  out.set("rdmachaos_agent_journal_quarantined", "journal entries set aside as unreadable",
          double(st.value("quarantined", json::array()).size()));
  out.set("rdmachaos_agent_leases", "controllers holding a lease", double(st.value("lease_remaining_ms", json::object()).size()));
  out.set("rdmachaos_agent_sessions", "open controller sessions", double(server.sessionCount()));
  out.set("rdmachaos_agent_workloads_active", "workload ranks running", double(workloads.activeCount()));
}

}  // namespace rc::agent
