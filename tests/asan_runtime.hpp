// What a program built without sanitizers (python3, an MPI job) needs to load this build's
// libraries: in an ASan build, ASan's runtime preloaded before them (it must come first).
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace rctest {

// The path of ASan's runtime in a sanitized build, "" in a plain one, nullopt when a sanitized
// build finds no runtime to preload (`cc -print-file-name=libasan.so`).
inline std::optional<std::string> asanRuntime() {
#if defined(__SANITIZE_ADDRESS__)
  std::string lib;
  if (FILE* p = ::popen("cc -print-file-name=libasan.so 2>/dev/null", "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) lib += buf;
    ::pclose(p);
  }
  while (!lib.empty() && (lib.back() == '\n' || lib.back() == ' ')) lib.pop_back();
  if (lib.empty() || lib.front() != '/' || !std::filesystem::exists(lib)) return std::nullopt;
  return lib;
#else
  return std::string();
#endif
}

}  // namespace rctest
