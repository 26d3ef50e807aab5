/*
 * A rank's GPU side in the collective tests that run ranks as threads
 * over the fake drivers (test_coll_shapes.c, test_coll_gdr.c): a stream,
 * a send and a receive buffer of device memory, and host <-> device copies
 * that have finished when they return.
 */
#ifndef HC_GPU_RANK_MEM_H_
#define HC_GPU_RANK_MEM_H_

#include "device/device.h"

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
  return gpu->set_device(device) == HC_OK && gpu->stream_create(device, &m->stream) == HC_OK &&
         gpu->mem_alloc(device, bytes, &m->send) == HC_OK && gpu->mem_alloc(device, bytes, &m->recv) == HC_OK;
}

static inline void rank_mem_close(struct rank_mem *m) {
  if (m->send) m->gpu->mem_free(m->device, m->send);
  if (m->recv) m->gpu->mem_free(m->device, m->recv);
  if (m->stream) m->gpu->stream_destroy(m->stream);
}

/* Host -> device (or back), after the work already on the stream. */
static inline void put(struct rank_mem *m, void *dst, const void *src, size_t bytes) {
  m->gpu->copy(dst, src, bytes, m->stream);
  m->gpu->stream_sync(m->stream);
}
static inline void get(struct rank_mem *m, void *dst, const void *src, size_t bytes) {
  m->gpu->stream_sync(m->stream);
  m->gpu->copy(dst, src, bytes, m->stream);
  m->gpu->stream_sync(m->stream);
}

#endif
