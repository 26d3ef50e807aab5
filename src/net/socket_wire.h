/*
 * net/socket's wire records as pure parsers: bytes in, fields out; no I/O,
 * no state, no log line. socket.c and socket_progress.c run every record
 * they get from a peer through one of these before they use a field, and
 * tests/fuzz/ feeds them hostile bytes. Internal to src/net/ and its tests.
 *
 * Records (integers little-endian, see socket_priv.h):
 *   handle      struct hc_sock_handle, host order, in hc_net_handle's bytes
 *   conn hello  magic u32 | rank u32 | stream u32 | nstreams u32 | chunk u64   24 B
 *   msg header  payload length u64                                              8 B
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

/* Whether buf is a message header (n == HC_SOCK_HDR_BYTES) announcing
 * exactly the posted number of bytes; *len gets the announced length (0
 * when n is wrong). A receive must fail on false before it places a byte
 * by any other length than its own. */
bool hc_net_socket_hdr_parse(const uint8_t *buf, size_t n, size_t posted, uint64_t *len);

#endif
