/*
 * A rank's GPU side in the collective tests that run ranks as threads
 * over the fake drivers (test_coll_shapes.c, test_coll_gdr.c): a stream,
 * a send and a receive buffer of device memory, and host <-> device copies
 * that have finished when they return.
 */
#ifndef HC_GPU_RANK_MEM_H_
#define HC_GPU_RANK_MEM_H_

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "hetccl.h"
#include "testutil.h"

struct rank_mem {
  const struct hc_dev_ops *gpu;
  int device;
  hc_stream_t stream;
  void *send, *recv;
  size_t bytes;
};

/* Makes device current on this thread and takes the stream and buffers;
 * false when one could not be had. */
static inline bool rank_mem_open(struct rank_mem *m, const struct hc_dev_ops *gpu, int device, size_t bytes) {
  *m = (struct rank_mem){.gpu = gpu, .device = device, .bytes = bytes};
  return hc_dev_set_device(gpu, device) == HC_OK && hc_dev_stream_create(gpu, device, &m->stream) == HC_OK &&
         hc_dev_mem_alloc(gpu, device, bytes, &m->send) == HC_OK &&
         hc_dev_mem_alloc(gpu, device, bytes, &m->recv) == HC_OK;
}

static inline void rank_mem_close(struct rank_mem *m) {
  if (m->send) hc_dev_mem_free(m->gpu, m->device, m->send);
  if (m->recv) hc_dev_mem_free(m->gpu, m->device, m->recv);
  if (m->stream) hc_dev_stream_destroy(m->gpu, m->stream);
}

/* A rank's stream and buffers on device, then its comm of n ranks on that
 * CUDA device in group group_name; false (everything released, the
 * failure checked) when one could not be had. */
static inline bool rank_comm_open(struct rank_mem *m, const struct hc_dev_ops *gpu, int device, size_t bytes,
                                  const char *group_name, int n, hetcclUniqueId id, int rank, hetcclComm_t *comm) {
  *comm = NULL;
  if (!CHECK(rank_mem_open(m, gpu, device, bytes), "device memory")) {
    rank_mem_close(m);
    return false;
  }
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = hetcclDeviceCuda;
  cfg.deviceId = device;
  cfg.groupName = group_name;
  if (CHECK_OK(hetcclCommInitRankConfig(comm, n, id, rank, &cfg))) return true;
  rank_mem_close(m);
  return false;
}

/* Host -> device (or back), after the work already on the stream. */
static inline void put(struct rank_mem *m, void *dst, const void *src, size_t bytes) {
  hc_dev_copy(m->gpu, dst, src, bytes, m->stream);
  hc_dev_stream_sync(m->gpu, m->stream);
}
static inline void get(struct rank_mem *m, void *dst, const void *src, size_t bytes) {
  hc_dev_stream_sync(m->gpu, m->stream);
  hc_dev_copy(m->gpu, dst, src, bytes, m->stream);
  hc_dev_stream_sync(m->gpu, m->stream);
}

/* Whether net/ib flushes receives into the fake GPU's memory: the rule
 * of docs/params.md written out here rather than asked of hetccl
 * (HETCCL_GDR_FLUSH=1 always, 0 never; AUTO, NCCL's rule: a compute
 * capability below 9.0, which the fake libcuda reports from FAKE_CUDA_CC,
 * default 90). */
static inline bool gdr_flush_expected(void) {
  const char *mode = getenv("HETCCL_GDR_FLUSH"), *cc = getenv("FAKE_CUDA_CC");
  if (mode && strcmp(mode, "1") == 0) return true;
  if (mode && strcmp(mode, "0") == 0) return false;
  return (cc && atoi(cc) > 0 ? atoi(cc) : 90) < 90;
}

#endif
