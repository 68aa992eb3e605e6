// Journal: entries survive a "crash" (a new Journal on the same dir), removal, bad files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/journal.hpp"

using namespace rc;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rc-journal-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};
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
