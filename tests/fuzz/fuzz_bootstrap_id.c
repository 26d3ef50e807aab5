/*
 * The unique id as hetcclCommInitRank gets it: 128 bytes from the user, or
 * from another process through a c10d store. hc_bootstrap_id_parse and
 * hc_bootstrap_id_secret must reject anything but a well-formed id, and
 * what they accept must be a usable root address.
 */
#include <arpa/inet.h>

#include "bootstrap/bootstrap_wire.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_bootstrap_id id;
  hc_result_t r = hc_bootstrap_id_parse(data, size, &id);
  if (r == HC_OK) {
    int f = id.root.sa.sa_family;
    FUZZ_CHECK(size == HC_UNIQUE_ID_BYTES);
    FUZZ_CHECK(f == AF_INET || f == AF_INET6);
    FUZZ_CHECK(hc_sock_port(&id.root) > 0 && hc_sock_port(&id.root) <= 65535);
    FUZZ_CHECK(hc_sock_len(&id.root) == (f == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)));
    FUZZ_CHECK(memcmp(id.secret, data + 32, 16) == 0);
    char where[80];
    hc_sock_str(&id.root, where, sizeof(where));
    FUZZ_CHECK(strlen(where) < sizeof(where));
  } else {
    FUZZ_CHECK(r == HC_ERR_ARG && hc_last_error()[0] != 0);
  }
  if (size == HC_UNIQUE_ID_BYTES) {
    uint8_t secret[16];
    FUZZ_CHECK(hc_bootstrap_id_secret(data, secret) == r);
    if (r == HC_OK) FUZZ_CHECK(memcmp(secret, id.secret, 16) == 0);
  }
  return 0;
}
