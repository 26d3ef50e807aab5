/*
 * bootstrap: the unique id, rendezvous, and the authenticated out-of-band
 * all-gather and barrier used during init. Knows nothing of devices or
 * collectives.
 *
 * Id layout (in hetcclUniqueId's 128 bytes): magic, root address (IPv4 or
 * IPv6) and port, and a 128-bit random secret. The process that makes an id
 * runs the rendezvous in a thread of its own ("root"), which serves exactly
 * one communicator and exits (at the latest at HETCCL_TIMEOUT).
 *
 * After rendezvous the ranks form a ring of authenticated TCP connections;
 * all-gather runs over it in nranks-1 steps.
 */
#ifndef HC_BOOTSTRAP_H_
#define HC_BOOTSTRAP_H_

#include <stdatomic.h>

#include "../util/util.h"

#define HC_UNIQUE_ID_BYTES 128

struct hc_bootstrap;

/* Makes an id bound to this host's address (HETCCL_SOCKET_IFNAME) and starts
 * its root thread. */
hc_result_t hc_bootstrap_id_create(uint8_t id[HC_UNIQUE_ID_BYTES]);
/* Makes an id for a root at a known address (environment init): rank 0
 * passes start_root = true and serves the rendezvous on that address. */
hc_result_t hc_bootstrap_id_from_addr(const char *host, int port, const uint8_t secret[16], bool start_root,
                                      uint8_t id[HC_UNIQUE_ID_BYTES]);
/* The id's secret, for transports that authenticate with it. */
hc_result_t hc_bootstrap_id_secret(const uint8_t id[HC_UNIQUE_ID_BYTES], uint8_t secret[16]);

/* Joins the rendezvous of id as rank of nranks; blocks until the ring is up
 * or the deadline. abort_flag (may be NULL) is polled. */
hc_result_t hc_bootstrap_create(const uint8_t id[HC_UNIQUE_ID_BYTES], int rank, int nranks,
                                const atomic_bool *abort_flag, struct hc_bootstrap **out);
/* buf holds nranks slots of size bytes; this rank's slot is filled in. */
hc_result_t hc_bootstrap_allgather(struct hc_bootstrap *b, void *buf, size_t size);
hc_result_t hc_bootstrap_barrier(struct hc_bootstrap *b);
/* Between all-gathers: the rank of a ring neighbour (prev first) whose
 * connection has closed or failed (it died, or its process gave up on
 * the comm), else -1. Never blocks and reads nothing: bytes of a later
 * all-gather that a faster rank already sent stay where they are. */
int hc_bootstrap_hung_up(struct hc_bootstrap *b);
/* Takes NULL. */
void hc_bootstrap_destroy(struct hc_bootstrap *b);

/* Rank placement from a launcher's environment. */
struct hc_launch_env {
  int rank, nranks, local_rank; /* local_rank -1 when unknown */
  char master_addr[256];
  int master_port;
  uint8_t secret[16];
  const char *launcher; /* "torchrun", "slurm", "openmpi" */
};
/* torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), Slurm
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, MASTER_ADDR/PORT or the first
 * host of SLURM_STEP_NODELIST and a port from SLURM_JOB_ID), Open MPI
 * (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, MASTER_ADDR/PORT). Secret from
 * HETCCL_SECRET, else derived (see params.def). HC_ERR_USAGE when no
 * launcher's variables are complete, naming what is missing. */
hc_result_t hc_launch_env_read(struct hc_launch_env *env);

#endif
