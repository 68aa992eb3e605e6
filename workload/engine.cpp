// The iteration loop: steps over the transport, local reduction, verification, and the
// reconnect path (drop everything, reconnect, restart the iteration) that keeps faults from
// killing the run.
#include "workload/engine.hpp"

#include <time.h>

#include <vector>

#include "common/clock.hpp"
#include "common/log.hpp"

namespace rc::workload {

namespace {

// Sleeps until wall-clock time T or STOP; short slices so a stop is seen promptly.
void sleepUntilWall(int64_t t, const std::atomic<bool>& stop) {
  while (!stop.load()) {
    int64_t left = t - wallNs();
    if (left <= 0) return;
    int64_t slice = std::min<int64_t>(left, 20'000'000);
    timespec ts{time_t(slice / 1'000'000'000), long(slice % 1'000'000'000)};
    ::nanosleep(&ts, nullptr);
  }
}

}  // namespace

Summary runWorkload(const RunSpec& spec, Transport& transport, Telemetry& tel,
                    const std::atomic<bool>& stop) {
  Summary sum;
  Counters& c = sum.counters;
  auto fail = [&](std::string why) {
    sum.endReason = "error";
    sum.error = std::move(why);
    c.errors++;
    tel.update(c);
    return sum;
  };
  if (auto v = validateShape(spec.shape); !v) return fail(v.error().message);
  auto coll = makeCollective(spec.shape);
  // The one buffer, allocated and registered once up front (a verbs transport pins it here).
  std::vector<std::byte> buffer(coll->bufferBytes());
  std::span<std::byte> buf(buffer);
  if (auto r = transport.registerBuffer(buf); !r) return fail(r.error().message);
  transport.setOnReceived([&tel](size_t n) { tel.addBytes(wallNs(), n); });

  const int64_t endNs = spec.iterations ? INT64_MAX : spec.startNs + spec.durationNs;
  // A rank whose peer ends first sees the connection close near the end: that is the end,
  // not a fault (ranks' clocks agree to well within this).
  const int64_t endGraceNs = 1'000'000'000;
  auto pastEnd = [&](int64_t slack) { return wallNs() >= endNs - slack; };

  sleepUntilWall(spec.startNs, stop);
  auto peers = coll->peers();
  auto connectAll = [&]() -> Result<void> {
    return transport.connect(peers, monoNs() + spec.reconnectTimeoutNs);
  };
  if (!stop.load()) {
    if (auto r = connectAll(); !r) {
      if (stop.load()) {
        sum.endReason = "stopped";
        return sum;
      }
      return fail("cannot connect to the other ranks: " + r.error().message);
    }
  }

  uint64_t index = 0;
  while (!stop.load()) {
    if (spec.iterations ? c.iterations >= spec.iterations : pastEnd(0)) break;
    IterationRecord rec;
    rec.index = index++;
    rec.startNs = wallNs();
    coll->prepare(buf);
    uint64_t rx = 0;
    bool lost = false;
    std::string why;
    for (size_t step = 0; step < coll->stepCount() && !lost; step++) {
      auto ops = coll->ops(step);
      for (const auto& op : ops)
        if (op.kind == Op::Kind::recv) rx += op.length;
      StepResult res = transport.runStep(ops);
      c.corruptions += res.corruptions;
      if (res.status == StepStatus::stopped) break;
      if (res.status == StepStatus::peerLost) {
        lost = true;
        why = res.error;
        break;
      }
      coll->afterStep(step, buf);
    }
    if (stop.load()) break;
    if (lost) {
      if (!spec.iterations && pastEnd(endGraceNs)) break;  // a peer finished first
      c.failedIterations++;
      c.errors++;
      log::warn("workload: iteration {} lost a connection ({}); reconnecting", rec.index, why);
      tel.update(c);
      transport.disconnect();
      auto r = connectAll();
      if (!r) {
        if (stop.load()) break;
        if (!spec.iterations && pastEnd(endGraceNs)) break;
        return fail("a peer stayed unreachable for the reconnect timeout: " + r.error().message);
      }
      c.reconnects++;
      tel.update(c);
      continue;
    }
    rec.endNs = wallNs();
    rec.rxBytes = rx;
    rec.ok = coll->verify(buf);
    if (!rec.ok) {
      c.verifyFailures++;
      sum.verified = false;
    }
    c.iterations++;
    tel.addIteration(rec);
    tel.update(c);
  }
  transport.close();
  sum.endReason = stop.load() ? "stopped" : "completed";
  tel.update(c);
  return sum;
}

}  // namespace rc::workload
