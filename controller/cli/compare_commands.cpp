// The commands that read a run's artifacts offline: `rdmachaos compare` and `rdmachaos baseline
// merge` (see compare.hpp), and `rdmachaos oracle` (a switch capture through oracle/gbn_oracle.hpp).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/pcapng.hpp"
#include "controller/cli/commands.hpp"
#include "controller/cli/commands_internal.hpp"
#include "controller/report/compare.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_targets.hpp"
#include "oracle/gbn_oracle.hpp"

namespace rc::controller {
namespace {

// A result document (checked as `report` checks it) or a golden baseline.
Result<json> loadComparable(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read '" + path + "': check the path");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::parse_error& e) {
    return makeError(path + ": not JSON: " + e.what());
  }
  if (doc.is_object() && doc.value("schema", std::string()) == kGoldenSchema) {
    if (auto t = metricTableOf(doc); !t) return makeError(path + ": " + t.error().message);
    return doc;
  }
  if (auto ok = checkResultDocument(doc); !ok)
    return makeError(path + ": " + ok.error().message + " (compare takes result.json documents of `run` and golden "
                                                         "baselines of `baseline merge`)");
  return doc;
}

Result<std::vector<CompareRule>> loadRules(const std::string& path) {
  if (path.empty()) return std::vector<CompareRule>{};
  std::ifstream in(path);
  if (!in) return makeError("cannot read rules '" + path + "': check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseCompareRules(ss.str(), path);
}

// compare.json: the comparison and, for a target sweep, its table with the "vs_baseline"
// column (RESULTDOC as addTargetsVsBaseline left it).
json comparisonJson(const CompareOutcome& c, const json& resultDoc) {
  json out = compareDocument(c);
  if (resultDoc.contains("targets")) out["targets"] = resultDoc["targets"];
  return out;
}

}  // namespace

Result<BaselineCheck> loadBaselineCheck(const std::string& path, const std::string& rulesPath) {
  if (path.empty() && !rulesPath.empty()) return makeError("--baseline-rules needs --baseline GOLDEN.json");
  BaselineCheck b;
  b.path = path;
  auto doc = loadComparable(path);
  if (!doc) return makeError("--baseline: " + doc.error().message);
  b.doc = std::move(*doc);
  auto rules = loadRules(rulesPath);
  if (!rules) return rules.error();
  b.rules = std::move(*rules);
  return b;
}

Result<CompareOutcome> compareWithBaseline(const BaselineCheck& b, json& resultDoc) {
  auto bt = metricTableOf(b.doc), rt = metricTableOf(resultDoc);
  if (!bt) return makeError("--baseline: " + bt.error().message);
  if (!rt) return makeError("--baseline: this run: " + rt.error().message);
  CompareOutcome c = compareTables(*bt, *rt, b.rules, b.path + " (" + describeDocument(b.doc) + ")",
                                   "this run (" + describeDocument(resultDoc) + ")");
  addTargetsVsBaseline(resultDoc, c);
  return c;
}

int foldBaseline(const BaselineCheck& b, const CompareOutcome& c, const json& resultDoc, const std::string& dir,
                 int exitCode) {
  std::printf("\n== against the baseline ==\n%s", renderCompareText(c).c_str());
  const std::string jsonPath = dir + "/compare.json", junitPath = dir + "/compare-junit.xml";
  if (auto w = writeFileAtomic(jsonPath, comparisonJson(c, resultDoc).dump(2) + "\n"); !w) return fail(w.error().message);
  if (auto w = writeFileAtomic(junitPath, renderCompareJunit(c)); !w) return fail(w.error().message);
  if (auto w = writeFileAtomic(dir + "/compare.html",
                               renderOverlayHtml(b.doc, resultDoc, b.path, "this run", c.exitCode() ? "failed" : "passed",
                                                 renderCompareText(c) + targetsText(resultDoc)));
      !w)
    return fail(w.error().message);
  std::printf("compare: %s\n", jsonPath.c_str());
  if (c.exitCode() && exitCode == kExitOk) return kExitFailed;
  return exitCode;
}

int cmdCompare(const CompareOptions& o) {
  auto base = loadComparable(o.baseline);
  if (!base) return fail(base.error().message);
  auto res = loadComparable(o.result);
  if (!res) return fail(res.error().message);
  if ((*res).value("schema", std::string()) == kGoldenSchema)
    return fail(o.result + ": a golden baseline; compare a run's result.json against it (the baseline comes first)");
  auto loaded = loadRules(o.rules);
  if (!loaded) return fail(loaded.error().message);
  const std::vector<CompareRule>& rules = *loaded;
  auto bt = metricTableOf(*base), rt = metricTableOf(*res);
  if (!bt) return fail(o.baseline + ": " + bt.error().message);
  if (!rt) return fail(o.result + ": " + rt.error().message);
  CompareOutcome c = compareTables(*bt, *rt, rules, o.baseline + " (" + describeDocument(*base) + ")",
                                   o.result + " (" + describeDocument(*res) + ")");
  json annotated = *res;
  addTargetsVsBaseline(annotated, c);
  const std::string text = renderCompareText(c) + targetsText(annotated);
  std::printf("%s", text.c_str());
  if (!o.json.empty())
    if (auto w = writeFileAtomic(o.json, comparisonJson(c, annotated).dump(2) + "\n"); !w) return fail(w.error().message);
  if (!o.junit.empty())
    if (auto w = writeFileAtomic(o.junit, renderCompareJunit(c)); !w) return fail(w.error().message);
  if (!o.html.empty())
    if (auto w = writeFileAtomic(o.html, renderOverlayHtml(*base, *res, o.baseline, o.result,
                                                           c.exitCode() ? "failed" : "passed", text));
        !w)
      return fail(w.error().message);
  return c.exitCode() ? kExitFailed : kExitOk;
}

int cmdBaselineMerge(const std::vector<std::string>& inputs, const std::string& output) {
  if (output.empty()) return fail("baseline merge needs -o GOLDEN.json");
  std::vector<json> docs;
  for (const auto& p : inputs) {
    auto d = loadResultDocument(p);
    if (!d) return fail(d.error().message);
    docs.push_back(std::move(*d));
  }
  auto g = mergeGolden(docs, inputs);
  if (!g) return fail(g.error().message);
  if (auto w = writeFileAtomic(output, g->dump(2) + "\n"); !w) return fail(w.error().message);
  std::printf("%s: golden baseline of %zu runs of '%s', %zu values (median, range, noise each)\n", output.c_str(),
              docs.size(), (*g)["playbook"].get<std::string>().c_str(), (*g)["metrics"].size());
  return kExitOk;
}

int cmdOracle(const std::string& capture, bool asJson) {
  auto recs = pcapng::read(capture);
  if (!recs) {
    std::fprintf(stderr, "error: %s\n", recs.error().message.c_str());
    return kExitError;
  }
  auto rep = oracle::analyse(*recs);
  if (asJson)
    std::printf("%s\n", oracle::toJson(rep).dump(2).c_str());
  else
    std::printf("%s", oracle::toText(rep).c_str());
  return rep.pass() ? kExitOk : kExitFailed;
}

}  // namespace rc::controller
