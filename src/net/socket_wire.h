/*
 * net/socket's wire records as pure parsers: bytes in, fields out; no I/O,
 * no state, no log line. socket.c and socket_progress.c run every record
 * they get from a peer through one of these before they use a field, and
 * tests/fuzz/ feeds them hostile bytes. Internal to src/net/ and its tests.
 *
 * Records (integers little-endian, see socket_priv.h):
 *   handle      struct hc_sock_handle, host order, in hc_net_handle's bytes
 *   conn hello  magic u32 | rank u32 | stream u32 | nstreams u32 | chunk u64   24 B
 *   msg header  payload length u64 | sig 2 x u64 | want 2 x u64                 40 B
 *               sig: the signature of the send's call (net.h); want: zero.
 *   notice      a msg header of length HC_SOCK_NOTICE, no payload: the peer's
 *               receive met this rank's message of signature sig but wanted
 *               want; it fails right after (net.h, "Signatures").
 *   probe       a msg header of length HC_SOCK_PROBE, no payload, between
 *               messages of stream 0: the peer has waited for this rank
 *               for a while in the call of signature sig (all zeroes: it
 *               waits no more; net.h, stall_publish).
 *
 * buf holds n bytes and is only read inside them; a record of another
 * length is rejected.
 */
#ifndef HC_NET_SOCKET_WIRE_H_
#define HC_NET_SOCKET_WIRE_H_

#include "socket_priv.h"

#define HC_SOCK_HELLO_BYTES 24

/* Whether buf (a peer's hc_net_handle bytes, n >= sizeof(*out)) is a socket
 * handle: magic, and an AF_INET or AF_INET6 address. *out gets the handle as
 * sent whenever n is long enough, so that the caller can name what was
 * wrong. */
bool hc_net_socket_handle_parse(const uint8_t *buf, size_t n, struct hc_sock_handle *out);

/* What both ends of a stream say right after authenticating. */
struct hc_sock_hello {
  uint32_t magic, rank, stream, nstreams;
  uint64_t chunk;
};
/* Whether buf is a well-formed hello: n == HC_SOCK_HELLO_BYTES, magic,
 * 1 <= nstreams <= HC_SOCK_MAX_STREAMS and stream < nstreams. *out gets the
 * fields as sent whenever n is right (zeroes otherwise). Whether the sender
 * is the peer expected, configured alike, is the caller's to check. */
bool hc_net_socket_hello_parse(const uint8_t *buf, size_t n, struct hc_sock_hello *out);

/* A message header's fields. */
struct hc_sock_hdr {
  uint64_t len;
  struct hc_net_sig sig, want;
};
#define HC_SOCK_NOTICE UINT64_MAX
#define HC_SOCK_PROBE (UINT64_MAX - 1)
/* Whether buf is a message header (n == HC_SOCK_HDR_BYTES); *out gets the
 * fields (zeroes when n is wrong). */
bool hc_net_socket_hdr_parse(const uint8_t *buf, size_t n, struct hc_sock_hdr *out);
/* What a header read on stream 0 is (socket_priv.h's kinds), where a
 * message of posted bytes and signature sig was due: the one classification
 * of the receive path and of a failed connection's unread bytes. A receive
 * must fail on anything but HC_SOCK_HDR_EXPECTED (a probe aside) before it
 * places a byte by any other length than its own. */
enum hc_sock_hdr_kind hc_net_socket_hdr_classify(const struct hc_sock_hdr *h, size_t posted,
                                                 const struct hc_net_sig *sig);
/* The rank a HC_SOCK_HDR_FAILURE header blames. */
static inline int hc_sock_hdr_blamed(const struct hc_sock_hdr *h) { return (int)(uint32_t)h->len; }
/* Writes a header (HC_SOCK_HDR_BYTES) into buf. */
void hc_net_socket_hdr_put(uint8_t *buf, const struct hc_sock_hdr *h);

#endif
