// What this node offers the controller: interfaces and their state, RDMA devices, fault kinds.
#pragma once

#include <nlohmann/json.hpp>

#include "agent/config.hpp"
#include "faults/fault.hpp"

namespace rc::agent {

// The policy as configured, without asking the system anything (no netlink): what a journal
// replay needs (lab switch socket, command templates) before anything that can fail is loaded.
faults::Policy configuredPolicy(const Config& config);
// Builds the policy faults obey: the configured one plus the default-route interface as
// protected unless the config allows it.
Result<faults::Policy> makePolicy(const Config& config);

// Read fresh on each call: link states change under faults.
nlohmann::json capabilities(const Config& config, const faults::Policy& policy);

}  // namespace rc::agent
