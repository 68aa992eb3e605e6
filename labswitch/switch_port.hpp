// Where a lab switch port's frames come from and go to. A port is either the switch's end of
// a host NIC (a TAP device inside the host's namespace, the switch's end of a veth pair read
// with AF_PACKET, or — for QEMU guests — a stream socket carrying frames each prefixed by a
// 4-byte big-endian length), or an internal link
// to a port of another switch of the same process (no PortIo at all).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/host_delivery.hpp"
#include "labswitch/switch_offload.hpp"

namespace rc::labswitch {

using Mac = std::array<uint8_t, 6>;

class PortIo {
 public:
  virtual ~PortIo() = default;
  // Readable when frames wait (epoll, level-triggered).
  virtual int fd() const = 0;
  // Reads up to `max` frames without blocking, appending them to out. Returns how many were
  // read; 0 when none waits. Reading a batch per wake-up is what keeps a TAP's ring (its
  // txqueuelen) from overflowing while the switch serves other ports. A batch may end before
  // the port is drained (a TAP stops at the count its last drained batch found): what is left
  // keeps fd() readable, so the next epoll wait returns at once.
  virtual Result<size_t> readBatch(std::vector<std::vector<uint8_t>>& out, size_t max) = 0;
  // Hands one frame to the host. False if it could not (the host side is gone or full).
  virtual bool write(const uint8_t* data, size_t len) = 0;
  // Moves frames that write() had to keep (a stream socket that was full, a TAP's open TCP
  // runs) to the host.
  virtual void flush() {}
  // Moves what is due at NOW (a TAP's runs held their delivery hold; everything elsewhere) and
  // returns when the next held run is due (INT64_MAX: nothing held).
  virtual int64_t flushDue(int64_t now) {
    (void)now;
    flush();
    return INT64_MAX;
  }
  // System calls and frames through this port's I/O (a TAP with offload reads and writes
  // several wire frames per call): the measure of what offload saves.
  struct IoStats {
    uint64_t reads = 0, readFrames = 0, writes = 0, writeFrames = 0;
    uint64_t superWrites = 0, superWriteFrames = 0;  // writes of joined runs, and their frames
    std::optional<RunEnds> runEnds;  // why each write's run ended (a TAP with offload)
    // Frames the host sent that found the switch's socket queue full (a veth port: the host's
    // NIC ring overflowed while the switch read late). A TAP's such drops are the host's own
    // data0 `tx_dropped`; a veth hands every frame on, so only the switch can count them.
    std::optional<uint64_t> ringDrops;
  };
  // Not const: a port may have to ask the kernel (a veth port's socket statistics).
  virtual IoStats ioStats() { return {}; }
  // Checks each TCP frame's checksum before joining it with others into one write, so that a
  // corrupted one reaches the host unjoined and is dropped there (TcpCoalescer::setVerify).
  virtual void setVerifyChecksums(bool on) { (void)on; }
  // The host sees its NIC gain or lose carrier, as with a cable plugged or pulled (an admin
  // down port); false (errno set) if that failed. A port that cannot show it does nothing (a
  // guest's stream: QEMU keeps the guest's carrier up).
  virtual bool setCarrier(bool up) {
    (void)up;
    return true;
  }
  // The host NIC's MAC address when it is known up front (a TAP's own address).
  virtual Mac hostMac() const { return {}; }
  virtual std::string describe() const = 0;
};

// Attaches to the existing persistent TAP `ifname` inside the network namespace at
// `netnsPath` (created by `lab up` with `ip tuntap add`). Because the device is persistent,
// a restarted switch re-attaches to the same NIC and the host keeps its address and routes.
// OFFLOAD: with a virtio_net_hdr on every frame and TSO/checksum offload on the TAP, so the
// host hands over TCP super-frames (switch_offload.hpp); reads still return wire frames, and
// writes are joined into super-frames, each held up to HOLD_NS (Config::deliveryHoldNs) from
// its first frame until flushDue() or flush(). DELIVERY: the TAP's writes go through that
// thread (host_delivery.hpp) instead of the caller's.
Result<std::unique_ptr<PortIo>> attachTap(const std::string& netnsPath, const std::string& ifname,
                                          bool offload = true, int64_t holdNs = 0,
                                          std::shared_ptr<HostDelivery> delivery = nullptr);

// Attaches to the switch's end `ifname` of a veth pair inside the namespace at `netnsPath`
// (the lab's fabric namespace; `lab up --ports veth`), whose other end is a host's data0, with
// an AF_PACKET socket: frames in and out in batches (recvmmsg, sendmmsg), super-frames with a
// virtio_net_hdr as through a TAP with offload, runs joined and held up to HOLD_NS alike. The
// host's MAC address is read from data0 in `hostNetnsPath` (none given: learnt from its frames).
Result<std::unique_ptr<PortIo>> attachPacket(const std::string& netnsPath, const std::string& ifname,
                                             const std::string& hostNetnsPath, int64_t holdNs = 0);

// A QEMU `-netdev stream`/`socket` peer: frames with a 4-byte big-endian length prefix on a
// connected stream socket (the switch listens, QEMU connects). The descriptor is adopted.
std::unique_ptr<PortIo> streamPort(UniqueFD connected, std::string name);

// Connects to a QEMU `-netdev stream,server=on,addr.type=unix` socket at `path` and returns
// it as a stream port. QEMU accepts a new connection after the old one closes, so a
// restarted switch reconnects to the same guest NIC.
Result<std::unique_ptr<PortIo>> connectStream(const std::string& path, std::string name);

}  // namespace rc::labswitch
