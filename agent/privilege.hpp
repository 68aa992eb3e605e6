// The start-up check of an agent that holds capabilities without being root: its orders (the
// config) and its memory (the journal) must be files no one else can change.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::agent {

// How the agent holds its privileges.
struct PrivilegeFacts {
  uid_t euid = 0;
  bool capabilities = false;      // any capability permitted or effective
  bool fileCapabilities = false;  // from the executable's security.capability (setcap)
};

// A path the agent trusts, as stat(2) saw it.
struct TrustedPath {
  std::string what;  // "config", "state directory", ...
  std::string path;
  bool exists = false;
  uid_t uid = 0;
  mode_t mode = 0;
};

// Root, or an agent without capabilities, may use any paths (nothing is gained through it).
// An agent with capabilities but not root takes its orders from these paths, so each must be
// owned by root (or, when the capabilities were given by a root-launched unit rather than by
// file capabilities, by the agent's own user) and not writable by group or others. With file
// capabilities any local user runs the agent as themselves: only root-owned paths are
// trusted then. The error names the path, what is wrong and the fix.
Result<void> checkTrustedPaths(const PrivilegeFacts& self, const std::vector<TrustedPath>& paths);

// This process's facts (euid, /proc/self/status, the xattr of /proc/self/exe) and a path's.
PrivilegeFacts currentPrivileges();
TrustedPath statPath(std::string what, std::string path);

}  // namespace rc::agent
