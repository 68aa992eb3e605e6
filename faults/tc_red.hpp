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

// The kind of the root qdisc of ifindex ("noqueue", "fq_codel", "red", ...).
Result<std::string> rootKind(int ifindex);

}  // namespace rc::faults::tcred
