/*
 * net/socket: the TCP transport, setup half. Owns the listening socket of a
 * ctx, the HETCCL_SOCKET_NSTREAMS connections to each peer and how they come
 * up; framing and progress live in socket_progress.c (terms defined in
 * socket_priv.h). Knows bytes, never collectives.
 *
 * Who connects: the lower rank of a pair connects, the higher one accepts,
 * so a pair has exactly one set of streams and needs no tie-break. Every
 * connection proves membership (util/auth.h) before anything else is read
 * from it, then both ends swap a hello {magic, rank, stream, nstreams,
 * chunk} so that a peer configured differently is an HC_ERR_USAGE naming
 * both settings instead of silently misplaced stripes.
 *
 * Setup never waits for the peer: each stream (and each accepted
 * connection) is a small state machine that connect() and wait_blocking()
 * move as far as the bytes at hand allow, with an out-buffer for the
 * records this side owes and an in-buffer that gathers the one record it
 * awaits (struct hc_sock_hs). Connecting side: nonblocking connect ->
 * read the "go" byte -> send the auth hello -> read the reply (48 B) and
 * verify it -> send the proof and the conn hello -> read the peer's conn
 * hello -> up. Accepting side: accept, send "go" -> read the auth hello ->
 * send the reply -> read the proof and verify it -> read the conn hello ->
 * send this side's -> up. So one thread can bring up the connections of
 * several communicators in any order without a wait cycle between ranks:
 * a rank that reaches connect() late delays its peers by that much,
 * bounded by HETCCL_TIMEOUT (from the first connect() for that peer), and
 * never fails them. An accepted connection that has not finished its setup
 * within HETCCL_TIMEOUT of its accept, or that fails to prove membership,
 * is dropped with a WARN; the job goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "socket_priv.h"
#include "socket_wire.h"

/* The accepting side's first byte: "this rank is serving its listener". */
#define HC_SOCK_GO 0x47
/* wait_blocking() sleeps in slices this long so that abort is seen. */
#define HC_SOCK_SLICE_MS 100

/* ---- small helpers ---- */

static bool aborted(const struct hc_sock_ctx *ctx) {
  return ctx->abort_flag != NULL && atomic_load_explicit(ctx->abort_flag, memory_order_acquire);
}

static void hello_encode(const struct hc_sock_hello *h, uint8_t out[HC_SOCK_HELLO_BYTES]) {
  hc_sock_put_le32(out, h->magic);
  hc_sock_put_le32(out + 4, h->rank);
  hc_sock_put_le32(out + 8, h->stream);
  hc_sock_put_le32(out + 12, h->nstreams);
  hc_sock_put_le64(out + 16, h->chunk);
}

bool hc_net_socket_hello_parse(const uint8_t *buf, size_t n, struct hc_sock_hello *h) {
  memset(h, 0, sizeof(*h));
  if (n != HC_SOCK_HELLO_BYTES) return false;
  h->magic = hc_sock_get_le32(buf);
  h->rank = hc_sock_get_le32(buf + 4);
  h->stream = hc_sock_get_le32(buf + 8);
  h->nstreams = hc_sock_get_le32(buf + 12);
  h->chunk = hc_sock_get_le64(buf + 16);
  return h->magic == HC_SOCK_MAGIC && h->nstreams != 0 && h->nstreams <= HC_SOCK_MAX_STREAMS && h->stream < h->nstreams;
}

static bool hello_config_matches(const struct hc_sock_ctx *ctx, const struct hc_sock_hello *h) {
  return h->nstreams == (uint32_t)ctx->nstreams && h->chunk == (uint64_t)ctx->chunk;
}

static hc_result_t hello_config_fail(const struct hc_sock_ctx *ctx, const struct hc_sock_hello *h) {
  return HC_FAIL(HC_ERR_USAGE,
                 "socket: rank %u has HETCCL_SOCKET_NSTREAMS=%u HETCCL_SOCKET_CHUNK=%llu, rank %d has %d and "
                 "%zu: set them alike on every rank",
                 h->rank, h->nstreams, (unsigned long long)h->chunk, ctx->rank, ctx->nstreams, ctx->chunk);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static hc_result_t pfds_reserve(struct hc_sock_ctx *ctx, int n) {
  if (n <= ctx->cap_pfds) return HC_OK;
  int cap = HC_MAX(n, 2 * ctx->cap_pfds);
  struct pollfd *p = realloc(ctx->pfds, (size_t)cap * sizeof(*p));
  if (p == NULL) return HC_FAIL(HC_ERR_SYSTEM, "socket: out of host memory for %d poll entries", cap);
  ctx->pfds = p;
  ctx->cap_pfds = cap;
  return HC_OK;
}

static hc_result_t hs_new(const struct hc_sock_ctx *ctx, struct hc_sock_hs **out) {
  *out = calloc(1, sizeof(**out));
  if (*out == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: out of host memory for a connection setup", ctx->rank);
  return HC_OK;
}

static void hs_free(struct hc_sock_hs **hs) {
  if (*hs == NULL) return;
  memset(*hs, 0, sizeof(**hs)); /* the secret's copy */
  free(*hs);
  *hs = NULL;
}

/* ---- connection state ---- */

void hc_net_socket_notice(void *vctx, int culprit) {
  struct hc_sock_ctx *ctx = vctx;
  uint8_t hdr[HC_SOCK_HDR_BYTES];
  hc_net_socket_hdr_put(hdr,
                        &(struct hc_sock_hdr){.len = HC_SOCK_FAILURE_TAG << HC_SOCK_FAILURE_SHIFT | (uint32_t)culprit});
  for (int p = 0; ctx && ctx->conns && p < ctx->nranks; p++) {
    struct hc_sock_conn *c = ctx->conns[p];
    /* Only between messages: inside one the peer would read it as data. */
    if (c == NULL || c->failed != HC_OK || c->streams[0].state != HC_SOCK_UP || c->streams[0].send.req != NULL)
      continue;
    ssize_t k = send(c->streams[0].fd, hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)k; /* best effort: the close that follows says the rest */
  }
}

/* A connection that failed from the peer's side may still hold, unread on
 * stream 0, why: a notice that the peer failed because of another rank, its
 * reply that what this rank sent met another call there, or the header of a
 * message of another call than this rank's (the peer went on, found this
 * rank's message mismatched and closed first). Peek at
 * the headers waiting there (probes skipped), at a message boundary only, and
 * return the failure they explain, or r. */
static hc_result_t explain_from_pending(struct hc_sock_conn *c, hc_result_t r) {
  const struct hc_sock_stream *st0 = &c->streams[0];
  const struct hc_sock_req *q = st0->recv.req;
  if (r != HC_ERR_REMOTE || c->noticed >= 0 || st0->fd < 0 || (q != NULL && q->hdr_off != 0)) return r;
  uint8_t pending[4 * HC_SOCK_HDR_BYTES];
  ssize_t k = recv(st0->fd, pending, sizeof(pending), MSG_PEEK | MSG_DONTWAIT);
  /* Which call of this rank it met: the posted receive, or else the
   * message being sent (the failed send may come before the receive). */
  const struct hc_sock_req *mine = q != NULL ? q : st0->send.req;
  const struct hc_net_sig none = {{0, 0}};
  for (size_t at = 0; k > 0 && at + HC_SOCK_HDR_BYTES <= (size_t)k; at += HC_SOCK_HDR_BYTES) {
    struct hc_sock_hdr h;
    hc_net_socket_hdr_parse(pending + at, HC_SOCK_HDR_BYTES, &h);
    const enum hc_sock_hdr_kind kind = hc_net_socket_hdr_classify(&h, mine ? mine->n : 0, mine ? &mine->sig : &none);
    if (kind == HC_SOCK_HDR_PROBE) continue;
    hc_result_t why = hc_net_socket_hdr_explain(c, kind, &h, mine);
    return why != HC_OK ? why : r;
  }
  return r;
}

hc_result_t hc_net_socket_conn_fail(struct hc_sock_conn *c, hc_result_t r) {
  if (c->failed != HC_OK) return r;
  c->failed = r = explain_from_pending(c, r);
  c->culprit = r != HC_ERR_REMOTE ? -1 : c->noticed >= 0 ? c->noticed : c->peer;
  if (c->culprit >= 0 && c->culprit != c->peer) {
    char text[sizeof(c->err)];
    snprintf(text, sizeof(text), "%s; rank %d failed because of rank %d", hc_last_error(), c->peer, c->culprit);
    hc_set_last_error(text);
  }
  hc_blame(c->culprit);
  snprintf(c->err, sizeof(c->err), "%s", hc_last_error());
  /* Shut down rather than close: the fds stay valid until ctx close, and the
   * peer sees EOF instead of waiting for data that will never come. */
  for (int s = 0; s < c->ctx->nstreams; s++)
    if (c->streams[s].fd >= 0) shutdown(c->streams[s].fd, SHUT_RDWR);
  return r;
}

hc_result_t hc_net_socket_conn_check(const struct hc_sock_conn *c) {
  if (c->failed == HC_OK) return HC_OK;
  hc_set_last_error(c->err);
  hc_blame(c->culprit);
  return c->failed;
}

/* The conn object for peer, made on first use by connect() or by an
 * accepted stream that arrives first. */
static hc_result_t conn_get(struct hc_sock_ctx *ctx, int peer, struct hc_sock_conn **out) {
  *out = ctx->conns[peer];
  if (*out != NULL) return HC_OK;
  struct hc_sock_conn *c = calloc(1, sizeof(*c) + (size_t)ctx->nstreams * sizeof(c->streams[0]));
  if (c == NULL) return HC_FAIL(HC_ERR_SYSTEM, "socket: out of host memory for the connection to rank %d", peer);
  c->ctx = ctx;
  c->peer = peer;
  c->noticed = -1;
  for (int s = 0; s < ctx->nstreams; s++) {
    c->streams[s].fd = -1;
    c->streams[s].index = s;
  }
  ctx->conns[peer] = c;
  *out = c;
  return HC_OK;
}

static void conn_destroy(struct hc_sock_conn *c) {
  if (c == NULL) return;
  hc_net_socket_conn_free_reqs(c);
  for (int s = 0; s < c->ctx->nstreams; s++) {
    close_fd(&c->streams[s].fd);
    hs_free(&c->streams[s].hs);
  }
  free(c);
}

/* ---- setup records, both sides ---- */

/* Every record one side queues during a setup, in total: "go", the auth
 * reply and a conn hello (accepting), or the auth hello, the proof and a
 * conn hello (connecting). The out-buffer never needs to wrap. */
_Static_assert(1 + HC_AUTH_REPLY_BYTES + HC_SOCK_HELLO_BYTES <= HC_SOCK_HS_BUF, "setup buffer too small");
_Static_assert(HC_AUTH_HELLO_BYTES + HC_AUTH_PROOF_BYTES + HC_SOCK_HELLO_BYTES <= HC_SOCK_HS_BUF,
               "setup buffer too small");

/* Queues n bytes behind what is still unsent (see the assertions above). */
static void hs_put(struct hc_sock_hs *hs, const void *p, size_t n) {
  memcpy(hs->out + hs->out_len, p, n);
  hs->out_len += n;
}

/* The next record awaited from the peer is n bytes long. */
static void hs_expect(struct hc_sock_hs *hs, size_t n) {
  hs->in_len = 0;
  hs->in_want = n;
}

static short hs_events(const struct hc_sock_hs *hs) {
  return (short)((hs->in_len < hs->in_want ? POLLIN : 0) | (hs->out_off < hs->out_len ? POLLOUT : 0));
}

/* Sends what the kernel takes of the out-buffer and reads what it holds of
 * the record awaited, never past it (the peer's data may follow). 1: that
 * record is complete; 0: not yet; -1: the connection failed, *err is the
 * errno, 0 for an orderly close. Never waits. */
static int hs_io(int fd, struct hc_sock_hs *hs, int *err) {
  while (hs->out_off < hs->out_len) {
    ssize_t w = send(fd, hs->out + hs->out_off, hs->out_len - hs->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      hs->out_off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    *err = w < 0 ? errno : EPIPE;
    return -1;
  }
  while (hs->in_len < hs->in_want) {
    ssize_t k = recv(fd, hs->in + hs->in_len, hs->in_want - hs->in_len, MSG_DONTWAIT);
    if (k > 0) {
      hs->in_len += (size_t)k;
      continue;
    }
    if (k == 0) {
      *err = 0;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *err = errno;
    return -1;
  }
  return 1;
}

/* What hs_io's failure was, for a message naming who. */
static const char *hs_io_text(const struct hc_sock_hs *hs, int err, const char *who, char *buf, size_t len) {
  if (err == 0)
    snprintf(buf, len, "receive from %s: connection closed by the peer (%zu bytes short)", who,
             hs->in_want - hs->in_len);
  else snprintf(buf, len, "%s: connection lost (%s)", who, strerror(err));
  return buf;
}

static hc_result_t hs_io_result(int err) {
  return err == 0 || err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT || err == EHOSTUNREACH ||
                 err == ENETUNREACH
             ? HC_ERR_REMOTE
             : HC_ERR_SYSTEM;
}

/* ---- accepting side ---- */

/* Removes pending entry i (swapped with the last) and closes its fd. */
static void pending_drop(struct hc_sock_ctx *ctx, int i) {
  struct hc_sock_pending *p = &ctx->pending[i];
  close_fd(&p->fd);
  hs_free(&p->hs);
  ctx->pending[i] = ctx->pending[--ctx->n_pending];
}

/* Pending entry i sent its own hello: it becomes stream h.stream of the
 * conn of the rank it proved to be. */
static hc_result_t pending_attach(struct hc_sock_ctx *ctx, int i) {
  struct hc_sock_pending p = ctx->pending[i];
  struct hc_sock_hello h;
  ctx->pending[i] = ctx->pending[--ctx->n_pending];
  (void)hc_net_socket_hello_parse(p.hs->in, HC_SOCK_HELLO_BYTES, &h); /* checked in PEND_HELLO */
  hs_free(&p.hs);
  int peer = (int)h.rank;
  struct hc_sock_conn *c;
  hc_result_t r = conn_get(ctx, peer, &c);
  if (r != HC_OK) {
    close(p.fd);
    return r;
  }
  if (c->failed != HC_OK) {
    close(p.fd);
    return HC_OK;
  }
  if (!hello_config_matches(ctx, &h)) {
    close(p.fd);
    hc_net_socket_conn_fail(c, hello_config_fail(ctx, &h));
    return HC_OK;
  }
  struct hc_sock_stream *st = &c->streams[h.stream];
  if (st->state == HC_SOCK_UP) {
    HC_WARN(HC_NET, "socket: rank %d dropped a second stream %u from rank %d", ctx->rank, h.stream, peer);
    close(p.fd);
    return HC_OK;
  }
  st->fd = p.fd;
  st->state = HC_SOCK_UP;
  c->n_up++;
  HC_TRACE(HC_NET, "socket: %d accepted stream %u of rank %d", ctx->rank, h.stream, peer);
  return HC_OK;
}

/* Moves the setup of pending entry i as far as the bytes at hand allow.
 * Anything that fails to prove membership, talks nonsense or stalls past
 * its expiry is dropped with a WARN and does not fail the ctx: a port
 * scanner must not take a job down. Only out-of-memory is an error. The
 * entry may be gone on return. */
static hc_result_t serve_step(struct hc_sock_ctx *ctx, int i, uint64_t now) {
  struct hc_sock_pending *p = &ctx->pending[i];
  struct hc_sock_hs *hs = p->hs;
  char why[320];
  for (;;) {
    int err = 0, k = hs_io(p->fd, hs, &err);
    if (k < 0) {
      hs_io_text(hs, err, p->who, why, sizeof(why));
      if (p->state == HC_SOCK_PEND_ANSWER)
        HC_WARN(HC_NET, "socket: rank %d dropped stream %u of rank %u: %s", ctx->rank, hc_sock_get_le32(hs->in + 8),
                hc_sock_get_le32(hs->in + 4), why);
      else
        HC_WARN(HC_NET, "socket: rank %d dropped an incoming connection: %s%s%s%s", ctx->rank,
                p->state == HC_SOCK_PEND_HELLO ? "" : "authentication failed: client ",
                p->state == HC_SOCK_PEND_HELLO ? "" : p->who, p->state == HC_SOCK_PEND_HELLO ? "" : ": ", why);
      pending_drop(ctx, i);
      return HC_OK;
    }
    if (k == 0 || hs->out_off < hs->out_len) {
      if (now >= p->expire_ns) {
        HC_WARN(HC_NET,
                "socket: rank %d dropped an incoming connection from %s that did not complete its handshake "
                "within HETCCL_TIMEOUT",
                ctx->rank, p->who);
        pending_drop(ctx, i);
      }
      return HC_OK;
    }
    switch (p->state) {
    case HC_SOCK_PEND_AUTH: {
      uint8_t reply[HC_AUTH_REPLY_BYTES];
      if (hc_auth_server_on_hello(&hs->auth, ctx->secret, HC_AUTH_NET_SOCKET, hs->in, reply, p->who) != HC_OK)
        goto refused;
      hs_put(hs, reply, sizeof(reply));
      hs_expect(hs, HC_AUTH_PROOF_BYTES);
      p->state = HC_SOCK_PEND_PROOF;
      break;
    }
    case HC_SOCK_PEND_PROOF:
      if (hc_auth_server_on_proof(&hs->auth, hs->in, p->who) != HC_OK) goto refused;
      hs_expect(hs, HC_SOCK_HELLO_BYTES);
      p->state = HC_SOCK_PEND_HELLO;
      break;
    case HC_SOCK_PEND_HELLO: {
      struct hc_sock_hello h;
      uint8_t buf[HC_SOCK_HELLO_BYTES];
      /* Only lower ranks connect to us (see the file comment). */
      if (!hc_net_socket_hello_parse(hs->in, HC_SOCK_HELLO_BYTES, &h) || h.rank >= (uint32_t)ctx->rank) {
        HC_WARN(HC_NET, "socket: rank %d dropped a connection that claims rank %u stream %u of %u (magic 0x%x)",
                ctx->rank, h.rank, h.stream, h.nstreams, h.magic);
        pending_drop(ctx, i);
        return HC_OK;
      }
      /* Answer even a peer configured differently, so it fails with the
       * same message instead of a bare EOF; the peer's hello stays in
       * hs->in for pending_attach. */
      struct hc_sock_hello mine = {HC_SOCK_MAGIC, (uint32_t)ctx->rank, h.stream, (uint32_t)ctx->nstreams, ctx->chunk};
      hello_encode(&mine, buf);
      hs_put(hs, buf, sizeof(buf));
      p->state = HC_SOCK_PEND_ANSWER;
      break;
    }
    case HC_SOCK_PEND_ANSWER: return pending_attach(ctx, i);
    }
  }
refused:
  snprintf(why, sizeof(why), "%s", hc_last_error());
  HC_WARN(HC_NET, "socket: rank %d dropped an incoming connection: %s", ctx->rank, why);
  pending_drop(ctx, i);
  return HC_OK;
}

/* Accepts whatever the listener holds and moves every pending setup as far
 * as the bytes at hand allow. Never waits. */
static hc_result_t accept_progress(struct hc_sock_ctx *ctx) {
  for (;;) {
    union hc_sockaddr a;
    socklen_t alen = sizeof(a);
    memset(&a, 0, sizeof(a));
    int fd = accept4(ctx->listen_fd, &a.sa, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: accept: %s", ctx->rank, strerror(errno));
    }
    if (hc_sock_tune(fd) != HC_OK) {
      close(fd); /* hc_sock_tune wrote the WARN */
      continue;
    }
    if (ctx->n_pending == ctx->cap_pending) {
      int cap = HC_MAX(8, 2 * ctx->cap_pending);
      struct hc_sock_pending *np = realloc(ctx->pending, (size_t)cap * sizeof(*np));
      if (np == NULL) {
        close(fd);
        return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: out of host memory for incoming connections", ctx->rank);
      }
      ctx->pending = np;
      ctx->cap_pending = cap;
    }
    struct hc_sock_pending *p = &ctx->pending[ctx->n_pending];
    memset(p, 0, sizeof(*p));
    hc_result_t r = hs_new(ctx, &p->hs);
    if (r != HC_OK) {
      close(fd);
      return r;
    }
    p->fd = fd;
    p->state = HC_SOCK_PEND_AUTH;
    p->expire_ns = hc_deadline_ns();
    hc_sock_str(&a, p->who, sizeof(p->who));
    uint8_t go = HC_SOCK_GO;
    hs_put(p->hs, &go, 1);
    hs_expect(p->hs, HC_AUTH_HELLO_BYTES);
    ctx->n_pending++;
  }
  uint64_t now = hc_now_ns();
  /* Backwards: serve_step may remove entry i (swapping in the last one,
   * already visited). */
  for (int i = ctx->n_pending - 1; i >= 0; i--) HC_TRY(serve_step(ctx, i, now));
  return HC_OK;
}

/* ---- connecting side ---- */

bool hc_net_socket_handle_parse(const uint8_t *buf, size_t n, struct hc_sock_handle *h) {
  memset(h, 0, sizeof(*h));
  if (n < sizeof(*h)) return false;
  memcpy(h, buf, sizeof(*h));
  int f = h->addr.sa.sa_family;
  return h->magic == HC_SOCK_MAGIC && (f == AF_INET || f == AF_INET6);
}

static hc_result_t parse_handle(const struct hc_sock_ctx *ctx, int peer, const struct hc_net_handle *handle,
                                union hc_sockaddr *addr) {
  struct hc_sock_handle h;
  if (handle == NULL) return HC_FAIL(HC_ERR_ARG, "socket: rank %d: no handle for rank %d", ctx->rank, peer);
  if (!hc_net_socket_handle_parse(handle->bytes, sizeof(handle->bytes), &h))
    return HC_FAIL(HC_ERR_ARG, "socket: the handle of rank %d is not a socket handle (magic 0x%x, family %d)", peer,
                   h.magic, h.addr.sa.sa_family);
  *addr = h.addr;
  return HC_OK;
}

static hc_result_t client_start(struct hc_sock_conn *c, struct hc_sock_stream *st) {
  char who[80];
  const union hc_sockaddr *addr = &c->addr;
  if (st->hs == NULL) HC_TRY(hs_new(c->ctx, &st->hs));
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return HC_FAIL(HC_ERR_SYSTEM, "socket: connecting to rank %d: socket(): %s", c->peer, strerror(errno));
  hc_result_t r = hc_sock_tune(fd);
  if (r != HC_OK) {
    close(fd);
    return r;
  }
  /* EINTR leaves the connect running in the kernel, like EINPROGRESS. */
  if (connect(fd, &addr->sa, hc_sock_len(addr)) != 0 && errno != EINPROGRESS && errno != EINTR) {
    int e = errno;
    close(fd);
    /* The peer listened before its handle existed: refused means it is gone. */
    return HC_FAIL(e == ECONNREFUSED ? HC_ERR_REMOTE : HC_ERR_SYSTEM, "socket: cannot connect to rank %d at %s: %s",
                   c->peer, hc_sock_str(addr, who, sizeof(who)), strerror(e));
  }
  st->fd = fd;
  st->state = HC_SOCK_CONNECTING;
  return HC_OK;
}

/* Rewrites the last error (from a util helper that names an address) so
 * that it names the peer rank and stream. */
static hc_result_t handshake_fail(struct hc_sock_conn *c, int s, hc_result_t r) {
  char why[256];
  snprintf(why, sizeof(why), "%s", hc_last_error());
  return HC_FAIL(r, "socket: handshake of rank %d with rank %d (stream %d) failed: %s", c->ctx->rank, c->peer, s, why);
}

/* Moves the setup of one connecting stream as far as the bytes at hand
 * allow. Never waits. */
static hc_result_t client_step(struct hc_sock_conn *c, struct hc_sock_stream *st) {
  struct hc_sock_ctx *ctx = c->ctx;
  struct hc_sock_hs *hs = st->hs;
  char who[80], why[256];
  hc_result_t r;
  hc_sock_str(&c->addr, who, sizeof(who));
  if (st->state == HC_SOCK_CONNECTING) {
    struct pollfd pf = {.fd = st->fd, .events = POLLOUT};
    if (poll(&pf, 1, 0) <= 0) return HC_OK; /* not yet, or EINTR: next call */
    int e = 0;
    socklen_t elen = sizeof(e);
    if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0) e = errno;
    if (e != 0)
      return HC_FAIL(e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ? HC_ERR_REMOTE
                                                                                                  : HC_ERR_SYSTEM,
                     "socket: cannot connect to rank %d at %s: %s", c->peer, who, strerror(e));
    st->state = HC_SOCK_WAIT_GO;
    hs_expect(hs, 1);
  }
  for (;;) {
    int err = 0, k = hs_io(st->fd, hs, &err);
    if (k < 0 && st->state == HC_SOCK_WAIT_GO)
      return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d at %s %s%s while rank %d was connecting", c->peer, who,
                     err != 0 ? "failed: " : "closed the connection", err != 0 ? strerror(err) : "", ctx->rank);
    if (k < 0)
      return HC_FAIL(hs_io_result(err), "socket: handshake of rank %d with rank %d (stream %d) failed: %s%s%s%s",
                     ctx->rank, c->peer, st->index, st->state == HC_SOCK_AUTH ? "authentication failed: server " : "",
                     st->state == HC_SOCK_AUTH ? who : "", st->state == HC_SOCK_AUTH ? ": " : "",
                     hs_io_text(hs, err, who, why, sizeof(why)));
    if (k == 0) return HC_OK;
    switch (st->state) {
    case HC_SOCK_WAIT_GO: {
      uint8_t hello[HC_AUTH_HELLO_BYTES];
      if (hs->in[0] != HC_SOCK_GO)
        return HC_FAIL(HC_ERR_REMOTE,
                       "socket: rank %d at %s is not a hetccl socket listener while rank %d was connecting", c->peer,
                       who, ctx->rank);
      HC_TRY(hc_auth_client_start(&hs->auth, ctx->secret, HC_AUTH_NET_SOCKET, hello));
      hs_put(hs, hello, sizeof(hello));
      hs_expect(hs, HC_AUTH_REPLY_BYTES);
      st->state = HC_SOCK_AUTH;
      break;
    }
    case HC_SOCK_AUTH: {
      uint8_t proof[HC_AUTH_PROOF_BYTES], buf[HC_SOCK_HELLO_BYTES];
      if ((r = hc_auth_client_on_reply(&hs->auth, hs->in, proof, who)) != HC_OK) return handshake_fail(c, st->index, r);
      struct hc_sock_hello h = {HC_SOCK_MAGIC, (uint32_t)ctx->rank, (uint32_t)st->index, (uint32_t)ctx->nstreams,
                                ctx->chunk};
      hello_encode(&h, buf);
      hs_put(hs, proof, sizeof(proof));
      hs_put(hs, buf, sizeof(buf));
      hs_expect(hs, HC_SOCK_HELLO_BYTES);
      st->state = HC_SOCK_HELLO;
      break;
    }
    case HC_SOCK_HELLO: {
      struct hc_sock_hello h;
      if (hs->out_off < hs->out_len) return HC_OK; /* ours first, then data may flow */
      /* The fields are checked here one by one: a listener that says
       * another nstreams is a configuration mismatch below, not a
       * stranger. */
      (void)hc_net_socket_hello_parse(hs->in, HC_SOCK_HELLO_BYTES, &h);
      if (h.magic != HC_SOCK_MAGIC || h.rank != (uint32_t)c->peer || h.stream != (uint32_t)st->index)
        return HC_FAIL(HC_ERR_REMOTE, "socket: the listener of rank %d answered as rank %u stream %u (magic 0x%x)",
                       c->peer, h.rank, h.stream, h.magic);
      if (!hello_config_matches(ctx, &h)) return hello_config_fail(ctx, &h);
      hs_free(&st->hs);
      st->state = HC_SOCK_UP;
      c->n_up++;
      return HC_OK;
    }
    default: return HC_OK;
    }
  }
}

/* Starts every stream not started yet, and moves the setup of the others. */
static hc_result_t client_progress(struct hc_sock_conn *c, const struct hc_net_handle *handle) {
  if (!c->have_addr) {
    HC_TRY(parse_handle(c->ctx, c->peer, handle, &c->addr));
    c->have_addr = true;
  }
  for (int s = 0; s < c->ctx->nstreams; s++) {
    struct hc_sock_stream *st = &c->streams[s];
    if (st->state == HC_SOCK_IDLE) HC_TRY(client_start(c, st));
    if (st->state != HC_SOCK_UP) HC_TRY(client_step(c, st));
  }
  return HC_OK;
}

/* ---- ops ---- */

static hc_result_t sock_close(void *vctx);

static hc_result_t sock_open(const struct hc_net_args *a, struct hc_net_caps *caps, struct hc_net_handle *handle,
                             void **out) {
  hc_result_t r;
  struct hc_sock_ctx *ctx = NULL;
  union hc_sockaddr local;
  *out = NULL;
  if (a == NULL || a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks)
    return HC_FAIL(HC_ERR_ARG, "socket: open with rank %d of %d", a ? a->rank : -1, a ? a->nranks : -1);
  HC_TRY(hc_params_load());
  int64_t nstreams = a->socket_nstreams > 0 ? a->socket_nstreams : hc_param_int(HC_P_SOCKET_NSTREAMS);
  int64_t chunk = hc_param_int(HC_P_SOCKET_CHUNK);
  if (nstreams < 1 || nstreams > HC_SOCK_MAX_STREAMS)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_SOCKET_NSTREAMS=%lld: must be 1 to %d", (long long)nstreams,
                   HC_SOCK_MAX_STREAMS);
  if (chunk < 1) return HC_FAIL(HC_ERR_USAGE, "HETCCL_SOCKET_CHUNK=%lld: must be at least 1", (long long)chunk);
  HC_TRY(hc_calloc(&ctx, 1, sizeof(*ctx), "the socket transport"));
  ctx->listen_fd = -1;
  ctx->rank = a->rank;
  ctx->nranks = a->nranks;
  ctx->nstreams = (int)nstreams;
  ctx->chunk = (size_t)chunk;
  memcpy(ctx->secret, a->secret, sizeof(ctx->secret));
  ctx->abort_flag = a->abort_flag;
  ctx->sig_explain = a->sig_explain;
  HC_TRY_GOTO(hc_calloc(&ctx->conns, (size_t)a->nranks, sizeof(ctx->conns[0]), "socket connections"), r, fail);
  HC_TRY_GOTO(hc_sock_local_addr(&local, ctx->ifname, sizeof(ctx->ifname)), r, fail);
  HC_TRY_GOTO(hc_sock_listen(&local, &ctx->listen_fd, &ctx->addr), r, fail);
  struct hc_sock_handle h = {.magic = HC_SOCK_MAGIC, .addr = ctx->addr};
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->bytes, &h, sizeof(h));
  if (caps) caps->device_memory = false;
  char who[80];
  HC_INFO(HC_NET, "socket: rank %d listening on %s (%s), %d streams, chunk %zu", ctx->rank,
          hc_sock_str(&ctx->addr, who, sizeof(who)), ctx->ifname, ctx->nstreams, ctx->chunk);
  *out = ctx;
  return HC_OK;
fail:
  sock_close(ctx);
  return r;
}

static hc_result_t conn_ready(struct hc_sock_conn *c, void **out) {
  if (!c->announced)
    HC_INFO(HC_NET, "socket: %d <-> %d up via %s, %d streams", c->ctx->rank, c->peer, c->ctx->ifname, c->ctx->nstreams);
  c->announced = true;
  *out = c;
  return HC_OK;
}

static hc_result_t sock_connect(void *vctx, int peer, const struct hc_net_handle *peer_handle, void **out) {
  struct hc_sock_ctx *ctx = vctx;
  struct hc_sock_conn *c;
  hc_result_t r;
  *out = NULL;
  if (peer < 0 || peer >= ctx->nranks || peer == ctx->rank)
    return HC_FAIL(HC_ERR_ARG, "socket: rank %d cannot connect to rank %d of %d", ctx->rank, peer, ctx->nranks);
  HC_TRY(conn_get(ctx, peer, &c));
  HC_TRY(hc_net_socket_conn_check(c));
  if (c->n_up == ctx->nstreams) return conn_ready(c, out);
  if (aborted(ctx))
    return hc_net_socket_conn_fail(c, HC_FAIL(HC_ERR_REMOTE, "socket: aborted while connecting to rank %d", peer));
  if (c->deadline_ns == 0) c->deadline_ns = hc_deadline_ns();
  /* Serve the listener whichever peer is wanted: a lower rank may be waiting
   * on us while our caller loops over other peers. */
  HC_TRY(accept_progress(ctx));
  HC_TRY(hc_net_socket_conn_check(c));
  if (peer > ctx->rank && (r = client_progress(c, peer_handle)) != HC_OK) return hc_net_socket_conn_fail(c, r);
  if (c->n_up == ctx->nstreams) return conn_ready(c, out);
  if (hc_now_ns() >= c->deadline_ns)
    return hc_net_socket_conn_fail(
        c, HC_FAIL(HC_ERR_REMOTE,
                   "socket: rank %d: %s rank %d did not come up within HETCCL_TIMEOUT=%lld s (%d of %d streams)",
                   ctx->rank, peer > ctx->rank ? "connection to" : "connection from", peer,
                   (long long)hc_param_int(HC_P_TIMEOUT), c->n_up, ctx->nstreams));
  return HC_OK;
}

/* Whether stream st is a connecting one in the middle of its setup. */
static bool client_setting_up(const struct hc_sock_stream *st) {
  return st->state != HC_SOCK_IDLE && st->state != HC_SOCK_UP;
}

/* Fills ctx->pfds with what could make progress; returns the count, or -1
 * when something can progress right now without waiting. The listener and
 * the pending setups come first, in pending[] order. */
static int collect_pollfds(struct hc_sock_ctx *ctx, hc_result_t *r) {
  int n = 0, cap = 1 + ctx->n_pending;
  for (int p = 0; p < ctx->nranks; p++)
    if (ctx->conns[p]) cap += ctx->nstreams;
  if ((*r = pfds_reserve(ctx, cap)) != HC_OK) return 0;
  ctx->pfds[n++] = (struct pollfd){.fd = ctx->listen_fd, .events = POLLIN};
  for (int i = 0; i < ctx->n_pending; i++) {
    short ev = hs_events(ctx->pending[i].hs);
    ctx->pfds[n++] = (struct pollfd){.fd = ctx->pending[i].fd, .events = ev ? ev : POLLIN};
  }
  for (int p = 0; p < ctx->nranks; p++) {
    struct hc_sock_conn *c = ctx->conns[p];
    if (c == NULL) continue;
    bool busy = c->sendq.head != NULL || c->recvq.head != NULL;
    /* A failed conn with requests, or a request completed by a test() of
     * another one: the caller has something to learn now. */
    if (busy && (c->failed != HC_OK || c->n_complete > 0)) return -1;
    if (c->failed != HC_OK) continue;
    for (int s = 0; s < ctx->nstreams; s++) {
      const struct hc_sock_stream *st = &c->streams[s];
      short ev = st->state == HC_SOCK_CONNECTING ? POLLOUT
                 : st->state == HC_SOCK_UP       ? hc_net_socket_stream_events(c, s)
                 : client_setting_up(st)         ? hs_events(st->hs)
                                                 : 0;
      if (ev) ctx->pfds[n++] = (struct pollfd){.fd = st->fd, .events = ev};
    }
  }
  return n;
}

/* Moves every connecting stream's setup that poll() may have woken; a
 * failure becomes its conn's sticky one, which the next connect() reports. */
static void client_progress_all(struct hc_sock_ctx *ctx) {
  for (int p = ctx->rank + 1; p < ctx->nranks; p++) {
    struct hc_sock_conn *c = ctx->conns[p];
    if (c == NULL || c->failed != HC_OK || !c->have_addr) continue;
    for (int s = 0; s < ctx->nstreams; s++) {
      if (!client_setting_up(&c->streams[s])) continue;
      hc_result_t r = client_step(c, &c->streams[s]);
      if (r != HC_OK) {
        hc_net_socket_conn_fail(c, r);
        break;
      }
    }
  }
}

static hc_result_t sock_wait_blocking(void *vctx, int timeout_ms) {
  struct hc_sock_ctx *ctx = vctx;
  uint64_t end = hc_now_ns() + (uint64_t)HC_MAX(timeout_ms, 0) * 1000000ull;
  for (;;) {
    if (aborted(ctx)) return HC_OK;
    hc_result_t r = HC_OK;
    int n = collect_pollfds(ctx, &r);
    if (r != HC_OK) return r;
    if (n < 0) return HC_OK;
    uint64_t now = hc_now_ns();
    if (now >= end) return HC_OK;
    int npend = ctx->n_pending;
    int slice = (int)HC_MIN((end - now + 999999) / 1000000, (uint64_t)HC_SOCK_SLICE_MS);
    int ready = poll(ctx->pfds, (nfds_t)n, slice);
    if (ready < 0 && errno != EINTR)
      return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: poll: %s", ctx->rank, strerror(errno));
    /* Entries 0 .. npend are the listener and the setups of incoming
     * connections: move them here, or a stray one would keep poll() ready
     * and the caller spinning. A quiet slice also serves them, to drop
     * those that expired. Connecting streams move here too, so that a
     * peer's setup never waits for this rank's next connect(). */
    bool incoming = ready == 0;
    for (int i = 0; i <= npend && ready > 0; i++) incoming = incoming || ctx->pfds[i].revents != 0;
    if (incoming) HC_TRY(accept_progress(ctx));
    if (ready > 0) {
      client_progress_all(ctx);
      return HC_OK;
    }
  }
}

static hc_result_t sock_close(void *vctx) {
  struct hc_sock_ctx *ctx = vctx;
  if (ctx == NULL) return HC_OK;
  if (ctx->conns)
    for (int p = 0; p < ctx->nranks; p++) conn_destroy(ctx->conns[p]);
  for (int i = 0; i < ctx->n_pending; i++) {
    close(ctx->pending[i].fd);
    hs_free(&ctx->pending[i].hs);
  }
  close_fd(&ctx->listen_fd);
  free(ctx->conns);
  free(ctx->pending);
  free(ctx->pfds);
  free(ctx);
  return HC_OK;
}

/* A probe goes out whole between two messages of stream 0 (the next
 * header follows it), so once its first byte is sent the rest waits for
 * room, bounded: a peer that takes nothing for a second fails the
 * connection. With no room at all it waits for the next look. */
static void sock_stall_publish(void *vconn, const struct hc_net_sig *mine) {
  struct hc_sock_conn *c = vconn;
  struct hc_sock_stream *st = &c->streams[0];
  if (c->failed != HC_OK || st->state != HC_SOCK_UP || st->send.req != NULL || hc_net_sig_equal(&c->probe_sent, mine))
    return;
  uint8_t hdr[HC_SOCK_HDR_BYTES];
  hc_net_socket_hdr_put(hdr, &(struct hc_sock_hdr){.len = HC_SOCK_PROBE, .sig = *mine});
  const uint64_t deadline = hc_now_ns() + 1000000000ull;
  for (size_t off = 0; off < sizeof(hdr);) {
    ssize_t k = send(st->fd, hdr + off, sizeof(hdr) - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && off == 0) return;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && hc_now_ns() < deadline) {
      struct pollfd pfd = {.fd = st->fd, .events = POLLOUT};
      (void)poll(&pfd, 1, 10);
      continue;
    }
    hc_net_socket_conn_fail(c, HC_FAIL(HC_ERR_REMOTE, "socket: rank %d took no stall probe from rank %d: %s", c->peer,
                                       c->ctx->rank, k < 0 ? strerror(errno) : "no room for 1 s"));
    return;
  }
  c->probe_sent = *mine;
}

static void sock_stall_peek(void *vconn, struct hc_net_sig *theirs, uint64_t *gen) {
  const struct hc_sock_conn *c = vconn;
  *theirs = c->peer_probe;
  *gen = c->peer_probes;
}

static void sock_mismatch_found(void *vconn, const struct hc_net_sig *got, const struct hc_net_sig *want) {
  hc_net_socket_mismatch_notice(vconn, got, want);
}

const struct hc_net_ops hc_net_socket = {
    .size = sizeof(struct hc_net_ops),
    .abi = HC_NET_ABI,
    .name = "socket",
    .open = sock_open,
    .connect = sock_connect,
    .isend = hc_net_socket_isend,
    .irecv = hc_net_socket_irecv,
    .test = hc_net_socket_test,
    .wait_blocking = sock_wait_blocking,
    .close = sock_close,
    .stall_publish = sock_stall_publish,
    .stall_peek = sock_stall_peek,
    .mismatch_found = sock_mismatch_found,
};
