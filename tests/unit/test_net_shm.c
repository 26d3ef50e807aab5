/*
 * net/shm between two processes (fork; the 64-byte handles cross pipes),
 * and once between two threads of one process. Covers: messages of 0, 1, 8,
 * 4095, 4096, 4097, 64K-1, 64K, 1 MiB+3 and 64 MiB in both directions at
 * once, all posted before any test (FIFO order checked through per-message
 * patterns), on every path: inline, CMA, slots with plain and non-temporal
 * stores, tiny wrapping slots, hetcclMemAlloc'd buffers (with and without
 * CMA); 1000 messages in flight; a receive posted for another length
 * (HC_ERR_USAGE, and HC_ERR_REMOTE for the sender whose pulled send can
 * never complete); a peer that closes with requests pending; a peer killed
 * with SIGKILL mid-transfer (HC_ERR_REMOTE naming it within seconds, while
 * it is still an unreaped zombie); a segment left by a rank killed during
 * connect, removed by the next open; and /dev/shm holding no hetccl-* entry
 * of ours after every case. Prints throughput of 64 MiB transfers per path
 * and the small-message round trip.
 *
 * Every wait has a deadline and alarm() bounds the run. Reproduce:
 *   build-shm/tests/test_net_shm            (all cases)
 *   build-shm/tests/test_net_shm kill_cma   (one case, by name)
 *   build-shm/tests/test_net_shm perf 512K  (throughput of 512 KiB messages)
 */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/net/shm_priv.h"
#include "hetccl.h"

#define STEP_NS (30ull * 1000000000ull)
#define MIB ((size_t)1 << 20)

static const struct hc_net_ops *ops = &hc_net_shm;

struct rank {
  int me, peer;
  int wfd, rfd; /* pipe ends to and from the other rank (process case) */
  void *ctx, *conn;
  struct hc_net_handle mine, theirs;
  atomic_bool abort_flag;
  char fail[512];
};
typedef void (*body_fn)(struct rank *r);

#define FAILR(r, ...)                                                                            \
  do {                                                                                           \
    if ((r)->fail[0] == 0) {                                                                     \
      int o_ = snprintf((r)->fail, sizeof((r)->fail), "rank %d, line %d: ", (r)->me, __LINE__); \
      snprintf((r)->fail + o_, sizeof((r)->fail) - (size_t)o_, __VA_ARGS__);                     \
    }                                                                                            \
  } while (0)
#define TRYR(r, call)                                                      \
  do {                                                                     \
    hc_result_t t_ = (call);                                               \
    if (t_ != HC_OK) {                                                     \
      FAILR(r, "%s -> %s: %s", #call, hc_result_str(t_), hc_last_error()); \
      return;                                                              \
    }                                                                      \
  } while (0)

/* ---- plumbing ---- */

static bool write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t k = write(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= (size_t)k;
  }
  return true;
}

static bool read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  uint64_t deadline = hc_now_ns() + STEP_NS;
  while (n > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) == 0) {
      if (hc_now_ns() > deadline) return false;
      continue;
    }
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    b += k;
    n -= (size_t)k;
  }
  return true;
}

/* Both ranks have reached this point (process case only). */
static void sync_ranks(struct rank *r) {
  char c = 's';
  if (!write_all(r->wfd, &c, 1) || !read_all(r->rfd, &c, 1)) FAILR(r, "sync with rank %d failed", r->peer);
}

static hc_result_t open_rank(struct rank *r) {
  struct hc_net_args a = {.rank = r->me, .nranks = 2, .abort_flag = &r->abort_flag};
  memcpy(a.secret, "0123456789abcdef", 16);
  struct hc_net_caps caps = {.device_memory = true};
  hc_result_t res = ops->open(&a, &caps, &r->mine, &r->ctx);
  if (res == HC_OK && caps.device_memory) return HC_ERR_INTERNAL;
  return res;
}

static void connect_peer(struct rank *r) {
  uint64_t deadline = hc_now_ns() + STEP_NS;
  while (r->conn == NULL) {
    TRYR(r, ops->connect(r->ctx, r->peer, &r->theirs, &r->conn));
    if (r->conn) return;
    if (hc_now_ns() > deadline) {
      FAILR(r, "connection not up after %llu s", STEP_NS / 1000000000ull);
      return;
    }
    TRYR(r, ops->wait_blocking(r->ctx, 50));
  }
}

/* Open, swap handles over the pipes, connect. */
static void setup_process_rank(struct rank *r) {
  hc_params_reset();
  TRYR(r, open_rank(r));
  if (!write_all(r->wfd, &r->mine, sizeof(r->mine)) || !read_all(r->rfd, &r->theirs, sizeof(r->theirs))) {
    FAILR(r, "handle exchange failed");
    return;
  }
  connect_peer(r);
}

/* Tests every request until all are done; done ones are set to NULL.
 * Spins SPIN_NS without progress before it sleeps, as exec does. */
#define SPIN_NS 50000ull
static void complete_all(struct rank *r, void **reqs, int n) {
  uint64_t deadline = hc_now_ns() + STEP_NS, idle_since = 0;
  int last_left = -1;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) {
      if (reqs[i] == NULL) continue;
      int done = 0;
      TRYR(r, ops->test(reqs[i], &done));
      if (done) reqs[i] = NULL;
      else left++;
    }
    if (left == 0) return;
    uint64_t now = hc_now_ns();
    if (now > deadline) {
      FAILR(r, "%d of %d requests not done after %llu s", left, n, STEP_NS / 1000000000ull);
      return;
    }
    if (left != last_left) idle_since = now;
    last_left = left;
    if (now - idle_since > SPIN_NS) TRYR(r, ops->wait_blocking(r->ctx, 50));
  }
}

static uint64_t seed_of(int src, int dst, int idx) {
  return 0x9e3779b97f4a7c15ull * (uint64_t)(src * 100000 + dst * 10000 + idx + 1);
}
static void fill(uint8_t *p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = seed ^ (i * 0xff51afd7ed558ccdull);
    memcpy(p + 8 * i, &w, 8);
  }
  for (size_t i = words * 8; i < n; i++) p[i] = (uint8_t)(seed >> (i % 8)) ^ (uint8_t)i;
}
static size_t check(const uint8_t *p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t want = seed ^ (i * 0xff51afd7ed558ccdull), got;
    memcpy(&got, p + 8 * i, 8);
    if (got != want)
      for (size_t b = 0;; b++)
        if (p[8 * i + b] != ((const uint8_t *)&want)[b]) return 8 * i + b;
  }
  for (size_t i = words * 8; i < n; i++)
    if (p[i] != ((uint8_t)(seed >> (i % 8)) ^ (uint8_t)i)) return i;
  return SIZE_MAX;
}

static const struct hc_shm_conn *conn_of(const struct rank *r) { return r->conn; }

/* ---- case settings (set before the fork, read by both ranks) ---- */

static const size_t default_sizes[] = {0, 1, 8, 4095, 4096, 4097, 65535, 65536, MIB + 3, 64 * MIB};
static const size_t small_sizes[] = {0, 1, 8, 4095, 4096, 4097, 65535, 65536, MIB + 3};
static const size_t *sizes = default_sizes;
static int nsizes = HC_ARRAY_LEN(default_sizes);
static bool use_memalloc; /* send buffers from hetcclMemAlloc */
static int expect_kind = -1; /* a kind every rank must have used */
static double perf_gbps[2];

static void set_env(const char *cma, const char *slot, const char *nslots, const char *inl, const char *nt) {
  const char *names[] = {"HETCCL_SHM_CMA", "HETCCL_SHM_SLOT_BYTES", "HETCCL_SHM_SLOTS", "HETCCL_SHM_INLINE_BYTES",
                         "HETCCL_SHM_NT_MIN_BYTES"};
  const char *vals[] = {cma, slot, nslots, inl, nt};
  for (int i = 0; i < 5; i++) {
    if (vals[i]) setenv(names[i], vals[i], 1);
    else unsetenv(names[i]);
  }
  hc_params_reset();
}

static void *alloc_send(struct rank *r, size_t n) {
  void *p = NULL;
  if (!use_memalloc) return malloc(n ? n : 1);
  if (hetcclMemAlloc(&p, n ? n : 1) != hetcclSuccess) FAILR(r, "hetcclMemAlloc(%zu): %s", n, hetcclGetLastError(NULL));
  return p;
}
static void free_send(void *p) {
  if (use_memalloc) hetcclMemFree(p);
  else free(p);
}

/* ---- bodies ---- */

/* Every size both ways, all posted before any test. */
static void body_exchange(struct rank *r) {
  int n = nsizes;
  uint8_t **sbuf = calloc((size_t)n, sizeof(*sbuf)), **rbuf = calloc((size_t)n, sizeof(*rbuf));
  void **reqs = calloc((size_t)(2 * n), sizeof(*reqs));
  for (int i = 0; i < n && !r->fail[0]; i++) {
    size_t sz = sizes[i];
    sbuf[i] = alloc_send(r, sz);
    rbuf[i] = malloc(sz ? sz : 1);
    if (!sbuf[i] || !rbuf[i]) {
      FAILR(r, "out of memory for %zu bytes", sz);
      break;
    }
    fill(sbuf[i], sz, seed_of(r->me, r->peer, i));
    memset(rbuf[i], 0xee, sz ? sz : 1);
    hc_result_t res = ops->irecv(r->conn, rbuf[i], sz, &reqs[2 * i]);
    if (res == HC_OK) res = ops->isend(r->conn, sbuf[i], sz, &reqs[2 * i + 1]);
    if (res != HC_OK) FAILR(r, "posting %zu bytes: %s", sz, hc_last_error());
  }
  if (!r->fail[0]) complete_all(r, reqs, 2 * n);
  for (int i = 0; i < n && !r->fail[0]; i++) {
    size_t bad = check(rbuf[i], sizes[i], seed_of(r->peer, r->me, i));
    if (bad != SIZE_MAX) FAILR(r, "message %d (%zu bytes): wrong byte at %zu", i, sizes[i], bad);
    if (sizes[i] == 0 && rbuf[i][0] != 0xee) FAILR(r, "a 0-byte receive wrote its buffer");
  }
  if (!r->fail[0] && expect_kind >= 0 && conn_of(r)->nsent[expect_kind] == 0)
    FAILR(r, "no message took path %d (inline %llu, slots %llu, cma %llu, reg %llu)", expect_kind,
          (unsigned long long)conn_of(r)->nsent[0], (unsigned long long)conn_of(r)->nsent[1],
          (unsigned long long)conn_of(r)->nsent[2], (unsigned long long)conn_of(r)->nsent[3]);
  for (int i = 0; i < n; i++) {
    free_send(sbuf[i]);
    free(rbuf[i]);
  }
  free(sbuf);
  free(rbuf);
  free(reqs);
}

/* 1000 messages each way, sizes from 0 to ~100K, all in flight at once. */
static void body_many(struct rank *r) {
  enum { N = 1000 };
  size_t *sz = calloc(N, sizeof(size_t)), total = 0;
  for (int i = 0; i < N; i++) {
    sz[i] = i % 50 == 7 ? 100000 + (size_t)i : (size_t)(i * 37) % 5000;
    total += sz[i];
  }
  uint8_t *s = malloc(total), *d = malloc(total);
  void **reqs = calloc(2 * N, sizeof(void *));
  size_t off = 0;
  for (int i = 0; i < N && !r->fail[0]; i++) {
    fill(s + off, sz[i], seed_of(r->me, r->peer, i));
    TRYR(r, ops->irecv(r->conn, d + off, sz[i], &reqs[2 * i]));
    TRYR(r, ops->isend(r->conn, s + off, sz[i], &reqs[2 * i + 1]));
    off += sz[i];
  }
  complete_all(r, reqs, 2 * N);
  off = 0;
  for (int i = 0; i < N && !r->fail[0]; i++) {
    if (check(d + off, sz[i], seed_of(r->peer, r->me, i)) != SIZE_MAX) FAILR(r, "message %d wrong", i);
    off += sz[i];
  }
  free(sz);
  free(s);
  free(d);
  free(reqs);
}

/* Waits for req to fail; returns the result (HC_OK: it did not). */
static hc_result_t wait_failure(struct rank *r, void *req, uint64_t limit_ns, uint64_t *took_ns) {
  uint64_t t0 = hc_now_ns();
  hc_result_t res = HC_OK;
  int done = 0;
  while ((res = ops->test(req, &done)) == HC_OK && !done && hc_now_ns() < t0 + limit_ns)
    ops->wait_blocking(r->ctx, 50);
  *took_ns = hc_now_ns() - t0;
  return res;
}

/* Rank 0 sends small (inline) then large (pulled or slots) messages that
 * rank 1 receives with other lengths. */
static size_t mismatch_len;
static void body_mismatch(struct rank *r) {
  size_t n = mismatch_len;
  uint8_t *buf = calloc(1, 2 * n);
  void *req = NULL;
  uint64_t took;
  if (r->me == 0) {
    TRYR(r, ops->isend(r->conn, buf, n, &req));
    hc_result_t res = wait_failure(r, req, STEP_NS, &took);
    /* An inline send completes on its own. A pulled one fails once the
     * receiver gave up on the connection; a slot send may go either way
     * (parts still unwritten when the receiver fails it are lost). */
    bool pulled = conn_of(r)->nsent[HC_SHM_CMA] > 0, inl = conn_of(r)->nsent[HC_SHM_INLINE] > 0;
    bool closed = res == HC_ERR_REMOTE && strstr(hc_last_error(), "rank 1 closed the connection");
    if ((pulled && !closed) || (inl && res != HC_OK) || (!pulled && !inl && res != HC_OK && !closed))
      FAILR(r, "send after a mismatch: %s \"%s\"", hc_result_str(res), hc_last_error());
  } else {
    /* The post runs a progress pass: the mismatch may show there already. */
    hc_result_t res = ops->irecv(r->conn, buf, 2 * n, &req);
    if (res == HC_OK) res = wait_failure(r, req, STEP_NS, &took);
    char want[128];
    snprintf(want, sizeof(want), "mismatched counts: expected %zu bytes from rank 0, got %zu", 2 * n, n);
    if (res != HC_ERR_USAGE || !strstr(hc_last_error(), want))
      FAILR(r, "mismatch: got %s \"%s\", want HC_ERR_USAGE \"%s\"", hc_result_str(res), hc_last_error(), want);
    void *req2 = NULL;
    res = ops->isend(r->conn, buf, 1, &req2);
    if (res != HC_ERR_USAGE || req2 != NULL || !strstr(hc_last_error(), want))
      FAILR(r, "isend after a mismatch: %s \"%s\"", hc_result_str(res), hc_last_error());
  }
  free(buf);
  sync_ranks(r);
}

/* Rank 1 closes its ctx while rank 0 waits on a receive and a 64 MiB send. */
static void body_peer_close(struct rank *r) {
  size_t n = 64 * MIB;
  uint8_t *s = calloc(1, n), *d = calloc(1, n);
  void *reqs[2] = {NULL, NULL};
  if (r->me == 1) {
    sync_ranks(r); /* rank 0 has posted */
    ops->close(r->ctx);
    r->ctx = NULL;
    r->conn = NULL;
  } else {
    TRYR(r, ops->irecv(r->conn, d, 8, &reqs[0]));
    TRYR(r, ops->isend(r->conn, s, n, &reqs[1]));
    sync_ranks(r);
    uint64_t took;
    hc_result_t res = wait_failure(r, reqs[0], STEP_NS, &took);
    if (res != HC_ERR_REMOTE || !strstr(hc_last_error(), "rank 1 closed the connection"))
      FAILR(r, "peer close: %s \"%s\"", hc_result_str(res), hc_last_error());
    else printf("  peer close noticed after %.1f ms: %s\n", (double)took / 1e6, hc_last_error());
    int done;
    if (ops->test(reqs[1], &done) != HC_ERR_REMOTE) FAILR(r, "the send did not fail fast");
  }
  free(s);
  free(d);
}

/* Rank 1 posts 64 MiB each way, moves some of it, and dies by SIGKILL. */
static void body_kill(struct rank *r) {
  size_t n = 64 * MIB;
  uint8_t *s = malloc(n), *d = malloc(n);
  memset(s, 1, n);
  void *reqs[2] = {NULL, NULL};
  uint64_t t0 = hc_now_ns();
  /* Posts run a progress pass: rank 0 may see the death there already. */
  hc_result_t res = ops->irecv(r->conn, d, n, &reqs[0]);
  if (res == HC_OK) res = ops->isend(r->conn, s, n, &reqs[1]);
  if (r->me == 1) {
    for (int i = 0; i < 3 && reqs[0]; i++) {
      int done = 0;
      if (ops->test(reqs[0], &done) != HC_OK || done) reqs[0] = NULL;
    }
    raise(SIGKILL);
  }
  while (res == HC_OK && (reqs[0] || reqs[1]) && hc_now_ns() < t0 + STEP_NS) {
    for (int i = 0; i < 2 && res == HC_OK; i++) {
      int done = 0;
      if (reqs[i] && (res = ops->test(reqs[i], &done)) == HC_OK && done) reqs[i] = NULL;
    }
    if (res == HC_OK) ops->wait_blocking(r->ctx, 50);
  }
  double ms = (double)(hc_now_ns() - t0) / 1e6;
  if (res != HC_ERR_REMOTE || !strstr(hc_last_error(), "rank 1"))
    FAILR(r, "killed peer: %s \"%s\" after %.0f ms", hc_result_str(res), hc_last_error(), ms);
  else if (ms > 5000) FAILR(r, "killed peer noticed only after %.0f ms", ms);
  else printf("  killed peer noticed after %.1f ms: %s\n", ms, hc_last_error());
  free(s);
  free(d);
}

/* Throughput: perf_bytes messages, a window of them in flight, each way at
 * once and then (rank 0 -> 1) one way, perf_volume bytes per measure (more
 * when perf cases are asked for by name). */
static size_t perf_bytes = 64 * MIB, perf_volume = 128 * MIB;
static void body_perf(struct rank *r) {
  const size_t n = perf_bytes;
  const int window = (int)HC_MAX((size_t)1, HC_MIN((size_t)16, 64 * MIB / HC_MAX(n, (size_t)1)));
  const int rounds = (int)HC_MAX((size_t)2, perf_volume / (n * (size_t)window));
  uint8_t *s = alloc_send(r, n * (size_t)window), *d = malloc(n * (size_t)window);
  void **reqs = calloc(2 * (size_t)window, sizeof(void *));
  if (!s || !d || !reqs) {
    FAILR(r, "out of memory");
    goto out;
  }
  memset(s, r->me + 1, n * (size_t)window);
  memset(d, 0, n * (size_t)window);
  for (int mode = 0; mode < 2 && !r->fail[0]; mode++) {
    sync_ranks(r);
    uint64_t t0 = hc_now_ns();
    for (int i = 0; i < rounds + 1 && !r->fail[0]; i++) {
      if (i == 1) t0 = hc_now_ns(); /* round 0 warms up */
      for (int w = 0; w < window; w++) {
        if (mode == 0 || r->me == 1) TRYR(r, ops->irecv(r->conn, d + (size_t)w * n, n, &reqs[2 * w]));
        if (mode == 0 || r->me == 0) TRYR(r, ops->isend(r->conn, s + (size_t)w * n, n, &reqs[2 * w + 1]));
      }
      complete_all(r, reqs, 2 * window);
    }
    if (mode == 1) sync_ranks(r); /* the receiver is done too */
    perf_gbps[mode] = (double)n * window * rounds / (double)(hc_now_ns() - t0);
  }
  if (!r->fail[0] && d[n - 1] != r->peer + 1) FAILR(r, "perf data wrong");
out:
  free_send(s);
  free(d);
  free(reqs);
}

static double rtt_us;
static void body_latency(struct rank *r) {
  const int iters = 20000;
  uint64_t x = 1, y = 0, t0 = 0;
  for (int i = 0; i < iters + 1000 && !r->fail[0]; i++) {
    if (i == 1000) t0 = hc_now_ns();
    void *reqs[2] = {NULL, NULL};
    if (r->me == 0) {
      TRYR(r, ops->isend(r->conn, &x, 8, &reqs[0]));
      TRYR(r, ops->irecv(r->conn, &y, 8, &reqs[1]));
    } else {
      TRYR(r, ops->irecv(r->conn, &y, 8, &reqs[1]));
      complete_all(r, &reqs[1], 1);
      TRYR(r, ops->isend(r->conn, &y, 8, &reqs[0]));
    }
    complete_all(r, reqs, 2);
    x++;
  }
  rtt_us = (double)(hc_now_ns() - t0) / 1e3 / iters;
}

/* Ping-pong where both sides sleep in wait_blocking after every test that
 * finds nothing: each message must wake the peer's futex. A lost wakeup
 * costs a whole sleep slice (50 ms), which the average would show. */
static double sleep_rtt_us, sleep_max_us;
static void body_sleep(struct rank *r) {
  const int iters = 300;
  uint64_t x = 7, y = 0, t0 = hc_now_ns(), worst = 0;
  for (int i = 0; i < iters && !r->fail[0]; i++) {
    uint64_t ti = hc_now_ns();
    void *reqs[2] = {NULL, NULL};
    TRYR(r, ops->irecv(r->conn, &y, 8, &reqs[1]));
    if (r->me == 0 || i > 0) TRYR(r, ops->isend(r->conn, &x, 8, &reqs[0]));
    for (int k = 0; k < 2; k++) {
      uint64_t deadline = hc_now_ns() + STEP_NS;
      while (reqs[k] && !r->fail[0]) {
        int done = 0;
        TRYR(r, ops->test(reqs[k], &done));
        if (done) reqs[k] = NULL;
        else if (hc_now_ns() > deadline) FAILR(r, "ping-pong %d stuck", i);
        else TRYR(r, ops->wait_blocking(r->ctx, 1000));
      }
    }
    worst = HC_MAX(worst, hc_now_ns() - ti);
  }
  if (r->me == 1 && !r->fail[0]) { /* the last reply */
    void *req = NULL;
    TRYR(r, ops->isend(r->conn, &x, 8, &req));
    complete_all(r, &req, 1);
  }
  sleep_rtt_us = (double)(hc_now_ns() - t0) / 1e3 / iters;
  sleep_max_us = (double)worst / 1e3;
  if (r->me == 0 && sleep_rtt_us > 10000) FAILR(r, "round trips through sleep take %.0f us: lost wakeups?", sleep_rtt_us);
}

/* ---- drivers ---- */

/* Entries hetccl-<pid>-* in /dev/shm for either pid (named on stderr:
 * after a case, any is a leak). */
static int shm_entries(pid_t a, pid_t b, bool quiet) {
  int n = 0;
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  char pa[32], pb[32];
  snprintf(pa, sizeof(pa), HC_SHM_PREFIX "%d-", (int)a);
  snprintf(pb, sizeof(pb), HC_SHM_PREFIX "%d-", (int)b);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (!strncmp(e->d_name, pa, strlen(pa)) || !strncmp(e->d_name, pb, strlen(pb))) {
      if (!quiet) fprintf(stderr, "  left in /dev/shm: %s\n", e->d_name);
      n++;
    }
  closedir(d);
  return n;
}

static void finish_rank(struct rank *r) {
  if (r->ctx) ops->close(r->ctx);
  r->ctx = NULL;
}

/* Runs body as rank 0 here and rank 1 in a child. child_dies: the child
 * kills itself, which is the case's point. */
static bool run_pair(const char *name, body_fn body, bool child_dies) {
  int a[2], b[2];
  if (pipe(a) != 0 || pipe(b) != 0) {
    fprintf(stderr, "FAIL %s: pipe: %s\n", name, strerror(errno));
    return false;
  }
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "FAIL %s: fork: %s\n", name, strerror(errno));
    return false;
  }
  if (child == 0) {
    struct rank r = {.me = 1, .peer = 0, .wfd = b[1], .rfd = a[0]};
    close(a[1]);
    close(b[0]);
    setup_process_rank(&r);
    if (!r.fail[0]) body(&r);
    finish_rank(&r);
    if (r.fail[0]) fprintf(stderr, "FAIL %s: %s\n", name, r.fail);
    fflush(stdout);
    exit(r.fail[0] ? 1 : 0);
  }
  struct rank r = {.me = 0, .peer = 1, .wfd = a[1], .rfd = b[0]};
  close(a[0]);
  close(b[1]);
  setup_process_rank(&r);
  if (!r.fail[0]) body(&r);
  finish_rank(&r);
  close(a[1]);
  close(b[0]);
  int status = 0;
  uint64_t deadline = hc_now_ns() + STEP_NS;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (hc_now_ns() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAILR(&r, "rank 1 hung");
      break;
    }
    usleep(1000);
  }
  bool child_ok = child_dies ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                             : WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (r.fail[0]) fprintf(stderr, "FAIL %s: %s\n", name, r.fail);
  if (!child_ok && !r.fail[0]) fprintf(stderr, "FAIL %s: rank 1 ended with status 0x%x\n", name, status);
  int left = shm_entries(getpid(), child, false);
  if (left) fprintf(stderr, "FAIL %s: %d hetccl-* entries left in /dev/shm\n", name, left);
  bool ok = !r.fail[0] && child_ok && left == 0;
  printf("%s %s\n", ok ? "ok  " : "FAIL", name);
  return ok;
}

/* A child creates a pair's segment toward a peer that never comes and is
 * killed before the peer maps it: the next open removes the leftover. */
static bool run_stale(void) {
  const char *name = "stale_segment_removed";
  int p[2];
  if (pipe(p) != 0) return false;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    struct rank r = {.me = 0, .peer = 1};
    hc_params_reset();
    if (open_rank(&r) != HC_OK) exit(1);
    struct hc_shm_handle h;
    memcpy(&h, r.mine.bytes, sizeof(h));
    h.pid = getppid();
    h.id ^= 0x5555;
    memcpy(r.theirs.bytes, &h, sizeof(h));
    void *conn = NULL;
    if (ops->connect(r.ctx, 1, &r.theirs, &conn) != HC_OK) exit(2);
    char c = 'x';
    write_all(p[1], &c, 1);
    raise(SIGKILL);
  }
  close(p[1]);
  char c;
  bool ok = read_all(p[0], &c, 1);
  close(p[0]);
  int status;
  waitpid(child, &status, 0);
  if (!ok || shm_entries(child, child, true) != 1) {
    fprintf(stderr, "FAIL %s: the killed rank left no segment to clean up\n", name);
    ok = false;
  }
  struct rank r = {.me = 0, .peer = 1};
  if (ok && open_rank(&r) != HC_OK) ok = false;
  finish_rank(&r);
  if (ok && shm_entries(child, child, false) != 0) {
    fprintf(stderr, "FAIL %s: open did not remove the stale segment\n", name);
    ok = false;
  }
  printf("%s %s\n", ok ? "ok  " : "FAIL", name);
  return ok;
}

/* Two ranks as threads of this process (same pid on both sides). */
static struct rank thread_ranks[2];
static pthread_barrier_t thread_bar;
static void *thread_main(void *arg) {
  struct rank *r = arg;
  r->peer = 1 - r->me;
  if (open_rank(r) != HC_OK) FAILR(r, "open: %s", hc_last_error());
  pthread_barrier_wait(&thread_bar);
  r->theirs = thread_ranks[r->peer].mine;
  if (!r->fail[0] && !thread_ranks[r->peer].fail[0]) {
    connect_peer(r);
    if (!r->fail[0]) body_exchange(r);
  }
  pthread_barrier_wait(&thread_bar);
  finish_rank(r);
  return NULL;
}
static bool run_threads(void) {
  pthread_t t[2];
  pthread_barrier_init(&thread_bar, NULL, 2);
  for (int i = 0; i < 2; i++) {
    thread_ranks[i] = (struct rank){.me = i};
    pthread_create(&t[i], NULL, thread_main, &thread_ranks[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&thread_bar);
  bool ok = true;
  for (int i = 0; i < 2; i++)
    if (thread_ranks[i].fail[0]) {
      fprintf(stderr, "FAIL threads: %s\n", thread_ranks[i].fail);
      ok = false;
    }
  if (shm_entries(getpid(), getpid(), false)) ok = false;
  printf("%s threads_exchange\n", ok ? "ok  " : "FAIL");
  return ok;
}

static bool api_memalloc_args(void) {
  void *p = (void *)1;
  bool ok = hetcclMemAlloc(NULL, 10) == hetcclInvalidArgument && hetcclMemAlloc(&p, 0) == hetcclInvalidArgument &&
            p == NULL && hetcclMemFree(NULL) == hetcclSuccess;
  int x;
  ok = ok && hetcclMemFree(&x) == hetcclInvalidArgument && strstr(hetcclGetLastError(NULL), "not returned by");
  ok = ok && hetcclMemAlloc(&p, 12345) == hetcclSuccess && ((uintptr_t)p % 4096) == 0;
  if (ok) memset(p, 7, 12345);
  ok = ok && hetcclMemFree(p) == hetcclSuccess;
  printf("%s memalloc_arguments\n", ok ? "ok  " : "FAIL");
  return ok;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  int64_t bytes;
  if (argc > 2 && hc_parse_size(argv[2], &bytes) == HC_OK && bytes > 0) perf_bytes = (size_t)bytes;
  if (only && !strncmp(only, "perf", 4)) perf_volume = 384 * MIB;
  alarm(110);
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  int failed = 0;
#define CASE(nm, call)                               \
  do {                                               \
    if (only == NULL || !strcmp(only, nm)) {         \
      if (!(call)) failed++;                         \
    }                                                \
  } while (0)
  set_env(NULL, NULL, NULL, NULL, NULL);
  CASE("memalloc_arguments", api_memalloc_args());
  expect_kind = HC_SHM_CMA;
  CASE("exchange_cma", run_pair("exchange_cma", body_exchange, false));
  set_env("0", NULL, NULL, NULL, "1M");
  expect_kind = HC_SHM_SLOTS;
  CASE("exchange_slots_nt", run_pair("exchange_slots_nt", body_exchange, false));
  set_env("0", "4K", "2", "0", NULL);
  sizes = small_sizes;
  nsizes = HC_ARRAY_LEN(small_sizes);
  CASE("exchange_tiny_slots", run_pair("exchange_tiny_slots", body_exchange, false));
  sizes = default_sizes;
  nsizes = HC_ARRAY_LEN(default_sizes);
  use_memalloc = true;
  expect_kind = HC_SHM_REG;
  set_env(NULL, NULL, NULL, NULL, NULL);
  CASE("exchange_memalloc", run_pair("exchange_memalloc", body_exchange, false));
  set_env("0", NULL, NULL, NULL, NULL);
  CASE("exchange_memalloc_nocma", run_pair("exchange_memalloc_nocma", body_exchange, false));
  use_memalloc = false;
  expect_kind = -1;
  set_env(NULL, NULL, NULL, NULL, NULL);
  CASE("many_in_flight", run_pair("many_in_flight", body_many, false));
  mismatch_len = 100;
  CASE("mismatch_inline", run_pair("mismatch_inline", body_mismatch, false));
  mismatch_len = MIB;
  CASE("mismatch_cma", run_pair("mismatch_cma", body_mismatch, false));
  set_env("0", NULL, NULL, NULL, NULL);
  CASE("mismatch_slots", run_pair("mismatch_slots", body_mismatch, false));
  set_env(NULL, NULL, NULL, NULL, NULL);
  CASE("peer_close", run_pair("peer_close", body_peer_close, false));
  CASE("kill_cma", run_pair("kill_cma", body_kill, true));
  set_env("0", NULL, NULL, NULL, NULL);
  CASE("kill_slots", run_pair("kill_slots", body_kill, true));
  set_env(NULL, NULL, NULL, NULL, NULL);
  CASE("stale_segment_removed", run_stale());
  if (only == NULL || !strcmp(only, "sleep_wakeup")) {
    if (run_pair("sleep_wakeup", body_sleep, false))
      printf("  round trip through futex sleep and wake: %.1f us average, %.1f us worst\n", sleep_rtt_us, sleep_max_us);
    else failed++;
  }

  /* Throughput per path (GB/s, 1e9 bytes) and the 8-byte round trip. */
  static const struct {
    const char *name, *cma, *nt;
    bool memalloc;
  } perf[] = {{"perf_cma", NULL, NULL, false},     {"perf_memalloc", "0", NULL, true},
              {"perf_slots", "0", NULL, false},    {"perf_slots_nt", "0", "1", false}};
  for (size_t i = 0; i < HC_ARRAY_LEN(perf); i++) {
    if (only && strcmp(only, perf[i].name) && strcmp(only, "perf")) continue;
    set_env(perf[i].cma, NULL, NULL, NULL, perf[i].nt);
    use_memalloc = perf[i].memalloc;
    if (run_pair(perf[i].name, body_perf, false))
      printf("  %zu bytes: %.2f GB/s each way at once, %.2f GB/s one way\n", perf_bytes, perf_gbps[0],
             perf_gbps[1]);
    else failed++;
  }
  use_memalloc = false;
  set_env(NULL, NULL, NULL, NULL, NULL);
  if (only == NULL || !strcmp(only, "latency") || !strcmp(only, "perf")) {
    if (run_pair("latency", body_latency, false)) printf("  8-byte round trip: %.2f us\n", rtt_us);
    else failed++;
  }
  CASE("threads_exchange", run_threads());
  printf("%s\n", failed ? "FAILED" : "all passed");
  return failed ? 1 : 0;
}
