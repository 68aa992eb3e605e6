// How much of each core the host takes from the lab: one thread pinned per core spins on
// CLOCK_MONOTONIC for the given seconds, and every gap between two reads longer than 20 us is
// time the core ran something else (another process, an interrupt, or, on a VM, the hypervisor
// running another guest). Printed per core and per second: the share lost, the longest gap, the
// gaps over 1 ms; beside it the kernel's own account of steal time from /proc/stat over the same
// span (the hypervisor's word, where it gives one). Run it on an idle machine before trusting a
// lab's figures: a core that loses several percent in gaps of milliseconds turns into dips of a
// collective's whole ring (docs/scoring.md, "stat = median").
//
//   build/bench/host_hiccups [SECONDS]      (default 10)
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t nowNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

struct Second {
  int64_t lostNs = 0, maxGapNs = 0;
  int gapsOver1ms = 0;
};

// Per core: the steal jiffies of /proc/stat's cpuN line (the 8th value), -1 when absent.
std::vector<long long> stealJiffies(int cores) {
  std::vector<long long> out(size_t(cores), -1);
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream ss(line.substr(3));
    int cpu = -1;
    long long v[8] = {};
    ss >> cpu;
    for (auto& x : v) ss >> x;
    if (ss && cpu >= 0 && cpu < cores) out[size_t(cpu)] = v[7];
  }
  return out;
}

void spin(int cpu, int seconds, std::vector<Second>& out) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "host_hiccups: cannot pin a thread to cpu %d\n", cpu);
    return;
  }
  out.assign(size_t(seconds), {});
  const int64_t start = nowNs(), end = start + int64_t(seconds) * 1'000'000'000;
  int64_t prev = start;
  while (prev < end) {
    const int64_t now = nowNs(), gap = now - prev;
    if (gap > 20'000) {
      auto& s = out[std::min(size_t(seconds - 1), size_t((prev - start) / 1'000'000'000))];
      s.lostNs += gap;
      s.maxGapNs = std::max(s.maxGapNs, gap);
      if (gap > 1'000'000) s.gapsOver1ms++;
    }
    prev = now;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 10;
  if (seconds < 1 || seconds > 3600) {
    std::fprintf(stderr, "usage: host_hiccups [SECONDS 1-3600]\n");
    return 2;
  }
  const int cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("host_hiccups: %d core(s), %d s, one spinning thread per core; gaps over 20 us are time taken\n",
              cores, seconds);
  std::fflush(stdout);
  std::vector<std::vector<Second>> perCore(static_cast<size_t>(cores));
  const auto stealBefore = stealJiffies(cores);
  {
    std::vector<std::thread> threads;
    for (int c = 0; c < cores; c++) threads.emplace_back(spin, c, seconds, std::ref(perCore[size_t(c)]));
    for (auto& t : threads) t.join();
  }
  const auto stealAfter = stealJiffies(cores);
  const double hz = double(sysconf(_SC_CLK_TCK));
  for (int c = 0; c < cores; c++) {
    const auto& secs = perCore[size_t(c)];
    if (secs.empty()) continue;
    int64_t lost = 0, maxGap = 0;
    int over1 = 0;
    double worstSecond = 0;
    for (const auto& s : secs) {
      lost += s.lostNs;
      maxGap = std::max(maxGap, s.maxGapNs);
      over1 += s.gapsOver1ms;
      worstSecond = std::max(worstSecond, double(s.lostNs) / 1e7);
    }
    const double lostPct = double(lost) / (double(seconds) * 1e7);
    std::string steal = "not given";
    if (stealBefore[size_t(c)] >= 0 && stealAfter[size_t(c)] >= 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2f %%",
                    double(stealAfter[size_t(c)] - stealBefore[size_t(c)]) / hz / double(seconds) * 100);
      steal = buf;
    }
    std::printf("cpu%d: lost %.2f %% (worst second %.2f %%), longest gap %.2f ms, %d gaps over 1 ms; "
                "the kernel's steal account %s\n",
                c, lostPct, worstSecond, double(maxGap) / 1e6, over1, steal.c_str());
    std::printf("cpu%d per second (lost %%):", c);
    for (const auto& s : secs) std::printf(" %.1f", double(s.lostNs) / 1e7);
    std::printf("\n");
  }
  return 0;
}
