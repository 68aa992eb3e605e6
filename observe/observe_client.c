/* The observe library's sender and C API: one non-blocking SOCK_SEQPACKET connection to the
 * agent per process, records dropped (and counted) rather than ever waiting. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "observe_internal.h"
#include "observe_wire.h"

#define DEFAULT_SOCKET "/var/lib/rdmachaos/observe.sock"
/* With no agent listening, one connect attempt per this long, whatever the call rate. */
#define RECONNECT_NS (3LL * 1000000000LL)
#define SLOTS 4096 /* operations open at once through rc_observe_begin */

static struct {
  pthread_once_t once;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  uint32_t rank, world, flags;
  uint32_t pid; /* cached: getpid() is a system call on every glibc since 2.25 */
  char job[RC_OBSERVE_JOB_MAX];
  _Atomic int fd; /* -1: not connected */
  /* A connection that failed is closed only at the next attempt, seconds later: a thread that
   * read its descriptor just before may still be in send(), and must not hit a reused number. */
  int retired;
  _Atomic int64_t next_connect_ns; /* CLOCK_MONOTONIC */
  pthread_mutex_t connect_lock;    /* only ever try-locked */
  _Atomic uint64_t seq, sent, dropped, attempts;
} g = {
    .once = PTHREAD_ONCE_INIT,
    .fd = -1,
    .retired = -1,
    .connect_lock = PTHREAD_MUTEX_INITIALIZER,
};

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int rc_observe_name_ok(const char *s) {
  if (!s) return 0;
  size_t n = 0;
  for (; s[n]; n++) {
    unsigned char c = (unsigned char)s[n];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
             c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
    if (!ok || n + 1 >= RC_OBSERVE_OP_MAX) return 0;
  }
  return n > 0;
}

/* A non-negative decimal integer in the environment variable NAME, or -1. */
static long env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > (1L << 24)) return -1;
  return x;
}

static void copy_job(const char *v) {
  /* Characters a record may not carry become '_', and a long id keeps its end (the unique part
   * of a Slurm or torchrun id). */
  size_t n = strlen(v);
  if (n >= RC_OBSERVE_JOB_MAX) v += n - (RC_OBSERVE_JOB_MAX - 1), n = RC_OBSERVE_JOB_MAX - 1;
  for (size_t i = 0; i < n; i++) {
    char one[2] = {v[i], 0};
    g.job[i] = rc_observe_name_ok(one) ? v[i] : '_';
  }
  g.job[n] = '\0';
}

static void after_fork_child(void) {
  /* The child is one thread now: the parent's connection (and its peer credentials) is not its
   * own; it connects for itself on its first record. */
  int fd = atomic_exchange(&g.fd, -1);
  if (fd >= 0) close(fd);
  if (g.retired >= 0) close(g.retired), g.retired = -1;
  atomic_store(&g.next_connect_ns, 0);
  g.pid = (uint32_t)getpid();
  atomic_store(&g.seq, 0);
  atomic_store(&g.sent, 0);
  atomic_store(&g.dropped, 0);
  atomic_store(&g.attempts, 0);
}

static void init_once(void) {
  int saved_errno = errno; /* env_int and pthread_atfork may set it: the job's errno is its own */
  const char *path = getenv("RDMACHAOS_OBSERVE_SOCKET");
  if (!path || !*path || strlen(path) >= sizeof g.path) path = DEFAULT_SOCKET;
  memcpy(g.path, path, strlen(path) + 1);
  static const char *pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   {"PMI_RANK", "PMI_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS"},
                                   {"RANK", "WORLD_SIZE"}};
  g.rank = 0, g.world = 1, g.flags = RC_OBSERVE_FLAG_RANK_GUESSED;
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    long r = env_int(pairs[i][0]), w = env_int(pairs[i][1]);
    if (r >= 0 && w > r) {
      g.rank = (uint32_t)r, g.world = (uint32_t)w, g.flags = 0;
      break;
    }
  }
  static const char *jobs[] = {"RDMACHAOS_OBSERVE_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                               "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};
  for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
    const char *v = getenv(jobs[i]);
    if (v && *v) {
      copy_job(v);
      break;
    }
  }
  g.pid = (uint32_t)getpid();
  pthread_atfork(NULL, NULL, after_fork_child);
  errno = saved_errno;
}

static void ensure_init(void) { pthread_once(&g.once, init_once); }

/* The connection, or -1; tries to (re)connect at most once per RECONNECT_NS, and never waits
 * for another thread that is trying. */
static int connection(void) {
  int fd = atomic_load_explicit(&g.fd, memory_order_acquire);
  if (fd >= 0) return fd;
  int64_t now = clock_ns(CLOCK_MONOTONIC);
  if (now < atomic_load_explicit(&g.next_connect_ns, memory_order_relaxed)) return -1;
  if (pthread_mutex_trylock(&g.connect_lock) != 0) return -1;
  fd = atomic_load(&g.fd);
  if (fd < 0 && now >= atomic_load(&g.next_connect_ns)) {
    atomic_store(&g.next_connect_ns, now + RECONNECT_NS);
    atomic_fetch_add(&g.attempts, 1);
    if (g.retired >= 0) close(g.retired), g.retired = -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, g.path, strlen(g.path) + 1);
    if (s >= 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
      close(s);
      s = -1;
    }
    if (s >= 0) {
      /* Room for bursts while the agent's intake is busy: more is kept, fewer dropped. */
      int buf = 1 << 20;
      setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    }
    atomic_store_explicit(&g.fd, s, memory_order_release);
    fd = s;
  }
  pthread_mutex_unlock(&g.connect_lock);
  return fd;
}

static void disconnect(int fd) {
  if (pthread_mutex_trylock(&g.connect_lock) != 0) return; /* the next failure retries */
  int expected = fd;
  if (atomic_compare_exchange_strong(&g.fd, &expected, -1)) {
    shutdown(fd, SHUT_RDWR);
    if (g.retired >= 0) close(g.retired);
    g.retired = fd;
  }
  pthread_mutex_unlock(&g.connect_lock);
}

RC_OBSERVE_API int rc_observe_emit(const char *op, uint64_t comm_id, uint32_t rank, uint32_t world,
                                   uint64_t bytes, int64_t start_ns, int64_t end_ns, int32_t status) {
  if (!rc_observe_name_ok(op) || world == 0 || rank >= world || end_ns < start_ns) return RC_OBSERVE_INVALID;
  ensure_init();
  int saved_errno = errno;
  int result = RC_OBSERVE_DROPPED;
  uint64_t seq = atomic_fetch_add(&g.seq, 1);
  /* No agent: nothing to build (the common case where none runs costs a clock read). */
  int fd = connection();
  if (fd >= 0) {
    struct rc_observe_record_v1 r;
    memset(&r, 0, sizeof r);
    r.magic = RC_OBSERVE_MAGIC;
    r.version = RC_OBSERVE_VERSION;
    r.size = sizeof r;
    r.rank = rank;
    r.world_size = world;
    r.comm_id = comm_id;
    r.bytes = bytes;
    r.start_ns = start_ns;
    r.end_ns = end_ns;
    r.status = status;
    r.pid = g.pid;
    r.seq = seq;
    r.dropped = atomic_load(&g.dropped);
    r.flags = g.flags;
    memcpy(r.job_id, g.job, sizeof r.job_id);
    memcpy(r.op, op, strlen(op) + 1);
    ssize_t n = send(fd, &r, sizeof r, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)sizeof r) {
      result = RC_OBSERVE_SENT;
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != EINTR) {
      disconnect(fd); /* the agent went away: reconnect later */
    }
  }
  atomic_fetch_add(result == RC_OBSERVE_SENT ? &g.sent : &g.dropped, 1);
  errno = saved_errno;
  return result;
}

RC_OBSERVE_API void rc_observe_identity(uint32_t *rank, uint32_t *world) {
  ensure_init();
  *rank = g.rank;
  *world = g.world;
}

RC_OBSERVE_API int rc_observe_init(int rank, int world_size, const char *job_id) {
  ensure_init();
  if ((rank >= 0 || world_size >= 1) && !(rank >= 0 && world_size > rank)) return RC_OBSERVE_INVALID;
  if (job_id && *job_id && !rc_observe_name_ok(job_id)) return RC_OBSERVE_INVALID;
  if (rank >= 0) g.rank = (uint32_t)rank, g.world = (uint32_t)world_size, g.flags = 0;
  if (job_id) copy_job(job_id);
  return RC_OBSERVE_SENT;
}

RC_OBSERVE_API int64_t rc_observe_now_ns(void) { return clock_ns(CLOCK_REALTIME); }

RC_OBSERVE_API int rc_observe_record(const char *op, uint64_t comm_id, uint64_t bytes, int64_t start_ns,
                                     int64_t end_ns, int status) {
  uint32_t rank, world;
  rc_observe_identity(&rank, &world);
  return rc_observe_emit(op, comm_id, rank, world, bytes, start_ns, end_ns, status);
}

/* Open operations: a slot per token modulo SLOTS. Like a seqlock, a begin first clears the
 * slot's token, then writes, then publishes its token; an end copies and then claims the token
 * by compare-and-swap, so a copy torn by a begin that reused the slot is never sent. The fields
 * are relaxed atomics: a torn read is detected, never undefined. */
#define OP_WORDS (RC_OBSERVE_OP_MAX / 8)
static struct slot {
  _Atomic uint64_t token;
  _Atomic uint64_t bytes;
  _Atomic int64_t start_ns;
  _Atomic uint64_t op[OP_WORDS];
} slots[SLOTS];
static _Atomic uint64_t next_token = 1;

RC_OBSERVE_API uint64_t rc_observe_begin(const char *op, uint64_t bytes) {
  if (!rc_observe_name_ok(op)) return 0;
  uint64_t words[OP_WORDS] = {0};
  memcpy(words, op, strlen(op) + 1);
  uint64_t t = atomic_fetch_add(&next_token, 1);
  struct slot *s = &slots[t % SLOTS];
  atomic_store_explicit(&s->token, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
  for (int i = 0; i < OP_WORDS; i++) atomic_store_explicit(&s->op[i], words[i], memory_order_relaxed);
  atomic_store_explicit(&s->start_ns, clock_ns(CLOCK_REALTIME), memory_order_relaxed);
  atomic_store_explicit(&s->token, t, memory_order_release);
  return t;
}

RC_OBSERVE_API int rc_observe_end(uint64_t token, int status) {
  if (token == 0) return RC_OBSERVE_INVALID;
  int64_t end = clock_ns(CLOCK_REALTIME);
  struct slot *s = &slots[token % SLOTS];
  if (atomic_load_explicit(&s->token, memory_order_acquire) != token) goto lost;
  uint64_t words[OP_WORDS];
  uint64_t bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
  int64_t start = atomic_load_explicit(&s->start_ns, memory_order_relaxed);
  for (int i = 0; i < OP_WORDS; i++) words[i] = atomic_load_explicit(&s->op[i], memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  uint64_t expected = token;
  if (!atomic_compare_exchange_strong(&s->token, &expected, 0)) goto lost;
  char op[RC_OBSERVE_OP_MAX];
  memcpy(op, words, sizeof op);
  op[sizeof op - 1] = '\0';
  return rc_observe_record(op, 0, bytes, start, end, status);
lost:
  ensure_init();
  atomic_fetch_add(&g.dropped, 1);
  return RC_OBSERVE_DROPPED;
}

RC_OBSERVE_API void rc_observe_stats(rc_observe_stats_t *out) {
  if (!out) return;
  out->sent = atomic_load(&g.sent);
  out->dropped = atomic_load(&g.dropped);
  out->connect_attempts = atomic_load(&g.attempts);
  out->connected = atomic_load(&g.fd) >= 0;
}
