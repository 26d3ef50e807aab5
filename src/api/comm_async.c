/*
 * Nonblocking comms (config blocking = 0), NCCL's contract: init, split
 * and finalize return HC_IN_PROGRESS at once and do their work on a thread
 * of the comm's own; the caller polls hetcclCommGetAsyncError until it no
 * longer reads HC_IN_PROGRESS, then finds success or the error. Calls on
 * the comm before then are refused (hc_comm_check). The work is the same
 * as a blocking comm's (hc_comm_build, the proxy's drain); only the thread
 * differs, so the thread's result and last-error text go to the comm.
 *
 * Only the task thread writes the comm while the state is INITIALISING or
 * FINALIZING; it ends by storing the next state, which is what publishes
 * its writes to a caller that reads the state. Destroy and abort join it.
 */
#include <string.h>

#include "api_priv.h"
#include "proxy.h"

static void *init_main(void *arg) {
  struct hetcclComm *comm = arg;
  hc_log_set_comm(comm->rank, comm->config.comm_name);
  const hc_result_t r = hc_comm_build(comm);
  if (r == HC_OK) {
    atomic_store(&comm->state, HC_COMM_READY);
    return NULL;
  }
  /* As a blocking init that fails frees the comm, this one closes its
   * connections now, so that the peers stop waiting for this rank; the
   * rest waits for the caller's destroy or abort. */
  hc_comm_fail(comm, r);
  atomic_store(&comm->state, HC_COMM_INIT_FAILED);
  return NULL;
}

static void *finalize_main(void *arg) {
  struct hetcclComm *comm = arg;
  hc_log_set_comm(comm->rank, comm->config.comm_name);
  const hc_result_t r = hc_proxy_drain_blocking(comm->proxy);
  if (r != HC_OK) hc_comm_set_async_error(comm, r);
  atomic_store(&comm->state, HC_COMM_FINALIZED);
  return NULL;
}

/* Starts fn on the comm's task thread, the state first set to running. */
static hc_result_t task_start(struct hetcclComm *comm, void *(*fn)(void *), enum hc_comm_state running,
                              const char *what) {
  hc_comm_task_join(comm); /* a finished init's thread, before its handle is reused */
  atomic_store(&comm->state, running);
  const int e = pthread_create(&comm->task, NULL, fn, comm);
  if (e != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "rank %d: cannot start the thread of a nonblocking %s: %s", comm->rank, what,
                   strerror(e));
  comm->task_started = true;
  return HC_IN_PROGRESS;
}

hc_result_t hc_comm_init_async(struct hetcclComm *comm, struct hetcclComm **out) {
  /* A blocking init leaves the comm's device current on the caller's
   * thread (where a NULL stream then points); this one does so too. */
  const enum hc_mem_kind kind = comm->config.device_kind;
  hc_result_t r = kind == HC_MEM_HOST ? HC_OK : hc_dev_set_device(hc_dev_get(kind), comm->config.device_id);
  if (r == HC_OK) r = task_start(comm, init_main, HC_COMM_INITIALISING, "init");
  if (r != HC_IN_PROGRESS) {
    hc_comm_free(comm);
    return r;
  }
  HC_INFO(HC_API, "comm %p%s%s rank %d of %d: nonblocking init started", (void *)comm, HC_COMM_NAME_ARGS(comm),
          comm->rank, comm->nranks);
  *out = comm;
  return HC_IN_PROGRESS;
}

hc_result_t hc_comm_finalize_async(struct hetcclComm *comm) {
  if (comm->proxy == NULL) { /* host calls complete before they return */
    atomic_store(&comm->state, HC_COMM_FINALIZED);
    return HC_OK;
  }
  const hc_result_t r = task_start(comm, finalize_main, HC_COMM_FINALIZING, "finalize");
  if (r != HC_IN_PROGRESS) atomic_store(&comm->state, HC_COMM_READY);
  return r;
}

void hc_comm_task_join(struct hetcclComm *comm) {
  if (!comm->task_started) return;
  if (atomic_load(&comm->state) == HC_COMM_INITIALISING) atomic_store(&comm->abort_flag, true);
  pthread_join(comm->task, NULL);
  comm->task_started = false;
}
