// Playbooks: parsing, every kind of error with its place, and plan resolution.
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <sstream>
#include <set>

#include "common/toml_text.hpp"
#include "controller/cli/commands.hpp"
#include "controller/playbook/playbook.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"
#include "synthetic_run.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_playbook {

using namespace rc::controller;

namespace {

using rctest::kS;

const char* kInventory = R"(
[tls]
ca = "ca.pem"
cert = "c.pem"
key = "c.key"
[[node]]
name = "n1"
address = "10.0.0.1"
data_addresses = ["10.1.0.1"]
roles = ["worker", "receiver"]
[[node]]
name = "n2"
address = "10.0.0.2"
data_addresses = ["10.1.0.2"]
roles = ["worker"]
[[node]]
name = "n3"
address = "10.0.0.3"
data_addresses = ["10.1.0.3"]
roles = ["worker"]
[[node]]
name = "n4"
address = "10.0.0.4"
roles = ["worker"]   # no data address: cannot be an incast receiver
)";

// Header shared by the error cases; line numbers in the cases count from here (line 1).
const std::string kHead = R"(name = "t"
[workload]
kind = "allreduce"
[[phase]]
name = "baseline"
duration = "10s"
[[phase]]
name = "fault"
duration = "10s"
)";

Inventory inventory() { return *parseInventory(kInventory, "inv.toml"); }

}  // namespace

TEST_CASE("a complete playbook parses into its parts") {
  const char* text = R"(name = "full"
description = "everything"
seed = 42
repeat = 2
[workload]
kind = "alltoall"
size = "8MiB"
streams = 4
nodes = ["worker"]
transport = "verbs"
[guardrails]
min_baseline = "1Gbps"
abort_on_agent_loss = false
max_stall = "5s"
[scoring]
bin = "20ms"
warmup = "2s"
epsilon = 0.1
hold = "500ms"
stall_fraction = 0.2
[cost]
gpus = 1024
price_per_gpu_hour = 2.5
currency = "EUR"
incidents_per_day = 0.5
days = 30
[[phase]]
name = "baseline"
duration = "10s"
[[phase]]
name = "fault"
duration = "5s"
[[phase]]
name = "recovery"
duration = "15s"
[[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
at = "1s"
for = "3s"
target = { random = 2, from = "worker" }
[step.params]
down = "500ms"
count = 2
up = "1s"
[[expect]]
metric = "recovery_time"
op = "<="
bound = "2s"
[[expect]]
metric = "throughput_loss_pct"
op = "<"
bound = 20
scope = "n1"
[[expect]]
metric = "baseline"
op = ">="
bound = "8Gbps"
[[expect]]
metric = "counter.link_downed"
op = ">="
bound = 1
)";
  auto pb = parsePlaybook(text, "full.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  CHECK(pb->name == "full");
  CHECK(pb->seed == 42);
  CHECK(pb->repeat == 2);
  CHECK(pb->workload.kind->name == "alltoall");
  CHECK(pb->workload.sizeBytes == 8u << 20);
  CHECK(pb->workload.streams == 4);
  CHECK(pb->workload.transport == "verbs");
  CHECK(pb->guardrails.minBaselineBytesPerSec == 125e6);
  CHECK_FALSE(pb->guardrails.abortOnAgentLoss);
  CHECK(pb->guardrails.maxStallNs == 5 * kS);
  CHECK(pb->scoring.binNs == 20'000'000);
  CHECK(pb->scoring.epsilon == 0.1);
  CHECK(pb->cost.currency == "EUR");
  REQUIRE(pb->scenarios.size() == 1);
  const Scenario& sc = pb->scenarios[0];
  CHECK(sc.name == "full");
  CHECK(sc.durationNs() == 30 * kS);
  REQUIRE(sc.steps.size() == 1);
  const Step& s = sc.steps[0];
  CHECK(s.kind == "link_flap");
  CHECK(s.phase == "fault");
  CHECK(s.atNs == 1 * kS);
  CHECK(s.forNs == 3 * kS);
  CHECK(s.target.random == 2);
  CHECK(s.target.describe() == "random 2 of worker");
  CHECK(s.params["down"] == 500'000'000);  // normalised by the fault kind
  CHECK(s.params["count"] == 2);
  CHECK(s.params["jitter"] == 0);           // default filled in
  CHECK(s.rawParams["down"] == "500ms");
  REQUIRE(sc.expectations.size() == 4);
  CHECK(sc.expectations[0].bound == 2e9);
  CHECK(sc.expectations[0].describe() == "recovery_time <= 2s (job)");
  CHECK(sc.expectations[1].scope == "n1");
  CHECK(sc.expectations[1].op == Comparison::less);
  CHECK(sc.expectations[2].bound == 1e9);  // 8 Gb/s in bytes/s
  CHECK(sc.expectations[3].metric == "counter.link_downed");
  CHECK(pb->faultKinds() == std::vector<std::string>{"link_flap"});
}

TEST_CASE("a step's lifetime defaults to the rest of its phase") {
  auto pb = parsePlaybook(kHead + R"([[step]]
kind = "link_flap"
phase = "fault"
at = "2s"
target = "n1"
)", "p.toml");
  REQUIRE(pb);
  CHECK(pb->scenarios[0].steps[0].name == "step1");
  CHECK(pb->scenarios[0].steps[0].forNs == 8 * kS);
}

TEST_CASE("capture = true on a step adds a capture-only packet step on the same targets and times") {
  auto pb = parsePlaybook(kHead + R"([[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
at = "2s"
for = "3s"
target = "n1"
capture = true
)", "p.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  const auto& steps = pb->scenarios[0].steps;
  REQUIRE(steps.size() == 2);
  CHECK(steps[1].name == "flap-capture");
  CHECK(steps[1].kind == "packet");
  CHECK(steps[1].params["action"] == "none");
  CHECK(steps[1].params["capture"] == true);
  CHECK(steps[1].params["duration"] == 3 * kS);
  CHECK(steps[1].atNs == steps[0].atNs);
  CHECK(steps[1].forNs == steps[0].forNs);
  CHECK(steps[1].phase == "fault");
  auto plan = resolvePlan(*pb, inventory());
  REQUIRE(plan);
  CHECK(plan->trials[0].faults.size() == 2);
  auto bad = parsePlaybook(kHead + R"([[step]]
kind = "packet"
phase = "fault"
target = "n1"
capture = true
params = { action = "drop" }
)", "p.toml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("captures by itself"));
}

TEST_CASE("a flap train longer than its step's lifetime is refused; one that fits parses") {
  auto flaps = [](const std::string& params) {
    return parsePlaybook(kHead + "[[step]]\nname = \"flap\"\nkind = \"link_flap\"\nphase = \"fault\"\nat = \"1s\"\n"
                                 "for = \"5s\"\ntarget = \"n1\"\nparams = " + params + "\n",
                         "p.toml");
  };
  auto fits = flaps("{ down = \"2s\", count = 2, up = \"1s\" }");  // 2 + 1 + 2 = 5 s
  INFO((fits ? "" : fits.error().message));
  CHECK(fits);
  auto cut = flaps("{ down = \"2s\", count = 2, up = \"1500ms\" }");  // 5.5 s
  REQUIRE_FALSE(cut);
  CHECK_THAT(cut.error().message, Catch::StartsWith("p.toml:") &&
                                      Catch::Contains("step 'flap' flaps for 5500ms (2 x down + 1 x up) but its lifetime "
                                                      "'for' is 5s") &&
                                      Catch::Contains("lengthen 'for'"));
  CHECK_FALSE(flaps("{ down = \"6s\" }"));
}

struct BadCase {
  std::string body;     // appended to kHead
  std::string message;  // expected in the error, starting with file:line:col
};

TEST_CASE("errors name the file, line and column and what to change") {
  auto c = GENERATE(values<BadCase>({
      {"[[step]\n", "p.toml:10:8: Error while parsing table header: expected ']'"},  // TOML syntax
      {"[scoring]\ncolour = \"red\"\n", "p.toml:11:10: unknown key 'colour' in [scoring] (known: bin, warmup,"},
      {"[[phase]]\nname = \"x\"\nlength = \"1s\"\n", "p.toml:12:10: unknown key 'length' in [[phase]] (known: name, duration)"},
      {"[scoring]\nbin = \"10\"\n", "p.toml:11:7: bin: duration '10' needs a unit"},
      {"[scoring]\nbin = 10\n", "p.toml:11:7: bin must be a duration with a unit in quotes"},
      {"[scoring]\nepsilon = 0.9\n", "p.toml:11:11: epsilon = 0.9 is out of range [0.001, 0.5]"},
      {"[scoring]\nwarmup = \"10s\"\n", "p.toml:4:1: warm-up (10s) leaves nothing of the baseline phase"},
            {"[guardrails]\nmin_baseline = \"1Gbit\"\n", "p.toml:11:16: min_baseline: bit rate '1Gbit' has unknown unit"},
      {"[[step]]\nkind = \"pfc_bomb\"\nphase = \"fault\"\ntarget = \"n1\"\n",
       "p.toml:11:8: unknown fault kind 'pfc_bomb' (known: link_flap"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"n1\"\nparams = { dwn = \"1s\" }\n",
       "p.toml:14:18: link_flap has no parameter 'dwn' (known: interface, down, count, up, jitter, seed, switch_port, socket)"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"n1\"\nparams = { count = 0 }\n",
       "p.toml:14:20: link_flap parameter 'count' = 0 is out of range [1, 1000]"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"n1\"\nparams = { down = 5 }\n",
       "p.toml:14:19: link_flap parameter 'down' must be a duration with a unit"},
      {"[[step]]\nkind = \"link_flap\"\ntarget = \"n1\"\nat = \"5s\"\n",
       "p.toml:13:6: step 'step1' starts at 5s, inside the baseline phase 'baseline'"},
      {"[[step]]\nkind = \"link_flap\"\ntarget = \"n1\"\nat = \"25s\"\n",
       "p.toml:13:6: step 'step1' starts at 25s, at or after the end of the timeline (20s)"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\nat = \"5s\"\nfor = \"6s\"\ntarget = \"n1\"\n",
       "p.toml:14:7: step 'step1' may run until 21s, after the timeline ends at 20s"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"recovery\"\ntarget = \"n1\"\n",
       "p.toml:12:9: no phase 'recovery' (phases: baseline, fault)"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = { random = 0, from = \"worker\" }\n",
       "p.toml:13:21: step 'step1' target random = 0 is out of range [1, 100000]"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = 3\n",
       "p.toml:13:10: step 'step1' target must be a node name, a role"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\n", "p.toml:10:1: step 'step1' needs a target"},
      {"[[expect]]\nmetric = \"recovery\"\nop = \"<\"\nbound = \"1s\"\n",
       "p.toml:11:10: unknown metric 'recovery' (known: baseline, time_to_impact, recovery_time,"},
      {"[[require]]\nmetric = \"pause\"\nop = \">\"\nbound = 0\n",
       "p.toml:11:10: unknown metric 'pause' (known: baseline, time_to_impact, recovery_time,"},
      {"[[require]]\nmetric = \"pause_frames\"\nbound = 0\n",
       "p.toml:10:1: [[require]] needs op = \"<\", \"<=\", \">\" or \">=\""},
      {"[[expect]]\nmetric = \"recovery_time\"\nop = \"=<\"\nbound = \"1s\"\n",
       "p.toml:12:6: op '=<' is not a comparison: use <, <=, > or >="},
      {"[[expect]]\nmetric = \"recovery_time\"\nop = \"<\"\nbound = 2\n",
       "p.toml:13:9: bound of recovery_time must be a duration with a unit in quotes"},
      {"[[expect]]\nmetric = \"throughput_loss_pct\"\nop = \"<\"\nbound = 120\n",
       "p.toml:13:9: bound of throughput_loss_pct = 120 is out of range [0, 100]"},
      {"[[phase]]\nname = \"fault\"\nduration = \"1s\"\n", "p.toml:10:1: phase 'fault' appears twice"},
      {"[[phase]]\nname = \"long\"\nduration = \"2d\"\n", "p.toml:12:12: phase 'long' duration: duration '2d' has unknown unit 'd'"},
      {"[[phase]]\nname = \"long\"\nduration = \"25h\"\n", "p.toml:12:12: phase 'long' duration = 25h is out of range [100ms, 24h]"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"n1\"\n[sweep]\nstep = \"step1\"\nparam = \"kmin\"\nvalues = [1]\n",
       "p.toml:16:9: link_flap has no parameter 'kmin' (known: interface, down,"},
      {"[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"n1\"\n[sweep]\nstep = \"step1\"\nparam = \"count\"\nvalues = [1, 5000]\n",
       "p.toml:17:14: link_flap parameter 'count' = 5000 is out of range [1, 1000]"},
      {"[[scenario]]\nname = \"a\"\n", "p.toml:10:1: use either [[scenario]] tables or top-level"},
      {"[workload.x]\n", "p.toml:10:1: unknown key 'x' in [workload] (known: kind, size, streams, nodes, transport, dscp,"},
      {"[[step]]\nkind = \"incast\"\nphase = \"fault\"\ntarget = \"all\"\nparams = { receiver = \"n1\", senders = 2, fan_in = 5 }\n",
       "p.toml:14:51: step 'step1' fan_in 5 must be a multiple of senders 2 (each sender opens fan_in / senders flows)"},
      {"[[step]]\nkind = \"incast\"\nphase = \"fault\"\ntarget = \"all\"\nparams = { senders = 2 }\n",
       "p.toml:14:10: incast parameter 'receiver' is required"},
  }));
  auto pb = parsePlaybook(kHead + c.body, "p.toml");
  REQUIRE_FALSE(pb);
  INFO(pb.error().message);
  // Every error of the file is reported, one per line (a case may make more than one).
  CHECK(("\n" + pb.error().message).find("\n" + c.message) != std::string::npos);
}

// validate reports every error of a file in one pass (issue 25): each part (a table, a phase, a
// step, an expectation) is checked even after an earlier one failed, one line per error,
// sorted by position; steps are not checked against a timeline whose phase is in error.
TEST_CASE("every error of a playbook at once, by position") {
  const std::string body = kHead + R"([scoring]
epsilon = 2
[[step]]
kind = "link_flap"
phase = "fault"
target = "n1"
params = { dwn = "1s" }
[[expect]]
metric = "recovery"
op = "<"
bound = "1s"
[guardrails]
max_stall = 5
)";
  auto pb = parsePlaybook("colour = \"red\"\n" + body, "p.toml");
  REQUIRE_FALSE(pb);
  std::vector<std::string> lines;
  std::istringstream in(pb.error().message);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  INFO(pb.error().message);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].rfind("p.toml:1:10: unknown key 'colour' in the playbook", 0) == 0);
  CHECK(lines[1].rfind("p.toml:12:11: epsilon = 2 is out of range", 0) == 0);
  CHECK(lines[2].rfind("p.toml:17:18: link_flap has no parameter 'dwn'", 0) == 0);
  CHECK(lines[3].rfind("p.toml:19:10: unknown metric 'recovery'", 0) == 0);
  CHECK(lines[4].rfind("p.toml:23:13: max_stall must be a duration with a unit", 0) == 0);

  // A phase in error: its steps are not placed on the broken timeline (no second error for
  // the same cause), the expectations after it still are checked.
  auto broken = parsePlaybook(R"(name = "t"
[workload]
kind = "allreduce"
[[phase]]
name = "baseline"
duration = "10d"
[[step]]
kind = "link_flap"
phase = "baseline"
target = "n1"
[[expect]]
metric = "recovery_time"
bound = "1s"
)",
                              "q.toml");
  REQUIRE_FALSE(broken);
  INFO(broken.error().message);
  CHECK(broken.error().message ==
        "q.toml:6:12: phase 'baseline' duration: duration '10d' has unknown unit 'd': use ns, us, ms, s, m or h\n"
        "q.toml:11:1: [[expect]] needs op = \"<\", \"<=\", \">\" or \">=\"\n"
        "q.toml:1:1: note: the steps' times were not checked: they are placed on the phases, which have errors");
}

TEST_CASE("the workload transport is tcp by default; an unknown one is named") {
  auto with = [](const std::string& lines) {
    std::string text = kHead;
    text.replace(text.find("kind = \"allreduce\"\n"), 19, "kind = \"allreduce\"\n" + lines);
    return parsePlaybook(text, "p.toml");
  };
  auto pb = with("");
  REQUIRE(pb);
  CHECK(pb->workload.transport == "tcp");
  auto bad = with("transport = \"udp\"\n");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message,
             Catch::Contains("workload transport 'udp' is unknown (known: tcp, verbs)"));
  auto many = with("streams = 32\ntransport = \"verbs\"\n");
  REQUIRE_FALSE(many);
  CHECK_THAT(many.error().message, Catch::Contains("1 to 16"));
}

TEST_CASE("top-level keys are checked too") {
  CHECK(parsePlaybook("colour = 1\n" + kHead, "p.toml").error().message.rfind(
            "p.toml:1:10: unknown key 'colour' in the playbook (known: name, description, seed,", 0) == 0);
  CHECK(parsePlaybook("repeat = 0\n" + kHead, "p.toml").error().message ==
        "p.toml:1:10: repeat = 0 is out of range [1, 100]");
}

TEST_CASE("missing essentials are named") {
  // Both missing: both said, in the order they were found.
  CHECK(parsePlaybook("[workload]\nkind = \"allreduce\"\n", "p.toml").error().message ==
        "p.toml:1:1: the playbook needs a name, e.g. name = \"link-flap-recovery\"\n"
        "p.toml:1:1: the playbook has no [[phase]]: the first phase is the baseline, e.g. [[phase]] name = \"baseline\" "
        "duration = \"10s\"");
  CHECK(parsePlaybook("name = \"x\"\n", "p.toml").error().message.find("needs a [workload] table") !=
        std::string::npos);
  CHECK(parsePlaybook("name = \"x\"\n[workload]\nkind = \"allreduce\"\n", "p.toml").error().message.find("has no [[phase]]") !=
        std::string::npos);
  CHECK(parsePlaybook("name = \"x y\"\n", "p.toml").error().message.find("must be 1-64 characters") != std::string::npos);
  CHECK(loadPlaybook("/nonexistent/p.toml").error().message.find("cannot read playbook") != std::string::npos);
}

TEST_CASE("resolvePlan: selectors, seeded random picks, absolute offsets") {
  auto pb = parsePlaybook("seed = 99\n" + kHead + R"([[step]]
name = "pick"
kind = "link_flap"
phase = "fault"
at = "1s"
target = { random = 2, from = "worker" }
[[step]]
name = "role"
kind = "link_flap"
phase = "fault"
at = { between = ["2s", "4s"] }
for = "1s"
target = ["receiver", "n4"]
params = { interface = "data1" }   # "pick" may hold the default interface of n1 or n4 then
)",
                          "p.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  auto plan = resolvePlan(*pb, inventory());
  REQUIRE(plan);
  CHECK(plan->workloadNodes == std::vector<std::string>{"n1", "n2", "n3", "n4"});
  REQUIRE(plan->trials.size() == 1);
  const Trial& t = plan->trials[0];
  CHECK(t.baselineFromNs == 1 * kS);
  CHECK(t.baselineToNs == 10 * kS);
  REQUIRE(t.faults.size() == 4);
  int picks = 0;
  for (const auto& f : t.faults) {
    if (f.step == "pick") {
      picks++;
      CHECK(f.atNs == 11 * kS);
      CHECK(f.forNs == 9 * kS);
    } else {
      CHECK((f.node == "n1" || f.node == "n4"));
      CHECK(f.atNs >= 12 * kS);
      CHECK(f.atNs <= 14 * kS);
    }
  }
  CHECK(picks == 2);
  // The same seed gives the same plan; another seed (almost surely) another one.
  auto again = resolvePlan(*pb, inventory());
  CHECK(toJson(*again) == toJson(*plan));
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    Playbook other = *pb;
    other.seed = seed;
    auto p2 = resolvePlan(other, inventory());
    REQUIRE(p2);
    std::string pair;
    for (const auto& f : p2->trials[0].faults)
      if (f.step == "pick") pair += f.node;
    seen.insert(pair);
  }
  CHECK(seen.size() > 2);  // 6 possible pairs: the pick really varies with the seed
}

TEST_CASE("resolvePlan: repeats and sweeps become trials back to back") {
  auto pb = parsePlaybook("repeat = 2\n" + kHead + R"([[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
target = "n2"
params = { down = "1s" }
[sweep]
step = "flap"
param = "down"
values = ["100ms", "2s", "5s"]
)",
                          "p.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  auto plan = resolvePlan(*pb, inventory());
  REQUIRE(plan);
  REQUIRE(plan->trials.size() == 6);
  CHECK(plan->durationNs == 120 * kS);
  const Trial& t3 = plan->trials[3];
  CHECK(t3.startNs == 60 * kS);
  CHECK(t3.repeat == 1);
  CHECK(t3.sweepParam == "down");
  CHECK(t3.sweepValue == "2s");
  CHECK(t3.label() == "t down=2s #2");
  REQUIRE(t3.faults.size() == 1);
  CHECK(t3.faults[0].atNs == 70 * kS);
  CHECK(t3.faults[0].params["down"] == 2 * kS);
  CHECK(plan->trials[5].faults[0].params["down"] == 5 * kS);
  std::string text = formatPlan(*pb, *plan);
  CHECK(text.find("6 trial(s), 2m in total") != std::string::npos);
  CHECK(text.find("+70.000s    inject link_flap  on n2") != std::string::npos);
}

TEST_CASE("[workload] dscp and the verbs QP attributes: NCCL's defaults, bounded, qp_* only with verbs") {
  auto parse = [](const std::string& keys) {
    return parsePlaybook("name = \"t\"\n[workload]\nkind = \"allreduce\"\n" + keys +
                             "[[phase]]\nname = \"baseline\"\nduration = \"10s\"\n",
                         "p.toml");
  };
  auto d = parse("");
  REQUIRE(d);
  CHECK(d->workload.qp == rc::proto::QpSettings{26, 14, 7, 7});
  auto v = parse("transport = \"verbs\"\ndscp = 48\nqp_timeout = 8\nqp_retry_cnt = 3\nqp_rnr_retry = 0\n");
  INFO((v ? "" : v.error().message));
  REQUIRE(v);
  CHECK(v->workload.qp == rc::proto::QpSettings{48, 8, 3, 0});
  auto tcp = parse("dscp = 10\n");
  REQUIRE(tcp);
  CHECK(tcp->workload.qp.dscp == 10);
  auto [keys, want] = GENERATE(table<std::string, std::string>({
      {"dscp = 64\n", "p.toml:4:8: workload dscp = 64 is out of range [0, 63]"},
      {"transport = \"verbs\"\nqp_timeout = 32\n", "p.toml:5:14: workload qp_timeout = 32 is out of range [0, 31]"},
      {"transport = \"verbs\"\nqp_retry_cnt = 8\n", "out of range [0, 7]"},
      {"qp_timeout = 8\n", "p.toml:4:14: qp_timeout sets a verbs QP attribute: it needs transport = \"verbs\""},
  }));
  auto bad = parse(keys);
  REQUIRE_FALSE(bad);
  INFO(bad.error().message);
  CHECK(bad.error().message.find(want) != std::string::npos);
}

TEST_CASE("[workload] kind perftest: a test from the fixed list, exactly 2 nodes, no transport") {
  auto parse = [](const std::string& keys) {
    return parsePlaybook("name = \"t\"\n[workload]\nkind = \"perftest\"\n" + keys +
                             "[[phase]]\nname = \"baseline\"\nduration = \"10s\"\n",
                         "p.toml");
  };
  auto d = parse("nodes = [\"n1\", \"n2\"]\n");
  INFO((d ? "" : d.error().message));
  REQUIRE(d);
  CHECK(d->workload.kind->name == "perftest");
  CHECK(d->workload.test == "ib_write_bw");
  auto plan = resolvePlan(*d, inventory());
  REQUIRE(plan);
  CHECK(plan->workloadNodes == std::vector<std::string>{"n1", "n2"});
  auto r = parse("test = \"ib_read_bw\"\nqp_timeout = 10\n");
  REQUIRE(r);
  CHECK(r->workload.test == "ib_read_bw");
  CHECK(r->workload.qp.timeout == 10);
  // Every node of the test inventory: more than 2.
  auto all = resolvePlan(*r, inventory());
  REQUIRE_FALSE(all);
  CHECK_THAT(all.error().message, Catch::Contains("perftest runs between exactly 2 nodes"));
  auto [keys, want] = GENERATE(table<std::string, std::string>({
      {"test = \"ib_write_lat\"\n", "p.toml:4:8: perftest test 'ib_write_lat' is unknown (known: ib_write_bw, ib_read_bw, ib_send_bw)"},
      {"test = \"/bin/sh\"\n", "perftest test '/bin/sh' is unknown"},
      {"transport = \"verbs\"\n", "kind = \"perftest\" always runs over RDMA: leave transport out"},
      {"qp_retry_cnt = 3\n", "qp_retry_cnt is not a perftest option"},
      {"streams = 17\n", "workload streams must be 1 to 16 with kind = \"perftest\""},
  }));
  auto bad = parse(keys);
  REQUIRE_FALSE(bad);
  INFO(bad.error().message);
  CHECK(bad.error().message.find(want) != std::string::npos);
  auto notPerftest = parsePlaybook("name = \"t\"\n[workload]\nkind = \"allreduce\"\ntest = \"ib_write_bw\"\n"
                                   "[[phase]]\nname = \"baseline\"\nduration = \"10s\"\n", "p.toml");
  REQUIRE_FALSE(notPerftest);
  CHECK_THAT(notPerftest.error().message, Catch::Contains("test names a perftest program: it needs kind = \"perftest\""));
}

TEST_CASE("a target sweep: one trial per target in a seeded order, per_trial at a time") {
  auto sweep = [](const std::string& extra, uint64_t seed = 1) {
    auto pb = parsePlaybook("seed = " + std::to_string(seed) + "\n" + kHead + R"([[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
target = "worker"
params = { down = "1s" }
[sweep]
step = "flap"
over = "target"
)" + extra,
                            "p.toml");
    INFO((pb ? "" : pb.error().message));
    REQUIRE(pb);
    auto plan = resolvePlan(*pb, inventory());
    INFO((plan ? "" : plan.error().message));
    REQUIRE(plan);
    return *plan;
  };
  Plan one = sweep("");
  REQUIRE(one.trials.size() == 4);  // n1..n4 are all workers
  std::vector<std::string> order;
  for (const auto& t : one.trials) {
    REQUIRE(t.faults.size() == 1);
    CHECK(t.sweepParam == "target");
    CHECK(t.sweepValue == t.faults[0].node);
    CHECK(t.label() == "t target=" + t.faults[0].node + " #1");
    order.push_back(t.faults[0].node);
  }
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"n1", "n2", "n3", "n4"});  // each node once
  // Seeded: the same seed gives the same order; some other seed gives another.
  std::vector<std::string> again;
  for (const auto& t : sweep("").trials) again.push_back(t.faults[0].node);
  CHECK(again == order);
  bool differs = false;
  for (uint64_t seed = 2; seed < 12 && !differs; seed++) {
    std::vector<std::string> other;
    for (const auto& t : sweep("", seed).trials) other.push_back(t.faults[0].node);
    differs = other != order;
  }
  CHECK(differs);
  // per_trial = 3: two trials, of 3 nodes and of the last one.
  Plan three = sweep("per_trial = 3\n");
  REQUIRE(three.trials.size() == 2);
  CHECK(three.trials[0].faults.size() == 3);
  CHECK(three.trials[1].faults.size() == 1);
  CHECK(three.trials[0].sweepValue.get<std::string>().find(',') != std::string::npos);
  CHECK(three.durationNs == 40 * kS);

  auto bad = [](const std::string& step, const std::string& sw, const std::string& want) {
    auto pb = parsePlaybook(kHead + "[[step]]\nname = \"flap\"\nkind = \"link_flap\"\nphase = \"fault\"\n" + step +
                                "[sweep]\nstep = \"flap\"\n" + sw,
                            "p.toml");
    REQUIRE_FALSE(pb);
    INFO(pb.error().message);
    CHECK(pb.error().message.find(want) != std::string::npos);
  };
  bad("target = \"all\"\n", "over = \"node\"\n", "p.toml:17:8: [sweep] over must be \"target\"");
  bad("target = \"all\"\n", "over = \"target\"\nparam = \"down\"\n", "drop param and values");
  bad("target = \"all\"\n", "over = \"target\"\nper_trial = 0\n", "p.toml:18:13: [sweep] per_trial must be an integer in [1, 64]");
  bad("target = \"all\"\n", "param = \"down\"\nvalues = [\"1s\"]\nper_trial = 2\n", "per_trial goes with over = \"target\"");
  bad("target = { random = 2, from = \"worker\" }\n", "over = \"target\"\n", "drop random = 2 from its target");
}

TEST_CASE("resolvePlan errors point into the playbook") {
  auto check = [](const std::string& body, const std::string& want) {
    auto pb = parsePlaybook(kHead + body, "p.toml");
    REQUIRE(pb);
    auto plan = resolvePlan(*pb, inventory());
    REQUIRE_FALSE(plan);
    INFO(plan.error().message);
    CHECK(plan.error().message.rfind(want, 0) == 0);
  };
  check("[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = \"spine\"\n",
        "p.toml:13:10: no node or role 'spine' in inv.toml (nodes: n1, n2, n3, n4; or use 'all')");
  check("[[step]]\nkind = \"link_flap\"\nphase = \"fault\"\ntarget = { random = 2, from = \"receiver\" }\n",
        "p.toml:13:10: random = 2 but 'receiver' matches only 1 node(s): n1");
  check("[[expect]]\nmetric = \"stall_time\"\nop = \"<\"\nbound = \"1s\"\nscope = \"n9\"\n",
        "p.toml:10:1: expectation scope 'n9' is neither \"job\" nor a workload node");
  std::string incast = "[[step]]\nkind = \"incast\"\nphase = \"fault\"\ntarget = [\"n1\", \"n2\", \"n3\"]\n";
  check(incast + "params = { receiver = \"n9\" }\n",
        "p.toml:10:1: step 'step1': incast receiver 'n9' is not a node of the inventory (n1, n2, n3, n4)");
  check(incast + "params = { receiver = \"n4\" }\n",
        "p.toml:10:1: step 'step1': incast receiver 'n4' has no data_addresses in the inventory");
  check(incast + "params = { receiver = \"n1\", senders = 3, fan_in = 6 }\n",
        "p.toml:10:1: step 'step1': incast needs 3 sender(s) among the targets other than the receiver 'n1', "
        "which has 2: widen the target or lower senders");
  check(incast + "params = { receiver = \"n1\", fan_in = 3 }\n",
        "p.toml:10:1: step 'step1': incast fan_in 3 must be a multiple of the 2 senders");
  auto pb = parsePlaybook(std::string(kHead).replace(kHead.find("kind = \"allreduce\""), 18,
                                                     "kind = \"allreduce\"\nnodes = \"receiver\""),
                          "p.toml");
  REQUIRE(pb);
  auto plan = resolvePlan(*pb, inventory());
  REQUIRE_FALSE(plan);
  CHECK(plan.error().message.find("allreduce needs at least 2 nodes") != std::string::npos);
}

TEST_CASE("scenarios: several in one playbook, each with its own timeline") {
  auto pb = parsePlaybook(R"(name = "suite"
[workload]
kind = "allgather"
[[scenario]]
name = "one"
[[scenario.phase]]
name = "baseline"
duration = "5s"
[[scenario.phase]]
name = "fault"
duration = "5s"
[[scenario.step]]
kind = "link_flap"
phase = "fault"
target = "n1"
[[scenario]]
name = "two"
[[scenario.phase]]
name = "baseline"
duration = "8s"
[[scenario.phase]]
name = "after"
duration = "2s"
[[scenario.expect]]
metric = "baseline"
op = ">"
bound = "1Mbps"
)",
                          "s.toml");
  INFO((pb ? "" : pb.error().message));
  REQUIRE(pb);
  REQUIRE(pb->scenarios.size() == 2);
  auto plan = resolvePlan(*pb, inventory());
  REQUIRE(plan);
  REQUIRE(plan->trials.size() == 2);
  CHECK(plan->trials[1].startNs == 10 * kS);
  CHECK(plan->trials[1].baselineToNs == 18 * kS);
  CHECK(plan->trials[1].faults.empty());
}

TEST_CASE("resolvePlan: incast schedules the receiver's sink and a seeded pick of senders") {
  auto pb = parsePlaybook("seed = 7\nrepeat = 4\n" + kHead + R"([[step]]
kind = "incast"
phase = "fault"
at = "1s"
for = "5s"
target = "all"
params = { receiver = "n2", senders = 2, fan_in = 8, size = "4MiB" }
)", "p.toml");
  REQUIRE(pb);
  auto plan = resolvePlan(*pb, inventory());
  INFO((plan ? "" : plan.error().message));
  REQUIRE(plan);
  std::set<std::string> pickedSets;
  for (const auto& t : plan->trials) {
    REQUIRE(t.faults.size() == 3);
    CHECK(t.faults[0].node == "n2");  // the sink first, so it listens while senders connect
    CHECK(t.faults[0].role == "sink");
    CHECK(t.faults[1].role == "sender");
    std::set<std::string> senders;
    for (const auto& f : t.faults) {
      CHECK(f.kind == "incast");
      CHECK(f.atNs == t.startNs + 11 * kS);
      CHECK(f.forNs == 5 * kS);
      CHECK(f.params["receiver"] == "10.1.0.2");  // the receiver's data address on the wire
      CHECK(f.params["senders"] == 2);
      CHECK(f.params["fan_in"] == 8);
      CHECK(f.params["size"] == 4 << 20);
      if (f.node != "n2") senders.insert(f.node);
    }
    CHECK(senders.size() == 2);  // two distinct nodes, never the receiver
    std::string key;
    for (const auto& n : senders) key += n;
    pickedSets.insert(key);
  }
  // Seeded: the same playbook resolves to the same picks every time.
  auto again = resolvePlan(*pb, inventory());
  REQUIRE(again);
  for (size_t i = 0; i < plan->trials.size(); i++)
    for (size_t k = 0; k < 3; k++) CHECK(again->trials[i].faults[k].node == plan->trials[i].faults[k].node);
  CHECK(pickedSets.size() >= 2);  // drawn per trial (deterministic for this seed), not fixed once

  // senders = 0: every target but the receiver sends.
  auto all = parsePlaybook(kHead + R"([[step]]
kind = "incast"
phase = "fault"
target = ["n1", "n3", "n4"]
params = { receiver = "n1", fan_in = 4 }
)", "p.toml");
  REQUIRE(all);
  auto p2 = resolvePlan(*all, inventory());
  REQUIRE(p2);
  REQUIRE(p2->trials[0].faults.size() == 3);
  CHECK(p2->trials[0].faults[0].node == "n1");
  CHECK(p2->trials[0].faults[1].node == "n3");
  CHECK(p2->trials[0].faults[2].node == "n4");
  CHECK(p2->trials[0].faults[1].params["senders"] == 2);
}

TEST_CASE("resolvePlan: two faults on one target of one node at once are an error, in turn fine") {
  auto plan = [&](const std::string& secondAt, const std::string& params) {
    auto pb = parsePlaybook(kHead + R"([[step]]
name = "long"
kind = "link_flap"
phase = "fault"
at = "1s"
for = "4s"
target = "n1"
params = { down = "3s" }
[[step]]
name = "short"
kind = "link_flap"
phase = "fault"
at = ")" + secondAt + R"("
for = "2s"
target = ["n1", "n2"]
params = { down = "500ms")" + params + R"( }
)",
                            "p.toml");
    REQUIRE(pb);
    return resolvePlan(*pb, inventory());
  };
  auto clash = plan("3s", "");
  REQUIRE_FALSE(clash);
  CHECK_THAT(clash.error().message,
             Catch::Contains("p.toml:18:") && Catch::Contains("step 'short' (at 13s)") &&
                 Catch::Contains("step 'long' (at 11s for 4s)") &&
                 Catch::Contains("both hold the default interface on n1"));
  // Back to back (the first window ends as the second starts), or another interface: fine.
  CHECK(plan("5s", ""));
  CHECK(plan("3s", ", interface = \"data1\""));
}

// The lab a playbook's bounds were set on: stated in [lab], compared with the lab a run is given.
TEST_CASE("[lab]: a playbook states its lab, a run on another lab is told what differs") {
  const std::string head = R"(name = "t"
[workload]
kind = "allreduce"
[[phase]]
name = "baseline"
duration = "10s"
)";
  auto pb = parsePlaybook(head + "[lab]\nrate = \"600M\"\nnodes = 4\nports = \"tap\"\n", "l.toml");
  REQUIRE(pb);
  CHECK(pb->lab.present);
  CHECK(pb->lab.rateBps == 600e6);
  CHECK(pb->lab.nodes == 4);
  CHECK(parsePlaybook(head + "[lab]\nrate = \"1Gbps\"\n", "l.toml")->lab.rateBps == 1e9);
  auto bad = parsePlaybook(head + "[lab]\nrate = \"fast\"\nports = \"wifi\"\ncores = 2\n", "l.toml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("l.toml:8:8: [lab] rate must be a port rate like \"600M\"") &&
                                      Catch::Contains("unknown key 'cores' in [lab]"));
  CHECK_THAT(parsePlaybook(head + "[lab]\nports = \"wifi\"\n", "l.toml").error().message,
             Catch::Contains("[lab] ports must be \"tap\" or \"veth\""));

  rctest::TempDir dir;
  rc::lab::LabState st;
  st.dir = dir.path;
  st.nodes.resize(4);
  st.rateBps = 1e9;
  st.ports = "tap";
  REQUIRE(rc::lab::saveState(st).ok());
  const std::string inventory = dir.path + "/inventory.toml";
  auto warnings = rc::controller::labMismatch(*pb, inventory);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("'t' was bounded on a lab of 4 nodes at 600M with tap ports") &&
                              Catch::Contains("has ports at 1G, not 600M") &&
                              Catch::Contains("`rdmachaos lab up --nodes 4 --rate 600M`"));
  st.rateBps = 600e6;
  REQUIRE(rc::lab::saveState(st).ok());
  CHECK(rc::controller::labMismatch(*pb, inventory).empty());
  // A real cluster's inventory has no lab beside it: nothing to compare.
  rctest::TempDir elsewhere;
  CHECK(rc::controller::labMismatch(*pb, elsewhere.path + "/inventory.toml").empty());
}

// lab up's default rate: the table the bench figures justify, on this machine's cores.
TEST_CASE("lab up's default rate fits the machine: 1G for 3 nodes, less for more, more with cores") {
  CHECK(rc::lab::chooseRate(3, 2).bps == 1e9);
  CHECK(rc::lab::chooseRate(4, 2).bps == 600e6);
  CHECK(rc::lab::chooseRate(8, 2).bps == 300e6);
  CHECK(rc::lab::chooseRate(32, 2).bps == 100e6);
  CHECK(rc::lab::chooseRate(4, 8).bps == 1e9);
  CHECK(rc::lab::chooseRate(3, 1).bps < 1e9);
  CHECK_THAT(rc::lab::chooseRate(4, 2).why, Catch::Contains("port rate 600M for 4 nodes on 2 cores") &&
                                                Catch::Contains("--rate sets another"));
}

// A newcomer's playbook with four mistakes in four parts gets all four in one pass: a phase in
// error no longer hides what each step says of itself.
TEST_CASE("validate reports every error of a file: a broken phase hides no step's own errors") {
  auto pb = parsePlaybook(R"(name = "t"
[workload]
kind = "allreduce"
[[phase]]
name = "baseline"
duration = "10s"
[[phase]]
name = "fault"
duration = "-5s"
[[step]]
name = "mystery"
kind = "link_wobble"
phase = "fault"
target = "n1"
[[step]]
name = "storm"
kind = "pfc_storm"
phase = "fault"
target = "n1"
params = { priorities = [9] }
[[step]]
name = "flap"
kind = "link_flap"
phase = "fault"
target = "n2"
params = { down = "soon" }
)",
                          "four.toml");
  REQUIRE_FALSE(pb);
  const std::string& m = pb.error().message;
  INFO(m);
  std::vector<std::string> errors, notes;
  std::istringstream in(m);
  for (std::string line; std::getline(in, line);) (line.find(": note: ") != std::string::npos ? notes : errors).push_back(line);
  REQUIRE(errors.size() == 4);
  CHECK_THAT(errors[0], Catch::StartsWith("four.toml:9:") && Catch::Contains("duration"));
  CHECK_THAT(errors[1], Catch::StartsWith("four.toml:12:") && Catch::Contains("unknown fault kind 'link_wobble'"));
  CHECK_THAT(errors[2], Catch::StartsWith("four.toml:20:") && Catch::Contains("priorities"));
  CHECK_THAT(errors[3], Catch::StartsWith("four.toml:26:") && Catch::Contains("down"));
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("the steps' times were not checked"));
}

TEST_CASE("resolvePlan: one switch port held from two nodes at once is an error, naming both steps") {
  auto plan = [&](const std::string& steps) {
    auto pb = parsePlaybook(kHead + steps, "p.toml");
    INFO((pb ? std::string() : pb.error().message));
    REQUIRE(pb);
    return resolvePlan(*pb, inventory());
  };
  // The command backend needs an explicit port: target = "all" hands every node the same one.
  auto ecn = plan(R"([[step]]
name = "shift"
kind = "ecn_shift"
phase = "fault"
at = { between = ["1s", "1500ms"] }
for = "4s"
target = "all"
params = { backend = "command", command = "sonic", port = "Ethernet0", kmin = "10KiB", kmax = "20KiB" }
)");
  REQUIRE_FALSE(ecn);
  CHECK_THAT(ecn.error().message,
             Catch::Contains("p.toml:") && Catch::Contains("step 'shift' on n2") && Catch::Contains("step 'shift' on n1") &&
                 Catch::Contains("the ECN profile of switch port 'Ethernet0' queue 3") &&
                 Catch::Contains("one target for every node"));
  // One node owns the port: fine; another queue of it: another target.
  CHECK(plan(R"([[step]]
name = "shift"
kind = "ecn_shift"
phase = "fault"
at = "1s"
for = "4s"
target = "n1"
params = { backend = "command", command = "sonic", port = "Ethernet0", kmin = "10KiB", kmax = "20KiB" }
[[step]]
name = "other-queue"
kind = "ecn_shift"
phase = "fault"
at = "1s"
for = "4s"
target = "n2"
params = { backend = "command", command = "sonic", port = "Ethernet0", queue = 4, kmin = "10KiB", kmax = "20KiB" }
)"));
  // A lab switch port flapped from two nodes, and a link against one of its end ports.
  const std::string flaps = R"([[step]]
name = "flap-a"
kind = "link_flap"
phase = "fault"
at = "1s"
for = "4s"
target = "n1"
params = { switch_port = "A", down = "2s" }
[[step]]
name = "flap-b"
kind = "link_flap"
phase = "fault"
at = "B"
for = "3s"
target = "n2"
params = { switch_port = "C", down = "1s" }
)";
  auto with = [&](std::string a, std::string at, std::string c) {
    std::string t = flaps;
    t.replace(t.find("\"A\""), 3, "\"" + a + "\"");
    t.replace(t.find("\"B\""), 3, "\"" + at + "\"");
    t.replace(t.find("\"C\""), 3, "\"" + c + "\"");
    return plan(t);
  };
  auto port = with("n3", "2s", "n3");
  REQUIRE_FALSE(port);
  CHECK_THAT(port.error().message, Catch::Contains("step 'flap-b' on n2 (at 12s)") &&
                                       Catch::Contains("step 'flap-a' on n1 (at 11s for 4s)") &&
                                       Catch::Contains("the admin state of lab switch port 'n3'"));
  auto link = with("leaf1-spine1", "2s", "spine1:leaf1");
  REQUIRE_FALSE(link);
  CHECK_THAT(link.error().message, Catch::Contains("lab switch port 'spine1:leaf1'"));
  CHECK(with("n3", "5s", "n3"));                       // in turn
  CHECK(with("n3", "2s", "n2"));                       // another port
  CHECK(with("leaf1-spine1", "2s", "leaf1:spine2"));  // another link's end
}

TEST_CASE("non-ASCII text parses as written, without toml++ 3.3's undefined behaviour") {
  // The code points toml++'s whitespace test cannot handle (tests/fuzz/*/crashes/toml-unicode-*).
  CHECK(rc::tomlWhitespaceHazard(U'\u0149'));  // ŉ
  CHECK(rc::tomlWhitespaceHazard(U'\u00E9'));  // é
  CHECK(rc::tomlWhitespaceHazard(U'\uFEFB'));
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'\u00A0'));  // whitespace it knows
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'\u3000'));
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'\uFEFF'));
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'\u2000'));  // blocks 5 and 7 are handled
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'\u4E00'));
  CHECK_FALSE(rc::tomlWhitespaceHazard(U'a'));
  // Every hazard has its own stand-in, which is no hazard, and comes back.
  std::set<char32_t> standIns;
  size_t hazards = 0;
  for (char32_t c = 0x80; c < 0x10000; c++) {
    if (!rc::tomlWhitespaceHazard(c)) continue;
    hazards++;
    char32_t p = rc::tomlHazardStandIn(c);
    INFO(unsigned(c));
    CHECK_FALSE(rc::tomlWhitespaceHazard(p));
    CHECK(rc::tomlHazardFromStandIn(p) == c);
    standIns.insert(p);
  }
  CHECK(hazards == standIns.size());
  CHECK(hazards > 3000);
  CHECK(rc::tomlHazardFromStandIn(U'a') == 0);

  // Strings in values keep every character; a quoted key too.
  auto pb = parsePlaybook(std::string("description = \"caf\u00e9 \u0149 \u0416 \u30c6\"\n") + kHead, "p.toml");
  REQUIRE(pb);
  CHECK(pb->description == "caf\u00e9 \u0149 \u0416 \u30c6");
  auto key = parsePlaybook(std::string("\"r\u00e9gion\" = 1\n") + kHead, "p.toml");
  REQUIRE_FALSE(key);
  INFO(key.error().message);
  CHECK(key.error().message.find("r\u00e9gion") != std::string::npos);  // named as written
  // Outside strings: a parse error with its place, never undefined behaviour.
  for (std::string text : {std::string("\u0149"), std::string("\xef\xbb\xbb = 1")}) {
    auto r = parsePlaybook(text + "\n" + kHead, "p.toml");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.rfind("p.toml:1:1", 0) == 0);
  }
  // After a multi-line string's line-ending backslash (toml++ asks "whitespace?" of the first
  // character after the skipped indentation).
  auto ml = parsePlaybook(std::string("description = \"\"\"a \\\n  \u0480 b\"\"\"\n") + kHead, "p.toml");
  REQUIRE(ml);
  CHECK(ml->description == "a \u0480 b");
  // The stand-ins themselves are refused, with their place.
  auto pua = parsePlaybook(std::string("description = \"\ue001\"\n") + kHead, "p.toml");
  REQUIRE_FALSE(pua);
  CHECK(pua.error().message.find("p.toml:1:16") != std::string::npos);
}

TEST_CASE("a plan an agent would refuse at the run's start is refused when planned (validate, --dry-run)") {
  // A run schedules every fault at its start; an agent holds at most 64 at once.
  const std::string step = R"([[step]]
kind = "link_flap"
phase = "fault"
at = "1s"
for = "1s"
target = "n1"
)";
  // Short trials (9 s), so that 65 of them stay within an agent's workload lifetime.
  std::string shortHead = kHead;
  shortHead.replace(shortHead.find("duration = \"10s\""), 16, "duration = \"5s\"");
  shortHead.replace(shortHead.find("duration = \"10s\""), 16, "duration = \"4s\"");
  auto ok = parsePlaybook("repeat = 64\n" + shortHead + step, "p.toml");
  REQUIRE(ok);
  CHECK(resolvePlan(*ok, inventory()));
  auto many = parsePlaybook("repeat = 65\n" + shortHead + step, "p.toml");
  REQUIRE(many);
  auto plan = resolvePlan(*many, inventory());
  REQUIRE_FALSE(plan);
  INFO(plan.error().message);
  CHECK(plan.error().message.find("node n1 65 faults (step1 x65)") != std::string::npos);
  CHECK(plan.error().message.find("at most 64") != std::string::npos);
  // The run's workload lasts the whole run (and 500 ms more); an agent runs one at most its
  // max_fault_lifetime, 10 min by default: 29 trials of 20 s fit, 30 do not.
  auto fits = parsePlaybook("repeat = 29\n" + kHead + step, "p.toml");
  INFO((fits ? std::string() : fits.error().message));
  REQUIRE(fits);
  CHECK(resolvePlan(*fits, inventory()));
  auto longRun = parsePlaybook("repeat = 30\n" + kHead + step, "p.toml");
  REQUIRE_FALSE(longRun);
  INFO(longRun.error().message);
  CHECK_THAT(longRun.error().message, Catch::StartsWith("p.toml:1:1: the playbook runs for 10m (30 trial(s))") &&
                                          Catch::Contains("max_fault_lifetime, 10m by default") &&
                                          Catch::Contains("lower repeat, shorten the phases, or split"));
  // Faults a day ahead: the lifetime says it first.
  std::string head = kHead;
  head.replace(head.find("duration = \"10s\"\n[[phase]]"), 16, "duration = \"13h\"");
  auto late = parsePlaybook("repeat = 2\n" + head + step, "p.toml");
  REQUIRE_FALSE(late);
  CHECK_THAT(late.error().message, Catch::Contains("max_fault_lifetime"));
}

TEST_CASE("a workload or a step beyond what an agent accepts is refused at its place, naming the fix") {
  auto with = [](const std::string& workloadLine, const std::string& steps = "") {
    std::string text = kHead;
    text.insert(text.find("[[phase]]"), workloadLine + "\n");
    return parsePlaybook(text + steps, "p.toml");
  };
  // The protocol's (and so every agent's) bounds on a workload.
  auto big = with("size = \"2GiB\"");
  REQUIRE_FALSE(big);
  CHECK_THAT(big.error().message, Catch::StartsWith("p.toml:4:8: workload size 2.0GiB is more than an agent accepts (1.0GiB") &&
                                      Catch::Contains("lower size"));
  CHECK(with("size = \"1GiB\""));
  auto streams = with("streams = 100");
  REQUIRE_FALSE(streams);
  CHECK_THAT(streams.error().message, Catch::StartsWith("p.toml:4:11: workload streams = 100 is more than an agent opens (64") &&
                                          Catch::Contains("lower streams"));
  CHECK(with("streams = 64"));
  // A step's lifetime beyond what an agent keeps a fault: it would be reverted early.
  std::string longStep = R"([[step]]
kind = "link_flap"
phase = "fault"
at = "1s"
for = "11m"
target = "n1"
)";
  auto pb = parsePlaybook(kHead + longStep, "p.toml");
  REQUIRE_FALSE(pb);
  CHECK_THAT(pb.error().message, Catch::StartsWith("p.toml:14:7: step 'step1' for = 11m is longer than an agent keeps a fault (10m") &&
                                     Catch::Contains("set for = \"10m\" or less"));
}

}  // namespace test_playbook
