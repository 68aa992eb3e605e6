// Refusing a non-root privileged agent whose config or journal someone else can change.
#include "agent/privilege.hpp"

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace rc::agent {
namespace {

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(mode & 07777));
  return buf;
}

}  // namespace

Result<void> checkTrustedPaths(const PrivilegeFacts& self, const std::vector<TrustedPath>& paths) {
  if (self.euid == 0 || !self.capabilities) return {};
  const std::string how =
      self.fileCapabilities
          ? "with file capabilities (setcap) as uid " + std::to_string(self.euid)
          : "with capabilities as uid " + std::to_string(self.euid);
  const std::string fix =
      self.fileCapabilities
          ? "remove the file capabilities (setcap -r on the agent binary: with them any local "
            "user runs the agent with a config of their own) and run it as root or from the "
            "systemd unit with a dedicated user (docs/deploy.md, 'Not as root')"
          : "run it from the systemd unit with a dedicated user (docs/deploy.md, 'Not as root')";
  for (const auto& p : paths) {
    if (!p.exists) continue;  // created by the agent itself, private to it
    bool ownerOk = p.uid == 0 || (!self.fileCapabilities && p.uid == self.euid);
    if (!ownerOk)
      return makeError("rdmachaos-agent runs " + how + ", and its " + p.what + " '" + p.path +
                           "' is owned by uid " + std::to_string(p.uid) + ", not by root" +
                           (self.fileCapabilities ? "" : " or the agent's own user") +
                           ": whoever owns it can make the agent change the fabric. chown root '" +
                           p.path + "', or " + fix,
                       EPERM);
    if ((p.mode & (S_IWGRP | S_IWOTH)) != 0)
      return makeError("rdmachaos-agent runs " + how + ", and its " + p.what + " '" + p.path +
                           "' is writable by " + ((p.mode & S_IWOTH) ? "others" : "its group") +
                           " (mode " + octal(p.mode) +
                           "): they can make the agent change the fabric. chmod go-w '" + p.path +
                           "', or " + fix,
                       EPERM);
  }
  return {};
}

PrivilegeFacts currentPrivileges() {
  PrivilegeFacts f;
  f.euid = ::geteuid();
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("CapPrm:", 0) == 0 || line.rfind("CapEff:", 0) == 0)
      f.capabilities = f.capabilities || std::stoull(line.substr(7), nullptr, 16) != 0;
  f.fileCapabilities = ::getxattr("/proc/self/exe", "security.capability", nullptr, 0) > 0;
  return f;
}

TrustedPath statPath(std::string what, std::string path) {
  TrustedPath p{std::move(what), std::move(path)};
  struct stat st{};
  if (::stat(p.path.c_str(), &st) == 0) {
    p.exists = true;
    p.uid = st.st_uid;
    p.mode = st.st_mode;
  }
  return p;
}

}  // namespace rc::agent
