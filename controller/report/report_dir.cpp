// The report directory of a run: checked before the run, filled beside it, renamed into place.
#include "controller/report/report_dir.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/atomic_file.hpp"

namespace rc::controller {
namespace fs = std::filesystem;
namespace {

std::string inQuotes(const std::string& s) { return "'" + s + "'"; }

bool isReportFile(const std::string& name) {
  // A packet fault's capture (packet_analysis.hpp): capture-*.pcapng.
  if (name.rfind("capture-", 0) == 0 && name.size() > 15 && name.compare(name.size() - 7, 7, ".pcapng") == 0)
    return true;
  return std::any_of(std::begin(kReportFiles), std::end(kReportFiles), [&](const char* f) { return name == f; });
}

// The entries of DIR (sorted), or an error naming it.
Result<std::vector<std::string>> entries(const fs::path& dir, const std::string& shown) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) return makeError("cannot read the report directory " + inQuotes(shown) + ": " + ec.message(), ec.value());
  std::sort(names.begin(), names.end());
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; i++) s += (s.empty() ? "" : ", ") + inQuotes(names[i]);
  if (names.size() > 5) s += " and " + std::to_string(names.size() - 5) + " more";
  return s;
}

// Whether the existing directory DIR may receive a run's reports: empty, or with FORCE holding
// only a previous run's reports.
Result<void> acceptable(const fs::path& dir, const std::string& shown, bool force) {
  auto names = entries(dir, shown);
  if (!names) return names.error();
  if (names->empty()) return {};
  if (!force)
    return makeError("the report directory " + inQuotes(shown) + " is not empty (it holds " + listed(*names) +
                         "): choose another --report-dir, or pass --force to replace the previous run's reports "
                         "there",
                     ENOTEMPTY);
  std::vector<std::string> other;
  for (const auto& n : *names)
    if (!isReportFile(n)) other.push_back(n);
  if (!other.empty())
    return makeError("the report directory " + inQuotes(shown) + " holds " + listed(other) +
                         ", which is not a report of a run: --force replaces only result.json, report.html, "
                         "junit.xml, compare.json and compare-junit.xml; choose another --report-dir",
                     ENOTEMPTY);
  return {};
}

// mkdir -p, each component 0755; the last one must end up a directory.
Result<void> makeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); i++)
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        return makeError("cannot create the report directory " + inQuotes(path) + ": " + std::strerror(errno) +
                             " (at " + inQuotes(part) + ")",
                         errno);
    }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return makeError("cannot create the report directory " + inQuotes(path) + ": it is not a directory", ENOTDIR);
  return {};
}

// Where PATH is: absolute, symlinks of existing components resolved, no trailing slash.
Result<fs::path> resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return makeError("the report directory " + inQuotes(path) + ": " + ec.message(), ec.value());
  if (p.filename().empty()) p = p.parent_path();
  if (p.filename().empty() || p == p.root_path())
    return makeError("the report directory " + inQuotes(path) + " cannot be the root directory", EINVAL);
  return p;
}

}  // namespace

Result<void> checkReportDir(const std::string& requested, bool force) {
  if (requested.empty()) return {};  // the default: a new directory each run
  struct stat st {};
  if (::stat(requested.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return makeError("the report directory " + inQuotes(requested) + ": " + std::strerror(errno), errno);
  }
  if (!S_ISDIR(st.st_mode))
    return makeError("the report directory " + inQuotes(requested) + " exists and is not a directory", ENOTDIR);
  return acceptable(requested, requested, force);
}

Result<ReportDir> prepareReportDir(const std::string& requested, const std::string& playbookName, bool force,
                                   std::time_t now, const std::string& base) {
  if (!requested.empty()) {
    if (auto ok = checkReportDir(requested, force); !ok) return ok.error();
    if (auto ok = makeDirs(requested); !ok) return ok.error();
    return ReportDir{requested, force};
  }
  char stamp[32];
  tm t{};
  localtime_r(&now, &t);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &t);
  std::string name = playbookName;
  std::replace(name.begin(), name.end(), '/', '-');
  if (auto ok = makeDirs(base); !ok) return ok.error();
  const std::string stem = base + "/" + name + "-" + stamp;
  // Claimed by mkdir, which one process wins: a second run in the same second takes -2.
  for (int k = 1; k <= 1000; k++) {
    std::string dir = k == 1 ? stem : stem + "-" + std::to_string(k);
    if (::mkdir(dir.c_str(), 0755) == 0) return ReportDir{dir, false};
    if (errno != EEXIST)
      return makeError("cannot create the report directory " + inQuotes(dir) + ": " + std::strerror(errno), errno);
  }
  return makeError("cannot create a report directory: " + inQuotes(stem) + " and 999 more like it exist; pass "
                   "--report-dir");
}

Result<void> publishReports(const ReportDir& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  auto where = resolved(dir.path);
  if (!where) return where.error();
  const fs::path parent = where->parent_path();
  std::string tmpl = (parent / (where->filename().string() + ".partial-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    return makeError("cannot create a directory beside " + inQuotes(dir.path) + " for the reports: " +
                         std::strerror(errno),
                     errno);
  const std::string tmp = tmpl;
  ::chmod(tmp.c_str(), 0755);  // mkdtemp makes it 0700; reports were always readable
  auto leftIn = [&](Error e) {
    e.message += "; this run's reports are in " + inQuotes(tmp);
    return e;
  };
  for (const auto& [name, content] : files)
    if (auto w = writeFileAtomic(tmp + "/" + name, content); !w) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      return w.error();
    }
  if (::rename(tmp.c_str(), where->c_str()) == 0) return fsyncDirectory(parent.string());
  int err = errno;
  if (err != ENOTEMPTY && err != EEXIST)
    return leftIn(makeError("cannot move the reports into " + inQuotes(dir.path) + ": " + std::strerror(err), err));
  // Filled since the run began (checked then): replaced only with --force and only if it still
  // holds nothing but reports. The exchange is atomic; the old reports then go.
  if (!dir.force)
    return leftIn(makeError("the report directory " + inQuotes(dir.path) +
                                " is no longer empty: something wrote into it while this run ran",
                            err));
  if (auto ok = acceptable(*where, dir.path, true); !ok) return leftIn(ok.error());
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, where->c_str(), RENAME_EXCHANGE) != 0)
    return leftIn(makeError("cannot move the reports into " + inQuotes(dir.path) + ": " + std::strerror(errno), errno));
  std::error_code ec;
  fs::remove_all(tmp, ec);  // the previous run's reports, now at the temporary name
  return fsyncDirectory(parent.string());
}

}  // namespace rc::controller
