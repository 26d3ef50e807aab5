/*
 * device/host_reduce: the host backend's arithmetic. Element-wise reduction
 * (SUM, PROD, MAX, MIN) and scaling (PREMULSUM's multiply, AVG's divide) for
 * every datatype, and the low-precision conversions they need. Knows nothing
 * of streams: the host backend and the staged paths of the GPU backends call
 * these on host memory that is ready.
 *
 * Semantics, shared with what NCCL computes on the GPU:
 * - Integers wrap modulo 2^bits. SUM and PROD run in the unsigned type of the
 *   same width (identical bits for two's complement, and no signed-overflow
 *   UB); MAX and MIN compare in the declared signedness.
 * - fp16, bf16 and fp8 are widened to float per element, combined in float
 *   and rounded back to nearest-even once per step, as CUDA's
 *   __float2half(__half2float(a) + __half2float(b)). Float carries more than
 *   twice their precision plus two bits, so for +, * and / this equals
 *   rounding the exact result once (what __hadd / __hmul give).
 * - fp16 and bf16 overflow to inf (IEEE). fp8 saturates to its largest finite
 *   value, inf included (__NV_SATFINITE); NaN stays NaN.
 * - Float MAX/MIN follow fmaxf/fminf (what NCCL's kernels call): when one
 *   operand is NaN the other is returned, so a NaN only survives when both
 *   are NaN. The sign of an equal pair of zeros is unspecified, as fmaxf's.
 *
 * The fp16 and fp8 conversions never compute with denormal floats, so a
 * caller that set flush-to-zero / denormals-are-zero
 * (torch.set_flush_denormal) still gets their subnormals exactly. (bf16
 * subnormals are float subnormals and follow that mode, as on the GPU.)
 * Selects are masks, not branches, so the conversion loops vectorise.
 *
 * Invariant: dst may equal a source pointer exactly, never overlap it
 * partially. The loops are written without restrict; gcc's runtime alias
 * check lets the exact-alias case through to the vector path.
 */
#include "device.h"

/* ---- bit casts and rounding ---- */

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* c ? x : y for c in {0, 1}, as masks: a ternary whose arm holds a float
 * operation becomes a branch (gcc will not speculate a maybe-trapping float
 * op), and a branch stops the loop from vectorising. */
static inline uint32_t sel(uint32_t c, uint32_t x, uint32_t y) {
  uint32_t m = 0u - c;
  return (x & m) | (y & ~m);
}

/*
 * Rounds a non-NaN float magnitude (bits a, sign clear) to nearest even in a
 * binary format with m_bits mantissa bits and exponent bias `bias`, narrower
 * than float in both fields. Returns (exponent << m_bits | mantissa), which
 * may lie past the format's largest finite value: the caller saturates or
 * turns it into inf. A mantissa that rounds up carries into the exponent,
 * which is exactly the next binade (or min-normal from the subnormal side).
 */
static inline uint32_t narrow_mag(uint32_t a, uint32_t m_bits, uint32_t bias) {
  /* Normal target: rebias the exponent, drop 23 - m_bits bits, ties even. */
  uint32_t drop = 23u - m_bits;
  uint32_t r = a - ((127u - bias) << 23);
  uint32_t normal = (r + (1u << (drop - 1)) - 1u + ((r >> drop) & 1u)) >> drop;
  /* Subnormal target: adding C, whose ulp is the smallest subnormal, makes
   * the float adder round a to a multiple of that ulp (the low bits of the
   * sum are the result). Shift-free, so it vectorises without AVX2; the sum
   * is a normal float, so flush-to-zero cannot touch it, and a float
   * subnormal a (zeroed by denormals-are-zero or not) rounds to 0 either way.
   * It relies on round-to-nearest, as the reduction's own float ops do. */
  float magic = u2f((151u - bias - m_bits) << 23);
  uint32_t sub = f2u(u2f(a) + magic) - f2u(magic);
  return sel(a < ((128u - bias) << 23), sub, normal);
}

/* ---- fp16: 1.5.10, bias 15 ---- */

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t normal = ((e + 112u) << 23) | (m << 13);
  uint32_t special = 0x7f800000u | (m << 13); /* inf, NaN keeps its payload */
  /* m * 2^-24 is a normal float, exact, computed without denormals. */
  uint32_t sub = f2u((float)(int32_t)m * 0x1p-24f);
  return u2f(sign | sel(e == 0, sub, sel(e == 31, special, normal)));
}

static inline uint16_t float_to_half(float f) {
  uint32_t u = f2u(f), a = u & 0x7fffffffu;
  uint32_t mag = narrow_mag(a, 10, 15);
  mag = sel(mag > 0x7c00u, 0x7c00u, mag); /* overflow (inf included) -> inf */
  mag = sel(a > 0x7f800000u, 0x7e00u, mag);
  return (uint16_t)(((u >> 16) & 0x8000u) | mag);
}

/* ---- bf16: the top half of a float ---- */

static inline float bf16_to_float(uint16_t b) { return u2f((uint32_t)b << 16); }

static inline uint16_t float_to_bf16(float f) {
  uint32_t u = f2u(f);
  /* Same exponent field as float, so subnormals and overflow to inf fall out
   * of one rounding add; the add cannot reach the sign bit. */
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u; /* quiet, keeps sign and top payload */
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- fp8 e4m3 (OCP e4m3fn): 1.4.3, bias 7, no inf, S.1111.111 is NaN ---- */

#define FP8E4M3_MAX_MAG 0x7eu /* 448 */
#define FP8E5M2_MAX_MAG 0x7bu /* 57344 */
#define FP8_NAN 0x7fu

static inline float fp8e4m3_to_float(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
  uint32_t normal = ((e + 120u) << 23) | (m << 20);
  uint32_t sub = f2u((float)(int32_t)m * 0x1p-9f);
  return u2f(sign | sel((v & 0x7fu) == 0x7fu, 0x7fc00000u, sel(e == 0, sub, normal)));
}

/* Both fp8 formats saturate (no inf) and keep the sign of a NaN;
 * narrow_mag rounds to mbits of mantissa at the bias. */
static inline uint8_t float_to_fp8(float f, uint32_t mbits, uint32_t bias, uint32_t max_mag) {
  uint32_t u = f2u(f), a = u & 0x7fffffffu;
  uint32_t mag = narrow_mag(a, mbits, bias);
  mag = sel(mag > max_mag, max_mag, mag);
  mag = sel(a > 0x7f800000u, FP8_NAN, mag);
  return (uint8_t)(((u >> 24) & 0x80u) | mag);
}

static inline uint8_t float_to_fp8e4m3(float f) { return float_to_fp8(f, 3, 7, FP8E4M3_MAX_MAG); }

/* ---- fp8 e5m2: 1.5.2, bias 15, IEEE-like: the top byte of an fp16 ---- */

static inline float fp8e5m2_to_float(uint8_t v) { return half_to_float((uint16_t)(v << 8)); }

/* Not through fp16: rounding twice would break ties. */
static inline uint8_t float_to_fp8e5m2(float f) { return float_to_fp8(f, 2, 15, FP8E5M2_MAX_MAG); }

float hc_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t hc_float_to_half(float f) { return float_to_half(f); }
float hc_bf16_to_float(uint16_t b) { return bf16_to_float(b); }
uint16_t hc_float_to_bf16(float f) { return float_to_bf16(f); }
float hc_fp8e4m3_to_float(uint8_t v) { return fp8e4m3_to_float(v); }
uint8_t hc_float_to_fp8e4m3(float f) { return float_to_fp8e4m3(f); }
float hc_fp8e5m2_to_float(uint8_t v) { return fp8e5m2_to_float(v); }
uint8_t hc_float_to_fp8e5m2(float f) { return float_to_fp8e5m2(f); }

/* ---- reduction kernels: one loop per (storage type, op) ---- */

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_IMAX(x, y) ((x) > (y) ? (x) : (y))
#define OP_IMIN(x, y) ((x) < (y) ? (x) : (y))
/* fmaxf/fminf: a NaN operand yields the other one. */
#define OP_FMAX(x, y) (((x) > (y) || (y) != (y)) ? (x) : (y))
#define OP_FMIN(x, y) (((x) < (y) || (y) != (y)) ? (x) : (y))
#define CV_ID(x) (x)

typedef void (*reduce_fn)(void *dst, const void *src0, const void *src1, size_t n);

/* T: storage type; CT: compute type; LOAD: T -> CT; STORE: CT -> T. */
#define DEF_REDUCE(name, T, CT, LOAD, OP, STORE)                                 \
  static void name(void *dst_, const void *src0_, const void *src1_, size_t n) { \
    T *dst = dst_;                                                               \
    const T *src0 = src0_, *src1 = src1_;                                        \
    for (size_t i = 0; i < n; i++) {                                             \
      CT x = LOAD(src0[i]), y = LOAD(src1[i]);                                   \
      dst[i] = STORE(OP(x, y));                                                  \
    }                                                                            \
  }

/* Integers: SUM and PROD of signed types reuse the unsigned kernel. uint8
 * promotes to int, where 255 * 255 cannot overflow. */
#define DEF_REDUCE_INT(tag, ST, UT)                              \
  DEF_REDUCE(reduce_##tag##_sum, UT, UT, CV_ID, OP_SUM, CV_ID)   \
  DEF_REDUCE(reduce_##tag##_prod, UT, UT, CV_ID, OP_PROD, CV_ID) \
  DEF_REDUCE(reduce_##tag##_max, ST, ST, CV_ID, OP_IMAX, CV_ID)  \
  DEF_REDUCE(reduce_##tag##_min, ST, ST, CV_ID, OP_IMIN, CV_ID)
#define DEF_REDUCE_FLOAT(tag, T, CT, LOAD, STORE)              \
  DEF_REDUCE(reduce_##tag##_sum, T, CT, LOAD, OP_SUM, STORE)   \
  DEF_REDUCE(reduce_##tag##_prod, T, CT, LOAD, OP_PROD, STORE) \
  DEF_REDUCE(reduce_##tag##_max, T, CT, LOAD, OP_FMAX, STORE)  \
  DEF_REDUCE(reduce_##tag##_min, T, CT, LOAD, OP_FMIN, STORE)

DEF_REDUCE_INT(i8, int8_t, uint8_t)
DEF_REDUCE_INT(u8, uint8_t, uint8_t)
DEF_REDUCE_INT(i32, int32_t, uint32_t)
DEF_REDUCE_INT(u32, uint32_t, uint32_t)
DEF_REDUCE_INT(i64, int64_t, uint64_t)
DEF_REDUCE_INT(u64, uint64_t, uint64_t)
DEF_REDUCE_FLOAT(f16, uint16_t, float, half_to_float, float_to_half)
DEF_REDUCE_FLOAT(f32, float, float, CV_ID, CV_ID)
DEF_REDUCE_FLOAT(f64, double, double, CV_ID, CV_ID)
DEF_REDUCE_FLOAT(bf16, uint16_t, float, bf16_to_float, float_to_bf16)
DEF_REDUCE_FLOAT(e4m3, uint8_t, float, fp8e4m3_to_float, float_to_fp8e4m3)
DEF_REDUCE_FLOAT(e5m2, uint8_t, float, fp8e5m2_to_float, float_to_fp8e5m2)

#define REDUCE_ROW(tag) \
  { reduce_##tag##_sum, reduce_##tag##_prod, reduce_##tag##_max, reduce_##tag##_min }

/* Columns follow enum hc_redop up to MIN: SUM, PROD, MAX, MIN. */
static const reduce_fn reduce_table[HC_DTYPE_COUNT][HC_AVG] = {
    [HC_INT8] = REDUCE_ROW(i8),       [HC_UINT8] = REDUCE_ROW(u8),      [HC_INT32] = REDUCE_ROW(i32),
    [HC_UINT32] = REDUCE_ROW(u32),    [HC_INT64] = REDUCE_ROW(i64),     [HC_UINT64] = REDUCE_ROW(u64),
    [HC_FLOAT16] = REDUCE_ROW(f16),   [HC_FLOAT32] = REDUCE_ROW(f32),   [HC_FLOAT64] = REDUCE_ROW(f64),
    [HC_BFLOAT16] = REDUCE_ROW(bf16), [HC_FP8_E4M3] = REDUCE_ROW(e4m3), [HC_FP8_E5M2] = REDUCE_ROW(e5m2),
};

void hc_host_reduce(const struct hc_reduce_args *a) {
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT || (unsigned)a->op >= HC_AVG) {
    /* Callers validate; AVG and PREMULSUM arrive here as SUM plus a scale. */
    HC_WARN_ONCE(HC_DEV, "host reduce: unsupported dtype %d / op %d ignored", (int)a->dtype, (int)a->op);
    return;
  }
  if (a->count == 0) return;
  reduce_table[a->dtype][a->op](a->dst, a->src0, a->src1, a->count);
}

/* ---- scaling ---- */

/* The factor is one element of T, loaded like the data. */
#define DEF_SCALE_MUL(name, T, CT, LOAD, STORE)                              \
  static void name(void *dst_, const void *src_, size_t n, const void *f_) { \
    T *dst = dst_, fe;                                                       \
    const T *src = src_;                                                     \
    memcpy(&fe, f_, sizeof(fe));                                             \
    const CT f = LOAD(fe);                                                   \
    for (size_t i = 0; i < n; i++) dst[i] = STORE(LOAD(src[i]) * f);         \
  }
/* DT: the type the quotient is computed in (wide enough for the divisor). */
#define DEF_SCALE_DIV(name, T, DT, LOAD, STORE)                             \
  static void name(void *dst_, const void *src_, size_t n, DT d) {          \
    T *dst = dst_;                                                          \
    const T *src = src_;                                                    \
    for (size_t i = 0; i < n; i++) dst[i] = (T)STORE((DT)LOAD(src[i]) / d); \
  }

/* Signed multiply wraps through the unsigned kernel, as in reduce. */
DEF_SCALE_MUL(mul_u8, uint8_t, uint32_t, CV_ID, CV_ID)
DEF_SCALE_MUL(mul_u32, uint32_t, uint32_t, CV_ID, CV_ID)
DEF_SCALE_MUL(mul_u64, uint64_t, uint64_t, CV_ID, CV_ID)
DEF_SCALE_MUL(mul_f16, uint16_t, float, half_to_float, float_to_half)
DEF_SCALE_MUL(mul_f32, float, float, CV_ID, CV_ID)
DEF_SCALE_MUL(mul_f64, double, double, CV_ID, CV_ID)
DEF_SCALE_MUL(mul_bf16, uint16_t, float, bf16_to_float, float_to_bf16)
DEF_SCALE_MUL(mul_e4m3, uint8_t, float, fp8e4m3_to_float, float_to_fp8e4m3)
DEF_SCALE_MUL(mul_e5m2, uint8_t, float, fp8e5m2_to_float, float_to_fp8e5m2)

/* Integer quotients truncate toward zero (C division); narrow signed types
 * divide in int64, where every quotient of theirs is exact. */
DEF_SCALE_DIV(div_i8, int8_t, int64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_u8, uint8_t, uint64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_i32, int32_t, int64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_u32, uint32_t, uint64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_i64, int64_t, int64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_u64, uint64_t, uint64_t, CV_ID, CV_ID)
DEF_SCALE_DIV(div_f16, uint16_t, float, half_to_float, float_to_half)
DEF_SCALE_DIV(div_f32, float, float, CV_ID, CV_ID)
DEF_SCALE_DIV(div_f64, double, double, CV_ID, CV_ID)
DEF_SCALE_DIV(div_bf16, uint16_t, float, bf16_to_float, float_to_bf16)
DEF_SCALE_DIV(div_e4m3, uint8_t, float, fp8e4m3_to_float, float_to_fp8e4m3)
DEF_SCALE_DIV(div_e5m2, uint8_t, float, fp8e5m2_to_float, float_to_fp8e5m2)

/* int64 by a divisor of 2^63 or more: every quotient is 0 except
 * INT64_MIN / 2^63 = -1; the divisor has no int64 form to divide by. */
static void div_i64_huge(int64_t *dst, const int64_t *src, size_t n, uint64_t d) {
  for (size_t i = 0; i < n; i++) dst[i] = (src[i] == INT64_MIN && d == (1ull << 63)) ? -1 : 0;
}

typedef void (*mul_fn)(void *dst, const void *src, size_t n, const void *factor);

static const mul_fn mul_table[HC_DTYPE_COUNT] = {
    [HC_INT8] = mul_u8,     [HC_UINT8] = mul_u8,      [HC_INT32] = mul_u32,     [HC_UINT32] = mul_u32,
    [HC_INT64] = mul_u64,   [HC_UINT64] = mul_u64,    [HC_FLOAT16] = mul_f16,   [HC_FLOAT32] = mul_f32,
    [HC_FLOAT64] = mul_f64, [HC_BFLOAT16] = mul_bf16, [HC_FP8_E4M3] = mul_e4m3, [HC_FP8_E5M2] = mul_e5m2,
};

static void scale_div(const struct hc_scale_args *a) {
  /* Integer division by 0 would trap: ints then keep their value (divide by
   * 1); floats follow IEEE (inf or NaN). AVG never divides by 0. */
  uint64_t d = a->divisor;
  uint64_t di = d == 0 ? 1 : d;
  int64_t ds = di > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)di; /* exact for int8/int32 */
  switch (a->dtype) {
  case HC_INT8: div_i8(a->dst, a->src, a->count, ds); break;
  case HC_UINT8: div_u8(a->dst, a->src, a->count, di); break;
  case HC_INT32: div_i32(a->dst, a->src, a->count, ds); break;
  case HC_UINT32: div_u32(a->dst, a->src, a->count, di); break;
  case HC_INT64:
    if (di > (uint64_t)INT64_MAX) div_i64_huge(a->dst, a->src, a->count, di);
    else div_i64(a->dst, a->src, a->count, ds);
    break;
  case HC_UINT64: div_u64(a->dst, a->src, a->count, di); break;
  case HC_FLOAT16: div_f16(a->dst, a->src, a->count, (float)d); break;
  case HC_FLOAT32: div_f32(a->dst, a->src, a->count, (float)d); break;
  case HC_FLOAT64: div_f64(a->dst, a->src, a->count, (double)d); break;
  case HC_BFLOAT16: div_bf16(a->dst, a->src, a->count, (float)d); break;
  case HC_FP8_E4M3: div_e4m3(a->dst, a->src, a->count, (float)d); break;
  case HC_FP8_E5M2: div_e5m2(a->dst, a->src, a->count, (float)d); break;
  default: break;
  }
}

void hc_host_scale(const struct hc_scale_args *a) {
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT || (a->kind != HC_SCALE_MUL && a->kind != HC_SCALE_DIV)) {
    HC_WARN_ONCE(HC_DEV, "host scale: unsupported dtype %d / kind %d ignored", (int)a->dtype, (int)a->kind);
    return;
  }
  if (a->count == 0) return;
  if (a->kind == HC_SCALE_MUL) mul_table[a->dtype](a->dst, a->src, a->count, a->factor);
  else scale_div(a);
}

/* ---- single elements ---- */

double hc_dtype_load(enum hc_dtype t, const void *p) {
  union {
    int8_t i8;
    uint8_t u8;
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    uint16_t u16;
    float f;
    double d;
  } v;
  size_t n = hc_dtype_size(t);
  if (n == 0) return 0.0;
  memcpy(&v, p, n);
  switch (t) {
  case HC_INT8: return v.i8;
  case HC_UINT8: return v.u8;
  case HC_INT32: return v.i32;
  case HC_UINT32: return v.u32;
  case HC_INT64: return (double)v.i64;
  case HC_UINT64: return (double)v.u64;
  case HC_FLOAT16: return half_to_float(v.u16);
  case HC_FLOAT32: return v.f;
  case HC_FLOAT64: return v.d;
  case HC_BFLOAT16: return bf16_to_float(v.u16);
  case HC_FP8_E4M3: return fp8e4m3_to_float(v.u8);
  case HC_FP8_E5M2: return fp8e5m2_to_float(v.u8);
  default: return 0.0;
  }
}

/* Truncates toward zero into int64, saturating at its ends (the conversion
 * would be UB past them); NaN gives 0. */
static int64_t double_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 0x1p63) return INT64_MAX;
  if (v <= -0x1p63) return INT64_MIN;
  return (int64_t)v;
}

/* v rounded to float with round-to-odd: when inexact, the neighbour whose
 * last mantissa bit is 1. Rounding that float to a format of at most 22
 * significant bits then equals rounding v directly (no double-rounding
 * error on ties); out-of-range v becomes +-FLT_MAX, which still overflows. */
static float double_to_float_odd(double v) {
  float f = (float)v;
  if (v == v && (double)f != v) {
    uint32_t u = f2u(f);
    /* Sign-magnitude bits: +1 grows the magnitude, -1 shrinks it. */
    if ((u & 1u) == 0) u += (v < 0 ? -v : v) > (f < 0 ? -(double)f : (double)f) ? 1u : (uint32_t)-1;
    f = u2f(u);
  }
  return f;
}

/* Integers: v truncated toward zero, through int64 (negative v) or uint64,
 * which saturate at their own ends; narrower types then keep the low bits
 * (wrap), as a C cast of that 64-bit value would. Unsigned types take a
 * negative v modulo 2^bits (-1.0 stores 0xff in a uint8). Floats round to
 * nearest even, fp16/bf16 overflow to inf, fp8 saturates. */
void hc_dtype_store(enum hc_dtype t, void *p, double v) {
  uint64_t bits;
  switch (t) {
  case HC_INT8:
  case HC_INT32:
  case HC_INT64: bits = (uint64_t)double_to_i64(v); break;
  case HC_UINT8:
  case HC_UINT32:
  case HC_UINT64:
    if (!(v >= 0.0)) bits = (uint64_t)double_to_i64(v);
    else bits = v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
    break;
  case HC_FLOAT16: bits = float_to_half(double_to_float_odd(v)); break;
  case HC_FLOAT32: bits = f2u((float)v); break;
  case HC_FLOAT64: memcpy(&bits, &v, 8); break;
  case HC_BFLOAT16: bits = float_to_bf16(double_to_float_odd(v)); break;
  case HC_FP8_E4M3: bits = float_to_fp8e4m3(double_to_float_odd(v)); break;
  case HC_FP8_E5M2: bits = float_to_fp8e5m2(double_to_float_odd(v)); break;
  default: return;
  }
  /* Little-endian hosts only, as the rest of hetccl: the low bytes first. */
  memcpy(p, &bits, hc_dtype_size(t));
}
