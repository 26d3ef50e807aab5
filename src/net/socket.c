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
 * Blocking: connect() and wait_blocking() run the authentication handshake
 * (util/auth.h, blocking by design) of a stream, bounded by
 * HC_SOCK_HANDSHAKE_NS, and say _blocking in the names of what runs it. To
 * keep that wait a few round trips long, neither side starts it before the
 * other is inside it too: the accepting side sends one "go" byte when its
 * thread accepts (it is then in connect() or wait_blocking()), and the
 * connecting side starts its handshake only once that byte is there; the
 * accepting side in turn starts only once the whole client hello has
 * arrived (SO_RCVLOWAT). A rank that reaches connect() late thus delays its
 * peers by that much, bounded by HETCCL_TIMEOUT, and never fails them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "socket_priv.h"
#include "socket_wire.h"

/* A handshake is a few round trips between two live processes; much longer
 * means the peer is stuck or not hetccl, and the accepting side must get
 * back to its other peers. */
#define HC_SOCK_HANDSHAKE_NS (5ull * 1000000000ull)
/* The client's first record in auth.h's handshake: {magic u32, purpose u32,
 * nonce[16]}. An accepted fd waits (SO_RCVLOWAT) until that much is there,
 * so that a client that sends a few bytes and stalls never holds the
 * accepting rank inside a blocking handshake. */
#define HC_SOCK_AUTH_HELLO_BYTES 24
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
  return h->magic == HC_SOCK_MAGIC && h->nstreams != 0 && h->nstreams <= HC_SOCK_MAX_STREAMS &&
         h->stream < h->nstreams;
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

/* ---- connection state ---- */

hc_result_t hc_net_socket_conn_fail(struct hc_sock_conn *c, hc_result_t r) {
  if (c->failed != HC_OK) return r;
  c->failed = r;
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
  for (int s = 0; s < c->ctx->nstreams; s++) close_fd(&c->streams[s].fd);
  free(c);
}

/* ---- accepting side ---- */

/* Handshake of one accepted fd whose first bytes have arrived. Anything
 * that fails to prove membership or talks nonsense is dropped with a WARN
 * and does not fail the ctx: a port scanner must not take a job down. Only
 * out-of-memory is an error. */
static hc_result_t serve_one_blocking(struct hc_sock_ctx *ctx, int fd) {
  uint64_t deadline = hc_now_ns() + HC_SOCK_HANDSHAKE_NS;
  uint8_t buf[HC_SOCK_HELLO_BYTES];
  struct hc_sock_hello h;
  char why[256];
  if (hc_auth_server_blocking(fd, ctx->secret, HC_AUTH_NET_SOCKET, deadline, ctx->abort_flag) != HC_OK ||
      hc_sock_recv_blocking(fd, buf, sizeof(buf), deadline, ctx->abort_flag) != HC_OK) {
    snprintf(why, sizeof(why), "%s", hc_last_error());
    HC_WARN(HC_NET, "socket: rank %d dropped an incoming connection: %s", ctx->rank, why);
    close(fd);
    return HC_OK;
  }
  /* Only lower ranks connect to us (see the file comment). */
  if (!hc_net_socket_hello_parse(buf, sizeof(buf), &h) || h.rank >= (uint32_t)ctx->rank) {
    HC_WARN(HC_NET, "socket: rank %d dropped a connection that claims rank %u stream %u of %u (magic 0x%x)",
            ctx->rank, h.rank, h.stream, h.nstreams, h.magic);
    close(fd);
    return HC_OK;
  }
  int peer = (int)h.rank;
  struct hc_sock_hello mine = {HC_SOCK_MAGIC, (uint32_t)ctx->rank, h.stream, (uint32_t)ctx->nstreams, ctx->chunk};
  hello_encode(&mine, buf);
  /* Answer even a peer configured differently, so it fails with the same
   * message instead of a bare EOF. */
  if (hc_sock_send_blocking(fd, buf, sizeof(buf), deadline, ctx->abort_flag) != HC_OK) {
    snprintf(why, sizeof(why), "%s", hc_last_error());
    HC_WARN(HC_NET, "socket: rank %d dropped stream %u of rank %d: %s", ctx->rank, h.stream, peer, why);
    close(fd);
    return HC_OK;
  }
  struct hc_sock_conn *c;
  hc_result_t r = conn_get(ctx, peer, &c);
  if (r != HC_OK) {
    close(fd);
    return r;
  }
  if (c->failed != HC_OK) {
    close(fd);
    return HC_OK;
  }
  if (!hello_config_matches(ctx, &h)) {
    close(fd);
    hc_net_socket_conn_fail(c, hello_config_fail(ctx, &h));
    return HC_OK;
  }
  struct hc_sock_stream *st = &c->streams[h.stream];
  if (st->state == HC_SOCK_UP) {
    HC_WARN(HC_NET, "socket: rank %d dropped a second stream %u from rank %d", ctx->rank, h.stream, peer);
    close(fd);
    return HC_OK;
  }
  /* Back to the default: receives of data must wake up for a single byte. */
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) != 0) {
    close(fd);
    return hc_net_socket_conn_fail(c, HC_FAIL(HC_ERR_SYSTEM, "socket: SO_RCVLOWAT on stream %u from rank %d: %s",
                                              h.stream, peer, strerror(errno)));
  }
  st->fd = fd;
  st->state = HC_SOCK_UP;
  c->n_up++;
  HC_TRACE(HC_NET, "socket: %d accepted stream %u of rank %d", ctx->rank, h.stream, peer);
  return HC_OK;
}

/* Accepts whatever the listener holds, without waiting, and runs the
 * handshake of those pending connections whose client has started it. */
static hc_result_t accept_progress_blocking(struct hc_sock_ctx *ctx) {
  for (;;) {
    int fd = accept4(ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: accept: %s", ctx->rank, strerror(errno));
    }
    int lowat = HC_SOCK_AUTH_HELLO_BYTES;
    if (hc_sock_tune(fd) != HC_OK) {
      close(fd); /* hc_sock_tune wrote the WARN */
      continue;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) != 0)
      HC_TRACE(HC_NET, "socket: SO_RCVLOWAT: %s; a slow client may hold up the handshake", strerror(errno));
    /* A fresh socket's buffer is empty: this one byte cannot block. */
    uint8_t go = HC_SOCK_GO;
    if (send(fd, &go, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
      HC_TRACE(HC_NET, "socket: an incoming connection closed before it was accepted: %s", strerror(errno));
      close(fd);
      continue;
    }
    if (ctx->n_pending == ctx->cap_pending) {
      int cap = HC_MAX(8, 2 * ctx->cap_pending);
      struct hc_sock_pending *p = realloc(ctx->pending, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        close(fd);
        return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: out of host memory for incoming connections", ctx->rank);
      }
      ctx->pending = p;
      ctx->cap_pending = cap;
    }
    ctx->pending[ctx->n_pending++] = (struct hc_sock_pending){fd, hc_deadline_ns()};
  }
  if (ctx->n_pending == 0) return HC_OK;
  HC_TRY(pfds_reserve(ctx, ctx->n_pending));
  for (int i = 0; i < ctx->n_pending; i++) ctx->pfds[i] = (struct pollfd){.fd = ctx->pending[i].fd, .events = POLLIN};
  int ready = poll(ctx->pfds, (nfds_t)ctx->n_pending, 0);
  if (ready < 0 && errno != EINTR)
    return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: poll: %s", ctx->rank, strerror(errno));
  uint64_t now = hc_now_ns();
  /* Backwards, so that removing entry i (swap with the last) keeps the
   * pfds[] entries still to visit aligned with pending[]. */
  for (int i = ctx->n_pending - 1; i >= 0; i--) {
    int fd = ctx->pending[i].fd;
    bool go = ready > 0 && ctx->pfds[i].revents != 0;
    bool expired = !go && now >= ctx->pending[i].expire_ns;
    if (!go && !expired) continue;
    ctx->pending[i] = ctx->pending[--ctx->n_pending];
    if (expired) {
      HC_WARN(HC_NET, "socket: rank %d dropped an incoming connection that did not start a handshake within HETCCL_TIMEOUT",
              ctx->rank);
      close(fd);
      continue;
    }
    HC_TRY(serve_one_blocking(ctx, fd));
  }
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

static hc_result_t client_start(struct hc_sock_conn *c, struct hc_sock_stream *st, const union hc_sockaddr *addr) {
  char who[80];
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
  return HC_FAIL(r, "socket: handshake of rank %d with rank %d (stream %d) failed: %s", c->ctx->rank, c->peer, s,
                 why);
}

static hc_result_t client_handshake_blocking(struct hc_sock_conn *c, struct hc_sock_stream *st) {
  struct hc_sock_ctx *ctx = c->ctx;
  uint64_t deadline = HC_MIN(c->deadline_ns, hc_now_ns() + HC_SOCK_HANDSHAKE_NS);
  uint8_t buf[HC_SOCK_HELLO_BYTES];
  struct hc_sock_hello h = {HC_SOCK_MAGIC, (uint32_t)ctx->rank, (uint32_t)st->index, (uint32_t)ctx->nstreams,
                            ctx->chunk};
  hc_result_t r;
  hello_encode(&h, buf);
  if ((r = hc_auth_client_blocking(st->fd, ctx->secret, HC_AUTH_NET_SOCKET, deadline, ctx->abort_flag)) != HC_OK ||
      (r = hc_sock_send_blocking(st->fd, buf, sizeof(buf), deadline, ctx->abort_flag)) != HC_OK ||
      (r = hc_sock_recv_blocking(st->fd, buf, sizeof(buf), deadline, ctx->abort_flag)) != HC_OK)
    return handshake_fail(c, st->index, r);
  /* The fields are checked here one by one: a listener that says another
   * nstreams is a configuration mismatch below, not a stranger. */
  (void)hc_net_socket_hello_parse(buf, sizeof(buf), &h);
  if (h.magic != HC_SOCK_MAGIC || h.rank != (uint32_t)c->peer || h.stream != (uint32_t)st->index)
    return HC_FAIL(HC_ERR_REMOTE, "socket: the listener of rank %d answered as rank %u stream %u (magic 0x%x)",
                   c->peer, h.rank, h.stream, h.magic);
  if (!hello_config_matches(ctx, &h)) return hello_config_fail(ctx, &h);
  st->state = HC_SOCK_UP;
  c->n_up++;
  return HC_OK;
}

/* Starts every stream not started yet, and runs the handshake of those
 * whose peer has accepted. */
static hc_result_t client_progress_blocking(struct hc_sock_conn *c, const struct hc_net_handle *handle) {
  union hc_sockaddr addr;
  char who[80];
  HC_TRY(parse_handle(c->ctx, c->peer, handle, &addr));
  for (int s = 0; s < c->ctx->nstreams; s++) {
    struct hc_sock_stream *st = &c->streams[s];
    if (st->state == HC_SOCK_IDLE) HC_TRY(client_start(c, st, &addr));
    if (st->state == HC_SOCK_CONNECTING) {
      struct pollfd p = {.fd = st->fd, .events = POLLOUT};
      if (poll(&p, 1, 0) <= 0) continue; /* not yet, or EINTR: next call */
      int e = 0;
      socklen_t elen = sizeof(e);
      if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0) e = errno;
      if (e != 0)
        return HC_FAIL(e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ? HC_ERR_REMOTE
                                                                                                   : HC_ERR_SYSTEM,
                       "socket: cannot connect to rank %d at %s: %s", c->peer, hc_sock_str(&addr, who, sizeof(who)),
                       strerror(e));
      st->state = HC_SOCK_WAIT_GO;
    }
    if (st->state != HC_SOCK_WAIT_GO) continue;
    uint8_t go = 0;
    ssize_t k = recv(st->fd, &go, 1, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (k != 1 || go != HC_SOCK_GO)
      return HC_FAIL(HC_ERR_REMOTE, "socket: rank %d at %s %s%s while rank %d was connecting", c->peer,
                     hc_sock_str(&addr, who, sizeof(who)),
                     k < 0 ? "failed: " : k == 0 ? "closed the connection" : "is not a hetccl socket listener",
                     k < 0 ? strerror(errno) : "", c->ctx->rank);
    HC_TRY(client_handshake_blocking(c, st));
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
  int64_t nstreams = hc_param_int(HC_P_SOCKET_NSTREAMS), chunk = hc_param_int(HC_P_SOCKET_CHUNK);
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
    HC_INFO(HC_NET, "socket: %d <-> %d up via %s, %d streams", c->ctx->rank, c->peer, c->ctx->ifname,
            c->ctx->nstreams);
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
  HC_TRY(accept_progress_blocking(ctx));
  HC_TRY(hc_net_socket_conn_check(c));
  if (peer > ctx->rank && (r = client_progress_blocking(c, peer_handle)) != HC_OK)
    return hc_net_socket_conn_fail(c, r);
  if (c->n_up == ctx->nstreams) return conn_ready(c, out);
  if (hc_now_ns() >= c->deadline_ns)
    return hc_net_socket_conn_fail(
        c, HC_FAIL(HC_ERR_REMOTE, "socket: rank %d: %s rank %d did not come up within HETCCL_TIMEOUT=%lld s (%d of %d streams)",
                   ctx->rank, peer > ctx->rank ? "connection to" : "connection from", peer,
                   (long long)hc_param_int(HC_P_TIMEOUT), c->n_up, ctx->nstreams));
  return HC_OK;
}

/* Fills ctx->pfds with what could make progress; returns the count, or -1
 * when something can progress right now without waiting. */
static int collect_pollfds(struct hc_sock_ctx *ctx, hc_result_t *r) {
  int n = 0, cap = 1 + ctx->n_pending;
  for (int p = 0; p < ctx->nranks; p++)
    if (ctx->conns[p]) cap += ctx->nstreams;
  if ((*r = pfds_reserve(ctx, cap)) != HC_OK) return 0;
  ctx->pfds[n++] = (struct pollfd){.fd = ctx->listen_fd, .events = POLLIN};
  for (int i = 0; i < ctx->n_pending; i++) ctx->pfds[n++] = (struct pollfd){.fd = ctx->pending[i].fd, .events = POLLIN};
  for (int p = 0; p < ctx->nranks; p++) {
    struct hc_sock_conn *c = ctx->conns[p];
    if (c == NULL) continue;
    bool busy = c->sendq.head != NULL || c->recvq.head != NULL;
    /* A failed conn with requests, or a request completed by a test() of
     * another one: the caller has something to learn now. */
    if (busy && (c->failed != HC_OK || c->n_complete > 0)) return -1;
    if (c->failed != HC_OK) continue;
    for (int s = 0; s < ctx->nstreams; s++) {
      enum hc_sock_stream_state state = c->streams[s].state;
      short ev = state == HC_SOCK_CONNECTING ? POLLOUT
                 : state == HC_SOCK_WAIT_GO  ? POLLIN
                 : state == HC_SOCK_UP       ? hc_net_socket_stream_events(c, s)
                                             : 0;
      if (ev) ctx->pfds[n++] = (struct pollfd){.fd = c->streams[s].fd, .events = ev};
    }
  }
  return n;
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
    int slice = (int)HC_MIN((end - now + 999999) / 1000000, (uint64_t)HC_SOCK_SLICE_MS);
    int ready = poll(ctx->pfds, (nfds_t)n, slice);
    if (ready < 0 && errno != EINTR)
      return HC_FAIL(HC_ERR_SYSTEM, "socket: rank %d: poll: %s", ctx->rank, strerror(errno));
    /* Entries 0 .. n_pending are the listener and the connections not yet
     * authenticated: serve them here, or a stray one would keep poll()
     * ready and the caller spinning. A quiet slice also serves them, to
     * drop those that expired. */
    bool incoming = ready == 0;
    for (int i = 0; i <= ctx->n_pending && ready > 0; i++) incoming = incoming || ctx->pfds[i].revents != 0;
    if (incoming) HC_TRY(accept_progress_blocking(ctx));
    if (ready > 0) return HC_OK;
  }
}

static hc_result_t sock_close(void *vctx) {
  struct hc_sock_ctx *ctx = vctx;
  if (ctx == NULL) return HC_OK;
  if (ctx->conns)
    for (int p = 0; p < ctx->nranks; p++) conn_destroy(ctx->conns[p]);
  for (int i = 0; i < ctx->n_pending; i++) close(ctx->pending[i].fd);
  close_fd(&ctx->listen_fd);
  free(ctx->conns);
  free(ctx->pending);
  free(ctx->pfds);
  free(ctx);
  return HC_OK;
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
};
