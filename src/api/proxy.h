/*
 * The proxy thread of a GPU communicator: runs its plans off the caller's
 * thread, in submission order, so that a collective on GPU buffers only
 * enqueues work on the caller's stream and returns.
 *
 * Hand-off, per call with sequence number seq:
 *   caller's stream: ... earlier work ... | write ready[seq % RING] = seq | wait done >= seq | ...
 *   proxy thread:    wait ready[...] == seq -> run the plan -> done = seq
 * The flags are pinned host memory that the GPU writes and waits on with
 * stream memory operations (host functions where the device lacks them).
 */
#ifndef HC_API_PROXY_H_
#define HC_API_PROXY_H_

#include "../exec/exec.h"

struct hc_proxy;
struct hetcclComm;

hc_result_t hc_proxy_create(struct hetcclComm *comm, struct hc_proxy **out);
/* Queues the calls of one group (copied) as one job; the proxy builds its
 * plan when the job comes up. streams[0] carries the flags; the other
 * streams of the group are joined to it with events. Fails with
 * HC_ERR_USAGE when a stream is capturing a CUDA graph. */
hc_result_t hc_proxy_submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls,
                            hc_stream_t *streams, int nstreams);
/* Waits (bounded by HETCCL_TIMEOUT) until every submitted plan has run. */
hc_result_t hc_proxy_drain_blocking(struct hc_proxy *px);
/* Stops the thread (pending plans fail and release their streams); takes NULL. */
void hc_proxy_destroy(struct hc_proxy *px);

#endif
