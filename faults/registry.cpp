// The list of fault kinds built into this binary. Adding a kind: one file + one line here.
#include "faults/fault.hpp"

namespace rc::faults {

extern const FaultKind kLinkFlap;
extern const FaultKind kPfcStorm;
extern const FaultKind kEcnShift;
extern const FaultKind kIncast;
extern const FaultKind kNoop;

const std::vector<const FaultKind*>& registry() {
  static const std::vector<const FaultKind*> kinds = {
      &kLinkFlap,
      &kPfcStorm,
      &kEcnShift,
      &kIncast,
      &kNoop,
  };
  return kinds;
}

const FaultKind* findKind(std::string_view name) {
  for (const auto* k : registry())
    if (k->name == name) return k;
  return nullptr;
}

}  // namespace rc::faults
