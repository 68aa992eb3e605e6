/* librdmachaos-observe: reports a job's operations (their bytes, start and end) to the
 * rdmachaos agent on this node, so that a chaos run can score a real job's impact. Plain C ABI,
 * callable from C, C++, Python (ctypes), and anything with a C FFI; no call ever blocks: with
 * no agent listening, or its socket full, records are dropped and counted.
 *
 * Where it sends: $RDMACHAOS_OBSERVE_SOCKET, else /var/lib/rdmachaos/observe.sock.
 * Who it is: rank and world size from OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE,
 * SLURM_PROCID/SLURM_NTASKS or RANK/WORLD_SIZE (torchrun), the first pair set; the job id from
 * RDMACHAOS_OBSERVE_JOB, SLURM_JOB_ID, TORCHELASTIC_RUN_ID, OMPI_MCA_ess_base_jobid or
 * PMIX_NAMESPACE.
 * rc_observe_init() overrides them. Record format: docs/observe-format.md. */
#ifndef RDMACHAOS_OBSERVE_H
#define RDMACHAOS_OBSERVE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RC_OBSERVE_API __attribute__((visibility("default")))

/* Return values of the calls below. */
#define RC_OBSERVE_SENT 0     /* handed to the agent's socket */
#define RC_OBSERVE_DROPPED 1  /* not sent: no agent, socket full, or an unknown token; counted */
#define RC_OBSERVE_INVALID -1 /* bad arguments: nothing recorded */

/* Optional: who this process is. RANK < 0, WORLD_SIZE < 1 or JOB_ID NULL keep what the
 * environment says. Call it before other threads report. Returns RC_OBSERVE_SENT (0) or
 * RC_OBSERVE_INVALID. */
RC_OBSERVE_API int rc_observe_init(int rank, int world_size, const char *job_id);

/* An operation starts: OP names it ([A-Za-z0-9._:@+-], up to 31 characters; copied), BYTES is
 * its size. Returns a token for rc_observe_end, or 0 when OP is not such a name. Up to 4096 operations may be open at
 * once across the process; beyond that the oldest open one is lost (its end is dropped). */
RC_OBSERVE_API uint64_t rc_observe_begin(const char *op, uint64_t bytes);

/* The operation of TOKEN ended with STATUS (0: completed). Any thread may end it. */
RC_OBSERVE_API int rc_observe_end(uint64_t token, int status);

/* One operation timed by the caller: START_NS and END_NS on CLOCK_REALTIME (rc_observe_now_ns),
 * COMM_ID the communicator (the same value on each of its ranks; 0: the whole job). */
RC_OBSERVE_API int rc_observe_record(const char *op, uint64_t comm_id, uint64_t bytes, int64_t start_ns,
                      int64_t end_ns, int status);

/* CLOCK_REALTIME in ns since the epoch: the clock of every record. */
RC_OBSERVE_API int64_t rc_observe_now_ns(void);

typedef struct {
  uint64_t sent;             /* records handed to the socket */
  uint64_t dropped;          /* records lost: no agent, socket full, lost tokens */
  uint64_t connect_attempts; /* at most one every few seconds while no agent listens */
  int connected;             /* 1 while a connection to the agent is open */
} rc_observe_stats_t;

RC_OBSERVE_API void rc_observe_stats(rc_observe_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif
