// The playbook subcommands: validate, run (live or --dry-run), report.

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <optional>
#include <ctime>

#include "alerts/prometheus_poller.hpp"
#include "alerts/webhook_receiver.hpp"
#include "common/tls.hpp"
#include "common/units.hpp"
#include "controller/run/nccl_tests_output.hpp"
#include "controller/run/run_playbook.hpp"
#include "controller/score/score.hpp"

#include "controller/cli/commands.hpp"
#include "controller/cli/commands_internal.hpp"
#include "controller/fleet/inventory.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/report/report.hpp"
#include "controller/report/report_dir.hpp"
#include "lab/lab_state.hpp"
#include "metrics/exporter.hpp"

namespace rc::controller {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The monitoring under test: what a run listens to for [[detect]].
struct AlertSources {
  std::unique_ptr<alerts::WebhookReceiver> webhook;
  std::unique_ptr<alerts::PrometheusPoller> poller;
  bool any() const { return webhook || poller; }

  void collect(RunResult& r) const {
    auto add = [&](std::vector<alerts::AlertEvent> events) {
      for (auto& e : events) r.alerts.push_back(std::move(e));
    };
    if (webhook) add(webhook->take());
    if (poller) add(poller->take());
  }
  std::vector<std::string> errors() const {
    std::vector<std::string> out;
    if (webhook)
      for (auto& e : webhook->errors()) out.push_back("alertmanager webhook: " + e);
    if (poller)
      for (auto& e : poller->errors()) out.push_back("prometheus: " + e);
    return out;
  }
};

int64_t timelineNow(const RunResult& r) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count() -
         r.startedUnixNs;
}

// A detection is settled when nothing that may still arrive can change it: its alert fired
// and, where it must clear, it resolved (or the fault's revert is unknown).
bool settled(const DetectionOutcome& o) {
  if (!o.appliedNs) return true;  // never applied: not scored, whatever comes
  if (!o.firedNs) return false;
  return !o.clearsWithinNs || o.resolvedNs || !o.revertedNs;
}

// After the plan: keep listening until every [[detect]] is due (the largest within after an
// applied instant, clears_within after a revert, plus a delivery grace), or until all are
// settled; Ctrl-C ends the wait and the run is scored with what came.
boost::asio::awaitable<RunResult> runAndListen(boost::asio::io_context& io, const Playbook& pb, const Plan& plan,
                                               const Inventory& inv, boost::asio::ssl::context& tls,
                                               RunnerOptions options, const AlertSources* sources) {
  RunResult r = co_await executePlan(io, pb, plan, inv, tls, options);
  if (!sources || !sources->any()) co_return r;
  if (sources->webhook) r.alertSources.push_back("alertmanager webhook " + sources->webhook->endpoint());
  if (sources->poller) r.alertSources.push_back("prometheus " + sources->poller->url());
  // Alertmanager notifies after its group wait and Prometheus is polled every 500 ms: an
  // alert that fired by the deadline may arrive a little later.
  constexpr int64_t kDeliveryGraceNs = 5'000'000'000;
  constexpr int64_t kMaxWaitNs = 600'000'000'000;
  const int64_t due = detectionDeadlineNs(pb, r);
  const int64_t until = std::min(due + kDeliveryGraceNs, timelineNow(r) + kMaxWaitNs);
  bool interrupted = false;
  boost::asio::steady_timer timer(io);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    interrupted = true;
    timer.cancel();
  });
  bool said = false;
  while (due > 0 && !interrupted && timelineNow(r) < until) {
    sources->collect(r);
    r.alertsUntilNs = timelineNow(r);
    DetectionScore d = scoreDetection(r, pb);
    size_t open = size_t(std::count_if(d.outcomes.begin(), d.outcomes.end(), [](const auto& o) { return !settled(o); }));
    if (open == 0) break;
    if (!said && options.progress) {
      std::fprintf(stderr, "waiting up to %.0fs for the monitoring's alerts (%zu detection(s) open; Ctrl-C stops)\n",
                   double(until - timelineNow(r)) / 1e9, open);
      said = true;
    }
    timer.expires_after(std::chrono::milliseconds(250));
    boost::system::error_code ec;
    co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  }
  signals.cancel();
  sources->collect(r);
  r.alertsUntilNs = timelineNow(r);
  if (sources->poller)
    if (auto t = sources->poller->timing()) r.alertTiming = *t;
  r.alertErrors = sources->errors();
  if (sources->webhook) sources->webhook->stop();
  if (sources->poller) sources->poller->stop();
  co_return r;
}

// "search: boundary of steps.flap.down in [200ms, 3s] for longest_stall <= 2s (job), budget 12".
std::string describeSearch(const Playbook& pb) {
  const SearchSpec& s = *pb.search;
  std::string params;
  for (const auto& p : s.params)
    params += (params.empty() ? "" : ", ") + p.path + " in [" + searchValueText(p, p.range.lo) + ", " +
              searchValueText(p, p.range.hi) + "]";
  if (s.kind == SearchKind::boundary)
    return "search: boundary of " + params + " for " + pb.scenarios.front().expectations.at(s.expectation).describe() +
           ", failing " + (s.failsAbove ? "above" : "below") + ", budget " + std::to_string(s.budget) + " trials";
  return "search: worst " + s.metric + " over " + params + ", budget " + std::to_string(s.budget) + " trials";
}

}  // namespace

int cmdValidate(const std::vector<std::string>& playbooks, const std::string& inventory) {
  std::optional<Inventory> inv;
  if (!inventory.empty()) {
    auto i = loadInventory(inventory);
    if (!i) return fail(i.error().message);
    inv = std::move(*i);
  }
  int bad = 0;
  for (const auto& path : playbooks) {
    auto pb = loadPlaybook(path);
    if (!pb) {
      // Every error of the file, one per line by position (the parser goes on past each).
      const std::string& m = pb.error().message;
      size_t n = 0;  // lines that are errors, not notes of what they kept from being checked
      for (size_t at = 0; at < m.size();) {
        size_t end = std::min(m.find('\n', at), m.size());
        if (m.compare(at, end - at, "") != 0 && m.substr(at, end - at).find(": note: ") == std::string::npos) n++;
        at = end + 1;
      }
      std::fprintf(stderr, "%s\n%s: %zu error%s\n", m.c_str(), path.c_str(), n, n == 1 ? "" : "s");
      bad++;
      continue;
    }
    size_t steps = 0, expects = 0, requires_ = 0, trials = 0, detects = 0;
    bool perTarget = false;  // a target sweep's trials are known once bound to an inventory
    for (const auto& sc : pb->scenarios) {
      steps += sc.steps.size();
      expects += sc.expectations.size();
      requires_ += sc.requirements.size();
      detects += sc.detections.size();
      perTarget = perTarget || (sc.sweep && sc.sweep->overTargets);
      trials += (sc.sweep && !sc.sweep->overTargets ? sc.sweep->values.size() : 1) * size_t(pb->repeat);
    }
    std::string extra;
    if (requires_) extra = ", " + std::to_string(requires_) + " condition(s)";
    if (detects) extra += ", " + std::to_string(detects) + " detection(s)";
    if (inv) {
      auto plan = resolvePlan(*pb, *inv);
      if (!plan) {
        std::fprintf(stderr, "%s\n", plan.error().message.c_str());
        bad++;
        continue;
      }
      size_t injections = 0;
      for (const auto& t : plan->trials) injections += t.faults.size();
      trials = plan->trials.size();
      perTarget = false;
      extra += ", " + std::to_string(injections) + " injection(s) on " + inventory;
    }
    if (pb->search) extra += "; " + describeSearch(*pb);
    std::printf("%s: ok: '%s', %zu scenario(s), %s trial(s), %zu step(s) [%s], %zu expectation(s)%s\n",
                path.c_str(), pb->name.c_str(), pb->scenarios.size(),
                perTarget ? "one per target of its sweep:" : std::to_string(trials).c_str(), steps,
                joined(pb->faultKinds()).c_str(), expects, extra.c_str());
  }
  return bad ? kExitError : kExitOk;
}

// What differs between the lab PB states it was bounded on ([lab]) and the lab INVENTORY belongs
// to (its lab.json beside it), one line each; nothing when either is unknown (a real cluster).
std::vector<std::string> labMismatch(const Playbook& pb, const std::string& inventory) {
  std::vector<std::string> out;
  if (!pb.lab.present) return out;
  const std::string dir = std::filesystem::path(inventory).parent_path().string();
  auto st = lab::loadState(dir.empty() ? "." : dir);
  if (!st) return out;
  auto rate = [](double bps) {  // as `lab up --rate` takes it: 600M, 1G
    char r[32];
    if (bps >= 1e9)
      std::snprintf(r, sizeof r, "%gG", bps / 1e9);
    else
      std::snprintf(r, sizeof r, "%gM", bps / 1e6);
    return std::string(r);
  };
  std::vector<std::string> diffs;
  if (pb.lab.nodes && int(st->nodes.size()) != pb.lab.nodes)
    diffs.push_back(std::to_string(st->nodes.size()) + " nodes, not " + std::to_string(pb.lab.nodes));
  if (pb.lab.rateBps > 0 && st->rateBps > 0 && std::fabs(st->rateBps - pb.lab.rateBps) > 1)
    diffs.push_back("ports at " + rate(st->rateBps) + ", not " + rate(pb.lab.rateBps));
  if (!pb.lab.ports.empty() && !st->ports.empty() && st->ports != pb.lab.ports)
    diffs.push_back(st->ports + " ports, not " + pb.lab.ports);
  if (diffs.empty()) return out;
  std::string msg = "'" + pb.name + "' was bounded on a lab of";
  if (pb.lab.nodes) msg += " " + std::to_string(pb.lab.nodes) + " nodes";
  if (pb.lab.rateBps > 0) msg += " at " + rate(pb.lab.rateBps);
  if (!pb.lab.ports.empty()) msg += " with " + pb.lab.ports + " ports";
  msg += " (its [lab]); the lab in " + (dir.empty() ? std::string(".") : dir) + " has ";
  for (size_t i = 0; i < diffs.size(); i++) msg += (i ? "; " : "") + diffs[i];
  msg += ": its scores may not hold there (bring the lab up as stated, e.g. `rdmachaos lab up";
  if (pb.lab.nodes) msg += " --nodes " + std::to_string(pb.lab.nodes);
  if (pb.lab.rateBps > 0) msg += " --rate " + rate(pb.lab.rateBps);
  if (!pb.lab.ports.empty() && pb.lab.ports != "tap") msg += " --ports " + pb.lab.ports;
  msg += "`)";
  out.push_back(msg);
  return out;
}

// Run as written, a search playbook would run one arbitrary point of its space.
static std::string searchRefusal(const Playbook& pb, const RunOptions& o) {
  return o.playbook + ":" + std::to_string(pb.search->pos.line) + ":" + std::to_string(pb.search->pos.column) + ": '" +
         pb.name + "' has a [search] table: search it with `rdmachaos search " + o.playbook + " --inventory " +
         o.inventory + "`, or run one point of it without [search] (a search's reproducer.toml is one)";
}

int cmdRun(const RunOptions& o) {
  auto pb = loadPlaybook(o.playbook);
  if (!pb) return fail(pb.error().message);
  if (pb->search) return fail(searchRefusal(*pb, o));
  auto inv = loadInventory(o.inventory);
  if (!inv) return fail(inv.error().message);
  auto plan = resolvePlan(*pb, *inv);
  if (!plan) return fail(plan.error().message);
  for (const auto& w : labMismatch(*pb, o.inventory)) std::fprintf(stderr, "WARNING: %s\n", w.c_str());
  if (!o.metrics.empty())
    if (auto ep = metrics::parseEndpoint(o.metrics); !ep) return fail("--metrics: " + ep.error().message);
  auto timeout = parseDuration(o.timeout);
  if (!timeout || timeout->count() <= 0)
    return fail("--timeout '" + o.timeout + "': " + (timeout ? std::string("must be positive") : timeout.error().message));
  std::chrono::milliseconds ncclTestsWait{0};
  if (!o.ncclTestsOutput.empty()) {
    if (auto ok = checkNcclTestsOutputPath(o.ncclTestsOutput); !ok) return fail("--nccl-tests-output: " + ok.error().message);
    auto w = parseDuration(o.ncclTestsWait);
    if (!w || w->count() < 0)
      return fail("--nccl-tests-wait '" + o.ncclTestsWait + "': " + (w ? std::string("must not be negative") : w.error().message));
    ncclTestsWait = std::chrono::duration_cast<std::chrono::milliseconds>(*w);
  }
  // Refused before anything runs or is written: a run never mixes its reports with another's.
  if (auto ok = checkReportDir(o.reportDir, o.force); !ok) return fail(ok.error().message);
  if (o.dryRun) {
    std::printf("%s", formatPlan(*pb, *plan).c_str());
    return kExitOk;
  }
  std::optional<BaselineCheck> baseline;  // checked now: bad input stops the run before it starts
  if (!o.baseline.empty() || !o.baselineRules.empty()) {
    auto b = loadBaselineCheck(o.baseline, o.baselineRules);
    if (!b) return fail(b.error().message);
    baseline = std::move(*b);
  }
  auto tls = tls::makeClientContext(inv->tls);
  if (!tls) return fail(tls.error().message);
  // Bound before any agent is touched: a port in use stops the run with nothing changed.
  std::unique_ptr<metrics::Exporter> exporter;
  if (!o.metrics.empty()) {
    auto e = metrics::Exporter::start(o.metrics);
    if (!e) return fail("--metrics: " + e.error().message);
    exporter = std::move(*e);
    std::fprintf(stderr, "serving the live run's metrics for Prometheus on port %u (%s, path /metrics)\n",
                 unsigned(exporter->port()), o.metrics.c_str());
  }
  // The monitoring under test, listened to before any agent is touched: a port in use or a
  // bad URL stops the run with nothing changed.
  boost::asio::io_context io;
  AlertSources sources;
  if (!o.alertmanagerTokenFile.empty() && o.alertmanagerWebhook.empty())
    return fail("--alertmanager-token-file needs --alertmanager-webhook ADDR:PORT");
  if (!o.alertmanagerWebhook.empty()) {
    alerts::WebhookReceiverOptions wo;
    if (!o.alertmanagerTokenFile.empty()) {
      auto token = alerts::readTokenFile(o.alertmanagerTokenFile);
      if (!token) return fail("--alertmanager-token-file: " + token.error().message);
      wo.bearerToken = *token;
    } else if (!alerts::WebhookReceiver::loopbackOnly(o.alertmanagerWebhook)) {
      std::fprintf(stderr,
                   "WARNING: --alertmanager-webhook %s is reachable beyond this host and takes posts without a "
                   "token: anyone who reaches it can post alerts and fake detections. Add "
                   "--alertmanager-token-file FILE (and credentials_file in Alertmanager's webhook config)\n",
                   o.alertmanagerWebhook.c_str());
    }
    auto w = alerts::WebhookReceiver::start(io, o.alertmanagerWebhook, std::move(wo));
    if (!w) return fail("--alertmanager-webhook: " + w.error().message);
    sources.webhook = std::move(*w);
    std::fprintf(stderr, "receiving Alertmanager's webhook posts on %s (point a webhook_configs url at http://%s/)\n",
                 sources.webhook->endpoint().c_str(), sources.webhook->endpoint().c_str());
  }
  if (!o.prometheusTokenFile.empty() && o.prometheus.empty())
    return fail("--prometheus-token-file needs --prometheus URL");
  if (!o.prometheus.empty()) {
    alerts::PrometheusPollerOptions po;
    if (!o.prometheusTokenFile.empty()) {
      auto token = alerts::readTokenFile(o.prometheusTokenFile);
      if (!token) return fail("--prometheus-token-file: " + token.error().message);
      po.bearerToken = *token;
    }
    auto p = alerts::PrometheusPoller::start(io, o.prometheus, std::move(po));
    if (!p) return fail("--prometheus: " + p.error().message);
    sources.poller = std::move(*p);
    std::fprintf(stderr, "polling %s for alerts every 500ms\n", sources.poller->url().c_str());
  }
  if (pb->hasDetections() && !sources.any())
    std::fprintf(stderr, "note: the playbook's [[detect]] expectations are not scored without --alertmanager-webhook "
                         "ADDR:PORT or --prometheus URL\n");
  auto reports = prepareReportDir(o.reportDir, pb->name, o.force, time(nullptr));
  if (!reports) return fail(reports.error().message);
  const std::string& dir = reports->path;

  std::fprintf(stderr, "running '%s': %zu trial(s), %.1fs, workload %s on %zu node(s); reports in %s\n",
               pb->name.c_str(), plan->trials.size(), plan->durationNs / 1e9,
               std::string(pb->workload.kind->name).c_str(), plan->workloadNodes.size(), dir.c_str());
  RunResult result;
  boost::asio::co_spawn(io,
                        runAndListen(io, *pb, *plan, *inv, *tls,
                                     RunnerOptions{.connectTimeout =
                                                       std::chrono::duration_cast<std::chrono::milliseconds>(*timeout),
                                                   .metrics = exporter.get()},
                                     &sources),
                        [&](std::exception_ptr e, RunResult r) {
                          abortOnException(e, r);
                          result = std::move(r);
                          // Listening ends with the run, also when it ended by an exception:
                          // io.run() returns once nothing is left on it.
                          if (sources.webhook) sources.webhook->stop();
                          if (sources.poller) sources.poller->stop();
                        });
  io.run();

  analysePackets(result, inv->switchControl);
  if (!o.ncclTestsOutput.empty())
    result.ncclTests = readNcclTestsOutput(o.ncclTestsOutput, ncclTestsWait, [&](int left) {
      std::fprintf(stderr, "waiting for nccl-tests' summary in %s (%d s left)\n", o.ncclTestsOutput.c_str(), left);
    });
  Scores scores = score(result, *pb);
  json doc = makeResultDocument(result, *pb, scores);
  // Compared before the reports are written: a target sweep's table carries the comparison.
  std::optional<CompareOutcome> against;
  std::string againstError;
  if (baseline && result.abortReason.empty()) {
    if (auto c = compareWithBaseline(*baseline, doc)) against = std::move(*c);
    else againstError = c.error().message;
  }
  const std::string resultPath = dir + "/result.json", htmlPath = dir + "/report.html",
                    junitPath = dir + "/junit.xml";
  std::vector<std::pair<std::string, std::string>> files = {
      {"result.json", doc.dump(2) + "\n"}, {"report.html", renderHtml(doc)}, {"junit.xml", renderJunit(doc)}};
  for (auto& p : result.packets)
    if (!p.captureFile.empty()) files.emplace_back(p.captureFile, std::move(p.captureBytes));
  if (auto w = publishReports(*reports, files); !w)
    return fail(w.error().message);
  removeReadCaptures(result);
  std::printf("%s", renderText(doc).c_str());
  std::printf("\nreport: %s\nresult: %s\njunit:  %s\n", htmlPath.c_str(), resultPath.c_str(),
              junitPath.c_str());
  if (!result.abortReason.empty()) return kExitError;
  if (baseline) {
    if (!against) return fail(againstError);
    return foldBaseline(*baseline, *against, doc, dir, exitCodeFor(scores.outcome));
  }
  return exitCodeFor(scores.outcome);
}

int cmdReport(const ReportOptions& o) {
  auto doc = loadResultDocument(o.result);
  if (!doc) return fail(doc.error().message);
  if (!o.html.empty())
    if (auto w = writeFileAtomic(o.html, renderHtml(*doc)); !w) return fail(w.error().message);
  if (!o.junit.empty())
    if (auto w = writeFileAtomic(o.junit, renderJunit(*doc)); !w) return fail(w.error().message);
  std::printf("%s", renderText(*doc).c_str());
  if (!o.html.empty()) std::fprintf(stderr, "wrote %s\n", o.html.c_str());
  if (!o.junit.empty()) std::fprintf(stderr, "wrote %s\n", o.junit.c_str());
  const json& oc = (*doc)["outcome"];
  int code = oc.value("exit_code", kExitError);
  return code == kExitOk || code == kExitFailed ? code : kExitError;
}

}  // namespace rc::controller
