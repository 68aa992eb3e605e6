// Capabilities and policy: read from netlink (this namespace) and sysfs (RDMA devices).
#include "agent/capabilities.hpp"

#include <dirent.h>

#include <algorithm>
#include <fstream>

#include "faults/netlink.hpp"
#include "rdmachaos_config.h"

namespace rc::agent {
namespace {

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// RDMA devices from sysfs (per-namespace for net devices; RDMA devices are shared unless the
// rdma subsystem is in exclusive netns mode, which is fine for reporting).
nlohmann::json rdmaDevices() {
  nlohmann::json devs = nlohmann::json::array();
  const std::string base = "/sys/class/infiniband";
  for (const auto& dev : listDir(base)) {
    nlohmann::json ports = nlohmann::json::array();
    for (const auto& port : listDir(base + "/" + dev + "/ports")) {
      std::string p = base + "/" + dev + "/ports/" + port;
      ports.push_back({{"port", port},
                       {"state", readLine(p + "/state")},
                       {"link_layer", readLine(p + "/link_layer")},
                       {"rate", readLine(p + "/rate")}});
    }
    devs.push_back({{"name", dev},
                    {"node_type", readLine(base + "/" + dev + "/node_type")},
                    {"ports", ports}});
  }
  return devs;
}

}  // namespace

faults::Policy configuredPolicy(const Config& c) {
  faults::Policy p;
  p.allowlist = c.allowInterfaces;
  p.protectedInterfaces = c.protectedInterfaces;
  p.defaultInterface = c.dataInterfaces.empty() ? "" : c.dataInterfaces.front();
  p.labswitchSocket = c.labswitchSocket;
  p.labswitchPort = c.labswitchPort;
  p.ecnCommands = c.ecnCommands;
  p.dataSubnets = c.dataSubnets;
  return p;
}

Result<faults::Policy> makePolicy(const Config& c) {
  faults::Policy p = configuredPolicy(c);
  if (!c.allowDefaultRoute) {
    auto def = nl::defaultRouteInterface();
    if (!def) return makeError("cannot find the default-route interface to protect it: " +
                               def.error().message);
    if (!def->empty() &&
        std::find(p.protectedInterfaces.begin(), p.protectedInterfaces.end(), *def) ==
            p.protectedInterfaces.end())
      p.protectedInterfaces.push_back(*def);
  }
  return p;
}

nlohmann::json capabilities(const Config& c, const faults::Policy& policy) {
  nlohmann::json ifs = nlohmann::json::array();
  if (auto links = nl::listLinks()) {
    for (const auto& l : *links) {
      bool isData = std::find(c.dataInterfaces.begin(), c.dataInterfaces.end(), l.name) !=
                    c.dataInterfaces.end();
      bool allowed = std::find(policy.allowlist.begin(), policy.allowlist.end(), l.name) !=
                     policy.allowlist.end();
      bool prot = std::find(policy.protectedInterfaces.begin(), policy.protectedInterfaces.end(),
                            l.name) != policy.protectedInterfaces.end();
      ifs.push_back({{"name", l.name},
                     {"ifindex", l.ifindex},
                     {"admin_up", l.adminUp},
                     {"oper_up", l.operUp},
                     {"carrier", l.carrier},
                     {"mtu", l.mtu},
                     {"mac", l.mac},
                     {"data", isData},
                     {"faults_allowed", allowed && !prot},
                     {"protected", prot}});
    }
  }
  nlohmann::json kinds = nlohmann::json::array();
  for (const auto* k : faults::registry()) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& ps : k->params) params.push_back(ps.name);
    kinds.push_back({{"name", k->name}, {"summary", k->summary}, {"params", params}});
  }
  return {{"node", c.node},
          {"agent_version", RDMACHAOS_VERSION},
          {"interfaces", ifs},
          {"data_interfaces", c.dataInterfaces},
          {"rdma_devices", rdmaDevices()},
          {"fault_kinds", kinds}};
}

}  // namespace rc::agent
