// Clock offset estimation from round-trip probes.
#include "common/clock.hpp"

#include <limits>

namespace rc {

ClockEstimate estimateOffset(const std::vector<ClockProbe>& probes) {
  ClockEstimate best;
  int64_t bestRtt = std::numeric_limits<int64_t>::max();
  for (const auto& p : probes) {
    int64_t rtt = p.rtt();
    if (rtt < 0) continue;  // a clock step during the probe: discard
    if (rtt < bestRtt) {
      bestRtt = rtt;
      best.offsetNs = p.offset();
      best.rttNs = rtt;
      best.uncertaintyNs = (rtt + 1) / 2;
    }
    best.samples++;
  }
  return best;
}

}  // namespace rc
