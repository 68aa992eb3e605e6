// The control protocol between controller and agent: framing, versions, and strict parsing
// of every message into a typed request. Transport-free so it can be unit-tested and fuzzed.
//
// Frame: 4-byte big-endian length, then that many bytes of UTF-8 JSON (one object).
// Every message has "v" (protocol version), "id" (request id, echoed in the reply) and
// "type". Replies have type "<request>.ok" or "error" (with "code" and "message").
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.hpp"

namespace rc::proto {

using json = nlohmann::json;

inline constexpr int kVersion = 1;
inline constexpr int kMinVersion = 1;
inline constexpr uint32_t kMaxFrameBytes = 1u << 20;  // 1 MiB: far above any real message
inline constexpr size_t kMaxIdLength = 64;
inline constexpr size_t kMaxParams = 64;
// Deepest nesting of arrays and objects a message may have: real messages stay below 8, and
// the JSON library copies, compares and prints recursively.
inline constexpr size_t kMaxDepth = 32;
// What an agent accepts of one controller's plan: faults scheduled or running at once, and how
// far ahead a fault may be scheduled (a run schedules every fault at its start, so a playbook
// is checked against both before anything is sent: controller/playbook/playbook_plan.cpp).
inline constexpr size_t kMaxActiveFaults = 64;
inline constexpr int64_t kMaxScheduleAheadNs = 86'400'000'000'000;  // 24 h
// What an agent accepts of a workload, checked by the playbook parser too (validate,
// --dry-run), so that a valid playbook's workload is never refused at the run's start.
inline constexpr int64_t kMaxWorkloadSize = int64_t(1) << 30;  // bytes of one rank's message
inline constexpr int kMaxWorkloadStreams = 64;                 // TCP connections per peer
inline constexpr int kMaxVerbsQps = 16;                        // verbs QPs per peer, perftest's -q
// An agent's [agent] max_fault_lifetime unless its configuration says otherwise: the longest a
// fault stays applied and a workload runs. A run's workload lasts the whole run, so a playbook
// is held to it (the controller cannot know a node's configuration before it connects).
inline constexpr int64_t kDefaultMaxFaultLifetimeMs = 600'000;  // 10 min

// Error codes sent in "error" replies.
inline constexpr std::string_view kErrBadMessage = "bad_message";
inline constexpr std::string_view kErrVersion = "unsupported_version";
inline constexpr std::string_view kErrNotHello = "hello_required";
inline constexpr std::string_view kErrRefused = "refused";
inline constexpr std::string_view kErrNotFound = "not_found";
inline constexpr std::string_view kErrFailed = "failed";

// ---- framing ----
std::string encodeFrame(const json& message);
// A frame the peer will accept (at most kMaxFrameBytes): a message that would be larger has
// its long "events" lists cut to their first and last kKeptEvents (the count of the others in
// "events_omitted"), since a fault's events are what can grow without bound (a flap train, a
// list of many faults). An error when even that does not fit: the caller sends that instead.
inline constexpr size_t kKeptEvents = 100;
Result<std::string> encodeBoundedFrame(json message);
// Incremental decoder for a byte stream. feed() appends bytes; next() yields whole messages.
class FrameDecoder {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // nullopt: need more bytes. Error: the stream is unusable (oversized frame or bad JSON);
  // the caller replies with an error and closes.
  std::optional<Result<json>> next();

 private:
  std::string buf_;
};
uint32_t decodeLength(const unsigned char header[4]);
// Refuses a body nested deeper than MAX_DEPTH, by scanning its bytes: nothing is built,
// copied or recursed into. parseBody calls it first.
Result<void> checkDepth(std::string_view body, size_t maxDepth = kMaxDepth);
Result<json> parseBody(std::string_view body);
// 16 lowercase hex characters (64 bits) from the kernel's random source, for ids that must not
// collide across controllers and runs (fault ids, controller ids).
std::string randomToken();

// ---- requests (controller -> agent) ----
struct Hello {
  std::string controllerId;  // identifies the lease owner across reconnects
  std::vector<int> versions;
};
struct ClockReq {
  int64_t t0 = 0;
};
struct Heartbeat {};
struct Schedule {
  std::string faultId;  // chosen by the controller, unique per agent
  std::string kind;
  json params = json::object();  // raw parameters: validated by the fault kind
  int64_t startNs = 0;           // controller clock; 0 = now
  int64_t clockOffsetNs = 0;     // agent - controller as the controller measured it
  int64_t lifetimeMs = 0;        // the agent caps this at its own maximum
};
// A fault's lifetime on the wire: whole milliseconds rounded up (never shorter than the step
// asks), at least 1. `inject` and `run` both send it so.
int64_t lifetimeMsFor(int64_t forNs);
// The body of a schedule request (what parseRequest reads back as a Schedule).
json toJson(const Schedule& s);
struct Revert {
  std::string faultId;
};
struct RevertAll {
  // false: only the faults of the caller's certificate; true: every controller's.
  bool all = false;
};
struct ListFaults {};
struct GetFault {
  std::string faultId;
};
// The bodies of these requests (what parseRequest reads back).
json toJson(const Hello& h);
json toJson(const ClockReq& c);
json toJson(const Revert& r);
json toJson(const RevertAll& r);
json toJson(const GetFault& g);
struct Status {};
struct Capabilities {};

// A collective workload on this agent's data interface (see docs/workloads.md).
inline constexpr size_t kMaxWorld = 256;
struct WorldMember {
  int rank = 0;
  std::string address;  // IPv4 literal on the member's data interface
  int port = 0;
};
// The data plane's traffic class and, for verbs, the RC QP attributes (NCCL's defaults:
// NCCL_IB_TIMEOUT 14 before 2.14, NCCL_IB_RETRY_CNT 7, rnr_retry 7; DSCP 26, RoCEv2's class).
struct QpSettings {
  int dscp = 26;       // 0-63: TCP's IP_TOS and the verbs GRH traffic class (dscp << 2)
  int timeout = 14;    // 0-31: 4.096 us x 2^timeout per try (0: infinite)
  int retryCount = 7;  // 0-7
  int rnrRetry = 7;    // 0-7 (7: retry forever)
  bool operator==(const QpSettings&) const = default;
};

struct WorkloadStart {
  std::string workloadId;
  std::string kind;               // allreduce, allgather, alltoall, incast, pairwise, perftest
  int rank = 0;
  std::vector<WorldMember> world;  // every rank exactly once, sorted by rank
  int64_t size = 0;               // bytes
  int64_t iterations = 0;         // exactly one of iterations and duration_ms is non-zero
  int64_t durationMs = 0;
  int streams = 1;
  int incastReceiver = 0;
  int fanIn = 0;
  int64_t binUs = 10'000;
  int64_t reconnectTimeoutMs = 10'000;
  int64_t startNs = 0;        // controller clock; 0 = now
  int64_t clockOffsetNs = 0;  // agent - controller
  bool checksum = true;
  std::string transport = "tcp";  // tcp, verbs (RC QPs; streams = QPs per peer)
  QpSettings qp;
  std::string perftest;  // kind "perftest": ib_write_bw, ib_read_bw or ib_send_bw
  std::string job;       // kind "observed": the job id whose records count ("" = any job)
  std::vector<std::string> nodes;  // kind "mpi": the nodes' names by rank, for rank 0's launcher
};
struct WorkloadStop {
  std::string workloadId;
};
// The bodies of workload_start and workload_stop requests (what parseRequest reads back).
json toJson(const WorkloadStart& w);
json toJson(const WorkloadStop& w);

using Request = std::variant<Hello, ClockReq, Heartbeat, Schedule, Revert, RevertAll, ListFaults,
                             GetFault, Status, Capabilities, WorkloadStart, WorkloadStop>;

struct Envelope {
  int version = 0;
  uint64_t id = 0;
  std::string type;
  Request request;
};

// Validates the envelope and the body of a request: types, bounds, unknown keys.
Result<Envelope> parseRequest(const json& message);

// ---- building messages ----
json makeRequest(uint64_t id, std::string_view type, json body = json::object());
json makeReply(uint64_t id, std::string_view requestType, json body = json::object());
json makeError(uint64_t id, std::string_view code, std::string_view message);
// A reply as the controller sees it: either the body or the agent's error.
Result<json> parseReply(const json& message, uint64_t expectedId, std::string_view requestType);

bool validId(std::string_view id);

// ---- unsolicited workload messages (agent -> the session that started it, id 0) ----
struct TelemetryIteration {
  int64_t index = 0;
  int64_t startNs = 0, endNs = 0;  // agent clock
  int64_t rxBytes = 0;
  bool ok = true;
};
struct TelemetryCounters {
  int64_t iterations = 0, failedIterations = 0, verifyFailures = 0, errors = 0,
          corruptions = 0, reconnects = 0, rxBytes = 0;
};
// NIC and RDMA counters of the node's data interfaces, sampled by the agent (counters/): the
// values that changed since the previous sample sent (all of them in the first).
struct NicSample {
  int64_t tNs = 0;  // agent clock
  std::map<std::string, uint64_t> values;
};
inline constexpr size_t kMaxNicCounters = 8192;
inline constexpr size_t kMaxNicCounterName = 96;
inline constexpr size_t kMaxTelemetryBins = 20'000;
inline constexpr size_t kMaxTelemetryIterations = 20'000;
struct TelemetryMsg {
  std::string workloadId;
  int rank = 0;
  int64_t seq = 0;
  int64_t firstBinNs = 0;  // agent clock: start of bins[0]
  int64_t binNs = 0;
  std::vector<int64_t> bins;  // received bytes per bin
  std::vector<TelemetryIteration> iterations;
  TelemetryCounters counters;
  std::optional<NicSample> nic;
};
struct WorkloadEnded {
  std::string workloadId;
  int rank = 0;
  std::string endReason;  // completed, stopped, lease_expired, max_duration, shutdown, error
  std::string error;
  std::string note;  // Summary::note: what a launched job did (sent only when set)
  bool verified = true;
  TelemetryCounters counters;
};
// A fault ended (completed, reverted, expired, failed): sent to the session that scheduled it.
struct FaultEnded {
  std::string faultId;  // record["fault"]
  json record;          // the agent's fault record (state, applied_ns, ended_ns, events, error...)
};
json toJson(const TelemetryMsg& t);
json toJson(const WorkloadEnded& e);
json toJson(const FaultEnded& e);  // from the record alone (faultId is read from it)
Result<TelemetryMsg> parseTelemetry(const json& message);
Result<WorkloadEnded> parseWorkloadEnded(const json& message);
Result<FaultEnded> parseFaultEnded(const json& message);

}  // namespace rc::proto
