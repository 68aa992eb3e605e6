// Recovery of what an earlier run left applied: the journal's replay at start, and the
// retries of the reverts it could not do (the leftovers), which hold their targets meanwhile.
// The live faults' lifecycle is in fault_manager.cpp.
#include <algorithm>
#include <chrono>

#include "agent/fault_manager.hpp"
#include "common/clock.hpp"
#include "common/fd_reserve.hpp"
#include "common/log.hpp"

namespace rc::agent {

using Clock = std::chrono::steady_clock;

FaultManager::Replay FaultManager::replayJournal(Journal& journal, const faults::Policy& policy) {
  Replay out;
  auto entries = journal.list();
  if (!entries) {
    out.lines.push_back("cannot read the journal: " + entries.error().message);
    return out;
  }
  // An entry the agent cannot interpret is moved aside, so it cannot stop every later start
  // (a crash loop would leave every other journaled fault applied).
  auto quarantine = [&](const JournalEntry& entry, const std::string& why) {
    auto moved = journal.quarantine(entry.faultId);
    out.quarantined.push_back(entry.faultId);
    out.lines.push_back("journal entry '" + entry.faultId + "' " + why +
                        (moved ? "; moved to " + *moved + " for an operator"
                               : "; could not move it aside: " + moved.error().message));
  };
  for (const auto& entry : *entries) {
    try {
      const json& rec = entry.record;
      const faults::FaultKind* kind = nullptr;
      if (rec.is_object() && rec.contains("kind") && rec["kind"].is_string())
        kind = faults::findKind(rec["kind"].get<std::string>());
      if (!kind) {
        quarantine(entry, "is unreadable or of an unknown kind");
        continue;
      }
      if (!rec.contains("snapshot")) {
        // Journaled when scheduled, never applied: nothing changed, nothing to revert.
        if (auto rm = journal.remove(entry.faultId); !rm)
          out.lines.push_back("'" + entry.faultId + "' was never applied but " +
                              rm.error().message);
        else
          out.lines.push_back("removed journaled fault '" + entry.faultId + "' (" + kind->name +
                              "), which was never applied");
        continue;
      }
      auto params = rec.value("params", json::object());
      Result<void> r;
      // A revert that throws (other than on a malformed field) is a revert that failed: the
      // entry stays and is retried, not quarantined (that would forget an applied fault).
      try {
        FdReserve::Use reserve(fdReserve());  // the descriptors the revert may need
        r = kind->revertRecord(params, rec["snapshot"], policy);
      } catch (const json::exception&) {
        throw;  // a field of the wrong type: the entry is malformed, quarantined below
      } catch (const std::exception& ex) {
        r = makeError(std::string("exception: ") + ex.what());
      }
      if (!r) {
        out.lines.push_back("could not revert journaled fault '" + entry.faultId + "' (" +
                            kind->name + "): " + r.error().message +
                            "; retrying while the agent runs");
        out.unrevertable.push_back(entry.faultId);
        Replay::Pending p{entry.faultId, r.error().message, kind, params, rec["snapshot"], {}};
        if (rec.contains("targets") && rec["targets"].is_array())
          for (const auto& t : rec["targets"])
            if (t.is_string()) p.targets.push_back(t.get<std::string>());
        out.pending.push_back(std::move(p));
        continue;
      }
      if (auto rm = journal.remove(entry.faultId); !rm)
        out.lines.push_back("reverted '" + entry.faultId + "' but " + rm.error().message);
      else
        out.lines.push_back("reverted journaled fault '" + entry.faultId + "' (" + kind->name +
                            ")");
    } catch (const std::exception& ex) {
      quarantine(entry, std::string("is malformed (") + ex.what() + ")");
    }
  }
  return out;
}

std::vector<std::string> FaultManager::recoverJournal() {
  Replay r = replayJournal(journal_, policy_);
  adoptReplay(r);
  return r.lines;
}

void FaultManager::adoptReplay(const Replay& replay) {
  std::lock_guard lock(m_);
  for (const auto& id : replay.quarantined) quarantined_.push_back(id);
  for (const auto& p : replay.pending) {
    Leftover l{p, 1, wallNs(), retry_.first, Clock::now() + retry_.first};
    leftovers_.push_back(std::move(l));
  }
  if (!leftovers_.empty() && !leftoverThread_.joinable() && !shuttingDown_)
    leftoverThread_ = std::jthread([this](std::stop_token st) { retryLeftovers(st); });
}

// Retries what the replay could not revert, with the same backoff as a live fault's revert.
void FaultManager::retryLeftovers(std::stop_token stop) {
  std::unique_lock lock(m_);
  while (!stop.stop_requested() && !leftovers_.empty()) {
    auto next = Clock::time_point::max();
    for (const auto& l : leftovers_) next = std::min(next, l.next);
    cv_.wait_until(lock, stop, next, [] { return false; });
    if (stop.stop_requested()) break;
    for (size_t i = 0; i < leftovers_.size();) {
      if (leftovers_[i].next > Clock::now()) {
        ++i;
        continue;
      }
      Replay::Pending p = leftovers_[i].entry;
      lock.unlock();
      Result<void> r;
      try {
        FdReserve::Use reserve(fdReserve());
        r = p.kind->revertRecord(p.params, p.snapshot, policy_);
      } catch (const std::exception& ex) {
        r = makeError(std::string("exception: ") + ex.what());
      }
      if (r) {
        if (auto rm = journal_.remove(p.id); !rm)
          log::error("journaled fault '{}' reverted but its entry remains: {}", p.id,
                     rm.error().message);
      }
      lock.lock();
      // The list only changes on this thread and in adoptReplay (appends), so I is still it.
      auto& l = leftovers_[i];
      l.attempts++;
      if (r) {
        log::info("journaled fault '{}' ({}) reverted at attempt {}", p.id, p.kind->name,
                  l.attempts);
        leftovers_.erase(leftovers_.begin() + ptrdiff_t(i));
        generation_++;
        continue;
      }
      l.entry.error = r.error().message;
      if (r.error().code == faults::kRevertConflict && l.attempts >= kConflictAttempts) {
        log::error("journaled fault '{}' ({}): its target was changed by another owner and is left as it is after {} "
                   "attempt(s): {}",
                   p.id, p.kind->name, l.attempts, l.entry.error);
        lock.unlock();
        if (auto rm = journal_.remove(p.id); !rm)
          log::error("journaled fault '{}': its entry remains: {}", p.id, rm.error().message);
        lock.lock();
        leftovers_.erase(leftovers_.begin() + ptrdiff_t(i));
        generation_++;
        continue;
      }
      log::error("journaled fault '{}' ({}): revert attempt {} failed, retrying in {} ms: {}", p.id,
                 p.kind->name, l.attempts, l.delay.count(), l.entry.error);
      l.next = Clock::now() + l.delay;
      l.delay = std::min(retry_.max, l.delay * 2);
      ++i;
    }
  }
}

}  // namespace rc::agent
