/*
 * device: one backend per device kind (host today; cuda and hip later) behind
 * an ops table: pointer kind, allocation, copies and reductions for every
 * datatype x op. Knows nothing of transports or plans.
 */
#ifndef HC_DEVICE_H_
#define HC_DEVICE_H_

#include "../util/util.h"

enum hc_mem_kind { HC_MEM_HOST = 0, HC_MEM_CUDA = 1, HC_MEM_HIP = 2, HC_MEM_KIND_COUNT };

/* Opaque device stream (cudaStream_t, hipStream_t); NULL for host. */
typedef void *hc_stream_t;

/* dst[i] = src0[i] op src1[i] for i < count; dst may equal src0 or src1.
 * op is SUM, PROD, MAX or MIN (AVG and PREMULSUM are sums plus a scale). */
struct hc_reduce_args {
  void *dst;
  const void *src0, *src1;
  size_t count;
  enum hc_dtype dtype;
  enum hc_redop op;
};

/* Scaling, for PREMULSUM (multiply by one element of dtype) and AVG
 * (divide by an element count). dst may equal src. */
enum hc_scale_kind { HC_SCALE_MUL, HC_SCALE_DIV };
struct hc_scale_args {
  void *dst;
  const void *src;
  size_t count;
  enum hc_dtype dtype;
  enum hc_scale_kind kind;
  uint8_t factor[8];  /* HC_SCALE_MUL: one element of dtype */
  uint64_t divisor;   /* HC_SCALE_DIV */
};

#define HC_DEV_ABI 1
struct hc_dev_ops {
  uint32_t size, abi; /* sizeof and HC_DEV_ABI the backend was built with */
  const char *name;   /* "host", "cuda", "hip" */
  enum hc_mem_kind kind;
  /* dlopen and probe; an error turns only this backend off. */
  hc_result_t (*load)(void);
  hc_result_t (*mem_alloc)(int device, size_t n, void **p);
  hc_result_t (*mem_free)(int device, void *p);
  /* Ordered on s; completes before return for the host backend. */
  hc_result_t (*copy)(void *dst, const void *src, size_t n, hc_stream_t s);
  hc_result_t (*reduce)(const struct hc_reduce_args *a, hc_stream_t s);
  hc_result_t (*scale)(const struct hc_scale_args *a, hc_stream_t s);
}; /* append only */

extern const struct hc_dev_ops hc_dev_host;

/* The backend for a memory kind, or NULL when it is not loaded. */
const struct hc_dev_ops *hc_dev_get(enum hc_mem_kind kind);

/* Host kernels, exposed for tests and tools. Low-precision types (fp16,
 * bf16, fp8) are widened to float per element and rounded back to nearest
 * even. fp8 conversions saturate to the largest finite value (as NCCL's
 * __nv_cvt_float_to_fp8 with __NV_SATFINITE); NaN stays NaN. */
void hc_host_reduce(const struct hc_reduce_args *a);
void hc_host_scale(const struct hc_scale_args *a);
float hc_half_to_float(uint16_t h);
uint16_t hc_float_to_half(float f);
float hc_bf16_to_float(uint16_t b);
uint16_t hc_float_to_bf16(float f);
float hc_fp8e4m3_to_float(uint8_t v);
uint8_t hc_float_to_fp8e4m3(float f);
float hc_fp8e5m2_to_float(uint8_t v);
uint8_t hc_float_to_fp8e5m2(float f);
/* One element of dtype at p, as double (tests, scalars). */
double hc_dtype_load(enum hc_dtype t, const void *p);
/* Stores v into one element of dtype at p, rounding and saturating. */
void hc_dtype_store(enum hc_dtype t, void *p, double v);

#endif
