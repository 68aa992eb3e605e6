// The one interface every fault kind implements, and the registry that lists them.
//
// Lifecycle, driven by the agent's fault manager:
//   kind.create(params, policy)  validate parameters and targets; touches nothing
//   fault.targets()              what it changes; a target has one owner at a time
//   -- the manager journals the scheduled fault (no snapshot yet) and waits for the instant --
//   fault.snapshot()             at the instant, read what revert needs; touches nothing
//   -- the manager rewrites and fsyncs the journal entry, snapshot included --
//   fault.run(stop, events)      apply; blocks on its own thread until done, stopped or expired
//   fault.revert()               restore the snapshot exactly; idempotent; never called for a
//                                fault whose run() was never called
//   -- the manager removes the journal entry --
// After a crash the manager calls kind.revertRecord(params, snapshot, policy) for each journal
// entry that holds a snapshot.
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace rc::faults {

using json = nlohmann::json;

// A switch command template of the agent's configuration ([ecn_commands.NAME]): argv lists,
// run without a shell, with {port} {queue} {kmin} {kmax} {pmax} {interface} (and {snapshot}
// in revert: what snapshot printed) replaced inside their elements.
struct CommandTemplate {
  std::vector<std::string> snapshot, apply, revert;
};

// What an agent allows faults to touch.
struct Policy {
  std::vector<std::string> allowlist;   // interfaces faults may target; empty = none
  std::vector<std::string> protectedInterfaces;  // never, whatever the allowlist says
  std::string defaultInterface;         // used when a fault names no interface
  std::string labswitchSocket;  // the lab switch control socket faults may use; empty = none
  std::string labswitchPort;    // the lab switch port facing this host (a default for faults)
  std::map<std::string, CommandTemplate> ecnCommands;  // by name; empty = command backend off
  // IPv4 prefixes ("10.0.0.0/16") that traffic faults (incast) may send to ([interfaces]
  // data_subnets); empty = the subnets of the allowlisted interfaces' own addresses.
  std::vector<std::string> dataSubnets;
};

// Refuses an interface that is protected or not allowlisted, naming the fix.
Result<void> checkInterface(const Policy& policy, const std::string& name);

// An IPv4 prefix "A.B.C.D/LEN" (host byte order); errors name the value.
struct Ipv4Prefix {
  uint32_t address = 0;
  int length = 0;
  bool contains(uint32_t hostOrder) const {
    uint32_t mask = length == 0 ? 0 : ~uint32_t(0) << (32 - length);
    return (hostOrder & mask) == (address & mask);
  }
};
Result<Ipv4Prefix> parseIpv4Prefix(const std::string& text);

// Refuses an IPv4 ADDRESS (dotted quad) outside the agent's data subnets (Policy::dataSubnets,
// or the subnets of the allowlisted interfaces' addresses), naming them and the fix: a
// certified controller may not aim traffic at hosts beyond the data fabric.
Result<void> checkDataAddress(const Policy& policy, const std::string& address);

// One thing a fault observed or did, with the time it happened (wall clock, ns).
struct Event {
  int64_t timeNs = 0;
  std::string what;    // "down", "up", "applied", "reverted", "frames_sent", ...
  std::string detail;  // interface name, counts, ...
  bool kernelTime = false;  // true when the time was read back from the kernel
};

// Thread-safe event sink a fault appends to while it runs.
class EventLog {
 public:
  void add(Event e) {
    std::lock_guard lock(m_);
    events_.push_back(std::move(e));
  }
  std::vector<Event> snapshot() const {
    std::lock_guard lock(m_);
    return events_;
  }

 private:
  mutable std::mutex m_;
  std::vector<Event> events_;
};

class Fault {
 public:
  virtual ~Fault() = default;
  // The normalised parameters (defaults filled in, durations in ns).
  virtual const json& params() const = 0;
  // Reads the state revert must restore. Touches nothing.
  virtual Result<json> snapshot() = 0;
  // Applies the fault and runs it until it ends by itself or stop is requested. Blocking;
  // the manager runs it on a dedicated thread. Returns an error if applying failed; the
  // manager reverts in every case.
  virtual Result<void> run(std::stop_token stop, EventLog& events) = 0;
  // Restores the snapshot taken before. Idempotent; safe after a partial apply.
  virtual Result<void> revert(EventLog& events) = 0;
  virtual std::string describe() const = 0;
  // What this fault changes, as names two faults must not share while both may run (e.g.
  // "interface vethA", "lab switch port n2"): the manager gives each target one owner at a
  // time. Empty = touches nothing another fault could restore over (the default).
  virtual std::vector<std::string> targets() const { return {}; }
};

// Parameter description, used to validate --set and playbook values and to document them.
// rate: a plain number or "5000/s"; bitRate: a line rate, "500Mbps" or "25Gbps", normalised to
// bits per second (an integer).
enum class ParamType { string, integer, duration, size, rate, bitRate, intList, boolean };
// Bounds of duration parameters, in ns.
inline constexpr double kParamMs = 1e6;
inline constexpr double kParamHour = 3600e9;

struct ParamSpec {
  std::string name;
  ParamType type;
  std::string help;
  json defaultValue;  // null = required (unless optional)
  double min = 0, max = 0;  // for numeric types (durations in ns, sizes in bytes)
  bool optional = false;    // may be absent with no default
  std::vector<std::string> choices;  // for strings: the accepted values (empty = any)
};

// Who wrote the parameters normaliseParams reads. A person writes a duration with its unit
// ("500ms": a bare 2 is refused, it would read as 2 ns); the normalised form, which is also the
// form on the wire and in the journal, is an integer of ns and reads back unchanged.
enum class ParamsFrom { person, normalised };

// Turns raw values (strings like "500ms", numbers, arrays) into normalised JSON
// (integers for durations in ns and sizes in bytes), filling defaults, rejecting unknown
// keys and out-of-range values with a message naming the parameter. Its output is accepted
// again as it is with FROM = normalised (the agent's reading of a schedule request).
Result<json> normaliseParams(std::string_view kind, const std::vector<ParamSpec>& specs,
                             const json& raw, ParamsFrom from = ParamsFrom::person);

// An integer parameter of normalised PARAMS, or an error naming KIND and KEY (for create()).
Result<int64_t> intParam(std::string_view kind, const json& params, const char* key);


// Binding a step to nodes (the controller's side, before anything is scheduled). Most kinds
// give every target the step's parameters; a kind that reaches beyond its targets (incast: the
// receiver's sink, a seeded pick of senders) binds itself, so that adding such a kind is still
// one file plus one registration line.
struct BindNode {
  std::string name;
  std::vector<std::string> dataAddresses;
};
struct BoundTarget {
  std::string node;
  json params;       // what this node gets on the wire (normalised)
  std::string role;  // "" or e.g. "sink" / "sender"
};
// below(n): a seeded draw in [0, n) (playbooks); null where no draw is wanted (inject).
using Draw = std::function<uint64_t(uint64_t)>;
using Binder = std::function<Result<std::vector<BoundTarget>>(
    const json& params, const std::vector<std::string>& targets, const std::vector<BindNode>& nodes,
    const Draw& below)>;
// K of POOL, drawn with BELOW (a partial Fisher-Yates; without BELOW, the first K), returned in
// POOL's order, so plans read like the inventory.
std::vector<std::string> pickInOrder(const std::vector<std::string>& pool, size_t k, const Draw& below);

struct FaultKind {
  std::string name;
  std::string summary;
  std::vector<ParamSpec> params;
  // Validates and builds a fault. Touches nothing.
  std::function<Result<std::unique_ptr<Fault>>(const json& normalisedParams, const Policy&)>
      create;
  // Reverts from a journal record after a crash (record = what snapshot() returned plus
  // params), with the agent's policy as configured (not yet checked against the system).
  // Idempotent.
  std::function<Result<void>(const json& params, const json& snapshot, const Policy& policy)>
      revertRecord;
  // Optional: checks across parameters (beyond each one's range), shared by the playbook
  // parser, the controller and create(); the message names the parameters and the fix.
  std::function<Result<void>(const json& normalisedParams)> check;
  // Optional: binds a step's targets to nodes (see Binder); empty = every target, same params.
  Binder bind;
  // Optional: what a fault with these normalised parameters changes on its node, as
  // Fault::targets() would name it but before the agent fills in its defaults (an absent
  // interface is "the default interface"). The planner refuses two steps that hold the same
  // target on one node at once. Empty (or "") = changes nothing another fault could restore over.
  std::function<std::string(const json& normalisedParams)> planTarget;
  // Optional: what a fault with these parameters changes outside its node, named the same
  // whichever node runs it (a switch port the parameters name; a link as both its end ports),
  // so the planner can refuse two faults of different nodes that would hold one of them at
  // once: each agent's one-owner rule sees only its own faults. Empty = nothing outside.
  std::function<std::vector<std::string>(const json& normalisedParams)> fabricTargets;
  // Optional: settles, for one step once its agents are connected, parameters that depend on
  // what those agents reported (incast's transport = "auto": verbs only where every node of the
  // step has an ACTIVE RDMA port). params[i] is the bound node's normalised parameters and
  // capabilities[i] the `capabilities` of its agent's hello; edited in place, for `inject` and
  // `run` alike. Empty = nothing to settle.
  std::function<void(const std::vector<json*>& params, const std::vector<json>& capabilities)> settle;
  // Optional: the L4 destination port by which the lab switch can meter this fault's own traffic
  // into NODE (role as bound, parameters as settled), so a score can read when that traffic
  // stopped on the wire (the ground truth of its recovery). Empty or nullopt = no meter.
  std::function<std::optional<int>(const std::string& role, const json& params)> wireMeter;
};

// The error code of a revert that found its target changed by someone else since the fault
// set it (neither what it set nor what it found): it touches nothing and says so. The manager
// retries it a few times (the other owner may restore its own change meanwhile), then ends the
// fault with the conflict as its error, so the run says the target was not restored cleanly.
inline constexpr int kRevertConflict = EXDEV;

// Whether an agent's `capabilities` (from its hello) list an RDMA device with an ACTIVE port.
bool hasActiveRdmaPort(const json& capabilities);

// PARAMS' string KEY, or "" (for planTarget).
std::string stringParam(const json& params, const char* key);
// "interface 'NAME'", or "the default interface" when PARAMS name none (for planTarget).
std::string planInterface(const json& params);

// Every fault kind built into this binary, in a stable order.
const std::vector<const FaultKind*>& registry();
const FaultKind* findKind(std::string_view name);

}  // namespace rc::faults
