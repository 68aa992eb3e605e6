// What vm_lab.cpp (the lab's life cycle) and vm_lab_guest.cpp (the files a guest boots from)
// share: the guest kernel found on the host, and the hint every missing prerequisite names.
#pragma once

#include <string>

#include "common/result.hpp"

namespace rc::lab::vm {

struct Kernel {
  std::string version;
  std::string image;    // vmlinuz
  std::string modules;  // /lib/modules/VERSION (what the guest sees there, too)
};

inline const std::string kInstallHint =
    "; run scripts/install-deps (as root; RDMACHAOS_NO_VM must not be 1) to install QEMU and "
    "the guest kernel";

inline constexpr const char* kGuestMgmtAddress = "10.0.2.15";  // QEMU user networking's guest address

// The initramfs (a newc cpio archive) that loads virtio and 9p from K's modules and switches
// into the host's root.
Result<std::string> initramfs(const Kernel& k);

// The guest's init script (PID 1 after switch_root), written into the lab's directory; it
// runs AGENTBINARY and restarts it when it exits.
std::string guestInit(const std::string& agentBinary);

}  // namespace rc::lab::vm
