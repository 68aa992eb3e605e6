// The detection part of the reports: result.json's "detection" member and what is rendered from
// it (the terminal summary's section, a JUnit suite, the HTML report's table and the timeline's
// alert markers). See docs/result-schema.md ("detection").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/score/detection.hpp"

namespace rc::controller {

nlohmann::json detectionJson(const DetectionScore& d);

// Empty when the document has no detection expectations and no alerts.
std::string detectionText(const nlohmann::json& doc);
// The JUnit suite of the detection expectations (a test case per expectation and fault, one
// for false alarms); TESTS/FAILURES/SKIPPED are added to. Empty without detection.
std::string detectionJunit(const nlohmann::json& doc, const std::string& suiteName, int& tests, int& failures,
                           int& skipped);
// The HTML report's section: a summary, a table per expectation and fault, the false alarms.
std::string detectionHtml(const nlohmann::json& doc);

// An alert on a trial's chart: a vertical line where it fired (and a shaded span until it
// resolved), relative to the trial's start.
struct AlertMarker {
  int64_t firedNs = 0;  // from the chart's origin
  int64_t resolvedNs = -1;  // -1: still firing at the chart's end
  std::string name;
  std::string kind;  // "detected", "late", "false_alarm", "other"
};
std::vector<AlertMarker> alertMarkers(const nlohmann::json& doc, int64_t fromNs, int64_t toNs);

}  // namespace rc::controller
