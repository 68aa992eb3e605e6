// The agent's on-disk record of active faults. An entry is written and fsynced BEFORE its
// fault is applied and removed after the revert, so a crash leaves enough to revert on restart.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc {

struct JournalEntry {
  std::string faultId;
  nlohmann::json record;  // kind, params, and the snapshot the revert needs
};

class Journal {
 public:
  // Creates DIR/journal if needed. Where it exists but cannot be written (a state file system
  // remounted read-only, a full or failing disk), it is opened read-only rather than refused:
  // the replay must still run its reverts, which need only to read. A read-only journal
  // refuses add() and replace() (so no fault starts without its entry) and keeps the entries
  // the replay reverted (each revert is idempotent, and the next start replays them again).
  // Fails only where the directory cannot be created and does not exist, or cannot be read.
  static Result<Journal> open(const std::string& stateDir);

  // Takes an exclusive lock on the journal directory, held while this Journal (or a move of
  // it) lives: one process replays and journals at a time. A second agent, or a --replay-only
  // run, on a journal that a live agent holds gets EWOULDBLOCK, not a revert of the live
  // agent's faults under it. The lock goes with the process, also on SIGKILL.
  Result<void> lock();
  bool readOnly() const { return readOnly_; }

  // Durable: data and directory entry are fsynced before this returns. Never overwrites: an
  // entry of the same id already there (e.g. one left unrevertable) is an error (EEXIST).
  Result<void> add(const std::string& faultId, const nlohmann::json& record);
  // Durably replaces the existing entry of FAULT_ID (the fault's own, e.g. with its snapshot).
  Result<void> replace(const std::string& faultId, const nlohmann::json& record);
  Result<void> remove(const std::string& faultId);
  // Moves an entry the agent cannot use to DIR/quarantine/ (keeping it for an operator, out
  // of every later replay). Returns the new path.
  Result<std::string> quarantine(const std::string& faultId);
  // Entries that are unreadable are returned with record = null so the caller can report them.
  Result<std::vector<JournalEntry>> list() const;
  const std::string& dir() const { return dir_; }
  // Entries on disk, kept as a count by add/remove/quarantine (read once at open()): what the
  // metrics tick shows without reading every entry on the agent's event loop.
  size_t count() const { return count_->load(); }
  // For tests: called inside add() once the entry is durable, before add() returns (a disk
  // whose fsync stalls). Shared by copies of this journal.
  void setAddHook(std::function<void(const std::string& faultId)> hook) { *addHook_ = std::move(hook); }

 private:
  explicit Journal(std::string dir, size_t count, bool readOnly)
      : dir_(std::move(dir)),
        count_(std::make_shared<std::atomic<size_t>>(count)),
        readOnly_(readOnly),
        addHook_(std::make_shared<std::function<void(const std::string&)>>()) {}
  Result<void> writable() const;
  std::string dir_;
  std::shared_ptr<std::atomic<size_t>> count_;  // shared: a Journal is moved, never copied apart
  bool readOnly_ = false;
  std::shared_ptr<int> lockFd_;  // the locked directory descriptor (lock()), closed with the last copy
  std::shared_ptr<std::function<void(const std::string&)>> addHook_;
};

}  // namespace rc
