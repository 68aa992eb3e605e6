// rdmachaos-labswitch: runs the lab switch described by a JSON configuration file.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "labswitch/switch.hpp"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--relay") == 0) {
    if (auto r = rc::labswitch::relay(argv[2], 0, 1); !r) {
      std::fprintf(stderr, "rdmachaos-labswitch --relay: %s\n", r.error().message.c_str());
      return 1;
    }
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--ecn-profile") == 0)
    return rc::labswitch::ecnProfileMain(std::vector<std::string>(argv + 2, argv + argc));
  if (argc != 3 || std::strcmp(argv[1], "--config") != 0) {
    std::fprintf(stderr,
                 "usage: rdmachaos-labswitch --config FILE | --relay SOCKET | --ecn-profile SOCKET "
                 "show|set|restore PORT QUEUE ... (see docs/lab.md)\n");
    return 2;
  }
  rc::log::setComponent("labswitch");
  std::ifstream in(argv[2]);
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!in || j.is_discarded()) {
    rc::log::error("cannot read switch configuration '{}' (missing or not JSON)", argv[2]);
    return 2;
  }
  auto config = rc::labswitch::parseConfig(j);
  if (!config) {
    rc::log::error("'{}': {}", argv[2], config.error().message);
    return 2;
  }
  if (auto r = rc::labswitch::run(*config); !r) {
    rc::log::error("{}", r.error().message);
    return 1;
  }
  return 0;
}
