/*
 * The transport contract suite; see net_contract.h for the cases. Payloads
 * differ per (sender, round, message) so that a message that lands in the
 * wrong receive shows as wrong bytes; receive buffers carry testutil's
 * guards so that a transport writing past a receive shows too.
 */
#include "net_contract.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h" /* HC_HAS_OP */
#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define LARGE (8 * MIB + 3) /* "several MiB", odd */
#define STALL (64 * MIB)    /* more than loopback socket buffers absorb */
#define SPIN_NS 50000ull    /* spin this long without progress before sleeping, as exec does */

/* ---- requests ---- */

/* Posts one send (send) or receive, with sig when it is not NULL. */
static hc_result_t post(struct nc_end *e, bool send, void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  *req = NULL;
  return send ? e->ops->isend(e->conn, buf, n, sig, req) : e->ops->irecv(e->conn, buf, n, sig, req);
}

hc_result_t nc_complete(struct nc_end *e, void **reqs, int n) {
  uint64_t deadline = hc_now_ns() + e->step_ns, idle_since = hc_now_ns();
  int last_left = -1;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) {
      if (reqs[i] == NULL) continue;
      int done = 0;
      hc_result_t r = e->ops->test(reqs[i], &done);
      if (r != HC_OK) return r;
      if (done) reqs[i] = NULL;
      else left++;
    }
    if (left == 0) return HC_OK;
    uint64_t now = hc_now_ns();
    if (now > deadline) {
      CHECK(false, "%d of %d requests not done within %llu s", left, n,
            (unsigned long long)(e->step_ns / 1000000000ull));
      return HC_ERR_INTERNAL;
    }
    if (left != last_left) idle_since = now;
    last_left = left;
    if (now - idle_since > SPIN_NS) {
      hc_result_t r = e->ops->wait_blocking(e->ctx, 50);
      if (r != HC_OK) return r;
    }
  }
}

/* ---- payloads ---- */

uint64_t nc_seed(int src, int round, int idx) {
  return 0x9e3779b97f4a7c15ull * (uint64_t)(src * 1000003 + round * 10007 + idx + 1);
}
void nc_fill(uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n / 8; i++) {
    uint64_t w = seed ^ (i * 0xff51afd7ed558ccdull);
    memcpy(p + 8 * i, &w, 8);
  }
  for (size_t i = n / 8 * 8; i < n; i++) p[i] = (uint8_t)(seed >> (i % 8)) ^ (uint8_t)i;
}
size_t nc_first_wrong(const uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n / 8; i++) {
    uint64_t want = seed ^ (i * 0xff51afd7ed558ccdull), got;
    memcpy(&got, p + 8 * i, 8);
    if (got != want)
      for (size_t b = 0;; b++)
        if (p[8 * i + b] != ((const uint8_t *)&want)[b]) return 8 * i + b;
  }
  for (size_t i = n / 8 * 8; i < n; i++)
    if (p[i] != ((uint8_t)(seed >> (i % 8)) ^ (uint8_t)i)) return i;
  return SIZE_MAX;
}

static void *send_alloc(const struct nc_end *e, size_t n) {
  void *p = e->t->send_alloc ? e->t->send_alloc(n ? n : 1) : malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "net_contract: no memory for a %zu-byte send buffer\n", n);
    abort();
  }
  return p;
}
static void send_free(const struct nc_end *e, void *p) {
  if (e->t->send_free) e->t->send_free(p);
  else free(p);
}

/* Messages of sizes[0..n-1] in direction dir (0: rank 0 to 1, 1: rank 1 to
 * 0, 2: both ways at once), all posted before any test, receive then send
 * per message; message i carries signature {i + 1, round} when sigs and i
 * is odd. Checks every byte and every receive's guards. */
static void exchange(struct nc_end *e, const size_t *sizes, int n, int dir, int round, bool sigs) {
  bool sending = dir == 2 || dir == e->me, receiving = dir == 2 || dir == e->peer;
  uint8_t **sbuf = calloc((size_t)n, sizeof(*sbuf)), **rbuf = calloc((size_t)n, sizeof(*rbuf));
  void **reqs = calloc(2 * (size_t)n, sizeof(*reqs));
  if (!sbuf || !rbuf || !reqs) abort();
  hc_result_t r = HC_OK;
  for (int i = 0; i < n && r == HC_OK; i++) {
    struct hc_net_sig sig = {{(uint64_t)i + 1, (uint64_t)round}};
    const struct hc_net_sig *s = sigs && i % 2 ? &sig : NULL;
    if (receiving) {
      rbuf[i] = tu_buf_alloc(sizes[i], 0xee);
      r = post(e, false, rbuf[i], sizes[i], s, &reqs[2 * i]);
    }
    if (sending && r == HC_OK) {
      sbuf[i] = send_alloc(e, sizes[i]);
      nc_fill(sbuf[i], sizes[i], nc_seed(e->me, round, i));
      r = post(e, true, sbuf[i], sizes[i], s, &reqs[2 * i + 1]);
    }
    CHECK(r == HC_OK, "posting message %d (%zu bytes, round %d): %s: %s", i, sizes[i], round, hc_result_str(r),
          hc_last_error());
  }
  if (r == HC_OK) {
    r = nc_complete(e, reqs, 2 * n);
    CHECK(r == HC_OK || r == HC_ERR_INTERNAL, "%d messages, round %d: %s: %s", n, round, hc_result_str(r),
          hc_last_error());
  }
  for (int i = 0; i < n && r == HC_OK && receiving; i++) {
    size_t bad = nc_first_wrong(rbuf[i], sizes[i], nc_seed(e->peer, round, i));
    char what[96];
    snprintf(what, sizeof(what), "receive %d of %zu bytes, round %d", i, sizes[i], round);
    if (!CHECK(bad == SIZE_MAX, "%s: wrong byte at %zu", what, bad) || !tu_buf_guards_ok(rbuf[i], what)) break;
  }
  for (int i = 0; i < n; i++) {
    if (sbuf[i]) send_free(e, sbuf[i]);
    tu_buf_free(rbuf[i]);
  }
  free(sbuf);
  free(rbuf);
  free(reqs); /* requests a failure left are freed by close */
}

/* ---- cases ---- */

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static void body_sizes(struct nc_end *e) {
  static const size_t fixed[] = {0,    1,    2,     7,     8,     63,      64,  65,      1000,        4095,
                                 4096, 4097, 65535, 65536, 65537, MIB - 1, MIB, MIB + 1, 3 * MIB + 5, LARGE};
  size_t sizes[HC_ARRAY_LEN(fixed) + 3 * 16];
  int n = 0;
  for (size_t i = 0; i < HC_ARRAY_LEN(fixed); i++) sizes[n++] = fixed[i];
  for (int i = 0; i < e->t->nedges && i < 16; i++)
    for (int d = -1; d <= 1; d++) sizes[n++] = e->t->edges[i] + (size_t)d;
  qsort(sizes, (size_t)n, sizeof(sizes[0]), cmp_size);
  int k = 0; /* without repeats */
  for (int i = 0; i < n; i++)
    if (k == 0 || sizes[k - 1] != sizes[i]) sizes[k++] = sizes[i];
  for (int dir = 0; dir < 3 && tu_thread_failures() == 0; dir++) exchange(e, sizes, k, dir, dir, true);
}

static void body_ordering(struct nc_end *e) {
  enum { N = 512 };
  size_t sizes[N];
  for (int i = 0; i < N; i++) sizes[i] = i % 50 == 7 ? 100000 + (size_t)i : (size_t)(i * 37) % 5000;
  exchange(e, sizes, N, 2, 3, false);
}

static void body_many(struct nc_end *e) {
  enum { N = 64 };
  static const size_t mixed[] = {0, 1, 63, 64, 100, 4096, 8192, 8193, 65536, 524288, 524289, 1048576, 3 << 20};
  size_t sizes[N];
  for (int k = 0; k < N; k++) sizes[k] = mixed[k % (int)HC_ARRAY_LEN(mixed)] + (size_t)(k / (int)HC_ARRAY_LEN(mixed));
  exchange(e, sizes, N, 2, 4, false);
}

/* Rank 0 sends sent bytes, rank 1 posts a receive of posted. */
static void mismatch_counts(struct nc_end *e, size_t sent, size_t posted) {
  size_t n = e->me == 0 ? sent : posted;
  uint8_t *buf = calloc(1, n);
  void *req = NULL;
  hc_result_t r = post(e, e->me == 0, buf, n, NULL, &req);
  if (r == HC_OK) r = nc_complete(e, &req, 1);
  if (e->me == 0) {
    /* net.h promises the receiver's failure; the sender's request only has
     * to end (done, or failed because the receiver gave up on the pair). */
    CHECK(r == HC_OK || r == HC_ERR_USAGE || r == HC_ERR_REMOTE, "send of %zu bytes against a receive of %zu: %s: %s",
          sent, posted, hc_result_str(r), hc_last_error());
  } else {
    char s1[32], s2[32];
    snprintf(s1, sizeof(s1), "%zu", sent);
    snprintf(s2, sizeof(s2), "%zu", posted);
    const char *err = hc_last_error();
    CHECK(r == HC_ERR_USAGE && strstr(err, "mismatched counts") && strstr(err, s1) && strstr(err, s2),
          "a receive of %zu bytes met a message of %zu: %s \"%s\", want HC_ERR_USAGE \"mismatched counts\" naming both",
          posted, sent, hc_result_str(r), err);
    /* The pair stays failed: a later call fails too, with the same code. */
    uint8_t b = 0;
    r = post(e, true, &b, 1, NULL, &req);
    if (r == HC_OK) r = nc_complete(e, &req, 1);
    CHECK(r == HC_ERR_USAGE, "a send after a mismatch: %s \"%s\", want HC_ERR_USAGE", hc_result_str(r),
          hc_last_error());
  }
  CHECK(e->link->sync(e->link->arg, e->me), "sync with rank %d after the mismatch", e->peer);
  free(buf);
}
static void body_mismatch_counts_small(struct nc_end *e) { mismatch_counts(e, 1000, 2000); }
static void body_mismatch_counts_large(struct nc_end *e) { mismatch_counts(e, MIB, 2 * MIB); }

/* n bytes both ends; rank 0 sends with {n, 1}, rank 1 receives with {n, 2}. */
static void mismatch_sig(struct nc_end *e, size_t n) {
  uint8_t *buf = calloc(1, n);
  void *req = NULL;
  const struct hc_net_sig mine = {{n, e->me == 0 ? 1 : 2}}, theirs = {{n, e->me == 0 ? 2 : 1}};
  hc_result_t r = post(e, e->me == 0, buf, n, &mine, &req);
  if (r == HC_OK) r = nc_complete(e, &req, 1);
  if (r == HC_OK && e->me == 0) {
    /* A send handed over before the receiver compared completes: the
     * sender hears of it on its receive from that peer. */
    uint8_t b;
    r = post(e, false, &b, 1, NULL, &req);
    if (r == HC_OK) r = nc_complete(e, &req, 1);
  }
  char want[256];
  snprintf(want, sizeof(want), "mismatched calls: rank %d called %016llx:%016llx, rank %d called %016llx:%016llx",
           e->me, (unsigned long long)mine.w[0], (unsigned long long)mine.w[1], e->peer,
           (unsigned long long)theirs.w[0], (unsigned long long)theirs.w[1]);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), want), "%zu bytes, signatures differ: %s \"%s\", want \"%s\"", n,
        hc_result_str(r), hc_last_error(), want);
  CHECK(e->link->sync(e->link->arg, e->me), "sync with rank %d after the mismatch", e->peer);
  free(buf);
}
static void body_mismatch_sig_small(struct nc_end *e) { mismatch_sig(e, 1000); }
static void body_mismatch_sig_large(struct nc_end *e) { mismatch_sig(e, MIB); }

/* Both ends wait to receive and nothing is sent (a Reduce with roots 0
 * and 1): each publishes its call's signature, and must read the peer's
 * through the transport while its receive waits. Then rank 0 reports the
 * mismatch and closes: rank 1's receive fails naming both calls. */
static void body_stall_probe(struct nc_end *e) {
  if (!HC_HAS_OP(e->ops, struct hc_net_ops, stall_publish)) {
    printf("  %s: no stall probes: skipped\n", e->t->name);
    return;
  }
  uint8_t b[8];
  void *req = NULL;
  const struct hc_net_sig mine = {{8, 0x100u + (unsigned)e->me}}, theirs_want = {{8, 0x100u + (unsigned)e->peer}};
  hc_result_t r = post(e, false, b, sizeof(b), NULL, &req);
  CHECK(r == HC_OK, "posting the receive: %s", hc_last_error());
  e->ops->stall_publish(e->conn, &mine);
  struct hc_net_sig theirs = {{0, 0}};
  uint64_t gen = 0;
  for (uint64_t deadline = hc_now_ns() + e->step_ns; r == HC_OK && hc_now_ns() < deadline;) {
    int done = 0;
    r = e->ops->test(req, &done);
    CHECK(!done, "a receive that nothing was sent to completed");
    e->ops->stall_publish(e->conn, &mine); /* again: a transport may have had no room */
    e->ops->stall_peek(e->conn, &theirs, &gen);
    if (hc_net_sig_equal(&theirs, &theirs_want) && gen != 0) break;
    usleep(1000);
  }
  CHECK(r == HC_OK && hc_net_sig_equal(&theirs, &theirs_want) && gen != 0,
        "rank %d read the probe %016llx:%016llx (gen %llu) from rank %d, want %016llx:%016llx (%s)", e->me,
        (unsigned long long)theirs.w[0], (unsigned long long)theirs.w[1], (unsigned long long)gen, e->peer,
        (unsigned long long)theirs_want.w[0], (unsigned long long)theirs_want.w[1],
        r == HC_OK ? "ok" : hc_last_error());
  CHECK(e->link->sync(e->link->arg, e->me), "sync with rank %d: both read the probes", e->peer);
  if (e->me == 0) {
    e->ops->mismatch_found(e->conn, &theirs, &mine);
    e->ops->close(e->ctx);
    e->ctx = e->conn = NULL;
    return;
  }
  r = nc_complete(e, &req, 1);
  char want[256];
  snprintf(want, sizeof(want), "mismatched calls: rank 1 called %016llx:%016llx, rank 0 called %016llx:%016llx",
           (unsigned long long)mine.w[0], (unsigned long long)mine.w[1], (unsigned long long)theirs.w[0],
           (unsigned long long)theirs.w[1]);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), want), "after rank 0 found the mismatch: %s \"%s\", want \"%s\"",
        hc_result_str(r), hc_last_error(), want);
}

static void body_peer_close(struct nc_end *e) {
  if (e->me == 1) {
    CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 0 has posted");
    e->ops->close(e->ctx);
    e->ctx = e->conn = NULL;
    return;
  }
  uint8_t small[8], *big = calloc(1, STALL);
  void *reqs[2] = {NULL, NULL};
  hc_result_t r = post(e, false, small, sizeof(small), NULL, &reqs[0]);
  if (r == HC_OK) r = post(e, true, big, STALL, NULL, &reqs[1]);
  CHECK(r == HC_OK, "posting before the peer closes: %s", hc_last_error());
  CHECK(e->link->sync(e->link->arg, e->me), "sync: rank 0 has posted");
  if (r == HC_OK) {
    r = nc_complete(e, &reqs[0], 1);
    CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "rank 1"),
          "a receive from a peer that closed: %s \"%s\", want HC_ERR_REMOTE naming rank 1", hc_result_str(r),
          hc_last_error());
    r = nc_complete(e, &reqs[1], 1);
    CHECK(r == HC_ERR_REMOTE, "a 64 MiB send to a peer that closed: %s \"%s\", want HC_ERR_REMOTE", hc_result_str(r),
          hc_last_error());
  }
  free(big);
}

static void body_peer_killed(struct nc_end *e) {
  uint8_t *s = calloc(1, STALL), *d = calloc(1, STALL);
  void *reqs[2] = {NULL, NULL};
  hc_set_last_error(""); /* an earlier case's text must not pass for this one's */
  /* Rank 1 never receives, so rank 0's send outgrows the socket buffers and
   * is still in flight at the kill; had rank 1 received, both could finish
   * first, leaving nothing to fail. A post runs a progress pass: rank 0 may
   * see the death there already. */
  hc_result_t r = e->me == 1 ? HC_OK : post(e, false, d, STALL, NULL, &reqs[0]);
  if (r == HC_OK) r = post(e, true, s, STALL, NULL, &reqs[1]);
  if (e->me == 1) {
    for (int i = 0; i < 3 && r == HC_OK; i++) {
      int done = 0;
      r = e->ops->test(reqs[1], &done);
      if (done) break;
    }
    raise(SIGKILL);
  }
  if (r == HC_OK) r = nc_complete(e, reqs, 2);
  CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "rank 1"),
        "a peer killed mid-transfer: %s \"%s\", want HC_ERR_REMOTE naming rank 1", hc_result_str(r), hc_last_error());
  free(s);
  free(d);
}

/* The junk went in before the connection (nc_end_run). */
static void body_garbage(struct nc_end *e) { body_sizes(e); }

const struct nc_case nc_cases[] = {
    {"sizes", body_sizes, false, false},
    {"ordering", body_ordering, false, false},
    {"many_in_flight", body_many, false, false},
    {"mismatch_counts_small", body_mismatch_counts_small, false, false},
    {"mismatch_counts_large", body_mismatch_counts_large, false, false},
    {"mismatch_sig_small", body_mismatch_sig_small, false, false},
    {"mismatch_sig_large", body_mismatch_sig_large, false, false},
    {"stall_probe", body_stall_probe, false, false},
    {"peer_close", body_peer_close, false, false},
    {"peer_killed", body_peer_killed, true, false},
    {"garbage", body_garbage, false, true},
};
const int nc_ncases = (int)HC_ARRAY_LEN(nc_cases);

const struct nc_case *nc_case_find(const char *name) {
  for (int i = 0; i < nc_ncases; i++)
    if (strcmp(nc_cases[i].name, name) == 0) return &nc_cases[i];
  return NULL;
}

/* ---- one end ---- */

void nc_end_run(const struct nc_transport *t, const struct nc_case *c, int me, const struct nc_link *link) {
  struct nc_end e = {.t = t, .ops = t->ops, .me = me, .peer = 1 - me, .link = link};
  e.step_ns = (uint64_t)(t->step_s > 0 ? t->step_s : 30) * 1000000000ull;
  atomic_init(&e.abort_flag, false);
  tu_set_case("%s %s, rank %d", t->name, c->name, me);
  tu_set_repro("%s", c->name);
  long failures0 = tu_thread_failures();
  struct hc_net_args a = {.rank = me, .nranks = 2, .abort_flag = &e.abort_flag};
  memcpy(a.secret, "0123456789abcdef", 16);
  struct hc_net_caps caps;
  struct hc_net_handle mine, theirs;
  int junk[NC_GARBAGE_FDS], njunk = 0;
  hc_result_t r = t->ops->open(&a, &caps, &mine, &e.ctx);
  if (!CHECK(r == HC_OK, "open: %s: %s", hc_result_str(r), hc_last_error())) return;
  if (!CHECK(link->swap(link->arg, me, &mine, &theirs), "handle exchange with rank %d", e.peer)) goto out;
  if (c->needs_garbage && t->garbage && me == 0) { /* before the real connection: first in the queue */
    njunk = t->garbage(&theirs, junk);
    if (njunk < 0) goto out;
  }
  uint64_t deadline = hc_now_ns() + e.step_ns;
  while (e.conn == NULL) {
    r = t->ops->connect(e.ctx, e.peer, &theirs, &e.conn);
    if (!CHECK(r == HC_OK, "connect: %s: %s", hc_result_str(r), hc_last_error())) goto out;
    if (e.conn) break;
    if (!CHECK(hc_now_ns() < deadline, "connection to rank %d not up within the deadline", e.peer)) goto out;
    t->ops->wait_blocking(e.ctx, 20);
  }
  c->body(&e);
  if (t->after_body && tu_thread_failures() == failures0 && e.ctx) t->after_body(&e);
  /* Nobody closes while the peer may still read, except on purpose. */
  if (!c->peer_dies && tu_thread_failures() == failures0)
    CHECK(link->sync(link->arg, me), "final sync with rank %d", e.peer);
out:
  for (int i = 0; i < njunk; i++) close(junk[i]);
  if (e.ctx) t->ops->close(e.ctx);
}

/* ---- both ends on this host ---- */

/* Threads: handles and a barrier in memory; a wait ends when the other end
 * has left (it failed) or at the deadline. */
struct thread_link {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned gen;
  int arrived, left;
  struct hc_net_handle h[2];
  uint64_t step_ns;
};
static bool thread_sync(void *arg, int me) {
  (void)me;
  struct thread_link *l = arg;
  pthread_mutex_lock(&l->mu);
  unsigned gen = l->gen;
  if (++l->arrived == 2) {
    l->arrived = 0;
    l->gen++;
    pthread_cond_broadcast(&l->cv);
  }
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += (time_t)(l->step_ns / 1000000000ull);
  while (l->gen == gen && l->left == 0 && pthread_cond_timedwait(&l->cv, &l->mu, &dl) == 0) {}
  bool ok = l->gen != gen;
  if (!ok) l->arrived--;
  pthread_mutex_unlock(&l->mu);
  return ok;
}
static bool thread_swap(void *arg, int me, const struct hc_net_handle *mine, struct hc_net_handle *theirs) {
  struct thread_link *l = arg;
  pthread_mutex_lock(&l->mu);
  l->h[me] = *mine;
  pthread_mutex_unlock(&l->mu);
  if (!thread_sync(arg, me)) return false;
  pthread_mutex_lock(&l->mu);
  *theirs = l->h[1 - me];
  pthread_mutex_unlock(&l->mu);
  return true;
}
struct thread_end {
  const struct nc_transport *t;
  const struct nc_case *c;
  int me;
  struct nc_link link;
  long failures;
};
static void *thread_main(void *arg) {
  struct thread_end *te = arg;
  struct thread_link *l = te->link.arg;
  hc_log_set_rank(te->me);
  long f0 = tu_thread_failures();
  nc_end_run(te->t, te->c, te->me, &te->link);
  te->failures = tu_thread_failures() - f0;
  tu_set_case("%s", "");
  pthread_mutex_lock(&l->mu);
  l->left++;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return NULL;
}
static bool run_threads(const struct nc_transport *t, const struct nc_case *c, uint64_t step_ns) {
  struct thread_link l = {.step_ns = step_ns};
  pthread_mutex_init(&l.mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&l.cv, &ca);
  pthread_condattr_destroy(&ca);
  struct thread_end ends[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    ends[i] = (struct thread_end){.t = t, .c = c, .me = i, .link = {thread_swap, thread_sync, &l}};
    if (pthread_create(&th[i], NULL, thread_main, &ends[i]) != 0) abort();
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_cond_destroy(&l.cv);
  pthread_mutex_destroy(&l.mu);
  if (t->after_pair) t->after_pair(getpid(), getpid());
  return ends[0].failures == 0 && ends[1].failures == 0;
}

/* Processes: handles and sync bytes through two pipes. */
struct pipe_link {
  int wfd, rfd;
  uint64_t step_ns;
};
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
static bool read_all(int fd, void *p, size_t n, uint64_t step_ns) {
  uint8_t *b = p;
  uint64_t deadline = hc_now_ns() + step_ns;
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
static bool pipe_swap(void *arg, int me, const struct hc_net_handle *mine, struct hc_net_handle *theirs) {
  (void)me;
  struct pipe_link *l = arg;
  return write_all(l->wfd, mine, sizeof(*mine)) && read_all(l->rfd, theirs, sizeof(*theirs), l->step_ns);
}
static bool pipe_sync(void *arg, int me) {
  (void)me;
  struct pipe_link *l = arg;
  char ch = 's';
  return write_all(l->wfd, &ch, 1) && read_all(l->rfd, &ch, 1, l->step_ns);
}
static bool run_processes(const struct nc_transport *t, const struct nc_case *c, uint64_t step_ns) {
  int down[2], up[2]; /* rank 0 to 1, 1 to 0 */
  if (!CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe: %s", strerror(errno))) return false;
  long f0 = tu_failures();
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (!CHECK(child >= 0, "fork: %s", strerror(errno))) return false;
  if (child == 0) {
    close(down[1]);
    close(up[0]);
    struct pipe_link pl = {.wfd = up[1], .rfd = down[0], .step_ns = step_ns};
    struct nc_link link = {pipe_swap, pipe_sync, &pl};
    nc_end_run(t, c, 1, &link);
    fflush(stdout);
    fflush(stderr);
    _exit(tu_failures() > f0 ? 1 : 0);
  }
  close(down[0]);
  close(up[1]);
  struct pipe_link pl = {.wfd = down[1], .rfd = up[0], .step_ns = step_ns};
  struct nc_link link = {pipe_swap, pipe_sync, &pl};
  nc_end_run(t, c, 0, &link);
  close(down[1]);
  close(up[0]);
  int status = 0;
  uint64_t deadline = hc_now_ns() + step_ns;
  pid_t w;
  while ((w = waitpid(child, &status, WNOHANG)) == 0 && hc_now_ns() < deadline) usleep(1000);
  if (!CHECK(w == child, "rank 1 (pid %d) did not end within the deadline", (int)child)) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  } else if (c->peer_dies) {
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank 1 was to die by SIGKILL; status 0x%x", status);
  } else {
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 ended with status 0x%x", status);
  }
  if (t->after_pair) t->after_pair(getpid(), child);
  return tu_failures() == f0;
}

bool nc_run_pair(const struct nc_transport *t, const struct nc_case *c, enum nc_mode mode) {
  uint64_t step_ns = (uint64_t)(t->step_s > 0 ? t->step_s : 30) * 1000000000ull, t0 = hc_now_ns();
  bool ok;
  if (mode == NC_THREADS)
    ok = CHECK(!c->peer_dies, "%s: the peer dies, which needs a process of its own", c->name) &&
         run_threads(t, c, step_ns);
  else ok = run_processes(t, c, step_ns);
  tu_set_case("%s", "");
  printf("%s %s %s, %s (%.0f ms)\n", ok ? "ok  " : "FAIL", t->name, c->name,
         mode == NC_THREADS ? "threads" : "processes", (double)(hc_now_ns() - t0) / 1e6);
  fflush(stdout);
  return ok;
}

int nc_run_suite(const struct nc_transport *t, enum nc_mode mode, const char *only) {
  int failed = 0;
  for (int i = 0; i < nc_ncases; i++) {
    if (only && strcmp(only, nc_cases[i].name) != 0) continue;
    if (nc_cases[i].needs_garbage && t->garbage == NULL) {
      printf("skip %s %s: the transport offers no way to inject garbage\n", t->name, nc_cases[i].name);
      continue;
    }
    failed += !nc_run_pair(t, &nc_cases[i], nc_cases[i].peer_dies ? NC_PROCESSES : mode);
  }
  return failed;
}
