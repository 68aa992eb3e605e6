// Fuzz harness: the agent's configuration file (TOML), including the ecn command templates.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)rc::agent::parseConfig(text, "fuzz/agent.toml");
  return 0;
}
