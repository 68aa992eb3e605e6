// The rdmachaos subcommands, as functions returning the process exit code.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/report/compare.hpp"

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
// The fault kinds of this build with their parameters, for `inject --help`.
std::string faultKindsHelp();
int cmdInject(const InjectOptions& o);

struct WorkloadOptions {
  std::string inventory;
  std::string kind = "allreduce";
  std::string size = "4MiB";
  std::string forDuration;           // or iterations
  uint64_t iterations = 0;
  std::vector<std::string> nodes;    // names, roles or "all"; rank order = this order
  int streams = 1;
  std::string transport = "tcp";     // tcp, verbs
  std::string receiver;              // incast receiver node
  int fanIn = 0;
  std::string bin = "10ms";
  std::string reconnectTimeout = "10s";
  int port = 7480;
  bool noChecksum = false;
  std::string timeout = "5s";
  bool json = false;                 // the whole series (bins, iterations) as JSON on stdout
  int dscp = 26;                     // both transports
  int qpTimeout = 14, qpRetryCnt = 7, qpRnrRetry = 7;  // verbs QP attributes
  std::string test;                  // --kind perftest: which program
};
int cmdWorkload(const WorkloadOptions& o);

// ALL: every controller's faults; otherwise those scheduled with this controller certificate.
int cmdRecover(const std::string& inventory, const std::string& timeout, bool all);

int cmdCertsInit(const std::string& dir, std::vector<std::string> agents, bool overwrite,
                 const std::string& inventoryPath = "");

// The lab's data fabric (lab up --fabric/--leaves/--spines/--rate/--routing).
struct LabFabricOptions {
  std::string fabric = "switch";
  int leaves = 0, spines = 0;
  std::string rate;  // bits per second: 1G, 100M, 25G; empty: lab::chooseRate for this machine
  std::string routing = "ecmp";
  std::string lease = "5s";  // the agents' lease_timeout
  int agentMetrics = 0;      // port where each agent serves Prometheus on its management address
  bool noOffload = false;    // the switch's TAPs without segmentation offload
  std::string ports = "tap";  // how the switch reaches its hosts: tap or veth (AF_PACKET)
  std::string deliveryHold = "500us";  // how long a TAP holds a TCP run for its host
  std::string ackPriority;  // the switch's priority for pure TCP ACKs, or "dscp"; empty: 6
  bool splitCores = false;  // the switch on core 0, the hosts' receive work (RPS) on the others
  std::string ecn;          // "KMIN,KMAX,PMAX" or "off" for every queue; empty: the lab's default
};
struct EcnProfileArg {
  uint64_t kmin = 0, kmax = 0;
  double pmax = 0;
};
// `lab up --ecn KMIN,KMAX,PMAX` (sizes as "100KiB"), or an error naming the fix.
Result<EcnProfileArg> parseEcnProfileArg(const std::string& text);
int cmdLabUp(int nodes, const std::string& dir, bool softRoce, const LabFabricOptions& fabric = {});
int cmdLabDown(const std::string& dir);
int cmdLabStatus(const std::string& dir);

// SOFT_ROCE: QEMU guests with rxe0 and playbooks/quickstart-soft-roce.toml (a verbs all-reduce).
int cmdDemo(const std::string& dir, int nodes, bool softRoce = false);

// Parses and checks each playbook (and, with an inventory, resolves its plan); prints one
// line per file, errors as file:line:col. 0 = all valid, 2 = any invalid.
int cmdValidate(const std::vector<std::string>& playbooks, const std::string& inventory);

struct RunOptions {
  std::string playbook;
  std::string inventory;
  std::string reportDir;  // empty: a new rdmachaos-results/PLAYBOOK-STAMP
  bool force = false;     // a non-empty reportDir may hold a previous run's reports, replaced
  bool dryRun = false;
  std::string metrics;  // ADDR:PORT: serve the live run to Prometheus (empty: off)
  std::string timeout = "5s";  // one deadline to connect to every agent; each request's bound
  std::string baseline;        // GOLDEN.json or a result.json: compared at the end (compare.hpp)
  std::string baselineRules;   // rules TOML for that comparison
  std::string alertmanagerWebhook;  // ADDR:PORT: receive Alertmanager's posts (empty: off)
  std::string alertmanagerTokenFile;  // the bearer token a post must carry (empty: none)
  std::string prometheusTokenFile;    // a bearer token sent to --prometheus (empty: none)
  std::string prometheus;           // http://HOST:PORT: poll its alerts (empty: off)
  std::string ncclTestsOutput;      // the job's nccl-tests output, read at the end (empty: none)
  std::string ncclTestsWait = "60s";  // how long to wait after the run for its summary line
};
// Runs a playbook (or prints its resolved plan with --dry-run); exit 0/1/2 per the contract.
int cmdRun(const RunOptions& o);
// The differences between the lab a playbook states in [lab] and the lab of INVENTORY (its lab.json
// beside it), as warnings `run` prints before it starts; none when either is unknown.
std::vector<std::string> labMismatch(const Playbook& pb, const std::string& inventory);

struct SearchOptions {
  std::string playbook;  // with a [search] table
  std::string inventory;
  std::string out;       // the search's directory; empty: a new rdmachaos-results/PLAYBOOK-search-STAMP
  bool resume = false;   // continue the search whose record is in out
  std::string timeout = "5s";
  bool progress = true;  // each trial's live line
};
// Searches the playbook's [search] space (docs/search.md): exit 0 with a finding (a boundary, a
// worst point, every point failing) and its reproducer, 1 without one inside the range, 2 on an
// error or a stopped search (resumable with --resume).
int cmdSearch(const SearchOptions& o);

struct ReportOptions {
  std::string result;  // RESULT.json
  std::string html;
  std::string junit;
};
// Re-renders a result document; prints the text summary; exit code from its outcome.
int cmdReport(const ReportOptions& o);

// `rdmachaos oracle CAPTURE [--json]`: the go-back-N oracle on a packet fault's capture; exit 0
// when no rule is violated, 1 with findings, 2 when the capture cannot be read.
int cmdOracle(const std::string& capture, bool asJson);

struct CompareOptions {
  std::string baseline, result;  // result.json of a run, or a golden baseline (baseline merge)
  std::string rules;             // rules TOML; "" = a value worse beyond noise, or missing, fails
  std::string json, junit;       // also write the comparison here
  std::string html;              // and a page with both runs' series overlaid
};
// Prints the comparison; 0 = passed, 1 = a rule failed, 2 = bad input.
int cmdCompare(const CompareOptions& o);
// `run --baseline`: the baseline and rules, loaded and checked before the run starts.
struct BaselineCheck {
  std::string path;
  nlohmann::json doc;
  std::vector<CompareRule> rules;
};
Result<BaselineCheck> loadBaselineCheck(const std::string& path, const std::string& rulesPath);
// After the run, before its reports are written: the run compared with the baseline; a target
// sweep's "targets" rows in RESULTDOC get their "vs_baseline" column.
Result<CompareOutcome> compareWithBaseline(const BaselineCheck& b, nlohmann::json& resultDoc);
// Then the comparison printed and written to DIR/compare.json, compare-junit.xml and
// compare.html; the exit code folded with it (a failed comparison turns 0 into 1).
int foldBaseline(const BaselineCheck& b, const CompareOutcome& c, const nlohmann::json& resultDoc,
                 const std::string& dir, int exitCode);
// A golden baseline from several results of one playbook (per value: median, range, noise).
int cmdBaselineMerge(const std::vector<std::string>& inputs, const std::string& output);

// A shipped playbook: $RDMACHAOS_PLAYBOOKS, the source tree next to the build, or share/.
std::string findPlaybook(const std::string& name);

// Where rdmachaos-agent lives: $RDMACHAOS_AGENT, next to this binary, or the build tree.
std::string findAgentBinary();

}  // namespace rc::controller
