// Agent config: a good file parses; every bad one is refused with file:line:col and the fix.
#include <catch2/catch.hpp>

#include "agent/config.hpp"

using namespace rc::agent;

namespace {
const char* kGood = R"(
[agent]
node = "n1"
listen = "198.18.1.11:7470"
state_dir = "/tmp/state"
lease_timeout = "3s"
max_fault_lifetime = "10m"
[tls]
ca = "/p/ca.pem"
cert = "/p/agent-n1.pem"
key = "/p/agent-n1.key"
[interfaces]
data = ["data0"]
allow = ["data0"]
protected = ["mgmt0"]
allow_default_route = false
)";
}

TEST_CASE("a complete config parses") {
  auto c = parseConfig(kGood, "agent.toml");
  REQUIRE(c.ok());
  CHECK(c->node == "n1");
  CHECK(c->listenAddress == "198.18.1.11");
  CHECK(c->listenPort == 7470);
  CHECK(c->leaseTimeout.count() == 3000);
  CHECK(c->maxFaultLifetime.count() == 600000);
  CHECK(c->allowInterfaces == std::vector<std::string>{"data0"});
  CHECK(c->protectedInterfaces == std::vector<std::string>{"mgmt0"});
  CHECK(c->tls.caFile == "/p/ca.pem");
}

TEST_CASE("bad configs name the place and the fix") {
  auto [from, to, fragment] = GENERATE(table<std::string, std::string, std::string>({
      {"lease_timeout = \"3s\"", "lease_timeout = \"3\"", "agent.toml:6:17: duration '3' needs a unit"},
      {"lease_timeout = \"3s\"", "lease_timeout = \"1h\"", "out of range"},
      {"lease_timeout = \"3s\"", "lease_tmeout = \"3s\"", "unknown key 'lease_tmeout' in [agent]"},
      {"listen = \"198.18.1.11:7470\"", "listen = \"n1:7470\"", "must be an IP address and port"},
      {"listen = \"198.18.1.11:7470\"", "listen = \"198.18.1.11:99999\"", "must be an IP address"},
      {"protected = [\"mgmt0\"]", "protected = [\"data0\"]", "'data0' is both allowed and protected"},
      {"allow = [\"data0\"]", "allow = \"data0\"", "must be a list of interface names"},
      {"node = \"n1\"", "", "missing key 'node' in [agent]"},
      {"[tls]", "[tlz]", "unknown key 'tlz'"},
      {"allow_default_route = false", "allow_default_route = \"no\"", "must be true or false"},
      {"[agent]", "[agent", "agent.toml:2"},
  }));
  std::string text = kGood;
  auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  auto c = parseConfig(text, "agent.toml");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message, Catch::Contains(fragment));
}

TEST_CASE("a missing config file is named") {
  auto c = loadConfig("/nonexistent/agent.toml");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message, Catch::Contains("/nonexistent/agent.toml"));
}
