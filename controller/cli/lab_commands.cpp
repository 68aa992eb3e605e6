// The rdmachaos subcommands that set up and tear down: certs, lab, demo.
#include "controller/cli/commands.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <cstdio>
#include <algorithm>
#include <map>
#include <set>

#include "common/certs.hpp"
#include "common/log.hpp"
#include "common/protocol.hpp"
#include "common/tls.hpp"
#include "common/units.hpp"
#include "controller/cli/commands_internal.hpp"
#include "controller/fleet/fleet.hpp"
#include "controller/fleet/inventory.hpp"
#include "controller/playbook/playbook.hpp"
#include "faults/fault.hpp"
#include "lab/lab.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;
// The directory of this executable ("" if unknown): where to look for siblings.
static std::string selfDir() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir(self, size_t(n));
  return dir.substr(0, dir.rfind('/'));
}

std::string findAgentBinary() {
  if (const char* env = std::getenv("RDMACHAOS_AGENT"); env && *env) return env;
  std::string dir = selfDir();
  for (std::string cand : {dir + "/rdmachaos-agent", dir + "/../agent/rdmachaos-agent"})
    if (!dir.empty() && ::access(cand.c_str(), X_OK) == 0) return cand;
  return "rdmachaos-agent";
}

// ---------------------------------------------------------------- certs
int cmdCertsInit(const std::string& dir, std::vector<std::string> agents, bool overwrite,
                 const std::string& inventoryPath) {
  // --inventory: a certificate for every node it names (with any --agent), so a cluster's
  // PKI follows its inventory; read before anything is written.
  if (!inventoryPath.empty()) {
    auto inv = loadInventory(inventoryPath);
    if (!inv) return fail("certs init: " + inv.error().message);
    for (const auto& n : inv->nodes)
      if (std::find(agents.begin(), agents.end(), n.name) == agents.end()) agents.push_back(n.name);
  }
  certs::Options opt;
  opt.dir = dir;
  opt.agentNames = agents;
  opt.overwrite = overwrite;
  if (auto r = certs::init(opt); !r) return fail(r.error().message);
  std::printf("CA and certificates in %s: ca.pem, controller.pem", dir.c_str());
  for (const auto& a : agents) std::printf(", agent-%s.pem", a.c_str());
  std::printf("\n");
  return kExitOk;
}

// ---------------------------------------------------------------- lab
Result<EcnProfileArg> parseEcnProfileArg(const std::string& text) {
  const std::string fix = " (give KMIN,KMAX,PMAX, e.g. 100KiB,400KiB,0.2, or 'off')";
  const auto c1 = text.find(','), c2 = c1 == std::string::npos ? c1 : text.find(',', c1 + 1);
  if (c2 == std::string::npos || text.find(',', c2 + 1) != std::string::npos)
    return makeError("'" + text + "' is not three values" + fix);
  auto kmin = parseSize(text.substr(0, c1));
  if (!kmin) return makeError("kmin '" + text.substr(0, c1) + "': " + kmin.error().message + fix);
  auto kmax = parseSize(text.substr(c1 + 1, c2 - c1 - 1));
  if (!kmax) return makeError("kmax '" + text.substr(c1 + 1, c2 - c1 - 1) + "': " + kmax.error().message + fix);
  const std::string ptext = text.substr(c2 + 1);
  char* end = nullptr;
  const double pmax = std::strtod(ptext.c_str(), &end);
  if (ptext.empty() || end != ptext.c_str() + ptext.size() || !(pmax > 0 && pmax <= 1))
    return makeError("pmax '" + ptext + "' must be a probability in (0, 1]" + fix);
  if (*kmin == 0 || *kmax < *kmin || *kmax > (64ull << 20))
    return makeError("kmin must be above 0 and at most kmax, kmax at most 64MiB (got '" + text + "')" + fix);
  return EcnProfileArg{*kmin, *kmax, pmax};
}

int cmdLabUp(int nodes, const std::string& dir, bool softRoce, const LabFabricOptions& fabric) {
  lab::UpOptions opt;
  opt.nodes = nodes;
  opt.dir = dir;
  opt.agentBinary = findAgentBinary();
  opt.softRoce = softRoce;
  opt.fabric = fabric.fabric;
  opt.leaves = fabric.leaves;
  opt.spines = fabric.spines;
  opt.routing = fabric.routing;
  opt.switchOffload = !fabric.noOffload;
  if (fabric.ports != "tap" && softRoce)
    return fail("lab up: --ports is for the namespace lab's switch; the soft-RoCE guests reach it through QEMU's "
                "stream sockets (leave it out)");
  opt.switchPorts = fabric.ports;
  if (fabric.splitCores && fabric.fabric == "bridge")
    return fail("lab up: --split-cores sets the lab switch's core and its hosts' receive work; the bridge fabric "
                "has no switch process (leave it out)");
  if (fabric.splitCores && softRoce)
    return fail("lab up: --split-cores is for the namespace lab's switch; the soft-RoCE guests' cores are QEMU's "
                "(leave it out)");
  opt.splitCores = fabric.splitCores;
  {
    auto hold = parseDuration(fabric.deliveryHold);
    if (!hold) return fail("lab up: --delivery-hold: " + hold.error().message);
    if (hold->count() < 0 || *hold > 10ms)
      return fail("lab up: --delivery-hold must be 0..10ms (e.g. 500us; 0 writes every pass at once)");
    opt.deliveryHoldNs = std::chrono::duration_cast<std::chrono::nanoseconds>(*hold).count();
  }
  if (!fabric.ackPriority.empty() && (softRoce || fabric.fabric == "bridge")) {
    return fail("lab up: --ack-priority sets the lab switch of a namespace lab; the soft-RoCE guests' and the bridge "
                "fabric's queues do not classify ACKs (leave it out)");
  } else if (fabric.ackPriority.empty()) {
    opt.tcpAckPriority = 6;
  } else if (fabric.ackPriority == "dscp") {
    opt.tcpAckPriority = -1;
  } else if (fabric.ackPriority.size() == 1 && fabric.ackPriority[0] >= '0' && fabric.ackPriority[0] <= '7') {
    opt.tcpAckPriority = fabric.ackPriority[0] - '0';
  } else {
    return fail("lab up: --ack-priority must be a priority 0-7, or 'dscp' to classify pure TCP ACKs by their DSCP (got '" +
                fabric.ackPriority + "')");
  }
  if (!fabric.ecn.empty()) {
    if (softRoce || fabric.fabric == "bridge")
      return fail("lab up: --ecn sets the namespace lab's switch; the soft-RoCE guests' switch keeps its own profile and "
                  "the bridge fabric marks nothing (leave it out)");
    if (fabric.ecn == "off") {
      opt.ecnEnabled = false;
    } else {
      auto p = parseEcnProfileArg(fabric.ecn);
      if (!p) return fail("lab up: --ecn: " + p.error().message);
      opt.ecnKminBytes = p->kmin;
      opt.ecnKmaxBytes = p->kmax;
      opt.ecnPmax = p->pmax;
    }
  }
  if (fabric.agentMetrics < 0 || fabric.agentMetrics > 65535 || fabric.agentMetrics == 7470)
    return fail("lab up: --agent-metrics must be a port in 1-65535 other than the agents' 7470");
  opt.agentMetricsPort = fabric.agentMetrics;
  if (softRoce && opt.agentMetricsPort)
    return fail("lab up: --agent-metrics is for the namespace lab; the soft-RoCE guests' agents do not serve it yet");
  {
    auto lease = durationArg(fabric.lease, "--lease");
    if (!lease) return fail("lab up: " + lease.error().message);
    if (*lease < 200ms || *lease > 1h) return fail("lab up: --lease must be 200ms..1h");
    opt.leaseTimeout = std::chrono::duration_cast<std::chrono::milliseconds>(*lease);
  }
  if (fabric.rate.empty() && !softRoce && fabric.fabric == "switch") {
    const lab::RateChoice c = lab::chooseRate(nodes);
    opt.rateBps = c.bps;
    std::fprintf(stderr, "lab up: %s\n", c.why.c_str());
  } else if (!fabric.rate.empty()) {
    // "1G", "100M", "25G" or plain bits per second.
    const std::string& r = fabric.rate;
    char* end = nullptr;
    double v = std::strtod(r.c_str(), &end);
    std::string unit = end ? end : "";
    double mult = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : 0;
    if (end == r.c_str() || mult == 0 || v * mult < 1e6 || v * mult > 400e9)
      return fail("lab up: --rate '" + r + "' must be a rate like 1G, 100M or 25G (1M..400G)");
    opt.rateBps = v * mult;
  }
  if (opt.spines > 0 && opt.leaves == 0) opt.leaves = 2;
  auto r = lab::up(opt);
  if (!r) return fail(r.error().message);
  std::printf("%s\n", r->c_str());
  return kExitOk;
}

int cmdLabDown(const std::string& dir) {
  if (auto r = lab::down(dir); !r) return fail(r.error().message);
  std::fprintf(stderr, "lab in %s is down\n", dir.c_str());
  return kExitOk;
}

int cmdLabStatus(const std::string& dir) {
  auto r = lab::status(dir);
  if (!r) return fail(r.error().message);
  std::printf("%s", r->c_str());
  return kExitOk;
}

// ---------------------------------------------------------------- demo
int cmdDemo(const std::string& dir, int nodes, bool softRoce) {
  std::fprintf(stderr, "== rdmachaos demo: lab up (%d %s) ==\n", nodes,
               softRoce ? "soft-RoCE QEMU guests" : "namespace hosts");
  lab::UpOptions opt;
  opt.nodes = nodes;
  opt.dir = dir;
  opt.softRoce = softRoce;
  opt.agentBinary = findAgentBinary();
  if (!softRoce) {
    const lab::RateChoice c = lab::chooseRate(nodes);
    opt.rateBps = c.bps;
    std::fprintf(stderr, "lab up: %s\n", c.why.c_str());
  }
  auto inv = lab::up(opt);
  if (!inv) return fail(inv.error().message);
  int code = kExitOk;
  {
    std::fprintf(stderr, "\n== agents ==\n");
    std::fflush(stdout);
    AgentsOptions a;
    a.inventory = *inv;
    code = cmdAgents(a);
    std::fflush(stdout);
    if (code == kExitOk) {
      std::string playbook = findPlaybook(softRoce ? "quickstart-soft-roce.toml" : "quickstart.toml");
      std::fprintf(stderr, "\n== playbook %s ==\n", playbook.c_str());
      RunOptions r;
      r.playbook = playbook;
      r.inventory = *inv;
      r.reportDir = dir + "/report";
      r.force = true;  // the demo's own directory: the previous demo's reports are replaced
      // TCG guests answer in milliseconds when idle, but in seconds while a busy guest opens its
      // RDMA device for the job: a bound that fits the lab, not a cluster's 5 s.
      if (softRoce) r.timeout = "30s";
      code = cmdRun(r);
      std::fflush(stdout);
    }
  }
  std::fprintf(stderr, "\n== lab down ==\n");
  if (auto r = lab::down(dir); !r) {
    std::fprintf(stderr, "rdmachaos: %s\n", r.error().message.c_str());
    return kExitError;
  }
  if (code != kExitError)
    std::fprintf(stderr, "the HTML report stays in %s/report/report.html\n", dir.c_str());
  return code;
}

std::string findPlaybook(const std::string& name) {
  if (const char* env = std::getenv("RDMACHAOS_PLAYBOOKS"); env && *env)
    return std::string(env) + "/" + name;
  // build/controller/rdmachaos -> the source tree; or an installed share directory.
  std::string dir = selfDir();
  for (std::string cand : {dir + "/../../playbooks/" + name, dir + "/../share/rdmachaos/playbooks/" + name})
    if (!dir.empty() && ::access(cand.c_str(), R_OK) == 0) return cand;
  return "playbooks/" + name;
}

}  // namespace rc::controller
