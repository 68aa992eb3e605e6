// TAP, AF_PACKET (veth) and QEMU stream-socket ports of the lab switch (see switch_port.hpp).
#include "labswitch/switch_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "labswitch/switch_offload.hpp"

namespace rc::labswitch {
namespace {

constexpr size_t kMaxFrame = 65536;

// Cuts one frame read with its virtio_net_hdr (BUF, LEN) into wire frames appended to OUT;
// what the host's stack built and cannot be cut is dropped and said now and then. Shared by the
// TAP and AF_PACKET ports: both read the host's super-frames with the same header.
void takeOffloaded(const char* kind, const std::string& port, const uint8_t* buf, size_t len,
                   std::vector<std::vector<uint8_t>>& out, uint64_t& badFrames) {
  if (len < sizeof(VnetHdr)) return;
  VnetHdr h;
  std::memcpy(&h, buf, sizeof h);
  if (auto why = segmentFrame(buf + sizeof h, len - sizeof h, h, out); !why.empty()) {
    // The host's stack built it; it cannot be cut into wire frames here. Dropped, as a NIC
    // drops what it cannot send, and said (once in a while: a host may send many).
    if (badFrames++ % 1000 == 0)
      log::warn("{} {}: dropped a frame from the host: {} ({} such frames)", kind, port, why, badFrames);
  }
}

class TapIo final : public PortIo {
 public:
  TapIo(UniqueFD fd, std::string name, Mac mac, bool offload, int64_t holdNs, std::shared_ptr<HostDelivery> delivery)
      : fd_(std::move(fd)), name_(std::move(name)), mac_(mac), offload_(offload), holdNs_(holdNs),
        delivery_(std::move(delivery)),
        out_([this](const VnetHdr& h, const uint8_t* data, size_t len) { send(h, data, len); }) {}
  // What the delivery thread still holds for this TAP goes before its descriptor closes.
  ~TapIo() override {
    if (delivery_) delivery_->drain();
  }
  int fd() const override { return fd_.get(); }
  // Reading until EAGAIN ends every wake-up with an empty read, a system call of several
  // microseconds on this project's machines (a fifth of the switch's reads at 1G in
  // noise-floor). So a wake-up reads at most as many times as the last wake-up that
  // drained the TAP found frames; what is left keeps the TAP readable, and the loop's next
  // epoll_pwait2 (made anyway) returns at once with it.
  Result<size_t> readBatch(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    size_t n = 0;
    const size_t limit = std::min(max, expect_);
    bool drained = false;
    while (n < limit) {
      ssize_t r = ::read(fd_.get(), buf_, sizeof buf_);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          drained = true;
          break;
        }
        return makeError("reading TAP " + name_ + ": " + std::strerror(errno), errno);
      }
      if (r == 0) break;
      n++;
      stats_.reads++;
      if (!offload_) {
        out.emplace_back(buf_, buf_ + r);
        stats_.readFrames++;
        continue;
      }
      const size_t before = out.size();
      takeOffloaded("TAP", name_, buf_, size_t(r), out, badFrames_);
      stats_.readFrames += out.size() - before;
    }
    expect_ = drained ? std::max<size_t>(n, 1) : std::min(max, expect_ * 2);
    return n;
  }
  bool write(const uint8_t* data, size_t len) override {
    stats_.writeFrames++;
    if (!offload_) {
      stats_.writes++;
      return sendPlain(data, len);
    }
    out_.add(data, len, holdNs_ > 0 ? monoNs() : 0);
    return ok_;
  }
  IoStats ioStats() override {
    IoStats s = stats_;
    s.superWrites = out_.superFrames();
    s.superWriteFrames = out_.framesJoined();
    if (offload_) s.runEnds = out_.runEnds();
    return s;
  }
  void flush() override {
    if (offload_) out_.flush();
  }
  void setVerifyChecksums(bool on) override { out_.setVerify(on); }
  int64_t flushDue(int64_t now) override {
    if (!offload_) return INT64_MAX;
    if (holdNs_ <= 0) {
      out_.flush();
      return INT64_MAX;
    }
    return out_.flushDue(now, holdNs_);
  }
  Mac hostMac() const override { return mac_; }
  bool setCarrier(bool up) override {
    int carrier = up ? 1 : 0;  // TUNSETCARRIER: Linux 5.0 and later
    return ::ioctl(fd_.get(), TUNSETCARRIER, &carrier) == 0;
  }
  std::string describe() const override { return "tap " + name_ + (offload_ ? " (offload)" : ""); }

 private:
  // A TAP write is handed to the host's stack synchronously; it fails only when the device is
  // down (EIO) or gone.
  bool sendPlain(const uint8_t* data, size_t len) {
    if (tcpChecksumPartial(data, len)) {
      // This host takes no CHECKSUM_PARTIAL: the checksum goes whole.
      whole_.assign(data, data + len);
      completeTcpChecksum(whole_.data(), len);
      data = whole_.data();
    }
    if (delivery_) {
      delivery_->post(fd_.get(), nullptr, 0, data, len);
      return true;
    }
    return ::write(fd_.get(), data, len) == ssize_t(len);
  }
  void send(const VnetHdr& h, const uint8_t* data, size_t len) {
    stats_.writes++;
    if (delivery_) {
      delivery_->post(fd_.get(), &h, sizeof h, data, len);
      return;
    }
    iovec iov[2] = {{const_cast<VnetHdr*>(&h), sizeof h}, {const_cast<uint8_t*>(data), len}};
    ok_ = ::writev(fd_.get(), iov, 2) == ssize_t(sizeof h + len);
  }

  UniqueFD fd_;
  std::string name_;
  Mac mac_;
  bool offload_;
  int64_t holdNs_;
  std::shared_ptr<HostDelivery> delivery_;  // null: each write in the switch's own thread
  TcpCoalescer out_;
  bool ok_ = true;
  uint64_t badFrames_ = 0;
  size_t expect_ = 1;  // reads the next wake-up makes at most (readBatch)
  std::vector<uint8_t> whole_;  // a frame whose checksum sendPlain completed
  IoStats stats_;
  uint8_t buf_[kMaxFrame + sizeof(VnetHdr)];
};

// The switch's end of a veth pair whose other end is the host's NIC, read and written with an
// AF_PACKET socket: up to kPacketBatch frames per recvmmsg and per sendmmsg, where a TAP takes a
// system call per frame each way (bench/port_io_probe: 2-3x less of the switch's time per
// frame). Always with a virtio_net_hdr, so a host's TCP hands over super-frames as through a
// TAP with offload; the model sees wire frames alike. What the model sends a host is joined
// (TcpCoalescer), kept in out_, and goes out in one sendmmsg per loop pass (flush, flushDue).
// The socket's receive queue (kHostQueueBytes) stands for the host NIC's ring: what the switch
// reads late waits there, counted in bytes.
class PacketIo final : public PortIo {
 public:
  static constexpr size_t kPacketBatch = 64;
  static constexpr size_t kSlot = kMaxFrame + sizeof(VnetHdr);
  static constexpr int kHostQueueBytes = 16 << 20;  // as a TAP's 10,000 frames of 1.5 KB
  // CTL: a datagram socket made in the veth's namespace, for its flags (setCarrier).
  PacketIo(UniqueFD fd, UniqueFD ctl, std::string name, Mac mac, int64_t holdNs)
      : fd_(std::move(fd)), ctl_(std::move(ctl)), name_(std::move(name)), mac_(mac), holdNs_(holdNs),
        out_([this](const VnetHdr& h, const uint8_t* data, size_t len) { stage(h, data, len); }),
        in_(kPacketBatch * kSlot) {
    for (size_t k = 0; k < kPacketBatch; k++) {
      inIov_[k] = {in_.data() + k * kSlot, kSlot};
      inMsg_[k] = {};
      inMsg_[k].msg_hdr.msg_iov = &inIov_[k];
      inMsg_[k].msg_hdr.msg_iovlen = 1;
    }
  }
  int fd() const override { return fd_.get(); }
  // One recvmmsg: up to MAX frames (kPacketBatch at most) from the socket's queue; a batch that
  // came back full may have left more, which keeps fd() readable.
  Result<size_t> readBatch(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    const unsigned want = unsigned(std::min(max, kPacketBatch));
    if (want == 0) return size_t(0);
    int n = ::recvmmsg(fd_.get(), inMsg_, want, MSG_DONTWAIT, nullptr);
    if (n < 0) {
      // ENETDOWN: the veth went down (an admin down port, setCarrier); the socket takes frames
      // again once it is up.
      if (errno == EAGAIN || errno == EINTR || errno == ENETDOWN) return size_t(0);
      return makeError("reading port " + name_ + " (AF_PACKET): " + std::strerror(errno), errno);
    }
    stats_.reads++;
    const size_t before = out.size();
    for (int k = 0; k < n; k++) {
      if (inMsg_[k].msg_hdr.msg_flags & MSG_TRUNC) {
        if (badFrames_++ % 1000 == 0)
          log::warn("port {}: dropped a frame over {} bytes from the host ({} such frames)", name_, kMaxFrame, badFrames_);
        continue;
      }
      takeOffloaded("port", name_, in_.data() + size_t(k) * kSlot, inMsg_[k].msg_len, out, badFrames_);
    }
    stats_.readFrames += out.size() - before;
    return size_t(n);
  }
  bool write(const uint8_t* data, size_t len) override {
    stats_.writeFrames++;
    out_.add(data, len, holdNs_ > 0 ? monoNs() : 0);
    return ok_;
  }
  void flush() override {
    out_.flush();
    sendStaged();
  }
  int64_t flushDue(int64_t now) override {
    int64_t next = INT64_MAX;
    if (holdNs_ <= 0)
      out_.flush();
    else
      next = out_.flushDue(now, holdNs_);
    sendStaged();
    return next;
  }
  IoStats ioStats() override {
    IoStats s = stats_;
    s.superWrites = out_.superFrames();
    s.superWriteFrames = out_.framesJoined();
    s.runEnds = out_.runEnds();
    // The kernel counts the frames its socket queue refused since the last ask, and starts
    // again from zero: the port keeps the sum.
    tpacket_stats ps{};
    socklen_t len = sizeof ps;
    if (::getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &ps, &len) == 0) ringDrops_ += ps.tp_drops;
    s.ringDrops = ringDrops_;
    return s;
  }
  void setVerifyChecksums(bool on) override { out_.setVerify(on); }
  Mac hostMac() const override { return mac_; }
  // The switch's end of the veth goes down or up; its peer, the host's data0, loses or regains
  // carrier with it.
  bool setCarrier(bool up) override {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name_.c_str(), IFNAMSIZ - 1);
    if (::ioctl(ctl_.get(), SIOCGIFFLAGS, &ifr) != 0) return false;
    ifr.ifr_flags = short(up ? (ifr.ifr_flags | IFF_UP) : (ifr.ifr_flags & ~IFF_UP));
    return ::ioctl(ctl_.get(), SIOCSIFFLAGS, &ifr) == 0;
  }
  std::string describe() const override { return "veth " + name_ + " (AF_PACKET)"; }

 private:
  // Keeps one frame (or joined run) with its header for the pass's sendmmsg; a full batch goes now.
  void stage(const VnetHdr& h, const uint8_t* data, size_t len) {
    const size_t at = staged_.size();
    const auto* hdr = reinterpret_cast<const uint8_t*>(&h);
    staged_.insert(staged_.end(), hdr, hdr + sizeof h);
    staged_.insert(staged_.end(), data, data + len);
    spans_.push_back({at, sizeof h + len});
    if (spans_.size() >= kPacketBatch) sendStaged();
  }
  // A veth takes every frame at once (it hands it to the host's stack), so a send fails only
  // when the host's end is gone or down; what it refused is dropped, as a TAP's write is.
  void sendStaged() {
    if (spans_.empty()) return;
    const size_t n = spans_.size();
    for (size_t k = 0; k < n; k++) {
      outIov_[k] = {staged_.data() + spans_[k].first, spans_[k].second};
      outMsg_[k] = {};
      outMsg_[k].msg_hdr.msg_iov = &outIov_[k];
      outMsg_[k].msg_hdr.msg_iovlen = 1;
    }
    size_t sent = 0;
    while (sent < n) {
      int r = ::sendmmsg(fd_.get(), outMsg_ + sent, unsigned(n - sent), MSG_DONTWAIT);
      stats_.writes++;
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ok_ = false;
        // ENETDOWN: the port was set down with frames of the pass still to go (a flap): they
        // are lost on the cable, as the model's queued ones are.
        if (r < 0 && errno == ENETDOWN) break;
        if (sendFailures_++ % 1000 == 0)
          log::warn("port {}: the host's end took no frame ({}; {} such sends)", name_,
                    r < 0 ? std::strerror(errno) : "none sent", sendFailures_);
        break;
      }
      ok_ = true;
      sent += size_t(r);
    }
    staged_.clear();
    spans_.clear();
  }

  UniqueFD fd_, ctl_;
  std::string name_;
  Mac mac_;
  int64_t holdNs_;
  TcpCoalescer out_;
  bool ok_ = true;
  uint64_t badFrames_ = 0, sendFailures_ = 0;
  uint64_t ringDrops_ = 0;   // PACKET_STATISTICS' tp_drops, summed over every ask
  std::vector<uint8_t> in_;  // kPacketBatch slots of kSlot bytes
  iovec inIov_[kPacketBatch];
  mmsghdr inMsg_[kPacketBatch];
  std::vector<uint8_t> staged_;  // headers and frames of this pass, back to back
  std::vector<std::pair<size_t, size_t>> spans_;  // (offset, length) in staged_
  iovec outIov_[kPacketBatch];
  mmsghdr outMsg_[kPacketBatch];
  IoStats stats_;
};

class StreamIo final : public PortIo {
 public:
  StreamIo(UniqueFD fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
  int fd() const override { return fd_.get(); }
  Result<size_t> readBatch(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    size_t n = 0;
    for (;;) {
      // Whole frames already buffered first.
      while (n < max && have_ >= 4) {
        uint32_t len = uint32_t(in_[0]) << 24 | uint32_t(in_[1]) << 16 | uint32_t(in_[2]) << 8 | in_[3];
        if (len > kMaxFrame) return makeError("stream port " + name_ + ": frame of " + std::to_string(len) + " bytes", EPROTO);
        if (have_ < 4 + len) break;
        out.emplace_back(in_.begin() + 4, in_.begin() + 4 + len);
        in_.erase(in_.begin(), in_.begin() + 4 + len);
        have_ -= 4 + len;
        n++;
      }
      if (n >= max) return n;
      in_.resize(have_ + kMaxFrame);
      ssize_t r = ::recv(fd_.get(), in_.data() + have_, kMaxFrame, MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN) { in_.resize(have_); return n; }
      if (r <= 0) return makeError("stream port " + name_ + ": peer closed", EPIPE);
      have_ += size_t(r);
      in_.resize(have_);
    }
  }
  // Never blocks: QEMU 7.2 writes to its stream socket blocking, from its main loop, so a
  // switch blocked writing to a guest that is itself blocked writing to the switch would
  // freeze both (seen: a two-guest all-reduce hung the switch and a guest's whole QEMU).
  // Frames the socket cannot take wait in out_, flushed on later writes and on flush();
  // beyond kMaxPending the guest is not reading and frames to it are dropped.
  bool write(const uint8_t* data, size_t len) override {
    if (tcpChecksumPartial(data, len)) {
      // A guest's virtio NIC gets whole checksums from a stream (no offload header).
      whole_.assign(data, data + len);
      completeTcpChecksum(whole_.data(), len);
      data = whole_.data();
    }
    flush();
    if (out_.size() - outSent_ > kMaxPending) return false;
    uint8_t hdr[4] = {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len)};
    if (out_.size() == outSent_) {
      iovec iov[2] = {{hdr, 4}, {const_cast<uint8_t*>(data), len}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      ssize_t r = ::sendmsg(fd_.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN && errno != EINTR) return false;
      size_t done = r < 0 ? 0 : size_t(r);
      if (done == len + 4) return true;
      out_.clear();
      outSent_ = 0;
      // The rest of a partly sent frame must follow before anything else.
      if (done < 4) out_.insert(out_.end(), hdr + done, hdr + 4);
      size_t from = done < 4 ? 0 : done - 4;
      out_.insert(out_.end(), data + from, data + len);
      return true;
    }
    out_.insert(out_.end(), hdr, hdr + 4);
    out_.insert(out_.end(), data, data + len);
    return true;
  }
  void flush() override {
    while (outSent_ < out_.size()) {
      ssize_t r = ::send(fd_.get(), out_.data() + outSent_, out_.size() - outSent_,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      outSent_ += size_t(r);
    }
    if (outSent_ == out_.size()) {
      out_.clear();
      outSent_ = 0;
    }
  }
  std::string describe() const override { return "stream " + name_; }

 private:
  UniqueFD fd_;
  std::string name_;
  std::vector<uint8_t> in_;
  size_t have_ = 0;
  static constexpr size_t kMaxPending = 1 << 20;
  std::vector<uint8_t> whole_;  // a frame whose checksum write() completed
  std::vector<uint8_t> out_;
  size_t outSent_ = 0;
};

// Runs BODY with the calling thread in the network namespace at NETNS_PATH (a device is looked
// up, and a TAP or packet socket bound, in the namespace of the caller), then returns it to the
// switch's own namespace. WHAT names the device in errors.
Result<void> inNetns(const std::string& netnsPath, const std::string& what, const std::function<void()>& body) {
  UniqueFD home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  UniqueFD target(::open(netnsPath.c_str(), O_RDONLY | O_CLOEXEC));
  if (!home.isValid() || !target.isValid())
    return makeError("cannot open the namespace of " + what + ": " + std::strerror(errno), errno);
  if (::setns(target.get(), CLONE_NEWNET) != 0)
    return makeError("cannot enter the namespace of " + what + ": " + std::strerror(errno), errno);
  body();
  if (::setns(home.get(), CLONE_NEWNET) != 0)
    return makeError("cannot return to the switch's own namespace: " + std::string(std::strerror(errno)), errno);
  return {};
}

// The MAC address of IFNAME in the caller's namespace (zeros when it cannot be read).
Mac macOf(const std::string& ifname) {
  Mac mac{};
  ifreq hw{};
  std::strncpy(hw.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  UniqueFD s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.isValid() && ::ioctl(s.get(), SIOCGIFHWADDR, &hw) == 0) std::memcpy(mac.data(), hw.ifr_hwaddr.sa_data, 6);
  return mac;
}

}  // namespace

Result<std::unique_ptr<PortIo>> attachTap(const std::string& netnsPath, const std::string& ifname, bool offload,
                                          int64_t holdNs, std::shared_ptr<HostDelivery> delivery) {
  std::string what = "TAP '" + ifname + "' in " + netnsPath;
  UniqueFD fd;
  int err = 0;
  Mac mac{};
  auto in = inNetns(netnsPath, what, [&] {
    // TUNSETIFF looks the device up in the namespace of the opener.
    fd.reset(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    err = fd.isValid() ? 0 : errno;
    if (err == 0) {
      ifreq ifr{};
      std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
      ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
      if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) err = errno;
    }
    // The host's TCP may hand over super-frames (TSO, with ECN's CWR) and leave checksums to
    // us. Without offload, none: a TAP attached with offload before keeps its features otherwise.
    if (err == 0) {
      unsigned features = offload ? (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) : 0;
      if (::ioctl(fd.get(), TUNSETOFFLOAD, features) != 0) err = errno;
    }
    if (err == 0) mac = macOf(ifname);
  });
  if (!in) return in.error();
  if (err != 0)
    return makeError("cannot attach to " + what + ": " + std::strerror(err) +
                     " (it must exist: `ip tuntap add dev " + ifname + " mode tap`)", err);
  return std::unique_ptr<PortIo>(std::make_unique<TapIo>(std::move(fd), ifname, mac, offload, holdNs, std::move(delivery)));
}

Result<std::unique_ptr<PortIo>> attachPacket(const std::string& netnsPath, const std::string& ifname,
                                             const std::string& hostNetnsPath, int64_t holdNs) {
  std::string what = "veth '" + ifname + "' in " + netnsPath;
  UniqueFD fd, ctl;
  int err = 0;
  std::string step;
  auto in = inNetns(netnsPath, what, [&] {
    // The socket stays on the device it is bound to; the device's index is the namespace's own.
    fd.reset(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
    ctl.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));  // keeps this namespace for setCarrier
    if (!fd.isValid() || !ctl.isValid()) {
      err = errno;
      step = "socket(AF_PACKET)";
    }
    auto option = [&](int level, int name, int value, const char* label) {
      if (err == 0 && ::setsockopt(fd.get(), level, name, &value, sizeof value) != 0) {
        err = errno;
        step = label;
      }
    };
    option(SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR");
    // Not the frames the switch itself sends to the host, which a packet socket sees too.
    option(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING");
    option(SOL_PACKET, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS");
    option(SOL_SOCKET, SO_RCVBUFFORCE, PacketIo::kHostQueueBytes, "SO_RCVBUFFORCE");
    option(SOL_SOCKET, SO_SNDBUFFORCE, PacketIo::kHostQueueBytes, "SO_SNDBUFFORCE");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    if (err == 0 && ::ioctl(fd.get(), SIOCGIFINDEX, &ifr) != 0) {
      err = errno;
      step = "no such device";
    }
    if (err == 0) {
      sockaddr_ll sll{};
      sll.sll_family = AF_PACKET;
      sll.sll_protocol = htons(ETH_P_ALL);
      sll.sll_ifindex = ifr.ifr_ifindex;
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
        err = errno;
        step = "bind";
      }
    }
  });
  if (!in) return in.error();
  if (err != 0)
    return makeError("cannot attach to " + what + ": " + step + ": " + std::strerror(err) +
                         " (it must exist: `lab up --ports veth` makes it)",
                     err);
  // The host's own address, from its data0 (the veth's other end); none known: learnt from its frames.
  Mac mac{};
  if (!hostNetnsPath.empty())
    if (auto r = inNetns(hostNetnsPath, "the host of " + what, [&] { mac = macOf("data0"); }); !r) return r.error();
  return std::unique_ptr<PortIo>(std::make_unique<PacketIo>(std::move(fd), std::move(ctl), ifname, mac, holdNs));
}

std::unique_ptr<PortIo> streamPort(UniqueFD connected, std::string name) {
  return std::make_unique<StreamIo>(std::move(connected), std::move(name));
}

Result<std::unique_ptr<PortIo>> connectStream(const std::string& path, std::string name) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path)
    return makeError("stream socket path '" + path + "' is empty or longer than " +
                     std::to_string(sizeof sa.sun_path - 1) + " bytes", ENAMETOOLONG);
  std::strcpy(sa.sun_path, path.c_str());
  UniqueFD fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.isValid()) return makeError("socket: " + std::string(std::strerror(errno)), errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return makeError("cannot connect to the guest NIC's stream socket '" + path + "': " +
                     std::strerror(errno) + " (is its QEMU running?)", errno);
  return streamPort(std::move(fd), std::move(name));
}

}  // namespace rc::labswitch
