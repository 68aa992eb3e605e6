// What a run's packet faults did: for each `packet` fault record, the switch's
// capture (read where the lab switch wrote it: the lab runs on the controller's machine), a
// copy of it for the report directory, the rule's counts, and for RoCE the go-back-N oracle's
// verdicts (oracle/gbn_oracle.hpp). Scoring reads the oracle's numbers as metrics
// (gbn_violations, nak_generation_time, ...); the reports print its lines and link the capture.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::controller {

using json = nlohmann::json;
struct RunResult;

struct PacketAnalysis {
  int trial = 0;
  std::string step, node, action, protocol;
  uint64_t matched = 0, acted = 0;
  std::string captureSource;  // where the switch wrote it
  std::string captureFile;    // its name in the report directory ("" = none)
  std::string captureBytes;   // its content, published with the reports (not in result.json)
  std::string captureRead;    // the lab switch's file it was read from (removed once published)
  std::string captureError;   // why there is no capture or no oracle
  std::optional<json> oracle; // oracle::toJson of the capture (RoCE rules)
  std::string oracleText;     // oracle::toText
  // The oracle's numbers: findings, and the largest latencies over its episodes (ns; -1 none).
  double findings = 0;
  double nakGenerationMaxNs = -1, nakReactionMaxNs = -1, timeoutWaitMaxNs = -1;
};

// Fills RUN.packets from RUN.faults (kind "packet"). A capture is read only where the lab
// switch of the inventory writes them (SWITCHCONTROL's directory + "/captures/packet-*.pcapng",
// a regular file): the path comes from an agent's event, and a controller must not copy any
// file an agent names into its reports.
void analysePackets(RunResult& run, const std::string& switchControl);
// Removes the lab switch's capture files analysePackets read: call once the report directory
// holds their copies, so that a lab's captures directory does not grow with every run.
void removeReadCaptures(const RunResult& run);
// The capture file PATH if it is one the lab switch at SWITCHCONTROL wrote, else why not.
Result<std::string> trustedCapture(const std::string& path, const std::string& switchControl);
// result.json's "packet_faults" (the capture's bytes stay out).
json packetFaultsJson(const std::vector<PacketAnalysis>& packets);

}  // namespace rc::controller
