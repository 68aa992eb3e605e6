// Detection scoring: alert episodes from the run's alert events, matched to the faults the
// playbook's [[detect]] tables watch; misses, late alerts, clears and false alarms.
#include "controller/score/detection.hpp"

#include <algorithm>
#include <set>

#include "common/units.hpp"
#include "controller/playbook/playbook_internal.hpp"

namespace rc::controller {
namespace {

using detail::fmtDur;

std::string labelKey(const std::map<std::string, std::string>& labels) {
  std::string k;
  for (const auto& [n, v] : labels) k += n + "=" + v + "\x1f";
  return k;
}

bool matches(const std::map<std::string, std::string>& labels,
             const std::vector<std::pair<std::string, std::string>>& match) {
  for (const auto& [k, v] : match) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

std::string sign(int64_t ns) { return (ns < 0 ? "-" : "") + fmtDur(ns < 0 ? -ns : ns); }

DetectionSummary summarise(const std::vector<const DetectionOutcome*>& outcomes, int falseAlarms) {
  DetectionSummary s;
  std::vector<int64_t> ttd;
  for (const auto* o : outcomes) {
    if (o->status == "not scored") {
      s.notScored++;
      continue;
    }
    s.expected++;
    if (o->status == "detected") s.detected++;
    if (o->status == "late") s.late++;
    if (o->status == "missed") s.missed++;
    if (o->timeToDetectNs) ttd.push_back(*o->timeToDetectNs);
  }
  s.falseAlarms = falseAlarms;
  // A late alert still found the fault: it is a true positive for precision and recall, and
  // a failed expectation for the verdict.
  const int found = s.detected + s.late;
  if (found + falseAlarms > 0) s.precision = double(found) / double(found + falseAlarms);
  if (s.expected > 0) s.recall = double(found) / double(s.expected);
  if (!ttd.empty()) {
    std::sort(ttd.begin(), ttd.end());
    s.medianTimeToDetectNs = ttd.size() % 2 ? ttd[ttd.size() / 2] : (ttd[ttd.size() / 2 - 1] + ttd[ttd.size() / 2]) / 2;
    s.worstTimeToDetectNs = ttd.back();
  }
  return s;
}

}  // namespace

std::string AlertEpisode::name() const {
  std::string out;
  auto it = labels.find("alertname");
  out = it == labels.end() ? "(no alertname)" : it->second;
  std::string rest;
  for (const auto& [k, v] : labels) {
    if (k == "alertname" || k == "instance" || k == "job" || k == "severity") continue;
    rest += (rest.empty() ? "" : ", ") + k + "=\"" + v + "\"";
  }
  return rest.empty() ? out : out + "{" + rest + "}";
}

std::string resolvePlaceholders(const std::string& value, const std::string& node, const std::string& step,
                                const std::string& kind, const std::string& scenario) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    auto take = [&](std::string_view ph, const std::string& with) {
      if (value.compare(i, ph.size(), ph) != 0) return false;
      out += with;
      i += ph.size();
      return true;
    };
    if (take("{target}", node) || take("{step}", step) || take("{kind}", kind) || take("{scenario}", scenario))
      continue;
    out += value[i++];
  }
  return out;
}

std::vector<AlertEpisode> alertEpisodes(const RunResult& run, int64_t toleranceNs) {
  // Firing reports first (in firing order), then the resolutions onto them.
  std::vector<const alerts::AlertEvent*> events;
  for (const auto& e : run.alerts) events.push_back(&e);
  auto firedOf = [&](const alerts::AlertEvent& e) {
    return (e.startsAtUnixNs ? e.startsAtUnixNs : e.receivedUnixNs) - run.startedUnixNs;
  };
  std::stable_sort(events.begin(), events.end(), [&](auto* a, auto* b) { return firedOf(*a) < firedOf(*b); });
  std::map<std::string, std::vector<size_t>> byLabels;
  std::vector<AlertEpisode> out;
  auto addSource = [](AlertEpisode& ep, const std::string& src) {
    if (src.empty() || ep.source == src || ep.source.find(src) != std::string::npos) return;
    ep.source += (ep.source.empty() ? "" : "+") + src;
  };
  for (const auto* e : events) {
    const int64_t fired = firedOf(*e);
    const int64_t received = e->receivedUnixNs - run.startedUnixNs;
    auto& list = byLabels[labelKey(e->labels)];
    // The same episode: one that fired within the tolerance (a poll's activeAt + for and
    // Alertmanager's startsAt of one alert differ by up to an evaluation; re-sends carry the
    // same startsAt). A later startsAt is a new firing: Prometheus keeps startsAt until the
    // alert resolves.
    AlertEpisode* ep = nullptr;
    for (auto it = list.rbegin(); it != list.rend() && !ep; ++it)
      if (std::llabs(out[*it].firedNs - fired) <= toleranceNs) ep = &out[*it];
    if (!ep) {
      list.push_back(out.size());
      out.push_back(AlertEpisode{e->labels, "", fired, std::nullopt, received});
      ep = &out.back();
    }
    ep->firedNs = std::min(ep->firedNs, fired);
    ep->notifiedNs = std::min(ep->notifiedNs, received);
    addSource(*ep, e->source);
    if (!e->firing) {
      int64_t ended = (e->endsAtUnixNs ? e->endsAtUnixNs : e->receivedUnixNs) - run.startedUnixNs;
      ep->resolvedNs = ep->resolvedNs ? std::min(*ep->resolvedNs, ended) : ended;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.firedNs < b.firedNs; });
  return out;
}

int64_t detectionDeadlineNs(const Playbook& pb, const RunResult& run) {
  int64_t deadline = 0;
  for (const auto& f : run.faults) {
    if (f.trial < 0 || size_t(f.trial) >= run.plan.trials.size()) continue;
    const auto& trial = run.plan.trials[size_t(f.trial)];
    auto sc = std::find_if(pb.scenarios.begin(), pb.scenarios.end(), [&](const Scenario& s) { return s.name == trial.scenario; });
    if (sc == pb.scenarios.end()) continue;
    for (const auto& d : sc->detections) {
      if (!d.steps.empty() && std::find(d.steps.begin(), d.steps.end(), f.step) == d.steps.end()) continue;
      const int64_t applied = f.appliedNs.value_or(f.scheduledNs);
      deadline = std::max(deadline, applied + d.withinNs + pb.detection.clockSkewNs);
      if (d.clearsWithinNs)
        deadline = std::max(deadline, f.revertedNs.value_or(applied) + *d.clearsWithinNs + pb.detection.clockSkewNs);
    }
  }
  return deadline;
}

std::string DetectionOutcome::describe() const {
  std::string what = alert.empty() ? expectation : alert;
  std::string out = what + ": " + status;
  if (timeToDetectNs) out += " in " + sign(*timeToDetectNs) + (uncertaintyNs ? " ±" + fmtDur(uncertaintyNs) : "");
  if (status == "late") out += " (within " + fmtDur(withinNs) + ")";
  if (clearsWithinNs && (status == "detected" || status == "late")) {
    if (timeToClearNs)
      out += cleared ? ", cleared in " + sign(*timeToClearNs)
                     : ", cleared in " + sign(*timeToClearNs) + " (within " + fmtDur(*clearsWithinNs) + ")";
    else
      out += ", not cleared within " + fmtDur(*clearsWithinNs);
  }
  if (!note.empty()) out += "; " + note;
  return out;
}

namespace {

// The expected alerts of detect D in TRIAL: one per (step, resolved labels), with the nodes,
// the first apply and the last revert of the faults it covers.
std::vector<DetectionOutcome> expectedAlerts(const RunResult& run, const Trial& trial, const Scenario& sc,
                                             const DetectExpectation& d, int64_t uncertainty) {
  std::vector<DetectionOutcome> mine;
  for (const auto& f : run.faults) {
    if (f.trial != trial.index) continue;
    if (!d.steps.empty() && std::find(d.steps.begin(), d.steps.end(), f.step) == d.steps.end()) continue;
    std::vector<std::pair<std::string, std::string>> match;
    for (const auto& [k, v] : d.match) match.emplace_back(k, resolvePlaceholders(v, f.node, f.step, f.kind, sc.name));
    auto same = std::find_if(mine.begin(), mine.end(),
                             [&](const DetectionOutcome& o) { return o.step == f.step && o.match == match; });
    if (same == mine.end()) {
      DetectionOutcome o;
      o.trial = trial.index;
      o.repeat = trial.repeat;
      o.scenario = sc.name;
      o.step = f.step;
      o.kind = f.kind;
      o.expectation = d.describe();
      o.match = match;
      o.withinNs = d.withinNs;
      o.clearsWithinNs = d.clearsWithinNs;
      o.uncertaintyNs = uncertainty;
      o.pos = d.pos;
      mine.push_back(std::move(o));
      same = mine.end() - 1;
    }
    if (std::find(same->nodes.begin(), same->nodes.end(), f.node) == same->nodes.end()) same->nodes.push_back(f.node);
    if (f.appliedNs) same->appliedNs = same->appliedNs ? std::min(*same->appliedNs, *f.appliedNs) : *f.appliedNs;
    if (f.revertedNs) same->revertedNs = same->revertedNs ? std::max(*same->revertedNs, *f.revertedNs) : *f.revertedNs;
  }
  return mine;
}

// One expected alert judged against the episodes: detected, late, missed or not scored, and
// whether it cleared in time. UNTIL: the end of what the run listened to.
void judgeAlert(DetectionOutcome& o, const std::vector<AlertEpisode>& episodes, const DetectionSettings& ds,
                const Trial& trial, int64_t until) {
  if (!o.appliedNs) {
    o.status = "not scored";
    o.note = "the fault was never applied";
    return;
  }
  const int64_t applied = *o.appliedNs;
  const AlertEpisode* found = nullptr;
  for (const auto& ep : episodes) {
    if (!matches(ep.labels, o.match)) continue;
    if (ep.firedNs < applied - ds.clockSkewNs) {
      // Firing before the fault: not its detection; say so when it still fired at it.
      if (!ep.resolvedNs || *ep.resolvedNs > applied) o.note = "already firing when the fault was applied (" + ep.name() + ")";
      continue;
    }
    if (ep.firedNs > trial.endNs + o.withinNs) break;
    found = &ep;
    break;
  }
  if (!found) {
    if (until < applied + o.withinNs + ds.clockSkewNs) {
      o.status = "not scored";
      o.note = "alerts were collected only until " + sign(until - applied) + " after the fault";
    } else {
      o.status = "missed";
    }
    return;
  }
  o.alert = found->name();
  o.firedNs = found->firedNs;
  o.timeToDetectNs = found->firedNs - applied;
  o.status = *o.timeToDetectNs <= o.withinNs + ds.clockSkewNs ? "detected" : "late";
  o.resolvedNs = found->resolvedNs;
  if (found->resolvedNs && o.revertedNs) o.timeToClearNs = *found->resolvedNs - *o.revertedNs;
  o.cleared = !o.clearsWithinNs || (o.timeToClearNs && *o.timeToClearNs <= *o.clearsWithinNs + ds.clockSkewNs);
  if (o.clearsWithinNs && !o.timeToClearNs && o.revertedNs && until < *o.revertedNs + *o.clearsWithinNs) {
    o.cleared = true;  // cannot be judged: not held against it
    o.note = "alerts were collected only until " + sign(until - *o.revertedNs) + " after the revert";
  }
  if (o.clearsWithinNs && !o.revertedNs) o.note = "the fault's revert was not reported: clearing not judged";
  o.passed = o.status == "detected" && o.cleared;
}

// False alarms: watched alerts that no expected detection claimed, fired outside every fault
// window widened by the margin, while the run listened; counted per repeat round.
std::map<int, int> findFalseAlarms(const RunResult& run, int64_t until, DetectionScore& out) {
  std::set<const AlertEpisode*> claimed;
  for (const auto& o : out.outcomes)
    if (o.firedNs)
      for (const auto& ep : out.episodes)
        if (ep.firedNs == *o.firedNs && matches(ep.labels, o.match)) claimed.insert(&ep);
  std::map<int, int> falseByRound;
  for (const auto& ep : out.episodes) {
    if (claimed.count(&ep) || ep.firedNs < 0 || ep.firedNs > until) continue;
    auto nm = ep.labels.find("alertname");
    if (nm == ep.labels.end() || std::find(out.watched.begin(), out.watched.end(), nm->second) == out.watched.end())
      continue;
    bool explained = false;
    for (const auto& f : run.faults) {
      if (!f.appliedNs) continue;
      int64_t from = *f.appliedNs - out.falseAlarmMarginNs;
      int64_t to = f.revertedNs.value_or(run.endedNs) + out.falseAlarmMarginNs;
      explained |= ep.firedNs >= from && ep.firedNs <= to;
    }
    if (explained) continue;
    out.falseAlarms.push_back(ep);
    int round = 0;
    for (const auto& t : run.plan.trials)
      if (ep.firedNs >= t.startNs) round = t.repeat;
    falseByRound[round]++;
  }
  return falseByRound;
}

}  // namespace

DetectionScore scoreDetection(const RunResult& run, const Playbook& pb) {
  DetectionScore out;
  out.expected = pb.hasDetections();
  out.sources = run.alertSources;
  out.errors = run.alertErrors;
  out.timing = run.alertTiming;
  const auto& ds = pb.detection;
  if (!out.timing.scrapeIntervalNs && !out.timing.evaluationIntervalNs &&
      (ds.scrapeIntervalNs || ds.evaluationIntervalNs)) {
    out.timing.scrapeIntervalNs = ds.scrapeIntervalNs;
    out.timing.evaluationIntervalNs = ds.evaluationIntervalNs;
    out.timing.source = "playbook [detection]";
  }
  if (run.alertSources.empty()) {
    out.notScoredReason = out.expected ? "no alert source: run with --alertmanager-webhook ADDR:PORT or --prometheus URL "
                                         "to score the playbook's [[detect]] expectations"
                                       : "";
    return out;
  }
  out.scored = true;
  const int64_t uncertainty = out.timing.scrapeIntervalNs + out.timing.evaluationIntervalNs + ds.clockSkewNs;
  const int64_t tolerance = std::max<int64_t>(out.timing.evaluationIntervalNs, 1'000'000'000);
  out.episodes = alertEpisodes(run, tolerance);
  const int64_t until = run.alertsUntilNs ? run.alertsUntilNs : run.endedNs;

  // The expected alerts, one per (trial, detect, resolved labels).
  int64_t largestBound = 0;
  std::set<std::string> named;
  for (const auto& sc : pb.scenarios)
    for (const auto& d : sc.detections) {
      largestBound = std::max({largestBound, d.withinNs, d.clearsWithinNs.value_or(0)});
      for (const auto& [k, v] : d.match)
        if (k == "alertname") named.insert(v);
    }
  out.falseAlarmMarginNs = ds.falseAlarmMarginNs.value_or(largestBound);
  out.watched = ds.watch.empty() ? std::vector<std::string>(named.begin(), named.end()) : ds.watch;

  for (const auto& trial : run.plan.trials) {
    auto sc = std::find_if(pb.scenarios.begin(), pb.scenarios.end(), [&](const Scenario& s) { return s.name == trial.scenario; });
    if (sc == pb.scenarios.end()) continue;
    for (const auto& d : sc->detections)
      for (auto& o : expectedAlerts(run, trial, *sc, d, uncertainty)) {
        judgeAlert(o, out.episodes, ds, trial, until);
        out.outcomes.push_back(std::move(o));
      }
  }
  std::map<int, int> falseByRound;
  if (ds.falseAlarms) falseByRound = findFalseAlarms(run, until, out);

  std::vector<const DetectionOutcome*> all;
  for (const auto& o : out.outcomes) {
    all.push_back(&o);
    if (o.status == "not scored") continue;
    (o.passed ? out.passed : out.failed)++;
  }
  out.total = summarise(all, int(out.falseAlarms.size()));
  if (pb.repeat > 1)
    for (int r = 0; r < pb.repeat; r++) {
      std::vector<const DetectionOutcome*> mine;
      for (const auto& o : out.outcomes)
        if (o.repeat == r) mine.push_back(&o);
      out.rounds[r] = summarise(mine, falseByRound[r]);
    }
  return out;
}

}  // namespace rc::controller
