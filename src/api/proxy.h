/*
 * A GPU communicator's side of the progress engine. A call on GPU buffers
 * is planned on the caller's thread and split (exec/enqueue.h): its local
 * steps go on the comm's streams right away, after the caller's stream,
 * which then waits for them; its transfers become a job of the process's
 * progress engine (exec/engine.h), which runs each comm's jobs in call
 * order, never calls the GPU driver, and watches every wait of the comm's
 * streams (window counters included). The two meet through counters in
 * pinned memory (stream memory operations).
 */
#ifndef HC_API_PROXY_H_
#define HC_API_PROXY_H_

#include "../exec/exec.h"

struct hc_proxy;
struct hetcclComm;

/* Fails with HC_ERR_DEVICE when the driver lacks stream memory operations. */
hc_result_t hc_proxy_create(struct hetcclComm *comm, struct hc_proxy **out);
/* Plans the calls of one group and enqueues them: streams[] are the
 * callers' streams (they wait for the work). Returns once everything is
 * enqueued. Fails with HC_ERR_USAGE when a stream is capturing a CUDA
 * graph, HC_ERR_REMOTE once the comm has failed. */
hc_result_t hc_proxy_submit(struct hc_proxy *px, const struct hc_coll_args *calls, int ncalls, hc_stream_t *streams,
                            int nstreams);
/* Waits (bounded by HETCCL_TIMEOUT) until every submitted call has run. */
hc_result_t hc_proxy_drain_blocking(struct hc_proxy *px);
/* Leaves the engine once the submitted calls have run (at once after a
 * failure, releasing the streams) and frees everything; takes NULL.
 * Returns whether the engine aborted the group's vendor sub-comm. */
bool hc_proxy_destroy(struct hc_proxy *px);

#endif
