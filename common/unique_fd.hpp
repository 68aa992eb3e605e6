// Move-only owner of a file descriptor, and the descriptor hygiene of a child before exec.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace rc {

class UniqueFD {
 public:
  UniqueFD() = default;
  explicit UniqueFD(int fd) : fd_(fd) {}
  ~UniqueFD() { reset(); }
  UniqueFD(UniqueFD&& other) noexcept : fd_(other.release()) {}
  UniqueFD& operator=(UniqueFD&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFD(const UniqueFD&) = delete;
  UniqueFD& operator=(const UniqueFD&) = delete;

  int get() const { return fd_; }
  bool isValid() const { return fd_ >= 0; }
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// In a forked child, right before exec: closes every descriptor above 2, so that a command the
// agent runs holds none of its sockets (TLS sessions, listeners, netlink), whether or not they
// were opened with CLOEXEC (Boost.Asio's accepted sockets are not). Async-signal-safe.
inline void closeDescriptorsAbove2() {
  if (::close_range(3, ~0u, 0) == 0) return;
  // Kernels before 5.9: each one up to the limit.
  rlimit lim{};
  int max = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 1u << 20 ? int(lim.rlim_cur) : 1 << 20;
  for (int fd = 3; fd < max; fd++) ::close(fd);
}

}  // namespace rc
