// Move-only owner of a file descriptor.
#pragma once

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

}  // namespace rc
