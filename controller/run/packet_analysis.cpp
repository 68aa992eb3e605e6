// What a run's packet faults did (see packet_analysis.hpp).
#include "controller/run/packet_analysis.hpp"

#include <sys/stat.h>

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
    std::ifstream in;
    if (trusted) in.open(*trusted, std::ios::binary);
    if (!trusted || !in) {
      a.captureError = trusted ? "cannot read the capture " + a.captureSource : trusted.error().message;
      run.packets.push_back(std::move(a));
      continue;
    }
    a.captureBytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    a.captureFile = "capture-t" + std::to_string(f.trial) + "-" + safe(f.step) + "-" + safe(f.node) + ".pcapng";
    auto recs = pcapng::read(a.captureSource);
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
