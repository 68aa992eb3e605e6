// The lab's agent configurations and inventory (see lab_files.hpp).
#include "lab/lab_files.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/certs.hpp"
#include "lab/lab_util.hpp"

namespace rc::lab {

Result<void> createLabCerts(const LabState& s) {
  certs::Options co;
  co.dir = s.dir + "/pki";
  for (const auto& n : s.nodes) co.agentNames.push_back(n.name);
  if (auto r = certs::init(co); !r) return makeError("cannot create the lab's certificates: " + r.error().message);
  return {};
}

std::string agentConfigText(const LabState& s, const NodeRecord& n, const AgentConfigSpec& spec,
                            std::chrono::milliseconds lease) {
  const std::string pki = s.dir + "/pki/";
  std::ostringstream o;
  o << "# " << spec.heading << "\n"
    << "[agent]\n"
    << "node = " << tomlString(n.name) << "\n"
    << "listen = " << tomlString(spec.listen) << "\n"
    << "state_dir = " << spec.stateDir << "\n"
    << "lease_timeout = \"" << durationText(lease) << "\"\n"
    << "max_fault_lifetime = \"10m\"\n";
  if (!spec.metrics.empty()) o << "metrics = " << tomlString(spec.metrics) << "\n";
  o << "[tls]\n"
    << "ca = " << tomlString(pki + "ca.pem") << "\n"
    << "cert = " << tomlString(pki + "agent-" + n.name + ".pem") << "\n"
    << "key = " << tomlString(pki + "agent-" + n.name + ".key") << "\n"
    << "[interfaces]\n"
    << "data = [\"data0\"]          # data interfaces, first = default fault target\n"
    << "allow = [\"data0\"]         # faults may touch only these\n"
    << "protected = [\"mgmt0\"]     # never touched\n"
    << "allow_default_route = false\n";
  if (!spec.switchSocket.empty())
    o << "[lab]\n"
      << "switch_socket = " << tomlString(spec.switchSocket) << "\n"
      << "switch_port = " << tomlString(n.name) << "\n";
  if (!spec.observeSocket.empty())
    o << "[observe]                     # a job on this node reports here: RDMACHAOS_OBSERVE_SOCKET\n"
      << "socket = " << tomlString(spec.observeSocket) << "\n";
  return o.str();
}

// [mpi] for the `mpi` workload kind: mpirun reaches node {host} by an exec into its namespace,
// with that node's observe socket for its ranks; the benchmark and the PMPI library from the
// build the agent comes from ($RDMACHAOS_MPI_PROGRAM, $RDMACHAOS_MPI_PRELOAD otherwise). Left
// out when the benchmark is not there (no Open MPI at build time).
std::string mpiProgramLines(const LabState& s) {
  std::error_code ec;
  const std::filesystem::path bin = std::filesystem::canonical(s.agentBinary, ec);
  if (ec) return "";
  const std::filesystem::path build = bin.parent_path().parent_path();
  const char* programEnv = ::getenv("RDMACHAOS_MPI_PROGRAM");
  const char* preloadEnv = ::getenv("RDMACHAOS_MPI_PRELOAD");
  const std::string program = programEnv ? programEnv : (build / "tests" / "observe_mpi_job").string();
  std::vector<std::string> preload;
  if (preloadEnv) {
    std::istringstream in(preloadEnv);
    for (std::string p; std::getline(in, p, ':');)
      if (!p.empty()) preload.push_back(p);
  } else {
    preload.push_back((build / "observe" / "librdmachaos-observe-mpi.so").string());
  }
  if (::access(program.c_str(), X_OK) != 0) return "";
  std::string pre;
  for (const auto& p : preload) pre += (pre.empty() ? "" : ", ") + tomlString(p);
  return "program = " + tomlString(program) + "\npreload = [" + pre + "]\n";
}

std::string netnsMpiSection(const LabState& s, const NodeRecord& n) {
  if (n.netns.size() <= n.name.size() || n.netns.compare(n.netns.size() - n.name.size(), n.name.size(), n.name) != 0)
    return "";
  const std::string program = mpiProgramLines(s);
  auto ip = resolveBinary("ip");
  if (program.empty() || !ip) return "";
  const std::string prefix = n.netns.substr(0, n.netns.size() - n.name.size());
  return "[mpi]                         # the mpi workload kind: mpirun's hosts are namespaces here\n" + program +
         "launcher = [" + tomlString(*ip) + ", \"netns\", \"exec\", " + tomlString(prefix + "{host}") +
         ", \"/usr/bin/env\", " + tomlString("RDMACHAOS_OBSERVE_SOCKET=" + s.dir + "/nodes/{host}/observe.sock") + "]\n";
}

std::string inventoryText(const LabState& s, const std::string& heading, const std::string& labLines,
                          const std::function<InventoryNodeSpec(const NodeRecord&)>& node) {
  std::ostringstream o;
  o << "# " << heading << "\n"
    << "[tls]\n"
    << "ca = \"pki/ca.pem\"            # relative paths are relative to this file\n"
    << "cert = \"pki/controller.pem\"\n"
    << "key = \"pki/controller.key\"\n"
    << "[lab]\n"
    << "dir = " << tomlString(s.dir) << "\n"
    << labLines;
  if (s.fabric == "switch")
    o << "fabric = \"switch\"\n"
      << "switch_control = " << tomlString(s.sw.control) << "   # JSON lines, see docs/lab.md\n";
  for (const auto& n : s.nodes) {
    InventoryNodeSpec spec = node(n);
    o << "\n[[node]]\n"
      << "name = " << tomlString(n.name) << "\n"
      << "address = " << spec.address << "\n"
      << "port = " << spec.port << "\n"
      << "data_interfaces = [\"data0\"]" << spec.dataComment << "\n"
      << "data_addresses = [" << tomlString(n.dataAddress) << "]\n"
      << "roles = [\"worker\"]\n";
  }
  return o.str();
}

}  // namespace rc::lab
