// The target sweep's table ([sweep] over = "target"): result.json's "targets" member, its
// "vs baseline" column when a run is compared with a baseline, and its text and HTML. See
// docs/result-schema.md ("targets") and docs/acceptance.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "controller/report/compare.hpp"

namespace rc::controller {

// A trial's verdict as the reports say it: "error" (a problem), "inconclusive" (its condition
// was not reached), "failed" or "passed".
const char* trialVerdict(const nlohmann::json& trial);

// One row per trial of a target sweep (the target(s) it faulted, its verdict, what it missed,
// its worst job figures); failures first, then the slowest to recover. Empty when the trials
// are not a target sweep.
nlohmann::json targetTable(const nlohmann::json& trials);

// How the trial labelled LABEL compares with the baseline, over every scope and metric: the
// worst verdict ("worse", "missing in result", "better", "same within noise"; "missing in
// baseline" when the baseline has none of the trial's values), the metric that decided it and
// its difference, and a text such as "recovery_time +48% worse".
nlohmann::json trialVsBaseline(const CompareOutcome& c, const std::string& label);

// Adds "vs_baseline" to each row of DOC's "targets" and orders the rows failures first (the
// trial failed, or it is worse than the baseline or missing values the baseline has), then by
// target name. A document without "targets" is left as it is.
void addTargetsVsBaseline(nlohmann::json& doc, const CompareOutcome& c);

// The terminal summary's section and the HTML report's table ("Targets, failures first").
// Empty when DOC has no "targets"; the "vs baseline" column only when its rows have one.
std::string targetsText(const nlohmann::json& doc);
std::string targetsHtml(const nlohmann::json& doc);

}  // namespace rc::controller
