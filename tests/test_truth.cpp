// The ground-truth suite: faults whose cost is known before they run, on the namespace lab. Each
// case computes its truth from the fault and from evidence the scorer does not read (the switch's
// own counters, the job's iteration records), prints its truth, its score and the uncertainty,
// and then runs the same check on a deliberately wrong input (the scorer fed a series scaled by
// 0.5, or the fault's record shifted by 1 s), which must fail: a check that cannot fail is not a
// check. docs/scoring.md, "How the scores are checked".
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/pcapng.hpp"
#include "controller/measure/series.hpp"
#include "controller/score/score.hpp"
#include "faults/labswitch_client.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
namespace ctl = rc::controller;

namespace {

using rctest::readFile;

// One lab for the suite: one switch at 1 Gb/s, three nodes, the switch on a core of its own (the
// playbooks suite's link-flap lab, where the job's fault windows keep the switch under half busy).
rctest::Lab& lab() {
  static std::unique_ptr<rctest::Lab> l;
  if (!l) {
    rc::lab::UpOptions o;
    o.nodes = 3;
    o.rateBps = 1e9;
    o.splitCores = true;
    std::printf("[truth] lab up: one switch at 1 Gb/s, 3 nodes, split cores\n");
    std::fflush(stdout);
    l = std::make_unique<rctest::Lab>("rc-truth", o);
  }
  return *l;
}

json control(const json& request) {
  auto r = rc::faults::labswitchRequest(lab().switchControl(), request);
  if (!r) FAIL("lab switch: " << r.error().message);
  return *r;
}

// The switch's port counters, read by the test itself every 20 ms while a run goes on: the wire's
// side of the truth, which the scorer never sees (its fabric samples carry no byte counts).
struct WireSample {
  int64_t wallNs = 0;
  std::map<std::string, std::pair<double, double>> tx;  // port -> (tx bytes, tx frames)
};
class WireSampler {
 public:
  explicit WireSampler(std::string socket) : socket_(std::move(socket)) {
    thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
  }
  std::vector<WireSample> stop() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(m_);
    return samples_;
  }
  // The last state the switch reported of each meter the runner set (they go when the run ends).
  std::map<std::string, json> meters() {
    std::lock_guard lock(m_);
    return meters_;
  }

 private:
  void loop(std::stop_token stop) {
    while (!stop.stop_requested()) {
      auto r = rc::faults::labswitchRequest(socket_, {{"cmd", "counters"}, {"port", "*"}});
      if (r && r->contains("ports")) {
        WireSample s{rc::wallNs(), {}};
        for (const auto& p : (*r)["ports"])
          s.tx[p.value("name", "")] = {p.value("tx_bytes", 0.0), p.value("tx_frames", 0.0)};
        std::lock_guard lock(m_);
        samples_.push_back(std::move(s));
      }
      if (auto m = rc::faults::labswitchRequest(socket_, {{"cmd", "meters"}});
          m && m->contains("meters")) {
        std::lock_guard lock(m_);
        for (const auto& meter : (*m)["meters"])
          meters_[meter.value("port", "") + "/" + std::to_string(meter.value("l4_dst", 0))] = meter;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  std::string socket_;
  std::mutex m_;
  std::vector<WireSample> samples_;
  std::map<std::string, json> meters_;
  std::jthread thread_;
};

struct TruthRun {
  json doc;
  std::vector<WireSample> wire;
  std::map<std::string, json> meters;  // "port/l4dst" -> the meter's last state
  int64_t startedUnixNs = 0;
};

// A playbook of the suite: a ring all-reduce on the three nodes, a baseline, one fault step.
std::string playbookText(const std::string& name, int baselineS, int faultS, int recoveryS,
                         const std::string& step) {
  return "name = \"truth-" + name +
         "\"\n"
         "description = \"ground truth: " +
         name +
         "\"\n"
         "seed = 1\n"
         "[workload]\nkind = \"allreduce\"\nsize = \"4MiB\"\nstreams = 2\nnodes = \"all\"\n"
         "[scoring]\nbin = \"10ms\"\nwarmup = \"2s\"\nhold = \"1s\"\nsmooth = \"250ms\"\nepsilon = "
         "0.10\n"
         "[guardrails]\nmax_stall = \"20s\"\n"
         "[[phase]]\nname = \"baseline\"\nduration = \"" +
         std::to_string(baselineS) +
         "s\"\n"
         "[[phase]]\nname = \"fault\"\nduration = \"" +
         std::to_string(faultS) +
         "s\"\n"
         "[[phase]]\nname = \"recovery\"\nduration = \"" +
         std::to_string(recoveryS) + "s\"\n" + step +
         "[[expect]]\nmetric = \"longest_stall\"\nop = \"<=\"\nbound = \"20s\"\n";
}

// Runs the playbook TEXT on the lab with the switch sampled beside it; the run must complete with
// its fault applied and reverted and nothing left behind.
TruthRun runTruth(const std::string& name, const std::string& text, int plannedS) {
  auto& l = lab();
  const std::string path = l.dir() + "/truth-" + name + ".toml";
  std::ofstream(path) << text;
  const std::string dir = l.dir() + "/truth-" + name;
  std::printf("[truth] %s: running (about %d s)\n", name.c_str(), plannedS);
  std::fflush(stdout);
  WireSampler sampler(l.switchControl());
  rctest::Proc p =
      rctest::spawnCli(l.dir(), {"run", path, "--inventory", l.inventory(), "--report-dir", dir});
  int code = rctest::waitCli(p, std::chrono::seconds(2 * plannedS + 60));
  TruthRun r;
  r.meters = sampler.meters();
  r.wire = sampler.stop();
  INFO("stdout:\n" << readFile(p.out) << "\nstderr:\n" << readFile(p.err));
  CHECK((code == 0 || code == 1));
  REQUIRE(std::filesystem::exists(dir + "/result.json"));
  r.doc = json::parse(readFile(dir + "/result.json"));
  r.startedUnixNs = r.doc["run"]["started_unix_ns"].get<int64_t>();
  // RDMACHAOS_TRUTH_KEEP=DIR keeps each run's result and the test's wire samples for a look after.
  if (const std::string keep = rctest::env("RDMACHAOS_TRUTH_KEEP"); !keep.empty()) {
    std::filesystem::create_directories(keep);
    const std::string stem = keep + "/" + name + "-" + std::to_string(r.startedUnixNs);
    std::filesystem::copy_file(dir + "/result.json", stem + ".json");
    std::ofstream w(stem + ".wire.tsv");
    for (const auto& sample : r.wire) {
      w << sample.wallNs - r.startedUnixNs;
      for (const auto& [port, tx] : sample.tx) w << "\t" << port << "\t" << tx.first;
      w << "\n";
    }
  }
  REQUIRE(r.doc["trials"].size() >= 1);
  for (const auto& t : r.doc["trials"]) {
    REQUIRE(t["completed"] == true);
    CHECK(t["problems"].empty());
  }
  REQUIRE(r.doc["faults"].size() >= 1);
  for (auto& f : r.doc["faults"]) {
    INFO("fault " << f.dump());
    CHECK(f["error"] == "");
    REQUIRE(f["applied_ns"].is_number_integer());
    REQUIRE(f["reverted_ns"].is_number_integer());
  }
  rctest::checkEverythingReverted(l);
  return r;
}

// What the scorer is given, and how a wrong input changes it.
struct Input {
  ctl::Grid job;
  ctl::ScoringSettings s;
  int64_t baselineFrom = 0, baselineTo = 0, faultStart = 0, faultEnd = 0;
};
Input inputOf(const json& doc, size_t trial = 0) {
  Input in;
  const json& sc = doc["playbook"]["scoring"];
  in.s.binNs = sc["bin_ns"].get<int64_t>();
  in.s.warmupNs = sc["warmup_ns"].get<int64_t>();
  in.s.epsilon = sc["epsilon"].get<double>();
  in.s.holdNs = sc["hold_ns"].get<int64_t>();
  in.s.smoothNs = sc["smooth_ns"].get<int64_t>();
  in.s.stallFraction = sc["stall_fraction"].get<double>();
  in.job.startNs = doc["series"]["start_ns"].get<int64_t>();
  in.job.binNs = doc["series"]["bin_ns"].get<int64_t>();
  in.job.bytes = doc["series"]["job"].get<std::vector<double>>();
  const json& t = doc["trials"][trial];
  in.baselineFrom = t["baseline_from_ns"].get<int64_t>();
  in.baselineTo = t["baseline_to_ns"].get<int64_t>();
  in.faultStart = t["fault_start_ns"].get<int64_t>();
  in.faultEnd = t["fault_end_ns"].get<int64_t>();
  return in;
}

// The scorer's reading of an input, as score() computes a one-trial run's job scope.
struct Reading {
  double baseline = 0;
  ctl::BaselineBand band;
  ctl::Impact impact;
  // The job's own noise, as the band states it: the depth below B of its smoothed bins,
  // relative to B.
  double floorDepth() const { return std::max(0.0, baseline - band.floor) / baseline; }
};
Reading scoreOf(const Input& in) {
  auto b = ctl::baselineRate(in.job, in.baselineFrom, in.baselineTo, in.s.smoothNs);
  REQUIRE(b.has_value());
  auto band =
      ctl::baselineBand(in.job, in.baselineFrom, in.baselineTo, in.s.smoothNs, in.s.holdNs, *b);
  REQUIRE(band.has_value());
  return {*b, *band, ctl::scoreImpact(in.job, *b, in.faultStart, in.faultEnd, in.s, band)};
}

// The job's noise over a window of WINDOW_S, in bytes, read as the scorer reads its band but at
// the window's length: the lowest mean of any WINDOW_S-long stretch of the baseline's bins, its
// depth below B pushed a quarter deeper (kBandMargin), times B x WINDOW_S. It holds the job's own
// swings at that length and the gap between B (a median of smoothed bins) and the job's mean
// rate, which a window of a healthy job reads as loss. Not the hold band scaled by 1/sqrt(n):
// the lab's swings last seconds (a build next door), so 1 s means are not independent (a noop
// read 17 % of B x 3 s against a hold band of 22.5 % / sqrt(3)).
double noiseBytes(const Reading& rd, const Input& in, double windowS) {
  const size_t lo = ctl::binFrom(in.job, in.baselineFrom);  // after the warm-up already
  const size_t hi = ctl::binFrom(in.job, in.baselineTo);
  const size_t w = size_t(windowS * 1e9 / double(in.job.binNs) + 0.5);
  double lowest = rd.baseline;
  if (w > 0 && hi > lo + w) {
    double sum = 0;
    for (size_t i = lo; i < lo + w; i++) sum += in.job.bytes[i];
    for (size_t i = lo;; i++) {
      lowest = std::min(lowest, sum * 1e9 / (double(w) * double(in.job.binNs)));
      if (i + w >= hi) break;
      sum += in.job.bytes[i + w] - in.job.bytes[i];
    }
  }
  const double depth = std::min(
      ctl::kBandMaxDepth, ctl::kBandMargin * std::max(0.0, rd.baseline - lowest) / rd.baseline);
  return depth * rd.baseline * windowS;
}

// The wrong inputs.
Input scaled(Input in, double by, int64_t fromNs = 0) {
  for (size_t i = 0; i < in.job.size(); i++)
    if (in.job.timeOf(i) >= fromNs) in.job.bytes[i] *= by;
  return in;
}
Input shifted(Input in, int64_t byNs) {
  in.faultStart += byNs;
  in.faultEnd += byNs;
  return in;
}

// Sanity: re-scoring the run's own input gives the run's own job scores, so the wrong inputs
// below go through the scorer that produced the run's result.
void checkRescoreMatches(const json& doc, const Reading& r) {
  const json& job = doc["trials"][0]["job"];
  const json& im = job["impact"];
  CHECK(r.baseline == Approx(job["baseline_Bps"].get<double>()).epsilon(1e-9));
  CHECK(r.impact.lossBytes == Approx(im["loss_bytes"].get<double>()).epsilon(1e-9).margin(1e-3));
  CHECK(r.impact.longestStallNs == im["longest_stall_ns"].get<int64_t>());
}

// The job's rate from its iteration records, not from its series: bytes per job iteration (what
// each rank of a ring all-reduce of SIZE receives, 2(n-1)/n x SIZE, summed over the ranks) times
// the iterations that ended in [FROM, TO), per second.
double iterationRate(const json& doc, int64_t fromNs, int64_t toNs) {
  std::map<int64_t, int64_t> lastEnd;  // job iteration -> its last rank's end
  std::map<int64_t, int> ranks;
  for (const auto& it : doc["iterations"]) {
    int64_t i = it["iteration"].get<int64_t>(), e = it["end_ns"].get<int64_t>();
    lastEnd[i] = std::max(lastEnd[i], e);
    ranks[i]++;
  }
  const double n = double(doc["plan"]["workload_nodes"].size());
  const double size = doc["playbook"]["workload"]["size_bytes"].get<double>();
  int count = 0;
  for (const auto& [i, e] : lastEnd)
    if (ranks[i] == int(n) && e >= fromNs && e < toNs) count++;
  return double(count) * n * 2 * (n - 1) / n * size * 1e9 / double(toNs - fromNs);
}

// The wire: PORT's tx bytes (and frames) between two instants of the run's timeline,
// interpolated between the test's samples.
std::pair<double, double> wireBetween(const TruthRun& r, const std::string& port, int64_t fromNs,
                                      int64_t toNs) {
  auto at = [&](int64_t t) {
    const int64_t wall = r.startedUnixNs + t;
    const WireSample* a = nullptr;
    const WireSample* b = nullptr;
    for (const auto& s : r.wire) {
      if (s.wallNs <= wall) a = &s;
      if (s.wallNs >= wall && !b) b = &s;
    }
    REQUIRE(a);
    REQUIRE(b);
    auto va = a->tx.at(port), vb = b->tx.at(port);
    double f =
        b->wallNs == a->wallNs ? 0 : double(wall - a->wallNs) / double(b->wallNs - a->wallNs);
    return std::make_pair(va.first + f * (vb.first - va.first),
                          va.second + f * (vb.second - va.second));
  };
  auto a = at(fromNs), b = at(toNs);
  return {b.first - a.first, b.second - a.second};
}

// One check's outcome on one input: what it compared, and whether it held.
struct Check {
  bool ok = true;
  std::string text;
  void expect(bool cond, const std::string& what) {
    text += (cond ? "  ok   " : "  FAIL ") + what + "\n";
    ok = ok && cond;
  }
};

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[300];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// The scored baseline against the job's rate from its iterations: a median of smoothed bins
// against a mean, so they differ by the job's own noise, which the band states (its smoothed
// bins' depth below B; at most a quarter, so a series read at half cannot pass).
void checkBaseline(Check& c, const Reading& rd, double bTruth) {
  const double tol = std::min(rd.floorDepth(), 0.25);
  c.expect(std::fabs(rd.baseline - bTruth) <= tol * rd.baseline,
           fmt("baseline: truth %.1f MB/s (the job's iterations), scored %.1f MB/s, uncertainty "
               "%.1f %% (the job's "
               "band)",
               bTruth / 1e6, rd.baseline / 1e6, 100 * tol));
}

// Prints a check's lines for the log under TITLE, with whether it held.
void show(const std::string& title, const Check& c) {
  std::printf("[truth] %s: %s\n%s", title.c_str(), c.ok ? "holds" : "does NOT hold",
              c.text.c_str());
  std::fflush(stdout);
}

const char* kRing = "a ring all-reduce runs at its slowest hop's pace";

}  // namespace

// ---------------------------------------------------------------- link_degrade
// n2's switch port (the hop into n2) drops to a quarter of its 1 Gb/s for 5 s. The truth: the
// port's capacity in counted bytes is rate/8 x len/(len + 24) (the switch's per-frame wire
// overhead), len the mean frame length it sent in the baseline; the hop carried W_b bytes/s in the
// baseline, so it can now carry rho = min(1, capacity / W_b) of the job's pace, and a ring runs at
// its slowest hop's pace: the job loses (1 - rho) x B x (Tr - Ta). B is the job's rate from its
// iteration records. Tolerance: the ends of the impact (one timing uncertainty each, at the
// missing rate) and the job's own noise over the window (its baseline's hold-long dip below B).
TEST_CASE("truth: link_degrade to a quarter of one port's rate slows the ring to the hop's pace",
          "[truth]") {
  const double fraction = 0.25;
  TruthRun r = runTruth(
      "link-degrade",
      playbookText("link-degrade", 15, 7, 5,
                   "[[step]]\nname = \"degrade-n2\"\nkind = \"link_degrade\"\ntarget = \"n2\"\n"
                   "phase = \"fault\"\nat = \"1s\"\nfor = \"5s\"\n"
                   "params = { fraction = " +
                       std::to_string(fraction) + " }\n"),
      27 + 15);
  // The switch port's rate during the run: restored exactly.
  json port = control({{"cmd", "get_port"}, {"port", "n2"}});
  CHECK(port["ports"][0]["rate_bps"].get<double>() == 1e9);

  Input in = inputOf(r.doc);
  Reading real = scoreOf(in);
  checkRescoreMatches(r.doc, real);
  // The truth, from the switch's counters and the job's iterations.
  auto [wb, wf] = wireBetween(r, "n2", in.baselineFrom, in.baselineTo);
  const double baseS = double(in.baselineTo - in.baselineFrom) / 1e9;
  const double wireBase = wb / baseS, meanLen = wb / std::max(1.0, wf);
  const double capacity = fraction * 1e9 / 8 * meanLen / (meanLen + 24);
  const double rho = std::min(1.0, capacity / wireBase);
  const double bTruth = iterationRate(r.doc, in.baselineFrom, in.baselineTo);
  const double windowS = double(in.faultEnd - in.faultStart) / 1e9;
  auto [fb, ff] = wireBetween(r, "n2", in.faultStart + 500'000'000, in.faultEnd);
  const double wireFault = fb / (windowS - 0.5);
  (void)ff;
  std::printf(
      "[truth] link_degrade: n2's hop carried %.1f MB/s in the baseline (frames of %.0f B); at "
      "%.0f %% of "
      "1 Gb/s it carries at most %.1f MB/s (%.1f MB/s measured while degraded): rho = %.3f\n",
      wireBase / 1e6, meanLen, fraction * 100, capacity / 1e6, wireFault / 1e6, rho);

  auto check = [&](const Reading& rd, const ctl::Impact& im) {
    Check c;
    checkBaseline(c, rd, bTruth);
    // The loss the scorer can read with its own B (checked above): the missing share of the
    // fault's span. Uncertainty: each end of the impact is known to the timing uncertainty, at
    // the missing rate, and the job's own noise over the window.
    const double lossTruth = (1 - rho) * rd.baseline * windowS;
    const double u = double(im.uncertaintyNs) / 1e9;
    const double tol = (1 - rho) * rd.baseline * 2 * u + noiseBytes(rd, in, windowS);
    c.expect(std::fabs(im.lossBytes - lossTruth) <= tol,
             fmt("loss: truth %.1f MB ((1 - rho) x B x the %.2f s fault), scored %.1f MB, "
                 "uncertainty %.1f MB",
                 lossTruth / 1e6, windowS, im.lossBytes / 1e6, tol / 1e6));
    c.expect(im.recovered && double(im.recoveryTimeNs.value_or(-1)) <=
                                 double(im.uncertaintyNs) + double(in.s.smoothNs) / 2,
             fmt("recovery: truth 0 s (the rate is back when the port is), scored %.3f s (-1: not "
                 "recovered), "
                 "uncertainty %.3f s (a bin + the smoothing of the fault's end)",
                 im.recovered ? double(*im.recoveryTimeNs) / 1e9 : -1.0,
                 (double(im.uncertaintyNs) + double(in.s.smoothNs) / 2) / 1e9));
    return c;
  };
  std::printf("[truth] link_degrade: %s\n", kRing);
  Check ok = check(real, real.impact);
  show("link_degrade, the run's own input", ok);
  CHECK(ok.ok);
  // Wrong input: the series scaled by 0.5 (a scorer reading half the bytes). A record shifted by
  // 1 s moves this loss by a fifth, (1 - rho) x B x 1 s, which is inside the uncertainty the
  // lab's noisy job allows (its hold band is 20-35 % deep): not a check this case can make.
  Reading half = scoreOf(scaled(in, 0.5));
  Check wrong = check(half, half.impact);
  show("link_degrade, the series scaled by 0.5 (must not hold)", wrong);
  CHECK_FALSE(wrong.ok);
}

// ---------------------------------------------------------------- noop
// The shipped noise-floor playbook, judged as it judges itself: three trials of a noop on n2
// after a 20 s baseline each (the band is the baseline's lowest dip pushed a quarter deeper, and
// a 10-12 s baseline samples too little of the lab's noise: 6 of 42 noop trials with 10 s read an
// impact somewhere in their window, 0 of 24 with 20 s; docs/scoring.md, "Noise floor"). One
// trial of one run is a sample of the host's noise: a CI run on a busy host read 52 MB of loss
// in its single noop trial against a stated 28 MB. So the truth must hold in two trials of
// three (the playbook's stat = "median"), the playbook must pass, and the wrong input, which
// halves every trial's series from its fault on, must fail in every trial.
TEST_CASE("truth: a noop costs nothing (playbooks/noise-floor.toml, two trials of three)", "[truth]") {
  const std::string text = readFile(rctest::env("RDMACHAOS_SOURCE_DIR") + "/playbooks/noise-floor.toml");
  REQUIRE(!text.empty());
  TruthRun r = runTruth("noise-floor", text, 84 + 15);
  CHECK(r.doc["outcome"]["verdict"] == "passed");
  REQUIRE(r.doc["trials"].size() == 3);
  int holds = 0, wrongHolds = 0, noImpact = 0;
  for (size_t i = 0; i < 3; i++) {
    const json& t = r.doc["trials"][i];
    const json& im = t["job"]["impact"];
    REQUIRE(im.is_object());
    Input in = inputOf(r.doc, i);
    const double bTruth = iterationRate(r.doc, in.baselineFrom, in.baselineTo);
    const double windowS = double(in.faultEnd - in.faultStart) / 1e9;
    // The run's own scores of the trial (its band may be widened to the run's typical depth,
    // so they are read from the result, not re-scored); the noise the truth allows is the
    // trial's own baseline's at the window's length.
    // The noise allowed is the larger of the job's noise at the window's length (its baseline's
    // lowest window of that length, a quarter deeper) and the noise the scorer itself states for
    // the trial, its band: a rate that stays inside the band is no impact, so the loss it adds
    // up over the window is at most the band's depth x B x the window. (A run at a418ed9 read
    // 29 MB in a trial without an impact against 15 MB of the first and 79 MB of the second.)
    Reading own = scoreOf(in);
    const double tol = std::max(noiseBytes(own, in, windowS), own.floorDepth() * own.baseline * windowS);
    Check c;
    checkBaseline(c, Reading{t["job"]["baseline_Bps"].get<double>(), own.band, own.impact}, bTruth);
    const double loss = im.value("loss_bytes", 0.0);
    const bool recovered = im.value("recovered", false) && im["recovery_time_ns"].is_number();
    const double rec = recovered ? im["recovery_time_ns"].get<double>() : -1e9;
    const double u = im.value("uncertainty_ns", 0.0);
    c.expect(loss <= tol, fmt("loss: truth 0, scored %.2f MB, uncertainty %.1f MB (the job's band at the window's "
                              "length, %.1f s)",
                              loss / 1e6, tol / 1e6, windowS));
    c.expect(recovered && rec <= u, fmt("recovery: truth 0, scored %.3f s (-1: not recovered), uncertainty %.3f s",
                                        rec / 1e9, u / 1e9));
    show("noop, trial " + std::to_string(i + 1) + " of 3, the run's own scores", c);
    holds += c.ok ? 1 : 0;
    noImpact += im["time_to_impact_ns"].is_null() ? 1 : 0;
    // Wrong input: the trial's series from its fault's start on scaled by 0.5.
    Reading half = scoreOf(scaled(in, 0.5, in.faultStart));
    Check w;
    w.expect(half.impact.lossBytes <= tol, fmt("loss: truth 0, scored %.2f MB, uncertainty %.1f MB",
                                                half.impact.lossBytes / 1e6, tol / 1e6));
    w.expect(half.impact.recovered && half.impact.recoveryTimeNs.value_or(0) <= half.impact.uncertaintyNs,
             fmt("recovery: truth 0, scored %.3f s (-1: not recovered)",
                 half.impact.recovered ? double(*half.impact.recoveryTimeNs) / 1e9 : -1.0));
    show("noop, trial " + std::to_string(i + 1) + ", the series scaled by 0.5 from the fault on (must not hold)", w);
    wrongHolds += w.ok ? 1 : 0;
  }
  std::printf("[truth] noise-floor: the truth held in %d of 3 trials, %d of 3 without an impact\n", holds, noImpact);
  std::fflush(stdout);
  CHECK(holds >= 2);
  CHECK(noImpact >= 2);
  CHECK(wrongHolds == 0);
  // With repeat, the trials are shown side by side with mean, stddev and CV.
  REQUIRE(r.doc["repeatability"].size() == 1);
  const json& rep = r.doc["repeatability"][0];
  CHECK(rep["trials"] == 3);
  bool baseline = false;
  for (const auto& m : rep["metrics"])
    if (m["metric"] == "baseline") {
      baseline = true;
      CHECK(m["n"] == 3);
      CHECK(m["cv_pct"].is_number());
    }
  CHECK(baseline);
}

// ---------------------------------------------------------------- link_flap
// n2's data link goes down for D. The job's TCP connections retransmit on a timer the workload
// caps at 1 s (TCP_RTO_MAX_MS): the stall lasts at least D and at most D + two capped timers (the
// timer that was running when the link came back, and one more), plus a bin. The bytes lost are
// the baseline rate (from the job's iterations) times the outage the wire shows: the time the
// switch forwarded (almost) nothing.
TEST_CASE(
    "truth: a link flap of D stalls the job between D and D + two capped retransmission timers",
    "[truth]") {
  const int downS = GENERATE(1, 3);
  const std::string name = "flap-" + std::to_string(downS) + "s";
  TruthRun r =
      runTruth(name,
               playbookText(name, 10, downS + 4, 5,
                            "[[step]]\nname = \"flap-n2\"\nkind = \"link_flap\"\ntarget = \"n2\"\n"
                            "phase = \"fault\"\nat = \"1s\"\nfor = \"" +
                                std::to_string(downS + 1) + "s\"\nparams = { down = \"" +
                                std::to_string(downS) + "s\", count = 1 }\n"),
               19 + downS + 15);
  Input in = inputOf(r.doc);
  Reading real = scoreOf(in);
  checkRescoreMatches(r.doc, real);
  const double bTruth = iterationRate(r.doc, in.baselineFrom, in.baselineTo);
  // The outage on the wire: the longest stretch of the test's switch samples, from the fault's
  // start on, in which every host port together sent less than a tenth of their baseline rate.
  auto [wb, wf] = wireBetween(r, "n1", in.baselineFrom, in.baselineTo);
  auto [wb2, wf2] = wireBetween(r, "n2", in.baselineFrom, in.baselineTo);
  auto [wb3, wf3] = wireBetween(r, "n3", in.baselineFrom, in.baselineTo);
  (void)wf, (void)wf2, (void)wf3;
  const double wireRate = (wb + wb2 + wb3) / (double(in.baselineTo - in.baselineFrom) / 1e9);
  int64_t outageNs = 0, outageEnd = 0, run = 0, stepMax = 0;
  for (size_t i = 1; i < r.wire.size(); i++) {
    const int64_t t0 = r.wire[i - 1].wallNs - r.startedUnixNs,
                  t1 = r.wire[i].wallNs - r.startedUnixNs;
    if (t1 < in.faultStart || t0 > in.faultEnd + 10'000'000'000) continue;
    double bytes = 0;
    for (const char* p : {"n1", "n2", "n3"})
      bytes += r.wire[i].tx.at(p).first - r.wire[i - 1].tx.at(p).first;
    const bool quiet = bytes * 1e9 / double(t1 - t0) < 0.1 * wireRate;
    run = quiet ? run + (t1 - t0) : 0;
    if (run > outageNs) outageNs = run, outageEnd = t1;
    stepMax = std::max(stepMax, t1 - t0);
  }
  const int64_t rtoCap = 1'000'000'000;
  std::printf(
      "[truth] %s: the wire was quiet for %.3f s (samples up to %.0f ms apart); B from the "
      "iterations %.1f MB/s\n",
      name.c_str(), double(outageNs) / 1e9, double(stepMax) / 1e6, bTruth / 1e6);

  auto check = [&](const Reading& rd) {
    Check c;
    const ctl::Impact& im = rd.impact;
    checkBaseline(c, rd, bTruth);
    // After the outage the job may run below its pace for a while (CUBIC regrowing its windows,
    // a busy host: docs/status.md): the wire's net shortfall from the outage's end to the end of
    // the impact window, at the job's bytes per wire byte, is lost too (0 when the job is back
    // at once, as it mostly is). Its own uncertainty is the job's noise over that stretch.
    const int64_t tailEnd = std::max(outageEnd, im.windowToNs);
    double tail = 0, tailTol = 0;
    if (tailEnd > outageEnd + 20'000'000) {
      double wire = 0;
      for (const char* p : {"n1", "n2", "n3"}) wire += wireBetween(r, p, outageEnd, tailEnd).first;
      const double tailS = double(tailEnd - outageEnd) / 1e9;
      tail = std::max(0.0, wireRate * tailS - wire) * rd.baseline / wireRate;
      tailTol = noiseBytes(rd, in, tailS);
    }
    const double lossTruth = rd.baseline * double(outageNs) / 1e9 + tail;
    const int64_t bin = in.job.binNs;
    const double lo = downS * 1e9, hi = downS * 1e9 + 2.0 * double(rtoCap) + double(bin);
    c.expect(double(im.longestStallNs) >= lo && double(im.longestStallNs) <= hi,
             fmt("stall: truth within [%.3f, %.3f] s (D, D + 2 x the 1 s retransmission cap + a "
                 "bin), scored %.3f s",
                 lo / 1e9, hi / 1e9, double(im.longestStallNs) / 1e9));
    // One bin's bytes at B, plus the sampling of the wire (the outage is known to one sample
    // interval at each end).
    const double tol = rd.baseline * (double(bin) + 2.0 * double(stepMax)) / 1e9 + (tail > 0 ? tailTol : 0);
    c.expect(std::fabs(im.lossBytes - lossTruth) <= tol,
             fmt("loss: truth %.1f MB (B x the wire's outage + the wire's shortfall after it, %.1f MB), scored "
                 "%.1f MB, uncertainty %.1f MB (a bin + two wire samples at B, + the job's noise over a tail)",
                 lossTruth / 1e6, tail / 1e6, im.lossBytes / 1e6, tol / 1e6));
    return c;
  };
  Check ok = check(real);
  show(name + ", the run's own input", ok);
  CHECK(ok.ok);
  Reading half = scoreOf(scaled(in, 0.5));
  Check wrong = check(half);
  show(name + ", the series scaled by 0.5 (must not hold)", wrong);
  CHECK_FALSE(wrong.ok);
  Reading late = scoreOf(shifted(in, 1'000'000'000));
  Check wrong2 = check(late);
  show(name + ", the fault's record shifted by 1 s (must not hold)", wrong2);
  CHECK_FALSE(wrong2.ok);
}

// ---------------------------------------------------------------- packet
// A packet rule on n2's port drops a burst of K of the job's TCP frames from n2, from the n-th
// match on: the truth is K, from the fault's parameters. The switch's events (packet_drop, in
// the fault's record), the capture (frames whose comment says the rule dropped them) and the
// score (packets_acted) must each read exactly K inside the fault's window.
TEST_CASE(
    "truth: a packet fault dropping K frames reads K in the switch's events, the capture and the "
    "score",
    "[truth]") {
  const int k = 20;
  TruthRun r = runTruth(
      "packet",
      playbookText("packet", 8, 4, 3,
                   "[[step]]\nname = \"drop-n2\"\nkind = \"packet\"\ntarget = \"n2\"\n"
                   "phase = \"fault\"\nat = \"1s\"\nfor = \"2s\"\n"
                   "params = { protocol = \"tcp\", direction = \"ingress\", select = \"burst\", "
                   "n = 2000, burst = " +
                       std::to_string(k) + ", action = \"drop\", duration = \"2s\" }\n"),
      15 + 15);
  const json& f = r.doc["faults"][0];
  REQUIRE(r.doc.contains("packet_faults"));
  const json& pf = r.doc["packet_faults"][0];
  REQUIRE(pf["capture"].is_string());
  const std::string capturePath = lab().dir() + "/truth-packet/" + pf["capture"].get<std::string>();
  auto capture = rc::pcapng::read(capturePath);
  REQUIRE(capture);
  const double scored = r.doc["trials"][0]["job"]["packet"]["packets_acted"].get<double>();

  // FROM/TO: the fault's window on the run's timeline as its record says.
  auto check = [&](int64_t fromNs, int64_t toNs) {
    Check c;
    int events = 0, captured = 0;
    for (const auto& e : f["events"])
      if (e["what"] == "packet_drop" && e["t_ns"].get<int64_t>() >= fromNs &&
          e["t_ns"].get<int64_t>() <= toNs)
        events++;
    for (const auto& rec : *capture) {
      const int64_t t = rec.timeNs - r.startedUnixNs;
      if (rec.comment.find(": drop") != std::string::npos && t >= fromNs && t <= toNs) captured++;
    }
    c.expect(events == k,
             fmt("the switch's events: truth %.0f drops, %.0f in the fault's window", k, events));
    c.expect(captured == k,
             fmt("the capture: truth %.0f drops, %.0f frames marked dropped in the window", k,
                 captured));
    c.expect(
        scored == k && pf["acted"] == k,
        fmt("the score: truth %.0f, packets_acted %.0f (the fault's summary: %.0f); uncertainty 0",
            k, scored, pf["acted"].get<double>()));
    return c;
  };
  const int64_t applied = f["applied_ns"].get<int64_t>(),
                reverted = f["reverted_ns"].get<int64_t>();
  Check ok = check(applied, reverted);
  show("packet, the run's own record", ok);
  CHECK(ok.ok);
  Check wrong = check(applied + 1'000'000'000, reverted + 1'000'000'000);
  show("packet, the fault's record shifted by 1 s (must not hold)", wrong);
  CHECK_FALSE(wrong.ok);
}

// ---------------------------------------------------------------- incast
// Two senders (n1, n3) each send a flow of 10 UDP datagrams of 1,400 B into n2 every 100 ms for
// 2 s. The truth: every burst of every sender is 14,000 B in 10 datagrams, so the senders' own
// bursts give the bytes exactly; the switch's meter (frames leaving n2's port for the sink's
// port, 42 B of Ethernet, IPv4 and UDP header each) and the sink's received bytes in the fault's
// record must both be exactly that, and the meter's first and last frame inside the fault's
// window.
TEST_CASE(
    "truth: an incast of known bytes reads the same bytes on the switch's meter and in the record",
    "[truth]") {
  const int64_t size = 14000, perDatagram = 1400;
  TruthRun r =
      runTruth("incast",
               playbookText("incast", 8, 4, 3,
                            "[[step]]\nname = \"incast-n2\"\nkind = \"incast\"\ntarget = \"all\"\n"
                            "phase = \"fault\"\nat = \"1s\"\nfor = \"2s\"\n"
                            "params = { receiver = \"n2\", senders = 2, fan_in = 2, size = \"" +
                                std::to_string(size) +
                                "B\", interval = \"100ms\", duration = \"1500ms\", "
                                "transport = \"udp\" }\n"),
               15 + 15);
  // The records: the senders' bursts, the sink's bytes and datagrams.
  int64_t bursts = 0, received = -1, datagrams = -1, dropped = -1, applied = 0, reverted = 0;
  int sink = 0, port = 0;
  for (const auto& f : r.doc["faults"]) {
    for (const auto& e : f["events"]) {
      const std::string d = e["detail"].get<std::string>();
      if (e["what"] == "sent") bursts += std::stoll(d);  // "<bursts> bursts, <bytes> B ... sent"
      if (e["what"] == "received") {
        received = std::stoll(d);  // "<bytes> B (...) in <n> datagrams from ..."
        datagrams = std::stoll(d.substr(d.find(" in ") + 4));
        // "...; <n> datagrams dropped by this host before the sink read them (its socket buffer full)"
        if (const size_t at = d.find(" datagrams dropped by this host"); at != std::string::npos)
          dropped = std::stoll(d.substr(d.rfind("; ", at) + 2));
      }
    }
    if (f["role"] == "sink") {
      sink++;
      port = f["params"]["port"].get<int>();
      applied = f["applied_ns"].get<int64_t>();
      reverted = f["reverted_ns"].get<int64_t>();
    }
  }
  REQUIRE(sink == 1);
  const int64_t truthBytes = bursts * size, truthFrames = bursts * (size / perDatagram);
  auto meter = r.meters.find("n2/" + std::to_string(port));
  REQUIRE(meter != r.meters.end());
  const json& m = meter->second;
  REQUIRE(m["first_wall_ns"].is_number_integer());
  REQUIRE(m["last_wall_ns"].is_number_integer());
  const int64_t frames = m["frames"].get<int64_t>(), wireBytes = m["bytes"].get<int64_t>();
  std::printf(
      "[truth] incast: %lld bursts of %lld B sent; the meter: %lld frames, %lld B on the wire\n",
      (long long)bursts, (long long)size, (long long)frames, (long long)wireBytes);
  auto check = [&](int64_t fromNs, int64_t toNs) {
    Check c;
    c.expect(frames == truthFrames && wireBytes - 42 * frames == truthBytes,
             fmt("the switch's meter: truth %.0f datagrams, %.0f B; metered %.0f frames, %.0f B of "
                 "payload",
                 double(truthFrames), double(truthBytes), double(frames),
                 double(wireBytes - 42 * frames)));
    // What the host's kernel dropped before the sink read it (its socket buffer full, SO_RXQ_OVFL)
    // is in the record too: the record holds when it accounts for every datagram on the wire.
    c.expect(dropped >= 0 && received + dropped * perDatagram == truthBytes && datagrams + dropped == truthFrames,
             fmt("the sink's record: truth %.0f B in %.0f datagrams; received %.0f B in %.0f", double(truthBytes),
                 double(truthFrames), double(received), double(datagrams)) +
                 ", and " + std::to_string(dropped) + " dropped by the host's socket; uncertainty 0");
    const int64_t first = m["first_wall_ns"].get<int64_t>() - r.startedUnixNs,
                  last = m["last_wall_ns"].get<int64_t>() - r.startedUnixNs;
    c.expect(
        first >= fromNs - 100'000'000 && last <= toNs,
        fmt("on the wire from %.3f s to %.3f s, inside the fault's window %.3f-%.3f s (the sink is "
            "applied "
            "first; 100 ms for the agents' clocks)",
            double(first) / 1e9, double(last) / 1e9, double(fromNs) / 1e9, double(toNs) / 1e9));
    return c;
  };
  Check ok = check(applied, reverted);
  show("incast, the run's own record", ok);
  CHECK(ok.ok);
  CHECK(bursts > 0);
  Check wrong = check(applied + 1'000'000'000, reverted + 1'000'000'000);
  show("incast, the fault's record shifted by 1 s (must not hold)", wrong);
  CHECK_FALSE(wrong.ok);
}
