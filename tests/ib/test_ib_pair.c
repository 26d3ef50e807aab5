/*
 * The ib transport's contract (net.h) between two processes, one in each
 * soft-RoCE VM (guest_coll.sh, case "pair"): rank 0 in VM a, rank 1 in VM b.
 * The two exchange their handles through files in a folder both VMs share.
 *   1. messages of every path (empty, inline, eager, one above eager, one
 *      chunk, many chunks with a ragged end), one way then the other, bytes
 *      checked;
 *   2. 64 messages of mixed sizes in flight both ways at once, more than
 *      the eager slots and the cts ring hold, completed in any order;
 *   3. mismatched counts on the eager path and, on a second connection, on
 *      the large path: both ranks fail with HC_ERR_USAGE naming both sizes;
 *   4. the same sizes with mismatched signatures (net.h), on the eager path
 *      (checked by the receiver in the slot) and, on a fourth connection,
 *      the large path (checked by the sender in the cts): both ranks fail
 *      with HC_ERR_USAGE, "mismatched calls", naming both signatures.
 * Exit 77 without a usable RDMA port.
 *   test_ib_pair RANK SHARED_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "net/net.h"

#define WAIT_S 120

static int failures;
#define EXPECT(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      printf("FAIL rank %d %s:%d: ", g_rank, __FILE__, __LINE__);                     \
      printf(__VA_ARGS__);                                                            \
      printf(" (%s)\n", hc_last_error());                                             \
      fflush(stdout);                                                                 \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)

static int g_rank;

/* Publishes this rank's handle for round `round` and reads the peer's. */
static bool swap_handles(const char *dir, int round, const struct hc_net_handle *mine,
                         struct hc_net_handle *theirs) {
  char path[512], tmp[520];
  snprintf(path, sizeof(path), "%s/handle.%d.%d", dir, round, g_rank);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(mine, sizeof(*mine), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) return false;
  snprintf(path, sizeof(path), "%s/handle.%d.%d", dir, round, 1 - g_rank);
  for (int t = 0; t < WAIT_S * 10; t++) {
    f = fopen(path, "rb");
    if (f) {
      bool ok = fread(theirs, sizeof(*theirs), 1, f) == 1;
      fclose(f);
      if (ok) return true;
    }
    usleep(100000);
  }
  return false;
}

static hc_result_t connect_blocking(void *ctx, const struct hc_net_handle *peer, void **conn) {
  uint64_t end = hc_now_ns() + (uint64_t)WAIT_S * 1000000000ull;
  *conn = NULL;
  while (*conn == NULL) {
    HC_TRY(hc_net_ib.connect(ctx, 1 - g_rank, peer, conn));
    if (*conn) break;
    if (hc_now_ns() > end) return HC_FAIL(HC_ERR_REMOTE, "test: no connection within %d s", WAIT_S);
    HC_TRY(hc_net_ib.wait_blocking(ctx, 10));
  }
  return HC_OK;
}

/* Tests every request until all are done or one fails. */
static hc_result_t wait_all(void *ctx, void **reqs, int n) {
  uint64_t end = hc_now_ns() + (uint64_t)WAIT_S * 1000000000ull;
  for (int left = n; left > 0;) {
    for (int i = 0; i < n; i++) {
      if (reqs[i] == NULL) continue;
      int done = 0;
      HC_TRY(hc_net_ib.test(reqs[i], &done));
      if (done) {
        reqs[i] = NULL;
        left--;
      }
    }
    if (left == 0) break;
    if (hc_now_ns() > end) return HC_FAIL(HC_ERR_REMOTE, "test: %d requests not done within %d s", left, WAIT_S);
    HC_TRY(hc_net_ib.wait_blocking(ctx, 10));
  }
  return HC_OK;
}

static uint8_t pattern(int from, int msg, size_t i) { return (uint8_t)(from * 131 + msg * 31 + i * 7 + (i >> 12)); }

static size_t mixed_size(int k) {
  static const size_t sizes[] = {0, 1, 63, 64, 100, 4096, 8192, 8193, 65536, 524288, 524289, 1048576, 3 << 20};
  return sizes[k % (int)HC_ARRAY_LEN(sizes)] + (size_t)(k / (int)HC_ARRAY_LEN(sizes));
}

static void one_way(void *ctx, void *conn) {
  static const size_t sizes[] = {0, 1, 60, 8192, 8193, 524288, (5u << 20) + 3};
  for (int dir = 0; dir < 2; dir++) {
    for (size_t k = 0; k < HC_ARRAY_LEN(sizes); k++) {
      size_t n = sizes[k];
      uint8_t *buf = malloc(n + 1);
      void *req = NULL;
      bool sending = dir == g_rank;
      for (size_t i = 0; i < n; i++) buf[i] = sending ? pattern(dir, (int)k, i) : 0xa5;
      hc_result_t r = sending ? hc_net_ib.isend(conn, buf, n, &req) : hc_net_ib.irecv(conn, buf, n, &req);
      if (r == HC_OK) r = wait_all(ctx, &req, 1);
      EXPECT(r == HC_OK, "%s of %zu bytes", sending ? "send" : "receive", n);
      size_t bad = 0;
      for (size_t i = 0; i < n && !sending; i++) bad += buf[i] != pattern(dir, (int)k, i);
      EXPECT(bad == 0, "%zu of %zu bytes wrong from rank %d", bad, n, dir);
      free(buf);
    }
  }
  printf("PASS rank %d: one way and back, 0 B to 5 MiB + 3\n", g_rank);
}

static void both_ways(void *ctx, void *conn) {
  enum { N = 64 };
  uint8_t *sbuf[N], *rbuf[N];
  void *reqs[2 * N];
  hc_result_t r = HC_OK;
  for (int k = 0; k < N; k++) {
    size_t n = mixed_size(k);
    sbuf[k] = malloc(n + 1);
    rbuf[k] = malloc(n + 1);
    for (size_t i = 0; i < n; i++) sbuf[k][i] = pattern(g_rank, k, i);
    memset(rbuf[k], 0xa5, n);
  }
  for (int k = 0; k < N && r == HC_OK; k++) {
    r = hc_net_ib.irecv(conn, rbuf[k], mixed_size(k), &reqs[2 * k]);
    if (r == HC_OK) r = hc_net_ib.isend(conn, sbuf[k], mixed_size(k), &reqs[2 * k + 1]);
  }
  if (r == HC_OK) r = wait_all(ctx, reqs, 2 * N);
  EXPECT(r == HC_OK, "64 messages each way in flight at once");
  size_t bad = 0;
  for (int k = 0; k < N; k++) {
    for (size_t i = 0; i < mixed_size(k) && r == HC_OK; i++) bad += rbuf[k][i] != pattern(1 - g_rank, k, i);
    free(sbuf[k]);
    free(rbuf[k]);
  }
  EXPECT(bad == 0, "%zu bytes wrong", bad);
  if (r == HC_OK && bad == 0) printf("PASS rank %d: 64 messages of mixed sizes both ways at once\n", g_rank);
}

/* Rank 0 sends sent bytes, rank 1 receives posted: both must fail with
 * HC_ERR_USAGE and "mismatched counts". */
/* Rank 0 sends sent bytes with signature {sent, 1}, rank 1 receives posted
 * bytes with {posted, sig1}; expect is the text both must report. */
static void mismatch(void *ctx, void *conn, size_t sent, size_t posted, uint64_t sig1, const char *expect) {
  size_t n = g_rank == 0 ? sent : posted;
  uint8_t *buf = calloc(1, n);
  void *req = NULL;
  const struct hc_net_sig sig = {{n, g_rank == 0 ? 1 : sig1}};
  hc_result_t r = g_rank == 0 ? hc_net_ib.isend_sig(conn, buf, n, &sig, &req)
                              : hc_net_ib.irecv_sig(conn, buf, n, &sig, &req);
  if (r == HC_OK) r = wait_all(ctx, &req, 1);
  /* The sender of an eager message completes before the receiver looks:
   * it learns of the mismatch on its next request. */
  if (r == HC_OK && g_rank == 0) {
    uint8_t b;
    r = hc_net_ib.irecv(conn, &b, 1, &req);
    if (r == HC_OK) r = wait_all(ctx, &req, 1);
  }
  EXPECT(r == HC_ERR_USAGE && strstr(hc_last_error(), expect) != NULL,
         "a message of %zu bytes against a receive of %zu: result %d, expected \"%s\"", sent, posted, (int)r,
         expect);
  if (r == HC_ERR_USAGE) printf("PASS rank %d: %s\n", g_rank, hc_last_error());
  free(buf);
}

static void *open_and_connect(const char *dir, int round, void **conn) {
  struct hc_net_args a = {.rank = g_rank, .nranks = 2};
  memset(a.secret, 0x5a, sizeof(a.secret));
  struct hc_net_handle mine, theirs;
  void *ctx = NULL;
  *conn = NULL;
  hc_result_t r = hc_net_ib.open(&a, NULL, &mine, &ctx);
  EXPECT(r == HC_OK, "ib open");
  if (r != HC_OK) return NULL;
  EXPECT(swap_handles(dir, round, &mine, &theirs), "handles through %s", dir);
  r = connect_blocking(ctx, &theirs, conn);
  EXPECT(r == HC_OK, "connect round %d", round);
  if (r != HC_OK) {
    hc_net_ib.close(ctx);
    return NULL;
  }
  return ctx;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_ib_pair RANK SHARED_DIR\n");
    return 2;
  }
  g_rank = atoi(argv[1]) != 0;
  if (hc_params_load() != HC_OK) return 1;
  bool usable = false;
  char what[256];
  hc_net_ib_probe(&usable, what, sizeof(what));
  if (!usable) {
    printf("skip: no usable RDMA port (%s)\n", what);
    return 77;
  }
  void *conn;
  void *ctx = open_and_connect(argv[2], 0, &conn);
  if (ctx) {
    one_way(ctx, conn);
    both_ways(ctx, conn);
    mismatch(ctx, conn, 1000, 2000, 1, "mismatched counts"); /* eager path */
    hc_net_ib.close(ctx);
  }
  ctx = open_and_connect(argv[2], 1, &conn);
  if (ctx) {
    mismatch(ctx, conn, 1 << 20, (1 << 20) + 4096, 1, "mismatched counts"); /* large path: the cts says another size */
    hc_net_ib.close(ctx);
  }
  /* Signatures, without an explain function: the raw words. */
  ctx = open_and_connect(argv[2], 2, &conn);
  if (ctx) {
    mismatch(ctx, conn, 1000, 1000, 2,
             g_rank == 0 ? "rank 0 called 00000000000003e8:0000000000000001, "
                           "rank 1 called 00000000000003e8:0000000000000002"
                         : "rank 1 called 00000000000003e8:0000000000000002, "
                           "rank 0 called 00000000000003e8:0000000000000001");
    hc_net_ib.close(ctx);
  }
  ctx = open_and_connect(argv[2], 3, &conn);
  if (ctx) {
    mismatch(ctx, conn, 1 << 20, 1 << 20, 2,
             g_rank == 0 ? "rank 0 called 0000000000100000:0000000000000001, "
                           "rank 1 called 0000000000100000:0000000000000002"
                         : "rank 1 called 0000000000100000:0000000000000002, "
                           "rank 0 called 0000000000100000:0000000000000001");
    hc_net_ib.close(ctx);
  }
  printf("%s rank %d\n", failures ? "test_ib_pair: FAILED" : "test_ib_pair: ok", g_rank);
  return failures ? 1 : 0;
}
