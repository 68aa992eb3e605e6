// lab.json reading and atomic writing (temp file, fsync, rename, fsync of the directory).
#include "lab/lab_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

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

Result<void> writeAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return makeError("cannot write '" + path + "': " + strerror(errno), errno);
    done += size_t(n);
  }
  return {};
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
            {"switch", {{"binary", s.sw.binary},
                        {"config", s.sw.config},
                        {"control", s.sw.control},
                        {"log", s.sw.log},
                        {"proc", procToJson(s.sw.proc)},
                        {"restarts", s.sw.restarts}}}};
  std::string path = statePath(s.dir);
  // One temp name per writer: up() and the supervisor never write at the same time, but a
  // shared name would let a crashed writer's leftovers be renamed over a newer state.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    UniqueFD fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.isValid()) return makeError("cannot create '" + tmp + "': " + strerror(errno), errno);
    if (auto r = writeAll(fd.get(), j.dump(2) + "\n", tmp); !r) return r;
    if (::fsync(fd.get()) != 0)
      return makeError("cannot fsync '" + tmp + "': " + strerror(errno), errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return makeError("cannot rename '" + tmp + "' to '" + path + "': " + strerror(err), err);
  }
  UniqueFD dirFd(::open(s.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dirFd.isValid()) ::fsync(dirFd.get());
  return {};
}

}  // namespace rc::lab
