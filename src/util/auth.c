/*
 * SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the mutual
 * challenge-response of auth.h.
 *
 * Invariant: until the peer has proved the secret, the server side reads
 * exactly two fixed-size records (the hello and the client proof) and
 * nothing else, so garbage can cost it at most those bytes and one deadline.
 *
 * Wire format, all integers big-endian:
 *   hello        magic u32 "HCA1" | purpose u32 | client nonce [16]      24 B
 *   server proof server nonce [16] | HMAC(secret, "srv"|purpose|cn|sn)     48 B
 *   client proof HMAC(secret, "cli"|purpose|cn|sn)                        32 B
 * Both nonces are fresh per connection, so a recorded proof never replays,
 * and the "srv"/"cli" labels keep a server proof from passing as a client's.
 */
#include <stdio.h>
#include <sys/socket.h>

#include "auth.h"
#include "auth_wire.h"
#include "sock.h"

/* ---- SHA-256 ---- */

struct sha256 {
  uint32_t h[8];
  uint64_t bytes; /* message length so far */
  uint8_t block[64];
  size_t fill;
};

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void sha256_block(uint32_t h[8], const uint8_t *blk) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) w[t] = load_be32(blk + 4 * t);
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = ror32(w[t - 15], 7) ^ ror32(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = ror32(w[t - 2], 17) ^ ror32(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = hh + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[t] + w[t];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

static void sha256_init(struct sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof(iv));
  s->bytes = 0;
  s->fill = 0;
}

static void sha256_update(struct sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->bytes += n;
  while (n > 0) {
    size_t take = HC_MIN(n, 64 - s->fill);
    memcpy(s->block + s->fill, p, take);
    s->fill += take, p += take, n -= take;
    if (s->fill == 64) {
      sha256_block(s->h, s->block);
      s->fill = 0;
    }
  }
}

static void sha256_final(struct sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->bytes * 8;
  static const uint8_t pad[64] = {0x80};
  /* Pad to 56 mod 64, then the 64-bit length. */
  size_t padn = s->fill < 56 ? 56 - s->fill : 120 - s->fill;
  sha256_update(s, pad, padn);
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(s, len, 8);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
}

void hc_sha256(const void *data, size_t n, uint8_t out[32]) {
  struct sha256 s;
  sha256_init(&s);
  sha256_update(&s, data, n);
  sha256_final(&s, out);
}

/* HMAC over the concatenation of up to 4 parts, so callers need no buffer. */
static void hmac_parts(const uint8_t *key, size_t key_len, const void *const parts[], const size_t lens[], int nparts,
                       uint8_t out[32]) {
  uint8_t k[64] = {0}, pad[64], inner[32];
  if (key_len > 64) hc_sha256(key, key_len, k);
  else memcpy(k, key, key_len);
  struct sha256 s;
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  for (int i = 0; i < nparts; i++) sha256_update(&s, parts[i], lens[i]);
  sha256_final(&s, inner);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  sha256_update(&s, inner, 32);
  sha256_final(&s, out);
}

void hc_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t n, uint8_t out[32]) {
  const void *parts[1] = {data};
  const size_t lens[1] = {n};
  hmac_parts(key, key_len, parts, lens, 1, out);
}

/* ---- handshake ---- */

#define AUTH_MAGIC 0x48434131u /* "HCA1" */
#define NONCE_BYTES HC_AUTH_NONCE_BYTES
#define MAC_BYTES HC_AUTH_MAC_BYTES
#define HELLO_BYTES HC_AUTH_HELLO_BYTES

bool hc_auth_hello_parse(const uint8_t *buf, size_t n, struct hc_auth_hello *out) {
  memset(out, 0, sizeof(*out));
  if (n != HELLO_BYTES) return false;
  out->magic = load_be32(buf);
  out->purpose = load_be32(buf + 4);
  memcpy(out->nonce, buf + 8, NONCE_BYTES);
  return out->magic == AUTH_MAGIC;
}

static void proof(const uint8_t secret[HC_SECRET_BYTES], const char label[3], uint32_t purpose,
                  const uint8_t cn[NONCE_BYTES], const uint8_t sn[NONCE_BYTES], uint8_t out[MAC_BYTES]) {
  uint8_t p[4];
  store_be32(p, purpose);
  const void *parts[4] = {label, p, cn, sn};
  const size_t lens[4] = {3, 4, NONCE_BYTES, NONCE_BYTES};
  hmac_parts(secret, HC_SECRET_BYTES, parts, lens, 4, out);
}

/* Compares in time independent of where the MACs differ, so a peer cannot
 * learn a valid proof byte by byte from response timing. */
static bool mac_equal(const uint8_t *a, const uint8_t *b) {
  volatile uint8_t diff = 0;
  for (int i = 0; i < MAC_BYTES; i++) diff |= a[i] ^ b[i];
  return diff == 0;
}

static const char *peer_name(int fd, char *buf, size_t len) {
  union hc_sockaddr a;
  socklen_t alen = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &alen) != 0) snprintf(buf, len, "fd %d", fd);
  else hc_sock_str(&a, buf, len);
  return buf;
}

/* An I/O failure inside the handshake already logged its own line; this adds
 * the "authentication failed" verdict the callers and users look for. */
static hc_result_t io_failed(hc_result_t r, const char *side, const char *who) {
  char cause[512];
  snprintf(cause, sizeof(cause), "%s", hc_last_error());
  if (r == HC_ERR_REMOTE) return HC_FAIL(HC_ERR_REMOTE, "authentication failed: %s %s: %s", side, who, cause);
  return r;
}

/* ---- the steps (auth.h): no I/O ---- */

static void state_init(struct hc_auth_state *st, const uint8_t secret[HC_SECRET_BYTES], enum hc_auth_purpose purpose) {
  memset(st, 0, sizeof(*st));
  memcpy(st->secret, secret, HC_SECRET_BYTES);
  st->purpose = (uint32_t)purpose;
}

hc_result_t hc_auth_client_start(struct hc_auth_state *st, const uint8_t secret[HC_SECRET_BYTES],
                                 enum hc_auth_purpose purpose, uint8_t out_hello[HELLO_BYTES]) {
  state_init(st, secret, purpose);
  HC_TRY(hc_random_bytes(st->cn, NONCE_BYTES));
  store_be32(out_hello, AUTH_MAGIC);
  store_be32(out_hello + 4, st->purpose);
  memcpy(out_hello + 8, st->cn, NONCE_BYTES);
  return HC_OK;
}

hc_result_t hc_auth_client_on_reply(struct hc_auth_state *st, const uint8_t in_reply[HC_AUTH_REPLY_BYTES],
                                    uint8_t out_proof[HC_AUTH_PROOF_BYTES], const char *who) {
  uint8_t want[MAC_BYTES];
  memcpy(st->sn, in_reply, NONCE_BYTES);
  proof(st->secret, "srv", st->purpose, st->cn, st->sn, want);
  if (!mac_equal(want, in_reply + NONCE_BYTES)) {
    return HC_FAIL(HC_ERR_REMOTE,
                   "authentication failed: server %s did not prove the job secret (a different job's id, or "
                   "not a hetccl peer)",
                   who);
  }
  proof(st->secret, "cli", st->purpose, st->cn, st->sn, out_proof);
  return HC_OK;
}

hc_result_t hc_auth_server_on_hello(struct hc_auth_state *st, const uint8_t secret[HC_SECRET_BYTES],
                                    enum hc_auth_purpose purpose, const uint8_t in_hello[HELLO_BYTES],
                                    uint8_t out_reply[HC_AUTH_REPLY_BYTES], const char *who) {
  struct hc_auth_hello h;
  state_init(st, secret, purpose);
  if (!hc_auth_hello_parse(in_hello, HELLO_BYTES, &h))
    return HC_FAIL(HC_ERR_REMOTE, "authentication failed: client %s sent 0x%08x, not a hetccl hello", who, h.magic);
  if (h.purpose != (uint32_t)purpose) {
    return HC_FAIL(HC_ERR_REMOTE, "authentication failed: client %s asked for connection purpose %u, expected %u", who,
                   h.purpose, (unsigned)purpose);
  }
  memcpy(st->cn, h.nonce, NONCE_BYTES);
  HC_TRY(hc_random_bytes(st->sn, NONCE_BYTES));
  memcpy(out_reply, st->sn, NONCE_BYTES);
  proof(st->secret, "srv", st->purpose, st->cn, st->sn, out_reply + NONCE_BYTES);
  return HC_OK;
}

hc_result_t hc_auth_server_on_proof(const struct hc_auth_state *st, const uint8_t in_proof[HC_AUTH_PROOF_BYTES],
                                    const char *who) {
  uint8_t want[MAC_BYTES];
  proof(st->secret, "cli", st->purpose, st->cn, st->sn, want);
  if (!mac_equal(want, in_proof))
    return HC_FAIL(HC_ERR_REMOTE, "authentication failed: client %s did not prove the job secret", who);
  return HC_OK;
}

/* ---- the blocking wrappers: the steps over hc_sock_*_blocking ---- */

/* One of the three messages (hello, reply, proof), sent or received; a
 * failure is blamed on the peer, side ("client", "server") who. */
static hc_result_t move_blocking(int fd, bool send, void *buf, size_t n, uint64_t deadline_ns,
                                 const atomic_bool *abort_flag, const char *side, const char *who) {
  hc_result_t r = send ? hc_sock_send_blocking(fd, buf, n, deadline_ns, abort_flag)
                       : hc_sock_recv_blocking(fd, buf, n, deadline_ns, abort_flag);
  return r == HC_OK ? HC_OK : io_failed(r, side, who);
}

/* The exchange as both ends see it: the client sends the hello and the
 * proof, the server the reply; each end runs its steps between them. */
static hc_result_t handshake_blocking(int fd, bool client, const uint8_t secret[HC_SECRET_BYTES],
                                      enum hc_auth_purpose purpose, uint64_t deadline_ns,
                                      const atomic_bool *abort_flag) {
  const char *side = client ? "server" : "client";
  char who[80];
  uint8_t hello[HELLO_BYTES], reply[HC_AUTH_REPLY_BYTES], proof_msg[HC_AUTH_PROOF_BYTES];
  struct hc_auth_state st;
  peer_name(fd, who, sizeof(who));
  if (client) HC_TRY(hc_auth_client_start(&st, secret, purpose, hello));
  HC_TRY(move_blocking(fd, client, hello, sizeof(hello), deadline_ns, abort_flag, side, who));
  if (!client) HC_TRY(hc_auth_server_on_hello(&st, secret, purpose, hello, reply, who));
  HC_TRY(move_blocking(fd, !client, reply, sizeof(reply), deadline_ns, abort_flag, side, who));
  if (client) HC_TRY(hc_auth_client_on_reply(&st, reply, proof_msg, who));
  HC_TRY(move_blocking(fd, client, proof_msg, sizeof(proof_msg), deadline_ns, abort_flag, side, who));
  return client ? HC_OK : hc_auth_server_on_proof(&st, proof_msg, who);
}

hc_result_t hc_auth_client_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES], enum hc_auth_purpose purpose,
                                    uint64_t deadline_ns, const atomic_bool *abort_flag) {
  return handshake_blocking(fd, true, secret, purpose, deadline_ns, abort_flag);
}

hc_result_t hc_auth_server_blocking(int fd, const uint8_t secret[HC_SECRET_BYTES], enum hc_auth_purpose purpose,
                                    uint64_t deadline_ns, const atomic_bool *abort_flag) {
  return handshake_blocking(fd, false, secret, purpose, deadline_ns, abort_flag);
}
