// SessionWork: one session's blocking requests take the worker pool in turn with the other
// sessions', at most LIMIT of them wait, and what waits is dropped when the session ends.
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/session_work.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_session_work {

using rc::agent::SessionWork;
using json = nlohmann::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Runs LOOP until DONE() holds (checked after each handler), at most LIMIT.
template <typename F>
bool runUntil(asio::io_context& loop, F done, std::chrono::milliseconds limit = 10s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    loop.restart();
    loop.run_for(5ms);
  }
  return done();
}

}  // namespace

TEST_CASE("a session that pipelines holds one job of the pool; another session's goes next") {
  asio::io_context loop;
  asio::thread_pool pool(1);
  auto flood = std::make_shared<SessionWork>(loop.get_executor(), pool.get_executor(), 1000);
  auto other = std::make_shared<SessionWork>(loop.get_executor(), pool.get_executor(), 1000);
  std::vector<std::string> delivered;
  for (int i = 0; i < 500; i++)
    REQUIRE(flood->add([] { std::this_thread::sleep_for(1ms); return json("caps"); },
                       [&](json j) { delivered.push_back(j.get<std::string>()); }));
  REQUIRE(other->add([] { return json("schedule"); }, [&](json j) { delivered.push_back(j.get<std::string>()); }));
  REQUIRE(runUntil(loop, [&] { return !delivered.empty() && delivered.back() == "schedule"; }));
  // At most the flood's job that was in the pool came first.
  CHECK(delivered.size() <= 2);
  flood->cancel();
  pool.join();
}

TEST_CASE("at most LIMIT jobs wait; the rest is refused") {
  asio::io_context loop;
  asio::thread_pool pool(1);
  auto s = std::make_shared<SessionWork>(loop.get_executor(), pool.get_executor(), 3);
  std::atomic<int> ran{0};
  int refused = 0, delivered = 0;
  // The first goes into the pool at once, three wait, the others are refused.
  for (int i = 0; i < 10; i++)
    refused += s->add([&ran, i] { ran++; return json(i); }, [&](json) { delivered++; }) ? 0 : 1;
  CHECK(refused == 6);
  REQUIRE(runUntil(loop, [&] { return delivered == 4; }));
  CHECK(ran == 4);
  pool.join();
}

TEST_CASE("the work a session leaves waiting is dropped when it ends") {
  asio::io_context loop;
  asio::thread_pool pool(1);
  std::atomic<int> ran{0};
  int delivered = 0;
  SECTION("cancel (the session closes)") {
    auto s = std::make_shared<SessionWork>(loop.get_executor(), pool.get_executor(), 1000);
    for (int i = 0; i < 300; i++) REQUIRE(s->add([&ran, i] { ran++; return json(i); }, [&](json) { delivered++; }));
    REQUIRE(runUntil(loop, [&] { return delivered >= 3; }));
    s->cancel();
    CHECK(s->waiting() == 0);
    CHECK_FALSE(s->add([&] { ran++; return json(0); }, [&](json) { delivered++; }));
  }
  SECTION("the last reference goes") {
    auto s = std::make_shared<SessionWork>(loop.get_executor(), pool.get_executor(), 1000);
    for (int i = 0; i < 300; i++) REQUIRE(s->add([&ran, i] { ran++; return json(i); }, [&](json) { delivered++; }));
    REQUIRE(runUntil(loop, [&] { return delivered >= 3; }));
    s.reset();
  }
  int deliveredAtEnd = delivered;
  // Let anything still in flight come back.
  runUntil(loop, [] { return false; }, 200ms);
  pool.join();
  loop.restart();
  loop.poll();
  CHECK(ran <= deliveredAtEnd + 1);  // the job in the pool when it ended, at most
  CHECK(delivered == deliveredAtEnd);
}

}  // namespace test_session_work
