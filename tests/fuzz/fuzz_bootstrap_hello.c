/*
 * The root's side of the rendezvous: rank hellos (36 bytes each, after the
 * client proved the secret) arriving one after another. The input is cut
 * into 36-byte records; each goes through hc_bootstrap_hello_parse and
 * hc_bootstrap_hello_check as root_take runs them, and an accepted hello
 * seats its rank in a table sized by the first accepted nranks, as the
 * root's fds[] and addrs[] are (ASan sees any index out of bounds).
 */
#include "bootstrap/bootstrap_wire.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int root_nranks = 0;
  uint8_t *seated = NULL;
  for (size_t off = 0; off + HC_BOOTSTRAP_HELLO_BYTES <= size; off += HC_BOOTSTRAP_HELLO_BYTES) {
    struct hc_bootstrap_hello h;
    if (!hc_bootstrap_hello_parse(data + off, HC_BOOTSTRAP_HELLO_BYTES, &h)) continue;
    char msg[HC_BOOTSTRAP_MSG_BYTES], tiny[8];
    memset(msg, 0, sizeof(msg));
    bool ok = hc_bootstrap_hello_check(&h, root_nranks, "192.0.2.1:1234", msg, sizeof(msg));
    /* A short buffer only truncates the text, never the verdict. */
    FUZZ_CHECK(hc_bootstrap_hello_check(&h, root_nranks, "x", tiny, sizeof(tiny)) == ok);
    if (!ok) {
      FUZZ_CHECK(msg[0] != 0 && strlen(msg) < sizeof(msg));
      continue;
    }
    FUZZ_CHECK(msg[0] == 0);
    FUZZ_CHECK(h.nranks >= 1 && h.nranks <= HC_BOOTSTRAP_MAX_RANKS && h.rank < h.nranks);
    FUZZ_CHECK(root_nranks == 0 || (int)h.nranks == root_nranks);
    if (h.nranks > 1) {
      FUZZ_CHECK(h.ring_ok);
      int f = h.ring.sa.sa_family;
      FUZZ_CHECK((f == AF_INET || f == AF_INET6) && hc_sock_port(&h.ring) != 0);
    }
    if (root_nranks == 0) {
      root_nranks = (int)h.nranks;
      seated = calloc(h.nranks, 1);
      FUZZ_CHECK(seated != NULL);
    }
    seated[h.rank] = 1;
  }
  free(seated);
  return 0;
}
