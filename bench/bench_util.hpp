// Helpers the lab benchmarks share: a command's output, a thread entering a lab namespace, and
// a UDP flood from one. Benchmarks only: they exit a child on failure rather than report it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/unique_fd.hpp"

namespace bench {

// What CMD (a shell command) prints on its standard output.
inline std::string capture(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

// Moves the calling thread into the named namespace (/run/netns/NS); false if it could not.
inline bool enterNetns(const std::string& ns) {
  rc::UniqueFD fd(::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
  return fd.isValid() && ::setns(fd.get(), CLONE_NEWNET) == 0;
}

// A child in namespace NS that floods DST (port 9) with 1472-byte UDP payloads (1514-byte frames)
// by sendmmsg until killed; returns its pid.
inline pid_t udpFlood(const std::string& ns, const std::string& dst) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (!enterNetns(ns)) ::_exit(3);
  int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  ::inet_pton(AF_INET, dst.c_str(), &to.sin_addr);
  ::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
  static char payload[1472];
  iovec iov{payload, sizeof payload};
  mmsghdr m[32]{};
  for (auto& x : m) {
    x.msg_hdr.msg_iov = &iov;
    x.msg_hdr.msg_iovlen = 1;
  }
  for (;;) (void)!::sendmmsg(s, m, 32, 0);
}

}  // namespace bench
