/*
 * A rank's side of the rendezvous: the root's 284-byte answer or progress
 * record (status, next's ring address, message text). Whatever the bytes, the status maps
 * onto a known result, the text is terminated inside its field, and an
 * accepted address is one the rank can connect to.
 */
#include "bootstrap/bootstrap_wire.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_bootstrap_reply rep;
  bool parsed = hc_bootstrap_reply_parse(data, size, &rep);
  FUZZ_CHECK(parsed == (size == HC_BOOTSTRAP_REPLY_BYTES));
  if (!parsed) return 0;
  FUZZ_CHECK(strlen(rep.msg) < sizeof(rep.msg));
  FUZZ_CHECK(rep.code >= HC_OK && rep.code <= HC_ERR_REMOTE);
  /* A progress record is never taken for the final answer, nor for success. */
  FUZZ_CHECK(rep.waiting == (rep.status == HC_BOOTSTRAP_WAITING));
  if (rep.waiting) FUZZ_CHECK(rep.code != HC_OK);
  FUZZ_CHECK((rep.status == 0) == (rep.code == HC_OK));
  if (rep.status <= HC_ERR_REMOTE) FUZZ_CHECK((uint32_t)rep.code == rep.status);
  FUZZ_CHECK(hc_result_str(rep.code)[0] != 0);
  if (rep.next_ok) {
    int f = rep.next.sa.sa_family;
    FUZZ_CHECK((f == AF_INET || f == AF_INET6) && hc_sock_port(&rep.next) != 0);
    char where[80];
    hc_sock_str(&rep.next, where, sizeof(where));
  }
  return 0;
}
