// lab::up, down and status (lab.hpp): the parts every lab kind shares, and the dispatch to the
// kind's own (lab_kind.hpp).
#include "lab/lab.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <thread>

#include "common/log.hpp"
#include "lab/lab_kind.hpp"
#include "lab/lab_util.hpp"
#include "lab/vm_lab.hpp"

namespace rc::lab {

const LabKind kNetnsKind = {
    .name = "netns",
    .text = "namespace lab",
    .chosen = [](const UpOptions& o) { return !o.softRoce; },
    .downNeedsRoot = true,
    .downRemovesLock = false,
    .up = netns::up,
    .downLocked = netns::downLocked,
    .status = netns::status,
};

const LabKind kVmKind = {
    .name = "vm",
    .text = "soft-RoCE lab",
    .chosen = [](const UpOptions& o) { return o.softRoce; },
    // QEMU guests and a switch of the caller's own, behind user-mode networking.
    .downNeedsRoot = false,
    .downRemovesLock = true,
    .up = vm::up,
    .downLocked = vm::downLocked,
    .status = vm::status,
};

namespace {

const std::array<const LabKind*, 2> kKinds = {&kNetnsKind, &kVmKind};

Result<const LabKind*> kindOf(const LabState& s) {
  if (const LabKind* k = findLabKind(s.kind)) return k;
  return makeError("'" + statePath(s.dir) + "' records a lab of kind '" + s.kind +
                   "', which this rdmachaos does not know; remove it with the rdmachaos that made it");
}

}  // namespace

const LabKind* findLabKind(std::string_view name) {
  for (const LabKind* k : kKinds)
    if (k->name == name) return k;
  return nullptr;
}

std::string labKindText(std::string_view name) {
  if (const LabKind* k = findLabKind(name)) return std::string(k->text);
  return "lab of kind '" + std::string(name) + "'";
}

Result<void> downLockedDir(const std::string& dir) {
  auto loaded = loadState(dir);
  if (!loaded) {
    if (loaded.error().code == ENOENT) return {};
    return loaded.error();
  }
  const LabState& s = *loaded;
  if (s.dir != dir)
    return makeError("'" + statePath(dir) + "' was written for the directory '" + s.dir +
                     "'; refusing to act on it (was the directory copied or moved?)");
  auto kind = kindOf(s);
  if (!kind) return kind.error();
  return (*kind)->downLocked(s);
}

// On the 2-core machines the lab is measured on (bench/README.md), one switch process carries
// about 3 hosts at 1G (quickstart, link-flap-recovery: busiest second 33-46 %) or 4 at 600M
// (noise-floor: band 2.3 %, busiest second 34-46 %; at 1G 55 % and a band of 19 %): some 2.4-3 Gb/s
// of ports under half of its core. More cores give the hosts' own stacks room, not the switch
// more than one core, so the budget grows with the cores the hosts leave it, capped at 1G a port.
RateChoice chooseRate(int nodes, unsigned cores) {
  if (cores == 0) cores = std::max(1u, std::thread::hardware_concurrency());
  const int n = std::max(1, nodes);
  RateChoice c;
  const std::string on = std::to_string(n) + " node" + (n == 1 ? "" : "s") + " on " + std::to_string(cores) +
                         " core" + (cores == 1 ? "" : "s");
  if (n <= 3 && cores >= 2) {
    c.bps = 1e9;
  } else {
    const double budget = 2.4e9 * std::max(1u, cores - 1);
    c.bps = std::clamp(std::floor(budget / n / 1e8) * 1e8, 1e8, 1e9);
  }
  char rate[32];
  if (c.bps >= 1e9)
    std::snprintf(rate, sizeof rate, "%gG", c.bps / 1e9);
  else
    std::snprintf(rate, sizeof rate, "%gM", c.bps / 1e6);
  c.why = std::string("port rate ") + rate + " for " + on +
          ": the lab switch then stays under half its CPU at a job's full load (docs/lab.md, \"The rate\"); "
          "--rate sets another";
  return c;
}

Result<std::string> up(const UpOptions& options) {
  for (const LabKind* k : kKinds)
    if (k->chosen(options)) return k->up(options);
  return makeError("lab up: no lab kind takes these options");
}

Result<void> down(const std::string& dirArg) {
  if (dirArg.empty()) return makeError("lab down: no lab directory given (--dir DIR)");
  std::string dir = absoluteDir(dirArg);
  if (::access(statePath(dir).c_str(), F_OK) != 0) {
    log::info("no lab in {} (nothing to remove)", dir);
    return {};
  }
  if (auto r = trustedDir(dir); !r) return r.error();
  // The kind decides whether root is needed; an unreadable state is for root to clean up.
  const LabKind* kind = &kNetnsKind;
  if (auto s = loadState(dir))
    if (const LabKind* k = findLabKind(s->kind)) kind = k;
  if (kind->downNeedsRoot && ::geteuid() != 0)
    return makeError("lab down needs root (CAP_NET_ADMIN) to remove namespaces; run with sudo");
  auto dirLock = FileLock::acquire(dir + "/.lab.lock", true);
  if (!dirLock) return dirLock.error();
  auto r = downLockedDir(dir);
  if (r && kind->downRemovesLock) ::unlink((dir + "/.lab.lock").c_str());
  return r;
}

Result<std::string> status(const std::string& dirArg) {
  if (dirArg.empty()) return makeError("lab status: no lab directory given (--dir DIR)");
  std::string dir = absoluteDir(dirArg);
  auto loaded = loadState(dir);
  if (!loaded) {
    if (loaded.error().code == ENOENT)
      return "no lab in " + dir + " (start one with `rdmachaos lab up --dir " + dir + "`)\n";
    return loaded.error();
  }
  auto kind = kindOf(*loaded);
  if (!kind) return kind.error();
  return (*kind)->status(*loaded);
}

}  // namespace rc::lab
