// Test helpers for lab fabrics: a lab directory that is always taken down, a client of the lab
// switch's control socket, and paced UDP/TCP traffic from forked children in node namespaces.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/unique_fd.hpp"
#include "lab/lab.hpp"

namespace labtest {

using nlohmann::json;

// A temporary lab directory whose lab is taken down and which is removed even when an
// assertion fails half-way.
struct LabDir {
  std::string path;
  LabDir() {
    char tmpl[] = "/tmp/rc-test-lab-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~LabDir() {
    auto r = rc::lab::down(path);
    if (!r) std::fprintf(stderr, "cleanup: %s\n", r.error().message.c_str());
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  LabDir(const LabDir&) = delete;
  LabDir& operator=(const LabDir&) = delete;
};

// Writes a stand-in agent (perl, Essential in Debian) that only listens; these tests drive
// faults and the switch directly.
inline std::string standInAgent(const LabDir& dir) {
  std::string file = dir.path + "-standin";
  std::ofstream(file) << R"PERL(#!/usr/bin/perl
use strict; use IO::Socket::INET;
my %args = @ARGV; open(my $cfg, '<', $args{'--config'}) or die;
my ($listen) = map { /^listen\s*=\s*"([^"]+)"/ ? $1 : () } <$cfg>;
my ($host, $port) = split /:/, $listen;
my $srv = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $port, Listen => 4, ReuseAddr => 1) or die;
$SIG{TERM} = sub { exit 0 };
while (1) { my $c = $srv->accept; close($c) if $c; }
)PERL";
  std::filesystem::permissions(file, std::filesystem::perms::owner_all);
  return file;
}

struct Lab {
  LabDir dir;
  std::string agent;
  int slot = 0;
  std::string control;
  explicit Lab(rc::lab::UpOptions o) {
    agent = standInAgent(dir);
    o.dir = dir.path;
    o.agentBinary = agent;
    auto inv = rc::lab::up(o);
    INFO((inv ? *inv : inv.error().message));
    REQUIRE(inv.ok());
    std::ifstream in(dir.path + "/lab.json");
    json s = json::parse(in);
    slot = s["slot"].get<int>();
    control = s["switch"]["control"].get<std::string>();
  }
  ~Lab() { std::filesystem::remove(agent); }
  std::string ns(int node) const { return "rc" + std::to_string(slot) + "-n" + std::to_string(node); }
  std::string addr(int node) const {
    return "198.19." + std::to_string(slot) + "." + std::to_string(10 + node);
  }
};

// One request, one response line.
inline json control(const std::string& path, const json& req) {
  rc::UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return {{"ok", false}, {"error", "connect failed"}};
  std::string line = req.dump() + "\n";
  if (::write(fd.get(), line.data(), line.size()) != ssize_t(line.size())) return {{"ok", false}};
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return {{"ok", false}, {"error", "no response"}};
    in.append(buf, size_t(n));
  }
  return json::parse(in.substr(0, in.find('\n')));
}

inline json port(const std::string& path, const std::string& name) {
  json r = control(path, {{"cmd", "counters"}, {"port", name}});
  REQUIRE(r["ok"] == true);
  return r["ports"][0];
}

// Enters a network namespace in this (forked) process.
inline void enter(const std::string& ns) {
  int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(3);
}

// A forked child, killed (SIGKILL, by its pid) and reaped when the object goes away.
struct Child {
  pid_t pid = -1;
  Child() = default;
  explicit Child(pid_t p) : pid(p) {}
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)) {}
  Child& operator=(Child&& o) noexcept {
    stop();
    pid = std::exchange(o.pid, -1);
    return *this;
  }
  ~Child() { stop(); }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
};

// UDP datagrams of `payload` bytes from namespace ns to dst:port, paced at pps, with the
// given TOS byte (DSCP << 2 | ECN) and source port.
inline Child udpFlow(const std::string& ns, const std::string& dst, int port, double pps,
                     int payload, int tos, int srcPort = 0) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid != 0) return Child(pid);
  enter(ns);
  int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  ::setsockopt(s, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  if (srcPort) {
    sockaddr_in me{};
    me.sin_family = AF_INET;
    me.sin_port = htons(uint16_t(srcPort));
    ::bind(s, reinterpret_cast<sockaddr*>(&me), sizeof me);
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, dst.c_str(), &to.sin_addr);
  std::vector<char> buf(size_t(payload), 'x');
  timespec start;
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (uint64_t i = 0;; i++) {
    double t = double(i) / pps;
    timespec due = start;
    due.tv_sec += time_t(t);
    due.tv_nsec += long((t - double(time_t(t))) * 1e9);
    if (due.tv_nsec >= 1'000'000'000) {
      due.tv_sec++;
      due.tv_nsec -= 1'000'000'000;
    }
    ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nullptr);
    (void)!::sendto(s, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
}

// A TCP receiver that accepts any number of connections and discards what they send.
inline Child tcpSink(const std::string& ns, int port) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid != 0) return Child(pid);
  enter(ns);
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_port = htons(uint16_t(port));
  if (::bind(s, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0 || ::listen(s, 16) != 0) ::_exit(4);
  for (;;) {
    int c = ::accept(s, nullptr, nullptr);
    if (c < 0) continue;
    if (::fork() == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      char buf[65536];
      while (::read(c, buf, sizeof buf) > 0) {
      }
      ::_exit(0);
    }
    ::close(c);
  }
}

// A TCP sender (CUBIC) writing as fast as the connection takes, with the given TOS byte.
inline Child tcpSource(const std::string& ns, const std::string& dst, int port, int tos) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid != 0) return Child(pid);
  enter(ns);
  for (;;) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    ::setsockopt(s, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
    // A loss/ECN-based congestion control: the host default may be BBR, which ignores CE.
    const char cc[] = "cubic";
    ::setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, sizeof cc - 1);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(uint16_t(port));
    ::inet_pton(AF_INET, dst.c_str(), &to.sin_addr);
    if (::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
      static char buf[65536];
      while (::write(s, buf, sizeof buf) > 0) {
      }
    }
    ::close(s);
    ::usleep(50'000);
  }
}

inline void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace labtest
