// Move-only owners of the librdmacm/ibverbs handles (the verbs workload transport, the verbs
// incast generator), with the three verbs error styles (NULL+errno, returned errno, -1+errno)
// turned into Result values here. Header-only: only code built with rdma-core includes it.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <netinet/in.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "common/result.hpp"

namespace rc::verbs {

template <typename T, void (*Destroy)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) : p_(p) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : p_(o.release()) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  [[nodiscard]] T* release() { return std::exchange(p_, nullptr); }
  void reset(T* p = nullptr) {
    if (p_) Destroy(p_);
    p_ = p;
  }

 private:
  T* p_ = nullptr;
};

// Destroy functions whose failures cannot be acted on (the handle is gone either way).
inline void destroyChannel(rdma_event_channel* c) { rdma_destroy_event_channel(c); }
// An id's QP (created with rdma_create_qp) goes first: rdma_destroy_id does not destroy it.
inline void destroyId(rdma_cm_id* id) {
  if (id->qp) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}
inline void destroyPd(ibv_pd* p) { ibv_dealloc_pd(p); }
inline void destroyMr(ibv_mr* m) { ibv_dereg_mr(m); }
inline void destroyCq(ibv_cq* c) { ibv_destroy_cq(c); }
inline void destroyCompChannel(ibv_comp_channel* c) { ibv_destroy_comp_channel(c); }
inline void destroyQp(ibv_qp* q) { ibv_destroy_qp(q); }

using EventChannel = Handle<rdma_event_channel, destroyChannel>;
using CmId = Handle<rdma_cm_id, destroyId>;  // owns its QP too
using Pd = Handle<ibv_pd, destroyPd>;
using Mr = Handle<ibv_mr, destroyMr>;
using Cq = Handle<ibv_cq, destroyCq>;
using CompChannel = Handle<ibv_comp_channel, destroyCompChannel>;
using QpHandle = Handle<ibv_qp, destroyQp>;  // created with ibv_create_qp

// "-1 + errno" and "NULL + errno" calls: ERR is errno right after the call.
inline Error sysError(const std::string& what, int err) {
  return makeError(what + ": " + std::strerror(err), err);
}
// Calls that return the error number themselves (ibv_post_send, ibv_req_notify_cq, ...).
inline Result<void> checkRet(int ret, const std::string& what) {
  if (ret == 0) return {};
  return sysError(what, ret > 0 ? ret : errno);
}
inline Result<void> checkMinus1(int ret, const std::string& what) {
  if (ret == 0) return {};
  return sysError(what, errno);
}

// The index of the RoCEv2 GID of IPv4 address ADDR (::ffff:a.b.c.d) on CTX's PORT, entry by
// entry from 0: the kernel fills the lowest free slot, so an address's GID sits among the
// first few, and a whole-table query may read sysfs per entry (slow under TCG). -1 = none.
inline int roceV2GidIndex(ibv_context* ctx, uint8_t port, int tableLen, const in_addr& addr) {
  uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(&want[12], &addr, 4);
  for (int i = 0, empty = 0; i < tableLen && empty < 8; i++) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, uint32_t(i), &e, 0) != 0) {
      empty++;
      continue;
    }
    empty = 0;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && std::memcmp(e.gid.raw, want, 16) == 0) return i;
  }
  return -1;
}

// The two transitions of an RC QP that both verbs users make, every attribute named by the
// caller. The QP is given remote write access in INIT; RTR goes towards the peer's GID (the
// kernel resolves its MAC) and RTS follows with the caller's timeout and retry counts. Errors
// name the step after PREFIX ("ibv_modify_qp (RTR)").
struct RcPeer {
  uint32_t qpn = 0, psn = 0;
  const uint8_t* gid = nullptr;  // 16 bytes
};
struct RcPath {
  uint8_t port = 1;
  ibv_mtu mtu = IBV_MTU_1024;
  int gidIndex = 0;
  uint8_t trafficClass = 0;
};
struct RcRetry {
  uint8_t timeout = 14, retryCount = 7, rnrRetry = 7;
};

inline Result<void> qpToInit(ibv_qp* qp, uint8_t port, const std::string& prefix) {
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.pkey_index = 0;
  m.port_num = port;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  return checkRet(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                  prefix + "ibv_modify_qp (INIT)");
}

inline Result<void> qpToRts(ibv_qp* qp, const RcPath& path, const RcPeer& peer, uint32_t psn, const RcRetry& retry,
                            const std::string& prefix) {
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = path.mtu;
  m.dest_qp_num = peer.qpn;
  m.rq_psn = peer.psn & 0xffffff;
  m.max_dest_rd_atomic = 1;
  m.min_rnr_timer = 12;
  m.ah_attr.is_global = 1;
  std::memcpy(m.ah_attr.grh.dgid.raw, peer.gid, 16);
  m.ah_attr.grh.sgid_index = uint8_t(path.gidIndex);
  m.ah_attr.grh.hop_limit = 64;
  m.ah_attr.grh.traffic_class = path.trafficClass;
  m.ah_attr.port_num = path.port;
  if (auto r = checkRet(ibv_modify_qp(qp, &m,
                                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
                        prefix + "ibv_modify_qp (RTR)");
      !r)
    return r;
  ibv_qp_attr t{};
  t.qp_state = IBV_QPS_RTS;
  t.timeout = retry.timeout;
  t.retry_cnt = retry.retryCount;
  t.rnr_retry = retry.rnrRetry;
  t.sq_psn = psn;
  t.max_rd_atomic = 1;
  return checkRet(ibv_modify_qp(qp, &t,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC),
                  prefix + "ibv_modify_qp (RTS)");
}

}  // namespace rc::verbs
