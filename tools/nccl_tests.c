#include "nccl_tests.h"

#include <stdio.h>
#include <strings.h>

#include "util/util.h"

static const struct {
  const char *name;
  enum hc_dtype dtype;
} dtype_names[] = {
    {"int8", HC_INT8},       {"char", HC_INT8},         {"uint8", HC_UINT8},         {"int32", HC_INT32},
    {"int", HC_INT32},       {"uint32", HC_UINT32},     {"int64", HC_INT64},         {"uint64", HC_UINT64},
    {"half", HC_FLOAT16},    {"float16", HC_FLOAT16},   {"fp16", HC_FLOAT16},        {"float", HC_FLOAT32},
    {"float32", HC_FLOAT32}, {"fp32", HC_FLOAT32},      {"double", HC_FLOAT64},      {"float64", HC_FLOAT64},
    {"fp64", HC_FLOAT64},    {"bfloat16", HC_BFLOAT16}, {"bf16", HC_BFLOAT16},       {"f8e4m3", HC_FP8_E4M3},
    {"e4m3", HC_FP8_E4M3},   {"fp8_e4m3", HC_FP8_E4M3}, {"float8e4m3", HC_FP8_E4M3}, {"f8e5m2", HC_FP8_E5M2},
    {"e5m2", HC_FP8_E5M2},   {"fp8_e5m2", HC_FP8_E5M2}, {"float8e5m2", HC_FP8_E5M2},
};

bool nt_parse_dtype(const char *s, int *out) {
  if (strcasecmp(s, "all") == 0) {
    *out = -1;
    return true;
  }
  for (size_t i = 0; i < HC_ARRAY_LEN(dtype_names); i++) {
    if (strcasecmp(s, dtype_names[i].name) == 0) {
      *out = dtype_names[i].dtype;
      return true;
    }
  }
  return false;
}

bool nt_parse_op(const char *s, int *out) {
  if (strcasecmp(s, "all") == 0) {
    *out = -1;
    return true;
  }
  if (strcasecmp(s, "premulsum") == 0) s = "mulsum";
  for (int op = 0; op < HC_REDOP_COUNT; op++) {
    if (strcasecmp(s, hc_redop_name((enum hc_redop)op)) == 0) {
      *out = op;
      return true;
    }
  }
  return false;
}

const char *nt_fmt_num(char *s, size_t len, double v, int w) {
  int digits = 0;
  for (double p = 1; v >= p && digits < 40; p *= 10) digits++;
  if (digits < w - 2) snprintf(s, len, "%*.2f", w, v);
  else if (digits < w - 1) snprintf(s, len, "%*.1f", w, v);
  else if (digits < w + 1) snprintf(s, len, "%*.0f", w, v);
  else if (w >= 7) snprintf(s, len, "%*.1e", w, v);
  else snprintf(s, len, "%*.0e", w, v);
  return s;
}
