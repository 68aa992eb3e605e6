// rdmachaos: the controller CLI. Parses the command line and calls controller/commands.
#include <signal.h>

#include <CLI/CLI.hpp>

#include "common/log.hpp"
#include "controller/commands.hpp"
#include "rdmachaos_config.h"

int main(int argc, char** argv) {
  using namespace rc::controller;
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"rdmachaos: fault injection and chaos testing for RDMA fabrics"};
  app.require_subcommand(1);
  app.set_version_flag("--version", RDMACHAOS_VERSION);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug logging");

  AgentsOptions agents;
  auto* cAgents = app.add_subcommand("agents", "reach every agent: version, RTT, clock offset, capabilities");
  cAgents->add_option("--inventory", agents.inventory, "inventory TOML")->required();
  cAgents->add_option("--timeout", agents.timeout, "per-agent connect timeout")->capture_default_str();
  cAgents->add_flag("--json", agents.json, "print JSON");

  InjectOptions inject;
  auto* cInject = app.add_subcommand("inject", "one ad-hoc fault, reverted after --for or on Ctrl-C");
  cInject->add_option("kind", inject.kind, "fault kind, e.g. link_flap")->required();
  cInject->add_option("--inventory", inject.inventory, "inventory TOML")->required();
  cInject->add_option("--node", inject.nodes, "node name, role or 'all' (repeatable)")->required();
  cInject->add_option("--set", inject.sets, "fault parameter key=value (repeatable)");
  cInject->add_option("--for", inject.forDuration, "maximum lifetime, e.g. 30s")->required();
  cInject->add_option("--lead", inject.lead, "delay before the common start (default: automatic)");
  cInject->add_option("--timeout", inject.timeout, "per-agent request timeout")->capture_default_str();
  cInject->add_flag("--json", inject.json, "print the result as JSON");

  std::string recoverInventory, recoverTimeout = "5s";
  auto* cRecover = app.add_subcommand("recover", "every agent reverts everything now");
  cRecover->add_option("--inventory", recoverInventory, "inventory TOML")->required();
  cRecover->add_option("--timeout", recoverTimeout, "per-agent timeout")->capture_default_str();

  auto* cCerts = app.add_subcommand("certs", "certificates for the control channel");
  cCerts->require_subcommand(1);
  std::string certsDir;
  std::vector<std::string> certsAgents;
  bool certsOverwrite = false;
  auto* cCertsInit = cCerts->add_subcommand("init", "create a CA, a controller and agent certificates");
  cCertsInit->add_option("dir", certsDir, "output directory")->required();
  cCertsInit->add_option("--agent", certsAgents, "agent node name (repeatable)");
  cCertsInit->add_flag("--overwrite", certsOverwrite, "replace an existing CA");

  auto* cLab = app.add_subcommand("lab", "the embedded lab fabric (namespaces on this machine)");
  cLab->require_subcommand(1);
  int labNodes = 3;
  std::string labDir = "rdmachaos-lab";
  bool softRoce = false;
  auto* cLabUp = cLab->add_subcommand("up", "create the lab and start its agents");
  cLabUp->add_option("--nodes", labNodes, "number of hosts (1-32)")->capture_default_str();
  cLabUp->add_option("--dir", labDir, "lab directory")->capture_default_str();
  cLabUp->add_flag("--soft-roce", softRoce, "QEMU guests with soft-RoCE (rdma_rxe)");
  rc::controller::LabFabricOptions labFabric;
  cLabUp->add_option("--fabric", labFabric.fabric, "data fabric: switch (rdmachaos-labswitch) or bridge")
      ->capture_default_str();
  cLabUp->add_option("--leaves", labFabric.leaves, "leaf switches (with --spines; nodes split evenly)");
  cLabUp->add_option("--spines", labFabric.spines, "spine switches (0: one switch)")->capture_default_str();
  cLabUp->add_option("--rate", labFabric.rate, "port line rate, e.g. 1G, 100M")->capture_default_str();
  cLabUp->add_option("--routing", labFabric.routing, "ecmp or adaptive")->capture_default_str();
  auto* cLabDown = cLab->add_subcommand("down", "remove everything the lab created");
  cLabDown->add_option("--dir", labDir, "lab directory")->capture_default_str();
  auto* cLabStatus = cLab->add_subcommand("status", "show the lab's hosts and agents");
  cLabStatus->add_option("--dir", labDir, "lab directory")->capture_default_str();

  std::string demoDir = "/tmp/rdmachaos-demo";
  int demoNodes = 3;
  auto* cDemo = app.add_subcommand("demo", "lab up, a link flap with its timeline, lab down");
  cDemo->add_option("--dir", demoDir, "lab directory")->capture_default_str();
  cDemo->add_option("--nodes", demoNodes, "number of hosts")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (verbose) rc::log::setLevel(rc::log::Level::debug);

  if (*cAgents) return cmdAgents(agents);
  if (*cInject) return cmdInject(inject);
  if (*cRecover) return cmdRecover(recoverInventory, recoverTimeout);
  if (*cCertsInit) return cmdCertsInit(certsDir, certsAgents, certsOverwrite);
  if (*cLabUp) return cmdLabUp(labNodes, labDir, softRoce, labFabric);
  if (*cLabDown) return cmdLabDown(labDir);
  if (*cLabStatus) return cmdLabStatus(labDir);
  if (*cDemo) return cmdDemo(demoDir, demoNodes);
  return kExitError;
}
