/*
 * net/ib's wire records as pure parsers and encoders: bytes in, fields
 * out; no I/O, no state, no log line (like socket_wire.h). ib.c runs the
 * peer's setup record through hc_ib_setup_parse before it uses a field, and
 * tests/fuzz/fuzz_ib_setup.c feeds it hostile bytes.
 */
#include "ib_wire.h"

static void put32(uint8_t **p, uint32_t v) {
  for (int i = 0; i < 4; i++) (*p)[i] = (uint8_t)(v >> (8 * i));
  *p += 4;
}
static void put64(uint8_t **p, uint64_t v) {
  for (int i = 0; i < 8; i++) (*p)[i] = (uint8_t)(v >> (8 * i));
  *p += 8;
}
static uint32_t get32(const uint8_t **p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)(*p)[i] << (8 * i);
  *p += 4;
  return v;
}
static uint64_t get64(const uint8_t **p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)(*p)[i] << (8 * i);
  *p += 8;
  return v;
}

void hc_ib_setup_encode(const struct hc_ib_setup *s, uint8_t out[HC_IB_SETUP_BYTES]) {
  uint8_t *p = out;
  memset(out, 0, HC_IB_SETUP_BYTES);
  put32(&p, s->magic);
  put32(&p, s->rank);
  put32(&p, s->nqps);
  put32(&p, s->eager_slots);
  put32(&p, s->eager_bytes);
  put32(&p, s->cts_slots);
  put64(&p, s->chunk);
  put32(&p, s->lid);
  put32(&p, s->link_layer);
  put32(&p, s->mtu);
  memcpy(p, s->gid, 16);
  p += 16;
  for (int i = 0; i < HC_IB_MAX_QPS; i++) put32(&p, s->qpn[i]);
  put64(&p, s->eager_addr);
  put32(&p, s->eager_rkey);
  put64(&p, s->cts_addr);
  put32(&p, s->cts_rkey);
  put32(&p, s->flags);
}
_Static_assert(4 * 6 + 8 + 4 * 3 + 16 + 4 * HC_IB_MAX_QPS + 8 + 4 + 8 + 4 + 4 <= HC_IB_SETUP_BYTES, "setup record");

bool hc_ib_setup_parse(const uint8_t *buf, size_t n, struct hc_ib_setup *s) {
  memset(s, 0, sizeof(*s));
  if (n != HC_IB_SETUP_BYTES) return false;
  const uint8_t *p = buf;
  s->magic = get32(&p);
  s->rank = get32(&p);
  s->nqps = get32(&p);
  s->eager_slots = get32(&p);
  s->eager_bytes = get32(&p);
  s->cts_slots = get32(&p);
  s->chunk = get64(&p);
  s->lid = get32(&p);
  s->link_layer = get32(&p);
  s->mtu = get32(&p);
  memcpy(s->gid, p, 16);
  p += 16;
  for (int i = 0; i < HC_IB_MAX_QPS; i++) s->qpn[i] = get32(&p);
  s->eager_addr = get64(&p);
  s->eager_rkey = get32(&p);
  s->cts_addr = get64(&p);
  s->cts_rkey = get32(&p);
  s->flags = get32(&p);
  return s->magic == HC_IB_MAGIC && s->nqps >= 1 && s->nqps <= HC_IB_MAX_QPS && s->eager_slots >= 1 &&
         s->eager_slots <= 64 && s->eager_bytes <= HC_IB_MAX_EAGER && s->cts_slots == HC_IB_CTS_SLOTS &&
         s->chunk >= 4096 && s->mtu >= HC_IBV_MTU_256 && s->mtu <= HC_IBV_MTU_4096;
}
