// metrics/: the Prometheus exporter serves what was set, in Prometheus's text format, over a
// real HTTP listener on loopback; bad addresses and a taken port are refused with the fix.
#include <catch2/catch.hpp>

#include "http_get.hpp"
#include "metrics/exporter.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_metrics {

using rc::metrics::Exporter;
using rc::metrics::parseEndpoint;

TEST_CASE("metrics addresses: IPv4 and bracketed IPv6 literals with a port") {
  auto v4 = parseEndpoint("127.0.0.1:9464");
  REQUIRE(v4.ok());
  CHECK(v4->address == "127.0.0.1");
  CHECK(v4->port == 9464);
  CHECK_FALSE(v4->ipv6);
  auto v6 = parseEndpoint("[::1]:0");
  REQUIRE(v6.ok());
  CHECK(v6->address == "::1");
  CHECK(v6->port == 0);
  CHECK(v6->ipv6);
  auto [text, fragment] = GENERATE(table<std::string, std::string>({
      {"", "no port"},
      {"127.0.0.1", "no port"},
      {"127.0.0.1:", "'' is not a port"},
      {"127.0.0.1:x", "'x' is not a port"},
      {"127.0.0.1:65536", "'65536' is not a port"},
      {"localhost:9464", "'localhost' is not an IPv4 literal"},
      {"::1:9464", "an IPv6 address goes in brackets"},
      {"[::1]9464", "followed by :PORT"},
      {"[zz]:9464", "'zz' is not an IPv6 literal"},
  }));
  auto r = parseEndpoint(text);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains(fragment));
  CHECK_THAT(r.error().message, Catch::Contains("use ADDR:PORT"));
}

TEST_CASE("a bare port is loopback; any other address is served with a warning") {
  // Before, a bare port was refused ("no port"): serving beyond the host had no safe shorthand.
  auto bare = parseEndpoint("9464");
  REQUIRE(bare.ok());
  CHECK(bare->address == "127.0.0.1");
  CHECK(bare->port == 9464);
  CHECK(bare->loopback());
  CHECK(rc::metrics::exposureWarning(*bare).empty());
  for (const char* local : {"127.0.0.1:9464", "127.3.2.1:1", "[::1]:9464"}) {
    CAPTURE(local);
    CHECK(parseEndpoint(local)->loopback());
    CHECK(rc::metrics::exposureWarning(*parseEndpoint(local)).empty());
  }
  for (const char* wide : {"0.0.0.0:9464", "198.18.1.11:9465", "[::]:9464", "[fd00::1]:9464"}) {
    CAPTURE(wide);
    auto ep = parseEndpoint(wide);
    REQUIRE(ep.ok());
    CHECK_FALSE(ep->loopback());
    CHECK_THAT(rc::metrics::exposureWarning(*ep),
               Catch::Contains(std::string(wide)) && Catch::Contains("without TLS or authentication"));
  }
  CHECK_FALSE(parseEndpoint("99999").ok());
  // "0": a free port on loopback, and it serves there.
  auto e = Exporter::start("0");
  REQUIRE(e.ok());
  REQUIRE((*e)->port() > 0);
  (*e)->set("rdmachaos_test_bare", "served on loopback", 1);
  auto r = rctest::httpGet("127.0.0.1", (*e)->port(), "/metrics");
  REQUIRE(r.status == 200);
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_bare 1"));
}

TEST_CASE("the exporter serves its gauges over HTTP, and forgets retired series") {
  auto e = Exporter::start("127.0.0.1:0");
  REQUIRE(e.ok());
  Exporter& m = **e;
  REQUIRE(m.port() > 0);
  m.set("rdmachaos_test_plain", "a plain gauge", 42);
  m.set("rdmachaos_test_fault", "per fault", {{"step", "flap"}, {"node", "n1"}}, 1);
  m.set("rdmachaos_test_fault", "per fault", {{"step", "flap"}, {"node", "n2"}}, 1);
  auto r = rctest::httpGet("127.0.0.1", m.port(), "/metrics");
  REQUIRE(r.status == 200);
  CHECK_THAT(r.body, Catch::Contains("# HELP rdmachaos_test_plain a plain gauge"));
  CHECK_THAT(r.body, Catch::Contains("# TYPE rdmachaos_test_plain gauge"));
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_plain 42"));
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_fault{node=\"n1\",step=\"flap\"} 1"));
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_fault{node=\"n2\",step=\"flap\"} 1"));

  // The fault on n1 ended: its series goes, n2's stays; a value set again is the new value.
  m.retain("rdmachaos_test_fault", {{{"step", "flap"}, {"node", "n2"}}});
  m.set("rdmachaos_test_plain", "a plain gauge", 7);
  r = rctest::httpGet("127.0.0.1", m.port(), "/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.body.find("node=\"n1\"") == std::string::npos);
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_fault{node=\"n2\",step=\"flap\"} 1"));
  CHECK_THAT(r.body, Catch::Contains("rdmachaos_test_plain 7"));

  // A second exporter on the same port is refused with the likely cause, not a crash.
  auto again = Exporter::start("127.0.0.1:" + std::to_string(m.port()));
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.error().message, Catch::Contains("cannot serve metrics on 127.0.0.1:"));
  CHECK_THAT(again.error().message, Catch::Contains("port in use"));
}

}  // namespace test_metrics
