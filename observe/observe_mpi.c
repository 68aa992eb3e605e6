/* PMPI wrappers (LD_PRELOAD=.../librdmachaos-observe-mpi.so): each collective below, and the
 * completion of its nonblocking form in MPI_Wait, MPI_Test or MPI_Waitall, becomes one observe
 * record. Bytes are nccl-tests' "size" of the operation, so its bus-bandwidth factors apply. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "observe_internal.h"

#define RC_MPI_API __attribute__((visibility("default")))

/* What a communicator is, worked out once and kept as its attribute. */
struct comm_info {
  uint64_t id; /* 0 for MPI_COMM_WORLD; else a hash of its members' world ranks, the same on each */
  int rank, size;
};

static int keyval = MPI_KEYVAL_INVALID;
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;

static int free_info(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)extra;
  free(value);
  return MPI_SUCCESS;
}
static void make_keyval(void) { PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_info, &keyval, NULL); }

static struct comm_info info_of(MPI_Comm comm) {
  struct comm_info out = {0, 0, 1};
  if (comm == MPI_COMM_NULL) return out; /* a failed call's: asking its attributes would fail again */
  pthread_once(&keyval_once, make_keyval);
  void *value = NULL;
  int found = 0;
  if (keyval != MPI_KEYVAL_INVALID && PMPI_Comm_get_attr(comm, keyval, &value, &found) == MPI_SUCCESS && found)
    return *(struct comm_info *)value;
  PMPI_Comm_rank(comm, &out.rank);
  PMPI_Comm_size(comm, &out.size);
  int worldSize = 0, isWorld = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  PMPI_Comm_compare(comm, MPI_COMM_WORLD, &isWorld);
  if (isWorld != MPI_IDENT) {
    MPI_Group group, world;
    int *mine = malloc(sizeof(int) * (size_t)out.size * 2);
    if (mine && PMPI_Comm_group(comm, &group) == MPI_SUCCESS) {
      PMPI_Comm_group(MPI_COMM_WORLD, &world);
      for (int i = 0; i < out.size; i++) mine[i] = i;
      PMPI_Group_translate_ranks(group, out.size, mine, world, mine + out.size);
      uint64_t h = 1469598103934665603ULL; /* FNV-1a over the members' world ranks */
      for (int i = 0; i < out.size; i++) h = (h ^ (uint64_t)(uint32_t)mine[out.size + i]) * 1099511628211ULL;
      out.id = h ? h : 1;
      PMPI_Group_free(&group);
      PMPI_Group_free(&world);
    }
    free(mine);
  }
  struct comm_info *keep = malloc(sizeof *keep);
  if (keep && keyval != MPI_KEYVAL_INVALID) {
    *keep = out;
    if (PMPI_Comm_set_attr(comm, keyval, keep) != MPI_SUCCESS) free(keep);
  } else {
    free(keep);
  }
  return out;
}

static uint64_t type_bytes(MPI_Datatype t, int count) {
  int size = 0;
  if (count <= 0 || PMPI_Type_size(t, &size) != MPI_SUCCESS || size < 0) return 0;
  return (uint64_t)count * (uint64_t)size;
}

static void emit(const char *op, MPI_Comm comm, uint64_t bytes, int64_t start, int rc) {
  int64_t end = rc_observe_now_ns();
  if (comm == MPI_COMM_NULL) return; /* the call failed on it; asking its attributes would fail again */
  struct comm_info c = info_of(comm);
  rc_observe_emit(op, c.id, (uint32_t)c.rank, (uint32_t)c.size, bytes, start, end, rc);
}

/* Nonblocking collectives in flight, found again by their request when they complete. */
#define PENDING_MAX 1024
static struct pending {
  MPI_Request req;
  const char *op;
  MPI_Comm comm;
  uint64_t bytes;
  int64_t start;
} pending[PENDING_MAX];
static int pending_used;
static _Atomic int pending_count; /* lets a wait with nothing pending skip the lock */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember(const char *op, MPI_Comm comm, uint64_t bytes, int64_t start, MPI_Request req, int rc) {
  if (rc != MPI_SUCCESS) {
    emit(op, comm, bytes, start, rc);
    return;
  }
  pthread_mutex_lock(&pending_lock);
  int slot = -1;
  for (int i = 0; i < pending_used && slot < 0; i++)
    if (pending[i].op == NULL) slot = i;
  if (slot < 0 && pending_used < PENDING_MAX) slot = pending_used++;
  if (slot >= 0) {
    pending[slot] = (struct pending){req, op, comm, bytes, start};
    atomic_fetch_add(&pending_count, 1);
  }
  pthread_mutex_unlock(&pending_lock);
  /* A full table (requests completed where no wrapper sees them) loses this one's record. */
}

/* REQ (its value before completion) has completed with RC: its record, if it is ours. */
static void completed(MPI_Request req, int rc) {
  if (req == MPI_REQUEST_NULL || atomic_load(&pending_count) == 0) return;
  struct pending found = {0};
  pthread_mutex_lock(&pending_lock);
  for (int i = 0; i < pending_used; i++) {
    if (pending[i].op && pending[i].req == req) {
      found = pending[i];
      pending[i].op = NULL;
      atomic_fetch_sub(&pending_count, 1);
      break;
    }
  }
  pthread_mutex_unlock(&pending_lock);
  if (found.op) emit(found.op, found.comm, found.bytes, found.start, rc);
}

/* Blocking collectives. */
RC_MPI_API int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Allreduce(s, r, count, t, op, comm);
  emit("MPI_Allreduce", comm, type_bytes(t, count), start, rc);
  return rc;
}

RC_MPI_API int MPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rcount, MPI_Datatype rt,
                             MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Allgather(s, sc, st, r, rcount, rt, comm);
  emit("MPI_Allgather", comm, type_bytes(rt, rcount) * (uint64_t)info_of(comm).size, start, rc);
  return rc;
}

RC_MPI_API int MPI_Alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rcount, MPI_Datatype rt,
                            MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Alltoall(s, sc, st, r, rcount, rt, comm);
  emit("MPI_Alltoall", comm, type_bytes(st, sc) * (uint64_t)info_of(comm).size, start, rc);
  return rc;
}

RC_MPI_API int MPI_Bcast(void *b, int count, MPI_Datatype t, int root, MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Bcast(b, count, t, root, comm);
  emit("MPI_Bcast", comm, type_bytes(t, count), start, rc);
  return rc;
}

static uint64_t sum_counts(const int counts[], MPI_Datatype t, MPI_Comm comm) {
  uint64_t n = 0;
  int size = info_of(comm).size;
  for (int i = 0; counts && i < size; i++) n += type_bytes(t, counts[i]);
  return n;
}

RC_MPI_API int MPI_Reduce_scatter(const void *s, void *r, const int counts[], MPI_Datatype t, MPI_Op op,
                                  MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Reduce_scatter(s, r, counts, t, op, comm);
  emit("MPI_Reduce_scatter", comm, sum_counts(counts, t, comm), start, rc);
  return rc;
}

RC_MPI_API int MPI_Reduce_scatter_block(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op,
                                        MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Reduce_scatter_block(s, r, count, t, op, comm);
  emit("MPI_Reduce_scatter_block", comm, type_bytes(t, count) * (uint64_t)info_of(comm).size, start, rc);
  return rc;
}

RC_MPI_API int MPI_Barrier(MPI_Comm comm) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Barrier(comm);
  emit("MPI_Barrier", comm, 0, start, rc);
  return rc;
}

/* Nonblocking collectives: timed from their start to the completion a wrapper below sees. */
RC_MPI_API int MPI_Iallreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                              MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Iallreduce(s, r, count, t, op, comm, req);
  remember("MPI_Iallreduce", comm, type_bytes(t, count), start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Iallgather(const void *s, int sc, MPI_Datatype st, void *r, int rcount, MPI_Datatype rt,
                              MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Iallgather(s, sc, st, r, rcount, rt, comm, req);
  remember("MPI_Iallgather", comm, type_bytes(rt, rcount) * (uint64_t)info_of(comm).size, start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Ialltoall(const void *s, int sc, MPI_Datatype st, void *r, int rcount, MPI_Datatype rt,
                             MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Ialltoall(s, sc, st, r, rcount, rt, comm, req);
  remember("MPI_Ialltoall", comm, type_bytes(st, sc) * (uint64_t)info_of(comm).size, start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Ibcast(void *b, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Ibcast(b, count, t, root, comm, req);
  remember("MPI_Ibcast", comm, type_bytes(t, count), start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Ireduce_scatter(const void *s, void *r, const int counts[], MPI_Datatype t, MPI_Op op,
                                   MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Ireduce_scatter(s, r, counts, t, op, comm, req);
  remember("MPI_Ireduce_scatter", comm, sum_counts(counts, t, comm), start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Ireduce_scatter_block(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op,
                                         MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Ireduce_scatter_block(s, r, count, t, op, comm, req);
  remember("MPI_Ireduce_scatter_block", comm, type_bytes(t, count) * (uint64_t)info_of(comm).size, start, *req, rc);
  return rc;
}

RC_MPI_API int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req) {
  int64_t start = rc_observe_now_ns();
  int rc = PMPI_Ibarrier(comm, req);
  remember("MPI_Ibarrier", comm, 0, start, *req, rc);
  return rc;
}

/* Completions. The request's value is taken before the call: MPI sets a completed one to
 * MPI_REQUEST_NULL. */
RC_MPI_API int MPI_Wait(MPI_Request *req, MPI_Status *status) {
  MPI_Request before = *req;
  int rc = PMPI_Wait(req, status);
  completed(before, rc);
  return rc;
}

RC_MPI_API int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
  MPI_Request before = *req;
  int rc = PMPI_Test(req, flag, status);
  if (rc != MPI_SUCCESS || *flag) completed(before, rc);
  return rc;
}

RC_MPI_API int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[]) {
  if (atomic_load(&pending_count) == 0 || count <= 0) return PMPI_Waitall(count, reqs, statuses);
  MPI_Request few[64];
  MPI_Request *before = count <= 64 ? few : malloc(sizeof(MPI_Request) * (size_t)count);
  if (before) memcpy(before, reqs, sizeof(MPI_Request) * (size_t)count);
  int rc = PMPI_Waitall(count, reqs, statuses);
  for (int i = 0; before && i < count; i++) completed(before[i], rc);
  if (before != few) free(before);
  return rc;
}
