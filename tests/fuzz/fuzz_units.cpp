// Fuzz harness: the unit parsers users write in playbooks and configs (durations, sizes, rates).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // What parses must print: the printers take every value a parser returns.
  if (auto d = rc::parseDuration(text)) (void)rc::formatDuration(*d);
  if (auto s = rc::parseSize(text)) (void)rc::formatSize(*s);
  if (auto b = rc::parseBitRate(text)) (void)rc::formatBitRate(double(*b));
  if (auto r = rc::parsePerSecond(text)) (void)rc::formatBitRate(*r);
  return 0;
}
