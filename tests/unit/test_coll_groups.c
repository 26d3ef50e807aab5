/*
 * All-reduce on comms of several groups (a group name per rank, as
 * HETCCL_GROUP gives): the hierarchical plan (plan/hier.c) with groups of
 * unequal sizes, interleaved in rank order, two and three groups, one group
 * of one rank; for float32, int32, bf16, float64 x sum, avg, max, PreMulSum
 * x counts below and above the ring threshold x in-place and out-of-place,
 * compared bitwise with values computed here (testutil's exact generators).
 * Each layout runs under HETCCL_ALGO unset (the hierarchy chosen by size),
 * HIER (always) and RING (the flat ring over all ranks, for comparison).
 * Ranks are threads; the transport is loopback TCP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

struct layout {
  const char *name;
  const char *groups; /* one letter per rank: its group */
};
static const struct layout layouts[] = {
    {"5 ranks, groups of 3 and 2, interleaved", "abaab"},
    {"6 ranks, groups of 3, 2 and 1", "abcaba"},
    {"4 ranks, two groups of 2", "aabb"},
    {"3 ranks, groups of 1 and 2", "abb"},
};
static const struct layout *cur;

static const enum hc_dtype dtypes[] = {HC_FLOAT32, HC_INT32, HC_BFLOAT16, HC_FLOAT64};
static const enum hc_redop ops[] = {HC_SUM, HC_AVG, HC_MAX, HC_PREMULSUM};
static const size_t counts[] = {7, 20011, 100003}; /* 20011 x 4 bytes is above the 64 KiB ring threshold */

static void one_case(hetcclComm_t comm, int rank, int n, enum hc_dtype t, enum hc_redop op, size_t count,
                     bool in_place, uint64_t seed) {
  const size_t es = hc_dtype_size(t), bytes = count * es;
  struct tu_red red = {t, op, n, seed};
  uint8_t *send = tu_buf_alloc(bytes, 0), *recv = in_place ? send : tu_buf_alloc(bytes, 0xee);
  uint8_t *expect = malloc(bytes ? bytes : 1);
  tu_red_fill(&red, rank, 0, count, send);
  for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, expect + i * es);
  hetcclRedOp_t h = (hetcclRedOp_t)op;
  uint8_t scalar[8];
  if (op == HC_PREMULSUM) {
    tu_red_scalar(&red, rank, scalar);
    if (!CHECK_OK(hetcclRedOpCreatePreMulSum(&h, scalar, (hetcclDataType_t)t, hetcclScalarHostImmediate, comm)))
      goto out;
  }
  char what[160];
  snprintf(what, sizeof(what), "%s: AllReduce %s %s count %zu %s", cur->name, hc_dtype_name(t), hc_redop_name(op),
           count, in_place ? "in place" : "out of place");
  tu_set_case("%s", what);
  if (CHECK_OK(hetcclAllReduce(send, recv, count, (hetcclDataType_t)t, h, comm, NULL))) {
    tu_compare(t, recv, expect, count, what);
    tu_buf_guards_ok(recv, what);
  }
  if (op == HC_PREMULSUM) CHECK_OK(hetcclRedOpDestroy(h, comm));
out:
  if (!in_place) tu_buf_free(recv);
  tu_buf_free(send);
  free(expect);
}

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  char group[8];
  snprintf(group, sizeof(group), "g%c", cur->groups[rank]);
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.groupName = group;
  hetcclComm_t comm;
  if (!CHECK_OK(hetcclCommInitRankConfig(&comm, n, id, rank, &cfg))) return 1;
  uint64_t seed = 1;
  for (size_t c = 0; c < HC_ARRAY_LEN(counts); c++)
    for (size_t d = 0; d < HC_ARRAY_LEN(dtypes); d++)
      for (size_t o = 0; o < HC_ARRAY_LEN(ops); o++, seed++)
        one_case(comm, rank, n, dtypes[d], ops[o], counts[c], (seed & 1) != 0, seed);
  CHECK_OK(hetcclCommDestroy(comm));
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *algos[] = {"", "HIER", "RING"};
  for (size_t a = 0; a < HC_ARRAY_LEN(algos); a++) {
    if (algos[a][0]) setenv("HETCCL_ALGO", algos[a], 1);
    else unsetenv("HETCCL_ALGO");
    hc_params_reset();
    for (size_t l = 0; l < HC_ARRAY_LEN(layouts); l++) {
      cur = &layouts[l];
      double t0 = tu_seconds();
      long failures = tu_failures();
      tu_run_ranks((int)strlen(cur->groups), rank_main, NULL);
      printf("HETCCL_ALGO=%s %s: %.1f s, %ld failures\n", algos[a][0] ? algos[a] : "(unset)", cur->name,
             tu_seconds() - t0, tu_failures() - failures);
    }
  }
  return tu_finish("test_coll_groups");
}
