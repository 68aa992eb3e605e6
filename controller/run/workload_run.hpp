// Starts a collective workload on a set of agents and collects its telemetry as plain data on
// the run's timeline (t = 0 at the common start; controller/run/timeline.hpp). Callable from a
// coroutine next to other tasks (faults).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol.hpp"
#include "common/result.hpp"
#include "controller/fleet/fleet.hpp"
#include "controller/run/timeline.hpp"

namespace rc::controller {

struct WorkloadSpec {
  std::string kind = "allreduce";  // a workload kind's name (workload/kinds.hpp)
  std::string perftest;            // an external kind's program (perftest: ib_write_bw (default), ib_read_bw, ib_send_bw)
  uint64_t size = 4u << 20;        // bytes, as nccl-tests counts them (incast: per sender)
  uint64_t iterations = 0;         // 0: run for DURATION
  Duration duration = std::chrono::seconds(10);
  int streams = 1;                 // TCP connections (verbs: RC QPs) per peer
  std::string transport = "tcp";   // tcp, verbs
  std::string incastReceiver;      // node name; "" = the last rank
  int fanIn = 0;                   // incast senders at a time; 0 = all
  Duration bin = std::chrono::milliseconds(10);
  Duration reconnectTimeout = std::chrono::seconds(10);
  uint16_t port = 7480;            // data-plane port on every node
  bool checksum = true;
  Duration lead{};                 // delay to the common start; 0 = automatic
  proto::QpSettings qp;            // DSCP (both transports) and the verbs QP attributes
};

struct NodeSeries {
  std::string node;
  int rank = 0;
  // Its bins and iterations on the run timeline (t = 0 at the common start), the clock offset
  // they were mapped with (agent - controller, as measured when connecting).
  NodeTimeline timeline;
  proto::TelemetryCounters counters;
  // The node's NIC and RDMA counters (counters/nic_counters.hpp), latest values; and when each
  // sample was taken (run timeline).
  std::map<std::string, uint64_t> nic;  // at most proto::kMaxNicCounters names
  size_t nicDropped = 0;                 // values of names beyond that bound, ignored
  std::vector<std::pair<int64_t, std::map<std::string, uint64_t>>> nicSamples;  // what changed
  bool ended = false;
  std::string endReason, error;
  std::string note;  // what a job the workload launched did (workload_ended's note)
  bool verified = true;
};

struct WorkloadSeries {
  std::string workloadId, kind;
  int world = 0;
  uint64_t size = 0;
  // Bytes per iteration that algbw divides by the iteration time; 0 (perftest, whose
  // "iterations" are its report periods): algbw is the records' bytes over their time.
  uint64_t algBytes = 0;
  double busFactor = 1.0;  // busbw = algbw x busFactor (nccl-tests)
  int64_t startNs = 0;     // common start, controller clock: the run timeline's t = 0
  int64_t binNs = 0;       // the grid the nodes' timelines are on
  std::vector<NodeSeries> nodes;  // by rank
};

// Iteration statistics over records that ended in [fromNs, toNs) (run timeline).
struct WorkloadStats {
  size_t count = 0;
  int64_t p50Ns = 0, p99Ns = 0, maxNs = 0;
  double algbw = 0, busbw = 0;  // bytes per second, from the median iteration time
};
WorkloadStats workloadStats(const WorkloadSeries& series, int64_t fromNs, int64_t toNs);
// The instant (run timeline) up to which every node that has reported bins has reported
// all of them: the end of the slowest node's newest bin. Empty before any node reported one.
// Figures for a stated instant must not look past it (a late node would read as a stall).
std::optional<int64_t> telemetryThroughNs(const WorkloadSeries& series);
// `rdmachaos workload --json`: bin and iteration times on the controller's clock.
nlohmann::json toJson(const WorkloadSeries& series);

class WorkloadRun {
 public:
  // RANKS in rank order; each needs a data address in the inventory. The clients must stay
  // connected (with heartbeats) for the whole run.
  WorkloadRun(boost::asio::io_context& io, std::vector<std::shared_ptr<AgentClient>> ranks,
              WorkloadSpec spec, std::string workloadId);
  ~WorkloadRun();
  // Sends workload_start to every rank with one common start instant. On any refusal, stops
  // the ranks that accepted and returns the error.
  boost::asio::awaitable<Result<void>> start(Duration timeout);
  // Until every rank reported workload_ended, a rank's session is lost, or LIMIT passes.
  // True when every rank ended.
  boost::asio::awaitable<bool> wait(Duration limit);
  // Asks every rank to stop now (their workload_ended follows; call wait() to collect it).
  boost::asio::awaitable<void> stop(Duration timeout);
  const WorkloadSeries& series() const;
  // Moves each node's NIC samples out (the run's result takes them once the job is over,
  // instead of holding a second copy: a long run on mlx5 samples many counters).
  std::vector<std::pair<int64_t, std::map<std::string, uint64_t>>> takeNicSamples(size_t rank);
  bool allEnded() const;
  // Called on the io_context after each telemetry or end message.
  void onUpdate(std::function<void()> handler);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace rc::controller
