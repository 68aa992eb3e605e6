// The inventory: which agents exist, where to reach them, and the TLS material to use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "common/tls.hpp"

namespace rc::controller {

struct Node {
  std::string name;
  std::string address;  // management address (IP literal or host name)
  uint16_t port = 7470;
  std::vector<std::string> dataInterfaces;
  std::vector<std::string> dataAddresses;
  std::vector<std::string> roles;
};

struct Inventory {
  std::string path;
  tls::Material tls;  // absolute paths
  std::string labDir;  // set when a lab wrote this inventory
  std::string switchControl;  // [lab] switch_control: the lab switch's socket (fabric evidence)
  std::vector<Node> nodes;

  const Node* find(const std::string& name) const;
  // "all", a node name, or a role: the nodes it names, or an error listing the known names.
  Result<std::vector<const Node*>> select(const std::string& selector) const;
};

Result<Inventory> loadInventory(const std::string& path);
Result<Inventory> parseInventory(const std::string& text, const std::string& path);

}  // namespace rc::controller
