// In-process transport: mailboxes between threads, with the same failure semantics as TCP
// (a peer that disconnects makes our pending and future steps with it fail).
#include "workload/inproc_transport.hpp"

#include <chrono>
#include <cstring>

#include "common/clock.hpp"
#include "workload/checksum.hpp"

namespace rc::workload {

InprocTransport::InprocTransport(std::shared_ptr<InprocFabric> fabric, int rank)
    : f_(std::move(fabric)), rank_(rank) {}

Result<void> InprocTransport::registerBuffer(std::span<std::byte> b) {
  buf_ = b;
  return {};
}

namespace {
std::pair<int, int> key(int a, int b) { return {std::min(a, b), std::max(a, b)}; }
}  // namespace

Result<void> InprocTransport::connect(const std::vector<int>& peers, int64_t deadline) {
  std::unique_lock lock(f_->m);
  peers_ = peers;
  for (int p : peers) {
    auto& l = f_->links[key(rank_, p)];
    if (l.up) continue;
    l.want[rank_ > p] = true;
    if (l.want[0] && l.want[1]) {
      l.up = true;
      l.closed = false;
      l.gen++;
      l.want[0] = l.want[1] = false;
      f_->cv.notify_all();
    }
  }
  for (;;) {
    bool all = true;
    // A new generation, even if already down again: a fast peer may have sent everything
    // and closed while we slept, and its messages are still in the box.
    for (int p : peers) all = all && f_->links[key(rank_, p)].gen != linkGens_[p];
    if (all) break;
    if (interrupted_) return makeError("interrupted");
    if (monoNs() >= deadline)
      return makeError("rank " + std::to_string(rank_) + ": a peer did not connect before the deadline");
    f_->cv.wait_for(lock, std::chrono::milliseconds(10));
  }
  for (int p : peers) linkGens_[p] = f_->links[key(rank_, p)].gen;
  return {};
}

void InprocTransport::disconnect() {
  std::lock_guard lock(f_->m);
  for (int p : peers_) f_->links[key(rank_, p)].up = false;
  f_->cv.notify_all();
}

// Messages carry their link generation, so a receiver still drains what was sent before the
// link went down; then it sees an orderly close.
void InprocTransport::close() {
  std::lock_guard lock(f_->m);
  for (int p : peers_) {
    auto& l = f_->links[key(rank_, p)];
    if (l.up) l.closed = true;
    l.up = false;
  }
  f_->cv.notify_all();
}

void InprocTransport::interrupt() {
  interrupted_ = true;
  std::lock_guard lock(f_->m);
  f_->cv.notify_all();
}

StepResult InprocTransport::runStep(std::span<const Op> ops) {
  StepResult res;
  std::unique_lock lock(f_->m);
  auto lostPeer = [&](int p) {
    const auto& l = f_->links[key(rank_, p)];
    return !l.up || l.gen != linkGens_[p];
  };
  for (const auto& op : ops) {
    if (op.kind != Op::Kind::send) continue;
    if (lostPeer(op.peer)) {
      const auto& l = f_->links[key(rank_, op.peer)];
      res.status = l.closed && l.gen == linkGens_[op.peer] ? StepStatus::peerClosed
                                                           : StepStatus::peerLost;
      res.error = "peer " + std::to_string(op.peer) + " disconnected";
      return res;
    }
    InprocFabric::Message m{linkGens_[op.peer], {}, 0};
    m.data.assign(buf_.begin() + long(op.offset), buf_.begin() + long(op.offset + op.length));
    m.sum = checksum32(m.data.data(), m.data.size());
    if (f_->corruptNextFrom == rank_ && !m.data.empty()) {
      m.data[m.data.size() / 2] ^= std::byte{0x40};
      f_->corruptNextFrom = -1;
    }
    f_->boxes[{rank_, op.peer}].push_back(std::move(m));
  }
  f_->cv.notify_all();
  for (const auto& op : ops) {
    if (op.kind != Op::Kind::recv) continue;
    auto& box = f_->boxes[{op.peer, rank_}];
    while (!box.empty() && box.front().gen != linkGens_[op.peer]) box.pop_front();
    while (box.empty()) {
      if (interrupted_) {
        res.status = StepStatus::stopped;
        return res;
      }
      if (lostPeer(op.peer)) {
        const auto& l = f_->links[key(rank_, op.peer)];
        res.status = l.closed && l.gen == linkGens_[op.peer] ? StepStatus::peerClosed
                                                             : StepStatus::peerLost;
        res.error = "peer " + std::to_string(op.peer) + " disconnected";
        return res;
      }
      f_->cv.wait_for(lock, std::chrono::milliseconds(10));
      while (!box.empty() && box.front().gen != linkGens_[op.peer]) box.pop_front();
    }
    auto m = std::move(box.front());
    box.pop_front();
    if (m.data.size() != op.length) {
      res.status = StepStatus::peerLost;
      res.error = "message of " + std::to_string(m.data.size()) + " bytes from peer " +
                  std::to_string(op.peer) + ", expected " + std::to_string(op.length);
      return res;
    }
    std::memcpy(buf_.data() + op.offset, m.data.data(), m.data.size());
    if (checksum32(m.data.data(), m.data.size()) != m.sum) res.corruptions++;
    if (onReceived_) {
      lock.unlock();
      onReceived_(m.data.size());
      lock.lock();
    }
  }
  return res;
}

}  // namespace rc::workload
