/* Device backend "host": ordinary memory, work done on the calling thread. */
#include <stdlib.h>

#include "device.h"

static hc_result_t host_load(void *ctx, struct hc_dev_caps *caps) {
  (void)ctx;
  *caps = (struct hc_dev_caps){0};
  return HC_OK;
}

static hc_result_t host_mem_alloc(void *ctx, int device, size_t n, void **p) {
  (void)ctx;
  (void)device;
  *p = aligned_alloc(4096, HC_DIV_UP(n ? n : 1, 4096) * 4096);
  if (*p == NULL) return HC_FAIL(HC_ERR_SYSTEM, "host: out of memory allocating %zu bytes", n);
  return HC_OK;
}

static hc_result_t host_mem_free(void *ctx, int device, void *p) {
  (void)ctx;
  (void)device;
  free(p);
  return HC_OK;
}

static hc_result_t host_copy(void *ctx, void *dst, const void *src, size_t n, hc_stream_t s) {
  (void)ctx;
  (void)s;
  if (dst != src && n) memmove(dst, src, n);
  return HC_OK;
}

static hc_result_t host_reduce(void *ctx, const struct hc_reduce_args *a, hc_stream_t s) {
  (void)ctx;
  (void)s;
  hc_host_reduce(a);
  return HC_OK;
}

static hc_result_t host_scale(void *ctx, const struct hc_scale_args *a, hc_stream_t s) {
  (void)ctx;
  (void)s;
  hc_host_scale(a);
  return HC_OK;
}

const struct hc_dev_ops hc_dev_host = {
    .size = sizeof(struct hc_dev_ops),
    .abi = HC_DEV_ABI,
    .name = "host",
    .kind = HC_MEM_HOST,
    .load = host_load,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .copy = host_copy,
    .reduce = host_reduce,
    .scale = host_scale,
};
