// Where `run` puts its reports (result.json, report.html, junit.xml) and how they get there:
// the directory is checked before anything runs, the files are written into a directory beside
// it and that one is renamed into place, so a reader sees all three reports of one run or none,
// and no run writes over another's.
#pragma once

#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace rc::controller {

// The files a run writes (compare.json and compare-junit.xml with --baseline; capture-*.pcapng
// with packet faults); the only ones --force replaces.
inline constexpr const char* kReportFiles[] = {"result.json", "report.html", "junit.xml", "compare.json",
                                               "compare-junit.xml"};

struct ReportDir {
  std::string path;    // where the reports end up, as the user wrote it (or the default)
  bool force = false;  // a previous run's reports there may be replaced
};

// Checks REQUESTED without creating anything (run --dry-run): a directory that holds anything is
// refused unless FORCE, and with FORCE too when it holds anything but a run's reports.
Result<void> checkReportDir(const std::string& requested, bool force);

// Checks REQUESTED as checkReportDir does and creates it (with its parents). Empty REQUESTED:
// rdmachaos-results/PLAYBOOK-YYYYmmdd-HHMMSS (local time NOW) under BASE, created empty here and
// now, or the first of -2, -3, ... that is free, so two runs in one second get two directories.
Result<ReportDir> prepareReportDir(const std::string& requested, const std::string& playbookName, bool force,
                                   std::time_t now, const std::string& base = "rdmachaos-results");

// Writes FILES (name, content) into a new directory beside DIR.path, fsyncs them and renames
// that directory onto DIR.path: onto an empty one (or none), or with DIR.force onto a previous
// run's reports, which are then removed. Anything else found there is left alone, the error
// names it, and the reports stay in the directory beside it, whose name the error gives.
Result<void> publishReports(const ReportDir& dir, const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace rc::controller
