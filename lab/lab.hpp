// The embedded lab fabric: namespace hosts with agents, a data network and a management
// network, or QEMU guests with soft-RoCE (lab/vm_lab.hpp), all created and removed by
// rdmachaos itself (rdmachaos lab up/down/status).
#pragma once

#include <chrono>
#include <string>

#include "common/result.hpp"

namespace rc::lab {

struct UpOptions {
  int nodes = 3;             // 1..32
  std::string dir;           // lab state, certificates, configs, inventory.toml, logs
  std::string agentBinary;   // path of rdmachaos-agent to run in each host
  bool softRoce = false;     // QEMU guests with rdma_rxe (lab up --soft-roce; lab/vm_lab.cpp)
  // The data fabric: "switch" (rdmachaos-labswitch, TAP ports; the default) or "bridge"
  // (a Linux bridge: no queues, PFC, ECN or line rate, but no extra process).
  std::string fabric = "switch";
  std::string switchBinary;  // empty: $RDMACHAOS_LABSWITCH, next to the agent, or PATH
  int leaves = 0;            // 0: one switch; otherwise nodes must divide evenly
  int spines = 0;
  double rateBps = 1e9;      // host ports and inter-switch links
  std::string routing = "ecmp";  // or "adaptive"
  // Each agent's lease_timeout: faults of a controller silent this long are reverted. Short
  // leases make crash tests fast; 200 ms..1 h (the agent's own bounds).
  std::chrono::milliseconds leaseTimeout{5000};
  // Each agent serves its state to Prometheus on its management address at this port
  // ([agent] metrics); 0: off.
  int agentMetricsPort = 0;
  // The switch's TAPs with segmentation offload (labswitch/switch_offload.hpp); false: one
  // system call per wire frame each way, as before (for comparison).
  bool switchOffload = true;
  // How the switch reaches each host (namespace lab): "tap", a TAP that is the host's data0 (one
  // system call per frame each way), or "veth", a veth pair whose switch end lives in the lab's
  // fabric namespace, read and written with AF_PACKET in batches (recvmmsg, sendmmsg): 2-3x less
  // of the switch's time per frame (bench/port_io_probe, bench/README.md). Always with offload.
  std::string switchPorts = "tap";
  int64_t deliveryHoldNs = 500'000;  // the switch's delivery hold (labswitch Config::deliveryHoldNs)
  // The switch's priority for pure TCP ACKs (labswitch Config::tcpAckPriority); -1: by DSCP.
  int tcpAckPriority = 6;
  // The switch pinned to core 0 and each host's receive work (RPS on its data0) on the other
  // cores: a TAP write then hands the frame over instead of running the host's TCP stack in
  // the switch's time (docs/lab.md, "The switch's own CPU"). Needs 2 cores or more.
  bool splitCores = false;
  // The ECN profile of every queue of the namespace lab's switch (labswitch EcnProfile). Not
  // the switch's own default (HPCC's 100G kmin 400 KiB, kmax 1.6 MiB): at the lab's 0.2-1 Gb/s a
  // 400 KiB queue is 3-16 ms deep, so a healthy job's flows were marked a few times a second,
  // each mark a 30 % cut of one TCP flow's window (RFC 3168, CUBIC) and a slow iteration of the
  // ring: those isolated cuts set the lab's noise band (4.7-5.8 % median in noise-floor, worst
  // 7.5-13 %). At HPCC's 25G values (100 KiB, 400 KiB, 0.2) marks come ten times as often and
  // each cut is small and steady: 2.3 % (worst 2.6 %; bench/README.md, "What set the band:
  // isolated ECN marks").
  uint64_t ecnKminBytes = 100 * 1024, ecnKmaxBytes = 400 * 1024;
  double ecnPmax = 0.2;
  bool ecnEnabled = true;
};

// The port rate `lab up` uses when none is given: one the lab switch carries with its busiest
// second under half its CPU at a job's full load on this machine, and why, in words for the
// user. NODES the lab's hosts, CORES this machine's (0: ask the system).
struct RateChoice {
  double bps = 1e9;
  std::string why;
};
RateChoice chooseRate(int nodes, unsigned cores = 0);

// Brings the lab up and returns the path of DIR/inventory.toml. Refuses if DIR already holds
// a running lab. On failure, removes whatever it created.
Result<std::string> up(const UpOptions& options);
// Removes everything the lab in DIR created (agents, supervisor, namespaces, links), also
// after a crash of the lab or of the supervisor. Idempotent.
Result<void> down(const std::string& dir);
// A human-readable status: hosts, agents (pid, restarts), links.
Result<std::string> status(const std::string& dir);

}  // namespace rc::lab
