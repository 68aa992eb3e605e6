// The iteration loop: steps over the transport, local reduction, verification, and the
// reconnect path (drop everything, reconnect, restart the iteration) that keeps faults from
// killing the run.
#include "workload/engine.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/units.hpp"
#include "workload/kinds.hpp"

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

size_t runBufferBytes(const Collective& coll) { return coll.bufferBytes() + 8 * (1 + coll.peers().size()); }

// After a lost connection some ranks may have finished the broken iteration and others not, so
// the ranks agree on the maximum of JOB_DONE (the iterations the job has completed) before going
// on; otherwise one rank would run an iteration more than its peers and wait forever. Exchanges
// 8 bytes with each peer world-1 times, behind the collective's CTL bytes of BUFFER.
StepStatus resyncIterations(Transport& transport, std::vector<std::byte>& buffer, size_t ctl,
                            const std::vector<int>& peers, int world, uint64_t& jobDone) {
  uint64_t v = jobDone;
  for (int round = 0; round < world - 1; round++) {
    std::memcpy(buffer.data() + ctl, &v, 8);
    std::vector<Op> ops;
    for (size_t k = 0; k < peers.size(); k++) {
      ops.push_back({Op::Kind::send, peers[k], ctl, 8});
      ops.push_back({Op::Kind::recv, peers[k], ctl + 8 * (1 + k), 8});
    }
    StepResult res = transport.runStep(ops);
    if (res.status != StepStatus::ok) return res.status;
    for (size_t k = 0; k < peers.size(); k++) {
      uint64_t x;
      std::memcpy(&x, buffer.data() + ctl + 8 * (1 + k), 8);
      v = std::max(v, x);
    }
  }
  jobDone = v;
  return StepStatus::ok;
}

// SHAPE's plan, once it is valid and of a kind the engine runs (a built-in one).
Result<std::unique_ptr<Collective>> planOf(const Shape& shape) {
  if (auto v = validateShape(shape); !v) return v.error();
  auto coll = makeCollective(shape);
  if (!coll)
    return makeError("workload kind '" + std::string(shape.kind->name) + "' runs an external program, not the engine");
  return coll;
}

}  // namespace

Result<std::vector<std::byte>> allocateRunBuffer(const Shape& shape) {
  auto coll = planOf(shape);
  if (!coll) return coll.error();
  const size_t bytes = runBufferBytes(**coll);
  try {
    return std::vector<std::byte>(bytes);
  } catch (const std::exception& ex) {  // bad_alloc, or length_error past the address space
    std::string msg = "cannot allocate ";
    msg += formatSize(bytes);
    msg += " of workload buffers on this node (";
    msg += ex.what();
    msg += "): lower the workload's size, or free memory on the node";
    return makeError(msg, ENOMEM);
  }
}

Summary runWorkload(const RunSpec& spec, Transport& transport, Telemetry& tel,
                    const std::atomic<bool>& stop, std::vector<std::byte> buffer) {
  Summary sum;
  Counters& c = sum.counters;
  auto fail = [&](std::string why) {
    // Peers blocked on us must learn at once that we are gone, not wait for a timeout.
    transport.disconnect();
    sum.endReason = "error";
    sum.error = std::move(why);
    c.errors++;
    tel.update(c);
    return sum;
  };
  Shape shape = spec.shape;
  shape.eagerSends = transport.eagerSends();
  auto plan = planOf(shape);
  if (!plan) return fail(plan.error().message);
  auto coll = std::move(*plan);
  auto peers = coll->peers();
  // The one buffer, allocated and registered once up front (a verbs transport pins it here);
  // behind the collective's part, 8 bytes to send and 8 per peer to receive for the resync.
  const size_t ctl = coll->bufferBytes();
  if (buffer.size() != runBufferBytes(*coll)) {
    auto b = allocateRunBuffer(spec.shape);
    if (!b) return fail(b.error().message);
    buffer = std::move(*b);
  }
  std::span<std::byte> buf(buffer.data(), ctl);
  if (auto r = transport.registerBuffer(buffer); !r) return fail(r.error().message);
  transport.setOnReceived([&tel](size_t n) { tel.addBytes(wallNs(), n); });

  const int64_t endNs = spec.iterations ? INT64_MAX : spec.startNs + spec.durationNs;
  // A rank whose peer ends first sees the connection close near the end: that is the end,
  // not a fault (ranks' clocks agree to well within this).
  const int64_t endGraceNs = 1'000'000'000;
  auto pastEnd = [&](int64_t slack) { return wallNs() >= endNs - slack; };

  sleepUntilWall(spec.startNs, stop);
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

  // Iterations the job has completed (resyncIterations).
  uint64_t jobDone = 0;
  auto resync = [&] { return resyncIterations(transport, buffer, ctl, peers, spec.shape.world, jobDone); };
  uint64_t index = 0;
  while (!stop.load()) {
    if (spec.iterations ? jobDone >= spec.iterations : pastEnd(0)) break;
    IterationRecord rec;
    rec.index = index++;
    rec.startNs = wallNs();
    coll->prepare(buf);
    uint64_t rx = 0;
    bool lost = false, closed = false;
    std::string why;
    for (size_t step = 0; step < coll->stepCount() && !lost; step++) {
      auto ops = coll->ops(step);
      for (const auto& op : ops)
        if (op.kind == Op::Kind::recv) rx += op.length;
      StepResult res = transport.runStep(ops);
      c.corruptions += res.corruptions;
      if (res.status == StepStatus::stopped) break;
      if (res.status == StepStatus::peerLost || res.status == StepStatus::peerClosed) {
        lost = true;
        closed = res.status == StepStatus::peerClosed;
        why = res.error;
        break;
      }
      coll->afterStep(step, buf);
    }
    if (stop.load()) break;
    if (lost) {
      if (!spec.iterations && pastEnd(endGraceNs)) break;  // a peer finished first
      // A peer that closed while we were in the last iteration has finished the run (it
      // completed that iteration, we lost the end of it).
      if (spec.iterations && closed && jobDone + 1 >= spec.iterations) {
        c.failedIterations++;
        break;
      }
      c.failedIterations++;
      c.errors++;
      log::warn("workload: iteration {} lost a connection ({}); reconnecting", rec.index, why);
      tel.update(c);
      // Reconnect and agree on the iteration count, all within the reconnect timeout; a
      // failure during the resync is one more lost connection, so go round again.
      const int64_t giveUp = monoNs() + spec.reconnectTimeoutNs;
      std::string err;
      for (;;) {
        transport.disconnect();
        auto r = transport.connect(peers, giveUp);
        if (!r) {
          err = r.error().message;
          break;
        }
        c.reconnects++;
        tel.update(c);
        StepStatus st = resync();
        if (st != StepStatus::peerLost && st != StepStatus::peerClosed) break;
        c.errors++;
        if (monoNs() >= giveUp) {
          err = "connections kept failing while resynchronising";
          break;
        }
      }
      if (!err.empty()) {
        if (stop.load()) break;
        if (!spec.iterations && pastEnd(endGraceNs)) break;
        return fail("a peer stayed unreachable for the reconnect timeout: " + err);
      }
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
    jobDone++;
    tel.addIteration(rec);
    tel.update(c);
  }
  transport.close();
  sum.endReason = stop.load() ? "stopped" : "completed";
  tel.update(c);
  return sum;
}

}  // namespace rc::workload
