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

}  // namespace rc::verbs
