/*
 * The bytes that plans send between groups, counted in the plans every
 * rank builds for one call (nothing runs): the hierarchical plans
 * (plan/hier.c) must cross exactly
 *   all-reduce                2 (G - 1) B   (a ring of one rank per group per segment)
 *   broadcast, reduce         (G - 1) B     (small: leaders' tree; large: chain by group)
 *   all-gather, reduce-scatter  sum over groups g of (n - |g|) b
 *   all-to-all                (n^2 - sum over g of |g|^2) b
 * for G groups, n ranks, B the buffer's bytes and b one rank's block; the
 * last three are the least possible (each block enters each group that
 * lacks it once). The flat algorithms over the same layouts are printed
 * beside them, and must cross more where groups interleave.
 *
 * Then the same with every group of two ranks or more running the vendor's
 * library (hc_plan_ctx.group_vendor): the plans cross the same bytes, and
 * no byte moves between two ranks of such a group through hetccl's
 * transports: their part runs in VENDOR steps (gather and scatter too,
 * which cross (n - |root's group|) b, and send/recv between group mates).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "testutil.h"

struct layout {
  const char *name;
  const char *groups; /* one letter per rank: its group */
};
static const struct layout layouts[] = {
    {"groups of 3 and 2, interleaved", "abaab"},
    {"groups of 3, 2 and 1", "abcaba"},
    {"two groups of 2", "aabb"},
    {"groups of 1 and 2", "abb"},
    {"four groups of 2, interleaved", "abcdabcd"},
};

enum { RING_THRESHOLD = 64 << 10 };

/* What all ranks' plans for one call move. */
struct moved {
  size_t crossed; /* bytes sent to a rank of another group */
  size_t inside;  /* bytes sent to a rank of the same group, where that group runs the vendor */
  int vendor_steps;
};

/* Counts the transfers of all ranks' plans for call a; group_vendor may be
 * NULL (no group runs the vendor). */
static struct moved plans_move(const struct layout *l, enum hc_algo algo, struct hc_coll_args a, int *group_of,
                               int ngroups, const bool *group_vendor, struct hc_scratch_pool *pool) {
  const int n = (int)strlen(l->groups);
  const size_t es = hc_dtype_size(a.dtype);
  const size_t span = (a.coll == HC_COLL_BROADCAST || a.coll == HC_COLL_REDUCE || a.coll == HC_COLL_ALLREDUCE)
                          ? a.count * es
                          : a.count * es * (size_t)n;
  char *in = calloc(1, span), *out = calloc(1, span);
  a.sendbuf = in;
  a.recvbuf = out;
  struct moved m = {0};
  for (int r = 0; r < n; r++) {
    struct hc_plan_ctx x = {.rank = r,
                            .nranks = n,
                            .chunk_bytes = 4096,
                            .ring_threshold = RING_THRESHOLD,
                            .scratch_slots = 3,
                            .ngroups = ngroups,
                            .group_of = group_of,
                            .group_vendor = group_vendor};
    for (int c = 0; c < HC_COLL_COUNT; c++) x.algo[c] = algo; /* where the collective has it */
    struct hc_plan p = {.pool = pool};
    struct hc_coll_args ar = a;
    if (a.coll == HC_COLL_SEND || a.coll == HC_COLL_RECV) { /* a.root: the distance to the peer */
      ar.root = (r + (a.coll == HC_COLL_SEND ? a.root : n - a.root)) % n;
    }
    if (!CHECK_OK((hetcclResult_t)hc_plan_add(&p, &x, &ar))) break;
    for (int i = 0; i < p.nsteps; i++) {
      const struct hc_step *st = &p.steps[i];
      m.vendor_steps += st->kind == HC_STEP_VENDOR;
      if (st->kind != HC_STEP_SEND) continue;
      if (group_of[st->peer] != group_of[r]) m.crossed += st->count;
      else if (group_vendor && group_vendor[group_of[r]]) m.inside += st->count;
    }
    hc_plan_reset(&p);
  }
  free(in);
  free(out);
  return m;
}

static size_t crossing_bytes(const struct layout *l, enum hc_algo algo, struct hc_coll_args a, int *group_of,
                             int ngroups, struct hc_scratch_pool *pool) {
  return plans_move(l, algo, a, group_of, ngroups, NULL, pool).crossed;
}

/* A layout as the expected figures need it. */
struct facts {
  int n, G;
  const int *group_of, *size;
  size_t lacking, pairs; /* blocks that must enter groups; block pairs across */
};

/* The bytes call a must cross between groups (its root the last rank; for
 * send/recv, root is the distance to the peer). */
static size_t least_crossing(const struct facts *f, const struct hc_coll_args *a) {
  const size_t B = a->count * 4;
  size_t least = 0;
  switch (a->coll) {
  case HC_COLL_ALLREDUCE: return 2 * (size_t)(f->G - 1) * B;
  case HC_COLL_BROADCAST:
  case HC_COLL_REDUCE: return (size_t)(f->G - 1) * B;
  case HC_COLL_ALLTOALL: return f->pairs * B;
  case HC_COLL_GATHER:
  case HC_COLL_SCATTER: return (size_t)(f->n - f->size[f->group_of[f->n - 1]]) * B;
  case HC_COLL_SEND:
  case HC_COLL_RECV:
    for (int r = 0; r < f->n; r++) least += f->group_of[r] != f->group_of[(r + a->root) % f->n] ? B : 0;
    return least;
  default: return f->lacking * B;
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  struct hc_scratch_pool *pool;
  if (!CHECK_OK((hetcclResult_t)hc_scratch_pool_create(HC_POOL_HOST, NULL, 0, &pool)))
    return tu_finish("test_plan_groups");
  printf("%-32s %-14s %8s %12s %12s %12s\n", "layout", "collective", "count", "least", "hierarchy", "flat");
  for (size_t li = 0; li < HC_ARRAY_LEN(layouts); li++) {
    const struct layout *l = &layouts[li];
    const int n = (int)strlen(l->groups);
    int group_of[16], size[16] = {0}, G = 0;
    for (int i = 0; i < n; i++) { /* groups numbered in order of their lowest rank, as comm.c does */
      group_of[i] = -1;
      for (int j = 0; j < i && group_of[i] < 0; j++)
        if (l->groups[j] == l->groups[i]) group_of[i] = group_of[j];
      if (group_of[i] < 0) group_of[i] = G++;
      size[group_of[i]]++;
    }
    size_t lacking = 0, pairs = (size_t)n * (size_t)n; /* blocks that must enter groups; block pairs across */
    for (int g = 0; g < G; g++) {
      lacking += (size_t)(n - size[g]);
      pairs -= (size_t)size[g] * (size_t)size[g];
    }
    const struct facts f = {n, G, group_of, size, lacking, pairs};
    const enum hc_coll colls[] = {HC_COLL_ALLREDUCE, HC_COLL_BROADCAST,     HC_COLL_REDUCE,
                                  HC_COLL_ALLGATHER, HC_COLL_REDUCESCATTER, HC_COLL_ALLTOALL};
    const size_t counts[] = {100, 50000}; /* float32: below and above the ring threshold */
    for (size_t ci = 0; ci < HC_ARRAY_LEN(colls); ci++)
      for (size_t k = 0; k < HC_ARRAY_LEN(counts); k++) {
        struct hc_coll_args a = {
            .coll = colls[ci], .count = counts[k], .dtype = HC_FLOAT32, .op = HC_SUM, .root = n - 1};
        const size_t least = least_crossing(&f, &a);
        tu_set_case("%s: %s count %zu", l->name, hc_coll_name(a.coll), a.count);
        size_t hier = crossing_bytes(l, HC_ALGO_HIER, a, group_of, G, pool);
        size_t flat = crossing_bytes(l, HC_ALGO_RING, a, group_of, G, pool);
        printf("%-32s %-14s %8zu %12zu %12zu %12zu\n", l->name, hc_coll_name(a.coll), a.count, least, hier, flat);
        CHECK(hier == least, "%s: %s count %zu crosses %zu bytes between groups, expected %zu", l->name,
              hc_coll_name(a.coll), a.count, hier, least);
        if (a.coll != HC_COLL_ALLTOALL && strstr(l->name, "interleaved"))
          CHECK(flat > hier, "%s: %s count %zu: the flat plan crosses %zu bytes, the hierarchy %zu", l->name,
                hc_coll_name(a.coll), a.count, flat, hier);
      }
    /* Every group of two ranks or more runs the vendor. */
    bool vendor[16];
    for (int g = 0; g < G; g++) vendor[g] = size[g] > 1;
    const enum hc_coll vcolls[] = {HC_COLL_ALLREDUCE,     HC_COLL_BROADCAST, HC_COLL_REDUCE, HC_COLL_ALLGATHER,
                                   HC_COLL_REDUCESCATTER, HC_COLL_ALLTOALL,  HC_COLL_GATHER, HC_COLL_SCATTER,
                                   HC_COLL_SEND,          HC_COLL_RECV};
    for (size_t ci = 0; ci < HC_ARRAY_LEN(vcolls); ci++)
      for (size_t k = 0; k < HC_ARRAY_LEN(counts); k++) {
        struct hc_coll_args a = {
            .coll = vcolls[ci], .count = counts[k], .dtype = HC_FLOAT32, .op = HC_SUM, .root = n - 1};
        const bool p2p = a.coll == HC_COLL_SEND || a.coll == HC_COLL_RECV;
        if (p2p) a.root = 1; /* to the next rank, from the one before */
        const size_t least = least_crossing(&f, &a);
        const bool mates = !p2p || least < (size_t)n * a.count * 4; /* some pair is of one group */
        tu_set_case("%s: %s count %zu, vendor groups", l->name, hc_coll_name(a.coll), a.count);
        struct moved m = plans_move(l, HC_ALGO_AUTO, a, group_of, G, vendor, pool);
        printf("%-32s %-14s %8zu %12zu %12zu vendor steps %d, bytes inside vendor groups %zu\n", l->name,
               hc_coll_name(a.coll), a.count, least, m.crossed, m.vendor_steps, m.inside);
        /* A receive's plan sends nothing: its bytes are the matching sends'. */
        if (a.coll != HC_COLL_RECV)
          CHECK(m.crossed == least, "%s: %s count %zu with vendor groups crosses %zu bytes, expected %zu", l->name,
                hc_coll_name(a.coll), a.count, m.crossed, least);
        CHECK(m.inside == 0, "%s: %s count %zu: %zu bytes between ranks of a vendor group on hetccl's transports",
              l->name, hc_coll_name(a.coll), a.count, m.inside);
        CHECK((m.vendor_steps > 0) == mates, "%s: %s count %zu: %d VENDOR steps", l->name, hc_coll_name(a.coll),
              a.count, m.vendor_steps);
      }
  }
  hc_scratch_pool_destroy(pool);
  return tu_finish("test_plan_groups");
}
