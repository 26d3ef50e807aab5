/*
 * net/socket over loopback, ranks as threads of one process. Covers: pairs
 * coming up while both sides call connect, messages of 0, 1, 4095, 1 MiB+3
 * and 64 MiB in both directions at once with several in flight (FIFO order
 * checked through per-message patterns), 1, 4 and 3 streams (the last with
 * an odd chunk so that stripes never divide evenly), a receive posted for
 * another length (HC_ERR_USAGE), a peer that closes its ctx mid-transfer
 * (HC_ERR_REMOTE, no hang), peers configured differently, garbage and idle
 * connections on a listener, a peer that reaches connect() late or never,
 * bad arguments and abort. Prints loopback throughput (informational).
 *
 * Every phase has a deadline, and alarm() bounds the whole run.
 * Reproduce, from the repository root (add -fsanitize=thread or
 * -fsanitize=address,undefined as wanted):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -g -Isrc -Iinclude src/util/[a-z]*.c
 *       src/net/socket.c src/net/socket_progress.c tests/unit/test_net_socket.c
 *       -o /tmp/tn -lpthread -ldl -lm && /tmp/tn
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../src/net/socket_priv.h"

#define MAX_RANKS 4
#define STEP_NS (30ull * 1000000000ull) /* any one phase of a case */
#define MIB ((size_t)1 << 20)
/* The large message. ThreadSanitizer pays page faults on shadow memory for
 * every fresh buffer (about 10 ns a byte here), so under it the large case
 * shrinks to keep the run short; the code paths are the same. */
#ifdef __SANITIZE_THREAD__
#define BIG (16 * MIB)
#define ROUNDS 1
#else
#define BIG (64 * MIB)
#define ROUNDS 4
#endif

static const struct hc_net_ops *ops = &hc_net_socket;

struct world;
struct rank {
  struct world *w;
  int me;
  void *ctx;
  void *conns[MAX_RANKS];
  char fail[512]; /* first failure of this rank's thread, "" if none */
};
typedef void (*body_fn)(struct rank *r);
struct world {
  int nranks;
  bool open_in_main; /* ranks with differing settings are opened by main */
  struct hc_net_handle handles[MAX_RANKS];
  pthread_barrier_t bar;
  atomic_bool abort_flag;
  atomic_int open_failures;
  body_fn body;
  struct rank ranks[MAX_RANKS];
  const size_t *sizes; /* exchange cases */
  int nsizes;
  double gbps; /* throughput case, written by rank 0 */
};

#define FAILR(r, ...)                                                            \
  do {                                                                           \
    if ((r)->fail[0] == 0) {                                                     \
      int o_ = snprintf((r)->fail, sizeof((r)->fail), "rank %d, line %d: ", (r)->me, __LINE__); \
      snprintf((r)->fail + o_, sizeof((r)->fail) - (size_t)o_, __VA_ARGS__);     \
    }                                                                            \
  } while (0)
#define TRYR(r, call)                                                            \
  do {                                                                           \
    hc_result_t t_ = (call);                                                     \
    if (t_ != HC_OK) {                                                           \
      FAILR(r, "%s -> %s: %s", #call, hc_result_str(t_), hc_last_error());       \
      return;                                                                    \
    }                                                                            \
  } while (0)

static void set_params(const char *nstreams, const char *chunk) {
  setenv("HETCCL_SOCKET_NSTREAMS", nstreams, 1);
  if (chunk) setenv("HETCCL_SOCKET_CHUNK", chunk, 1);
  else unsetenv("HETCCL_SOCKET_CHUNK");
  hc_params_reset();
}

static hc_result_t open_rank(struct world *w, int me) {
  struct hc_net_args a = {.rank = me, .nranks = w->nranks, .abort_flag = &w->abort_flag};
  memcpy(a.secret, "0123456789abcdef", 16);
  struct hc_net_caps caps = {.device_memory = true};
  hc_result_t res = ops->open(&a, &caps, &w->handles[me], &w->ranks[me].ctx);
  if (res == HC_OK && caps.device_memory) return HC_ERR_INTERNAL;
  return res;
}

/* Connects to every peer in mask, calling connect for all of them in turn,
 * as the progress engine would. */
static void connect_peers(struct rank *r, unsigned mask) {
  uint64_t deadline = hc_now_ns() + STEP_NS;
  for (;;) {
    bool all = true;
    for (int p = 0; p < r->w->nranks; p++) {
      if (!(mask & (1u << p)) || r->conns[p]) continue;
      TRYR(r, ops->connect(r->ctx, p, &r->w->handles[p], &r->conns[p]));
      all = all && r->conns[p] != NULL;
    }
    if (all) return;
    if (hc_now_ns() > deadline) {
      FAILR(r, "connections not up after %llu s", STEP_NS / 1000000000ull);
      return;
    }
    TRYR(r, ops->wait_blocking(r->ctx, 50));
  }
}

static unsigned all_but_me(const struct rank *r) { return ((1u << r->w->nranks) - 1) & ~(1u << r->me); }

/* Tests every request until all are done; done ones are set to NULL. */
static void complete_all(struct rank *r, void **reqs, int n) {
  uint64_t deadline = hc_now_ns() + STEP_NS;
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
    if (hc_now_ns() > deadline) {
      FAILR(r, "%d of %d requests not done after %llu s", left, n, STEP_NS / 1000000000ull);
      return;
    }
    TRYR(r, ops->wait_blocking(r->ctx, 50));
  }
}

/* Payload pattern: differs per (src, dst, message index) so that a message
 * landing in the wrong receive shows. */
static uint64_t seed_of(int src, int dst, int idx) {
  return 0x9e3779b97f4a7c15ull * (uint64_t)(src * 1000 + dst * 100 + idx + 1);
}
static void fill(uint8_t *p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  uint64_t *w = (uint64_t *)p;
  for (size_t i = 0; i < words; i++) w[i] = seed ^ (i * 0xff51afd7ed558ccdull);
  for (size_t i = words * 8; i < n; i++) p[i] = (uint8_t)(seed >> (i % 8)) ^ (uint8_t)i;
}
/* Index of the first wrong byte, or SIZE_MAX. */
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

/* ---- cases: each is a rank body ---- */

/* Every pair swaps all sizes both ways, everything posted before any test. */
static void body_exchange(struct rank *r) {
  struct world *w = r->w;
  connect_peers(r, all_but_me(r));
  if (r->fail[0]) return;
  int n = w->nsizes * (w->nranks - 1);
  uint8_t **sbuf = calloc((size_t)n, sizeof(*sbuf)), **rbuf = calloc((size_t)n, sizeof(*rbuf));
  void **reqs = calloc((size_t)(2 * n), sizeof(*reqs));
  int k = 0;
  for (int p = 0; p < w->nranks && !r->fail[0]; p++) {
    if (p == r->me) continue;
    for (int i = 0; i < w->nsizes; i++, k++) {
      size_t sz = w->sizes[i];
      sbuf[k] = malloc(sz ? sz : 1);
      rbuf[k] = malloc(sz ? sz : 1);
      if (!sbuf[k] || !rbuf[k]) {
        FAILR(r, "out of memory for %zu bytes", sz);
        break;
      }
      fill(sbuf[k], sz, seed_of(r->me, p, i));
      memset(rbuf[k], 0xee, sz ? sz : 1);
      hc_result_t res = ops->irecv(r->conns[p], rbuf[k], sz, &reqs[2 * k]);
      if (res == HC_OK) res = ops->isend(r->conns[p], sbuf[k], sz, &reqs[2 * k + 1]);
      if (res != HC_OK) FAILR(r, "posting %zu bytes with rank %d: %s", sz, p, hc_last_error());
    }
  }
  if (!r->fail[0]) complete_all(r, reqs, 2 * n);
  k = 0;
  for (int p = 0; p < w->nranks && !r->fail[0]; p++) {
    if (p == r->me) continue;
    for (int i = 0; i < w->nsizes; i++, k++) {
      size_t bad = check(rbuf[k], w->sizes[i], seed_of(p, r->me, i));
      if (bad != SIZE_MAX) {
        FAILR(r, "message %d (%zu bytes) from rank %d: wrong byte at %zu", i, w->sizes[i], p, bad);
        break;
      }
      if (w->sizes[i] == 0 && rbuf[k][0] != 0xee) FAILR(r, "a 0-byte receive wrote its buffer");
    }
  }
  for (int i = 0; i < n; i++) free(sbuf[i]), free(rbuf[i]);
  free(sbuf);
  free(rbuf);
  free(reqs); /* requests left by a failure are freed by close */
}

/* 64 MiB each way at once between ranks 0 and 1, a few rounds. */
static void body_throughput(struct rank *r) {
  const size_t sz = BIG;
  const int rounds = ROUNDS;
  int peer = 1 - r->me;
  uint8_t *s = malloc(sz), *d = malloc(sz);
  if (!s || !d) FAILR(r, "out of memory");
  else memset(s, r->me + 1, sz);
  if (!r->fail[0]) connect_peers(r, 1u << peer);
  pthread_barrier_wait(&r->w->bar); /* both connected: time only the data */
  uint64_t t0 = hc_now_ns();
  for (int i = 0; i < rounds && !r->fail[0]; i++) {
    void *reqs[2] = {NULL, NULL};
    hc_result_t res = ops->irecv(r->conns[peer], d, sz, &reqs[0]);
    if (res == HC_OK) res = ops->isend(r->conns[peer], s, sz, &reqs[1]);
    if (res != HC_OK) FAILR(r, "posting: %s", hc_last_error());
    else complete_all(r, reqs, 2);
  }
  uint64_t t1 = hc_now_ns();
  if (!r->fail[0] && (d[0] != peer + 1 || d[sz - 1] != peer + 1)) FAILR(r, "throughput data wrong");
  if (r->me == 0) r->w->gbps = (double)sz * rounds / (double)(t1 - t0);
  free(s);
  free(d);
}

/* Rank 0 sends 100 bytes, rank 1 posts 200: rank 1 gets HC_ERR_USAGE. */
static void body_mismatch(struct rank *r) {
  int peer = 1 - r->me;
  uint8_t buf[200] = {0};
  void *req = NULL;
  hc_result_t res = HC_OK;
  connect_peers(r, 1u << peer);
  if (r->fail[0]) goto sync;
  if (r->me == 0) {
    if ((res = ops->isend(r->conns[1], buf, 100, &req)) != HC_OK) FAILR(r, "isend: %s", hc_last_error());
    else complete_all(r, &req, 1);
    goto sync;
  }
  if ((res = ops->irecv(r->conns[0], buf, 200, &req)) != HC_OK) {
    FAILR(r, "irecv: %s", hc_last_error());
    goto sync;
  }
  uint64_t deadline = hc_now_ns() + STEP_NS;
  int done = 0;
  while ((res = ops->test(req, &done)) == HC_OK && !done && hc_now_ns() < deadline) ops->wait_blocking(r->ctx, 50);
  const char *want = "mismatched counts: expected 200 bytes from rank 0, got 100";
  if (res != HC_ERR_USAGE || !strstr(hc_last_error(), want))
    FAILR(r, "mismatch: got %s \"%s\" (done %d), want HC_ERR_USAGE \"%s\"", hc_result_str(res), hc_last_error(),
          done, want);
  /* The conn stays failed: later calls fail fast with the same text. */
  void *req2 = NULL;
  res = ops->isend(r->conns[0], buf, 1, &req2);
  if (res != HC_ERR_USAGE || req2 != NULL || !strstr(hc_last_error(), want))
    FAILR(r, "isend after a mismatch: %s \"%s\"", hc_result_str(res), hc_last_error());
sync:
  pthread_barrier_wait(&r->w->bar); /* rank 0 must not close first */
}

/* Rank 0 closes its ctx while data moves each way (it never posts the
 * receive for rank 1's sends): rank 1 keeps a send in flight, re-posting
 * each one that the socket buffers absorbed, until one fails with
 * HC_ERR_REMOTE naming rank 0, within seconds. */
static void body_peer_close(struct rank *r) {
  const size_t sz = BIG;
  int peer = 1 - r->me;
  connect_peers(r, 1u << peer);
  if (r->fail[0]) return;
  uint8_t *s = calloc(1, sz), *d = calloc(1, sz);
  void *reqs[2] = {NULL, NULL};
  if (!s || !d) {
    FAILR(r, "out of memory");
    goto out;
  }
  if (r->me == 0) {
    TRYR(r, ops->isend(r->conns[1], s, sz, &reqs[0]));
    for (int i = 0; i < 3; i++) {
      int done = 0;
      /* Done is possible if rank 1 drained it all: rank 1's send still
       * meets a closed peer, which is what this case is about. */
      if (reqs[0]) TRYR(r, ops->test(reqs[0], &done));
      if (done) reqs[0] = NULL;
      ops->wait_blocking(r->ctx, 5);
    }
    ops->close(r->ctx); /* frees the pending send */
    r->ctx = NULL;
  } else {
    TRYR(r, ops->irecv(r->conns[0], d, sz, &reqs[0]));
    TRYR(r, ops->isend(r->conns[0], s, sz, &reqs[1]));
    uint64_t t0 = hc_now_ns();
    hc_result_t res = HC_OK;
    int done = 0;
    /* The receive may complete if rank 0 got all of its send out. */
    while (hc_now_ns() < t0 + STEP_NS) {
      for (int i = 0; i < 2 && res == HC_OK; i++) {
        if (reqs[i] == NULL) continue;
        res = ops->test(reqs[i], &done);
        if (res == HC_OK && done) reqs[i] = NULL;
      }
      if (res != HC_OK) break;
      if (reqs[1] == NULL) TRYR(r, ops->isend(r->conns[0], s, sz, &reqs[1]));
      ops->wait_blocking(r->ctx, 50);
    }
    if (res != HC_ERR_REMOTE || !strstr(hc_last_error(), "rank 0 closed the connection"))
      FAILR(r, "peer close: got %s \"%s\", want HC_ERR_REMOTE \"rank 0 closed the connection\"", hc_result_str(res),
            hc_last_error());
    else
      printf("  peer close noticed after %.1f ms: %s\n", (double)(hc_now_ns() - t0) / 1e6, hc_last_error());
    /* Every request of the failed conn fails fast from now on. */
    for (int i = 0; i < 2; i++)
      if (reqs[i] && ops->test(reqs[i], &done) != HC_ERR_REMOTE) FAILR(r, "request %d did not fail fast", i);
  }
out:
  free(s);
  free(d);
}

/* Ranks opened with different HETCCL_SOCKET_NSTREAMS: both ends fail. */
static void body_config_mismatch(struct rank *r) {
  int peer = 1 - r->me;
  uint64_t deadline = hc_now_ns() + STEP_NS;
  hc_result_t res;
  while ((res = ops->connect(r->ctx, peer, &r->w->handles[peer], &r->conns[peer])) == HC_OK && !r->conns[peer] &&
         hc_now_ns() < deadline)
    ops->wait_blocking(r->ctx, 50);
  if (res != HC_ERR_USAGE || !strstr(hc_last_error(), "set them alike"))
    FAILR(r, "config mismatch: got %s \"%s\"", hc_result_str(res), hc_last_error());
}

/* Junk and idle connections on rank 1's listener: the pair comes up anyway. */
static void body_garbage(struct rank *r) {
  int junk[3] = {-1, -1, -1};
  if (r->me == 1) {
    struct hc_sock_handle h;
    memcpy(&h, r->w->handles[1].bytes, sizeof(h));
    for (int i = 0; i < 3; i++) {
      junk[i] = socket(h.addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (junk[i] < 0 || connect(junk[i], &h.addr.sa, hc_sock_len(&h.addr)) != 0) {
        FAILR(r, "junk connect: %s", strerror(errno));
        break;
      }
    }
    /* 0: an HTTP request; 1: stays silent; 2: a few bytes, then closes. */
    static const char http[] = "GET / HTTP/1.0\r\n\r\n";
    if (!r->fail[0] &&
        (send(junk[0], http, sizeof(http) - 1, MSG_NOSIGNAL) < 0 || send(junk[2], "HC", 2, MSG_NOSIGNAL) < 0))
      FAILR(r, "junk send: %s", strerror(errno));
    if (junk[2] >= 0) close(junk[2]);
    junk[2] = -1;
  }
  pthread_barrier_wait(&r->w->bar);
  if (!r->fail[0]) body_exchange(r);
  for (int i = 0; i < 3; i++)
    if (junk[i] >= 0) close(junk[i]);
}

/* Rank 1 reaches connect() half a second late: rank 0's connect() calls keep
 * returning at once meanwhile (no handshake blocks on a peer that is not
 * serving), and the pair comes up once rank 1 arrives. */
static void body_late(struct rank *r) {
  if (r->me == 1) {
    usleep(500 * 1000);
    connect_peers(r, 1u << 0);
    return;
  }
  uint64_t deadline = hc_now_ns() + STEP_NS, longest = 0;
  while (!r->conns[1] && hc_now_ns() < deadline) {
    uint64_t t0 = hc_now_ns();
    TRYR(r, ops->connect(r->ctx, 1, &r->w->handles[1], &r->conns[1]));
    longest = HC_MAX(longest, hc_now_ns() - t0);
    if (!r->conns[1]) TRYR(r, ops->wait_blocking(r->ctx, 20));
  }
  if (!r->conns[1]) FAILR(r, "not connected after the late peer arrived");
  if (longest > 200000000ull) FAILR(r, "one connect() call took %.0f ms", (double)longest / 1e6);
}

/* Rank 1 never calls connect(): rank 0 fails by HETCCL_TIMEOUT (1 s here)
 * with HC_ERR_REMOTE naming rank 1. */
static void body_absent(struct rank *r) {
  if (r->me == 1) return;
  uint64_t t0 = hc_now_ns();
  hc_result_t res;
  while ((res = ops->connect(r->ctx, 1, &r->w->handles[1], &r->conns[1])) == HC_OK && !r->conns[1] &&
         hc_now_ns() < t0 + STEP_NS)
    ops->wait_blocking(r->ctx, 50);
  double s = (double)(hc_now_ns() - t0) / 1e9;
  if (res != HC_ERR_REMOTE || !strstr(hc_last_error(), "rank 1 did not come up") || s > 5)
    FAILR(r, "absent peer: %s \"%s\" after %.1f s", hc_result_str(res), hc_last_error(), s);
}

/* ---- driver ---- */

static void *thread_main(void *arg) {
  struct rank *r = arg;
  hc_log_set_rank(r->me);
  if (!r->w->open_in_main) {
    hc_result_t res = open_rank(r->w, r->me);
    if (res != HC_OK) {
      FAILR(r, "open: %s: %s", hc_result_str(res), hc_last_error());
      atomic_fetch_add(&r->w->open_failures, 1);
    }
  }
  /* Handles are published before anyone connects, as the bootstrap does. */
  pthread_barrier_wait(&r->w->bar);
  if (atomic_load(&r->w->open_failures) == 0) r->w->body(r);
  /* Nobody closes while a peer may still read from it, except on purpose. */
  pthread_barrier_wait(&r->w->bar);
  if (r->ctx) ops->close(r->ctx);
  r->ctx = NULL;
  return NULL;
}

static int run_case(const char *name, int nranks, body_fn body, const size_t *sizes, int nsizes, bool open_in_main,
                    struct world *w) {
  int failed = 0;
  uint64_t t0 = hc_now_ns();
  if (!open_in_main) memset(w, 0, sizeof(*w)); /* else main filled ctxs and handles */
  w->nranks = nranks;
  w->body = body;
  w->sizes = sizes;
  w->nsizes = nsizes;
  w->open_in_main = open_in_main;
  if (!open_in_main) atomic_init(&w->abort_flag, false);
  atomic_init(&w->open_failures, 0);
  pthread_barrier_init(&w->bar, NULL, (unsigned)nranks);
  pthread_t th[MAX_RANKS];
  for (int i = 0; i < nranks; i++) {
    w->ranks[i].w = w;
    w->ranks[i].me = i;
  }
  for (int i = 0; i < nranks; i++) pthread_create(&th[i], NULL, thread_main, &w->ranks[i]);
  for (int i = 0; i < nranks; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&w->bar);
  for (int i = 0; i < nranks; i++) {
    if (w->ranks[i].fail[0]) {
      printf("FAIL %s: %s\n", name, w->ranks[i].fail);
      failed = 1;
    }
  }
  printf("%s %s (%.0f ms)\n", failed ? "FAIL" : "ok  ", name, (double)(hc_now_ns() - t0) / 1e6);
  fflush(stdout);
  return failed;
}

/* Opens ranks 0 and 1 in this thread, with settings that differ. */
static int case_config_mismatch(struct world *w) {
  memset(w, 0, sizeof(*w));
  w->nranks = 2;
  atomic_init(&w->abort_flag, false);
  set_params("2", NULL);
  if (open_rank(w, 0) != HC_OK) return printf("FAIL config mismatch: open 0: %s\n", hc_last_error()), 1;
  set_params("1", NULL);
  if (open_rank(w, 1) != HC_OK) {
    ops->close(w->ranks[0].ctx);
    return printf("FAIL config mismatch: open 1: %s\n", hc_last_error()), 1;
  }
  return run_case("config mismatch (2 vs 1 streams)", 2, body_config_mismatch, NULL, 0, true, w);
}

/* Argument checks and abort, on one ctx. */
static int case_args(void) {
  struct world w;
  int failed = 0;
  void *conn = (void *)1;
  memset(&w, 0, sizeof(w));
  w.nranks = 3;
  atomic_init(&w.abort_flag, false);
  set_params("1", NULL);
  if (open_rank(&w, 0) != HC_OK) return printf("FAIL args: open: %s\n", hc_last_error()), 1;
  void *ctx = w.ranks[0].ctx;
  struct hc_net_handle junk;
  memset(&junk, 0x5a, sizeof(junk));
  if (ops->connect(ctx, 0, &w.handles[0], &conn) != HC_ERR_ARG || conn != NULL)
    failed = printf("FAIL args: connect to self\n");
  if (ops->connect(ctx, 3, &w.handles[0], &conn) != HC_ERR_ARG) failed = printf("FAIL args: connect to rank 3 of 3\n");
  if (ops->connect(ctx, 1, &junk, &conn) != HC_ERR_ARG || !strstr(hc_last_error(), "rank 1"))
    failed = printf("FAIL args: a junk handle: %s\n", hc_last_error());
  /* Rank 2 never answers (its handle is our own listener, which only takes
   * lower ranks); abort must end the wait with an error. */
  atomic_store(&w.abort_flag, true);
  if (ops->connect(ctx, 2, &w.handles[0], &conn) != HC_ERR_REMOTE || !strstr(hc_last_error(), "aborted"))
    failed = printf("FAIL args: abort: %s\n", hc_last_error());
  ops->close(ctx);
  printf("%s argument checks and abort\n", failed ? "FAIL" : "ok  ");
  return failed != 0;
}

int main(void) {
  static const size_t sizes_full[] = {0, 1, 4095, MIB + 3, BIG, 1, 0, 4095};
  static const size_t sizes_small[] = {0, 1, 4095, MIB + 3, 3, 0};
  static struct world w; /* big: keep it off the stack */
  int failed = 0;
  alarm(300); /* the run as a whole; every phase also has its own deadline */
  failed |= case_args();
  static const struct {
    const char *nstreams, *chunk, *label;
  } configs[] = {{"1", NULL, "1 stream"}, {"4", NULL, "4 streams"}, {"3", "1000", "3 streams, chunk 1000"}};
  for (size_t c = 0; c < HC_ARRAY_LEN(configs); c++) {
    char name[128];
    set_params(configs[c].nstreams, configs[c].chunk);
    snprintf(name, sizeof(name), "exchange 2 ranks, %s", configs[c].label);
    failed |= run_case(name, 2, body_exchange, sizes_full, HC_ARRAY_LEN(sizes_full), false, &w);
    snprintf(name, sizeof(name), "exchange 3 ranks, %s", configs[c].label);
    failed |= run_case(name, 3, body_exchange, sizes_small, HC_ARRAY_LEN(sizes_small), false, &w);
    snprintf(name, sizeof(name), "mismatched counts, %s", configs[c].label);
    failed |= run_case(name, 2, body_mismatch, NULL, 0, false, &w);
    snprintf(name, sizeof(name), "peer closes mid-transfer, %s", configs[c].label);
    failed |= run_case(name, 2, body_peer_close, NULL, 0, false, &w);
    if (c < 2) {
      snprintf(name, sizeof(name), "throughput, %s", configs[c].label);
      failed |= run_case(name, 2, body_throughput, NULL, 0, false, &w);
      printf("  loopback, %zu MiB both ways at once, %s: %.2f GB/s each way\n", BIG / MIB, configs[c].label, w.gbps);
    }
  }
  set_params("1", NULL);
  failed |= run_case("garbage and idle connections on a listener", 2, body_garbage, sizes_small,
                     HC_ARRAY_LEN(sizes_small), false, &w);
  failed |= case_config_mismatch(&w);
  set_params("2", NULL);
  failed |= run_case("a peer that reaches connect late", 2, body_late, NULL, 0, false, &w);
  setenv("HETCCL_TIMEOUT", "1", 1);
  hc_params_reset();
  failed |= run_case("a peer that never connects (HETCCL_TIMEOUT=1)", 2, body_absent, NULL, 0, false, &w);
  unsetenv("HETCCL_TIMEOUT");
  hc_params_reset();
  unsetenv("HETCCL_SOCKET_NSTREAMS");
  hc_params_reset();
  printf(failed ? "test_net_socket: FAILED\n" : "test_net_socket: all passed\n");
  return failed;
}
