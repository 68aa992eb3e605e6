/* The NCCL profiler plugin (NCCL_PROFILER_PLUGIN=.../librdmachaos-observe.so): exports
 * ncclProfiler_v1 to _v6 and reports each collective's and each point-to-point group's
 * completion with its bytes.
 *
 * NCCL's stopEvent of a collective or p2p only means "enqueued"; the operation has completed
 * when its proxy operations and kernel channels (its children) have stopped too. So an event
 * counts its open children and reports when, enqueued, it has none left. A communicator whose
 * operations never had children (intra-node, before kernel channel events) reports at the
 * enqueue: the only time NCCL gives (its README's "known limitations").
 *
 * Events live in a fixed pool and are never freed: NCCL may start a child of an event after
 * that event was reported (a child that starts after its siblings all stopped), and the handle
 * it passes must still point at our memory. A slot in use for over a minute (an operation
 * whose children never came) is taken back. Contexts are never freed either, for the same
 * reason: a late event may still name its context after finalize. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"
#include "observe_internal.h"

enum kind { GROUP = 1, COLL, P2P, CHILD };

struct context {
  uint64_t comm;
  int rank, nranks;        /* -1: not known at init (v1-v3) */
  _Atomic int sawChildren; /* its operations have children: wait for them */
};

#define POOL 16384
#define STALE_NS (60LL * 1000000000LL)

/* Fields a late child may read while the slot is being taken for another event are atomics
 * (relaxed): such a child may be attached to the wrong event, never read torn memory. */
struct event {
  _Atomic int live;      /* 0: free */
  _Atomic int kind;
  _Atomic int refs;      /* itself until enqueued, plus each open child; 0: done */
  _Atomic int children;  /* children started so far */
  _Atomic int waiting;   /* enqueued with no child yet: the first child drops its own reference */
  struct event *parent;  /* a p2p's group; a child's collective or p2p */
  struct context *_Atomic ctx;
  uint64_t comm;
  uint32_t rank, world;
  uint64_t bytes;
  _Atomic uint64_t groupBytes; /* a group: the bytes of its completed p2p operations */
  _Atomic int groupP2p;        /* a group: p2p operations it holds */
  _Atomic int64_t startNs;
  char op[RC_OBSERVE_OP_MAX];
};

static struct event pool[POOL];
static _Atomic uint32_t cursor;

/* P as one of our live events, or NULL. */
static struct event *ours(void *p) {
  struct event *e = p;
  if (!e || e < pool || e >= pool + POOL || (size_t)((char *)e - (char *)pool) % sizeof *e != 0) return NULL;
  return atomic_load(&e->live) ? e : NULL;
}

static size_t type_size(const char *t) {
  if (!t) return 1;
  if (strstr(t, "64")) return 8;
  if (strstr(t, "32")) return 4;
  if (strstr(t, "16")) return 2;
  return 1; /* ncclInt8, ncclUint8, the fp8 types, and "Unknown" */
}
static size_t type_size_v1(uint8_t t) {
  static const uint8_t size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return t < sizeof size ? size[t] : 1;
}
static const char *func_name_v1(uint8_t f) {
  static const char *names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
                                "SendRecv",  "Send",   "Recv",      "AlltoAll",      "Scatter", "Gather"};
  return f < sizeof names / sizeof names[0] ? names[f] : "Unknown";
}

/* The size nccl-tests reports for this collective: the gathered or scattered whole for the
 * collectives whose count is one rank's share. */
static uint64_t coll_bytes(const char *func, size_t count, size_t elem, uint32_t world) {
  uint64_t b = (uint64_t)count * elem;
  if (!strcmp(func, "AllGather") || !strcmp(func, "ReduceScatter") || !strcmp(func, "AlltoAll") ||
      !strcmp(func, "Gather") || !strcmp(func, "Scatter"))
    b *= world;
  return b;
}

static void release(struct event *e);

static void finish(struct event *e) {
  int64_t end = rc_observe_now_ns();
  /* Copied out first: once not live, the slot may be taken for another event. */
  enum kind kind = (enum kind)atomic_load(&e->kind);
  struct event *parent = e->parent;
  char op[RC_OBSERVE_OP_MAX];
  snprintf(op, sizeof op, "%s", kind == GROUP ? "ncclP2pGroup" : e->op);
  uint64_t comm = e->comm, bytes = kind == GROUP ? atomic_load(&e->groupBytes) : e->bytes;
  uint32_t rank = e->rank, world = e->world;
  int64_t start = e->startNs;
  int report = kind == COLL || (kind == P2P && !parent) || (kind == GROUP && atomic_load(&e->groupP2p) > 0);
  atomic_store(&e->live, 0);
  if (kind == P2P && parent) atomic_fetch_add(&parent->groupBytes, bytes);
  if (report) rc_observe_emit(op, comm, rank, world, bytes, start, end, 0);
  if ((kind == P2P || kind == CHILD) && parent) release(parent);
}

static void release(struct event *e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) finish(e);
}

/* One more reference to E unless it is done already (a child that comes too late). */
static int hold(struct event *e) {
  int r = atomic_load(&e->refs);
  while (r > 0)
    if (atomic_compare_exchange_weak(&e->refs, &r, r + 1)) return 1;
  return 0;
}

static struct event *take_slot(void) {
  int64_t now = rc_observe_now_ns();
  for (int k = 0; k < 64; k++) {
    struct event *e = &pool[atomic_fetch_add(&cursor, 1) % POOL];
    int expected = 0;
    if (atomic_compare_exchange_strong(&e->live, &expected, 1)) return e;
    /* Its children never came: taken back, unreported. */
    if (now - e->startNs > STALE_NS && atomic_compare_exchange_strong(&e->live, &expected, 1)) return e;
  }
  return NULL; /* NCCL takes a NULL handle as "not followed" */
}

static struct event *new_event(enum kind k, struct context *c, uint64_t comm, int rank) {
  struct event *e = take_slot();
  if (!e) return NULL;
  atomic_store(&e->kind, (int)k);
  atomic_store(&e->refs, 1);
  atomic_store(&e->children, 0);
  atomic_store(&e->waiting, 0);
  atomic_store(&e->groupBytes, 0);
  atomic_store(&e->groupP2p, 0);
  e->parent = NULL;
  e->ctx = c;
  e->comm = comm;
  e->bytes = 0;
  e->op[0] = '\0';
  uint32_t envRank, envWorld;
  rc_observe_identity(&envRank, &envWorld);
  int r = c && c->rank >= 0 ? c->rank : rank;
  e->rank = r >= 0 ? (uint32_t)r : envRank;
  e->world = c && c->nranks > 0 ? (uint32_t)c->nranks : envWorld;
  if (e->world <= e->rank) e->world = e->rank + 1;
  e->startNs = rc_observe_now_ns();
  return e;
}

static void name_op(struct event *e, const char *func) {
  snprintf(e->op, sizeof e->op, "nccl%s", func && rc_observe_name_ok(func) ? func : "Unknown");
}

/* What every version's startEvent does once the descriptor is read. */
struct seen {
  uint64_t type;
  void *parentObj, *parentGroup;
  int rank;
  uint64_t commHash; /* v1-v3 carry it per event */
  const char *func;
  size_t count, elem;
  pid_t proxyPid;
};

static rcNcclResult_t start(void *context, void **handle, const struct seen *s) {
  struct context *c = context;
  *handle = NULL;
  uint64_t comm = c && c->comm ? c->comm : s->commHash; /* v1-v3: the communicator is on the event */
  if (s->type == RC_NCCL_GROUP) {
    *handle = new_event(GROUP, c, comm, s->rank);
  } else if (s->type == RC_NCCL_COLL || s->type == RC_NCCL_P2P) {
    struct event *e = new_event(s->type == RC_NCCL_COLL ? COLL : P2P, c, comm, s->rank);
    if (!e) return rcNcclSuccess;
    name_op(e, s->func);
    e->bytes = s->type == RC_NCCL_COLL ? coll_bytes(s->func ? s->func : "", s->count, s->elem, e->world)
                                       : (uint64_t)s->count * s->elem;
    struct event *group = ours(s->parentGroup);
    if (s->type == RC_NCCL_P2P && group && group->kind == GROUP && hold(group)) {
      atomic_fetch_add(&group->groupP2p, 1);
      if (group->comm == 0) group->comm = e->comm; /* v1-v3: group events carry no communicator */
      e->parent = group;
    }
    *handle = e;
  } else if (s->type == RC_NCCL_PROXY_OP || s->type == RC_NCCL_KERNEL_CH) {
    /* A proxy operation run for another process (PXN) points into that process's memory. */
    if (s->type == RC_NCCL_PROXY_OP && s->proxyPid != getpid()) return rcNcclSuccess;
    struct event *p = ours(s->parentObj);
    if (!p || (p->kind != COLL && p->kind != P2P) || !hold(p)) return rcNcclSuccess;
    struct event *e = new_event(CHILD, NULL, 0, 0);
    if (!e) {
      release(p);
      return rcNcclSuccess;
    }
    e->parent = p;
    atomic_fetch_add(&p->children, 1);
    if (p->ctx) atomic_store(&p->ctx->sawChildren, 1);
    /* Its stop found no child and kept its own reference for the first one to drop. */
    if (atomic_exchange(&p->waiting, 0)) release(p);
    *handle = e;
  }
  return rcNcclSuccess;
}

/* A collective or p2p is enqueued, not done. When its communicator's operations have children
 * and none of its own has started yet, it keeps its own reference until the first one starts
 * (both sides take `waiting` by exchange: exactly one of them drops it). */
static rcNcclResult_t stop_event(void *handle) {
  struct event *e = ours(handle);
  if (!e) return rcNcclSuccess;
  if ((e->kind == COLL || e->kind == P2P) && e->ctx && atomic_load(&e->ctx->sawChildren)) {
    atomic_store(&e->waiting, 1);
    if (atomic_load(&e->children) == 0) return rcNcclSuccess;
    if (atomic_exchange(&e->waiting, 0)) release(e);
    return rcNcclSuccess;
  }
  release(e);
  return rcNcclSuccess;
}

static rcNcclResult_t record_state(void *handle, int state, rc_nccl_state_args *args) {
  (void)handle, (void)state, (void)args;
  return rcNcclSuccess;
}

static rcNcclResult_t finalize(void *context) {
  (void)context; /* kept: a late event may still name it (see the top of this file) */
  return rcNcclSuccess;
}

static const int kMask = RC_NCCL_GROUP | RC_NCCL_COLL | RC_NCCL_P2P | RC_NCCL_PROXY_OP | RC_NCCL_KERNEL_CH;

static rcNcclResult_t make_context(void **context, int *mask, uint64_t comm, int nranks, int rank) {
  struct context *c = calloc(1, sizeof *c);
  if (!c) return rcNcclInternalError;
  c->comm = comm;
  c->nranks = nranks;
  c->rank = rank;
  *context = c;
  *mask = kMask;
  return rcNcclSuccess;
}

static rcNcclResult_t init_v1(void **context, int *mask) {
  /* v1 and v2 have no kernel channel events: the bit is NCCL's to ignore. */
  return make_context(context, mask, 0, -1, -1);
}
static rcNcclResult_t init_v4(void **context, int *mask, const char *name, uint64_t commHash, int nNodes,
                              int nranks, int rank, rcNcclLogger_t log) {
  (void)name, (void)nNodes, (void)log;
  return make_context(context, mask, commHash, nranks, rank);
}
static rcNcclResult_t init_v5(void **context, uint64_t commId, int *mask, const char *name, int nNodes,
                              int nranks, int rank, rcNcclLogger_t log) {
  (void)name, (void)nNodes, (void)log;
  return make_context(context, mask, commId, nranks, rank);
}

static rcNcclResult_t start_v1(void *context, void **handle, rc_nccl_descr_v1 *d) {
  struct seen s = {.type = d->type, .parentObj = d->parentObj, .rank = d->rank};
  if (d->type == RC_NCCL_COLL)
    s.commHash = d->coll.commHash, s.func = func_name_v1(d->coll.func), s.count = d->coll.count,
    s.elem = type_size_v1(d->coll.datatype), s.parentGroup = d->parentObj;
  if (d->type == RC_NCCL_P2P)
    s.commHash = d->p2p.commHash, s.func = func_name_v1(d->p2p.func), s.count = d->p2p.count,
    s.elem = type_size_v1(d->p2p.datatype), s.parentGroup = d->parentObj;
  if (d->type == RC_NCCL_PROXY_OP) s.proxyPid = d->proxyOp.pid;
  return start(context, handle, &s);
}

/* v2 and v3 read the same members (their layouts differ after them). */
#define START_V2(version)                                                                         \
  static rcNcclResult_t start_v##version(void *context, void **handle, rc_nccl_descr_v##version *d) { \
    struct seen s = {.type = d->type, .parentObj = d->parentObj, .rank = d->rank};                 \
    if (d->type == RC_NCCL_COLL)                                                                  \
      s.commHash = d->coll.commHash, s.func = d->coll.func, s.count = d->coll.count,              \
      s.elem = type_size(d->coll.datatype), s.parentGroup = d->parentObj;                         \
    if (d->type == RC_NCCL_P2P)                                                                   \
      s.commHash = d->p2p.commHash, s.func = d->p2p.func, s.count = d->p2p.count,                 \
      s.elem = type_size(d->p2p.datatype), s.parentGroup = d->parentObj;                          \
    if (d->type == RC_NCCL_PROXY_OP) s.proxyPid = d->proxyOp.pid;                                 \
    return start(context, handle, &s);                                                            \
  }
START_V2(2)
START_V2(3)

static rcNcclResult_t start_v4(void *context, void **handle, rc_nccl_descr_v4 *d) {
  struct seen s = {.type = d->type, .parentObj = d->parentObj, .rank = d->rank};
  if (d->type == RC_NCCL_COLL)
    s.func = d->coll.func, s.count = d->coll.count, s.elem = type_size(d->coll.datatype), s.parentGroup = d->parentObj;
  if (d->type == RC_NCCL_P2P)
    s.func = d->p2p.func, s.count = d->p2p.count, s.elem = type_size(d->p2p.datatype), s.parentGroup = d->parentObj;
  if (d->type == RC_NCCL_PROXY_OP) s.proxyPid = d->proxyOp.pid;
  return start(context, handle, &s);
}

/* v5 and v6: the group is parentGroup (parentObj is the API event, which is not asked for). */
#define START_V5(version)                                                                         \
  static rcNcclResult_t start_v##version(void *context, void **handle, rc_nccl_descr_v##version *d) { \
    struct seen s = {.type = d->type, .parentObj = d->parentObj, .rank = d->rank};                 \
    if (d->type == RC_NCCL_COLL)                                                                  \
      s.func = d->coll.func, s.count = d->coll.count, s.elem = type_size(d->coll.datatype),       \
      s.parentGroup = d->coll.parentGroup;                                                        \
    if (d->type == RC_NCCL_P2P)                                                                   \
      s.func = d->p2p.func, s.count = d->p2p.count, s.elem = type_size(d->p2p.datatype),          \
      s.parentGroup = d->p2p.parentGroup;                                                         \
    if (d->type == RC_NCCL_PROXY_OP) s.proxyPid = d->proxyOp.pid;                                 \
    return start(context, handle, &s);                                                            \
  }
START_V5(5)
START_V5(6)

#define PLUGIN_NAME "rdmachaos-observe"
RC_OBSERVE_API const rc_nccl_profiler_v1 ncclProfiler_v1 = {
    .name = PLUGIN_NAME, .init = init_v1, .startEvent = start_v1, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
RC_OBSERVE_API const rc_nccl_profiler_v2 ncclProfiler_v2 = {
    .name = PLUGIN_NAME, .init = init_v1, .startEvent = start_v2, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
RC_OBSERVE_API const rc_nccl_profiler_v3 ncclProfiler_v3 = {
    .name = PLUGIN_NAME, .init = init_v1, .startEvent = start_v3, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
RC_OBSERVE_API const rc_nccl_profiler_v4 ncclProfiler_v4 = {
    .name = PLUGIN_NAME, .init = init_v4, .startEvent = start_v4, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
RC_OBSERVE_API const rc_nccl_profiler_v5 ncclProfiler_v5 = {
    .name = PLUGIN_NAME, .init = init_v5, .startEvent = start_v5, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
RC_OBSERVE_API const rc_nccl_profiler_v6 ncclProfiler_v6 = {
    .name = PLUGIN_NAME, .init = init_v5, .startEvent = start_v6, .stopEvent = stop_event,
    .recordEventState = record_state, .finalize = finalize};
