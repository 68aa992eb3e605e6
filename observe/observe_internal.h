/* What the observe library's three ways in (the C API, the NCCL profiler plugin, the PMPI
 * wrappers) share: one sender, the process's identity, and the name check. */
#ifndef RDMACHAOS_OBSERVE_INTERNAL_H
#define RDMACHAOS_OBSERVE_INTERNAL_H

#include <stdint.h>

#include "observe_wire.h"
#include "rdmachaos_observe.h"

/* Sends one record (or drops and counts it); never blocks, keeps errno. RANK and WORLD are the
 * rank's place in the communicator COMM_ID. Returns RC_OBSERVE_SENT, _DROPPED or _INVALID. */
RC_OBSERVE_API int rc_observe_emit(const char *op, uint64_t comm_id, uint32_t rank, uint32_t world,
                                   uint64_t bytes, int64_t start_ns, int64_t end_ns, int32_t status);

/* This process's rank and world size (from rc_observe_init or the environment). */
RC_OBSERVE_API void rc_observe_identity(uint32_t *rank, uint32_t *world);

/* Whether OP is a name a record may carry: 1-31 of [A-Za-z0-9._:@+-]. */
int rc_observe_name_ok(const char *op);

#endif
