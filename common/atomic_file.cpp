// writeFileAtomic: temp file, write loop, fsync, rename, fsync of the directory.
#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/unique_fd.hpp"

namespace rc {
namespace {

std::string failure(const char* what, const std::string& path, int err) {
  return std::string(what) + " '" + path + "': " + std::strerror(err);
}

std::string parentOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Result<void> fsyncDirectory(const std::string& dir) {
  UniqueFD fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.isValid()) return makeError(failure("cannot open directory", dir, errno), errno);
  if (::fsync(fd.get()) != 0) return makeError(failure("cannot fsync directory", dir, errno), errno);
  return {};
}

Result<void> writeFileAtomic(const std::string& path, std::string_view data, AtomicWriteOptions options) {
  // A name no one else predicts or shares: a crashed writer's leftover is never renamed over a
  // newer file, and a symlink planted at the temp name is refused (O_EXCL|O_NOFOLLOW).
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string tmp;
  UniqueFD fd;
  for (int attempt = 0; attempt < 8 && !fd.isValid(); attempt++) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp.%d.%08llx", int(::getpid()), (unsigned long long)(rng() & 0xffffffffu));
    tmp = path + suffix;
    fd.reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, options.mode));
    if (!fd.isValid() && errno != EEXIST) return makeError(failure("cannot create", tmp, errno), errno);
  }
  if (!fd.isValid()) return makeError(failure("cannot create a temp file for", path, EEXIST), EEXIST);
  auto fail = [&](const char* what, const std::string& p, int err) -> Result<void> {
    ::unlink(tmp.c_str());
    return makeError(failure(what, p, err), err);
  };
  // The umask may have narrowed MODE at creation; the caller's mode is what it asked for.
  if (::fchmod(fd.get(), options.mode) != 0) return fail("cannot chmod", tmp, errno);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write", tmp, errno);
    }
    off += size_t(n);
  }
  if (::fsync(fd.get()) != 0) return fail("cannot fsync", tmp, errno);
  if (::close(fd.release()) != 0) return fail("cannot write", tmp, errno);
  int r = options.replace ? ::rename(tmp.c_str(), path.c_str())
                          : ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (r != 0) {
    int err = errno;
    if (err == EEXIST) return fail("will not overwrite", path, err);
    return fail("cannot rename into", path, err);
  }
  return fsyncDirectory(parentOf(path));
}

}  // namespace rc
