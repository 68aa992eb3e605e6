// What a playbook run produces: the data the runner collects and scoring and reports consume.
//
// The runner (controller glue over the fleet and the workload engine) fills a RunResult; it
// is also what a synthetic test builds. Every time is in nanoseconds on the controller's
// timeline, relative to the run start (t = 0 when trial 0 starts); agent timestamps are
// mapped onto it with the clock offsets recorded here, so the report can show how
// precise each node's times are.
//
// Contract for the runner:
//  - series: one entry per workload node; bins of width binNs at tNs = k * binNs covering
//    [0, endedNs) (NodeTimeline::binsUntil, controller/run/timeline.hpp). A bin the node sent
//    nothing in is present with bytes = 0; a bin missing from telemetry is also counted as 0
//    (and should be avoided: it looks like a stall).
//  - iterations: one span per node per completed collective iteration.
//  - faults: one record per PlannedFault, in plan order, with the times the agent reported
//    for the fault's "applied" and "reverted" events (kernel times where available), or an
//    error when it could not be applied.
//  - counters: per trial and node, a snapshot at the trial start and at its end.
//  - abortReason: non-empty when a guardrail or an error stopped the run; endedNs says how
//    far it got. Scoring skips trials that did not complete.
//
// The runner (executePlan in run_playbook.cpp, one PlanRun method per phase) connects the fleet
// and records ClockInfo per node; starts one workload on plan.workloadNodes (its start is
// t = 0); schedules every PlannedFault at its instant with lifetime forNs (scheduleFault) and
// records the applied/reverted times the agents report; while it runs, snapshots counters at
// trial edges and checks the guardrails (baseline floor, lost agent, stall), aborting with
// revert_all on every agent; then stops the workload and takes the telemetry, already on the
// run's grid (WorkloadRun puts it there as it arrives, through controller/run/timeline.hpp).
// playbook_commands.cpp scores the RunResult and writes the result, HTML and JUnit reports.
#pragma once

#include "controller/run/packet_analysis.hpp"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "alerts/alert_event.hpp"
#include "workload/nccl_tests.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/measure/series.hpp"

namespace rc::controller {

// One node's part in one collective iteration, on the run timeline (the agent side's record of
// it is workload::IterationRecord).
struct IterationSpan {
  std::string node;
  int64_t iteration = 0;  // same number on every node for the same collective call
  int64_t startNs = 0;
  int64_t endNs = 0;
  uint64_t rxBytes = 0;  // what the node received in it
  bool ok = true;        // completed and verified (a RunResult holds only these)
};

struct FaultRecord {
  int trial = 0;
  std::string step;
  std::string node;
  std::string kind;
  json params;
  int64_t scheduledNs = 0;
  std::optional<int64_t> appliedNs;   // actual, as reported by the agent
  std::optional<int64_t> revertedNs;  // actual; missing if the run ended before
  std::string error;                  // non-empty if the fault could not be applied
  std::string role;  // "" or, for kinds with several parties, e.g. incast: sink, sender
  // What the agent recorded while it ran (its first kMaxFaultEvents events, the last
  // kKeptTailEvents of them its last ones, "events_omitted" between), times from the
  // run start: e.g. incast's "received" / "sent" bytes and "qp_error"s.
  struct Event {
    int64_t tNs = 0;
    std::string what, detail;
  };
  std::vector<Event> events;
};
inline constexpr size_t kMaxFaultEvents = 64;
inline constexpr size_t kKeptTailEvents = 8;  // of those, the last ones the fault reported

struct CounterSnapshot {
  int trial = 0;
  std::string node;
  std::map<std::string, uint64_t> before;  // at the trial start
  std::map<std::string, uint64_t> after;   // at the trial end
};

struct ClockInfo {
  std::string node;
  int64_t offsetNs = 0;       // agent clock - controller clock
  int64_t uncertaintyNs = 0;  // half the best round trip
  int64_t rttNs = 0;
};

// The fabric's own view, from the lab switch's control socket (or, later, a real switch's
// telemetry): counters per port and queue sampled about every 100 ms, and events with their
// instants. Ground truth to judge the workload's view against. Times on the run timeline.
struct FabricSample {
  int64_t tNs = 0;
  std::string port;
  int queue = 0;
  uint64_t pfcRx = 0, pfcTx = 0, ecnMarked = 0, drops = 0, wdDrops = 0, depthBytes = 0, stormGaps = 0;
  int64_t pausedNs = 0, xoffNs = 0;
};
struct FabricEvent {
  int64_t tNs = 0;
  std::string what;  // pfc_rx_start, pfc_rx_end, wd_detect, wd_restore, flow_start, flow_end
  std::string port;
  int priority = 0;
  int l4Dst = -1;  // flow_start/flow_end: the metered TCP/UDP destination port
};
// Traffic the switch meters on the wire: frames leaving PORT for TCP/UDP port L4DST.
struct FabricMeter {
  std::string port;
  int l4Dst = 0;
  bool operator<(const FabricMeter& o) const { return std::tie(port, l4Dst) < std::tie(o.port, o.l4Dst); }
};
// The lab switch's own load at one sample: its event loop's busy time (outside epoll_wait)
// over the time it has run, both cumulative. Busy near 100 % between two samples: the switch
// was saturated, and its CPU, not the line rate, bounded the traffic.
struct SwitchLoad {
  int64_t tNs = 0;  // run timeline
  int64_t loopNs = 0, busyNs = 0;
};
struct FabricEvidence {
  std::string source;  // "labswitch <socket>"; empty = none collected
  std::vector<FabricSample> samples;  // a (port, queue) appears when its counters changed
  std::vector<FabricEvent> events;
  std::vector<SwitchLoad> load;  // every sample, when the switch reports it
  std::string error;  // why collection stopped early, if it did
};

// A node's NIC and RDMA counters over the run, as the agent sampled them (~100 ms): the sums
// the report draws next to throughput. Cumulative; times on the run timeline.
struct NicPoint {
  int64_t tNs = 0;
  uint64_t pauseFrames = 0;  // PFC and global pause frames, received and sent (ethtool)
  uint64_t ecnMarked = 0;    // rdma.np_ecn_marked_roce_packets
  uint64_t cnpSent = 0;      // rdma.np_cnp_sent
  uint64_t cnpHandled = 0;   // rdma.rp_cnp_handled
};
// Every NIC and RDMA counter of one node as the agent sent it (~100 ms): a sample holds the
// values that changed since the one before (the first, all it had), as on the wire, so a long
// run costs what moved, not every name every time. The per-fault-window deltas are taken from
// these (score.hpp, nicDeltas); the result keeps the deltas, not the samples.
struct NicSample {
  int64_t tNs = 0;
  std::map<std::string, uint64_t> values;
};

// Sums the highlighted counters of one sample (names as in counters/nic_counters.hpp, with an
// "IFNAME/" prefix on nodes with several data interfaces).
NicPoint nicHighlights(const std::map<std::string, uint64_t>& values);

struct RunResult {
  Plan plan;
  std::string inventoryPath;
  std::vector<Node> inventoryNodes;  // the nodes of the run, for the report's summary
  int64_t startedUnixNs = 0;          // wall clock of t = 0
  int64_t endedNs = 0;                // how far the run got, on the run timeline
  int64_t binNs = 10'000'000;
  std::map<std::string, std::vector<Bin>> series;  // per workload node
  std::vector<IterationSpan> iterations;  // completed ones, every workload node
  std::vector<FaultRecord> faults;
  std::vector<CounterSnapshot> counters;
  std::vector<ClockInfo> clocks;
  FabricEvidence fabric;
  std::map<std::string, std::vector<NicPoint>> nic;  // per workload node that sent counters
  std::map<std::string, std::vector<NicSample>> nicSamples;  // the same nodes, every counter
  // The monitoring under test (`run --alertmanager-webhook`, `--prometheus`): every alert
  // state change it reported during the run (wall-clock times: startedUnixNs maps them), the
  // sources, the pipeline's sampling, and what went wrong receiving (bad posts, failed polls).
  std::vector<alerts::AlertEvent> alerts;
  std::vector<std::string> alertSources;  // empty: the run had no alert source
  alerts::PipelineTiming alertTiming;
  std::vector<std::string> alertErrors;
  int64_t alertsUntilNs = 0;  // run timeline: alerts were collected up to here
  std::string abortReason;  // empty = ran to the end
  // The workload nodes whose run ended with an error, and the error (an mpi job's exit and
  // Open MPI's words are rank 0's).
  std::map<std::string, std::string> workloadErrors;
  // What a job the run launched did, by node (the mpi kind's rank 0: its transport, mpirun's
  // exit, the ranks that finished), whatever its end.
  std::map<std::string, std::string> workloadNotes;
  std::vector<PacketAnalysis> packets;  // the packet faults' captures and oracle (analysePackets)
  // `run --nccl-tests-output FILE`: what the job's nccl-tests printed, read when the run ended.
  struct NcclTests {
    std::string file;
    std::optional<workload::NcclTestsReport> report;
    std::string error;  // why there is no report (unreadable, not nccl-tests' output)
  };
  std::optional<NcclTests> ncclTests;
};

}  // namespace rc::controller
