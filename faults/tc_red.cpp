// RED/ECN root qdisc through raw rtnetlink (see tc_red.hpp).
#include "faults/tc_red.hpp"

#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>

#include "common/unique_fd.hpp"
#include "faults/netlink.hpp"

namespace rc::faults::tcred {
namespace {

class Builder {
 public:
  Builder(uint16_t type, uint16_t flags, uint32_t seq) {
    buf_.resize(NLMSG_HDRLEN);
    auto* h = hdr();
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
    h->nlmsg_seq = seq;
  }
  template <typename T>
  void put(const T& v) {
    size_t off = buf_.size();
    buf_.resize(off + NLMSG_ALIGN(sizeof v));
    std::memcpy(buf_.data() + off, &v, sizeof v);
  }
  size_t openAttr(uint16_t type) {
    size_t off = buf_.size();
    rtattr a{};
    a.rta_type = type;
    put(a);
    return off;
  }
  void closeAttr(size_t off) {
    auto* a = reinterpret_cast<rtattr*>(buf_.data() + off);
    a->rta_len = uint16_t(buf_.size() - off);
  }
  void attr(uint16_t type, const void* data, size_t len) {
    size_t off = openAttr(type);
    size_t at = buf_.size();
    buf_.resize(at + RTA_ALIGN(len));
    std::memcpy(buf_.data() + at, data, len);
    reinterpret_cast<rtattr*>(buf_.data() + off)->rta_len = uint16_t(RTA_LENGTH(len));
  }
  std::vector<uint8_t> done() {
    hdr()->nlmsg_len = uint32_t(buf_.size());
    return std::move(buf_);
  }

 private:
  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }
  std::vector<uint8_t> buf_;
};

tcmsg rootTcmsg(int ifindex) {
  tcmsg t{};
  t.tcm_family = AF_UNSPEC;
  t.tcm_ifindex = ifindex;
  t.tcm_parent = TC_H_ROOT;
  return t;
}

// The TCA_KIND of a qdisc request built above ("" if none).
std::string requestKind(const std::vector<uint8_t>& message) {
  auto* h = reinterpret_cast<const nlmsghdr*>(message.data());
  int len = int(h->nlmsg_len) - int(NLMSG_LENGTH(sizeof(tcmsg)));
  auto* a = reinterpret_cast<const rtattr*>(message.data() + NLMSG_LENGTH(sizeof(tcmsg)));
  for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
    if (a->rta_type == TCA_KIND)
      return std::string(static_cast<const char*>(RTA_DATA(a)), strnlen(static_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a)));
  return {};
}

}  // namespace

int redWlog(uint32_t qmin, uint32_t qmax, uint32_t avpkt) {
  // The EWMA weight W = 2^-Wlog must let the average reach qmin within a burst of
  // (2 qmin + qmax) / (3 avpkt) packets arriving at an empty queue.
  double burst = (2.0 * qmin + qmax) / (3.0 * avpkt);
  double target = burst + 1 - double(qmin) / avpkt;
  double w = 1.0;
  for (int wlog = 1; wlog < 32; wlog++, w /= 2)
    if (target <= (1 - std::pow(1 - w, burst)) / w) return wlog;
  return -1;
}

int redPlog(uint32_t qmin, uint32_t qmax, double prob) {
  // The kernel computes the probability at qmax as (avg - qmin) / 2^Plog.
  double p = prob / std::max<double>(1, double(qmax - qmin));
  for (int i = 0; i < 32; i++) {
    if (p > 1.0) return i;
    p *= 2;
  }
  return -1;
}

Result<std::vector<uint8_t>> buildAddRed(const RedParams& p, uint32_t seq) {
  if (p.ifindex <= 0) return makeError("tc-red: no interface");
  if (p.kminBytes == 0 || p.kmaxBytes <= p.kminBytes)
    return makeError("tc-red: kmin must be > 0 and below kmax");
  if (!(p.pmax > 0 && p.pmax <= 1)) return makeError("tc-red: pmax must be within (0, 1]");
  int wlog = redWlog(p.kminBytes, p.kmaxBytes, p.avpktBytes);
  int plog = redPlog(p.kminBytes, p.kmaxBytes, p.pmax);
  if (wlog < 0 || plog < 0) return makeError("tc-red: thresholds too small for RED's parameters");
  tc_red_qopt q{};
  q.limit = p.kmaxBytes * 4;
  q.qth_min = p.kminBytes;
  q.qth_max = p.kmaxBytes;
  q.Wlog = uint8_t(wlog);
  q.Plog = uint8_t(plog);
  q.Scell_log = 0;  // with an all-zero idle table the average does not decay while idle
  q.flags = TC_RED_ECN;
  uint8_t stab[256] = {};
  uint32_t maxP = uint32_t(std::min(p.pmax * 4294967296.0, 4294967295.0));
  Builder b(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, seq);
  b.put(rootTcmsg(p.ifindex));
  b.attr(TCA_KIND, "red", 4);
  size_t opts = b.openAttr(TCA_OPTIONS);
  b.attr(TCA_RED_PARMS, &q, sizeof q);
  b.attr(TCA_RED_STAB, stab, sizeof stab);
  b.attr(TCA_RED_MAX_P, &maxP, sizeof maxP);
  b.closeAttr(opts);
  return b.done();
}

std::vector<uint8_t> buildDeleteRoot(int ifindex, uint32_t seq) {
  Builder b(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, seq);
  b.put(rootTcmsg(ifindex));
  return b.done();
}

Result<void> send(const std::vector<uint8_t>& message, const std::string& interface) {
  UniqueFD fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.isValid()) return makeError("tc-red: cannot open rtnetlink: " + std::string(std::strerror(errno)), errno);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), message.data(), message.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return makeError("tc-red: rtnetlink send failed: " + std::string(std::strerror(errno)), errno);
  uint8_t buf[8192];
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
  if (n < ssize_t(NLMSG_HDRLEN + sizeof(nlmsgerr)))
    return makeError("tc-red: no answer from the kernel", ETIMEDOUT);
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (h->nlmsg_type != NLMSG_ERROR) return makeError("tc-red: unexpected rtnetlink answer");
  int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
  if (err == 0) return {};
  auto* req = reinterpret_cast<const nlmsghdr*>(message.data());
  if (req->nlmsg_type == RTM_NEWQDISC && requestKind(message) == "red" &&
      (err == ENOENT || err == EOPNOTSUPP || err == EINVAL))
    return makeError("tc-red on '" + interface + "': the kernel refused a RED qdisc (" + std::strerror(err) +
                         "); this kernel lacks sch_red (CONFIG_NET_SCH_RED) or cannot load it — use the "
                         "labswitch backend in the namespace lab, or run in a VM whose kernel has sch_red",
                     err);
  return makeError("tc-red on '" + interface + "': " + std::strerror(err), err);
}

Result<std::vector<Qdisc>> listQdiscs(int ifindex) {
  UniqueFD fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.isValid()) return makeError("tc-red: cannot open rtnetlink: " + std::string(std::strerror(errno)), errno);
  Builder b(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 1);
  tcmsg t{};
  t.tcm_family = AF_UNSPEC;
  t.tcm_ifindex = ifindex;
  b.put(t);
  auto msg = b.done();
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return makeError("tc-red: rtnetlink send failed: " + std::string(std::strerror(errno)), errno);
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<Qdisc> out;
  // This call's own buffer: reverts of two interfaces (or a revert beside the retry thread)
  // dump at the same time.
  std::vector<uint8_t> buf(65536);
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n <= 0)
      return makeError("tc-red: reading the qdiscs of interface " + std::to_string(ifindex) + " failed: " +
                           (n == 0 ? std::string("end of stream") : std::string(std::strerror(errno))),
                       n == 0 ? EIO : errno);
    int left = int(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        std::stable_sort(out.begin(), out.end(), [](const Qdisc& a, const Qdisc& c) {
          bool aRoot = a.parent == TC_H_ROOT, cRoot = c.parent == TC_H_ROOT;
          if (aRoot != cRoot) return aRoot;
          return std::pair(a.parent, a.handle) < std::pair(c.parent, c.handle);
        });
        return out;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
        return makeError("tc-red: qdisc dump failed: " + std::string(std::strerror(err)), err);
      }
      if (h->nlmsg_type != RTM_NEWQDISC || h->nlmsg_len < NLMSG_LENGTH(sizeof(tcmsg))) continue;
      auto* tm = reinterpret_cast<tcmsg*>(NLMSG_DATA(h));
      if (tm->tcm_ifindex != ifindex) continue;
      if (tm->tcm_parent == TC_H_INGRESS || TC_H_MAJ(tm->tcm_handle) == TC_H_MAJ(TC_H_INGRESS)) continue;
      Qdisc q;
      q.handle = tm->tcm_handle;
      q.parent = tm->tcm_parent;
      int len = int(h->nlmsg_len) - int(NLMSG_LENGTH(sizeof *tm));
      for (auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<uint8_t*>(tm) + NLMSG_ALIGN(sizeof *tm));
           RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        auto* p = static_cast<const uint8_t*>(RTA_DATA(a));
        if (a->rta_type == TCA_KIND)
          q.kind.assign(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), RTA_PAYLOAD(a)));
        else if (a->rta_type == TCA_OPTIONS)
          q.options.assign(p, p + RTA_PAYLOAD(a));
        else if (a->rta_type == TCA_STAB)
          q.sizeTable = true;
      }
      out.push_back(std::move(q));
    }
  }
}

Result<std::string> rootKind(int ifindex) {
  auto tree = listQdiscs(ifindex);
  if (!tree) return tree.error();
  if (tree->empty() || tree->front().parent != TC_H_ROOT)
    return makeError("tc-red: interface " + std::to_string(ifindex) + " has no root qdisc", ENOENT);
  return tree->front().kind;
}

namespace {

// Qdiscs with no classes, which a new root replaces whole (their filters, if any, are not kept).
bool classless(const std::string& kind) {
  static const char* const kinds[] = {"noqueue", "pfifo_fast", "pfifo", "bfifo", "pfifo_head_drop", "fq",
                                      "fq_codel", "fq_pie", "codel", "pie", "sfq", "cake"};
  for (const char* k : kinds)
    if (kind == k) return true;
  return false;
}

std::string handleText(uint32_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%x:%x", TC_H_MAJ(h) >> 16, TC_H_MIN(h));
  return buf;
}

std::string describe(const Qdisc& q) {
  return "'" + q.kind + "' " + handleText(q.handle) +
         (q.parent == TC_H_ROOT ? std::string(" root") : " parent " + handleText(q.parent));
}

const Qdisc* byParent(const std::vector<Qdisc>& tree, uint32_t parent) {
  for (const auto& q : tree)
    if (q.parent == parent) return &q;
  return nullptr;
}

// Whether IFINDEX is gone (its qdiscs went with it): only a definite "no such device".
bool interfaceGone(int ifindex) {
  auto link = nl::getLink(ifindex);
  return !link && link.error().code == ENODEV;
}

}  // namespace

std::string unrestorable(const std::vector<Qdisc>& tree) {
  if (tree.empty() || tree.front().parent != TC_H_ROOT) return "it has no root qdisc";
  const Qdisc& root = tree.front();
  for (const auto& q : tree)
    if (q.sizeTable) return "its qdisc " + describe(q) + " has a size table (stab), which is not restored";
  if (root.kind == "mq") {
    for (size_t i = 1; i < tree.size(); i++) {
      const Qdisc& q = tree[i];
      if (TC_H_MAJ(q.parent) != TC_H_MAJ(root.handle) || !classless(q.kind))
        return "its qdisc " + describe(q) + " is not a classless per-queue qdisc of the mq root";
    }
    return {};
  }
  if (!classless(root.kind))
    return "its root qdisc " + describe(root) +
           " has classes (or is one ecn_shift cannot re-create exactly); a new root would destroy them";
  if (tree.size() > 1) return "its qdisc " + describe(tree[1]) + " is not the root";
  return {};
}

std::vector<uint8_t> buildQdisc(int ifindex, const Qdisc& q, bool create, uint32_t seq) {
  uint16_t flags = NLM_F_REQUEST | NLM_F_ACK | (create ? NLM_F_CREATE | NLM_F_REPLACE : 0);
  Builder b(RTM_NEWQDISC, flags, seq);
  tcmsg t{};
  t.tcm_family = AF_UNSPEC;
  t.tcm_ifindex = ifindex;
  t.tcm_parent = q.parent;
  t.tcm_handle = q.handle;
  b.put(t);
  b.attr(TCA_KIND, q.kind.c_str(), q.kind.size() + 1);
  if (!q.options.empty()) b.attr(TCA_OPTIONS, q.options.data(), q.options.size());
  return b.done();
}

Result<void> restoreTree(int ifindex, const std::string& interface, const std::vector<Qdisc>& tree,
                         const std::string& applied) {
  const std::string where = "tc-red revert on '" + interface + "'";
  if (tree.empty() || tree.front().parent != TC_H_ROOT) return makeError(where + ": the snapshot has no root qdisc");
  auto now = listQdiscs(ifindex);
  if (!now) return makeError(where + ": " + now.error().message, now.error().code);
  if (*now == tree) return {};  // already restored (revert is idempotent)
  if (now->empty()) {
    if (interfaceGone(ifindex)) return {};
    return makeError(where + ": the interface has no qdisc to restore over", ENOENT);
  }
  auto sendOrGone = [&](const std::vector<uint8_t>& msg) -> Result<void> {
    auto r = send(msg, interface);
    if (!r && interfaceGone(ifindex)) return {};
    if (!r) return makeError(where + ": " + r.error().message, r.error().code);
    return {};
  };
  const Qdisc& was = tree.front();
  const Qdisc& root = now->front();
  if (root.parent == TC_H_ROOT && root.kind == applied && !(root == was)) {
    // The fault's qdisc: put back the one it replaced. One the kernel made (handle 0) cannot be
    // created by handle: removing the root makes the kernel attach its default again.
    if (was.handle != 0) {
      if (auto r = sendOrGone(buildQdisc(ifindex, was, true, 2)); !r) return r;
    } else if (auto r = sendOrGone(buildDeleteRoot(ifindex, 2)); !r) {
      return r;
    }
  } else if (!(root.parent == TC_H_ROOT && root.kind == was.kind && root.handle == was.handle)) {
    return makeError(where + ": its root qdisc is now " + describe(root) + ", neither the '" + applied +
                         "' this fault set nor the " + describe(was) +
                         " it replaced; left alone (restore it by hand, e.g. `tc qdisc replace dev " + interface +
                         " root ...`, and the revert is retried)",
                     EBUSY);
  }
  // The rest in the snapshot's order (root first, then mq's per-queue qdiscs): a kernel-made
  // qdisc gets its options back by a change, one created by handle is created again.
  for (const Qdisc& q : tree) {
    auto again = listQdiscs(ifindex);
    if (!again) return makeError(where + ": " + again.error().message, again.error().code);
    if (again->empty() && interfaceGone(ifindex)) return {};
    const Qdisc* cur = byParent(*again, q.parent);
    if (cur && *cur == q) continue;
    bool change = q.handle == 0 && cur && cur->handle == 0 && cur->kind == q.kind;
    if (q.handle == 0 && !change)
      return makeError(where + ": the kernel's " + describe(q) + " did not come back (now: " +
                           (cur ? describe(*cur) : std::string("nothing")) + ")",
                       EAGAIN);
    if (auto r = sendOrGone(buildQdisc(ifindex, q, !change, 3)); !r) return r;
  }
  auto after = listQdiscs(ifindex);
  if (!after) return makeError(where + ": " + after.error().message, after.error().code);
  if (*after == tree || (after->empty() && interfaceGone(ifindex))) return {};
  std::string diff;
  for (size_t i = 0; i < std::max(after->size(), tree.size()) && diff.empty(); i++) {
    if (i >= after->size()) diff = "missing " + describe(tree[i]);
    else if (i >= tree.size()) diff = "extra " + describe((*after)[i]);
    else if (!((*after)[i] == tree[i]))
      diff = "now " + describe((*after)[i]) + ", was " + describe(tree[i]) +
             ((*after)[i].options != tree[i].options ? " (other options)" : "");
  }
  return makeError(where + ": the qdiscs are not what they were: " + diff, EAGAIN);
}

}  // namespace rc::faults::tcred
