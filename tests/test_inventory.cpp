// Inventory: parsing, relative TLS paths, selectors, and errors with places.
#include <catch2/catch.hpp>

#include "controller/fleet/inventory.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_inventory {

using namespace rc::controller;

namespace {
const char* kInv = R"(
[tls]
ca = "pki/ca.pem"
cert = "pki/controller.pem"
key = "/abs/controller.key"
[[node]]
name = "n1"
address = "198.18.1.11"
data_interfaces = ["data0"]
roles = ["worker", "receiver"]
[[node]]
name = "n2"
address = "198.18.1.12"
port = 7471
roles = ["worker"]
)";
}

TEST_CASE("inventory parses with paths relative to the file") {
  auto inv = parseInventory(kInv, "/lab/inventory.toml");
  REQUIRE(inv.ok());
  CHECK(inv->tls.caFile == "/lab/pki/ca.pem");
  CHECK(inv->tls.keyFile == "/abs/controller.key");
  REQUIRE(inv->nodes.size() == 2);
  CHECK(inv->nodes[0].port == 7470);
  CHECK(inv->nodes[1].port == 7471);
  CHECK(inv->nodes[0].dataInterfaces == std::vector<std::string>{"data0"});
}

TEST_CASE("selectors: all, a name, a role; unknown ones list the nodes") {
  auto inv = parseInventory(kInv, "inv.toml");
  REQUIRE(inv.ok());
  CHECK(inv->select("all")->size() == 2);
  CHECK(inv->select("n2")->front()->name == "n2");
  CHECK(inv->select("worker")->size() == 2);
  CHECK(inv->select("receiver")->size() == 1);
  auto bad = inv->select("n9");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("n1, n2"));
}

TEST_CASE("bad inventories are refused with file:line:col") {
  auto [from, to, fragment] = GENERATE(table<std::string, std::string, std::string>({
      {"name = \"n2\"", "name = \"n1\"", "inv.toml:11:1: node 'n1' appears twice"},
      {"port = 7471", "port = 70000", "inv.toml:14:8: port must be in 1..65535"},
      {"port = 7471", "prot = 7471", "unknown node key 'prot'"},
      {"name = \"n2\"", "name = \"n 2\"", "must be 1-64 characters"},
      {"address = \"198.18.1.12\"", "", "has no address"},
      {"[tls]", "[tsl]", "unknown key 'tsl'"},
      {"roles = [\"worker\"]", "roles = \"worker\"", "roles must be a list"},
  }));
  std::string text = kInv;
  auto pos = text.rfind(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  auto inv = parseInventory(text, "inv.toml");
  REQUIRE_FALSE(inv.ok());
  CHECK_THAT(inv.error().message, Catch::Contains(fragment));
}

}  // namespace test_inventory
