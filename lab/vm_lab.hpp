// The soft-RoCE lab (QEMU guests with rdma_rxe behind rdmachaos-labswitch): the parts of
// lab::up/down/status of a lab of kind "vm" (lab_kind.hpp, kVmKind).
#pragma once

#include <string>

#include "common/result.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"

namespace rc::lab::vm {

// lab up --soft-roce: checks QEMU and the guest kernel before creating anything.
Result<std::string> up(const UpOptions& options);
// Stops every guest and the switch by their recorded identity and removes every file the lab
// wrote into DIR. Called with DIR's lock held.
Result<void> downLocked(const LabState& state);
Result<std::string> status(const LabState& state);

}  // namespace rc::lab::vm
