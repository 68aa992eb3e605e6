// Agent config: a good file parses; every bad one is refused with file:line:col and the fix.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "agent/config.hpp"
#include "agent/workload_manager.hpp"
#include "agent_config_fixture.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_agent_config {

using namespace rc::agent;

namespace {
const char* kGood = rctest::kAgentConfig;
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
  CHECK(c->counterInterval.count() == 100);  // the default
}

TEST_CASE("the NIC counter interval is a bounded duration") {
  std::string text = kGood;
  text.replace(text.find("allow_default_route = false"), 27,
               "allow_default_route = false\ncounter_interval = \"250ms\"");
  auto c = parseConfig(text, "agent.toml");
  REQUIRE(c.ok());
  CHECK(c->counterInterval.count() == 250);
  for (const char* bad : {"\"10ms\"", "\"2m\"", "100"}) {
    std::string t = kGood;
    t.replace(t.find("allow_default_route = false"), 27,
              std::string("allow_default_route = false\ncounter_interval = ") + bad);
    INFO(bad);
    CHECK_FALSE(parseConfig(t, "agent.toml").ok());
  }
}

TEST_CASE("the data subnets incast may send to come from the config, checked") {
  CHECK(parseConfig(kGood, "agent.toml")->dataSubnets.empty());  // the allowed interfaces' own
  std::string text = kGood;
  text.replace(text.find("allow_default_route = false"), 27,
               "allow_default_route = false\ndata_subnets = [\"10.0.0.0/16\", \"192.168.100.0/24\"]");
  auto c = parseConfig(text, "agent.toml");
  REQUIRE(c.ok());
  CHECK(c->dataSubnets == std::vector<std::string>{"10.0.0.0/16", "192.168.100.0/24"});
  for (const char* bad : {"[\"10.0.0.0\"]", "[\"10.0.0.0/40\"]", "[\"data0\"]", "[1]", "\"10.0.0.0/8\""}) {
    std::string t = kGood;
    t.replace(t.find("allow_default_route = false"), 27, std::string("allow_default_route = false\ndata_subnets = ") + bad);
    auto r = parseConfig(t, "agent.toml");
    CAPTURE(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("agent.toml:") && Catch::Contains("data_subnets"));
  }
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
      {"lease_timeout = \"3s\"", "max_workload_memory = \"lots\"", "agent.toml:6:23: 'max_workload_memory' must be a size"},
      {"lease_timeout = \"3s\"", "max_workload_memory = \"1KiB\"", "at least 1MiB"},
      {"lease_timeout = \"3s\"", "metrics = \"94650\"", "agent.toml:6:11: [agent] metrics address '94650': '94650' is not a port"},
      {"lease_timeout = \"3s\"", "metrics = \"::1:9465\"", "an IPv6 address goes in brackets"},
      {"lease_timeout = \"3s\"", "metrics = \"host:9465\"", "'host' is not an IPv4 literal"},
      {"lease_timeout = \"3s\"", "metrics = \"127.0.0.1:70000\"", "'70000' is not a port"},
      {"lease_timeout = \"3s\"", "metrics = 9465", "'metrics' must be a string \"ADDR:PORT\""},
  }));
  std::string text = kGood;
  auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  auto c = parseConfig(text, "agent.toml");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message, Catch::Contains(fragment));
}

TEST_CASE("the Prometheus address is off unless configured, and kept as written") {
  auto off = parseConfig(kGood, "agent.toml");
  REQUIRE(off.ok());
  CHECK(off->metrics.empty());
  std::string text = kGood;
  text.replace(text.find("lease_timeout"), 0, "metrics = \"[::1]:9465\"\n");
  auto on = parseConfig(text, "agent.toml");
  REQUIRE(on.ok());
  CHECK(on->metrics == "[::1]:9465");
  // A bare port is accepted (the exporter serves it on 127.0.0.1; test_metrics).
  text = kGood;
  text.replace(text.find("lease_timeout"), 0, "metrics = \"9465\"\n");
  auto bare = parseConfig(text, "agent.toml");
  REQUIRE(bare.ok());
  CHECK(bare->metrics == "9465");
}

TEST_CASE("a missing config file is named") {
  auto c = loadConfig("/nonexistent/agent.toml");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.error().message, Catch::Contains("/nonexistent/agent.toml"));
}

TEST_CASE("the lab switch socket and command templates come from the config, checked") {
  std::string good = std::string(kGood) + R"(
[lab]
switch_socket = "/tmp/lab/switch.sock"
switch_port = "n1"
[ecn_commands.sonic-lossless]
snapshot = ["/usr/local/sbin/ecn-profile", "show"]
apply = ["/usr/bin/ecnconfig", "-gmin", "{kmin}", "-gmax", "{kmax}", "-gdrop", "{pmax}", "{port}"]
revert = ["/usr/local/sbin/ecn-profile", "restore", "{snapshot}"]
)";
  auto c = parseConfig(good, "agent.toml");
  REQUIRE(c.ok());
  CHECK(c->labswitchSocket == "/tmp/lab/switch.sock");
  CHECK(c->labswitchPort == "n1");
  REQUIRE(c->ecnCommands.count("sonic-lossless") == 1);
  CHECK(c->ecnCommands["sonic-lossless"].apply.size() == 8);
  CHECK(c->ecnCommands["sonic-lossless"].revert.back() == "{snapshot}");
  // Without them: no lab switch, no command backend.
  auto plain = parseConfig(kGood, "agent.toml");
  CHECK(plain->labswitchSocket.empty());
  CHECK(plain->ecnCommands.empty());

  auto bad = [&](const std::string& extra, const char* expect) {
    auto r = parseConfig(std::string(kGood) + extra, "agent.toml");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains(expect));
  };
  bad("[lab]\nswitch_socket = \"relative.sock\"\n", "absolute path");
  bad("[ecn_commands.x]\nsnapshot = \"ecnconfig -l\"\napply = [\"/bin/true\"]\nrevert = [\"/bin/true\"]\n",
      "list of 1-64 strings");
  bad("[ecn_commands.x]\nsnapshot = [\"ecnconfig\"]\napply = [\"/bin/true\"]\nrevert = [\"/bin/true\"]\n",
      "absolute path");
  bad("[ecn_commands.x]\nsnapshot = [\"/bin/true\"]\napply = [\"/bin/true\", \"{snapshot}\"]\nrevert = [\"/bin/true\"]\n",
      "unknown placeholder '{snapshot}'");
  bad("[ecn_commands.x]\nsnapshot = [\"/bin/true\"]\napply = [\"/bin/true\", \"{cmd}\"]\nrevert = [\"/bin/true\"]\n",
      "unknown placeholder '{cmd}'");
  bad("[ecn_commands.x]\nsnapshot = [\"/bin/true\"]\napply = [\"/bin/true\"]\n", "missing 'revert'");
  bad("[ecn_commands.\"a b\"]\nsnapshot = [\"/bin/true\"]\napply = [\"/bin/true\"]\nrevert = [\"/bin/true\"]\n",
      "1-32 characters");
}

TEST_CASE("a workload is refused when its buffers would pass the agent's memory budget") {
  std::string text = kGood;
  text.replace(text.find("lease_timeout"), 0, "max_workload_memory = \"64MiB\"\n");
  auto c = parseConfig(text, "agent.toml");
  REQUIRE(c.ok());
  CHECK(c->maxWorkloadMemory == 64u << 20);
  CHECK(parseConfig(kGood, "agent.toml")->maxWorkloadMemory == 0);  // a quarter of the RAM

  WorkloadManager m(std::chrono::seconds(5), std::chrono::minutes(1), {}, c->maxWorkloadMemory);
  // An incast receiver holds size x fan_in: 16 MiB from each of 8 senders is 128 MiB.
  rc::proto::WorkloadStart w;
  w.workloadId = "wl-big";
  w.kind = "incast";
  for (int i = 0; i < 9; i++) w.world.push_back({i, "127.0.0.1", 40000 + i});
  w.rank = 0;
  w.incastReceiver = 0;
  w.fanIn = 8;
  w.size = 16 << 20;
  w.durationMs = 1000;
  auto r = m.start("ctl", w, [](nlohmann::json) {});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("needs 128.0MiB of buffers") &&
                                    Catch::Contains("budget of 64.0MiB") && Catch::Contains("max_workload_memory"));
  CHECK(m.activeCount() == 0);  // nothing was started or bound
  // A sender of the same incast holds one message: within the budget (whatever else it meets).
  w.rank = 1;
  auto s = m.start("ctl", w, [](nlohmann::json) {});
  if (s.ok())
    CHECK(m.activeCount() == 1);  // accepted: it runs
  else
    CHECK_THAT(s.error().message, !Catch::Contains("budget"));  // refused for another reason
  m.shutdown();
}

TEST_CASE("replay settings: a refused config still names its journal and the revert policy") {
  char tmpl[] = "/tmp/rc-replay-settings-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string path = std::string(tmpl) + "/agent.toml";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  // A typo in [agent], a bad value in [interfaces]: loadConfig refuses it, the replay goes on.
  write(std::string(kGood) + "[lab]\nswitch_socket = \"/run/sw.sock\"\n[ecn_commands.sw]\n"
                             "snapshot = [\"/bin/echo\", \"{port}\"]\napply = [\"/bin/true\"]\nrevert = [\"/bin/true\", \"{snapshot}\"]\n"
                             "[ecn_commands.bad]\nsnapshot = [\"echo\"]\napply = [\"/bin/true\"]\nrevert = [\"/bin/true\"]\n");
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text.replace(text.find("lease_timeout"), 13, "lease_timout");
  text.replace(text.find("protected = [\"mgmt0\"]"), 21, "protected = \"mgmt0\"");
  write(text);
  REQUIRE_FALSE(loadConfig(path).ok());
  auto s = loadReplaySettings(path);
  REQUIRE(s.ok());
  CHECK(s->stateDir == "/tmp/state");
  CHECK(s->node == "n1");
  CHECK(s->policy.defaultInterface == "data0");
  CHECK(s->policy.allowlist == std::vector<std::string>{"data0"});
  CHECK(s->policy.protectedInterfaces.empty());
  CHECK(s->policy.labswitchSocket == "/run/sw.sock");
  CHECK(s->policy.ecnCommands.count("sw") == 1);
  CHECK(s->policy.ecnCommands.count("bad") == 0);  // left out, with a note
  CHECK(s->notes.size() == 2);
  // Not TOML, or no state_dir: an error (the agent then replays --state-dir or the default).
  write("[agent\n");
  CHECK_FALSE(loadReplaySettings(path).ok());
  write("[agent]\nnode = \"n1\"\n");
  auto none = loadReplaySettings(path);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("state_dir"));
  std::filesystem::remove_all(tmpl);
}

TEST_CASE("the default workload budget follows the cgroup's memory limit, not only the host's RAM") {
  char tmpl[] = "/tmp/rc-cgroup-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string root = tmpl;
  auto put = [&](const std::string& rel, const std::string& value) {
    std::filesystem::create_directories(std::filesystem::path(root + rel).parent_path());
    std::ofstream(root + rel) << value << "\n";
  };
  const uint64_t GiB = uint64_t(1) << 30;
  // cgroup v2: a pod's 1 GiB limit on its slice, none on the container's own cgroup.
  put("/v2/kubepods/pod1/memory.max", "1073741824");
  put("/v2/kubepods/pod1/ctr/memory.max", "max");
  put("/v2/kubepods/memory.max", "max");
  auto v2 = cgroupMemoryLimit("0::/kubepods/pod1/ctr\n", root + "/v2");
  REQUIRE(v2);
  CHECK(*v2 == GiB);
  CHECK(defaultMemoryBudget(512 * GiB, v2) == GiB / 4);  // before: 128 GiB, and the pod OOM-killed
  // A container's own namespace root ("0::/") with its limit there (a unit's MemoryMax=).
  put("/ns/memory.max", "17179869184");
  CHECK(cgroupMemoryLimit("0::/\n", root + "/ns") == std::optional<uint64_t>(16 * GiB));
  // cgroup v1: memory.limit_in_bytes under the memory hierarchy; "unlimited" is a huge number.
  put("/v1/memory/job/memory.limit_in_bytes", "2147483648");
  put("/v1/memory/memory.limit_in_bytes", "9223372036854771712");
  CHECK(cgroupMemoryLimit("12:cpu,cpuacct:/job\n5:memory:/job\n", root + "/v1") ==
        std::optional<uint64_t>(2 * GiB));
  // No limit anywhere: the host's memory.
  CHECK_FALSE(cgroupMemoryLimit("0::/kubepods\n", root + "/v2"));
  CHECK(defaultMemoryBudget(64 * GiB, std::nullopt) == 16 * GiB);
  CHECK(defaultMemoryBudget(64 * GiB, 128 * GiB) == 16 * GiB);  // the smaller of the two
  std::filesystem::remove_all(root);
}

}  // namespace test_agent_config
