/*
 * bootstrap's wire records as pure parsers: bytes in, fields out; no I/O, no
 * state, no log line. bootstrap.c runs every record it reads (from a socket,
 * or the id from the user / a c10d store) through one of these before it
 * uses a field, and tests/fuzz/ feeds them hostile bytes. Layouts and byte
 * order: the comment at the top of bootstrap.c. Internal to bootstrap/ and
 * its tests.
 *
 * Contract of every *_parse: buf holds n bytes and is only read inside them;
 * a record of another length is rejected (false, *out zeroed), and whenever
 * n is right *out holds every field as sent, so that callers can name what
 * was wrong.
 */
#ifndef HC_BOOTSTRAP_WIRE_H_
#define HC_BOOTSTRAP_WIRE_H_

#include "../util/sock.h"
#include "bootstrap.h"

#define HC_BOOTSTRAP_ADDR_BYTES 24
#define HC_BOOTSTRAP_HELLO_BYTES (12 + HC_BOOTSTRAP_ADDR_BYTES)
#define HC_BOOTSTRAP_MSG_BYTES 256
#define HC_BOOTSTRAP_REPLY_BYTES (4 + HC_BOOTSTRAP_ADDR_BYTES + HC_BOOTSTRAP_MSG_BYTES)
#define HC_BOOTSTRAP_RING_HELLO_BYTES 12
#define HC_BOOTSTRAP_GATHER_HDR_BYTES 16
/* Upper bound on nranks, so a rank hello cannot make the root allocate
 * without limit. */
#define HC_BOOTSTRAP_MAX_RANKS (1 << 20)

/* The unique id (hetcclUniqueId's bytes). */
struct hc_bootstrap_id {
  union hc_sockaddr root; /* AF_INET or AF_INET6, port != 0 */
  uint8_t secret[16];
};
/* HC_OK, or HC_ERR_ARG with the reason as this thread's last error (and a
 * WARN line): n is not HC_UNIQUE_ID_BYTES, wrong magic or version, no valid
 * root address. */
hc_result_t hc_bootstrap_id_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_id *out);

/* A rank's registration with the root. */
struct hc_bootstrap_hello {
  uint32_t magic, rank, nranks;
  uint8_t ring_bytes[HC_BOOTSTRAP_ADDR_BYTES]; /* verbatim: the root forwards them */
  bool ring_ok;                                /* they hold a valid address ... */
  union hc_sockaddr ring;                      /* ... this one */
};
/* Whether buf is a rank hello (length and magic). */
bool hc_bootstrap_hello_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_hello *out);
/* Whether the root may seat the rank of hello h, given the nranks that
 * earlier ranks said (0: none yet): nranks 1..HC_BOOTSTRAP_MAX_RANKS, rank
 * in range, nranks agreeing, a valid ring address when nranks > 1. When not,
 * msg gets the reason (naming the rank and who, its address), which the root
 * sends back. A rank joining twice is the root's to catch. */
bool hc_bootstrap_hello_check(const struct hc_bootstrap_hello *h, int root_nranks, const char *who, char *msg,
                              size_t msg_len);

/* The status of a progress record: not yet; msg says who is missing. The
 * root sends one every 10 s to each rank waiting on it; the final answer
 * (HC_OK with next's address, or an error) follows. */
#define HC_BOOTSTRAP_WAITING 0x57414954u /* "WAIT" */

/* The root's answer to a rank, or a progress record. */
struct hc_bootstrap_reply {
  uint32_t status;                  /* as sent */
  bool waiting;                     /* status is HC_BOOTSTRAP_WAITING */
  hc_result_t code;                 /* status as a result; unknown values are HC_ERR_REMOTE */
  bool next_ok;                     /* the address of next is valid ... */
  union hc_sockaddr next;           /* ... this one */
  char msg[HC_BOOTSTRAP_MSG_BYTES]; /* the root's text, always NUL-terminated */
};
bool hc_bootstrap_reply_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_reply *out);

/* What prev says first on the ring. */
struct hc_bootstrap_ring_hello {
  uint32_t magic, rank, nranks;
};
bool hc_bootstrap_ring_hello_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_ring_hello *out);

/* What precedes every all-gather: which one it is, and its slot size. */
struct hc_bootstrap_gather_hdr {
  uint32_t magic, seq;
  uint64_t size;
};
bool hc_bootstrap_gather_hdr_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_gather_hdr *out);

#endif
