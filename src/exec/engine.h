/*
 * exec/engine: the progress engine of the process. One thread serves every
 * GPU communicator of the process: it runs their host plans (the transfers
 * that need a transport, in call order per comm) and it owns every wait a
 * stream of theirs can block on, so that none waits forever:
 *  - window counters between ranks of one host (stream to stream, no
 *    transfer of the engine's involved), watched against what this rank's
 *    streams were given to wait for;
 *  - the transfers of its host plans;
 *  - the vendor library's sub-communicator of the rank's group (its async
 *    error).
 * Each outstanding wait whose counter has not moved for HETCCL_TIMEOUT
 * fails the comm; so does a same-host peer that exits (pidfd) while a wait
 * on it is outstanding, a peer's failure notice in the window it shares
 * with this rank, and hetcclCommAbort. A same-host peer whose heartbeat
 * (bumped by its engine in the window) stopped is named as the culprit of
 * a timeout rather than the neighbour that waited for it.
 *
 * The failure path, the same for every cause: the comm's fail callback
 * (the API's: async error, connections closed so that other ranks learn),
 * a notice naming the culprit in every window, queued transfers dropped,
 * the vendor sub-comm aborted once no call of the comm is inside the
 * library, and every counter this rank's streams may wait on moved past
 * any position (again on each tick, since a live peer may still write
 * them): at once on abort and destroy, else after a grace of 2 s, so that
 * a framework polling the async error sees it while the work is pending.
 *
 * HETCCL_DUMP_SIGNAL (e.g. USR1) makes the engine print the state of every
 * comm: calls queued, the one in flight and its step, the peer and the
 * counters it waits on.
 */
#ifndef HC_EXEC_ENGINE_H_
#define HC_EXEC_ENGINE_H_

#include "enqueue.h"

struct hc_vendor;
struct hc_engine_comm;

/* What the engine watches for one comm; read-only once registered, and
 * valid until hc_engine_unregister returns. */
struct hc_engine_desc {
  struct hc_links *links;
  struct hc_plan_window *windows; /* per peer, or NULL (plan_ctx.windows) */
  const int32_t *peer_pid;        /* per peer: its pid where it shares this host, else 0 */
  struct hc_gpu_lanes *lanes;
  const struct hc_vendor *vendor; /* and the sub-comm of this rank's group, or NULL */
  void *vendor_comm;
  const atomic_int *active_calls; /* the comm's calls inside the library (vendor abort waits) */
  /* The API's part of the failure path; on the engine thread, once. The
   * message is the thread's last error. */
  void (*fail)(void *arg, hc_result_t r);
  void *arg;
};

/* The transfers of one call (or group) of a comm. */
struct hc_engine_job {
  struct hc_plan host;
  uint32_t seq;
  struct hc_engine_job *next;
};

/* Adds a comm; the first one starts the engine thread. */
hc_result_t hc_engine_register(const struct hc_engine_desc *d, struct hc_engine_comm **out);
/* Removes it once its queued calls have run (or at once after a failure
 * or an abort; the streams are then released until they drain, bounded
 * by HETCCL_TIMEOUT), and frees it; the last one stops the thread.
 * *vendor_aborted: the engine aborted the vendor sub-comm (it must not be
 * destroyed again). Takes NULL. */
void hc_engine_unregister(struct hc_engine_comm *c, bool *vendor_aborted);
/* Queues a job (the engine frees it); after a failure frees it and fails. */
hc_result_t hc_engine_submit(struct hc_engine_comm *c, struct hc_engine_job *job);
/* After a call's steps are enqueued: how many pieces this rank's streams
 * will have sent to and received from each peer's window (2 per peer). */
void hc_engine_expect(struct hc_engine_comm *c, const uint64_t *window_pieces);
/* After a call is staged, before its steps are enqueued: the signatures
 * that the pieces its streams receive through windows must carry (the
 * plan's WAIT steps that name control words), which the engine checks. */
void hc_engine_expect_sigs(struct hc_engine_comm *c, const struct hc_plan *plan);
/* Waits until every queued job has run, until deadline_ns. */
hc_result_t hc_engine_drain(struct hc_engine_comm *c, uint64_t deadline_ns);
/* Moves every counter the comm's streams may wait on past any position. */
void hc_engine_release(struct hc_engine_comm *c);
/* Whether the comm has failed (any thread). */
bool hc_engine_failed(const struct hc_engine_comm *c);
/* Frees a job and its host plan; takes NULL. */
void hc_engine_job_free(struct hc_engine_job *job);

#endif
