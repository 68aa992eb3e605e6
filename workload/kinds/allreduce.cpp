// Workload kind allreduce: ring all-reduce (reduce-scatter, then all-gather) of float32 sums.
#include <algorithm>
#include <cstring>

#include "workload/kinds.hpp"

namespace rc::workload {
namespace {

// Layout: [data: count floats][input copy: count floats][scratch: largest chunk].
class RingAllReduce : public Collective {
 public:
  explicit RingAllReduce(const Shape& s) : s_(s), n_(size_t(s.world)), count_(s.size / 4) {
    for (size_t c = 0; c < n_; c++) maxChunk_ = std::max(maxChunk_, chunkLen(c));
  }
  size_t bufferBytes() const override { return 2 * s_.size + maxChunk_ * 4; }
  std::vector<int> peers() const override {
    int next = ringMod(s_.rank + 1, s_.world), prev = ringMod(s_.rank - 1, s_.world);
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
    int next = ringMod(r + 1, n), prev = ringMod(r - 1, n);
    size_t sendC, recvC;
    bool reduce = step < n_ - 1;
    int st = int(step);
    if (reduce) {
      sendC = size_t(ringMod(r - st, n));
      recvC = size_t(ringMod(r - st - 1, n));
    } else {
      int s2 = st - (n - 1);
      sendC = size_t(ringMod(r + 1 - s2, n));
      recvC = size_t(ringMod(r - s2, n));
    }
    std::vector<Op> v;
    if (chunkLen(sendC)) v.push_back({Op::Kind::send, next, chunkOff(sendC), chunkLen(sendC) * 4});
    if (chunkLen(recvC))
      v.push_back({Op::Kind::recv, prev, reduce ? scratchOff() : chunkOff(recvC), chunkLen(recvC) * 4});
    return v;
  }
  void afterStep(size_t step, std::span<std::byte> buf) const override {
    if (step >= n_ - 1) return;
    size_t c = size_t(ringMod(s_.rank - int(step) - 1, s_.world));
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

}  // namespace

extern const Kind kind_allreduce;
const Kind kind_allreduce{
    .name = "allreduce",
    .summary = "ring reduce-scatter then all-gather of size/4 float32 sums; busbw = algbw x 2(n-1)/n",
    .bus = [](double n) { return 2 * (n - 1) / n; },
    .algBytes = [](uint64_t size, int) { return size; },
    .check = [](const Shape& s) -> Result<void> {
      if (s.size % 4 != 0) return makeError("allreduce size must be a multiple of 4 bytes (float32 elements)");
      return {};
    },
    .make = [](const Shape& s) -> std::unique_ptr<Collective> { return std::make_unique<RingAllReduce>(s); },
};

}  // namespace rc::workload
