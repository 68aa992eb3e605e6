// The start-up check of a non-root agent with capabilities: its config and journal must be
// files only root (or, under a root-launched unit, its own user) can change.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "agent/privilege.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_agent_privilege {

using namespace rc::agent;

namespace {
TrustedPath file(uid_t uid, mode_t mode, std::string what = "config", std::string path = "/etc/rdmachaos/agent.toml") {
  return {std::move(what), std::move(path), true, uid, mode | S_IFREG};
}
}  // namespace

TEST_CASE("root, or no capabilities at all: any paths (nothing is gained through them)") {
  auto loose = file(1000, 0666);
  CHECK(checkTrustedPaths({.euid = 0, .capabilities = true, .fileCapabilities = false}, {loose}).ok());
  CHECK(checkTrustedPaths({.euid = 1000, .capabilities = false, .fileCapabilities = false}, {loose}).ok());
}

TEST_CASE("file capabilities: only root-owned paths that group and others cannot write") {
  PrivilegeFacts setcap{.euid = 1000, .capabilities = true, .fileCapabilities = true};
  CHECK(checkTrustedPaths(setcap, {file(0, 0644), file(0, 0700, "state directory", "/var/lib/rdmachaos")}).ok());
  // The user's own config: any local user could run the binary with one.
  auto own = checkTrustedPaths(setcap, {file(1000, 0600, "config", "/home/u/agent.toml")});
  REQUIRE_FALSE(own.ok());
  CHECK_THAT(own.error().message, Catch::Contains("'/home/u/agent.toml' is owned by uid 1000, not by root") &&
                                      Catch::Contains("file capabilities (setcap)") &&
                                      Catch::Contains("setcap -r"));
  auto writable = checkTrustedPaths(setcap, {file(0, 0644), file(0, 0777, "state directory", "/var/lib/rdmachaos")});
  REQUIRE_FALSE(writable.ok());
  CHECK_THAT(writable.error().message,
             Catch::Contains("'/var/lib/rdmachaos' is writable by others (mode 0777)") &&
                 Catch::Contains("chmod go-w '/var/lib/rdmachaos'"));
  auto group = checkTrustedPaths(setcap, {file(0, 0664)});
  REQUIRE_FALSE(group.ok());
  CHECK_THAT(group.error().message, Catch::Contains("writable by its group (mode 0664)"));
  // A path the agent has not created yet is made by the agent itself, private to it.
  CHECK(checkTrustedPaths(setcap, {TrustedPath{"state directory", "/nowhere", false, 1000, 0777}}).ok());
}

TEST_CASE("ambient capabilities from a root-launched unit: root's paths or the agent user's own") {
  PrivilegeFacts unit{.euid = 990, .capabilities = true, .fileCapabilities = false};
  CHECK(checkTrustedPaths(unit, {file(0, 0640), file(990, 0700, "state directory", "/var/lib/rdmachaos")}).ok());
  auto other = checkTrustedPaths(unit, {file(1000, 0644)});
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message, Catch::Contains("owned by uid 1000, not by root or the agent's own user"));
  CHECK_FALSE(checkTrustedPaths(unit, {file(990, 0620)}).ok());
}

}  // namespace test_agent_privilege
