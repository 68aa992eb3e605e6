// Live playbook runs: one workload over the whole plan, every fault scheduled at its planned
// instant on the common clock, guardrails checked while it runs.
#include "controller/run/run_playbook.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/units.hpp"
#include "controller/run/fabric_sampler.hpp"
#include "controller/fleet/fleet.hpp"
#include "controller/fleet/schedule_fault.hpp"
#include "controller/measure/series.hpp"
#include "controller/run/timeline.hpp"
#include "controller/run/workload_run.hpp"
#include "faults/fault.hpp"
#include "metrics/exporter.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Telemetry arrives at least every 100 ms: decisions about "now" look this far back, or
// further when a node's telemetry is later than that (liveInstant).
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

std::vector<std::pair<std::string, uint64_t>> exportedCounters(const std::map<std::string, uint64_t>& counters,
                                                               size_t cap, size_t& dropped) {
  // Rank: 0 workload, 1 RDMA port, 2 interface statistics, 3 ethtool, 4 ethtool per queue.
  auto rank = [](const std::string& name) {
    if (name.rfind("workload_", 0) == 0) return 0;
    if (name.rfind("rdma.", 0) == 0) return 1;
    if (name.rfind("net.", 0) == 0) return 2;
    // A per-queue name: letters, digits, '_' (rx12_packets), possibly behind an interface prefix.
    size_t start = name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1;
    size_t i = start;
    while (i < name.size() && std::isalpha(static_cast<unsigned char>(name[i]))) i++;
    size_t digits = i;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) i++;
    return i > digits && i > start && i < name.size() && name[i] == '_' ? 4 : 3;
  };
  std::vector<std::pair<int, const std::pair<const std::string, uint64_t>*>> order;
  order.reserve(counters.size());
  for (const auto& c : counters) order.push_back({rank(c.first), &c});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < order.size() && i < cap; i++) out.push_back(*order[i].second);
  dropped = counters.size() - out.size();
  return out;
}

namespace {

// One live run of a plan, one method per phase: connect, watch for aborts, start the workload,
// schedule the faults, live (guardrails, progress, metrics), wind down, collect the series.
// It lives in executePlan's coroutine frame; its handlers on the fleet's clients end with it
// (every client is closed before execute() returns).
class PlanRun {
 public:
  PlanRun(asio::io_context& io, const Playbook& playbook, const Plan& plan, const Inventory& inventory,
          asio::ssl::context& tls, RunnerOptions options)
      : io_(io), playbook_(playbook), plan_(plan), inventory_(inventory), options_(options),
        ctl_(newControllerId()), fleet_(io, tls, ctl_), tick_(io) {
    run_.plan = plan;
    run_.inventoryPath = inventory.path;
    run_.binNs = playbook.scoring.binNs;
  }

  static asio::awaitable<RunResult> execute(PlanRun& self) {
    // Each result is awaited into a local, never inside an `if` condition: GCC 12 miscompiled
    // `if (!co_await connect(self)) co_return self.finish();` (the frame was garbage when
    // connect() started; a crash in every run).
    bool connected = co_await connect(self);
    if (!connected) co_return self.finish();
    self.settleSteps();
    self.watchForAbort();
    bool started = co_await startWorkload(self);
    if (!started) co_return self.finish();
    co_await scheduleFaults(self);
    co_await live(self);
    co_await windDown(self);
    self.collectSeries();
    co_return self.finish();
  }

 private:
  // The phases that wait are static coroutines taking the run by reference (named functions
  // with explicit arguments, as every coroutine here).
  //
  // Every node the run touches (the workload's and the fault targets): connected, clocks
  // measured, heartbeats on. False (abortReason set) when one cannot be reached.
  static asio::awaitable<bool> connect(PlanRun& self) {
    std::vector<std::string> names = self.plan_.workloadNodes;
    for (const auto& t : self.plan_.trials)
      for (const auto& f : t.faults)
        if (std::find(names.begin(), names.end(), f.node) == names.end()) names.push_back(f.node);
    std::vector<const Node*> nodes;
    for (const auto& n : names)
      if (auto* node = self.inventory_.find(n)) {
        nodes.push_back(node);
        self.run_.inventoryNodes.push_back(*node);
      }
    if (self.options_.progress) std::fprintf(stderr, "connecting to %zu agent(s)...\n", nodes.size());
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    ConnectProgressFn progress = self.options_.progress ? stderrConnectProgress() : ConnectProgressFn();
    co_await self.fleet_.connect(nodes, self.options_.connectTimeout, 8, progress);
    for (auto& c : self.fleet_.clients())
      self.run_.clocks.push_back({c->node().name, c->clock().offsetNs, c->clock().uncertaintyNs, c->clock().rttNs});
    if (const auto& errs = self.fleet_.errors(); !errs.empty()) {
      // Every unreachable agent by name (the first few with why): a cluster operator fixes
      // them all before the next attempt, not one per attempt.
      std::string& why = self.run_.abortReason;
      if (errs.size() == 1) {
        why = "cannot reach agent " + errs.front().first + ": " + errs.front().second;
      } else {
        why = "cannot reach " + std::to_string(errs.size()) + " of " + std::to_string(nodes.size()) + " agents:";
        for (size_t i = 0; i < errs.size(); i++) why += (i ? ", " : " ") + errs[i].first;
        for (size_t i = 0; i < errs.size() && i < 3; i++) why += "; " + errs[i].first + ": " + errs[i].second;
        if (errs.size() > 3) why += "; ...";
      }
      co_return false;
    }
    for (auto& c : self.fleet_.clients()) c->startHeartbeats();
    co_return true;
  }

  // Each step's parameters that depend on its agents (incast's transport = "auto" becomes
  // "verbs" or "tcp" for its receiver and all its senders together) are settled once the agents
  // are connected, from what they reported; the result's plan shows what ran.
  void settleSteps() {
    for (auto& t : plan_.trials) {
      std::map<std::string, std::vector<PlannedFault*>> steps;
      for (auto& f : t.faults) steps[f.step].push_back(&f);
      for (auto& [step, faults] : steps) {
        std::vector<json*> params;
        std::vector<std::shared_ptr<AgentClient>> nodes;
        for (auto* f : faults) {
          params.push_back(&f->params);
          nodes.push_back(fleet_.find(f->node));
        }
        settleStep(faults.front()->kind, params, nodes);
      }
    }
    run_.plan = plan_;
  }

  // The abort plumbing: guardrails call abort(); lost agents and Ctrl-C too.
  void abort(std::string why) {
    if (aborted_) return;
    aborted_ = true;
    run_.abortReason = std::move(why);
    tick_.cancel();
  }
  void watchForAbort() {
    signals_.emplace(io_, SIGINT, SIGTERM);
    signals_->async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) abort("interrupted by the operator");
    });
    for (auto& c : fleet_.clients()) {
      std::string node = c->node().name;
      c->onLost([this, node](const std::string& why) {
        if (playbook_.guardrails.abortOnAgentLoss) abort("lost agent " + node + ": " + why);
      });
    }
  }

  // The workload: one run across the whole plan; its start is the run's t = 0. Fabric evidence
  // (lab switch counters and events) for the whole run, where there is a switch.
  static asio::awaitable<bool> startWorkload(PlanRun& self) {
    std::vector<std::shared_ptr<AgentClient>> ranks;
    for (const auto& n : self.plan_.workloadNodes) ranks.push_back(self.fleet_.find(n));
    WorkloadSpec spec;
    spec.kind = self.playbook_.workload.kind->name;
    spec.size = self.playbook_.workload.sizeBytes;
    spec.streams = self.playbook_.workload.streams;
    spec.transport = self.playbook_.workload.transport;
    spec.qp = self.playbook_.workload.qp;
    spec.perftest = self.playbook_.workload.test;
    spec.bin = std::chrono::nanoseconds(self.run_.binNs);  // telemetry lands on the run's grid
    spec.duration = std::chrono::nanoseconds(self.plan_.durationNs + kRunWorkloadTailNs);
    // A job the agents launch (mpi) starts its launch this long before t = 0, so that its ranks
    // report from the baseline on ([workload] launch).
    spec.lead = self.playbook_.workload.launchNs > 0 ? std::chrono::nanoseconds(self.playbook_.workload.launchNs)
                                                     : std::chrono::nanoseconds(1s);
    self.workload_ = std::make_unique<WorkloadRun>(self.io_, ranks, spec, "wl-" + self.ctl_.substr(self.ctl_.size() - 4));
    auto started = co_await self.workload_->start(self.options_.connectTimeout);
    if (!started) {
      self.run_.abortReason = "workload did not start: " + started.error().message;
      co_return false;
    }
    self.t0_ = self.workload_->series().startNs;  // the run's t = 0, controller clock
    self.run_.startedUnixNs = self.t0_;
    if (!self.inventory_.switchControl.empty()) {
      // An incast's flows into its receiver are metered on the wire: when they stopped is the
      // ground truth its recovery is read against.
      std::set<FabricMeter> meters;
      for (const auto& t : self.plan_.trials)
        for (const auto& f : t.faults)
          if (auto port = faultMeterPort(f.kind, f.role, f.params)) meters.insert({f.node, *port});
      self.fabric_ = std::make_unique<FabricSampler>(self.inventory_.switchControl, self.t0_,
                                                std::vector<FabricMeter>(meters.begin(), meters.end()));
    }
    co_return true;
  }

  // Every fault, scheduled now for its planned instant (agents hold them until then); their
  // fault_ended reports give the actual applied and reverted times. Concurrently across
  // agents, in plan order on each: a step on every node of a large cluster is one round trip
  // and one journal flush per node, which in turn would take seconds and could pass the
  // step's instant.
  struct Attempt {
    FaultRecord record;
    Scheduled s;
    const PlannedFault* fault = nullptr;
    bool tried = false, ok = false;
  };
  static asio::awaitable<void> scheduleOnNode(PlanRun& self, std::vector<Attempt>& attempts, std::vector<size_t> list) {
    for (size_t i : list) {
      if (self.aborted_) break;
      Attempt& at = attempts[i];
      const PlannedFault& f = *at.fault;
      at.tried = true;
      auto r = co_await scheduleFault(at.s.client, at.s.id, f.kind, f.params, self.t0_ + f.atNs, f.forNs,
                                      self.options_.connectTimeout);
      if (!r) {
        at.record.error = r.error().message;
        self.abort("fault " + f.step + " on " + f.node + " refused: " + r.error().message);
        break;
      }
      at.ok = true;
    }
  }
  static asio::awaitable<void> scheduleFaults(PlanRun& self) {
    for (auto& c : self.fleet_.clients()) c->onEvent([rp = &self](const json& m) { rp->faultEnded(m); });
    std::vector<Attempt> attempts;
    std::map<std::string, std::vector<size_t>> perNode;  // node -> attempts, in plan order
    for (const auto& trial : self.plan_.trials) {
      for (const auto& f : trial.faults) {
        Attempt at;
        at.record.trial = trial.index;
        at.record.step = f.step;
        at.record.node = f.node;
        at.record.kind = f.kind;
        at.record.role = f.role;
        at.record.params = f.params;
        at.record.scheduledNs = f.atNs;
        at.s = Scheduled{0, faultId(self.ctl_.substr(self.ctl_.size() - 16), trial.index, f.step, f.node),
                         self.fleet_.find(f.node)};
        at.fault = &f;
        perNode[f.node].push_back(attempts.size());
        attempts.push_back(std::move(at));
      }
    }
    std::vector<std::function<asio::awaitable<void>()>> tasks;
    for (const auto& [node, list] : perNode)
      tasks.push_back([&self, &attempts, list = list]() { return scheduleOnNode(self, attempts, list); });
    co_await whenAll(self.io_, std::move(tasks));
    // The result lists what was sent (or refused), in plan order, as before.
    for (auto& at : attempts) {
      if (!at.tried) continue;
      self.run_.faults.push_back(std::move(at.record));
      if (!at.ok) continue;
      at.s.record = self.run_.faults.size() - 1;
      self.byId_[at.s.id] = self.scheduled_.size();
      self.scheduled_.push_back(std::move(at.s));
    }
    // Reports that came before their schedule was registered (a fault shorter than the rest
    // of the fan-out).
    self.registering_ = false;
    auto early = std::move(self.early_);
    for (const auto& m : early) self.faultEnded(m);
  }

  void faultEnded(const json& m) {
    auto ended = proto::parseFaultEnded(m);
    if (!ended) return;
    const json& rec = ended->record;
    auto it = byId_.find(ended->faultId);
    if (it == byId_.end()) {
      if (registering_) early_.push_back(m);  // scheduleFaults takes it once it is registered
      return;
    }
    Scheduled& s = scheduled_[it->second];
    s.ended = true;
    FaultRecord& fr = run_.faults[s.record];
    // The actual times: the first and last transitions the agent observed (kernel
    // notifications for link_flap), else when it applied and ended the fault.
    const json& events = rec.value("events", json::array());
    int64_t applied = rec.value("applied_ns", int64_t(0));
    int64_t reverted = rec.value("ended_ns", int64_t(0));
    if (!events.empty()) {
      applied = events.front().value("t_ns", applied);
      reverted = events.back().value("t_ns", reverted);
    }
    const TimelineMap map{s.client->clock().offsetNs, t0_};
    fr.events.clear();
    // The first events and the last few (a fault's summary comes at its end: a packet fault's
    // counts after its acted-on frames), with the count of the ones between.
    const size_t n = events.size(), tail = kKeptTailEvents;
    for (size_t i = 0; i < n; i++) {
      if (n > kMaxFaultEvents && i == kMaxFaultEvents - tail) {
        fr.events.push_back({fr.events.back().tNs, "events_omitted", std::to_string(n - kMaxFaultEvents)});
        i = n - tail;
      }
      const json& e = events[i];
      fr.events.push_back({map.runNs(e.value("t_ns", int64_t(0))), e.value("what", std::string()),
                           e.value("detail", std::string()).substr(0, 1000)});
    }
    if (applied > 0) fr.appliedNs = map.runNs(applied);
    if (reverted > 0) fr.revertedNs = map.runNs(reverted);
    if (!rec.value("error", std::string()).empty()) fr.error = rec["error"];
  }

  // The job's throughput on the run's grid between two run times.
  Grid jobGrid(int64_t fromRel, int64_t toRel) const {
    std::vector<Grid> grids;
    for (const auto& ns : workload_->series().nodes)
      grids.push_back(toGrid(ns.timeline.bins(), run_.binNs, fromRel, toRel));
    return sumGrids(grids);
  }

  std::map<std::string, uint64_t> countersNow(const std::string& node) const {
    std::map<std::string, uint64_t> m;
    for (const auto& ns : workload_->series().nodes) {
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
  }

  // Live: progress, guardrails, counter snapshots, until the plan ends or an abort.
  static asio::awaitable<void> live(PlanRun& self) {
    while (!self.aborted_) {
      int64_t now = wallNs() - self.t0_;
      if (now >= self.plan_.durationNs + kTelemetryLagNs) break;
      self.checkTrials(now);
      self.show(now);
      self.tick_.expires_after(100ms);
      boost::system::error_code ec;
      co_await self.tick_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  // Counter snapshots at each trial's edges, the baseline floor and the stall guardrail.
  void checkTrials(int64_t now) {
    for (const auto& trial : plan_.trials) {
      if (now >= trial.startNs && before_.insert(trial.index).second)
        for (const auto& n : plan_.workloadNodes) run_.counters.push_back({trial.index, n, countersNow(n), {}});
      if (now >= trial.endNs + kTelemetryLagNs && after_.insert(trial.index).second)
        for (auto& cs : run_.counters)
          if (cs.trial == trial.index) cs.after = countersNow(cs.node);
      // The baseline, once it is complete: below the floor means the fabric is not fit to test.
      if (!baselines_.count(trial.index) && liveInstant(now) >= trial.baselineToNs) {
        auto b = baselineRate(jobGrid(trial.baselineFromNs, trial.baselineToNs), trial.baselineFromNs,
                              trial.baselineToNs, playbook_.scoring.smoothNs);
        baselines_[trial.index] = b.value_or(0);
        if (playbook_.guardrails.minBaselineBytesPerSec > 0 && b.value_or(0) < playbook_.guardrails.minBaselineBytesPerSec)
          abort("baseline " + formatBitRate(b.value_or(0) * 8) + " of trial " + trial.label() +
                " is below the floor of " + formatBitRate(playbook_.guardrails.minBaselineBytesPerSec * 8));
      }
      if (playbook_.guardrails.maxStallNs > 0 && baselines_.count(trial.index) && now >= trial.startNs &&
          now < trial.endNs + kTelemetryLagNs) {
        int64_t to = liveInstant(now), from = to - playbook_.guardrails.maxStallNs;
        if (from >= trial.baselineToNs) {
          Grid g = jobGrid(from, to);
          bool stalled = g.size() > 0;
          for (size_t i = 0; i < g.size() && stalled; i++)
            stalled = g.rate(i) < playbook_.scoring.stallFraction * baselines_[trial.index];
          if (stalled)
            abort("the job stalled for longer than " + formatDuration(Nanos(playbook_.guardrails.maxStallNs)) +
                  " in trial " + trial.label());
        }
      }
    }
  }

  // The run-timeline instant that live figures describe: kTelemetryLagNs back, or the end of
  // the slowest node's newest bin if that is earlier (a node whose telemetry is late would
  // otherwise read as a stall, and the job's throughput as a fall).
  int64_t liveInstant(int64_t now) const {
    int64_t at = now - kTelemetryLagNs;
    if (auto through = telemetryThroughNs(workload_->series())) at = std::min(at, *through);
    return at;
  }

  // The live metrics (run --metrics) and the progress line, for one instant.
  void show(int64_t now) {
    // One instant for every figure: the phase, the faults and the throughput are all those
    // of `at`, and the progress line says how far behind now it is (measured, not assumed).
    const int64_t at = liveInstant(now);
    std::string phase = "-", label;
    int trialIndex = -1;
    for (const auto& trial : plan_.trials)
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
      const int64_t to = at / run_.binNs * run_.binNs;
      for (const auto& ns : workload_->series().nodes) {
        Grid g = toGrid(ns.timeline.bins(), run_.binNs, to - 1'000'000'000, to);
        double sum = 0;
        for (double b : g.bytes) sum += b;
        nodeBytes[ns.node] = sum;
        jobBytes += sum;
      }
    }
    std::vector<const FaultRecord*> activeFaults;
    for (const auto& s : scheduled_) {
      const auto& fr = run_.faults[s.record];
      // On at `at`: applied by then (or due, before the agent's report arrives) and not reverted.
      bool begun = fr.appliedNs ? *fr.appliedNs <= at : fr.scheduledNs <= at;
      bool over = fr.revertedNs ? *fr.revertedNs <= at : s.ended;
      if (begun && !over && fr.error.empty()) activeFaults.push_back(&fr);
    }
    if (options_.metrics) {
      metrics::Exporter& m = *options_.metrics;
      m.set("rdmachaos_run_elapsed_seconds", "seconds of the plan behind the run (telemetry's instant)", at / 1e9);
      m.set("rdmachaos_run_duration_seconds", "the plan's length", plan_.durationNs / 1e9);
      m.set("rdmachaos_run_trial", "the trial running (its index; -1 between trials)", trialIndex);
      m.set("rdmachaos_run_phase", "1 for the phase running", {{"trial", label}, {"phase", phase}}, 1);
      m.retain("rdmachaos_run_phase", {{{"trial", label}, {"phase", phase}}});
      m.set("rdmachaos_job_throughput_bits_per_second", "the job's throughput over the last second", jobBytes * 8);
      std::vector<std::map<std::string, std::string>> faults, counterSeries;
      for (const auto& [node, bytes] : nodeBytes) {
        m.set("rdmachaos_node_throughput_bits_per_second", "a node's workload throughput over the last second",
              {{"node", node}}, bytes * 8);
        size_t dropped = 0;
        for (const auto& [name, v] : exportedCounters(countersNow(node), kMaxCounterSeriesPerNode, dropped)) {
          counterSeries.push_back({{"node", node}, {"counter", name}});
          m.set("rdmachaos_node_counter", "a node's workload and NIC counters as last reported", counterSeries.back(),
                double(v));
        }
        m.set("rdmachaos_node_counter_series_dropped",
              "a node's counters not exported, over the cap of series per node (the result has them all)",
              {{"node", node}}, double(dropped));
        if (dropped && cappedNodes_.insert(node).second)
          log::warn("{}: {} of its counters are not served to Prometheus (at most {} series per node); "
                    "result.json has every one",
                    node, dropped, kMaxCounterSeriesPerNode);
      }
      // A counter that fell out of a node's kept set goes, so a node never holds more than the cap.
      m.retain("rdmachaos_node_counter", counterSeries);
      m.set("rdmachaos_faults_active", "faults applied and not yet reverted", double(activeFaults.size()));
      for (const auto* fr : activeFaults) {
        faults.push_back({{"step", fr->step}, {"node", fr->node}, {"kind", fr->kind}});
        m.set("rdmachaos_fault_active", "1 while this fault is on", faults.back(), 1);
      }
      m.retain("rdmachaos_fault_active", faults);
      m.set("rdmachaos_guardrail_max_stall_seconds", "the stall guardrail (0: off)",
            playbook_.guardrails.maxStallNs / 1e9);
      m.set("rdmachaos_guardrail_min_baseline_bits_per_second", "the baseline floor guardrail (0: off)",
            playbook_.guardrails.minBaselineBytesPerSec * 8);
      for (const auto& [trial, b] : baselines_)
        m.set("rdmachaos_trial_baseline_bits_per_second", "a trial's measured baseline",
              {{"trial", std::to_string(trial)}}, b * 8);
      m.set("rdmachaos_run_aborted", "1 once a guardrail, a lost agent or the operator aborted the run", aborted_);
    }
    if (options_.progress && now / 1'000'000'000 != lastProgress_ && now >= 0 && now < plan_.durationNs) {
      lastProgress_ = now / 1'000'000'000;
      auto st = workloadStats(workload_->series(), at - 1'000'000'000, at);
      std::string active;
      for (const auto* fr : activeFaults) active += (active.empty() ? "" : ", ") + fr->step + "@" + fr->node;
      // Long runs (a target sweep over a cluster) say where they are and how long is left.
      std::string where = label;
      if (plan_.trials.size() > 1 && trialIndex >= 0)
        where += ", trial " + std::to_string(trialIndex + 1) + "/" + std::to_string(plan_.trials.size()) + ", " +
                 formatDuration(Nanos((plan_.durationNs - at) / 1'000'000'000 * 1'000'000'000)) + " left";
      std::fprintf(stderr,
                   "[%s] %-10s t=%5.1fs/%.1fs (the second to t; telemetry lags %.1fs)  "
                   "job throughput %-11s busbw %-11s iter p50 %-9s faults on: %s\n",
                   where.c_str(), phase.c_str(), at / 1e9, plan_.durationNs / 1e9, (now - at) / 1e9,
                   at >= 1'000'000'000 ? formatBitRate(jobBytes * 8).c_str() : "-",
                   st.count ? formatBitRate(st.busbw * 8).c_str() : "-",
                   st.count ? formatDuration(Nanos(int64_t(st.p50Ns))).c_str() : "-",
                   active.empty() ? "none" : active.c_str());
    }
  }

  // After the plan or an abort: every fault reverted on an abort, the workload stopped, the
  // last fault reports awaited (bounded), the fabric sampler and counter snapshots closed.
  static asio::awaitable<void> windDown(PlanRun& self) {
    self.run_.endedNs = std::min<int64_t>(wallNs() - self.t0_, self.plan_.durationNs);
    if (self.options_.metrics)
      self.options_.metrics->set("rdmachaos_run_aborted", "1 once a guardrail, a lost agent or the operator aborted the run",
                            self.aborted_);
    if (self.aborted_) {
      std::fprintf(stderr, "aborting: %s — reverting every fault\n", self.run_.abortReason.c_str());
      for (auto& c : self.fleet_.clients()) {
        if (!c->connected()) continue;
        auto r = co_await c->request("revert_all", proto::toJson(proto::RevertAll{}), 10s);
        if (!r) log::error("revert on {}: {}", c->node().name, r.error().message);
      }
    }
    co_await self.workload_->stop(5s);
    co_await self.workload_->wait(10s);
    // Faults end by themselves by their lifetime; wait (bounded) for the last reports.
    asio::steady_timer wait(self.io_);
    auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until &&
           std::any_of(self.scheduled_.begin(), self.scheduled_.end(),
                       [](const Scheduled& s) { return !s.ended && s.client->connected(); })) {
      wait.expires_after(50ms);
      boost::system::error_code ec;
      co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    self.signals_->cancel();
    if (self.fabric_) self.run_.fabric = self.fabric_->finish();
    for (auto& cs : self.run_.counters)
      if (cs.after.empty()) cs.after = self.countersNow(cs.node);
    // A NIC counter that had not arrived when a trial's first snapshot was taken starts from the
    // node's first sample (the agent sends every value in it), within ~100 ms of the start.
    for (auto& cs : self.run_.counters)
      for (const auto& ns : self.workload_->series().nodes)
        if (ns.node == cs.node && !ns.nicSamples.empty())
          for (const auto& [name, v] : ns.nicSamples.front().second) cs.before.emplace(name, v);
  }

  // The series, already on the run's timeline and grid (the workload's bin is the run's), up
  // to where the run got.
  void collectSeries() {
    const auto& ws = workload_->series();
    for (size_t rank = 0; rank < ws.nodes.size(); ++rank) {
      const auto& ns = ws.nodes[rank];
      run_.series[ns.node] = ns.timeline.binsUntil(run_.endedNs);
      std::map<std::string, uint64_t> nicNow;
      // The samples move into the result: the job is over and nothing reads them here again.
      for (auto& [tNs, changed] : workload_->takeNicSamples(rank)) {
        for (const auto& [name, v] : changed) nicNow[name] = v;
        NicPoint p = nicHighlights(nicNow);
        p.tNs = tNs;
        run_.nic[ns.node].push_back(p);
        run_.nicSamples[ns.node].push_back({tNs, std::move(changed)});
      }
      for (const auto& it : ns.timeline.iterations())
        if (it.ok) run_.iterations.push_back(it);
      if (!ns.error.empty() && ns.endReason == "error") run_.workloadErrors[ns.node] = ns.error;
      if (!ns.note.empty()) run_.workloadNotes[ns.node] = ns.note;
      if (!ns.error.empty() && run_.abortReason.empty() && ns.endReason == "error")
        log::warn("workload on {} ended with an error: {}", ns.node, ns.error);
    }
  }

  RunResult finish() {
    for (auto& c : fleet_.clients()) c->close();
    return std::move(run_);
  }

  asio::io_context& io_;
  const Playbook& playbook_;
  Plan plan_;  // a copy: incast's transport = "auto" is decided once the agents are connected
  const Inventory& inventory_;
  RunnerOptions options_;
  RunResult run_;
  std::string ctl_;
  Fleet fleet_;
  asio::steady_timer tick_;
  std::optional<asio::signal_set> signals_;
  bool aborted_ = false;
  std::unique_ptr<WorkloadRun> workload_;
  int64_t t0_ = 0;
  std::unique_ptr<FabricSampler> fabric_;
  std::vector<Scheduled> scheduled_;
  std::map<std::string, size_t> byId_;
  std::vector<json> early_;
  bool registering_ = true;  // scheduleFaults is still sending
  std::map<int, double> baselines_;
  std::set<int> before_, after_;
  int64_t lastProgress_ = -1;
  std::set<std::string> cappedNodes_;  // nodes whose counters were capped (warned once)
};

}  // namespace

asio::awaitable<RunResult> executePlan(asio::io_context& io, const Playbook& playbook, const Plan& plan,
                                       const Inventory& inventory, asio::ssl::context& tls, RunnerOptions options) {
  auto run = std::make_unique<PlanRun>(io, playbook, plan, inventory, tls, options);
  RunResult result = co_await PlanRun::execute(*run);
  co_return result;
}

}  // namespace rc::controller
