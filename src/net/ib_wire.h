/*
 * net/ib's wire records (layouts in ib_priv.h): the setup record both ends
 * of a pair send over the control connection, and its parser, which checks
 * every field a peer could use to make this rank index out of bounds or
 * misconfigure a queue pair. Internal to src/net/ and its tests.
 */
#ifndef HC_NET_IB_WIRE_H_
#define HC_NET_IB_WIRE_H_

#include "ib_priv.h"

/* out gets exactly HC_IB_SETUP_BYTES, integers little endian. */
void hc_ib_setup_encode(const struct hc_ib_setup *s, uint8_t out[HC_IB_SETUP_BYTES]);
/* Whether buf is a well-formed setup record: n == HC_IB_SETUP_BYTES, magic,
 * 1 <= nqps <= HC_IB_MAX_QPS, 1 <= eager_slots <= 64, eager_bytes <=
 * HC_IB_MAX_EAGER, cts_slots == HC_IB_CTS_SLOTS, chunk >= 4096, an MTU enum
 * of 256 to 4096. *out gets the fields as sent whenever n is right (zeroes
 * otherwise). Whether the sender is the peer expected, configured alike,
 * is the caller's to check. */
bool hc_ib_setup_parse(const uint8_t *buf, size_t n, struct hc_ib_setup *out);

#endif
