// The lab switch's configuration and entry point (see switch.hpp; the fabric is in switch_fabric.hpp).
#include "labswitch/switch.hpp"

#include "labswitch/switch_fabric.hpp"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace rc::labswitch {
namespace {

template <typename T>
T get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

}  // namespace

Result<Config> parseConfig(const json& j) {
  try {
    if (!j.is_object()) return makeError("switch configuration must be a JSON object");
    Config c;
    c.control = get<std::string>(j, "control", "");
    c.rateBps = get<double>(j, "rate_bps", c.rateBps);
    c.linkRateBps = get<double>(j, "link_rate_bps", 0);
    c.mtu = get<int>(j, "mtu", c.mtu);
    c.bufferBytes = get<uint64_t>(j, "buffer_bytes", c.bufferBytes);
    c.lossyQueueBytes = get<uint64_t>(j, "lossy_queue_bytes", c.lossyQueueBytes);
    c.leaves = get<int>(j, "leaves", 0);
    c.spines = get<int>(j, "spines", 0);
    c.routing = get<std::string>(j, "routing", c.routing);
    c.pollNs = int64_t(get<double>(j, "poll_ms", 10) * 1e6);
    c.convergenceNs = int64_t(get<double>(j, "convergence_ms", 500) * 1e6);
    c.flowletGapNs = int64_t(get<double>(j, "flowlet_gap_us", 500) * 1e3);
    c.seed = get<uint32_t>(j, "seed", 1);
    c.offload = get<bool>(j, "offload", true);
    c.captureDir = get<std::string>(j, "capture_dir", "");
    c.deliveryHoldNs = int64_t(get<double>(j, "delivery_hold_us", 500) * 1e3);
    if (c.deliveryHoldNs < 0 || c.deliveryHoldNs > 10'000'000)
      return makeError("delivery_hold_us must be 0-10000 (microseconds a TAP holds a TCP run for its host)", EINVAL);
    if (j.contains("lossless")) {
      c.losslessMask = 0;
      for (int p : j["lossless"].get<std::vector<int>>())
        if (p >= 0 && p < 8) c.losslessMask |= uint8_t(1u << p);
    }
    if (j.contains("ecn")) {
      const json& e = j["ecn"];
      c.ecn.enabled = get<bool>(e, "enabled", true);
      c.ecn.kminBytes = get<uint64_t>(e, "kmin", c.ecn.kminBytes);
      c.ecn.kmaxBytes = get<uint64_t>(e, "kmax", c.ecn.kmaxBytes);
      c.ecn.pmax = get<double>(e, "pmax", c.ecn.pmax);
    }
    if (j.contains("pfc")) {
      c.pfc.xoffBytes = get<uint64_t>(j["pfc"], "xoff", c.pfc.xoffBytes);
      c.pfc.xonBytes = get<uint64_t>(j["pfc"], "xon", c.pfc.xonBytes);
    }
    if (j.contains("watchdog")) {
      const json& w = j["watchdog"];
      c.watchdog.enabled = get<bool>(w, "enabled", true);
      c.watchdog.detectionNs = int64_t(get<double>(w, "detection_ms", 200) * 1e6);
      c.watchdog.restorationNs = int64_t(get<double>(w, "restoration_ms", 200) * 1e6);
      auto a = parseAction(get<std::string>(w, "action", "drop"));
      if (!a) return a.error();
      c.watchdog.action = *a;
    }
    c.cpu = get<int>(j, "cpu", -1);
    if (c.cpu < -1 || c.cpu >= CPU_SETSIZE) return makeError("cpu must be a core number, or -1 for none", EINVAL);
    c.deliveryThread = get<bool>(j, "delivery_thread", true);
    c.tcpAckPriority = get<int>(j, "tcp_ack_priority", -1);
    if (c.tcpAckPriority < -1 || c.tcpAckPriority > 7)
      return makeError("tcp_ack_priority must be 0-7, or -1 for none (the priority of pure TCP ACKs)", EINVAL);
    if (j.contains("dscp_map")) c.dscpMap = j["dscp_map"].get<std::vector<uint8_t>>();
    for (const auto& h : j.value("hosts", json::array())) {
      c.hosts.push_back(HostPort{h.at("name"), h.value("netns", ""), h.value("ifname", "data0"),
                                 h.value("stream", ""), h.value("io", "tap"), h.value("host_netns", "")});
      const HostPort& hp = c.hosts.back();
      if (hp.io != "tap" && hp.io != "packet")
        return makeError("host '" + hp.name + "': io '" + hp.io + "' is not 'tap' or 'packet'", EINVAL);
      if (hp.io == "packet" && !c.offload)
        return makeError("host '" + hp.name + "': io 'packet' always carries offload; set offload true or use io 'tap'",
                         EINVAL);
    }
    if (c.control.empty()) return makeError("switch configuration lacks 'control' (socket path)");
    if (c.hosts.empty() || c.hosts.size() > 256) return makeError("switch configuration needs 1..256 hosts");
    if (!(c.rateBps >= 1e6 && c.rateBps <= 400e9)) return makeError("rate_bps must be within [1e6, 4e11]");
    if (c.mtu < 68 || c.mtu > 9216) return makeError("mtu must be within [68, 9216]");
    if (c.routing != "ecmp" && c.routing != "adaptive") return makeError("routing must be ecmp or adaptive");
    if (c.pollNs < 1'000'000 || c.pollNs > 1'000'000'000) return makeError("poll_ms must be within [1, 1000]");
    if (c.spines < 0 || c.spines > 16 || c.leaves < 0 || c.leaves > 64) return makeError("leaves/spines out of range");
    if (c.spines > 0 && c.leaves < 1) return makeError("a leaf-spine needs leaves >= 1");
    if (!c.dscpMap.empty() && c.dscpMap.size() != 64) return makeError("dscp_map needs 64 entries");
    return c;
  } catch (const std::exception& e) {
    return makeError(std::string("bad switch configuration: ") + e.what());
  }
}

Result<void> run(const Config& config) {
  if (config.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(config.cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
      return makeError("cannot pin the switch to core " + std::to_string(config.cpu) + ": " + std::strerror(errno) +
                           " (is the core online? `nproc`)",
                       errno);
  }
  Fabric f(config);
  if (auto r = f.build(); !r) return r;
  return f.serve();
}

}  // namespace rc::labswitch
