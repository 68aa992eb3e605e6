// FabricSampler: polls the lab switch's `counters` and `events` into FabricEvidence.
#include "controller/fabric_sampler.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "common/clock.hpp"
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
    auto c = faults::labswitchRequest(socket, {{"cmd", "counters"}});
    auto e = faults::labswitchRequest(socket, {{"cmd", "events"}, {"since", lastSeq}});
    std::lock_guard lock(m);
    if (!c || !e) {
      // A busy switch may miss one poll; a gone one ends the evidence, said in the result.
      if (++failures >= 20 && ev.error.empty())
        ev.error = "lab switch at " + socket + " stopped answering: " + (!c ? c.error().message : e.error().message);
      return;
    }
    failures = 0;
    const auto& cj = *c;
    if (cj.contains("loop_ns") && cj.contains("busy_ns") && cj["loop_ns"].is_number_integer() &&
        cj["busy_ns"].is_number_integer())
      ev.load.push_back({at, cj["loop_ns"].get<int64_t>(), cj["busy_ns"].get<int64_t>()});
    if (cj.contains("ports") && cj["ports"].is_array())
      for (const auto& p : cj["ports"]) {
        std::string port = p.value("name", "");
        if (!p.contains("queues")) continue;
        for (const auto& q : p["queues"]) {
          FabricSample s;
          s.tNs = at;
          s.port = port;
          s.queue = q.value("queue", 0);
          s.pfcRx = q.value("pfc_rx", uint64_t(0));
          s.pfcTx = q.value("pfc_tx", uint64_t(0));
          s.ecnMarked = q.value("ecn_marked", uint64_t(0));
          s.drops = q.value("drops", uint64_t(0));
          s.wdDrops = q.value("wd_drops", uint64_t(0));
          s.depthBytes = q.value("depth_bytes", uint64_t(0));
          s.pausedNs = q.value("paused_ns", int64_t(0));
          s.xoffNs = q.value("xoff_ns", int64_t(0));
          s.stormGaps = q.value("storm_gaps", uint64_t(0));
          auto key = std::make_pair(port, s.queue);
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
      }
    const auto& ej = *e;
    if (ej.contains("events") && ej["events"].is_array())
      for (const auto& x : ej["events"]) {
        lastSeq = std::max(lastSeq, x.value("seq", uint64_t(0)));
        ev.events.push_back({x.value("wall_ns", int64_t(0)) - t0, x.value("what", ""), x.value("port", ""),
                             x.value("priority", 0), x.value("l4_dst", -1)});
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
  if (auto e = faults::labswitchRequest(impl_->socket, {{"cmd", "events"}, {"since", uint64_t(1) << 62}}))
    impl_->lastSeq = e->value("last_seq", uint64_t(0));
  for (const auto& m : meters) {
    auto r = faults::labswitchRequest(impl_->socket, {{"cmd", "set_meter"}, {"port", m.port}, {"l4_dst", m.l4Dst}});
    if (r && r->value("ok", false))
      impl_->meters.push_back(m);
    else if (impl_->ev.error.empty())
      impl_->ev.error = "lab switch did not meter " + m.port + ":" + std::to_string(m.l4Dst) + ": " +
                        (r ? r->value("error", std::string("?")) : r.error().message);
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
    (void)faults::labswitchRequest(impl_->socket, {{"cmd", "del_meter"}, {"port", m.port}, {"l4_dst", m.l4Dst}});
  impl_->meters.clear();
  std::lock_guard lock(impl_->m);
  return impl_->ev;
}

}  // namespace rc::controller
