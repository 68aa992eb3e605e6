// Fuzz harness: playbooks (TOML) through parse and validation, then resolved against a fixed
// inventory and printed as `run --dry-run` and the result file would.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "controller/playbook/playbook.hpp"

namespace {

// Four nodes with roles, one without a data address (it cannot be an incast receiver).
const char* kInventory = R"(
[tls]
ca = "ca.pem"
cert = "c.pem"
key = "c.key"
[[node]]
name = "n1"
address = "10.0.0.1"
data_addresses = ["10.1.0.1"]
roles = ["worker", "receiver"]
[[node]]
name = "n2"
address = "10.0.0.2"
data_addresses = ["10.1.0.2"]
roles = ["worker"]
[[node]]
name = "n3"
address = "10.0.0.3"
data_addresses = ["10.1.0.3"]
roles = ["worker", "spine"]
[[node]]
name = "n4"
address = "10.0.0.4"
roles = ["worker"]
)";

const rc::controller::Inventory& inventory() {
  static const auto inv = [] {
    auto r = rc::controller::parseInventory(kInventory, "fuzz/inventory.toml");
    if (!r) std::abort();
    return *r;
  }();
  return inv;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rc::controller;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto pb = parsePlaybook(text, "fuzz/playbook.toml");
  if (!pb) return 0;
  (void)pb->faultKinds();
  for (const auto& sc : pb->scenarios) {
    (void)sc.durationNs();
    for (const auto& e : sc.expectations) (void)e.describe();
    for (const auto& st : sc.steps) {
      (void)st.target.describe();
      (void)formatParams(st.kind, st.params);
    }
  }
  auto plan = resolvePlan(*pb, inventory());
  if (!plan) return 0;
  (void)formatPlan(*pb, *plan);
  (void)toJson(*plan).dump();
  for (const auto& t : plan->trials) (void)t.label();
  return 0;
}
