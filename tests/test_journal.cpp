// Journal: entries survive a "crash" (a new Journal on the same dir), removal, bad files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/atomic_file.hpp"
#include "agent/journal.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_journal {

using namespace rc;
namespace fs = std::filesystem;

namespace {
using rctest::TempDir;
}  // namespace

TEST_CASE("entries are durable and listed after reopening") {
  TempDir d;
  {
    auto j = Journal::open(d.path + "/state");
    REQUIRE(j.ok());
    REQUIRE(j->add("f1", {{"kind", "link_flap"}, {"snapshot", {{"admin_up", true}}}}).ok());
    REQUIRE(j->add("f2", {{"kind", "link_flap"}}).ok());
  }
  auto j = Journal::open(d.path + "/state");
  REQUIRE(j.ok());
  auto entries = j->list();
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 2);
  CHECK((*entries)[0].faultId == "f1");
  CHECK((*entries)[0].record["snapshot"]["admin_up"] == true);
  REQUIRE(j->remove("f1").ok());
  REQUIRE(j->remove("f1").ok());  // idempotent
  CHECK(j->list()->size() == 1);
  // No temporary files are left behind.
  for (auto& e : fs::directory_iterator(d.path + "/state/journal"))
    CHECK(e.path().extension() == ".json");
}

TEST_CASE("invalid fault ids cannot escape the journal directory") {
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  CHECK_FALSE(j->add("../evil", {}).ok());
  CHECK_FALSE(j->add("", {}).ok());
  CHECK_FALSE(j->add(std::string(65, 'a'), {}).ok());
}

TEST_CASE("a corrupt entry is listed with a null record, not dropped") {
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  std::ofstream(d.path + "/journal/broken.json") << "{not json";
  auto entries = j->list();
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 1);
  CHECK(entries->front().faultId == "broken");
  CHECK(entries->front().record.is_null());
}

TEST_CASE("an unwritable state directory is an error naming it") {
  auto j = Journal::open("/proc/rc-no-such-dir");
  REQUIRE_FALSE(j.ok());
  CHECK_THAT(j.error().message, Catch::Contains("/proc/rc-no-such-dir"));
}

TEST_CASE("one process at a time holds a journal: a second lock is refused, naming the journal") {
  TempDir d;
  auto a = Journal::open(d.path);
  REQUIRE(a.ok());
  REQUIRE(a->lock().ok());
  auto b = Journal::open(d.path);
  REQUIRE(b.ok());
  auto r = b->lock();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EWOULDBLOCK);
  CHECK_THAT(r.error().message, Catch::Contains(d.path + "/journal") && Catch::Contains("another running"));
  { Journal moved = std::move(*a); }  // the lock goes with the last holder
  CHECK(b->lock().ok());
}

TEST_CASE("writeFileAtomic: durable replace, no overwrite when asked, mode from the start, no leftovers") {
  TempDir d;
  std::string path = d.path + "/f.json";
  REQUIRE(writeFileAtomic(path, "one", {.mode = 0600}));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(writeFileAtomic(path, "two"));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == "two");
  // Never over an existing file when replace = false: the journal's rule for fault ids.
  auto r = writeFileAtomic(path, "three", {.replace = false});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("will not overwrite"));
  // A large write goes through whole (the loop over short writes).
  std::string big(3 << 20, 'x');
  REQUIRE(writeFileAtomic(d.path + "/big", big));
  CHECK(fs::file_size(d.path + "/big") == big.size());
  // Only the files written remain: no temp file is left behind, also after a failure.
  size_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(d.path)) files++;
  CHECK(files == 2);
  CHECK_FALSE(writeFileAtomic(d.path + "/missing/x", "x"));
}

TEST_CASE("an entry is never overwritten by a new fault with the same id") {
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  REQUIRE(j->add("same", {{"kind", "link_flap"}, {"snapshot", {{"admin_up", true}}}}).ok());
  auto again = j->add("same", {{"kind", "pfc_storm"}});
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == EEXIST);
  CHECK_THAT(again.error().message, Catch::Contains("not overwritten"));
  auto entries = j->list();
  REQUIRE(entries->size() == 1);
  CHECK(entries->front().record["kind"] == "link_flap");
  CHECK(entries->front().record["snapshot"]["admin_up"] == true);
  // The fault's own update (its snapshot at apply time) replaces it; a missing entry is not
  // created by an update.
  REQUIRE(j->replace("same", {{"kind", "link_flap"}, {"snapshot", {{"admin_up", false}}}}).ok());
  CHECK(j->list()->front().record["snapshot"]["admin_up"] == false);
  CHECK_FALSE(j->replace("other", {{"kind", "link_flap"}}).ok());
  CHECK(j->list()->size() == 1);
  for (auto& e : fs::directory_iterator(d.path + "/journal"))
    CHECK(e.path().extension() == ".json");
}

TEST_CASE("quarantine moves an entry out of the replay, keeping every copy") {
  TempDir d;
  auto j = Journal::open(d.path);
  REQUIRE(j.ok());
  std::ofstream(d.path + "/journal/bad.json") << "{not json";
  auto moved = j->quarantine("bad");
  REQUIRE(moved.ok());
  CHECK(*moved == d.path + "/journal/quarantine/bad.json");
  CHECK(j->list()->empty());
  std::ofstream(d.path + "/journal/bad.json") << "[]";
  auto second = j->quarantine("bad");
  REQUIRE(second.ok());
  CHECK(*second != *moved);
  CHECK(fs::exists(*moved));
  CHECK(fs::exists(*second));
}

TEST_CASE("the entry count follows add, remove and quarantine, and a reopened journal counts what is there") {
  // The agent's metrics show this count every second from its event loop: kept as a number,
  // not by reading every entry there.
  TempDir d;
  {
    auto j = Journal::open(d.path + "/state");
    REQUIRE(j.ok());
    CHECK(j->count() == 0);
    REQUIRE(j->add("f1", {{"kind", "link_flap"}}).ok());
    REQUIRE(j->add("f2", {{"kind", "link_flap"}}).ok());
    REQUIRE(j->add("f3", {{"kind", "link_flap"}}).ok());
    CHECK(j->count() == 3);
    CHECK_FALSE(j->add("f1", {{"kind", "link_flap"}}).ok());  // refused: no change
    CHECK(j->count() == 3);
    REQUIRE(j->remove("f2").ok());
    REQUIRE(j->remove("f2").ok());  // idempotent: counted once
    CHECK(j->count() == 2);
    REQUIRE(j->quarantine("f3").ok());
    CHECK(j->count() == 1);
    REQUIRE(j->replace("f1", {{"kind", "link_flap"}, {"snapshot", nlohmann::json::object()}}).ok());
    CHECK(j->count() == 1);
  }
  std::ofstream(d.path + "/state/journal/garbage.json") << "{not json";
  auto j = Journal::open(d.path + "/state");
  REQUIRE(j.ok());
  CHECK(j->count() == 2);  // f1 and the unreadable one, as list() shows them
  CHECK(j->count() == j->list()->size());
  Journal moved = std::move(*j);
  REQUIRE(moved.remove("garbage").ok());
  CHECK(moved.count() == 1);
}

}  // namespace test_journal
