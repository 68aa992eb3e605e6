// Small file, lock and path helpers shared by the namespace lab and the soft-RoCE lab.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "common/result.hpp"
#include "common/errno_text.hpp"
#include "common/unique_fd.hpp"

namespace rc::lab {

// "WHAT 'PATH': strerror(errno)".
Result<void> mkdirs(const std::string& path, mode_t mode);
// Creates the lab directory DIR private to this user (0700), or checks that an existing one
// can be trusted: a real directory (no symlink), owned by this user, writable by nobody else.
// The error names the problem and the fix.
Result<void> trustedDir(const std::string& dir);
// Atomic: temp file, fsync, rename.
Result<void> writeFile(const std::string& path, const std::string& text);
// The whole file, or "" if it cannot be read.
std::string readText(const std::string& path);
// A TOML basic string with everything that needs escaping escaped.
std::string tomlString(const std::string& s);
// A duration for a TOML config: "5s" for whole seconds, else "1500ms".
std::string durationText(std::chrono::milliseconds d);
std::string absoluteDir(const std::string& dir);
// An executable file: a path, or a name looked up in PATH; returns its absolute path.
Result<std::string> resolveBinary(const std::string& name);

// An exclusive flock held for the lifetime of the object.
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& path, bool wait);

 private:
  UniqueFD fd_;
};

}  // namespace rc::lab
