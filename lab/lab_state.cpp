// lab.json reading and durable writing (writeFileAtomic).
#include "lab/lab_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/unique_fd.hpp"

namespace rc::lab {
namespace {

using nlohmann::json;

json procToJson(const ProcRecord& p) {
  return {{"pid", p.pid}, {"start_time", p.startTime}, {"cmdline", p.cmdline}};
}

ProcRecord procFromJson(const json& j) {
  ProcRecord p;
  p.pid = j.value("pid", 0);
  p.startTime = j.value("start_time", uint64_t(0));
  p.cmdline = j.value("cmdline", std::vector<std::string>{});
  return p;
}


}  // namespace

std::string statePath(const std::string& dir) { return dir + "/lab.json"; }

Result<LabState> loadState(const std::string& dir) {
  std::string path = statePath(dir);
  std::ifstream in(path);
  if (!in) {
    int err = errno;
    return makeError("cannot read '" + path + "': " + strerror(err), err);
  }
  try {
    json j = json::parse(in);
    LabState s;
    s.dir = j.at("dir").get<std::string>();
    s.slot = j.at("slot").get<int>();
    s.kind = j.value("kind", "netns");
    s.files = j.value("files", std::vector<std::string>{});
    s.slotFile = j.value("slot_file", "");
    s.agentBinary = j.value("agent_binary", "");
    s.phase = j.value("phase", "");
    s.namespaces = j.value("namespaces", std::vector<std::string>{});
    s.rootLinks = j.value("root_links", std::vector<std::string>{});
    if (j.contains("supervisor")) s.supervisor = procFromJson(j["supervisor"]);
    for (const auto& n : j.value("nodes", json::array())) {
      NodeRecord r;
      r.name = n.at("name").get<std::string>();
      r.netns = n.value("netns", "");
      r.mgmtAddress = n.value("mgmt_address", "");
      r.dataAddress = n.value("data_address", "");
      r.config = n.value("config", "");
      r.log = n.value("log", "");
      r.restarts = n.value("restarts", 0);
      if (n.contains("agent")) r.agent = procFromJson(n["agent"]);
      if (n.contains("vm")) r.vm = procFromJson(n["vm"]);
      r.mgmtPort = n.value("mgmt_port", 0);
      r.dataSocket = n.value("data_socket", "");
      r.guestDir = n.value("guest_dir", "");
      s.nodes.push_back(std::move(r));
    }
    s.fabric = j.value("fabric", "bridge");
    s.rateBps = j.value("rate_bps", 0.0);
    s.ports = j.value("ports", "");
    if (j.contains("switch")) {
      const json& w = j["switch"];
      s.sw.binary = w.value("binary", "");
      s.sw.config = w.value("config", "");
      s.sw.control = w.value("control", "");
      s.sw.log = w.value("log", "");
      s.sw.restarts = w.value("restarts", 0);
      if (w.contains("proc")) s.sw.proc = procFromJson(w["proc"]);
    }
    return s;
  } catch (const std::exception& e) {
    return makeError("'" + path + "' is not a valid lab state file (" + e.what() +
                     "); remove it only after checking `ip netns list` for rc* namespaces");
  }
}

Result<void> saveState(const LabState& s) {
  json nodes = json::array();
  for (const auto& n : s.nodes) {
    nodes.push_back({{"name", n.name},
                     {"netns", n.netns},
                     {"mgmt_address", n.mgmtAddress},
                     {"data_address", n.dataAddress},
                     {"config", n.config},
                     {"log", n.log},
                     {"agent", procToJson(n.agent)},
                     {"restarts", n.restarts},
                     {"vm", procToJson(n.vm)},
                     {"mgmt_port", n.mgmtPort},
                     {"data_socket", n.dataSocket},
                     {"guest_dir", n.guestDir}});
  }
  json j = {{"version", 1},
            {"kind", s.kind},
            {"files", s.files},
            {"dir", s.dir},
            {"slot", s.slot},
            {"slot_file", s.slotFile},
            {"agent_binary", s.agentBinary},
            {"phase", s.phase},
            {"namespaces", s.namespaces},
            {"root_links", s.rootLinks},
            {"supervisor", procToJson(s.supervisor)},
            {"nodes", nodes},
            {"fabric", s.fabric},
            {"rate_bps", s.rateBps},
            {"ports", s.ports},
            {"switch", {{"binary", s.sw.binary},
                        {"config", s.sw.config},
                        {"control", s.sw.control},
                        {"log", s.sw.log},
                        {"proc", procToJson(s.sw.proc)},
                        {"restarts", s.sw.restarts}}}};
  // writeFileAtomic's temp names are unique per writer: up() and the supervisor never write at
  // the same time, but a shared name would let a crashed writer's leftovers be renamed over a
  // newer state.
  return writeFileAtomic(statePath(s.dir), j.dump(2) + "\n");
}

}  // namespace rc::lab
