/*
 * exec/enqueue: a GPU comm's plans, put on streams by the calling thread.
 *
 * Every local step of a GPU plan (copies, reductions, and the waits and
 * signals of shm windows) is enqueued at call time, in an order that
 * respects the dependencies, on one of two lanes (plan.h, hc_lane): the
 * main lane is the caller's stream itself, the other (copies into host
 * memory, so that they overlap the rest) is the comm's own stream. The transfers that need a transport are the
 * progress engine's (engine.h): they become a host plan that it runs with
 * hc_exec_run_blocking and that makes no driver call.
 *
 * The two sides meet through 64-bit counters in mapped pinned memory:
 *  - lane L's counter is the position (1, 2, ... over the comm's life) of
 *    the latest step of L that something off the lane waits for; the
 *    stream writes it (flag_write), the host plan waits for it (WAIT);
 *  - the counter of queue (peer, direction) is the number of transfers of
 *    that queue done so far; the host plan writes it (SIGNAL) and streams
 *    wait for it (flag_wait).
 * Between the two lanes, events (dependencies the driver sees).
 *
 * Plans run one after the other: a plan's first step on each lane waits
 * for everything of the plans before (both lanes, every transfer), and its
 * host plan starts by waiting for the last steps of the plans before that
 * had transfers, so scratch and slots are reused safely and a comm's calls
 * complete in order. A plan without transfers is not the engine's at all. The caller's other
 * streams join the first one at the start, the comm's lane waits for it
 * (an event), and the caller's streams wait for that lane at the end.
 */
#ifndef HC_EXEC_ENQUEUE_H_
#define HC_EXEC_ENQUEUE_H_

#include "exec.h"

struct hc_gpu_lanes;

/* The lanes, events and counters of one GPU comm of nranks ranks on
 * device. A plan that copies at most one_lane_bytes into host memory runs
 * on the main lane alone. Needs 64-bit stream memory operations. */
hc_result_t hc_gpu_lanes_create(const struct hc_dev_ops *dev, int device, int rank, int nranks, size_t one_lane_bytes,
                                struct hc_gpu_lanes **out);
/* The vendor library's communicator of this rank's group, which runs the
 * plans' VENDOR steps (plan.h); without one such a step fails. */
struct hc_vendor;
void hc_gpu_lanes_use_vendor(struct hc_gpu_lanes *g, const struct hc_vendor *v, void *vendor_comm);
/* Lets a lane's flag operations, copies and reductions of up to max_bytes
 * go as one kernel (device.h, hc_dev_program) where they follow each
 * other; 0 (the default): never. The kernel spins on the GPU while it
 * waits for a counter: only where no other context must run on this GPU
 * for the counter to move. */
void hc_gpu_lanes_allow_programs(struct hc_gpu_lanes *g, size_t max_bytes);
/* Polls (until deadline_ns) until every step enqueued so far has run. */
hc_result_t hc_gpu_lanes_wait_idle(struct hc_gpu_lanes *g, uint64_t deadline_ns);
/* Waits (bounded) for the lanes to drain, then frees everything; takes NULL. */
void hc_gpu_lanes_destroy(struct hc_gpu_lanes *g);

/* First half of a call: decides where and in which order plan's steps run
 * and appends the transfers, with what they wait for and signal, to host
 * (an empty plan of host memory; left empty when plan has no transfers). xfer_end (2 * nranks) receives every
 * queue's counter once host has run. Fails with HC_ERR_USAGE when a send
 * of the rank to itself has no receive of the same size. */
hc_result_t hc_gpu_prepare(struct hc_gpu_lanes *g, const struct hc_plan *plan, struct hc_plan *host,
                           uint64_t *xfer_end);
/* Second half: enqueues the steps prepared on the lanes, after the work
 * already on the caller's streams, which then wait for the lanes. Call it
 * once host is on its way to the engine (a host reduction fallback may
 * wait for the stream here). */
hc_result_t hc_gpu_enqueue(struct hc_gpu_lanes *g, const struct hc_plan *plan, hc_stream_t *user, int nuser);

/* Whether every step enqueued so far has run (the calling thread's). */
bool hc_gpu_lanes_idle(struct hc_gpu_lanes *g);

/* After a failure: moves every queue counter to at least xfer_end (NULL:
 * HC_GPU_RELEASED, past any position; any thread), so no stream waits
 * forever for a transfer that will not happen. */
#define HC_GPU_RELEASED (1ull << 62) /* still >= under cuStreamWaitValue64's cyclic comparison */
void hc_gpu_lanes_release(struct hc_gpu_lanes *g, const uint64_t *xfer_end);
/* Before the engine releases the streams of a failed comm that nobody
 * aborted (any thread): every plan ends with a one-thread kernel on the
 * caller's stream (HETCCL_RELEASE_TRAP) that then traps, so that a stream
 * released with its data missing fails instead of completing. */
void hc_gpu_lanes_arm_trap(struct hc_gpu_lanes *g);

#endif
