// The collectives as plans: a buffer layout, and per iteration a fixed sequence of steps
// (sets of ops handed to the transport at once) with local work between steps.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "workload/transport.hpp"

namespace rc::workload {

struct Kind;  // workload/kinds.hpp

struct Shape {
  const Kind* kind = nullptr;  // workload/kinds.hpp: findKind(name)
  int rank = 0;
  int world = 2;
  uint64_t size = 0;     // bytes: the collective's size as nccl-tests counts it
  int incastReceiver = 0;
  int fanIn = 0;         // incast: senders at a time (0 = all)
  // The transport completes a send without waiting for the peer's receive (Transport::
  // eagerSends: TCP, in-process), so a plan may send ahead of what it receives (allreduce's
  // slices). Set by the engine; a plan's buffer size must not depend on it.
  bool eagerSends = false;
};

// Checks what a plan needs (world, sizes, and the kind's own rules: an incast's receiver), with
// an error naming the fix.
Result<void> validateShape(const Shape& shape);

class Collective {
 public:
  virtual ~Collective() = default;
  virtual size_t bufferBytes() const = 0;
  virtual std::vector<int> peers() const = 0;  // ranks this one exchanges data with
  // Writes this rank's input for a new iteration.
  virtual void prepare(std::span<std::byte> buffer) const = 0;
  virtual size_t stepCount() const = 0;
  virtual std::vector<Op> ops(size_t step) const = 0;
  virtual void afterStep(size_t step, std::span<std::byte> buffer) const { (void)step, (void)buffer; }
  // True when the buffer holds exactly what the collective must produce.
  virtual bool verify(std::span<const std::byte> buffer) const = 0;
};

// The plan of SHAPE's kind (its Kind::make); null for a kind the engine does not run (external).
std::unique_ptr<Collective> makeCollective(const Shape& shape);

// Element I of rank R's all-reduce input: small integers, so float sums are exact whatever
// the order of the additions.
constexpr size_t kAllreduceInputPeriod = 251;
inline float allreduceInput(int rank, size_t i) {
  return float((rank + 1) * int((i % kAllreduceInputPeriod) + 1));
}

// Range [begin, end) of chunk C when N items are split into K near-equal chunks.
inline size_t chunkBegin(size_t n, size_t k, size_t c) { return n * c / k; }

// Byte I of block B: distinct per block and position, so misplaced data fails verification.
// Periodic in I with kPatternPeriod, and block B's bytes are block 0's plus B * 131 (mod 256).
inline std::byte blockPattern(size_t block, size_t i) {
  return std::byte(uint8_t((block * 131 + i * 7 + (i >> 8)) & 0xff));
}
constexpr size_t kPatternPeriod = 65536;
// Block 0's first kPatternPeriod bytes (blockPattern(0, i)), computed once.
const uint8_t* blockPatternBase();
// Fill and check a block by its period's table, a pass the compiler vectorises: these run on
// every iteration between the ring's steps, where a rank's CPU time is every rank's wait
// (a byte at a time, checking 4 MiB took a rank milliseconds of the lab's two cores).
void fillBlock(std::byte* p, size_t block, size_t len);
bool checkBlock(const std::byte* p, size_t block, size_t len);
// A modulo N in [0, N) (ring neighbours of rank 0 are N-1 and 1).
inline int ringMod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace rc::workload
