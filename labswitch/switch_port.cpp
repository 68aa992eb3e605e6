// TAP and QEMU stream-socket ports of the lab switch (see switch_port.hpp).
#include "labswitch/switch_port.hpp"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "labswitch/switch_offload.hpp"

namespace rc::labswitch {
namespace {

constexpr size_t kMaxFrame = 65536;

class TapIo final : public PortIo {
 public:
  TapIo(UniqueFD fd, std::string name, Mac mac, bool offload, int64_t holdNs)
      : fd_(std::move(fd)), name_(std::move(name)), mac_(mac), offload_(offload), holdNs_(holdNs),
        out_([this](const VnetHdr& h, const uint8_t* data, size_t len) { send(h, data, len); }) {}
  int fd() const override { return fd_.get(); }
  // Reading until EAGAIN ends every wake-up with an empty read, a system call of several
  // microseconds on this project's machines (a fifth of the switch's reads at 1G in
  // noise-floor). So a wake-up reads at most as many times as the last wake-up that
  // drained the TAP found frames; what is left keeps the TAP readable, and the loop's next
  // epoll_pwait2 (made anyway) returns at once with it.
  Result<size_t> readBatch(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    size_t n = 0;
    const size_t hdr = offload_ ? sizeof(VnetHdr) : 0;
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
      if (size_t(r) < hdr) continue;
      VnetHdr h;
      std::memcpy(&h, buf_, sizeof h);
      if (auto why = segmentFrame(buf_ + hdr, size_t(r) - hdr, h, out); !why.empty()) {
        // The host's stack built it; it cannot be cut into wire frames here. Dropped, as a
        // NIC drops what it cannot send, and said (once in a while: a host may send many).
        if (badFrames_++ % 1000 == 0)
          log::warn("TAP {}: dropped a frame from the host: {} ({} such frames)", name_, why, badFrames_);
      }
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
  IoStats ioStats() const override {
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
    return ::write(fd_.get(), data, len) == ssize_t(len);
  }
  void send(const VnetHdr& h, const uint8_t* data, size_t len) {
    stats_.writes++;
    iovec iov[2] = {{const_cast<VnetHdr*>(&h), sizeof h}, {const_cast<uint8_t*>(data), len}};
    ok_ = ::writev(fd_.get(), iov, 2) == ssize_t(sizeof h + len);
  }

  UniqueFD fd_;
  std::string name_;
  Mac mac_;
  bool offload_;
  int64_t holdNs_;
  TcpCoalescer out_;
  bool ok_ = true;
  uint64_t badFrames_ = 0;
  size_t expect_ = 1;  // reads the next wake-up makes at most (readBatch)
  std::vector<uint8_t> whole_;  // a frame whose checksum sendPlain completed
  IoStats stats_;
  uint8_t buf_[kMaxFrame + sizeof(VnetHdr)];
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

}  // namespace

Result<std::unique_ptr<PortIo>> attachTap(const std::string& netnsPath, const std::string& ifname, bool offload,
                                          int64_t holdNs) {
  std::string what = "TAP '" + ifname + "' in " + netnsPath;
  UniqueFD home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  UniqueFD target(::open(netnsPath.c_str(), O_RDONLY | O_CLOEXEC));
  if (!home.isValid() || !target.isValid())
    return makeError("cannot open the namespace of " + what + ": " + std::strerror(errno), errno);
  if (::setns(target.get(), CLONE_NEWNET) != 0)
    return makeError("cannot enter the namespace of " + what + ": " + std::strerror(errno), errno);
  // TUNSETIFF looks the device up in the namespace of the opener, hence the setns dance.
  UniqueFD fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  int err = fd.isValid() ? 0 : errno;
  ifreq ifr{};
  Mac mac{};
  if (err == 0) {
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) err = errno;
  }
  // The host's TCP may hand over super-frames (TSO, with ECN's CWR) and leave checksums to us.
  // Without offload, none: a TAP attached with offload before keeps its features otherwise.
  if (err == 0) {
    unsigned features = offload ? (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) : 0;
    if (::ioctl(fd.get(), TUNSETOFFLOAD, features) != 0) err = errno;
  }
  if (err == 0) {
    ifreq hw{};
    std::strncpy(hw.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    UniqueFD s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (s.isValid() && ::ioctl(s.get(), SIOCGIFHWADDR, &hw) == 0)
      std::memcpy(mac.data(), hw.ifr_hwaddr.sa_data, 6);
  }
  if (::setns(home.get(), CLONE_NEWNET) != 0)
    return makeError("cannot return to the switch's own namespace: " + std::string(std::strerror(errno)), errno);
  if (err != 0)
    return makeError("cannot attach to " + what + ": " + std::strerror(err) +
                     " (it must exist: `ip tuntap add dev " + ifname + " mode tap`)", err);
  return std::unique_ptr<PortIo>(std::make_unique<TapIo>(std::move(fd), ifname, mac, offload, holdNs));
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
