/*
 * The accepting side of the membership handshake (util/auth.c), which reads
 * from strangers before they proved anything. Input: byte 0 picks the
 * purpose this side expects, the rest is everything the client sends; it
 * is written into the far end of a socketpair, followed by EOF, so the
 * handshake never waits. No input can pass: the client's proof covers the
 * server's fresh nonce, which the input cannot know.
 */
#include "fuzz_common.h"
#include "util/auth.h"
#include "util/auth_wire.h"

static const uint8_t secret[HC_SECRET_BYTES] = "fuzz-job-secret";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  enum hc_auth_purpose purpose = (enum hc_auth_purpose)(1 + data[0] % 3);
  const uint8_t *peer = data + 1;
  size_t n = size - 1;
  struct hc_auth_hello h;
  bool is_hello = hc_auth_hello_parse(peer, HC_MIN(n, (size_t)HC_AUTH_HELLO_BYTES), &h);
  if (is_hello) FUZZ_CHECK(n >= HC_AUTH_HELLO_BYTES && h.magic == 0x48434131u);

  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  fuzz_write_all(sv[1], peer, n);
  shutdown(sv[1], SHUT_WR);
  hc_result_t r = hc_auth_server_blocking(sv[0], secret, purpose, hc_now_ns() + 100000000ull, NULL);
  FUZZ_CHECK(r == HC_ERR_REMOTE);
  FUZZ_CHECK(strstr(hc_last_error(), "authentication failed") != NULL);
  /* Only a hello for the expected purpose gets an answer: the server's
   * nonce and proof, 48 bytes. */
  uint8_t answer[2 * HC_AUTH_NONCE_BYTES + 2 * HC_AUTH_MAC_BYTES];
  ssize_t k = recv(sv[1], answer, sizeof(answer), MSG_DONTWAIT);
  if (is_hello && h.purpose == (uint32_t)purpose) FUZZ_CHECK(k == HC_AUTH_NONCE_BYTES + HC_AUTH_MAC_BYTES);
  else FUZZ_CHECK(k < 0);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
