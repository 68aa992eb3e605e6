// Owns every fault on this node: validates, journals (before applying), runs each fault on
// its own thread, and reverts on request, on lease expiry, at the maximum lifetime and on
// shutdown. Independent of the network layer so it can be tested on its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "agent/journal.hpp"
#include "common/protocol.hpp"
#include "faults/fault.hpp"

namespace rc::agent {

using json = nlohmann::json;

// How a failed revert is retried: after FIRST, doubling up to MAX, until it succeeds or the
// agent stops (then the journal entry is left for the next start to replay).
struct RetryBackoff {
  std::chrono::milliseconds first{250}, max{30'000};
};

// A revert that found its target in a third owner's hands (faults::kRevertConflict) is tried
// this many times in all (the other owner may restore its change meanwhile, after which this
// one's own restore applies), then given up as a conflict: the fault ends with it as its error.
inline constexpr int kConflictAttempts = 4;

class FaultManager {
 public:
  using Done = std::function<void(json record)>;

  FaultManager(faults::Policy policy, Journal journal, std::chrono::milliseconds maxLifetime,
               std::chrono::milliseconds leaseTimeout, RetryBackoff retry = {});
  ~FaultManager();  // reverts everything still active
  FaultManager(const FaultManager&) = delete;
  FaultManager& operator=(const FaultManager&) = delete;

  // What replaying a journal did: one line per entry for the log, the entries whose revert
  // failed (still journaled) and those moved to quarantine (unreadable, unknown, malformed).
  struct Replay {
    std::vector<std::string> lines, unrevertable, quarantined;
    // What a manager needs to keep retrying the unrevertable ones (adoptReplay()).
    struct Pending {
      std::string id, error;
      const faults::FaultKind* kind = nullptr;
      json params, snapshot;
      std::vector<std::string> targets;
    };
    std::vector<Pending> pending;
  };
  // Reverts every fault recorded in JOURNAL (after a crash). Needs nothing but the journal and
  // the configured policy (configuredPolicy(): no system calls), so the agent runs it before
  // loading anything that could fail (TLS, the interface policy's netlink dump).
  static Replay replayJournal(Journal& journal, const faults::Policy& policy);
  // Keeps retrying a replay's unrevertable entries (with backoff, until they succeed; they hold
  // their targets meanwhile) and reports them and the quarantined ones in status().
  void adoptReplay(const Replay& replay);
  // replayJournal() on this manager's journal, adopted; returns the lines.
  std::vector<std::string> recoverJournal();

  // Validates, snapshots, journals and starts a fault owned by OWNER. Returns the record.
  // ON_END (optional) is called from the fault's thread with the final record.
  Result<json> schedule(const std::string& owner, const proto::Schedule& request, Done onEnd = {});
  // Stops and reverts a fault; DONE is called (from another thread) once it is reverted.
  Result<void> revert(const std::string& faultId, Done done);
  // Stops and reverts every active fault (of OWNER, or all); DONE gets the list of records.
  // OWNER matches an owner exactly or its principal (what follows its last '@').
  void revertAll(const std::string* owner, std::string reason, Done done);
  // Refreshes OWNER's lease. Faults of an owner whose lease runs out are reverted.
  void heartbeat(const std::string& owner);

  json list() const;
  Result<json> get(const std::string& faultId) const;
  size_t activeCount() const;
  json status() const;
  size_t journalEntries() const;  // faults on disk, to be reverted at start if the agent died
  const faults::Policy& policy() const { return policy_; }
  std::chrono::milliseconds leaseTimeout() const { return leaseTimeout_; }

  // Reverts everything and waits for every fault thread to finish.
  void shutdown();

  // Called on a fault's thread before each step it takes ("snapshot", "run", "revert") with
  // the fault's id; what it throws is what that step would have thrown. For the tests of the
  // exception barriers; the agent sets none. Set it before scheduling.
  using StepHook = std::function<void(std::string_view step, const std::string& faultId)>;
  void setStepHook(StepHook hook) { stepHook_ = std::move(hook); }

 private:
  struct Entry;
  void runFault(std::shared_ptr<Entry> e, std::stop_token stop);
  void runFaultBarrier(std::shared_ptr<Entry> e, std::stop_token stop);
  template <typename F>
  auto step(const char* name, const Entry& e, F f) -> decltype(f());
  void watch(std::stop_token stop);
  json recordOf(const Entry& e) const;
  void finish(const std::shared_ptr<Entry>& e);
  bool revertUntilDone(const std::shared_ptr<Entry>& e);
  void retryLeftovers(std::stop_token stop);

  faults::Policy policy_;
  Journal journal_;
  std::chrono::milliseconds maxLifetime_;
  std::chrono::milliseconds leaseTimeout_;
  RetryBackoff retry_;
  StepHook stepHook_;

  mutable std::mutex m_;
  std::condition_variable_any cv_;
  std::map<std::string, std::shared_ptr<Entry>> faults_;  // active and recently finished
  std::map<std::string, std::chrono::steady_clock::time_point> leases_;
  std::vector<std::string> unrevertable_, quarantined_;
  // Journal entries an earlier run left applied and the replay could not revert.
  struct Leftover {
    Replay::Pending entry;
    int attempts = 1;  // the replay's
    int64_t sinceNs = 0;
    std::chrono::milliseconds delay{};
    std::chrono::steady_clock::time_point next;
  };
  std::vector<Leftover> leftovers_;
  std::jthread leftoverThread_;
  bool shuttingDown_ = false;
  uint64_t generation_ = 0;  // bumped on every change the watcher must see
  uint64_t seq_ = 0;         // the last Entry::seq given
  std::jthread watcher_;
};

}  // namespace rc::agent
