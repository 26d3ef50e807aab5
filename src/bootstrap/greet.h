/*
 * Concurrent handshakes on one listening socket (bootstrap-internal): each
 * accepted connection runs the auth server steps (util/auth.h) and sends
 * one fixed-size hello, all nonblocking and interleaved, each within
 * HC_GREET_WINDOW_NS of its accept. A stranger that connects and stays
 * silent, or sends garbage, costs the others nothing: it is dropped (WARN,
 * with its address) when its own window passes or its bytes fail a step.
 *
 * Used by the root (rank hellos) and by each rank's ring listener (the ring
 * hello of prev). One thread owns a greeter; nothing here blocks.
 *
 *   struct hc_greeter g; hc_greeter_init(&g, fd, ...);
 *   loop: n = hc_greeter_pollfds(&g, p);  add the caller's own fds after p[n];
 *         poll(p, ...);  hc_greeter_progress(&g, p, on_hello, ctx);
 *   hc_greeter_close(&g);   closes what is still pending (not the listener)
 */
#ifndef HC_BOOTSTRAP_GREET_H_
#define HC_BOOTSTRAP_GREET_H_

#include <poll.h>

#include "../util/auth.h"

/* How long one connection may take from accept to its hello; a real rank
 * needs milliseconds. */
#define HC_GREET_WINDOW_NS (5ull * 1000000000ull)
#define HC_GREET_WINDOW_TEXT "5 s"
/* Connections in handshake at once. When a new one arrives at the limit the
 * oldest is dropped: real ranks finish in milliseconds, so the oldest is
 * the likeliest stranger, and a flood cannot keep a rank out. */
#define HC_GREET_MAX_PENDING 256
#define HC_GREET_HELLO_MAX 64

struct hc_greeting;

struct hc_greeter {
  int listen_fd; /* not owned */
  uint8_t secret[HC_SECRET_BYTES];
  enum hc_auth_purpose purpose;
  size_t hello_bytes; /* of the record after the auth steps */
  char where[96];     /* "bootstrap root 10.0.0.1:29500", for messages */
  struct hc_greeting *pending;
  int npending, cap;
};

/* A connection that finished: fd (nonblocking, tuned; now the callee's),
 * its hello, and its peer address as text. */
typedef void (*hc_greet_done_fn)(void *ctx, int fd, const uint8_t *hello, const char *who);

void hc_greeter_init(struct hc_greeter *g, int listen_fd, const uint8_t secret[HC_SECRET_BYTES],
                     enum hc_auth_purpose purpose, size_t hello_bytes, const char *where);
/* Fills p[0..return) (room for 1 + HC_GREET_MAX_PENDING entries): the
 * listener, then one entry per pending connection. */
int hc_greeter_pollfds(const struct hc_greeter *g, struct pollfd *p);
/* Acts on the revents of the entries hc_greeter_pollfds filled (the
 * entries after them are the caller's): accepts, moves each connection as
 * far as its bytes allow, drops failed and expired ones, and calls done for
 * each that sent its hello. HC_OK, or HC_ERR_SYSTEM when the listener
 * itself failed. */
hc_result_t hc_greeter_progress(struct hc_greeter *g, const struct pollfd *p, hc_greet_done_fn done, void *ctx);
void hc_greeter_close(struct hc_greeter *g);

#endif
