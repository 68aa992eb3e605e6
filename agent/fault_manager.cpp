// Fault lifecycle on the agent: schedule -> journal -> apply -> revert -> unjournal.
#include "agent/fault_manager.hpp"

#include <algorithm>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/units.hpp"

namespace rc::agent {

using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kMaxActive = 64;
constexpr size_t kMaxFinishedKept = 128;
// A start more than this far in the past means a clock or scheduling problem, not jitter.
constexpr int64_t kMaxLateNs = 5'000'000'000;
constexpr int64_t kMaxAheadNs = 86'400'000'000'000;
constexpr std::chrono::microseconds kSpinWindow{1500};

Clock::time_point steadyAt(int64_t wallTargetNs) {
  return Clock::now() + std::chrono::nanoseconds(wallTargetNs - wallNs());
}
}  // namespace

struct FaultManager::Entry {
  std::string id, owner;
  const faults::FaultKind* kind = nullptr;
  std::unique_ptr<faults::Fault> fault;
  json snapshot;
  std::string description;
  int64_t startNs = 0;  // agent wall clock
  int64_t lifetimeMs = 0;
  Clock::time_point startSteady, deadline;
  std::string state = "scheduled";  // scheduled, active, reverting, ended
  std::string endReason;            // completed, reverted, lease_expired, lifetime, shutdown, error
  std::string error;
  int64_t appliedNs = 0, endedNs = 0;
  bool finished = false;
  bool journaled = false;
  faults::EventLog events;
  std::condition_variable_any wake;
  std::vector<Done> waiters;
  std::jthread thread;

  // Called with the manager's lock held.
  void stop(const std::string& reason) {
    if (finished) return;
    if (endReason.empty()) endReason = reason;
    thread.request_stop();
  }
};

FaultManager::FaultManager(faults::Policy policy, Journal journal,
                           std::chrono::milliseconds maxLifetime,
                           std::chrono::milliseconds leaseTimeout)
    : policy_(std::move(policy)),
      journal_(std::move(journal)),
      maxLifetime_(maxLifetime),
      leaseTimeout_(leaseTimeout) {
  watcher_ = std::jthread([this](std::stop_token st) { watch(st); });
}

FaultManager::~FaultManager() { shutdown(); }

std::vector<std::string> FaultManager::recoverJournal() {
  std::vector<std::string> lines;
  auto entries = journal_.list();
  if (!entries) {
    lines.push_back("cannot read the journal: " + entries.error().message);
    return lines;
  }
  for (const auto& entry : *entries) {
    const json& rec = entry.record;
    const faults::FaultKind* kind = nullptr;
    if (rec.is_object() && rec.contains("kind") && rec["kind"].is_string())
      kind = faults::findKind(rec["kind"].get<std::string>());
    if (!kind) {
      lines.push_back("journal entry '" + entry.faultId +
                      "' is unreadable or of an unknown kind; left in " + journal_.dir() +
                      " for manual inspection");
      std::lock_guard lock(m_);
      unrevertable_.push_back(entry.faultId);
      continue;
    }
    auto r = kind->revertRecord(rec.value("params", json::object()),
                                rec.value("snapshot", json::object()));
    if (!r) {
      lines.push_back("could not revert journaled fault '" + entry.faultId + "' (" + kind->name +
                      "): " + r.error().message);
      std::lock_guard lock(m_);
      unrevertable_.push_back(entry.faultId);
      continue;
    }
    if (auto rm = journal_.remove(entry.faultId); !rm)
      lines.push_back("reverted '" + entry.faultId + "' but " + rm.error().message);
    else
      lines.push_back("reverted journaled fault '" + entry.faultId + "' (" + kind->name + ")");
  }
  return lines;
}

Result<json> FaultManager::schedule(const std::string& owner, const proto::Schedule& req,
                                    Done onEnd) {
  const faults::FaultKind* kind = faults::findKind(req.kind);
  if (!kind) {
    std::string names;
    for (const auto* k : faults::registry()) names += (names.empty() ? "" : ", ") + k->name;
    return makeError("unknown fault kind '" + req.kind + "' (this agent runs: " + names + ")");
  }
  auto params = faults::normaliseParams(kind->name, kind->params, req.params);
  if (!params) return params.error();
  auto fault = kind->create(*params, policy_);
  if (!fault) return fault.error();

  int64_t now = wallNs();
  int64_t start = req.startNs == 0 ? now : req.startNs + req.clockOffsetNs;
  if (start < now - kMaxLateNs)
    return makeError("start time is " + formatDuration(Nanos(now - start)) +
                     " in the past on this agent: the controller's clock offset is stale or the "
                     "message was delayed; schedule again");
  if (start > now + kMaxAheadNs) return makeError("start time is more than a day ahead");
  auto lifetime = std::min<int64_t>(req.lifetimeMs, maxLifetime_.count());

  auto e = std::make_shared<Entry>();
  e->id = req.faultId;
  e->owner = owner;
  e->kind = kind;
  e->fault = std::move(*fault);
  e->description = e->fault->describe();
  e->startNs = start;
  e->lifetimeMs = lifetime;
  e->startSteady = steadyAt(start);
  e->deadline = e->startSteady + std::chrono::milliseconds(lifetime);
  if (onEnd) e->waiters.push_back(std::move(onEnd));

  std::vector<std::shared_ptr<Entry>> pruned;
  {
    std::lock_guard lock(m_);
    if (shuttingDown_) return makeError("agent is shutting down");
    auto it = faults_.find(e->id);
    if (it != faults_.end() && !it->second->finished)
      return makeError("fault '" + e->id + "' is already active on this node");
    size_t active = 0;
    for (auto& [id, f] : faults_) active += f->finished ? 0 : 1;
    if (active >= kMaxActive)
      return makeError("this agent already runs " + std::to_string(active) +
                       " faults (the limit); revert some first");
    if (it != faults_.end()) {
      pruned.push_back(it->second);
      faults_.erase(it);
    }
  }
  for (auto& p : pruned)
    if (p->thread.joinable()) p->thread.join();  // it has finished: this returns at once

  // Snapshot, then journal durably, before anything is applied.
  auto snap = e->fault->snapshot();
  if (!snap) return snap.error();
  e->snapshot = *snap;
  json record = {{"kind", kind->name},      {"owner", owner},
                 {"params", e->fault->params()}, {"snapshot", e->snapshot},
                 {"start_ns", start},       {"lifetime_ms", lifetime}};
  if (auto r = journal_.add(e->id, record); !r)
    return makeError("cannot journal fault before applying it: " + r.error().message);
  e->journaled = true;

  json out;
  {
    std::lock_guard lock(m_);
    if (shuttingDown_) {
      (void)journal_.remove(e->id);
      return makeError("agent is shutting down");
    }
    faults_[e->id] = e;
    leases_[owner] = Clock::now() + leaseTimeout_;
    generation_++;
    e->thread = std::jthread([this, e](std::stop_token st) { runFault(e, st); });
    out = recordOf(*e);
    // Keep a bounded history of ended faults.
    size_t finished = 0;
    for (auto& [id, f] : faults_) finished += f->finished ? 1 : 0;
    for (auto it = faults_.begin(); finished > kMaxFinishedKept && it != faults_.end();) {
      if (it->second->finished) {
        pruned.push_back(it->second);
        it = faults_.erase(it);
        finished--;
      } else {
        ++it;
      }
    }
  }
  // Join before the last reference goes, so no entry is ever destroyed on its own thread.
  for (auto& p : pruned)
    if (p->thread.joinable()) p->thread.join();
  pruned.clear();
  cv_.notify_all();
  log::info("scheduled {} '{}' for {}: {}", kind->name, e->id, owner, e->description);
  return out;
}

void FaultManager::runFault(std::shared_ptr<Entry> e, std::stop_token stop) {
  {
    std::unique_lock lock(m_);
    // Sleep until just before the instant, then spin the rest: a timed wake-up can be late by
    // a scheduler tick, and faults on many nodes are meant to start together.
    e->wake.wait_until(lock, stop, e->startSteady - kSpinWindow, [] { return false; });
    lock.unlock();
    while (!stop.stop_requested() && Clock::now() < e->startSteady) {
    }
    lock.lock();
    if (!stop.stop_requested()) {
      e->state = "active";
      e->appliedNs = wallNs();
    }
  }
  bool applied = !stop.stop_requested();
  if (applied) {
    auto r = e->fault->run(stop, e->events);
    std::lock_guard lock(m_);
    if (!r) {
      e->error = r.error().message;
      if (e->endReason.empty()) e->endReason = "error";
      log::error("fault '{}' failed: {}", e->id, e->error);
    } else if (e->endReason.empty()) {
      e->endReason = "completed";
    }
    e->state = "reverting";
  } else {
    std::lock_guard lock(m_);
    if (e->endReason.empty()) e->endReason = "cancelled";
    e->state = "reverting";
  }
  auto rv = e->fault->revert(e->events);
  if (!rv) {
    std::lock_guard lock(m_);
    e->error += (e->error.empty() ? "" : "; ") + std::string("revert failed: ") + rv.error().message;
    unrevertable_.push_back(e->id);
    log::error("fault '{}' could not be reverted and stays in the journal: {}", e->id,
               rv.error().message);
  } else if (auto rm = journal_.remove(e->id); !rm) {
    log::error("fault '{}' reverted but its journal entry remains: {}", e->id, rm.error().message);
  }
  finish(e);
}

void FaultManager::finish(const std::shared_ptr<Entry>& e) {
  std::vector<Done> waiters;
  json rec;
  {
    std::lock_guard lock(m_);
    e->finished = true;
    e->state = "ended";
    generation_++;
    e->endedNs = wallNs();
    waiters.swap(e->waiters);
    rec = recordOf(*e);
  }
  cv_.notify_all();
  log::info("fault '{}' ended ({}){}", e->id, rec["end_reason"].get<std::string>(),
            e->error.empty() ? "" : ": " + e->error);
  for (auto& w : waiters) w(rec);
}

Result<void> FaultManager::revert(const std::string& faultId, Done done) {
  json rec;
  {
    std::lock_guard lock(m_);
    auto it = faults_.find(faultId);
    if (it == faults_.end()) return makeError("no fault '" + faultId + "' on this node", 2);
    auto& e = it->second;
    if (!e->finished) {
      e->waiters.push_back(std::move(done));
      e->stop("reverted");
      e->wake.notify_all();
      return {};
    }
    rec = recordOf(*e);
  }
  done(rec);
  return {};
}

void FaultManager::revertAll(const std::string* owner, std::string reason, Done done) {
  struct Gather {
    std::mutex m;
    size_t remaining = 0;
    json records = json::array();
    Done done;
  };
  auto g = std::make_shared<Gather>();
  g->done = std::move(done);
  {
    std::lock_guard lock(m_);
    for (auto& [id, e] : faults_)
      if (!e->finished && (!owner || e->owner == *owner)) g->remaining++;
    if (g->remaining > 0) {
      for (auto& [id, e] : faults_) {
        if (e->finished || (owner && e->owner != *owner)) continue;
        e->waiters.push_back([g](json rec) {
          std::unique_lock gl(g->m);
          g->records.push_back(std::move(rec));
          if (--g->remaining == 0) {
            json all = std::move(g->records);
            gl.unlock();
            if (g->done) g->done(std::move(all));
          }
        });
        e->stop(reason);
        e->wake.notify_all();
      }
      return;
    }
  }
  if (g->done) g->done(json::array());
}

void FaultManager::heartbeat(const std::string& owner) {
  {
    std::lock_guard lock(m_);
    leases_[owner] = Clock::now() + leaseTimeout_;
    generation_++;
  }
  cv_.notify_all();
}

void FaultManager::watch(std::stop_token stop) {
  std::unique_lock lock(m_);
  while (!stop.stop_requested()) {
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto& [id, e] : faults_) {
      if (e->finished || e->thread.get_stop_token().stop_requested()) continue;
      if (e->deadline <= now) {
        log::warn("fault '{}' reached its maximum lifetime of {} ms: reverting", id, e->lifetimeMs);
        e->stop("lifetime");
      } else {
        next = std::min(next, e->deadline);
      }
    }
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second <= now) {
        for (auto& [id, e] : faults_) {
          if (e->owner == it->first && !e->finished &&
              !e->thread.get_stop_token().stop_requested()) {
            log::warn("lease of controller '{}' expired (no heartbeat for {} ms): reverting '{}'",
                      it->first, leaseTimeout_.count(), id);
            e->stop("lease_expired");
          }
        }
        it = leases_.erase(it);
      } else {
        next = std::min(next, it->second);
        ++it;
      }
    }
    // Woken by a change (new fault, heartbeat, end) to recompute, by the next deadline, or
    // by stop.
    uint64_t seen = generation_;
    cv_.wait_until(lock, stop, next, [&] { return generation_ != seen; });
  }
}

json FaultManager::recordOf(const Entry& e) const {
  json events = json::array();
  for (const auto& ev : e.events.snapshot())
    events.push_back({{"t_ns", ev.timeNs}, {"what", ev.what}, {"detail", ev.detail},
                      {"kernel_time", ev.kernelTime}});
  return json{{"fault", e.id},
              {"kind", e.kind->name},
              {"owner", e.owner},
              {"state", e.state},
              {"describe", e.description},
              {"params", e.fault->params()},
              {"start_ns", e.startNs},
              {"lifetime_ms", e.lifetimeMs},
              {"applied_ns", e.appliedNs},
              {"ended_ns", e.endedNs},
              {"end_reason", e.endReason},
              {"error", e.error},
              {"events", events}};
}

json FaultManager::list() const {
  std::lock_guard lock(m_);
  json out = json::array();
  for (const auto& [id, e] : faults_) out.push_back(recordOf(*e));
  return out;
}

Result<json> FaultManager::get(const std::string& faultId) const {
  std::lock_guard lock(m_);
  auto it = faults_.find(faultId);
  if (it == faults_.end()) return makeError("no fault '" + faultId + "' on this node", 2);
  return recordOf(*it->second);
}

size_t FaultManager::activeCount() const {
  std::lock_guard lock(m_);
  size_t n = 0;
  for (const auto& [id, e] : faults_) n += e->finished ? 0 : 1;
  return n;
}

json FaultManager::status() const {
  std::lock_guard lock(m_);
  size_t active = 0;
  for (const auto& [id, e] : faults_) active += e->finished ? 0 : 1;
  json leases = json::object();
  auto now = Clock::now();
  for (const auto& [owner, t] : leases_)
    leases[owner] = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
  return json{{"active_faults", active},
              {"lease_remaining_ms", leases},
              {"unrevertable", unrevertable_},
              {"lease_timeout_ms", leaseTimeout_.count()},
              {"max_fault_lifetime_ms", maxLifetime_.count()}};
}

void FaultManager::shutdown() {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lock(m_);
    if (shuttingDown_ && faults_.empty()) return;
    shuttingDown_ = true;
    for (auto& [id, e] : faults_) {
      e->stop("shutdown");
      e->wake.notify_all();
      all.push_back(e);
    }
  }
  for (auto& e : all)
    if (e->thread.joinable()) e->thread.join();
  {
    std::lock_guard lock(m_);
    faults_.clear();
  }
  watcher_.request_stop();
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace rc::agent
