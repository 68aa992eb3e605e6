// The agent's own state and its data plane for Prometheus (`[agent] metrics`): what an
// operator's dashboard needs to see that no fault is left behind, and what a game day's alerts
// watch (links, PFC pauses, ECN marks, RDMA transport errors).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/fault_manager.hpp"
#include "agent/server.hpp"
#include "agent/workload_manager.hpp"
#include "common/result.hpp"
#include "common/unique_fd.hpp"
#include "counters/nic_counters.hpp"
#include "metrics/exporter.hpp"

namespace rc::agent {

class LinkWatch;
struct ObserveStats;

// Sets every agent gauge from the managers' current state (call on the event loop).
void publishAgentMetrics(metrics::Exporter& out, const FaultManager& faults, const Server& server,
                         const WorkloadManager& workloads);

// The observe intake's counters: records accepted, refused by reason, dropped by their senders.
void publishObserveMetrics(metrics::Exporter& out, const ObserveStats& stats);

// Whether IFNAME is administratively up and has carrier (IFF_UP and IFF_RUNNING), asked with
// SIOCGIFFLAGS on an AF_INET datagram socket in this process's network namespace: the lab's
// agents run in namespaces where /sys may be another namespace's. An interface that is not
// there is not up (false, not an error); an error only when the kernel cannot be asked (a
// name it would never accept, no socket). SOCK: such a socket, or -1 to open one for the call.
Result<bool> linkUp(const std::string& ifname, int sock = -1);

// One gauge series, as the exporter takes it.
struct Series {
  std::string name;
  std::string help;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The data-plane counters in SAMPLE (a NicSampler's) of interface IFNAME, as cumulative series
// (gauges holding counter values, so `rate()` applies): a fixed list of counter names, so at most
// kMaxSeriesPerInterface series whatever the driver offers; counters it lacks are simply absent.
// - rdmachaos_pfc_pause_frames_total{interface,priority,direction}: ethtool rx/tx_prioN_pause
// - rdmachaos_pfc_pause_duration_seconds_total{interface,priority,direction}:
//   ethtool rx/tx_prioN_pause_duration (microseconds there)
// - rdmachaos_pfc_pause_storm_events_total{interface,level}:
//   ethtool tx_pause_storm_warning_events, tx_pause_storm_error_events
// - rdmachaos_ecn_marked_packets_total{interface}: rdma.np_ecn_marked_roce_packets
// - rdmachaos_cnp_sent_total{interface}, rdmachaos_cnp_handled_total{interface}:
//   rdma.np_cnp_sent, rdma.rp_cnp_handled
// - rdmachaos_rdma_transport_errors_total{interface,counter}: rdma.<counter>, for every counter
//   of kTransportErrorCounters
// - rdmachaos_dropped_packets_total{interface,direction}: net.rx_dropped, net.tx_dropped
std::vector<Series> dataPlaneSeries(const std::string& ifname, const counters::Counters& sample);

// The RDMA port counters (without "rdma.") published as transport errors: mlx5's retransmission
// and sequence errors and soft-RoCE's (rxe) equivalents.
extern const std::vector<std::string> kTransportErrorCounters;
inline constexpr size_t kMaxSeriesPerInterface = 80;
// Data interfaces published at most (the rest are left out, with a warning at start).
inline constexpr size_t kMaxDataPlaneInterfaces = 32;

// The data plane's gauges for the configured data interfaces: rdmachaos_link_up{interface} on
// the event loop (publishLinks, cheap: an ioctl the kernel answers under RCU), and the NIC
// counters from a thread of its own once per COUNTER_PERIOD, since the ethtool ioctl waits for
// the RTNL lock, which a driver or a qdisc change can hold for long, and must not stall the loop.
class DataPlaneMetrics {
 public:
  DataPlaneMetrics(metrics::Exporter& out, std::vector<std::string> interfaces,
                   counters::SamplerOptions options = {},
                   std::chrono::milliseconds counterPeriod = std::chrono::seconds(1));
  ~DataPlaneMetrics();  // stops and joins the counter thread
  DataPlaneMetrics(const DataPlaneMetrics&) = delete;
  DataPlaneMetrics& operator=(const DataPlaneMetrics&) = delete;

  // rdmachaos_link_up of every interface (call on the event loop), and with WATCH its
  // rdmachaos_link_down_events_total: every fall from up the kernel announced, however short.
  void publishLinks(const LinkWatch* watch = nullptr);

 private:
  void sampleCounters();  // one round over every interface, on the counter thread

  metrics::Exporter& out_;
  std::vector<std::string> interfaces_;
  counters::SamplerOptions options_;
  std::chrono::milliseconds counterPeriod_;
  UniqueFD sock_;  // for linkUp, opened once: a full descriptor table must not read as "down"
  std::set<std::string> linkFailed_;  // interfaces whose linkUp error was logged
  // Counter thread's own state.
  std::vector<std::optional<counters::NicSampler>> samplers_;
  std::vector<bool> sampleFailed_;  // logged once until the interface samples again
  std::set<std::string> families_;  // every counter family published, for retain()
  std::jthread thread_;
};

}  // namespace rc::agent
