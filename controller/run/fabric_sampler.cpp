// FabricSampler: polls the lab switch's `counters` and `events` (labswitch/switch_protocol.hpp)
// into FabricEvidence.
#include "controller/run/fabric_sampler.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "common/clock.hpp"
#include "faults/fault.hpp"
#include "faults/labswitch_client.hpp"

namespace rc::controller {

struct FabricSampler::Impl {
  std::string socket;
  int64_t t0 = 0, period = 0;
  std::vector<FabricMeter> meters;
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  FabricEvidence ev;
  uint64_t lastSeq = 0;
  std::map<std::pair<std::string, int>, std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, int64_t, int64_t>>
      last;
  std::thread thread;
  int failures = 0;

  void sampleOnce() {
    int64_t at = wallNs() - t0;
    auto c = faults::labswitchCall(socket, swproto::CountersRequest{});
    auto e = faults::labswitchCall(socket, swproto::EventsRequest{.since = lastSeq});
    std::lock_guard lock(m);
    if (!c || !e) {
      // A busy switch may miss one poll; a gone one ends the evidence, said in the result.
      if (++failures >= 20 && ev.error.empty())
        ev.error = "lab switch at " + socket + " stopped answering: " + (!c ? c.error().message : e.error().message);
      return;
    }
    failures = 0;
    ev.load.push_back({at, c->loopNs, c->busyNs});
    for (const auto& p : c->ports)
      for (const auto& q : p.queues) {
        FabricSample s;
        s.tNs = at;
        s.port = p.name;
        s.queue = q.queue;
        s.pfcRx = q.pfcRx;
        s.pfcTx = q.pfcTx;
        s.ecnMarked = q.ecnMarked;
        s.drops = q.drops;
        s.wdDrops = q.wdDrops;
        s.depthBytes = q.depthBytes;
        s.pausedNs = q.pausedNs;
        s.xoffNs = q.xoffNs;
        s.stormGaps = q.stormGaps;
        auto key = std::make_pair(p.name, s.queue);
        auto now = std::make_tuple(s.pfcRx, s.pfcTx + s.stormGaps, s.ecnMarked, s.drops + s.wdDrops, s.depthBytes,
                                   s.pausedNs, s.xoffNs);
        auto it = last.find(key);
        // The first sample of every queue, then only when a counter moved or the queue holds
        // bytes: the counters are cumulative, so they keep their value in between.
        if (it == last.end() || it->second != now || std::get<4>(now) != 0) {
          ev.samples.push_back(s);
          last[key] = now;
        }
      }
    for (const auto& x : e->events) {
      lastSeq = std::max(lastSeq, x.seq);
      ev.events.push_back({x.wallNs - t0, x.what, x.port, x.priority, x.l4Dst});
    }
  }

  void loop() {
    std::unique_lock lock(m);
    while (!stop) {
      lock.unlock();
      sampleOnce();
      lock.lock();
      cv.wait_for(lock, std::chrono::nanoseconds(period), [this] { return stop; });
    }
  }
};

FabricSampler::FabricSampler(std::string socket, int64_t t0UnixNs, std::vector<FabricMeter> meters, int64_t periodNs)
    : impl_(std::make_unique<Impl>()) {
  impl_->socket = std::move(socket);
  impl_->t0 = t0UnixNs;
  impl_->period = periodNs;
  impl_->ev.source = "labswitch " + impl_->socket;
  // Events from before the run (an earlier run on the same lab) are not this run's evidence.
  if (auto e = faults::labswitchCall(impl_->socket, swproto::EventsRequest{.since = uint64_t(1) << 62}))
    impl_->lastSeq = e->lastSeq;
  for (const auto& m : meters) {
    auto r = faults::labswitchCall(impl_->socket, swproto::SetMeterRequest{.port = m.port, .l4Dst = m.l4Dst});
    if (r)
      impl_->meters.push_back(m);
    else if (impl_->ev.error.empty())
      impl_->ev.error = "lab switch did not meter " + m.port + ":" + std::to_string(m.l4Dst) + ": " + r.error().message;
  }
  impl_->thread = std::thread([this] { impl_->loop(); });
}

FabricSampler::~FabricSampler() {
  if (impl_ && impl_->thread.joinable()) (void)finish();
}

FabricEvidence FabricSampler::finish() {
  {
    std::lock_guard lock(impl_->m);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->sampleOnce();
  for (const auto& m : impl_->meters)
    (void)faults::labswitchCall(impl_->socket, swproto::DelMeterRequest{.port = m.port, .l4Dst = m.l4Dst});
  impl_->meters.clear();
  std::lock_guard lock(impl_->m);
  return impl_->ev;
}

std::optional<int> faultMeterPort(const std::string& kind, const std::string& role, const json& params) {
  const faults::FaultKind* k = faults::findKind(kind);
  if (!k || !k->wireMeter) return std::nullopt;
  return k->wireMeter(role, params);
}

}  // namespace rc::controller
