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

/* Blocking, bounded by deadline_ns. A wrong proof or garbage is
 * HC_ERR_REMOTE ("authentication failed" with the reason); the caller drops
 * the connection and, on the accepting side, goes on. */
hc_result_t hc_auth_client_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES],
                                    enum hc_auth_purpose purpose, uint64_t deadline_ns,
                                    const atomic_bool *abort_flag);
hc_result_t hc_auth_server_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES],
                                    enum hc_auth_purpose purpose, uint64_t deadline_ns,
                                    const atomic_bool *abort_flag);

/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104); exposed for tests. */
void hc_sha256(const void *data, size_t n, uint8_t out[32]);
void hc_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t n,
                    uint8_t out[32]);

#endif
