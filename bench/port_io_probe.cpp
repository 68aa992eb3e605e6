// What a lab switch port's I/O alone costs, before any model: TCP (iperf3 -P 4, one host to
// another) through pass-through forwarders on each candidate port type, against the Linux
// bridge and a bare veth pair measured in the same run. Issue 21 asks the switch for >= 1.0 of
// the bridge; this says how far each way of moving frames in and out of a process can get at
// all: the TAP (one read and one write per super-frame, as the switch does today), and
// AF_PACKET on veth ends with TPACKET_V2 rings (reads without a system call, writes batched by
// sendmmsg, or by a TX ring). Every mode moves GSO super-frames whole (virtio_net_hdr on both
// sides), so it is the ceiling a switch of that port type could reach. Needs root; builds and
// removes its own namespaces. Prints numbers; asserts nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "common/unique_fd.hpp"

using nlohmann::json;
using rc::UniqueFD;

namespace {

constexpr size_t kVnet = 10;  // sizeof(struct virtio_net_hdr)
constexpr unsigned kRingFrame = 128 * 1024;  // a 64 KiB super-frame and its headers
constexpr unsigned kRingFrames = 64;
constexpr size_t kBatch = 64;

int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

// Two hosts (A, B) and a fabric namespace (F), removed with everything in them whatever happens.
struct Hosts {
  std::string a, b, f;
  Hosts() {
    std::string p = "rcio" + std::to_string(::getpid()) + "-";
    a = p + "a";
    b = p + "b";
    f = p + "f";
    for (const auto& ns : {a, b, f}) sh("ip netns add " + ns);
  }
  ~Hosts() {
    for (const auto& ns : {a, b, f}) sh("ip netns del " + ns + " 2>/dev/null");
  }
  void address() {
    sh("ip -n " + a + " addr add 198.19.250.1/24 dev eth0 && ip -n " + a + " link set eth0 up");
    sh("ip -n " + b + " addr add 198.19.250.2/24 dev eth0 && ip -n " + b + " link set eth0 up");
  }
};

using bench::capture;
bool enter(const std::string& ns) { return bench::enterNetns(ns); }

double threadCpu() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// CPU seconds the whole machine spent (every state but idle, iowait and steal).
double machineCpu() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t user, nice, system, idle, iowait, irq, softirq;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
  return double(user + nice + system + irq + softirq) / double(::sysconf(_SC_CLK_TCK));
}

// An epoll set over the two ports' descriptors, tagged 0 and 1.
UniqueFD watchBoth(int a, int b) {
  UniqueFD ep(::epoll_create1(EPOLL_CLOEXEC));
  for (uint32_t i : {0u, 1u}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = i;
    ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, i == 0 ? a : b, &e);
  }
  return ep;
}

// Sends N messages with as few sendmmsg calls as the socket allows; returns how many went.
size_t sendAll(int fd, mmsghdr* msgs, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    int r = ::sendmmsg(fd, msgs + sent, unsigned(n - sent), MSG_DONTWAIT);
    if (r <= 0) break;
    sent += size_t(r);
  }
  return sent;
}

// A forwarder between two ports, run on its own thread until stopped; its CPU is its thread's.
struct Forwarder {
  std::atomic<double> cpu{0};
  std::atomic<uint64_t> frames{0}, dropped{0};
  std::string error;
  virtual ~Forwarder() = default;
  virtual void run(std::stop_token stop) = 0;
};

// TAPs with IFF_VNET_HDR and TSO: one read and one write per super-frame, as the switch's TapIo.
struct TapForwarder final : Forwarder {
  std::string nsA, nsB;
  TapForwarder(std::string a, std::string b) : nsA(std::move(a)), nsB(std::move(b)) {}
  static UniqueFD open(const std::string& ns) {
    UniqueFD home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!enter(ns)) return {};
    UniqueFD fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0 ||
        ::ioctl(fd.get(), TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0)
      fd.reset();
    (void)::setns(home.get(), CLONE_NEWNET);
    return fd;
  }
  void run(std::stop_token stop) override {
    UniqueFD port[2] = {open(nsA), open(nsB)};
    if (!port[0].isValid() || !port[1].isValid()) {
      error = "cannot attach to the TAPs";
      return;
    }
    UniqueFD ep = watchBoth(port[0].get(), port[1].get());
    std::vector<uint8_t> buf(65536 + kVnet);
    const double c0 = threadCpu();
    while (!stop.stop_requested()) {
      epoll_event ev[2];
      int n = ::epoll_wait(ep.get(), ev, 2, 100);
      for (int k = 0; k < n; k++) {
        int i = int(ev[k].data.u32);
        for (;;) {
          ssize_t r = ::read(port[i].get(), buf.data(), buf.size());
          if (r <= 0) break;
          if (::write(port[1 - i].get(), buf.data(), size_t(r)) != r) dropped++;
          if (++frames % 256 == 0) cpu = threadCpu() - c0;  // a flood may never let the loop wait
        }
      }
      cpu = threadCpu() - c0;
    }
  }
};

// An AF_PACKET socket on a veth end with a TPACKET_V2 receive ring (and, for TX_RING, a
// transmit ring), virtio_net_hdr on both: the kernel copies each frame into the ring and the
// process reads it there without a system call.
struct RingPort {
  UniqueFD fd;
  uint8_t* map = nullptr;
  size_t mapLen = 0;
  unsigned rxHead = 0, txHead = 0;
  bool txRing = false;
  std::string error;
  RingPort() = default;
  RingPort(const RingPort&) = delete;
  RingPort& operator=(const RingPort&) = delete;
  ~RingPort() {
    if (map) ::munmap(map, mapLen);
  }
  bool open(const std::string& ifname, bool withTxRing) {
    txRing = withTxRing;
    fd.reset(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
    int v2 = TPACKET_V2, one = 1;
    tpacket_req req{};
    req.tp_block_size = kRingFrame;
    req.tp_block_nr = kRingFrames;
    req.tp_frame_size = kRingFrame;
    req.tp_frame_nr = kRingFrames;
    auto set = [&](int opt, const void* val, socklen_t len, const char* what) {
      if (::setsockopt(fd.get(), SOL_PACKET, opt, val, len) == 0) return true;
      error = std::string(what) + ": " + std::strerror(errno);
      return false;
    };
    if (!fd.isValid() || !set(PACKET_VERSION, &v2, sizeof v2, "PACKET_VERSION") ||
        !set(PACKET_VNET_HDR, &one, sizeof one, "PACKET_VNET_HDR") ||
        !set(PACKET_IGNORE_OUTGOING, &one, sizeof one, "PACKET_IGNORE_OUTGOING") ||
        !set(PACKET_QDISC_BYPASS, &one, sizeof one, "PACKET_QDISC_BYPASS") ||
        !set(PACKET_RX_RING, &req, sizeof req, "PACKET_RX_RING") ||
        (txRing && !set(PACKET_TX_RING, &req, sizeof req, "PACKET_TX_RING")))
      return false;
    mapLen = size_t(kRingFrame) * kRingFrames * (txRing ? 2 : 1);
    void* m = ::mmap(nullptr, mapLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
    if (m == MAP_FAILED) {
      error = std::string("mmap: ") + std::strerror(errno);
      return false;
    }
    map = static_cast<uint8_t*>(m);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = int(::if_nametoindex(ifname.c_str()));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      error = "bind " + ifname + ": " + std::strerror(errno);
      return false;
    }
    return true;
  }
  tpacket2_hdr* rx(unsigned i) const { return reinterpret_cast<tpacket2_hdr*>(map + size_t(i) * kRingFrame); }
  tpacket2_hdr* tx(unsigned i) const {
    return reinterpret_cast<tpacket2_hdr*>(map + size_t(kRingFrames + i) * kRingFrame);
  }
  // The next received frame (its virtio_net_hdr, then the Ethernet frame), or null.
  tpacket2_hdr* peek() const {
    tpacket2_hdr* h = rx(rxHead);
    return (__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) ? h : nullptr;
  }
  void release() {
    __atomic_store_n(&rx(rxHead)->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    rxHead = (rxHead + 1) % kRingFrames;
  }
};

struct RingForwarder final : Forwarder {
  std::string ns;
  bool txRing;
  RingForwarder(std::string fabric, bool withTxRing) : ns(std::move(fabric)), txRing(withTxRing) {}
  void run(std::stop_token stop) override {
    if (!enter(ns)) {
      error = "cannot enter " + ns;
      return;
    }
    RingPort port[2];
    if (!port[0].open("pa", txRing) || !port[1].open("pb", txRing)) {
      error = port[0].error.empty() ? port[1].error : port[0].error;
      return;
    }
    UniqueFD ep = watchBoth(port[0].fd.get(), port[1].fd.get());
    const double c0 = threadCpu();
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    while (!stop.stop_requested()) {
      epoll_event ev[2];
      (void)::epoll_wait(ep.get(), ev, 2, 100);
      // Drain both rings until neither has a frame: one wake-up serves every frame that came.
      for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < 2; i++) {
          RingPort& in = port[i];
          RingPort& out = port[1 - i];
          size_t n = 0;
          unsigned head = in.rxHead;
          while (n < kBatch) {
            tpacket2_hdr* h = in.rx(head);
            if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
            uint8_t* frame = reinterpret_cast<uint8_t*>(h) + h->tp_mac - kVnet;
            size_t len = h->tp_snaplen + kVnet;
            if (h->tp_snaplen < h->tp_len) {
              dropped++;  // truncated: larger than a ring frame
            } else if (txRing) {
              tpacket2_hdr* t = out.tx(out.txHead);
              if (__atomic_load_n(&t->tp_status, __ATOMIC_ACQUIRE) != TP_STATUS_AVAILABLE) {
                (void)::send(out.fd.get(), nullptr, 0, MSG_DONTWAIT);
                dropped++;
              } else {
                uint8_t* dst = reinterpret_cast<uint8_t*>(t) + TPACKET_ALIGN(sizeof(tpacket2_hdr));
                std::memcpy(dst, frame, len);
                t->tp_len = uint32_t(len);
                __atomic_store_n(&t->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
                out.txHead = (out.txHead + 1) % kRingFrames;
              }
            } else {
              iov[n] = {frame, len};
              msgs[n] = {};
              msgs[n].msg_hdr.msg_iov = &iov[n];
              msgs[n].msg_hdr.msg_iovlen = 1;
            }
            n++;
            head = (head + 1) % kRingFrames;
          }
          if (n == 0) continue;
          moved = true;
          frames += n;
          if (txRing) {
            (void)::send(out.fd.get(), nullptr, 0, MSG_DONTWAIT);
          } else {
            dropped += n - sendAll(out.fd.get(), msgs, n);
          }
          for (size_t k = 0; k < n; k++) in.release();
        }
      }
      cpu = threadCpu() - c0;
    }
  }
};

// AF_PACKET on veth ends without rings: recvmmsg and sendmmsg of up to kBatch frames a call
// (as Open vSwitch's userspace datapath does), virtio_net_hdr on both. The socket's receive
// queue holds what the process reads late, counted in bytes, so small frames cost no 128 KiB
// slot each.
struct MmsgForwarder final : Forwarder {
  std::string ns;
  explicit MmsgForwarder(std::string fabric) : ns(std::move(fabric)) {}
  static UniqueFD open(const std::string& ifname, std::string& error) {
    UniqueFD fd(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
    int one = 1, rcvbuf = 16 << 20;
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = int(::if_nametoindex(ifname.c_str()));
    if (!fd.isValid() || ::setsockopt(fd.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
        ::setsockopt(fd.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0 ||
        ::setsockopt(fd.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0 ||
        ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0 ||
        ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      error = "AF_PACKET on " + ifname + ": " + std::strerror(errno);
      fd.reset();
    }
    return fd;
  }
  void run(std::stop_token stop) override {
    if (!enter(ns)) {
      error = "cannot enter " + ns;
      return;
    }
    UniqueFD port[2] = {open("pa", error), open("pb", error)};
    if (!port[0].isValid() || !port[1].isValid()) return;
    UniqueFD ep = watchBoth(port[0].get(), port[1].get());
    std::vector<uint8_t> bufs(kBatch * (65536 + 4096));
    mmsghdr in[kBatch], out[kBatch];
    iovec inIov[kBatch], outIov[kBatch];
    for (size_t k = 0; k < kBatch; k++) {
      inIov[k] = {bufs.data() + k * (65536 + 4096), 65536 + 4096};
      in[k] = {};
      in[k].msg_hdr.msg_iov = &inIov[k];
      in[k].msg_hdr.msg_iovlen = 1;
    }
    const double c0 = threadCpu();
    while (!stop.stop_requested()) {
      epoll_event ev[2];
      (void)::epoll_wait(ep.get(), ev, 2, 100);
      for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < 2; i++) {
          int n = ::recvmmsg(port[i].get(), in, unsigned(kBatch), MSG_DONTWAIT, nullptr);
          if (n <= 0) continue;
          moved = true;
          for (int k = 0; k < n; k++) {
            outIov[k] = {inIov[k].iov_base, in[k].msg_len};
            out[k] = {};
            out[k].msg_hdr.msg_iov = &outIov[k];
            out[k].msg_hdr.msg_iovlen = 1;
          }
          dropped += size_t(n) - sendAll(port[1 - i].get(), out, size_t(n));
          if ((frames += uint64_t(n)) % 256 < uint64_t(n)) cpu = threadCpu() - c0;
        }
      }
      cpu = threadCpu() - c0;
    }
  }
};

struct Run {
  double rate = 0;  // Gb/s (TCP) or frames/s (UDP frames)
  double forwarderCpu = 0, machineCpu = 0, secs = 0;
  uint64_t frames = 0, dropped = 0;
  std::string error;
};

uint64_t rxPackets(const std::string& ns) {
  std::string out = capture("ip netns exec " + ns + " cat /sys/class/net/eth0/statistics/rx_packets");
  return std::strtoull(out.c_str(), nullptr, 10);
}

// 1514-byte UDP frames from A to B for SECS (static ARP): frames/s that reach B's NIC.
Run frames(Hosts& h, Forwarder* fwd, int secs) {
  Run r;
  std::jthread t;
  if (fwd) t = std::jthread([fwd](std::stop_token s) { fwd->run(s); });
  sh("ip -n " + h.a + " neigh replace 198.19.250.2 lladdr $(ip netns exec " + h.b +
     " cat /sys/class/net/eth0/address) dev eth0 nud permanent");
  pid_t p = bench::udpFlood(h.a, "198.19.250.2");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t r0 = rxPackets(h.b);
  const double m0 = machineCpu(), f0 = fwd ? fwd->cpu.load() : 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(secs));
  const uint64_t r1 = rxPackets(h.b);
  const double m1 = machineCpu(), f1 = fwd ? fwd->cpu.load() : 0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(p, SIGKILL);
  ::waitpid(p, nullptr, 0);
  if (fwd) {
    t.request_stop();
    t.join();
    r.error = fwd->error;
    r.frames = fwd->frames;
    r.dropped = fwd->dropped;
  }
  r.secs = wall;
  r.rate = double(r1 - r0) / wall;
  r.machineCpu = (m1 - m0) / wall;
  r.forwarderCpu = (f1 - f0) / wall;
  return r;
}

// iperf3 -P 4 from A to B for SECS, with FWD running (if any) on its own thread.
Run measure(Hosts& h, Forwarder* fwd, int secs) {
  Run r;
  std::jthread t;
  if (fwd) t = std::jthread([fwd](std::stop_token s) { fwd->run(s); });
  sh("ip netns exec " + h.b + " iperf3 -s -1 -D >/dev/null 2>&1");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double m0 = machineCpu(), f0 = fwd ? fwd->cpu.load() : 0;
  std::string out = capture("ip netns exec " + h.a + " iperf3 -J -P 4 -t " + std::to_string(secs) +
                            " -c 198.19.250.2 2>/dev/null");
  const double m1 = machineCpu(), f1 = fwd ? fwd->cpu.load() : 0;
  if (fwd) {
    t.request_stop();
    t.join();
    r.error = fwd->error;
    r.frames = fwd->frames;
    r.dropped = fwd->dropped;
  }
  json j = json::parse(out, nullptr, false);
  if (!j.is_discarded() && j.contains("end")) {
    r.rate = j["end"]["sum_received"].value("bits_per_second", 0.0) / 1e9;
    r.secs = j["end"]["sum_received"].value("seconds", double(secs));
  }
  const double wall = secs + 0.5;  // iperf3's start-up and the JSON at the end, roughly
  r.machineCpu = (m1 - m0) / wall;
  r.forwarderCpu = (f1 - f0) / wall;
  return r;
}

// Veth ends A:eth0 <-> F:pa and B:eth0 <-> F:pb.
void veths(Hosts& h) {
  sh("ip -n " + h.f + " link add pa type veth peer name eth0 netns " + h.a);
  sh("ip -n " + h.f + " link add pb type veth peer name eth0 netns " + h.b);
  sh("ip -n " + h.f + " link set pa up && ip -n " + h.f + " link set pb up");
}

using Measure = Run (*)(Hosts&, Forwarder*, int);

Run bare(Measure m, int secs) {
  Hosts h;
  sh("ip -n " + h.a + " link add eth0 type veth peer name eth0 netns " + h.b);
  h.address();
  return m(h, nullptr, secs);
}

Run bridge(Measure m, int secs) {
  Hosts h;
  veths(h);
  sh("ip -n " + h.f + " link add br0 type bridge && ip -n " + h.f + " link set br0 up");
  sh("ip -n " + h.f + " link set pa master br0 && ip -n " + h.f + " link set pb master br0");
  h.address();
  return m(h, nullptr, secs);
}

Run ring(Measure m, int secs, bool txRing) {
  Hosts h;
  veths(h);
  h.address();
  RingForwarder f(h.f, txRing);
  return m(h, &f, secs);
}

Run mmsg(Measure m, int secs) {
  Hosts h;
  veths(h);
  h.address();
  MmsgForwarder f(h.f);
  return m(h, &f, secs);
}

Run tap(Measure m, int secs) {
  Hosts h;
  sh("ip -n " + h.a + " tuntap add dev eth0 mode tap && ip -n " + h.b + " tuntap add dev eth0 mode tap");
  h.address();
  TapForwarder f(h.a, h.b);
  return m(h, &f, secs);
}

void print(const char* name, const Run& r, const Run& br, const Run& bareRun, bool tcp) {
  if (!r.error.empty()) {
    std::printf("  %-30s failed: %s\n", name, r.error.c_str());
    return;
  }
  // Per Gb moved (TCP) or per million frames (UDP frames).
  const double unit = tcp ? r.rate : r.rate / 1e6;
  const double bareUnit = tcp ? bareRun.rate : bareRun.rate / 1e6;
  const double per = unit > 0 ? r.machineCpu / unit : 0;
  const double barePer = bareUnit > 0 ? bareRun.machineCpu / bareUnit : 0;
  if (tcp)
    std::printf("  %-30s %8.2f Gb/s     (%.2f of the bridge)  machine %.2f CPU-s/s, %.3f per Gb (the fabric's %.3f)",
                name, r.rate, br.rate > 0 ? r.rate / br.rate : 0.0, r.machineCpu, per, per - barePer);
  else
    std::printf("  %-30s %8.0f frames/s (%.2f of the bridge)  machine %.2f CPU-s/s, %.3f per M frames (the fabric's %.3f)",
                name, r.rate, br.rate > 0 ? r.rate / br.rate : 0.0, r.machineCpu, per, per - barePer);
  if (r.frames > 0)
    std::printf("  forwarder %.2f CPU-s/s, %.3f per %s, %llu frames dropped", r.forwarderCpu,
                unit > 0 ? r.forwarderCpu / unit : 0.0, tcp ? "Gb" : "M frames", (unsigned long long)r.dropped);
  std::printf("\n");
  std::fflush(stdout);
}

void section(Measure m, int secs, bool tcp) {
  Run b = bare(m, secs), br = bridge(m, secs);
  print("bare veth pair (no fabric)", b, br, b, tcp);
  print("linux bridge", br, br, b, tcp);
  print("TAP read/write", tap(m, secs), br, b, tcp);
  print("AF_PACKET recvmmsg + sendmmsg", mmsg(m, secs), br, b, tcp);
  print("AF_PACKET rx ring + sendmmsg", ring(m, secs, false), br, b, tcp);
  print("AF_PACKET rx ring + tx ring", ring(m, secs, true), br, b, tcp);
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "port_io_probe needs root (network namespaces)\n");
    return 77;
  }
  const int secs = argc > 1 ? std::max(2, std::atoi(argv[1])) : 5;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  for (int k = 1; k <= rounds; k++) {
    std::printf("== round %d: 1514-byte UDP frames, one sendmmsg flood, %d s each ==\n", k, secs);
    section(frames, secs, false);
    std::printf("== round %d: TCP, iperf3 -P 4, %d s each ==\n", k, secs);
    section(measure, secs, true);
  }
  return 0;
}
