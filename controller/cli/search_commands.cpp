// `rdmachaos search`: a [search] playbook's points, each one trial of the playbook pinned there,
// run and scored as `run` does, handed to the search engine; the record saved after every trial.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/atomic_file.hpp"
#include "common/tls.hpp"
#include "controller/cli/commands.hpp"
#include "controller/cli/commands_internal.hpp"
#include "controller/fleet/inventory.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_dir.hpp"
#include "controller/report/search_report.hpp"
#include "controller/run/packet_analysis.hpp"
#include "controller/run/run_playbook.hpp"
#include "controller/score/score.hpp"
#include "controller/search/search.hpp"

namespace rc::controller {
namespace {

namespace fs = std::filesystem;
constexpr const char* kRecordFile = "search.json";

// A trial that cannot be an answer (the run stopped, the metric was not measured): the search
// stops there, its record whole up to the trial before.
struct SearchStopped {
  std::string why;
};

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The search's own record file: the playbook it explores (so a resume can tell it is the same)
// and the engine's record.
json recordDocument(const Playbook& pb, const json& engineRecord) {
  return {{"version", 1},
          {"playbook", {{"path", pb.path}, {"text", pb.text}}},
          {"record", engineRecord}};
}

struct Session {
  Session(const SearchOptions& options, const Playbook& playbook, const Inventory& inventory,
          boost::asio::ssl::context& context, std::string directory)
      : o(options), pb(playbook), inv(inventory), tls(context), dir(std::move(directory)) {}
  const SearchOptions& o;
  const Playbook& pb;
  const Inventory& inv;
  boost::asio::ssl::context& tls;
  std::string dir;
  boost::asio::io_context io;  // one for the search, restarted for each trial

  Result<void> save(const json& engineRecord) const {
    return writeFileAtomic(dir + "/" + kRecordFile,
                           recordDocument(pb, engineRecord).dump(1) + "\n");
  }

  // One trial of the playbook pinned at POINT, scored; its result.json kept as trials/NNN.json.
  search::Evaluation evaluate(const std::vector<double>& point, size_t number) {
    auto pinned = pinSearchPoint(pb, point);
    if (!pinned) throw SearchStopped{describePoint(pb, point) + ": " + pinned.error().message};
    auto plan = resolvePlan(pinned->playbook, inv);
    if (!plan) throw SearchStopped{describePoint(pb, point) + ": " + plan.error().message};
    std::fprintf(stderr, "trial %zu/%zu: %s (%.1fs)\n", number, pb.search->budget,
                 describePoint(pb, point).c_str(), plan->durationNs / 1e9);
    auto timeout = parseDuration(o.timeout);
    RunResult result;
    io.restart();
    boost::asio::co_spawn(
        io,
        executePlan(
            io, pinned->playbook, *plan, inv, tls,
            RunnerOptions{.connectTimeout = std::chrono::duration_cast<std::chrono::milliseconds>(
                              timeout ? *timeout : std::chrono::seconds(5)),
                          .progress = o.progress}),
        [&](std::exception_ptr e, RunResult r) {
          abortOnException(e, r);
          result = std::move(r);
        });
    io.run();
    analysePackets(result, inv.switchControl);
    Scores scores = score(result, pinned->playbook);
    json doc = makeResultDocument(result, pinned->playbook, scores);
    char name[32];
    std::snprintf(name, sizeof name, "trials/%03zu.json", number);
    if (auto w = writeFileAtomic(dir + "/" + name, doc.dump(1) + "\n"); !w)
      throw SearchStopped{"cannot keep the trial's result: " + w.error().message};
    removeReadCaptures(result);
    const std::string at = "trial " + std::to_string(number) + " at " + describePoint(pb, point);
    if (!result.abortReason.empty())
      throw SearchStopped{at + ": the run stopped: " + result.abortReason};
    if (scores.trials.empty()) throw SearchStopped{at + ": no trial was scored"};
    const TrialScore& t = scores.trials.front();
    if (!t.completed || !t.problems.empty())
      throw SearchStopped{at + ": the trial did not complete" +
                          (t.problems.empty() ? std::string() : ": " + t.problems.front())};
    if (!t.conditionReached)
      throw SearchStopped{at + ": its [[require]] condition was not reached"};
    const std::string metric = searchMetric(pb), scope = searchScope(pb);
    const ScopeScore* s = scope == "job" ? &t.job : nullptr;
    for (const auto& n : t.nodes)
      if (n.scope == scope) s = &n;
    if (!s) throw SearchStopped{at + ": no score for '" + scope + "'"};
    if (auto v = metricValue(*s, metric)) return {*v, metricUncertainty(*s, metric)};
    // Not recovered: the recovery took at least as long as the trial watched after the revert.
    if (metric == "recovery_time" && s->impact && t.faultEndNs) {
      const double watched = double(plan->trials.front().endNs - *t.faultEndNs);
      search::Evaluation e{watched, 0};
      if (pb.search->kind == SearchKind::worst ||
          search::decide(boundarySettings(pb), search::summarise({e})) == search::Verdict::fail)
        return e;
      throw SearchStopped{at + ": not recovered, yet the trial watched only " +
                          describeMetricValue(metric, watched) +
                          " after the revert, within the bound: lengthen the last phase"};
    }
    throw SearchStopped{at + ": " + metric + " (" + scope +
                        ") was not measured: " + whyMissing(metric, *s)};
  }

  // Records a trial the engine is about to append, so the file never lags the search.
  template <class Record>
  search::Evaluation evaluateAndSave(Record& record, const std::vector<double>& point) {
    search::Evaluation e = evaluate(point, record.trials.size() + 1);
    Record next = record;
    next.trials.push_back({point, e});
    if (auto w = save(toJson(next)); !w)
      throw SearchStopped{"cannot save the search's record: " + w.error().message};
    std::fprintf(stderr, "search: %s\n", searchProgress(pb, next.trials).c_str());
    return e;
  }
};

// The engine's record: new, or the one in DIR when resuming (the same playbook, the same settings).
template <class Record>
Result<Record> startRecord(const SearchOptions& o, const Playbook& pb, const std::string& dir,
                           Record fresh, Record (*fromJson)(const json&)) {
  if (!o.resume) return fresh;
  const std::string path = dir + "/" + kRecordFile;
  if (!fs::exists(path))
    return makeError("--resume: no search record in '" + dir + "' (" + kRecordFile +
                     "): start without --resume");
  try {
    json doc = json::parse(readText(path));
    if (doc.at("playbook").at("text").get<std::string>() != pb.text)
      return makeError(
          "--resume: '" + pb.path + "' changed since the search in '" + dir +
          "' began: its trials answer another playbook. Start a new search in another --out");
    if (doc.at("record").at("settings") != toJson(fresh).at("settings"))
      return makeError("--resume: the record in '" + dir +
                       "' was made with other [search] settings");
    return fromJson(doc.at("record"));
  } catch (const std::exception& e) {
    return makeError("--resume: the record '" + path + "' cannot be read: " + e.what());
  }
}

Result<std::string> searchDir(const SearchOptions& o, const Playbook& pb) {
  if (o.resume) {
    if (o.out.empty())
      return makeError("--resume needs --out DIR: the directory of the search to continue");
    return o.out;
  }
  if (!o.out.empty() && fs::exists(fs::path(o.out) / kRecordFile))
    return makeError("--out '" + o.out +
                     "' holds a search already: continue it with --resume, or pick another --out");
  auto d = prepareReportDir(o.out, pb.name + "-search", false, std::time(nullptr));
  if (!d) return makeError(d.error().message);
  return d->path;
}

std::string startLine(const Playbook& pb, const std::string& dir) {
  const SearchSpec& s = *pb.search;
  std::string what;
  for (const auto& p : s.params)
    what += (what.empty() ? "" : ", ") + p.path + " in [" + searchValueText(p, p.range.lo) + ", " +
            searchValueText(p, p.range.hi) + "]" +
            (p.range.scale == search::Scale::log ? " (log)" : "");
  std::string goal = s.kind == SearchKind::boundary
                         ? "where " + searchExpectation(pb).describe() + " starts to fail (" +
                               (s.failsAbove ? "above" : "below") + ")"
                         : "the setting with the largest " + s.metric;
  return "searching '" + pb.name + "': " + what + ", " + goal + "; budget " +
         std::to_string(s.budget) + " trials; record in " + dir + "/" + kRecordFile;
}

}  // namespace

int cmdSearch(const SearchOptions& o) {
  auto pb = loadPlaybook(o.playbook);
  if (!pb) return fail(pb.error().message);
  if (!pb->search)
    return fail(
        "'" + o.playbook +
        "' has no [search] table: run it with `rdmachaos run`, or add one (docs/search.md)");
  auto inv = loadInventory(o.inventory);
  if (!inv) return fail(inv.error().message);
  // Bound now, at both ends of the space: an unknown node stops the search before it starts.
  for (bool hi : {false, true}) {
    std::vector<double> corner;
    for (const auto& p : pb->search->params) corner.push_back(hi ? p.range.hi : p.range.lo);
    auto pinned = pinSearchPoint(*pb, corner);
    if (!pinned) return fail(pinned.error().message);
    if (auto plan = resolvePlan(pinned->playbook, *inv); !plan) return fail(plan.error().message);
  }
  for (const auto& w : labMismatch(*pb, o.inventory))
    std::fprintf(stderr, "WARNING: %s\n", w.c_str());
  if (auto t = parseDuration(o.timeout); !t || t->count() <= 0)
    return fail("--timeout '" + o.timeout +
                "': " + (t ? std::string("must be positive") : t.error().message));
  auto dir = searchDir(o, *pb);
  if (!dir) return fail(dir.error().message);
  // The record before anything else is made: a resume that does not fit changes nothing.
  std::optional<search::BoundaryRecord> boundary;
  std::optional<search::WorstRecord> worst;
  if (pb->search->kind == SearchKind::boundary) {
    auto r = startRecord<search::BoundaryRecord>(o, *pb, *dir, {boundarySettings(*pb), {}},
                                                 search::boundaryRecordFromJson);
    if (!r) return fail(r.error().message);
    boundary = std::move(*r);
  } else {
    auto r = startRecord<search::WorstRecord>(o, *pb, *dir, {worstSettings(*pb), {}},
                                              search::worstRecordFromJson);
    if (!r) return fail(r.error().message);
    worst = std::move(*r);
  }
  std::error_code ec;
  fs::create_directories(*dir + "/trials", ec);
  if (ec) return fail("cannot create '" + *dir + "/trials': " + ec.message());
  auto tls = tls::makeClientContext(inv->tls);
  if (!tls) return fail(tls.error().message);

  Session session(o, *pb, *inv, *tls, *dir);
  std::fprintf(stderr, "%s\n", startLine(*pb, *dir).c_str());
  const auto& done = boundary ? boundary->trials : worst->trials;
  if (!done.empty())
    std::fprintf(stderr, "resuming after %zu trial(s): %s\n", done.size(),
                 searchProgress(*pb, done).c_str());
  SearchOutcome outcome;
  json engineRecord;
  try {
    if (boundary) {
      outcome.boundary = search::runBoundary(*boundary, [&](double v) {
        return session.evaluateAndSave(*boundary, std::vector<double>{v});
      });
      engineRecord = search::toJson(*boundary);
    } else {
      outcome.worst = search::runWorst(
          *worst, [&](const std::vector<double>& p) { return session.evaluateAndSave(*worst, p); });
      engineRecord = search::toJson(*worst);
    }
  } catch (const SearchStopped& s) {
    std::fprintf(stderr,
                 "rdmachaos: the search stopped: %s\nits record is in %s/%s; continue it with: "
                 "rdmachaos search %s "
                 "--inventory %s --out %s --resume\n",
                 s.why.c_str(), dir->c_str(), kRecordFile, o.playbook.c_str(), o.inventory.c_str(),
                 dir->c_str());
    return kExitError;
  } catch (const std::invalid_argument& e) {
    return fail(std::string("the search's record does not fit its settings: ") + e.what());
  }
  if (auto w = session.save(engineRecord); !w) return fail(w.error().message);

  std::string reproducer, noReproducer;
  if (auto r = makeReproducer(*pb, outcome)) {
    reproducer = *dir + "/reproducer.toml";
    if (auto w = writeFileAtomic(reproducer, r->text); !w) return fail(w.error().message);
  } else {
    noReproducer = r.error().message;
  }
  json doc = makeSearchDocument(*pb, engineRecord, outcome, reproducer, noReproducer);
  if (auto w = writeFileAtomic(*dir + "/result.json", doc.dump(2) + "\n"); !w)
    return fail(w.error().message);
  std::printf("%s\nresult: %s/result.json\n", renderSearchText(doc).c_str(), dir->c_str());
  return reproducer.empty() ? kExitFailed : kExitOk;
}

}  // namespace rc::controller
