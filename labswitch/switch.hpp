// rdmachaos-labswitch: a userspace Ethernet switch (or a leaf-spine of them, in one process)
// for the namespace lab. Per port: line rate, MTU, admin state, 8 priority queues (strict for
// CNP/network control, deficit-weighted round robin for the rest) over a shared buffer with
// per-ingress (port, priority) accounting, RED-style ECN marking, tail drop for lossy and PFC
// for lossless priorities, and a SONiC-style PFC watchdog; ECMP or flowlet-adaptive routing
// between leaves and spines; counters and settings over a JSON-lines unix control socket.
// See docs/lab.md ("The lab switch") for the model and the control protocol.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/switch_protocol.hpp"

namespace rc::labswitch {

using json = nlohmann::json;

constexpr int kPriorities = 8;

struct EcnProfile {
  bool enabled = true;
  uint64_t kminBytes = 400 * 1024;
  uint64_t kmaxBytes = 1600 * 1024;
  double pmax = 0.2;
};

struct PfcThreshold {
  uint64_t xoffBytes = 512 * 1024;  // per ingress (port, priority)
  uint64_t xonBytes = 256 * 1024;
};

enum class WatchdogAction { drop, forward, alert };

struct WatchdogConfig {
  bool enabled = true;
  int64_t detectionNs = 200'000'000;
  int64_t restorationNs = 200'000'000;
  WatchdogAction action = WatchdogAction::drop;
};

struct HostPort {
  std::string name;    // node name; also the port's name, e.g. "n1"
  std::string netns;   // path, e.g. /run/netns/rc3-n1
  std::string ifname;  // the persistent TAP inside it, e.g. data0
  // Instead of a TAP: a QEMU guest's NIC, a unix stream socket QEMU listens on
  // (`-netdev stream,server=on`); the switch connects to it.
  std::string stream;
  // "tap" (default), or "packet": IFNAME is the switch's end of a veth pair in NETNS (the lab's
  // fabric namespace), read and written with AF_PACKET; HOST_NETNS is the host's namespace,
  // whose data0 is the other end (its MAC address is read from there).
  std::string io = "tap";
  std::string hostNetns;
};

struct Config {
  std::string control;              // unix socket path (JSON lines)
  double rateBps = 1e9;             // host ports
  double linkRateBps = 0;           // inter-switch links; 0 = rateBps
  int mtu = 1500;
  uint64_t bufferBytes = 8ull << 20;       // shared by all queues of one switch
  uint64_t lossyQueueBytes = 1ull << 20;   // tail-drop limit of one lossy queue
  uint8_t losslessMask = 1 << 3;           // PFC-enabled priorities
  int leaves = 0, spines = 0;              // 0 spines: one switch with every host
  std::vector<HostPort> hosts;             // in leaf order: hosts/leaves per leaf
  std::string routing = "ecmp";            // or "adaptive"
  int64_t pollNs = 10'000'000;             // watchdog poll, PFC refresh, routing updates
  int64_t convergenceNs = 500'000'000;     // ECMP next-hop update delay after a link change
  int64_t flowletGapNs = 500'000;          // adaptive routing: idle gap that ends a flowlet
  EcnProfile ecn;                          // default for every (port, queue)
  PfcThreshold pfc;
  WatchdogConfig watchdog;
  std::vector<uint8_t> dscpMap;            // 64 entries; empty = default (26->3, 48->6)
  // An ACL rule: pure TCP ACKs travel in this priority whatever their DSCP (-1: off). The
  // namespace lab sets 6 (strict priority, beside CNPs), so that TCP, which stands in for
  // RoCE there, keeps its ACK clock when the data going the other way fills a queue
  // (docs/lab.md, "ACKs in their own class").
  int tcpAckPriority = -1;
  uint32_t seed = 1;                       // ECN marking randomness
  // The core the switch runs on (-1: wherever the scheduler puts it). The namespace lab's
  // `--split-cores` pins it to core 0 and steers the hosts' receive work (RPS) to the others.
  int cpu = -1;
  // With `cpu` set, a thread on the other cores writes to the hosts' TAPs (host_delivery.hpp);
  // false: the switch's loop writes them itself (bench/delivery_thread.sh compares the two).
  bool deliveryThread = true;
  // TAP ports with segmentation offload (switch_offload.hpp): hosts hand over TCP super-frames,
  // cut into wire frames on the way in and joined again on the way out. false: one frame per
  // read and write, as before (for comparison: bench/labswitch_bench).
  bool offload = true;
  // With offload, how long a TAP holds what the model sent a host before writing it, so that
  // one write carries a run of up to 62 KiB (a 1G port sends that in 500 us), as a NIC's
  // interrupt moderation and GRO hand a host's stack a burst at a time. The model's queues,
  // pacing, marks, pauses and counters act at each frame's own time; only the host sees the
  // frames of a TCP run up to this much later. 0: every loop pass writes what it sent.
  int64_t deliveryHoldNs = 500'000;
  // Where packet rules write their pcapng captures; empty = "captures" beside the control socket.
  std::string captureDir;
};

// Reads the switch's JSON configuration (what `lab up` writes to DIR/switch.json).
Result<Config> parseConfig(const json& j);

// Attaches every port, opens the control socket and forwards until SIGTERM or SIGINT.
Result<void> run(const Config& config);

// A connected stream to the switch's control socket.
Result<UniqueFD> connectControl(const std::string& socketPath);
// Copies `in` to the control socket at socketPath and its answers to `out` until either ends
// (`rdmachaos-labswitch --relay`, QEMU's guestfwd command for the soft-RoCE lab's guests).
Result<void> relay(const std::string& socketPath, int in, int out);

// One request to the switch's control socket (5 s deadline); an answer without "ok": true is an
// error quoting the switch's reason.
Result<json> controlRequest(const std::string& socketPath, const json& request);
// The same with a typed request of switch_protocol.hpp, its reply read as its type.
template <typename Request>
Result<typename Request::Reply> controlCall(const std::string& socketPath, const Request& request) {
  auto reply = controlRequest(socketPath, swproto::toJson(request));
  if (!reply) return reply.error();
  return swproto::parse<typename Request::Reply>(*reply);
}
// `rdmachaos-labswitch --ecn-profile SOCKET show|set|restore PORT QUEUE ...` (ARGS: from
// SOCKET on); returns the exit status (0, 1 the switch refused or is unreachable, 2 usage).
int ecnProfileMain(const std::vector<std::string>& args);

}  // namespace rc::labswitch
