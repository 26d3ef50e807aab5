/*
 * Hierarchical plans, for a comm of several groups (HETCCL_GROUP, or one
 * group per device kind and vendor). Each crosses between groups only the
 * bytes that must cross; groups may differ in size, and their ranks need
 * not be contiguous in rank order. Every rank derives the same groups from
 * the plan context and walks blocks and segments in the same order, so the
 * transfers of any two ranks meet in the same order.
 *
 * All-reduce:
 *   1. in each group, the reduce-scatter half of a ring all-reduce over the
 *      group's ranks: member j of group g ends with the group's sum of
 *      block j of the buffer (the buffer cut into as many blocks as g has
 *      members);
 *   2. across groups: the buffer is cut at every group's block boundaries
 *      into segments; a segment lies in one block of each group, and the
 *      owners of those blocks, one per group, all-reduce it with a ring of
 *      their own;
 *   3. in each group, the all-gather half.
 *   Each byte crosses between groups in one ring of one rank per group, so
 *   the bytes that cross do not grow with the size of the groups.
 *
 * All-gather and reduce-scatter: rank r's block reaches (or is summed for)
 * each other group through one designated member of that group, and the
 * designations spread the foreign blocks evenly over a group's members
 * (designee below). All-gather: each rank sends its block to its designee
 * in every other group, and each member passes the blocks it holds to the
 * rest of its group. Reduce-scatter: the members of a group sum block b on
 * b's designee, which sends that group's partial to b. Into each group g
 * cross n - size(g) blocks, the least possible.
 *
 * Broadcast and reduce: large messages run the pipelined chain over the
 * ranks ordered by group (the root's group first), which crosses between
 * groups ngroups - 1 times; small ones a binomial tree among one leader
 * per group (the root in its own), then one inside each group.
 *
 * All-to-all, gather, scatter and send/recv need no plan of their own:
 * their direct transfers (p2p.c) already move each byte once, from the
 * rank that has it to the rank that needs it.
 *
 * Inside a group whose ranks each own a distinct GPU of one vendor
 * (hc_plan_ctx.group_vendor), the group's steps are the vendor library's
 * on its communicator of the group (VENDOR steps), so that no byte moves
 * between two of its ranks through hetccl's transports: its reduce-scatter
 * and all-gather around step 2 of the all-reduce, its broadcast from and
 * reduce to the group's leader, rounds of its grouped sends and receives
 * for the all-gather's blocks, rounds of its reduce-scatter for the
 * reduce-scatter's (p2p.c does the same for all-to-all, gather and
 * scatter). Elsewhere hetccl's own algorithms run inside groups.
 */
#include <stdlib.h>
#include <string.h>

#include "plan_priv.h"

/* The groups of a plan context, as every rank derives them. */
struct groups {
  int ngroups;
  const int *group_of; /* per rank */
  int *members;        /* per group, its ranks in rank order: members[first[g] .. first[g + 1]) */
  int *first;
  int *pos;     /* per rank: its index among its group's members */
  int *leaders; /* per group (broadcast and reduce; see leaders_ctx) */
};

static void groups_free(struct groups *gr) {
  free(gr->members);
  free(gr->first);
  free(gr->pos);
  free(gr->leaders);
}

static hc_result_t groups_build(const struct hc_plan_ctx *x, struct groups *gr) {
  const int n = x->nranks, G = x->ngroups;
  *gr = (struct groups){.ngroups = G, .group_of = x->group_of};
  gr->members = malloc((size_t)n * sizeof(int));
  gr->first = calloc((size_t)G + 1, sizeof(int));
  gr->pos = malloc((size_t)n * sizeof(int));
  gr->leaders = malloc((size_t)G * sizeof(int));
  if (gr->members == NULL || gr->first == NULL || gr->pos == NULL || gr->leaders == NULL) {
    groups_free(gr);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d groups of %d ranks", G, n);
  }
  for (int i = 0; i < n; i++) gr->first[x->group_of[i] + 1]++;
  for (int g = 0; g < G; g++) gr->first[g + 1] += gr->first[g];
  int *placed = gr->leaders; /* borrowed: per group, its members placed so far */
  for (int g = 0; g < G; g++) placed[g] = 0;
  for (int i = 0; i < n; i++) {
    int g = x->group_of[i];
    gr->pos[i] = placed[g]++;
    gr->members[gr->first[g] + gr->pos[i]] = i;
  }
  return HC_OK;
}

static int group_size(const struct groups *gr, int g) { return gr->first[g + 1] - gr->first[g]; }
static int member(const struct groups *gr, int g, int i) { return gr->members[gr->first[g] + i]; }

/* The plan context of a ring, tree or chain over one group's members. */
static struct hc_plan_ctx group_ctx(const struct hc_plan_ctx *x, const struct groups *gr, int g, int rank) {
  struct hc_plan_ctx xg = *x;
  xg.members = &gr->members[gr->first[g]];
  xg.nranks = group_size(gr, g);
  xg.rank = gr->pos[rank];
  return xg;
}

/* The member of group g through which rank r's block enters g: r itself
 * when r is in g; otherwise the foreign ranks of g, in rank order, are dealt
 * out to g's members in turn. */
static int designee(const struct groups *gr, int r, int g) {
  if (gr->group_of[r] == g) return r;
  int below = 0; /* members of g below r */
  while (below < group_size(gr, g) && member(gr, g, below) < r) below++;
  return member(gr, g, (r - below) % group_size(gr, g));
}

/* designee(r, g) of every rank r, in one pass; NULL when out of memory. */
static int *designees_in(const struct groups *gr, int nranks, int g) {
  int *out = malloc((size_t)nranks * sizeof(int));
  if (out == NULL) return NULL;
  for (int r = 0, foreign = 0; r < nranks; r++)
    out[r] = gr->group_of[r] == g ? r : member(gr, g, foreign++ % group_size(gr, g));
  return out;
}

/* ---- all-reduce ---- */

struct hier_allreduce {
  const struct hc_plan_ctx *x;
  const struct hc_coll_args *a; /* the call as made (AVG divides by every rank) */
  const struct groups *gr;
  struct hc_alg_io io;
  int *owners;    /* one segment's owners, by group */
  hc_ref_t *done; /* per segment of this rank's block: its ring is done; a block
                     holds at most nranks segments (one per block boundary) */
};

/* Block b of group g's n members: the ring's (hc_block), or in a vendor
 * group the vendor's (count / n each, the last one also the rest). */
static void group_block(const struct hc_plan_ctx *x, int g, int n, size_t count, int b, size_t *off, size_t *len) {
  if (!hc_runs_vendor(x, g)) {
    hc_block(count, n, b, off, len);
    return;
  }
  const size_t q = count / (size_t)n;
  *off = q * (size_t)b;
  *len = b == n - 1 ? count - *off : q;
}

static hc_ref_t push_vendor(struct hc_plan *p, enum hc_coll coll, const void *src, void *dst, size_t count,
                            enum hc_dtype t, enum hc_redop op, int root, hc_ref_t dep) {
  return hc_plan_push(p, (struct hc_step){.kind = HC_STEP_VENDOR,
                                          .coll = (uint8_t)coll,
                                          .redop = (uint8_t)op,
                                          .dtype = (uint8_t)t,
                                          .src0 = src,
                                          .dst = dst,
                                          .count = count,
                                          .peer = root,
                                          HC_DEPS(dep)});
}

/* The block of group g that holds element e. */
static int block_of(const struct hier_allreduce *h, int g, size_t e, size_t *end) {
  const int n = group_size(h->gr, g);
  for (int b = 0; b < n; b++) {
    size_t off, len;
    group_block(h->x, g, n, h->a->count, b, &off, &len);
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
  struct hier_allreduce *h = arg;
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
      h->owners[g] = member(h->gr, g, block_of(h, g, lo, &end));
      hi = HC_MIN(hi, end);
    }
    struct hc_plan_ctx xs = *x;
    xs.members = h->owners;
    xs.nranks = G;
    xs.rank = mine;
    seg.count = hi - lo;
    void *at = HC_PTR(h->io.out, lo, es);
    hc_ref_t seg_done = 0;
    if (hc_ring_allreduce_split(p, &xs, &seg, (struct hc_alg_io){.in = at, .out = at, .in_dep = ready}, NULL, NULL,
                                &seg_done) != HC_OK)
      p->cap = -1; /* out of memory: hc_plan_add reports the plan as failed */
    h->done[ndone++] = seg_done;
    lo = hi;
  }
  hc_ref_t all = hc_plan_join(p, h->done, ndone);
  return hc_push_avg(p, h->a, HC_PTR(h->io.out, off, es), len, x->nranks, all ? all : ready);
}

/* Steps 1 and 3 in a vendor group: the vendor's reduce-scatter (the rest,
 * count mod size, all-reduced on every member: the last member owns it),
 * and its all-gather (the rest broadcast from the last member). Vendor
 * steps of all members are made in the same order, as the vendor needs. */
static hc_result_t vendor_allreduce(struct hc_plan *p, const struct hc_plan_ctx *xg, const struct hc_coll_args *a,
                                    struct hc_alg_io io, struct hier_allreduce *h) {
  const int n = xg->nranks, j = xg->rank;
  const size_t es = hc_dtype_size(a->dtype), q = a->count / (size_t)n, rest = a->count - q * (size_t)n;
  const enum hc_redop op = hc_step_op(a->op);
  hc_ref_t ready = io.in_dep;
  if (q)
    ready = push_vendor(p, HC_COLL_REDUCESCATTER, io.in, HC_PTR(io.out, (size_t)j * q, es), q, a->dtype, op, 0, ready);
  if (rest)
    ready = push_vendor(p, HC_COLL_ALLREDUCE, HC_PTR(io.in, (size_t)n * q, es), HC_PTR(io.out, (size_t)n * q, es), rest,
                        a->dtype, op, 0, ready);
  hc_ref_t after = across(p, h, (size_t)j * q, j == n - 1 ? q + rest : q, ready);
  if (q)
    after = push_vendor(p, HC_COLL_ALLGATHER, HC_PTR(io.out, (size_t)j * q, es), io.out, q, a->dtype, op, 0, after);
  if (rest)
    push_vendor(p, HC_COLL_BROADCAST, HC_PTR(io.out, (size_t)n * q, es), HC_PTR(io.out, (size_t)n * q, es), rest,
                a->dtype, op, n - 1, after);
  return HC_OK;
}

static hc_result_t allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct groups *gr,
                             const struct hc_coll_args *a, struct hc_alg_io io) {
  struct hier_allreduce h = {.x = x, .a = a, .gr = gr, .io = io};
  h.owners = malloc((size_t)x->ngroups * sizeof(int));
  h.done = malloc((size_t)x->nranks * sizeof(hc_ref_t));
  hc_result_t r;
  if (h.owners == NULL || h.done == NULL) {
    r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d groups", x->ngroups);
  } else {
    struct hc_plan_ctx xg = group_ctx(x, gr, x->group_of[x->rank], x->rank);
    struct hc_coll_args in_group = *a;
    in_group.op = hc_step_op(a->op); /* AVG divides once, after the groups' sums meet */
    r = hc_runs_vendor(x, x->group_of[x->rank]) ? vendor_allreduce(p, &xg, &in_group, io, &h)
                                                : hc_ring_allreduce_split(p, &xg, &in_group, io, across, &h, NULL);
  }
  free(h.owners);
  free(h.done);
  return r;
}

/* ---- broadcast and reduce ---- */

/* The ranks ordered by group, the root's group first and the root first in
 * it: a chain over them crosses between groups ngroups - 1 times. */
static void chain_order(const struct groups *gr, int root, int *order) {
  const int rg = gr->group_of[root];
  int k = 0;
  order[k++] = root;
  for (int i = 0; i < group_size(gr, rg); i++)
    if (member(gr, rg, i) != root) order[k++] = member(gr, rg, i);
  for (int g = 0; g < gr->ngroups; g++)
    for (int i = 0; g != rg && i < group_size(gr, g); i++) order[k++] = member(gr, g, i);
}

typedef hc_result_t (*alg_fn)(struct hc_plan *, const struct hc_plan_ctx *, const struct hc_coll_args *,
                              struct hc_alg_io);

/* The chain over chain_order, its root at position 0. */
static hc_result_t chain_by_group(struct hc_plan *p, const struct hc_plan_ctx *x, const struct groups *gr,
                                  const struct hc_coll_args *a, struct hc_alg_io io, alg_fn chain) {
  int *order = malloc((size_t)x->nranks * sizeof(int));
  if (order == NULL) return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for a chain of %d ranks", x->nranks);
  chain_order(gr, a->root, order);
  struct hc_plan_ctx xc = *x;
  xc.members = order;
  for (int i = 0; i < x->nranks; i++)
    if (order[i] == x->rank) xc.rank = i;
  struct hc_coll_args ac = *a;
  ac.root = 0;
  hc_result_t r = chain(p, &xc, &ac, io);
  free(order);
  return r;
}

/* Large messages chain through every rank, unless some group runs the
 * vendor's library (whose own broadcast and reduce pipeline inside it). */
static bool chained(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  for (int g = 0; g < x->ngroups; g++)
    if (hc_runs_vendor(x, g)) return false;
  return a->count * hc_dtype_size(a->dtype) >= x->ring_threshold;
}

/* Small messages: one leader per group (the root in its own group, the
 * lowest rank in the others), so that a tree among the leaders is the only
 * traffic between groups. */
static struct hc_plan_ctx leaders_ctx(const struct hc_plan_ctx *x, struct groups *gr, int root) {
  for (int g = 0; g < gr->ngroups; g++) gr->leaders[g] = gr->group_of[root] == g ? root : member(gr, g, 0);
  struct hc_plan_ctx xl = *x;
  xl.members = gr->leaders;
  xl.nranks = gr->ngroups;
  xl.rank = x->group_of[x->rank];
  return xl;
}

/* A tree among the leaders, then one inside each group from its leader. */
static hc_result_t two_level_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, struct groups *gr,
                                       const struct hc_coll_args *a, struct hc_alg_io io) {
  const int me = x->rank, mine = x->group_of[me];
  const struct hc_plan_ctx xl = leaders_ctx(x, gr, a->root);
  struct hc_alg_io in_group = io;
  if (gr->leaders[mine] == me) {
    struct hc_coll_args al = *a;
    al.root = x->group_of[a->root];
    hc_ref_t have = 0;
    HC_TRY(hc_tree_broadcast(p, &xl, &al,
                             (struct hc_alg_io){.in = io.in, .out = io.out, .in_dep = io.in_dep, .out_ready = &have}));
    in_group = (struct hc_alg_io){.in = io.out, .out = io.out, .in_dep = have};
  }
  if (group_size(gr, mine) == 1) return HC_OK;
  if (hc_runs_vendor(x, mine)) {
    /* Off the leader the vendor reads no source: the output stands in. */
    push_vendor(p, HC_COLL_BROADCAST, gr->leaders[mine] == me ? in_group.in : io.out, io.out, a->count, a->dtype, a->op,
                gr->pos[gr->leaders[mine]], in_group.in_dep);
    return HC_OK;
  }
  struct hc_plan_ctx xg = group_ctx(x, gr, mine, me);
  struct hc_coll_args ag = *a;
  ag.root = gr->pos[gr->leaders[mine]];
  return hc_tree_broadcast(p, &xg, &ag, in_group);
}

/* A tree inside each group to its leader (which, unless it is the root,
 * sums into scratch: its receive buffer is not to be written), then one
 * among the leaders to the root. */
static hc_result_t two_level_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, struct groups *gr,
                                    const struct hc_coll_args *a, struct hc_alg_io io) {
  const int me = x->rank, mine = x->group_of[me];
  const struct hc_plan_ctx xl = leaders_ctx(x, gr, a->root);
  const bool is_leader = gr->leaders[mine] == me;
  struct hc_coll_args sum = *a;
  sum.op = hc_step_op(a->op); /* AVG divides once, on the root */
  struct hc_alg_io across = io;
  if (group_size(gr, mine) > 1) {
    struct hc_plan_ctx xg = group_ctx(x, gr, mine, me);
    struct hc_coll_args ag = sum;
    ag.root = gr->pos[gr->leaders[mine]];
    void *group_sum = NULL;
    if (me == a->root) group_sum = io.out;
    else if (is_leader && (group_sum = hc_plan_scratch(p, a->count * hc_dtype_size(a->dtype))) == NULL)
      return HC_OK; /* the plan reports it */
    hc_ref_t have = 0;
    if (hc_runs_vendor(x, mine))
      have = push_vendor(p, HC_COLL_REDUCE, io.in, group_sum, a->count, a->dtype, sum.op, ag.root, io.in_dep);
    else
      HC_TRY(hc_tree_reduce(
          p, &xg, &ag, (struct hc_alg_io){.in = io.in, .out = group_sum, .in_dep = io.in_dep, .out_ready = &have}));
    across = (struct hc_alg_io){.in = group_sum, .out = io.out, .in_dep = have};
  }
  if (!is_leader) return HC_OK;
  struct hc_coll_args al = sum;
  al.root = x->group_of[a->root];
  hc_ref_t have = 0;
  across.out_ready = &have;
  HC_TRY(hc_tree_reduce(p, &xl, &al, across));
  if (me == a->root) hc_push_avg(p, a, io.out, a->count, x->nranks, have);
  return HC_OK;
}

/* ---- all-gather and reduce-scatter ---- */

/* The k-th block that member i of group g holds first (all-gather) or
 * sums (reduce-scatter): k = 0 its own, then the foreign blocks designated
 * to it (first[b], the designees in g), in rank order; -1 past its last. */
static int kth_held(const struct groups *gr, const int *first, int nranks, int g, int i, int k) {
  const int m = member(gr, g, i);
  if (k == 0) return m;
  for (int b = 0; b < nranks; b++)
    if (gr->group_of[b] != g && first[b] == m && --k == 0) return b;
  return -1;
}

#define BLOCK(b, off) HC_PTR(io.out, (size_t)(b)*count + (off), es)

/* All-gather inside a vendor group: rounds of the vendor's grouped sends
 * and receives. In round k each member passes the k-th block it holds
 * (kth_held) to the rest of the group, straight into their outputs; round
 * 0 (the members' own blocks) waits for nothing that crosses between
 * groups, so it overlaps those transfers. held: per (block, chunk), the
 * step that received it here. */
static hc_result_t vendor_allgather_inside(struct hc_plan *p, const struct hc_plan_ctx *x, const struct groups *gr,
                                           const int *holder, const hc_ref_t *held, size_t nch, struct hc_alg_io io,
                                           size_t count, size_t es) {
  const int n = x->nranks, me = x->rank, mine = x->group_of[me], m = group_size(gr, mine), pos = gr->pos[me];
  struct hc_vendor_p2p *ops = malloc((size_t)(2 * m) * sizeof(*ops));
  hc_ref_t *chunks = malloc(nch * sizeof(hc_ref_t));
  if (ops == NULL || chunks == NULL) {
    free(ops);
    free(chunks);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for a vendor group of %d", m);
  }
  for (int k = 0;; k++) {
    int nops = 0;
    bool any = false;
    hc_ref_t ready = io.in_dep;
    const int mine_b = kth_held(gr, holder, n, mine, pos, k);
    if (mine_b >= 0) {
      any = true;
      if (mine_b != me) {
        memcpy(chunks, &held[(size_t)mine_b * nch], nch * sizeof(hc_ref_t));
        ready = hc_plan_join(p, chunks, (int)nch);
      }
      void *src = mine_b == me ? (void *)io.in : BLOCK(mine_b, 0);
      for (int i = 0; i < m; i++)
        if (i != pos) ops[nops++] = (struct hc_vendor_p2p){.buf = src, .bytes = count * es, .peer = i, .send = true};
    }
    for (int i = 0; i < m; i++) {
      const int b = i == pos ? -1 : kth_held(gr, holder, n, mine, i, k);
      if (b < 0) continue;
      any = true;
      ops[nops++] = (struct hc_vendor_p2p){.buf = BLOCK(b, 0), .bytes = count * es, .peer = i, .send = false};
    }
    if (!any) break;
    hc_push_vendor_p2p(p, ops, nops, ready, 0);
  }
  free(ops);
  free(chunks);
  return HC_OK;
}

static hc_result_t allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct groups *gr,
                             const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, me = x->rank, mine = x->group_of[me];
  const size_t es = hc_dtype_size(a->dtype), count = a->count;
  const size_t nch = hc_nchunks(count, es, x->chunk_bytes);
  /* Per (block, chunk): the step after which this rank holds it in out. */
  hc_ref_t *held = calloc((size_t)n * nch, sizeof(hc_ref_t));
  int *holder = designees_in(gr, n, mine); /* per block: the member of this group that holds it first */
  if (held == NULL || holder == NULL) {
    free(held);
    free(holder);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d x %zu chunk records", n, nch);
  }
  size_t coff, clen;
  hc_push_copy(p, BLOCK(me, 0), io.in, count * es, io.in_dep, 0);
  /* Across: this rank's block to its designee in each other group; the
   * foreign blocks designated to this rank, from their ranks. */
  for (int g = 0; g < x->ngroups; g++)
    for (size_t c = 0; c < nch && g != mine; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen) hc_push_send(p, designee(gr, me, g), HC_PTR(io.in, coff, es), clen * es, io.in_dep, 0);
    }
  for (int b = 0; b < n; b++)
    for (size_t c = 0; c < nch && x->group_of[b] != mine && holder[b] == me; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen) held[(size_t)b * nch + c] = hc_push_recv(p, b, BLOCK(b, coff), clen * es, 0, 0);
    }
  hc_result_t r = HC_OK;
  if (hc_runs_vendor(x, mine)) {
    r = vendor_allgather_inside(p, x, gr, holder, held, nch, io, count, es);
    goto out;
  }
  /* Inside the group: every block to the members that lack it, from the
   * member that holds it, in block order. */
  for (int b = 0; b < n; b++) {
    for (size_t c = 0; c < nch; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen == 0) continue;
      if (holder[b] != me) {
        hc_push_recv(p, holder[b], BLOCK(b, coff), clen * es, 0, 0);
        continue;
      }
      const void *src = b == me ? HC_PTR(io.in, coff, es) : BLOCK(b, coff);
      hc_ref_t ready = b == me ? io.in_dep : held[(size_t)b * nch + c];
      for (int i = 0; i < group_size(gr, mine); i++)
        if (member(gr, mine, i) != me) hc_push_send(p, member(gr, mine, i), src, clen * es, ready, 0);
    }
  }
out:
  free(held);
  free(holder);
  return r;
}
#undef BLOCK

/* acc[0..len) = acc op (a chunk received from peer), where acc starts as
 * *cur (this rank's input) and is dst from the first reduction on. */
static void sum_from(struct hc_plan *p, struct hc_slots *s, int peer, void *dst, const void **cur, hc_ref_t *cur_ref,
                     size_t len, enum hc_dtype t, enum hc_redop op) {
  hc_ref_t *slot_user;
  void *slot = hc_slot_take(s, &slot_user);
  hc_ref_t got = hc_push_recv(p, peer, slot, len * hc_dtype_size(t), *slot_user, 0);
  *cur_ref = *slot_user = hc_push_reduce(p, dst, *cur, slot, len, t, op, got, *cur_ref, 0);
  *cur = dst;
}

/* Reduce-scatter in a vendor group: rounds of the vendor's reduce-scatter.
 * In round k member i gets the group's sum of the k-th block it sums
 * (kth_held), read straight from the inputs where those blocks lie in
 * member order, else from a packed copy; a round where some member has
 * no block left is the vendor's reduce of each block to its member. Then,
 * as in hetccl's own plan, a foreign block's partial goes to its rank,
 * and this rank's own block sums the other groups' partials. */
static hc_result_t vendor_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                        struct hc_alg_io io, const struct groups *gr, const int *summer,
                                        struct hc_slots *s) {
  const int n = x->nranks, me = x->rank, mine = x->group_of[me], m = group_size(gr, mine), pos = gr->pos[me];
  const size_t es = hc_dtype_size(a->dtype), count = a->count, nch = hc_nchunks(count, es, x->chunk_bytes);
  const enum hc_redop op = hc_step_op(a->op);
  int *round = malloc((size_t)m * sizeof(int));
  hc_ref_t *copies = malloc((size_t)m * sizeof(hc_ref_t));
  if (round == NULL || copies == NULL) {
    free(round);
    free(copies);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for a vendor group of %d", m);
  }
  hc_ref_t own_summed = 0;
  for (int k = 0;; k++) {
    bool any = false, complete = true, in_order = true;
    for (int i = 0; i < m; i++) {
      round[i] = kth_held(gr, summer, n, mine, i, k);
      any |= round[i] >= 0;
      complete &= round[i] >= 0;
      in_order &= round[i] == round[0] + i;
    }
    if (!any) break;
    const int b = round[pos];
    char *acc = b == me ? io.out : b >= 0 ? hc_plan_scratch(p, count * es) : NULL;
    if (b >= 0 && acc == NULL) break; /* the plan reports it */
    hc_ref_t summed = 0;
    if (complete) {
      const void *src = HC_PTR(io.in, (size_t)round[0] * count, es);
      hc_ref_t ready = io.in_dep;
      if (!in_order) {
        char *pack = hc_plan_scratch(p, (size_t)m * count * es);
        if (pack == NULL) break; /* the plan reports it */
        for (int i = 0; i < m; i++)
          copies[i] = hc_push_copy(p, pack + (size_t)i * count * es, HC_PTR(io.in, (size_t)round[i] * count, es),
                                   count * es, io.in_dep, 0);
        ready = hc_plan_join(p, copies, m);
        src = pack;
      }
      summed = push_vendor(p, HC_COLL_REDUCESCATTER, src, acc, count, a->dtype, op, 0, ready);
    } else {
      for (int i = 0; i < m; i++) {
        if (round[i] < 0) continue;
        const void *in_block = HC_PTR(io.in, (size_t)round[i] * count, es);
        /* Off the root the vendor writes nothing: the input stands in. */
        hc_ref_t r = push_vendor(p, HC_COLL_REDUCE, in_block, i == pos ? acc : (void *)in_block, count, a->dtype, op, i,
                                 io.in_dep);
        if (i == pos) summed = r;
      }
    }
    if (b == me) own_summed = summed;
    size_t coff, clen;
    for (size_t c = 0; c < nch && b >= 0 && b != me; c++) { /* across: the group's partial, to b */
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen) hc_push_send(p, b, HC_PTR(acc, coff, es), clen * es, summed, 0);
    }
  }
  /* Across: the other groups' partials of this rank's block, after every
   * round. The vendor's steps run in stream order, so a receive before a
   * later round would wait for the peer's later round, which waits for
   * this rank's: each rank would wait for the other. */
  size_t coff, clen;
  for (size_t c = 0; c < nch; c++) {
    hc_chunk(count, nch, c, &coff, &clen);
    if (clen == 0) continue;
    void *dst = HC_PTR(io.out, coff, es);
    const void *cur = dst;
    hc_ref_t cur_ref = own_summed;
    for (int g = 0; g < x->ngroups; g++)
      if (g != mine) sum_from(p, s, designee(gr, me, g), dst, &cur, &cur_ref, clen, a->dtype, op);
    hc_push_avg(p, a, dst, clen, n, cur_ref);
  }
  free(round);
  free(copies);
  return HC_OK;
}

static hc_result_t reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct groups *gr,
                                 const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, me = x->rank, mine = x->group_of[me], G = x->ngroups;
  const size_t es = hc_dtype_size(a->dtype), count = a->count;
  const enum hc_redop op = hc_step_op(a->op);
  const size_t nch = hc_nchunks(count, es, x->chunk_bytes);
  struct hc_slots s;
  HC_TRY(hc_slots_create(p, x, HC_DIV_UP(count, nch) * es, SIZE_MAX, &s));
  int *summer = designees_in(gr, n, mine); /* per block: the member of this group that sums it */
  hc_result_t r = HC_OK;
  if (summer == NULL) {
    r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for the summers of %d blocks", n);
    goto out;
  }
  if (hc_runs_vendor(x, mine)) {
    r = vendor_reducescatter(p, x, a, io, gr, summer, &s);
    goto out;
  }
  size_t coff, clen;
  for (int b = 0; b < n; b++) {
    const void *in_block = HC_PTR(io.in, (size_t)b * count, es);
    const int d = summer[b];
    if (d != me) { /* inside the group: this rank's part of block b, to the member that sums it */
      for (size_t c = 0; c < nch; c++) {
        hc_chunk(count, nch, c, &coff, &clen);
        if (clen) hc_push_send(p, d, HC_PTR(in_block, coff, es), clen * es, io.in_dep, 0);
      }
      continue;
    }
    /* This rank sums block b for its group: into its output when b is its
     * own block, else into scratch, from where the partial goes to b. */
    char *acc = b == me ? io.out : hc_plan_scratch(p, count * es);
    if (acc == NULL) goto out; /* the plan reports it */
    for (size_t c = 0; c < nch; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen == 0) continue;
      void *dst = HC_PTR(acc, coff, es);
      const void *cur = HC_PTR(in_block, coff, es);
      hc_ref_t cur_ref = io.in_dep;
      for (int i = 0; i < group_size(gr, mine); i++)
        if (member(gr, mine, i) != me) sum_from(p, &s, member(gr, mine, i), dst, &cur, &cur_ref, clen, a->dtype, op);
      if (b != me) { /* across: the group's partial, to b */
        hc_push_send(p, b, cur, clen * es, cur_ref, 0);
        continue;
      }
      for (int g = 0; g < G; g++) /* across: the other groups' partials */
        if (g != mine) sum_from(p, &s, designee(gr, me, g), dst, &cur, &cur_ref, clen, a->dtype, op);
      hc_push_avg(p, a, dst, clen, n, cur_ref);
    }
  }
out:
  hc_slots_destroy(&s);
  free(summer);
  return r;
}

/* The builder of every hierarchical plan: the groups are built once, for
 * the call. A comm of one group all-reduces with the ring. */
hc_result_t hc_hier(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a, struct hc_alg_io io) {
  if (a->coll == HC_COLL_ALLREDUCE && (x->ngroups < 2 || x->group_of == NULL)) return hc_ring_allreduce(p, x, a, io);
  struct groups gr;
  HC_TRY(groups_build(x, &gr));
  hc_result_t r;
  switch (a->coll) {
  case HC_COLL_ALLREDUCE: r = allreduce(p, x, &gr, a, io); break;
  case HC_COLL_BROADCAST:
    r = chained(x, a) ? chain_by_group(p, x, &gr, a, io, hc_chain_broadcast) : two_level_broadcast(p, x, &gr, a, io);
    break;
  case HC_COLL_REDUCE:
    r = chained(x, a) ? chain_by_group(p, x, &gr, a, io, hc_chain_reduce) : two_level_reduce(p, x, &gr, a, io);
    break;
  case HC_COLL_ALLGATHER: r = allgather(p, x, &gr, a, io); break;
  case HC_COLL_REDUCESCATTER: r = reducescatter(p, x, &gr, a, io); break;
  default: r = HC_FAIL(HC_ERR_INTERNAL, "plan: no hierarchical plan for collective %d", (int)a->coll);
  }
  groups_free(&gr);
  return r;
}
