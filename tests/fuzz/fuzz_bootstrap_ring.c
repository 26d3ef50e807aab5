/*
 * The ring's two records: the hello prev sends after proving the secret
 * (12 bytes) and the header before every all-gather (16 bytes). Each
 * parser takes exactly its length; the input goes to both.
 */
#include "bootstrap/bootstrap_wire.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_bootstrap_ring_hello h;
  struct hc_bootstrap_gather_hdr g;
  bool is_hello = hc_bootstrap_ring_hello_parse(data, size, &h);
  bool is_hdr = hc_bootstrap_gather_hdr_parse(data, size, &g);
  FUZZ_CHECK(!(is_hello && is_hdr));
  if (is_hello) FUZZ_CHECK(size == HC_BOOTSTRAP_RING_HELLO_BYTES && h.magic == 0x48435247u);
  if (is_hdr) {
    FUZZ_CHECK(size == HC_BOOTSTRAP_GATHER_HDR_BYTES && g.magic == 0x48434147u);
    uint64_t be = 0;
    for (int i = 8; i < 16; i++) be = be << 8 | data[i];
    FUZZ_CHECK(g.size == be);
  }
  if (size != HC_BOOTSTRAP_RING_HELLO_BYTES) FUZZ_CHECK(!is_hello && h.magic == 0 && h.rank == 0);
  if (size != HC_BOOTSTRAP_GATHER_HDR_BYTES) FUZZ_CHECK(!is_hdr && g.size == 0);
  return 0;
}
