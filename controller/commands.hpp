// The rdmachaos subcommands, as functions returning the process exit code.
#pragma once

#include <string>
#include <vector>

namespace rc::controller {

// Exit codes of the CLI contract.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;    // an expectation failed
inline constexpr int kExitError = 2;     // error or aborted
inline constexpr int kExitInterrupted = 130;

struct AgentsOptions {
  std::string inventory;
  std::string timeout = "5s";
  bool json = false;
};
int cmdAgents(const AgentsOptions& o);

struct InjectOptions {
  std::string kind;
  std::string inventory;
  std::vector<std::string> nodes;  // names, roles or "all"
  std::vector<std::string> sets;   // key=value
  std::string forDuration;
  std::string lead;                // time from now to the common start; "" = automatic
  std::string timeout = "5s";
  bool json = false;
};
int cmdInject(const InjectOptions& o);

int cmdRecover(const std::string& inventory, const std::string& timeout);

int cmdCertsInit(const std::string& dir, const std::vector<std::string>& agents, bool overwrite);

// The lab's data fabric (lab up --fabric/--leaves/--spines/--rate/--routing).
struct LabFabricOptions {
  std::string fabric = "switch";
  int leaves = 0, spines = 0;
  std::string rate = "1G";  // bits per second: 1G, 100M, 25G
  std::string routing = "ecmp";
};
int cmdLabUp(int nodes, const std::string& dir, bool softRoce, const LabFabricOptions& fabric = {});
int cmdLabDown(const std::string& dir);
int cmdLabStatus(const std::string& dir);

int cmdDemo(const std::string& dir, int nodes);

// Where rdmachaos-agent lives: $RDMACHAOS_AGENT, next to this binary, or the build tree.
std::string findAgentBinary();

}  // namespace rc::controller
