// rdmachaos-agent: the per-node daemon. Reverts anything journaled, then serves controllers.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <cstdio>

#include "agent/agent_metrics.hpp"
#include "agent/capabilities.hpp"
#include "agent/config.hpp"
#include "agent/fault_manager.hpp"
#include "agent/server.hpp"
#include "agent/workload_manager.hpp"
#include "common/fd_reserve.hpp"
#include "common/log.hpp"
#include "common/tls.hpp"
#include "metrics/exporter.hpp"
#include "rdmachaos_config.h"

int main(int argc, char** argv) {
  CLI::App app{"rdmachaos-agent: injects faults on this node for the rdmachaos controller"};
  std::string configPath;
  bool verbose = false;
  app.add_option("--config", configPath, "agent configuration (TOML)")->required();
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.set_version_flag("--version", RDMACHAOS_VERSION);
  CLI11_PARSE(app, argc, argv);
  if (verbose) rc::log::setLevel(rc::log::Level::debug);
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

  auto config = rc::agent::loadConfig(configPath);
  if (!config) {
    std::fprintf(stderr, "rdmachaos-agent: %s\n", config.error().message.c_str());
    return 2;
  }
  rc::log::setComponent("agent " + config->node);
  auto journal = rc::Journal::open(config->stateDir);
  if (!journal) {
    rc::log::error("{}", journal.error().message);
    return 2;
  }
  // Safety first: whatever a previous run left applied is reverted before anything that can
  // fail for unrelated reasons (interface policy, TLS material) and before any connection.
  auto replay = rc::agent::FaultManager::replayJournal(*journal, rc::agent::configuredPolicy(*config));
  for (const auto& line : replay.lines) rc::log::warn("{}", line);
  auto policy = rc::agent::makePolicy(*config);
  if (!policy) {
    rc::log::error("{}", policy.error().message);
    return 2;
  }
  auto tls = rc::tls::makeServerContext(config->tls);
  if (!tls) {
    rc::log::error("{}", tls.error().message);
    return 2;
  }

  rc::agent::FaultManager manager(*policy, std::move(*journal), config->maxFaultLifetime,
                                  config->leaseTimeout);
  manager.adoptReplay(replay);

  // Workloads share the faults' lease and lifetime bounds.
  rc::agent::CounterOptions counterOptions;
  counterOptions.interfaces = config->dataInterfaces;
  counterOptions.interval = config->counterInterval;
  rc::agent::WorkloadManager workloads(config->leaseTimeout, config->maxFaultLifetime, counterOptions,
                                       config->maxWorkloadMemory);
  boost::asio::io_context io;
  rc::agent::Server server(io, *config, manager, workloads, *tls);
  std::unique_ptr<rc::metrics::Exporter> exporter;
  if (!config->metrics.empty()) {
    auto e = rc::metrics::Exporter::start(config->metrics);
    if (!e) {
      rc::log::error("[agent] metrics: {}", e.error().message);
      return 2;
    }
    exporter = std::move(*e);
  }
  if (auto r = server.start(); !r) {
    rc::log::error("{}", r.error().message);
    return 2;
  }
  // Prometheus gauges, refreshed every second on the loop (a scrape reads the last values).
  boost::asio::steady_timer metricsTick(io);
  std::function<void()> publish = [&] {
    rc::agent::publishAgentMetrics(*exporter, manager, server, workloads);
    metricsTick.expires_after(std::chrono::seconds(1));
    metricsTick.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) publish();
    });
  };
  if (exporter) {
    rc::log::info("serving metrics for Prometheus on {} (port {}, path /metrics)", config->metrics, exporter->port());
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
  rc::log::info("ready: node {}, lease {} ms, {} fault kinds", config->node,
                config->leaseTimeout.count(), rc::faults::registry().size());
  // Exception barrier of the event loop (completions posted from fault and workload threads run
  // here): an exception is logged and the loop goes on, rather than std::terminate with faults
  // applied.
  for (;;) {
    try {
      io.run();
      break;
    } catch (const std::exception& ex) {
      rc::log::error("event loop: {}; continuing", ex.what());
    }
  }
  manager.shutdown();
  workloads.shutdown();
  rc::log::info("stopped; no fault left applied");
  return 0;
}
