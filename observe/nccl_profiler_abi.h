/* NCCL's profiler plugin interface, versions 1 to 6, declared here from what NCCL's
 * plugins/profiler/example/nccl/profiler_v{1..6}.h define (the field order and types NCCL
 * passes; names shortened where NCCL's are long). Only the members the observe plugin reads or
 * the replay test fills are spelled out beyond what layout needs. */
#ifndef RDMACHAOS_NCCL_PROFILER_ABI_H
#define RDMACHAOS_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { rcNcclSuccess = 0, rcNcclInternalError = 3 } rcNcclResult_t;
typedef void (*rcNcclLogger_t)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

/* Event type bits (the descriptor's type, and the activation mask). */
enum {
  RC_NCCL_GROUP = 1 << 0,
  RC_NCCL_COLL = 1 << 1,
  RC_NCCL_P2P = 1 << 2,
  RC_NCCL_PROXY_OP = 1 << 3,
  RC_NCCL_PROXY_STEP = 1 << 4,
  RC_NCCL_PROXY_CTRL = 1 << 5,
  RC_NCCL_KERNEL_CH = 1 << 6, /* v3 on */
  RC_NCCL_NET_PLUGIN = 1 << 7,
  RC_NCCL_GROUP_API = 1 << 8, /* v5 on */
  RC_NCCL_COLL_API = 1 << 9,
  RC_NCCL_P2P_API = 1 << 10,
  RC_NCCL_KERNEL_LAUNCH = 1 << 11,
};

/* Members that are the same in every version that has them. */
struct rc_nccl_proxy_op {
  pid_t pid; /* the originating process: a parent pointer is only ours when it is us */
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};
struct rc_nccl_net_plugin {
  int64_t id;
  void *data;
};

/* v1 (NCCL 2.23): func and datatype are enum values. */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t trafficBytes;
      uint8_t nMaxChannels, nWarps, algo, proto;
      int isCollnet, isNvls;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      uint8_t func;
      void *buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    struct rc_nccl_proxy_op proxyOp;
    struct { int step; } proxyStep;
  };
} rc_nccl_descr_v1;

/* v2: func, datatype, algo and proto become strings. */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels, nWarps;
      const char *algo, *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct rc_nccl_proxy_op proxyOp;
    struct { int step; } proxyStep;
  };
} rc_nccl_descr_v2;

/* v3: trafficBytes goes; kernel channel and network plugin events come. */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels, nWarps;
      const char *algo, *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct rc_nccl_proxy_op proxyOp;
    struct { int step; } proxyStep;
    struct { uint8_t channelId; } kernelCh;
    struct rc_nccl_net_plugin netPlugin;
  };
} rc_nccl_descr_v3;

/* v4: name and commHash leave the events (init gets the communicator). */
#define RC_NCCL_V4_COLL          \
  uint64_t seqNumber;            \
  const char *func;              \
  const void *sendBuff;          \
  void *recvBuff;                \
  size_t count;                  \
  int root;                      \
  const char *datatype;          \
  uint8_t nChannels, nWarps;     \
  const char *algo, *proto;
#define RC_NCCL_V4_P2P           \
  const char *func;              \
  void *buff;                    \
  const char *datatype;          \
  size_t count;                  \
  int peer;                      \
  uint8_t nChannels;

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct { RC_NCCL_V4_COLL } coll;
    struct { RC_NCCL_V4_P2P } p2p;
    struct rc_nccl_proxy_op proxyOp;
    struct { int step; } proxyStep;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
    struct rc_nccl_net_plugin netPlugin;
  };
} rc_nccl_descr_v4;

/* v5: a 64-bit type, API-level events, and the legacy group kept as parentGroup. */
#define RC_NCCL_V5_MEMBERS                                                                          \
  struct { bool graphCaptured; int groupDepth; } groupApi;                                          \
  struct { const char *func; size_t count; const char *datatype; int root; void *stream; bool graphCaptured; } collApi; \
  struct { const char *func; size_t count; const char *datatype; void *stream; bool graphCaptured; } p2pApi; \
  struct { void *stream; } kernelLaunch;                                                            \
  struct { RC_NCCL_V4_COLL void *parentGroup; } coll;                                               \
  struct { RC_NCCL_V4_P2P void *parentGroup; } p2p;                                                 \
  struct rc_nccl_proxy_op proxyOp;                                                                  \
  struct { int step; } proxyStep;                                                                   \
  struct { uint8_t channelId; uint64_t pTimer; } kernelCh;                                          \
  struct rc_nccl_net_plugin netPlugin;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    RC_NCCL_V5_MEMBERS
  };
} rc_nccl_descr_v5;

/* v6: copy-engine collectives added to the union (the observe plugin does not ask for them). */
typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    RC_NCCL_V5_MEMBERS
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      const char *syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize, numBatches, ceSeqNum;
      void *stream;
    } ceColl;
    struct { bool isComplete; int nRanks; } ceCollSync;
    struct { int numOps; size_t totalBytes; bool useIntraSync; } ceCollBatch;
  };
} rc_nccl_descr_v6;

/* State updates: v1-v3 and v4-v6 differ; the plugin ignores them, so one opaque type. */
typedef union {
  struct { size_t transSize; int steps; } proxyOp; /* v1-v3 */
  struct { size_t transSize; } proxyStep;          /* v4 on */
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void *data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} rc_nccl_state_args;

#define RC_NCCL_PROFILER_COMMON(descr)                                                        \
  rcNcclResult_t (*startEvent)(void *context, void **eHandle, descr *eDescr);                \
  rcNcclResult_t (*stopEvent)(void *eHandle);                                                \
  rcNcclResult_t (*recordEventState)(void *eHandle, int eState, rc_nccl_state_args *args);   \
  rcNcclResult_t (*finalize)(void *context);

typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, int *eActivationMask);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v1)
} rc_nccl_profiler_v1;
typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, int *eActivationMask);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v2)
} rc_nccl_profiler_v2;
typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, int *eActivationMask);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v3)
} rc_nccl_profiler_v3;
typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, int *eActivationMask, const char *commName, uint64_t commHash,
                         int nNodes, int nranks, int rank, rcNcclLogger_t logfn);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v4)
} rc_nccl_profiler_v4;
typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                         int nNodes, int nranks, int rank, rcNcclLogger_t logfn);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v5)
} rc_nccl_profiler_v5;
typedef struct {
  const char *name;
  rcNcclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                         int nNodes, int nranks, int rank, rcNcclLogger_t logfn);
  RC_NCCL_PROFILER_COMMON(rc_nccl_descr_v6)
} rc_nccl_profiler_v6;

#ifdef __cplusplus
}
#endif

#endif
