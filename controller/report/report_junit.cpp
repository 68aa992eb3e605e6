// The result document as JUnit XML: a test suite per playbook, a test case per trial (it errors
// when the trial did not complete or a fault failed) and per verdict (skipped when the trial's
// condition was not reached).
#include <sstream>

#include "controller/report/report.hpp"
#include "controller/report/report_util.hpp"

namespace rc::controller {
using namespace report_util;

std::string renderJunit(const json& doc) {
  const json& pb = doc["playbook"];
  const std::string suiteName = str(pb, "name", "playbook");
  std::ostringstream cases;
  int tests = 0, failures = 0, errors = 0;
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  std::ostringstream suites;
  for (const auto& t : doc["trials"]) {
    std::ostringstream tc;
    int tt = 0, tf = 0, te = 0, ts = 0;
    const std::string label = str(t, "label", "trial");
    const std::string cls = "rdmachaos." + suiteName + "." + str(t, "scenario", "scenario");
    // The trial itself is a test case: it errors when it did not complete or a fault failed.
    tt++;
    tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(label + ": trial ran cleanly") << "\">\n";
    if (t.contains("problems") && !t["problems"].empty()) {
      te++;
      std::string all;
      for (const auto& p : t["problems"]) all += p.get<std::string>() + "\n";
      tc << "      <error message=\"" << esc(t["problems"][0].get<std::string>()) << "\">" << esc(all)
         << "</error>\n";
    }
    tc << "    </testcase>\n";
    for (const auto& v : t["verdicts"]) {
      tt++;
      std::string name = str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text") + " [" +
                         str(v, "scope") + "]";
      tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(label + ": " + name) << "\">\n";
      if (!t.value("condition", json::object()).value("reached", true)) {
        ts++;
        tc << "      <skipped message=\"" << esc(str(v, "measured_text")) << "\"/>\n";
      } else if (!v.value("passed", false)) {
        tf++;
        std::string msg = "measured " + str(v, "measured_text") + ", expected " + str(v, "op") + " " +
                          str(v, "bound_text");
        tc << "      <failure message=\"" << esc(msg) << "\" type=\"expectation\">" << esc(name)
           << ": measured " << esc(str(v, "measured_text")) << " (bound " << esc(str(v, "op")) << " "
           << esc(str(v, "bound_text")) << ", playbook line " << v.value("line", 0) << ")</failure>\n";
      }
      tc << "    </testcase>\n";
    }
    suites << "  <testsuite name=\"" << esc(suiteName + " / " + label) << "\" tests=\"" << tt
           << "\" failures=\"" << tf << "\" errors=\"" << te << "\" skipped=\"" << ts << "\">\n"
           << tc.str() << "  </testsuite>\n";
    tests += tt;
    failures += tf;
    errors += te;
  }
  // stat = "cv" expectations: one suite per group of repeated trials.
  for (const auto& g : doc.value("repeatability", json::array())) {
    const auto& gv = g.value("verdicts", json::array());
    if (gv.empty()) continue;
    std::ostringstream tc;
    int tf = 0;
    const std::string cls = "rdmachaos." + suiteName + ".repeatability";
    for (const auto& v : gv) {
      std::string name = str(g, "group") + ": " + str(v, "metric") + " " + str(v, "op") + " " + str(v, "bound_text");
      tc << "    <testcase classname=\"" << esc(cls) << "\" name=\"" << esc(name) << "\">\n";
      if (!v.value("passed", false)) {
        tf++;
        tc << "      <failure message=\"" << esc("measured " + str(v, "measured_text")) << "\" type=\"expectation\"/>\n";
      }
      tc << "    </testcase>\n";
    }
    suites << "  <testsuite name=\"" << esc(suiteName + " / repeatability of " + str(g, "group")) << "\" tests=\""
           << gv.size() << "\" failures=\"" << tf << "\" errors=\"0\" skipped=\"0\">\n"
           << tc.str() << "  </testsuite>\n";
    tests += int(gv.size());
    failures += tf;
  }
  int skipped = 0;
  suites << detectionJunit(doc, suiteName, tests, failures, skipped);
  std::string abort = str(doc["run"], "abort_reason");
  if (!abort.empty()) {
    errors++;
    tests++;
    suites << "  <testsuite name=\"" << esc(suiteName + " / run") << "\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\">\n"
           << "    <testcase classname=\"rdmachaos." << esc(suiteName) << "\" name=\"run completes\">\n"
           << "      <error message=\"" << esc("aborted: " + abort) << "\"/>\n    </testcase>\n  </testsuite>\n";
  }
  out << "<testsuites name=\"" << esc(suiteName) << "\" tests=\"" << tests << "\" failures=\"" << failures
      << "\" errors=\"" << errors << "\"" << (skipped ? " skipped=\"" + std::to_string(skipped) + "\"" : std::string()) << ">\n"
      << suites.str() << "</testsuites>\n";
  return out.str();
}

}  // namespace rc::controller
