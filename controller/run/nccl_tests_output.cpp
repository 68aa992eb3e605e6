#include "controller/run/nccl_tests_output.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace rc::controller {

namespace {

constexpr std::uintmax_t kMaxBytes = 64u << 20;  // nccl-tests prints kilobytes; a log of a whole job a few MB

Result<std::string> readCapped(const std::string& file) {
  struct stat st{};
  if (::stat(file.c_str(), &st) != 0) return makeError(file + ": " + std::strerror(errno), errno);
  if (!S_ISREG(st.st_mode)) return makeError(file + " is not a regular file");
  if (std::uintmax_t(st.st_size) > kMaxBytes)
    return makeError(file + " is " + std::to_string(st.st_size) + " bytes, more than nccl-tests prints (64 MiB at most " +
                     "is read): is it the right file?");
  std::ifstream in(file, std::ios::binary);
  if (!in) return makeError(file + ": cannot open: " + std::strerror(errno), errno);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Result<void> checkNcclTestsOutputPath(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(file, ec)) return makeError(file + " is a directory: name the file nccl-tests writes its output to");
  const fs::path parent = fs::path(file).has_parent_path() ? fs::path(file).parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    return makeError("the directory of " + file + " does not exist: name the file the job's nccl-tests writes " +
                     "(e.g. `all_reduce_perf ... | tee " + file + "`)");
  return {};
}

RunResult::NcclTests readNcclTestsOutput(const std::string& file, std::chrono::milliseconds wait,
                                        const std::function<void(int)>& progress) {
  using clock = std::chrono::steady_clock;
  RunResult::NcclTests out;
  out.file = file;
  const auto until = clock::now() + wait;
  auto nextNote = clock::now();
  for (;;) {
    auto text = readCapped(file);
    const bool last = clock::now() >= until;
    if (text) {
      auto rep = workload::parseNcclTests(*text);
      // A complete report, or one that failed outright, needs no more waiting.
      if (rep && (rep->complete() || !rep->failures.empty() || last)) {
        out.report = std::move(*rep);
        return out;
      }
      if (!rep && last) {
        out.error = file + ": " + rep.error().message;
        return out;
      }
    } else if (last) {
      out.error = text.error().message;
      return out;
    }
    if (progress && clock::now() >= nextNote) {
      progress(int(std::chrono::duration_cast<std::chrono::seconds>(until - clock::now()).count()));
      nextNote = clock::now() + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace rc::controller
