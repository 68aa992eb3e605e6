// Journal: one file per fault, written with write-temp, fsync, rename, fsync-directory.
#include "common/journal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/protocol.hpp"
#include "common/unique_fd.hpp"

namespace rc {
namespace {

std::string errnoText(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

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

Result<void> fsyncDir(const std::string& dir) {
  UniqueFD fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.isValid()) return makeError(errnoText("cannot open", dir), errno);
  if (::fsync(fd.get()) != 0) return makeError(errnoText("cannot fsync", dir), errno);
  return {};
}

}  // namespace

Result<Journal> Journal::open(const std::string& stateDir) {
  std::string dir = stateDir + "/journal";
  if (auto r = mkdirs(dir); !r) return r.error();
  if (::access(dir.c_str(), W_OK) != 0)
    return makeError(errnoText("journal directory is not writable", dir), errno);
  return Journal(dir);
}

namespace {

// Writes DATA to a fresh temporary file next to PATH and fsyncs it; returns its name.
Result<std::string> writeTemp(const std::string& path, const std::string& data) {
  // A unique name, so two writers never share (or truncate) one temporary file.
  std::string tmp = path + ".XXXXXX.tmp";
  UniqueFD fd(::mkstemps(tmp.data(), 4));
  if (!fd.isValid()) return makeError(errnoText("cannot create", tmp), errno);
  ::fchmod(fd.get(), 0600);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::unlink(tmp.c_str());
      return makeError(errnoText("cannot write", tmp), err);
    }
    off += size_t(n);
  }
  if (::fsync(fd.get()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return makeError(errnoText("cannot fsync", tmp), err);
  }
  return tmp;
}

}  // namespace

Result<void> Journal::add(const std::string& faultId, const nlohmann::json& record) {
  if (!proto::validId(faultId)) return makeError("invalid fault id '" + faultId + "'");
  std::string path = dir_ + "/" + faultId + ".json";
  auto tmp = writeTemp(path, nlohmann::json{{"fault", faultId}, {"record", record}}.dump() + "\n");
  if (!tmp) return tmp.error();
  // link(2), unlike rename(2), fails when the name exists: an entry is never overwritten.
  int rc = ::link(tmp->c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp->c_str());
  if (rc != 0) {
    errno = err;
    if (err == EEXIST)
      return makeError("journal entry '" + path + "' already exists (a fault with the same id "
                       "is active or was left unrevertable); it is not overwritten",
                       EEXIST);
    return makeError(errnoText("cannot create", path), err);
  }
  return fsyncDir(dir_);
}

Result<void> Journal::replace(const std::string& faultId, const nlohmann::json& record) {
  if (!proto::validId(faultId)) return makeError("invalid fault id '" + faultId + "'");
  std::string path = dir_ + "/" + faultId + ".json";
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return makeError(errnoText("journal entry to update is missing or not a file:", path), ENOENT);
  auto tmp = writeTemp(path, nlohmann::json{{"fault", faultId}, {"record", record}}.dump() + "\n");
  if (!tmp) return tmp.error();
  if (::rename(tmp->c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp->c_str());
    return makeError(errnoText("cannot rename into", path), err);
  }
  return fsyncDir(dir_);
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
  if (auto r = fsyncDir(qdir); !r) return r.error();
  if (auto r = fsyncDir(dir_); !r) return r.error();
  return to;
}

Result<void> Journal::remove(const std::string& faultId) {
  std::string path = dir_ + "/" + faultId + ".json";
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return makeError(errnoText("cannot remove", path), errno);
  return fsyncDir(dir_);
}

Result<std::vector<JournalEntry>> Journal::list() const {
  std::vector<JournalEntry> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return makeError(errnoText("cannot read", dir_), errno);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() <= 5 || name.substr(name.size() - 5) != ".json") continue;
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
