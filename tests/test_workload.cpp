// Workload engine: collectives are correct for 2..8 ranks over the in-process transport and
// over TCP on loopback; telemetry adds up; lost connections and corruption are survived and
// counted.
#include <catch2/catch.hpp>
#include <thread>

#include "common/clock.hpp"
#include "workload/checksum.hpp"
#include "workload/engine.hpp"
#include "workload/inproc_transport.hpp"
#include "workload/kinds.hpp"
#include "rdmachaos_config.h"
#include "workload/tcp_transport.hpp"
#if RDMACHAOS_HAVE_VERBS_TRANSPORT
#include "workload/verbs_transport.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_workload {
#endif

using namespace rc;
using namespace rc::workload;

namespace {

struct RankResult {
  Summary summary;
  std::vector<TelemetryBatch> batches;
};

RunSpec specFor(const Kind* kind, int rank, int world, uint64_t size, uint64_t iterations) {
  RunSpec s;
  s.shape.kind = kind;
  s.shape.rank = rank;
  s.shape.world = world;
  s.shape.size = size;
  s.shape.incastReceiver = world - 1;
  s.shape.fanIn = world > 3 ? 2 : 0;
  s.iterations = iterations;
  s.startNs = wallNs();
  s.reconnectTimeoutNs = 5'000'000'000;
  return s;
}

// Runs WORLD ranks on threads, each with its own transport, and drains telemetry as a
// reporter would (concurrently, then a final drain).
template <typename MakeTransport>
std::vector<RankResult> runWorld(const Kind* kind, int world, uint64_t size, uint64_t iterations,
                                 MakeTransport make, std::function<void()> during = {}) {
  std::vector<RankResult> out(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < world; r++) ts.push_back(make(r));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  int64_t origin = wallNs();
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      Telemetry tel(origin, 1'000'000);
      std::atomic<bool> done{false};
      std::thread reporter([&] {
        while (!done) {
          out[size_t(r)].batches.push_back(tel.drain(wallNs(), false));
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
        }
      });
      auto spec = specFor(kind, r, world, size, iterations);
      out[size_t(r)].summary = runWorkload(spec, *ts[size_t(r)], tel, stop);
      done = true;
      reporter.join();
      out[size_t(r)].batches.push_back(tel.drain(wallNs(), true));
    });
  }
  if (during) during();
  for (auto& t : threads) t.join();
  return out;
}

void checkTelemetry(const RankResult& r) {
  uint64_t binBytes = 0, iterBytes = 0;
  int64_t nextBin = 0, lastEnd = 0;
  for (const auto& b : r.batches) {
    // Batches continue one another: bins are contiguous and in time order.
    if (!b.bins.empty()) {
      if (nextBin) CHECK(b.firstBinNs == nextBin);
      nextBin = b.firstBinNs + int64_t(b.bins.size()) * b.binNs;
    }
    for (auto x : b.bins) binBytes += x;
    for (const auto& it : b.iterations) {
      CHECK(it.startNs >= lastEnd);
      CHECK(it.endNs >= it.startNs);
      lastEnd = it.endNs;
      iterBytes += it.rxBytes;
    }
  }
  CHECK(binBytes == r.batches.back().counters.rxBytes);
  if (r.summary.counters.failedIterations == 0) CHECK(binBytes == iterBytes);
}

}  // namespace

TEST_CASE("ring all-reduce is exact for 2..8 ranks and sizes not divisible by the rank count") {
  int world = GENERATE(2, 3, 4, 5, 7, 8);
  // 4 MB + 12 B: chunks of 0.5-2 MB, cut into slices sent ahead (the in-process transport
  // has eager sends), with slices of unequal length.
  uint64_t size = GENERATE(4, 4 * 7, 4 * 1001, 1 << 20, 4 * 1'000'003);
  auto fabric = std::make_shared<InprocFabric>();
  auto res = runWorld(rc::workload::findKind("allreduce"), world, size, 3,
                      [&](int r) { return std::make_unique<InprocTransport>(fabric, r); });
  for (auto& r : res) {
    INFO("world " << world << " size " << size << ": " << r.summary.error);
    CHECK(r.summary.endReason == "completed");
    CHECK(r.summary.verified);
    CHECK(r.summary.counters.iterations == 3);
    CHECK(r.summary.counters.verifyFailures == 0);
    checkTelemetry(r);
  }
}

TEST_CASE("ring all-reduce's plan: slices sent ahead only with eager sends, one send and one receive per step") {
  const int world = GENERATE(2, 3, 4, 8);
  const uint64_t size = GENERATE(uint64_t(4) << 20, 4 * 1'000'003, uint64_t(16) << 20, 4096);
  Shape shape{rc::workload::findKind("allreduce"), 0, world, size, 0, 0};
  INFO("world " << world << " size " << size);
  // Without eager sends (verbs): one send and one receive per ring step, as before.
  auto plain = makeCollective(shape);
  REQUIRE(plain->stepCount() == size_t(2 * (world - 1)));
  shape.eagerSends = true;
  auto piped = makeCollective(shape);
  CHECK(piped->bufferBytes() == plain->bufferBytes());  // the agent sizes buffers before the transport
  const size_t steps = piped->stepCount();
  if (size >= (uint64_t(world) << 19)) CHECK(steps > size_t(2 * (world - 1)));  // chunks of 512 KiB or more are cut
  // Replay rank 0's plan: per step at most one send and one receive; the bytes sent and
  // received per iteration equal the plain plan's; the sends run ahead of the receives, by at
  // most ~2 MiB; every byte of the data is sent as often as in the plain plan.
  auto bytes = [](const Collective& c, Op::Kind kind) {
    uint64_t n = 0;
    for (size_t m = 0; m < c.stepCount(); m++)
      for (const auto& op : c.ops(m))
        if (op.kind == kind) n += op.length;
    return n;
  };
  CHECK(bytes(*piped, Op::Kind::send) == bytes(*plain, Op::Kind::send));
  CHECK(bytes(*piped, Op::Kind::recv) == bytes(*plain, Op::Kind::recv));
  uint64_t sent = 0, received = 0, maxAhead = 0;
  for (size_t m = 0; m < steps; m++) {
    int sends = 0, recvs = 0;
    for (const auto& op : piped->ops(m)) {
      (op.kind == Op::Kind::send ? sends : recvs)++;
      (op.kind == Op::Kind::send ? sent : received) += op.length;
      CHECK(op.offset + op.length <= piped->bufferBytes());
    }
    CHECK(sends <= 1);
    CHECK(recvs <= 1);
    maxAhead = std::max(maxAhead, sent - std::min(sent, received));
  }
  CHECK(maxAhead <= (uint64_t(2) << 20) + (uint64_t(1) << 20));
}

// Every built-in kind of the registry but all-reduce (above): all-gather, all-to-all, incast,
// pairwise, and any kind added since.
TEST_CASE("every built-in kind verifies its results") {
  std::vector<const Kind*> builtIn;
  for (const Kind* k : rc::workload::kinds())
    if (k->make && k->name != "allreduce") builtIn.push_back(k);
  const Kind* kind = GENERATE_COPY(from_range(builtIn));
  int world = GENERATE(2, 4, 5, 8);
  uint64_t size = GENERATE(97, 65536 + 3);
  if (auto v = validateShape(Shape{kind, 0, world, size, world - 1, world > 3 ? 2 : 0}); !v) {
    // No run to check: a shape the kind refuses (pairwise: an odd world has a rank without a
    // partner) is refused with the fix named.
    INFO(kind->name << " world " << world);
    CHECK(kind->name == "pairwise");
    CHECK_THAT(v.error().message, Catch::Contains("even"));
    return;
  }
  auto fabric = std::make_shared<InprocFabric>();
  auto res = runWorld(kind, world, size, 2,
                      [&](int r) { return std::make_unique<InprocTransport>(fabric, r); });
  for (auto& r : res) {
    INFO(kind->name << " world " << world << " size " << size << ": " << r.summary.error);
    CHECK(r.summary.endReason == "completed");
    CHECK(r.summary.verified);
    CHECK(r.summary.counters.iterations == 2);
    checkTelemetry(r);
  }
}

// fillBlock and checkBlock work from one period's table (kPatternPeriod): the bytes must be
// blockPattern's at every position, past the first period too, and a single byte off anywhere
// (the last byte of a partial period included) must fail the check.
TEST_CASE("block patterns from the period's table are blockPattern's bytes, and one wrong byte fails") {
  size_t block = GENERATE(0, 1, 7, 255, 256, 1000);
  const size_t len = 3 * kPatternPeriod + 17;
  std::vector<std::byte> b(len);
  fillBlock(b.data(), block, len);
  size_t mismatches = 0;
  for (size_t i = 0; i < len; i++) mismatches += b[i] != blockPattern(block, i);
  CHECK(mismatches == 0);
  CHECK(checkBlock(b.data(), block, len));
  CHECK_FALSE(checkBlock(b.data(), block + 1, len));
  for (size_t at : {size_t(0), kPatternPeriod - 1, kPatternPeriod, len - 1}) {
    INFO("block " << block << ", byte " << at << " flipped");
    b[at] ^= std::byte{0x10};
    CHECK_FALSE(checkBlock(b.data(), block, len));
    b[at] ^= std::byte{0x10};
  }
}

// The all-reduce's check compares against one period of the expected sums: an element wrong
// in the first period, in a later one, or in the last partial one must fail it.
TEST_CASE("the all-reduce's check finds one wrong element anywhere in the buffer") {
  const int world = 4;
  const uint64_t size = 4 * (3 * kAllreduceInputPeriod + 5);  // three periods and part of one
  Shape shape{findKind("allreduce"), 0, world, size};
  auto coll = makeCollective(shape);
  REQUIRE(coll);
  std::vector<std::byte> buf(coll->bufferBytes());
  auto* d = reinterpret_cast<float*>(buf.data());
  const size_t count = size / 4;
  for (size_t i = 0; i < count; i++) d[i] = allreduceInput(0, i) * float(world * (world + 1) / 2);
  CHECK(coll->verify(buf));
  for (size_t at : {size_t(0), kAllreduceInputPeriod + 3, count - 1}) {
    INFO("element " << at << " off by one");
    d[at] += 1;
    CHECK_FALSE(coll->verify(buf));
    d[at] -= 1;
  }
  CHECK(coll->verify(buf));
}

TEST_CASE("invalid shapes are refused with the fix named") {
  Shape s;
  CHECK_THAT(validateShape(s).error().message, Catch::Contains("known: " + rc::workload::kindNames()));
  s.kind = rc::workload::findKind("allreduce");
  s.world = 1;
  CHECK_THAT(validateShape(s).error().message, Catch::Contains("2 to 256 ranks"));
  s = Shape{rc::workload::findKind("allreduce"), 0, 2, 6, 0, 0};
  CHECK_THAT(validateShape(s).error().message, Catch::Contains("multiple of 4"));
  s = Shape{rc::workload::findKind("pairwise"), 0, 3, 8, 0, 0};
  CHECK_THAT(validateShape(s).error().message, Catch::Contains("even"));
}

TEST_CASE("a dropped connection is re-established and the run completes") {
  auto fabric = std::make_shared<InprocFabric>();
  std::vector<InprocTransport*> raw(4);
  auto res = runWorld(
      rc::workload::findKind("allreduce"), 4, 1 << 16, 400,
      [&](int r) {
        auto t = std::make_unique<InprocTransport>(fabric, r);
        raw[size_t(r)] = t.get();
        return t;
      },
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        raw[2]->disconnect();
      });
  uint64_t reconnects = 0;
  for (auto& r : res) {
    INFO(r.summary.error);
    CHECK(r.summary.endReason == "completed");
    CHECK(r.summary.verified);
    // A rank that lost the broken iteration completed one fewer; the job did all 400.
    CHECK(r.summary.counters.iterations + r.summary.counters.failedIterations >= 400);
    CHECK(r.summary.counters.iterations >= 399);
    reconnects += r.summary.counters.reconnects;
    checkTelemetry(r);
  }
  CHECK(reconnects >= 1);
}

TEST_CASE("corrupted payloads are counted, not fatal") {
  auto fabric = std::make_shared<InprocFabric>();
  fabric->corruptNextFrom = 1;
  auto res = runWorld(rc::workload::findKind("allreduce"), 3, 4096, 5,
                      [&](int r) { return std::make_unique<InprocTransport>(fabric, r); });
  uint64_t corrupt = 0, bad = 0;
  for (auto& r : res) {
    CHECK(r.summary.endReason == "completed");
    corrupt += r.summary.counters.corruptions;
    bad += r.summary.counters.verifyFailures;
  }
  CHECK(corrupt == 1);
  CHECK(bad >= 1);  // the flipped byte also breaks the reduction, and verification sees it
}

TEST_CASE("collectives over TCP on loopback, several streams per peer") {
  int world = GENERATE(2, 3, 4);
  int streams = GENERATE(1, 3);
  uint64_t size = GENERATE(4 * 100'003, 4 * 1'000'003);  // the larger one pipelines slices
  std::vector<std::unique_ptr<TcpTransport>> made;
  std::vector<Endpoint> eps;
  // Bind every listener first (port 0), then tell every rank the world.
  for (int r = 0; r < world; r++) {
    TcpOptions o;
    o.rank = 0;
    o.world = {{"127.0.0.1", 0}};
    o.streams = streams;
    auto t = TcpTransport::create(o);
    REQUIRE(t.ok());
    eps.push_back({"127.0.0.1", (*t)->port()});
  }
  // Ports were free a moment ago; recreate on them with the full world.
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < world; r++) {
    TcpOptions o;
    o.rank = r;
    o.world = eps;
    o.streams = streams;
    o.tag = 42;
    auto t = TcpTransport::create(o);
    REQUIRE(t.ok());
    ts.push_back(std::move(*t));
  }
  auto res = runWorld(rc::workload::findKind("allreduce"), world, size, 4, [&](int r) { return std::move(ts[size_t(r)]); });
  for (auto& r : res) {
    INFO("world " << world << " streams " << streams << ": " << r.summary.error);
    CHECK(r.summary.endReason == "completed");
    CHECK(r.summary.verified);
    CHECK(r.summary.counters.iterations == 4);
    CHECK(r.summary.counters.corruptions == 0);
    checkTelemetry(r);
  }
}

TEST_CASE("the streaming checksum does not depend on how the bytes are split") {
  std::vector<std::byte> data(1000);
  for (size_t i = 0; i < data.size(); i++) data[i] = std::byte(uint8_t(i * 37 + 11));
  uint32_t whole = checksum32(data.data(), data.size());
  size_t piece = GENERATE(1, 3, 7, 8, 13, 31, 32, 33, 500);
  StreamChecksum s;
  for (size_t off = 0; off < data.size(); off += piece)
    s.update(data.data() + off, std::min(piece, data.size() - off));
  CHECK(s.value() == whole);
  data[500] ^= std::byte{1};
  CHECK(checksum32(data.data(), data.size()) != whole);
  // Swapped words are caught too.
  std::swap_ranges(data.begin(), data.begin() + 8, data.begin() + 8);
  data[500] ^= std::byte{1};
  CHECK(checksum32(data.data(), data.size()) != whole);
}

TEST_CASE("a rank that gives up releases its peers at once") {
  // Rank 2 of 3 never shows up: the others fail at their reconnect deadline, not later, and
  // nobody hangs.
  auto fabric = std::make_shared<InprocFabric>();
  std::atomic<bool> stop{false};
  std::vector<Summary> sums(2);
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; r++)
    threads.emplace_back([&, r] {
      InprocTransport t(fabric, r);
      Telemetry tel(wallNs(), 1'000'000);
      auto spec = specFor(rc::workload::findKind("allreduce"), r, 3, 4096, 5);
      spec.reconnectTimeoutNs = 300'000'000;
      sums[size_t(r)] = runWorkload(spec, t, tel, stop);
    });
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  for (auto& s : sums) {
    CHECK(s.endReason == "error");
    CHECK_THAT(s.error, Catch::Contains("cannot connect"));
  }
}

#if RDMACHAOS_HAVE_VERBS_TRANSPORT
TEST_CASE("the verbs transport refuses an address no RDMA device carries, naming it") {
  // Loopback is never an RDMA device's address (rxe binds to a real netdev; the build
  // machines have none at all): creating the transport must fail with an error, not crash.
  VerbsOptions o;
  o.rank = 0;
  o.world = {{"127.0.0.1", 0}, {"127.0.0.2", 0}};
  auto t = VerbsTransport::create(o);
  REQUIRE_FALSE(t.ok());
  INFO(t.error().message);
  bool named = t.error().message.find("127.0.0.1") != std::string::npos ||
               t.error().message.find("RDMA") != std::string::npos;
  CHECK(named);
}
#endif

}  // namespace test_workload
