// The list of workload kinds built into this binary, in the order of `workload_kinds` in
// workload/meson.build, which generates workload_kinds.inc (one RC_WORKLOAD_KIND(NAME) a kind).
// Adding a kind: its file kinds/NAME.cpp, defining `const Kind kind_NAME`, and one line there.
#include "workload/kinds.hpp"

#include <algorithm>

namespace rc::workload {

#define RC_WORKLOAD_KIND(name) extern const Kind kind_##name;
#include "workload/workload_kinds.inc"
#undef RC_WORKLOAD_KIND

const std::vector<const Kind*>& kinds() {
#define RC_WORKLOAD_KIND(name) &kind_##name,
  static const std::vector<const Kind*> all = {
#include "workload/workload_kinds.inc"
  };
#undef RC_WORKLOAD_KIND
  return all;
}

const Kind* findKind(std::string_view name) {
  for (const auto* k : kinds())
    if (k->name == name) return k;
  return nullptr;
}

std::string kindNames() {
  std::string out;
  for (const auto* k : kinds()) {
    if (!out.empty()) out += ", ";
    out += k->name;
  }
  return out;
}

std::string externalKindNames() {
  std::string out;
  for (const auto* k : kinds()) {
    if (!k->external || k->external->programIs != "program") continue;  // kinds that run a program
    if (!out.empty()) out += " or ";
    out += k->name;
  }
  return out;
}

std::string kindsHelp() {
  size_t width = 0;
  for (const auto* k : kinds()) width = std::max(width, k->name.size());
  std::string out = "Workload kinds (--kind):\n";
  for (const auto* k : kinds()) {
    out += "  ";
    out += k->name;
    out += std::string(width + 2 - k->name.size(), ' ');
    out += k->summary;
    out += '\n';
  }
  return out;
}

}  // namespace rc::workload
