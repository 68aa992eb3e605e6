// Workload kind allgather: ring all-gather, each rank contributing one block of the output.
#include <cstring>

#include "workload/kinds.hpp"

namespace rc::workload {
namespace {

// Ring all-gather: SIZE is the output; rank r contributes block r.
class RingAllGather : public Collective {
 public:
  explicit RingAllGather(const Shape& s) : s_(s), n_(size_t(s.world)) {}
  size_t bufferBytes() const override { return s_.size; }
  std::vector<int> peers() const override {
    int next = ringMod(s_.rank + 1, s_.world), prev = ringMod(s_.rank - 1, s_.world);
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
    size_t sb = size_t(ringMod(r - st, n)), rb = size_t(ringMod(r - st - 1, n));
    std::vector<Op> v;
    if (len(sb)) v.push_back({Op::Kind::send, ringMod(r + 1, n), off(sb), len(sb)});
    if (len(rb)) v.push_back({Op::Kind::recv, ringMod(r - 1, n), off(rb), len(rb)});
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

}  // namespace

extern const Kind kind_allgather;
const Kind kind_allgather{
    .name = "allgather",
    .summary = "ring all-gather: rank r contributes block r of the size-byte output; busbw x (n-1)/n",
    .bus = [](double n) { return (n - 1) / n; },
    .algBytes = [](uint64_t size, int) { return size; },
    .make = [](const Shape& s) -> std::unique_ptr<Collective> { return std::make_unique<RingAllGather>(s); },
};

}  // namespace rc::workload
