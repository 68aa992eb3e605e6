// Browser suite: headless chromium renders the HTML report from a file; the screenshot must be
// a real image and the live DOM must hold the chart's series, fault windows and recovery marks.
// Exits 77 (skip) with the reason when chromium is missing or cannot run here.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include "catch_session.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "controller/report/report.hpp"
#include "synthetic_run.hpp"

using namespace rc::controller;
namespace fs = std::filesystem;

namespace {

std::string g_chromium;
fs::path g_dir;

std::string findChromium() {
  if (const char* env = std::getenv("RDMACHAOS_CHROMIUM"); env && *env) return env;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(c, X_OK) == 0) return c;
  return "";
}

// The flags keep chromium off the network and away from any profile of the user's.
std::string chromiumCommand(const std::string& args) {
  fs::path profile = g_dir / "profile";
  return "timeout 120 '" + g_chromium +
         "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--user-data-dir='" + profile.string() + "' " + args + " 2>'" + (g_dir / "chromium.log").string() + "'";
}

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) n++;
  return n;
}

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

fs::path writeReport(rc::test::Shape shape, const std::string& name, bool stormEvidence = false) {
  Playbook pb = rc::test::syntheticPlaybook();
  // 10 Gb/s per node, as on a real fabric.
  RunResult r = rc::test::syntheticRun(pb, shape, 10'000'000'000, 12'000'000'000, 1.25e5);
  if (stormEvidence) rc::test::addStormEvidence(r);
  fs::path html = g_dir / name;
  REQUIRE(writeFileAtomic(html.string(), renderHtml(makeResultDocument(r, pb, score(r, pb)))));
  return html;
}

}  // namespace

TEST_CASE("chromium renders the report to a plausible screenshot") {
  fs::path html = writeReport(rc::test::Shape::slowRamp, "report.html");
  fs::path png = g_dir / "report.png";
  int status = 0;
  run(chromiumCommand("--screenshot='" + png.string() + "' --window-size=1200,900 'file://" +
                      html.string() + "'"),
      &status);
  INFO(slurp(g_dir / "chromium.log"));
  REQUIRE(fs::exists(png));
  std::string img = slurp(png);
  REQUIRE(img.size() > 33);
  CHECK(img.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(be32(img, 16) == 1200);  // IHDR width
  CHECK(be32(img, 20) == 900);   // IHDR height
  // A blank page compresses to a few kB; charts, tables and text do not.
  CHECK(img.size() > 30000);
  if (const char* keep = std::getenv("RDMACHAOS_BUILD_DIR"); keep && *keep)
  {  // kept for a human look: the page and what chromium made of it
    fs::copy_file(png, fs::path(keep) / "report-screenshot.png", fs::copy_options::overwrite_existing);
    fs::copy_file(html, fs::path(keep) / "report-example.html", fs::copy_options::overwrite_existing);
  }
}

TEST_CASE("the DOM chromium built holds the charts' parts") {
  fs::path html = writeReport(rc::test::Shape::cleanStep, "dom.html");
  int status = 0;
  std::string dom = run(chromiumCommand("--dump-dom 'file://" + html.string() + "'"), &status);
  INFO(slurp(g_dir / "chromium.log"));
  REQUIRE(status == 0);
  CHECK(count(dom, "<svg class=\"chart\"") == 3);
  CHECK(count(dom, "<path class=\"series\"") == 3);
  CHECK(count(dom, "<path class=\"area\"") == 3);
  CHECK(count(dom, "class=\"fault-window") == 3);
  CHECK(count(dom, "<line class=\"recovery-mark\"") == 3);
  CHECK(dom.find("recovered +500ms") != std::string::npos);
  CHECK(dom.find("<table class=\"counters\">") != std::string::npos);
  CHECK(dom.find("id=\"verdict\">FAILED<") != std::string::npos);

  fs::path never = writeReport(rc::test::Shape::neverRecovers, "never.html");
  std::string dom2 = run(chromiumCommand("--dump-dom 'file://" + never.string() + "'"), &status);
  CHECK(count(dom2, "not-recovered\"") == 3);
}

TEST_CASE("the detection table and the alerts' marks are drawn") {
  // The synthetic playbook with a [[detect]] on its flap; the monitoring saw n2's link go down
  // 1.5 s after the fault and fired once more, on n1, long after it (a false alarm).
  std::string text = std::string(rc::test::kSyntheticPlaybook) + rc::test::kSyntheticDetect;
  auto pb = parsePlaybook(text, "detect.toml");
  REQUIRE(pb);
  RunResult r = rc::test::syntheticRun(*pb, rc::test::Shape::cleanStep, 10'000'000'000, 12'000'000'000, 1.25e5);
  r.alertSources = {"alertmanager webhook 127.0.0.1:9099"};
  r.alertsUntilNs = r.endedNs;
  auto alert = [&](const char* node, bool firing, int64_t starts, int64_t ends) {
    return rc::test::syntheticAlert(r, node, firing, starts, ends);
  };
  r.alerts = {alert("n2", true, 11'500'000'000, 0), alert("n2", false, 11'500'000'000, 12'800'000'000),
              alert("n1", true, 25'000'000'000, 0)};
  fs::path html = g_dir / "detect.html";
  REQUIRE(writeFileAtomic(html.string(), renderHtml(makeResultDocument(r, *pb, score(r, *pb)))));
  int status = 0;
  std::string dom = run(chromiumCommand("--dump-dom 'file://" + html.string() + "'"), &status);
  INFO(slurp(g_dir / "chromium.log"));
  REQUIRE(status == 0);
  CHECK(dom.find("<table class=\"detection\">") != std::string::npos);
  CHECK(count(dom, "<tr class=\"detection-row ok\">") == 1);
  CHECK(dom.find("1.500s ±1.500s") != std::string::npos);  // scrape 1 s + evaluation 500 ms
  CHECK(dom.find("<table class=\"false-alarms\">") != std::string::npos);
  // On the job's chart: the detection's mark and band, and the false alarm's.
  CHECK(count(dom, "<line class=\"alert-mark alert-detected\"") == 1);
  CHECK(count(dom, "<rect class=\"alert-span alert-detected\"") == 1);
  CHECK(count(dom, "<line class=\"alert-mark alert-false_alarm\"") == 1);
}

TEST_CASE("the fabric's pause and ECN series are drawn beside the throughput, with their deltas") {
  fs::path html = writeReport(rc::test::Shape::cleanStep, "fabric.html", true);
  int status = 0;
  std::string dom = run(chromiumCommand("--dump-dom 'file://" + html.string() + "'"), &status);
  INFO(slurp(g_dir / "chromium.log"));
  REQUIRE(status == 0);
  CHECK(count(dom, "<svg class=\"chart fabric\"") == 1);
  CHECK(count(dom, "<path class=\"counter pfc\"") == 1);  // n2 q3 PFC frames received
  CHECK(count(dom, "<path class=\"counter ecn\"") == 1);  // n1 q3 ECN marks
  CHECK(dom.find("<table class=\"fabric\">") != std::string::npos);
  CHECK(dom.find("detected 200ms after the storm began") != std::string::npos);
  // A path with points, not an empty one: the storm's 3,000 frames a second reach the chart.
  auto at = dom.find("<path class=\"counter pfc\" d=\"M");
  REQUIRE(at != std::string::npos);
  CHECK(dom.find('L', at) < dom.find("</path>", at));
  // Without evidence, no fabric section.
  fs::path plain = writeReport(rc::test::Shape::cleanStep, "plain.html");
  std::string dom2 = run(chromiumCommand("--dump-dom 'file://" + plain.string() + "'"), &status);
  CHECK(count(dom2, "chart fabric") == 0);
}

int main(int argc, char* argv[]) {
  g_chromium = findChromium();
  if (g_chromium.empty()) {
    std::printf("SKIP: chromium is not installed (scripts/install-deps installs it)\n");
    return 77;
  }
  char tmpl[] = "/tmp/rc-browser-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::printf("SKIP: cannot create a temporary directory\n");
    return 77;
  }
  g_dir = tmpl;
  // Can chromium start at all here (sandboxes, missing /dev/shm, no fonts)?
  std::ofstream(g_dir / "probe.html") << "<p id=probe>ok</p>";
  int status = 0;
  std::string probe = run(chromiumCommand("--dump-dom 'file://" + (g_dir / "probe.html").string() + "'"), &status);
  if (status != 0 || probe.find("probe") == std::string::npos) {
    std::printf("SKIP: chromium cannot run headless here (status %d): %s\n", status,
                slurp(g_dir / "chromium.log").substr(0, 400).c_str());
    std::error_code ec;
    fs::remove_all(g_dir, ec);
    return 77;
  }
  int rc = rctest::runCatch(argc, argv);
  std::error_code ec;
  fs::remove_all(g_dir, ec);
  return rc;
}
