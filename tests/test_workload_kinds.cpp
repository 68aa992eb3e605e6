// The workload kinds' table (workload/kinds.hpp): names unique and found again, nccl-tests'
// bus bandwidth factors, and the lists the parser and the agent name come from the table.
#include <catch2/catch.hpp>
#include <set>

#include "controller/playbook/playbook.hpp"
#include "workload/kinds.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_workload_kinds {

using namespace rc;

TEST_CASE("every workload kind has a unique name that findKind finds again") {
  REQUIRE_FALSE(workload::kinds().empty());
  std::set<std::string_view> names;
  for (const auto* k : workload::kinds()) {
    INFO(k->name);
    CHECK_FALSE(k->name.empty());
    CHECK_FALSE(k->summary.empty());
    CHECK(names.insert(k->name).second);
    CHECK(workload::findKind(k->name) == k);
    // A kind is either run by the engine or external, never both nor neither.
    CHECK((k->make != nullptr) != (k->external != nullptr));
    CHECK(k->bus != nullptr);
  }
  CHECK(workload::findKind("reduce") == nullptr);
  CHECK(workload::findKind("") == nullptr);
  std::string joined;
  for (const auto* k : workload::kinds()) joined += (joined.empty() ? "" : ", ") + std::string(k->name);
  CHECK(workload::kindNames() == joined);
  CHECK(workload::externalKindNames() == "perftest");
}

TEST_CASE("bus bandwidth factors are nccl-tests'") {
  auto [name, n, want] = GENERATE(table<std::string, size_t, double>({
      {"allreduce", 4, 1.5},
      {"allgather", 4, 0.75},
      {"alltoall", 4, 0.75},
      {"incast", 4, 1.0},
      {"pairwise", 4, 1.0},
      {"allreduce", 2, 1.0},
      {"allreduce", 8, 1.75},
      {"alltoall", 8, 0.875},
      {"perftest", 2, 1.0},
      {"allreduce", 0, 1.0},  // no ranks: no factor to apply
  }));
  INFO(name << " with " << n << " ranks");
  const auto* k = workload::findKind(name);
  REQUIRE(k);
  CHECK(k->busFactor(n) == Approx(want));
}

TEST_CASE("the parser's unknown-kind error lists exactly the table's kinds") {
  const std::string head = "name = \"t\"\n[workload]\n";
  const std::string tail = "[[phase]]\nname = \"baseline\"\nduration = \"10s\"\n";
  auto bad = controller::parsePlaybook(head + "kind = \"reduce\"\n" + tail, "p.toml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "p.toml:3:8: workload kind 'reduce' is unknown (known: " + workload::kindNames() + ")");
  // Every kind of the table is accepted by its name.
  for (const auto* k : workload::kinds()) {
    auto pb = controller::parsePlaybook(head + "kind = \"" + std::string(k->name) + "\"\n" + tail, "p.toml");
    INFO(k->name << ": " << (pb ? "" : pb.error().message));
    REQUIRE(pb);
    CHECK(pb->workload.kind == k);
  }
  // Without a kind: the first of the table, then the others.
  auto none = controller::parsePlaybook(head + "size = \"1MiB\"\n" + tail, "p.toml");
  REQUIRE_FALSE(none);
  const std::string names = workload::kindNames();
  const std::string first(workload::kinds().front()->name);
  CHECK_THAT(none.error().message, Catch::Contains("[workload] needs kind = \"" + first + "\" (or " +
                                                   names.substr(first.size() + 2) + ")"));
}

TEST_CASE("the shape checks of a kind are its record's") {
  auto shape = [](const char* kind, int world, uint64_t size, int receiver = 0, int fanIn = 0) {
    return workload::Shape{workload::findKind(kind), 0, world, size, receiver, fanIn};
  };
  CHECK(workload::validateShape(shape("allreduce", 4, 4096)).ok());
  CHECK(workload::validateShape(shape("allreduce", 4, 4098)).error().message ==
        "allreduce size must be a multiple of 4 bytes (float32 elements)");
  CHECK(workload::validateShape(shape("pairwise", 3, 4096)).error().message ==
        "pairwise needs an even number of ranks (pairs 0-1, 2-3, ...)");
  CHECK(workload::validateShape(shape("incast", 4, 4096, 4)).error().message == "incast receiver is outside the world");
  CHECK(workload::validateShape(shape("incast", 4, 4096, 3, 4)).error().message ==
        "incast fan_in must be 0 (all senders) to world - 1");
  // The engine runs built-in kinds only.
  CHECK(workload::makeCollective(shape("perftest", 2, 4096)) == nullptr);
  CHECK_THAT(workload::allocateRunBuffer(shape("perftest", 2, 4096)).error().message,
             Catch::Contains("runs an external program"));
}

}  // namespace test_workload_kinds
