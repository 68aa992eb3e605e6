// Reports: the result document round-trips and every rendering shows what was measured.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "controller/cli/commands.hpp"
#include "common/pcapng.hpp"
#include "controller/run/packet_analysis.hpp"
#include "controller/run/run_result.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_dir.hpp"
#include "synthetic_run.hpp"
#include "test_util.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_report {

using namespace rc::controller;
using rc::test::Shape;

namespace {

json documentFor(Shape shape) {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, shape);
  return makeResultDocument(run, pb, score(run, pb));
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) n++;
  return n;
}

}  // namespace

TEST_CASE("the result document is self-contained and passes its own check") {
  json doc = documentFor(Shape::cleanStep);
  REQUIRE(checkResultDocument(doc));
  CHECK(doc["schema"] == kResultSchema);
  CHECK(doc["playbook"]["text"].get<std::string>().find("name = \"synthetic\"") == 0);
  CHECK(doc["inventory"]["nodes"].size() == 2);
  CHECK(doc["clocks"][0]["offset_ns"] == 120000);
  CHECK(doc["series"]["bin_ns"] == 100'000'000);
  CHECK(doc["series"]["job"].size() == 300);
  CHECK(doc["series"]["job"][0] == 2000.0);
  CHECK(doc["series"]["nodes"]["n2"][100] == 0.0);
  CHECK(doc["faults"][0]["applied_ns"] == 10'000'000'000);
  CHECK(doc["counters"][1]["delta"]["link_downed"] == 1);
  const json& t = doc["trials"][0];
  CHECK(t["job"]["impact"]["recovery_time_ns"] == 500'000'000);
  CHECK(t["job"]["impact"]["loss_bytes"] == 50000.0);
  CHECK(t["verdicts"].size() == 3);
  CHECK(t["verdicts"][1]["passed"] == false);
  CHECK(t["verdicts"][1]["line"] == 36);  // where the expectation is in the playbook
  CHECK(doc["outcome"]["verdict"] == "failed");
  CHECK(doc["outcome"]["exit_code"] == 1);
  // A JSON round trip changes nothing the renderers see.
  json again = json::parse(doc.dump());
  CHECK(renderHtml(again) == renderHtml(doc));
}

TEST_CASE("documents that are not ours are refused with the reason") {
  json doc = documentFor(Shape::noEffect);
  json wrong = doc;
  wrong["schema"] = "something/2";
  CHECK(checkResultDocument(wrong).error().message.find("schema is 'something/2'") == 0);
  wrong = doc;
  wrong.erase("series");
  CHECK(checkResultDocument(wrong).error().message == "member 'series' is missing or has the wrong type");
  wrong = doc;
  wrong["series"]["bin_ns"] = 0;
  CHECK_FALSE(checkResultDocument(wrong));
  CHECK_FALSE(checkResultDocument(json::array()));
}

TEST_CASE("JUnit: one testcase per expectation, failures with measured vs bound") {
  std::string x = renderJunit(documentFor(Shape::cleanStep));
  CHECK(x.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"synthetic\" tests=\"4\" failures=\"1\" errors=\"0\">", 0) == 0);
  CHECK(count(x, "<testcase ") == 4);  // 3 expectations + the trial itself
  CHECK(x.find("name=\"synthetic #1: recovery_time &lt;= 1s [job]\"") != std::string::npos);
  CHECK(x.find("<failure message=\"measured 100.00%, expected &lt; 90%\" type=\"expectation\">") !=
        std::string::npos);
  std::string never = renderJunit(documentFor(Shape::neverRecovers));
  CHECK(never.find("message=\"measured not recovered, expected &lt;= 1s\"") != std::string::npos);
}

TEST_CASE("JUnit: aborted runs and failed faults are errors") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  run.abortReason = "agent n2 lost <lease>";
  run.endedNs = 11'000'000'000;
  std::string x = renderJunit(makeResultDocument(run, pb, score(run, pb)));
  CHECK(x.find("errors=\"2\"") != std::string::npos);
  CHECK(x.find("<error message=\"aborted: agent n2 lost &lt;lease&gt;\"/>") != std::string::npos);
}

TEST_CASE("HTML: self-contained, with series, fault windows, recovery marks and counters") {
  std::string h = renderHtml(documentFor(Shape::cleanStep));
  CHECK(h.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(h.find("http://") == h.find("http://www.w3.org/2000/svg"));  // the SVG namespace only
  CHECK(h.find("https://") == std::string::npos);
  CHECK(h.find("<script") == std::string::npos);
  CHECK(h.find("<link") == std::string::npos);
  CHECK(count(h, "<svg class=\"chart\"") == 3);      // job + 2 nodes
  CHECK(count(h, "<path class=\"series\"") == 3);
  CHECK(count(h, "class=\"fault-window") == 3);
  CHECK(count(h, "<line class=\"recovery-mark\"") == 3);
  CHECK(h.find("recovered +500ms") != std::string::npos);
  CHECK(h.find("<table class=\"counters\">") != std::string::npos);
  CHECK(h.find("<td class=\"num\">60000</td>") != std::string::npos);  // rx_packets delta
  CHECK(h.find("id=\"verdict\">FAILED</span>") != std::string::npos);
  std::string never = renderHtml(documentFor(Shape::neverRecovers));
  CHECK(count(never, "not-recovered\"") == 3);
}

TEST_CASE("text summary names the numbers an operator looks for") {
  std::string t = renderText(documentFor(Shape::cleanStep));
  CHECK(t.find("playbook synthetic: failed (1 of 3 expectations failed)") == 0);
  CHECK(t.find("recovery time   500ms") != std::string::npos);
  CHECK(t.find("FAIL throughput_loss_pct < 90% (job): 100.00%") != std::string::npos);
  // The live line's two named quantities, job throughput and busbw, are both in the summary,
  // each labelled (busbw: 4 MiB per 100 ms iteration on two ranks = 41.9 MB/s = 335.54 Mb/s).
  CHECK(t.find("job throughput (median, smoothed)") != std::string::npos);
  CHECK(t.find("  busbw           335.54Mb/s bus bandwidth") != std::string::npos);
}

TEST_CASE("reports are written atomically") {
  char dir[] = "/tmp/rc-report-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string path = std::string(dir) + "/r.json";
  REQUIRE(writeFileAtomic(path, documentFor(Shape::noEffect).dump()));
  auto doc = loadResultDocument(path);
  CHECK(doc);
  CHECK(::access((path + ".tmp").c_str(), F_OK) != 0);
  std::ofstream(path) << "{not json";
  CHECK(loadResultDocument(path).error().message.find(": not JSON:") != std::string::npos);
  CHECK_FALSE(writeFileAtomic(std::string(dir) + "/missing/x.html", "x"));
  std::remove(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("rdmachaos report re-renders a saved result; its exit code is the outcome's") {
  char dir[] = "/tmp/rc-report-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string d(dir);
  REQUIRE(writeFileAtomic(d + "/result.json", documentFor(Shape::cleanStep).dump()));
  ReportOptions o{d + "/result.json", d + "/report.html", d + "/junit.xml"};
  CHECK(cmdReport(o) == kExitFailed);
  std::ifstream html(d + "/report.html"), junit(d + "/junit.xml");
  std::stringstream hs, js;
  hs << html.rdbuf();
  js << junit.rdbuf();
  CHECK(hs.str() == renderHtml(documentFor(Shape::cleanStep)));
  CHECK(js.str().find("failures=\"1\"") != std::string::npos);
  REQUIRE(writeFileAtomic(d + "/ok.json", documentFor(Shape::noEffect).dump()));
  CHECK(cmdReport({d + "/ok.json", "", ""}) == kExitOk);
  CHECK(cmdReport({d + "/missing.json", "", ""}) == kExitError);
  for (const char* f : {"/result.json", "/report.html", "/junit.xml", "/ok.json"}) std::remove((d + f).c_str());
  ::rmdir(dir);
}

TEST_CASE("NIC counters: the highlighted sums, their series in the result, the text and the HTML") {
  // mlx5's names; a node with two data interfaces prefixes them with the interface.
  NicPoint p = nicHighlights({{"rx_prio3_pause", 10},
                              {"tx_prio3_pause", 5},
                              {"ens1f1np1/rx_prio0_pause", 1},
                              {"rx_pause_ctrl_phy", 2},
                              {"rx_prio3_pause_duration", 999},
                              {"tx_pause_storm_warning_events", 999},
                              {"rx_prio8_pause", 999},
                              {"rdma.np_ecn_marked_roce_packets", 40},
                              {"rdma.np_cnp_sent", 30},
                              {"rdma.rp_cnp_handled", 20},
                              {"net.rx_bytes", 999}});
  CHECK(p.pauseFrames == 18);
  CHECK(p.ecnMarked == 40);
  CHECK(p.cnpSent == 30);
  CHECK(p.cnpHandled == 20);

  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  // n1's NIC: pause frames and ECN marks during the fault (10 s to 12 s), flat otherwise.
  for (int s = 0; s < 30; s++) {
    int64_t moving = std::clamp(s - 10, 0, 2);
    run.nic["n1"].push_back({int64_t(s) * 1'000'000'000, uint64_t(1000 + 3000 * moving),
                             uint64_t(500 + 400 * moving), 0, 0});
  }
  run.nic["n2"].push_back({0, 0, 0, 0, 0});  // a node whose NIC has none of these
  json doc = makeResultDocument(run, pb, score(run, pb));
  REQUIRE(checkResultDocument(doc));
  CHECK(doc["nic"]["n1"]["t_ns"].size() == 30);
  CHECK(doc["nic"]["n1"]["pause_frames"][29] == 7000);
  CHECK(doc["nic"]["n1"]["ecn_marked"][12] == 1300);

  std::string text = renderText(doc);
  CHECK(text.find("NIC n1") != std::string::npos);
  CHECK(text.find("6000 pause frames, 800 ECN-marked packets") != std::string::npos);
  CHECK(text.find("NIC n2") == std::string::npos);

  std::string h = renderHtml(doc);
  CHECK(h.find("<h3>NIC counters</h3>") != std::string::npos);
  CHECK(count(h, "<svg class=\"chart fabric\" id=\"nic-0\"") == 1);
  CHECK(count(h, "<path class=\"counter pfc\"") == 1);  // n1's pause frames
  CHECK(count(h, "<path class=\"counter ecn\"") == 1);  // n1's ECN marks
  CHECK(h.find("n1 pause frames (NIC)") != std::string::npos);
  // A document from before NIC counters renders as it did.
  doc.erase("nic");
  CHECK(renderHtml(doc).find("NIC counters") == std::string::npos);
}

TEST_CASE("NIC and RDMA counters per fault window: in the result, per node in the text, beside the switch in the HTML") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  rc::test::addRxeCounters(run);  // rxe's names; known deltas over the flap, 10 s to 12 s
  rc::test::addStormEvidence(run);
  json doc = makeResultDocument(run, pb, score(run, pb));
  REQUIRE(checkResultDocument(doc));
  const json& ws = doc["trials"][0]["nic"]["fault_windows"];
  REQUIRE(ws.size() == 1);
  CHECK(ws[0]["step"] == "flap");
  CHECK(ws[0]["kind"] == "link_flap");
  CHECK(ws[0]["node"] == "n2");
  CHECK(ws[0]["from_ns"] == 10'000'000'000);
  CHECK(ws[0]["to_ns"] == 12'000'000'000);
  CHECK(ws[0]["nodes"]["n1"] == json{{"net.rx_bytes", 20000}, {"rdma.completer_retry_err", 10}, {"rdma.sent_pkts", 200}});
  CHECK(ws[0]["nodes"]["n2"] == json{{"rdma.out_of_seq_request", 12}, {"rdma.rcvd_seq_err", 7}});

  // The text: per window, per node, the RDMA counters that moved, evidence first; the NIC's
  // byte and packet counts only counted.
  std::string text = renderText(doc);
  CHECK_THAT(text, Catch::Contains("  NIC counters    while flap (link_flap on n2) was on, 10.000s to 12.000s into the "
                                   "trial:\n"
                                   "    n1          rdma.completer_retry_err +10, rdma.sent_pkts +200; 1 other NIC "
                                   "counter(s) moved (net.*, ethtool): all in result.json\n"
                                   "    n2          rdma.out_of_seq_request +12, rdma.rcvd_seq_err +7\n"));
  CHECK_THAT(text, !Catch::Contains("retry_exceeded_err"));  // moved only outside the window

  // The HTML: the table after the switch's, one row per node, every counter that moved.
  std::string h = renderHtml(doc);
  size_t fabric = h.find("<table class=\"fabric\">"), nic = h.find("<table class=\"nicwindows\">");
  REQUIRE(fabric != std::string::npos);
  REQUIRE(nic != std::string::npos);
  CHECK(fabric < nic);
  CHECK(count(h, "<h3>NIC and RDMA counters per fault window</h3>") == 1);
  CHECK_THAT(h, Catch::Contains("<td>n1</td><td>rdma.completer_retry_err +10, net.rx_bytes +20000, rdma.sent_pkts "
                                "+200</td>"));
  CHECK_THAT(h, Catch::Contains("<td>n2</td><td>rdma.out_of_seq_request +12, rdma.rcvd_seq_err +7</td>"));
  CHECK_THAT(h, Catch::Contains("+10.000s to +12.000s"));
  // A window in which nothing moved says so; a document from before these windows renders.
  json quiet = doc;
  quiet["trials"][0]["nic"]["fault_windows"][0]["nodes"] = json::object();
  CHECK_THAT(renderText(quiet), Catch::Contains("into the trial: no counter moved on any node\n"));
  CHECK_THAT(renderHtml(quiet), Catch::Contains("no counter moved on any node"));
  json old = doc;
  old["trials"][0].erase("nic");
  CHECK(renderHtml(old).find("nicwindows") == std::string::npos);
  CHECK(renderText(old).find("NIC counters    while") == std::string::npos);
}

TEST_CASE("an aborted run with NIC counters renders: text, HTML, JUnit") {
  Playbook pb = rc::test::syntheticPlaybook();
  RunResult run = rc::test::syntheticRun(pb, Shape::cleanStep);
  run.abortReason = "baseline below the floor";
  run.endedNs = 3'000'000'000;
  run.nic["n1"].push_back({0, 1, 2, 3, 4});
  run.nic["n1"].push_back({1'000'000'000, 5, 6, 7, 8});
  rc::test::addRxeCounters(run);
  run.faults[0].revertedNs.reset();  // applied at 10 s; the run never got there
  json doc = makeResultDocument(run, pb, score(run, pb));
  REQUIRE(checkResultDocument(doc));
  CHECK(doc["trials"][0]["nic"]["fault_windows"][0]["to_ns"] == 10'000'000'000);
  CHECK(doc["trials"][0]["nic"]["fault_windows"][0]["nodes"].empty());
  CHECK_NOTHROW(renderText(doc));
  CHECK_NOTHROW(renderHtml(doc));
  CHECK_NOTHROW(renderJunit(doc));
  doc.erase("nic");
  CHECK_NOTHROW(renderText(doc));
}

namespace {
namespace fs = std::filesystem;

std::string slurpFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A scratch directory, removed with everything in it when the case ends (also on failure).
struct Scratch {
  std::string path;
  Scratch() {
    char tmpl[] = "/tmp/rc-reportdir-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    path = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::vector<std::pair<std::string, std::string>> kNewReports = {
    {"result.json", "{\"new\": 1}\n"}, {"report.html", "<p>new</p>"}, {"junit.xml", "<testsuites/>"}};
}  // namespace

TEST_CASE("a report directory that holds anything is refused before the run, unless --force replaces a run's reports") {
  Scratch s;
  const std::string out = s.path + "/out";
  fs::create_directory(out);
  std::ofstream(out + "/notes.txt") << "mine";
  // Without --force: refused, naming the directory, what is in it and the way out; nothing written.
  auto refused = prepareReportDir(out, "pb", false, 0);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message, Catch::Contains("'" + out + "' is not empty") &&
                                          Catch::Contains("'notes.txt'") && Catch::Contains("--force") &&
                                          Catch::Contains("--report-dir"));
  CHECK_FALSE(checkReportDir(out, false));
  // --force replaces only a previous run's reports, never anything else.
  auto forced = prepareReportDir(out, "pb", true, 0);
  REQUIRE_FALSE(forced);
  CHECK_THAT(forced.error().message, Catch::Contains("'notes.txt'") && Catch::Contains("not a report of a run"));
  CHECK(listing(out) == std::vector<std::string>{"notes.txt"});
  CHECK(slurpFile(out + "/notes.txt") == "mine");
  CHECK(listing(s.path) == std::vector<std::string>{"out"});

  // A previous run's reports: replaced as a whole with --force, and nothing is left beside.
  fs::remove(out + "/notes.txt");
  std::ofstream(out + "/result.json") << "{\"old\": 1}";
  std::ofstream(out + "/junit.xml") << "<old/>";
  std::ofstream(out + "/compare.json") << "{}";  // run --baseline's, beside them
  REQUIRE_FALSE(prepareReportDir(out, "pb", false, 0));
  auto dir = prepareReportDir(out, "pb", true, 0);
  REQUIRE(dir);
  REQUIRE(publishReports(*dir, kNewReports));
  CHECK(listing(out) == std::vector<std::string>{"junit.xml", "report.html", "result.json"});
  CHECK(slurpFile(out + "/result.json") == "{\"new\": 1}\n");
  CHECK(slurpFile(out + "/junit.xml") == "<testsuites/>");
  CHECK(listing(s.path) == std::vector<std::string>{"out"});

  // A new directory (and its parents) is created; an empty one is used as it is.
  auto fresh = prepareReportDir(s.path + "/a/b/", "pb", false, 0);
  REQUIRE(fresh);
  CHECK(fs::is_directory(s.path + "/a/b"));
  REQUIRE(publishReports(*fresh, kNewReports));
  CHECK(listing(s.path + "/a/b") == std::vector<std::string>{"junit.xml", "report.html", "result.json"});
  CHECK(listing(s.path + "/a") == std::vector<std::string>{"b"});
}

TEST_CASE("reports land whole or not at all, and never over files that appeared during the run") {
  Scratch s;
  const std::string out = s.path + "/out";
  auto dir = prepareReportDir(out, "pb", false, 0);
  REQUIRE(dir);
  CHECK(listing(s.path) == std::vector<std::string>{"out"});
  // Someone writes there while the run runs: the reports do not mix with it.
  std::ofstream(out + "/result.json") << "another run's";
  auto r = publishReports(*dir, kNewReports);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("'" + out + "' is no longer empty") &&
                                    Catch::Contains("this run's reports are in '" + s.path + "/out.partial-"));
  CHECK(slurpFile(out + "/result.json") == "another run's");
  auto names = listing(s.path);
  REQUIRE(names.size() == 2);
  CHECK(names[0] == "out");
  CHECK_THAT(names[1], Catch::StartsWith("out.partial-"));
  CHECK(slurpFile(s.path + "/" + names[1] + "/result.json") == "{\"new\": 1}\n");
}

TEST_CASE("two runs of one playbook in the same second get two report directories") {
  Scratch s;
  const std::string base = s.path + "/rdmachaos-results";
  const std::time_t now = 1'790'000'000;
  auto a = prepareReportDir("", "link-flap", false, now, base);
  auto b = prepareReportDir("", "link-flap", false, now, base);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->path != b->path);
  CHECK_THAT(a->path, Catch::StartsWith(base + "/link-flap-"));
  CHECK(b->path == a->path + "-2");
  std::vector<std::pair<std::string, std::string>> other = {{"result.json", "b"}};
  REQUIRE(publishReports(*a, kNewReports));
  REQUIRE(publishReports(*b, other));
  CHECK(listing(a->path) == std::vector<std::string>{"junit.xml", "report.html", "result.json"});
  CHECK(listing(b->path) == std::vector<std::string>{"result.json"});
  CHECK(slurpFile(b->path + "/result.json") == "b");
  CHECK(listing(base).size() == 2);
}

TEST_CASE("run --dry-run refuses a non-empty --report-dir as the run would, and writes nothing") {
  Scratch s;
  const std::string inv = s.path + "/inventory.toml";
  std::ofstream(inv) << "[tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n"
                        "[[node]]\nname = \"n1\"\naddress = \"198.18.1.11\"\ndata_interfaces = [\"data0\"]\n"
                        "data_addresses = [\"198.19.1.11\"]\nroles = [\"worker\"]\n"
                        "[[node]]\nname = \"n2\"\naddress = \"198.18.1.12\"\ndata_interfaces = [\"data0\"]\n"
                        "data_addresses = [\"198.19.1.12\"]\nroles = [\"worker\"]\n"
                        "[[node]]\nname = \"n3\"\naddress = \"198.18.1.13\"\ndata_interfaces = [\"data0\"]\n"
                        "data_addresses = [\"198.19.1.13\"]\nroles = [\"worker\"]\n";
  const std::string out = s.path + "/out";
  fs::create_directory(out);
  std::ofstream(out + "/result.json") << "old";
  RunOptions o;
  o.playbook = std::string(RDMACHAOS_SOURCE_ROOT) + "/playbooks/quickstart.toml";
  o.inventory = inv;
  o.reportDir = out;
  o.dryRun = true;
  CHECK(cmdRun(o) == kExitError);
  o.force = true;
  CHECK(cmdRun(o) == kExitOk);
  o.reportDir = s.path + "/new";
  o.force = false;
  CHECK(cmdRun(o) == kExitOk);
  CHECK_FALSE(fs::exists(s.path + "/new"));  // a dry run creates nothing
  CHECK(listing(out) == std::vector<std::string>{"result.json"});
  CHECK(slurpFile(out + "/result.json") == "old");
}

TEST_CASE("a packet fault's capture is read only where the lab switch writes captures") {
  char tmpl[] = "/tmp/rc-capdir-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string lab = tmpl;
  struct Remove {
    std::string p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } remove{lab};
  std::filesystem::create_directories(lab + "/captures");
  const std::string sock = lab + "/switch.sock", good = lab + "/captures/packet-rc-0123abcd.pcapng";
  std::ofstream(good) << "x";
  CHECK(trustedCapture(good, sock));
  // An agent's event names the path: anything else on the controller's machine is refused.
  for (const std::string& bad : {std::string("/etc/shadow"), lab + "/captures/../switch.json",
                                lab + "/captures/packet-a/../../x.pcapng", lab + "/other/packet-x.pcapng"}) {
    CAPTURE(bad);
    auto r = trustedCapture(bad, sock);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("not"));
  }
  std::filesystem::create_symlink("/etc/hostname", lab + "/captures/packet-link.pcapng");
  auto link = trustedCapture(lab + "/captures/packet-link.pcapng", sock);
  REQUIRE_FALSE(link);
  CHECK_THAT(link.error().message, Catch::Contains("not a regular file"));
  auto none = trustedCapture(good, "");
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("names no lab switch"));
}

TEST_CASE("a packet fault's capture is read once, whole, with a cap, and removed from the lab once published") {
  rctest::TempDir tmp("rc-capread");
  const std::string lab = tmp.path;
  std::filesystem::create_directories(lab + "/captures");
  const std::string sock = lab + "/switch.sock", path = lab + "/captures/packet-rc-1.pcapng";
  {
    rc::pcapng::Writer w;
    REQUIRE(w.open(path, "n2", 256, 1 << 20, "test").ok());
    const uint8_t frame[64] = {1, 2, 3};
    w.write(1'000'000'000, frame, sizeof frame, rc::pcapng::Direction::outbound, "drop");
    w.write(1'000'001'000, frame, sizeof frame, rc::pcapng::Direction::outbound);
  }
  std::string onDisk;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    onDisk = ss.str();
  }
  REQUIRE(onDisk.size() > 100);
  RunResult run;
  FaultRecord f;
  f.kind = "packet";
  f.step = "drop";
  f.node = "n2";
  f.params = {{"action", "drop"}, {"protocol", "tcp"}};
  f.events = {{0, "capture", path}, {0, "packet_summary", "matched 2, acted 1"}};
  run.faults.push_back(f);
  analysePackets(run, sock);
  REQUIRE(run.packets.size() == 1);
  CHECK(run.packets[0].captureError.empty());
  CHECK(run.packets[0].captureBytes == onDisk);  // the bytes published are the bytes read
  CHECK(run.packets[0].captureRead == path);
  CHECK(run.packets[0].acted == 1);
  removeReadCaptures(run);
  CHECK_FALSE(std::filesystem::exists(path));
  removeReadCaptures(run);  // already gone: nothing to say, nothing broken

  // Larger than the lab switch ever writes (a sparse file: no disk used): refused, not read.
  const std::string big = lab + "/captures/packet-rc-2.pcapng";
  {
    std::ofstream(big) << "x";
    std::filesystem::resize_file(big, (uint64_t(1) << 30) + (2u << 20));
  }
  run.faults[0].events[0].detail = big;
  analysePackets(run, sock);
  REQUIRE(run.packets.size() == 1);
  CHECK_THAT(run.packets[0].captureError, Catch::Contains("more than the lab switch writes"));
  CHECK(run.packets[0].captureBytes.empty());
  CHECK(run.packets[0].captureRead.empty());
  removeReadCaptures(run);
  CHECK(std::filesystem::exists(big));  // not read, so not removed
}

// `lab up --ecn`: three values with sizes as the playbooks write them; anything else is refused
// with the form to give.
TEST_CASE("lab up --ecn takes KMIN,KMAX,PMAX and refuses anything else, naming the form") {
  auto ok = parseEcnProfileArg("100KiB,400KiB,0.2");
  REQUIRE(ok);
  CHECK(ok->kmin == 100 * 1024);
  CHECK(ok->kmax == 400 * 1024);
  CHECK(ok->pmax == Approx(0.2));
  for (const char* bad : {"", "100KiB,400KiB", "100KiB,400KiB,0.2,1", "x,400KiB,0.2", "100KiB,400KiB,0",
                          "100KiB,400KiB,1.5", "100KiB,400KiB,0.2x", "400KiB,100KiB,0.2", "0,100KiB,0.2",
                          "1KiB,128MiB,0.2"}) {
    INFO("--ecn '" << bad << "'");
    auto r = parseEcnProfileArg(bad);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("KMIN,KMAX,PMAX"));
  }
}

}  // namespace test_report
