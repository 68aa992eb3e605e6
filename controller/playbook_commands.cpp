// The playbook subcommands: validate, run --dry-run, report.
#include <cstdio>

#include "controller/commands.hpp"
#include "controller/inventory.hpp"
#include "controller/playbook.hpp"
#include "controller/report.hpp"

namespace rc::controller {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "rdmachaos: %s\n", message.c_str());
  return kExitError;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int cmdValidate(const std::vector<std::string>& playbooks, const std::string& inventory) {
  std::optional<Inventory> inv;
  if (!inventory.empty()) {
    auto i = loadInventory(inventory);
    if (!i) return fail(i.error().message);
    inv = std::move(*i);
  }
  int bad = 0;
  for (const auto& path : playbooks) {
    auto pb = loadPlaybook(path);
    if (!pb) {
      std::fprintf(stderr, "%s\n", pb.error().message.c_str());
      bad++;
      continue;
    }
    size_t steps = 0, expects = 0, trials = 0;
    for (const auto& sc : pb->scenarios) {
      steps += sc.steps.size();
      expects += sc.expectations.size();
      trials += (sc.sweep ? sc.sweep->values.size() : 1) * size_t(pb->repeat);
    }
    std::string extra;
    if (inv) {
      auto plan = resolvePlan(*pb, *inv);
      if (!plan) {
        std::fprintf(stderr, "%s\n", plan.error().message.c_str());
        bad++;
        continue;
      }
      size_t injections = 0;
      for (const auto& t : plan->trials) injections += t.faults.size();
      extra = ", " + std::to_string(injections) + " injection(s) on " + inventory;
    }
    std::printf("%s: ok: '%s', %zu scenario(s), %zu trial(s), %zu step(s) [%s], %zu expectation(s)%s\n",
                path.c_str(), pb->name.c_str(), pb->scenarios.size(), trials, steps,
                joined(pb->faultKinds()).c_str(), expects, extra.c_str());
  }
  return bad ? kExitError : kExitOk;
}

int cmdRun(const RunOptions& o) {
  auto pb = loadPlaybook(o.playbook);
  if (!pb) return fail(pb.error().message);
  auto inv = loadInventory(o.inventory);
  if (!inv) return fail(inv.error().message);
  auto plan = resolvePlan(*pb, *inv);
  if (!plan) return fail(plan.error().message);
  if (o.dryRun) {
    std::printf("%s", formatPlan(*pb, *plan).c_str());
    return kExitOk;
  }
  return fail("live playbook runs need the collective workload engine, which this build does not "
              "have yet; use --dry-run to see the plan, or `rdmachaos inject` for one fault");
}

int cmdReport(const ReportOptions& o) {
  auto doc = loadResultDocument(o.result);
  if (!doc) return fail(doc.error().message);
  if (!o.html.empty())
    if (auto w = writeFileAtomic(o.html, renderHtml(*doc)); !w) return fail(w.error().message);
  if (!o.junit.empty())
    if (auto w = writeFileAtomic(o.junit, renderJunit(*doc)); !w) return fail(w.error().message);
  std::printf("%s", renderText(*doc).c_str());
  if (!o.html.empty()) std::fprintf(stderr, "wrote %s\n", o.html.c_str());
  if (!o.junit.empty()) std::fprintf(stderr, "wrote %s\n", o.junit.c_str());
  const json& oc = (*doc)["outcome"];
  int code = oc.value("exit_code", kExitError);
  return code == kExitOk || code == kExitFailed ? code : kExitError;
}

}  // namespace rc::controller
