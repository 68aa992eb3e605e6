// Fuzz harness: the controller's inventory (TOML) parser and its node selectors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "controller/fleet/inventory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto inv = rc::controller::parseInventory(text, "fuzz/inventory.toml");
  if (!inv) return 0;
  for (const char* selector : {"all", "worker", "n1", "nobody"}) (void)inv->select(selector);
  for (const auto& n : inv->nodes)
    for (const auto& r : n.roles) (void)inv->select(r);
  return 0;
}
