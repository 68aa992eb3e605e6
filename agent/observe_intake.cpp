// The observe intake: a SOCK_SEQPACKET listener served by a thread of its own (epoll), so that
// nothing a local process sends can stall the agent's event loop or its fault handling.
#include "agent/observe_intake.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/config.hpp"
#include "common/errno_text.hpp"
#include "common/log.hpp"

namespace rc::agent {

namespace {

int64_t realtimeNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A NUL-terminated name inside FIELD of N bytes, of the characters the format allows.
bool nameOk(const char* field, size_t n, bool allowEmpty) {
  const void* nul = std::memchr(field, '\0', n);
  if (!nul) return false;
  size_t len = size_t(static_cast<const char*>(nul) - field);
  if (len == 0) return allowEmpty;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = static_cast<unsigned char>(field[i]);
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == ':' || ch == '@' || ch == '+' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

constexpr int64_t kLogEveryNs = 10'000'000'000;
constexpr int kTickMs = 250;  // retention and rate buckets need no finer clock

}  // namespace

std::string_view refusalName(Refusal r) {
  switch (r) {
    case Refusal::malformed: return "malformed";
    case Refusal::version: return "version";
    case Refusal::foreignUid: return "foreign_uid";
    case Refusal::tooManyClients: return "too_many_clients";
    case Refusal::rateLimited: return "rate_limited";
    case Refusal::queueFull: return "queue_full";
    case Refusal::tooManyStreams: return "too_many_streams";
    case Refusal::outOfTime: return "out_of_time";
  }
  return "unknown";
}

uint64_t ObserveStats::refusedTotal() const {
  uint64_t n = 0;
  for (auto v : refused) n += v;
  return n;
}

struct ObserveIntake::Client {
  UniqueFD fd;
  uint32_t uid = 0;
  uint32_t pid = 0;
  double tokens = 0;
  int64_t refillNs = 0;
  uint64_t senderDropped = 0;  // the latest `dropped` it sent
};

struct ObserveIntake::Stream {
  Stream(int64_t origin, int64_t bin) : telemetry(origin, bin) {}
  workload::Telemetry telemetry;
  std::map<uint32_t, ObservedRank> ranks;
  uint32_t worldSize = 0;
  uint64_t pendingRecords = 0;  // added since the last drain
  uint64_t okOps = 0, failedOps = 0;
  int64_t lastRecordNs = 0;     // agent clock when its latest record came
  int64_t lastDrainNs = 0;
};

ObserveIntake::ObserveIntake(ObserveOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<ObserveIntake>> ObserveIntake::start(ObserveOptions options) {
  const std::string path = options.socketPath;  // a copy: OPTIONS moves into the intake below
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return makeError("[observe] socket = \"" + path + "\" must be a path of 1-107 characters");
  if (options.binNs <= 0 || options.maxClients == 0 || options.maxRecordsPerSecond == 0)
    return makeError("observe intake: bin width, max clients and records per second must be positive");
  std::memcpy(addr.sun_path, path.data(), path.size());
  std::unique_ptr<ObserveIntake> in(new ObserveIntake(std::move(options)));
  in->listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!in->listen_.isValid()) return makeError("observe intake: socket: " + errnoText(), errno);
  // A socket left by an agent that died is replaced; one that answers belongs to a live agent
  // (two agents on one node would split a job's records) and is left alone.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return makeError("[observe] socket = \"" + path + "\" exists and is not a socket: remove it or choose another path");
    UniqueFD probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (probe.isValid() && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      return makeError("[observe] socket = \"" + path + "\" is in use by another process (another agent on this node?)");
    ::unlink(path.c_str());
  }
  if (::bind(in->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return makeError("[observe] socket = \"" + path + "\": bind: " + errnoText() +
                         " (is its directory there and writable by the agent?)", errno);
  in->bound_ = true;
  // Anyone may connect: the uid check at accept is the gate, and its refusals are counted,
  // which a file mode would hide.
  ::chmod(path.c_str(), 0666);
  if (::listen(in->listen_.get(), 64) != 0) return makeError("observe intake: listen: " + errnoText(), errno);
  in->epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  in->wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!in->epoll_.isValid() || !in->wake_.isValid())
    return makeError("observe intake: epoll/eventfd: " + errnoText(), errno);
  for (int fd : {in->listen_.get(), in->wake_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(in->epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return makeError("observe intake: epoll_ctl: " + errnoText(), errno);
  }
  ObserveIntake* self = in.get();
  in->thread_ = std::jthread([self](std::stop_token stop) { self->run(stop); });
  return in;
}

ObserveIntake::~ObserveIntake() {
  if (thread_.joinable()) {
    thread_.request_stop();
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
    thread_.join();
  }
  clients_.clear();
  // Only a path this intake bound: one that failed to start must not remove a live agent's.
  if (bound_) ::unlink(options_.socketPath.c_str());
}

void ObserveIntake::run(std::stop_token stop) {
  epoll_event events[32];
  int64_t lastExpire = 0;
  while (!stop.stop_requested()) {
    int n = ::epoll_wait(epoll_.get(), events, 32, kTickMs);
    if (n < 0 && errno != EINTR) {
      rc::log::error("observe intake: epoll_wait: {}; the intake stops", errnoText());
      return;
    }
    int64_t now = realtimeNs();
    for (int i = 0; i < n; i++) {
      int fd = events[i].data.fd;
      if (fd == wake_.get()) continue;
      if (fd == listen_.get())
        acceptClients(now);
      else
        readClient(fd, now);
    }
    if (now - lastExpire >= kTickMs * 1'000'000LL) {
      expire(now);
      lastExpire = now;
      if (listenPaused_) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_.get();
        listenPaused_ = ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_.get(), &ev) != 0;
      }
    }
  }
}

template <typename Detail>
void ObserveIntake::refuse(Refusal why, int64_t now, const Detail& detail) {
  uint64_t total;
  {
    std::lock_guard lock(m_);
    total = ++stats_.refused[size_t(why)];
  }
  // One line per reason per 10 s: a flood is counted, not logged record by record.
  auto& last = lastLogNs_[size_t(why)];
  if (now - last >= kLogEveryNs) {
    last = now;
    rc::log::warn("observe intake: refused ({}): {} ({} refused for this reason so far; see "
                  "rdmachaos_agent_observe_refused_total)",
                  refusalName(why), detail(), total);
  }
}

void ObserveIntake::acceptClients(int64_t now) {
  // Bounded: at most as many as the backlog holds at this wake-up.
  for (int k = 0; k < 64; k++) {
    UniqueFD fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.isValid()) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) return;
      // Out of descriptors (EMFILE, ENFILE): the connection stays queued and the listener
      // would wake the loop at once, again and again; it rests until the next tick.
      std::string why = errnoText();
      refuse(Refusal::tooManyClients, now, [&] { return "accept: " + why + "; not accepting until the next tick"; });
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
      listenPaused_ = true;
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    if (std::find(options_.allowUids.begin(), options_.allowUids.end(), cred.uid) ==
        options_.allowUids.end()) {
      refuse(Refusal::foreignUid, now, [&] {
        return "a connection from pid " + std::to_string(cred.pid) + " of uid " + std::to_string(cred.uid) +
               ", not in [observe] allow_uids";
      });
      continue;
    }
    if (clients_.size() >= options_.maxClients) {
      refuse(Refusal::tooManyClients, now, [&] {
        return "pid " + std::to_string(cred.pid) + ": " + std::to_string(clients_.size()) +
               " clients already connected ([observe] max_clients)";
      });
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) continue;
    auto c = std::make_unique<Client>();
    c->uid = cred.uid;
    c->pid = uint32_t(cred.pid);
    c->tokens = options_.maxRecordsPerSecond;
    c->refillNs = now;
    int key = fd.get();
    c->fd = std::move(fd);
    clients_[key] = std::move(c);
    std::lock_guard lock(m_);
    stats_.connections++;
    stats_.clients = clients_.size();
  }
}

void ObserveIntake::closeClient(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  clients_.erase(fd);
  std::lock_guard lock(m_);
  stats_.clients = clients_.size();
}

void ObserveIntake::readClient(int fd, int64_t now) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  // Room for more than a record, so that a longer message is seen as longer, not cut to size.
  alignas(rc_observe_record_v1) unsigned char buf[sizeof(rc_observe_record_v1) + 64];
  for (size_t k = 0; k < options_.recordsPerWake; k++) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n == 0) {
      closeClient(fd);
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      closeClient(fd);
      return;
    }
    // The bucket refills with the agent's clock, not the sender's.
    double add = double(now - c.refillNs) * 1e-9 * options_.maxRecordsPerSecond;
    c.tokens = std::min<double>(options_.maxRecordsPerSecond, c.tokens + std::max(0.0, add));
    c.refillNs = now;
    if (c.tokens < 1) {
      refuse(Refusal::rateLimited, now, [&] {
        return "pid " + std::to_string(c.pid) + " sends more than " +
               std::to_string(options_.maxRecordsPerSecond) + " records/s ([observe] max_records_per_second)";
      });
      continue;
    }
    c.tokens -= 1;
    RecordCheck check = checkRecord(buf, size_t(n), now, options_);
    if (!check.record) {
      refuse(check.why, now, [&] { return "pid " + std::to_string(c.pid) + ": " + check.detail; });
      continue;
    }
    if (auto why = take(c, *check.record, now))
      refuse(*why, now, [&] { return "pid " + std::to_string(c.pid) + ", op '" + std::string(check.record->op) + "'"; });
  }
}

RecordCheck checkRecord(const void* data, size_t n, int64_t now, const ObserveOptions& o) {
  RecordCheck out;
  auto fail = [&](Refusal why, std::string detail) {
    out.why = why;
    out.detail = std::move(detail);
    return out;
  };
  if (n < 8) return fail(Refusal::malformed, "a message of " + std::to_string(n) + " bytes");
  uint32_t magic;
  uint16_t version;
  std::memcpy(&magic, data, 4);
  std::memcpy(&version, static_cast<const char*>(data) + 4, 2);
  if (magic != RC_OBSERVE_MAGIC) return fail(Refusal::malformed, "not an observe record (magic)");
  if (version != RC_OBSERVE_VERSION)
    return fail(Refusal::version, "record version " + std::to_string(version) + " (this agent reads version " +
                                      std::to_string(RC_OBSERVE_VERSION) + ")");
  if (n != sizeof(rc_observe_record_v1))
    return fail(Refusal::malformed, "a version-1 record of " + std::to_string(n) + " bytes (expected " +
                                        std::to_string(sizeof(rc_observe_record_v1)) + ")");
  rc_observe_record_v1 r;
  std::memcpy(&r, data, sizeof r);
  if (r.size != sizeof r || r.reserved != 0) return fail(Refusal::malformed, "size or reserved field");
  if (r.world_size == 0 || r.world_size > (1u << 24) || r.rank >= r.world_size)
    return fail(Refusal::malformed, "rank " + std::to_string(r.rank) + " of world size " + std::to_string(r.world_size));
  if (!nameOk(r.op, sizeof r.op, false) || !nameOk(r.job_id, sizeof r.job_id, true))
    return fail(Refusal::malformed, "op or job_id not a NUL-terminated name of [A-Za-z0-9._:@+-]");
  std::string op = "op '" + std::string(r.op) + "'";
  if (r.end_ns < r.start_ns || r.end_ns - r.start_ns > o.maxDurationNs)
    return fail(Refusal::malformed, op + ": end before start, or longer than the longest operation");
  if (r.end_ns < now - o.retentionNs || r.end_ns > now + o.maxFutureNs)
    return fail(Refusal::outOfTime, op + ": ends " + std::to_string((r.end_ns - now) / 1'000'000) +
                                        " ms from now (CLOCK_REALTIME)");
  out.record = r;
  return out;
}

std::optional<Refusal> ObserveIntake::take(Client& c, const rc_observe_record_v1& r, int64_t now) {
  std::lock_guard lock(m_);
  if (queuedBytes_ + sizeof(workload::IterationRecord) > options_.maxQueuedBytes) return Refusal::queueFull;
  auto key = std::make_pair(std::string(r.job_id), r.comm_id);
  auto it = streams_.find(key);
  if (it == streams_.end()) {
    if (streams_.size() >= options_.maxStreams) return Refusal::tooManyStreams;
    int64_t origin = r.start_ns - r.start_ns % options_.binNs;
    it = streams_.emplace(key, std::make_unique<Stream>(origin, options_.binNs)).first;
    it->second->lastDrainNs = now;
  }
  Stream& s = *it->second;
  ObservedRank& rank = s.ranks[r.rank];
  rank.rank = r.rank;
  rank.pid = c.pid;
  workload::IterationRecord rec;
  rec.index = rank.ops++;
  rec.startNs = r.start_ns;
  rec.endNs = r.end_ns;
  rec.rxBytes = r.bytes;
  rec.ok = r.status == 0;
  rank.lastEndNs = std::max(rank.lastEndNs, r.end_ns);
  s.worldSize = r.world_size;
  s.telemetry.addBytes(r.end_ns, r.bytes);
  s.telemetry.addIteration(rec);
  (rec.ok ? s.okOps : s.failedOps)++;
  s.pendingRecords++;
  s.lastRecordNs = now;
  queuedBytes_ += sizeof(workload::IterationRecord);
  stats_.accepted++;
  // `dropped` is the sender's running total: add what is new since its last record.
  if (r.dropped > c.senderDropped) {
    stats_.senderDropped += r.dropped - c.senderDropped;
    c.senderDropped = r.dropped;
  }
  return std::nullopt;
}

void ObserveIntake::expire(int64_t now) {
  // Nobody drained a stream for the retention time: its bins and records are dropped (and
  // counted) so that an intake nobody reads stays bounded; a stream silent that long goes.
  std::lock_guard lock(m_);
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& s = *it->second;
    if (now - s.lastDrainNs > options_.retentionNs) {
      s.telemetry.drain(now - options_.retentionNs, false);
      stats_.discarded += s.pendingRecords;
      queuedBytes_ -= std::min(queuedBytes_, s.pendingRecords * sizeof(workload::IterationRecord));
      s.pendingRecords = 0;
      s.lastDrainNs = now - options_.retentionNs / 2;
    }
    if (now - s.lastRecordNs > options_.retentionNs && s.pendingRecords == 0)
      it = streams_.erase(it);
    else
      ++it;
  }
}

std::vector<ObservedBatch> ObserveIntake::drain(int64_t nowNs) {
  std::vector<ObservedBatch> out;
  std::lock_guard lock(m_);
  for (auto& [key, s] : streams_) {
    ObservedBatch b;
    b.jobId = key.first;
    b.commId = key.second;
    b.worldSize = s->worldSize;
    for (const auto& [rank, r] : s->ranks) b.ranks.push_back(r);
    workload::Counters counters;
    counters.iterations = s->okOps;
    counters.failedIterations = s->failedOps;
    s->telemetry.update(counters);
    b.telemetry = s->telemetry.drain(nowNs, false);
    queuedBytes_ -= std::min(queuedBytes_, s->pendingRecords * sizeof(workload::IterationRecord));
    s->pendingRecords = 0;
    s->lastDrainNs = realtimeNs();
    out.push_back(std::move(b));
  }
  return out;
}

ObserveStats ObserveIntake::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

ObserveOptions observeOptions(const ObserveConfig& config) {
  ObserveOptions o;
  o.socketPath = config.socket;
  o.allowUids = config.allowUids;
  o.maxClients = config.maxClients;
  o.maxRecordsPerSecond = config.maxRecordsPerSecond;
  o.maxQueuedBytes = config.maxQueuedBytes;
  return o;
}

}  // namespace rc::agent
