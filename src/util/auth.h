/*
 * Membership proof for every connection (bootstrap and transport): a mutual
 * HMAC-SHA256 challenge-response over the job secret from the unique id. The
 * secret never crosses the wire, and the accepting side reads nothing but the
 * handshake until the peer has proved itself.
 *
 *   client -> server  hello  {magic, purpose, client_nonce[16]}
 *   server -> client  {server_nonce[16], HMAC(secret, "srv"|purpose|cn|sn)}
 *   client -> server  HMAC(secret, "cli"|purpose|cn|sn)
 */
#ifndef HC_UTIL_AUTH_H_
#define HC_UTIL_AUTH_H_

#include <stdatomic.h>

#include "util.h"

#define HC_SECRET_BYTES 16

/* Connection purposes: a proof for one never passes for another. */
enum hc_auth_purpose { HC_AUTH_BOOT_ROOT = 1, HC_AUTH_BOOT_RING = 2, HC_AUTH_NET_SOCKET = 3 };

#define HC_AUTH_NONCE_BYTES 16
#define HC_AUTH_MAC_BYTES 32
/* The three records, in order: client hello, server reply, client proof. */
#define HC_AUTH_HELLO_BYTES (8 + HC_AUTH_NONCE_BYTES)
#define HC_AUTH_REPLY_BYTES (HC_AUTH_NONCE_BYTES + HC_AUTH_MAC_BYTES)
#define HC_AUTH_PROOF_BYTES HC_AUTH_MAC_BYTES

/* One side's handshake between steps. */
struct hc_auth_state {
  uint8_t secret[HC_SECRET_BYTES];
  uint32_t purpose;
  uint8_t cn[HC_AUTH_NONCE_BYTES], sn[HC_AUTH_NONCE_BYTES]; /* client, server nonce */
};

/* The handshake as pure steps: bytes in, bytes out, no I/O, so that a
 * nonblocking caller (net/socket.c) moves the records itself and never
 * waits for the peer. Each step takes one whole record; who names the peer
 * in the messages. A wrong proof or garbage is HC_ERR_REMOTE
 * ("authentication failed" with the reason); the caller then sends nothing
 * more and drops the connection.
 *   client: start -> send hello, read reply -> on_reply -> send proof
 *   server: read hello -> on_hello -> send reply, read proof -> on_proof */
hc_result_t hc_auth_client_start(struct hc_auth_state *st, const uint8_t secret[HC_SECRET_BYTES],
                                 enum hc_auth_purpose purpose, uint8_t out_hello[HC_AUTH_HELLO_BYTES]);
hc_result_t hc_auth_client_on_reply(struct hc_auth_state *st, const uint8_t in_reply[HC_AUTH_REPLY_BYTES],
                                    uint8_t out_proof[HC_AUTH_PROOF_BYTES], const char *who);
hc_result_t hc_auth_server_on_hello(struct hc_auth_state *st, const uint8_t secret[HC_SECRET_BYTES],
                                    enum hc_auth_purpose purpose, const uint8_t in_hello[HC_AUTH_HELLO_BYTES],
                                    uint8_t out_reply[HC_AUTH_REPLY_BYTES], const char *who);
hc_result_t hc_auth_server_on_proof(const struct hc_auth_state *st, const uint8_t in_proof[HC_AUTH_PROOF_BYTES],
                                    const char *who);

/* The same steps over a blocking fd, bounded by deadline_ns (the
 * bootstrap's use). Errors as above; the caller drops the connection and,
 * on the accepting side, goes on. */
hc_result_t hc_auth_client_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES], enum hc_auth_purpose purpose,
                                    uint64_t deadline_ns, const atomic_bool *abort_flag);
hc_result_t hc_auth_server_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES], enum hc_auth_purpose purpose,
                                    uint64_t deadline_ns, const atomic_bool *abort_flag);

/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104); exposed for tests. */
void hc_sha256(const void *data, size_t n, uint8_t out[32]);
void hc_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t n, uint8_t out[32]);

#endif
