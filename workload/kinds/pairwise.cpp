// Workload kind pairwise: rank 2i sends SIZE to rank 2i+1, one direction per pair.
#include <algorithm>
#include <cstring>

#include "workload/kinds.hpp"

namespace rc::workload {
namespace {

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
      if (buf[i] != blockPattern(1, i)) return false;
    return buf[s_.size - 1] == blockPattern(1, s_.size - 1);
  }

 private:
  Shape s_;
  mutable bool filled_ = false;
};

}  // namespace

extern const Kind kind_pairwise;
const Kind kind_pairwise{
    .name = "pairwise",
    .summary = "rank 2i sends size to rank 2i+1 (one direction, like iperf3); needs an even count",
    .bus = [](double) { return 1.0; },
    .algBytes = [](uint64_t size, int) { return size; },
    .check = [](const Shape& s) -> Result<void> {
      if (s.world % 2 != 0) return makeError("pairwise needs an even number of ranks (pairs 0-1, 2-3, ...)");
      return {};
    },
    .make = [](const Shape& s) -> std::unique_ptr<Collective> { return std::make_unique<Pairwise>(s); },
};

}  // namespace rc::workload
