// What a search leaves: its settings for the engine, the terminal's progress, result.json
// (every point with its measurements, mean, uncertainty and verdict, and the outcome), the text
// summary, and the reproducer playbook pinned at the finding (docs/search.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/search/search.hpp"

namespace rc::controller {

// The engine's settings for PB's [search].
search::BoundarySettings boundarySettings(const Playbook& pb);
search::WorstSettings worstSettings(const Playbook& pb);
// The [[expect]] a boundary search judges.
const Expectation& searchExpectation(const Playbook& pb);
// The metric a point is measured by, and on which scope ("job" or a node).
std::string searchMetric(const Playbook& pb);
std::string searchScope(const Playbook& pb);

// "steps.flap.down = 1400ms" (several: joined by ", ").
std::string describePoint(const Playbook& pb, const std::vector<double>& point);
// A metric value as the metric's unit prints it ("2.41s", "41.2%").
std::string describeMetricValue(const std::string& metric, double value);

// One line of progress after TRIALS: trials done of the budget and, for a boundary, the
// interval the decided points give so far; for a worst case, the best point so far.
std::string searchProgress(const Playbook& pb, const std::vector<search::Trial>& trials);

// A search's end: one of the two results.
struct SearchOutcome {
  std::optional<search::BoundaryResult> boundary;
  std::optional<search::WorstResult> worst;
};

// Where the reproducer is pinned: a boundary's first failing point (or, when every point fails,
// the range's pass end: the least fault tried, failing), a worst case's best point. An error
// says why there is no finding to reproduce.
Result<std::vector<double>> reproducerPoint(const Playbook& pb, const SearchOutcome& outcome);
// The reproducer: a plain playbook (no [search]) pinned at reproducerPoint, with a boundary's
// one expectation (a worst case keeps them all), and a header saying what was found.
Result<PinnedPlaybook> makeReproducer(const Playbook& pb, const SearchOutcome& outcome);

// result.json of a search: the playbook, the settings, every point and the outcome. RECORD is
// the engine's record (toJson), REPRODUCER the file written or why there is none.
nlohmann::json makeSearchDocument(const Playbook& pb, const nlohmann::json& record,
                                  const SearchOutcome& outcome, const std::string& reproducer,
                                  const std::string& noReproducer);
// The summary printed at the end, from that document.
std::string renderSearchText(const nlohmann::json& doc);

}  // namespace rc::controller
