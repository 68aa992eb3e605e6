// The rdmachaos subcommands that act on a fleet of agents: agents, inject, recover.
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
#include "controller/fleet/schedule_fault.hpp"
#include "controller/run/timeline.hpp"
#include "controller/playbook/playbook.hpp"
#include "faults/fault.hpp"
#include "lab/lab.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

std::string ms(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", double(ns) / 1e6);
  return buf;
}

std::string rel(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+9.3fs", double(ns) / 1e9);
  return buf;
}

// Runs a coroutine to completion on a fresh io_context and returns its exit code.
template <typename F>
int runMain(F&& body) {
  asio::io_context io;
  int code = kExitError;
  asio::co_spawn(io, body(io), [&](std::exception_ptr e, int rc) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "rdmachaos: internal error: %s\n", ex.what());
      }
      code = kExitError;
    } else {
      code = rc;
    }
  });
  io.run();
  return code;
}

struct Loaded {
  Inventory inventory;
  asio::ssl::context tls;
};

Result<std::unique_ptr<Loaded>> loadAll(const std::string& path) {
  auto inv = loadInventory(path);
  if (!inv) return inv.error();
  auto ctx = tls::makeClientContext(inv->tls);
  if (!ctx) return ctx.error();
  return std::make_unique<Loaded>(Loaded{std::move(*inv), std::move(*ctx)});
}

void printConnectErrors(const Fleet& fleet) {
  for (const auto& [node, err] : fleet.errors())
    std::fprintf(stderr, "rdmachaos: %s: %s\n", node.c_str(), err.c_str());
}

}  // namespace


// ---------------------------------------------------------------- agents
int cmdAgents(const AgentsOptions& o) {
  auto timeout = durationArg(o.timeout, "--timeout");
  if (!timeout) return fail(timeout.error().message);
  auto loaded = loadAll(o.inventory);
  if (!loaded) return fail(loaded.error().message);
  auto& L = **loaded;
  return runMain([&](asio::io_context& io) -> asio::awaitable<int> {
    Fleet fleet(io, L.tls, newControllerId());
    auto all = L.inventory.select("all");
    ConnectProgressFn progress = stderrConnectProgress();  // not a temporary in co_await (GCC 12)
    co_await fleet.connect(*all, *timeout, 8, progress);
    // Every agent's status at once: asked in turn, a large fleet would wait one round trip per
    // node.
    std::map<std::string, Result<json>> statuses;
    {
      std::vector<std::function<asio::awaitable<void>()>> tasks;
      for (auto& c : fleet.clients())
        tasks.push_back([&statuses, c, t = *timeout]() -> asio::awaitable<void> {
          auto st = co_await c->request("status", json::object(), t);
          statuses.emplace(c->node().name, std::move(st));
        });
      co_await whenAll(io, std::move(tasks));
    }
    json out = json::array();
    if (!o.json)
      std::printf("%-10s %-22s %-8s %10s %18s  %-28s %-14s %s\n", "NODE", "ADDRESS", "VERSION",
                  "RTT", "CLOCK OFFSET", "DATA INTERFACES", "RDMA", "FAULT KINDS");
    for (const auto& node : L.inventory.nodes) {
      auto c = fleet.find(node.name);
      if (!c) {
        // Named with why, in the listing's order: an operator reads the gap where it is.
        std::string why = "not connected";
        for (const auto& [n, e] : fleet.errors())
          if (n == node.name) why = e;
        if (o.json)
          out.push_back({{"node", node.name}, {"address", node.address}, {"error", why}});
        else
          std::printf("%-10s %-22s UNREACHABLE\n", node.name.c_str(),
                      (node.address + ":" + std::to_string(node.port)).c_str());
        continue;
      }
      const json& caps = c->hello().value("capabilities", json::object());
      std::string ifs, kinds, rdma;
      for (const auto& i : caps.value("interfaces", json::array()))
        if (i.value("data", false))
          ifs += (ifs.empty() ? "" : ",") + i.value("name", std::string()) +
                 (i.value("oper_up", false) ? "(up)" : "(down)");
      for (const auto& k : caps.value("fault_kinds", json::array()))
        kinds += (kinds.empty() ? "" : ",") + k.value("name", std::string());
      // "rxe0:ACTIVE": each RDMA device with the state of its first port.
      for (const auto& d : caps.value("rdma_devices", json::array())) {
        std::string state = "?";
        const json& ports = d.value("ports", json::array());
        if (!ports.empty()) state = ports[0].value("state", std::string("?"));
        if (auto sp = state.find(": "); sp != std::string::npos) state = state.substr(sp + 2);
        rdma += (rdma.empty() ? "" : ",") + d.value("name", std::string("?")) + ":" + state;
      }
      if (rdma.empty()) rdma = "none";
      const auto& clk = c->clock();
      // What the agent could not undo matters more than anything else it reports.
      const auto& st = statuses.at(node.name);
      json status = st ? *st : json::object();
      if (o.json) {
        out.push_back({{"node", node.name},
                       {"address", node.address},
                       {"agent_version", c->hello().value("agent_version", std::string())},
                       {"rtt_ns", clk.rttNs},
                       {"clock_offset_ns", clk.offsetNs},
                       {"clock_uncertainty_ns", clk.uncertaintyNs},
                       {"capabilities", caps},
                       {"active_faults", status.value("active_faults", json())},
                       {"unreverted", status.value("unreverted", json::array())},
                       {"unrevertable", status.value("unrevertable", json::array())},
                       {"quarantined", status.value("quarantined", json::array())}});
      } else {
        char off[48];
        std::snprintf(off, sizeof off, "%+.3f±%.3f ms", clk.offsetNs / 1e6, clk.uncertaintyNs / 1e6);
        std::printf("%-10s %-22s %-8s %10s %18s  %-28s %-14s %s\n", node.name.c_str(),
                    (node.address + ":" + std::to_string(node.port)).c_str(),
                    c->hello().value("agent_version", std::string("?")).c_str(),
                    ms(clk.rttNs).c_str(), off, ifs.c_str(), rdma.c_str(), kinds.c_str());
        if (!st)
          std::printf("  %s: status unavailable: %s\n", node.name.c_str(),
                      st.error().message.c_str());
        for (const auto& u : status.value("unreverted", json::array()))
          std::printf(
              "  %s: fault '%s' (%s) is NOT reverted; retrying (attempt %d, next in %s): "
              "%s\n",
              node.name.c_str(), u.value("fault", std::string()).c_str(),
              u.value("describe", std::string()).c_str(), u.value("attempts", 0),
              ms(u.value("next_attempt_ms", int64_t(0)) * 1'000'000).c_str(),
              u.value("last_error", std::string()).c_str());
        for (const auto& id : status.value("unrevertable", json::array()))
          std::printf(
              "  %s: fault '%s' could not be reverted before the agent stopped; its "
              "journal entry is replayed at the next start\n",
              node.name.c_str(), id.is_string() ? id.get<std::string>().c_str() : "?");
        for (const auto& id : status.value("quarantined", json::array()))
          std::printf(
              "  %s: journal entry '%s' was unreadable and is quarantined; check it by "
              "hand\n",
              node.name.c_str(), id.is_string() ? id.get<std::string>().c_str() : "?");
      }
      c->close();
    }
    if (o.json) std::printf("%s\n", out.dump(2).c_str());
    printConnectErrors(fleet);
    std::fprintf(stderr, "%zu of %zu agents reachable\n", fleet.clients().size(),
                 L.inventory.nodes.size());
    co_return fleet.errors().empty() ? kExitOk : kExitError;
  });
}

// ---------------------------------------------------------------- inject
std::string faultKindsHelp() {
  std::string out = "\nFault kinds and their parameters (--set key=value; the same keys as a playbook step's params):\n";
  for (const auto* k : faults::registry()) {
    out += "\n  " + k->name + ": " + k->summary + "\n";
    for (const auto& p : k->params) {
      std::string def;
      if (!p.defaultValue.is_null()) {
        const json& d = p.defaultValue;
        if (p.type == faults::ParamType::duration && d.is_number_integer())
          def = formatDuration(Nanos(d.get<int64_t>()));
        else if (p.type == faults::ParamType::size && d.is_number_integer())
          def = formatSize(d.get<uint64_t>());
        else
          def = d.is_string() ? d.get<std::string>() : d.dump();
        def = " (default " + def + ")";
      } else {
        def = p.optional ? "" : " (required)";
      }
      char line[512];
      std::snprintf(line, sizeof line, "    %-17s %s%s\n", p.name.c_str(), p.help.c_str(), def.c_str());
      out += line;
    }
  }
  return out;
}

namespace {

// An inject's flags, checked before any agent is contacted.
struct InjectRequest {
  const faults::FaultKind* kind = nullptr;
  Duration forDuration{};
  Duration timeout{};            // each agent request's bound
  std::optional<Duration> lead;  // empty: automatic (injectLeadTime)
  json params;                   // normalised, not yet bound to nodes
};

// Checks the flags and the fault's parameters here too, so a typo fails before any agent is
// contacted.
Result<InjectRequest> parseInjectRequest(const InjectOptions& o) {
  InjectRequest req;
  req.kind = faults::findKind(o.kind);
  if (!req.kind) {
    std::string names;
    for (const auto* k : faults::registry()) names += (names.empty() ? "" : ", ") + k->name;
    return makeError("unknown fault kind '" + o.kind + "' (known: " + names + ")");
  }
  auto forD = durationArg(o.forDuration, "--for");
  if (!forD) return forD.error();
  if (*forD > 24h) return makeError("--for must be at most 24h");
  req.forDuration = *forD;
  auto timeout = durationArg(o.timeout, "--timeout");
  if (!timeout) return timeout.error();
  req.timeout = *timeout;
  if (!o.lead.empty()) {
    auto l = durationArg(o.lead, "--lead");
    if (!l) return l.error();
    req.lead = *l;
  }
  json raw = json::object();
  for (const auto& s : o.sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return makeError("--set '" + s + "' must be key=value, e.g. --set down=2s");
    raw[s.substr(0, eq)] = s.substr(eq + 1);
  }
  auto normalised = faults::normaliseParams(req.kind->name, req.kind->params, raw);
  if (!normalised) return normalised.error();
  req.params = std::move(*normalised);
  return req;
}

// "--node n2,n3" and "--node n2 --node n3" alike: one selector per name, role or 'all'.
std::vector<std::string> splitNodeSelectors(const std::vector<std::string>& args) {
  std::vector<std::string> selectors;
  for (const auto& arg : args) {
    size_t from = 0;
    while (from <= arg.size()) {
      size_t comma = arg.find(',', from);
      std::string one = arg.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      if (!one.empty()) selectors.push_back(one);
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  return selectors;
}

// The nodes an inject acts on, each with its own parameters on the wire.
struct InjectTargets {
  std::vector<const Node*> nodes;
  std::map<std::string, json> params;  // node -> its normalised parameters
};

Result<InjectTargets> resolveInjectTargets(const InjectRequest& req, const std::vector<std::string>& nodeArgs,
                                           const Inventory& inventory) {
  std::vector<const Node*> picked;
  std::set<std::string> seen;
  for (const auto& sel : splitNodeSelectors(nodeArgs)) {
    auto selected = inventory.select(sel);
    if (!selected) return selected.error();
    for (auto* n : *selected)
      if (seen.insert(n->name).second) picked.push_back(n);
  }
  if (picked.empty()) return makeError("--node is required (a node name, a role, or 'all')");
  // Some kinds reach beyond their targets (incast: the receiver's sink); each node gets its own
  // parameters on the wire.
  std::vector<std::string> names;
  for (auto* n : picked) names.push_back(n->name);
  auto bound = bindTargets(req.kind->name, req.params, names, inventory, nullptr);
  if (!bound) return makeError("inject " + bound.error().message);
  InjectTargets out;
  for (const auto& b : *bound) {
    out.params[b.node] = b.params;
    out.nodes.push_back(inventory.find(b.node));
  }
  return out;
}

// One common instant: far enough ahead that every schedule message arrives in time.
Duration injectLeadTime(Fleet& fleet, const std::optional<Duration>& lead) {
  if (lead) return *lead;
  int64_t maxRtt = 0;
  for (auto& c : fleet.clients()) maxRtt = std::max(maxRtt, c->clock().rttNs);
  // With more than one node, also room for a refusal to be heard and the others' parts
  // reverted before the instant (a fault runs on every node or on none, see cmdInject).
  return std::max<Duration>({Duration(300ms), std::chrono::nanoseconds(maxRtt * 20),
                             fleet.clients().size() > 1 ? Duration(1s) : Duration(0s)});
}

// One inject under way, shared by its steps below: what is scheduled where and when, and what
// the agents (and Ctrl-C) said about it.
struct InjectRun {
  std::string kind;                    // the fault kind's name
  std::map<std::string, json> params;  // node -> its parameters on the wire
  std::string controllerId;
  Duration timeout{};                  // each schedule request's bound
  int64_t startNs = 0, forNs = 0;
  std::map<std::string, std::string> faultIds;  // node -> the id its part is scheduled as
  std::map<std::string, std::string> refused;   // node -> why its agent refused
  std::map<std::string, json> ended;            // node -> final record
  bool interrupted = false, lost = false;
};

// Records each node's end of its part, and a lost agent, in RUN; either wakes the wait (WAKE).
void watchInjectParts(Fleet& fleet, asio::steady_timer& wake, InjectRun& run) {
  for (auto& c : fleet.clients()) {
    std::string node = c->node().name;
    c->onEvent([&run, &wake, node](const json& m) {
      if (auto e = proto::parseFaultEnded(m)) {
        run.ended[node] = std::move(e->record);
        wake.cancel();
      }
    });
    c->onLost([&run, &wake, node](const std::string& why) {
      std::fprintf(stderr, "rdmachaos: lost agent %s: %s (its lease will revert the fault)\n",
                   node.c_str(), why.c_str());
      run.lost = true;
      wake.cancel();
    });
  }
}

// Schedules every node's part at once; the refusals go to RUN.refused.
asio::awaitable<void> scheduleInjectParts(asio::io_context& io, Fleet& fleet, InjectRun& run) {
  // Parameters that depend on what the agents reported (incast's transport = "auto"): one
  // decision for every node of this inject.
  {
    std::vector<json*> stepParams;
    for (auto& c : fleet.clients()) stepParams.push_back(&run.params[c->node().name]);
    settleStep(run.kind, stepParams, fleet.clients());
  }
  std::vector<std::function<asio::awaitable<void>()>> tasks;
  for (auto& c : fleet.clients()) {
    tasks.push_back([&run, c]() -> asio::awaitable<void> {
      const std::string& ctl = run.controllerId;
      std::string id = "inj-" + ctl.substr(ctl.size() - 16) + "-" + c->node().name.substr(0, 40);
      run.faultIds[c->node().name] = id;
      auto r = co_await scheduleFault(c, id, run.kind, run.params[c->node().name], run.startNs, run.forNs,
                                      run.timeout);
      if (!r) run.refused[c->node().name] = r.error().message;
    });
  }
  co_await whenAll(io, std::move(tasks));
}

// Waits until EXPECTED parts have ended, Ctrl-C, a lost agent or DEADLINE, whichever is first.
asio::awaitable<void> waitForInjectEnd(asio::steady_timer& wake, const InjectRun& run, size_t expected,
                                       std::chrono::steady_clock::time_point deadline) {
  while (run.ended.size() < expected && !run.interrupted && !run.lost &&
         std::chrono::steady_clock::now() < deadline) {
    wake.expires_at(deadline);
    boost::system::error_code ec;
    co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

// Reverts every part that has not ended and whose agent is still there; each revert's record
// becomes that node's end.
asio::awaitable<void> revertInjectParts(asio::io_context& io, Fleet& fleet, InjectRun& run) {
  std::vector<std::function<asio::awaitable<void>()>> reverts;
  for (auto& c : fleet.clients()) {
    std::string node = c->node().name;
    if (run.ended.count(node) || run.refused.count(node) || !c->connected()) continue;
    reverts.push_back([&run, c, node]() -> asio::awaitable<void> {
      json body = proto::toJson(proto::Revert{run.faultIds[node]});
      auto r = co_await c->request("revert", std::move(body), 10s);
      if (r && r->contains("fault"))
        run.ended[node] = (*r)["fault"];
      else if (!r)
        std::fprintf(stderr, "rdmachaos: revert on %s: %s\n", node.c_str(), r.error().message.c_str());
    });
  }
  co_await whenAll(io, std::move(reverts));
}

// A part that started before its revert arrived (a refusal heard late): said, with how long.
void printPartsStartedBeforeRevert(const InjectRun& run) {
  for (const auto& [node, rec] : run.ended)
    if (int64_t a = rec.value("applied_ns", int64_t(0)); a > 0)
      std::fprintf(stderr, "rdmachaos: %s: its part started before the revert arrived and ran %s\n", node.c_str(),
                   formatDuration(Nanos(std::max<int64_t>(0, rec.value("ended_ns", a) - a))).c_str());
}

// Every scheduled part's record, on the controller's clock from the common start: as text, or
// (AS_JSON) one JSON document. Returns whether every part ran and ended without an error.
bool printInjectReport(Fleet& fleet, const InjectRun& run, bool asJson) {
  json report = {{"kind", run.kind}, {"start_ns", run.startNs}, {"nodes", json::array()}};
  bool allOk = run.refused.empty();
  for (auto& c : fleet.clients()) {
    std::string node = c->node().name;
    if (run.refused.count(node)) continue;
    const auto& clk = c->clock();
    json rec = run.ended.count(node) ? run.ended.at(node) : json{{"state", "unknown"}};
    std::string reason = rec.value("end_reason", std::string("unknown"));
    if (!rec.value("error", std::string()).empty() || reason == "error" || reason == "unknown") allOk = false;
    report["nodes"].push_back({{"node", node},
                               {"clock_offset_ns", clk.offsetNs},
                               {"clock_uncertainty_ns", clk.uncertaintyNs},
                               {"fault", rec}});
    if (asJson) continue;
    std::printf("%s: %s  (clock offset %+.3f ms ± %.3f ms)\n", node.c_str(),
                rec.value("describe", run.kind).c_str(), clk.offsetNs / 1e6, clk.uncertaintyNs / 1e6);
    const TimelineMap map{clk.offsetNs, run.startNs};
    if (rec.value("applied_ns", int64_t(0)) > 0)
      std::printf("  %s  applied\n", rel(map.runNs(rec["applied_ns"].get<int64_t>())).c_str());
    for (const auto& ev : rec.value("events", json::array())) {
      int64_t t = map.runNs(ev.value("t_ns", int64_t(0)));
      std::printf("  %s  %-10s %-8s %s\n", rel(t).c_str(), ev.value("what", std::string()).c_str(),
                  ev.value("detail", std::string()).c_str(),
                  ev.value("kernel_time", false) ? "(kernel time)" : "");
    }
    std::printf("  ended: %s%s\n", reason.c_str(),
                rec.value("error", std::string()).empty() ? "" : (" — " + rec["error"].get<std::string>()).c_str());
  }
  if (asJson) std::printf("%s\n", report.dump(2).c_str());
  return allOk;
}

}  // namespace

int cmdInject(const InjectOptions& o) {
  auto req = parseInjectRequest(o);
  if (!req) return fail(req.error().message);
  auto loaded = loadAll(o.inventory);
  if (!loaded) return fail(loaded.error().message);
  auto& L = **loaded;
  auto targets = resolveInjectTargets(*req, o.nodes, L.inventory);
  if (!targets) return fail(targets.error().message);

  return runMain([&](asio::io_context& io) -> asio::awaitable<int> {
    InjectRun run;
    run.kind = req->kind->name;
    run.params = std::move(targets->params);
    run.controllerId = newControllerId();
    run.timeout = req->timeout;
    Fleet fleet(io, L.tls, run.controllerId);
    ConnectProgressFn progress = o.json ? ConnectProgressFn() : stderrConnectProgress();  // not a temporary in co_await (GCC 12)
    co_await fleet.connect(targets->nodes, req->timeout, 8, progress);
    if (!fleet.errors().empty()) {
      printConnectErrors(fleet);
      for (auto& c : fleet.clients()) c->close();
      co_return kExitError;
    }
    Duration leadTime = injectLeadTime(fleet, req->lead);
    run.startNs = wallNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(leadTime).count();
    run.forNs = std::chrono::duration_cast<std::chrono::nanoseconds>(req->forDuration).count();

    asio::steady_timer wake(io);
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      run.interrupted = true;
      wake.cancel();
    });
    watchInjectParts(fleet, wake, run);
    co_await scheduleInjectParts(io, fleet, run);
    for (auto& [node, why] : run.refused) std::fprintf(stderr, "rdmachaos: refused: %s\n", why.c_str());
    for (auto& c : fleet.clients()) c->startHeartbeats();
    size_t expected = fleet.clients().size() - run.refused.size();
    // A fault runs on every node it was given or on none: an incast's senders without their
    // sink (or a sink without its senders) is half a fault, and a flap train on some nodes of
    // `all` is not what was asked. The others are reverted before their instant.
    const bool partial = !run.refused.empty() && expected > 0;
    if (partial)
      std::fprintf(stderr,
                   "rdmachaos: %s refused on %zu of %zu nodes: reverting it on the other %zu before it starts "
                   "(a fault runs on every node it was given, or on none)\n",
                   run.kind.c_str(), run.refused.size(), fleet.clients().size(), expected);
    if (!o.json && expected > 0 && !partial)
      std::fprintf(stderr, "%s on %zu node(s), starting in %s, reverted after %s at the latest (Ctrl-C reverts now)\n",
                   run.kind.c_str(), expected,
                   formatDuration(std::chrono::duration_cast<Nanos>(leadTime)).c_str(),
                   o.forDuration.c_str());
    auto deadline = std::chrono::steady_clock::now() + leadTime + req->forDuration + 5s;
    if (!partial) co_await waitForInjectEnd(wake, run, expected, deadline);
    if (run.interrupted || partial || run.ended.size() < expected) {
      if (run.interrupted) std::fprintf(stderr, "\ninterrupted: reverting now\n");
      co_await revertInjectParts(io, fleet, run);
    }
    signals.cancel();
    if (partial) printPartsStartedBeforeRevert(run);
    bool allOk = printInjectReport(fleet, run, o.json);
    for (auto& c : fleet.clients()) c->close();
    if (run.interrupted) co_return kExitInterrupted;
    co_return allOk && !run.lost ? kExitOk : kExitError;
  });
}

// ---------------------------------------------------------------- recover
int cmdRecover(const std::string& inventory, const std::string& timeoutText, bool all) {
  auto timeout = durationArg(timeoutText, "--timeout");
  if (!timeout) return fail(timeout.error().message);
  auto loaded = loadAll(inventory);
  if (!loaded) return fail(loaded.error().message);
  auto& L = **loaded;
  return runMain([&](asio::io_context& io) -> asio::awaitable<int> {
    Fleet fleet(io, L.tls, newControllerId());
    ConnectProgressFn progress = stderrConnectProgress();  // not a temporary in co_await (GCC 12)
    co_await fleet.connect(*L.inventory.select("all"), *timeout, 0, progress);
    bool ok = fleet.errors().empty();
    std::vector<std::function<asio::awaitable<void>()>> tasks;
    for (auto& c : fleet.clients()) {
      tasks.push_back([&, c]() -> asio::awaitable<void> {
        json body = proto::toJson(proto::RevertAll{all});
        auto r = co_await c->request("revert_all", std::move(body), 30s);
        if (!r) {
          ok = false;
          std::fprintf(stderr, "rdmachaos: %s\n", r.error().message.c_str());
          co_return;
        }
        size_t n = r->value("faults", json::array()).size();
        std::string scope = all ? " of every controller" : " of this controller certificate";
        std::printf("%s: reverted %zu fault(s)%s\n", c->node().name.c_str(), n, scope.c_str());
      });
    }
    co_await whenAll(io, std::move(tasks));
    printConnectErrors(fleet);
    for (auto& c : fleet.clients()) c->close();
    co_return ok ? kExitOk : kExitError;
  });
}

}  // namespace rc::controller
