// Durable file replacement: the one way rdmachaos writes a file that must survive a crash whole
// (journal entries, certificates and keys, lab state, reports).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.hpp"

namespace rc {

struct AtomicWriteOptions {
  mode_t mode = 0644;    // the file's permissions (the temp file has them from the start)
  bool replace = true;   // false: fail with EEXIST if PATH exists (never overwrite)
};

// Writes DATA to a private temp file next to PATH (O_EXCL|O_NOFOLLOW, created with MODE, so a
// key is never readable by others, not even briefly), loops over short writes, fsyncs it,
// renames it onto PATH (with RENAME_NOREPLACE when !replace), and fsyncs the directory. A
// crash leaves the old file or the new one, never half of either; a failure removes the temp.
Result<void> writeFileAtomic(const std::string& path, std::string_view data, AtomicWriteOptions options = {});

// fsync of a directory, so that a rename or unlink in it is durable.
Result<void> fsyncDirectory(const std::string& dir);

}  // namespace rc
