// What errno says, for error messages: one place for every folder.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace rc {

// strerror of E (the current errno unless given).
inline std::string errnoText(int e = errno) { return std::strerror(e); }

// "WHAT 'PATH': strerror(E)", e.g. "cannot open 'journal/x.json': Permission denied".
inline std::string errnoText(const std::string& what, const std::string& path, int e = errno) {
  return what + " '" + path + "': " + std::strerror(e);
}

}  // namespace rc
