// Workload kind alltoall: every rank sends a block to every other rank at once.
#include <cstring>

#include "workload/kinds.hpp"

namespace rc::workload {
namespace {

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

}  // namespace

extern const Kind kind_alltoall;
const Kind kind_alltoall{
    .name = "alltoall",
    .summary = "every rank sends size/n to every other rank at once; busbw x (n-1)/n",
    .bus = [](double n) { return (n - 1) / n; },
    .algBytes = [](uint64_t size, int) { return size; },
    .make = [](const Shape& s) -> std::unique_ptr<Collective> { return std::make_unique<AllToAll>(s); },
};

}  // namespace rc::workload
