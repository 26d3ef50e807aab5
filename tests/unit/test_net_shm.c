/*
 * net/shm: the transport contract (tests/common/net_contract.h) between two
 * processes of this host (rank 1 forked), then what only shm has: the
 * sizes case on every path (inline, CMA, slots with plain and
 * non-temporal stores, tiny wrapping slots, hetcclMemAlloc'd buffers with
 * and without CMA), each run checking that some message took the path; the
 * count mismatch and the killed peer on the slot path; the sizes case
 * between two threads of one process (same pid on both ends); a segment
 * left by a rank killed during connect, removed by the next open;
 * hetcclMemAlloc's arguments; wakeups through futex sleep; and /dev/shm
 * holding no hetccl-* entry of ours after every pair; a send from a rank
 * that waits for nothing else goes through slots (and is pulled with
 * HETCCL_SHM_LONE_SEND_SLOTS=0), one with a receive pending is pulled.
 * Prints throughput of
 * 64 MiB transfers per path and the small-message round trip.
 *
 * Every wait has a deadline and alarm() bounds the run. Reproduce:
 *   build/tests/test_net_shm                    (all cases)
 *   build/tests/test_net_shm peer_killed        (one case, by name)
 *   build/tests/test_net_shm perf 512K          (throughput of 512 KiB messages)
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/net/shm_priv.h"
#include "hetccl.h"
#include "net_contract.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

/* ---- the transport, as the suite sees it ---- */

static bool use_memalloc;    /* send buffers from hetcclMemAlloc */
static int expect_kind = -1; /* a path (enum hc_shm_kind) every end must have used */

static void *memalloc_send(size_t n) {
  void *p = NULL;
  if (!use_memalloc) return malloc(n);
  return CHECK(hetcclMemAlloc(&p, n) == hetcclSuccess, "hetcclMemAlloc(%zu): %s", n, hetcclGetLastError(NULL)) ? p
                                                                                                               : NULL;
}
static void memalloc_free(void *p) {
  if (use_memalloc) hetcclMemFree(p);
  else free(p);
}

static void check_path(const struct nc_end *e) {
  const struct hc_shm_conn *c = e->conn;
  if (expect_kind >= 0)
    CHECK(c->nsent[expect_kind] > 0, "no message took path %d (inline %llu, slots %llu, cma %llu, reg %llu)",
          expect_kind, (unsigned long long)c->nsent[0], (unsigned long long)c->nsent[1],
          (unsigned long long)c->nsent[2], (unsigned long long)c->nsent[3]);
}

/* Entries hetccl-<pid>-* in /dev/shm for either pid (named on stderr
 * unless quiet: after a pair, any is a leak). */
static int shm_entries(int a, int b, bool quiet) {
  int n = 0;
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  char pa[32], pb[32];
  snprintf(pa, sizeof(pa), HC_SHM_PREFIX "%d-", a);
  snprintf(pb, sizeof(pb), HC_SHM_PREFIX "%d-", b);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (!strncmp(e->d_name, pa, strlen(pa)) || !strncmp(e->d_name, pb, strlen(pb))) {
      if (!quiet) fprintf(stderr, "  left in /dev/shm: %s\n", e->d_name);
      n++;
    }
  closedir(d);
  return n;
}
static void check_no_segments(int pid0, int pid1) {
  CHECK(shm_entries(pid0, pid1, false) == 0, "hetccl-* entries of pids %d, %d left in /dev/shm", pid0, pid1);
}

/* The inline bytes that share the publishing line (the descriptor header's
 * second half), then the defaults' inline limit, CMA threshold and slot
 * size. */
static const size_t shm_edges[] = {HC_SHM_DESC_HDR / 2, 4096, 65536, 256 * 1024};
static const struct nc_transport shm = {
    .name = "shm",
    .ops = &hc_net_shm,
    .edges = shm_edges,
    .nedges = HC_ARRAY_LEN(shm_edges),
    .send_alloc = memalloc_send,
    .send_free = memalloc_free,
    .after_body = check_path,
    .after_pair = check_no_segments,
};

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

/* ---- shm's own bodies (run by the suite's pair drivers) ---- */

/* Throughput: perf_bytes messages, a window of them in flight, each way at
 * once and then (rank 0 -> 1) one way, perf_volume bytes per measure (more
 * when perf cases are asked for by name). Rank 0 writes perf_gbps. */
static size_t perf_bytes = 64 * MIB, perf_volume = 128 * MIB;
static double perf_gbps[2];
static void body_perf(struct nc_end *e) {
  const size_t n = perf_bytes;
  const int window = (int)HC_MAX((size_t)1, HC_MIN((size_t)16, 64 * MIB / HC_MAX(n, (size_t)1)));
  const int rounds = (int)HC_MAX((size_t)2, perf_volume / (n * (size_t)window));
  uint8_t *s = memalloc_send(n * (size_t)window), *d = malloc(n * (size_t)window);
  void **reqs = calloc(2 * (size_t)window, sizeof(void *));
  if (!CHECK(s && d && reqs, "out of memory")) goto out;
  memset(s, e->me + 1, n * (size_t)window);
  memset(d, 0, n * (size_t)window);
  for (int mode = 0; mode < 2 && tu_thread_failures() == 0; mode++) {
    CHECK(e->link->sync(e->link->arg, e->me), "sync before measure %d", mode);
    uint64_t t0 = hc_now_ns();
    for (int i = 0; i < rounds + 1 && tu_thread_failures() == 0; i++) {
      if (i == 1) t0 = hc_now_ns(); /* round 0 warms up */
      hc_result_t r = HC_OK;
      for (int w = 0; w < window && r == HC_OK; w++) {
        if (mode == 0 || e->me == 1) r = e->ops->irecv(e->conn, d + (size_t)w * n, n, NULL, &reqs[2 * w]);
        if (r == HC_OK && (mode == 0 || e->me == 0))
          r = e->ops->isend(e->conn, s + (size_t)w * n, n, NULL, &reqs[2 * w + 1]);
      }
      if (r == HC_OK) r = nc_complete(e, reqs, 2 * window);
      CHECK(r == HC_OK, "round %d: %s", i, hc_last_error());
    }
    if (mode == 1) CHECK(e->link->sync(e->link->arg, e->me), "sync: the receiver is done too");
    perf_gbps[mode] = (double)n * window * rounds / (double)(hc_now_ns() - t0);
  }
  CHECK(tu_thread_failures() != 0 || d[n - 1] == e->peer + 1, "perf data wrong");
out:
  memalloc_free(s);
  free(d);
  free(reqs);
}

static double rtt_us;
static void body_latency(struct nc_end *e) {
  const int iters = 20000;
  uint64_t x = 1, y = 0, t0 = 0;
  hc_result_t r = HC_OK;
  for (int i = 0; i < iters + 1000 && r == HC_OK; i++) {
    if (i == 1000) t0 = hc_now_ns();
    void *reqs[2] = {NULL, NULL};
    if (e->me == 0) {
      r = e->ops->isend(e->conn, &x, 8, NULL, &reqs[0]);
      if (r == HC_OK) r = e->ops->irecv(e->conn, &y, 8, NULL, &reqs[1]);
    } else {
      r = e->ops->irecv(e->conn, &y, 8, NULL, &reqs[1]);
      if (r == HC_OK) r = nc_complete(e, &reqs[1], 1);
      if (r == HC_OK) r = e->ops->isend(e->conn, &y, 8, NULL, &reqs[0]);
    }
    if (r == HC_OK) r = nc_complete(e, reqs, 2);
    x++;
  }
  CHECK(r == HC_OK, "ping-pong: %s", hc_last_error());
  rtt_us = (double)(hc_now_ns() - t0) / 1e3 / iters;
}

/* The sender's path by what else it waits for (HETCCL_SHM_LONE_SEND_SLOTS,
 * lone_slots_expected) and by the comm's choice (choose_pulls, way):
 * rank 0 sends a pulled-size message while it waits for nothing else
 * (slots, where the setting is on and the comm has not chosen, or chose
 * none), then another with a receive pending (pulled, where the peer can
 * pull and the comm did not choose none). Rank 1 checks both messages'
 * bytes. */
static bool lone_slots_expected;
static enum hc_net_pulls way;
static void body_lone_send(struct nc_end *e) {
  const size_t n = MIB;
  uint8_t *a = malloc(n), *b = malloc(n), ack = 0;
  void *reqs[3] = {NULL, NULL, NULL};
  hc_result_t r = HC_OK;
  if (!CHECK(a && b, "out of memory")) goto out;
  memset(a, e->me ? 0 : 0x5a, n);
  memset(b, e->me ? 0 : 0xa5, n);
  if (e->me == 0) {
    const struct hc_shm_conn *c = e->conn;
    e->ops->choose_pulls(e->ctx, way);
    r = e->ops->isend(e->conn, a, n, NULL, &reqs[0]);
    if (r == HC_OK) r = nc_complete(e, reqs, 1);
    if (r == HC_OK) r = e->ops->irecv(e->conn, &ack, 1, NULL, &reqs[1]);
    if (r == HC_OK) r = e->ops->isend(e->conn, b, n, NULL, &reqs[2]);
    if (r == HC_OK) r = nc_complete(e, &reqs[1], 2);
    e->ops->choose_pulls(e->ctx, HC_NET_PULLS_DEFAULT);
    const bool no_pulls = !c->peer_cma || way == HC_NET_PULLS_NONE;
    const bool lone_slots = lone_slots_expected && way == HC_NET_PULLS_DEFAULT;
    const uint64_t first_slots = lone_slots || no_pulls, slots = first_slots + no_pulls;
    CHECK(r != HC_OK || (c->nsent[HC_SHM_SLOTS] == slots && c->nsent[HC_SHM_CMA] == 2 - slots),
          "paths: slots %llu, cma %llu (peer can pull: %d; lone sends through slots: %d; the comm's choice: %d)",
          (unsigned long long)c->nsent[HC_SHM_SLOTS], (unsigned long long)c->nsent[HC_SHM_CMA], c->peer_cma,
          lone_slots_expected, (int)way);
  } else {
    r = e->ops->irecv(e->conn, a, n, NULL, &reqs[0]);
    if (r == HC_OK) r = e->ops->irecv(e->conn, b, n, NULL, &reqs[1]);
    if (r == HC_OK) r = nc_complete(e, reqs, 2);
    /* Only now: rank 0's receive of it stays pending while it sends b. */
    if (r == HC_OK) r = e->ops->isend(e->conn, &ack, 1, NULL, &reqs[2]);
    if (r == HC_OK) r = nc_complete(e, &reqs[2], 1);
    CHECK(r != HC_OK || (a[0] == 0x5a && a[n - 1] == 0x5a && b[0] == 0xa5 && b[n - 1] == 0xa5), "data wrong");
  }
  CHECK(r == HC_OK, "lone send: %s", hc_last_error());
out:
  free(a);
  free(b);
}

/* A small send on a connection with no send queued and room in the ring
 * completes within isend and returns no request (net.h); behind a queued
 * send, or with the ring full, it gets one. Rank 1 receives only after
 * rank 0 has posted everything, and checks every message and the order. */
static void body_inline_now(struct nc_end *e) {
  enum { NBURST = HC_SHM_NDESC + 6 };
  const size_t big = MIB;
  uint8_t *a = malloc(big);
  uint64_t x[NBURST + 1], y[NBURST + 1];
  void *reqs[NBURST + 2] = {NULL};
  hc_result_t r = HC_OK;
  if (!CHECK(a, "out of memory")) goto out;
  memset(a, e->me ? 0 : 0x77, big);
  for (int i = 0; i <= NBURST; i++) x[i] = 1000 + (uint64_t)i, y[i] = 0;
  if (e->me == 0) {
    const struct hc_shm_conn *c = e->conn;
    e->ops->choose_pulls(e->ctx, HC_NET_PULLS_NONE); /* a through slots: queued until rank 1 drains them */
    r = e->ops->isend(e->conn, a, big, NULL, &reqs[0]);
    if (r == HC_OK) r = e->ops->isend(e->conn, &x[0], 8, NULL, &reqs[1]);
    CHECK(r != HC_OK || (reqs[0] != NULL && reqs[1] != NULL), "a small send behind a queued one has no request");
    if (r == HC_OK) r = nc_complete(e, reqs, 2);
    CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 1 has both");
    const uint64_t inline_before = c->nsent[HC_SHM_INLINE];
    int no_request = 0;
    for (int i = 1; i <= NBURST && r == HC_OK; i++) {
      r = e->ops->isend(e->conn, &x[i], 8, NULL, &reqs[1 + i]);
      no_request += r == HC_OK && reqs[1 + i] == NULL;
    }
    /* Rank 1 has consumed a and x[0]: the ring has room for all its
     * descriptors, and the burst is longer. */
    CHECK(r != HC_OK || no_request == HC_SHM_NDESC, "%d of %d sends into a free ring of %d completed at once",
          no_request, NBURST, HC_SHM_NDESC);
    CHECK(r != HC_OK || c->nsent[HC_SHM_INLINE] - inline_before == (uint64_t)no_request,
          "inline sends counted: %llu, want %d", (unsigned long long)(c->nsent[HC_SHM_INLINE] - inline_before),
          no_request);
    e->ops->choose_pulls(e->ctx, HC_NET_PULLS_DEFAULT);
    CHECK(e->link->sync(e->link->arg, e->me), "sync: the burst is posted");
    if (r == HC_OK) r = nc_complete(e, &reqs[2], NBURST);
  } else {
    r = e->ops->irecv(e->conn, a, big, NULL, &reqs[0]);
    if (r == HC_OK) r = e->ops->irecv(e->conn, &y[0], 8, NULL, &reqs[1]);
    if (r == HC_OK) r = nc_complete(e, reqs, 2);
    CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 1 has both");
    CHECK(e->link->sync(e->link->arg, e->me), "sync: the burst is posted");
    for (int i = 1; i <= NBURST && r == HC_OK; i++) r = e->ops->irecv(e->conn, &y[i], 8, NULL, &reqs[1 + i]);
    if (r == HC_OK) r = nc_complete(e, &reqs[2], NBURST);
    CHECK(r != HC_OK || (a[0] == 0x77 && a[big - 1] == 0x77), "the queued large send's bytes are wrong");
    for (int i = 0; i <= NBURST && r == HC_OK; i++)
      CHECK(y[i] == 1000 + (uint64_t)i, "message %d: %llu, want %llu", i, (unsigned long long)y[i],
            (unsigned long long)(1000 + i));
  }
  CHECK(r == HC_OK, "inline sends: %s", hc_last_error());
out:
  free(a);
}

/* Rank 0's sends complete once their bytes are in its slots, and it closes
 * at once; rank 1 posts its receives only after that and must still get
 * every byte: the slots a closed sender filled take many progress passes
 * (HETCCL_SHM_PASS_BYTES) to drain, and the close fails none of them. */
static void body_closed_after_send(struct nc_end *e) {
  enum { NMSG = 3, MSG = 512 * 1024 }; /* inside the default 8 x 256K ring */
  uint8_t *m[NMSG] = {NULL};
  void *reqs[NMSG] = {NULL};
  hc_result_t r = HC_OK;
  for (int i = 0; i < NMSG; i++) {
    m[i] = malloc(MSG);
    if (!CHECK(m[i], "out of memory")) goto out;
    memset(m[i], e->me ? 0 : 0x30 + i, MSG);
  }
  if (e->me == 0) {
    for (int i = 0; i < NMSG && r == HC_OK; i++) r = e->ops->isend(e->conn, m[i], MSG, NULL, &reqs[i]);
    if (r == HC_OK) r = nc_complete(e, reqs, NMSG);
    CHECK(r == HC_OK, "sends into the slots: %s", hc_last_error());
    e->ops->close(e->ctx);
    e->ctx = e->conn = NULL;
    CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 0 has closed");
    goto out;
  }
  CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 0 has closed");
  for (int i = 0; i < NMSG && r == HC_OK; i++) r = e->ops->irecv(e->conn, m[i], MSG, NULL, &reqs[i]);
  if (r == HC_OK) r = nc_complete(e, reqs, NMSG);
  CHECK(r == HC_OK, "receiving what a closed sender left in its slots: %s", hc_last_error());
  for (int i = 0; i < NMSG && r == HC_OK; i++)
    CHECK(m[i][0] == 0x30 + i && m[i][MSG - 1] == 0x30 + i, "message %d: bytes %#x..%#x, want %#x", i, m[i][0],
          m[i][MSG - 1], 0x30 + i);
out:
  for (int i = 0; i < NMSG; i++) free(m[i]);
}

/* Ping-pong where both sides sleep in wait_blocking after every test that
 * finds nothing: each message must wake the peer's futex. A lost wakeup
 * costs a whole sleep slice (1 s), which the printed worst round trip
 * shows; a wakeup that never comes fails the step's deadline. */
static double sleep_rtt_us, sleep_max_us;
static void body_sleep(struct nc_end *e) {
  const int iters = 300;
  uint64_t x = 7, y = 0, t0 = hc_now_ns(), worst = 0;
  hc_result_t r = HC_OK;
  for (int i = 0; i < iters && r == HC_OK; i++) {
    uint64_t ti = hc_now_ns();
    void *reqs[2] = {NULL, NULL};
    r = e->ops->irecv(e->conn, &y, 8, NULL, &reqs[1]);
    if (r == HC_OK && (e->me == 0 || i > 0)) r = e->ops->isend(e->conn, &x, 8, NULL, &reqs[0]);
    for (int k = 0; k < 2 && r == HC_OK; k++) {
      uint64_t deadline = hc_now_ns() + e->step_ns;
      while (reqs[k] && r == HC_OK) {
        int done = 0;
        r = e->ops->test(reqs[k], &done);
        if (done) reqs[k] = NULL;
        else if (!CHECK(hc_now_ns() < deadline, "ping-pong %d stuck", i)) r = HC_ERR_INTERNAL;
        else if (r == HC_OK) r = e->ops->wait_blocking(e->ctx, 1000);
      }
    }
    worst = HC_MAX(worst, hc_now_ns() - ti);
  }
  CHECK(r == HC_OK || r == HC_ERR_INTERNAL, "ping-pong through sleep: %s", hc_last_error());
  if (e->me == 1 && r == HC_OK) { /* the last reply */
    void *req = NULL;
    r = e->ops->isend(e->conn, &x, 8, NULL, &req);
    if (r == HC_OK) r = nc_complete(e, &req, 1);
    CHECK(r == HC_OK, "the last reply: %s", hc_last_error());
  }
  sleep_rtt_us = (double)(hc_now_ns() - t0) / 1e3 / iters;
  sleep_max_us = (double)worst / 1e3;
}

/* ---- cases without a connected pair ---- */

static hc_result_t open_alone(void **ctx, struct hc_net_handle *mine) {
  struct hc_net_args a = {.rank = 0, .nranks = 2};
  memcpy(a.secret, "0123456789abcdef", 16);
  struct hc_net_caps caps = {.device_memory = true};
  hc_result_t r = hc_net_shm.open(&a, &caps, mine, ctx);
  CHECK(r != HC_OK || !caps.device_memory, "shm says it reaches device memory");
  return r;
}

/* A child creates a pair's segment toward a peer that never comes and is
 * killed before the peer maps it: the next open removes the leftover. */
static bool run_stale(void) {
  long f0 = tu_failures();
  tu_set_case("shm stale_segment_removed");
  int p[2];
  if (!CHECK(pipe(p) == 0, "pipe: %s", strerror(errno))) return false;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    void *ctx = NULL, *conn = NULL;
    struct hc_net_handle mine, theirs;
    if (open_alone(&ctx, &mine) != HC_OK) _exit(1);
    struct hc_shm_handle h;
    memcpy(&h, mine.bytes, sizeof(h));
    h.pid = getppid();
    h.id ^= 0x5555;
    memcpy(theirs.bytes, &h, sizeof(h));
    if (hc_net_shm.connect(ctx, 1, &theirs, &conn) != HC_OK) _exit(2);
    char c = 'x';
    if (write(p[1], &c, 1) != 1) _exit(3);
    raise(SIGKILL);
  }
  close(p[1]);
  char c;
  bool told = read(p[0], &c, 1) == 1;
  close(p[0]);
  int status;
  waitpid(child, &status, 0);
  if (CHECK(told && shm_entries(child, child, true) == 1, "the killed rank left no segment to clean up")) {
    void *ctx = NULL;
    struct hc_net_handle mine;
    if (CHECK(open_alone(&ctx, &mine) == HC_OK, "open: %s", hc_last_error())) hc_net_shm.close(ctx);
    CHECK(shm_entries(child, child, false) == 0, "open did not remove the stale segment");
  }
  tu_set_case("%s", "");
  bool ok = tu_failures() == f0;
  printf("%s shm stale_segment_removed\n", ok ? "ok  " : "FAIL");
  return ok;
}

static bool run_memalloc_args(void) {
  long f0 = tu_failures();
  tu_set_case("memalloc_arguments");
  void *p = (void *)1;
  CHECK(hetcclMemAlloc(NULL, 10) == hetcclInvalidArgument, "hetcclMemAlloc(NULL, 10)");
  CHECK(hetcclMemAlloc(&p, 0) == hetcclInvalidArgument && p == NULL, "hetcclMemAlloc of 0 bytes");
  CHECK(hetcclMemFree(NULL) == hetcclSuccess, "hetcclMemFree(NULL)");
  int x;
  CHECK(hetcclMemFree(&x) == hetcclInvalidArgument && strstr(hetcclGetLastError(NULL), "not returned by"),
        "hetcclMemFree of a stack address: %s", hetcclGetLastError(NULL));
  if (CHECK_OK(hetcclMemAlloc(&p, 12345))) {
    CHECK(((uintptr_t)p % 4096) == 0, "hetcclMemAlloc returned %p, not page-aligned", p);
    memset(p, 7, 12345);
    CHECK_OK(hetcclMemFree(p));
  }
  tu_set_case("%s", "");
  bool ok = tu_failures() == f0;
  printf("%s memalloc_arguments\n", ok ? "ok  " : "FAIL");
  return ok;
}

/* ---- driver ---- */

static const char *only;
static bool wanted(const char *name) { return only == NULL || !strcmp(only, name); }

/* Contract case case_name, as a shm run called name under the settings now
 * in place. */
static int run_as(const char *name, const char *case_name, enum nc_mode mode) {
  if (!wanted(name)) return 0;
  struct nc_case c = *nc_case_find(case_name);
  c.name = name;
  return !nc_run_pair(&shm, &c, mode);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  only = argc > 1 ? argv[1] : NULL;
  int64_t bytes;
  if (argc > 2 && hc_parse_size(argv[2], &bytes) == HC_OK && bytes > 0) perf_bytes = (size_t)bytes;
  if (only && !strncmp(only, "perf", 4)) perf_volume = 384 * MIB;
  alarm(110);
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  int failed = 0;
  set_env(NULL, NULL, NULL, NULL, NULL);
  if (wanted("memalloc_arguments")) failed += !run_memalloc_args();
  failed += nc_run_suite(&shm, NC_PROCESSES, only);

  /* The sizes case on each path, checking that the path was taken. */
  expect_kind = HC_SHM_CMA;
  failed += run_as("exchange_cma", "sizes", NC_PROCESSES);
  set_env("0", NULL, NULL, NULL, "1M");
  expect_kind = HC_SHM_SLOTS;
  failed += run_as("exchange_slots_nt", "sizes", NC_PROCESSES);
  set_env("0", "4K", "2", "0", NULL);
  failed += run_as("exchange_tiny_slots", "sizes", NC_PROCESSES);
  use_memalloc = true;
  expect_kind = HC_SHM_REG;
  set_env(NULL, NULL, NULL, NULL, NULL);
  failed += run_as("exchange_memalloc", "sizes", NC_PROCESSES);
  set_env("0", NULL, NULL, NULL, NULL);
  failed += run_as("exchange_memalloc_nocma", "sizes", NC_PROCESSES);
  use_memalloc = false;
  expect_kind = -1;
  failed += run_as("mismatch_slots", "mismatch_counts_large", NC_PROCESSES);
  failed += run_as("kill_slots", "peer_killed", NC_PROCESSES);
  if (wanted("inline_now")) {
    const struct nc_case c = {.name = "inline_now", .body = body_inline_now};
    failed += !nc_run_pair(&shm, &c, NC_PROCESSES);
  }
  if (wanted("closed_after_send")) {
    const struct nc_case c = {.name = "closed_after_send", .body = body_closed_after_send};
    failed += !nc_run_pair(&shm, &c, NC_PROCESSES);
  }
  set_env(NULL, NULL, NULL, NULL, NULL);
  failed += run_as("threads_exchange", "sizes", NC_THREADS);
  for (int on = 1; on >= 0; on--)
    for (int w = HC_NET_PULLS_DEFAULT; w <= HC_NET_PULLS_NONE; w++) {
      /* [setting on][way]: the comm not choosing, choosing pulls, choosing none */
      const char *names[2][3] = {{"lone_send_pulled", "lone_send_pulled_chosen", "lone_send_pulled_withheld"},
                                 {"lone_send_slots", "lone_send_slots_chosen", "lone_send_slots_withheld"}};
      const struct nc_case c = {.name = names[on][w], .body = body_lone_send};
      if (!wanted(c.name)) continue;
      setenv("HETCCL_SHM_LONE_SEND_SLOTS", on ? "1" : "0", 1);
      hc_params_reset();
      lone_slots_expected = on;
      way = (enum hc_net_pulls)w;
      failed += !nc_run_pair(&shm, &c, NC_PROCESSES);
    }
  unsetenv("HETCCL_SHM_LONE_SEND_SLOTS");
  hc_params_reset();
  if (wanted("stale_segment_removed")) failed += !run_stale();
  if (wanted("sleep_wakeup")) {
    const struct nc_case c = {.name = "sleep_wakeup", .body = body_sleep};
    if (nc_run_pair(&shm, &c, NC_PROCESSES))
      printf("  round trip through futex sleep and wake: %.1f us average, %.1f us worst\n", sleep_rtt_us, sleep_max_us);
    else failed++;
  }

  /* Throughput per path (GB/s, 1e9 bytes) and the 8-byte round trip. */
  static const struct {
    const char *name, *cma, *nt;
    bool memalloc;
  } perf[] = {{"perf_cma", NULL, NULL, false},
              {"perf_memalloc", "0", NULL, true},
              {"perf_slots", "0", NULL, false},
              {"perf_slots_nt", "0", "1", false}};
  for (size_t i = 0; i < HC_ARRAY_LEN(perf); i++) {
    if (only && strcmp(only, perf[i].name) && strcmp(only, "perf")) continue;
    set_env(perf[i].cma, NULL, NULL, NULL, perf[i].nt);
    setenv("HETCCL_SHM_LONE_SEND_SLOTS", "0", 1); /* one way too, each path as named */
    hc_params_reset();
    use_memalloc = perf[i].memalloc;
    const struct nc_case c = {.name = perf[i].name, .body = body_perf};
    if (nc_run_pair(&shm, &c, NC_PROCESSES))
      printf("  %zu bytes: %.2f GB/s each way at once, %.2f GB/s one way\n", perf_bytes, perf_gbps[0], perf_gbps[1]);
    else failed++;
  }
  use_memalloc = false;
  unsetenv("HETCCL_SHM_LONE_SEND_SLOTS");
  set_env(NULL, NULL, NULL, NULL, NULL);
  if (only == NULL || !strcmp(only, "latency") || !strcmp(only, "perf")) {
    const struct nc_case c = {.name = "latency", .body = body_latency};
    if (nc_run_pair(&shm, &c, NC_PROCESSES)) printf("  8-byte round trip: %.2f us\n", rtt_us);
    else failed++;
  }
  printf("%d pair runs failed\n", failed);
  return tu_finish("test_net_shm");
}
