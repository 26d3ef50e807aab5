/*
 * The waits of comm init after the rendezvous, watched: a peer that dies
 * while the others are still setting the comm up (shm windows, the
 * vendor's sub-comm) fails every survivor at once, naming it, instead of
 * leaving them waiting for HETCCL_TIMEOUT (or, inside the vendor's
 * library, for ever). Runs on the thread that calls init; the progress
 * engine (exec/engine.h) takes over once the comm is up.
 */
#ifndef HC_API_INIT_WATCH_H_
#define HC_API_INIT_WATCH_H_

#include "../vendor/vendor.h"
#include "api_priv.h"

/* HC_OK while every peer may still come. Else fails (HC_ERR_REMOTE) with a
 * message naming the peer and `during` (what this rank was waiting for):
 * a same-host peer whose process exited (its pid from the init
 * all-gather), a bootstrap ring neighbour whose connection closed (a
 * remote host that vanished without a FIN shows there through the ring's
 * TCP keepalive), or hetcclCommAbort. Never blocks; three syscalls per
 * same-host peer and one per ring neighbour, so a wait calls it between
 * sleeps of a millisecond or more, not on every pass of a busy loop. */
hc_result_t hc_comm_init_peers_check(struct hetcclComm *comm, const char *during);

/* Creates the vendor's communicator of this rank's group (nranks, id,
 * rank as ncclCommInitRank takes them) nonblocking (ncclCommInitRankConfig
 * with blocking = 0) and polls its async error until it is up, checking
 * the peers (above) and HETCCL_TIMEOUT meanwhile; on any failure the
 * half-made comm is aborted (ncclCommAbort) and nothing is returned. A
 * library without ncclCommInitRankConfig gets the blocking init, which
 * nothing can watch (said at INFO). Blocks until then. */
hc_result_t hc_comm_vendor_init_watched_blocking(struct hetcclComm *comm, const struct hc_vendor *v, int nranks,
                                                 hc_vendor_id id, int rank, void **out);

#endif
