// The checks every shape passes whatever its kind, and the dispatch to the kind's own checks
// and plan (workload/kinds/NAME.cpp holds each collective).
#include "workload/collectives.hpp"

#include <algorithm>
#include <array>

#include "common/protocol.hpp"
#include "workload/kinds.hpp"

namespace rc::workload {

Result<void> validateShape(const Shape& s) {
  if (!s.kind) return makeError("unknown workload kind (known: " + kindNames() + ")");
  if (s.world < 2 || s.world > 256) return makeError("a workload needs 2 to 256 ranks");
  if (s.rank < 0 || s.rank >= s.world) return makeError("rank is outside the world");
  if (s.size == 0 || s.size > uint64_t(proto::kMaxWorkloadSize)) return makeError("size must be 1 B to 1 GiB");
  if (s.kind->check) return s.kind->check(s);
  return {};
}

const uint8_t* blockPatternBase() {
  static const auto table = [] {
    std::array<uint8_t, kPatternPeriod> t{};
    for (size_t i = 0; i < kPatternPeriod; i++) t[i] = uint8_t(blockPattern(0, i));
    return t;
  }();
  return table.data();
}

void fillBlock(std::byte* p, size_t block, size_t len) {
  const uint8_t* base = blockPatternBase();
  const auto add = uint8_t(block * 131);
  auto* out = reinterpret_cast<uint8_t*>(p);
  for (size_t off = 0; off < len; off += kPatternPeriod) {
    const size_t n = std::min(kPatternPeriod, len - off);
    for (size_t j = 0; j < n; j++) out[off + j] = uint8_t(base[j] + add);
  }
}

bool checkBlock(const std::byte* p, size_t block, size_t len) {
  const uint8_t* base = blockPatternBase();
  const auto add = uint8_t(block * 131);
  const auto* in = reinterpret_cast<const uint8_t*>(p);
  for (size_t off = 0; off < len; off += kPatternPeriod) {
    const size_t n = std::min(kPatternPeriod, len - off);
    uint8_t diff = 0;  // OR of every byte's difference: no branch in the loop
    for (size_t j = 0; j < n; j++) diff |= uint8_t(in[off + j] ^ uint8_t(base[j] + add));
    if (diff) return false;
  }
  return true;
}

std::unique_ptr<Collective> makeCollective(const Shape& s) {
  return s.kind && s.kind->make ? s.kind->make(s) : nullptr;
}

}  // namespace rc::workload
