/*
 * What hetccl's nccl-tests look-alikes (hetccl-perf, hetccl-sim) share with
 * nccl-tests: its names of datatypes and operations, and its number format
 * (shared/reference/nccl-tests.md, section 6).
 */
#ifndef HC_TOOLS_NCCL_TESTS_H_
#define HC_TOOLS_NCCL_TESTS_H_

#include <stdbool.h>
#include <stddef.h>

/* -d: a datatype name (nccl-tests' and common aliases) into *out, or "all"
 * as -1. */
bool nt_parse_dtype(const char *s, int *out);
/* -o: sum prod min max avg mulsum (also premulsum), or "all" as -1. */
bool nt_parse_op(const char *s, int *out);
/* v right-aligned in width w with 2 decimals, else 1, else 0, else in
 * exponent notation. */
const char *nt_fmt_num(char *s, size_t len, double v, int w);

#endif
