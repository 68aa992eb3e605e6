// Workload lifecycle on the agent: start (listener bound before replying), engine and
// reporter threads, stop on request / lease expiry / maximum duration / shutdown.
#include "agent/workload_manager.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <new>
#include <sstream>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/units.hpp"
#include "counters/nic_counters.hpp"
#include "rdmachaos_config.h"
#include "workload/engine.hpp"
#include "workload/kinds.hpp"
#include "workload/tcp_transport.hpp"
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
#include "workload/verbs_transport.hpp"
#endif

namespace rc::agent {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace wl = rc::workload;

namespace {

// Both ends of a connection derive the same tag from the workload id (FNV-1a).
uint64_t tagOf(const std::string& id) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

proto::TelemetryCounters toProto(const wl::Counters& c) {
  return {int64_t(c.iterations), int64_t(c.failedIterations), int64_t(c.verifyFailures),
          int64_t(c.errors),     int64_t(c.corruptions),      int64_t(c.reconnects),
          int64_t(c.rxBytes)};
}

// What a valid workload_start asks of this agent: its run (the engine's, or an external kind's)
// and the bytes of buffers it holds.
struct WorkloadPlan {
  wl::RunSpec spec;
  std::unique_ptr<wl::ExternalRun> external;
  uint64_t memory = 0;
};

// Validates R (its kind, shape, duration within MAX_DURATION and start time) and plans its run.
Result<WorkloadPlan> planWorkload(const proto::WorkloadStart& r,
                                  std::chrono::milliseconds maxDuration) {
  const wl::Kind* kind = wl::findKind(r.kind);
  if (!kind) return makeError("unknown workload kind '" + r.kind + "' (known: " + wl::kindNames() + ")");
  WorkloadPlan plan;
  wl::RunSpec& spec = plan.spec;
  spec.shape = {kind, r.rank, int(r.world.size()), uint64_t(r.size), r.incastReceiver, r.fanIn};
  if (auto v = wl::validateShape(spec.shape); !v) return v.error();
  if (kind->external) {
    auto p = kind->external->prepare(r);
    if (!p) return p.error();
    plan.external = std::move(*p);
  }
  // Buffers are allocated when it starts: a peer must not make the agent allocate without
  // bound (an incast receiver holds size x fan_in: up to 256 GiB as the protocol allows).
  // An external program allocates its own (perftest: about size per QP on each end).
  plan.memory = plan.external ? plan.external->memory() : wl::makeCollective(spec.shape)->bufferBytes();
  if (r.durationMs > maxDuration.count())
    return makeError("duration of " + std::to_string(r.durationMs) + " ms exceeds this agent's " +
                     "maximum of " + std::to_string(maxDuration.count()) + " ms");
  spec.iterations = uint64_t(r.iterations);
  spec.durationNs = r.durationMs * 1'000'000;
  spec.reconnectTimeoutNs = r.reconnectTimeoutMs * 1'000'000;
  auto start = workloadStartNs(r, wallNs());
  if (!start) return start.error();
  spec.startNs = *start;
  return plan;
}

// The refusal of R, whose buffers (MEMORY bytes) do not fit in this agent's BUDGET beside the
// HELD bytes of the other workloads.
Error workloadMemoryRefusal(const proto::WorkloadStart& r, uint64_t memory, uint64_t held,
                            uint64_t budget) {
  return makeError("this workload needs " + formatSize(memory) + " of buffers (" + r.kind +
                   ", size " + formatSize(uint64_t(r.size)) +
                   std::string(wl::findKind(r.kind)->memoryNote) + ") and this agent holds " +
                   formatSize(held) + " for others, beyond its budget of " + formatSize(budget) +
                   " ([agent] max_workload_memory, default a quarter of the host's or its cgroup's "
                   "memory): lower "
                   "size or fan_in");
}

// A workload's transport and the port it listens on (TCP, or rdma_cm's port space).
struct WorkloadTransport {
  std::unique_ptr<wl::Transport> transport;
  uint16_t port = 0;
};

// Creates R's transport, verbs or TCP: binds its listener, opens the RDMA device.
Result<WorkloadTransport> createWorkloadTransport(const proto::WorkloadStart& r) {
  if (r.transport == "verbs") {
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
    wl::VerbsOptions vo;
    vo.rank = r.rank;
    for (const auto& mb : r.world) vo.world.push_back({mb.address, uint16_t(mb.port)});
    vo.qpsPerPeer = r.streams;
    vo.tag = tagOf(r.workloadId);
    vo.checksum = r.checksum;
    vo.progressTimeoutMs = r.reconnectTimeoutMs;
    vo.timeout = uint8_t(r.qp.timeout);
    vo.retryCount = uint8_t(r.qp.retryCount);
    vo.rnrRetry = uint8_t(r.qp.rnrRetry);
    vo.tos = uint8_t(r.qp.dscp << 2);
    auto v = wl::VerbsTransport::create(vo);
    if (!v) return makeError("cannot run a verbs workload on this node: " + v.error().message);
    const uint16_t port = (*v)->port();
    return WorkloadTransport{std::move(*v), port};
#else
    return makeError("this agent was built without rdma-core (libibverbs, librdmacm): it "
                     "cannot run a verbs workload");
#endif
  }
  wl::TcpOptions to;
  to.rank = r.rank;
  for (const auto& mb : r.world) to.world.push_back({mb.address, uint16_t(mb.port)});
  to.streams = r.streams;
  to.tag = tagOf(r.workloadId);
  to.userTimeoutMs = r.reconnectTimeoutMs;
  to.checksum = r.checksum;
  to.dscp = r.qp.dscp;
  auto t = wl::TcpTransport::create(to);
  if (!t) return t.error();
  const uint16_t port = (*t)->port();
  return WorkloadTransport{std::move(*t), port};
}

}  // namespace

struct WorkloadManager::Entry {
  std::string id, owner, kind;
  int rank = 0;
  wl::RunSpec spec;
  std::unique_ptr<wl::Transport> transport;
  uint16_t port = 0;  // where the transport listens (TCP, or rdma_cm's port space)
  std::unique_ptr<wl::Telemetry> telemetry;
  // An external kind (perftest): its program's run instead of a transport and the engine.
  std::unique_ptr<wl::ExternalRun> external;
  // Bins younger than this stay open: a perftest report fills the second before it.
  int64_t drainLagNs = 0;
  Emit emit;
  std::atomic<bool> stop{false};
  std::mutex m;
  std::string stopReason;  // guarded by m
  bool finished = false;   // guarded by WorkloadManager::m_
  bool committed = false;  // created and running (guarded by m_); before: a reservation
  Clock::time_point deadline;
  // The telemetry's sequence: the reporter's and the engine's last send take turns on sendM.
  std::mutex sendM;
  int64_t seq = 0;  // guarded by sendM
  // NIC counters, used under the telemetry's sequence mutex only.
  std::vector<counters::NicSampler> samplers;
  std::map<std::string, uint64_t> countersSent;
  Clock::time_point nextCounterSample;
  std::chrono::milliseconds counterInterval{};
  std::vector<bool> samplerFailed;
  std::jthread engine, reporter;
  uint64_t memory = 0;  // bytes of buffers its collective holds
  std::vector<std::byte> buffer;  // allocated at start, handed to the engine

  void requestStop(const std::string& reason) {
    {
      std::lock_guard lock(m);
      if (stopReason.empty()) stopReason = reason;
    }
    stop = true;
    if (transport) transport->interrupt();
  }

  void openSamplers(const CounterOptions& options);
  void sendTelemetry(bool final);
  proto::NicSample sampleCounters();
  void reportLoop(std::stop_token st);
  wl::Summary runGuarded();
  void reportEnd(wl::Summary s);
};

// A sampler for each of the node's data interfaces; one that cannot be opened is left out.
void WorkloadManager::Entry::openSamplers(const CounterOptions& options) {
  counterInterval = options.interval;
  for (const auto& ifname : options.interfaces) {
    auto sampler = counters::NicSampler::create(ifname, {options.sysRoot, options.ethtool});
    if (!sampler) {
      log::warn("workload '{}': no counters from '{}': {}", id, ifname, sampler.error().message);
      continue;
    }
    samplers.push_back(std::move(*sampler));
  }
  samplerFailed.assign(samplers.size(), false);
}

// Sends what the telemetry holds (FINAL: all of it, and the counters whatever their pace);
// the caller holds sendM.
void WorkloadManager::Entry::sendTelemetry(bool final) {
  auto b = telemetry->drain(wallNs() - drainLagNs, final);
  // Counters go out before the common start too: the controller's first snapshot is taken
  // there, and a counter it has no value for then has no delta for the trial.
  const bool counterDue = !samplers.empty() && Clock::now() >= nextCounterSample;
  if (b.bins.empty() && b.iterations.empty() && !final && !counterDue) return;
  proto::TelemetryMsg t;
  t.workloadId = id;
  t.rank = rank;
  t.seq = seq++;
  t.firstBinNs = b.firstBinNs;
  t.binNs = b.binNs;
  // Bounded messages: a huge backlog (a reporter that fell behind) goes in several.
  t.counters = toProto(b.counters);
  if (!samplers.empty() && (final || Clock::now() >= nextCounterSample)) {
    nextCounterSample = Clock::now() + counterInterval;
    t.nic = sampleCounters();
  }
  size_t bi = 0, ii = 0;
  do {
    size_t nb = std::min(b.bins.size() - bi, proto::kMaxTelemetryBins);
    size_t ni = std::min(b.iterations.size() - ii, proto::kMaxTelemetryIterations / 2);
    t.bins.assign(b.bins.begin() + long(bi), b.bins.begin() + long(bi + nb));
    t.iterations.clear();
    for (size_t k = ii; k < ii + ni; k++) {
      const auto& it = b.iterations[k];
      t.iterations.push_back({int64_t(it.index), it.startNs, it.endNs, int64_t(it.rxBytes), it.ok});
    }
    t.firstBinNs = b.firstBinNs + int64_t(bi) * b.binNs;
    emit(proto::toJson(t));
    t.nic.reset();  // once, in the first of several messages
    t.seq = seq++;
    bi += nb;
    ii += ni;
  } while (bi < b.bins.size() || ii < b.iterations.size());
  seq--;
}

// The counters of every sampler, only those that changed since the last sample sent.
proto::NicSample WorkloadManager::Entry::sampleCounters() {
  proto::NicSample ns;
  ns.tNs = wallNs();
  const bool several = samplers.size() > 1;
  for (size_t k = 0; k < samplers.size(); k++) {
    const auto& sampler = samplers[k];
    auto c = sampler.sample();
    if (!c) {
      if (!samplerFailed[k])
        log::warn("workload '{}': counters of '{}': {}", id, sampler.ifname(), c.error().message);
      samplerFailed[k] = true;
      continue;
    }
    // Only what changed since the last sample sent: the controller keeps the rest.
    for (const auto& [name, v] : *c) {
      std::string key = several ? sampler.ifname() + "/" + name : name;
      if (key.size() > proto::kMaxNicCounterName) continue;
      auto [it, added] = countersSent.try_emplace(key, v);
      if (added || it->second != v) {
        it->second = v;
        if (ns.values.size() < proto::kMaxNicCounters) ns.values[key] = v;
      }
    }
  }
  ns.tNs = (ns.tNs + wallNs()) / 2;  // the middle of the reads
  return ns;
}

// The reporter thread's body: telemetry until ST asks it to stop.
void WorkloadManager::Entry::reportLoop(std::stop_token st) {
  std::mutex mx;
  std::condition_variable_any cv;
  std::unique_lock lock(mx);
  bool failed = false;
  // Every 50 ms: well inside the 100 ms the controller expects.
  while (!cv.wait_for(lock, st, std::chrono::milliseconds(50), [] { return false; })) {
    if (st.stop_requested()) break;
    std::lock_guard sl(sendM);
    try {  // an exception barrier: a report lost, never std::terminate
      sendTelemetry(false);
    } catch (const std::exception& ex) {
      if (!failed) log::error("workload '{}': telemetry not sent: {}", id, ex.what());
      failed = true;
    }
  }
}

// The run, behind an exception barrier: whatever it throws (an allocation, a thread) ends this
// workload with an error its controller hears about, never std::terminate.
wl::Summary WorkloadManager::Entry::runGuarded() {
  wl::Summary s;
  try {
    log::info("workload '{}' ({} over {}, rank {} of {}) starting", id, kind,
              transport ? transport->name() : external->describe(), rank, spec.shape.world);
    s = external ? external->run(spec.startNs, spec.durationNs, *telemetry, stop)
                 : wl::runWorkload(spec, *transport, *telemetry, stop, std::move(buffer));
  } catch (const std::exception& ex) {
    if (transport) transport->disconnect();  // peers learn at once that we are gone
    s = wl::Summary{};
    s.endReason = "error";
    s.counters.errors = 1;
    s.error = dynamic_cast<const std::bad_alloc*>(&ex) ? "cannot allocate memory for the workload: "
                                                       : "the workload failed: ";
    s.error += ex.what();
  }
  return s;
}

// The last telemetry and the workload_ended message of the run that ended with S.
void WorkloadManager::Entry::reportEnd(wl::Summary s) {
  try {
    {
      std::lock_guard sl(sendM);
      sendTelemetry(true);
    }
    proto::WorkloadEnded ended;
    ended.workloadId = id;
    ended.rank = rank;
    {
      std::lock_guard lock(m);
      ended.endReason = stop.load() && !stopReason.empty() ? stopReason : s.endReason;
    }
    ended.error = s.error.substr(0, 1000);
    ended.note = s.note.substr(0, 1000);
    ended.verified = s.verified;
    s.counters.rxBytes = telemetry->rxBytes();
    ended.counters = toProto(s.counters);
    log::info("workload '{}' ended ({}): {} iterations, {} errors, {} corruptions, {} reconnects{}",
              id, ended.endReason, s.counters.iterations, s.counters.errors, s.counters.corruptions,
              s.counters.reconnects, s.error.empty() ? "" : " — " + s.error);
    emit(proto::toJson(ended));
  } catch (const std::exception& ex) {
    log::error("workload '{}': its end was not reported: {}", id, ex.what());
  }
}

Result<int64_t> workloadStartNs(const proto::WorkloadStart& r, int64_t nowNs) {
  // Telemetry bins count from the start: one far in the past (start_ns = 1 is a valid field)
  // made the first byte allocate a bin for every bin_us since then and the agent abort.
  // The same bounds as a fault's start.
  constexpr int64_t kMaxLateNs = 5'000'000'000;
  constexpr int64_t kMaxAheadNs = 86'400'000'000'000;
  if (r.startNs == 0) return nowNs;
  const int64_t start = r.startNs + r.clockOffsetNs;
  if (start < nowNs - kMaxLateNs)
    return makeError("start time is " + formatDuration(Nanos(nowNs - start)) +
                     " in the past on this agent: the controller's clock offset is stale or the "
                     "message was delayed; start the workload again");
  if (start > nowNs + kMaxAheadNs) return makeError("start time is more than a day ahead");
  return start;
}

std::optional<uint64_t> cgroupMemoryLimit(const std::string& procSelfCgroup,
                                          const std::string& sysFsCgroup) {
  auto readLimit = [](const std::string& file) -> std::optional<uint64_t> {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text) || text == "max") return std::nullopt;
    try {
      size_t used = 0;
      uint64_t v = std::stoull(text, &used);
      // cgroup v1 writes "no limit" as a page-rounded LONG_MAX.
      if (used != text.size() || v >= (uint64_t(1) << 62)) return std::nullopt;
      return v;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  std::optional<uint64_t> best;
  auto take = [&](std::optional<uint64_t> v) {
    if (v && (!best || *v < *best)) best = v;
  };
  // Lines "ID:CONTROLLERS:PATH": "0::PATH" is v2; v1 has "memory" among the controllers.
  std::istringstream lines(procSelfCgroup);
  for (std::string line; std::getline(lines, line);) {
    auto a = line.find(':'), b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    bool v2 = line.substr(0, a) == "0" && controllers.empty();
    bool v1 = ("," + controllers + ",").find(",memory,") != std::string::npos;
    if (!v2 && !v1) continue;
    if (path.find("..") != std::string::npos || path.empty() || path.front() != '/') continue;
    std::string base = v2 ? sysFsCgroup : sysFsCgroup + "/memory";
    const char* file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
    // A parent's limit binds too (a pod's inside the node's kubepods slice).
    for (std::string p = path;;) {
      take(readLimit(base + (p == "/" ? "" : p) + file));
      if (p == "/") break;
      size_t slash = p.rfind('/');
      p = slash == 0 ? "/" : p.substr(0, slash);
    }
  }
  return best;
}

uint64_t defaultMemoryBudget(uint64_t physicalBytes, std::optional<uint64_t> cgroupLimit) {
  uint64_t usable = cgroupLimit ? std::min(physicalBytes, *cgroupLimit) : physicalBytes;
  return std::max<uint64_t>(usable / 4, uint64_t(1) << 20);
}

WorkloadManager::WorkloadManager(std::chrono::milliseconds leaseTimeout,
                                 std::chrono::milliseconds maxDuration, CounterOptions counters,
                                 uint64_t memoryBudget)
    : leaseTimeout_(leaseTimeout), maxDuration_(maxDuration), counters_(std::move(counters)),
      memoryBudget_(memoryBudget) {
  if (memoryBudget_ == 0) {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    uint64_t physical = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (uint64_t(4) << 30);
    std::ifstream in("/proc/self/cgroup");
    std::string self((std::istreambuf_iterator<char>(in)), {});
    memoryBudget_ = defaultMemoryBudget(physical, cgroupMemoryLimit(self));
  }
  watcher_ = std::jthread([this](std::stop_token st) { watch(st); });
}

WorkloadManager::~WorkloadManager() { shutdown(); }

Result<json> WorkloadManager::start(const std::string& owner, const proto::WorkloadStart& r,
                                    Emit emit) {
  auto plan = planWorkload(r, maxDuration_);
  if (!plan) return plan.error();
  const wl::RunSpec& spec = plan->spec;
  std::unique_ptr<wl::ExternalRun>& external = plan->external;

  // Three steps, so that nothing slow runs under m_ (heartbeat() takes it on the event loop:
  // a verbs device that takes seconds to open must not expire a controller's lease).
  // 1. Reserve, under the lock: the id, a slot and the memory, held by a placeholder entry.
  auto e = std::make_shared<Entry>();
  e->id = r.workloadId;
  e->owner = owner;
  e->kind = r.kind;
  e->rank = r.rank;
  e->spec = spec;
  e->memory = plan->memory;
  {
    std::lock_guard guard(m_);
    if (shuttingDown_) return makeError("the agent is shutting down");
    reapLocked();
    if (entries_.count(r.workloadId)) return makeError("workload '" + r.workloadId + "' exists");
    if (entries_.size() >= 4) return makeError("4 workloads already run on this agent");
    uint64_t held = 0;
    for (const auto& [id, x] : entries_) held += x->finished ? 0 : x->memory;
    if (held + plan->memory > memoryBudget_)
      return workloadMemoryRefusal(r, plan->memory, held, memoryBudget_);
    entries_[e->id] = e;
    creating_++;
  }

  // 2. Create, without the lock: the transport (binds its listener, opens the RDMA device),
  // the buffers (allocated before the reply, so that a node without the memory answers with an
  // error) and the counter samplers. Nothing else touches these until the commit.
  std::unique_ptr<wl::Transport> transport;
  uint16_t port = 0;
  try {
    if (createHook_) createHook_(r.workloadId);
    if (external) {
      port = external->port();
    } else {
      auto buffer = wl::allocateRunBuffer(spec.shape);
      if (!buffer) return abandon(e, buffer.error());
      e->buffer = std::move(*buffer);
      auto t = createWorkloadTransport(r);
      if (!t) return abandon(e, t.error());
      port = t->port;
      transport = std::move(t->transport);
    }
    e->port = port;
    e->telemetry = std::make_unique<wl::Telemetry>(spec.startNs, r.binUs * 1000);
    if (external) {
      e->drainLagNs = external->drainLagNs();
      e->external = std::move(external);
    }
    e->emit = std::move(emit);
    e->openSamplers(counters_);
  } catch (const std::exception& ex) {
    // An exception barrier: the reservation is given back, the controller gets an error.
    std::string msg = "cannot set up workload '";
    msg += e->id;
    msg += "': ";
    msg += ex.what();
    return abandon(e, makeError(msg));
  }
  // Read here: once the engine ends, it releases the transport (the reply is built after).
  const std::string transportName = transport ? transport->name() : r.kind;

  // 3. Commit under the lock, unless the workload was stopped or the agent began shutting
  // down meanwhile.
  std::lock_guard guard(m_);
  creating_--;
  if (shuttingDown_ || e->stop) {
    const bool shutting = shuttingDown_;
    entries_.erase(e->id);
    generation_++;
    cv_.notify_all();
    if (shutting) return makeError("the agent is shutting down");
    return makeError("workload '" + e->id + "' was stopped while it was being set up");
  }
  e->transport = std::move(transport);
  e->committed = true;
  // Lead time before the common start counts against nothing; the run itself is capped.
  int64_t leadMs = std::max<int64_t>(0, (spec.startNs - wallNs()) / 1'000'000);
  e->deadline = Clock::now() + std::chrono::milliseconds(leadMs) + maxDuration_;
  leases_[owner] = Clock::now() + leaseTimeout_;
  try {
    e->reporter = std::jthread([e](std::stop_token st) { e->reportLoop(st); });
    e->engine = std::jthread([this, e](std::stop_token) {
      wl::Summary s = e->runGuarded();
      e->reporter.request_stop();
      e->reporter.join();
      e->reportEnd(std::move(s));
      // The transport goes now, not when the next workload reaps this entry: a verbs
      // transport holds its PD, registered buffer, rdma_cm id and listener until destroyed.
      // Under m_ with finished set: nothing else touches a finished entry's transport.
      std::unique_ptr<wl::Transport> done;
      {
        std::lock_guard lock(m_);
        e->finished = true;
        done = std::move(e->transport);
        generation_++;
      }
      done.reset();
      cv_.notify_all();
    });
  } catch (const std::exception& ex) {
    // No thread for it: the reporter (if it started) is stopped and joined, the entry goes.
    e->reporter = std::jthread();
    entries_.erase(e->id);
    generation_++;
    cv_.notify_all();
    return makeError("cannot start workload '" + e->id + "': " + ex.what());
  }
  generation_++;
  cv_.notify_all();
  return json{{"workload", e->id}, {"rank", e->rank}, {"start_ns", spec.startNs},
              {"port", e->port}, {"transport", transportName}};
}

Result<json> WorkloadManager::abandon(const std::shared_ptr<Entry>& e, Error why) {
  {
    std::lock_guard lock(m_);
    creating_--;
    auto it = entries_.find(e->id);
    if (it != entries_.end() && it->second == e) entries_.erase(it);
    generation_++;
  }
  cv_.notify_all();
  return why;
}

Result<void> WorkloadManager::stop(const std::string& id) {
  std::lock_guard lock(m_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second->finished)
    return makeError("no running workload '" + id + "'");
  it->second->requestStop("stopped");
  return {};
}

void WorkloadManager::heartbeat(const std::string& owner) {
  {
    std::lock_guard lock(m_);
    leases_[owner] = Clock::now() + leaseTimeout_;
    generation_++;
  }
  cv_.notify_all();
}

size_t WorkloadManager::activeCount() const {
  std::lock_guard lock(m_);
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += !e->finished;
  return n;
}

json WorkloadManager::list() const {
  std::lock_guard lock(m_);
  json out = json::array();
  for (const auto& [id, e] : entries_)
    out.push_back({{"workload", id}, {"kind", e->kind}, {"rank", e->rank},
                   {"owner", e->owner}, {"finished", e->finished}});
  return out;
}

void WorkloadManager::reapLocked() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second->finished) {
      if (it->second->engine.joinable()) it->second->engine.join();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkloadManager::watch(std::stop_token stop) {
  std::unique_lock lock(m_);
  while (!stop.stop_requested()) {
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto& [id, e] : entries_) {
      if (!e->committed || e->finished || e->stop) continue;  // still being created: no deadline yet
      if (e->deadline <= now) {
        log::warn("workload '{}' reached the maximum duration of {} ms: stopping", id,
                  maxDuration_.count());
        e->requestStop("max_duration");
        continue;
      }
      next = std::min(next, e->deadline);
      auto l = leases_.find(e->owner);
      if (l != leases_.end() && l->second <= now) {
        log::warn("lease of controller '{}' expired: stopping workload '{}'", e->owner, id);
        e->requestStop("lease_expired");
      } else if (l != leases_.end()) {
        next = std::min(next, l->second);
      }
    }
    uint64_t seen = generation_;
    cv_.wait_until(lock, stop, next, [&] { return generation_ != seen; });
  }
}

void WorkloadManager::shutdown() {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lock(m_);
    shuttingDown_ = true;
    for (auto& [id, e] : entries_) {
      if (!e->finished) e->requestStop("shutdown");
      all.push_back(e);
    }
  }
  // Outside the lock: the engines take it when they finish.
  for (auto& e : all)
    if (e->engine.joinable()) e->engine.join();
  std::unique_lock lock(m_);
  // Starts still creating their transport see shuttingDown_ at their commit and give back
  // what they created: wait for them, so that nothing outlives the manager.
  cv_.wait(lock, [this] { return creating_ == 0; });
  entries_.clear();
  if (watcher_.joinable()) {
    watcher_.request_stop();
    cv_.notify_all();
  }
}

}  // namespace rc::agent
