/*
 * Shared by the tests of the GPU reduction kernels (test_gpu_kernels.c on
 * the host, test_device_gpu.c on a GPU): operand generators and the
 * comparison rule.
 *
 * Operands: random bit patterns, with the values that find rounding and
 * special-case bugs mixed in (+-0, +-inf, NaNs with payloads and signs,
 * smallest and largest subnormals and normals, fp8's saturation edges);
 * every narrow pattern appears. Deterministic per (seed, dtype, index).
 *
 * Comparison: the bits of hc_host_reduce / hc_host_scale, except that where
 * the host's result of SUM, PROD or a scale (arithmetic) is a NaN, any NaN
 * passes: the NaN a float unit makes (payload, sign) is the hardware's
 * (x86 returns an operand's or -qNaN, NVIDIA +0x7fffffff), and narrowing
 * keeps its sign. MAX / MIN only select, so they must match to the bit.
 */
#ifndef HC_GPU_TEST_COMMON_H_
#define HC_GPU_TEST_COMMON_H_

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device/device.h"

static inline uint64_t gt_mix(uint64_t x) { /* splitmix64 */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Element i of operand `which` for dtype t, as raw bits. */
static inline void gt_elem(enum hc_dtype t, uint64_t seed, int which, size_t i, void *out) {
  static const uint16_t f16_special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x0001,
                                         0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x3c01, 0x3bff};
  static const uint16_t bf16_special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0001,
                                          0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0x3f81, 0x3f7f};
  static const uint32_t f32_special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                         0xffc00001, 0x7f800001, 0x00000001, 0x80000001, 0x007fffff,
                                         0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0x3f800001,
                                         0x477fe000, 0x43e00000, 0x47600000, 0x33800000, 0x3b000000};
  static const uint64_t f64_special[] = {0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                         0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000001ull,
                                         0x0000000000000001ull, 0x000fffffffffffffull, 0x7fefffffffffffffull,
                                         0x3ff0000000000000ull, 0x3ff0000000000001ull};
  uint64_t r = gt_mix(seed * 0x100000001b3ull ^ ((uint64_t)which << 56) ^ ((uint64_t)t << 48) ^ i);
  uint64_t pick = r >> 58; /* 0..63 */
  size_t sz = hc_dtype_size(t);
  uint64_t v = gt_mix(r);
  switch (t) {
  case HC_FLOAT16:
    if (pick < 8) v = f16_special[v % HC_ARRAY_LEN(f16_special)];
    else if (pick < 40) v = (v & 0x8000) | (0x3000 + (v >> 16) % 0x1800); /* near 1 */
    break;
  case HC_BFLOAT16:
    if (pick < 8) v = bf16_special[v % HC_ARRAY_LEN(bf16_special)];
    else if (pick < 40) v = (v & 0x8000) | (0x3c00 + (v >> 16) % 0x0700);
    break;
  case HC_FLOAT32:
    if (pick < 8) {
      v = f32_special[v % HC_ARRAY_LEN(f32_special)];
    } else if (pick < 48) { /* ordinary values of mixed magnitude */
      float f = (float)((int64_t)(v >> 40) - (1 << 23)) * ldexpf(1.0f, (int)(v % 40) - 30);
      uint32_t u;
      memcpy(&u, &f, 4);
      v = u;
    }
    break;
  case HC_FLOAT64:
    if (pick < 8) {
      v = f64_special[v % HC_ARRAY_LEN(f64_special)];
    } else if (pick < 48) {
      double d = (double)((int64_t)(v >> 20) - (1ll << 43)) * ldexp(1.0, (int)(v % 80) - 60);
      memcpy(&v, &d, 8);
    }
    break;
  case HC_FP8_E4M3:
  case HC_FP8_E5M2:
    if (pick < 4) v = (pick & 1 ? 0x80 : 0) | (pick & 2 ? 0x7f : 0x7e); /* NaN / max */
    break;
  default:
    if (pick < 6) { /* integer edges: 0, -1, min, max, 1, 2 */
      static const uint64_t edges[] = {0, ~0ull, 0x80ull << 56, ~(0x80ull << 56), 1, 2};
      v = edges[pick];
      if (sz < 8) { /* min / max of the narrower type */
        if (pick == 2) v = 1ull << (sz * 8 - 1);
        if (pick == 3) v = (1ull << (sz * 8 - 1)) - 1;
      }
    } else if (pick < 24) {
      v %= 17; /* small products stay exact for a while */
    }
    break;
  }
  memcpy(out, &v, sz); /* little-endian: the low bytes */
}

static inline void gt_fill(enum hc_dtype t, uint64_t seed, int which, void *buf, size_t count) {
  size_t sz = hc_dtype_size(t);
  for (size_t i = 0; i < count; i++) gt_elem(t, seed, which, i, (char *)buf + i * sz);
}

static inline bool gt_is_nan(enum hc_dtype t, const void *p) {
  uint64_t v = 0;
  memcpy(&v, p, hc_dtype_size(t));
  switch (t) {
  case HC_FLOAT16: return (v & 0x7c00) == 0x7c00 && (v & 0x3ff);
  case HC_BFLOAT16: return (v & 0x7f80) == 0x7f80 && (v & 0x7f);
  case HC_FLOAT32: return (v & 0x7f800000u) == 0x7f800000u && (v & 0x7fffffu);
  case HC_FLOAT64: return (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (v & 0xfffffffffffffull);
  case HC_FP8_E4M3: return (v & 0x7f) == 0x7f;
  case HC_FP8_E5M2: return (v & 0x7c) == 0x7c && (v & 3);
  default: return false;
  }
}

/* Index of the first element of got that does not pass against want, or
 * count when all do. arith: SUM, PROD or a scale (any NaN for a NaN). */
static inline size_t gt_first_mismatch(enum hc_dtype t, bool arith, const void *got, const void *want, size_t count) {
  size_t sz = hc_dtype_size(t);
  for (size_t i = 0; i < count; i++) {
    const char *g = (const char *)got + i * sz, *w = (const char *)want + i * sz;
    if (memcmp(g, w, sz) == 0) continue;
    if (arith && gt_is_nan(t, w) && gt_is_nan(t, g)) continue;
    return i;
  }
  return count;
}

static inline void gt_hex(enum hc_dtype t, const void *p, char *buf, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, hc_dtype_size(t));
  snprintf(buf, n, "0x%0*llx", (int)hc_dtype_size(t) * 2, (unsigned long long)v);
}

/* Scale factors (raw bits of one element) and divisors to try. */
static inline void gt_factor(enum hc_dtype t, int k, uint8_t out[8]) {
  uint64_t v;
  memset(out, 0, 8);
  switch (t) {
  case HC_FLOAT16: {
    static const uint16_t f[] = {0x3c00, 0x3555, 0xc200, 0x0001, 0x7bff, 0x7e00};
    v = f[k % 6];
    break;
  }
  case HC_BFLOAT16: {
    static const uint16_t f[] = {0x3f80, 0x3eab, 0xc040, 0x0001, 0x7f7f, 0x7fc0};
    v = f[k % 6];
    break;
  }
  case HC_FLOAT32: {
    static const uint32_t f[] = {0x3f800000, 0x3eaaaaab, 0xc0400000, 0x00000001, 0x7f7fffff, 0x7fc00000};
    v = f[k % 6];
    break;
  }
  case HC_FLOAT64: {
    static const uint64_t f[] = {0x3ff0000000000000ull, 0x3fd5555555555555ull, 0xc008000000000000ull, 1ull,
                                 0x7fefffffffffffffull, 0x7ff8000000000000ull};
    v = f[k % 6];
    break;
  }
  case HC_FP8_E4M3: {
    static const uint8_t f[] = {0x38, 0x2b, 0xc4, 0x01, 0x7e, 0x7f};
    v = f[k % 6];
    break;
  }
  case HC_FP8_E5M2: {
    static const uint8_t f[] = {0x3c, 0x35, 0xc2, 0x01, 0x7b, 0x7f};
    v = f[k % 6];
    break;
  }
  default: {
    static const uint64_t f[] = {1, 3, ~0ull, 0, 0x80, 0x12345678deadbeefull};
    v = f[k % 6];
    break;
  }
  }
  memcpy(out, &v, hc_dtype_size(t));
}
#define GT_NFACTORS 6

static inline uint64_t gt_divisor(int k) {
  static const uint64_t d[] = {1, 3, 7, 0, 1000003, 1ull << 63, ~0ull};
  return d[k % 7];
}
#define GT_NDIVISORS 7

#endif
