// The kinds of embedded lab behind one interface (lab.hpp's up, down and status): a record per
// kind, and lab.cpp dispatches to it by the kind a lab's state records (LabState::kind). A new
// lab kind is its own source file with these three functions and a row in lab.cpp's table.
#pragma once

#include <string>
#include <string_view>

#include "common/result.hpp"
#include "lab/lab.hpp"
#include "lab/lab_state.hpp"

namespace rc::lab {

struct LabKind {
  std::string_view name;  // LabState::kind
  std::string_view text;  // what messages call it: "namespace lab"
  bool (*chosen)(const UpOptions& options) = nullptr;  // `lab up` with OPTIONS makes this kind
  // `lab down` stops processes and removes namespaces and links as root (CAP_NET_ADMIN).
  bool downNeedsRoot = false;
  // After `lab down`, DIR keeps nothing of the lab, not even its lock file.
  bool downRemovesLock = false;
  // Validates OPTIONS, takes DIR's lock and brings the lab up (removing what it created on
  // failure); the path of DIR/inventory.toml.
  Result<std::string> (*up)(const UpOptions& options) = nullptr;
  // Stops and removes everything STATE records, with DIR's lock held.
  Result<void> (*downLocked)(const LabState& state) = nullptr;
  Result<std::string> (*status)(const LabState& state) = nullptr;
};

namespace netns {
Result<std::string> up(const UpOptions& options);
Result<void> downLocked(const LabState& state);
Result<std::string> status(const LabState& state);
}  // namespace netns

extern const LabKind kNetnsKind;
extern const LabKind kVmKind;

const LabKind* findLabKind(std::string_view name);
// "soft-RoCE lab", or "lab of kind 'NAME'" for a name no kind has.
std::string labKindText(std::string_view name);
// lab down of the lab in DIR (an absolute path) with DIR's lock held: loads its state, checks
// that the state was written for DIR and calls its kind's downLocked. No state: nothing to do.
Result<void> downLockedDir(const std::string& dir);

}  // namespace rc::lab
