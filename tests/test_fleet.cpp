// Fleet connects without agents: one deadline for unreachable and silent peers, progress events,
// and the gate that lets a few agents probe their clocks at a time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <cstdlib>
#include <filesystem>
#include <map>

#include "common/certs.hpp"
#include "common/tls.hpp"
#include "common/unique_fd.hpp"
#include "controller/fleet/fleet.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_fleet {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using rc::controller::AsyncGate;
using rc::controller::ConnectProgress;
using rc::controller::Fleet;
using rc::controller::Node;

namespace {

// A TCP socket on 127.0.0.1 with a kernel-chosen port: listening (connections complete in the
// backlog, are never accepted, and never hear a TLS byte) or only bound (connections refused).
struct LoopbackPort {
  rc::UniqueFD fd;
  uint16_t port = 0;
  explicit LoopbackPort(bool listening) : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd.get() >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    socklen_t len = sizeof sa;
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port = ntohs(sa.sin_port);
    if (listening) REQUIRE(::listen(fd.get(), 16) == 0);
  }
};

using rctest::TempDir;

asio::awaitable<void> holdGate(asio::io_context& io, AsyncGate& gate, int id, size_t& maxHolders,
                               std::vector<int>& order) {
  co_await gate.acquire();
  order.push_back(id);
  maxHolders = std::max(maxHolders, gate.holders());
  asio::steady_timer t(io);
  t.expires_after(2ms);
  co_await t.async_wait(asio::use_awaitable);
  gate.release();
}

}  // namespace

TEST_CASE("AsyncGate lets LIMIT holders in at once, the others in the order they came") {
  asio::io_context io;
  AsyncGate gate(io, 3);
  size_t maxHolders = 0;
  std::vector<int> order;
  for (int i = 0; i < 10; i++) asio::co_spawn(io, holdGate(io, gate, i, maxHolders, order), asio::detached);
  io.run();
  CHECK(maxHolders == 3);
  REQUIRE(order.size() == 10);
  for (int i = 0; i < 10; i++) CHECK(order[size_t(i)] == i);
  CHECK(gate.holders() == 0);
  CHECK(gate.waiting() == 0);
}

TEST_CASE("Fleet::connect: a refused agent and silent agents fail within the one deadline, by name") {
  TempDir dir;
  rc::certs::Options o;
  o.dir = dir.path;
  REQUIRE(rc::certs::init(o));
  auto tls = rc::tls::makeClientContext({dir.path + "/ca.pem", dir.path + "/controller.pem", dir.path + "/controller.key"});
  REQUIRE(tls);
  LoopbackPort closed(false), silent(true);
  std::vector<Node> nodes{{"gone", "127.0.0.1", closed.port, {}, {}, {}},
                          {"mute1", "127.0.0.1", silent.port, {}, {}, {}},
                          {"mute2", "127.0.0.1", silent.port, {}, {}, {}}};
  std::vector<const Node*> ptrs;
  for (const auto& n : nodes) ptrs.push_back(&n);

  asio::io_context io;
  Fleet fleet(io, *tls, "ctl-test");
  std::vector<ConnectProgress> events;
  bool finished = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Named: a std::function temporary in a co_await is destroyed twice by GCC 12.
        rc::controller::ConnectProgressFn record = [&](const ConnectProgress& p) { events.push_back(p); };
        co_await fleet.connect(ptrs, 1500ms, 8, record);
        finished = true;
      },
      asio::detached);
  io.run();
  REQUIRE(finished);
  CHECK(fleet.clients().empty());
  std::map<std::string, std::string> errors(fleet.errors().begin(), fleet.errors().end());
  REQUIRE(errors.size() == 3);
  INFO(errors["gone"] << "\n" << errors["mute1"] << "\n" << errors["mute2"]);
  CHECK(errors["gone"].find("refused") != std::string::npos);
  // Each silent agent ends at the connect's own deadline, named as such: one deadline for
  // every step of every agent.
  for (const char* n : {"mute1", "mute2"}) {
    CHECK(errors[n].find("TLS handshake") != std::string::npos);
    CHECK(errors[n].find("timed out after 1.500s") != std::string::npos);
  }
  // Progress: ticks while the silent ones were waited for (they held the connect for the whole
  // 1.5 s), "every connect attempt finished" once, then the end with the tally.
  REQUIRE(events.size() >= 3);
  CHECK(events.front().event == ConnectProgress::Event::tick);
  const auto& waiting = events.front().waiting;
  CHECK(std::find(waiting.begin(), waiting.end(), "mute1") != waiting.end());
  CHECK(std::find(waiting.begin(), waiting.end(), "mute2") != waiting.end());
  size_t connectedEvents = 0;
  for (const auto& e : events) connectedEvents += e.event == ConnectProgress::Event::connected;
  CHECK(connectedEvents == 1);
  CHECK(events.back().done);
  CHECK(events.back().failed == 3);
  CHECK(events.back().connected == 0);
  CHECK(events.back().waiting.empty());
}

}  // namespace test_fleet
