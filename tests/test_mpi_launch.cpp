// The mpi kind's launcher: the template's refusals (in the agent's config and on their own), its
// expansion per host, mpirun's remote command split without a shell, Open MPI's failure words.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "agent/config.hpp"
#include "agent_config_fixture.hpp"
#include "common/protocol.hpp"
#include "controller/playbook/playbook.hpp"
#include "workload/kinds.hpp"
#include "workload/mpi_launch.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_mpi_launch {

using namespace rc::workload;
using Args = std::vector<std::string>;

namespace {
const std::string kBase = std::string(rctest::kAgentConfig) + R"([mpi]
program = "/opt/bench/mpi_allreduce"
preload = ["/usr/lib/librdmachaos-observe-mpi.so"]
)";

rc::Result<rc::agent::Config> withLauncher(const std::string& launcher) {
  return rc::agent::parseConfig(std::string(kBase) + "launcher = " + launcher + "\n", "agent.toml");
}
}  // namespace

TEST_CASE("a launcher template of argv parses, and {host} expands per node") {
  auto c = withLauncher(R"(["/usr/bin/ip", "netns", "exec", "lab-{host}", "/usr/bin/env", "SOCK=/s/{host}/o.sock"])");
  REQUIRE(c.ok());
  CHECK(c->mpiEnabled);
  CHECK(c->mpi.mpirun == "/usr/bin/mpirun");  // the default
  CHECK(c->mpi.program == "/opt/bench/mpi_allreduce");
  auto e = expandLauncher(c->mpi.launcher, "n2");
  REQUIRE(e.ok());
  CHECK(*e == Args{"/usr/bin/ip", "netns", "exec", "lab-n2", "/usr/bin/env", "SOCK=/s/n2/o.sock"});
  CHECK_FALSE(expandLauncher(c->mpi.launcher, "-oProxyCommand=x").ok());
  CHECK_FALSE(expandLauncher(c->mpi.launcher, "n2;reboot").ok());
}

TEST_CASE("the launcher template's refusals name the place and the fix") {
  struct Case {
    const char* launcher;
    const char* says;
  };
  auto [launcher, says] = GENERATE(values<Case>({
      {R"(["ssh", "{host}"])", "is not an absolute path"},
      {R"(["bin/launch", "{host}"])", "is not an absolute path"},
      {R"(["/bin/sh", "-c", "ssh {host}"])", "is a shell"},
      {R"(["/usr/bin/bash", "{host}"])", "is a shell"},
      {R"(["/bin/dash"])", "is a shell"},
      {R"(["/usr/bin/env", "ssh", "{host}"])", "is a shell (or runs one)"},
      {R"(["/usr/bin/ip", "netns", "exec", "{host}", "/bin/bash"])", "would run a shell"},
      {R"(["/usr/bin/ssh", "{host}", "-c", "x"])", "'-c' hands a command string to a shell"},
      {R"(["/usr/bin/ssh", "{hostname}"])", "unknown placeholder '{hostname}'"},
      {R"(["/usr/bin/ssh", "{host"])", "unknown placeholder '{host'"},
      {R"(["{host}"])", "must be a fixed absolute path"},
      {R"([])", "must be a list of 1-64 strings"},
      {R"("/usr/bin/ssh {host}")", "must be a list of strings"},
  }));
  INFO(launcher);
  auto c = withLauncher(launcher);
  REQUIRE_FALSE(c.ok());
  INFO(c.error().message);
  CHECK(c.error().message.find("agent.toml:") == 0);  // the file, line and column
  CHECK(c.error().message.find("[mpi] launcher") != std::string::npos);
  CHECK(c.error().message.find(says) != std::string::npos);
}

TEST_CASE("[mpi] program and mpirun must be absolute paths that are not shells") {
  std::string text = std::string(kBase) + "launcher = [\"/usr/bin/ssh\", \"{host}\"]\n";
  auto good = rc::agent::parseConfig(text, "agent.toml");
  REQUIRE(good.ok());
  for (auto [from, to, says] : {std::tuple{"program = \"/opt/bench/mpi_allreduce\"", "program = \"mpi_allreduce\"",
                                           "[mpi] program: 'mpi_allreduce' is not an absolute path"},
                                std::tuple{"program = \"/opt/bench/mpi_allreduce\"", "program = \"/bin/bash\"",
                                           "[mpi] program: '/bin/bash' is a shell"},
                                std::tuple{"[mpi]\n", "[mpi]\nmpirun = \"./mpirun\"\n", "[mpi] mpirun: './mpirun' is not"},
                                std::tuple{"[mpi]\n", "[mpi]\nlaunchr = []\n", "unknown key 'launchr' in [mpi]"}}) {
    std::string t = text;
    t.replace(t.find(from), std::string(from).size(), to);
    auto c = rc::agent::parseConfig(t, "agent.toml");
    REQUIRE_FALSE(c.ok());
    INFO(c.error().message);
    CHECK(c.error().message.find(says) != std::string::npos);
  }
  std::string noLauncher = kBase;
  auto c = rc::agent::parseConfig(noLauncher, "agent.toml");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("missing 'launcher' in [mpi]") != std::string::npos);
}

TEST_CASE("the template reaches the launch helper intact, and a tampered one is refused there too") {
  const Args t = {"/usr/bin/ip", "netns", "exec", "rc1-{host}"};
  auto back = decodeLauncher(encodeLauncher(t));
  REQUIRE(back.ok());
  CHECK(*back == t);
  CHECK_FALSE(decodeLauncher(encodeLauncher({"/bin/sh", "-c", "x"})).ok());
  CHECK_FALSE(decodeLauncher("not json").ok());
}

TEST_CASE("mpirun's remote command is split as a login shell would, and shell syntax is refused") {
  // As Open MPI 4.1 hands it to its rsh agent (after the host).
  auto a = splitRemoteCommand({" orted", "-mca", "ess", "\"env\"", "-mca", "orte_hnp_uri",
                               "\"585039872.0;tcp://192.0.2.2,198.18.1.1:59553\"", "-mca", "pmix", "\"^s1,s2\""});
  REQUIRE(a.ok());
  CHECK(*a == Args{"orted", "-mca", "ess", "env", "-mca", "orte_hnp_uri", "585039872.0;tcp://192.0.2.2,198.18.1.1:59553",
                   "-mca", "pmix", "^s1,s2"});
  auto q = splitRemoteCommand({"a\\ b", "'c d'", "\"e\\\"f\""});
  REQUIRE(q.ok());
  CHECK(*q == Args{"a b", "c d", "e\"f"});
  for (const Args& bad : {Args{"orted;", "reboot"}, Args{"PATH=/x;", "export", "PATH"}, Args{"a", "|", "b"},
                          Args{"$(id)"}, Args{"\"$HOME\""}, Args{"\"open"}, Args{" "}})
    CHECK_FALSE(splitRemoteCommand(bad).ok());
}

TEST_CASE("through ssh the command reaches the other node's shell as quoted words; other launchers get argv") {
  const Args words = {" orted", "-mca", "orte_hnp_uri", "\"585039872.0;tcp://198.19.0.11:59553\"", "-mca", "x", "a\\'b"};
  auto ssh = launchArgv({"/usr/bin/ssh", "-F", "/lab/pki/ssh_config", "{host}", "/usr/bin/env", "S=/run/{host}.sock"},
                        "n2", words);
  REQUIRE(ssh.ok());
  // One line for the remote shell: every word single-quoted, a quote inside one closed and escaped.
  CHECK(*ssh == Args{"/usr/bin/ssh", "-F", "/lab/pki/ssh_config", "n2", "/usr/bin/env", "S=/run/n2.sock",
                     "'orted' '-mca' 'orte_hnp_uri' '585039872.0;tcp://198.19.0.11:59553' '-mca' 'x' 'a'\\''b'"});
  CHECK(launcherIsRemoteShell({"/usr/bin/dbclient", "{host}"}));
  CHECK_FALSE(launcherIsRemoteShell({"/usr/bin/ip", "netns", "exec", "lab-{host}"}));
  auto ns = launchArgv({"/usr/bin/ip", "netns", "exec", "lab-{host}"}, "n2", words);
  REQUIRE(ns.ok());
  CHECK(*ns == Args{"/usr/bin/ip", "netns", "exec", "lab-n2", "orted", "-mca", "orte_hnp_uri",
                    "585039872.0;tcp://198.19.0.11:59553", "-mca", "x", "a'b"});
  // What splitRemoteCommand refuses stays refused through ssh.
  CHECK_FALSE(launchArgv({"/usr/bin/ssh", "{host}"}, "n2", {"orted;", "reboot"}).ok());
  CHECK_FALSE(launchArgv({"/usr/bin/ssh", "{host}"}, "-oProxyCommand=x", {"orted"}).ok());
}

TEST_CASE("[mpi] ucx and oob settings parse, and their refusals name the place and the fix") {
  const std::string launcher = "launcher = [\"/usr/bin/ssh\", \"{host}\"]\n";
  auto ok = rc::agent::parseConfig(std::string(kBase) + launcher +
                                       "oob_interfaces = [\"data0\"]\ntmpdir = \"/run/tmp\"\n"
                                       "ucx_devices = [\"rxe0:1\"]\nucx_tls = \"rc_verbs,ud_verbs,self\"\n"
                                       "ucx_env = [\"UCX_UD_VERBS_ETH_DGID_CHECK=n\"]\n",
                                   "agent.toml");
  INFO((ok ? std::string() : ok.error().message));
  REQUIRE(ok.ok());
  CHECK(ok->mpi.oobInterfaces == Args{"data0"});
  CHECK(ok->mpi.tmpdir == "/run/tmp");
  CHECK(ok->mpi.ucxDevices == Args{"rxe0:1"});
  CHECK(ok->mpi.ucxTls == "rc_verbs,ud_verbs,self");
  CHECK(ok->mpi.ucxEnv == Args{"UCX_UD_VERBS_ETH_DGID_CHECK=n"});
  struct Case {
    const char* line;
    const char* says;
  };
  for (const Case& c : {Case{"ucx_devices = [\"rxe0\"]", "DEVICE:PORT"},
                        Case{"ucx_devices = [\"rxe0:1 -x\"]", "DEVICE:PORT"},
                        Case{"ucx_env = [\"LD_PRELOAD=/x.so\"]", "UCX_NAME=value"},
                        Case{"ucx_env = [\"UCX_TLS=tcp\"]", "ucx_devices and ucx_tls"},
                        Case{"ucx_env = [\"UCX_X=a b\"]", "UCX_NAME=value"},
                        Case{"ucx_tls = \"rc verbs\"", "separated by commas"},
                        Case{"oob_interfaces = [\"data0,lo\"]", "not an interface name"},
                        Case{"tmpdir = \"run/tmp\"", "not an absolute path"},
                        Case{"ucx_rails = 2", "ucx_rails"}}) {
    auto bad = rc::agent::parseConfig(std::string(kBase) + launcher + c.line + "\n", "agent.toml");
    INFO(c.line);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message, Catch::Contains("agent.toml:") && Catch::Contains(c.says));
  }
}

TEST_CASE("Open MPI's words about a failed job: the rank and signal, or its boxed message") {
  const std::string killed =
      "--------------------------------------------------------------------------\n"
      "Primary job  terminated normally, but 1 process returned\n"
      "--------------------------------------------------------------------------\n"
      "--------------------------------------------------------------------------\n"
      "mpirun noticed that process rank 1 with PID 4242 on node n2 exited on signal 9 (Killed).\n"
      "--------------------------------------------------------------------------\n";
  CHECK(mpiFailure(killed) == "rank 1 (on n2, pid 4242) was killed by signal 9 (SIGKILL)");
  const std::string refused =
      "--------------------------------------------------------------------------\n"
      "There are not enough slots available in the system to satisfy the 3\n"
      "slots that were requested by the application:\n"
      "--------------------------------------------------------------------------\n";
  CHECK(mpiFailure(refused) ==
        "There are not enough slots available in the system to satisfy the 3 slots that were requested by the application:");
  CHECK(mpiFailure("rank 0 ops 10 wrong 0\n").empty());
  // UCX's words, as it printed them on rxe with its UD destination check on.
  const std::string ucx =
      "[1796684212.650552] [n1:309  :0]          select.c:549  UCX  ERROR   no auxiliary transport to <no debug data>: "
      "Unsupported operation\n"
      "[n2:206  :0:206]       ud_ep.c:276  Fatal: UD endpoint 0x55e36d3583e0 to <no debug data>: unhandled timeout error\n"
      "[n2:206  :0:206]       ud_ep.c:276  Fatal: UD endpoint 0x55e36d3583e0 to <no debug data>: unhandled timeout error\n";
  CHECK(mpiFailure(ucx) ==
        "UCX: no auxiliary transport to <no debug data>: Unsupported operation; UD endpoint 0x55e36d3583e0 to <no "
        "debug data>: unhandled timeout error");
}

TEST_CASE("kind mpi: tcp and ucx, nothing else; its start names the nodes; ucx is the mpi kind's alone") {
  const Kind* k = findKind("mpi");
  REQUIRE(k);
  REQUIRE(k->external);
  REQUIRE(k->external->checkTransport);
  CHECK(k->external->checkTransport("tcp").ok());
  CHECK(k->external->checkTransport("ucx").ok());
  auto verbs = k->external->checkTransport("verbs");
  REQUIRE_FALSE(verbs.ok());
  CHECK_THAT(verbs.error().message, Catch::Contains("\"tcp\"") && Catch::Contains("\"ucx\""));

  rc::proto::WorkloadStart w;
  w.workloadId = "w1";
  w.kind = "mpi";
  w.world = {{0, "10.0.0.1", 7000}, {1, "10.0.0.2", 7000}};
  w.size = 4 << 20;
  w.durationMs = 1000;
  w.nodes = {"n1", "n2"};
  nlohmann::json msg = rc::proto::makeRequest(1, "workload_start", rc::proto::toJson(w));
  auto back = rc::proto::parseRequest(msg);
  INFO((back ? std::string() : back.error().message));
  REQUIRE(back.ok());
  CHECK(std::get<rc::proto::WorkloadStart>(back->request).nodes == Args{"n1", "n2"});
  msg["nodes"] = {"n1", "--host=x"};
  CHECK_FALSE(rc::proto::parseRequest(msg).ok());
  msg["nodes"] = {"n1"};
  CHECK_FALSE(rc::proto::parseRequest(msg).ok());
  // ucx on the wire: the mpi kind's, refused for any other kind.
  msg["nodes"] = {"n1", "n2"};
  msg["transport"] = "ucx";
  CHECK(rc::proto::parseRequest(msg).ok());
  msg["kind"] = "allreduce";
  auto other = rc::proto::parseRequest(msg);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message, Catch::Contains("\"ucx\" for kind \"mpi\""));
}

TEST_CASE("a playbook of kind mpi takes transport tcp or ucx, and refuses verbs") {
  const std::string head = "name = \"t\"\n[workload]\nkind = \"mpi\"\n";
  const std::string tail = "[[phase]]\nname = \"baseline\"\nduration = \"10s\"\n";
  auto tcp = rc::controller::parsePlaybook(head + "transport = \"tcp\"\n" + tail, "p.toml");
  INFO((tcp ? std::string() : tcp.error().message));
  CHECK(tcp.ok());
  auto ucx = rc::controller::parsePlaybook(head + "transport = \"ucx\"\n" + tail, "p.toml");
  INFO((ucx ? std::string() : ucx.error().message));
  CHECK(ucx.ok());
  // A job rdmachaos launches may start before t = 0; a kind that starts at once may not.
  auto lead = rc::controller::parsePlaybook(head + "launch = \"30s\"\n" + tail, "p.toml");
  INFO((lead ? std::string() : lead.error().message));
  REQUIRE(lead.ok());
  CHECK(lead->workload.launchNs == 30'000'000'000);
  auto notLaunched = rc::controller::parsePlaybook(
      "name = \"t\"\n[workload]\nkind = \"allreduce\"\nlaunch = \"30s\"\n" + tail, "p.toml");
  REQUIRE_FALSE(notLaunched.ok());
  CHECK_THAT(notLaunched.error().message, Catch::StartsWith("p.toml:4:") && Catch::Contains("remove it"));
  CHECK_FALSE(rc::controller::parsePlaybook(head + "launch = \"10m\"\n" + tail, "p.toml").ok());
  auto allreduce = rc::controller::parsePlaybook(
      "name = \"t\"\n[workload]\nkind = \"allreduce\"\ntransport = \"ucx\"\n" + tail, "p.toml");
  REQUIRE_FALSE(allreduce.ok());
  CHECK_THAT(allreduce.error().message, Catch::StartsWith("p.toml:4:"));
  auto verbs = rc::controller::parsePlaybook(head + "transport = \"verbs\"\n" + tail, "p.toml");
  REQUIRE_FALSE(verbs.ok());
  CHECK_THAT(verbs.error().message, Catch::Contains("takes transport = \"tcp\""));
}

}  // namespace test_mpi_launch
