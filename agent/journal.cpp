// Journal: one file per fault, written durably (writeFileAtomic) and never over another entry.
#include "agent/journal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/atomic_file.hpp"
#include "common/errno_text.hpp"
#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

namespace rc {
namespace {

Result<void> mkdirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      cur = path.substr(0, i);
      if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
        return makeError(errnoText("cannot create directory", cur), errno);
    }
  }
  return {};
}

bool isEntryName(std::string_view name) { return name.size() > 5 && name.substr(name.size() - 5) == ".json"; }

}  // namespace

Result<Journal> Journal::open(const std::string& stateDir) {
  std::string dir = stateDir + "/journal";
  struct stat st{};
  bool exists = ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (!exists)
    if (auto r = mkdirs(dir); !r) return r.error();
  // An entry cannot be written: read-only, so that the replay still reverts (see open()).
  bool readOnly = ::access(dir.c_str(), W_OK) != 0;
  // Names only (as list() sees them): no entry is read here.
  size_t entries = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return makeError(errnoText("cannot read the journal directory", dir), errno);
  while (dirent* e = ::readdir(d)) entries += isEntryName(e->d_name);
  ::closedir(d);
  return Journal(dir, entries, readOnly);
}

Result<void> Journal::lock() {
  if (lockFd_) return {};
  UniqueFD fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.isValid()) return makeError(errnoText("cannot open the journal directory", dir_), errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err == EWOULDBLOCK)
      return makeError("the journal '" + dir_ + "' is held by another running rdmachaos-agent "
                       "(it reverts its own faults when it stops); stop that agent first, or "
                       "give this one its own state_dir",
                       EWOULDBLOCK);
    return makeError(errnoText("cannot lock the journal directory", dir_), err);
  }
  lockFd_ = std::shared_ptr<int>(new int(fd.release()), [](int* p) {
    ::close(*p);
    delete p;
  });
  return {};
}

Result<void> Journal::writable() const {
  if (!readOnly_) return {};
  return makeError("the journal '" + dir_ + "' is read-only (a read-only or failing state file "
                   "system?): no fault starts without its entry; make it writable and restart "
                   "the agent",
                   EROFS);
}

Result<void> Journal::add(const std::string& faultId, const nlohmann::json& record) {
  if (!proto::validId(faultId)) return makeError("invalid fault id '" + faultId + "'");
  if (auto w = writable(); !w) return w;
  std::string path = dir_ + "/" + faultId + ".json";
  // Never over another entry (RENAME_NOREPLACE): an id collision must not erase what a revert
  // needs.
  auto r = writeFileAtomic(path, nlohmann::json{{"fault", faultId}, {"record", record}}.dump() + "\n",
                           {.mode = 0600, .replace = false});
  if (!r && r.error().code == EEXIST)
    return makeError("journal entry '" + path + "' already exists (a fault with the same id "
                     "is active or was left unrevertable); it is not overwritten",
                     EEXIST);
  if (r) (*count_)++;
  if (r && *addHook_) (*addHook_)(faultId);
  return r;
}

Result<void> Journal::replace(const std::string& faultId, const nlohmann::json& record) {
  if (!proto::validId(faultId)) return makeError("invalid fault id '" + faultId + "'");
  if (auto w = writable(); !w) return w;
  std::string path = dir_ + "/" + faultId + ".json";
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return makeError(errnoText("journal entry to update is missing or not a file:", path), ENOENT);
  return writeFileAtomic(path, nlohmann::json{{"fault", faultId}, {"record", record}}.dump() + "\n", {.mode = 0600});
}

Result<std::string> Journal::quarantine(const std::string& faultId) {
  std::string qdir = dir_ + "/quarantine";
  if (::mkdir(qdir.c_str(), 0700) != 0 && errno != EEXIST)
    return makeError(errnoText("cannot create", qdir), errno);
  std::string from = dir_ + "/" + faultId + ".json";
  // Never overwrite an earlier quarantined entry of the same id: number the newcomer.
  std::string to = qdir + "/" + faultId + ".json";
  for (int i = 1; ::access(to.c_str(), F_OK) == 0 && i < 1000; i++)
    to = qdir + "/" + faultId + "." + std::to_string(i) + ".json";
  if (::rename(from.c_str(), to.c_str()) != 0) return makeError(errnoText("cannot move", from), errno);
  (*count_)--;
  if (auto r = fsyncDirectory(qdir); !r) return r.error();
  if (auto r = fsyncDirectory(dir_); !r) return r.error();
  return to;
}

Result<void> Journal::remove(const std::string& faultId) {
  std::string path = dir_ + "/" + faultId + ".json";
  if (::unlink(path.c_str()) == 0)
    (*count_)--;
  else if (errno != ENOENT)
    return makeError(errnoText("cannot remove", path), errno);
  return fsyncDirectory(dir_);
}

Result<std::vector<JournalEntry>> Journal::list() const {
  std::vector<JournalEntry> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return makeError(errnoText("cannot read", dir_), errno);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!isEntryName(name)) continue;
    JournalEntry entry;
    entry.faultId = name.substr(0, name.size() - 5);
    std::string path = dir_ + "/" + name;
    UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    std::string data;
    if (fd.isValid()) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd.get(), buf, sizeof buf)) > 0 && data.size() < (1u << 20))
        data.append(buf, size_t(n));
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("record")) entry.record = j["record"];
    out.push_back(std::move(entry));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const JournalEntry& a, const JournalEntry& b) { return a.faultId < b.faultId; });
  return out;
}

}  // namespace rc
