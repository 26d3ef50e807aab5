/*
 * Concurrent handshakes on a listener: greet.h. A connection's state is the
 * record it is reading (auth hello, auth proof, then the caller's hello),
 * the bytes of it so far, and the auth reply it still owes. Reads take at
 * most what the current record lacks, so nothing past the hello is read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../util/sock.h"
#include "greet.h"

enum greet_step { STEP_AUTH_HELLO, STEP_AUTH_PROOF, STEP_HELLO };

struct hc_greeting {
  int fd;
  uint64_t deadline_ns;
  enum greet_step step;
  size_t have;
  uint8_t in[HC_GREET_HELLO_MAX];
  uint8_t out[HC_AUTH_REPLY_BYTES];
  size_t out_len, out_sent;
  struct hc_auth_state auth;
  char who[80];
};

void hc_greeter_init(struct hc_greeter *g, int listen_fd, const uint8_t secret[HC_SECRET_BYTES],
                     enum hc_auth_purpose purpose, size_t hello_bytes, const char *where) {
  memset(g, 0, sizeof(*g));
  g->listen_fd = listen_fd;
  memcpy(g->secret, secret, HC_SECRET_BYTES);
  g->purpose = purpose;
  g->hello_bytes = hello_bytes;
  snprintf(g->where, sizeof(g->where), "%s", where);
}

static size_t step_bytes(const struct hc_greeter *g, enum greet_step s) {
  return s == STEP_AUTH_HELLO ? HC_AUTH_HELLO_BYTES : s == STEP_AUTH_PROOF ? HC_AUTH_PROOF_BYTES : g->hello_bytes;
}

/* Removes entry i (closing its fd unless the caller took it). */
static void forget(struct hc_greeter *g, int i, bool close_fd) {
  if (close_fd) close(g->pending[i].fd);
  g->pending[i] = g->pending[--g->npending];
}

static void drop(struct hc_greeter *g, int i, const char *why) {
  HC_WARN(HC_BOOT, "%s: connection from %s dropped: %s", g->where, g->pending[i].who, why);
  forget(g, i, true);
}

int hc_greeter_pollfds(const struct hc_greeter *g, struct pollfd *p) {
  p[0] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
  for (int i = 0; i < g->npending; i++) {
    const struct hc_greeting *c = &g->pending[i];
    p[1 + i] = (struct pollfd){.fd = c->fd, .events = (short)(POLLIN | (c->out_sent < c->out_len ? POLLOUT : 0))};
  }
  return 1 + g->npending;
}

static hc_result_t accept_one(struct hc_greeter *g, bool *more) {
  union hc_sockaddr pa;
  socklen_t plen = sizeof(pa);
  memset(&pa, 0, sizeof(pa));
  *more = false;
  int fd = accept4(g->listen_fd, &pa.sa, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
      return HC_OK;
    /* Out of fds: the connection stays queued until a pending one goes. */
    if (errno == EMFILE || errno == ENFILE) {
      HC_WARN_ONCE(HC_BOOT, "%s: accept: %s; connections wait in the queue", g->where, strerror(errno));
      return HC_OK;
    }
    return HC_FAIL(HC_ERR_SYSTEM, "%s: accept: %s", g->where, strerror(errno));
  }
  *more = true;
  /* Keepalive notices a waiting peer whose host died. */
  if (hc_sock_tune(fd) != HC_OK) {
    close(fd);
    return HC_OK;
  }
  if (g->npending == HC_GREET_MAX_PENDING) {
    int oldest = 0;
    for (int i = 1; i < g->npending; i++)
      if (g->pending[i].deadline_ns < g->pending[oldest].deadline_ns) oldest = i;
    drop(g, oldest, "too many connections in handshake at once; the oldest goes");
  }
  if (g->npending == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    struct hc_greeting *grown = realloc(g->pending, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      close(fd);
      HC_WARN(HC_BOOT, "%s: out of host memory for a connection; it is closed", g->where);
      return HC_OK;
    }
    g->pending = grown;
    g->cap = cap;
  }
  struct hc_greeting *c = &g->pending[g->npending++];
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->deadline_ns = hc_now_ns() + HC_GREET_WINDOW_NS;
  c->step = STEP_AUTH_HELLO;
  hc_sock_str(&pa, c->who, sizeof(c->who));
  return HC_OK;
}

/* Sends what c owes, as far as the socket takes it. false: the peer is gone. */
static bool flush(struct hc_greeting *c) {
  while (c->out_sent < c->out_len) {
    ssize_t w = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) c->out_sent += (size_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

/* Moves connection i on. Returns true when it is finished (taken by done or
 * dropped: entry i now holds another connection). */
static bool advance(struct hc_greeter *g, int i, hc_greet_done_fn done, void *ctx) {
  struct hc_greeting *c = &g->pending[i];
  if (!flush(c)) {
    drop(g, i, "it closed the connection during the handshake");
    return true;
  }
  for (;;) {
    size_t need = step_bytes(g, c->step);
    ssize_t got = recv(c->fd, c->in + c->have, need - c->have, MSG_DONTWAIT);
    if (got == 0) {
      drop(g, i, "it closed the connection during the handshake");
      return true;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      char why[128];
      snprintf(why, sizeof(why), "receive: %s", strerror(errno));
      drop(g, i, why);
      return true;
    }
    c->have += (size_t)got;
    if (c->have < need) return false;
    c->have = 0;
    hc_result_t r = HC_OK;
    /* The auth steps name the peer and the reason in their WARN line. */
    if (c->step == STEP_AUTH_HELLO) {
      r = hc_auth_server_on_hello(&c->auth, g->secret, g->purpose, c->in, c->out, c->who);
      c->out_len = HC_AUTH_REPLY_BYTES;
      if (r == HC_OK && !flush(c)) r = HC_ERR_REMOTE;
      c->step = STEP_AUTH_PROOF;
    } else if (c->step == STEP_AUTH_PROOF) {
      r = hc_auth_server_on_proof(&c->auth, c->in, c->who);
      c->step = STEP_HELLO;
    } else {
      int fd = c->fd;
      uint8_t hello[HC_GREET_HELLO_MAX];
      char who[80];
      memcpy(hello, c->in, g->hello_bytes);
      snprintf(who, sizeof(who), "%s", c->who);
      forget(g, i, false);
      done(ctx, fd, hello, who);
      return true;
    }
    if (r != HC_OK) {
      HC_WARN(HC_BOOT, "%s: connection from %s dropped (failed its handshake)", g->where, c->who);
      forget(g, i, true);
      return true;
    }
  }
}

hc_result_t hc_greeter_progress(struct hc_greeter *g, const struct pollfd *p, hc_greet_done_fn done, void *ctx) {
  /* Entries first, as p describes them; entries that finish are replaced
   * by the last one, which p lists under its old index: walk from the end,
   * so that every moved entry has been handled already. */
  int n = g->npending;
  uint64_t now = hc_now_ns();
  for (int i = n - 1; i >= 0; i--) {
    if (p[1 + i].revents != 0 && advance(g, i, done, ctx)) continue;
    if (g->pending[i].deadline_ns <= now)
      drop(g, i, "no complete handshake within " HC_GREET_WINDOW_TEXT " of its connect (a stranger, or a stuck peer)");
  }
  if (p[0].revents & (POLLERR | POLLNVAL)) return HC_FAIL(HC_ERR_SYSTEM, "%s: the listening socket failed", g->where);
  if (p[0].revents & POLLIN) {
    /* Takes the whole queue: a burst of strangers must not delay a rank
     * queued behind them by one poll round each. */
    bool more = true;
    for (int k = 0; more && k < HC_GREET_MAX_PENDING; k++) HC_TRY(accept_one(g, &more));
  }
  return HC_OK;
}

void hc_greeter_close(struct hc_greeter *g) {
  for (int i = 0; i < g->npending; i++) close(g->pending[i].fd);
  free(g->pending);
  g->pending = NULL;
  g->npending = g->cap = 0;
}
