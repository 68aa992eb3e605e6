// Exporter: prometheus-cpp's Exposer and Registry behind plain setters.
#include "metrics/exporter.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <mutex>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/log.hpp"

namespace rc::metrics {

Result<Endpoint> parseEndpoint(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return makeError("metrics address '" + text + "': " + why +
                     " (use ADDR:PORT, e.g. 127.0.0.1:9464 or [::1]:9464; port 0 picks a free one)");
  };
  Endpoint e;
  std::string portText;
  if (!text.empty() && text.size() <= 5 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    e.address = "127.0.0.1";
    portText = text;
  } else if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad("an IPv6 address goes in brackets, followed by :PORT");
    e.address = text.substr(1, close - 1);
    portText = text.substr(close + 2);
    e.ipv6 = true;
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    e.address = text.substr(0, colon);
    portText = text.substr(colon + 1);
    if (e.address.find(':') != std::string::npos) return bad("an IPv6 address goes in brackets");
  }
  unsigned char buf[16];
  if (::inet_pton(e.ipv6 ? AF_INET6 : AF_INET, e.address.c_str(), buf) != 1)
    return bad("'" + e.address + "' is not an IP" + (e.ipv6 ? "v6" : "v4") + " literal");
  unsigned port = 0;
  auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (portText.empty() || ec != std::errc() || p != portText.data() + portText.size() || port > 65535)
    return bad("'" + portText + "' is not a port (0-65535)");
  e.port = uint16_t(port);
  return e;
}

bool Endpoint::loopback() const {
  if (ipv6) {
    in6_addr a{};
    return ::inet_pton(AF_INET6, address.c_str(), &a) == 1 && IN6_IS_ADDR_LOOPBACK(&a);
  }
  in_addr a{};
  return ::inet_pton(AF_INET, address.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

std::string exposureWarning(const Endpoint& endpoint) {
  if (endpoint.loopback()) return "";
  std::string where = endpoint.ipv6 ? "[" + endpoint.address + "]" : endpoint.address;
  return "metrics on " + where + ":" + std::to_string(endpoint.port) +
         " are served beyond this host in plain HTTP, without TLS or authentication: whoever reaches that "
         "address reads them. Bind the management network only (firewalled to Prometheus), or 127.0.0.1 "
         "(a bare port) behind a TLS proxy";
}

namespace {
using Labels = std::map<std::string, std::string>;
struct FamilyEntry {
  prometheus::Family<prometheus::Gauge>* family;
  std::map<Labels, prometheus::Gauge*> series;
};
}  // namespace

struct Exporter::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::mutex mu;
  std::map<std::string, FamilyEntry> families;

  FamilyEntry& family(const std::string& name, const std::string& help) {
    auto it = families.find(name);
    if (it == families.end())
      it = families.emplace(name, FamilyEntry{&prometheus::BuildGauge().Name(name).Help(help).Register(*registry), {}})
               .first;
    return it->second;
  }
};

Exporter::Exporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Exporter::~Exporter() = default;

Result<std::unique_ptr<Exporter>> Exporter::start(const std::string& endpoint) {
  auto ep = parseEndpoint(endpoint);
  if (!ep) return ep.error();
  auto impl = std::make_unique<Impl>();
  std::string listen = (ep->ipv6 ? "[" + ep->address + "]" : ep->address) + ":" + std::to_string(ep->port);
  try {
    // One server thread: a scrape every few seconds from one Prometheus needs no more.
    impl->exposer = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return makeError("cannot serve metrics on " + endpoint + ": " + e.what() +
                     " (is the port in use, or the address not on this host?)");
  }
  impl->exposer->RegisterCollectable(impl->registry);
  if (auto w = exposureWarning(*ep); !w.empty()) log::warn("{}", w);
  return std::unique_ptr<Exporter>(new Exporter(std::move(impl)));
}

uint16_t Exporter::port() const {
  auto ports = impl_->exposer->GetListeningPorts();
  return ports.empty() ? 0 : uint16_t(ports.front());
}

void Exporter::set(const std::string& name, const std::string& help, double value) { set(name, help, {}, value); }

void Exporter::set(const std::string& name, const std::string& help, const Labels& labels, double value) {
  std::lock_guard lock(impl_->mu);
  FamilyEntry& f = impl_->family(name, help);
  auto it = f.series.find(labels);
  if (it == f.series.end()) it = f.series.emplace(labels, &f.family->Add(labels)).first;
  it->second->Set(value);
}

void Exporter::retain(const std::string& name, const std::vector<Labels>& keep) {
  std::lock_guard lock(impl_->mu);
  auto fit = impl_->families.find(name);
  if (fit == impl_->families.end()) return;
  FamilyEntry& f = fit->second;
  for (auto it = f.series.begin(); it != f.series.end();) {
    if (std::find(keep.begin(), keep.end(), it->first) != keep.end()) {
      ++it;
      continue;
    }
    f.family->Remove(it->second);
    it = f.series.erase(it);
  }
}

}  // namespace rc::metrics
