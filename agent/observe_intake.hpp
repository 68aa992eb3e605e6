// The agent's local telemetry intake: per-operation records from processes on this node
// (librdmachaos-observe: NCCL, MPI, the C API), checked, bounded and binned into the workload
// engine's telemetry shape per job and communicator (docs/observe-format.md).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.hpp"
#include "common/unique_fd.hpp"
#include "observe/observe_wire.h"
#include "workload/telemetry.hpp"

namespace rc::agent {

struct ObserveOptions {
  std::string socketPath;                 // a SOCK_SEQPACKET unix socket, created (and removed) here
  std::vector<uint32_t> allowUids;        // a client's SO_PEERCRED uid must be one of these
  size_t maxClients = 64;                 // connections at once; more are closed at accept
  uint32_t maxRecordsPerSecond = 20000;   // per client (a bucket of one second's worth)
  uint64_t maxQueuedBytes = 4u << 20;     // accepted records not yet drained (as IterationRecords), all streams
  size_t maxStreams = 64;                 // (job, communicator) pairs at once
  int64_t binNs = 10'000'000;             // bins start at multiples of this since the epoch
  int64_t retentionNs = 60'000'000'000;   // older records are refused; undrained bins dropped
  int64_t maxFutureNs = 5'000'000'000;    // records ending later than now + this are refused
  int64_t maxDurationNs = 3'600'000'000'000;
  size_t recordsPerWake = 64;             // per client per wake-up: a flood cannot starve others
};

// Why a record (or a connection) was refused; each is counted.
enum class Refusal : uint8_t {
  malformed,       // wrong size, magic, string or field bounds (a truncated record included)
  version,         // a record version this agent does not read
  foreignUid,      // a connection from a uid not allowed (closed at accept)
  tooManyClients,  // a connection over maxClients (closed at accept), or the agent out of descriptors
  rateLimited,     // over maxRecordsPerSecond
  queueFull,       // over maxQueuedBytes (nobody drains)
  tooManyStreams,  // a new (job, communicator) over maxStreams
  outOfTime,       // ends before now - retention or after now + maxFuture
};
inline constexpr size_t kRefusalKinds = 8;
std::string_view refusalName(Refusal r);

// One message as received, checked against the record format and OPTIONS' bounds at NOW_NS:
// the record, or why it is refused (malformed, version or outOfTime) and what the log says.
struct RecordCheck {
  std::optional<rc_observe_record_v1> record;
  Refusal why = Refusal::malformed;
  std::string detail;
};
RecordCheck checkRecord(const void* data, size_t n, int64_t nowNs, const ObserveOptions& options);

struct ObserveStats {
  uint64_t accepted = 0;
  std::array<uint64_t, kRefusalKinds> refused{};
  uint64_t connections = 0;   // accepted connections so far
  size_t clients = 0;         // open now
  uint64_t senderDropped = 0; // records the senders said they dropped (socket full, no agent)
  uint64_t discarded = 0;     // accepted records dropped undrained after retentionNs
  uint64_t refusedTotal() const;
};

// A rank seen on this node in one stream.
struct ObservedRank {
  uint32_t rank = 0;
  uint32_t pid = 0;
  uint64_t ops = 0;
  int64_t lastEndNs = 0;
};

// What drain() hands over for one (job, communicator): the same batch the engine's reporter
// sends (bytes binned by each operation's end time; one IterationRecord per operation, index =
// that rank's operation count in this stream, rxBytes = its bytes, ok = status 0).
struct ObservedBatch {
  std::string jobId;
  uint64_t commId = 0;
  uint32_t worldSize = 0;          // as the latest record said
  std::vector<ObservedRank> ranks; // every rank of this stream seen on this node, by rank
  workload::TelemetryBatch telemetry;
};

class ObserveIntake {
 public:
  // Binds OPTIONS.socketPath (a stale socket there is replaced; one some process still
  // listens on is not) and starts the intake's thread.
  static Result<std::unique_ptr<ObserveIntake>> start(ObserveOptions options);
  ~ObserveIntake();  // stops the thread, closes every connection, removes the socket
  ObserveIntake(const ObserveIntake&) = delete;
  ObserveIntake& operator=(const ObserveIntake&) = delete;

  // Every stream's bins closed before NOW_NS and its records since the last drain.
  std::vector<ObservedBatch> drain(int64_t nowNs);
  ObserveStats stats() const;
  const std::string& path() const { return options_.socketPath; }
  const ObserveOptions& options() const { return options_; }

 private:
  struct Client;
  struct Stream;
  explicit ObserveIntake(ObserveOptions options);
  void run(std::stop_token stop);
  void acceptClients(int64_t nowNs);
  void readClient(int fd, int64_t nowNs);
  void closeClient(int fd);
  std::optional<Refusal> take(Client& c, const rc_observe_record_v1& r, int64_t nowNs);  // bins it
  // Counts a refusal and logs it (one line per reason per 10 s): DETAIL() is only built then.
  template <typename Detail>
  void refuse(Refusal why, int64_t nowNs, const Detail& detail);
  void expire(int64_t nowNs);

  ObserveOptions options_;
  UniqueFD listen_, epoll_, wake_;
  bool bound_ = false;  // the socket path is ours to remove
  // The intake thread's own: its connections.
  std::map<int, std::unique_ptr<Client>> clients_;
  std::array<int64_t, kRefusalKinds> lastLogNs_{};  // one log line per reason per 10 s
  bool listenPaused_ = false;                        // out of descriptors: until the next tick
  // Shared with drain() and stats().
  mutable std::mutex m_;
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<Stream>> streams_;
  ObserveStats stats_;
  uint64_t queuedBytes_ = 0;
  std::jthread thread_;
};

// ObserveOptions for an agent: the config's [observe] section (see config.hpp).
struct ObserveConfig;
ObserveOptions observeOptions(const ObserveConfig& config);

}  // namespace rc::agent
