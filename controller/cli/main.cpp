// rdmachaos: the controller CLI. Parses the command line and calls controller/commands.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/log.hpp"
#include "controller/cli/commands.hpp"
#include "controller/measure/metrics_table.hpp"
#include "controller/cli/usage.hpp"
#include "rdmachaos_config.h"
#include "rdmachaos_revision.h"
#include "workload/kinds.hpp"

namespace rc::controller {
namespace {

// Every subcommand's options and its CLI::App, which CLI11 fills while parsing: they live in
// main's frame from the first add_option to the dispatch.
struct Cli {
  bool verbose = false;

  AgentsOptions agents;
  CLI::App* agentsCmd = nullptr;
  InjectOptions inject;
  CLI::App* injectCmd = nullptr;
  WorkloadOptions workload;
  CLI::App* workloadCmd = nullptr;
  std::string recoverInventory, recoverTimeout = "5s";
  bool recoverAll = false;
  CLI::App* recoverCmd = nullptr;

  std::string certsDir;
  std::vector<std::string> certsAgents;
  bool certsOverwrite = false;
  std::string certsInventory;
  CLI::App* certsInitCmd = nullptr;
  int labNodes = 3;
  std::string labDir = "rdmachaos-lab";  // lab up, down and status
  bool softRoce = false;
  LabFabricOptions labFabric;
  CLI::App* labUpCmd = nullptr;
  CLI::App* labDownCmd = nullptr;
  CLI::App* labStatusCmd = nullptr;
  std::string demoDir = "/tmp/rdmachaos-demo";
  int demoNodes = 0;
  bool demoSoftRoce = false;
  CLI::App* demoCmd = nullptr;

  std::vector<std::string> validateFiles;
  std::string validateInventory;
  CLI::App* validateCmd = nullptr;
  RunOptions run;
  CLI::App* runCmd = nullptr;
  SearchOptions search;
  CLI::App* searchCmd = nullptr;

  std::string oracleCapture;
  bool oracleJson = false;
  CLI::App* oracleCmd = nullptr;
  ReportOptions report;
  CLI::App* reportCmd = nullptr;
  CompareOptions compare;
  CLI::App* compareCmd = nullptr;
  std::vector<std::string> mergeInputs;
  std::string mergeOutput;
  CLI::App* mergeCmd = nullptr;
};

// One descriptor per agent session: a controller of a 1,024-node cluster passes the usual
// soft limit of 1,024, so it is raised to the hard one.
void raiseDescriptorLimit() {
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
}

// agents, inject, workload, recover: the subcommands that act on the agents of an inventory.
void addFleetCommands(CLI::App& app, Cli& cli) {
  AgentsOptions& agents = cli.agents;
  auto* cAgents = cli.agentsCmd =
      app.add_subcommand("agents", "reach every agent: version, RTT, clock offset, capabilities");
  cAgents->add_option("--inventory", agents.inventory, "inventory TOML")->required();
  cAgents->add_option("--timeout", agents.timeout, "one deadline for connecting to every agent (not one per agent)")->capture_default_str();
  cAgents->add_flag("--json", agents.json, "print JSON");

  InjectOptions& inject = cli.inject;
  auto* cInject = cli.injectCmd =
      app.add_subcommand("inject", "one ad-hoc fault, reverted after --for or on Ctrl-C");
  cInject->add_option("kind", inject.kind, "fault kind, e.g. link_flap")->required();
  cInject->add_option("--inventory", inject.inventory, "inventory TOML")->required();
  cInject->add_option("--node", inject.nodes, "node name, role or 'all' (repeatable, or comma-separated)")->required();
  cInject->add_option("--set", inject.sets, "fault parameter key=value (repeatable)");
  cInject->add_option("--for", inject.forDuration, "maximum lifetime, e.g. 30s")->required();
  cInject->add_option("--lead", inject.lead, "delay before the common start (default: automatic)");
  cInject->add_option("--timeout", inject.timeout, "per-agent request timeout")->capture_default_str();
  cInject->add_flag("--json", inject.json, "print the result as JSON");
  cInject->footer(faultKindsHelp());

  WorkloadOptions& wl = cli.workload;
  auto* cWorkload = cli.workloadCmd =
      app.add_subcommand("workload", "run a collective on the data plane with live telemetry");
  cWorkload->add_option("--inventory", wl.inventory, "inventory TOML")->required();
  cWorkload->add_option("--kind", wl.kind, rc::workload::kindNames())->capture_default_str();
  cWorkload->footer(rc::workload::kindsHelp());
  cWorkload->add_option("--test", wl.test, "perftest: ib_write_bw (default), ib_read_bw, ib_send_bw");
  cWorkload->add_option("--size", wl.size, "message size, e.g. 4MiB")->capture_default_str();
  cWorkload->add_option("--for", wl.forDuration, "duration, e.g. 20s");
  cWorkload->add_option("--iterations", wl.iterations, "iteration count (instead of --for)");
  cWorkload->add_option("--node", wl.nodes, "node name, role or 'all' (repeatable; order = rank)");
  cWorkload->add_option("--streams", wl.streams, "connections per peer: TCP streams (1-64) or verbs QPs (1-16)")->capture_default_str();
  cWorkload->add_option("--transport", wl.transport, "tcp, or verbs (RC queue pairs; needs an RDMA device on every node)")->capture_default_str();
  cWorkload->add_option("--receiver", wl.receiver, "incast receiver node (default: the last)");
  cWorkload->add_option("--fan-in", wl.fanIn, "incast senders at a time (0 = all)");
  cWorkload->add_option("--bin", wl.bin, "telemetry bin width")->capture_default_str();
  cWorkload->add_option("--reconnect-timeout", wl.reconnectTimeout, "re-establish lost connections within")->capture_default_str();
  cWorkload->add_option("--port", wl.port, "data-plane TCP port")->capture_default_str();
  cWorkload->add_flag("--no-checksum", wl.noChecksum, "skip payload checksums");
  cWorkload->add_option("--dscp", wl.dscp, "traffic class of the data plane (0-63)")->capture_default_str();
  cWorkload->add_option("--qp-timeout", wl.qpTimeout, "verbs: QP ACK timeout exponent, 4.096 us x 2^N (0-31)")->capture_default_str();
  cWorkload->add_option("--qp-retry-cnt", wl.qpRetryCnt, "verbs: QP retry count (0-7)")->capture_default_str();
  cWorkload->add_option("--qp-rnr-retry", wl.qpRnrRetry, "verbs: QP RNR retry count (0-7, 7 = forever)")->capture_default_str();
  cWorkload->add_option("--timeout", wl.timeout, "per-agent request timeout")->capture_default_str();
  cWorkload->add_flag("--json", wl.json, "print the summary and the whole series as JSON");

  auto* cRecover = cli.recoverCmd = app.add_subcommand(
      "recover",
      "every agent reverts the faults of this controller certificate now (--all: of "
      "every controller)");
  cRecover->add_flag("--all", cli.recoverAll,
                     "revert every controller's faults, not only this certificate's");
  cRecover->add_option("--inventory", cli.recoverInventory, "inventory TOML")->required();
  cRecover->add_option("--timeout", cli.recoverTimeout, "per-agent timeout")->capture_default_str();
}

// certs, lab, demo: the certificates and the embedded lab the other subcommands run against.
void addSetupCommands(CLI::App& app, Cli& cli) {
  auto* cCerts = app.add_subcommand("certs", "certificates for the control channel");
  cCerts->require_subcommand(1);
  auto* cCertsInit = cli.certsInitCmd =
      cCerts->add_subcommand("init", "create a CA, a controller and agent certificates");
  cCertsInit->add_option("dir", cli.certsDir, "output directory")->required();
  cCertsInit->add_option("--agent", cli.certsAgents, "agent node name (repeatable)");
  cCertsInit->add_option("--inventory", cli.certsInventory, "issue a certificate for every node of this inventory");
  cCertsInit->add_flag("--overwrite", cli.certsOverwrite, "replace an existing CA");

  auto* cLab = app.add_subcommand("lab", "the embedded lab fabric (namespaces, or QEMU guests with --soft-roce)");
  cLab->require_subcommand(1);
  auto* cLabUp = cli.labUpCmd = cLab->add_subcommand("up", "create the lab and start its agents");
  cLabUp->add_option("--nodes", cli.labNodes, "number of hosts (1-32)")->capture_default_str();
  cLabUp->add_option("--dir", cli.labDir, "lab directory")->capture_default_str();
  cLabUp->add_flag("--soft-roce", cli.softRoce, "QEMU guests with soft-RoCE (rdma_rxe)");
  LabFabricOptions& labFabric = cli.labFabric;
  cLabUp->add_option("--fabric", labFabric.fabric, "data fabric: switch (rdmachaos-labswitch) or bridge")
      ->capture_default_str();
  cLabUp->add_option("--leaves", labFabric.leaves, "leaf switches (with --spines; nodes split evenly)");
  cLabUp->add_option("--spines", labFabric.spines, "spine switches (0: one switch)")->capture_default_str();
  cLabUp->add_option("--rate", labFabric.rate,
                     "port line rate, e.g. 1G, 100M (default: what this machine's switch carries for --nodes, printed)");
  cLabUp->add_option("--routing", labFabric.routing, "ecmp or adaptive")->capture_default_str();
  cLabUp->add_flag("--no-offload", labFabric.noOffload,
                   "switch TAPs without segmentation offload: one system call per wire frame (for comparison)");
  cLabUp->add_option("--ports", labFabric.ports,
                     "how the switch reaches its hosts: tap (a TAP per host) or veth (veth pairs read with AF_PACKET in "
                     "batches; namespace lab)")
      ->capture_default_str();
  cLabUp->add_option("--delivery-hold", labFabric.deliveryHold,
                     "how long the switch holds a TCP run for its host so that one write carries it (0-10ms; 0: every pass writes)")
      ->capture_default_str();
  cLabUp->add_option("--ack-priority", labFabric.ackPriority,
                     "the switch's priority for pure TCP ACKs (0-7, default 6: strict, beside CNPs), or 'dscp' to leave them in their data's class");
  cLabUp->add_flag("--split-cores", labFabric.splitCores,
                   "the switch on core 0 and the hosts' receive work (RPS) on the other cores (namespace lab, 2 cores or more)");
  cLabUp->add_option("--ecn", labFabric.ecn,
                     "the switch's ECN profile for every queue, KMIN,KMAX,PMAX (default 100KiB,400KiB,0.2: HPCC's 25G "
                     "values; 400KiB,1600KiB,0.2 is its 100G default), or 'off' (namespace lab)");
  cLabUp->add_option("--lease", labFabric.lease, "the agents' lease: a silent controller's faults are reverted after it")
      ->capture_default_str();
  cLabUp->add_option("--agent-metrics", labFabric.agentMetrics,
                     "each agent serves Prometheus on its management address at this port (namespace lab)");
  auto* cLabDown = cli.labDownCmd = cLab->add_subcommand("down", "remove everything the lab created");
  cLabDown->add_option("--dir", cli.labDir, "lab directory")->capture_default_str();
  auto* cLabStatus = cli.labStatusCmd = cLab->add_subcommand("status", "show the lab's hosts and agents");
  cLabStatus->add_option("--dir", cli.labDir, "lab directory")->capture_default_str();

  auto* cDemo = cli.demoCmd =
      app.add_subcommand("demo", "lab up, the quickstart playbook with its scored report, lab down");
  cDemo->add_option("--dir", cli.demoDir, "lab directory")->capture_default_str();
  cDemo->add_option("--nodes", cli.demoNodes, "number of hosts (default 3; 2 guests with --soft-roce)");
  cDemo->add_flag("--soft-roce", cli.demoSoftRoce,
                  "QEMU guests with rxe0 and a verbs all-reduce (playbooks/quickstart-soft-roce.toml)");
}

// validate, run, search: the playbook subcommands.
void addPlaybookCommands(CLI::App& app, Cli& cli) {
  auto* cValidate = cli.validateCmd = app.add_subcommand("validate", "check playbooks; errors as file:line:col");
  cValidate->add_option("playbooks", cli.validateFiles, "playbook TOML files")->required();
  cValidate->add_option("--inventory", cli.validateInventory, "also resolve targets against this inventory");
  cValidate->footer(metricsHelp());

  RunOptions& run = cli.run;
  auto* cRun = cli.runCmd =
      app.add_subcommand("run", "run a playbook: workload, faults on a common clock, scores and reports");
  cRun->footer(metricsHelp());
  cRun->add_option("playbook", run.playbook, "playbook TOML")->required();
  cRun->add_option("--inventory", run.inventory, "inventory TOML")->required();
  cRun->add_option("--report-dir", run.reportDir,
                   "where result.json, report.html and junit.xml go (an empty or new directory; default: a new "
                   "one under rdmachaos-results/)");
  cRun->add_flag("--force", run.force, "replace a previous run's reports in a non-empty --report-dir");
  cRun->add_flag("--dry-run", run.dryRun, "print who gets which fault when, and run nothing");
  cRun->add_option("--metrics", run.metrics, "serve the live run to Prometheus on ADDR:PORT, or PORT for 127.0.0.1:PORT (plain HTTP: beyond this host, a warning)");
  cRun->add_option("--baseline", run.baseline,
                   "compare the run with this golden baseline (baseline merge) or result.json at its end; a "
                   "failed comparison fails the run (docs/acceptance.md)");
  cRun->add_option("--baseline-rules", run.baselineRules, "rules TOML for --baseline (as compare --rules)");
  cRun->add_option("--alertmanager-webhook", run.alertmanagerWebhook,
                   "receive Alertmanager's webhook posts on ADDR:PORT and score the playbook's [[detect]] "
                   "expectations against them (docs/deploy.md)");
  cRun->add_option("--alertmanager-token-file", run.alertmanagerTokenFile,
                   "refuse webhook posts without this file's bearer token (Alertmanager's "
                   "http_config.authorization.credentials_file); needed beyond loopback");
  cRun->add_option("--prometheus", run.prometheus,
                   "poll this Prometheus (http://HOST:PORT) for the alerts the [[detect]] expectations name, and "
                   "read its scrape and evaluation intervals");
  cRun->add_option("--prometheus-token-file", run.prometheusTokenFile,
                   "send this file's bearer token to --prometheus (a proxy in front of it; plain HTTP: keep "
                   "both on a trusted network)");
  cRun->add_option("--nccl-tests-output", run.ncclTestsOutput,
                   "the file the job's nccl-tests program (all_reduce_perf, ...) writes its output to: read when "
                   "the run ends, its table beside the scores; wrong values or a failure are an error of the run");
  cRun->add_option("--nccl-tests-wait", run.ncclTestsWait,
                   "how long to wait after the run for --nccl-tests-output's summary line")->capture_default_str();
  cRun->add_option("--timeout", run.timeout, "one deadline for connecting to every agent; also each request's bound")->capture_default_str();

  SearchOptions& search = cli.search;
  auto* cSearch = cli.searchCmd = app.add_subcommand(
      "search", "search a [search] playbook's space: the boundary where an expectation starts to fail, or the worst "
                "setting; writes the record, result.json and a reproducer playbook (docs/search.md)");
  cSearch->add_option("playbook", search.playbook, "playbook TOML with a [search] table")->required();
  cSearch->add_option("--inventory", search.inventory, "inventory TOML")->required();
  cSearch->add_option("--out", search.out,
                      "the search's directory: its record (search.json), each trial's result, result.json and "
                      "reproducer.toml (default: a new one under rdmachaos-results/)");
  cSearch->add_flag("--resume", search.resume, "continue the search whose record is in --out");
  cSearch->add_option("--timeout", search.timeout, "one deadline for connecting to every agent; also each request's bound")
      ->capture_default_str();
}

// oracle, report, compare, baseline: the subcommands that read what runs left behind.
void addResultCommands(CLI::App& app, Cli& cli) {
  auto* cOracle = cli.oracleCmd = app.add_subcommand(
      "oracle", "what a RoCE transport did about the frames a packet fault acted on, from its capture (go-back-N)");
  cOracle->add_option("capture", cli.oracleCapture, "CAPTURE.pcapng: a packet fault's capture (result.json names it)")
      ->required();
  cOracle->add_flag("--json", cli.oracleJson, "print the analysis as JSON");

  ReportOptions& report = cli.report;
  auto* cReport = cli.reportCmd = app.add_subcommand("report", "re-render a result document");
  cReport->add_option("result", report.result, "RESULT.json")->required();
  cReport->add_option("--html", report.html, "write an HTML report here");
  cReport->add_option("--junit", report.junit, "write JUnit XML here");

  CompareOptions& cmp = cli.compare;
  auto* cCompare = cli.compareCmd = app.add_subcommand(
      "compare", "compare a run with a baseline (a result or a golden baseline), metric by metric, beyond noise");
  cCompare->add_option("baseline", cmp.baseline, "BASELINE.json: a run's result.json or a golden baseline")->required();
  cCompare->add_option("result", cmp.result, "RESULT.json: the run to judge")->required();
  cCompare->add_option("--rules", cmp.rules,
                       "rules TOML ([[rule]] metric, scope, variance = \"+20%\" or op/bound, exempt); without: "
                       "any value worse beyond the noise of both, or missing, fails");
  cCompare->add_option("--json", cmp.json, "write the comparison as JSON here");
  cCompare->add_option("--junit", cmp.junit, "write JUnit XML here");
  cCompare->add_option("--html", cmp.html, "write a page with both runs' series overlaid here");

  auto* cBaseline = app.add_subcommand("baseline", "golden baselines for compare");
  cBaseline->require_subcommand(1);
  auto* cMerge = cli.mergeCmd =
      cBaseline->add_subcommand("merge", "a golden baseline from several results of one playbook");
  cMerge->add_option("results", cli.mergeInputs, "result.json files of runs of one playbook")->required();
  cMerge->add_option("-o,--output", cli.mergeOutput, "GOLDEN.json to write")->required();
}

// Runs the one subcommand the command line named.
int dispatch(const Cli& cli) {
  if (*cli.agentsCmd) return cmdAgents(cli.agents);
  if (*cli.injectCmd) return cmdInject(cli.inject);
  if (*cli.workloadCmd) return cmdWorkload(cli.workload);
  if (*cli.recoverCmd) return cmdRecover(cli.recoverInventory, cli.recoverTimeout, cli.recoverAll);
  if (*cli.certsInitCmd) return cmdCertsInit(cli.certsDir, cli.certsAgents, cli.certsOverwrite, cli.certsInventory);
  if (*cli.labUpCmd) return cmdLabUp(cli.labNodes, cli.labDir, cli.softRoce, cli.labFabric);
  if (*cli.labDownCmd) return cmdLabDown(cli.labDir);
  if (*cli.labStatusCmd) return cmdLabStatus(cli.labDir);
  if (*cli.demoCmd)
    return cmdDemo(cli.demoDir, cli.demoNodes > 0 ? cli.demoNodes : (cli.demoSoftRoce ? 2 : 3), cli.demoSoftRoce);
  if (*cli.validateCmd) return cmdValidate(cli.validateFiles, cli.validateInventory);
  if (*cli.runCmd) return cmdRun(cli.run);
  if (*cli.searchCmd) return cmdSearch(cli.search);
  if (*cli.reportCmd) return cmdReport(cli.report);
  if (*cli.oracleCmd) return cmdOracle(cli.oracleCapture, cli.oracleJson);
  if (*cli.compareCmd) return cmdCompare(cli.compare);
  if (*cli.mergeCmd) return cmdBaselineMerge(cli.mergeInputs, cli.mergeOutput);
  return kExitError;
}

}  // namespace
}  // namespace rc::controller

int main(int argc, char** argv) {
  using namespace rc::controller;
  ::signal(SIGPIPE, SIG_IGN);
  raiseDescriptorLimit();
  CLI::App app{"rdmachaos: fault injection and chaos testing for RDMA fabrics"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "rdmachaos " RDMACHAOS_VERSION " (git " RDMACHAOS_REVISION ")");
  Cli cli;  // outlives the parse and the dispatch: CLI11 writes into it
  app.add_flag("-v,--verbose", cli.verbose, "debug logging");
  // In this order: the order of `rdmachaos --help`.
  addFleetCommands(app, cli);
  addSetupCommands(app, cli);
  addPlaybookCommands(app, cli);
  addResultCommands(app, cli);

  // Hidden (no group): writes the bash completion the build installs.
  std::string completionShell;
  auto* cCompletion = app.add_subcommand("completion", "print a shell completion script")->group("");
  cCompletion->add_option("shell", completionShell, "bash")->required()->check(CLI::IsMember({"bash"}));

  // An unknown command is named with the nearest known one, and is a usage error as any other.
  if (auto unknown = unknownCommand(app, std::vector<std::string>(argv + 1, argv + argc))) {
    std::fprintf(stderr, "%s\n", unknown->c_str());
    return kExitError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; every usage error with 2, as the commands' own do.
    return app.exit(e) == 0 ? 0 : kExitError;
  }
  if (cCompletion->parsed()) {
    std::fputs(bashCompletion(app).c_str(), stdout);
    return 0;
  }
  if (cli.verbose) rc::log::setLevel(rc::log::Level::debug);
  return dispatch(cli);
}
