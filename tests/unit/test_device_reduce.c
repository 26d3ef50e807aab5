/*
 * Host reduction kernels and datatype conversions (device/host_reduce.c)
 * against an independent reference:
 * - the narrow float formats are decoded from their definition
 *   (sign * 2^(e-bias) * (1 + m/2^mbits), subnormals, specials), and
 *   rounding is a search for the nearest value in the table of every finite
 *   value, ties to the even pattern, with the format's overflow rule;
 * - integer results are computed exactly in __int128 and reduced mod 2^bits;
 * - float results are computed in double and rounded once to float (exact
 *   for +, *, / of floats, since double has more than 2 * 24 + 2 bits).
 * Run: ./test_device_reduce (no arguments; deterministic seed).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/device.h"
#include "testutil.h"

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h> /* _mm_setcsr: flush-to-zero / denormals-are-zero */
#define HAVE_MXCSR 1
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- narrow float formats, from their definition ---- */

struct fmt {
  enum hc_dtype dt;
  int bits, ebits, mbits, bias;
  bool ieee;        /* top exponent is inf (m == 0) / NaN; else only all-ones is NaN */
  bool saturate;    /* overflow -> largest finite (fp8, SATFINITE), else -> inf */
  uint32_t max_mag; /* pattern of the largest finite magnitude */
  double *vals;     /* vals[p] for every finite magnitude pattern p <= max_mag */
};

static struct fmt fmts[] = {
    {HC_FLOAT16, 16, 5, 10, 15, true, false, 0, NULL},
    {HC_BFLOAT16, 16, 8, 7, 127, true, false, 0, NULL},
    {HC_FP8_E4M3, 8, 4, 3, 7, false, true, 0, NULL},
    {HC_FP8_E5M2, 8, 5, 2, 15, true, true, 0, NULL},
};

static struct fmt *fmt_of(enum hc_dtype dt) {
  for (size_t i = 0; i < HC_ARRAY_LEN(fmts); i++)
    if (fmts[i].dt == dt) return &fmts[i];
  return NULL;
}

static double ref_decode(const struct fmt *f, uint32_t p) {
  uint32_t sign = (p >> (f->bits - 1)) & 1u;
  uint32_t emax = (1u << f->ebits) - 1u, mmax = (1u << f->mbits) - 1u;
  uint32_t e = (p >> f->mbits) & emax, m = p & mmax;
  double frac = (double)m / (double)(1u << f->mbits), v;
  if (f->ieee && e == emax) v = m ? NAN : INFINITY;
  else if (!f->ieee && e == emax && m == mmax) v = NAN;
  else if (e == 0) v = ldexp(frac, 1 - f->bias);
  else v = ldexp(1.0 + frac, (int)e - f->bias);
  return sign ? -v : v;
}

static bool fmt_init(struct fmt *f) {
  uint32_t emax = (1u << f->ebits) - 1u;
  f->max_mag = f->ieee ? (emax << f->mbits) - 1u : (emax << f->mbits) | ((1u << f->mbits) - 2u);
  f->vals = malloc((f->max_mag + 1) * sizeof(double));
  if (f->vals == NULL) return false;
  for (uint32_t p = 0; p <= f->max_mag; p++) f->vals[p] = ref_decode(f, p);
  for (uint32_t p = 1; p <= f->max_mag; p++) CHECK(f->vals[p] > f->vals[p - 1], "table order");
  return true;
}

/* Pattern nearest to x, ties to the even pattern; UINT32_MAX for "a NaN". */
static uint32_t ref_round(const struct fmt *f, double x) {
  if (isnan(x)) return UINT32_MAX;
  uint32_t sign = signbit(x) ? 1u << (f->bits - 1) : 0u;
  double a = fabs(x);
  const double *v = f->vals;
  uint32_t top = f->max_mag, k;
  if (a >= v[top]) {
    /* Past the last value: the next one would be one ulp further, and a tie
     * with it goes up (the largest finite mantissa is odd in IEEE formats). */
    double mid = v[top] + (v[top] - v[top - 1]) / 2;
    if (a == v[top] || a < mid) return sign | top;
    return sign | (f->saturate ? top : (uint32_t)((1u << f->ebits) - 1u) << f->mbits);
  }
  uint32_t lo = 0, hi = top; /* v[lo] <= a < v[hi] */
  while (hi - lo > 1) {
    uint32_t m = lo + (hi - lo) / 2;
    if (v[m] <= a) lo = m;
    else hi = m;
  }
  double d0 = a - v[lo], d1 = v[hi] - a;
  k = d0 < d1 ? lo : d0 > d1 ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | k;
}

static float lib_decode(enum hc_dtype dt, uint32_t p) {
  switch (dt) {
  case HC_FLOAT16: return hc_half_to_float((uint16_t)p);
  case HC_BFLOAT16: return hc_bf16_to_float((uint16_t)p);
  case HC_FP8_E4M3: return hc_fp8e4m3_to_float((uint8_t)p);
  default: return hc_fp8e5m2_to_float((uint8_t)p);
  }
}

static uint32_t lib_encode(enum hc_dtype dt, float x) {
  switch (dt) {
  case HC_FLOAT16: return hc_float_to_half(x);
  case HC_BFLOAT16: return hc_float_to_bf16(x);
  case HC_FP8_E4M3: return hc_float_to_fp8e4m3(x);
  default: return hc_float_to_fp8e5m2(x);
  }
}

static bool same_pattern(const struct fmt *f, uint32_t got, uint32_t want) {
  if (want == UINT32_MAX) return isnan(ref_decode(f, got));
  return got == want;
}

static void check_encode(const struct fmt *f, float x) {
  uint32_t want = ref_round(f, x), got = lib_encode(f->dt, x);
  CHECK(same_pattern(f, got, want), "%s: encode(%a) = 0x%x, want 0x%x", hc_dtype_name(f->dt), (double)x, got, want);
}

static void test_conversions(struct fmt *f) {
  const char *name = hc_dtype_name(f->dt);
  uint32_t n = 1u << f->bits, sign_bit = 1u << (f->bits - 1);
  /* Every pattern decodes to its defined value, signed zeros included. */
  for (uint32_t p = 0; p < n; p++) {
    double want = ref_decode(f, p);
    float got = lib_decode(f->dt, p);
    CHECK(isnan(want) ? isnan(got) : ((double)got == want && !signbit(got) == !signbit(want)),
          "%s: decode(0x%x) = %a, want %a", name, p, (double)got, want);
  }
  /* Every value round-trips; inf saturates in the fp8 formats. */
  for (uint32_t p = 0; p < n; p++) {
    double v = ref_decode(f, p);
    if (isnan(v)) continue;
    uint32_t want = isinf(v) && f->saturate ? (p & sign_bit) | f->max_mag : p;
    uint32_t got = lib_encode(f->dt, (float)v);
    CHECK(got == want, "%s: encode(decode(0x%x)) = 0x%x, want 0x%x", name, p, got, want);
  }
  /* Midpoints between neighbours round to the even one; a float ulp either
   * side goes to the nearer. The last pair is the finite max and overflow. */
  for (uint32_t p = 0; p <= f->max_mag; p++) {
    double lo = f->vals[p];
    double hi = p < f->max_mag ? f->vals[p + 1] : lo + (lo - f->vals[p - 1]);
    float mid = (float)((lo + hi) / 2);
    CHECK((double)mid == (lo + hi) / 2, "%s: midpoint above 0x%x not a float", name, p);
    float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), (float)lo};
    for (size_t i = 0; i < HC_ARRAY_LEN(probes); i++) {
      check_encode(f, probes[i]);
      check_encode(f, -probes[i]);
    }
  }
  /* Arbitrary floats: every exponent, float subnormals, inf, NaN payloads. */
  for (int i = 0; i < 100000; i++) check_encode(f, u2f((uint32_t)rnd()));
  float specials[] = {INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, 0x1p-149f, 0.0f, -0.0f};
  for (size_t i = 0; i < HC_ARRAY_LEN(specials); i++) check_encode(f, specials[i]);
  /* NaNs whose payload sits only in the low bits, or that would carry. */
  uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu, 0x7f80ffffu, 0x7fbfffffu};
  for (size_t i = 0; i < HC_ARRAY_LEN(nans); i++) check_encode(f, u2f(nans[i]));
}

/* The overflow rules, written down from the formats' specifications. */
static void test_overflow_rules(void) {
  CHECK(hc_float_to_half(65504.0f) == 0x7bff, "fp16 max");
  CHECK(hc_float_to_half(nextafterf(65520.0f, 0)) == 0x7bff, "fp16 below overflow tie");
  CHECK(hc_float_to_half(65520.0f) == 0x7c00, "fp16 overflow tie -> inf");
  CHECK(hc_float_to_half(-1e10f) == 0xfc00, "fp16 -overflow -> -inf");
  CHECK(hc_float_to_half(0x1p-25f) == 0x0000, "fp16 half min subnormal ties to 0");
  CHECK(hc_float_to_half(0x1.8p-25f) == 0x0001, "fp16 0.75 min subnormal -> min subnormal");
  CHECK(hc_float_to_half(0x1.ffcp-15f) == 0x0400, "fp16 subnormal rounds up to min normal");
  CHECK(hc_float_to_bf16(FLT_MAX) == 0x7f80, "bf16 FLT_MAX -> inf");
  CHECK(hc_float_to_bf16(-INFINITY) == 0xff80, "bf16 -inf");
  CHECK(hc_float_to_bf16(0x1p-133f) == 0x0001, "bf16 min subnormal");
  CHECK(hc_float_to_fp8e4m3(448.0f) == 0x7e, "e4m3 max");
  CHECK(hc_float_to_fp8e4m3(464.0f) == 0x7e, "e4m3 saturates");
  CHECK(hc_float_to_fp8e4m3(1e9f) == 0x7e, "e4m3 saturates");
  CHECK(hc_float_to_fp8e4m3(-INFINITY) == 0xfe, "e4m3 -inf saturates");
  CHECK((hc_float_to_fp8e4m3(NAN) & 0x7f) == 0x7f, "e4m3 NaN");
  CHECK(hc_float_to_fp8e4m3(0x1p-10f) == 0x00, "e4m3 half min subnormal ties to 0");
  CHECK(hc_float_to_fp8e4m3(0x1.8p-9f) == 0x02, "e4m3 1.5 min subnormal ties to 2");
  CHECK(hc_float_to_fp8e5m2(57344.0f) == 0x7b, "e5m2 max");
  CHECK(hc_float_to_fp8e5m2(61440.0f) == 0x7b, "e5m2 saturates");
  CHECK(hc_float_to_fp8e5m2(INFINITY) == 0x7b, "e5m2 inf saturates");
  CHECK((hc_float_to_fp8e5m2(NAN) & 0x7f) > 0x7c, "e5m2 NaN");
  CHECK(isinf(hc_fp8e5m2_to_float(0x7c)) && isnan(hc_fp8e5m2_to_float(0x7d)), "e5m2 specials");
  CHECK(hc_fp8e4m3_to_float(0x7e) == 448.0f && isnan(hc_fp8e4m3_to_float(0xff)), "e4m3 specials");
  CHECK(hc_fp8e4m3_to_float(0x01) == 0x1p-9f, "e4m3 min subnormal");
}

/* With flush-to-zero and denormals-are-zero set (as torch.set_flush_denormal
 * does), the fp16 and fp8 subnormals still convert exactly: every value of
 * those formats is a normal float. Only bit patterns are compared here. */
static void test_conversions_ftz(void) {
#ifdef HAVE_MXCSR
  unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);
  static const enum hc_dtype dts[] = {HC_FLOAT16, HC_FP8_E4M3, HC_FP8_E5M2};
  for (size_t k = 0; k < HC_ARRAY_LEN(dts); k++) {
    struct fmt *f = fmt_of(dts[k]);
    for (uint32_t p = 0; p < (1u << f->bits); p++) {
      uint32_t e = (p >> f->mbits) & ((1u << f->ebits) - 1u);
      if (f->ieee && e == (1u << f->ebits) - 1u) continue; /* inf, NaN */
      if (!f->ieee && (p & 0x7fu) == 0x7fu) continue;
      uint32_t got = lib_encode(f->dt, lib_decode(f->dt, p));
      CHECK(got == p, "%s under FTZ/DAZ: encode(decode(0x%x)) = 0x%x", hc_dtype_name(f->dt), p, got);
    }
    /* Half the smallest subnormal still ties to 0; three quarters rounds up. */
    uint32_t min_sub_bits = f2u(lib_decode(f->dt, 1));
    CHECK(lib_encode(f->dt, u2f(min_sub_bits - (1u << 23))) == 0, "%s FTZ: tie to 0", hc_dtype_name(f->dt));
    CHECK(lib_encode(f->dt, u2f(min_sub_bits - (1u << 23) + (1u << 22))) == 1, "%s FTZ: 0.75 -> 1",
          hc_dtype_name(f->dt));
  }
  _mm_setcsr(saved);
#endif
}

/* ---- element access independent of the library ---- */

static bool is_signed_int(enum hc_dtype t) { return t == HC_INT8 || t == HC_INT32 || t == HC_INT64; }
static bool is_int(enum hc_dtype t) { return t <= HC_UINT64; }

static uint64_t get_raw(enum hc_dtype t, const void *buf, size_t i) {
  size_t es = hc_dtype_size(t);
  uint64_t v = 0;
  memcpy(&v, (const char *)buf + i * es, es); /* little-endian host */
  return v;
}

static void put_raw(enum hc_dtype t, void *buf, size_t i, uint64_t v) {
  size_t es = hc_dtype_size(t);
  memcpy((char *)buf + i * es, &v, es);
}

/* An integer element as a mathematical value. */
static __int128 int_value(enum hc_dtype t, uint64_t raw) {
  unsigned bits = (unsigned)hc_dtype_size(t) * 8;
  if (is_signed_int(t) && bits < 64 && (raw >> (bits - 1)) & 1) return (__int128)raw - ((__int128)1 << bits);
  if (is_signed_int(t) && bits == 64) return (__int128)(int64_t)raw;
  return (__int128)raw;
}

/* A mathematical integer reduced mod 2^bits, as the element's raw bits. */
static uint64_t int_wrap(enum hc_dtype t, __int128 v) {
  unsigned bits = (unsigned)hc_dtype_size(t) * 8;
  unsigned __int128 m = (unsigned __int128)v;
  if (bits < 64) m &= ((unsigned __int128)1 << bits) - 1;
  return (uint64_t)m;
}

static double float_value(enum hc_dtype t, uint64_t raw) {
  if (t == HC_FLOAT32) return u2f((uint32_t)raw);
  if (t == HC_FLOAT64) {
    double d;
    memcpy(&d, &raw, 8);
    return d;
  }
  return ref_decode(fmt_of(t), (uint32_t)raw);
}

/* A float result (already rounded to float for the float-computed types) as
 * the element's raw bits; UINT64_MAX for "a NaN". */
static uint64_t float_store(enum hc_dtype t, double v) {
  if (isnan(v)) return UINT64_MAX;
  if (t == HC_FLOAT32) return f2u((float)v);
  if (t == HC_FLOAT64) {
    uint64_t r;
    memcpy(&r, &v, 8);
    return r;
  }
  return ref_round(fmt_of(t), v);
}

/* fmaxf / fminf: a NaN operand yields the other. */
static double ref_fmax(double x, double y) { return isnan(x) ? y : isnan(y) ? x : x > y ? x : y; }
static double ref_fmin(double x, double y) { return isnan(x) ? y : isnan(y) ? x : x < y ? x : y; }

/* Expected raw result of x op y for one element. */
static uint64_t ref_reduce(enum hc_dtype t, enum hc_redop op, uint64_t xr, uint64_t yr) {
  if (is_int(t)) {
    __int128 x = int_value(t, xr), y = int_value(t, yr);
    switch (op) {
    case HC_SUM: return int_wrap(t, x + y);
    case HC_PROD: /* uint64 products pass 2^127: multiply mod 2^128, low bits exact */
      return int_wrap(t, (__int128)((unsigned __int128)x * (unsigned __int128)y));
    case HC_MAX: return int_wrap(t, x > y ? x : y);
    default: return int_wrap(t, x < y ? x : y);
    }
  }
  double x = float_value(t, xr), y = float_value(t, yr), r;
  switch (op) {
  case HC_SUM: r = x + y; break;
  case HC_PROD: r = x * y; break;
  case HC_MAX: r = ref_fmax(x, y); break;
  default: r = ref_fmin(x, y); break;
  }
  /* Everything but fp64 computes in float: round the exact double once. */
  if (t != HC_FLOAT64 && !isnan(r)) r = (float)r;
  return float_store(t, r);
}

static bool result_ok(enum hc_dtype t, enum hc_redop op, uint64_t got, uint64_t want) {
  if (is_int(t)) return got == want;
  double g = float_value(t, got);
  if (want == UINT64_MAX) return isnan(g);
  if (got == want) return true;
  /* fmaxf leaves the sign of max(-0, +0) open. */
  return (op == HC_MAX || op == HC_MIN) && g == 0.0 && float_value(t, want) == 0.0;
}

/* Random elements that reach the interesting cases of each type. */
static uint64_t random_elem_wide(enum hc_dtype t) {
  uint64_t r = rnd();
  switch (t) {
  case HC_FLOAT32: {
    float choices[] = {NAN, INFINITY, -INFINITY, -0.0f, 0x1p-140f, FLT_MAX, 3.0f};
    if (r % 16 == 0) return f2u(choices[(r >> 8) % HC_ARRAY_LEN(choices)]);
    return f2u((float)((double)(int64_t)(r >> 4) * 0x1p-50)); /* about +-2^10 */
  }
  case HC_FLOAT64: {
    double choices[] = {NAN, INFINITY, -INFINITY, -0.0, 0x1p-1070, DBL_MAX, 3.0}, d;
    if (r % 16 == 0) d = choices[(r >> 8) % HC_ARRAY_LEN(choices)];
    else d = (double)(int64_t)(r >> 1) * 0x1p-52;
    memcpy(&r, &d, 8);
    return r;
  }
  case HC_FLOAT16:
  case HC_BFLOAT16:
    /* Half the time near 1, where sums round, else any pattern. */
    if (r & 1) return (r >> 1) & 0xffff;
    return t == HC_FLOAT16 ? 0x3800 + ((r >> 1) & 0x7ff) : 0x3f00 + ((r >> 1) & 0xff);
  default: return r; /* ints: full range, to wrap; fp8: every pattern */
  }
}

/* The same, as the element's raw bits (high bits clear). */
static uint64_t random_elem(enum hc_dtype t) {
  size_t bits = hc_dtype_size(t) * 8;
  uint64_t r = random_elem_wide(t);
  return bits < 64 ? r & ((1ull << bits) - 1) : r;
}

static void *xmalloc(size_t n) { return malloc(n ? n : 1); }

static void test_reduce(enum hc_dtype t, enum hc_redop op, size_t count) {
  size_t es = hc_dtype_size(t), bytes = count * es;
  void *s0 = xmalloc(bytes), *s1 = xmalloc(bytes), *dst = xmalloc(bytes);
  uint64_t *want = calloc(count + 1, sizeof(uint64_t));
  if (s0 == NULL || s1 == NULL || dst == NULL || want == NULL) {
    CHECK(false, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < count; i++) {
    put_raw(t, s0, i, random_elem(t));
    put_raw(t, s1, i, i % 11 == 5 ? get_raw(t, s0, i) : random_elem(t)); /* equal pairs too */
  }
  for (size_t i = 0; i < count; i++) want[i] = ref_reduce(t, op, get_raw(t, s0, i), get_raw(t, s1, i));
  /* 0: out of place; 1: dst == src0; 2: dst == src1. */
  for (int alias = 0; alias < 3; alias++) {
    struct hc_reduce_args a = {.dst = dst, .src0 = s0, .src1 = s1, .count = count, .dtype = t, .op = op};
    if (alias == 1) memcpy(dst, s0, bytes), a.src0 = dst;
    if (alias == 2) memcpy(dst, s1, bytes), a.src1 = dst;
    hc_host_reduce(&a);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      uint64_t got = get_raw(t, dst, i);
      if (!result_ok(t, op, got, want[i]) && bad++ == 0)
        CHECK(false, "reduce %s %s count %zu alias %d: [%zu] 0x%llx op 0x%llx = 0x%llx, want 0x%llx", hc_dtype_name(t),
              hc_redop_name(op), count, alias, i, (unsigned long long)get_raw(t, s0, i),
              (unsigned long long)get_raw(t, s1, i), (unsigned long long)got, (unsigned long long)want[i]);
    }
    CHECK(bad == 0, "reduce %s %s count %zu alias %d: %zu wrong", hc_dtype_name(t), hc_redop_name(op), count, alias,
          bad);
  }
out:
  free(s0), free(s1), free(dst), free(want);
}

/* ---- scale ---- */

static uint64_t ref_scale(enum hc_dtype t, enum hc_scale_kind kind, uint64_t xr, uint64_t factor, uint64_t divisor) {
  if (is_int(t)) {
    __int128 x = int_value(t, xr);
    if (kind == HC_SCALE_MUL)
      return int_wrap(t, (__int128)((unsigned __int128)x * (unsigned __int128)int_value(t, factor)));
    if (divisor == 0) return xr;               /* documented: ints keep their value */
    return int_wrap(t, x / (__int128)divisor); /* C division truncates toward zero */
  }
  double x = float_value(t, xr), r;
  if (kind == HC_SCALE_MUL) r = x * float_value(t, factor);
  else if (t == HC_FLOAT64) r = x / (double)divisor;
  else r = x / (double)(float)divisor;
  if (t != HC_FLOAT64 && !isnan(r)) r = (float)r;
  return float_store(t, r);
}

static void test_scale(enum hc_dtype t, enum hc_scale_kind kind, uint64_t factor, uint64_t divisor, size_t count) {
  size_t es = hc_dtype_size(t), bytes = count * es;
  void *src = xmalloc(bytes), *dst = xmalloc(bytes);
  if (src == NULL || dst == NULL) {
    CHECK(false, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < count; i++) put_raw(t, src, i, random_elem(t));
  if (count > 2 && is_signed_int(t)) { /* the most negative value, for /2^63 */
    put_raw(t, src, 0, 1ull << (es * 8 - 1));
    put_raw(t, src, 1, int_wrap(t, -1));
  }
  for (int in_place = 0; in_place < 2; in_place++) {
    struct hc_scale_args a = {.dst = dst, .src = src, .count = count, .dtype = t, .kind = kind, .divisor = divisor};
    memcpy(a.factor, &factor, 8);
    if (in_place) memcpy(dst, src, bytes), a.src = dst;
    hc_host_scale(&a);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      uint64_t got = get_raw(t, dst, i), want = ref_scale(t, kind, get_raw(t, src, i), factor, divisor);
      if (!result_ok(t, HC_SUM, got, want) && bad++ == 0)
        CHECK(false, "scale %s %s factor 0x%llx divisor %llu in_place %d: [%zu] 0x%llx -> 0x%llx, want 0x%llx",
              hc_dtype_name(t), kind == HC_SCALE_MUL ? "mul" : "div", (unsigned long long)factor,
              (unsigned long long)divisor, in_place, i, (unsigned long long)get_raw(t, src, i), (unsigned long long)got,
              (unsigned long long)want);
    }
    CHECK(bad == 0, "scale %s: %zu wrong", hc_dtype_name(t), bad);
  }
out:
  free(src), free(dst);
}

/* ---- single elements ---- */

static void test_load_store(void) {
  for (enum hc_dtype t = 0; t < HC_DTYPE_COUNT; t++) {
    for (int i = 0; i < 200; i++) {
      uint64_t raw = random_elem(t), buf = 0;
      memcpy(&buf, &raw, hc_dtype_size(t));
      double got = hc_dtype_load(t, &buf);
      double want = is_int(t) ? (double)int_value(t, raw) : float_value(t, raw);
      CHECK(isnan(want) ? isnan(got) : got == want, "load %s 0x%llx = %a, want %a", hc_dtype_name(t),
            (unsigned long long)raw, got, want);
    }
  }
  /* Integers: truncation toward zero, then the low bits; int64 saturates. */
  struct {
    enum hc_dtype t;
    double v;
    uint64_t raw;
  } ints[] = {
      {HC_INT8, 3.7, 3},
      {HC_INT8, -3.7, 0xfd},
      {HC_INT8, 300.0, 44},
      {HC_UINT8, -1.0, 0xff},
      {HC_UINT8, 255.9, 0xff},
      {HC_INT32, -2147483648.0, 0x80000000},
      {HC_UINT32, 4294967296.0, 0},
      {HC_INT64, 1e30, 0x7fffffffffffffffull},
      {HC_INT64, -1e30, 0x8000000000000000ull},
      {HC_UINT64, 1e30, UINT64_MAX},
      {HC_UINT64, 0x1p63, 0x8000000000000000ull},
      {HC_INT32, NAN, 0},
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(ints); i++) {
    uint64_t buf = 0;
    hc_dtype_store(ints[i].t, &buf, ints[i].v);
    CHECK(buf == ints[i].raw, "store %s %a = 0x%llx, want 0x%llx", hc_dtype_name(ints[i].t), ints[i].v,
          (unsigned long long)buf, (unsigned long long)ints[i].raw);
  }
  /* Narrow floats round the double itself: 1 + 2^-11 + 2^-40 rounds to the
   * float 1 + 2^-11, a tie, yet as a double it is above the tie. */
  for (size_t k = 0; k < HC_ARRAY_LEN(fmts); k++) {
    struct fmt *f = &fmts[k];
    double tie = 1.0 + ldexp(1.0, -f->mbits - 1);
    double probes[] = {tie, tie + ldexp(1.0, -40), tie - ldexp(1.0, -40), 1e300, -1e-300};
    for (int i = 0; i < 20000 + (int)HC_ARRAY_LEN(probes); i++) {
      double v;
      if (i < (int)HC_ARRAY_LEN(probes)) {
        v = probes[i];
      } else { /* random doubles over the format's range and a bit beyond */
        v = ldexp((double)(int64_t)rnd() * 0x1p-63, (int)(rnd() % 64) - 2 * f->bias);
        if (f->dt == HC_BFLOAT16) v = ldexp(v, (int)(rnd() % 256) - 100);
      }
      uint64_t buf = 0;
      hc_dtype_store(f->dt, &buf, v);
      uint32_t want = ref_round(f, v);
      CHECK(same_pattern(f, (uint32_t)buf, want), "store %s %a = 0x%llx, want 0x%x", hc_dtype_name(f->dt), v,
            (unsigned long long)buf, want);
    }
  }
  double d = 0;
  hc_dtype_store(HC_FLOAT64, &d, 0.1);
  CHECK(d == 0.1, "store double");
  float fl = 0;
  hc_dtype_store(HC_FLOAT32, &fl, 0.1);
  CHECK(fl == 0.1f, "store float");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  static const size_t counts[] = {0, 1, 7, 1023, 4099};
  for (size_t i = 0; i < HC_ARRAY_LEN(fmts); i++) {
    if (!fmt_init(&fmts[i])) {
      fprintf(stderr, "test_device_reduce: out of memory\n");
      return 1;
    }
    test_conversions(&fmts[i]);
  }
  test_overflow_rules();
  test_conversions_ftz();
  for (enum hc_dtype t = 0; t < HC_DTYPE_COUNT; t++)
    for (enum hc_redop op = HC_SUM; op <= HC_MIN; op++)
      for (size_t c = 0; c < HC_ARRAY_LEN(counts); c++) test_reduce(t, op, counts[c]);
  static const uint64_t divisors[] = {1, 2, 3, 7, 1000, 1ull << 40, 1ull << 63, UINT64_MAX, 0};
  for (enum hc_dtype t = 0; t < HC_DTYPE_COUNT; t++) {
    for (int k = 0; k < 4; k++) test_scale(t, HC_SCALE_MUL, random_elem(t), 0, 1023);
    test_scale(t, HC_SCALE_MUL, random_elem(t), 0, 0);
    for (size_t k = 0; k < HC_ARRAY_LEN(divisors); k++) test_scale(t, HC_SCALE_DIV, 0, divisors[k], 517);
  }
  test_load_store();
  /* Ops the kernels do not take leave dst alone (one WARN line). */
  float x = 1.0f, y = 2.0f, z = 5.0f;
  hc_host_reduce(
      &(struct hc_reduce_args){.dst = &z, .src0 = &x, .src1 = &y, .count = 1, .dtype = HC_FLOAT32, .op = HC_AVG});
  CHECK(z == 5.0f, "reduce with op avg wrote dst");
  for (size_t i = 0; i < HC_ARRAY_LEN(fmts); i++) free(fmts[i].vals);
  return tu_finish("test_device_reduce");
}
