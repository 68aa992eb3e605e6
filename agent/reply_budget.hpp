// The bytes of replies and telemetry an agent holds for controllers that have not read them
// yet: a bound per session and one for the whole agent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace rc::agent {

// One session that does not read is cut at PER_SESSION. Many that read slowly (max_connections
// sessions, 64 by default, each under its own bound) could still hold PER_SESSION each, more
// than a pod's memory budget: past TOTAL the session that holds the most is cut, which is the
// one that reads least, not necessarily the one whose reply came last. Called on the loop only.
class ReplyBudget {
 public:
  ReplyBudget(size_t perSession, size_t total) : perSession_(perSession), total_(total) {}

  uint64_t open() {
    held_[next_] = 0;
    return next_++;
  }
  // The session's bytes are given back (it ended, or dropped what it held).
  void close(uint64_t session) {
    auto it = held_.find(session);
    if (it == held_.end()) return;
    sum_ -= it->second;
    held_.erase(it);
  }
  void release(uint64_t session, size_t bytes) {
    auto it = held_.find(session);
    if (it == held_.end()) return;
    bytes = bytes < it->second ? bytes : it->second;
    it->second -= bytes;
    sum_ -= bytes;
  }
  // Takes BYTES for SESSION and returns nothing, or returns the session that must be cut first
  // (SESSION itself when it is over its own bound or holds the most); after cutting it (close)
  // the caller asks again.
  std::optional<uint64_t> take(uint64_t session, size_t bytes) {
    auto it = held_.find(session);
    if (it == held_.end()) return session;
    if (it->second + bytes > perSession_) return session;
    if (sum_ + bytes > total_) {
      uint64_t most = session;
      size_t mostHeld = it->second + bytes;
      for (const auto& [id, held] : held_)
        if (held > mostHeld) most = id, mostHeld = held;
      return most;
    }
    it->second += bytes;
    sum_ += bytes;
    return std::nullopt;
  }
  bool known(uint64_t session) const { return held_.count(session) != 0; }
  size_t held(uint64_t session) const {
    auto it = held_.find(session);
    return it == held_.end() ? 0 : it->second;
  }
  size_t total() const { return sum_; }
  size_t perSessionLimit() const { return perSession_; }
  size_t totalLimit() const { return total_; }

 private:
  size_t perSession_, total_;
  size_t sum_ = 0;
  uint64_t next_ = 1;
  std::map<uint64_t, size_t> held_;
};

}  // namespace rc::agent
