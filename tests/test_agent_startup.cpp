// The agent's start-up paths on a real kernel: whatever stops the agent from serving (a config
// typo, TLS files missing, a read-only state file system), the journal is replayed first and
// its leftovers keep being retried; and --replay-only, the Slurm epilog's call.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "skip.hpp"
#include "support.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_agent_startup {

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;
using rctest::eventually;
using rctest::linkUp;
using rctest::readFile;

namespace {

int shStatus(const std::string& cmd) { return std::system(cmd.c_str()); }

std::string capture(const std::string& cmd) {
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    ::pclose(f);
  }
  return out;
}

// A network namespace with veth interfaces, and a scratch directory with the agent's state:
// both removed when the test ends, also after a failed assertion.
struct Node {
  std::string ns, dir;
  Node() {
    ns = "rc-st-" + std::to_string(::getpid());
    char tmpl[] = "/tmp/rc-startup-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
    shStatus("ip netns del " + ns + " 2>/dev/null");
    REQUIRE(shStatus("ip netns add " + ns + " && ip -n " + ns + " link set lo up") == 0);
    fs::create_directories(dir + "/state/journal");
  }
  ~Node() {
    shStatus("ip netns del " + ns + " 2>/dev/null");
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  std::string journal() const { return dir + "/state/journal"; }
  size_t entries() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(journal())) n += e.path().extension() == ".json";
    return n;
  }
  // A veth pair (NAME and NAME-p, down): the kernel here may have no dummy driver.
  void addLink(const std::string& name) {
    REQUIRE(shStatus("ip -n " + ns + " link add " + name + " type veth peer name " + name + "-p") == 0);
  }
  int ifindex(const std::string& name) const {
    auto j = json::parse(capture("ip -n " + ns + " -j link show dev " + name), nullptr, false);
    REQUIRE(j.is_array());
    REQUIRE(j.size() == 1);
    return j[0]["ifindex"].get<int>();
  }
  // A journal entry as the agent writes it for a link_flap that took NAME down (it was up).
  void journalLinkDown(const std::string& id, const std::string& name, int index) {
    json entry{{"fault", id},
               {"record",
                {{"kind", "link_flap"},
                 {"owner", "test"},
                 {"params", {{"interface", name}}},
                 {"targets", {name}},
                 {"start_ns", 0},
                 {"lifetime_ms", 60000},
                 {"snapshot", {{"interface", name}, {"ifindex", index}, {"admin_up", true}}}}}};
    std::ofstream(journal() + "/" + id + ".json") << entry.dump() << "\n";
  }
  // A config the agent accepts, but for TLS files that are not there (EXTRA appended).
  std::string config(const std::string& extraAgent = "") const {
    std::string path = dir + "/agent.toml";
    std::ofstream(path) << "[agent]\nnode = \"st1\"\nlisten = \"127.0.0.1:0\"\nstate_dir = \"" << dir
                        << "/state\"\nlease_timeout = \"1s\"\n"
                        << extraAgent << "\n[tls]\nca = \"" << dir << "/missing-ca.pem\"\ncert = \"" << dir
                        << "/missing.pem\"\nkey = \"" << dir
                        << "/missing.key\"\n[interfaces]\ndata = [\"d0\"]\nallow = [\"d0\", \"d1\"]\n";
    return path;
  }
};

// The built agent in NODE's namespace (and PREFIX, e.g. a mount namespace), output to LOG.
struct Agent {
  pid_t pid = -1;
  std::string log;
  Agent(const Node& node, const std::vector<std::string>& args, const std::string& prefix = "") {
    std::string agent = rctest::env("RDMACHAOS_AGENT");
    REQUIRE_FALSE(agent.empty());
    static int counter = 0;
    log = node.dir + "/agent-" + std::to_string(++counter) + ".log";
    std::string cmd = "exec ip netns exec " + node.ns + " " + prefix + " " + agent;
    for (const auto& a : args) cmd += " '" + a + "'";
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~Agent() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // The exit code, or -1 if it still runs after LIMIT.
  int wait(std::chrono::milliseconds limit) {
    int status = 0;
    bool done = eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit, 20ms);
    if (!done) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool running() const { return pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
};

}  // namespace

TEST_CASE("a config typo: the journal is replayed from the state_dir it names, then exit 2") {
  Node node;
  node.addLink("d0");  // down, as a link_flap left it
  node.journalLinkDown("f1", "d0", node.ifindex("d0"));
  REQUIRE_FALSE(linkUp(node.ns, "d0"));
  Agent agent(node, {"--config", node.config("lease_timout = \"5s\"  # the typo\n")});
  int code = agent.wait(20s);
  INFO(readFile(agent.log));
  CHECK(code == 2);
  CHECK_THAT(readFile(agent.log), Catch::Contains("unknown key 'lease_timout'"));
  CHECK(linkUp(node.ns, "d0"));
  CHECK(node.entries() == 0);
}

TEST_CASE("a config that is not even TOML: the journal of --state-dir is replayed") {
  Node node;
  node.addLink("d0");
  node.journalLinkDown("f1", "d0", node.ifindex("d0"));
  std::string path = node.dir + "/broken.toml";
  std::ofstream(path) << "[agent\nnode = \n";
  Agent agent(node, {"--config", path, "--state-dir", node.dir + "/state"});
  CHECK(agent.wait(20s) == 2);
  INFO(readFile(agent.log));
  CHECK(linkUp(node.ns, "d0"));
  CHECK(node.entries() == 0);
}

TEST_CASE("TLS files missing: the replay's leftovers are retried until reverted, not abandoned") {
  Node node;
  // d1 was taken down and then renamed: its revert refuses to touch 'd9' and is retried.
  node.addLink("d1");
  node.journalLinkDown("f2", "d1", node.ifindex("d1"));
  REQUIRE(shStatus("ip -n " + node.ns + " link set d1 name d9") == 0);
  Agent agent(node, {"--config", node.config()});
  // The agent cannot serve (no certificate), but must not exit with d1 left down.
  REQUIRE(eventually([&] { return readFile(agent.log).find("still applied") != std::string::npos; }, 20s));
  std::this_thread::sleep_for(1s);
  INFO(readFile(agent.log));
  CHECK(agent.running());
  CHECK_THAT(readFile(agent.log), Catch::Contains("missing-ca.pem") || Catch::Contains("missing.pem"));
  REQUIRE(shStatus("ip -n " + node.ns + " link set d9 name d1") == 0);
  CHECK(eventually([&] { return linkUp(node.ns, "d1"); }, 40s, 50ms));
  CHECK(agent.wait(10s) == 2);  // then it gives up serving, with nothing left applied
  CHECK(node.entries() == 0);
}

TEST_CASE("a read-only state file system: the replay still reverts (the entries stay), then exit 2") {
  Node node;
  node.addLink("d0");
  node.journalLinkDown("f1", "d0", node.ifindex("d0"));
  // The state directory read-only for the agent alone: a bind mount in a mount namespace of
  // its own, gone with the agent.
  std::string state = node.dir + "/state";
  std::string prefix = "unshare -m --propagation private sh -c 'mount --bind " + state + " " + state +
                       " && mount -o remount,bind,ro " + state + " && exec \"$0\" \"$@\"'";
  Agent agent(node, {"--config", node.config()}, prefix);
  int code = agent.wait(20s);
  INFO(readFile(agent.log));
  CHECK(code == 2);  // the TLS files are missing: it cannot serve, and nothing is left to retry
  CHECK_THAT(readFile(agent.log), Catch::Contains("read-only"));
  CHECK(linkUp(node.ns, "d0"));
  CHECK(node.entries() == 1);  // it could not be removed; the next start reverts it again (a no-op)
}

TEST_CASE("--replay-only: exit 0 with everything reverted; exit 1 naming what is left") {
  Node node;
  node.addLink("d0");
  node.addLink("d1");
  node.journalLinkDown("f1", "d0", node.ifindex("d0"));
  SECTION("everything reverts") {
    Agent agent(node, {"--replay-only", "--config", node.config()});
    int code = agent.wait(20s);
    INFO(readFile(agent.log));
    CHECK(code == 0);
    CHECK(linkUp(node.ns, "d0"));
    CHECK(node.entries() == 0);
  }
  SECTION("one stays applied") {
    node.journalLinkDown("f2", "d1", node.ifindex("d1"));
    REQUIRE(shStatus("ip -n " + node.ns + " link set d1 name d9") == 0);
    auto t0 = std::chrono::steady_clock::now();
    Agent agent(node, {"--replay-only", "--retry-for", "2s", "--state-dir", node.dir + "/state"});
    int code = agent.wait(20s);
    auto took = std::chrono::steady_clock::now() - t0;
    INFO(readFile(agent.log));
    CHECK(code == 1);
    CHECK_THAT(readFile(agent.log), Catch::Contains("'f2' (link_flap) NOT reverted"));
    CHECK(took >= 2s);  // retried for --retry-for
    CHECK(linkUp(node.ns, "d0"));
    CHECK(node.entries() == 1);
  }
}

TEST_CASE("not root but with capabilities: refused when someone else can change its orders") {
  if (shStatus("command -v setpriv >/dev/null && command -v setcap >/dev/null") != 0)
    RC_SKIP("setpriv (util-linux) or setcap (libcap2-bin) is missing (scripts/install-deps)");
  Node node;
  node.addLink("d0");
  node.journalLinkDown("f1", "d0", node.ifindex("d0"));
  // nobody must reach the files; the state directory is its own (a unit's StateDirectory=).
  fs::permissions(node.dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  std::string config = node.config();
  REQUIRE(shStatus("chown -R 65534:65534 " + node.dir + "/state") == 0);
  const std::string caps = "+net_admin,+net_raw,+ipc_lock";
  const std::string asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=" + caps +
                               " --ambient-caps=" + caps;
  SECTION("file capabilities (setcap) and a config of the user's own: refused, nothing replayed") {
    std::string copy = node.dir + "/rdmachaos-agent";
    fs::copy_file(rctest::env("RDMACHAOS_AGENT"), copy);
    REQUIRE(shStatus("chmod 0755 " + copy + " && setcap cap_net_admin,cap_net_raw,cap_ipc_lock+ep " + copy) == 0);
    REQUIRE(shStatus("chown 65534:65534 " + config) == 0);
    std::string log = node.dir + "/setcap.log";
    // A binary with file capabilities is not dumpable: LeakSanitizer (the sanitized build)
    // cannot stop it to scan, and would turn the exit into its own.
    int code = shStatus("ip netns exec " + node.ns + " env ASAN_OPTIONS=detect_leaks=0 setpriv --reuid=65534 --regid=65534 --clear-groups " + copy +
                  " --replay-only --config " + config + " >" + log + " 2>&1");
    INFO(readFile(log));
    CHECK(WEXITSTATUS(code) == 2);
    CHECK_THAT(readFile(log), Catch::Contains("file capabilities (setcap)") &&
                                  Catch::Contains("'" + config + "' is owned by uid 65534, not by root"));
    CHECK_FALSE(linkUp(node.ns, "d0"));  // the journal was not acted on
  }
  SECTION("ambient capabilities and a config others can write: refused") {
    REQUIRE(shStatus("chmod 0666 " + config) == 0);
    Agent agent(node, {"--replay-only", "--config", config}, asNobody);
    CHECK(agent.wait(20s) == 2);
    INFO(readFile(agent.log));
    CHECK_THAT(readFile(agent.log), Catch::Contains("'" + config + "' is writable by others (mode 0666)"));
    CHECK_FALSE(linkUp(node.ns, "d0"));
  }
  SECTION("ambient capabilities, a root-owned config, its own state directory: the supported way") {
    REQUIRE(shStatus("chmod 0644 " + config) == 0);
    Agent agent(node, {"--replay-only", "--config", config}, asNobody);
    int code = agent.wait(20s);
    INFO(readFile(agent.log));
    CHECK(code == 0);
    CHECK(linkUp(node.ns, "d0"));
    CHECK(node.entries() == 0);
  }
}

}  // namespace test_agent_startup
