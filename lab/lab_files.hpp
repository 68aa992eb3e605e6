// The files `lab up` writes for its agents and for the controller, one writer for both lab
// kinds (namespaces and soft-RoCE guests): they differ only in the fields below.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/result.hpp"
#include "lab/lab_state.hpp"

namespace rc::lab {

// The port every lab agent listens on (in its namespace, or inside its guest).
inline constexpr int kAgentPort = 7470;

// The lab's certificates in S.dir/pki: a CA, the controller's, and one per node's agent.
Result<void> createLabCerts(const LabState& s);

// What one lab kind's agent configuration says of a node.
struct AgentConfigSpec {
  std::string heading;       // the first comment line, after "# "
  std::string listen;        // ADDRESS:PORT
  std::string stateDir;      // the TOML value, with a comment if any: "\"/run/x\"   # why"
  std::string metrics;       // ADDRESS:PORT, or "" for none
  std::string switchSocket;  // the one lab switch socket its faults may use, or "" for none
  std::string observeSocket; // where the node's jobs send their records ([observe] socket), or "" for the default
};

// An agent configuration for node N of lab S ([agent], [tls] from S's pki/, [interfaces]
// data0 with mgmt0 protected, [lab] when SPEC names a switch socket, [observe] when it names
// an observe socket).
std::string agentConfigText(const LabState& s, const NodeRecord& n, const AgentConfigSpec& spec,
                            std::chrono::milliseconds lease);

// [mpi] for node N of a namespace lab (the `mpi` workload kind): mpirun reaches node {host} by an
// exec into its namespace, with that node's observe socket; "" when the MPI benchmark was not
// built beside the agent.
std::string netnsMpiSection(const LabState& s, const NodeRecord& n);

// The MPI benchmark and its PMPI library from the build the agent comes from
// ($RDMACHAOS_MPI_PROGRAM and $RDMACHAOS_MPI_PRELOAD override them), as the [mpi] lines
// `program = ...` and `preload = [...]`; "" when the benchmark is not there.
std::string mpiProgramLines(const LabState& s);

// How the controller reaches one node of a lab kind.
struct InventoryNodeSpec {
  std::string address;  // the TOML value, with a comment if any
  int port = kAgentPort;
  std::string dataComment;  // after data_interfaces, "" for none
};

// The controller's inventory of lab S: [tls] from pki/, [lab] (dir, LAB_LINES, the switch's
// control socket when S's fabric is the switch), then one [[node]] per node as NODE says.
std::string inventoryText(const LabState& s, const std::string& heading, const std::string& labLines,
                          const std::function<InventoryNodeSpec(const NodeRecord&)>& node);

}  // namespace rc::lab
