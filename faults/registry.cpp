// The list of fault kinds built into this binary, in the order of `fault_kinds` in
// faults/meson.build, which generates fault_kinds.inc (one RC_FAULT_KIND(NAME) line per kind).
// Adding a kind: its file NAME.cpp, defining `const FaultKind kind_NAME`, and one line there.
#include "faults/fault.hpp"

namespace rc::faults {

#define RC_FAULT_KIND(name) extern const FaultKind kind_##name;
#include "faults/fault_kinds.inc"
#undef RC_FAULT_KIND

const std::vector<const FaultKind*>& registry() {
#define RC_FAULT_KIND(name) &kind_##name,
  static const std::vector<const FaultKind*> kinds = {
#include "faults/fault_kinds.inc"
  };
#undef RC_FAULT_KIND
  return kinds;
}

const FaultKind* findKind(std::string_view name) {
  for (const auto* k : registry())
    if (k->name == name) return k;
  return nullptr;
}

}  // namespace rc::faults
