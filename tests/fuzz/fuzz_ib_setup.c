/*
 * The setup record the two ends of an ib pair swap over their control
 * connection (net/ib_wire.h). What parses must be safe to use as ib.c does:
 * index the queue pair numbers by nqps, the eager ring by eager_slots and the
 * cts ring by cts_slots (ASan sees an out-of-bounds index); and encoding
 * what parsed gives back the same bytes.
 */
#include "fuzz_common.h"
#include "net/ib_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct hc_ib_setup s;
  bool ok = hc_ib_setup_parse(data, size, &s);
  if (size != HC_IB_SETUP_BYTES) {
    FUZZ_CHECK(!ok && s.magic == 0 && s.nqps == 0);
    return 0;
  }
  if (!ok) return 0;
  FUZZ_CHECK(s.magic == HC_IB_MAGIC && s.nqps >= 1 && s.nqps <= HC_IB_MAX_QPS);
  FUZZ_CHECK(s.eager_slots >= 1 && s.eager_slots <= 64 && s.eager_bytes <= HC_IB_MAX_EAGER);
  FUZZ_CHECK(s.cts_slots == HC_IB_CTS_SLOTS && s.chunk >= 4096);
  uint32_t *qpn = calloc(HC_IB_MAX_QPS, sizeof(*qpn));
  uint32_t *meta = calloc(64, sizeof(*meta)); /* hc_ib_conn.eager_meta */
  FUZZ_CHECK(qpn != NULL && meta != NULL);
  qpn[s.nqps - 1] = s.qpn[s.nqps - 1];
  meta[s.eager_slots - 1] = 1;
  free(qpn);
  free(meta);
  uint8_t again[HC_IB_SETUP_BYTES];
  hc_ib_setup_encode(&s, again);
  struct hc_ib_setup t;
  FUZZ_CHECK(hc_ib_setup_parse(again, sizeof(again), &t));
  FUZZ_CHECK(memcmp(&s, &t, sizeof(s)) == 0);
  return 0;
}
