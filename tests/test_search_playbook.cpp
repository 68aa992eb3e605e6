// A playbook's [search] table: parsing, every refusal with its place, a point pinned into a plain
// playbook, the reproducer, the search's result document; and the engine walking pinned playbooks.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "controller/cli/commands.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/report/search_report.hpp"
#include "test_util.hpp"

// This source in a namespace of its own: the unit sources build one program from unity chunks.
namespace test_search_playbook {

using namespace rc::controller;
namespace search = rc::controller::search;
using rctest::kMs;
using rctest::kS;

namespace {

const char* kInventory = R"(
[tls]
ca = "ca.pem"
cert = "c.pem"
key = "c.key"
[[node]]
name = "n1"
address = "10.0.0.1"
data_addresses = ["10.1.0.1"]
roles = ["worker"]
[[node]]
name = "n2"
address = "10.0.0.2"
data_addresses = ["10.1.0.2"]
roles = ["worker"]
)";

// The playbook around every [search] below; line numbers of the cases count from here (line 1).
const std::string kHead = R"(name = "t"
seed = 7
[workload]
kind = "allreduce"
size = "4MiB"
[[phase]]
name = "baseline"
duration = "6s"
[[phase]]
name = "fault"
duration = "4s"
[[phase]]
name = "recovery"
duration = "4s"
[[step]]
name = "flap"
kind = "link_flap"
target = "n2"
phase = "fault"
at = "500ms"
[step.params]
down = "1s"
[[step]]
name = "storm"
kind = "pfc_storm"
target = "n1"
phase = "fault"
at = "0s"
for = "3s"
[step.params]
duration = "1s"
[[expect]]
metric = "longest_stall"
op = "<="
bound = "2s"
[[expect]]
metric = "throughput_loss_pct"
op = "<"
bound = 50
)";  // 39 lines

const std::string kBoundary = R"([search]
kind = "boundary"
expect = "longest_stall"
budget = 8
repeat_cap = 2
[[search.param]]
path = "steps.flap.down"
range = ["200ms", "3s"]
scale = "log"
resolution = 0.15
)";

Playbook parsed(const std::string& text) {
  auto pb = parsePlaybook(text, "pb.toml");
  if (!pb) FAIL(pb.error().message);
  return std::move(*pb);
}

// What a command prints on stderr while this object lives (restored when it goes).
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { text(); }
  std::string text() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

std::string errorOf(const std::string& text) {
  auto pb = parsePlaybook(text, "pb.toml");
  REQUIRE_FALSE(pb.ok());
  return pb.error().message;
}

}  // namespace

TEST_CASE("a boundary [search] parses into the engine's settings") {
  Playbook pb = parsed(kHead + kBoundary);
  REQUIRE(pb.search);
  const SearchSpec& s = *pb.search;
  CHECK(s.kind == SearchKind::boundary);
  REQUIRE(s.params.size() == 1);
  CHECK(s.params[0].path == "steps.flap.down");
  CHECK(s.params[0].step == "flap");
  CHECK(s.params[0].param == "down");
  CHECK(s.params[0].unit == MetricUnit::duration);
  CHECK(s.params[0].range.lo == 200 * kMs);
  CHECK(s.params[0].range.hi == 3 * kS);
  CHECK(s.params[0].range.scale == search::Scale::log);
  CHECK(s.params[0].resolution == Approx(0.15));
  CHECK(s.expectation == 0);
  CHECK(s.failsAbove);
  CHECK(s.budget == 8);
  CHECK(s.repeatCap == 2);
  CHECK(s.seed == 7);  // the playbook's, unless [search] seed says otherwise

  auto b = boundarySettings(pb);
  CHECK(b.op == search::Op::le);
  CHECK(b.bound == 2.0 * kS);
  CHECK(b.maxRepeats == 2);
  CHECK_NOTHROW(search::validate(b));
  CHECK(searchMetric(pb) == "longest_stall");
}

TEST_CASE("a worst-case [search] over a step and the workload parses, with defaults") {
  Playbook pb = parsed(kHead + R"([search]
kind = "worst"
metric = "throughput_loss_pct"
budget = 20
seed = 99
[[search.param]]
path = "steps.storm.duration"
range = ["100ms", "2s"]
[[search.param]]
path = "workload.size"
range = ["1MiB", "16MiB"]
scale = "log"
)");
  REQUIRE(pb.search);
  const SearchSpec& s = *pb.search;
  CHECK(s.kind == SearchKind::worst);
  CHECK(s.metric == "throughput_loss_pct");
  CHECK(s.seed == 99);
  CHECK(s.repeatCap == 4);
  REQUIRE(s.params.size() == 2);
  CHECK(s.params[0].range.lo == 100 * kMs);
  CHECK(s.params[0].range.scale == search::Scale::linear);
  CHECK(s.params[1].step.empty());
  CHECK(s.params[1].unit == MetricUnit::size);
  CHECK(s.params[1].range.hi == 16 << 20);
  auto w = worstSettings(pb);
  CHECK(w.parameters.size() == 2);
  CHECK(w.confirmRepeats == 4);
  CHECK_NOTHROW(search::validate(w));
}

TEST_CASE("every bad [search] is refused at its place, with the fix") {
  // Each: the [search] table after kHead (line 40 on), and what the message must say.
  auto [snippet, where, says] = GENERATE(table<std::string, std::string, std::string>({
      {"[search]\nexpect = 1\n[[search.param]]\npath = \"steps.flap.down\"\nrange = [\"200ms\", "
       "\"3s\"]\n",
       ":40:1:", "[search] needs kind = \"boundary\""},
      {"[search]\nkind = \"boundry\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", \"2s\"]\n",
       ":41:8:", "must be \"boundary\" or \"worst\""},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n", ":40:1:", "needs the parameter(s) it moves"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = \"flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":44:8:",
       "steps.<step>.<parameter> (e.g. \"steps.flap.down\"), workload.size or workload.streams"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flip.down\"\nrange = [\"1s\", \"2s\"]\n",
       ":44:8:", "no step 'flip' (steps: flap, storm)"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.dwn\"\nrange = [\"1s\", \"2s\"]\n",
       ":44:8:", "link_flap has no parameter 'dwn' (known: interface, down"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.interface\"\nrange = [\"a\", \"b\"]\n",
       ":44:8:", "is not a number, a duration or a size"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = \"steps.flap.down\"\n",
       ":43:1:", "needs range = [lo, hi]"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"2s\", \"1s\"]\n",
       ":45:9:", "must have lo < hi"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\"]\n",
       ":45:9:", "must be two values [lo, hi]"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [2, \"3s\"]\n",
       ":45:10:", "must be a duration with a unit"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.jitter\"\nrange = [\"0s\", "
       "\"1s\"]\nscale = \"log\"\n",
       ":45:9:", "a log scale needs lo > 0"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", "
       "\"2s\"]\nscale = \"square\"\n",
       ":46:9:", "must be \"linear\" or \"log\""},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", "
       "\"2s\"]\nresolution = \"5s\"\n",
       ":46:14:", "narrower than the range"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", "
       "\"2s\"]\n[[search.param]]\npath = \"steps.storm.duration\"\nrange = [\"1s\", \"2s\"]\n",
       ":43:1:", "a boundary search bisects one parameter"},
      {"[search]\nkind = \"boundary\"\n[[search.param]]\npath = \"steps.flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":40:1:", "a boundary search needs expect"},
      {"[search]\nkind = \"boundary\"\nexpect = \"recovery_time\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":42:10:",
       "names no [[expect]] of the playbook (its [[expect]]: longest_stall, throughput_loss_pct)"},
      {"[search]\nkind = \"boundary\"\nexpect = 3\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", \"2s\"]\n",
       ":42:10:", "expect = 3 is not the place of an [[expect]]"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\nfails = \"up\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":43:9:", "must be \"above\""},
      {"[search]\nkind = \"boundary\"\nexpect = 1\nmetric = \"drops\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange "
       "= [\"1s\", \"2s\"]\n",
       ":43:10:", "metric is a worst-case search's"},
      {"[search]\nkind = \"worst\"\nexpect = 1\nmetric = \"drops\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange "
       "= [\"1s\", \"2s\"]\n",
       ":42:10:", "expect is a boundary search's"},
      {"[search]\nkind = \"worst\"\nmetric = \"speed\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", "
       "\"2s\"]\n",
       ":42:10:", "unknown metric 'speed'"},
      {"[search]\nkind = \"worst\"\nmetric = \"drops\"\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = [\"1s\", "
       "\"2s\"]\nresolution = \"100ms\"\n",
       ":46:14:", "resolution is a boundary's"},
      {"[search]\nkind = \"worst\"\nmetric = \"drops\"\nbudget = 10\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange "
       "= [\"1s\", \"2s\"]\n",
       ":43:10:",
       "the confirmation takes 12 trials (3 points x repeat_cap), so budget = 14 or more"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\nbudget = 0\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":43:10:", "budget (trials) = 0 is out of range"},
      {"[search]\nkind = \"boundary\"\nexpect = 1\nbudgets = 3\n[[search.param]]\npath = "
       "\"steps.flap.down\"\nrange = "
       "[\"1s\", \"2s\"]\n",
       ":43:11:", "unknown key 'budgets' in [search]"},
      // The playbook at a corner of the space is checked as `run` would check it: a storm
      // longer than its step's lifetime (for = 3s).
      {"[search]\nkind = \"boundary\"\nexpect = 1\n[[search.param]]\npath = "
       "\"steps.storm.duration\"\nrange = [\"1s\", "
       "\"5s\"]\n",
       ":43:1:",
       "[search] at every range's hi the playbook is not valid: step 'storm' duration 5s is longer "
       "than its "
       "lifetime"},
  }));
  INFO(snippet);
  const std::string msg = errorOf(kHead + snippet);
  CHECK_THAT(msg, Catch::Contains("pb.toml" + where));
  CHECK_THAT(msg, Catch::Contains(says));
}

TEST_CASE(
    "a [search] playbook refuses repeat, [sweep] and [[scenario]], and is not checked on top of "
    "other errors") {
  CHECK_THAT(errorOf("repeat = 3\n" + kHead + kBoundary),
             Catch::Contains("pb.toml:1:10: [search] repeats each point itself") &&
                 Catch::Contains("drop repeat from the top"));
  CHECK_THAT(
      errorOf(kHead + "[sweep]\nstep = \"flap\"\nparam = \"down\"\nvalues = [\"1s\", \"2s\"]\n" +
              kBoundary),
      Catch::Contains("pb.toml:40:1: [search] chooses the values itself: drop the [sweep]"));
  const std::string scenarios = R"(name = "s"
[workload]
kind = "allreduce"
[[scenario]]
name = "one"
[[scenario.phase]]
name = "baseline"
duration = "6s"
)";
  CHECK_THAT(errorOf(scenarios + kBoundary),
             Catch::Contains("pb.toml:4:1: [search] explores one scenario"));
  // A step in error: the [search] naming it is noted, not refused again.
  std::string broken = kHead;
  broken.replace(broken.find("kind = \"link_flap\""), 18, "kind = \"link_flip\"");
  const std::string msg = errorOf(broken + kBoundary);
  CHECK_THAT(msg, Catch::Contains("unknown fault kind 'link_flip'"));
  CHECK_THAT(msg, Catch::Contains("note: [search] was not checked"));
  CHECK_THAT(msg, !Catch::Contains("no step 'flap'"));
}

TEST_CASE("`run` refuses a [search] playbook, pointing at `rdmachaos search`") {
  rctest::TempDir dir("rc-search-run");
  const std::string path = dir.path + "/pb.toml";
  std::ofstream(path) << kHead + kBoundary;
  RunOptions o;
  o.playbook = path;
  o.inventory = dir.path + "/missing-inventory.toml";  // refused before the inventory is read
  CHECK(cmdRun(o) == kExitError);
  SearchOptions so;
  so.playbook = dir.path + "/plain.toml";
  std::ofstream(so.playbook) << kHead;
  so.inventory = o.inventory;
  CHECK(cmdSearch(so) == kExitError);  // no [search]: nothing to search
}

// The command's refusals that come before any agent is reached: each changes nothing.
TEST_CASE("`search` refuses a resume that does not fit, before anything is made") {
  rctest::TempDir dir("rc-search-cmd");
  const std::string pbPath = dir.path + "/pb.toml", out = dir.path + "/out";
  std::ofstream(pbPath) << kHead + kBoundary;
  std::ofstream(dir.path + "/inv.toml") << kInventory;
  SearchOptions o;
  o.playbook = pbPath;
  o.inventory = dir.path + "/inv.toml";
  auto refused = [&](const SearchOptions& opts) {
    StderrCapture err(dir.path + "/stderr");
    int rc = cmdSearch(opts);
    std::string text = err.text();
    CHECK(rc == kExitError);
    CHECK_FALSE(std::filesystem::exists(out + "/trials"));  // nothing made
    return text;
  };
  o.resume = true;
  CHECK_THAT(refused(o), Catch::Contains("--resume needs --out DIR"));
  o.out = out;
  std::filesystem::create_directories(out);
  CHECK_THAT(refused(o), Catch::Contains("--resume: no search record in '" + out + "'"));

  // A record of this playbook, one trial in; then the playbook edited.
  Playbook pb = parsed(kHead + kBoundary);
  search::BoundaryRecord record{boundarySettings(pb), {{{200e6}, {1.9e8, 6e7}}}};
  auto writeRecord = [&](const std::string& text, const search::BoundaryRecord& r) {
    nlohmann::json doc = {{"version", 1},
                          {"playbook", {{"path", pbPath}, {"text", text}}},
                          {"record", search::toJson(r)}};
    std::ofstream(out + "/search.json") << doc.dump();
  };
  writeRecord(kHead + kBoundary + "# an edit\n", record);
  CHECK_THAT(refused(o), Catch::Contains("changed since the search in '" + out + "' began") &&
                             Catch::Contains("another --out"));
  search::BoundaryRecord other = record;
  other.settings.budget = 9;
  writeRecord(kHead + kBoundary, other);
  CHECK_THAT(refused(o), Catch::Contains("was made with other [search] settings"));
  std::ofstream(out + "/search.json") << "{\"version\": 1, \"playbook\": ";
  CHECK_THAT(refused(o), Catch::Contains("cannot be read"));
  // Without --resume, a directory holding a search is not started over.
  writeRecord(kHead + kBoundary, record);
  o.resume = false;
  CHECK_THAT(refused(o), Catch::Contains("holds a search already: continue it with --resume"));
}

TEST_CASE(
    "a point pinned into the playbook is a plain playbook at that value, rounded to its grain") {
  Playbook pb = parsed(kHead + kBoundary);
  auto pinned = pinSearchPoint(pb, {1.4004e9});
  REQUIRE(pinned.ok());
  CHECK_FALSE(pinned->playbook.search);
  CHECK(pinned->text.find("[search") == std::string::npos);
  CHECK(pinned->text.find("down = '1400ms'") != std::string::npos);
  const Step& flap = pinned->playbook.scenarios.front().steps.front();
  CHECK(flap.params["down"].get<int64_t>() == 1400 * kMs);
  CHECK(pinned->playbook.scenarios.front().expectations.size() == 2);
  // Everything else as written: the other step, the phases, the workload.
  CHECK(pinned->playbook.scenarios.front().steps.at(1).params["duration"].get<int64_t>() == 1 * kS);
  CHECK(pinned->playbook.scenarios.front().durationNs() == 14 * kS);
  CHECK(pinned->playbook.workload.sizeBytes == 4u << 20);
  auto plan = resolvePlan(pinned->playbook, *parseInventory(kInventory, "inv.toml"));
  REQUIRE(plan.ok());
  for (const auto& f : plan->trials.front().faults)
    if (f.step == "flap") CHECK(f.params["down"].get<int64_t>() == 1400 * kMs);

  // A narrow range keeps microseconds; the workload's size is set in bytes.
  SearchParam fine{.unit = MetricUnit::duration, .range = {.lo = 1e6, .hi = 5e6}};
  CHECK(searchValueText(fine, 1234567) == "1235us");
  SearchParam coarse{.unit = MetricUnit::duration, .range = {.lo = 1e8, .hi = 3e9}};
  CHECK(searchValueText(coarse, 2e9) == "2s");
  CHECK(searchValueText(coarse, 1e3) == "1ms");  // never rounded to nothing
  Playbook worst = parsed(kHead + R"([search]
kind = "worst"
metric = "drops"
[[search.param]]
path = "workload.size"
range = ["1MiB", "16MiB"]
)");
  auto sized = pinSearchPoint(worst, {3.5 * (1 << 20)});
  REQUIRE(sized.ok());
  CHECK(sized->playbook.workload.sizeBytes == uint64_t(3.5 * (1 << 20)));
}

TEST_CASE("the reproducer is pinned at the finding with the expectation that breaks there") {
  Playbook pb = parsed(kHead + kBoundary);
  search::BoundaryResult b;
  b.outcome = search::Outcome::boundary;
  b.lastPass = 1.2e9;
  b.firstFail = 1.45e9;
  auto r = makeReproducer(pb, SearchOutcome{.boundary = b});
  REQUIRE(r.ok());
  CHECK(r->text.rfind("# Reproducer written by `rdmachaos search pb.toml`", 0) == 0);
  CHECK_THAT(r->text, Catch::Contains("between 1200ms (passed) and 1450ms (failed)"));
  CHECK_THAT(r->text, Catch::Contains("Not shrunk"));
  CHECK_FALSE(r->playbook.search);
  const Scenario& sc = r->playbook.scenarios.front();
  CHECK(sc.steps.front().params["down"].get<int64_t>() == 1450 * kMs);
  REQUIRE(sc.expectations.size() == 1);  // the one the search judged, not the loss bound
  CHECK(sc.expectations.front().metric == "longest_stall");
  // What `validate` and `run` read: the text on its own.
  auto again = parsePlaybook(r->text, "reproducer.toml");
  REQUIRE(again.ok());
  CHECK(resolvePlan(*again, *parseInventory(kInventory, "inv.toml")).ok());

  // Every point failing: the least fault tried (the pass end) reproduces it.
  b.outcome = search::Outcome::allFail;
  auto low = reproducerPoint(pb, SearchOutcome{.boundary = b});
  REQUIRE(low.ok());
  CHECK(low->front() == 200 * kMs);
  // No finding, no reproducer, and why.
  b.outcome = search::Outcome::allPass;
  CHECK_THAT(makeReproducer(pb, SearchOutcome{.boundary = b}).error().message,
             Catch::Contains("widen the range"));
  b.outcome = search::Outcome::reversed;
  CHECK_THAT(reproducerPoint(pb, SearchOutcome{.boundary = b}).error().message,
             Catch::Contains("fails = \"below\""));

  // A worst case: at its best point, every expectation kept.
  Playbook wpb = parsed(kHead + R"([search]
kind = "worst"
metric = "throughput_loss_pct"
budget = 20
[[search.param]]
path = "steps.storm.duration"
range = ["100ms", "2s"]
)");
  search::WorstResult w;
  w.points = {{.parameters = {3e8}, .measurements = {{10, 1}}, .summary = {10, 1}},
              {.parameters = {1.7e9}, .measurements = {{40, 2}, {44, 2}}, .summary = {42, 1.5}}};
  w.best = 1;
  auto wr = makeReproducer(wpb, SearchOutcome{.worst = w});
  REQUIRE(wr.ok());
  CHECK(wr->playbook.scenarios.front().steps.at(1).params["duration"].get<int64_t>() == 1700 * kMs);
  CHECK(wr->playbook.scenarios.front().expectations.size() == 2);
  CHECK_THAT(wr->text,
             Catch::Contains("The worst point found for throughput_loss_pct: 42.00% ± 1.50%"));
}

// The engine over pinned playbooks: each trial is read from the playbook the point pins (its
// step's normalised `down`), answered by a TCP-like stall (the flap, then the wait for the next
// retransmission: 0.2, 0.6, 1.4, 2.4 s ...), and the reproducer lands past the step.
TEST_CASE(
    "a boundary search over pinned playbooks finds the stall's step and a reproducer that breaks "
    "it") {
  Playbook pb = parsed(kHead + kBoundary);
  search::BoundaryRecord record{boundarySettings(pb), {}};
  std::vector<std::string> progress;
  auto result = search::runBoundary(record, [&](double v) {
    auto pinned = pinSearchPoint(pb, {v});
    if (!pinned) throw std::runtime_error(pinned.error().message);
    const double down =
        pinned->playbook.scenarios.front().steps.front().params["down"].get<double>() / 1e9;
    double stall = 0.2, gap = 0.4;
    for (; stall < down; gap = std::min(2 * gap, 1.0)) stall += gap;
    search::Evaluation e{stall * 1e9, 60e6};
    record.trials.push_back({{v}, e});  // as the command's progress line sees it
    progress.push_back(searchProgress(pb, record.trials));
    record.trials.pop_back();
    return e;
  });
  REQUIRE(result.outcome == search::Outcome::boundary);
  CHECK(*result.lastPass <= 1.4e9 + 1e6);
  CHECK(*result.firstFail > 1.4e9);
  CHECK(*result.firstFail / *result.lastPass <= 1.15 + 1e-9);
  CHECK(result.trials <= 8);
  REQUIRE_FALSE(progress.empty());
  CHECK_THAT(progress.back(),
             Catch::StartsWith(std::to_string(result.trials) + "/8 trials; steps.flap.down = "));
  CHECK_THAT(progress.back(), Catch::Contains("(pass) .. ") && Catch::Contains("(fail)"));

  SearchOutcome outcome{.boundary = result};
  auto reproducer = makeReproducer(pb, outcome);
  REQUIRE(reproducer.ok());
  CHECK(reproducer->playbook.scenarios.front().steps.front().params["down"].get<double>() > 1.4e9);

  auto doc = makeSearchDocument(pb, search::toJson(record), outcome, "out/reproducer.toml", "");
  CHECK(doc["outcome"]["outcome"] == "boundary");
  CHECK(doc["points"].size() == result.points.size());
  for (const auto& p : doc["points"]) {
    CHECK(p["values"].contains("steps.flap.down"));
    CHECK(p.contains("verdict"));
    CHECK(p["measurements"].size() >= 1);
  }
  CHECK(doc["record"]["trials"].size() == result.trials);
  const std::string text = renderSearchText(doc);
  CHECK_THAT(text, Catch::Contains("boundary of longest_stall <= 2s (job): between " +
                                   doc["outcome"]["last_pass"]["text"].get<std::string>() +
                                   " (passes) and "));
  CHECK_THAT(text, Catch::Contains("reproducer: out/reproducer.toml"));
}

}  // namespace test_search_playbook
