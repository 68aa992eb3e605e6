// RED with ECN marking as a root qdisc, through rtnetlink (the tc-red backend of ecn_shift).
// The message building is separate from sending so it can be unit-tested on hosts without
// sch_red (like the project's build machines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::faults::tcred {

struct RedParams {
  int ifindex = 0;
  uint32_t kminBytes = 0, kmaxBytes = 0;
  double pmax = 0.1;
  uint32_t avpktBytes = 1000;
};

// RED's EWMA weight log (Wlog) and probability log (Plog) as tc derives them; -1 if the
// thresholds admit none.
int redWlog(uint32_t qmin, uint32_t qmax, uint32_t avpkt);
int redPlog(uint32_t qmin, uint32_t qmax, double prob);

// RTM_NEWQDISC (create or replace) of a root "red" qdisc with TC_RED_ECN, limit 4 x kmax.
Result<std::vector<uint8_t>> buildAddRed(const RedParams& p, uint32_t seq);
// RTM_DELQDISC of the root qdisc of ifindex.
std::vector<uint8_t> buildDeleteRoot(int ifindex, uint32_t seq);

// Sends a message built above and waits for the kernel's ack; explains the errors a host
// without sch_red gives.
Result<void> send(const std::vector<uint8_t>& message, const std::string& interface);

// One qdisc as the kernel dumps it: enough to create it again exactly.
struct Qdisc {
  uint32_t handle = 0, parent = 0;
  std::string kind;
  std::vector<uint8_t> options;  // the TCA_OPTIONS payload, as dumped
  bool sizeTable = false;        // has a TCA_STAB (not restorable)
  bool operator==(const Qdisc&) const = default;
};

// The egress qdisc tree of IFINDEX (ingress/clsact left out: a root qdisc does not touch
// them), root first, then by parent and handle. Empty when the interface has no qdisc, e.g.
// because it is gone; errors when the dump fails.
Result<std::vector<Qdisc>> listQdiscs(int ifindex);

// The kind of the root qdisc of ifindex ("noqueue", "fq_codel", "red", ...).
Result<std::string> rootKind(int ifindex);

// Why TREE (from listQdiscs) could not be put back exactly after its root is replaced (a
// classful root, whose classes and filters a new root destroys; a size table; a nesting deeper
// than mq's per-queue children); empty when restoreTree can restore it exactly.
std::string unrestorable(const std::vector<Qdisc>& tree);

// RTM_NEWQDISC of Q on IFINDEX: created (or replacing what is at its parent) when CREATE, else
// a change of the qdisc already there (how a kernel-made qdisc, handle 0, gets its options).
std::vector<uint8_t> buildQdisc(int ifindex, const Qdisc& q, bool create, uint32_t seq);

// Puts TREE back on IFINDEX, whose root is now the fault's own qdisc (kind APPLIED), or a
// partial restore of TREE; succeeds when the dump then equals TREE, or when the interface is
// gone. Anything else (another root, a refused message, a failed dump) is an error, so the
// revert is retried and the fault stays journaled.
Result<void> restoreTree(int ifindex, const std::string& interface, const std::vector<Qdisc>& tree,
                         const std::string& applied = "red");

}  // namespace rc::faults::tcred
