/*
 * net/socket over loopback. The transport contract
 * (tests/common/net_contract.h) between two threads of this process (the
 * killed peer: a forked process), once per striping configuration: 1, 4
 * and 3 streams, the last with an odd chunk so that stripes never divide
 * evenly; the contract's garbage case here opens junk connections on the
 * listener (an HTTP request, one that stays silent, two bytes then a
 * close). Then what only socket has: the kind of each received header
 * (message due, probe, notice, failure, another call or size) by the wire
 * table, the sizes case over IPv6 (where the host has an IPv6 address;
 * else a line says why not), three ranks swapping messages with each other
 * on one ctx, peers configured differently, a peer that reaches connect()
 * late or never, bad arguments and abort. Prints loopback throughput
 * (informational).
 *
 * Every phase has a deadline, and alarm() bounds the whole run.
 *   build/tests/test_net_socket               (all cases)
 *   build/tests/test_net_socket peer_close    (one case, by name)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../src/net/socket_priv.h"
#include "../../src/net/socket_wire.h"
#include "net_contract.h"
#include "testutil.h"

#define MAX_RANKS 4
#define STEP_NS (30ull * 1000000000ull) /* any one phase of a case */
#define MIB ((size_t)1 << 20)
/* The throughput message. ThreadSanitizer pays page faults on shadow
 * memory for every fresh buffer (about 10 ns a byte here), so under it the
 * message shrinks to keep the run short; the code paths are the same. */
#ifdef __SANITIZE_THREAD__
#define BIG (16 * MIB)
#define ROUNDS 1
#else
#define BIG (64 * MIB)
#define ROUNDS 4
#endif

static const struct hc_net_ops *ops = &hc_net_socket;

/* ---- the transport, as the suite sees it ---- */

/* Junk on the listener behind h: 0 sends an HTTP request and stays, 1 stays
 * silent, 2 sends two bytes and closes. */
static int socket_garbage(const struct hc_net_handle *h, int fds[NC_GARBAGE_FDS]) {
  struct hc_sock_handle sh;
  memcpy(&sh, h->bytes, sizeof(sh));
  int junk[3] = {-1, -1, -1};
  bool ok = true;
  for (int i = 0; i < 3 && ok; i++) {
    junk[i] = socket(sh.addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = CHECK(junk[i] >= 0 && connect(junk[i], &sh.addr.sa, hc_sock_len(&sh.addr)) == 0, "junk connect: %s",
               strerror(errno));
  }
  static const char http[] = "GET / HTTP/1.0\r\n\r\n";
  ok = ok && CHECK(send(junk[0], http, sizeof(http) - 1, MSG_NOSIGNAL) > 0 && send(junk[2], "HC", 2, MSG_NOSIGNAL) > 0,
                   "junk send: %s", strerror(errno));
  if (junk[2] >= 0) close(junk[2]);
  if (!ok) {
    for (int i = 0; i < 2; i++)
      if (junk[i] >= 0) close(junk[i]);
    return -1;
  }
  fds[0] = junk[0];
  fds[1] = junk[1];
  return 2;
}

static size_t socket_edges[1]; /* the chunk of the configuration under test */
static struct nc_transport socket_t = {
    .name = "socket",
    .ops = &hc_net_socket,
    .edges = socket_edges,
    .nedges = 1,
    .garbage = socket_garbage,
};

static void set_params(const char *nstreams, const char *chunk) {
  setenv("HETCCL_SOCKET_NSTREAMS", nstreams, 1);
  if (chunk) setenv("HETCCL_SOCKET_CHUNK", chunk, 1);
  else unsetenv("HETCCL_SOCKET_CHUNK");
  hc_params_reset();
  int64_t bytes = 0;
  hc_parse_size(chunk ? chunk : "128K", &bytes);
  socket_edges[0] = (size_t)bytes;
}

/* BIG each way at once, a few rounds; rank 0 writes gbps. */
static double gbps;
static void body_throughput(struct nc_end *e) {
  uint8_t *s = malloc(BIG), *d = malloc(BIG);
  if (!CHECK(s && d, "out of memory")) goto out;
  memset(s, e->me + 1, BIG);
  CHECK(e->link->sync(e->link->arg, e->me), "sync: time only the data");
  uint64_t t0 = hc_now_ns();
  hc_result_t r = HC_OK;
  for (int i = 0; i < ROUNDS && r == HC_OK; i++) {
    void *reqs[2] = {NULL, NULL};
    r = ops->irecv(e->conn, d, BIG, NULL, &reqs[0]);
    if (r == HC_OK) r = ops->isend(e->conn, s, BIG, NULL, &reqs[1]);
    if (r == HC_OK) r = nc_complete(e, reqs, 2);
  }
  uint64_t t1 = hc_now_ns();
  if (CHECK(r == HC_OK, "throughput: %s", hc_last_error()))
    CHECK(d[0] == e->peer + 1 && d[BIG - 1] == e->peer + 1, "throughput data wrong");
  if (e->me == 0) gbps = (double)BIG * ROUNDS / (double)(t1 - t0);
out:
  free(s);
  free(d);
}

/* ---- socket's own cases: ranks as threads, connect done by the body ---- */

struct world;
struct rank {
  struct world *w;
  int me;
  void *ctx;
  void *conns[MAX_RANKS];
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
  const char *name;
  struct rank ranks[MAX_RANKS];
};

static hc_result_t open_rank(struct world *w, int me) {
  struct hc_net_args a = {.rank = me, .nranks = w->nranks, .abort_flag = &w->abort_flag};
  memcpy(a.secret, "0123456789abcdef", 16);
  struct hc_net_caps caps = {.device_memory = true};
  hc_result_t res = ops->open(&a, &caps, &w->handles[me], &w->ranks[me].ctx);
  CHECK(res != HC_OK || !caps.device_memory, "socket says it reaches device memory");
  return res;
}

/* Connects to every peer in mask, calling connect for all of them in turn,
 * as the progress engine would. */
static bool connect_peers(struct rank *r, unsigned mask) {
  uint64_t deadline = hc_now_ns() + STEP_NS;
  for (;;) {
    bool all = true;
    for (int p = 0; p < r->w->nranks; p++) {
      if (!(mask & (1u << p)) || r->conns[p]) continue;
      hc_result_t res = ops->connect(r->ctx, p, &r->w->handles[p], &r->conns[p]);
      if (!CHECK(res == HC_OK, "connect to rank %d: %s", p, hc_last_error())) return false;
      all = all && r->conns[p] != NULL;
    }
    if (all) return true;
    if (!CHECK(hc_now_ns() < deadline, "connections not up after %llu s", STEP_NS / 1000000000ull)) return false;
    ops->wait_blocking(r->ctx, 50);
  }
}

/* Three ranks: every pair swaps a few sizes both ways on one ctx, all
 * posted before any test. */
static void body_three(struct rank *r) {
  static const size_t sizes[] = {0, 1, 4095, MIB + 3, 3, 0};
  enum { NS = HC_ARRAY_LEN(sizes), NP = 2 };
  unsigned mask = ((1u << r->w->nranks) - 1) & ~(1u << r->me);
  if (!connect_peers(r, mask)) return;
  uint8_t *sbuf[NP][NS], *rbuf[NP][NS];
  void *reqs[2 * NP * NS] = {NULL};
  hc_result_t res = HC_OK;
  for (int k = 0, p = 0; p < r->w->nranks; p++) {
    if (p == r->me) continue;
    for (int i = 0; i < NS; i++) {
      sbuf[k][i] = malloc(sizes[i] + 1);
      rbuf[k][i] = tu_buf_alloc(sizes[i], 0xee);
      nc_fill(sbuf[k][i], sizes[i], nc_seed(r->me, p, i));
      if (res == HC_OK) res = ops->irecv(r->conns[p], rbuf[k][i], sizes[i], NULL, &reqs[2 * (k * NS + i)]);
      if (res == HC_OK) res = ops->isend(r->conns[p], sbuf[k][i], sizes[i], NULL, &reqs[2 * (k * NS + i) + 1]);
    }
    k++;
  }
  struct nc_end e = {.ops = ops, .ctx = r->ctx, .step_ns = STEP_NS};
  if (CHECK(res == HC_OK, "posting: %s", hc_last_error())) res = nc_complete(&e, reqs, 2 * NP * NS);
  CHECK(res == HC_OK || res == HC_ERR_INTERNAL, "three ranks: %s", hc_last_error());
  for (int k = 0, p = 0; p < r->w->nranks; p++) {
    if (p == r->me) continue;
    for (int i = 0; i < NS; i++) {
      if (res == HC_OK) {
        size_t bad = nc_first_wrong(rbuf[k][i], sizes[i], nc_seed(p, r->me, i));
        CHECK(bad == SIZE_MAX, "message %d (%zu bytes) from rank %d: wrong byte at %zu", i, sizes[i], p, bad);
        tu_buf_guards_ok(rbuf[k][i], "a receive");
      }
      free(sbuf[k][i]);
      tu_buf_free(rbuf[k][i]);
    }
    k++;
  }
  pthread_barrier_wait(&r->w->bar); /* nobody closes while a peer still reads */
}

/* Ranks opened with different HETCCL_SOCKET_NSTREAMS: both ends fail. */
static void body_config_mismatch(struct rank *r) {
  int peer = 1 - r->me;
  uint64_t deadline = hc_now_ns() + STEP_NS;
  hc_result_t res;
  while ((res = ops->connect(r->ctx, peer, &r->w->handles[peer], &r->conns[peer])) == HC_OK && !r->conns[peer] &&
         hc_now_ns() < deadline)
    ops->wait_blocking(r->ctx, 50);
  CHECK(res == HC_ERR_USAGE && strstr(hc_last_error(), "set them alike"), "config mismatch: got %s \"%s\"",
        hc_result_str(res), hc_last_error());
}

/* Rank 1 reaches connect() half a second late: rank 0's connect() calls keep
 * returning meanwhile (no handshake blocks on a peer that is not serving;
 * one call that took the whole half second would show it), and the pair
 * comes up once rank 1 arrives. */
static void body_late(struct rank *r) {
  if (r->me == 1) {
    usleep(500 * 1000);
    connect_peers(r, 1u << 0);
    return;
  }
  uint64_t deadline = hc_now_ns() + STEP_NS, longest = 0;
  while (!r->conns[1] && hc_now_ns() < deadline) {
    uint64_t t0 = hc_now_ns();
    hc_result_t res = ops->connect(r->ctx, 1, &r->w->handles[1], &r->conns[1]);
    if (!CHECK(res == HC_OK, "connect: %s", hc_last_error())) return;
    longest = HC_MAX(longest, hc_now_ns() - t0);
    if (!r->conns[1]) ops->wait_blocking(r->ctx, 20);
  }
  CHECK(r->conns[1] != NULL, "not connected after the late peer arrived");
  CHECK(longest < 200000000ull, "one connect() call took %.0f ms: it waited for the late peer", (double)longest / 1e6);
}

/* Rank 1 never calls connect(): rank 0 fails by HETCCL_TIMEOUT (1 s here)
 * with HC_ERR_REMOTE naming rank 1, long before the step's deadline. */
static void body_absent(struct rank *r) {
  if (r->me == 1) return;
  uint64_t t0 = hc_now_ns();
  hc_result_t res;
  while ((res = ops->connect(r->ctx, 1, &r->w->handles[1], &r->conns[1])) == HC_OK && !r->conns[1] &&
         hc_now_ns() < t0 + STEP_NS)
    ops->wait_blocking(r->ctx, 50);
  CHECK(res == HC_ERR_REMOTE && strstr(hc_last_error(), "rank 1 did not come up"),
        "absent peer: %s \"%s\" after %.1f s", hc_result_str(res), hc_last_error(), (double)(hc_now_ns() - t0) / 1e9);
}

static void *thread_main(void *arg) {
  struct rank *r = arg;
  hc_log_set_rank(r->me);
  tu_set_case("socket %s, rank %d", r->w->name, r->me);
  if (!r->w->open_in_main) {
    hc_result_t res = open_rank(r->w, r->me);
    if (!CHECK(res == HC_OK, "open: %s: %s", hc_result_str(res), hc_last_error()))
      atomic_fetch_add(&r->w->open_failures, 1);
  }
  /* Handles are published before anyone connects, as the bootstrap does. */
  pthread_barrier_wait(&r->w->bar);
  if (atomic_load(&r->w->open_failures) == 0) r->w->body(r);
  pthread_barrier_wait(&r->w->bar);
  if (r->ctx) ops->close(r->ctx);
  r->ctx = NULL;
  tu_set_case("%s", "");
  return NULL;
}

static const char *only;
static bool wanted(const char *name) { return only == NULL || !strcmp(only, name); }

/* Runs body on nranks threads; w is set up unless open_in_main (then main
 * opened the ranks). Returns 1 when a check failed. */
static int run_case(const char *name, int nranks, body_fn body, bool open_in_main, struct world *w) {
  if (!wanted(name)) {
    for (int i = 0; open_in_main && i < nranks; i++) ops->close(w->ranks[i].ctx);
    return 0;
  }
  long f0 = tu_failures();
  uint64_t t0 = hc_now_ns();
  if (!open_in_main) {
    memset(w, 0, sizeof(*w));
    atomic_init(&w->abort_flag, false);
  }
  w->nranks = nranks;
  w->body = body;
  w->name = name;
  w->open_in_main = open_in_main;
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
  bool ok = tu_failures() == f0;
  printf("%s socket %s (%.0f ms)\n", ok ? "ok  " : "FAIL", name, (double)(hc_now_ns() - t0) / 1e6);
  return !ok;
}

/* Opens ranks 0 and 1 in this thread, with settings that differ. */
static int case_config_mismatch(struct world *w) {
  const char *name = "config_mismatch";
  if (!wanted(name)) return 0;
  memset(w, 0, sizeof(*w));
  w->nranks = 2;
  atomic_init(&w->abort_flag, false);
  set_params("2", NULL);
  if (!CHECK(open_rank(w, 0) == HC_OK, "open 0: %s", hc_last_error())) return 1;
  set_params("1", NULL);
  if (!CHECK(open_rank(w, 1) == HC_OK, "open 1: %s", hc_last_error())) {
    ops->close(w->ranks[0].ctx);
    return 1;
  }
  return run_case(name, 2, body_config_mismatch, true, w);
}

/* What a received header is, by socket_wire.h's record table (the lengths
 * written out here, not taken from the macros), for a receive posted for
 * 100 bytes of signature {7, 9}. Failing checks count in tu_finish. */
static void case_header_kinds(void) {
  if (!wanted("header_kinds")) return;
  static const struct {
    uint64_t len, sig0;
    enum hc_sock_hdr_kind kind;
    int blamed; /* HC_SOCK_HDR_FAILURE: the rank it names */
  } cases[] = {
      /* clang-format off */
      {100, 7, HC_SOCK_HDR_EXPECTED, -1},
      {0xFFFFFFFFFFFFFFFEull, 7, HC_SOCK_HDR_PROBE, -1},
      {0xFFFFFFFFFFFFFFFEull, 0, HC_SOCK_HDR_PROBE, -1},             /* a probe of a waiter that stopped */
      {0xFFFFFFFFFFFFFFFFull, 3, HC_SOCK_HDR_NOTICE, -1},
      {0xFA11000000000003ull, 0, HC_SOCK_HDR_FAILURE, 3},
      {0xFA1100000000FFFFull, 7, HC_SOCK_HDR_FAILURE, 65535},
      {100, 8, HC_SOCK_HDR_OTHER_CALL, -1},
      {99, 8, HC_SOCK_HDR_OTHER_CALL, -1},                           /* another call wins over another size */
      {99, 7, HC_SOCK_HDR_OTHER_SIZE, -1},
      {0, 7, HC_SOCK_HDR_OTHER_SIZE, -1},
      {0xFA10000000000003ull, 7, HC_SOCK_HDR_OTHER_SIZE, -1},        /* near the failure tag is a length */
      /* clang-format on */
  };
  const struct hc_net_sig posted = {{7, 9}};
  for (size_t i = 0; i < HC_ARRAY_LEN(cases); i++) {
    uint8_t wire[HC_SOCK_HDR_BYTES];
    hc_net_socket_hdr_put(wire, &(struct hc_sock_hdr){.len = cases[i].len, .sig = {{cases[i].sig0, 9}}});
    struct hc_sock_hdr h;
    CHECK(!hc_net_socket_hdr_parse(wire, sizeof(wire) - 1, &h), "case %zu: a short header does not parse", i);
    CHECK(hc_net_socket_hdr_parse(wire, sizeof(wire), &h), "case %zu: a %zu-byte header parses", i, sizeof(wire));
    const enum hc_sock_hdr_kind kind = hc_net_socket_hdr_classify(&h, 100, &posted);
    CHECK(kind == cases[i].kind, "case %zu: length 0x%llx, sig0 %llu is kind %d, want %d", i,
          (unsigned long long)cases[i].len, (unsigned long long)cases[i].sig0, (int)kind, (int)cases[i].kind);
    if (cases[i].kind == HC_SOCK_HDR_FAILURE)
      CHECK(hc_sock_hdr_blamed(&h) == cases[i].blamed, "case %zu: blames rank %d, want %d", i, hc_sock_hdr_blamed(&h),
            cases[i].blamed);
  }
}

/* Argument checks and abort, on one ctx. */
static int case_args(void) {
  if (!wanted("args")) return 0;
  static struct world w;
  long f0 = tu_failures();
  void *conn = (void *)1;
  memset(&w, 0, sizeof(w));
  w.nranks = 3;
  atomic_init(&w.abort_flag, false);
  set_params("1", NULL);
  tu_set_case("socket args");
  if (!CHECK(open_rank(&w, 0) == HC_OK, "open: %s", hc_last_error())) return 1;
  void *ctx = w.ranks[0].ctx;
  struct hc_net_handle junk;
  memset(&junk, 0x5a, sizeof(junk));
  CHECK(ops->connect(ctx, 0, &w.handles[0], &conn) == HC_ERR_ARG && conn == NULL, "connect to self");
  CHECK(ops->connect(ctx, 3, &w.handles[0], &conn) == HC_ERR_ARG, "connect to rank 3 of 3");
  CHECK(ops->connect(ctx, 1, &junk, &conn) == HC_ERR_ARG && strstr(hc_last_error(), "rank 1"), "a junk handle: %s",
        hc_last_error());
  /* Rank 2 never answers (its handle is our own listener, which only takes
   * lower ranks); abort must end the wait with an error. */
  atomic_store(&w.abort_flag, true);
  CHECK(ops->connect(ctx, 2, &w.handles[0], &conn) == HC_ERR_REMOTE && strstr(hc_last_error(), "aborted"), "abort: %s",
        hc_last_error());
  ops->close(ctx);
  tu_set_case("%s", "");
  bool ok = tu_failures() == f0;
  printf("%s socket args (argument checks and abort)\n", ok ? "ok  " : "FAIL");
  return !ok;
}

int main(int argc, char **argv) {
  static struct world w; /* big: keep it off the stack */
  tu_init(argc, argv);
  only = argc > 1 ? argv[1] : NULL;
  int failed = 0;
  alarm(300); /* the run as a whole; every phase also has its own deadline */
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  case_header_kinds();
  failed += case_args();
  static const struct {
    const char *nstreams, *chunk, *label;
  } configs[] = {{"1", NULL, "1 stream"}, {"4", NULL, "4 streams"}, {"3", "1000", "3 streams, chunk 1000"}};
  for (size_t c = 0; c < HC_ARRAY_LEN(configs); c++) {
    set_params(configs[c].nstreams, configs[c].chunk);
    printf("-- %s\n", configs[c].label);
    failed += nc_run_suite(&socket_t, NC_THREADS, only);
    if (c < 2 && wanted("throughput")) {
      const struct nc_case tc = {.name = "throughput", .body = body_throughput};
      failed += !nc_run_pair(&socket_t, &tc, NC_THREADS);
      printf("  loopback, %zu MiB both ways at once, %s: %.2f GB/s each way\n", BIG / MIB, configs[c].label, gbps);
    }
  }
  /* IPv6, where the host has an address of that family. */
  setenv("HETCCL_SOCKET_FAMILY", "AF_INET6", 1);
  set_params("2", NULL);
  if (wanted("ipv6")) {
    struct nc_case sizes6 = *nc_case_find("sizes");
    sizes6.name = "ipv6";
    static struct world probe;
    probe.nranks = 2;
    if (open_rank(&probe, 0) != HC_OK) {
      printf("skip socket ipv6: %s\n", hc_last_error());
    } else {
      struct hc_sock_handle h;
      memcpy(&h, probe.handles[0].bytes, sizeof(h));
      CHECK(h.addr.sa.sa_family == AF_INET6, "HETCCL_SOCKET_FAMILY=AF_INET6 gave family %d", h.addr.sa.sa_family);
      ops->close(probe.ranks[0].ctx);
      failed += !nc_run_pair(&socket_t, &sizes6, NC_THREADS);
    }
  }
  unsetenv("HETCCL_SOCKET_FAMILY");
  set_params("2", NULL);
  failed += run_case("three_ranks", 3, body_three, false, &w);
  failed += case_config_mismatch(&w);
  set_params("2", NULL);
  failed += run_case("late_peer", 2, body_late, false, &w);
  setenv("HETCCL_TIMEOUT", "1", 1);
  hc_params_reset();
  failed += run_case("absent_peer", 2, body_absent, false, &w);
  unsetenv("HETCCL_TIMEOUT");
  unsetenv("HETCCL_SOCKET_NSTREAMS");
  unsetenv("HETCCL_SOCKET_CHUNK");
  hc_params_reset();
  printf("%d runs failed\n", failed);
  return tu_finish("test_net_socket");
}
