// The soft-RoCE lab: QEMU guests (TCG) booting Debian's 6.1 kernel from a tiny initramfs into
// the host's root over 9p, each with rdma_rxe on a NIC wired into rdmachaos-labswitch.
#include "lab/vm_lab.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "lab/lab_files.hpp"
#include "lab/lab_kind.hpp"
#include "lab/lab_util.hpp"
#include "lab/process.hpp"
#include "lab/vm_lab_internal.hpp"

namespace rc::lab::vm {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxNodes = 8;       // TCG guests: each wants most of a core while busy
constexpr int kGuestMemMiB = 512;  // -m: the guest's RAM
constexpr int kTcgCacheMiB = 64;   // -accel tcg,tb-size: QEMU's translation cache
constexpr int kBootTimeoutMs = 180'000;
constexpr int kVmStopGraceMs = 10'000;
const char* kSwitchGuestAddress = "10.0.2.100:7471";  // the lab switch, as guests reach it
const char* kDefaultKernelDir = "/var/cache/rdmachaos/kernel";

std::string dataAddress(int i) { return "198.19.0." + std::to_string(10 + i); }
std::string mgmtMac(int i) { return "52:54:00:72:63:" + fmt::format("{:02x}", i); }
std::string dataMac(int i) { return "02:72:63:d0:00:" + fmt::format("{:02x}", i); }

// ---- prerequisites ---------------------------------------------------------------------

Result<Kernel> findKernel() {
  const char* env = std::getenv("RDMACHAOS_KERNEL_DIR");
  std::string dir = env && *env ? env : kDefaultKernelDir;
  std::string version = readText(dir + "/version");
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ')) version.pop_back();
  if (version.empty())
    return makeError("no guest kernel in " + dir + " (" + dir + "/version is missing)" +
                     kInstallHint);
  Kernel k{version, dir + "/root/boot/vmlinuz-" + version, "/lib/modules/" + version};
  if (::access(k.image.c_str(), R_OK) != 0)
    return makeError("guest kernel image " + k.image + " is missing" + kInstallHint);
  if (::access((k.modules + "/modules.dep").c_str(), R_OK) != 0)
    return makeError("the guest kernel's modules are not in " + k.modules + kInstallHint);
  return k;
}

Result<std::string> findQemu() {
  auto q = resolveBinary("qemu-system-x86_64");
  if (!q) return makeError("QEMU (qemu-system-x86_64) is not installed" + kInstallHint);
  return q;
}


// The `mpi` kind between guests: mpirun in one guest starts Open MPI's daemons in the others
// over ssh to a dropbear server each guest runs on its data address (the guests share no other
// network: their management NICs are QEMU's user networking, one per guest). The lab makes the
// keys: a host key for every guest's dropbear, a client key whose public half the guests
// authorise for root, and an ssh_config naming each node's data address. False (and no [mpi])
// when the tools are not installed.
bool createGuestSsh(const LabState& s) {
  auto keygen = resolveBinary("ssh-keygen");
  auto dropbearkey = resolveBinary("dropbearkey");
  if (!keygen || !dropbearkey || ::access("/usr/sbin/dropbear", X_OK) != 0 || ::access("/usr/bin/ssh", X_OK) != 0) {
    log::info("soft-RoCE lab: no [mpi] in the guests' agent configuration: the mpi workload kind needs ssh "
              "(openssh-client) and dropbear (dropbear-bin); scripts/install-deps installs them");
    return false;
  }
  const std::string pki = s.dir + "/pki/";
  auto made = [&]() -> Result<void> {
    if (auto r = runCommand({*keygen, "-q", "-t", "ed25519", "-N", "", "-C", "rdmachaos-lab-mpi", "-f", pki + "mpi_ssh_key"});
        !r)
      return r.error();
    if (auto r = runCommand({*dropbearkey, "-t", "ed25519", "-f", pki + "guest_ssh_host_key"}); !r) return r.error();
    std::string cfg = "# ssh from one guest to another (the mpi workload kind), written by `rdmachaos lab up --soft-roce`\n";
    for (const auto& n : s.nodes) cfg += "Host " + n.name + "\n  HostName " + n.dataAddress + "\n";
    cfg += "Host *\n  User root\n  IdentityFile " + pki + "mpi_ssh_key\n  IdentitiesOnly yes\n"
           "  # the guests' host key is the lab's own, made with it; nothing is learnt or kept\n"
           "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
           "  ConnectTimeout 20\n";
    return writeFile(pki + "ssh_config", cfg);
  }();
  if (!made) {
    log::warn("soft-RoCE lab: no [mpi] in the guests: {}", made.error().message);
    return false;
  }
  return true;
}

// [mpi] of a guest's agent: ssh to the other guests (createGuestSsh), their observe sockets,
// mpirun's own connections on the data NIC (the only network the guests share), Open MPI's
// session files in the guest's tmpfs (the root is read-only), and UCX on rxe0.
std::string vmMpiSection(const LabState& s) {
  const std::string program = mpiProgramLines(s);
  if (program.empty()) return "";
  return "[mpi]                         # the mpi workload kind: ssh to the guests' dropbear on data0\n" + program +
         "launcher = [\"/usr/bin/ssh\", \"-F\", " + tomlString(s.dir + "/pki/ssh_config") +
         ", \"{host}\", \"/usr/bin/env\", \"RDMACHAOS_OBSERVE_SOCKET=/run/rdmachaos/observe.sock\"]\n"
         "oob_interfaces = [\"data0\"]      # the guests share no other network: a flap hits mpirun's links too\n"
         "tmpdir = \"/run/tmp\"\n"
         "ucx_devices = [\"rxe0:1\"]\n"
         "# UCX 1.13's UD drops what rxe receives over RoCE v2 on IPv4 when it checks the packet's\n"
         "# destination GID: its wire-up then never completes (\"UD endpoint ... unhandled timeout\").\n"
         "ucx_env = [\"UCX_UD_VERBS_ETH_DGID_CHECK=n\"]\n";
}

std::string agentConfig(const LabState& s, const NodeRecord& n, std::chrono::milliseconds lease, bool ssh) {
  return agentConfigText(
      s, n,
      {.heading = "rdmachaos-agent configuration for soft-RoCE lab node " + n.name +
                  " (written by `rdmachaos lab up --soft-roce`; read inside the guest)",
       .listen = std::string(kGuestMgmtAddress) + ":" + std::to_string(kAgentPort),
       .stateDir = "\"/run/rdmachaos/state\"   # the guest's tmpfs",
       // The switch on the host, through QEMU's guestfwd relay (see qemuArgs).
       .switchSocket = std::string("tcp:") + kSwitchGuestAddress,
       .observeSocket = "/run/rdmachaos/observe.sock"},
      lease) + (ssh ? vmMpiSection(s) : std::string());
}

std::string inventory(const LabState& s) {
  return inventoryText(s, "rdmachaos inventory for the soft-RoCE lab in " + s.dir, "kind = \"soft-roce\"\n",
                       [](const NodeRecord& n) {
                         return InventoryNodeSpec{.address = "\"127.0.0.1\"   # QEMU forwards this port to the guest's agent",
                                                  .port = n.mgmtPort,
                                                  .dataComment = "   # RDMA device rxe0 (soft-RoCE) on it"};
                       });
}

std::string switchConfig(const LabState& s, const UpOptions& o) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& n : s.nodes) hosts.push_back({{"name", n.name}, {"stream", n.dataSocket}});
  nlohmann::json j = {{"control", s.sw.control},
                      {"rate_bps", o.rateBps},
                      {"mtu", 1500},
                      {"leaves", 0},
                      {"spines", 0},
                      {"routing", "ecmp"},
                      {"hosts", hosts}};
  return j.dump(2) + "\n";
}

// A free TCP port on 127.0.0.1 for a guest's management forward. QEMU binds it moments
// later; a loss of that race makes QEMU fail to start, which up() reports.
Result<int> freeLoopbackPort() {
  UniqueFD fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (!fd.isValid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return makeError(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno),
                     errno);
  return int(ntohs(sa.sin_port));
}

// ---- detached processes ----------------------------------------------------------------

bool writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool readAll(int fd, void* p, size_t n, int timeoutMs) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, timeoutMs);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t got = ::read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    c += got;
    n -= size_t(got);
  }
  return true;
}

// Starts argv as a daemon (double fork, setsid: init reaps it, it outlives `lab up`), with
// stdout/stderr appended to logPath. The process waits until `record` has stored its
// identity in lab.json; if `lab up` dies before that, it exits instead of running unknown.
Result<void> spawnRecorded(LabState& s, const std::vector<std::string>& argv,
                           const std::string& logPath, ProcRecord* target) {
  int up[2], go[2];
  if (::pipe2(up, O_CLOEXEC) != 0) return makeError(errnoText("pipe for", argv[0]), errno);
  UniqueFD upR(up[0]), upW(up[1]);
  if (::pipe2(go, O_CLOEXEC) != 0) return makeError(errnoText("pipe for", argv[0]), errno);
  UniqueFD goR(go[0]), goW(go[1]);
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);

  pid_t mid = ::fork();
  if (mid < 0) return makeError(errnoText("cannot fork to start", argv[0]), errno);
  if (mid == 0) {
    ::setsid();
    pid_t child = ::fork();
    if (child != 0) ::_exit(child < 0 ? 1 : 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT, SIGUSR1, SIGUSR2})
      ::signal(sig, SIG_DFL);
    int32_t self = ::getpid();
    char g = 0;
    if (!writeAll(upW.get(), &self, sizeof self) || !readAll(goR.get(), &g, 1, -1) || g != 'g')
      ::_exit(0);
    int logFd = ::open(logPath.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    int nullFd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (logFd < 0 || nullFd < 0) ::_exit(126);
    ::dup2(nullFd, 0);
    ::dup2(logFd, 1);
    ::dup2(logFd, 2);
    closeAllExcept({0, 1, 2});
    ::execv(cargs[0], cargs.data());
    dprintf(2, "rdmachaos lab: cannot execute '%s': %s\n", cargs[0], strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(mid, &status, 0) < 0 && errno == EINTR) {
  }
  upW.reset();
  goR.reset();
  int32_t pid = 0;
  if (!readAll(upR.get(), &pid, sizeof pid, 5000))
    return makeError("could not start " + describeCommand(argv));
  ProcRecord rec = identify(pid);
  rec.cmdline = argv;  // what it runs after exec; before, it still shows our command line
  *target = rec;
  if (auto r = saveState(s); !r) {
    ::kill(pid, SIGKILL);
    return r;
  }
  char g = 'g';
  if (!writeAll(goW.get(), &g, 1)) return makeError(describeCommand(argv) + " exited at start");
  return {};
}

std::vector<std::string> qemuArgs(const std::string& qemu, const Kernel& k, const LabState& s,
                                  const NodeRecord& n, int i) {
  std::string append = "console=ttyS0 quiet panic=-1 rc_init=" + s.dir + "/guest-init.sh" +
                       " rc_dir=" + s.dir + " rc_switch=" + kSwitchGuestAddress + " rc_node=" + n.name + " rc_config=" + n.config +
                       " rc_data_addr=" + n.dataAddress + "/24" + " rc_mgmt_mac=" + mgmtMac(i) +
                       " rc_data_mac=" + dataMac(i);
  return {qemu, "-name", "rdmachaos-" + n.name, "-nodefaults", "-no-user-config", "-display",
          "none", "-no-reboot", "-accel", "tcg,tb-size=" + std::to_string(kTcgCacheMiB), "-m",
          std::to_string(kGuestMemMiB), "-smp", "1", "-kernel", k.image, "-initrd",
          s.dir + "/initrd.cpio", "-append", append, "-serial",
          "file:" + s.dir + "/nodes/" + n.name + "/console.log", "-virtfs",
          "local,path=/,mount_tag=hostroot,security_model=passthrough,id=hr,"
          "multidevs=remap,readonly=on",
          "-virtfs",
          "local,path=" + s.dir +
              ",mount_tag=labdir,security_model=passthrough,id=ld,"
              "multidevs=remap,readonly=on",
          "-virtfs",
          "local,path=" + n.guestDir + ",mount_tag=labnode,security_model=passthrough,id=ln",
          // Management: user-mode networking, reachable only through the forward on loopback.
          "-netdev",
          "user,id=m0,restrict=on,hostfwd=tcp:127.0.0.1:" + std::to_string(n.mgmtPort) + "-" +
              kGuestMgmtAddress + ":" + std::to_string(kAgentPort) +
              // The agent's faults that drive the switch (link_flap switch_port, ecn_shift)
              // reach its control socket through a relay QEMU starts per connection.
              ",guestfwd=tcp:" + kSwitchGuestAddress + "-cmd:" + s.sw.binary + " --relay " +
              s.sw.control,
          "-device", "virtio-net-pci,netdev=m0,mac=" + mgmtMac(i),
          // Data: a stream socket the lab switch connects to (length-prefixed frames).
          "-netdev", "stream,id=d0,server=on,addr.type=unix,addr.path=" + n.dataSocket, "-device",
          "virtio-net-pci,netdev=d0,mac=" + dataMac(i)};
}

// Alive by pid and start time: unlike stillRunning(), also true between fork and exec.
bool alive(const ProcRecord& r) {
  return r.pid > 0 && r.startTime != 0 && identify(r.pid).startTime == r.startTime;
}

// The last lines of a log, for an error message (the lab's files go when up() fails).
std::string tailOf(const std::string& path, size_t lines = 8) {
  std::string text = readText(path);
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0; n++) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  std::string t = text.substr(pos);
  while (!t.empty() && (t.front() == '\n')) t.erase(0, 1);
  return t.empty() ? "" : "\n--- " + path + " (last lines) ---\n" + t;
}

// ---- waiting for the guests --------------------------------------------------------------

std::map<std::string, std::string> readStatus(const NodeRecord& n) {
  std::map<std::string, std::string> kv;
  std::istringstream in(readText(n.guestDir + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos)
      kv[line.substr(0, eq)] = line.substr(eq + 1);
  return kv;
}

bool guestReady(const NodeRecord& n) {
  auto st = readStatus(n);
  return st["agent_listening"] == "yes" && st["port_state"].find("ACTIVE") != std::string::npos;
}

// Waits for every guest to report its agent listening and rxe0 ACTIVE: inotify on the guests'
// shares (the guest's 9p writes are host file operations) and a pidfd per QEMU, no polling.
Result<void> waitForGuests(const LabState& s) {
  UniqueFD in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!in.isValid()) return makeError(std::string("inotify: ") + std::strerror(errno), errno);
  std::vector<UniqueFD> pidfds;
  for (const auto& n : s.nodes) {
    ::inotify_add_watch(in.get(), n.guestDir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
    pidfds.emplace_back(int(::syscall(SYS_pidfd_open, n.vm.pid, 0)));
  }
  pidfds.emplace_back(int(::syscall(SYS_pidfd_open, s.sw.proc.pid, 0)));
  int64_t deadline = monoNs() + int64_t(kBootTimeoutMs) * 1'000'000;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < s.nodes.size(); i++) {
      const auto& n = s.nodes[i];
      if (!alive(n.vm))
        return makeError("the guest of " + n.name + " (QEMU pid " + std::to_string(n.vm.pid) +
                         ") exited during boot" + tailOf(s.dir + "/nodes/" + n.name + "/qemu.log") +
                         tailOf(s.dir + "/nodes/" + n.name + "/console.log"));
      all = all && guestReady(n);
    }
    // Without the switch the data NICs have no carrier and rxe0 never becomes ACTIVE.
    if (!alive(s.sw.proc))
      return makeError("the lab switch (pid " + std::to_string(s.sw.proc.pid) +
                       ") exited while the guests booted" + tailOf(s.sw.log));
    if (all) return {};
    int64_t left = (deadline - monoNs()) / 1'000'000;
    if (left <= 0) break;
    std::vector<pollfd> pfds{{in.get(), POLLIN, 0}};
    for (auto& p : pidfds)
      if (p.isValid()) pfds.push_back({p.get(), POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), int(left)) < 0 && errno != EINTR)
      return makeError(std::string("poll: ") + std::strerror(errno), errno);
    char buf[4096];
    while (::read(in.get(), buf, sizeof buf) > 0) {
    }
  }
  std::string msg = "guests not ready after " + std::to_string(kBootTimeoutMs / 1000) + " s:";
  for (const auto& n : s.nodes)
    if (!guestReady(n))
      msg += " " + n.name + tailOf(n.guestDir + "/init.log", 4) + tailOf(n.log, 4) +
             tailOf(s.dir + "/nodes/" + n.name + "/console.log");
  return makeError(msg);
}

bool labRunning(const LabState& s) {
  if (stillRunning(s.sw.proc, s.sw.config)) return true;
  for (const auto& n : s.nodes)
    if (stillRunning(n.vm, n.dataSocket)) return true;
  return false;
}

Result<std::string> build(const UpOptions& o, LabState& s, const Kernel& k, const std::string& qemu,
                          const std::string& switchBinary) {
  // Every path the lab will create is recorded before the first one exists.
  s.files = {s.dir + "/nodes",         s.dir + "/pki",           s.dir + "/initrd.cpio",
             s.dir + "/guest-init.sh", s.dir + "/switch.json",   s.dir + "/switch.sock",
             s.dir + "/switch.log",    s.dir + "/inventory.toml",
             // packet rules' pcapng files (the switch writes them; a run copies them to its reports)
             s.dir + "/captures"};
  s.sw.binary = switchBinary;
  s.sw.config = s.dir + "/switch.json";
  s.sw.control = s.dir + "/switch.sock";
  s.sw.log = s.dir + "/switch.log";
  for (int i = 1; i <= o.nodes; i++) {
    NodeRecord n;
    n.name = "n" + std::to_string(i);
    n.mgmtAddress = "127.0.0.1";
    n.dataAddress = dataAddress(i);
    std::string nodeDir = s.dir + "/nodes/" + n.name;
    n.config = nodeDir + "/agent.toml";
    n.guestDir = nodeDir + "/guest";
    n.log = n.guestDir + "/agent.log";
    n.dataSocket = nodeDir + "/data.sock";
    if (n.dataSocket.size() >= sizeof(sockaddr_un::sun_path))
      return makeError("lab directory '" + s.dir + "' is too long for the guests' unix sockets (" +
                       n.dataSocket + "); use a shorter --dir");
    auto port = freeLoopbackPort();
    if (!port) return port.error();
    n.mgmtPort = *port;
    s.nodes.push_back(n);
  }
  s.phase = "building";
  if (auto r = saveState(s); !r) return r.error();

  log::info("soft-RoCE lab: {} guest(s) with kernel {} in {}", o.nodes, k.version, s.dir);
  auto initrd = initramfs(k);
  if (!initrd) return initrd.error();
  if (auto r = writeFile(s.dir + "/initrd.cpio", *initrd); !r) return r.error();
  if (auto r = writeFile(s.dir + "/guest-init.sh", guestInit(s.agentBinary)); !r) return r.error();
  ::chmod((s.dir + "/guest-init.sh").c_str(), 0755);

  if (auto r = createLabCerts(s); !r) return r.error();
  const bool ssh = createGuestSsh(s);
  for (const auto& n : s.nodes) {
    if (auto r = mkdirs(n.guestDir, 0755); !r) return r.error();
    if (auto r = writeFile(n.config, agentConfig(s, n, o.leaseTimeout, ssh)); !r) return r.error();
  }
  if (auto r = writeFile(s.sw.config, switchConfig(s, o)); !r) return r.error();

  int64_t t0 = monoNs();
  for (size_t i = 0; i < s.nodes.size(); i++) {
    auto& n = s.nodes[i];
    auto args = qemuArgs(qemu, k, s, n, int(i + 1));
    if (auto r = spawnRecorded(s, args, s.dir + "/nodes/" + n.name + "/qemu.log", &n.vm); !r)
      return r.error();
  }
  // QEMU creates its listening data socket before it runs the guest; the switch connects
  // once every socket exists (inotify on the node directories).
  {
    UniqueFD in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    for (const auto& n : s.nodes)
      ::inotify_add_watch(in.get(), (s.dir + "/nodes/" + n.name).c_str(), IN_CREATE);
    int64_t deadline = monoNs() + 20'000'000'000;
    for (;;) {
      bool all = true;
      for (const auto& n : s.nodes) {
        if (!alive(n.vm))
          return makeError("QEMU for " + n.name + " exited at start" +
                           tailOf(s.dir + "/nodes/" + n.name + "/qemu.log"));
        all = all && ::access(n.dataSocket.c_str(), F_OK) == 0;
      }
      if (all) break;
      int64_t left = (deadline - monoNs()) / 1'000'000;
      if (left <= 0) return makeError("QEMU did not create its data sockets within 20 s");
      pollfd p{in.get(), POLLIN, 0};
      // Bounded by 200 ms: a QEMU that dies creates no event.
      ::poll(&p, 1, int(std::min<int64_t>(left, 200)));
      char buf[4096];
      while (::read(in.get(), buf, sizeof buf) > 0) {
      }
    }
  }
  if (auto r = spawnRecorded(s, {s.sw.binary, "--config", s.sw.config}, s.sw.log, &s.sw.proc); !r)
    return r.error();

  std::string inventoryPath = s.dir + "/inventory.toml";
  if (auto r = writeFile(inventoryPath, inventory(s)); !r) return r.error();
  s.phase = "booting";
  if (auto r = saveState(s); !r) return r.error();
  if (auto r = waitForGuests(s); !r) return r.error();
  double bootS = double(monoNs() - t0) / 1e9;
  s.phase = "running";
  if (auto r = saveState(s); !r) return r.error();
  log::info("soft-RoCE lab: {} guest(s) ready in {:.1f} s (rxe0 ACTIVE, agents listening)",
            s.nodes.size(), bootS);
  return inventoryPath;
}

}  // namespace

Result<std::string> up(const UpOptions& o) {
  if (o.nodes < 1 || o.nodes > kMaxNodes)
    return makeError("lab up --soft-roce: --nodes " + std::to_string(o.nodes) +
                     " is out of range; use 1.." + std::to_string(kMaxNodes) +
                     " (each guest is a QEMU process emulating a CPU)");
  if (o.dir.empty()) return makeError("lab up: no lab directory given (--dir DIR)");
  if (o.fabric != "switch")
    return makeError("lab up --soft-roce: the guests' fabric is the lab switch; --fabric '" +
                     o.fabric + "' is not supported");
  if (o.spines > 0 || o.leaves > 0)
    return makeError("lab up --soft-roce: leaf-spine fabrics are not supported yet (one switch)");
  // Prerequisites first: a missing QEMU or kernel leaves nothing behind.
  auto qemu = findQemu();
  if (!qemu) return qemu.error();
  auto kernel = findKernel();
  if (!kernel) return kernel.error();
  auto agent = resolveBinary(o.agentBinary);
  if (!agent) return agent.error();
  std::string agentDir = agent->substr(0, agent->rfind('/'));
  std::vector<std::string> cands;
  if (!o.switchBinary.empty()) cands.push_back(o.switchBinary);
  if (const char* env = std::getenv("RDMACHAOS_LABSWITCH"); env && *env) cands.push_back(env);
  cands.push_back(agentDir + "/rdmachaos-labswitch");
  cands.push_back(agentDir + "/../labswitch/rdmachaos-labswitch");
  cands.push_back("rdmachaos-labswitch");
  std::string switchBinary;
  for (const auto& c : cands)
    if (auto r = resolveBinary(c)) {
      switchBinary = *r;
      break;
    }
  if (switchBinary.empty())
    return makeError(
        "the lab switch binary (rdmachaos-labswitch) was not found; build it (ninja "
        "-C build labswitch/rdmachaos-labswitch) or set RDMACHAOS_LABSWITCH");
  if (int n = threadCount(); n > 1)
    return makeError("lab up must run before the process starts threads (found " +
                     std::to_string(n) + "): the guests are forked from it");

  std::string dir = absoluteDir(o.dir);
  // DIR travels on the guests' kernel command line, split at spaces.
  if (!std::all_of(dir.begin(), dir.end(), [](char c) {
        return std::isalnum((unsigned char)c) || c == '/' || c == '.' || c == '_' || c == '-';
      }))
    return makeError("lab up --soft-roce: lab directory '" + dir +
                     "' may hold only letters, digits and / . _ -");
  bool createdDir = ::access(dir.c_str(), F_OK) != 0;
  if (auto r = trustedDir(dir); !r) return r.error();
  auto dirLock = FileLock::acquire(dir + "/.lab.lock", false);
  if (!dirLock)
    return makeError("another `rdmachaos lab` command is working on " + dir + "; try again");
  if (auto old = loadState(dir)) {
    if (old->kind != kVmKind.name || labRunning(*old))
      return makeError("a lab is already in " + dir + "; run `rdmachaos lab down --dir " + dir +
                       "` first");
    log::info("cleaning up the remains of an earlier soft-RoCE lab in {}", dir);
    if (auto r = downLocked(*old); !r) return r.error();
  } else if (old.error().code != ENOENT) {
    return old.error();
  }

  LabState s;
  s.kind = std::string(kVmKind.name);
  s.fabric = "switch";
  s.dir = dir;
  s.agentBinary = *agent;
  auto result = build(o, s, *kernel, *qemu, switchBinary);
  if (!result) {
    log::error("lab up --soft-roce failed: {}; removing what was created", result.error().message);
    if (auto again = loadState(dir)) {
      if (auto r = downLocked(*again); !r) {
        log::error("{}", r.error().message);
        return result.error();
      }
    }
    // Nothing of ours stays behind: the lock file, and DIR itself if we made it.
    ::unlink((dir + "/.lab.lock").c_str());
    if (createdDir) ::rmdir(dir.c_str());
    return result.error();
  }
  return result;
}

Result<void> downLocked(const LabState& s) {
  std::vector<std::string> problems;
  std::vector<ProcRecord> procs;
  std::vector<std::string> marks;
  for (const auto& n : s.nodes) {
    procs.push_back(n.vm);
    marks.push_back(n.dataSocket);
  }
  procs.push_back(s.sw.proc);
  marks.push_back(s.sw.config);
  for (auto& p : stopProcesses(procs, marks, kVmStopGraceMs)) problems.push_back(p + " did not exit");
  if (!problems.empty()) {
    std::string msg = "lab down in " + s.dir +
                      " left processes behind (lab.json kept; run `lab "
                      "down` again):";
    for (auto& p : problems) msg += "\n  " + p;
    return makeError(msg);
  }
  for (const auto& f : s.files) {
    // Only inside DIR: lab.json is input we do not fully trust.
    if (f.rfind(s.dir + "/", 0) != 0 || f.find("/../") != std::string::npos) continue;
    std::error_code ec;
    fs::remove_all(f, ec);
    if (ec) problems.push_back("cannot remove '" + f + "': " + ec.message());
  }
  if (!problems.empty()) {
    std::string msg = "lab down in " + s.dir + " left files behind:";
    for (auto& p : problems) msg += "\n  " + p;
    return makeError(msg);
  }
  if (::unlink(statePath(s.dir).c_str()) != 0 && errno != ENOENT)
    return makeError(errnoText("cannot remove", statePath(s.dir)), errno);
  log::info("soft-RoCE lab in {} is down", s.dir);
  return {};
}

Result<std::string> status(const LabState& s) {
  std::ostringstream o;
  o << "soft-RoCE lab in " << s.dir << ": " << s.nodes.size() << " guest(s), phase " << s.phase
    << "\n"
    << "data: lab switch "
    << (stillRunning(s.sw.proc, s.sw.config) ? "pid " + std::to_string(s.sw.proc.pid) + " (running)"
                                             : std::string("not running"))
    << ", control " << s.sw.control << ", 198.19.0.0/24\n"
    << "guests: " << kGuestMemMiB << " MiB RAM + " << kTcgCacheMiB
    << " MiB TCG cache each; management by QEMU user networking on 127.0.0.1\n"
    << "inventory: " << s.dir << "/inventory.toml\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-8s %-6s %-16s %-15s %-5s %-10s %-6s %-7s %s\n", "NODE",
                "QEMU", "ALIVE", "MGMT", "DATA", "RDMA", "PORT", "AGENT", "RESTART", "REPORTED");
  o << line;
  for (const auto& n : s.nodes) {
    bool alive = stillRunning(n.vm, n.dataSocket);
    auto st = readStatus(n);
    std::string state = st["port_state"];
    if (auto sp = state.find(' '); sp != std::string::npos) state = state.substr(sp + 1);
    struct stat sb {};
    std::string age = "-";
    if (::stat((n.guestDir + "/status").c_str(), &sb) == 0)
      age = std::to_string(std::max<long>(0, long(::time(nullptr) - sb.st_mtime))) + " s ago";
    std::snprintf(line, sizeof line, "%-5s %-8s %-6s %-16s %-15s %-5s %-10s %-6s %-7s %s\n",
                  n.name.c_str(), n.vm.pid ? std::to_string(n.vm.pid).c_str() : "-",
                  alive ? "yes" : "no", ("127.0.0.1:" + std::to_string(n.mgmtPort)).c_str(),
                  n.dataAddress.c_str(), st.count("rdma") ? st["rdma"].c_str() : "-",
                  state.empty() ? "-" : state.c_str(),
                  st["agent_listening"] == "yes" ? "up" : "down",
                  st.count("agent_restarts") ? st["agent_restarts"].c_str() : "-", age.c_str());
    o << line;
  }
  return o.str();
}

}  // namespace rc::lab::vm
