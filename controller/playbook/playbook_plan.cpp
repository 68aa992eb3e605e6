// The planner: a parsed playbook bound to an inventory, as a seeded schedule of trials and faults.
#include "controller/playbook/playbook.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "common/protocol.hpp"
#include "common/units.hpp"
#include "controller/playbook/playbook_internal.hpp"
#include "faults/fault.hpp"

namespace rc::controller {

std::string detail::runTooLong(int64_t runNs, size_t trials) {
  if (runNs + kRunWorkloadTailNs <= kAgentLifetimeNs) return {};
  std::string msg = "the playbook runs for ";
  msg += fmtDur(runNs);
  msg += " (";
  msg += std::to_string(trials);
  msg += " trial(s)), and its workload for the whole run and ";
  msg += fmtDur(kRunWorkloadTailNs);
  msg += " more: longer than an agent runs a workload (its [agent] max_fault_lifetime, ";
  msg += fmtDur(kAgentLifetimeNs);
  msg += " by default); lower repeat, shorten the phases, or split the playbook into runs under ";
  msg += fmtDur(kAgentLifetimeNs);
  return msg;
}

namespace {

using namespace detail;

// SplitMix64: tiny, and the same draws on every platform and standard library, so a seed
// always yields the same game-day schedule.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) {  // uniform in [0, n), without modulo bias
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
};

Rng rngFor(uint64_t seed, size_t trial, size_t step) {
  Rng r{seed ^ (uint64_t(trial + 1) * 0xD1B54A32D192ED03ull) ^ (uint64_t(step + 1) * 0x8CB92BA72F3D8DD7ull)};
  r.next();
  return r;
}

std::vector<std::string> selectNodes(const SourceFile& p, const Selector& s, const Inventory& inv,
                                     Rng* rng) {
  std::set<std::string> chosen;
  for (const auto& n : s.names) {
    auto r = inv.select(n);
    if (!r) p.fail(s.pos, r.error().message);
    for (const auto* node : *r) chosen.insert(node->name);
  }
  std::vector<std::string> pool;  // inventory order, so plans read like the inventory
  for (const auto& n : inv.nodes)
    if (chosen.count(n.name)) pool.push_back(n.name);
  if (s.random == 0) return pool;
  if (size_t(s.random) > pool.size())
    p.fail(s.pos, "random = " + std::to_string(s.random) + " but '" + joinNames(s.names) + "' matches only " +
                      std::to_string(pool.size()) + " node(s): " + joinNames(pool));
  return faults::pickInOrder(pool, size_t(s.random), [rng](uint64_t n) { return rng->below(n); });
}

}  // namespace

std::string Trial::label() const {
  std::string s = scenario;
  if (!sweepParam.empty()) s += " " + sweepParam + "=" + showValue(sweepValue);
  s += " #" + std::to_string(repeat + 1);
  return s;
}

Result<std::vector<BoundFault>> bindTargets(const std::string& kind, const json& params,
                                            const std::vector<std::string>& targets, const Inventory& inv,
                                            const std::function<uint64_t(uint64_t)>& below) {
  std::vector<BoundFault> out;
  const faults::FaultKind* k = faults::findKind(kind);
  if (!k || !k->bind) {
    for (const auto& t : targets) out.push_back({t, params});
    return out;
  }
  std::vector<faults::BindNode> nodes;
  for (const auto& n : inv.nodes) nodes.push_back({n.name, n.dataAddresses});
  auto bound = k->bind(params, targets, nodes, below);
  if (!bound) return bound.error();
  for (auto& b : *bound) out.push_back({b.node, std::move(b.params), b.role});
  return out;
}

// What a planned fault changes on its node (its kind's planTarget); empty for kinds that change
// no configuration.
static std::string targetKey(const PlannedFault& f) {
  const faults::FaultKind* k = faults::findKind(f.kind);
  return k && k->planTarget ? k->planTarget(f.params) : std::string();
}

// What a planned fault changes outside its node (its kind's fabricTargets), named alike on
// every node.
static std::vector<std::string> fabricKeys(const PlannedFault& f) {
  const faults::FaultKind* k = faults::findKind(f.kind);
  return k && k->fabricTargets ? k->fabricTargets(f.params) : std::vector<std::string>();
}

namespace {

// The workload's nodes: at least 2 (an external kind, perftest: exactly 2); every expectation's scope is the
// job or one of them.
void checkWorkloadNodes(const SourceFile& p, const Playbook& pb, const Plan& plan) {
  if (plan.workloadNodes.size() < 2)
    p.fail(pb.workload.nodes.pos, std::string(pb.workload.kind->name) + " needs at least 2 nodes; workload nodes '" +
                                      pb.workload.nodes.describe() + "' match " + std::to_string(plan.workloadNodes.size()));
  if (const workload::External* ext = pb.workload.kind->external;
      ext && ext->ranks > 0 && plan.workloadNodes.size() != size_t(ext->ranks))
    p.fail(pb.workload.nodes.pos, std::string(pb.workload.kind->name) + " runs between exactly 2 nodes (" +
                                      std::string(ext->ranksShort) + "); workload nodes '" + pb.workload.nodes.describe() + "' match " +
                                      std::to_string(plan.workloadNodes.size()) + ": name two, e.g. nodes = [\"n1\", \"n2\"]");
  for (const auto& sc : pb.scenarios)
    for (const auto* list : {&sc.expectations, &sc.requirements})
      for (const auto& e : *list)
        if (e.scope != "job" &&
            std::find(plan.workloadNodes.begin(), plan.workloadNodes.end(), e.scope) == plan.workloadNodes.end())
          p.fail(e.pos, "expectation scope '" + e.scope + "' is neither \"job\" nor a workload node (" +
                            joinNames(plan.workloadNodes) + ")");
}

// A target sweep: the swept step's targets, in a seeded order, per_trial at a time; each value
// is "n3" (or "n3,n1"), GROUPS maps it to its nodes.
std::vector<json> sweepTargets(const SourceFile& p, const Playbook& pb, const Scenario& sc, const Inventory& inv,
                               std::map<std::string, std::vector<std::string>>& groups) {
  std::vector<json> values;
  const Step* swept = nullptr;
  for (const auto& s : sc.steps)
    if (s.name == sc.sweep->step) swept = &s;
  std::vector<std::string> pool = selectNodes(p, swept->target, inv, nullptr);
  if (pool.empty())
    p.fail(swept->target.pos, "step '" + swept->name + "' is swept over its targets, but '" + swept->target.describe() +
                                  "' matches no node");
  Rng order = rngFor(pb.seed, SIZE_MAX, 0);
  for (size_t i = pool.size(); i > 1; i--) std::swap(pool[i - 1], pool[order.below(i)]);
  for (size_t i = 0; i < pool.size(); i += size_t(sc.sweep->perTrial)) {
    std::vector<std::string> g(pool.begin() + long(i),
                               pool.begin() + long(std::min(pool.size(), i + size_t(sc.sweep->perTrial))));
    std::string name = joinNames(g, ",");
    groups[name] = g;
    values.push_back(name);
  }
  if (values.size() * size_t(pb.repeat) > kMaxTrials)
    p.fail(sc.sweep->pos, "the target sweep expands to " + std::to_string(values.size() * size_t(pb.repeat)) +
                              " trials (more than 1000): raise per_trial or narrow the step's target");
  if (int64_t(values.size()) * pb.repeat * sc.durationNs() > kMaxRunNs)
    p.fail(sc.sweep->pos, "the target sweep runs for more than 7 days: raise per_trial or narrow the target");
  return values;
}

// The faults of step K in trial T: its seeded instant in its phase, its (swept) parameters,
// its targets bound to nodes.
void planStep(const SourceFile& p, const Playbook& pb, const Scenario& sc, const Inventory& inv, size_t k,
              const json& value, const std::map<std::string, std::vector<std::string>>& groups, Trial& t) {
  const Step& s = sc.steps[k];
  Rng rng = rngFor(pb.seed, size_t(t.index), k);
  int64_t phaseStart = t.startNs;
  for (const auto& ph : t.phases)
    if (ph.name == s.phase) phaseStart = ph.startNs;
  int64_t at = s.atNs;
  if (s.atMaxNs > s.atNs) at += int64_t(rng.below(uint64_t(s.atMaxNs - s.atNs) + 1));
  json params = s.params;
  bool sweptTargets = sc.sweep && sc.sweep->overTargets && sc.sweep->step == s.name;
  if (sc.sweep && !sc.sweep->overTargets && sc.sweep->step == s.name) {
    json raw = s.rawParams;
    raw[sc.sweep->param] = value;
    auto n = faults::normaliseParams(s.kind, faults::findKind(s.kind)->params, raw);
    if (!n) p.fail(sc.sweep->pos, n.error().message);  // checked at parse time
    params = *n;
  }
  auto bound = bindTargets(s.kind, params,
                           sweptTargets ? groups.at(value.get<std::string>()) : selectNodes(p, s.target, inv, &rng), inv,
                           [&rng](uint64_t n) { return rng.below(n); });
  if (!bound) p.fail(s.pos, "step '" + s.name + "': " + bound.error().message);
  for (auto& b : *bound) t.faults.push_back({s.name, s.kind, b.node, phaseStart + at, s.forNs, std::move(b.params), b.role});
}

// An agent runs one fault per target at a time and refuses the second: find that here, so a
// valid plan never aborts halfway. A switch port or link is one target for every node, and
// there no agent can see the other's fault: two nodes that shift or flap it at once would each
// snapshot what the other set and restore it. T's faults are sorted by start.
void checkOverlaps(const SourceFile& p, const Scenario& sc, const Trial& t) {
  auto stepPos = [&](const std::string& name) {
    for (const auto& st : sc.steps)
      if (st.name == name) return st.pos;
    return sc.pos;
  };
  for (size_t i = 0; i < t.faults.size(); i++) {
    const PlannedFault& a = t.faults[i];
    std::string key = targetKey(a);
    std::vector<std::string> fabric = fabricKeys(a);
    if (key.empty() && fabric.empty()) continue;
    for (size_t j = i + 1; j < t.faults.size(); j++) {
      const PlannedFault& b = t.faults[j];
      if (b.atNs >= a.atNs + a.forNs) break;  // sorted by start: no later one overlaps
      std::string held;
      if (b.node == a.node) {
        if (!key.empty() && targetKey(b) == key) held = key + " on " + a.node;
      } else {
        for (const auto& k : fabricKeys(b))
          if (std::find(fabric.begin(), fabric.end(), k) != fabric.end()) held = k;
      }
      if (held.empty()) continue;
      if (b.node == a.node)
        p.fail(stepPos(b.step),
               "trial " + t.label() + ": step '" + b.step + "' (at " + fmtDur(b.atNs - t.startNs) + ") and step '" +
                   a.step + "' (at " + fmtDur(a.atNs - t.startNs) + " for " + fmtDur(a.forNs) + ") both hold " + held +
                   "; an agent runs one fault per target at a time (docs/safety.md): "
                   "move one so that their windows do not overlap");
      else
        p.fail(stepPos(b.step),
               "trial " + t.label() + ": step '" + b.step + "' on " + b.node + " (at " + fmtDur(b.atNs - t.startNs) +
                   ") and step '" + a.step + "' on " + a.node + " (at " + fmtDur(a.atNs - t.startNs) + " for " +
                   fmtDur(a.forNs) + ") both hold " + held +
                   ", one target for every node: each would snapshot what the other set and restore it "
                   "(docs/safety.md). Give the port to one node (target = one node), or move one step so "
                   "that their windows do not overlap");
    }
  }
}

// One trial of scenario SC (sweep VALUE, repeat R) from CURSOR on the run's timeline.
Trial planTrial(const SourceFile& p, const Playbook& pb, const Scenario& sc, const Inventory& inv, const json& value,
                int r, int64_t cursor, int index, const std::map<std::string, std::vector<std::string>>& groups) {
  Trial t;
  t.index = index;
  t.scenario = sc.name;
  t.repeat = r;
  if (sc.sweep) {
    t.sweepParam = sc.sweep->param;
    t.sweepValue = value;
  }
  t.startNs = cursor;
  int64_t c = cursor;
  for (const auto& ph : sc.phases) {
    t.phases.push_back({ph.name, c, c + ph.durationNs});
    c += ph.durationNs;
  }
  t.endNs = c;
  t.baselineFromNs = cursor + pb.scoring.warmupNs;
  t.baselineToNs = t.phases.front().endNs;
  for (size_t k = 0; k < sc.steps.size(); k++) planStep(p, pb, sc, inv, k, value, groups, t);
  std::stable_sort(t.faults.begin(), t.faults.end(),
                   [](const PlannedFault& a, const PlannedFault& b) { return a.atNs < b.atNs; });
  checkOverlaps(p, sc, t);
  return t;
}

// What the agents accept: a run schedules every fault at its start, and an agent holds at most
// kMaxActiveFaults scheduled or running, none more than kMaxScheduleAheadNs ahead. Found here,
// so that validate and --dry-run say it, and a run never aborts at its start.
void checkAgentLimits(const SourceFile& p, const Playbook& pb, const Plan& plan) {
  std::map<std::string, std::map<std::string, size_t>> perNode;  // node -> step -> faults
  for (const auto& t : plan.trials)
    for (const auto& f : t.faults) {
      perNode[f.node][f.step]++;
      if (f.atNs > proto::kMaxScheduleAheadNs)
        p.fail(pb.scenarios.front().pos,
               "trial " + t.label() + ": step '" + f.step + "' starts " + fmtDur(f.atNs) +
                   " into the run; an agent accepts faults at most 24h ahead and a run schedules "
                   "every fault at its start: split the playbook into runs shorter than a day");
    }
  for (const auto& [node, steps] : perNode) {
    size_t n = 0;
    std::string which;
    for (const auto& [step, k] : steps) {
      n += k;
      which += (which.empty() ? "" : ", ") + step + " x" + std::to_string(k);
    }
    if (n > proto::kMaxActiveFaults)
      p.fail(pb.scenarios.front().pos,
             "the plan gives node " + node + " " + std::to_string(n) + " faults (" + which + "); an agent holds at most " +
                 std::to_string(proto::kMaxActiveFaults) +
                 " scheduled or running faults and a run schedules every fault at its start: "
                 "lower repeat, narrow the targets, or split the playbook");
  }
}

}  // namespace

Result<Plan> resolvePlan(const Playbook& pb, const Inventory& inv) {
  SourceFile p{pb.path};
  try {
    Plan plan;
    plan.playbook = pb.name;
    plan.seed = pb.seed;
    plan.workloadNodes = selectNodes(p, pb.workload.nodes, inv, nullptr);
    checkWorkloadNodes(p, pb, plan);
    int64_t cursor = 0;
    size_t faults = 0;
    for (const auto& sc : pb.scenarios) {
      std::map<std::string, std::vector<std::string>> groups;
      std::vector<json> values = sc.sweep ? sc.sweep->values : std::vector<json>{json()};
      if (sc.sweep && sc.sweep->overTargets) values = sweepTargets(p, pb, sc, inv, groups);
      for (const auto& value : values)
        for (int r = 0; r < pb.repeat; r++) {
          Trial t = planTrial(p, pb, sc, inv, value, r, cursor, int(plan.trials.size()), groups);
          faults += t.faults.size();
          if (faults > kMaxPlannedFaults) p.fail(sc.pos, "the plan has more than 100000 fault injections; narrow the targets");
          cursor = t.endNs;
          plan.trials.push_back(std::move(t));
        }
    }
    checkAgentLimits(p, pb, plan);
    // A target sweep's trials are known only now: the parser checked the rest.
    if (auto why = runTooLong(cursor, plan.trials.size()); !why.empty()) p.fail(pb.scenarios.front().pos, why);
    plan.durationNs = cursor;
    return plan;
  } catch (const Fail& f) {
    return makeError(f.message);
  }
}

std::string formatPlan(const Playbook& pb, const Plan& plan) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "playbook %s (seed %llu): %zu trial(s), %s in total\n",
                pb.name.c_str(), static_cast<unsigned long long>(plan.seed), plan.trials.size(),
                fmtDur(plan.durationNs).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "workload %s%s%s, %s x %d stream(s) on %s\n", std::string(pb.workload.kind->name).c_str(),
                pb.workload.test.empty() ? "" : " ", pb.workload.test.c_str(),
                formatSize(pb.workload.sizeBytes).c_str(), pb.workload.streams,
                joinNames(plan.workloadNodes).c_str());
  out += buf;
  for (const auto& t : plan.trials) {
    std::snprintf(buf, sizeof buf, "\ntrial %d  %s  %s .. %s\n", t.index + 1, t.label().c_str(),
                  fmtOffset(t.startNs).c_str(), fmtOffset(t.endNs).c_str());
    out += buf;
    for (size_t i = 0; i < t.phases.size(); i++) {
      const auto& ph = t.phases[i];
      std::snprintf(buf, sizeof buf, "  %-11s phase %-12s until %s%s\n", fmtOffset(ph.startNs).c_str(),
                    ph.name.c_str(), fmtOffset(ph.endNs).c_str(),
                    i == 0 ? ("  (baseline scored from " + fmtOffset(t.baselineFromNs) + ")").c_str() : "");
      out += buf;
    }
    for (const auto& f : t.faults) {
      std::string params = formatParams(f.kind, f.params);
      std::string step = f.role.empty() ? f.step : f.step + " " + f.role;
      std::snprintf(buf, sizeof buf, "  %-11s inject %-10s on %-8s for at most %-6s [%s] %s\n",
                    fmtOffset(f.atNs).c_str(), f.kind.c_str(), f.node.c_str(), fmtDur(f.forNs).c_str(),
                    step.c_str(), params.c_str());
      out += buf;
    }
  }
  bool any = false;
  for (const auto& sc : pb.scenarios)
    for (const auto& e : sc.expectations) {
      if (!any) out += "\nexpectations (checked in every trial of their scenario):\n";
      any = true;
      out += "  " + sc.name + ": " + e.describe() + "\n";
    }
  any = false;
  for (const auto& sc : pb.scenarios)
    for (const auto& e : sc.requirements) {
      if (!any) out += "\nconditions (a trial that does not meet them is not scored):\n";
      any = true;
      out += "  " + sc.name + ": " + e.describe() + "\n";
    }
  return out;
}

std::string formatParams(const std::string& kind, const json& params) {
  const faults::FaultKind* k = faults::findKind(kind);
  std::string out;
  for (auto it = params.begin(); params.is_object() && it != params.end(); ++it) {
    std::string v = showValue(*it);
    if (k && it->is_number_integer())
      for (const auto& spec : k->params)
        if (spec.name == it.key()) {
          if (spec.type == faults::ParamType::duration) v = fmtDur(it->get<int64_t>());
          if (spec.type == faults::ParamType::size) v = formatSize(it->get<uint64_t>());
        }
    out += (out.empty() ? "" : ", ") + it.key() + "=" + v;
  }
  return out;
}

json toJson(const Plan& plan) {
  json trials = json::array();
  for (const auto& t : plan.trials) {
    json phases = json::array(), faults = json::array();
    for (const auto& ph : t.phases)
      phases.push_back({{"name", ph.name}, {"start_ns", ph.startNs}, {"end_ns", ph.endNs}});
    for (const auto& f : t.faults) {
      json jf = {{"step", f.step}, {"kind", f.kind}, {"node", f.node}, {"at_ns", f.atNs},
                 {"for_ns", f.forNs}, {"params", f.params}};
      if (!f.role.empty()) jf["role"] = f.role;
      faults.push_back(std::move(jf));
    }
    json jt = {{"index", t.index},          {"label", t.label()},
               {"scenario", t.scenario},    {"repeat", t.repeat},
               {"start_ns", t.startNs},     {"end_ns", t.endNs},
               {"baseline_from_ns", t.baselineFromNs}, {"baseline_to_ns", t.baselineToNs},
               {"phases", phases},          {"faults", faults}};
    if (!t.sweepParam.empty()) jt["sweep"] = {{"param", t.sweepParam}, {"value", t.sweepValue}};
    trials.push_back(std::move(jt));
  }
  return {{"playbook", plan.playbook}, {"seed", plan.seed}, {"workload_nodes", plan.workloadNodes},
          {"duration_ns", plan.durationNs}, {"trials", trials}};
}

}  // namespace rc::controller
