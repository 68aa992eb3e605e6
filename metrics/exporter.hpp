// Prometheus exposition for the controller's live run and the agent's own state, through
// prometheus-cpp (its registry, gauges and text serializer; its civetweb-based HTTP server).
// Callers see no prometheus-cpp type: each side sets plain values on its own facade.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::metrics {

// "ADDR:PORT", with an IPv4 or bracketed IPv6 literal ("127.0.0.1:9464", "[::1]:9464"), or a
// bare "PORT", which is loopback (127.0.0.1): serving beyond the host is always spelled out.
// Port 0 picks a free one. Errors name the value and the fix.
struct Endpoint {
  std::string address;  // without brackets
  uint16_t port = 0;
  bool ipv6 = false;
  bool loopback() const;  // 127.0.0.0/8 or ::1
};
Result<Endpoint> parseEndpoint(const std::string& text);

// What to tell the operator about serving on ENDPOINT ("" for loopback): the endpoints are plain
// HTTP, without TLS or authentication, so anyone who reaches one reads the fleet's state.
std::string exposureWarning(const Endpoint& endpoint);


// One HTTP listener serving /metrics from one registry.
class Exporter {
 public:
  // Binds ENDPOINT and starts serving (prometheus-cpp's server threads, 1 of them); logs the
  // exposure warning once when ENDPOINT is not loopback.
  static Result<std::unique_ptr<Exporter>> start(const std::string& endpoint);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  uint16_t port() const;  // the bound port (the chosen one for port 0)
  // A gauge family NAME (no labels, or these label names in this order), created on first use.
  void set(const std::string& name, const std::string& help, double value);
  void set(const std::string& name, const std::string& help, const std::map<std::string, std::string>& labels,
           double value);
  // Removes every series of NAME whose labels are not in KEEP (a fault that ended, a node gone).
  void retain(const std::string& name, const std::vector<std::map<std::string, std::string>>& keep);

 private:
  struct Impl;
  explicit Exporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rc::metrics
