/*
 * net/socket internals shared by socket.c (setup: listen, connect, accept,
 * wait, close) and socket_progress.c (framing, isend/irecv/test). Nothing
 * outside src/net/ includes this, except the transport's own unit test,
 * which reads the handle layout to knock on the listener with garbage.
 *
 * Terms:
 *   stream  one of the HETCCL_SOCKET_NSTREAMS TCP connections of a pair.
 *   message what one isend carries: a 40-byte header (length and
 *           signature, socket_wire.h), always on stream 0, then the payload.
 *   stripe  a slice of the payload, chunk bytes long (the last one shorter).
 *           Stripe i goes to stream i % nstreams. With one stream, or a
 *           payload of at most one chunk, the payload is one stripe on
 *           stream 0, right behind the header.
 *
 * Each stream walks the FIFO of each direction with its own cursor, so the
 * streams move independently and a request is complete once every stream
 * has passed it. Receiving streams other than 0 wait for stream 0 to read a
 * message's header before touching its payload: the stripe layout comes from
 * the sender's length, never from a guess, and a receive posted for another
 * length fails before any stream reads a byte of that message (stream 0 may
 * already have read into the posted buffer, never past it).
 *
 * Threading: a ctx, its connections and requests are used by one thread at
 * a time; nothing here takes a lock.
 */
#ifndef HC_NET_SOCKET_PRIV_H_
#define HC_NET_SOCKET_PRIV_H_

#include <poll.h>

#include "../util/auth.h"
#include "../util/sock.h"
#include "net.h"

#define HC_SOCK_MAGIC 0x4b534348u /* "HCSK" */
#define HC_SOCK_MAX_STREAMS 64
#define HC_SOCK_HDR_BYTES 40
/* A message header whose length's top 16 bits are this is no message: the
 * peer is failing, and the low 32 bits name the rank it blames
 * (hc_net_socket_notice). Not to be confused with HC_SOCK_NOTICE
 * (socket_wire.h), the reply to a mismatched signature. */
#define HC_SOCK_FAILURE_TAG 0xFA11ull
#define HC_SOCK_FAILURE_SHIFT 48

/* What a message header read on stream 0 is, where a message of some
 * length and signature was due (hc_net_socket_hdr_classify, socket_wire.h). */
enum hc_sock_hdr_kind {
  HC_SOCK_HDR_EXPECTED,   /* the message due: posted length and signature */
  HC_SOCK_HDR_PROBE,      /* a stall probe, between messages */
  HC_SOCK_HDR_NOTICE,     /* the peer's receive met this rank's message of sig, wanted want */
  HC_SOCK_HDR_FAILURE,    /* the peer is failing, blaming hc_sock_hdr_blamed() */
  HC_SOCK_HDR_OTHER_CALL, /* a message of another signature than sig */
  HC_SOCK_HDR_OTHER_SIZE  /* a message of sig with another length than posted */
};

/* What hc_net_handle holds; both fields in host order (handles only travel
 * between processes of one job, and the bootstrap copies bytes verbatim). */
struct hc_sock_handle {
  uint32_t magic, reserved;
  union hc_sockaddr addr;
};
_Static_assert(sizeof(struct hc_sock_handle) <= HC_NET_HANDLE_BYTES, "socket handle too big");

/* A stream's setup, nonblocking on both sides (socket.c's file comment):
 * each state waits for one whole record from the peer while the records
 * this side owes drain from its out-buffer. */
enum hc_sock_stream_state {
  HC_SOCK_IDLE,       /* no fd yet */
  HC_SOCK_CONNECTING, /* lower rank: nonblocking connect() issued */
  HC_SOCK_WAIT_GO,    /* lower rank: TCP is up, reading the peer's "go" byte */
  HC_SOCK_AUTH,       /* lower rank: auth hello sent, reading the server's reply */
  HC_SOCK_HELLO,      /* lower rank: proof and conn hello sent, reading the peer's hello */
  HC_SOCK_UP          /* authenticated and hello checked */
};

/* The records of one connection's setup in flight: what was read of the
 * record awaited (in_len of in_want bytes: never more, since the peer's
 * data may follow) and what is still to be sent. */
#define HC_SOCK_HS_BUF 128
struct hc_sock_hs {
  struct hc_auth_state auth;
  size_t in_len, in_want;
  size_t out_off, out_len;
  uint8_t in[HC_SOCK_HS_BUF], out[HC_SOCK_HS_BUF];
};

struct hc_sock_req;

/* One direction of one stream: which request it is on and where. */
struct hc_sock_cursor {
  struct hc_sock_req *req; /* NULL: caught up with everything posted */
  size_t stripe;           /* index of the stripe in the message */
  size_t off;              /* bytes of that stripe already moved */
};

struct hc_sock_stream {
  int fd;
  int index;
  enum hc_sock_stream_state state;
  struct hc_sock_cursor send, recv;
  struct hc_sock_hs *hs; /* while the lower rank sets the stream up */
};

struct hc_sock_queue {
  struct hc_sock_req *head, *tail;
};

struct hc_sock_conn {
  struct hc_sock_ctx *ctx;
  int peer;
  int n_up;             /* streams in HC_SOCK_UP */
  bool announced;       /* the "up" INFO line was written */
  uint64_t deadline_ns; /* set by the first connect() for this peer */
  bool have_addr;       /* addr: the peer's listener, from its handle */
  union hc_sockaddr addr;
  int n_complete;     /* requests complete but not yet freed by test() */
  hc_result_t failed; /* sticky: every later call returns it */
  int culprit;        /* once failed: the rank the failure blames */
  int noticed;        /* the peer's failure notice named this rank, or -1 */
  char err[320];      /* the message of the failure */
  /* Stall probes (net.h, stall_publish): the last one this rank sent, and
   * the peer's latest, with a count of the probes read. */
  struct hc_net_sig probe_sent, peer_probe;
  uint64_t peer_probes;
  struct hc_sock_queue sendq, recvq;
  struct hc_sock_stream streams[]; /* ctx->nstreams */
};

struct hc_sock_req {
  struct hc_sock_conn *conn;
  struct hc_sock_req *prev, *next;
  uint8_t *buf;
  size_t n; /* posted bytes */
  struct hc_net_sig sig;
  bool is_send;
  bool len_known; /* receive: stream 0 read a header that matched n */
  bool complete;
  int streams_done;
  size_t hdr_off; /* header bytes moved on stream 0 */
  uint8_t hdr[HC_SOCK_HDR_BYTES];
};

/* Where an accepted connection is in its setup. */
enum hc_sock_pending_state {
  HC_SOCK_PEND_AUTH,  /* "go" sent, reading the client's auth hello */
  HC_SOCK_PEND_PROOF, /* reply sent, reading the client's proof */
  HC_SOCK_PEND_HELLO, /* authenticated, reading the conn hello */
  HC_SOCK_PEND_ANSWER /* sending this side's hello (the peer's stays in hs->in);
                        * then it becomes a stream */
};

/* An accepted connection that is not a stream yet. */
struct hc_sock_pending {
  int fd;
  enum hc_sock_pending_state state;
  uint64_t expire_ns;
  char who[80];
  struct hc_sock_hs *hs;
};

struct hc_sock_ctx {
  int rank, nranks, nstreams;
  size_t chunk;
  uint8_t secret[HC_SECRET_BYTES];
  const atomic_bool *abort_flag;
  hc_net_sig_explain_fn sig_explain;
  int listen_fd;
  union hc_sockaddr addr;
  char ifname[64];
  struct hc_sock_conn **conns; /* [nranks], made on first use */
  struct hc_sock_pending *pending;
  int n_pending, cap_pending;
  struct pollfd *pfds;
  int cap_pfds;
};

/* Wire integers are little endian whatever the host. */
static inline void hc_sock_put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void hc_sock_put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t hc_sock_get_le32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t hc_sock_get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* socket_progress.c */
hc_result_t hc_net_socket_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req);
hc_result_t hc_net_socket_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req);
hc_result_t hc_net_socket_test(void *req, int *done);
/* poll() events that would let stream s of c progress (0: none). */
short hc_net_socket_stream_events(const struct hc_sock_conn *c, int s);
/* Frees every request still queued on c (close only). */
void hc_net_socket_conn_free_reqs(struct hc_sock_conn *c);
struct hc_sock_hdr;
/* The failure that header h, of kind (neither a probe nor the message due),
 * explains where a message of mine (NULL: none) was due: the peer's notice
 * that this rank's message met another call there, or a message of another
 * call than mine, both named by hc_net_sig_fail. A failure notice records
 * the rank the peer blames in c->noticed. HC_OK where the header explains
 * nothing by itself (a failure notice, another length, no mine): the
 * caller's failure stands. */
hc_result_t hc_net_socket_hdr_explain(struct hc_sock_conn *c, enum hc_sock_hdr_kind kind, const struct hc_sock_hdr *h,
                                      const struct hc_sock_req *mine);

/* socket.c */
/* Makes r (just returned by HC_FAIL, whose text is this thread's last error)
 * c's sticky failure and shuts its streams down so the peer learns of it
 * too. Returns r. */
/* Tells the peer (a notice on stream 0, when it is between messages
 * there: best effort, the connection fails right after) that its message
 * or probe of signature got met this rank's want. */
void hc_net_socket_mismatch_notice(struct hc_sock_conn *c, const struct hc_net_sig *got, const struct hc_net_sig *want);
hc_result_t hc_net_socket_conn_fail(struct hc_sock_conn *c, hc_result_t r);
/* HC_OK, or c's sticky failure with its text made this thread's last error
 * again (without a second WARN line). */
hc_result_t hc_net_socket_conn_check(const struct hc_sock_conn *c);

#endif
