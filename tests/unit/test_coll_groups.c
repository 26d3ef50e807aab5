/*
 * Collectives on comms of several groups (a group name per rank, as
 * HETCCL_GROUP gives): the hierarchical plans (plan/hier.c) with groups of
 * unequal sizes, interleaved in rank order, two and three groups, one group
 * of one rank. All-reduce for float32, int32, bf16, float64 x sum, avg, max,
 * PreMulSum x counts below and above the ring threshold; reduce and
 * reduce-scatter for every dtype and op, each at one of the counts;
 * broadcast (from varying roots), all-gather and all-to-all for every dtype
 * and count; in place and out of place alternately. Results are compared
 * bitwise with values computed here (testutil's exact generators). Each
 * layout runs under HETCCL_ALGO unset (the hierarchy chosen by size), HIER
 * (always) and RING (the flat algorithms over all ranks, for comparison).
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

enum coll { C_ALLREDUCE, C_REDUCE, C_REDUCESCATTER, C_BROADCAST, C_ALLGATHER, C_ALLTOALL };
static const char *const coll_names[] = {"AllReduce", "Reduce", "ReduceScatter", "Broadcast", "AllGather", "AlltoAll"};

/* The PreMulSum op of this rank, or the built-in op; false when its
 * creation failed (recorded). */
static bool op_make(hetcclComm_t comm, const struct tu_red *red, int rank, hetcclRedOp_t *h) {
  *h = (hetcclRedOp_t)red->op;
  if (red->op != HC_PREMULSUM) return true;
  uint8_t scalar[8];
  tu_red_scalar(red, rank, scalar);
  return CHECK_OK(hetcclRedOpCreatePreMulSum(h, scalar, (hetcclDataType_t)red->dtype, hetcclScalarHostImmediate, comm));
}

static void op_free(hetcclComm_t comm, const struct tu_red *red, hetcclRedOp_t h) {
  if (red->op == HC_PREMULSUM) CHECK_OK(hetcclRedOpDestroy(h, comm));
}

/* All-reduce, reduce (root = seed mod n) and reduce-scatter of count
 * elements per rank. */
static void reducing_case(hetcclComm_t comm, int rank, int n, enum coll coll, enum hc_dtype t, enum hc_redop op,
                          size_t count, bool in_place, uint64_t seed) {
  const size_t es = hc_dtype_size(t), in_count = coll == C_REDUCESCATTER ? count * (size_t)n : count;
  const int root = (int)(seed % (uint64_t)n);
  struct tu_red red = {t, op, n, seed};
  uint8_t *send = tu_buf_alloc(in_count * es, 0), *recv;
  if (!in_place) recv = tu_buf_alloc(count * es, 0xee);
  else recv = coll == C_REDUCESCATTER ? send + (size_t)rank * count * es : send;
  uint8_t *expect = malloc(count * es);
  tu_red_fill(&red, rank, 0, in_count, send);
  const size_t first = coll == C_REDUCESCATTER ? (size_t)rank * count : 0;
  for (size_t i = 0; i < count; i++) tu_red_expect(&red, first + i, expect + i * es);
  hetcclRedOp_t h;
  char what[160];
  snprintf(what, sizeof(what), "%s: %s %s %s count %zu %s (root %d)", cur->name, coll_names[coll], hc_dtype_name(t),
           hc_redop_name(op), count, in_place ? "in place" : "out of place", root);
  tu_set_case("%s", what);
  if (op_make(comm, &red, rank, &h)) {
    hetcclResult_t r = coll == C_ALLREDUCE ? hetcclAllReduce(send, recv, count, (hetcclDataType_t)t, h, comm, NULL)
                       : coll == C_REDUCE  ? hetcclReduce(send, recv, count, (hetcclDataType_t)t, h, root, comm, NULL)
                                           : hetcclReduceScatter(send, recv, count, (hetcclDataType_t)t, h, comm, NULL);
    if (CHECK_OK(r) && (coll != C_REDUCE || rank == root)) tu_compare(t, recv, expect, count, what);
    op_free(comm, &red, h);
  }
  tu_buf_guards_ok(send, what);
  if (!in_place) {
    tu_buf_guards_ok(recv, what);
    tu_buf_free(recv);
  }
  tu_buf_free(send);
  free(expect);
}

/* Broadcast (from root), all-gather and all-to-all of count elements per
 * rank. All-to-all: rank j's block for rank k is elements k * count.. of
 * j's data. */
static void moving_case(hetcclComm_t comm, int rank, int n, enum coll coll, enum hc_dtype t, size_t count, int root,
                        bool in_place, uint64_t seed) {
  const size_t es = hc_dtype_size(t), out_count = coll == C_BROADCAST ? count : count * (size_t)n;
  const size_t in_count = coll == C_ALLGATHER ? count : out_count;
  uint8_t *recv = tu_buf_alloc(out_count * es, 0xee), *send = recv;
  if (!in_place) send = tu_buf_alloc(in_count * es, 0);
  else if (coll == C_ALLGATHER) send = recv + (size_t)rank * count * es;
  uint8_t *expect = malloc(out_count * es);
  tu_data_fill(t, seed, rank, 0, in_count, send);
  if (coll == C_BROADCAST) tu_data_fill(t, seed, root, 0, count, expect);
  for (int j = 0; j < n && coll != C_BROADCAST; j++)
    tu_data_fill(t, seed, j, coll == C_ALLGATHER ? 0 : (size_t)rank * count, count, expect + (size_t)j * count * es);
  char what[160];
  snprintf(what, sizeof(what), "%s: %s %s count %zu %s (root %d)", cur->name, coll_names[coll], hc_dtype_name(t), count,
           in_place ? "in place" : "out of place", root);
  tu_set_case("%s", what);
  hetcclResult_t r = coll == C_BROADCAST   ? hetcclBroadcast(send, recv, count, (hetcclDataType_t)t, root, comm, NULL)
                     : coll == C_ALLGATHER ? hetcclAllGather(send, recv, count, (hetcclDataType_t)t, comm, NULL)
                                           : hetcclAlltoAll(send, recv, count, (hetcclDataType_t)t, comm, NULL);
  if (CHECK_OK(r)) tu_compare(t, recv, expect, out_count, what);
  tu_buf_guards_ok(recv, what);
  if (!in_place) {
    tu_buf_guards_ok(send, what);
    tu_buf_free(send);
  }
  tu_buf_free(recv);
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
    for (size_t d = 0; d < HC_ARRAY_LEN(dtypes); d++) {
      for (size_t o = 0; o < HC_ARRAY_LEN(ops); o++, seed++) {
        reducing_case(comm, rank, n, C_ALLREDUCE, dtypes[d], ops[o], counts[c], (seed & 1) != 0, seed);
        if ((c + d + o) % HC_ARRAY_LEN(counts) == 0) {
          reducing_case(comm, rank, n, C_REDUCE, dtypes[d], ops[o], counts[c], (seed & 2) != 0, seed);
          reducing_case(comm, rank, n, C_REDUCESCATTER, dtypes[d], ops[o], counts[c], (seed & 2) != 0, seed);
        }
      }
      moving_case(comm, rank, n, C_BROADCAST, dtypes[d], counts[c], (int)(seed % (uint64_t)n), (seed & 1) != 0, seed);
      moving_case(comm, rank, n, C_ALLGATHER, dtypes[d], counts[c], 0, (seed & 2) != 0, seed);
      moving_case(comm, rank, n, C_ALLTOALL, dtypes[d], counts[c], 0, false, seed);
    }
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
