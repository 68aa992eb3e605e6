// What this node offers the controller: interfaces and their state, RDMA devices, fault kinds.
#pragma once

#include <nlohmann/json.hpp>

#include "agent/config.hpp"
#include "faults/fault.hpp"

namespace rc::agent {

// Builds the policy faults obey: the config's allowlist and protected interfaces, plus the
// default-route interface unless the config allows it.
Result<faults::Policy> makePolicy(const Config& config);

// Read fresh on each call: link states change under faults.
nlohmann::json capabilities(const Config& config, const faults::Policy& policy);

}  // namespace rc::agent
