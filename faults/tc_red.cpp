// RED/ECN root qdisc through raw rtnetlink (see tc_red.hpp).
#include "faults/tc_red.hpp"

#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/unique_fd.hpp"

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
  if (req->nlmsg_type == RTM_NEWQDISC && (err == ENOENT || err == EOPNOTSUPP || err == EINVAL))
    return makeError("tc-red on '" + interface + "': the kernel refused a RED qdisc (" + std::strerror(err) +
                         "); this kernel lacks sch_red (CONFIG_NET_SCH_RED) or cannot load it — use the "
                         "labswitch backend in the namespace lab, or run in a VM whose kernel has sch_red",
                     err);
  return makeError("tc-red on '" + interface + "': " + std::strerror(err), err);
}

Result<std::string> rootKind(int ifindex) {
  UniqueFD fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.isValid()) return makeError("tc-red: cannot open rtnetlink: " + std::string(std::strerror(errno)), errno);
  Builder b(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 1);
  tcmsg t{};
  t.tcm_family = AF_UNSPEC;
  b.put(t);
  auto msg = b.done();
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return makeError("tc-red: rtnetlink send failed", errno);
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string kind;
  static uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) return makeError("tc-red: reading qdiscs failed", errno);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, size_t(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        if (kind.empty()) return makeError("tc-red: interface " + std::to_string(ifindex) + " has no root qdisc");
        return kind;
      }
      if (h->nlmsg_type == NLMSG_ERROR) return makeError("tc-red: qdisc dump failed");
      auto* tm = reinterpret_cast<tcmsg*>(NLMSG_DATA(h));
      if (tm->tcm_ifindex != ifindex || tm->tcm_parent != TC_H_ROOT) continue;
      int len = int(h->nlmsg_len) - int(NLMSG_LENGTH(sizeof *tm));
      for (auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<uint8_t*>(tm) + NLMSG_ALIGN(sizeof *tm));
           RTA_OK(a, len); a = RTA_NEXT(a, len))
        if (a->rta_type == TCA_KIND) kind = reinterpret_cast<const char*>(RTA_DATA(a));
    }
  }
}

}  // namespace rc::faults::tcred
