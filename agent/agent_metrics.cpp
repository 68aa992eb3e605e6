// publishAgentMetrics: the fault manager's status, the journal, sessions and workloads as gauges;
// DataPlaneMetrics: the data interfaces' link state and NIC/RDMA counters.
#include "agent/agent_metrics.hpp"

#include "agent/link_watch.hpp"
#include "agent/observe_intake.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cassert>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "common/errno_text.hpp"
#include "common/log.hpp"

namespace rc::agent {

void publishAgentMetrics(metrics::Exporter& out, const FaultManager& faults, const Server& server,
                         const WorkloadManager& workloads) {
  json st = faults.status();
  out.set("rdmachaos_agent_faults_active", "faults applied (or scheduled) and not yet ended",
          st.value("active_faults", 0.0));
  out.set("rdmachaos_agent_journal_entries", "faults in the journal: what a restart would revert",
          double(faults.journalEntries()));
  out.set("rdmachaos_agent_faults_unreverted", "faults whose revert failed and is being retried",
          double(st.value("unreverted", json::array()).size()));
  out.set("rdmachaos_agent_faults_unrevertable",
          "faults the agent gave up reverting (see `status`)",
          double(st.value("unrevertable", json::array()).size()));
  out.set("rdmachaos_agent_journal_quarantined", "journal entries set aside as unreadable",
          double(st.value("quarantined", json::array()).size()));
  out.set("rdmachaos_agent_leases", "controllers holding a lease",
          double(st.value("lease_remaining_ms", json::object()).size()));
  out.set("rdmachaos_agent_sessions", "open controller sessions", double(server.sessionCount()));
  out.set("rdmachaos_agent_workloads_active", "workload ranks running",
          double(workloads.activeCount()));
}

void publishObserveMetrics(metrics::Exporter& out, const ObserveStats& stats) {
  out.set("rdmachaos_agent_observe_records_total", "observe records accepted from local processes",
          double(stats.accepted));
  for (size_t i = 0; i < kRefusalKinds; i++)
    out.set("rdmachaos_agent_observe_refused_total",
            "observe records (or connections) refused, by reason",
            {{"reason", std::string(refusalName(Refusal(i)))}}, double(stats.refused[i]));
  out.set("rdmachaos_agent_observe_sender_dropped_total",
          "observe records their senders dropped (socket full, no agent listening)",
          double(stats.senderDropped));
  out.set("rdmachaos_agent_observe_discarded_total",
          "observe records accepted but dropped undrained after the retention time (no observed workload)",
          double(stats.discarded));
  out.set("rdmachaos_agent_observe_clients", "processes connected to the observe intake",
          double(stats.clients));
}

Result<bool> linkUp(const std::string& ifname, int sock) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos)
    return makeError("'" + ifname + "' is not an interface name");
  UniqueFD own;
  if (sock < 0) {
    own.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!own.isValid())
      return makeError("link state of '" + ifname + "': socket: " + errnoText(), errno);
    sock = own.get();
  }
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
  if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) {
    if (errno == ENODEV) return false;  // gone (or never there): its link is not up
    return makeError("link state of '" + ifname + "': SIOCGIFFLAGS: " + errnoText(), errno);
  }
  // IFF_RUNNING is the kernel's operational state (carrier, and not dormant), IFF_UP the admin's.
  const unsigned flags = unsigned(ifr.ifr_flags);
  return (flags & IFF_UP) != 0 && (flags & IFF_RUNNING) != 0;
}

const std::vector<std::string> kTransportErrorCounters = {
    // mlx5 (hw_counters): sequence errors, NAK-driven and timeout retransmissions, RNR give-ups,
    // and the error completions a broken transport ends in.
    "packet_seq_err",
    "out_of_sequence",
    "local_ack_timeout_err",
    "duplicate_request",
    "implied_nak_seq_err",
    "roce_slow_restart",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_local_length_error",
    "req_cqe_error",
    "resp_cqe_error",
    // soft-RoCE (rdma_rxe), as the lab's VMs count them (duplicate_request is shared).
    "rcvd_seq_err",
    "out_of_seq_request",
    "completer_retry_err",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
};

namespace {

// "rx_prio3_pause" -> {rx, 3, false}; "tx_prio0_pause_duration" -> {tx, 0, true}.
struct PauseName {
  std::string direction;
  int priority = 0;
  bool duration = false;
};
std::optional<PauseName> parsePauseName(const std::string& name) {
  PauseName p;
  if (name.rfind("rx_prio", 0) == 0)
    p.direction = "rx";
  else if (name.rfind("tx_prio", 0) == 0)
    p.direction = "tx";
  else
    return std::nullopt;
  const char* b = name.data() + 7;
  const char* e = name.data() + name.size();
  auto [rest, ec] = std::from_chars(b, e, p.priority);
  if (ec != std::errc() || rest == b || rest - b > 1 || p.priority < 0 || p.priority > 7)
    return std::nullopt;
  std::string_view tail(rest, size_t(e - rest));
  if (tail == "_pause") return p;
  if (tail == "_pause_duration") {
    p.duration = true;
    return p;
  }
  return std::nullopt;
}

}  // namespace

std::vector<Series> dataPlaneSeries(const std::string& ifname, const counters::Counters& sample) {
  std::vector<Series> out;
  auto add = [&](const char* name, const char* help, std::map<std::string, std::string> labels,
                 double v) {
    labels.emplace("interface", ifname);
    out.push_back(Series{name, help, std::move(labels), v});
  };
  auto one = [&](const std::string& counter, const char* name, const char* help,
                 std::map<std::string, std::string> labels = {}) {
    if (auto it = sample.find(counter); it != sample.end())
      add(name, help, std::move(labels), double(it->second));
  };
  // The ethtool names sort together, so each direction's pause counters are one range of the map.
  for (const char* prefix : {"rx_prio", "tx_prio"})
    for (auto it = sample.lower_bound(prefix);
         it != sample.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      auto p = parsePauseName(it->first);
      if (!p) continue;
      std::map<std::string, std::string> l{{"priority", std::to_string(p->priority)},
                                           {"direction", p->direction}};
      if (p->duration)
        add("rdmachaos_pfc_pause_duration_seconds_total",
            "time paused by PFC on a priority (mlx5 ethtool ..._prioN_pause_duration, in "
            "microseconds there)",
            std::move(l), double(it->second) / 1e6);
      else
        add("rdmachaos_pfc_pause_frames_total",
            "PFC pause frames on a priority (ethtool rx/tx_prioN_pause)", std::move(l),
            double(it->second));
    }
  const char* stormHelp =
      "mlx5's PFC pause-storm watchdog: warnings, and errors (it stopped sending pauses)";
  one("tx_pause_storm_warning_events", "rdmachaos_pfc_pause_storm_events_total", stormHelp,
      {{"level", "warning"}});
  one("tx_pause_storm_error_events", "rdmachaos_pfc_pause_storm_events_total", stormHelp,
      {{"level", "error"}});
  one("rdma.np_ecn_marked_roce_packets", "rdmachaos_ecn_marked_packets_total",
      "RoCE packets received with an ECN congestion mark (np_ecn_marked_roce_packets)");
  one("rdma.np_cnp_sent", "rdmachaos_cnp_sent_total",
      "congestion notification packets sent (np_cnp_sent)");
  one("rdma.rp_cnp_handled", "rdmachaos_cnp_handled_total",
      "congestion notification packets handled by the sender's rate limiter (rp_cnp_handled)");
  for (const auto& c : kTransportErrorCounters)
    one("rdma." + c, "rdmachaos_rdma_transport_errors_total",
        "RDMA transport errors and retransmissions by RDMA port counter", {{"counter", c}});
  one("net.rx_dropped", "rdmachaos_dropped_packets_total",
      "packets dropped by the interface (netdev statistics)", {{"direction", "rx"}});
  one("net.tx_dropped", "rdmachaos_dropped_packets_total",
      "packets dropped by the interface (netdev statistics)", {{"direction", "tx"}});
  // Bounded by construction: every series above comes from a fixed name (8 priorities at most).
  assert(out.size() <= kMaxSeriesPerInterface);
  return out;
}

DataPlaneMetrics::DataPlaneMetrics(metrics::Exporter& out, std::vector<std::string> interfaces,
                                   counters::SamplerOptions options,
                                   std::chrono::milliseconds counterPeriod)
    : out_(out),
      interfaces_(std::move(interfaces)),
      options_(std::move(options)),
      counterPeriod_(counterPeriod) {
  if (interfaces_.size() > kMaxDataPlaneInterfaces) {
    log::warn("[agent] metrics: {} data interfaces configured, publishing the first {} only",
              interfaces_.size(), kMaxDataPlaneInterfaces);
    interfaces_.resize(kMaxDataPlaneInterfaces);
  }
  sock_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock_.isValid())
    log::warn("[agent] metrics: socket for the link state: {}; one per tick instead", errnoText());
  samplers_.resize(interfaces_.size());
  sampleFailed_.assign(interfaces_.size(), false);
  if (interfaces_.empty()) return;
  thread_ = std::jthread([this](std::stop_token st) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    // Nothing notifies cv: the wait ends at the period or at once on the stop request.
    do sampleCounters();
    while (!cv.wait_for(lock, st, counterPeriod_, [&st] { return st.stop_requested(); }));
  });
}

DataPlaneMetrics::~DataPlaneMetrics() = default;  // the jthread requests the stop and joins

void DataPlaneMetrics::publishLinks(const LinkWatch* watch) {
  for (const auto& ifname : interfaces_) {
    if (watch)
      out_.set("rdmachaos_link_down_events_total",
               "times the data interface fell from up with carrier, as the kernel announced them (flaps shorter "
               "than a scrape included)",
               {{"interface", ifname}}, double(watch->downEvents(ifname)));
    auto up = linkUp(ifname, sock_.get());
    if (!up) {
      // Unknown is not down: the series keeps its last value rather than raise a false alert.
      if (linkFailed_.insert(ifname).second) log::warn("[agent] metrics: {}", up.error().message);
      continue;
    }
    linkFailed_.erase(ifname);
    out_.set("rdmachaos_link_up",
             "1 when the data interface is up with carrier (IFF_UP and IFF_RUNNING), else 0",
             {{"interface", ifname}}, *up ? 1 : 0);
  }
}

void DataPlaneMetrics::sampleCounters() {
  std::map<std::string, std::vector<std::map<std::string, std::string>>> keep;
  for (size_t i = 0; i < interfaces_.size(); i++) {
    const auto& ifname = interfaces_[i];
    // A sampler is made (again) when the interface is there: it may come later, or come back
    // behind another RDMA port after a driver reload.
    if (!samplers_[i]) {
      auto s = counters::NicSampler::create(ifname, options_);
      if (!s) {
        if (!sampleFailed_[i])
          log::warn("[agent] metrics: no counters from '{}': {}", ifname, s.error().message);
        sampleFailed_[i] = true;
        continue;
      }
      samplers_[i] = std::move(*s);
    }
    auto c = samplers_[i]->sample();
    if (!c) {
      if (!sampleFailed_[i])
        log::warn("[agent] metrics: counters of '{}': {}", ifname, c.error().message);
      sampleFailed_[i] = true;
      samplers_[i].reset();
      continue;
    }
    sampleFailed_[i] = false;
    for (auto& s : dataPlaneSeries(ifname, *c)) {
      out_.set(s.name, s.help, s.labels, s.value);
      families_.insert(s.name);
      keep[s.name].push_back(std::move(s.labels));
    }
  }
  // A counter that went (an interface gone, a driver without it now) is no longer served, rather
  // than served frozen.
  for (const auto& f : families_) out_.retain(f, keep[f]);
}

}  // namespace rc::agent
