// Controller side of a workload: start at a common instant, put telemetry on the run's
// timeline (controller/run/timeline.hpp), stop, and the statistics the CLI and the scorer print.
#include "controller/run/workload_run.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <cmath>
#include <utility>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "controller/fleet/schedule_fault.hpp"
#include "faults/fault.hpp"
#include "workload/kinds.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {
// Telemetry bins more than this past the controller's now are a broken clock, not traffic.
constexpr int64_t kTelemetryHorizonNs = 60'000'000'000;
}  // namespace

struct WorkloadRun::Impl {
  asio::io_context& io;
  std::vector<std::shared_ptr<AgentClient>> ranks;
  WorkloadSpec spec;
  WorkloadSeries series;
  asio::steady_timer wake;
  std::function<void()> update;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  Impl(asio::io_context& i, std::vector<std::shared_ptr<AgentClient>> r, WorkloadSpec s)
      : io(i), ranks(std::move(r)), spec(std::move(s)), wake(i) {}

  void handle(size_t rank, const json& m) {
    const std::string type = m.value("type", "");
    NodeSeries& ns = series.nodes[rank];
    if (type == "telemetry") {
      auto t = proto::parseTelemetry(m);
      if (!t) {
        log::warn("{}: bad telemetry: {}", ns.node, t.error().message);
        return;
      }
      if (t->workloadId != series.workloadId) return;
      ns.timeline.add(*t, wallNs() - series.startNs + kTelemetryHorizonNs);
      ns.counters = t->counters;
      if (t->nic) {
        // At most as many names per node as one message may carry: an agent that sends new names
        // in every message would otherwise grow this map (and the run's series) without end.
        size_t before = ns.nicDropped;
        for (const auto& [name, v] : t->nic->values) {
          if (ns.nic.size() < proto::kMaxNicCounters || ns.nic.count(name))
            ns.nic[name] = v;
          else
            ns.nicDropped++;
        }
        if (before == 0 && ns.nicDropped)
          log::warn("{}: more than {} distinct NIC counter names; the new ones are ignored", ns.node,
                    proto::kMaxNicCounters);
        ns.nicSamples.emplace_back(ns.timeline.map().runNs(t->nic->tNs), t->nic->values);
      }
    } else if (type == "workload_ended") {
      auto e = proto::parseWorkloadEnded(m);
      if (!e) {
        log::warn("{}: bad workload_ended: {}", ns.node, e.error().message);
        return;
      }
      if (e->workloadId != series.workloadId) return;
      ns.ended = true;
      ns.endReason = e->endReason;
      ns.error = e->error;
      ns.note = e->note;
      ns.verified = e->verified;
      ns.counters = e->counters;
      wake.cancel();
    } else {
      return;
    }
    if (update) update();
  }
};

WorkloadRun::WorkloadRun(asio::io_context& io, std::vector<std::shared_ptr<AgentClient>> ranks,
                         WorkloadSpec spec, std::string workloadId)
    : impl_(std::make_shared<Impl>(io, std::move(ranks), std::move(spec))) {
  auto& s = impl_->series;
  s.workloadId = std::move(workloadId);
  s.kind = impl_->spec.kind;
  s.world = int(impl_->ranks.size());
  s.size = impl_->spec.size;
  s.binNs = std::chrono::duration_cast<std::chrono::nanoseconds>(impl_->spec.bin).count();
  if (const workload::Kind* k = workload::findKind(s.kind)) {
    s.busFactor = k->busFactor(size_t(s.world));
    s.algBytes = k->algBytes ? k->algBytes(s.size, s.world) : 0;
  }
  for (size_t r = 0; r < impl_->ranks.size(); r++) {
    NodeSeries ns;
    ns.node = impl_->ranks[r]->node().name;
    ns.rank = int(r);
    // start() sets t = 0 once it picks the common start.
    ns.timeline = NodeTimeline(ns.node, {impl_->ranks[r]->clock().offsetNs, 0}, s.binNs);
    s.nodes.push_back(std::move(ns));
    // The handler outlives nothing: it checks that the run still exists.
    std::weak_ptr<Impl> weak = impl_;
    impl_->ranks[r]->onEvent([weak, r](const json& m) {
      if (auto i = weak.lock()) i->handle(r, m);
    });
  }
}

WorkloadRun::~WorkloadRun() = default;

asio::awaitable<Result<void>> WorkloadRun::start(Duration timeout) {
  auto impl = impl_;
  auto& spec = impl->spec;
  auto& s = impl->series;
  const workload::Kind* kind = workload::findKind(spec.kind);
  if (!kind) co_return makeError("unknown workload kind '" + spec.kind + "' (known: " + workload::kindNames() + ")");
  if (impl->ranks.size() < 2) co_return makeError("a workload needs at least 2 nodes");
  const workload::External* ext = kind->external;
  const std::string name(kind->name);
  if (ext) {
    if (ext->ranks > 0 && impl->ranks.size() != size_t(ext->ranks))
      co_return makeError(name + " runs between exactly 2 nodes (" + std::string(ext->ranksLong) + "), not " +
                          std::to_string(impl->ranks.size()));
    if (spec.iterations) co_return makeError(name + " runs for a duration, not a count of iterations");
    if (!spec.perftest.empty() && !ext->knowsProgram(spec.perftest))
      co_return makeError(name + " test '" + spec.perftest + "' is unknown (known: " + ext->programs() + ")");
  }
  if (spec.transport == "verbs" || (ext && ext->rdma)) {
    // Refuse before anything starts, from what the agents reported when they connected.
    for (const auto& c : impl->ranks) {
      if (!faults::hasActiveRdmaPort(c->hello().value("capabilities", json::object())))
        co_return makeError("node '" + c->node().name + "' has no RDMA device with an ACTIVE port " +
                            "(its agent reports none): " +
                            (ext ? name : std::string("transport \"verbs\"")) +
                            " needs one on every workload node; nothing was started");
    }
  }
  int receiver = int(impl->ranks.size()) - 1;
  std::vector<proto::WorldMember> world;
  for (size_t r = 0; r < impl->ranks.size(); r++) {
    const Node& n = impl->ranks[r]->node();
    if (n.dataAddresses.empty())
      co_return makeError("node '" + n.name +
                          "' has no data_addresses in the inventory: the workload runs on the "
                          "data plane, never on the management address");
    if (n.name == spec.incastReceiver) receiver = int(r);
    world.push_back({int(r), n.dataAddresses[0], spec.port});
  }
  if (!spec.incastReceiver.empty() && impl->ranks[size_t(receiver)]->node().name != spec.incastReceiver)
    co_return makeError("incast receiver '" + spec.incastReceiver + "' is not one of the nodes");
  workload::Shape shape{kind, 0, int(impl->ranks.size()), spec.size, receiver, spec.fanIn};
  if (auto v = workload::validateShape(shape); !v) co_return v.error();

  int64_t maxRtt = 0;
  for (auto& c : impl->ranks) maxRtt = std::max(maxRtt, c->clock().rttNs);
  Duration lead = spec.lead.count() > 0
                      ? spec.lead
                      : std::max<Duration>(300ms, std::chrono::nanoseconds(maxRtt * 20));
  s.startNs = wallNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(lead).count();
  for (size_t r = 0; r < impl->ranks.size(); r++) {
    const TimelineMap map{impl->ranks[r]->clock().offsetNs, s.startNs};
    s.nodes[r].timeline = NodeTimeline(s.nodes[r].node, map, s.binNs);
  }
  auto ms = [](Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };

  std::vector<std::string> refused(impl->ranks.size());
  std::vector<bool> accepted(impl->ranks.size(), false);
  std::vector<std::function<asio::awaitable<void>()>> tasks;
  for (size_t r = 0; r < impl->ranks.size(); r++) {
    proto::WorkloadStart w;
    w.workloadId = s.workloadId;
    w.kind = spec.kind;
    w.rank = int(r);
    w.world = world;
    w.size = spec.size;
    w.streams = spec.streams;
    w.incastReceiver = receiver;
    w.fanIn = spec.fanIn;
    w.binUs = std::chrono::duration_cast<std::chrono::microseconds>(spec.bin).count();
    w.reconnectTimeoutMs = ms(spec.reconnectTimeout);
    w.startNs = s.startNs;
    w.clockOffsetNs = s.nodes[r].timeline.map().offsetNs;  // the agent's bins align with the run's
    w.checksum = spec.checksum;
    w.transport = spec.transport;
    w.qp = spec.qp;
    if (ext && ext->programIs == "job id")
      w.job = spec.perftest;
    else if (ext)
      w.perftest = spec.perftest.empty() ? std::string(ext->defaultProgram) : spec.perftest;
    if (ext && ext->launches)
      for (const auto& c : impl->ranks) w.nodes.push_back(c->node().name);
    if (spec.iterations)
      w.iterations = spec.iterations;
    else
      w.durationMs = ms(spec.duration);
    json body = proto::toJson(w);
    tasks.push_back([impl, r, body, timeout, &refused, &accepted]() -> asio::awaitable<void> {
      auto rep = co_await impl->ranks[r]->request("workload_start", body, timeout);
      if (rep)
        accepted[r] = true;
      else
        refused[r] = rep.error().message;
    });
  }
  co_await whenAll(impl->io, std::move(tasks));
  std::string errors;
  for (auto& e : refused)
    if (!e.empty()) errors += (errors.empty() ? "" : "; ") + e;
  if (errors.empty()) co_return Result<void>{};
  // Nothing half-started stays behind.
  std::vector<std::function<asio::awaitable<void>()>> stops;
  for (size_t r = 0; r < impl->ranks.size(); r++) {
    if (!accepted[r]) {
      impl->series.nodes[r].ended = true;
      impl->series.nodes[r].endReason = "refused";
      impl->series.nodes[r].error = refused[r];
      continue;
    }
    json body = proto::toJson(proto::WorkloadStop{s.workloadId});
    stops.push_back([impl, r, body, timeout]() -> asio::awaitable<void> {
      (void)co_await impl->ranks[r]->request("workload_stop", body, timeout);
    });
  }
  co_await whenAll(impl->io, std::move(stops));
  co_return makeError(errors);
}

asio::awaitable<bool> WorkloadRun::wait(Duration limit) {
  auto impl = impl_;
  auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool all = true, lost = false;
    for (size_t r = 0; r < impl->ranks.size(); r++) {
      all = all && impl->series.nodes[r].ended;
      lost = lost || (!impl->series.nodes[r].ended && !impl->ranks[r]->connected());
    }
    if (all) co_return true;
    if (lost || std::chrono::steady_clock::now() >= end) co_return false;
    // Woken by workload_ended; the periodic wake notices lost sessions.
    impl->wake.expires_after(std::min<Duration>(200ms, end - std::chrono::steady_clock::now()));
    boost::system::error_code ec;
    co_await impl->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> WorkloadRun::stop(Duration timeout) {
  auto impl = impl_;
  std::vector<std::function<asio::awaitable<void>()>> stops;
  for (size_t r = 0; r < impl->ranks.size(); r++) {
    if (impl->series.nodes[r].ended || !impl->ranks[r]->connected()) continue;
    json body = proto::toJson(proto::WorkloadStop{impl->series.workloadId});
    stops.push_back([impl, r, body, timeout]() -> asio::awaitable<void> {
      (void)co_await impl->ranks[r]->request("workload_stop", body, timeout);
    });
  }
  co_await whenAll(impl->io, std::move(stops));
}

const WorkloadSeries& WorkloadRun::series() const { return impl_->series; }

std::vector<std::pair<int64_t, std::map<std::string, uint64_t>>> WorkloadRun::takeNicSamples(size_t rank) {
  if (rank >= impl_->series.nodes.size()) return {};
  return std::exchange(impl_->series.nodes[rank].nicSamples, {});
}

bool WorkloadRun::allEnded() const {
  for (const auto& n : impl_->series.nodes)
    if (!n.ended) return false;
  return true;
}

void WorkloadRun::onUpdate(std::function<void()> h) { impl_->update = std::move(h); }

WorkloadStats workloadStats(const WorkloadSeries& s, int64_t from, int64_t to) {
  std::vector<int64_t> d;
  for (const auto& n : s.nodes)
    for (const auto& it : n.timeline.iterations())
      if (it.ok && it.endNs >= from && it.endNs < to) d.push_back(it.endNs - it.startNs);
  WorkloadStats st;
  st.count = d.size();
  if (d.empty()) return st;
  std::sort(d.begin(), d.end());
  st.p50Ns = d[d.size() / 2];
  st.p99Ns = d[std::min(d.size() - 1, d.size() * 99 / 100)];
  st.maxNs = d.back();
  if (s.algBytes == 0) {
    // Records of unequal size (perftest's report periods): their bytes over their time.
    double bytes = 0, ns = 0;
    for (const auto& n : s.nodes)
      for (const auto& it : n.timeline.iterations())
        if (it.ok && it.endNs >= from && it.endNs < to) {
          bytes += double(it.rxBytes);
          ns += double(it.endNs - it.startNs);
        }
    if (ns > 0) st.algbw = bytes / (ns / 1e9);
    st.busbw = st.algbw * s.busFactor;
  } else if (st.p50Ns > 0) {
    st.algbw = double(s.algBytes) / (double(st.p50Ns) / 1e9);
    st.busbw = st.algbw * s.busFactor;
  }
  return st;
}

std::optional<int64_t> telemetryThroughNs(const WorkloadSeries& s) {
  std::optional<int64_t> through;
  for (const auto& n : s.nodes) {
    auto end = n.timeline.throughNs();
    if (!end) continue;
    through = through ? std::min(*through, *end) : *end;
  }
  return through;
}

json toJson(const WorkloadSeries& s) {
  json nodes = json::array();
  for (const auto& n : s.nodes) {
    json bins = json::array(), its = json::array();
    const TimelineMap& map = n.timeline.map();
    // Whole byte counts as integers, as the agents sent them (a split bin keeps its fraction).
    for (const auto& b : n.timeline.bins())
      bins.push_back({map.controllerNs(b.tNs),
                      b.bytes == std::floor(b.bytes) ? json(uint64_t(b.bytes)) : json(b.bytes)});
    for (const auto& i : n.timeline.iterations())
      its.push_back({{"i", i.iteration}, {"start_ns", map.controllerNs(i.startNs)},
                     {"end_ns", map.controllerNs(i.endNs)}, {"rx_bytes", i.rxBytes}, {"ok", i.ok}});
    const auto& c = n.counters;
    nodes.push_back({{"node", n.node},
                     {"rank", n.rank},
                     {"clock_offset_ns", map.offsetNs},
                     {"ended", n.ended},
                     {"end_reason", n.endReason},
                     {"error", n.error},
                     {"verified", n.verified},
                     {"counters", {{"iterations", c.iterations},
                                   {"failed_iterations", c.failedIterations},
                                   {"verify_failures", c.verifyFailures},
                                   {"errors", c.errors},
                                   {"corruptions", c.corruptions},
                                   {"reconnects", c.reconnects},
                                   {"rx_bytes", c.rxBytes}}},
                     {"bins", bins},
                     {"iterations", its}});
  }
  return json{{"workload", s.workloadId}, {"kind", s.kind},       {"world", s.world},
              {"size", s.size},           {"alg_bytes", s.algBytes}, {"bus_factor", s.busFactor},
              {"start_ns", s.startNs},    {"bin_ns", s.binNs},     {"nodes", nodes}};
}

}  // namespace rc::controller
