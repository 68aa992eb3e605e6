// What a run's packet faults did (see packet_analysis.hpp).
#include "controller/packet_analysis.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/pcapng.hpp"
#include "controller/commands.hpp"
#include "controller/run_result.hpp"
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

void analysePackets(RunResult& run) {
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
    std::ifstream in(a.captureSource, std::ios::binary);
    if (!in) {
      a.captureError = "the capture " + a.captureSource + " is not on this machine (the lab switch runs elsewhere)";
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

int cmdOracle(const std::string& capture, bool asJson) {
  auto recs = pcapng::read(capture);
  if (!recs) {
    std::fprintf(stderr, "error: %s\n", recs.error().message.c_str());
    return kExitError;
  }
  auto rep = oracle::analyse(*recs);
  if (asJson)
    std::printf("%s\n", oracle::toJson(rep).dump(2).c_str());
  else
    std::printf("%s", oracle::toText(rep).c_str());
  return rep.pass() ? kExitOk : kExitFailed;
}

}  // namespace rc::controller
