// The observe intake (agent/observe_intake.hpp) and librdmachaos-observe: bounds, refusals by
// reason, the C API and the NCCL plugin end to end into a real intake, the PMPI wrappers under
// mpirun. The library runs in forked children (its state is one per process, read from the
// environment at first use), loaded with dlopen by the parent before any use.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <thread>

#include "agent/agent_metrics.hpp"
#include "agent/config.hpp"
#include "agent/observe_intake.hpp"
#include "lab/lab_files.hpp"
#include "observe/nccl_profiler_abi.h"
#include "observe/observe_wire.h"
#include "observe/rdmachaos_observe.h"
#include "http_get.hpp"
#include "skip.hpp"
#include "asan_runtime.hpp"
#include "test_util.hpp"

namespace {

using rc::agent::ObserveIntake;
using rc::agent::ObserveOptions;
using rc::agent::Refusal;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// The build directory: this program is BUILD/tests/test_unit.
std::string buildDir() {
  return std::filesystem::canonical("/proc/self/exe").parent_path().parent_path().string();
}

std::unique_ptr<ObserveIntake> startIntake(const std::string& path, ObserveOptions o = {}) {
  o.socketPath = path;
  if (o.allowUids.empty()) o.allowUids = {uint32_t(::getuid())};
  auto in = ObserveIntake::start(o);
  INFO((in ? std::string() : in.error().message));
  REQUIRE(in);
  return std::move(*in);
}

// The intake works on its own thread: its counters are read until COND holds or 5 s pass.
bool waitFor(const std::function<bool()>& cond) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

rc_observe_record_v1 validRecord(const char* op = "MPI_Allreduce", uint64_t bytes = 4096) {
  rc_observe_record_v1 r{};
  r.magic = RC_OBSERVE_MAGIC;
  r.version = RC_OBSERVE_VERSION;
  r.size = sizeof r;
  r.rank = 0;
  r.world_size = 2;
  r.bytes = bytes;
  r.end_ns = nowNs();
  r.start_ns = r.end_ns - 1'000'000;
  r.pid = uint32_t(::getpid());
  std::strcpy(r.job_id, "job-1");
  std::strcpy(r.op, op);
  return r;
}

rc::UniqueFD connectTo(const std::string& path) {
  rc::UniqueFD fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void sendRaw(int fd, const void* p, size_t n) {
  REQUIRE(::send(fd, p, n, MSG_NOSIGNAL) == ssize_t(n));
}

uint64_t refused(const ObserveIntake& in, Refusal r) { return in.stats().refused[size_t(r)]; }

// librdmachaos-observe, loaded once (not initialised: each child reads its own environment).
void* observeLib() {
  static void* handle = ::dlopen((buildDir() + "/observe/librdmachaos-observe.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  return handle;
}
template <typename F>
F sym(const char* name) {
  return reinterpret_cast<F>(::dlsym(observeLib(), name));
}

// Runs BODY in a child with ENV set; what it writes to its pipe comes back, and its exit code.
struct ChildResult {
  int status = -1;
  std::string out;
};
ChildResult inChild(const std::vector<std::pair<std::string, std::string>>& env,
                    const std::function<int(int fd)>& body) {
  REQUIRE(observeLib() != nullptr);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::fflush(nullptr);  // or the child's exit would print the parent's buffered output again
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                          "SLURM_NTASKS", "RANK", "WORLD_SIZE", "SLURM_JOB_ID", "RDMACHAOS_OBSERVE_JOB",
                          "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})
      ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::_exit(body(p[1]));
  }
  ::close(p[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) r.out.append(buf, size_t(n));
  ::close(p[0]);
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

void writeStats(int fd) {
  rc_observe_stats_t s{};
  sym<void (*)(rc_observe_stats_t*)>("rc_observe_stats")(&s);
  [[maybe_unused]] auto n = ::write(fd, &s, sizeof s);
}
rc_observe_stats_t readStats(const ChildResult& r) {
  rc_observe_stats_t s{};
  REQUIRE(r.out.size() >= sizeof s);
  std::memcpy(&s, r.out.data(), sizeof s);
  return s;
}

uint64_t binBytes(const rc::workload::TelemetryBatch& b) {
  uint64_t n = 0;
  for (auto v : b.bins) n += v;
  return n;
}

}  // namespace

TEST_CASE("observe intake: a valid record is binned per job and communicator") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  auto fd = connectTo(in->path());
  auto r = validRecord("MPI_Allreduce", 1 << 20);
  sendRaw(fd.get(), &r, sizeof r);
  r.rank = 1;
  r.comm_id = 9;
  sendRaw(fd.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted == 2; }));
  auto batches = in->drain(nowNs() + rctest::kS);
  REQUIRE(batches.size() == 2);
  std::sort(batches.begin(), batches.end(), [](auto& a, auto& b) { return a.commId < b.commId; });
  CHECK(batches[0].jobId == "job-1");
  CHECK(batches[0].commId == 0);
  CHECK(batches[0].worldSize == 2);
  REQUIRE(batches[0].ranks.size() == 1);
  CHECK(batches[0].ranks[0].rank == 0);
  CHECK(batches[0].ranks[0].ops == 1);
  REQUIRE(batches[0].telemetry.iterations.size() == 1);
  CHECK(batches[0].telemetry.iterations[0].rxBytes == 1u << 20);
  CHECK(binBytes(batches[0].telemetry) == 1u << 20);
  CHECK(batches[0].telemetry.firstBinNs % in->options().binNs == 0);
  CHECK(batches[1].commId == 9);
  CHECK(batches[1].ranks[0].rank == 1);
  // What was drained is not handed over twice.
  auto again = in->drain(nowNs() + 2 * rctest::kS);
  REQUIRE(again.size() == 2);
  CHECK(again[0].telemetry.iterations.empty());
  CHECK(binBytes(again[0].telemetry) == 0);
}

TEST_CASE("observe intake: malformed records are refused by reason, the connection goes on") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  auto fd = connectTo(in->path());
  auto good = validRecord();
  sendRaw(fd.get(), &good, 100);  // short
  auto r = good;
  r.magic = 0x12345678;
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  r.version = 2;
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  r.rank = 2;  // not below world_size
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  std::strcpy(r.op, "all reduce");  // a space
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  std::memset(r.job_id, 'x', sizeof r.job_id);  // no NUL
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  r.end_ns = r.start_ns - 1;
  sendRaw(fd.get(), &r, sizeof r);
  r = good;
  r.end_ns = nowNs() - 3600 * rctest::kS, r.start_ns = r.end_ns - 1;  // an hour old
  sendRaw(fd.get(), &r, sizeof r);
  sendRaw(fd.get(), &good, sizeof good);
  REQUIRE(waitFor([&] { return in->stats().accepted + in->stats().refusedTotal() == 9; }));
  CHECK(refused(*in, Refusal::malformed) == 6);
  CHECK(refused(*in, Refusal::version) == 1);
  CHECK(refused(*in, Refusal::outOfTime) == 1);
  CHECK(in->stats().accepted == 1);
  CHECK(in->stats().clients == 1);
}

TEST_CASE("observe intake: a flood from one client is rate limited, another client still gets in") {
  rctest::TempDir dir("rc-observe");
  ObserveOptions o;
  o.maxRecordsPerSecond = 200;
  auto in = startIntake(dir.file("o.sock"), o);
  auto flood = connectTo(in->path());
  auto r = validRecord();
  // Blocking sends: the socket's buffer holds a few hundred; the flood is as fast as the intake reads.
  uint64_t sent = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3000; i++)
    if (::send(flood.get(), &r, sizeof r, MSG_NOSIGNAL) == ssize_t(sizeof r)) sent++;
  REQUIRE(waitFor([&] { return in->stats().accepted + in->stats().refusedTotal() >= sent; }));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = in->stats();
  INFO("sent " << sent << " in " << secs << " s; accepted " << st.accepted);
  CHECK(sent == 3000);
  // One second's bucket plus what refilled while the flood was read.
  CHECK(st.accepted <= uint64_t(200 + 200 * secs + 1));
  CHECK(st.accepted >= 200);
  CHECK(refused(*in, Refusal::rateLimited) == sent - st.accepted);
  auto other = connectTo(in->path());
  auto before = st.accepted;
  sendRaw(other.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted == before + 1; }));
}

TEST_CASE("observe intake: clients over max_clients, a client gone mid-record, a full queue") {
  rctest::TempDir dir("rc-observe");
  ObserveOptions o;
  o.maxClients = 2;
  o.maxQueuedBytes = 10 * sizeof(rc::workload::IterationRecord);
  auto in = startIntake(dir.file("o.sock"), o);
  {
    auto a = connectTo(in->path());
    auto b = connectTo(in->path());
    REQUIRE(waitFor([&] { return in->stats().clients == 2; }));
    auto c = connectTo(in->path());  // accepted by the kernel, closed by the intake
    REQUIRE(waitFor([&] { return refused(*in, Refusal::tooManyClients) == 1; }));
    char byte;
    CHECK(::recv(c.get(), &byte, 1, 0) == 0);  // the intake hung up
    // Half a record, then gone.
    auto r = validRecord();
    sendRaw(a.get(), &r, sizeof r / 2);
  }
  REQUIRE(waitFor([&] { return in->stats().clients == 0; }));
  CHECK(refused(*in, Refusal::malformed) == 1);
  CHECK(in->stats().accepted == 0);
  // Nobody drains: the eleventh record finds the queue full.
  auto d = connectTo(in->path());
  auto r = validRecord();
  for (int i = 0; i < 11; i++) sendRaw(d.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted + refused(*in, Refusal::queueFull) == 11; }));
  CHECK(in->stats().accepted == 10);
  in->drain(nowNs());
  sendRaw(d.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted == 11; }));
}

TEST_CASE("observe intake: streams over max_streams are refused; what nobody drains is dropped") {
  rctest::TempDir dir("rc-observe");
  ObserveOptions o;
  o.maxStreams = 2;
  o.retentionNs = 400 * rctest::kMs;
  auto in = startIntake(dir.file("o.sock"), o);
  auto fd = connectTo(in->path());
  for (uint64_t comm : {1, 2, 3}) {
    auto r = validRecord();
    r.comm_id = comm;
    r.end_ns = nowNs(), r.start_ns = r.end_ns - rctest::kMs;
    sendRaw(fd.get(), &r, sizeof r);
  }
  auto r = validRecord();
  r.end_ns = nowNs() + 60 * rctest::kS, r.start_ns = r.end_ns - 1;  // a minute ahead
  sendRaw(fd.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted + in->stats().refusedTotal() == 4; }));
  CHECK(in->stats().accepted == 2);
  CHECK(refused(*in, Refusal::tooManyStreams) == 1);
  CHECK(refused(*in, Refusal::outOfTime) == 1);
  // Nobody drains for the retention time: the records are dropped and counted, then the
  // silent streams go.
  REQUIRE(waitFor([&] { return in->stats().discarded == 2; }));
  REQUIRE(waitFor([&] { return in->drain(nowNs()).empty(); }));
  r = validRecord();
  r.comm_id = 3;
  r.end_ns = nowNs(), r.start_ns = r.end_ns - 1;
  sendRaw(fd.get(), &r, sizeof r);  // room for a new stream again
  REQUIRE(waitFor([&] { return in->stats().accepted == 3; }));
}

TEST_CASE("observe intake: its counters as the agent's Prometheus metrics") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  auto fd = connectTo(in->path());
  auto r = validRecord();
  r.dropped = 3;  // the sender's own count
  sendRaw(fd.get(), &r, sizeof r);
  sendRaw(fd.get(), &r, 10);
  REQUIRE(waitFor([&] { return in->stats().accepted + in->stats().refusedTotal() == 2; }));
  auto e = rc::metrics::Exporter::start("127.0.0.1:0");
  REQUIRE(e.ok());
  rc::agent::publishObserveMetrics(**e, in->stats());
  auto body = rctest::httpGet("127.0.0.1", (*e)->port(), "/metrics").body;
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_records_total 1"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_refused_total{reason=\"malformed\"} 1"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_refused_total{reason=\"foreign_uid\"} 0"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_sender_dropped_total 3"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_clients 1"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_agent_observe_discarded_total 0"));
}

TEST_CASE("observe intake: a connection from a uid not allowed is refused") {
  if (::getuid() != 0) RC_SKIP("needs root to send from another uid (setuid to nobody)");
  rctest::TempDir dir("rc-observe");
  ::chmod(dir.path.c_str(), 0755);
  auto in = startIntake(dir.file("o.sock"));  // allows uid 0 only
  std::string path = in->path();
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(errno == EACCES ? 3 : 5);
    auto r = validRecord();
    ::send(fd, &r, sizeof r, MSG_NOSIGNAL);
    char byte;
    // The intake closes the connection: recv sees the end (a reset, as the record went unread),
    // not a hang.
    ssize_t n = ::recv(fd, &byte, 1, 0);
    ::_exit(n == 0 || (n < 0 && errno == ECONNRESET) ? 0 : 4);
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(refused(*in, Refusal::foreignUid) == 1);
  CHECK(in->stats().accepted == 0);
  CHECK(in->stats().clients == 0);
}

TEST_CASE("observe intake: a stale socket is replaced, a live one is not taken") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  ObserveOptions o;
  o.socketPath = in->path();
  o.allowUids = {0};
  auto second = ObserveIntake::start(o);
  REQUIRE_FALSE(second);
  CHECK_THAT(second.error().message, Catch::Contains("in use"));
  // The refused start left the live intake's socket where it was.
  auto client = connectTo(in->path());
  auto r = validRecord();
  sendRaw(client.get(), &r, sizeof r);
  REQUIRE(waitFor([&] { return in->stats().accepted == 1; }));
  in.reset();
  CHECK_FALSE(std::filesystem::exists(o.socketPath));
  // A socket file nobody listens on (an agent killed -9) is taken over.
  {
    rc::UniqueFD fd(::socket(AF_UNIX, SOCK_SEQPACKET, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, o.socketPath.c_str());
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  auto third = ObserveIntake::start(o);
  INFO((third ? std::string() : third.error().message));
  CHECK(third);
}

TEST_CASE("observe config: [observe] defaults and bounds") {
  std::string base =
      "[agent]\nnode = \"n1\"\nlisten = \"127.0.0.1:7470\"\nstate_dir = \"/var/lib/rc\"\n"
      "[tls]\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\n[interfaces]\n";
  auto c = rc::agent::parseConfig(base, "agent.toml");
  REQUIRE(c);
  CHECK(c->observe.enabled);
  CHECK(c->observe.socket == "/var/lib/rc/observe.sock");
  CHECK(std::find(c->observe.allowUids.begin(), c->observe.allowUids.end(), 0u) != c->observe.allowUids.end());
  CHECK(std::find(c->observe.allowUids.begin(), c->observe.allowUids.end(), uint32_t(::getuid())) !=
        c->observe.allowUids.end());
  auto set = rc::agent::parseConfig(base + "[observe]\nsocket = \"/run/o.sock\"\nallow_uids = [1000]\n"
                                           "max_clients = 8\nmax_records_per_second = 500\nmax_queued_bytes = \"1MiB\"\n",
                                    "agent.toml");
  REQUIRE(set);
  CHECK(set->observe.socket == "/run/o.sock");
  CHECK(set->observe.allowUids == std::vector<uint32_t>{1000});
  CHECK(set->observe.maxClients == 8);
  CHECK(set->observe.maxRecordsPerSecond == 500);
  CHECK(set->observe.maxQueuedBytes == 1u << 20);
  auto bad = GENERATE(as<std::string>{}, "socket = \"relative.sock\"", "max_clients = 0", "allow_uids = [-1]",
                      "max_queued_bytes = \"1KiB\"", "bogus = 1");
  auto r = rc::agent::parseConfig(base + "[observe]\n" + bad + "\n", "agent.toml");
  INFO(bad);
  CHECK_FALSE(r);
}

TEST_CASE("observe config: a lab agent's configuration names its node's own socket") {
  rc::lab::LabState lab;
  lab.dir = "/tmp/rdmachaos-lab-t";
  rc::lab::NodeRecord node;
  node.name = "n2";
  auto text = rc::lab::agentConfigText(lab, node,
                                       {.heading = "test",
                                        .listen = "198.18.1.12:7470",
                                        .stateDir = "\"/tmp/rdmachaos-lab-t/nodes/n2/state\"",
                                        .observeSocket = "/tmp/rdmachaos-lab-t/nodes/n2/observe.sock"},
                                       std::chrono::seconds(5));
  auto c = rc::agent::parseConfig(text, "agent.toml");
  INFO(text);
  REQUIRE(c);
  CHECK(c->observe.socket == "/tmp/rdmachaos-lab-t/nodes/n2/observe.sock");
}

TEST_CASE("observe library: with no agent listening, one connect attempt, records dropped and counted") {
  rctest::TempDir dir("rc-observe");
  auto result = inChild({{"RDMACHAOS_OBSERVE_SOCKET", dir.file("nobody.sock")}}, [&](int fd) {
    auto record = sym<int (*)(const char*, uint64_t, uint64_t, int64_t, int64_t, int)>("rc_observe_record");
    int64_t t = nowNs();
    for (int i = 0; i < 100000; i++)
      if (record("step", 0, 64, t, t, 0) != RC_OBSERVE_DROPPED) return 1;
    writeStats(fd);
    return 0;
  });
  REQUIRE(result.status == 0);
  auto s = readStats(result);
  CHECK(s.sent == 0);
  CHECK(s.dropped == 100000);
  CHECK(s.connect_attempts == 1);
  CHECK(s.connected == 0);
}

TEST_CASE("observe library: the C API end to end into a real intake") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  auto result = inChild({{"RDMACHAOS_OBSERVE_SOCKET", in->path()},
                         {"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"SLURM_JOB_ID", "4242"}},
                        [&](int fd) {
                          auto begin = sym<uint64_t (*)(const char*, uint64_t)>("rc_observe_begin");
                          auto end = sym<int (*)(uint64_t, int)>("rc_observe_end");
                          auto record = sym<int (*)(const char*, uint64_t, uint64_t, int64_t, int64_t, int)>(
                              "rc_observe_record");
                          if (begin("not a name", 1) != 0) return 1;
                          for (int i = 0; i < 5; i++) {
                            uint64_t t = begin("train_step", 1 << 20);
                            std::this_thread::sleep_for(std::chrono::milliseconds(2));
                            if (end(t, i == 4 ? 3 : 0) != RC_OBSERVE_SENT) return 2;
                            if (end(t, 0) != RC_OBSERVE_DROPPED) return 3;  // ended twice
                          }
                          int64_t t = nowNs();
                          if (record("halo", 7, 100, t - 1000, t, 0) != RC_OBSERVE_SENT) return 4;
                          writeStats(fd);
                          return 0;
                        });
  REQUIRE(result.status == 0);
  auto s = readStats(result);
  CHECK(s.sent == 6);
  CHECK(s.dropped == 5);
  CHECK(s.connect_attempts == 1);
  REQUIRE(waitFor([&] { return in->stats().accepted == 6; }));
  CHECK(in->stats().senderDropped == 5);  // as the last record sent said
  auto batches = in->drain(nowNs() + rctest::kS);
  REQUIRE(batches.size() == 2);
  std::sort(batches.begin(), batches.end(), [](auto& a, auto& b) { return a.commId < b.commId; });
  const auto& steps = batches[0];
  CHECK(steps.jobId == "4242");
  CHECK(steps.worldSize == 4);
  REQUIRE(steps.ranks.size() == 1);
  CHECK(steps.ranks[0].rank == 1);
  REQUIRE(steps.telemetry.iterations.size() == 5);
  for (const auto& it : steps.telemetry.iterations) {
    CHECK(it.rxBytes == 1u << 20);
    CHECK(it.endNs - it.startNs >= 2 * rctest::kMs);
  }
  CHECK_FALSE(steps.telemetry.iterations[4].ok);
  CHECK(steps.telemetry.counters.failedIterations == 1);
  CHECK(binBytes(steps.telemetry) == 5u << 20);
  CHECK(batches[1].commId == 7);
  CHECK(binBytes(batches[1].telemetry) == 100);
}

TEST_CASE("observe library: Python through ctypes (observe/examples/train_step.py)") {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) RC_SKIP("python3 is not installed");
  auto asan = rctest::asanRuntime();  // and no leak report of python3's or Open MPI's own
  if (!asan) RC_SKIP("a sanitized build, and `cc -print-file-name=libasan.so` names no runtime to preload");
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  std::string preload = asan->empty() ? "" : "LD_PRELOAD=" + *asan + " ASAN_OPTIONS=detect_leaks=0 ";
  std::string cmd = preload + "RDMACHAOS_OBSERVE_SOCKET=" + in->path() + " RDMACHAOS_OBSERVE_LIB=" + buildDir() +
                    "/observe/librdmachaos-observe.so RANK=3 WORLD_SIZE=8 TORCHELASTIC_RUN_ID=run-7 python3 " +
                    RDMACHAOS_SOURCE_ROOT "/observe/examples/train_step.py 12";
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  REQUIRE(waitFor([&] { return in->stats().accepted == 12; }));
  auto batches = in->drain(nowNs() + rctest::kS);
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].jobId == "run-7");
  CHECK(batches[0].worldSize == 8);
  REQUIRE(batches[0].ranks.size() == 1);
  CHECK(batches[0].ranks[0].rank == 3);
  CHECK(binBytes(batches[0].telemetry) == 12u * (4u << 20));
}

TEST_CASE("observe library: the NCCL profiler plugin replayed through its v1 to v6 structs") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  auto result = inChild(
      {{"RDMACHAOS_OBSERVE_SOCKET", in->path()}, {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"RDMACHAOS_OBSERVE_JOB", "nccl"}},
      [&](int fd) {
        auto sleepMs = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
        // v5, the interface of current NCCL releases: a group holding an all-reduce, then a
        // group of a send and a receive, each with a proxy operation.
        auto* v5 = sym<const rc_nccl_profiler_v5*>("ncclProfiler_v5");
        if (!v5 || std::strcmp(v5->name, "rdmachaos-observe") != 0) return 1;
        void* ctx = nullptr;
        int mask = 0;
        if (v5->init(&ctx, 0xabc, &mask, "world", 1, 2, 1, nullptr) != rcNcclSuccess) return 2;
        if (!(mask & RC_NCCL_COLL) || !(mask & RC_NCCL_PROXY_OP)) return 3;
        rc_nccl_descr_v5 d{};
        void *group = nullptr, *coll = nullptr, *proxy = nullptr;
        d.type = RC_NCCL_GROUP;
        d.rank = 1;
        v5->startEvent(ctx, &group, &d);
        d = {};
        d.type = RC_NCCL_COLL;
        d.rank = 1;
        d.coll.func = "AllReduce";
        d.coll.count = 1 << 20;
        d.coll.datatype = "ncclFloat32";
        d.coll.parentGroup = group;
        v5->startEvent(ctx, &coll, &d);
        d = {};
        d.type = RC_NCCL_PROXY_OP;
        d.parentObj = coll;
        d.proxyOp.pid = ::getpid();
        v5->startEvent(ctx, &proxy, &d);
        if (!group || !coll || !proxy) return 4;
        v5->stopEvent(coll);  // enqueued, not done
        v5->stopEvent(group);
        sleepMs(20);
        v5->recordEventState(proxy, 19, nullptr);
        v5->stopEvent(proxy);  // now the all-reduce is done
        // Its proxy operation stopped: a child that comes later is not followed.
        void* late = reinterpret_cast<void*>(1);
        d = {};
        d.type = RC_NCCL_PROXY_OP;
        d.parentObj = coll;
        d.proxyOp.pid = ::getpid();
        v5->startEvent(ctx, &late, &d);
        if (late != nullptr) return 8;
        // A second all-reduce whose proxy operation starts only after the enqueue (as NCCL's
        // proxy thread picks it up): this communicator's operations have children, so it waits.
        void *coll2 = nullptr, *proxy2 = nullptr;
        d = {};
        d.type = RC_NCCL_COLL;
        d.rank = 1;
        d.coll.func = "AllReduce";
        d.coll.count = 1000;
        d.coll.datatype = "ncclFloat64";
        v5->startEvent(ctx, &coll2, &d);
        v5->stopEvent(coll2);
        sleepMs(10);
        d = {};
        d.type = RC_NCCL_PROXY_OP;
        d.parentObj = coll2;
        d.proxyOp.pid = ::getpid();
        v5->startEvent(ctx, &proxy2, &d);
        if (!proxy2) return 9;
        sleepMs(10);
        v5->stopEvent(proxy2);
        void *g2 = nullptr, *send = nullptr, *recv = nullptr, *ps = nullptr, *pr = nullptr;
        d = {};
        d.type = RC_NCCL_GROUP;
        v5->startEvent(ctx, &g2, &d);
        for (auto [h, ph, func] : {std::tuple{&send, &ps, "Send"}, std::tuple{&recv, &pr, "Recv"}}) {
          d = {};
          d.type = RC_NCCL_P2P;
          d.rank = 1;
          d.p2p.func = func;
          d.p2p.count = 1000;
          d.p2p.datatype = "ncclFloat32";
          d.p2p.peer = 0;
          d.p2p.parentGroup = g2;
          v5->startEvent(ctx, h, &d);
          d = {};
          d.type = RC_NCCL_PROXY_OP;
          d.parentObj = *h;
          d.proxyOp.pid = ::getpid();
          v5->startEvent(ctx, ph, &d);
          v5->stopEvent(*h);
        }
        // A proxy operation of another process (PXN) is not ours to follow.
        void* foreign = reinterpret_cast<void*>(1);
        d = {};
        d.type = RC_NCCL_PROXY_OP;
        d.parentObj = send;
        d.proxyOp.pid = ::getpid() + 1;
        v5->startEvent(ctx, &foreign, &d);
        if (foreign != nullptr) return 5;
        v5->stopEvent(g2);
        sleepMs(5);
        v5->stopEvent(ps);
        v5->stopEvent(pr);  // the group's last p2p completes: one record
        v5->finalize(ctx);
        // v4: the communicator from init; an all-gather's bytes are the gathered whole.
        auto* v4 = sym<const rc_nccl_profiler_v4*>("ncclProfiler_v4");
        if (!v4 || v4->init(&ctx, &mask, "world", 0xdef, 1, 2, 1, nullptr) != rcNcclSuccess) return 6;
        rc_nccl_descr_v4 d4{};
        d4.type = RC_NCCL_COLL;
        d4.rank = 1;
        d4.coll.func = "AllGather";
        d4.coll.count = 256;
        d4.coll.datatype = "ncclBfloat16";
        void* c4 = nullptr;
        v4->startEvent(ctx, &c4, &d4);
        v4->stopEvent(c4);  // no proxy (intra-node): done at enqueue
        v4->finalize(ctx);
        // v1: enum func and datatype, the communicator on the event.
        auto* v1 = sym<const rc_nccl_profiler_v1*>("ncclProfiler_v1");
        if (!v1 || v1->init(&ctx, &mask) != rcNcclSuccess) return 7;
        rc_nccl_descr_v1 d1{};
        d1.type = RC_NCCL_COLL;
        d1.rank = 1;
        d1.coll.commHash = 0x123;
        d1.coll.func = 4;  // AllReduce
        d1.coll.count = 10;
        d1.coll.datatype = 8;  // double
        void* c1 = nullptr;
        v1->startEvent(ctx, &c1, &d1);
        v1->stopEvent(c1);
        v1->finalize(ctx);
        // v2 and v3 differ in the collective's layout (v3 drops trafficBytes), v6 in the union.
        auto* v2 = sym<const rc_nccl_profiler_v2*>("ncclProfiler_v2");
        if (!v2 || v2->init(&ctx, &mask) != rcNcclSuccess) return 10;
        rc_nccl_descr_v2 d2{};
        d2.type = RC_NCCL_COLL;
        d2.rank = 1;
        d2.coll.commHash = 0x222;
        d2.coll.func = "AllReduce";
        d2.coll.count = 100;
        d2.coll.datatype = "ncclFloat16";
        d2.coll.trafficBytes = 12345;
        void* c2 = nullptr;
        v2->startEvent(ctx, &c2, &d2);
        v2->stopEvent(c2);
        auto* v3 = sym<const rc_nccl_profiler_v3*>("ncclProfiler_v3");
        if (!v3 || v3->init(&ctx, &mask) != rcNcclSuccess) return 11;
        rc_nccl_descr_v3 d3{};
        d3.type = RC_NCCL_COLL;
        d3.rank = 1;
        d3.coll.commHash = 0x333;
        d3.coll.func = "ReduceScatter";
        d3.coll.count = 64;
        d3.coll.datatype = "ncclInt32";
        void* c3 = nullptr;
        v3->startEvent(ctx, &c3, &d3);
        v3->stopEvent(c3);
        auto* v6 = sym<const rc_nccl_profiler_v6*>("ncclProfiler_v6");
        if (!v6 || v6->init(&ctx, 0x666, &mask, "world", 1, 2, 1, nullptr) != rcNcclSuccess) return 12;
        rc_nccl_descr_v6 d6{};
        d6.type = RC_NCCL_COLL;
        d6.rank = 1;
        d6.coll.func = "Broadcast";
        d6.coll.count = 3;
        d6.coll.datatype = "ncclUint64";
        void* c6 = nullptr;
        v6->startEvent(ctx, &c6, &d6);
        v6->stopEvent(c6);
        writeStats(fd);
        return 0;
      });
  REQUIRE(result.status == 0);
  CHECK(readStats(result).sent == 8);
  REQUIRE(waitFor([&] { return in->stats().accepted == 8; }));
  auto batches = in->drain(nowNs() + rctest::kS);
  REQUIRE(batches.size() == 6);
  std::map<uint64_t, rc::agent::ObservedBatch> byComm;
  for (auto& b : batches) byComm[b.commId] = b;
  const auto& v5 = byComm.at(0xabc);
  CHECK(v5.jobId == "nccl");
  CHECK(v5.worldSize == 2);
  REQUIRE(v5.telemetry.iterations.size() == 3);
  const auto& ar = v5.telemetry.iterations[0];
  CHECK(ar.rxBytes == 4u << 20);
  CHECK(ar.endNs - ar.startNs >= 20 * rctest::kMs);  // until the proxy stopped, not the enqueue
  const auto& ar2 = v5.telemetry.iterations[1];
  CHECK(ar2.rxBytes == 8000);
  CHECK(ar2.endNs - ar2.startNs >= 20 * rctest::kMs);
  CHECK(v5.telemetry.iterations[2].rxBytes == 8000);  // the p2p group: send and receive
  CHECK(binBytes(v5.telemetry) == (4u << 20) + 16000);
  CHECK(byComm.at(0xdef).telemetry.iterations.at(0).rxBytes == 256 * 2 * 2);
  CHECK(byComm.at(0x123).telemetry.iterations.at(0).rxBytes == 80);
  CHECK(byComm.at(0x222).telemetry.iterations.at(0).rxBytes == 200);
  CHECK(byComm.at(0x333).telemetry.iterations.at(0).rxBytes == 64 * 4 * 2);  // world 2 from RANK/WORLD_SIZE
  CHECK(byComm.at(0x666).telemetry.iterations.at(0).rxBytes == 24);
}

TEST_CASE("observe library: the NCCL plugin reports each collective once with a proxy thread of its own") {
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  constexpr int kColls = 2000;
  auto result = inChild({{"RDMACHAOS_OBSERVE_SOCKET", in->path()}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}, [&](int fd) {
    auto* v5 = sym<const rc_nccl_profiler_v5*>("ncclProfiler_v5");
    void* ctx = nullptr;
    int mask = 0;
    if (v5->init(&ctx, 0x77, &mask, "world", 1, 2, 0, nullptr) != rcNcclSuccess) return 1;
    // As in NCCL: the user's thread enqueues, the proxy thread starts and stops each
    // collective's proxy operations whenever it gets to them, before or after the enqueue ends.
    std::mutex m;
    std::deque<void*> work;
    std::atomic<bool> done{false};
    std::thread proxy([&] {
      for (;;) {
        void* coll = nullptr;
        {
          std::lock_guard lock(m);
          if (!work.empty()) coll = work.front(), work.pop_front();
        }
        if (!coll) {
          if (done) return;
          std::this_thread::yield();
          continue;
        }
        void* ops[2] = {};
        for (auto*& op : ops) {
          rc_nccl_descr_v5 d{};
          d.type = RC_NCCL_PROXY_OP;
          d.parentObj = coll;
          d.proxyOp.pid = ::getpid();
          v5->startEvent(ctx, &op, &d);
        }
        for (auto* op : ops) v5->stopEvent(op);
      }
    });
    for (int i = 0; i < kColls; i++) {
      rc_nccl_descr_v5 d{};
      d.type = RC_NCCL_COLL;
      d.coll.func = "AllReduce";
      d.coll.count = 256;
      d.coll.datatype = "ncclFloat32";
      void* coll = nullptr;
      v5->startEvent(ctx, &coll, &d);
      {
        std::lock_guard lock(m);
        work.push_back(coll);
      }
      if (i % 3 == 0) std::this_thread::yield();
      v5->stopEvent(coll);
      if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    done = true;
    proxy.join();
    writeStats(fd);
    return 0;
  });
  REQUIRE(result.status == 0);
  auto s = readStats(result);
  CHECK(s.sent + s.dropped == uint64_t(kColls));  // each once, none twice
  REQUIRE(waitFor([&] { return in->stats().accepted == s.sent; }));
  CHECK(s.sent > 0);  // how many the socket took depends on the host; none counted twice
}

TEST_CASE("observe library: the PMPI wrappers under mpirun -n 2 count every collective") {
  std::string probe = buildDir() + "/tests/observe_mpi_probe";
  std::string mpiLib = buildDir() + "/observe/librdmachaos-observe-mpi.so";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) RC_SKIP("mpirun is not installed (openmpi-bin)");
  if (!std::filesystem::exists(probe) || !std::filesystem::exists(mpiLib))
    RC_SKIP("built without Open MPI's headers (libopenmpi-dev): no PMPI wrappers");
  auto asan = rctest::asanRuntime();  // and no leak report of python3's or Open MPI's own
  if (!asan) RC_SKIP("a sanitized build, and `cc -print-file-name=libasan.so` names no runtime to preload");
  rctest::TempDir dir("rc-observe");
  auto in = startIntake(dir.file("o.sock"));
  std::string out = dir.file("probe.out");
  std::string preload = asan->empty() ? mpiLib : *asan + ":" + mpiLib + " -x ASAN_OPTIONS=detect_leaks=0";
  std::string cmd = "mpirun --allow-run-as-root --oversubscribe -n 2 --mca btl self,tcp --mca btl_tcp_if_include lo"
                    " --mca oob_tcp_if_include lo -x RDMACHAOS_OBSERVE_SOCKET=" + in->path() +
                    " -x LD_PRELOAD=" + preload + " " + probe + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text;
  {
    std::ifstream f(out);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  INFO(cmd << "\n" << text);
  REQUIRE(rc == 0);
  // Each rank prints "ops N": its own count of the collectives it completed.
  uint64_t ops = 0;
  int ranks = 0;
  for (size_t at = text.find("ops "); at != std::string::npos; at = text.find("ops ", at + 1)) {
    ops += std::stoull(text.substr(at + 4));
    ranks++;
  }
  REQUIRE(ranks == 2);
  REQUIRE(waitFor([&] { return in->stats().accepted >= ops; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(in->stats().accepted == ops);
  CHECK(in->stats().refusedTotal() == 0);
  auto batches = in->drain(nowNs() + rctest::kS);
  REQUIRE(batches.size() == 1);
  CHECK_FALSE(batches[0].jobId.empty());  // Open MPI's job id, the same on both ranks
  CHECK(batches[0].commId == 0);
  CHECK(batches[0].worldSize == 2);
  CHECK(batches[0].ranks.size() == 2);
  CHECK(batches[0].telemetry.iterations.size() == ops);
}
