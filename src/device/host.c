/* Device backend "host": ordinary memory, work done on the calling thread,
 * with the stream's helper threads for large pieces (host_pool.c). */
#include <stdlib.h>
#include <string.h>

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

/* A copy or reduction from this size leaves the caches whatever its
 * stores do; stored non-temporally, its output costs one pass over memory
 * instead of two (a cached store reads its line first). glibc's memcpy
 * makes the same choice by size, but would see only one helper's part. */
#ifndef HC_HOST_NT_BYTES
#define HC_HOST_NT_BYTES (4u << 20)
#endif
/* A reduction stored non-temporally goes through a block of this size,
 * reduced in cache, then streamed out. */
#define HC_HOST_NT_BLOCK 16384

struct copy_job {
  char *dst;
  const char *src;
  bool nt;
};

static void copy_part(const void *job, size_t begin, size_t end) {
  const struct copy_job *j = job;
  if (j->nt) hc_copy_nt(j->dst + begin, j->src + begin, end - begin);
  else memcpy(j->dst + begin, j->src + begin, end - begin);
}

static hc_result_t host_copy(void *ctx, void *dst, const void *src, size_t n, hc_stream_t s) {
  (void)ctx;
  if (dst == src || n == 0) return HC_OK;
  const char *d = dst, *from = src;
  const bool overlap = d < from + n && from < d + n;
  if (!overlap && hc_host_pool_run(s, copy_part, &(struct copy_job){dst, src, n >= HC_HOST_NT_BYTES}, n, 1))
    return HC_OK;
  memmove(dst, src, n);
  return HC_OK;
}

/* Elements are independent (dst may equal a source, never overlap one
 * shifted), so a reduction or scaling splits into ranges of elements. */
struct reduce_job {
  const struct hc_reduce_args *args;
  bool nt;
};

static void reduce_part(const void *job, size_t begin, size_t end) {
  const struct reduce_job *j = job;
  struct hc_reduce_args a = *j->args;
  const size_t es = hc_dtype_size(a.dtype), at = begin * es;
  char *dst = (char *)a.dst + at;
  a.src0 = (const char *)a.src0 + at;
  a.src1 = (const char *)a.src1 + at;
  a.count = end - begin;
  if (!j->nt) {
    a.dst = dst;
    hc_host_reduce(&a);
    return;
  }
  _Alignas(64) unsigned char block[HC_HOST_NT_BLOCK];
  const size_t per_block = sizeof(block) / es, count = a.count;
  for (size_t i = 0; i < count; i += per_block) {
    struct hc_reduce_args b = a;
    b.dst = block;
    b.src0 = (const char *)a.src0 + i * es;
    b.src1 = (const char *)a.src1 + i * es;
    b.count = HC_MIN(per_block, count - i);
    hc_host_reduce(&b);
    hc_copy_nt(dst + i * es, block, b.count * es);
  }
}

static hc_result_t host_reduce(void *ctx, const struct hc_reduce_args *a, hc_stream_t s) {
  (void)ctx;
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT ||
      !hc_host_pool_run(s, reduce_part, &(struct reduce_job){a, a->count * hc_dtype_size(a->dtype) >= HC_HOST_NT_BYTES},
                        a->count, hc_dtype_size(a->dtype)))
    hc_host_reduce(a);
  return HC_OK;
}

static void scale_part(const void *job, size_t begin, size_t end) {
  struct hc_scale_args a = *(const struct hc_scale_args *)job;
  const size_t at = begin * hc_dtype_size(a.dtype);
  a.dst = (char *)a.dst + at;
  a.src = (const char *)a.src + at;
  a.count = end - begin;
  hc_host_scale(&a);
}

static hc_result_t host_scale(void *ctx, const struct hc_scale_args *a, hc_stream_t s) {
  (void)ctx;
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT || !hc_host_pool_run(s, scale_part, a, a->count, hc_dtype_size(a->dtype)))
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
