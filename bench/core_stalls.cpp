// When each core was taken from the lab, as a log to lay beside a run's timeline: one thread
// per core, pinned, at real-time priority (SCHED_FIFO), sleeps to an absolute deadline every
// PERIOD and logs every wake-up later than THRESHOLD with the wall-clock instant it was due.
// A real-time thread that wakes late was kept off its core by something it cannot preempt: the
// hypervisor running another guest, an interrupt or softirq, a kernel section without
// preemption. Unlike host_hiccups (a spinning thread per core, which would take both cores
// from a lab), it costs a wake-up per period, so it can run beside a playbook
// (bench/band_dips.py --stalls FILE lays its log over each trial's lowest window).
//
//   sudo build/bench/core_stalls SECONDS LOG [PERIOD_US=1000] [THRESHOLD_US=1000]
//
// LOG: one line per late wake-up, "cpu due_unix_ns late_ns"; a summary per core on stdout.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> stop{false};

int64_t ns(clockid_t c) {
  timespec t{};
  clock_gettime(c, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

struct Late {
  int64_t dueUnixNs, lateNs;
};

struct CoreLog {
  std::vector<Late> late;
  int64_t wakeups = 0, lateSumNs = 0, worstNs = 0;
  bool realtime = false;
};

void watch(int cpu, int64_t seconds, int64_t periodNs, int64_t thresholdNs, CoreLog& out) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "core_stalls: cannot pin a thread to cpu %d\n", cpu);
    return;
  }
  sched_param sp{};
  sp.sched_priority = 50;
  out.realtime = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
  // Wall clock of a monotonic instant: fixed once, so a clock step does not move the log.
  const int64_t monoToUnix = ns(CLOCK_REALTIME) - ns(CLOCK_MONOTONIC);
  const int64_t end = ns(CLOCK_MONOTONIC) + seconds * 1'000'000'000;
  int64_t due = ns(CLOCK_MONOTONIC) + periodNs;
  while (!stop.load(std::memory_order_relaxed) && due < end) {
    timespec t{time_t(due / 1'000'000'000), long(due % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) == EINTR) {
      if (stop.load()) break;
    }
    const int64_t now = ns(CLOCK_MONOTONIC), late = now - due;
    out.wakeups++;
    if (late > thresholdNs) {
      out.late.push_back({due + monoToUnix, late});
      out.lateSumNs += late;
    }
    out.worstNs = std::max(out.worstNs, late);
    // The next deadline after NOW: a long stall is one entry, not a burst of catch-up wake-ups.
    due += periodNs;
    if (due <= now) due = now + periodNs - (now - due) % periodNs;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: core_stalls SECONDS LOG [PERIOD_US=1000] [THRESHOLD_US=1000]\n");
    return 2;
  }
  const long seconds = std::atol(argv[1]);
  const long periodUs = argc > 3 ? std::atol(argv[3]) : 1000;
  const long thresholdUs = argc > 4 ? std::atol(argv[4]) : 1000;
  if (seconds < 1 || seconds > 86400 || periodUs < 100 || periodUs > 1'000'000 || thresholdUs < 10) {
    std::fprintf(stderr, "core_stalls: SECONDS 1-86400, PERIOD_US 100-1000000, THRESHOLD_US >= 10\n");
    return 2;
  }
  FILE* log = std::fopen(argv[2], "w");
  if (!log) {
    std::fprintf(stderr, "core_stalls: cannot write '%s': %s\n", argv[2], std::strerror(errno));
    return 2;
  }
  struct sigaction sa{};
  sa.sa_handler = [](int) { stop = true; };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const int cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<CoreLog> logs(static_cast<size_t>(cores));
  const int64_t start = ns(CLOCK_MONOTONIC);
  {
    std::vector<std::thread> threads;
    for (int c = 0; c < cores; c++)
      threads.emplace_back(watch, c, int64_t(seconds), int64_t(periodUs) * 1000, int64_t(thresholdUs) * 1000,
                           std::ref(logs[size_t(c)]));
    for (auto& t : threads) t.join();
  }
  const double span = double(ns(CLOCK_MONOTONIC) - start) / 1e9;
  std::fprintf(log, "# cpu due_unix_ns late_ns (period %ld us, threshold %ld us)\n", periodUs, thresholdUs);
  for (int c = 0; c < cores; c++)
    for (const auto& l : logs[size_t(c)].late)
      std::fprintf(log, "%d %lld %lld\n", c, static_cast<long long>(l.dueUnixNs), static_cast<long long>(l.lateNs));
  std::fclose(log);
  for (int c = 0; c < cores; c++) {
    const auto& l = logs[size_t(c)];
    std::printf("cpu%d: %.1f s, %lld wake-ups%s, %zu later than %ld us (%.2f %% of the span), worst %.2f ms\n", c, span,
                static_cast<long long>(l.wakeups), l.realtime ? "" : " (not real-time: run as root)", l.late.size(),
                thresholdUs, double(l.lateSumNs) / (span * 1e7), double(l.worstNs) / 1e6);
  }
  return 0;
}
