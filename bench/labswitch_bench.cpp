// Benchmarks of the lab switch (needs root): aggregate forwarding capacity with 1500-byte
// frames against a Linux bridge measured in the same run, and pfc_storm's generation rate on a
// TAP with exact frame counts at the sender and at the switch. Prints numbers; asserts nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "faults/fault.hpp"
#include "lab/lab.hpp"

using nlohmann::json;

namespace {

const char* kStandIn = R"PERL(#!/usr/bin/perl
use strict; use IO::Socket::INET;
my %args = @ARGV; open(my $cfg, '<', $args{'--config'}) or die;
my ($listen) = map { /^listen\s*=\s*"([^"]+)"/ ? $1 : () } <$cfg>;
my ($host, $port) = split /:/, $listen;
my $srv = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $port, Listen => 4, ReuseAddr => 1) or die;
$SIG{TERM} = sub { exit 0 };
while (1) { my $c = $srv->accept; close($c) if $c; }
)PERL";

// A lab that is taken down (and its directory removed) whatever happens.
struct Lab {
  std::string dir, agent;
  int slot = 0;
  std::string control;
  int switchPid = 0;
  bool ok = false;
  Lab(int nodes, const std::string& fabric, double rate, bool offload = true, const std::string& ports = "tap") {
    char tmpl[] = "/tmp/rc-bench-lab-XXXXXX";
    if (!::mkdtemp(tmpl)) return;
    dir = tmpl;
    agent = dir + "-standin";
    std::ofstream(agent) << kStandIn;
    std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
    rc::lab::UpOptions o;
    o.nodes = nodes;
    o.dir = dir;
    o.agentBinary = agent;
    o.fabric = fabric;
    o.rateBps = rate;
    o.switchOffload = offload;
    o.switchPorts = ports;
    auto r = rc::lab::up(o);
    if (!r) {
      std::fprintf(stderr, "lab up failed: %s\n", r.error().message.c_str());
      return;
    }
    std::ifstream in(dir + "/lab.json");
    json s = json::parse(in);
    slot = s["slot"].get<int>();
    control = s["switch"]["control"].get<std::string>();
    if (s["switch"].contains("proc")) switchPid = s["switch"]["proc"].value("pid", 0);
    ok = true;
  }
  ~Lab() {
    if (!dir.empty()) {
      (void)rc::lab::down(dir);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      std::filesystem::remove(agent, ec);
    }
  }
  std::string ns(int i) const { return "rc" + std::to_string(slot) + "-n" + std::to_string(i); }
  std::string addr(int i) const { return "198.19." + std::to_string(slot) + "." + std::to_string(10 + i); }
};

json request(const std::string& path, const json& req) {
  rc::UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return json::object();
  std::string line = req.dump() + "\n";
  (void)!::write(fd.get(), line.data(), line.size());
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return json::object();
    in.append(buf, size_t(n));
  }
  return json::parse(in.substr(0, in.find('\n')));
}

void enter(const std::string& ns) {
  if (!bench::enterNetns(ns)) ::_exit(3);
}

// Frames the receiving host's NIC took in (/proc/net/dev of its namespace): what the fabric
// delivered, independent of what the receiver's stack does with them.
uint64_t rxPackets(const std::string& ns) {
  pid_t pid;
  int p[2];
  if (::pipe(p) != 0) return 0;
  pid = ::fork();
  if (pid == 0) {
    enter(ns);
    std::ifstream in("/proc/net/dev");
    std::string line;
    uint64_t packets = 0;
    while (std::getline(in, line)) {
      auto colon = line.find("data0:");
      if (colon == std::string::npos) continue;
      std::istringstream fields(line.substr(colon + 6));
      uint64_t bytes = 0;
      fields >> bytes >> packets;  // receive bytes, receive packets
    }
    (void)!::write(p[1], &packets, sizeof packets);
    ::_exit(0);
  }
  ::close(p[1]);
  uint64_t v = 0;
  (void)!::read(p[0], &v, sizeof v);
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  return v;
}

// Two 1500-byte floods (n1 -> n2, n3 -> n4) through the fabric for `secs`: frames/s and
// Gb/s delivered to the receivers' NICs.
std::pair<double, double> forwarding(const std::string& fabric, double secs, bool offload = true,
                                     const std::string& ports = "tap") {
  Lab lab(4, fabric, 100e9, offload, ports);  // ports fast enough that the line rate is not the limit
  if (!lab.ok) return {0, 0};
  // Resolve ARP first, so the floods are unicast from the start.
  for (int i : {1, 3}) {
    std::string cmd = "ip netns exec " + lab.ns(i) + " ip neigh replace " + lab.addr(i + 1) +
                      " lladdr $(ip netns exec " + lab.ns(i + 1) +
                      " cat /sys/class/net/data0/address) dev data0 nud permanent";
    (void)!std::system(("bash -c '" + cmd + "' 2>/dev/null").c_str());
  }
  pid_t a = bench::udpFlood(lab.ns(1), lab.addr(2)), b = bench::udpFlood(lab.ns(3), lab.addr(4));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  uint64_t r0 = rxPackets(lab.ns(2)) + rxPackets(lab.ns(4));
  int64_t t0 = rc::monoNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(int(secs * 1000)));
  uint64_t r1 = rxPackets(lab.ns(2)) + rxPackets(lab.ns(4));
  int64_t t1 = rc::monoNs();
  for (pid_t p : {a, b}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  double fps = double(r1 - r0) / (double(t1 - t0) / 1e9);
  return {fps, fps * 1514 * 8 / 1e9};
}

// CPU seconds (user + system, softirq work charged to it included) a process has used.
double cpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream f(all.substr(close + 2));
  std::string skip;
  for (int i = 0; i < 11; i++) f >> skip;  // state .. cmajflt
  double utime = 0, stime = 0;
  f >> utime >> stime;
  return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

struct TcpRun {
  double gbps = 0;      // received by iperf3's server
  double cpu = 0;       // the switch's CPU seconds per second (0 for the bridge: the kernel's)
  double busy = 0;      // the switch loop's busy fraction over the run
};

// iperf3 -P 4 from n1 to n2 through the fabric for SECS: what arrived, and what it cost the switch.
TcpRun tcp(const std::string& fabric, double rate, bool offload, double secs, const std::string& ports = "tap") {
  TcpRun r;
  Lab lab(2, fabric, rate, offload, ports);
  if (!lab.ok) return r;
  (void)!std::system(("ip netns exec " + lab.ns(2) + " iperf3 -s -1 -D >/dev/null 2>&1").c_str());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  json c0 = fabric == "switch" ? request(lab.control, {{"cmd", "counters"}, {"port", "*"}}) : json::object();
  double cpu0 = lab.switchPid ? cpuSeconds(lab.switchPid) : 0;
  std::string out = bench::capture("ip netns exec " + lab.ns(1) + " iperf3 -J -P 4 -t " + std::to_string(int(secs)) + " -c " +
                            lab.addr(2) + " 2>/dev/null");
  double cpu1 = lab.switchPid ? cpuSeconds(lab.switchPid) : 0;
  json c1 = fabric == "switch" ? request(lab.control, {{"cmd", "counters"}, {"port", "*"}}) : json::object();
  json j = json::parse(out, nullptr, false);
  if (!j.is_discarded() && j.contains("end"))
    r.gbps = j["end"]["sum_received"].value("bits_per_second", 0.0) / 1e9;
  r.cpu = (cpu1 - cpu0) / secs;
  const double loop = c1.value("loop_ns", 0.0) - c0.value("loop_ns", 0.0);
  if (loop > 0) r.busy = (c1.value("busy_ns", 0.0) - c0.value("busy_ns", 0.0)) / loop;
  return r;
}

// pfc_storm at `rate` frames/s for at most `frames`: frames sent (the fault's own count),
// frames the switch received, and the achieved rate.
void stormRate(double rate, int64_t frames) {
  Lab lab(2, "switch", 1e9);
  if (!lab.ok) return;
  (void)request(lab.control, {{"cmd", "set_watchdog"}, {"port", "*"}, {"enabled", false}});
  rc::faults::EventLog events;
  int64_t start = 0, end = 0;
  std::string error;
  std::thread t([&] {
    enter(lab.ns(1));
    const auto* k = rc::faults::findKind("pfc_storm");
    auto p = rc::faults::normaliseParams(
        "pfc_storm", k->params,
        {{"rate", std::to_string(int64_t(rate))}, {"max_frames", frames}, {"duration", "60s"}});
    if (!p) {
      error = p.error().message;
      return;
    }
    auto f = k->create(*p, rc::faults::Policy{{"data0"}, {"mgmt0"}, "data0"});
    if (!f) {
      error = f.error().message;
      return;
    }
    std::stop_source stop;
    start = rc::monoNs();
    auto r = (*f)->run(stop.get_token(), events);
    end = rc::monoNs();
    if (!r) error = r.error().message;
  });
  t.join();
  if (!error.empty()) {
    std::printf("  pfc_storm failed: %s\n", error.c_str());
    return;
  }
  int64_t sent = -1;
  for (const auto& e : events.snapshot())
    if (e.what == "frames_sent") sent = std::stoll(e.detail.substr(e.detail.rfind(' ') + 1));
  // Let the switch drain its TAP before reading the count.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  json c = request(lab.control, {{"cmd", "counters"}, {"port", "n1"}});
  uint64_t rx = c["ports"][0]["queues"][3]["pfc_rx"].get<uint64_t>();
  double secs = double(end - start) / 1e9;
  std::printf("  requested %9.0f/s, max_frames %lld: sent %lld (exact: %s) in %.3f s = %9.0f/s "
              "(%.3f of requested); switch received %llu (%.4f of sent)\n",
              rate, (long long)frames, (long long)sent, sent == frames ? "yes" : "no", secs,
              double(sent) / secs, double(sent) / secs / rate, (unsigned long long)rx,
              double(rx) / double(std::max<int64_t>(1, sent)));
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "labswitch_bench needs root (network namespaces)\n");
    return 77;
  }
  // --vs OTHER [SECS] [ROUNDS]: the forwarding capacity of this switch binary
  // ($RDMACHAOS_LABSWITCH) against OTHER (e.g. one built from an earlier commit), alternating
  // ABAB for ROUNDS rounds on the same machine: per round frames/s of each, and the median
  // ratio. Issue 23: the packet rules' cost with no rule on (one check per frame).
  if (argc > 2 && std::string(argv[1]) == "--vs") {
    const char* self = std::getenv("RDMACHAOS_LABSWITCH");
    if (!self || !*self) {
      std::fprintf(stderr, "--vs needs RDMACHAOS_LABSWITCH (this switch) and OTHER\n");
      return 2;
    }
    std::string a = self, b = argv[2];
    double secs = argc > 3 ? std::atof(argv[3]) : 3.0;
    int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
    std::printf("== forwarding capacity, %s against %s, 1514-byte frames, 2 flows, %.1f s each, %d rounds ==\n",
                a.c_str(), b.c_str(), secs, rounds);
    std::vector<double> ratios;
    for (int r = 0; r < rounds; r++) {
      ::setenv("RDMACHAOS_LABSWITCH", a.c_str(), 1);
      double fa = forwarding("switch", secs).first;
      ::setenv("RDMACHAOS_LABSWITCH", b.c_str(), 1);
      double fb = forwarding("switch", secs).first;
      ratios.push_back(fb > 0 ? fa / fb : 0);
      std::printf("  round %d: this %9.0f frames/s, other %9.0f frames/s, ratio %.3f\n", r + 1, fa, fb, ratios.back());
      std::fflush(stdout);
    }
    ::setenv("RDMACHAOS_LABSWITCH", a.c_str(), 1);
    std::sort(ratios.begin(), ratios.end());
    std::printf("  median ratio this/other: %.3f (min %.3f, max %.3f)\n", ratios[ratios.size() / 2], ratios.front(),
                ratios.back());
    return 0;
  }
  double secs = argc > 1 ? std::atof(argv[1]) : 3.0;
  std::printf("== forwarding capacity, 1514-byte frames, 2 flows on 4 hosts, %.1f s each ==\n", secs);
  auto sw = forwarding("switch", secs);
  auto veth = forwarding("switch", secs, true, "veth");
  auto plain = forwarding("switch", secs, false);
  auto br = forwarding("bridge", secs);
  std::printf("  lab switch:   %9.0f frames/s  %6.3f Gb/s\n", sw.first, sw.second);
  std::printf("  veth ports:   %9.0f frames/s  %6.3f Gb/s  (AF_PACKET, --ports veth)\n", veth.first, veth.second);
  std::printf("  no offload:   %9.0f frames/s  %6.3f Gb/s\n", plain.first, plain.second);
  std::printf("  linux bridge: %9.0f frames/s  %6.3f Gb/s\n", br.first, br.second);
  std::printf("  ratio switch/bridge: %.3f (TAPs), %.3f (veth ports)\n", br.first > 0 ? sw.first / br.first : 0.0,
              br.first > 0 ? veth.first / br.first : 0.0);
  const int tsecs = std::max(3, int(secs * 2));
  std::printf("== TCP through the fabric, iperf3 -P 4, 2 hosts, %d s each ==\n", tsecs);
  std::printf("  unshaped ports (100G: the switch's CPU is the limit)\n");
  auto on = tcp("switch", 100e9, true, tsecs), vethOn = tcp("switch", 100e9, true, tsecs, "veth"),
       off = tcp("switch", 100e9, false, tsecs), bridge = tcp("bridge", 100e9, true, tsecs);
  std::printf("    switch, offload:     %7.2f Gb/s  switch CPU %.2f s/s  %.3f CPU-s per Gb\n", on.gbps, on.cpu,
              on.gbps > 0 ? on.cpu / on.gbps : 0.0);
  std::printf("    switch, veth ports:  %7.2f Gb/s  switch CPU %.2f s/s  %.3f CPU-s per Gb\n", vethOn.gbps, vethOn.cpu,
              vethOn.gbps > 0 ? vethOn.cpu / vethOn.gbps : 0.0);
  std::printf("    switch, no offload:  %7.2f Gb/s  switch CPU %.2f s/s  %.3f CPU-s per Gb\n", off.gbps, off.cpu,
              off.gbps > 0 ? off.cpu / off.gbps : 0.0);
  std::printf("    linux bridge:        %7.2f Gb/s\n", bridge.gbps);
  std::printf("    ratio switch/bridge: %.3f (offload), %.3f (veth ports), %.3f (no offload); offload/no offload: %.2f\n",
              bridge.gbps > 0 ? on.gbps / bridge.gbps : 0.0, bridge.gbps > 0 ? vethOn.gbps / bridge.gbps : 0.0,
              bridge.gbps > 0 ? off.gbps / bridge.gbps : 0.0, off.gbps > 0 ? on.gbps / off.gbps : 0.0);
  std::printf("  the shipped rate (1G: the line rate is the limit)\n");
  auto on1 = tcp("switch", 1e9, true, tsecs), veth1 = tcp("switch", 1e9, true, tsecs, "veth"),
       off1 = tcp("switch", 1e9, false, tsecs);
  std::printf("    switch, offload:     %7.3f Gb/s  loop busy %3.0f%%  switch CPU %.2f s/s\n", on1.gbps, on1.busy * 100, on1.cpu);
  std::printf("    switch, veth ports:  %7.3f Gb/s  loop busy %3.0f%%  switch CPU %.2f s/s\n", veth1.gbps, veth1.busy * 100,
              veth1.cpu);
  std::printf("    switch, no offload:  %7.3f Gb/s  loop busy %3.0f%%  switch CPU %.2f s/s\n", off1.gbps, off1.busy * 100, off1.cpu);
  std::printf("== pfc_storm generation on a TAP (AF_PACKET + sendmmsg) ==\n");
  stormRate(10'000, 20'000);
  stormRate(100'000, 200'000);
  stormRate(2'000'000, 1'000'000);
  return 0;
}
