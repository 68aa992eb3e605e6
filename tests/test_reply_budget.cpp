// The agent's bound on replies queued for controllers that do not read (issue 26, item 7):
// one per session and one for the whole agent, where the session holding the most is cut.
#include <catch2/catch.hpp>

#include "agent/reply_budget.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_reply_budget {

using rc::agent::ReplyBudget;

TEST_CASE("a session that does not read is cut at its own bound") {
  ReplyBudget b(100, 1000);
  auto a = b.open();
  CHECK_FALSE(b.take(a, 60));
  CHECK_FALSE(b.take(a, 40));
  auto cut = b.take(a, 1);
  REQUIRE(cut);
  CHECK(*cut == a);
  // What it wrote is given back, and then it may queue again.
  b.release(a, 50);
  CHECK(b.held(a) == 50);
  CHECK_FALSE(b.take(a, 50));
  CHECK(b.total() == 100);
}

TEST_CASE("past the agent's bound the session holding the most is cut, not the one that asked") {
  // 64 sessions under their own 16 MiB would hold 1 GiB: the total bound is what stops that.
  ReplyBudget b(100, 250);
  auto slow = b.open(), other = b.open(), asker = b.open();
  REQUIRE_FALSE(b.take(slow, 90));
  REQUIRE_FALSE(b.take(other, 80));
  REQUIRE_FALSE(b.take(asker, 70));
  CHECK(b.total() == 240);
  // asker's next reply would make 255 > 250: the slowest reader goes first.
  auto cut = b.take(asker, 15);
  REQUIRE(cut);
  CHECK(*cut == slow);
  b.close(slow);
  CHECK(b.total() == 150);
  CHECK_FALSE(b.known(slow));
  CHECK_FALSE(b.take(asker, 15));
  CHECK(b.held(asker) == 85);
  CHECK(b.total() == 165);
  // When the asker itself would hold the most, it is the one cut.
  ReplyBudget tight(100, 189);
  auto x = tight.open(), y = tight.open();
  REQUIRE_FALSE(tight.take(x, 95));
  REQUIRE_FALSE(tight.take(y, 90));
  auto self = tight.take(x, 5);  // 185 + 5 > 189; x would hold 100, the most
  REQUIRE(self);
  CHECK(*self == x);
}

TEST_CASE("a closed session's bytes are nobody's, and its late replies take nothing") {
  ReplyBudget b(100, 150);
  auto a = b.open(), c = b.open();
  REQUIRE_FALSE(b.take(a, 100));
  b.close(a);
  CHECK(b.total() == 0);
  b.release(a, 10);  // the writer of a dropped session: no effect
  CHECK(b.total() == 0);
  CHECK_FALSE(b.take(c, 100));
  auto cut = b.take(a, 1);  // unknown: refused (the server does not ask for a dropped session)
  REQUIRE(cut);
  CHECK(*cut == a);
  CHECK(b.total() == 100);
}

}  // namespace test_reply_budget
