/*
 * A peer's socket transport handle, as the init all-gather delivers it
 * (hc_net_handle's 64 bytes, or any length here). An accepted handle holds
 * an address the transport can hand to connect() as is.
 */
#include "fuzz_common.h"
#include "net/socket_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_sock_handle h;
  bool ok = hc_net_socket_handle_parse(data, size, &h);
  if (size < sizeof(h)) FUZZ_CHECK(!ok && h.magic == 0);
  if (!ok) return 0;
  int f = h.addr.sa.sa_family;
  FUZZ_CHECK(h.magic == HC_SOCK_MAGIC && (f == AF_INET || f == AF_INET6));
  FUZZ_CHECK(hc_sock_len(&h.addr) <= sizeof(h.addr));
  char where[80];
  hc_sock_str(&h.addr, where, sizeof(where));
  FUZZ_CHECK(strlen(where) < sizeof(where));
  return 0;
}
