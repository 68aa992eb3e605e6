// What librdmachaos-observe costs a job per operation: a begin/end pair with no agent listening
// and with one (the agent's real intake, in this process on its own thread), beside the peers
// measured in the same run: the two clock reads any timing needs, and a bare send() of one
// record on the same socket. `--listen PATH SECONDS` only runs an intake (bench/observe_mpi.sh).
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/observe_intake.hpp"
#include "observe/rdmachaos_observe.h"

namespace {

using Clock = std::chrono::steady_clock;

// ns per call of FN, the median of ROUNDS rounds of N calls.
template <typename Fn>
double nsPerCall(int n, Fn&& fn, int rounds = 5) {
  std::vector<double> r;
  for (int k = 0; k < rounds; k++) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; i++) fn(i);
    r.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

// The same, in batches of 64 calls with a 200 us pause between them (not counted): a rate the
// socket and the intake keep up with, as a job's collectives do.
template <typename Fn>
double nsPerCallPaced(int n, Fn&& fn, int rounds = 5) {
  std::vector<double> r;
  for (int k = 0; k < rounds; k++) {
    Clock::duration busy{};
    for (int i = 0; i < n; i += 64) {
      auto t0 = Clock::now();
      for (int j = i; j < i + 64; j++) fn(j);
      busy += Clock::now() - t0;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    r.push_back(std::chrono::duration<double, std::nano>(busy).count() / (n / 64 * 64));
  }
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

std::unique_ptr<rc::agent::ObserveIntake> intake(const std::string& path) {
  rc::agent::ObserveOptions o;
  o.socketPath = path;
  o.allowUids = {uint32_t(::getuid())};
  o.maxRecordsPerSecond = 10'000'000;
  o.maxQueuedBytes = 1u << 30;
  auto in = rc::agent::ObserveIntake::start(o);
  if (!in) {
    std::fprintf(stderr, "observe_cost: %s\n", in.error().message.c_str());
    std::exit(1);
  }
  return std::move(*in);
}

volatile sig_atomic_t stopListening = 0;
void onStop(int) { stopListening = 1; }

int listenOnly(const std::string& path, int seconds) {
  auto in = intake(path);
  ::signal(SIGTERM, onStop);
  ::signal(SIGINT, onStop);
  // Drained as an observed workload would, so that the queue bound is never what refuses.
  for (int i = 0; i < seconds * 20 && !stopListening; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in->drain(rc_observe_now_ns());
  }
  auto s = in->stats();
  std::printf("intake: %llu records accepted, %llu refused, %llu dropped by senders\n",
              (unsigned long long)s.accepted, (unsigned long long)s.refusedTotal(),
              (unsigned long long)s.senderDropped);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--listen") return listenOnly(argv[2], std::atoi(argv[3]));
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  char dir[] = "/tmp/rc-observe-bench-XXXXXX";
  if (!::mkdtemp(dir)) return 1;
  std::string path = std::string(dir) + "/o.sock";
  ::setenv("RDMACHAOS_OBSERVE_SOCKET", path.c_str(), 1);

  timespec ts;
  double clocks = nsPerCall(n, [&](int) {
    ::clock_gettime(CLOCK_REALTIME, &ts);
    ::clock_gettime(CLOCK_REALTIME, &ts);
  });
  double none = nsPerCall(n, [](int) { rc_observe_end(rc_observe_begin("bench", 4 << 20), 0); });
  rc_observe_stats_t s0{};
  rc_observe_stats(&s0);

  // The library tries again 3 s after its one failed attempt: the agent starts meanwhile.
  auto in = intake(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(3100));
  rc_observe_end(rc_observe_begin("bench", 1), 0);
  rc_observe_stats_t s1{};
  rc_observe_stats(&s1);
  // Drained meanwhile, as the observed workload will; the intake thread shares the 2 cores.
  std::jthread drainer([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      in->drain(rc_observe_now_ns());
    }
  });
  // Paced under the socket's capacity (a real job calls far less often), then flat out.
  double paced = nsPerCallPaced(n / 10, [](int) { rc_observe_end(rc_observe_begin("bench", 4 << 20), 0); });
  rc_observe_stats_t s2{};
  rc_observe_stats(&s2);
  double flat = nsPerCall(n, [](int) { rc_observe_end(rc_observe_begin("bench", 4 << 20), 0); });
  rc_observe_stats_t s3{};
  rc_observe_stats(&s3);

  // A bare send of one record-sized message on a connection to the same intake.
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 1;
  char rec[144] = {};
  double raw = nsPerCallPaced(n / 10, [&](int) {
    [[maybe_unused]] auto r = ::send(fd, rec, sizeof rec, MSG_DONTWAIT | MSG_NOSIGNAL);
  });
  ::close(fd);
  drainer.request_stop();
  drainer.join();
  auto st = in->stats();
  in.reset();
  ::rmdir(dir);

  std::printf("observe library, ns per begin/end pair (median of 5 rounds):\n");
  std::printf("  two clock_gettime(REALTIME) (the floor of any timing)  %8.1f ns\n", clocks);
  std::printf("  no agent listening                                       %8.1f ns  (%.1fx the clock reads; %llu connect attempt(s) in %llu calls)\n",
              none, none / clocks, (unsigned long long)s0.connect_attempts, (unsigned long long)s0.dropped);
  std::printf("  agent listening, paced (64 calls, then 200 us)           %8.1f ns  (%llu sent, %llu dropped)\n",
              paced, (unsigned long long)(s2.sent - s1.sent), (unsigned long long)(s2.dropped - s1.dropped));
  std::printf("  bare send() of 144 bytes, paced the same                 %8.1f ns  -> library/send %.2f\n", raw,
              paced / raw);
  std::printf("  agent listening, flat out                                %8.1f ns  (%llu sent, %llu dropped: the socket full)\n",
              flat, (unsigned long long)(s3.sent - s2.sent), (unsigned long long)(s3.dropped - s2.dropped));
  std::printf("intake: %llu accepted, %llu refused\n", (unsigned long long)st.accepted,
              (unsigned long long)st.refusedTotal());
  return 0;
}
