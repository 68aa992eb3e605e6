// rdmachaos-agent: the per-node daemon. Reverts anything journaled, then serves controllers.
#include <signal.h>
#include <time.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <optional>
#include <memory>
#include <cstdio>

#include "agent/agent_metrics.hpp"
#include "agent/link_watch.hpp"
#include "agent/observe_intake.hpp"
#include "agent/capabilities.hpp"
#include "agent/config.hpp"
#include "agent/fault_manager.hpp"
#include "agent/privilege.hpp"
#include "agent/server.hpp"
#include "agent/workload_manager.hpp"
#include "common/fd_reserve.hpp"
#include "common/log.hpp"
#include "common/tls.hpp"
#include "common/units.hpp"
#include "metrics/exporter.hpp"
#include "rdmachaos_config.h"
#include "workload/mpi_launch.hpp"

namespace {

using Replay = rc::agent::FaultManager::Replay;

// The signals that end the agent, while it only retries reverts (holdLeftovers,
// --replay-only): a flag the waits below look at (the event loop's signal_set takes over when
// the agent serves). A plain handler rather than a blocked mask: fault threads and the
// commands they run would inherit the mask.
volatile sig_atomic_t endingSignal = 0;
void onEndingSignal(int sig) { endingSignal = sig; }
void catchEndingSignals() {
  struct sigaction sa{};
  sa.sa_handler = onEndingSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);
}
void sleepTick(std::chrono::milliseconds ms) {
  timespec t{time_t(ms.count() / 1000), long(ms.count() % 1000) * 1'000'000};
  ::nanosleep(&t, nullptr);  // a signal cuts it short
}

// The agent cannot serve (a configuration error, TLS material missing, a port taken) but the
// replay left faults it could not revert: exiting would leave them applied where nothing
// restarts the agent (Slurm, a shell, a unit that gave up). So it keeps retrying them (and
// serves nothing) until none is left or a signal comes, then exits with CODE.
int holdLeftovers(rc::agent::FaultManager& manager, int code) {
  auto left = [&] { return manager.status()["unreverted"].size(); };
  if (left() == 0) return code;
  rc::log::error("{} journaled fault(s) are still applied: retrying their reverts until they "
                 "succeed, then exiting (exit {}); the agent serves no controller meanwhile",
                 left(), code);
  catchEndingSignals();
  while (left() > 0) {
    if (endingSignal != 0) {
      rc::log::error("signal {}: exiting with {} journaled fault(s) not reverted (the next start "
                     "replays them; see `rdmachaos-agent --replay-only`)",
                     int(endingSignal), left());
      return code;
    }
    // No event says "the last leftover is reverted": the manager's status is read each tick.
    sleepTick(std::chrono::milliseconds(250));
  }
  rc::log::info("every journaled fault is reverted; exiting (exit {})", code);
  return code;
}

// The same with a manager made for the purpose (the start failed before the real one).
int holdLeftovers(const Replay& replay, rc::Journal journal, const rc::faults::Policy& policy, int code) {
  if (replay.pending.empty()) return code;
  rc::agent::FaultManager manager(policy, std::move(journal),
                                  std::chrono::milliseconds(rc::proto::kDefaultMaxFaultLifetimeMs),
                                  std::chrono::seconds(5));
  manager.adoptReplay(replay);
  return holdLeftovers(manager, code);
}

// --replay-only: reverts what the journal holds, retrying failures for up to RETRY_FOR, and
// says by name what is left. Exit 0: nothing applied is left; 1: something is (or an entry
// was quarantined: what it changed is unknown).
int replayOnlyEnd(rc::Journal& journal, const rc::faults::Policy& policy, Replay replay,
                  std::chrono::milliseconds retryFor) {
  std::vector<std::string> quarantined = replay.quarantined;
  auto until = std::chrono::steady_clock::now() + retryFor;
  catchEndingSignals();
  while (!replay.unrevertable.empty() && std::chrono::steady_clock::now() < until) {
    sleepTick(std::chrono::milliseconds(1000));
    if (endingSignal != 0) break;
    replay = rc::agent::FaultManager::replayJournal(journal, policy);
    for (const auto& line : replay.lines) rc::log::warn("{}", line);
    quarantined.insert(quarantined.end(), replay.quarantined.begin(), replay.quarantined.end());
  }
  if (replay.pending.empty() && quarantined.empty()) {
    std::printf("rdmachaos-agent: journal '%s': no fault left applied%s\n", journal.dir().c_str(),
                journal.readOnly() && journal.count() > 0
                    ? " (the journal is read-only: its reverted entries stay until it is writable)"
                    : "");
    return 0;
  }
  std::fprintf(stderr, "rdmachaos-agent: journal '%s': %zu fault(s) left:\n", journal.dir().c_str(),
               replay.pending.size() + quarantined.size());
  for (const auto& p : replay.pending)
    std::fprintf(stderr, "  '%s' (%s) NOT reverted: %s\n", p.id.c_str(), p.kind->name.c_str(),
                 p.error.c_str());
  for (const auto& id : quarantined)
    std::fprintf(stderr, "  '%s' unreadable, moved to %s/quarantine: check what it changed by hand\n",
                 id.c_str(), journal.dir().c_str());
  return 1;
}

// What the command line asks for.
struct AgentOptions {
  std::string configPath;
  std::string stateDir;  // --state-dir; empty: the config's, or the default place
  bool replayOnly = false;
  std::chrono::milliseconds retryFor{};  // with --replay-only
};

// Reads the command line into OPTIONS (and the log level). Returns the exit code when the agent
// ends here (--help, --version, an option refused), none when it goes on.
std::optional<int> parseAgentOptions(int argc, char** argv, AgentOptions& options) {
  CLI::App app{"rdmachaos-agent: injects faults on this node for the rdmachaos controller"};
  std::string retryForText = "10s";
  bool verbose = false;
  app.add_option("--config", options.configPath, "agent configuration (TOML)");
  app.add_option("--state-dir", options.stateDir,
                 "the journal's directory, instead of the config's state_dir (without either: " +
                     std::string(rc::agent::kDefaultStateDir) + ")");
  app.add_flag("--replay-only", options.replayOnly,
               "revert every fault the journal holds and exit: 0 if none is left applied, 1 if "
               "one is (named on stderr), 3 if a running agent holds the journal");
  app.add_option("--retry-for", retryForText, "with --replay-only: how long failed reverts are retried")
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.set_version_flag("--version", RDMACHAOS_VERSION);
  CLI11_PARSE(app, argc, argv);
  if (options.configPath.empty() && !(options.replayOnly && !options.stateDir.empty())) {
    std::fprintf(stderr, "rdmachaos-agent: --config is required (or --replay-only --state-dir DIR)\n");
    return 2;
  }
  auto retryFor = rc::parseDuration(retryForText);
  if (!retryFor || *retryFor > std::chrono::hours(1)) {
    std::fprintf(stderr, "rdmachaos-agent: --retry-for '%s' must be a duration of at most 1h, e.g. \"10s\"\n",
                 retryForText.c_str());
    return 2;
  }
  options.retryFor = std::chrono::duration_cast<std::chrono::milliseconds>(*retryFor);
  if (verbose) rc::log::setLevel(rc::log::Level::debug);
  return std::nullopt;
}

// The process's settings, before anything else runs.
void prepareAgentProcess() {
  ::signal(SIGPIPE, SIG_IGN);
  // Sessions, incast flows and workload connections all take descriptors; the soft limit
  // (1024 by default) is raised to the hard one, so that a busy node does not run out while
  // the fabric is changed.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // And some kept back for reverts (a netlink socket, a control socket, a command's pipes):
  // released while a revert runs; new connections are refused while they cannot be refilled.
  rc::fdReserve().setWanted(16);
}

// What the journal's replay needs (its place and the policy's reverts), and the configuration
// unless it is refused.
struct AgentStartup {
  std::optional<rc::agent::Config> config;
  std::optional<rc::Error> configError;
  std::string stateDir;
  rc::faults::Policy replayPolicy;
};

// Only the journal's place and the policy's reverts are needed for the replay: from the config,
// or (when it is refused) from what of it can be read, or --state-dir, or the default place.
AgentStartup loadAgentStartup(const AgentOptions& options) {
  AgentStartup out;
  out.stateDir = options.stateDir;
  if (options.configPath.empty()) return out;
  auto c = rc::agent::loadConfig(options.configPath);
  if (c) {
    out.config = std::move(*c);
    rc::log::setComponent("agent " + out.config->node);
    if (out.stateDir.empty()) out.stateDir = out.config->stateDir;
    out.replayPolicy = rc::agent::configuredPolicy(*out.config);
    return out;
  }
  out.configError = c.error();
  rc::log::error("{}", c.error().message);
  if (auto s = rc::agent::loadReplaySettings(options.configPath)) {
    if (!s->node.empty()) rc::log::setComponent("agent " + s->node);
    if (out.stateDir.empty()) out.stateDir = s->stateDir;
    out.replayPolicy = s->policy;
    for (const auto& note : s->notes) rc::log::warn("replay settings: {}", note);
  } else if (out.stateDir.empty()) {
    out.stateDir = rc::agent::kDefaultStateDir;
    rc::log::warn("{}: replaying the journal of the default place", s.error().message);
  }
  if (!options.replayOnly)
    rc::log::warn("the configuration is refused, but the journal in '{}' is replayed first", out.stateDir);
  return out;
}

// With capabilities but not root, the config and the journal are the agent's orders: they
// must be files only root (or the agent's own user) can change, checked before the replay
// acts on an entry (a forged one "reverts" a link down). Logs why not.
bool agentFilesTrusted(const AgentOptions& options, const AgentStartup& startup,
                       const rc::Journal& journal) {
  std::vector<rc::agent::TrustedPath> paths;
  if (!options.configPath.empty()) {
    paths.push_back(rc::agent::statPath("config", options.configPath));
    auto dir = std::filesystem::path(options.configPath).parent_path();
    paths.push_back(rc::agent::statPath("config directory", dir.empty() ? "." : dir.string()));
  }
  paths.push_back(rc::agent::statPath("state directory", startup.stateDir));
  paths.push_back(rc::agent::statPath("journal directory", journal.dir()));
  if (startup.config) paths.push_back(rc::agent::statPath("TLS CA", startup.config->tls.caFile));
  if (auto trusted = rc::agent::checkTrustedPaths(rc::agent::currentPrivileges(), paths); !trusted) {
    rc::log::error("{}", trusted.error().message);
    return false;
  }
  return true;
}

// Link changes as the kernel announces them: a flap shorter than the 250 ms refresh (or any
// scrape) is still counted. Without it (no netlink socket), the link gauge alone.
std::unique_ptr<rc::agent::LinkWatch> startAgentLinkWatch(boost::asio::io_context& io,
                                                          const rc::agent::Config& config) {
  auto w = rc::agent::LinkWatch::start(io, config.dataInterfaces);
  if (w) return std::move(*w);
  rc::log::warn("[agent] metrics: {}: rdmachaos_link_down_events_total is not served", w.error().message);
  return nullptr;
}

// Exception barrier of the event loop (completions posted from fault and workload threads run
// here): an exception is logged and the loop goes on, rather than std::terminate with faults
// applied.
void runAgentLoop(boost::asio::io_context& io) {
  for (;;) {
    try {
      io.run();
      break;
    } catch (const std::exception& ex) {
      rc::log::error("event loop: {}; continuing", ex.what());
    }
  }
}

// Serves controllers (faults, workloads, metrics) until a signal ends the agent; takes over
// what the replay left. Returns the exit code.
int serveAgent(const rc::agent::Config& config, const rc::faults::Policy& policy,
               rc::Journal journal, const Replay& replay, boost::asio::ssl::context& tls) {
  rc::agent::FaultManager manager(policy, std::move(journal), config.maxFaultLifetime,
                                  config.leaseTimeout);
  manager.adoptReplay(replay);

  // Workloads share the faults' lease and lifetime bounds.
  rc::agent::CounterOptions counterOptions;
  counterOptions.interfaces = config.dataInterfaces;
  counterOptions.interval = config.counterInterval;
  rc::agent::WorkloadManager workloads(config.leaseTimeout, config.maxFaultLifetime, counterOptions,
                                       config.maxWorkloadMemory);
  boost::asio::io_context io;
  rc::agent::Server server(io, config, manager, workloads, tls);
  std::unique_ptr<rc::metrics::Exporter> exporter;
  if (!config.metrics.empty()) {
    auto e = rc::metrics::Exporter::start(config.metrics);
    if (!e) {
      rc::log::error("[agent] metrics: {}", e.error().message);
      return holdLeftovers(manager, 2);
    }
    exporter = std::move(*e);
  }
  if (auto r = server.start(); !r) {
    rc::log::error("{}", r.error().message);
    return holdLeftovers(manager, 2);
  }
  // The observe intake runs on a thread of its own; an agent whose intake cannot start still
  // serves faults (the jobs it would watch are not its first duty), and says why.
  std::unique_ptr<rc::agent::ObserveIntake> observe;
  if (config.observe.enabled) {
    if (auto o = rc::agent::ObserveIntake::start(rc::agent::observeOptions(config.observe))) {
      observe = std::move(*o);
      rc::log::info("observe intake on '{}' (records from librdmachaos-observe)", observe->path());
    } else {
      rc::log::error("{}; the observe intake is off", o.error().message);
    }
  }
  // The `observed` workload kind reads the intake; unset before the intake goes.
  std::optional<rc::agent::IntakeSource> observeSource;
  if (observe) rc::workload::setObserveSource(&observeSource.emplace(*observe));
  struct UnsetSource {
    ~UnsetSource() { rc::workload::setObserveSource(nullptr); }
  } unsetSource;
  // The `mpi` kind's settings; mpirun's rsh agent is the launch helper installed beside us.
  rc::workload::MpiSettings mpi = config.mpi;
  mpi.dataInterfaces = config.dataInterfaces;
  if (observe) mpi.observeSocket = config.observe.socket;
  if (config.mpiEnabled) {
    if (mpi.launchHelper.empty()) {
      std::error_code ec;
      const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) mpi.launchHelper = (self.parent_path() / "rdmachaos-mpi-launch").string();
    }
    rc::workload::setMpiSettings(&mpi);
  }
  struct UnsetMpi {
    ~UnsetMpi() { rc::workload::setMpiSettings(nullptr); }
  } unsetMpi;
  // Prometheus gauges, refreshed every 250 ms on the loop (a scrape reads the last values): a
  // link that goes down shows in rdmachaos_link_up within a quarter second, so a 1 s scrape
  // sees it at its next scrape and a game day's detection delay is the monitoring's, not ours.
  // The NIC counters come from DataPlaneMetrics's own thread, once a second.
  boost::asio::steady_timer metricsTick(io);
  std::optional<rc::agent::DataPlaneMetrics> dataPlane;
  if (exporter) dataPlane.emplace(*exporter, config.dataInterfaces);
  std::unique_ptr<rc::agent::LinkWatch> linkWatch;
  if (exporter) linkWatch = startAgentLinkWatch(io, config);
  std::function<void()> publish = [&] {
    rc::agent::publishAgentMetrics(*exporter, manager, server, workloads);
    if (observe) rc::agent::publishObserveMetrics(*exporter, observe->stats());
    dataPlane->publishLinks(linkWatch.get());
    metricsTick.expires_after(std::chrono::milliseconds(250));
    metricsTick.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) publish();
    });
  };
  if (exporter) {
    rc::log::info("serving metrics for Prometheus on {} (port {}, path /metrics)", config.metrics, exporter->port());
    publish();
  }
  // Every signal that would end the agent reverts first (SIGHUP: a closed terminal or a
  // careless reload; SIGQUIT: Ctrl-\\). Faults before workloads: a workload can take a while to
  // join, and the fabric must not wait for it.
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.add(SIGHUP);
  signals.add(SIGQUIT);
  // After the reverts, the fault_ended reports they posted still have to reach their
  // controllers (a controller told nothing records the faults as never applied); the
  // sessions stay open for that, a bounded moment, then close.
  boost::asio::steady_timer flush(io);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    rc::log::info("signal {}: reverting every fault, stopping workloads, then exiting", sig);
    manager.shutdown();
    workloads.shutdown();
    server.stopAccepting();
    flush.expires_after(std::chrono::milliseconds(300));
    flush.async_wait([&](const boost::system::error_code&) {
      server.stop();
      metricsTick.cancel();
      io.stop();
    });
  });
  rc::log::info("ready: node {}, lease {} ms, {} fault kinds", config.node,
                config.leaseTimeout.count(), rc::faults::registry().size());
  runAgentLoop(io);
  manager.shutdown();
  workloads.shutdown();
  rc::log::info("stopped; no fault left applied");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  AgentOptions options;
  if (auto exitCode = parseAgentOptions(argc, argv, options)) return *exitCode;
  prepareAgentProcess();

  // Safety first: whatever a previous run left applied is reverted before anything that can
  // fail for unrelated reasons (a config error, interface policy, TLS material, a port) and
  // before any connection. A start that then fails keeps retrying what the replay left
  // (holdLeftovers).
  AgentStartup startup = loadAgentStartup(options);
  auto journal = rc::Journal::open(startup.stateDir);
  if (!journal) {
    rc::log::error("{}", journal.error().message);
    return 2;
  }
  if (!agentFilesTrusted(options, startup, *journal)) return 2;
  if (auto l = journal->lock(); !l) {
    rc::log::error("{}", l.error().message);
    return l.error().code == EWOULDBLOCK ? 3 : 2;
  }
  if (journal->readOnly())
    rc::log::error("the journal '{}' is read-only: its faults are reverted, but their entries stay "
                   "and no new fault is accepted until it is writable",
                   journal->dir());
  const rc::faults::Policy& replayPolicy = startup.replayPolicy;
  auto replay = rc::agent::FaultManager::replayJournal(*journal, replayPolicy);
  for (const auto& line : replay.lines) rc::log::warn("{}", line);
  if (options.replayOnly)
    return replayOnlyEnd(*journal, replayPolicy, std::move(replay), options.retryFor);
  if (startup.configError) return holdLeftovers(replay, std::move(*journal), replayPolicy, 2);

  auto policy = rc::agent::makePolicy(*startup.config);
  if (!policy) {
    rc::log::error("{}", policy.error().message);
    return holdLeftovers(replay, std::move(*journal), replayPolicy, 2);
  }
  auto tls = rc::tls::makeServerContext(startup.config->tls);
  if (!tls) {
    rc::log::error("{}", tls.error().message);
    return holdLeftovers(replay, std::move(*journal), *policy, 2);
  }
  return serveAgent(*startup.config, *policy, std::move(*journal), replay, *tls);
}
