// Helpers that many test sources use, defined once: the unit and netns sources build one
// program each from unity chunks (tests/meson.build), where two definitions would clash.
#pragma once
#include <sched.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace rctest {

inline constexpr int64_t kMs = 1'000'000;      // nanoseconds
inline constexpr int64_t kS = 1'000'000'000;

#ifdef RDMACHAOS_SOURCE_ROOT
// A ConnectX-6's sysfs, recorded (tests/data/connectx6/sys): the NIC counter sources read it.
inline const std::string kConnectx6Sys = std::string(RDMACHAOS_SOURCE_ROOT) + "/tests/data/connectx6/sys";
#endif

// A private directory under the system's temporary directory that disappears with the test,
// also when a REQUIRE throws.

class TempDir {
 public:
  std::string path;

  explicit TempDir(const std::string& prefix = "rc-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // NAME inside the directory.
  std::string file(const std::string& name) const { return path + "/" + name; }
  operator const std::string&() const { return path; }
};

// Runs a shell command (the system's ip, tc: not ours) that must succeed.
inline void sh(const std::string& cmd) {
  INFO("command: " << cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
}

// Moves this process, before any thread exists, into a fresh network namespace with loopback
// up: it dies with the process, so whatever a failing case leaves in it goes too, and the
// host's interfaces are out of reach. (A test program runs one source's cases per process:
// tests/meson.build.)
inline void enterPrivateNetns() {
  static const std::string failed = []() -> std::string {
    if (::unshare(CLONE_NEWNET) != 0) return std::string("unshare: ") + std::strerror(errno);
    if (std::system("ip link set lo up") != 0) return "ip link set lo up failed";
    return "";
  }();
  INFO(failed);
  REQUIRE(failed.empty());
}

}  // namespace rctest
