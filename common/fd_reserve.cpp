// FdReserve: descriptors on /dev/null, closed for reverts and reopened after.
#include "common/fd_reserve.hpp"

#include <fcntl.h>

namespace rc {

void FdReserve::setWanted(size_t count) {
  std::lock_guard lock(m_);
  wanted_ = count;
  while (fds_.size() > wanted_) fds_.pop_back();
  (void)refillLocked();
}

size_t FdReserve::wanted() const {
  std::lock_guard lock(m_);
  return wanted_;
}

size_t FdReserve::held() const {
  std::lock_guard lock(m_);
  return fds_.size();
}

bool FdReserve::refill() {
  std::lock_guard lock(m_);
  return refillLocked();
}

bool FdReserve::refillLocked() {
  // Released for a revert: refilled when it ends. Not a shortage: connections may go on.
  if (users_ > 0) return true;
  while (fds_.size() < wanted_) {
    UniqueFD fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!fd.isValid()) return false;
    fds_.push_back(std::move(fd));
  }
  return true;
}

FdReserve::Use::Use(FdReserve& reserve) : reserve_(reserve) {
  std::lock_guard lock(reserve_.m_);
  if (reserve_.users_++ == 0) reserve_.fds_.clear();
}

FdReserve::Use::~Use() {
  std::lock_guard lock(reserve_.m_);
  if (--reserve_.users_ == 0) (void)reserve_.refillLocked();
}

FdReserve& fdReserve() {
  static FdReserve reserve;
  return reserve;
}

}  // namespace rc
