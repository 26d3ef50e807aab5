/*
 * net: the one failure text of a signature mismatch (net.h), shared by the
 * transports and the window watchers, so that both ends of every transport
 * say the same thing.
 */
#include <stdio.h>

#include "net.h"

hc_result_t hc_net_sig_fail(hc_net_sig_explain_fn explain, int me, const struct hc_net_sig *mine, int peer,
                            const struct hc_net_sig *theirs, bool me_sends) {
  char text[384];
  if (explain != NULL) {
    explain(text, sizeof(text), me, mine, peer, theirs, me_sends);
  } else {
    snprintf(text, sizeof(text), "rank %d called %016llx:%016llx, rank %d called %016llx:%016llx", me,
             (unsigned long long)mine->w[0], (unsigned long long)mine->w[1], peer, (unsigned long long)theirs->w[0],
             (unsigned long long)theirs->w[1]);
  }
  return HC_FAIL(HC_ERR_USAGE, "mismatched calls: %s", text);
}

void hc_net_mismatch_publish(struct hc_net_mismatch *m, const struct hc_net_sig *got, const struct hc_net_sig *want) {
  if (m == NULL || atomic_load_explicit(&m->set, memory_order_acquire)) return;
  m->got = *got;
  m->want = *want;
  atomic_store_explicit(&m->set, 1, memory_order_release);
}

hc_result_t hc_net_mismatch_fail(const struct hc_net_mismatch *theirs, hc_net_sig_explain_fn explain, int me,
                                 int peer) {
  const struct hc_net_sig got = theirs->got, want = theirs->want;
  return hc_net_sig_fail(explain, me, &got, peer, &want, true);
}
