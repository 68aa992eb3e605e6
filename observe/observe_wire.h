/* The observe record: one per completed operation, sent by librdmachaos-observe to the agent's
 * intake as one SOCK_SEQPACKET message (docs/observe-format.md). Shared by the sender (C) and
 * the agent (C++), so that both read the same field list. */
#ifndef RDMACHAOS_OBSERVE_WIRE_H
#define RDMACHAOS_OBSERVE_WIRE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "RCOB" in memory on a little-endian host: a record in the other byte order, or some other
 * protocol's bytes, fail here first. */
#define RC_OBSERVE_MAGIC 0x424F4352u
#define RC_OBSERVE_VERSION 1u
#define RC_OBSERVE_JOB_MAX 32 /* bytes of job_id, NUL included */
#define RC_OBSERVE_OP_MAX 32  /* bytes of op, NUL included */

/* flags */
#define RC_OBSERVE_FLAG_RANK_GUESSED 1u /* no rank in the environment: rank 0 of 1 was assumed */

/* Host byte order: sender and agent share the machine. Every field is naturally aligned, so the
 * layout is the same for every compiler of the platform (checked below). */
struct rc_observe_record_v1 {
  uint32_t magic;       /* RC_OBSERVE_MAGIC */
  uint16_t version;     /* RC_OBSERVE_VERSION */
  uint16_t size;        /* sizeof(struct rc_observe_record_v1) = 144 */
  uint32_t rank;        /* < world_size */
  uint32_t world_size;  /* >= 1 */
  uint64_t comm_id;     /* communicator: the same on every rank of it (0: the job's world) */
  uint64_t bytes;       /* the operation's size as nccl-tests counts it */
  int64_t start_ns;     /* CLOCK_REALTIME, ns since the epoch */
  int64_t end_ns;       /* CLOCK_REALTIME, >= start_ns */
  int32_t status;       /* 0: completed; otherwise the stack's error code */
  uint32_t pid;         /* the sender's process id */
  uint64_t seq;         /* records this process produced before this one (sent or dropped) */
  uint64_t dropped;     /* records this process dropped so far (socket full, no agent) */
  uint32_t flags;       /* RC_OBSERVE_FLAG_* */
  uint32_t reserved;    /* 0 */
  char job_id[RC_OBSERVE_JOB_MAX]; /* NUL-terminated, [A-Za-z0-9._:@+-]*, "" if none */
  char op[RC_OBSERVE_OP_MAX];      /* NUL-terminated, [A-Za-z0-9._:@+-]+, e.g. "MPI_Allreduce" */
};

#ifdef __cplusplus
static_assert(sizeof(rc_observe_record_v1) == 144, "the v1 record is 144 bytes");
#else
_Static_assert(sizeof(struct rc_observe_record_v1) == 144, "the v1 record is 144 bytes");
#endif

#ifdef __cplusplus
}
#endif

#endif
