/*
 * net/socket: the TCP transport, data half. Owns the request FIFOs of a
 * connection, the framing (header, stripes; see socket_priv.h) and the
 * nonblocking send/recv loop that test() drives. Never sleeps: every
 * syscall here is MSG_DONTWAIT and stops at EAGAIN.
 */
#include <stdlib.h>
#include <sys/uio.h>

#include "socket_priv.h"
#include "socket_wire.h"

/* One syscall moves at most this much: far above any socket buffer, and far
 * below what would overflow ssize_t. */
#define HC_SOCK_MAX_IO ((size_t)1 << 30)

/* A payload on one stream is one stripe, however large: splitting it would
 * only add syscalls. */
static size_t stripe_bytes(const struct hc_sock_ctx *ctx, size_t n) {
  return ctx->nstreams == 1 ? HC_MAX(n, (size_t)1) : ctx->chunk;
}

/* Bytes of the cursor's current stripe still to move in an n-byte payload,
 * starting at *pos; 0 when this stream carries no more of it. */
static size_t cursor_piece(const struct hc_sock_ctx *ctx, const struct hc_sock_cursor *cur, size_t n, size_t *pos) {
  size_t sb = stripe_bytes(ctx, n);
  /* Compare before multiplying: stripe * sb may not fit when it is past n. */
  if (cur->stripe > n / sb || cur->stripe * sb >= n) return 0;
  *pos = cur->stripe * sb + cur->off;
  return HC_MIN(HC_MIN(sb - cur->off, n - *pos), HC_SOCK_MAX_IO);
}

/* k payload bytes moved; k never crosses the end of the current stripe. */
static void cursor_advance(const struct hc_sock_ctx *ctx, struct hc_sock_cursor *cur, size_t n, size_t k) {
  if (k == 0) return;
  size_t sb = stripe_bytes(ctx, n);
  cur->off += k;
  if (cur->off == sb || cur->stripe * sb + cur->off == n) {
    cur->stripe += (size_t)ctx->nstreams;
    cur->off = 0;
  }
}

/* This stream has moved all of its share of cur->req: on to the next one. */
static void cursor_finish(struct hc_sock_conn *c, const struct hc_sock_stream *st, struct hc_sock_cursor *cur) {
  struct hc_sock_req *q = cur->req;
  if (++q->streams_done == c->ctx->nstreams) {
    q->complete = true;
    c->n_complete++;
  }
  cur->req = q->next;
  cur->stripe = (size_t)st->index;
  cur->off = 0;
}

void hc_net_socket_hdr_put(uint8_t *buf, const struct hc_sock_hdr *h) {
  const uint64_t words[5] = {h->len, h->sig.w[0], h->sig.w[1], h->want.w[0], h->want.w[1]};
  for (int i = 0; i < 5; i++) hc_sock_put_le64(buf + 8 * i, words[i]);
}

bool hc_net_socket_hdr_parse(const uint8_t *buf, size_t n, struct hc_sock_hdr *out) {
  *out = (struct hc_sock_hdr){0};
  if (n != HC_SOCK_HDR_BYTES) return false;
  *out = (struct hc_sock_hdr){.len = hc_sock_get_le64(buf),
                              .sig = {{hc_sock_get_le64(buf + 8), hc_sock_get_le64(buf + 16)}},
                              .want = {{hc_sock_get_le64(buf + 24), hc_sock_get_le64(buf + 32)}}};
  return true;
}

enum hc_sock_hdr_kind hc_net_socket_hdr_classify(const struct hc_sock_hdr *h, size_t posted,
                                                 const struct hc_net_sig *sig) {
  if (h->len == HC_SOCK_PROBE) return HC_SOCK_HDR_PROBE;
  if (h->len == HC_SOCK_NOTICE) return HC_SOCK_HDR_NOTICE;
  if (h->len >> HC_SOCK_FAILURE_SHIFT == HC_SOCK_FAILURE_TAG) return HC_SOCK_HDR_FAILURE;
  if (!hc_net_sig_equal(&h->sig, sig)) return HC_SOCK_HDR_OTHER_CALL;
  return h->len == (uint64_t)posted ? HC_SOCK_HDR_EXPECTED : HC_SOCK_HDR_OTHER_SIZE;
}

hc_result_t hc_net_socket_hdr_explain(struct hc_sock_conn *c, enum hc_sock_hdr_kind kind, const struct hc_sock_hdr *h,
                                      const struct hc_sock_req *mine) {
  const struct hc_sock_ctx *ctx = c->ctx;
  switch (kind) {
  case HC_SOCK_HDR_NOTICE: /* what this rank sent met another call there */
    return hc_net_sig_fail(ctx->sig_explain, ctx->rank, &h->sig, c->peer, &h->want, true);
  case HC_SOCK_HDR_FAILURE: c->noticed = hc_sock_hdr_blamed(h); return HC_OK;
  case HC_SOCK_HDR_OTHER_CALL:
    if (mine == NULL) return HC_OK;
    return hc_net_sig_fail(ctx->sig_explain, ctx->rank, &mine->sig, c->peer, &h->sig, false);
  default: return HC_OK;
  }
}

/* A receive met a message of another call: tell the sender what was
 * expected (a notice on stream 0, if it is between messages there and the
 * socket takes it now: best effort, the connection fails right after),
 * then fail. */
void hc_net_socket_mismatch_notice(struct hc_sock_conn *c, const struct hc_net_sig *got,
                                   const struct hc_net_sig *want) {
  const struct hc_sock_stream *st = &c->streams[0];
  const struct hc_sock_req *out = st->send.req;
  if (st->fd >= 0 && (out == NULL || (out->hdr_off == 0 && st->send.off == 0 && st->send.stripe == 0))) {
    uint8_t notice[HC_SOCK_HDR_BYTES];
    hc_net_socket_hdr_put(notice, &(struct hc_sock_hdr){.len = HC_SOCK_NOTICE, .sig = *got, .want = *want});
    ssize_t k;
    do k = send(st->fd, notice, sizeof(notice), MSG_NOSIGNAL | MSG_DONTWAIT);
    while (k < 0 && errno == EINTR);
  }
}

/* A stall probe came where a message header was due (stream 0, read into
 * q->hdr): keep it, and hand the bytes read after it (body of them, at
 * q->buf + pos, where the first stripe goes) back to where they belong:
 * the next header, then the stripe. Returns the stripe bytes left. */
static size_t probe_take(struct hc_sock_conn *c, struct hc_sock_req *q, size_t pos, size_t body,
                         const struct hc_sock_hdr *h) {
  c->peer_probe = h->sig;
  c->peer_probes++;
  HC_TRACE(HC_NET, "socket: rank %d: stall probe %llu from rank %d, %zu bytes after it", c->ctx->rank,
           (unsigned long long)c->peer_probes, c->peer, body);
  const size_t next = HC_MIN(body, (size_t)HC_SOCK_HDR_BYTES);
  if (next > 0) memcpy(q->hdr, q->buf + pos, next);
  if (body > next) memmove(q->buf + pos, q->buf + pos + next, body - next);
  q->hdr_off = next;
  return body - next;
}

/* A receive's header was neither its message nor a probe: the failure it
 * explains, or what failed here. */
static hc_result_t hdr_fail(struct hc_sock_conn *c, enum hc_sock_hdr_kind kind, const struct hc_sock_hdr *h,
                            const struct hc_sock_req *q) {
  if (kind == HC_SOCK_HDR_OTHER_CALL) hc_net_socket_mismatch_notice(c, &h->sig, &q->sig);
  hc_result_t r = hc_net_socket_hdr_explain(c, kind, h, q);
  if (r != HC_OK) return r;
  if (kind == HC_SOCK_HDR_FAILURE)
    return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d failed and closed the connection (rank %d's receive)", c->peer,
                   c->ctx->rank);
  return HC_FAIL(HC_ERR_USAGE, "socket: mismatched counts: expected %zu bytes from rank %d, got %llu", q->n, c->peer,
                 (unsigned long long)h->len);
}

static hc_result_t io_fail(const struct hc_sock_conn *c, const struct hc_sock_stream *st, bool sending, int e) {
  const char *op = sending ? "send" : "receive";
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN)
    return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d closed the connection (rank %d's %s on stream %d: %s)", c->peer,
                   c->ctx->rank, op, st->index, strerror(e));
  if (e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH)
    return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d is unreachable (rank %d's %s on stream %d: %s)", c->peer,
                   c->ctx->rank, op, st->index, strerror(e));
  return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d's %s with rank %d on stream %d: %s", c->ctx->rank, op, c->peer,
                 st->index, strerror(e));
}

/* Moves bytes of one direction of one stream until the socket would block
 * or the stream has caught up with what is posted. A short transfer means
 * the socket buffer is full (send) or empty (receive): stop there rather
 * than pay for a syscall that returns EAGAIN. */
static hc_result_t stream_progress(struct hc_sock_conn *c, struct hc_sock_stream *st, bool sending) {
  const struct hc_sock_ctx *ctx = c->ctx;
  struct hc_sock_cursor *cur = sending ? &st->send : &st->recv;
  for (;;) {
    struct hc_sock_req *q = cur->req;
    if (q == NULL) return HC_OK;
    if (!sending && st->index != 0 && !q->len_known) return HC_OK;
    struct iovec iov[2];
    int niov = 0;
    size_t hdr_left = st->index == 0 ? HC_SOCK_HDR_BYTES - q->hdr_off : 0, pos = 0;
    if (hdr_left > 0) iov[niov++] = (struct iovec){.iov_base = q->hdr + q->hdr_off, .iov_len = hdr_left};
    /* A receive reads the header and the first stripe in one call, the
     * stripe laid out by the posted size: if the header then disagrees, the
     * request fails, and the bytes read stayed inside the posted buffer. */
    size_t piece = cursor_piece(ctx, cur, q->n, &pos);
    if (piece > 0) iov[niov++] = (struct iovec){.iov_base = q->buf + pos, .iov_len = piece};
    if (niov == 0) {
      cursor_finish(c, st, cur);
      continue;
    }
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t k = sending ? sendmsg(st->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(st->fd, &m, MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return HC_OK;
      return io_fail(c, st, sending, errno);
    }
    if (k == 0 && !sending)
      return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d closed the connection (rank %d's receive on stream %d: EOF)",
                     c->peer, ctx->rank, st->index);
    size_t h = HC_MIN((size_t)k, hdr_left), body = (size_t)k - h;
    q->hdr_off += h;
    while (!sending && h > 0 && q->hdr_off == HC_SOCK_HDR_BYTES && !q->len_known) {
      struct hc_sock_hdr hdr;
      hc_net_socket_hdr_parse(q->hdr, sizeof(q->hdr), &hdr);
      const enum hc_sock_hdr_kind kind = hc_net_socket_hdr_classify(&hdr, q->n, &q->sig);
      if (kind == HC_SOCK_HDR_PROBE) {
        body = probe_take(c, q, pos, body, &hdr);
        continue;
      }
      if (kind != HC_SOCK_HDR_EXPECTED) return hdr_fail(c, kind, &hdr, q);
      q->len_known = true;
    }
    cursor_advance(ctx, cur, q->n, body);
    if ((size_t)k < hdr_left + piece) return HC_OK;
  }
}

/* Sends first: the bytes we push are what the peer's receives wait for. */
static hc_result_t conn_progress(struct hc_sock_conn *c) {
  for (int s = 0; s < c->ctx->nstreams; s++) HC_TRY(stream_progress(c, &c->streams[s], true));
  /* Stream 0 first: the others wait for the header it reads. */
  for (int s = 0; s < c->ctx->nstreams; s++) HC_TRY(stream_progress(c, &c->streams[s], false));
  return HC_OK;
}

static hc_result_t post(struct hc_sock_conn *c, void *buf, size_t n, const struct hc_net_sig *sig, bool is_send,
                        void **out) {
  const char *what = is_send ? "isend" : "irecv";
  *out = NULL;
  if (c == NULL) return HC_FAIL(HC_ERR_ARG, "socket: %s on a NULL connection", what);
  HC_TRY(hc_net_socket_conn_check(c));
  if (buf == NULL && n > 0)
    return HC_FAIL(HC_ERR_ARG, "socket: %s of %zu bytes %s rank %d with a NULL buffer", what, n,
                   is_send ? "to" : "from", c->peer);
  struct hc_sock_req *q;
  HC_TRY(hc_calloc(&q, 1, sizeof(*q), "a socket request"));
  q->conn = c;
  q->buf = buf;
  q->n = n;
  if (sig != NULL) q->sig = *sig;
  q->is_send = is_send;
  if (is_send) hc_net_socket_hdr_put(q->hdr, &(struct hc_sock_hdr){.len = n, .sig = q->sig});
  struct hc_sock_queue *fifo = is_send ? &c->sendq : &c->recvq;
  q->prev = fifo->tail;
  if (fifo->tail) fifo->tail->next = q;
  else fifo->head = q;
  fifo->tail = q;
  /* Streams that had caught up start on it; the others reach it in order. */
  for (int s = 0; s < c->ctx->nstreams; s++) {
    struct hc_sock_cursor *cur = is_send ? &c->streams[s].send : &c->streams[s].recv;
    if (cur->req == NULL) *cur = (struct hc_sock_cursor){.req = q, .stripe = (size_t)s, .off = 0};
  }
  *out = q;
  return HC_OK;
}

hc_result_t hc_net_socket_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  /* The cast drops const only to share post(); a send never writes buf. */
  return post(conn, (void *)buf, n, sig, true, req);
}

hc_result_t hc_net_socket_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  return post(conn, buf, n, sig, false, req);
}

static void req_unlink(struct hc_sock_conn *c, struct hc_sock_req *q) {
  struct hc_sock_queue *fifo = q->is_send ? &c->sendq : &c->recvq;
  if (q->prev) q->prev->next = q->next;
  else fifo->head = q->next;
  if (q->next) q->next->prev = q->prev;
  else fifo->tail = q->prev;
}

hc_result_t hc_net_socket_test(void *req, int *done) {
  struct hc_sock_req *q = req;
  *done = 0;
  if (q == NULL) return HC_FAIL(HC_ERR_ARG, "socket: test of a NULL request");
  struct hc_sock_conn *c = q->conn;
  /* A request completed by an earlier test() of another one is reported
   * done even if the conn failed since: its bytes did arrive. */
  if (!q->complete) {
    HC_TRY(hc_net_socket_conn_check(c));
    hc_result_t r = conn_progress(c);
    if (r != HC_OK) return hc_net_socket_conn_fail(c, r);
    if (!q->complete) return HC_OK;
  }
  req_unlink(c, q);
  c->n_complete--;
  free(q);
  *done = 1;
  return HC_OK;
}

short hc_net_socket_stream_events(const struct hc_sock_conn *c, int s) {
  const struct hc_sock_stream *st = &c->streams[s];
  short ev = 0;
  if (st->send.req != NULL) ev |= POLLOUT;
  /* Not POLLIN while waiting for stream 0's header: the bytes are there but
   * cannot be placed yet, and poll() would return at once forever. */
  if (st->recv.req != NULL && (s == 0 || st->recv.req->len_known)) ev |= POLLIN;
  return ev;
}

void hc_net_socket_conn_free_reqs(struct hc_sock_conn *c) {
  struct hc_sock_queue *fifos[2] = {&c->sendq, &c->recvq};
  for (int i = 0; i < 2; i++) {
    struct hc_sock_req *q = fifos[i]->head;
    while (q) {
      struct hc_sock_req *next = q->next;
      free(q);
      q = next;
    }
    fifos[i]->head = fifos[i]->tail = NULL;
  }
  for (int s = 0; s < c->ctx->nstreams; s++) c->streams[s].send.req = c->streams[s].recv.req = NULL;
  c->n_complete = 0;
}
