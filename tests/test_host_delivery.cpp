// The lab switch's delivery thread (labswitch/host_delivery.hpp): frames go whole and in order,
// only once kicked, drain() waits for the last one, and the thread takes no signal.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.hpp"
#include "labswitch/host_delivery.hpp"

using rc::UniqueFD;
using rc::labswitch::HostDelivery;

namespace {

cpu_set_t core0() {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(0, &s);
  return s;
}

// A datagram-preserving pair: what the thread writes to [0] is read from [1] frame by frame.
std::pair<UniqueFD, UniqueFD> seqpacketPair() {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  return {UniqueFD(sv[0]), UniqueFD(sv[1])};
}

// The delivery thread's id, found by its name among this process's threads (-1: none).
pid_t deliveryTid() {
  DIR* d = ::opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  pid_t found = -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "host-delivery") found = pid_t(std::stoi(e->d_name));
  }
  ::closedir(d);
  return found;
}

}  // namespace

TEST_CASE("the delivery thread writes each frame whole, after the kick, in order", "[host_delivery]") {
  auto [w, r] = seqpacketPair();
  HostDelivery d(core0());
  const uint8_t head[3] = {0xaa, 0xbb, 0xcc};
  const char* body = "frame one";
  d.post(w.get(), head, sizeof head, body, std::strlen(body));
  // Posted but not kicked: nothing reached the host yet.
  uint8_t buf[256];
  CHECK(::recv(r.get(), buf, sizeof buf, MSG_DONTWAIT) < 0);
  CHECK(errno == EAGAIN);
  d.post(w.get(), nullptr, 0, "two", 3);
  d.drain();  // kicks, then waits until both are written
  ssize_t n = ::recv(r.get(), buf, sizeof buf, MSG_DONTWAIT);
  REQUIRE(n == ssize_t(sizeof head + std::strlen(body)));
  CHECK(std::memcmp(buf, head, sizeof head) == 0);
  CHECK(std::memcmp(buf + sizeof head, body, std::strlen(body)) == 0);
  n = ::recv(r.get(), buf, sizeof buf, MSG_DONTWAIT);
  REQUIRE(n == 3);
  CHECK(std::memcmp(buf, "two", 3) == 0);
  CHECK(::recv(r.get(), buf, sizeof buf, MSG_DONTWAIT) < 0);
  auto s = d.stats();
  CHECK(s.writes == 2);
  CHECK(s.failed == 0);
  CHECK(s.wakes >= 1);
}

TEST_CASE("frames posted while the thread writes join the next hand-over, none lost or reordered", "[host_delivery]") {
  auto [w1, r1] = seqpacketPair();
  auto [w2, r2] = seqpacketPair();
  constexpr uint32_t kFrames = 20000;
  // Readers drain both hosts as the thread writes (a full socket blocks the writer, as the test
  // wants: hand-overs then pile up behind it).
  auto reader = [](int fd, std::vector<uint32_t>& got) {
    uint8_t buf[2048];
    while (got.size() < kFrames / 2) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      uint32_t seq;
      std::memcpy(&seq, buf, sizeof seq);
      // The body: the sequence number's low byte, repeated to a length that varies with it.
      bool whole = n == ssize_t(sizeof seq + 1 + seq % 1400);
      for (ssize_t k = sizeof seq; whole && k < n; k++) whole = buf[k] == uint8_t(seq);
      got.push_back(whole ? seq : UINT32_MAX);
    }
  };
  std::vector<uint32_t> got1, got2;
  std::thread t1(reader, r1.get(), std::ref(got1)), t2(reader, r2.get(), std::ref(got2));
  {
    HostDelivery d(core0());
    std::vector<uint8_t> body(1500);
    for (uint32_t seq = 0; seq < kFrames; seq++) {
      std::fill(body.begin(), body.end(), uint8_t(seq));
      d.post(seq % 2 ? w2.get() : w1.get(), &seq, sizeof seq, body.data(), 1 + seq % 1400);
      if (seq % 7 == 0) d.kick();  // passes of a few frames each
    }
    d.drain();
    CHECK(d.stats().writes == kFrames);
  }
  t1.join();
  t2.join();
  REQUIRE(got1.size() == kFrames / 2);
  REQUIRE(got2.size() == kFrames / 2);
  for (uint32_t k = 0; k < kFrames / 2; k++) {
    INFO("frame " << k << " of each host");
    REQUIRE(got1[k] == 2 * k);
    REQUIRE(got2[k] == 2 * k + 1);
  }
}

TEST_CASE("a write the host refuses is counted, and the next frames still go", "[host_delivery]") {
  auto [w, r] = seqpacketPair();
  int pipeFds[2];
  REQUIRE(::pipe(pipeFds) == 0);
  UniqueFD readEnd(pipeFds[0]), writeEnd(pipeFds[1]);
  HostDelivery d(core0());
  d.post(readEnd.get(), nullptr, 0, "x", 1);  // a read-only descriptor: EBADF, as a TAP down gives EIO
  d.post(w.get(), nullptr, 0, "y", 1);
  d.drain();
  char c = 0;
  CHECK(::recv(r.get(), &c, 1, MSG_DONTWAIT) == 1);
  CHECK(c == 'y');
  auto s = d.stats();
  CHECK(s.writes == 2);
  CHECK(s.failed == 1);
}

TEST_CASE("the delivery thread runs on the cores given, with SIGTERM and SIGINT blocked", "[host_delivery]") {
  HostDelivery d(core0());
  const pid_t tid = deliveryTid();
  REQUIRE(tid > 0);
  cpu_set_t on;
  REQUIRE(::sched_getaffinity(tid, sizeof on, &on) == 0);
  CHECK(CPU_COUNT(&on) == 1);
  CHECK(CPU_ISSET(0, &on));
  // SigBlk in the thread's status: a hex mask, bit N-1 for signal N.
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line, blocked;
  while (std::getline(status, line))
    if (line.rfind("SigBlk:", 0) == 0) blocked = line.substr(7);
  REQUIRE(!blocked.empty());
  const unsigned long long mask = std::stoull(blocked, nullptr, 16);
  CHECK((mask >> (SIGTERM - 1) & 1) == 1);
  CHECK((mask >> (SIGINT - 1) & 1) == 1);
  CHECK((mask >> (SIGPIPE - 1) & 1) == 1);
  // This thread's own mask is as it was (the constructor restores it).
  sigset_t mine;
  REQUIRE(::pthread_sigmask(SIG_SETMASK, nullptr, &mine) == 0);
  CHECK(sigismember(&mine, SIGTERM) == 0);
}
