// Ring all-reduce (reduce-scatter + all-gather), ring all-gather, all-to-all, incast and
// pairwise, each as a plan of steps over one registered buffer.
#include "workload/collectives.hpp"

#include <cstring>

#include "common/protocol.hpp"

namespace rc::workload {

std::optional<Kind> parseKind(std::string_view n) {
  if (n == "allreduce") return Kind::allreduce;
  if (n == "allgather") return Kind::allgather;
  if (n == "alltoall") return Kind::alltoall;
  if (n == "incast") return Kind::incast;
  if (n == "pairwise") return Kind::pairwise;
  return std::nullopt;
}

std::string_view kindName(Kind k) {
  switch (k) {
    case Kind::allreduce: return "allreduce";
    case Kind::allgather: return "allgather";
    case Kind::alltoall: return "alltoall";
    case Kind::incast: return "incast";
    case Kind::pairwise: return "pairwise";
  }
  return "?";
}

double busFactor(Kind k, int n) {
  switch (k) {
    case Kind::allreduce: return 2.0 * (n - 1) / n;
    case Kind::allgather:
    case Kind::alltoall: return double(n - 1) / n;
    case Kind::incast:
    case Kind::pairwise: return 1.0;
  }
  return 1.0;
}

Result<void> validateShape(const Shape& s) {
  if (s.world < 2 || s.world > 256) return makeError("a workload needs 2 to 256 ranks");
  if (s.rank < 0 || s.rank >= s.world) return makeError("rank is outside the world");
  if (s.size == 0 || s.size > uint64_t(proto::kMaxWorkloadSize)) return makeError("size must be 1 B to 1 GiB");
  if (s.kind == Kind::allreduce && s.size % 4 != 0)
    return makeError("allreduce size must be a multiple of 4 bytes (float32 elements)");
  if (s.kind == Kind::pairwise && s.world % 2 != 0)
    return makeError("pairwise needs an even number of ranks (pairs 0-1, 2-3, ...)");
  if (s.kind == Kind::incast) {
    if (s.incastReceiver < 0 || s.incastReceiver >= s.world)
      return makeError("incast receiver is outside the world");
    if (s.fanIn < 0 || s.fanIn > s.world - 1)
      return makeError("incast fan_in must be 0 (all senders) to world - 1");
  }
  return {};
}

namespace {

// Byte I of block B: distinct per block and position, so misplaced data fails verification.
inline std::byte pattern(size_t block, size_t i) {
  return std::byte(uint8_t((block * 131 + i * 7 + (i >> 8)) & 0xff));
}

void fillBlock(std::byte* p, size_t block, size_t len) {
  for (size_t i = 0; i < len; i++) p[i] = pattern(block, i);
}

bool checkBlock(const std::byte* p, size_t block, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != pattern(block, i)) return false;
  return true;
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// Layout: [data: count floats][input copy: count floats][scratch: largest chunk].
class RingAllReduce : public Collective {
 public:
  explicit RingAllReduce(const Shape& s) : s_(s), n_(size_t(s.world)), count_(s.size / 4) {
    for (size_t c = 0; c < n_; c++) maxChunk_ = std::max(maxChunk_, chunkLen(c));
  }
  size_t bufferBytes() const override { return 2 * s_.size + maxChunk_ * 4; }
  std::vector<int> peers() const override {
    int next = mod(s_.rank + 1, s_.world), prev = mod(s_.rank - 1, s_.world);
    return next == prev ? std::vector<int>{next} : std::vector<int>{next, prev};
  }
  void prepare(std::span<std::byte> buf) const override {
    auto* in = reinterpret_cast<float*>(buf.data() + s_.size);
    if (!filled_) {
      for (size_t i = 0; i < count_; i++) in[i] = allreduceInput(s_.rank, i);
      filled_ = true;
    }
    std::memcpy(buf.data(), in, s_.size);
  }
  size_t stepCount() const override { return 2 * (n_ - 1); }
  std::vector<Op> ops(size_t step) const override {
    int r = s_.rank, n = s_.world;
    int next = mod(r + 1, n), prev = mod(r - 1, n);
    size_t sendC, recvC;
    bool reduce = step < n_ - 1;
    int st = int(step);
    if (reduce) {
      sendC = size_t(mod(r - st, n));
      recvC = size_t(mod(r - st - 1, n));
    } else {
      int s2 = st - (n - 1);
      sendC = size_t(mod(r + 1 - s2, n));
      recvC = size_t(mod(r - s2, n));
    }
    std::vector<Op> v;
    if (chunkLen(sendC)) v.push_back({Op::Kind::send, next, chunkOff(sendC), chunkLen(sendC) * 4});
    if (chunkLen(recvC))
      v.push_back({Op::Kind::recv, prev, reduce ? scratchOff() : chunkOff(recvC), chunkLen(recvC) * 4});
    return v;
  }
  void afterStep(size_t step, std::span<std::byte> buf) const override {
    if (step >= n_ - 1) return;
    size_t c = size_t(mod(s_.rank - int(step) - 1, s_.world));
    auto* dst = reinterpret_cast<float*>(buf.data() + chunkOff(c));
    const auto* src = reinterpret_cast<const float*>(buf.data() + scratchOff());
    for (size_t i = 0, len = chunkLen(c); i < len; i++) dst[i] += src[i];
  }
  bool verify(std::span<const std::byte> buf) const override {
    const auto* d = reinterpret_cast<const float*>(buf.data());
    // sum over r of (r+1)*v = v*n(n+1)/2: exact in float for the sizes allowed.
    const float ranks = float(s_.world * (s_.world + 1) / 2);
    for (size_t i = 0; i < count_; i++)
      if (d[i] != allreduceInput(0, i) * ranks) return false;
    return true;
  }

 private:
  size_t chunkLen(size_t c) const { return chunkBegin(count_, n_, c + 1) - chunkBegin(count_, n_, c); }
  size_t chunkOff(size_t c) const { return chunkBegin(count_, n_, c) * 4; }
  size_t scratchOff() const { return 2 * s_.size; }
  Shape s_;
  size_t n_, count_, maxChunk_ = 0;
  mutable bool filled_ = false;
};

// Ring all-gather: SIZE is the output; rank r contributes block r.
class RingAllGather : public Collective {
 public:
  explicit RingAllGather(const Shape& s) : s_(s), n_(size_t(s.world)) {}
  size_t bufferBytes() const override { return s_.size; }
  std::vector<int> peers() const override {
    int next = mod(s_.rank + 1, s_.world), prev = mod(s_.rank - 1, s_.world);
    return next == prev ? std::vector<int>{next} : std::vector<int>{next, prev};
  }
  void prepare(std::span<std::byte> buf) const override {
    // Clear the other blocks so that stale data from a previous iteration cannot pass.
    std::memset(buf.data(), 0, buf.size());
    fillBlock(buf.data() + off(size_t(s_.rank)), size_t(s_.rank), len(size_t(s_.rank)));
  }
  size_t stepCount() const override { return n_ - 1; }
  std::vector<Op> ops(size_t step) const override {
    int r = s_.rank, n = s_.world, st = int(step);
    size_t sb = size_t(mod(r - st, n)), rb = size_t(mod(r - st - 1, n));
    std::vector<Op> v;
    if (len(sb)) v.push_back({Op::Kind::send, mod(r + 1, n), off(sb), len(sb)});
    if (len(rb)) v.push_back({Op::Kind::recv, mod(r - 1, n), off(rb), len(rb)});
    return v;
  }
  bool verify(std::span<const std::byte> buf) const override {
    for (size_t b = 0; b < n_; b++)
      if (!checkBlock(buf.data() + off(b), b, len(b))) return false;
    return true;
  }

 private:
  size_t off(size_t b) const { return chunkBegin(s_.size, n_, b); }
  size_t len(size_t b) const { return chunkBegin(s_.size, n_, b + 1) - off(b); }
  Shape s_;
  size_t n_;
};

// All-to-all: SIZE per rank, block p of the send half goes to rank p's receive half.
class AllToAll : public Collective {
 public:
  explicit AllToAll(const Shape& s) : s_(s), n_(size_t(s.world)) {}
  size_t bufferBytes() const override { return 2 * s_.size; }
  std::vector<int> peers() const override {
    std::vector<int> p;
    for (int i = 0; i < s_.world; i++)
      if (i != s_.rank) p.push_back(i);
    return p;
  }
  void prepare(std::span<std::byte> buf) const override {
    std::memset(buf.data() + s_.size, 0, s_.size);
    for (size_t p = 0; p < n_; p++) fillBlock(buf.data() + off(p), tag(size_t(s_.rank), p), len(p));
    // Our own block stays local, as in nccl-tests.
    std::memcpy(buf.data() + s_.size + off(size_t(s_.rank)), buf.data() + off(size_t(s_.rank)),
                len(size_t(s_.rank)));
  }
  size_t stepCount() const override { return 1; }
  std::vector<Op> ops(size_t) const override {
    std::vector<Op> v;
    for (int p = 0; p < s_.world; p++) {
      if (p == s_.rank) continue;
      // Block sizes depend on the destination's index, so the sender's block p and the
      // receiver's block (sender) must be the same length: use the pair's common size.
      size_t l = pairLen();
      if (!l) continue;
      v.push_back({Op::Kind::send, p, off(size_t(p)), l});
      v.push_back({Op::Kind::recv, p, s_.size + off(size_t(p)), l});
    }
    return v;
  }
  bool verify(std::span<const std::byte> buf) const override {
    for (size_t p = 0; p < n_; p++) {
      size_t l = p == size_t(s_.rank) ? len(p) : pairLen();
      if (!checkBlock(buf.data() + s_.size + off(p), tag(p, size_t(s_.rank)), l)) return false;
    }
    return true;
  }

 private:
  size_t tag(size_t from, size_t to) const { return from * 257 + to; }
  size_t off(size_t b) const { return chunkBegin(s_.size, n_, b); }
  size_t len(size_t b) const { return chunkBegin(s_.size, n_, b + 1) - off(b); }
  size_t pairLen() const { return s_.size / n_; }  // the smallest block: fits every slot
  Shape s_;
  size_t n_;
};

// Incast: every sender sends SIZE to the receiver; FAN_IN senders at a time.
class Incast : public Collective {
 public:
  explicit Incast(const Shape& s) : s_(s) {
    for (int r = 0; r < s.world; r++)
      if (r != s.incastReceiver) senders_.push_back(r);
    fan_ = s.fanIn > 0 ? size_t(s.fanIn) : senders_.size();
  }
  bool receiver() const { return s_.rank == s_.incastReceiver; }
  size_t bufferBytes() const override { return receiver() ? s_.size * fan_ : s_.size; }
  std::vector<int> peers() const override {
    return receiver() ? senders_ : std::vector<int>{s_.incastReceiver};
  }
  void prepare(std::span<std::byte> buf) const override {
    if (receiver()) {
      std::memset(buf.data(), 0, buf.size());
    } else if (!filled_) {
      fillBlock(buf.data(), size_t(s_.rank), s_.size);
      filled_ = true;
    }
  }
  size_t stepCount() const override { return (senders_.size() + fan_ - 1) / fan_; }
  std::vector<Op> ops(size_t step) const override {
    std::vector<Op> v;
    for (size_t k = 0; k < fan_; k++) {
      size_t i = step * fan_ + k;
      if (i >= senders_.size()) break;
      if (receiver())
        v.push_back({Op::Kind::recv, senders_[i], k * s_.size, s_.size});
      else if (senders_[i] == s_.rank)
        v.push_back({Op::Kind::send, s_.incastReceiver, 0, s_.size});
    }
    return v;
  }
  void afterStep(size_t step, std::span<std::byte> buf) const override {
    if (!receiver()) return;
    for (size_t k = 0; k < fan_; k++) {
      size_t i = step * fan_ + k;
      if (i >= senders_.size()) break;
      ok_ = ok_ && checkBlock(buf.data() + k * s_.size, size_t(senders_[i]), s_.size);
    }
  }
  bool verify(std::span<const std::byte>) const override {
    bool ok = ok_;
    ok_ = true;  // the next iteration starts clean
    return ok;
  }

 private:
  Shape s_;
  std::vector<int> senders_;
  size_t fan_ = 1;
  mutable bool filled_ = false;
  mutable bool ok_ = true;
};

// Pairwise: rank 2i sends SIZE to rank 2i+1 (one direction, like iperf3 -c to -s).
class Pairwise : public Collective {
 public:
  explicit Pairwise(const Shape& s) : s_(s) {}
  bool sender() const { return s_.rank % 2 == 0; }
  int partner() const { return sender() ? s_.rank + 1 : s_.rank - 1; }
  size_t bufferBytes() const override { return s_.size; }
  std::vector<int> peers() const override { return {partner()}; }
  void prepare(std::span<std::byte> buf) const override {
    if (!filled_ && sender()) fillBlock(buf.data(), 1, s_.size);
    filled_ = true;
  }
  size_t stepCount() const override { return 1; }
  std::vector<Op> ops(size_t) const override {
    return {{sender() ? Op::Kind::send : Op::Kind::recv, partner(), 0, s_.size}};
  }
  bool verify(std::span<const std::byte> buf) const override {
    // The receiver's buffer is overwritten every iteration; check a sample to keep the
    // check off the critical path (the transport's checksum covers every byte).
    if (sender()) return true;
    size_t step = std::max<size_t>(1, s_.size / 64);
    for (size_t i = 0; i < s_.size; i += step)
      if (buf[i] != pattern(1, i)) return false;
    return buf[s_.size - 1] == pattern(1, s_.size - 1);
  }

 private:
  Shape s_;
  mutable bool filled_ = false;
};

}  // namespace

std::unique_ptr<Collective> makeCollective(const Shape& s) {
  switch (s.kind) {
    case Kind::allreduce: return std::make_unique<RingAllReduce>(s);
    case Kind::allgather: return std::make_unique<RingAllGather>(s);
    case Kind::alltoall: return std::make_unique<AllToAll>(s);
    case Kind::incast: return std::make_unique<Incast>(s);
    case Kind::pairwise: return std::make_unique<Pairwise>(s);
  }
  return nullptr;
}

}  // namespace rc::workload
