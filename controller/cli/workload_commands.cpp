// rdmachaos workload: start a collective on the selected nodes, print a live line per second
// (busbw, iteration p50/p99), then a summary (or everything as JSON).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <set>

#include "common/clock.hpp"
#include "common/tls.hpp"
#include "common/units.hpp"
#include "controller/cli/commands.hpp"
#include "controller/fleet/fleet.hpp"
#include "controller/fleet/inventory.hpp"
#include "controller/run/workload_run.hpp"
#include "workload/kinds.hpp"

namespace rc::controller {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

int failWith(const std::string& m) {
  std::fprintf(stderr, "rdmachaos: %s\n", m.c_str());
  return kExitError;
}

Result<Duration> positive(const std::string& text, const std::string& flag) {
  auto d = parseDuration(text);
  if (!d) return makeError(flag + ": " + d.error().message);
  if (d->count() <= 0) return makeError(flag + " must be greater than zero");
  return std::chrono::duration_cast<Duration>(*d);
}

std::string gbs(double bytesPerSecond) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f GB/s", bytesPerSecond / 1e9);
  return b;
}

std::string msText(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fms", double(ns) / 1e6);
  return b;
}

struct Run {
  WorkloadSpec spec;
  Duration timeout;
  std::vector<const Node*> targets;
  Inventory inventory;
};

asio::awaitable<int> workloadMain(asio::io_context& io, asio::ssl::context& tls, Run run,
                                  bool asJson) {
  Fleet fleet(io, tls, newControllerId());
  ConnectProgressFn progress = stderrConnectProgress();  // not a temporary in co_await (GCC 12)
  co_await fleet.connect(run.targets, run.timeout, 8, progress);
  if (!fleet.errors().empty()) {
    for (const auto& [node, err] : fleet.errors())
      std::fprintf(stderr, "rdmachaos: %s: %s\n", node.c_str(), err.c_str());
    for (auto& c : fleet.clients()) c->close();
    co_return kExitError;
  }
  std::vector<std::shared_ptr<AgentClient>> ranks;
  for (const Node* n : run.targets) ranks.push_back(fleet.find(n->name));
  for (auto& c : ranks) c->startHeartbeats();
  std::string ctl = newControllerId();
  std::string id = "wl-" + ctl.substr(ctl.size() - 4) + "-" + std::to_string(wallNs() % 100000);
  WorkloadRun wr(io, ranks, run.spec, id);
  auto started = co_await wr.start(run.timeout);
  if (!started) {
    for (auto& c : ranks) c->close();
    co_return failWith(started.error().message);
  }
  const auto& s = wr.series();
  if (!asJson)
    std::fprintf(stderr, "%s of %s on %d nodes (ranks: %s%s), %s; Ctrl-C stops\n", s.kind.c_str(),
                 formatSize(s.size).c_str(), s.world, ranks[0]->node().name.c_str(),
                 s.world > 1 ? ", ..." : "",
                 run.spec.iterations ? (std::to_string(run.spec.iterations) + " iterations").c_str()
                                     : formatDuration(std::chrono::duration_cast<Nanos>(run.spec.duration)).c_str());

  bool interrupted = false;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) interrupted = true;
  });
  // Live line once a second, on the controller's timeline relative to the common start.
  Duration limit = (run.spec.iterations ? 24h : run.spec.duration) + 30s;
  auto deadline = std::chrono::steady_clock::now() + limit;
  int64_t lastLine = s.startNs;
  asio::steady_timer tick(io);
  while (!wr.allEnded() && !interrupted && std::chrono::steady_clock::now() < deadline) {
    tick.expires_after(200ms);
    boost::system::error_code ec;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    bool lost = false;
    for (auto& c : ranks) lost = lost || !c->connected();
    if (lost) break;
    int64_t now = wallNs();
    if (now - lastLine >= 1'000'000'000 && now > s.startNs) {
      // The series are on the run timeline: t = 0 at the common start.
      const int64_t from = lastLine - s.startNs, to = now - s.startNs;
      auto st = workloadStats(s, from, to);
      double rx = 0;
      for (const auto& n : s.nodes)
        for (const auto& b : n.timeline.bins())
          if (b.tNs >= from && b.tNs < to) rx += b.bytes;
      double secs = double(now - lastLine) / 1e9;
      if (!asJson)
        std::printf("%6.1fs  busbw %s  algbw %s  iter p50 %s p99 %s  (%zu iterations)  rx %s\n",
                    double(now - s.startNs) / 1e9, gbs(st.busbw).c_str(), gbs(st.algbw).c_str(),
                    msText(st.p50Ns).c_str(), msText(st.p99Ns).c_str(), st.count,
                    formatBitRate(rx * 8 / secs).c_str());
      std::fflush(stdout);
      lastLine = now;
    }
  }
  if (!wr.allEnded()) {
    if (interrupted) std::fprintf(stderr, "\ninterrupted: stopping the workload\n");
    co_await wr.stop(run.timeout);
  }
  bool all = co_await wr.wait(15s);
  signals.cancel();
  for (auto& c : ranks) c->close();

  auto st = workloadStats(s, INT64_MIN, INT64_MAX);
  bool ok = all;
  for (const auto& n : s.nodes)
    ok = ok && n.endReason == "completed" && n.verified && n.counters.corruptions == 0;
  if (asJson) {
    json out = toJson(s);
    out["summary"] = {{"iterations", st.count},   {"p50_ns", st.p50Ns},
                      {"p99_ns", st.p99Ns},       {"max_ns", st.maxNs},
                      {"algbw_Bps", st.algbw},    {"busbw_Bps", st.busbw},
                      {"ok", ok},                 {"all_ended", all}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("summary: %s  busbw %s  algbw %s  iteration p50 %s p99 %s max %s\n",
                s.kind.c_str(), gbs(st.busbw).c_str(), gbs(st.algbw).c_str(),
                msText(st.p50Ns).c_str(), msText(st.p99Ns).c_str(), msText(st.maxNs).c_str());
    for (const auto& n : s.nodes)
      std::printf("  %-8s rank %d: %s, %lld iterations, %lld errors, %lld corruptions, "
                  "%lld reconnects, result %s%s\n",
                  n.node.c_str(), n.rank, n.ended ? n.endReason.c_str() : "no end reported",
                  (long long)n.counters.iterations, (long long)n.counters.errors,
                  (long long)n.counters.corruptions, (long long)n.counters.reconnects,
                  n.verified ? "verified" : "WRONG",
                  n.error.empty() ? "" : (" — " + n.error).c_str());
  }
  if (interrupted) co_return kExitInterrupted;
  co_return ok ? kExitOk : kExitFailed;
}

}  // namespace

int cmdWorkload(const WorkloadOptions& o) {
  Run run;
  run.spec.kind = o.kind;
  // An unknown kind is refused by the run, with the known ones.
  const workload::Kind* kind = workload::findKind(o.kind);
  const workload::External* ext = kind ? kind->external : nullptr;
  if (!o.test.empty() && !ext) {
    const std::string names = workload::externalKindNames();
    return failWith("--test names a " + names + " program: add --kind " + names);
  }
  if (ext) {
    const std::string name(kind->name);
    run.spec.perftest = o.test.empty() ? std::string(ext->defaultProgram) : o.test;
    // A kind without a program to name (mpi: the agent's [mpi] program runs) takes no --test.
    const bool named = !run.spec.perftest.empty();
    if (named && !ext->knowsProgram(run.spec.perftest) && ext->programIs == "program")
      return failWith("--test '" + o.test + "' is not a " + name + " program this tool runs (known: " + ext->programs() + ")");
    if ((named || !o.test.empty()) && !ext->knowsProgram(run.spec.perftest))
      return failWith("--test '" + o.test + "' is not a " + name + " " + std::string(ext->programIs) + " (" +
                      ext->programs() + ")");
    if (ext->checkTransport) {
      if (auto t = ext->checkTransport(o.transport); !t) return failWith("--transport: " + t.error().message);
    } else if (o.transport != "tcp") {
      return failWith("--kind " + name + (ext->rdma ? " always runs over RDMA" : " runs over the job's own transport") +
                      ": leave --transport out");
    }
    if (o.iterations) return failWith("--kind " + name + " runs for a duration: give --for");
    if (o.qpRetryCnt != 7 || o.qpRnrRetry != 7)
      return failWith("--qp-retry-cnt and --qp-rnr-retry are not " + name + " options (--qp-timeout is its " +
                      std::string(ext->qpTimeoutIs) + ")");
    if (o.streams > ext->maxStreams)
      return failWith("--streams must be 1 to " + std::to_string(ext->maxStreams) + " with --kind " + name + " (" +
                      std::string(ext->streamsAre) + ")");
  }
  auto size = parseSize(o.size);
  if (!size) return failWith("--size: " + size.error().message);
  run.spec.size = *size;
  if (o.iterations) {
    if (!o.forDuration.empty()) return failWith("give either --for or --iterations, not both");
    run.spec.iterations = o.iterations;
  } else {
    if (o.forDuration.empty()) return failWith("--for DURATION or --iterations N is required");
    auto d = positive(o.forDuration, "--for");
    if (!d) return failWith(d.error().message);
    if (*d > 24h) return failWith("--for must be at most 24h");
    run.spec.duration = *d;
  }
  if (o.streams < 1 || o.streams > 64) return failWith("--streams must be 1 to 64");
  run.spec.streams = o.streams;
  if (!(ext && ext->checkTransport) && o.transport != "tcp" && o.transport != "verbs")
    return failWith("--transport must be tcp or verbs, not '" + o.transport + "'");
  if (o.transport == "verbs" && o.streams > 16)
    return failWith("--streams must be 1 to 16 with --transport verbs (QPs per peer)");
  run.spec.transport = o.transport;
  if (o.dscp < 0 || o.dscp > 63) return failWith("--dscp must be 0 to 63");
  if (o.qpTimeout < 0 || o.qpTimeout > 31) return failWith("--qp-timeout must be 0 to 31 (4.096 us x 2^N per try)");
  if (o.qpRetryCnt < 0 || o.qpRetryCnt > 7 || o.qpRnrRetry < 0 || o.qpRnrRetry > 7)
    return failWith("--qp-retry-cnt and --qp-rnr-retry must be 0 to 7");
  if (o.transport != "verbs" && !ext && (o.qpTimeout != 14 || o.qpRetryCnt != 7 || o.qpRnrRetry != 7))
    return failWith("--qp-timeout, --qp-retry-cnt and --qp-rnr-retry set verbs QP attributes: add --transport verbs");
  run.spec.qp = {o.dscp, o.qpTimeout, o.qpRetryCnt, o.qpRnrRetry};
  run.spec.incastReceiver = o.receiver;
  run.spec.fanIn = o.fanIn;
  auto bin = positive(o.bin, "--bin");
  if (!bin) return failWith(bin.error().message);
  run.spec.bin = *bin;
  auto rt = positive(o.reconnectTimeout, "--reconnect-timeout");
  if (!rt) return failWith(rt.error().message);
  run.spec.reconnectTimeout = *rt;
  if (o.port < 1 || o.port > 65535) return failWith("--port must be 1 to 65535");
  run.spec.port = uint16_t(o.port);
  run.spec.checksum = !o.noChecksum;
  auto timeout = positive(o.timeout, "--timeout");
  if (!timeout) return failWith(timeout.error().message);
  run.timeout = *timeout;

  auto inv = loadInventory(o.inventory);
  if (!inv) return failWith(inv.error().message);
  run.inventory = std::move(*inv);
  std::set<std::string> seen;
  for (const auto& sel : o.nodes.empty() ? std::vector<std::string>{"all"} : o.nodes) {
    auto picked = run.inventory.select(sel);
    if (!picked) return failWith(picked.error().message);
    for (auto* n : *picked)
      if (seen.insert(n->name).second) run.targets.push_back(n);
  }
  auto tls = tls::makeClientContext(run.inventory.tls);
  if (!tls) return failWith(tls.error().message);

  asio::io_context io;
  int code = kExitError;
  // run.targets point into run.inventory.nodes, whose elements a vector move keeps in place.
  auto body = [&]() { return workloadMain(io, *tls, std::move(run), o.json); };
  asio::co_spawn(io, body(), [&](std::exception_ptr e, int rc) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "rdmachaos: internal error: %s\n", ex.what());
      }
      return;
    }
    code = rc;
  });
  io.run();
  return code;
}

}  // namespace rc::controller
