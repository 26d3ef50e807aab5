/*
 * What a program asks of comms in its own process: several ranks of one
 * comm made by one call (hetcclCommInitAll), the device a comm runs on and
 * the vendor communicator under a pass-through comm (for the NCCL ABI's
 * ncclCommCuDevice and ncclCommDump), buffer registration.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_priv.h"

struct init_all_rank {
  hetcclComm_t *comm;
  int nranks, rank, device_kind, device;
  hetcclUniqueId id;
  hetcclResult_t result;
  char error[256];
};

static void *init_all_thread(void *arg) {
  struct init_all_rank *a = arg;
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = a->device_kind;
  cfg.deviceId = a->device;
  a->result = hetcclCommInitRankConfig(a->comm, a->nranks, a->id, a->rank, &cfg);
  if (a->result != hetcclSuccess) snprintf(a->error, sizeof(a->error), "%s", hc_last_error());
  return NULL;
}

/* Each init runs on a thread of its own, since each waits for the others;
 * the first failure's text becomes the caller's. */
static hc_result_t api_CommInitAll(hetcclComm_t *comm, int ndev, const int *devlist) {
  if (comm == NULL || ndev < 1) return HC_FAIL(HC_ERR_ARG, "CommInitAll: comm %p, ndev %d", (void *)comm, ndev);
  hc_result_t r;
  hetcclUniqueId id;
  struct init_all_rank *ranks = NULL;
  pthread_t *threads = NULL;
  int kind, unused, started = 0;
  HC_TRY_GOTO((hc_result_t)hetcclGetDevice(&kind, &unused), r, out);
  HC_TRY_GOTO((hc_result_t)hetcclGetUniqueId(&id), r, out);
  HC_TRY_GOTO(hc_calloc(&ranks, (size_t)ndev, sizeof(*ranks), "InitAll ranks"), r, out);
  HC_TRY_GOTO(hc_calloc(&threads, (size_t)ndev, sizeof(*threads), "InitAll threads"), r, out);
  for (; started < ndev; started++) {
    ranks[started] = (struct init_all_rank){.comm = &comm[started],
                                            .nranks = ndev,
                                            .rank = started,
                                            .device_kind = kind,
                                            .device = devlist ? devlist[started] : started,
                                            .id = id};
    if (pthread_create(&threads[started], NULL, init_all_thread, &ranks[started]) != 0) {
      r = HC_FAIL(HC_ERR_SYSTEM, "CommInitAll: cannot start a thread: %s", strerror(errno));
      break;
    }
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < started && r == HC_OK; i++)
    if (ranks[i].result != hetcclSuccess) {
      hc_set_last_error(ranks[i].error);
      r = (hc_result_t)ranks[i].result;
    }
  for (int i = 0; i < started && r != HC_OK; i++)
    if (ranks[i].result == hetcclSuccess) hetcclCommDestroy(comm[i]);
out:
  free(ranks);
  free(threads);
  return r;
}

static hc_result_t api_CommDevice(const hetcclComm_t comm, int *kind, int *device) {
  HC_TRY(hc_comm_check(comm, "CommDevice"));
  if (kind == NULL || device == NULL) return HC_FAIL(HC_ERR_ARG, "CommDevice: kind or device is NULL");
  *kind = (int)comm->config.device_kind;
  *device = comm->config.device_id;
  return HC_OK;
}

static hc_result_t api_CommGetVendorComm(const hetcclComm_t comm, void **vendor_comm) {
  HC_TRY(hc_comm_check(comm, "CommGetVendorComm"));
  if (vendor_comm == NULL) return HC_FAIL(HC_ERR_ARG, "CommGetVendorComm: vendorComm is NULL");
  *vendor_comm = comm->vendor_comm;
  return HC_OK;
}

/* Registration is a hint in NCCL (zero-copy when possible); hetccl moves
 * any buffer without it, so a handle only records what was registered. */
struct hc_registration {
  hetcclComm_t comm;
  void *buff;
  size_t size;
  struct hc_registration *next;
};

/* Every live handle of the process: a handle is looked up here before it
 * is read, so that a stale or foreign pointer is refused, not followed. */
static struct hc_registration *registrations;
static pthread_mutex_t registrations_lock = PTHREAD_MUTEX_INITIALIZER;

static hc_result_t api_CommRegister(const hetcclComm_t comm, void *buff, size_t size, void **handle) {
  HC_TRY(hc_comm_check(comm, "CommRegister"));
  if (handle == NULL) return HC_FAIL(HC_ERR_ARG, "CommRegister: handle is NULL");
  struct hc_registration *reg;
  HC_TRY(hc_calloc(&reg, 1, sizeof(*reg), "registration"));
  pthread_mutex_lock(&registrations_lock);
  *reg = (struct hc_registration){comm, buff, size, registrations};
  registrations = reg;
  pthread_mutex_unlock(&registrations_lock);
  *handle = reg;
  return HC_OK;
}

static hc_result_t api_CommDeregister(const hetcclComm_t comm, void *handle) {
  HC_TRY(hc_comm_check(comm, "CommDeregister"));
  struct hc_registration *reg = NULL;
  pthread_mutex_lock(&registrations_lock);
  for (struct hc_registration **at = &registrations; *at; at = &(*at)->next)
    if (*at == handle && (*at)->comm == comm) {
      reg = *at;
      *at = reg->next;
      break;
    }
  pthread_mutex_unlock(&registrations_lock);
  if (reg == NULL) return HC_FAIL(HC_ERR_ARG, "CommDeregister: %p is not a registration of this comm", handle);
  free(reg);
  return HC_OK;
}

HC_EXPORT hetcclResult_t hetcclCommInitAll(hetcclComm_t *comm, int ndev, const int *devlist) {
  return (hetcclResult_t)api_CommInitAll(comm, ndev, devlist);
}

HC_EXPORT hetcclResult_t hetcclCommDevice(const hetcclComm_t comm, int *deviceKind, int *deviceId) {
  return (hetcclResult_t)api_CommDevice(comm, deviceKind, deviceId);
}

HC_EXPORT hetcclResult_t hetcclCommGetVendorComm(const hetcclComm_t comm, void **vendorComm) {
  return (hetcclResult_t)api_CommGetVendorComm(comm, vendorComm);
}

HC_EXPORT hetcclResult_t hetcclCommRegister(const hetcclComm_t comm, void *buff, size_t size, void **handle) {
  return (hetcclResult_t)api_CommRegister(comm, buff, size, handle);
}

HC_EXPORT hetcclResult_t hetcclCommDeregister(const hetcclComm_t comm, void *handle) {
  return (hetcclResult_t)api_CommDeregister(comm, handle);
}
