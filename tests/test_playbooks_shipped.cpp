// Every playbook in playbooks/ validates and resolves against a 3-node lab inventory, and every
// fault kind a playbook names is registered in this build.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
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
  }
}

// Every shipped playbook and the lab test that runs it and asserts its verdict as shipped: a new
// playbook without one fails here. An empty case is a gap, said with its reason (docs/status.md).
TEST_CASE("every shipped playbook names the test case that asserts its verdict") {
  struct Owner {
    const char* file;      // tests/...
    const char* testCase;  // the case's name, as written in that file
    const char* gap;       // why there is none yet (testCase empty)
  };
  const std::map<std::string, Owner> owners = {
      {"acceptance-suite", {"test_lab_playbooks.cpp", "acceptance-suite runs on the lab, and passes", ""}},
      {"adaptive-routing", {"test_lab_playbooks.cpp", "adaptive-routing: adaptive routing stalls less than ECMP", ""}},
      {"cluster-acceptance", {"test_lab_playbooks.cpp", "", "run with one node held down (must fail), not as shipped"}},
      {"ecn-shallow", {"test_lab_playbooks.cpp", "ecn-shallow: a mild fault is seen, and passes", ""}},
      {"ecn-threshold-sweep", {"test_lab_playbooks.cpp", "ecn-threshold-sweep runs on the lab", ""}},
      {"game-day", {"test_lab_playbooks.cpp", "game-day runs on the lab", ""}},
      {"gbn", {"test_vm_lab.cpp", "packet faults on rxe: a dropped WRITE is NAKed and resent from its PSN", ""}},
      {"incast", {"test_lab_playbooks.cpp", "incast runs on the lab, and its recovery agrees with the switch's ground truth", ""}},
      {"link-flap-recovery", {"test_lab_playbooks.cpp", "link-flap-recovery runs on the lab", ""}},
      {"lossy-roce", {"test_vm_lab.cpp", "", "runs to a report; its verdict is not asserted (goodput only)"}},
      {"mpi-flap", {"test_mpi_job.cpp", "mpi-flap: an Open MPI job started by rdmachaos", ""}},
      {"mpi-ucx-roce", {"test_vm_lab.cpp", "mpi-ucx-roce: Open MPI over UCX on rxe survives a flap and a dropped SEND", ""}},
      {"noise-floor", {"test_truth.cpp", "truth: a noop costs nothing (playbooks/noise-floor.toml", ""}},
      {"observed-job", {"test_observed_job.cpp", "an Open MPI job watched through its own records", ""}},
      {"pfc-storm-watchdog", {"test_lab_playbooks.cpp", "pfc-storm-watchdog: the watchdog shortens the victim's stall", ""}},
      {"quickstart", {"test_run_e2e.cpp", "", "test_run_e2e runs it but accepts exit 1 (its stall is bounded from below only)"}},
      {"search-flap-boundary",
       {"test_lab_playbooks.cpp", "search-flap-boundary: the search finds an interval, and its reproducer fails as it said",
        ""}},
      {"quickstart-soft-roce", {"test_vm_lab.cpp", "", "the demo --soft-roce case checks the report exists, not its verdict"}},
  };
  fs::path dir = fs::path(sourceDir()) / "playbooks";
  std::vector<std::string> gaps;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    const std::string name = e.path().stem().string();
    CAPTURE(name);
    auto it = owners.find(name);
    REQUIRE(it != owners.end());  // a new playbook: add the case that asserts its verdict
    const Owner& o = it->second;
    std::ifstream in(fs::path(sourceDir()) / "tests" / o.file);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().find(name) != std::string::npos);  // the file runs that playbook
    if (*o.testCase) {
      CHECK(text.str().find(o.testCase) != std::string::npos);
    } else {
      CHECK(*o.gap);
      gaps.push_back(name + ": " + o.gap);
    }
  }
  for (const auto& g : gaps) std::printf("no verdict asserted: %s\n", g.c_str());
  CHECK(gaps.size() <= 4);  // the four known when this map was made; the list may only shrink
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
