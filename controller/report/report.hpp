// Reports: the self-contained result document (JSON) and what is rendered from it (JUnit
// XML, HTML with inline SVG, a terminal summary). See docs/result-schema.md.
//
// Everything is rendered from the document rather than from the in-memory structures, so
// `rdmachaos report RESULT.json` re-renders exactly what the run rendered.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/atomic_file.hpp"
#include "common/result.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/run/run_result.hpp"
#include "controller/score/score.hpp"

namespace rc::controller {

inline constexpr const char* kResultSchema = "rdmachaos-result/1";

json makeResultDocument(const RunResult& run, const Playbook& playbook, const Scores& scores);

// Checks the schema tag and the members the renderers need, with their types.
Result<void> checkResultDocument(const json& doc);
Result<json> loadResultDocument(const std::string& path);

std::string renderJunit(const json& doc);
// Text for XML and HTML: & < > " ' escaped, control characters as '?'.
std::string xmlEscape(std::string_view s);
std::string renderHtml(const json& doc);
std::string renderText(const json& doc);
// compare's page: the comparison's text (SUMMARY) and, per trial of the result, its series with
// the baseline's trial of the same label overlaid from the trial's start (a golden baseline has
// no series: the result's alone, and a note). VERDICT: "passed" or "failed".
std::string renderOverlayHtml(const json& baseDoc, const json& resultDoc, const std::string& baseName,
                              const std::string& resultName, const std::string& verdict, const std::string& summary);

// Writes through a temporary file and a rename, so a reader never sees half a report.
// Reports are written like every durable file (common/atomic_file.hpp).
using rc::writeFileAtomic;

}  // namespace rc::controller
