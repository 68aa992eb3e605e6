// The lab supervisor: one daemon per lab that runs an agent inside each node namespace and
// restarts it when it exits (like systemd's Restart=always).
#pragma once

#include "common/result.hpp"
#include "lab/lab_state.hpp"

namespace rc::lab {

// Forks the supervisor (detached: setsid, reparented away from the caller), records its
// identity in lab.json and returns once it has started every agent and recorded their pids.
// The caller must be single-threaded. `state` is updated with what the supervisor recorded.
Result<void> startSupervisor(LabState& state);

}  // namespace rc::lab
