// The lab's on-disk record, DIR/lab.json: every object the lab creates, written before it is
// created, so that `lab down` can remove everything after a crash at any point.
#pragma once

#include <string>
#include <vector>

#include "common/result.hpp"
#include "lab/process.hpp"

namespace rc::lab {

struct NodeRecord {
  std::string name;         // n1..nN
  std::string netns;        // rc<k>-n<i>
  std::string mgmtAddress;  // 198.18.k.(10+i)
  std::string dataAddress;  // 198.19.k.(10+i)
  std::string config;       // DIR/nodes/n<i>/agent.toml
  std::string log;          // DIR/nodes/n<i>/agent.log
  ProcRecord agent;         // pid 0 while not running (stopped or waiting for a restart)
  int restarts = 0;
  // Soft-RoCE lab (kind "vm") only: the node's QEMU guest.
  ProcRecord vm;
  int mgmtPort = 0;         // 127.0.0.1:mgmtPort forwards to the guest agent's port
  std::string dataSocket;   // QEMU listens here; the lab switch connects (the data NIC)
  std::string guestDir;     // DIR/nodes/n<i>/guest: the guest's writable share (logs, status)
};

// The lab switch process (fabric "switch"), supervised like an agent.
struct SwitchRecord {
  std::string binary;
  std::string config;   // DIR/switch.json
  std::string control;  // DIR/switch.sock
  std::string log;      // DIR/switch.log
  ProcRecord proc;
  int restarts = 0;
};

struct LabState {
  std::string kind = "netns";  // or "vm": QEMU guests with soft-RoCE (lab/vm_lab.cpp)
  std::vector<std::string> files;  // vm: files and directories in DIR that down removes
  std::string dir;  // absolute
  int slot = 0;
  std::string slotFile;
  std::string agentBinary;
  std::string phase;  // "building" until every agent has been started, then "running"
  std::vector<std::string> namespaces;  // rc<k>-n<i>, rc<k>-fab
  std::vector<std::string> rootLinks;   // in the root namespace: rc<k>-m<i>, rc<k>-mgmt
  ProcRecord supervisor;
  std::vector<NodeRecord> nodes;
  std::string fabric = "bridge";  // "switch" or "bridge"
  SwitchRecord sw;                // used when fabric == "switch"
  // What the fabric was brought up with, for a playbook's [lab] (0 / "": not recorded).
  double rateBps = 0;
  std::string ports;  // "tap" or "veth"
};

std::string statePath(const std::string& dir);
// Error code ENOENT when DIR holds no lab.json.
Result<LabState> loadState(const std::string& dir);
// Atomic: a reader (or a crash) sees the old file or the new one, never a torn one.
Result<void> saveState(const LabState& state);

}  // namespace rc::lab
