// Fault lifecycle on the agent: schedule -> journal -> apply -> revert -> unjournal. The replay
// of what an earlier run left journaled is in fault_manager_replay.cpp.
#include "agent/fault_manager.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <optional>

#include "common/clock.hpp"
#include "common/fd_reserve.hpp"
#include "common/log.hpp"
#include "common/units.hpp"

namespace rc::agent {

using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kMaxActive = proto::kMaxActiveFaults;
constexpr size_t kMaxFinishedKept = 128;
// A start more than this far in the past means a clock or scheduling problem, not jitter.
constexpr int64_t kMaxLateNs = 5'000'000'000;
constexpr int64_t kMaxAheadNs = proto::kMaxScheduleAheadNs;
constexpr std::chrono::microseconds kSpinWindow{1500};

// How long a fault due to start waits for the previous owner of its target to finish its
// revert (e.g. the last fault of the previous trial, scheduled to end at this instant).
constexpr auto kHandoverWait = std::chrono::seconds(5);
// How long before its instant a fault takes its snapshot and journals it (an fsync), so the
// start itself is not delayed by the disk.
constexpr auto kPrepareLead = std::chrono::milliseconds(250);

Clock::time_point steadyAt(int64_t wallTargetNs) {
  return Clock::now() + std::chrono::nanoseconds(wallTargetNs - wallNs());
}

// "18:40:03.512 UTC" for an agent wall-clock instant.
std::string utcTime(int64_t ns) {
  time_t secs = time_t(ns / 1'000'000'000);
  tm t{};
  ::gmtime_r(&secs, &t);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d UTC", t.tm_hour, t.tm_min, t.tm_sec,
                int((ns / 1'000'000) % 1000));
  return buf;
}

bool shareTarget(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}

std::string firstShared(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return x;
  return {};
}

// The kind a schedule names, or an error that lists the kinds this agent runs.
Result<const faults::FaultKind*> scheduledKind(const std::string& name) {
  const faults::FaultKind* kind = faults::findKind(name);
  if (kind) return kind;
  std::string names;
  for (const auto* k : faults::registry()) names += (names.empty() ? "" : ", ") + k->name;
  return makeError("unknown fault kind '" + name + "' (this agent runs: " + names + ")");
}

// Why a fault due at START (agent wall clock) is refused as late now, if it is. Also asked
// after the journal's fsync: a fault whose journaling took longer than its controller waits for
// the reply (a stalling disk) is refused then, not applied late for a controller that has
// already reported it failed.
std::optional<Error> lateStartRefusal(int64_t start) {
  const int64_t t = wallNs();
  if (start >= t - kMaxLateNs) return std::nullopt;
  return makeError("start time is " + formatDuration(Nanos(t - start)) +
                   " in the past on this agent: the controller's clock offset is stale, the "
                   "message was delayed or journaling it was slow; schedule again");
}
}  // namespace

struct FaultManager::Entry {
  std::string id, owner;
  const faults::FaultKind* kind = nullptr;
  std::unique_ptr<faults::Fault> fault;
  std::vector<std::string> targets;  // what it changes; one owner per target at a time
  json journalRecord;                // as journaled at schedule time (no snapshot yet)
  json snapshot;
  std::string description;
  int64_t startNs = 0;  // agent wall clock
  int64_t lifetimeMs = 0;
  Clock::time_point startSteady, deadline;
  std::string state = "scheduled";  // scheduled, active, reverting, ended
  std::string endReason;            // completed, reverted, lease_expired, lifetime, shutdown, error
  std::string error;
  int64_t appliedNs = 0, endedNs = 0;
  // A revert that failed is retried with backoff; meanwhile the fault stays journaled, holds
  // its targets and shows in status() with these.
  int revertAttempts = 0;
  std::string revertError;
  int64_t revertFailingSinceNs = 0;
  Clock::time_point nextRevertAttempt{};
  bool finished = false;
  bool applied = false;  // run() was called: only then is there anything to revert
  // In faults_ from before its journal entry is written, so the emergency button (revert,
  // revert_all, a lease or the lifetime) sees a schedule still in its fsync; committed once
  // that is done and its thread runs.
  bool committed = false;
  // From its snapshot to the end of its revert it holds its targets: no other fault on them
  // snapshots meanwhile (the handover), whatever their order.
  bool holding = false;
  uint64_t seq = 0;  // registration order, for faults of one start instant
  faults::EventLog events;
  std::condition_variable_any wake;
  std::vector<Done> waiters;
  std::jthread thread;

  Entry(std::string faultId, std::string ownerName, const faults::FaultKind* faultKind,
        std::unique_ptr<faults::Fault> made, int64_t start, int64_t lifetime)
      : id(std::move(faultId)),
        owner(std::move(ownerName)),
        kind(faultKind),
        fault(std::move(made)),
        targets(fault->targets()),
        description(fault->describe()),
        startNs(start),
        lifetimeMs(lifetime),
        startSteady(steadyAt(start)),
        deadline(startSteady + std::chrono::milliseconds(lifetime)) {
    // Journaled at schedule time, so a refusal to journal refuses the fault; the snapshot is
    // added at the instant the fault is applied (a record without one was never applied:
    // nothing to revert).
    journalRecord = {{"kind", kind->name},  {"owner", owner},      {"params", fault->params()},
                     {"targets", targets}, {"start_ns", startNs}, {"lifetime_ms", lifetimeMs}};
  }

  // Why this fault may not take its targets while L, a journaled fault of an earlier run whose
  // revert is being retried, holds one of them; none when they share no target.
  std::optional<Error> refusalByLeftover(const Leftover& l) const {
    if (!shareTarget(targets, l.entry.targets)) return std::nullopt;
    return makeError(
        kind->name + " '" + id + "' refused: " + firstShared(targets, l.entry.targets) +
            " is held by journaled fault '" + l.entry.id + "' (" + l.entry.kind->name +
            ") of an earlier run, whose revert failed and is being retried ("
            "attempt " +
            std::to_string(l.attempts) + ": " + l.entry.error + "); see 'rdmachaos agents'",
        EBUSY);
  }

  // Why this fault may not take its targets while F, another unfinished fault, holds one of
  // them in its window (as of NOW_NS); none when they share no target or their windows do
  // not overlap. One owner per target: a fault holds its targets from its start until its
  // deadline, or until its revert is done if that is later. Faults whose windows do not overlap
  // (trials of a playbook scheduled ahead) share a target one after the other. Compared in
  // agent wall-clock nanoseconds: exact, so back-to-back windows never overlap.
  std::optional<Error> refusalByHolder(const Entry& f, int64_t nowNs) const {
    if (!shareTarget(targets, f.targets)) return std::nullopt;
    const int64_t endNs = startNs + lifetimeMs * 1'000'000;
    int64_t fEndNs = f.startNs + f.lifetimeMs * 1'000'000;
    int64_t heldUntilNs = f.startNs <= nowNs ? std::max(fEndNs, nowNs) : fEndNs;
    if (!(startNs < heldUntilNs && f.startNs < endNs)) return std::nullopt;
    // A holder scheduled ahead holds from its start: say so, or "until" reads as "now".
    std::string from = f.startNs > nowNs ? " from " + utcTime(f.startNs) : std::string();
    if (!f.revertError.empty())
      return makeError(
          kind->name + " '" + id + "' refused: " + firstShared(targets, f.targets) +
              " is held by fault '" + f.id + "' (" + f.kind->name + ", controller '" + f.owner +
              "'), whose revert failed and is being retried (attempt " +
              std::to_string(f.revertAttempts) + ": " + f.revertError + "); see 'rdmachaos agents'",
          EBUSY);
    return makeError(
        kind->name + " '" + id + "' refused: " + firstShared(targets, f.targets) +
            " is held by fault '" + f.id + "' (" + f.kind->name + ", controller '" + f.owner +
            "')" + from + " until " + utcTime(fEndNs) + ", " +
            formatDuration(Nanos(std::max<int64_t>(0, fEndNs - nowNs))) +
            " from now; schedule it after that or revert '" + f.id + "' first",
        EBUSY);
  }

  // The refusal of a fault stopped (reverted by id, revert_all, recover --all, a lease or its
  // lifetime) while its schedule wrote its journal entry.
  Error endedWhileJournaled() const {
    return makeError(kind->name + " '" + id + "' was " +
                     (endReason == "reverted" ? std::string("reverted")
                                              : "ended (" + endReason + ")") +
                     " while it was being journaled; not applied");
  }

  // Called with the manager's lock held. Before it is committed (no thread yet) a stop is its
  // end reason, which schedule() reads after the journal write.
  bool stopping() const { return thread.get_stop_token().stop_requested() || (!committed && !endReason.empty()); }
  void stop(const std::string& reason) {
    if (finished) return;
    if (endReason.empty()) endReason = reason;
    thread.request_stop();
  }
};

FaultManager::FaultManager(faults::Policy policy, Journal journal,
                           std::chrono::milliseconds maxLifetime,
                           std::chrono::milliseconds leaseTimeout, RetryBackoff retry)
    : policy_(std::move(policy)),
      journal_(std::move(journal)),
      maxLifetime_(maxLifetime),
      leaseTimeout_(leaseTimeout),
      retry_(retry) {
  watcher_ = std::jthread([this](std::stop_token st) { watch(st); });
}

FaultManager::~FaultManager() { shutdown(); }

Result<json> FaultManager::schedule(const std::string& owner, const proto::Schedule& req,
                                    Done onEnd) {
  auto kind = scheduledKind(req.kind);
  if (!kind) return kind.error();
  // The controller sends the normalised form (integers of ns and bytes), checked again here
  // against the kind's ranges: an agent never trusts a controller's arithmetic.
  auto params = faults::normaliseParams((*kind)->name, (*kind)->params, req.params, faults::ParamsFrom::normalised);
  if (!params) return params.error();
  auto fault = (*kind)->create(*params, policy_);
  if (!fault) return fault.error();

  int64_t now = wallNs();
  int64_t start = req.startNs == 0 ? now : req.startNs + req.clockOffsetNs;
  // Also asked after the journal's fsync (refusal below).
  if (auto no = lateStartRefusal(start)) return *no;
  if (start > now + kMaxAheadNs) return makeError("start time is more than a day ahead");
  auto lifetime = std::min<int64_t>(req.lifetimeMs, maxLifetime_.count());
  auto e = std::make_shared<Entry>(req.faultId, owner, *kind, std::move(*fault), start, lifetime);

  // Whether E may take its targets now; the caller holds m_. Asked twice: before the journal is
  // written, and again before the fault is committed, because the journal's fsync runs without
  // the lock (a slow disk must not stall the heartbeats, the lease watcher and every other
  // request that take it), so two schedules racing for one target cannot both take it.
  auto refusal = [&]() -> std::optional<Error> {
    if (shuttingDown_) return makeError("agent is shutting down");
    if (auto no = lateStartRefusal(start)) return no;
    auto it = faults_.find(e->id);
    if (it != faults_.end() && it->second != e && !it->second->finished)
      return makeError("fault '" + e->id + "' is already active on this node");
    size_t active = 0;
    for (auto& [id, f] : faults_) active += f->finished || f == e ? 0 : 1;
    if (active >= kMaxActive)
      return makeError("this agent already runs " + std::to_string(active) +
                       " faults (the limit); revert some first");
    const int64_t nowNs = wallNs();
    for (const auto& l : leftovers_)
      if (auto no = e->refusalByLeftover(l)) return no;
    for (auto& [id, f] : faults_)
      if (f != e && !f->finished)
        if (auto no = e->refusalByHolder(*f, nowNs)) return no;
    return std::nullopt;
  };
  std::vector<std::shared_ptr<Entry>> pruned;
  // Joined before the last reference goes, so no entry is ever destroyed on its own thread.
  auto joinPruned = [&] {
    for (auto& p : pruned)
      if (p->thread.joinable()) p->thread.join();
    pruned.clear();
  };
  {
    std::lock_guard lock(m_);
    if (auto no = refusal()) return *no;
    // Registered before the journal is written (see Entry::committed).
    auto it = faults_.find(e->id);
    if (it != faults_.end()) {
      pruned.push_back(it->second);
      faults_.erase(it);
    }
    e->seq = ++seq_;
    faults_[e->id] = e;
    generation_++;
  }
  joinPruned();
  cv_.notify_all();
  // Ends E before it was committed: unregistered, unjournaled (when JOURNALED), and whoever
  // asked to revert it meanwhile hears that it ended. Returns ERROR for the caller.
  auto withdraw = [&](Error error, bool journaled) -> Error {
    bool cancelled;
    {
      std::lock_guard lock(m_);
      cancelled = !e->waiters.empty();
      auto it = faults_.find(e->id);
      // Kept, ended, where a revert asked for it; gone where only its schedule is refused.
      if (!cancelled && it != faults_.end() && it->second == e) faults_.erase(it);
      if (e->endReason.empty()) e->endReason = "error";
      if (e->error.empty()) e->error = error.message;
      generation_++;
    }
    if (journaled)
      if (auto rm = journal_.remove(e->id); !rm)
        log::error("fault '{}' refused after journaling and its entry remains: {}", e->id, rm.error().message);
    finish(e);
    return error;
  };
  if (auto r = journal_.add(e->id, e->journalRecord); !r)
    return withdraw(makeError("cannot journal fault before applying it: " + r.error().message), false);
  json out;
  {
    std::unique_lock lock(m_);
    // Refused as before (late: its controller has given up on the reply; shutting down), or
    // reverted (by id, revert_all, recover --all, a lease or its lifetime) while its entry was
    // being written: never applied either way, and a button's answer includes it.
    std::optional<Error> no = refusal();
    if (!no && !e->endReason.empty()) no = e->endedWhileJournaled();
    if (no) {
      lock.unlock();
      // Written by this call (add never replaces an entry), so it is this fault's to remove.
      return withdraw(*no, true);
    }
    if (onEnd) e->waiters.push_back(std::move(onEnd));
    e->committed = true;
    leases_[owner] = Clock::now() + leaseTimeout_;
    generation_++;
    e->thread = std::jthread([this, e](std::stop_token st) { runFaultBarrier(e, st); });
    out = recordOf(*e);
    // Keep a bounded history of ended faults.
    size_t finished = 0;
    for (auto& [id, f] : faults_) finished += f->finished ? 1 : 0;
    for (auto pit = faults_.begin(); finished > kMaxFinishedKept && pit != faults_.end();) {
      if (pit->second->finished) {
        pruned.push_back(pit->second);
        pit = faults_.erase(pit);
        finished--;
      } else {
        ++pit;
      }
    }
  }
  joinPruned();
  cv_.notify_all();
  log::info("scheduled {} '{}' for {}: {}", e->kind->name, e->id, owner, e->description);
  return out;
}

// One step of a fault (snapshot, run, revert) behind an exception barrier: what it throws
// becomes its error, so the manager's usual path (revert if applied, report) handles it.
template <typename F>
auto FaultManager::step(const char* name, const Entry& e, F f) -> decltype(f()) {
  try {
    if (stepHook_) stepHook_(name, e.id);
    return f();
  } catch (const std::exception& ex) {
    return makeError(std::string(name) + " threw: " + ex.what());
  } catch (...) {
    return makeError(std::string(name) + " threw an unknown exception");
  }
}

// The last barrier of a fault's thread: an exception that escapes everything else (an
// allocation failure in bookkeeping) must not reach std::terminate with the fault applied.
void FaultManager::runFaultBarrier(std::shared_ptr<Entry> e, std::stop_token stop) {
  try {
    runFault(e, stop);
    return;
  } catch (const std::exception& ex) {
    log::error("fault '{}': exception on its thread: {}; reverting", e->id, ex.what());
  } catch (...) {
    log::error("fault '{}': unknown exception on its thread; reverting", e->id);
  }
  try {
    bool applied, finished;
    {
      std::lock_guard lock(m_);
      applied = e->applied;
      finished = e->finished;
      if (e->endReason.empty()) e->endReason = "error";
      if (e->error.empty()) e->error = "exception on the fault's thread";
    }
    if (finished) return;
    if (!applied || revertUntilDone(e)) (void)journal_.remove(e->id);
    finish(e);
  } catch (...) {
    // Nothing more can be done here; the journal entry (if any) is replayed at the next start.
  }
}

void FaultManager::runFault(std::shared_ptr<Entry> e, std::stop_token stop) {
  std::string why;
  {
    std::unique_lock lock(m_);
    // Prepared (snapshot, journal fsync) shortly before the instant, so the start is not late
    // by a disk flush. Every earlier owner of a target that has not finished (still applying,
    // applied, or reverting: a window ending at this instant) is waited for, bounded, so its
    // revert is what the snapshot sees; and so is any owner holding it from its snapshot on.
    e->wake.wait_until(lock, stop, e->startSteady - kPrepareLead, [] { return false; });
    auto earlier = [&](const Entry& f) {
      return f.startNs < e->startNs || (f.startNs == e->startNs && f.seq < e->seq);
    };
    auto heldBy = [&]() -> std::shared_ptr<Entry> {
      for (auto& [id, f] : faults_)
        if (f != e && !f->finished && shareTarget(e->targets, f->targets) && (f->holding || earlier(*f)))
          return f;
      return nullptr;
    };
    cv_.wait_until(lock, stop, e->startSteady + kHandoverWait, [&] { return !heldBy(); });
    if (stop.stop_requested()) {
      if (e->endReason.empty()) e->endReason = "cancelled";
      why = "never applied";
    } else if (auto f = heldBy()) {
      e->error = firstShared(e->targets, f->targets) + " is still held by fault '" + f->id + "' (" +
                 f->kind->name + "); not applied";
      e->endReason = "error";
      why = "held";
    } else {
      e->holding = true;
    }
  }
  // The snapshot holds what is there when the fault is applied, not when it was scheduled;
  // it is journaled (fsynced) before anything changes.
  if (why.empty()) {
    auto snap = step("snapshot", *e, [&] { return e->fault->snapshot(); });
    json record = e->journalRecord;
    if (snap) {
      record["snapshot"] = *snap;
      if (auto r = journal_.replace(e->id, record); !r)
        snap = makeError("cannot journal the snapshot before applying: " + r.error().message);
    }
    std::unique_lock lock(m_);
    if (!snap) {
      e->error = snap.error().message;
      e->endReason = "error";
      why = "snapshot failed";
    } else {
      e->snapshot = *snap;
      // Sleep until just before the instant, then spin the rest: a timed wake-up can be late
      // by a scheduler tick, and faults on many nodes are meant to start together.
      e->wake.wait_until(lock, stop, e->startSteady - kSpinWindow, [] { return false; });
      lock.unlock();
      while (!stop.stop_requested() && Clock::now() < e->startSteady) {
      }
      lock.lock();
      if (stop.stop_requested()) {
        if (e->endReason.empty()) e->endReason = "cancelled";
        why = "never applied";
      } else {
        e->state = "active";
        e->appliedNs = wallNs();
        e->applied = true;
        generation_++;
      }
    }
  }
  if (!why.empty()) {
    // Nothing was changed, so nothing is reverted: a fault that never ran must not restore a
    // state over another fault's (or the operator's) changes.
    if (!e->error.empty()) log::error("fault '{}' not applied: {}", e->id, e->error);
    if (auto rm = journal_.remove(e->id); !rm)
      log::error("fault '{}' was never applied but its journal entry remains: {}", e->id,
                 rm.error().message);
    finish(e);
    return;
  }
  auto r = step("run", *e, [&] { return e->fault->run(stop, e->events); });
  {
    std::lock_guard lock(m_);
    if (!r) {
      e->error = r.error().message;
      if (e->endReason.empty()) e->endReason = "error";
      log::error("fault '{}' failed: {}", e->id, e->error);
    } else if (e->endReason.empty()) {
      e->endReason = "completed";
    }
    e->state = "reverting";
  }
  if (revertUntilDone(e)) {
    if (auto rm = journal_.remove(e->id); !rm)
      log::error("fault '{}' reverted but its journal entry remains: {}", e->id,
                 rm.error().message);
  }
  finish(e);
}

// Reverts E, retrying with backoff while it fails (an interface renamed or moved away for a
// while, a switch that does not answer): the fault keeps its journal entry and its targets
// meanwhile. Gives up only when the agent stops; the entry is then replayed at the next start.
// Returns whether the entry is done with (reverted, or given up as a conflict).
bool FaultManager::revertUntilDone(const std::shared_ptr<Entry>& e) {
  auto delay = retry_.first;
  for (;;) {
    bool last;
    {
      std::lock_guard lock(m_);
      last = shuttingDown_;
    }
    auto rv = step("revert", *e, [&] {
      FdReserve::Use reserve(fdReserve());  // the descriptors the revert may need
      return e->fault->revert(e->events);
    });
    std::unique_lock lock(m_);
    e->revertAttempts++;
    if (rv) {
      if (e->revertAttempts > 1) {
        log::info("fault '{}' reverted at attempt {}", e->id, e->revertAttempts);
        e->error += (e->error.empty() ? "" : "; ") + std::string("reverted at attempt ") +
                    std::to_string(e->revertAttempts) + " after: " + e->revertError;
      }
      e->revertError.clear();
      generation_++;
      return true;
    }
    e->revertError = rv.error().message;
    if (e->revertAttempts == 1) e->revertFailingSinceNs = wallNs();
    if (rv.error().code == faults::kRevertConflict && e->revertAttempts >= kConflictAttempts) {
      // Another owner holds the target now: restoring over it would turn this revert into a
      // fault. The entry ends with the conflict as its error (the run reports it), and leaves
      // the journal: a replay would find the same conflict.
      e->error += (e->error.empty() ? "" : "; ") + std::string("not restored: ") + e->revertError;
      log::error("fault '{}': its target was changed by another owner and is left as it is after {} attempt(s): {}",
                 e->id, e->revertAttempts, e->revertError);
      generation_++;
      return true;
    }
    if (last) {
      e->error += (e->error.empty() ? "" : "; ") + std::string("revert failed: ") + e->revertError;
      unrevertable_.push_back(e->id);
      log::error(
          "fault '{}' could not be reverted after {} attempt(s) and stays in the journal "
          "for the next start to replay: {}",
          e->id, e->revertAttempts, e->revertError);
      return false;
    }
    e->state = "revert_retrying";
    e->nextRevertAttempt = Clock::now() + delay;
    generation_++;
    // Logged at the backoff's pace, which bounds the rate.
    log::error("fault '{}': revert attempt {} failed, retrying in {} ms: {}", e->id,
               e->revertAttempts, delay.count(), e->revertError);
    cv_.wait_until(lock, e->nextRevertAttempt, [&] { return shuttingDown_; });
    delay = std::min(retry_.max, delay * 2);
  }
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
  for (auto& w : waiters) {
    // A waiter that throws (it only posts to the network loop) must not stop the others.
    try {
      w(rec);
    } catch (const std::exception& ex) {
      log::error("fault '{}': reporting its end failed: {}", e->id, ex.what());
    }
  }
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

namespace {
// OWNER is "<controller id>@<principal>" for a session, or an exact name in tests.
bool ownedBy(const std::string& owner, const std::string& who) {
  if (owner == who) return true;
  auto at = owner.rfind('@');
  return at != std::string::npos && owner.compare(at + 1, std::string::npos, who) == 0;
}
}  // namespace

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
      if (!e->finished && (!owner || ownedBy(e->owner, *owner))) g->remaining++;
    if (g->remaining > 0) {
      for (auto& [id, e] : faults_) {
        if (e->finished || (owner && !ownedBy(e->owner, *owner))) continue;
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
      if (e->finished || e->stopping()) continue;
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
          if (e->owner == it->first && !e->finished && !e->stopping()) {
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
    events.push_back({{"t_ns", ev.timeNs},
                      {"what", ev.what},
                      {"detail", ev.detail},
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
              {"revert_attempts", e.revertAttempts},
              {"revert_error", e.revertError},
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
  // Faults whose revert failed and is being retried: still applied, still journaled.
  json unreverted = json::array();
  for (const auto& [id, e] : faults_) {
    if (e->finished || e->revertError.empty()) continue;
    unreverted.push_back(
        {{"fault", id},
         {"kind", e->kind->name},
         {"owner", e->owner},
         {"describe", e->description},
         {"state", "retrying"},
         {"attempts", e->revertAttempts},
         {"last_error", e->revertError},
         {"failing_since_ns", e->revertFailingSinceNs},
         {"next_attempt_ms",
          std::max<int64_t>(
              0, std::chrono::duration_cast<std::chrono::milliseconds>(e->nextRevertAttempt - now)
                     .count())}});
  }
  for (const auto& l : leftovers_)
    unreverted.push_back(
        {{"fault", l.entry.id},
         {"kind", l.entry.kind->name},
         {"owner", ""},
         {"describe", l.entry.kind->name + " journaled by an earlier run"},
         {"state", "retrying"},
         {"attempts", l.attempts},
         {"last_error", l.entry.error},
         {"failing_since_ns", l.sinceNs},
         {"next_attempt_ms",
          std::max<int64_t>(
              0, std::chrono::duration_cast<std::chrono::milliseconds>(l.next - now).count())}});
  return json{{"active_faults", active},
              {"lease_remaining_ms", leases},
              {"unreverted", unreverted},
              {"unrevertable", unrevertable_},
              {"quarantined", quarantined_},
              {"lease_timeout_ms", leaseTimeout_.count()},
              {"max_fault_lifetime_ms", maxLifetime_.count()}};
}

// A count, not a listing: the metrics tick calls this on the event loop every second, and
// reading every entry (under m_) there would hold up heartbeats behind a slow disk.
size_t FaultManager::journalEntries() const { return journal_.count(); }

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
  cv_.notify_all();  // a revert being retried makes its last attempt now
  for (auto& e : all)
    if (e->thread.joinable()) e->thread.join();
  {
    std::lock_guard lock(m_);
    faults_.clear();
  }
  // Leftovers of an earlier run stay journaled for the next start.
  leftoverThread_.request_stop();
  if (leftoverThread_.joinable()) leftoverThread_.join();
  watcher_.request_stop();
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace rc::agent
