// Helpers shared by the namespace lab and the soft-RoCE lab (see lab_util.hpp).
#include "lab/lab_util.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/errno_text.hpp"

namespace rc::lab {

namespace fs = std::filesystem;

Result<void> mkdirs(const std::string& path, mode_t mode) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return makeError("cannot create directory '" + path + "': " + ec.message(), ec.value());
  ::chmod(path.c_str(), mode);
  return {};
}

Result<void> trustedDir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return makeError(errnoText("cannot inspect the lab directory", dir), errno);
    std::error_code ec;
    fs::create_directories(fs::path(dir).parent_path(), ec);
    if (ec)
      return makeError("cannot create the parents of the lab directory '" + dir + "': " + ec.message(),
                       ec.value());
    // Private from the start: no window in which another user could plant a file in it.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return makeError(errnoText("cannot create the lab directory", dir), errno);
    if (::lstat(dir.c_str(), &st) != 0)
      return makeError(errnoText("cannot inspect the lab directory", dir), errno);
  }
  // The lab acts as root on what it finds here (lab.json names namespaces, links and processes;
  // agents read their configuration and keys), so only a directory this user made and nobody
  // else can write is trusted.
  if (S_ISLNK(st.st_mode))
    return makeError("the lab directory '" + dir +
                     "' is a symbolic link; the lab does not follow links: pass the real path with --dir");
  if (!S_ISDIR(st.st_mode)) return makeError("'" + dir + "' exists and is not a directory; pick another --dir");
  if (st.st_uid != ::geteuid())
    return makeError("the lab directory '" + dir + "' belongs to uid " + std::to_string(st.st_uid) +
                     ", not to this user (uid " + std::to_string(::geteuid()) +
                     "); the lab trusts only a directory it made: remove it or pick another --dir");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return makeError("the lab directory '" + dir + "' is writable by other users (mode " + mode +
                     "); run `chmod go-w " + dir + "` or pick another --dir");
  }
  return {};
}

Result<void> writeFile(const std::string& path, const std::string& text) {
  return writeFileAtomic(path, text);
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A TOML basic string with everything that needs escaping escaped.
std::string durationText(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s"
                               : std::to_string(d.count()) + "ms";
}

std::string tomlString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string absoluteDir(const std::string& dir) {
  return fs::absolute(fs::path(dir)).lexically_normal().string();
}

Result<std::string> resolveBinary(const std::string& name) {
  if (name.empty())
    return makeError("no agent binary given (rdmachaos-agent); build it or pass its path");
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else if (const char* path = ::getenv("PATH")) {
    std::istringstream dirs(path);
    std::string d;
    while (std::getline(dirs, d, ':')) candidates.push_back((d.empty() ? "." : d) + "/" + name);
  }
  for (const auto& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(c.c_str(), X_OK) == 0)
      return fs::absolute(c).lexically_normal().string();
  }
  return makeError("agent binary '" + name +
                   "' not found or not executable; build rdmachaos-agent "
                   "(ninja -C build agent/rdmachaos-agent) or pass its path");
}

Result<FileLock> FileLock::acquire(const std::string& path, bool wait) {
  UniqueFD fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.isValid()) return makeError(errnoText("cannot open lock file", path), errno);
  while (::flock(fd.get(), LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    if (errno == EINTR) continue;
    return makeError(errnoText("cannot lock", path), errno);
  }
  FileLock l;
  l.fd_ = std::move(fd);
  return l;
}

}  // namespace rc::lab
