/*
 * The one record of auth.h's handshake that has fields, as a pure parser:
 * bytes in, fields out; no I/O, no log line. The server side of the
 * handshake runs the client's hello through it, and tests/fuzz/ feeds it
 * hostile bytes. The two proofs have no fields to parse: they are compared
 * whole, in constant time, against the MAC this side computes. Internal to
 * util/ and its tests.
 */
#ifndef HC_UTIL_AUTH_WIRE_H_
#define HC_UTIL_AUTH_WIRE_H_

#include "auth.h"

/* HC_AUTH_NONCE_BYTES, HC_AUTH_MAC_BYTES and HC_AUTH_HELLO_BYTES are in
 * auth.h, for the step functions' callers. */

/* client -> server: magic u32 "HCA1" | purpose u32 | client nonce [16],
 * big-endian. */
struct hc_auth_hello {
  uint32_t magic, purpose;
  uint8_t nonce[HC_AUTH_NONCE_BYTES];
};
/* Whether buf is a hello (n == HC_AUTH_HELLO_BYTES and the magic); *out gets
 * the fields as sent whenever n is right (zeroes otherwise). Whether the
 * purpose is the one expected is the caller's to check. */
bool hc_auth_hello_parse(const uint8_t *buf, size_t n, struct hc_auth_hello *out);

#endif
