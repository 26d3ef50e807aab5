/*
 * Hierarchical all-reduce, for a comm of several groups (HETCCL_GROUP, or
 * one group per device kind and vendor):
 *   1. in each group, the reduce-scatter half of a ring all-reduce over the
 *      group's ranks: member j of group g ends with the group's sum of
 *      block j of the buffer (the buffer cut into as many blocks as g has
 *      members);
 *   2. across groups: the buffer is cut at every group's block boundaries
 *      into segments; a segment lies in one block of each group, and the
 *      owners of those blocks, one per group, all-reduce it with a ring of
 *      their own;
 *   3. in each group, the all-gather half.
 * Each byte crosses between groups in one ring of one rank per group, so
 * the bytes that cross do not grow with the size of the groups. Groups may
 * differ in size, and their ranks need not be contiguous. Every rank
 * derives the same groups, blocks and segments from the plan context, and
 * goes through its segments by offset, so the transfers of any two ranks
 * meet in the same order.
 *
 * Inside a group this is hetccl's own ring (a group whose ranks each own a
 * distinct NVIDIA GPU could run NCCL there: not built yet).
 */
#include <stdlib.h>

#include "plan_priv.h"

struct hier {
  const struct hc_plan_ctx *x;
  const struct hc_coll_args *a; /* the call as made (AVG divides by every rank) */
  struct hc_alg_io io;
  int *members;  /* per group, its ranks in rank order: members[first[g] .. first[g + 1]) */
  int *first;
  int *owners;   /* one segment's owners, by group */
  hc_ref_t *done; /* per segment of this rank's block: its ring is done; a block
                     holds at most nranks segments (one per block boundary) */
};

static int group_size(const struct hier *h, int g) { return h->first[g + 1] - h->first[g]; }

/* The block of group g that holds element e (blocks of a ring of that
 * group's size). */
static int block_of(const struct hier *h, int g, size_t e, size_t *end) {
  const int n = group_size(h, g);
  for (int b = 0; b < n; b++) {
    size_t off, len;
    hc_block(h->a->count, n, b, &off, &len);
    if (e < off + len) {
      *end = off + len;
      return b;
    }
  }
  *end = h->a->count;
  return n - 1;
}

/* Step 2 for this rank's block [off, off + len), the group's sum ready once
 * `ready` is done. */
static hc_ref_t across(struct hc_plan *p, void *arg, size_t off, size_t len, hc_ref_t ready) {
  struct hier *h = arg;
  const struct hc_plan_ctx *x = h->x;
  const int G = x->ngroups, mine = x->group_of[x->rank];
  const size_t es = hc_dtype_size(h->a->dtype);
  struct hc_coll_args seg = *h->a;
  seg.op = hc_step_op(h->a->op); /* the sum; AVG divides below */
  int ndone = 0;
  for (size_t lo = off; lo < off + len;) {
    size_t hi = off + len;
    for (int g = 0; g < G; g++) {
      size_t end;
      int b = block_of(h, g, lo, &end);
      h->owners[g] = h->members[h->first[g] + b];
      hi = HC_MIN(hi, end);
    }
    struct hc_plan_ctx xs = *x;
    xs.members = h->owners;
    xs.nranks = G;
    xs.rank = mine;
    seg.count = hi - lo;
    void *at = HC_PTR(h->io.out, lo, es);
    hc_ref_t seg_done = 0;
    if (hc_ring_allreduce_split(p, &xs, &seg, (struct hc_alg_io){.in = at, .out = at, .in_dep = ready}, NULL,
                                NULL, &seg_done) != HC_OK)
      p->cap = -1; /* out of memory: hc_plan_add reports the plan as failed */
    h->done[ndone++] = seg_done;
    lo = hi;
  }
  hc_ref_t all = hc_plan_join(p, h->done, ndone);
  return hc_push_avg(p, h->a, HC_PTR(h->io.out, off, es), len, x->nranks, all ? all : ready);
}

hc_result_t hc_hier_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x,
                              const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, G = x->ngroups;
  if (G < 2 || x->group_of == NULL) return hc_ring_allreduce(p, x, a, io);
  struct hier h = {.x = x, .a = a, .io = io};
  h.members = malloc((size_t)n * sizeof(int));
  h.first = calloc((size_t)G + 1, sizeof(int));
  h.owners = malloc((size_t)G * sizeof(int));
  h.done = malloc((size_t)n * sizeof(hc_ref_t));
  hc_result_t r = HC_OK;
  if (h.members == NULL || h.first == NULL || h.owners == NULL || h.done == NULL) {
    r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d groups of %d ranks", G, n);
    goto out;
  }
  for (int i = 0; i < n; i++) h.first[x->group_of[i] + 1]++;
  for (int g = 0; g < G; g++) h.first[g + 1] += h.first[g];
  int me = -1, *fill = h.owners; /* borrowed: per group, members placed so far */
  for (int g = 0; g < G; g++) fill[g] = 0;
  for (int i = 0; i < n; i++) {
    int g = x->group_of[i];
    if (i == x->rank) me = fill[g];
    h.members[h.first[g] + fill[g]++] = i;
  }
  const int mine = x->group_of[x->rank];
  struct hc_plan_ctx xg = *x;
  xg.members = &h.members[h.first[mine]];
  xg.nranks = group_size(&h, mine);
  xg.rank = me;
  struct hc_coll_args in_group = *a;
  in_group.op = hc_step_op(a->op); /* AVG divides once, after the groups' sums meet */
  r = hc_ring_allreduce_split(p, &xg, &in_group, io, across, &h, NULL);
out:
  free(h.members);
  free(h.first);
  free(h.owners);
  free(h.done);
  return r;
}
