/*
 * The connecting side of the membership handshake (util/auth.c): it sends
 * its hello, then reads the server's nonce and proof. Input: byte 0 picks
 * the purpose, the rest is everything the server sends (into the far end
 * of a socketpair, then EOF). No input can pass: the server's proof covers
 * this side's fresh nonce. And this side must never send its own proof to
 * a server that did not prove itself.
 */
#include "fuzz_common.h"
#include "util/auth.h"
#include "util/auth_wire.h"

static const uint8_t secret[HC_SECRET_BYTES] = "fuzz-job-secret";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  enum hc_auth_purpose purpose = (enum hc_auth_purpose)(1 + data[0] % 3);
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  fuzz_write_all(sv[1], data + 1, size - 1);
  shutdown(sv[1], SHUT_WR);
  hc_result_t r = hc_auth_client_blocking(sv[0], secret, purpose, hc_now_ns() + 100000000ull, NULL);
  FUZZ_CHECK(r == HC_ERR_REMOTE);
  /* What reached the server: the hello and nothing more. */
  uint8_t sent[2 * HC_AUTH_HELLO_BYTES];
  ssize_t k = recv(sv[1], sent, sizeof(sent), MSG_DONTWAIT);
  FUZZ_CHECK(k == HC_AUTH_HELLO_BYTES);
  struct hc_auth_hello h;
  FUZZ_CHECK(hc_auth_hello_parse(sent, (size_t)k, &h) && h.purpose == (uint32_t)purpose);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
