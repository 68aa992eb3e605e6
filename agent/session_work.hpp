// The blocking work of one controller session (schedule, workload_start, capabilities), fed to
// the agent's worker pool one job at a time.
#pragma once

#include <utility>  // before Asio (see docs/lab.md)

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

namespace rc::agent {

// The pool's own queue is unbounded and first come, first served: a peer that pipelines
// thousands of requests would queue them all ahead of every other controller's `schedule`.
// Here a session has at most one job in the pool (the next goes in when that one's result is
// back on the loop, so the pool takes the sessions in turn), and at most LIMIT waiting; what
// waits is dropped when the session ends (cancel(), or the last reference going).
// add() and cancel() are called on the loop.
class SessionWork : public std::enable_shared_from_this<SessionWork> {
 public:
  using Work = std::function<nlohmann::json()>;  // runs on the pool; must not throw
  using Deliver = std::function<void(nlohmann::json)>;  // runs on the loop

  SessionWork(boost::asio::any_io_executor loop, boost::asio::any_io_executor pool, size_t limit)
      : loop_(std::move(loop)), pool_(std::move(pool)), limit_(limit) {}

  // Queues WORK; DELIVER gets its result on the loop unless the session was cancelled by then.
  // False (and nothing queued) when LIMIT jobs already wait.
  bool add(Work work, Deliver deliver) {
    if (cancelled_ || waiting_.size() >= limit_) return false;
    waiting_.push_back({std::move(work), std::move(deliver)});
    next();
    return true;
  }
  // Drops what waits; a job already in the pool finishes there and delivers nothing.
  void cancel() {
    cancelled_ = true;
    waiting_.clear();
  }
  size_t waiting() const { return waiting_.size(); }
  bool running() const { return running_; }

 private:
  struct Job {
    Work work;
    Deliver deliver;
  };
  void next() {
    if (running_ || cancelled_ || waiting_.empty()) return;
    running_ = true;
    auto job = std::make_shared<Job>(std::move(waiting_.front()));
    waiting_.pop_front();
    std::weak_ptr<SessionWork> weak = weak_from_this();
    boost::asio::post(pool_, [weak, job, loop = loop_]() {
      auto result = std::make_shared<nlohmann::json>();
      bool ok = true;
      try {
        *result = job->work();
      } catch (...) {
        ok = false;  // Work does not throw; if it did, the next job still goes in
      }
      boost::asio::post(loop, [weak, job, result, ok]() {
        auto self = weak.lock();
        if (!self) return;
        self->running_ = false;
        bool deliver = ok && !self->cancelled_;
        self->next();
        if (deliver) job->deliver(std::move(*result));
      });
    });
  }

  boost::asio::any_io_executor loop_, pool_;
  size_t limit_;
  std::deque<Job> waiting_;
  bool running_ = false, cancelled_ = false;
};

}  // namespace rc::agent
