// Workload kind incast: every sender sends SIZE to one receiver, FAN_IN senders at a time.
#include <cstring>

#include "workload/kinds.hpp"

namespace rc::workload {
namespace {

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

}  // namespace

extern const Kind kind_incast;
const Kind kind_incast{
    .name = "incast",
    .summary = "every sender sends size to the receiver (--receiver, default the last), --fan-in at a time",
    .bus = [](double) { return 1.0; },
    .algBytes = [](uint64_t size, int ranks) { return size * uint64_t(ranks - 1); },
    .check = [](const Shape& s) -> Result<void> {
      if (s.incastReceiver < 0 || s.incastReceiver >= s.world)
        return makeError("incast receiver is outside the world");
      if (s.fanIn < 0 || s.fanIn > s.world - 1) return makeError("incast fan_in must be 0 (all senders) to world - 1");
      return {};
    },
    .make = [](const Shape& s) -> std::unique_ptr<Collective> { return std::make_unique<Incast>(s); },
    .memoryNote = " x fan_in on the receiver",
};

}  // namespace rc::workload
