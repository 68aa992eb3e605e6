// rdmachaos_link_up on real veth links in a private network namespace: linkUp follows the
// admin state and the carrier (the peer's state), and the agent's exporter serves it. /sys is
// left as the host's, as in the lab's agents: the link state must not come from sysfs.
#include <net/if.h>
#include <sched.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "agent/agent_metrics.hpp"
#include "agent/link_watch.hpp"
#include "http_get.hpp"

// This source in a namespace of its own: the netns sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_agent_metrics_netns {

using namespace rc;
using namespace rc::agent;
using namespace std::chrono_literals;

namespace {

using rctest::enterPrivateNetns;

using rctest::sh;

// veth rcl0 <-> rcl1, both down, fresh for each case; deleted at the end, also on failure.
struct MetricsVeth {
  MetricsVeth() {
    enterPrivateNetns();
    (void)std::system("ip link del rcl0 >/dev/null 2>&1");
    sh("ip link add rcl0 type veth peer name rcl1");
  }
  ~MetricsVeth() { (void)std::system("ip link del rcl0 >/dev/null 2>&1"); }
};

// linkUp(IFNAME) once it equals WANT, waiting at most 3 s: the kernel moves IFF_RUNNING in its
// linkwatch work after a carrier change, which it may hold back up to a second.
bool settlesTo(const std::string& ifname, bool want) {
  INFO("linkUp('" << ifname << "')");
  auto until = std::chrono::steady_clock::now() + 3s;
  for (;;) {
    auto r = linkUp(ifname);
    REQUIRE(r.ok());
    if (*r == want || std::chrono::steady_clock::now() > until) return *r;
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace

TEST_CASE("linkUp: admin state and carrier, read in this namespace") {
  MetricsVeth veth;
  CHECK_FALSE(settlesTo("rcl0", false));  // down
  sh("ip link set rcl0 up");
  // Up without carrier: veth has carrier only while its peer is up too.
  CHECK_FALSE(settlesTo("rcl0", false));
  sh("ip link set rcl1 up");
  CHECK(settlesTo("rcl0", true));
  CHECK(settlesTo("rcl1", true));
  // The peer goes down: carrier lost, while rcl0 is still administratively up.
  sh("ip link set rcl1 down");
  CHECK_FALSE(settlesTo("rcl0", false));
  sh("ip link set rcl1 up");
  CHECK(settlesTo("rcl0", true));
  sh("ip link set rcl0 down");
  CHECK_FALSE(settlesTo("rcl0", false));
  sh("ip link del rcl0");
  CHECK_FALSE(settlesTo("rcl0", false));  // gone: down, not an error
}

TEST_CASE("the exporter serves rdmachaos_link_up as the link goes down and up") {
  MetricsVeth veth;
  sh("ip link set rcl0 up");
  sh("ip link set rcl1 up");
  auto e = metrics::Exporter::start("127.0.0.1:0");
  REQUIRE(e.ok());
  DataPlaneMetrics dp(**e, {"rcl0", "rcnone0"});
  // What the agent's 250 ms tick does, until the served line is WANT (at most 3 s: linkwatch).
  auto servesWithin = [&](const std::string& want) {
    std::string body;
    auto until = std::chrono::steady_clock::now() + 3s;
    do {
      dp.publishLinks();
      body = rctest::httpGet("127.0.0.1", (*e)->port(), "/metrics").body;
      if (body.find(want) != std::string::npos) break;
      std::this_thread::sleep_for(10ms);
    } while (std::chrono::steady_clock::now() < until);
    return body;
  };
  auto body = servesWithin("rdmachaos_link_up{interface=\"rcl0\"} 1");
  CHECK_THAT(body, Catch::Contains("rdmachaos_link_up{interface=\"rcl0\"} 1"));
  CHECK_THAT(body, Catch::Contains("rdmachaos_link_up{interface=\"rcnone0\"} 0"));
  for (auto [cmd, want] : {std::pair{"ip link set rcl1 down", "0"},
                           {"ip link set rcl1 up", "1"},
                           {"ip link set rcl0 down", "0"}}) {
    sh(cmd);
    std::string line = std::string("rdmachaos_link_up{interface=\"rcl0\"} ") + want;
    CHECK_THAT(servesWithin(line), Catch::Contains(line));
  }
}

// Runs IO until PRED holds or 3 s pass (linkwatch may hold a carrier change back a second).
template <class P>
bool runUntil(boost::asio::io_context& io, P pred) {
  auto until = std::chrono::steady_clock::now() + 3s;
  while (!pred() && std::chrono::steady_clock::now() < until) {
    io.run_for(20ms);
    io.restart();
  }
  return pred();
}

TEST_CASE("LinkWatch counts every fall from up, however short, from the kernel's announcements") {
  MetricsVeth veth;
  sh("ip link set rcl0 up");
  sh("ip link set rcl1 up");
  REQUIRE(settlesTo("rcl0", true));
  boost::asio::io_context io;
  auto w = LinkWatch::start(io, {"rcl0", "rcnone0"});
  REQUIRE(w.ok());
  LinkWatch& watch = **w;
  CHECK(watch.downEvents("rcl0") == 0);
  // Three flaps of ~20 ms each: far shorter than any scrape or the agent's 250 ms refresh,
  // which would see none of them; the kernel announces every one.
  for (int i = 0; i < 3; i++) {
    sh("ip link set rcl0 down");
    std::this_thread::sleep_for(20ms);
    sh("ip link set rcl0 up");
    REQUIRE(settlesTo("rcl0", true));
  }
  CHECK(runUntil(io, [&] { return watch.downEvents("rcl0") == 3; }));
  CHECK(watch.downEvents("rcl0") == 3);
  // Losing the carrier (the peer goes down) is a fall too; coming back is not.
  sh("ip link set rcl1 down");
  CHECK(runUntil(io, [&] { return watch.downEvents("rcl0") == 4; }));
  sh("ip link set rcl1 up");
  REQUIRE(settlesTo("rcl0", true));
  io.run_for(200ms);
  CHECK(watch.downEvents("rcl0") == 4);
  CHECK(watch.downEvents("rcnone0") == 0);
  CHECK(watch.overruns() == 0);

  // The exporter serves the count beside the gauge.
  auto e = metrics::Exporter::start("127.0.0.1:0");
  REQUIRE(e.ok());
  DataPlaneMetrics dp(**e, {"rcl0"});
  dp.publishLinks(&watch);
  CHECK_THAT(rctest::httpGet("127.0.0.1", (*e)->port(), "/metrics").body,
             Catch::Contains("rdmachaos_link_down_events_total{interface=\"rcl0\"} 4"));
}

}  // namespace test_agent_metrics_netns
