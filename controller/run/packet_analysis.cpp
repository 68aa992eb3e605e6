// What a run's packet faults did (see packet_analysis.hpp).
#include "controller/run/packet_analysis.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/pcapng.hpp"
#include "controller/run/run_result.hpp"
#include "oracle/gbn_oracle.hpp"

namespace rc::controller {
namespace {

// "matched N, acted M, ..." (the fault's packet_summary event).
uint64_t count(const std::string& summary, const std::string& word) {
  auto at = summary.find(word + " ");
  if (at == std::string::npos) return 0;
  return std::strtoull(summary.c_str() + at + word.size() + 1, nullptr, 10);
}

std::string safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return s;
}

}  // namespace

Result<std::string> trustedCapture(const std::string& path, const std::string& switchControl) {
  if (switchControl.empty())
    return makeError("the inventory names no lab switch ([lab] switch_control): its captures are not read");
  auto slash = switchControl.rfind('/');
  const std::string dir = (slash == std::string::npos ? std::string(".") : switchControl.substr(0, slash)) + "/captures/";
  const std::string prefix = dir + "packet-", suffix = ".pcapng";
  if (path.size() <= prefix.size() + suffix.size() || path.compare(0, prefix.size(), prefix) != 0 ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return makeError("the capture '" + path + "' is not a lab switch capture (" + prefix + "*" + suffix + "): not read");
  const std::string name = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return makeError("the capture '" + path + "' is not a lab switch capture: not read");
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0)
    return makeError("the capture " + path + " is not on this machine (the lab switch runs elsewhere)");
  if (!S_ISREG(st.st_mode)) return makeError("the capture '" + path + "' is not a regular file: not read");
  return path;
}

// The whole of a trusted capture in one read of one open file (no second open between a check
// and a read), refused above the lab switch's largest capture_limit (1 GiB) and a block's slack.
Result<std::string> readCapture(const std::string& path) {
  constexpr uint64_t kMaxCaptureBytes = (uint64_t(1) << 30) + (1 << 20);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return makeError("cannot read the capture " + path + ": " + std::strerror(errno), errno);
  struct stat st{};
  std::string out;
  Result<std::string> result = makeError("cannot read the capture " + path);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    result = makeError("the capture '" + path + "' is not a regular file: not read");
  } else if (uint64_t(st.st_size) > kMaxCaptureBytes) {
    result = makeError("the capture " + path + " is " + std::to_string(st.st_size) +
                       " bytes, more than the lab switch writes (capture_limit is at most 1 GiB): not read");
  } else {
    out.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    out.resize(got);
    result = std::move(out);
  }
  ::close(fd);
  return result;
}

void removeReadCaptures(const RunResult& run) {
  for (const auto& p : run.packets)
    if (!p.captureRead.empty() && ::unlink(p.captureRead.c_str()) != 0 && errno != ENOENT)
      std::fprintf(stderr, "note: could not remove the lab switch's capture %s: %s\n", p.captureRead.c_str(),
                   std::strerror(errno));
}

void analysePackets(RunResult& run, const std::string& switchControl) {
  run.packets.clear();
  for (const auto& f : run.faults) {
    if (f.kind != "packet") continue;
    PacketAnalysis a;
    a.trial = f.trial;
    a.step = f.step;
    a.node = f.node;
    a.action = f.params.value("action", "");
    a.protocol = f.params.value("protocol", "roce");
    for (const auto& e : f.events) {
      if (e.what == "capture") a.captureSource = e.detail;
      if (e.what == "packet_summary") {
        a.matched = count(e.detail, "matched");
        a.acted = count(e.detail, "acted");
      }
    }
    if (a.captureSource.empty()) {
      a.captureError = f.params.value("capture", true) ? "the fault reported no capture" : "capture = false";
      run.packets.push_back(std::move(a));
      continue;
    }
    auto trusted = trustedCapture(a.captureSource, switchControl);
    auto bytes = trusted ? readCapture(*trusted) : Result<std::string>(trusted.error());
    if (!bytes) {
      a.captureError = bytes.error().message;
      run.packets.push_back(std::move(a));
      continue;
    }
    // One read: the copy the report publishes is the bytes the oracle judged.
    a.captureBytes = std::move(*bytes);
    a.captureRead = a.captureSource;
    a.captureFile = "capture-t" + std::to_string(f.trial) + "-" + safe(f.step) + "-" + safe(f.node) + ".pcapng";
    auto recs = pcapng::parse(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.captureBytes.data()), a.captureBytes.size()),
        a.captureSource);
    if (!recs) {
      a.captureError = recs.error().message;
    } else if (a.protocol == "roce") {
      auto rep = oracle::analyse(*recs);
      // A frame never delivered is allowed when its QP errored out: the job says so by
      // re-creating its QPs (workload_reconnects) in the trial.
      uint64_t reconnects = 0;
      for (const auto& c : run.counters) {
        if (c.trial != f.trial) continue;
        auto b = c.before.find("workload_reconnects"), e = c.after.find("workload_reconnects");
        if (b != c.before.end() && e != c.after.end() && e->second > b->second) reconnects += e->second - b->second;
      }
      if (reconnects > 0)
        oracle::acceptQpErrors(rep, "the job re-created its QPs " + std::to_string(reconnects) + " time(s) in the trial");
      a.oracle = oracle::toJson(rep);
      a.oracleText = oracle::toText(rep);
      a.findings = double(rep.findings.size());
      for (const auto& fl : rep.flows)
        for (const auto& ep : fl.episodes) {
          a.nakGenerationMaxNs = std::max(a.nakGenerationMaxNs, double(ep.nakGenerationNs));
          a.nakReactionMaxNs = std::max(a.nakReactionMaxNs, double(ep.nakReactionNs));
          a.timeoutWaitMaxNs = std::max(a.timeoutWaitMaxNs, double(ep.timeoutWaitNs));
        }
    }
    run.packets.push_back(std::move(a));
  }
}

json packetFaultsJson(const std::vector<PacketAnalysis>& packets) {
  json out = json::array();
  for (const auto& a : packets) {
    json j = {{"trial", a.trial}, {"step", a.step}, {"node", a.node}, {"action", a.action},
              {"protocol", a.protocol}, {"matched", a.matched}, {"acted", a.acted},
              {"capture", a.captureFile.empty() ? json(nullptr) : json(a.captureFile)},
              {"capture_source", a.captureSource}};
    if (!a.captureError.empty()) j["capture_error"] = a.captureError;
    if (a.oracle) {
      j["oracle"] = *a.oracle;
      j["oracle_text"] = a.oracleText;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace rc::controller
