// Live playbook runs: one workload over the whole plan, every fault scheduled at its planned
// instant on the common clock, guardrails checked while it runs.
#include "controller/run_playbook.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/units.hpp"
#include "controller/fabric_sampler.hpp"
#include "controller/fleet.hpp"
#include "controller/score.hpp"
#include "controller/workload_run.hpp"
#include "faults/fault.hpp"
#include "metrics/exporter.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Telemetry arrives at least every 100 ms: decisions about "now" look this far back.
constexpr int64_t kTelemetryLagNs = 300'000'000;

std::string faultId(const std::string& run, int trial, const std::string& step,
                    const std::string& node) {
  auto clean = [](const std::string& s, size_t max) {
    std::string out;
    for (char c : s) {
      bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      out += ok ? c : '_';
      if (out.size() >= max) break;
    }
    return out;
  };
  return clean(run, 16) + "-" + std::to_string(trial) + "-" + clean(step, 20) + "-" +
         clean(node, 16);
}

struct Scheduled {
  size_t record;  // index into RunResult::faults
  std::string id;
  std::shared_ptr<AgentClient> client;
  bool ended = false;
};

}  // namespace

NicPoint nicHighlights(const std::map<std::string, uint64_t>& values) {
  NicPoint p;
  for (const auto& [key, v] : values) {
    auto slash = key.find('/');
    std::string_view name = slash == std::string::npos ? std::string_view(key)
                                                       : std::string_view(key).substr(slash + 1);
    // mlx5: rx_prio3_pause / tx_prio3_pause (PFC), rx_pause_ctrl_phy / tx_pause_ctrl_phy
    // (global pause). Durations and storm events are counters of their own, not frames.
    bool prioPause = name.size() == 14 && (name.substr(0, 7) == "rx_prio" || name.substr(0, 7) == "tx_prio") &&
                     name[7] >= '0' && name[7] <= '7' && name.substr(8) == "_pause";
    if (prioPause || name == "rx_pause_ctrl_phy" || name == "tx_pause_ctrl_phy") p.pauseFrames += v;
    else if (name == "rdma.np_ecn_marked_roce_packets") p.ecnMarked += v;
    else if (name == "rdma.np_cnp_sent") p.cnpSent += v;
    else if (name == "rdma.rp_cnp_handled") p.cnpHandled += v;
  }
  return p;
}

std::vector<Bin> rebin(const std::vector<std::pair<int64_t, double>>& samples, int64_t sampleNs,
                       int64_t origin, int64_t binNs, int64_t endNs) {
  int64_t n = endNs > 0 ? (endNs + binNs - 1) / binNs : 0;
  std::vector<Bin> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) out[size_t(i)].tNs = i * binNs;
  for (const auto& [t, bytes] : samples) {
    int64_t a = t - origin, b = a + sampleNs;
    if (b <= 0 || a >= n * binNs || sampleNs <= 0) continue;
    for (int64_t k = std::max<int64_t>(0, a / binNs); k < n && k * binNs < b; k++) {
      int64_t lo = std::max(a, k * binNs), hi = std::min(b, (k + 1) * binNs);
      if (hi > lo) out[size_t(k)].bytes += bytes * double(hi - lo) / double(sampleNs);
    }
  }
  return out;
}

asio::awaitable<RunResult> executePlan(asio::io_context& io, const Playbook& playbook,
                                       const Plan& plan, const Inventory& inventory,
                                       asio::ssl::context& tls, RunnerOptions options) {
  RunResult run;
  run.plan = plan;
  run.inventoryPath = inventory.path;
  run.binNs = playbook.scoring.binNs;

  // Every node the run touches: the workload's and the fault targets.
  std::vector<std::string> names = plan.workloadNodes;
  for (const auto& t : plan.trials)
    for (const auto& f : t.faults)
      if (std::find(names.begin(), names.end(), f.node) == names.end()) names.push_back(f.node);
  std::vector<const Node*> nodes;
  for (const auto& n : names)
    if (auto* node = inventory.find(n)) {
      nodes.push_back(node);
      run.inventoryNodes.push_back(*node);
    }

  std::string ctl = newControllerId();
  Fleet fleet(io, tls, ctl);
  if (options.progress) std::fprintf(stderr, "connecting to %zu agent(s)...\n", nodes.size());
  // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
  ConnectProgressFn progress = options.progress ? stderrConnectProgress() : ConnectProgressFn();
  co_await fleet.connect(nodes, options.connectTimeout, 8, progress);
  for (auto& c : fleet.clients())
    run.clocks.push_back({c->node().name, c->clock().offsetNs, c->clock().uncertaintyNs,
                          c->clock().rttNs});
  if (!fleet.errors().empty()) {
    // Every unreachable agent by name (the first few with why): a cluster operator fixes them
    // all before the next attempt, not one per attempt.
    const auto& errs = fleet.errors();
    if (errs.size() == 1) {
      run.abortReason = "cannot reach agent " + errs.front().first + ": " + errs.front().second;
    } else {
      run.abortReason = "cannot reach " + std::to_string(errs.size()) + " of " + std::to_string(nodes.size()) +
                        " agents:";
      for (size_t i = 0; i < errs.size(); i++)
        run.abortReason += (i ? ", " : " ") + errs[i].first;
      for (size_t i = 0; i < errs.size() && i < 3; i++)
        run.abortReason += "; " + errs[i].first + ": " + errs[i].second;
      if (errs.size() > 3) run.abortReason += "; ...";
    }
    for (auto& c : fleet.clients()) c->close();
    co_return run;
  }
  for (auto& c : fleet.clients()) c->startHeartbeats();

  // ---- abort plumbing: guardrails, lost agents, Ctrl-C
  bool aborted = false;
  asio::steady_timer tick(io);
  auto abort = [&](std::string why) {
    if (aborted) return;
    aborted = true;
    run.abortReason = std::move(why);
    tick.cancel();
  };
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) abort("interrupted by the operator");
  });
  for (auto& c : fleet.clients()) {
    std::string node = c->node().name;
    c->onLost([&, node](const std::string& why) {
      if (playbook.guardrails.abortOnAgentLoss) abort("lost agent " + node + ": " + why);
    });
  }

  // ---- the workload: one run across the whole plan
  std::vector<std::shared_ptr<AgentClient>> ranks;
  for (const auto& n : plan.workloadNodes) ranks.push_back(fleet.find(n));
  WorkloadSpec spec;
  spec.kind = toString(playbook.workload.kind);
  spec.size = playbook.workload.sizeBytes;
  spec.streams = playbook.workload.streams;
  spec.transport = playbook.workload.transport;
  spec.qp = playbook.workload.qp;
  spec.bin = std::chrono::nanoseconds(playbook.scoring.binNs);
  spec.duration = std::chrono::nanoseconds(plan.durationNs + 500'000'000);
  spec.lead = 1s;
  WorkloadRun workload(io, ranks, spec, "wl-" + ctl.substr(ctl.size() - 4));
  auto started = co_await workload.start(options.connectTimeout);
  if (!started) {
    run.abortReason = "workload did not start: " + started.error().message;
    for (auto& c : fleet.clients()) c->close();
    co_return run;
  }
  const int64_t t0 = workload.series().startNs;  // the run's t = 0, controller clock
  run.startedUnixNs = t0;
  // Fabric evidence (lab switch counters and events) for the whole run, where there is a switch.
  std::unique_ptr<FabricSampler> fabric;
  if (!inventory.switchControl.empty()) {
    // An incast's flows into its receiver are metered on the wire: when they stopped is the
    // ground truth its recovery is read against.
    std::set<FabricMeter> meters;
    for (const auto& t : plan.trials)
      for (const auto& f : t.faults)
        if (f.kind == "incast" && f.role == "sink" && f.params.contains("port") && f.params["port"].is_number_integer())
          meters.insert({f.node, f.params["port"].get<int>()});
    fabric = std::make_unique<FabricSampler>(inventory.switchControl, t0,
                                             std::vector<FabricMeter>(meters.begin(), meters.end()));
  }

  // ---- every fault, scheduled now for its planned instant (agents hold them until then)
  std::vector<Scheduled> scheduled;
  std::map<std::string, size_t> byId;
  std::map<std::string, json> early;  // fault_ended before its schedule was registered
  auto recordEnded = [&](Scheduled& s, const json& rec) {
    s.ended = true;
    FaultRecord& fr = run.faults[s.record];
    int64_t off = s.client->clock().offsetNs;
    // The actual times: the first and last transitions the agent observed (kernel
    // notifications for link_flap), else when it applied and ended the fault.
    const json& events = rec.value("events", json::array());
    int64_t applied = rec.value("applied_ns", int64_t(0));
    int64_t reverted = rec.value("ended_ns", int64_t(0));
    if (!events.empty()) {
      applied = events.front().value("t_ns", applied);
      reverted = events.back().value("t_ns", reverted);
    }
    if (applied > 0) fr.appliedNs = applied - off - t0;
    if (reverted > 0) fr.revertedNs = reverted - off - t0;
    if (!rec.value("error", std::string()).empty()) fr.error = rec["error"];
  };
  for (auto& c : fleet.clients()) {
    c->onEvent([&](const json& m) {
      if (m.value("type", "") != "fault_ended" || !m.contains("fault")) return;
      const json& rec = m["fault"];
      std::string id = rec.value("fault", std::string());
      auto it = byId.find(id);
      if (it == byId.end()) {
        early[id] = rec;
        return;
      }
      recordEnded(scheduled[it->second], rec);
    });
  }
  // Concurrently across agents, in plan order on each: a step on every node of a large
  // cluster is one round trip and one journal flush per node, which in turn would take
  // seconds and could pass the step's instant; on one agent, the order of the plan stays.
  struct Attempt {
    FaultRecord record;
    Scheduled s;
    json body;
    bool tried = false, ok = false;
  };
  std::vector<Attempt> attempts;
  std::map<std::string, std::vector<size_t>> perNode;  // node -> attempts, in plan order
  for (const auto& trial : plan.trials) {
    for (const auto& f : trial.faults) {
      Attempt at;
      at.record.trial = trial.index;
      at.record.step = f.step;
      at.record.node = f.node;
      at.record.kind = f.kind;
      at.record.role = f.role;
      at.record.params = f.params;
      at.record.scheduledNs = f.atNs;
      auto client = fleet.find(f.node);
      at.s = Scheduled{0, faultId(ctl.substr(ctl.size() - 16), trial.index, f.step, f.node), client};
      const faults::FaultKind* kind = faults::findKind(f.kind);
      json params = kind ? faults::wireParams(kind->params, f.params) : f.params;
      at.body = proto::toJson(proto::Schedule{at.s.id, f.kind, params, t0 + f.atNs, client->clock().offsetNs,
                                              proto::lifetimeMsFor(f.forNs)});
      perNode[f.node].push_back(attempts.size());
      attempts.push_back(std::move(at));
    }
  }
  {
    std::vector<std::function<asio::awaitable<void>()>> tasks;
    for (const auto& [node, list] : perNode)
      tasks.push_back([&, list = list]() -> asio::awaitable<void> {
        for (size_t i : list) {
          if (aborted) break;
          Attempt& at = attempts[i];
          at.tried = true;
          auto r = co_await at.s.client->request("schedule", at.body, options.connectTimeout);
          if (!r) {
            at.record.error = r.error().message;
            abort("fault " + at.record.step + " on " + at.record.node + " refused: " + r.error().message);
            break;
          }
          at.ok = true;
        }
      });
    co_await whenAll(io, std::move(tasks));
  }
  // The result lists what was sent (or refused), in plan order, as before.
  for (auto& at : attempts) {
    if (!at.tried) continue;
    run.faults.push_back(std::move(at.record));
    if (!at.ok) continue;
    at.s.record = run.faults.size() - 1;
    byId[at.s.id] = scheduled.size();
    scheduled.push_back(std::move(at.s));
  }
  for (const auto& [id, rec] : early)
    if (auto it = byId.find(id); it != byId.end()) recordEnded(scheduled[it->second], rec);
  early.clear();

  // ---- live: progress, guardrails, counter snapshots, until the plan ends or an abort
  auto jobGrid = [&](int64_t fromRel, int64_t toRel) {
    std::vector<Grid> grids;
    for (const auto& ns : workload.series().nodes) {
      std::vector<Bin> bins;
      for (const auto& b : ns.bins) bins.push_back({b.tNs - t0, double(b.bytes)});
      grids.push_back(toGrid(bins, run.binNs, fromRel, toRel));
    }
    return sumGrids(grids);
  };
  auto countersNow = [&](const std::string& node) {
    std::map<std::string, uint64_t> m;
    for (const auto& ns : workload.series().nodes) {
      if (ns.node != node) continue;
      m["workload_errors"] = uint64_t(ns.counters.errors);
      m["workload_reconnects"] = uint64_t(ns.counters.reconnects);
      m["workload_corruptions"] = uint64_t(ns.counters.corruptions);
      m["workload_failed_iterations"] = uint64_t(ns.counters.failedIterations);
      m["workload_rx_bytes"] = uint64_t(ns.counters.rxBytes);
      // The NIC's own counters as the agent last sampled them (absent names stay absent).
      for (const auto& [name, v] : ns.nic) m.emplace(name, v);
    }
    return m;
  };
  std::map<int, double> baselines;
  std::set<int> before, after;
  int64_t lastProgress = -1;
  while (!aborted) {
    int64_t now = wallNs() - t0;
    if (now >= plan.durationNs + kTelemetryLagNs) break;
    for (const auto& trial : plan.trials) {
      if (now >= trial.startNs && before.insert(trial.index).second)
        for (const auto& n : plan.workloadNodes)
          run.counters.push_back({trial.index, n, countersNow(n), {}});
      if (now >= trial.endNs + kTelemetryLagNs && after.insert(trial.index).second)
        for (auto& cs : run.counters)
          if (cs.trial == trial.index) cs.after = countersNow(cs.node);
      // The baseline, once it is complete: below the floor means the fabric is not fit to test.
      if (!baselines.count(trial.index) && now >= trial.baselineToNs + kTelemetryLagNs) {
        auto b = baselineRate(jobGrid(trial.baselineFromNs, trial.baselineToNs),
                              trial.baselineFromNs, trial.baselineToNs, playbook.scoring.smoothNs);
        baselines[trial.index] = b.value_or(0);
        if (playbook.guardrails.minBaselineBytesPerSec > 0 &&
            b.value_or(0) < playbook.guardrails.minBaselineBytesPerSec)
          abort("baseline " + formatBitRate(b.value_or(0) * 8) + " of trial " + trial.label() +
                " is below the floor of " +
                formatBitRate(playbook.guardrails.minBaselineBytesPerSec * 8));
      }
      if (playbook.guardrails.maxStallNs > 0 && baselines.count(trial.index) &&
          now >= trial.startNs && now < trial.endNs + kTelemetryLagNs) {
        int64_t to = now - kTelemetryLagNs, from = to - playbook.guardrails.maxStallNs;
        if (from >= trial.baselineToNs) {
          Grid g = jobGrid(from, to);
          bool stalled = g.size() > 0;
          for (size_t i = 0; i < g.size() && stalled; i++)
            stalled = g.rate(i) < playbook.scoring.stallFraction * baselines[trial.index];
          if (stalled)
            abort("the job stalled for longer than " +
                  formatDuration(Nanos(playbook.guardrails.maxStallNs)) + " in trial " +
                  trial.label());
        }
      }
    }
    // One instant for every figure: telemetry arrives kTelemetryLagNs late, so the phase,
    // the faults and the throughput are all those of `at` (said on the progress line).
    const int64_t at = now - kTelemetryLagNs;
    std::string phase = "-", label;
    int trialIndex = -1;
    for (const auto& trial : plan.trials)
      for (const auto& p : trial.phases)
        if (at >= p.startNs && at < p.endNs) {
          phase = p.name;
          label = trial.label();
          trialIndex = trial.index;
        }
    // The job's and each node's bytes over the second before `at`, on whole bins.
    double jobBytes = 0;
    std::map<std::string, double> nodeBytes;
    if (at >= 1'000'000'000) {
      const int64_t to = at / run.binNs * run.binNs;
      for (const auto& ns : workload.series().nodes) {
        std::vector<Bin> bins;
        for (const auto& b : ns.bins) bins.push_back({b.tNs - t0, double(b.bytes)});
        Grid g = toGrid(bins, run.binNs, to - 1'000'000'000, to);
        double sum = 0;
        for (double b : g.bytes) sum += b;
        nodeBytes[ns.node] = sum;
        jobBytes += sum;
      }
    }
    std::vector<const FaultRecord*> activeFaults;
    for (const auto& s : scheduled) {
      const auto& fr = run.faults[s.record];
      // On at `at`: applied by then (or due, before the agent's report arrives) and not reverted.
      bool begun = fr.appliedNs ? *fr.appliedNs <= at : fr.scheduledNs <= at;
      bool over = fr.revertedNs ? *fr.revertedNs <= at : s.ended;
      if (begun && !over && fr.error.empty()) activeFaults.push_back(&fr);
    }
    if (options.metrics) {
      metrics::Exporter& m = *options.metrics;
      m.set("rdmachaos_run_elapsed_seconds", "seconds of the plan behind the run (telemetry's instant)", at / 1e9);
      m.set("rdmachaos_run_duration_seconds", "the plan's length", plan.durationNs / 1e9);
      m.set("rdmachaos_run_trial", "the trial running (its index; -1 between trials)", trialIndex);
      m.set("rdmachaos_run_phase", "1 for the phase running", {{"trial", label}, {"phase", phase}}, 1);
      m.retain("rdmachaos_run_phase", {{{"trial", label}, {"phase", phase}}});
      m.set("rdmachaos_job_throughput_bits_per_second", "the job's throughput over the last second", jobBytes * 8);
      std::vector<std::map<std::string, std::string>> faults;
      for (const auto& [node, bytes] : nodeBytes) {
        m.set("rdmachaos_node_throughput_bits_per_second", "a node's workload throughput over the last second",
              {{"node", node}}, bytes * 8);
        for (const auto& [name, v] : countersNow(node))
          m.set("rdmachaos_node_counter", "a node's workload and NIC counters as last reported",
                {{"node", node}, {"counter", name}}, double(v));
      }
      m.set("rdmachaos_faults_active", "faults applied and not yet reverted", double(activeFaults.size()));
      for (const auto* fr : activeFaults) {
        faults.push_back({{"step", fr->step}, {"node", fr->node}, {"kind", fr->kind}});
        m.set("rdmachaos_fault_active", "1 while this fault is on", faults.back(), 1);
      }
      m.retain("rdmachaos_fault_active", faults);
      m.set("rdmachaos_guardrail_max_stall_seconds", "the stall guardrail (0: off)",
            playbook.guardrails.maxStallNs / 1e9);
      m.set("rdmachaos_guardrail_min_baseline_bits_per_second", "the baseline floor guardrail (0: off)",
            playbook.guardrails.minBaselineBytesPerSec * 8);
      for (const auto& [trial, b] : baselines)
        m.set("rdmachaos_trial_baseline_bits_per_second", "a trial's measured baseline",
              {{"trial", std::to_string(trial)}}, b * 8);
      m.set("rdmachaos_run_aborted", "1 once a guardrail, a lost agent or the operator aborted the run", aborted);
    }
    if (options.progress && now / 1'000'000'000 != lastProgress && now >= 0 && now < plan.durationNs) {
      lastProgress = now / 1'000'000'000;
      auto st = workloadStats(workload.series(), t0 + at - 1'000'000'000, t0 + at);
      std::string active;
      for (const auto* fr : activeFaults) active += (active.empty() ? "" : ", ") + fr->step + "@" + fr->node;
      // Long runs (a target sweep over a cluster) say where they are and how long is left.
      std::string where = label;
      if (plan.trials.size() > 1 && trialIndex >= 0)
        where += ", trial " + std::to_string(trialIndex + 1) + "/" + std::to_string(plan.trials.size()) + ", " +
                 formatDuration(Nanos((plan.durationNs - at) / 1'000'000'000 * 1'000'000'000)) + " left";
      std::fprintf(stderr,
                   "[%s] %-10s t=%5.1fs/%.1fs (the second to t; telemetry lags %.1fs)  "
                   "job throughput %-11s busbw %-11s iter p50 %-9s faults on: %s\n",
                   where.c_str(), phase.c_str(), at / 1e9, plan.durationNs / 1e9, kTelemetryLagNs / 1e9,
                   at >= 1'000'000'000 ? formatBitRate(jobBytes * 8).c_str() : "-",
                   st.count ? formatBitRate(st.busbw * 8).c_str() : "-",
                   st.count ? formatDuration(Nanos(int64_t(st.p50Ns))).c_str() : "-",
                   active.empty() ? "none" : active.c_str());
    }
    tick.expires_after(100ms);
    boost::system::error_code ec;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  run.endedNs = std::min<int64_t>(wallNs() - t0, plan.durationNs);
  if (options.metrics) options.metrics->set("rdmachaos_run_aborted", "1 once a guardrail, a lost agent or the operator aborted the run", aborted);
  if (aborted) {
    std::fprintf(stderr, "aborting: %s — reverting every fault\n", run.abortReason.c_str());
    for (auto& c : fleet.clients()) {
      if (!c->connected()) continue;
      auto r = co_await c->request("revert_all", json::object(), 10s);
      if (!r) log::error("revert on {}: {}", c->node().name, r.error().message);
    }
  }
  co_await workload.stop(5s);
  co_await workload.wait(10s);
  // Faults end by themselves by their lifetime; wait (bounded) for the last reports.
  asio::steady_timer wait(io);
  auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until &&
         std::any_of(scheduled.begin(), scheduled.end(),
                     [](const Scheduled& s) { return !s.ended && s.client->connected(); })) {
    wait.expires_after(50ms);
    boost::system::error_code ec;
    co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  signals.cancel();
  if (fabric) run.fabric = fabric->finish();
  for (auto& cs : run.counters)
    if (cs.after.empty()) cs.after = countersNow(cs.node);
  // A NIC counter that had not arrived when a trial's first snapshot was taken starts from the
  // node's first sample (the agent sends every value in it), within ~100 ms of the start.
  for (auto& cs : run.counters)
    for (const auto& ns : workload.series().nodes)
      if (ns.node == cs.node && !ns.nicSamples.empty())
        for (const auto& [name, v] : ns.nicSamples.front().second) cs.before.emplace(name, v);

  // ---- the series on the run's timeline
  const auto& ws = workload.series();
  for (const auto& ns : ws.nodes) {
    std::vector<std::pair<int64_t, double>> samples;
    for (const auto& b : ns.bins) samples.emplace_back(b.tNs, double(b.bytes));
    run.series[ns.node] = rebin(samples, ws.binNs, t0, run.binNs, run.endedNs);
    std::map<std::string, uint64_t> nicNow;
    for (const auto& [tNs, changed] : ns.nicSamples) {
      for (const auto& [name, v] : changed) nicNow[name] = v;
      NicPoint p = nicHighlights(nicNow);
      p.tNs = tNs - t0;
      run.nic[ns.node].push_back(p);
    }
    for (const auto& it : ns.iterations)
      if (it.ok) run.iterations.push_back({ns.node, int64_t(it.index), it.startNs - t0, it.endNs - t0});
    if (!ns.error.empty() && run.abortReason.empty() && ns.endReason == "error")
      log::warn("workload on {} ended with an error: {}", ns.node, ns.error);
  }
  for (auto& c : fleet.clients()) c->close();
  co_return run;
}

}  // namespace rc::controller
