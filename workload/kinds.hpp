// The workload kinds: one record per kind (workload/kinds/NAME.cpp) holding every fact about it
// that the playbook parser, the CLI, the controller's run and scorer, the agent and the engine
// need, and the registry that lists them (the `workload_kinds` list in workload/meson.build).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol.hpp"
#include "common/result.hpp"
#include "workload/collectives.hpp"
#include "workload/engine.hpp"  // Summary
#include "workload/telemetry.hpp"

namespace rc::workload {

// One rank's run of an external kind, prepared (validated, nothing started) from its
// workload_start; the agent runs it on the workload's thread instead of the engine.
class ExternalRun {
 public:
  virtual ~ExternalRun() = default;
  virtual uint64_t memory() const = 0;     // bytes of buffers it holds, against the agent's budget
  virtual uint16_t port() const = 0;       // where it listens, for the controller's record
  virtual int64_t drainLagNs() const = 0;  // telemetry bins younger than this stay open
  virtual std::string describe() const = 0;  // for logs: the program it runs
  // Runs from START_NS (agent wall clock) for DURATION_NS, or until STOP becomes true.
  virtual Summary run(int64_t startNs, int64_t durationNs, Telemetry& telemetry,
                      const std::atomic<bool>& stop) = 0;
};

// A kind that runs an external program of a fixed list between exactly two nodes over RDMA,
// for a duration (perftest). The front ends word their refusals from these facts.
struct External {
  int ranks = 2;      // nodes it runs between; 0: any number from 2
  bool rdma = true;   // needs an ACTIVE RDMA port on every node
  std::string_view programIs = "program";  // what `test` names for it (observed: the job id)
  std::string_view defaultProgram;  // the program when a spec names none (`test`, --test)
  bool (*knowsProgram)(std::string_view program);
  std::string (*programs)();  // "ib_write_bw, ib_read_bw, ib_send_bw" for messages
  int maxStreams = 1;         // streams = the program's QPs
  std::string_view streamsAre;  // what streams are to it: "its QPs, -q"
  std::string_view qpTimeoutIs;  // the program's option qp_timeout sets: "-u"
  std::string_view ranksShort;  // the two ranks' roles: "client, then server"
  std::string_view ranksLong;   // "the first the client, the second the server"
  // The transports a playbook may name for it, with the fix for any other; null: it runs over the
  // job's own transport and a playbook leaves `transport` out.
  Result<void> (*checkTransport)(std::string_view transport) = nullptr;
  // Rank 0's agent starts the job on every node (mpi): its workload_start names the nodes.
  bool launches = false;
  // Validates R for this node and prepares its run (the program exists, its device is found).
  Result<std::unique_ptr<ExternalRun>> (*prepare)(const proto::WorkloadStart& r) = nullptr;
};

struct Kind {
  std::string_view name;
  std::string_view summary;  // one line, for --help and docs
  // nccl-tests' bus bandwidth factor for N ranks (N >= 1): busbw = algbw x factor.
  double (*bus)(double n) = nullptr;
  // The bytes one iteration moves that algbw divides by its time (nccl-tests' count of SIZE
  // with RANKS); null: algbw is the iteration records' bytes over their time (perftest, whose
  // "iterations" are its report periods).
  uint64_t (*algBytes)(uint64_t size, int ranks) = nullptr;
  // Checks of a shape beyond those every kind shares (ranks, size), with the fix named; null
  // when there are none.
  Result<void> (*check)(const Shape& shape) = nullptr;
  // Built-in kinds: the plan of one rank, run by the engine over a transport.
  std::unique_ptr<Collective> (*make)(const Shape& shape) = nullptr;
  // What the agent's buffers for a shape of this kind hold beyond SIZE, for the memory refusal.
  std::string_view memoryNote;
  // External kinds: what runs instead of the engine; null for built-in kinds.
  const External* external = nullptr;

  double busFactor(size_t ranks) const { return ranks < 1 || !bus ? 1 : bus(double(ranks)); }
};

// Every workload kind of this binary, in the order of `workload_kinds` in workload/meson.build.
const std::vector<const Kind*>& kinds();
const Kind* findKind(std::string_view name);
// "allreduce, allgather, ...": the known kinds for "known: ..." messages and --help.
std::string kindNames();
// "perftest": the external kinds that run a program, for messages about their program option
// (test, --test); observed's `test` is a job id, said by its own messages.
std::string externalKindNames();
// One line per kind ("  NAME  SUMMARY"), for `workload --help`.
std::string kindsHelp();

}  // namespace rc::workload
