// Every playbook in playbooks/ validates and resolves against a 3-node lab inventory, and every
// fault kind a playbook names is registered in this build.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <toml++/toml.h>

#include "controller/playbook/playbook.hpp"
#include "faults/fault.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_playbooks_shipped {

using namespace rc::controller;
namespace fs = std::filesystem;

namespace {

// What `rdmachaos lab up --nodes 3` writes, minus paths that do not matter here.
const char* kLabInventory = R"(
[tls]
ca = "pki/ca.pem"
cert = "pki/controller.pem"
key = "pki/controller.key"
[[node]]
name = "n1"
address = "198.18.1.11"
data_interfaces = ["data0"]
data_addresses = ["198.19.1.11"]
roles = ["worker"]
[[node]]
name = "n2"
address = "198.18.1.12"
data_interfaces = ["data0"]
data_addresses = ["198.19.1.12"]
roles = ["worker"]
[[node]]
name = "n3"
address = "198.18.1.13"
data_interfaces = ["data0"]
data_addresses = ["198.19.1.13"]
roles = ["worker"]
)";

std::string sourceDir() {
  const char* s = std::getenv("RDMACHAOS_SOURCE_DIR");
  return s && *s ? s : RDMACHAOS_SOURCE_ROOT;
}

// The fault kinds a playbook's steps name, read with plain TOML so it works even when the
// playbook cannot validate in this build.
std::set<std::string> kindsOf(const toml::table& root) {
  std::set<std::string> kinds;
  auto steps = [&](const toml::node* n) {
    if (auto* a = n ? n->as_array() : nullptr)
      for (auto& s : *a)
        if (auto* t = s.as_table())
          if (auto k = t->get_as<std::string>("kind")) kinds.insert(k->get());
  };
  steps(root.get("step"));
  if (auto* sc = root.get_as<toml::array>("scenario"))
    for (auto& s : *sc)
      if (auto* t = s.as_table()) steps(t->get("step"));
  return kinds;
}

}  // namespace

TEST_CASE("shipped playbooks validate and resolve on the lab inventory") {
  fs::path dir = fs::path(sourceDir()) / "playbooks";
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".toml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 8);
  auto inv = parseInventory(kLabInventory, "lab/inventory.toml");
  REQUIRE(inv);
  size_t validated = 0;
  for (const auto& f : files) {
    CAPTURE(f.string());
    toml::table root;
    REQUIRE_NOTHROW(root = toml::parse_file(f.string()));
    for (const auto& k : kindsOf(root)) {
      CAPTURE(k);
      CHECK(rc::faults::findKind(k) != nullptr);
    }
    auto pb = loadPlaybook(f.string());
    INFO((pb ? "" : pb.error().message));
    REQUIRE(pb);
    auto plan = resolvePlan(*pb, *inv);
    INFO((plan ? "" : plan.error().message));
    REQUIRE(plan);
    CHECK_FALSE(plan->trials.empty());
    std::printf("ok   %s: %zu trial(s), %s\n", f.filename().c_str(), plan->trials.size(),
                pb->description.substr(0, 60).c_str());
    validated++;
  }
  CHECK(validated == files.size());
}

TEST_CASE("quickstart is small: a lab link flap of about 30 s") {
  auto pb = loadPlaybook(sourceDir() + "/playbooks/quickstart.toml");
  REQUIRE(pb);
  CHECK(pb->faultKinds() == std::vector<std::string>{"link_flap"});
  auto inv = parseInventory(kLabInventory, "lab/inventory.toml");
  auto plan = resolvePlan(*pb, *inv);
  REQUIRE(plan);
  CHECK(plan->durationNs >= 20'000'000'000);
  CHECK(plan->durationNs <= 40'000'000'000);
}

}  // namespace test_playbooks_shipped
