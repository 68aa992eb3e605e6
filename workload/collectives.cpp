// The checks every shape passes whatever its kind, and the dispatch to the kind's own checks
// and plan (workload/kinds/NAME.cpp holds each collective).
#include "workload/collectives.hpp"

#include "common/protocol.hpp"
#include "workload/kinds.hpp"

namespace rc::workload {

Result<void> validateShape(const Shape& s) {
  if (!s.kind) return makeError("unknown workload kind (known: " + kindNames() + ")");
  if (s.world < 2 || s.world > 256) return makeError("a workload needs 2 to 256 ranks");
  if (s.rank < 0 || s.rank >= s.world) return makeError("rank is outside the world");
  if (s.size == 0 || s.size > uint64_t(proto::kMaxWorkloadSize)) return makeError("size must be 1 B to 1 GiB");
  if (s.kind->check) return s.kind->check(s);
  return {};
}

std::unique_ptr<Collective> makeCollective(const Shape& s) {
  return s.kind && s.kind->make ? s.kind->make(s) : nullptr;
}

}  // namespace rc::workload
