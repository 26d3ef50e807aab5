/*
 * The socket transport's receive path (socket_progress.c) fed hostile
 * bytes: the 40-byte header (length, signature; a notice), and payload striped over up to 4
 * streams. A connection is built by hand over socketpairs; the receives
 * are posted, the peer's bytes arrive in two portions per stream, and
 * test() runs until every receive completed or the connection failed.
 *
 * Input: nstreams-1 (mod 4) | chunk-1 (mod 64) | receives-1 (mod 4) |
 * a u16 length per receive (mod 1024) | per stream but the last: a u16
 * byte count, a u8 split, the bytes | the last stream: a u8 split, the
 * rest.
 *
 * Checked: a receive completes only with the bytes a model of the framing
 * (header on stream 0, stripe i on stream i % nstreams) expects, receives
 * complete in order, nothing is written outside a posted buffer (ASan),
 * and once every stream is at EOF each test() call makes progress: the
 * connection never stalls.
 */
#include "fuzz_common.h"
#include "net/socket_wire.h"

#define MAX_STREAMS 4
#define MAX_RECVS 4

struct model {
  int nstreams;
  size_t chunk;
  const uint8_t *data[MAX_STREAMS];
  size_t len[MAX_STREAMS];
};

/* The payload of each receive, as the framing lays it out, while the
 * streams hold enough bytes and the headers agree. */
static void model_expect(const struct model *m, const size_t *n, int nrecv, uint8_t **want, bool *complete) {
  size_t off[MAX_STREAMS] = {0};
  bool ok = true;
  for (int r = 0; r < nrecv; r++) {
    complete[r] = false;
    /* The receives carry the zero signature: a header must too (its
     * second signature, want, is a notice's only). */
    static const uint8_t zero_sig[16];
    /* Stall probes (a header of length HC_SOCK_PROBE, no payload) may
     * come before any message header; the receiver reads and skips them. */
    while (ok && m->len[0] - off[0] >= HC_SOCK_HDR_BYTES && hc_sock_get_le64(m->data[0] + off[0]) == HC_SOCK_PROBE)
      off[0] += HC_SOCK_HDR_BYTES;
    if (!ok || m->len[0] - off[0] < HC_SOCK_HDR_BYTES || hc_sock_get_le64(m->data[0] + off[0]) != n[r] ||
        memcmp(m->data[0] + off[0] + 8, zero_sig, sizeof(zero_sig))) {
      ok = false;
      continue;
    }
    off[0] += HC_SOCK_HDR_BYTES;
    size_t sb = m->nstreams == 1 ? HC_MAX(n[r], (size_t)1) : m->chunk;
    for (size_t i = 0; ok && i * sb < n[r]; i++) {
      int s = (int)(i % (size_t)m->nstreams);
      size_t k = HC_MIN(sb, n[r] - i * sb);
      if (m->len[s] - off[s] < k) ok = false;
      else memcpy(want[r] + i * sb, m->data[s] + off[s], k), off[s] += k;
    }
    complete[r] = ok;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fuzz_in in = {data, size};
  struct model m = {0};
  m.nstreams = 1 + (int)(fuzz_take(&in, 1) % MAX_STREAMS);
  m.chunk = 1 + fuzz_take(&in, 1) % 64;
  int nrecv = 1 + (int)(fuzz_take(&in, 1) % MAX_RECVS);
  size_t n[MAX_RECVS];
  for (int r = 0; r < nrecv; r++) n[r] = fuzz_take(&in, 2) % 1024;
  size_t split[MAX_STREAMS];
  for (int s = 0; s < m.nstreams; s++) {
    size_t k = s < m.nstreams - 1 ? fuzz_take(&in, 2) : in.n;
    split[s] = fuzz_take(&in, 1);
    k = HC_MIN(k, in.n);
    m.data[s] = in.p, m.len[s] = k;
    split[s] = HC_MIN(split[s], k);
    in.p += k, in.n -= k;
  }

  uint8_t *want[MAX_RECVS], *buf[MAX_RECVS];
  bool expect[MAX_RECVS], done[MAX_RECVS] = {false};
  for (int r = 0; r < nrecv; r++) {
    want[r] = calloc(1, HC_MAX(n[r], (size_t)1));
    buf[r] = malloc(HC_MAX(n[r], (size_t)1)); /* exactly n: ASan sees any byte past it */
    FUZZ_CHECK(want[r] && buf[r]);
    memset(buf[r], 0xa5, n[r]);
  }
  model_expect(&m, n, nrecv, want, expect);

  struct hc_sock_ctx ctx = {.rank = 1, .nranks = 2, .nstreams = m.nstreams, .chunk = m.chunk, .listen_fd = -1};
  struct hc_sock_conn *c = calloc(1, sizeof(*c) + (size_t)m.nstreams * sizeof(c->streams[0]));
  FUZZ_CHECK(c != NULL);
  c->ctx = &ctx;
  c->peer = 0;
  c->n_up = m.nstreams;
  int far[MAX_STREAMS];
  for (int s = 0; s < m.nstreams; s++) {
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    c->streams[s] = (struct hc_sock_stream){.fd = sv[0], .index = s, .state = HC_SOCK_UP};
    far[s] = sv[1];
  }
  void *req[MAX_RECVS];
  for (int r = 0; r < nrecv; r++) FUZZ_CHECK(hc_net_socket_irecv(c, buf[r], n[r], NULL, &req[r]) == HC_OK);

  /* First portion: test() may complete some receives, or fail already. */
  for (int s = 0; s < m.nstreams; s++) fuzz_write_all(far[s], m.data[s], split[s]);
  hc_result_t failed = HC_OK;
  for (int r = 0; r < nrecv && failed == HC_OK; r++) {
    int d = 0;
    failed = hc_net_socket_test(req[r], &d);
    if (failed == HC_OK && d) done[r] = true;
    if (!d) break;
  }
  /* The rest, then EOF: every receive now ends, done or failed. (A failed
   * connection has shut its ends down: nothing more to send it.) */
  for (int s = 0; s < m.nstreams && failed == HC_OK; s++) {
    fuzz_write_all(far[s], m.data[s] + split[s], m.len[s] - split[s]);
    shutdown(far[s], SHUT_WR);
  }
  size_t budget = size + 16 * MAX_RECVS;
  for (int r = 0; r < nrecv && failed == HC_OK; r++) {
    while (!done[r]) {
      int d = 0;
      FUZZ_CHECK(budget-- > 0); /* a test() that neither moves a byte nor fails: a stall */
      failed = hc_net_socket_test(req[r], &d);
      if (failed != HC_OK) break;
      done[r] = d != 0;
    }
  }
  for (int r = 0; r < nrecv; r++) {
    if (done[r]) {
      FUZZ_CHECK(expect[r]);
      FUZZ_CHECK(memcmp(buf[r], want[r], n[r]) == 0);
      if (r > 0) FUZZ_CHECK(done[r - 1]);
    }
  }
  bool all_expected = true;
  for (int r = 0; r < nrecv; r++) all_expected = all_expected && expect[r];
  /* Bytes that hold every posted message in full are all delivered, even
   * with more after them. */
  if (all_expected) FUZZ_CHECK(failed == HC_OK);
  if (failed != HC_OK) {
    FUZZ_CHECK(failed == HC_ERR_REMOTE || failed == HC_ERR_USAGE);
    FUZZ_CHECK(hc_net_socket_conn_check(c) == failed);
  } else {
    for (int r = 0; r < nrecv; r++) FUZZ_CHECK(done[r]);
  }

  hc_net_socket_conn_free_reqs(c);
  for (int s = 0; s < m.nstreams; s++) close(c->streams[s].fd), close(far[s]);
  free(c);
  for (int r = 0; r < nrecv; r++) free(want[r]), free(buf[r]);
  return 0;
}
