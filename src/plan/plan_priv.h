/* Builder helpers shared by the algorithm files of plan/. */
#ifndef HC_PLAN_PRIV_H_
#define HC_PLAN_PRIV_H_

#include "plan.h"

#define HC_DEPS(...) .deps = {__VA_ARGS__}
static inline hc_ref_t hc_push_send(struct hc_plan *p, int peer, const void *src, size_t bytes, hc_ref_t d0,
                                    hc_ref_t d1) {
  return hc_plan_push(
      p, (struct hc_step){.kind = HC_STEP_SEND, .peer = peer, .src0 = src, .count = bytes, HC_DEPS(d0, d1)});
}
static inline hc_ref_t hc_push_recv(struct hc_plan *p, int peer, void *dst, size_t bytes, hc_ref_t d0, hc_ref_t d1) {
  return hc_plan_push(
      p, (struct hc_step){.kind = HC_STEP_RECV, .peer = peer, .dst = dst, .count = bytes, HC_DEPS(d0, d1)});
}
static inline hc_ref_t hc_push_copy(struct hc_plan *p, void *dst, const void *src, size_t bytes, hc_ref_t d0,
                                    hc_ref_t d1) {
  if (dst == src) return d0; /* nothing to do: the data is already in place */
  return hc_plan_push(p,
                      (struct hc_step){.kind = HC_STEP_COPY, .dst = dst, .src0 = src, .count = bytes, HC_DEPS(d0, d1)});
}
/* dst = lo op hi, where lo is the contribution of the lower ranks: every
 * rank that computes the same element orders the operands the same way. */
static inline hc_ref_t hc_push_reduce(struct hc_plan *p, void *dst, const void *lo, const void *hi, size_t count,
                                      enum hc_dtype t, enum hc_redop op, hc_ref_t d0, hc_ref_t d1, hc_ref_t d2) {
  return hc_plan_push(p, (struct hc_step){.kind = HC_STEP_REDUCE,
                                          .redop = (uint8_t)op,
                                          .dtype = (uint8_t)t,
                                          .dst = dst,
                                          .src0 = lo,
                                          .src1 = hi,
                                          .count = count,
                                          HC_DEPS(d0, d1, d2)});
}
/* Says that reduce's source `landing`, where a receive it depends on puts
 * its bytes, is read by this step alone (hc_step.landed). */
static inline void hc_reduce_reads_landing(struct hc_plan *p, hc_ref_t reduce, const void *landing) {
  if (reduce == 0) return; /* out of memory: the plan reports it */
  struct hc_step *s = &p->steps[reduce - 1];
  s->landed |= (uint8_t)((s->src0 == landing) | (s->src1 == landing) << 1);
}
static inline hc_ref_t hc_push_scale(struct hc_plan *p, void *dst, const void *src, size_t count, enum hc_dtype t,
                                     enum hc_scale_kind kind, hc_ref_t d0, hc_ref_t d1) {
  return hc_plan_push(p, (struct hc_step){.kind = HC_STEP_SCALE,
                                          .redop = (uint8_t)kind,
                                          .dtype = (uint8_t)t,
                                          .dst = dst,
                                          .src0 = src,
                                          .count = count,
                                          HC_DEPS(d0, d1)});
}

/* Scratch of at least bytes, owned by the plan: for data (device memory
 * in a GPU plan), and for what the host reads (scalars of SCALE steps,
 * staging slots; pinned memory in a GPU plan). */
void *hc_plan_scratch(struct hc_plan *p, size_t bytes);
void *hc_plan_host_scratch(struct hc_plan *p, size_t bytes);
bool hc_plan_in_host_scratch(const struct hc_plan *p, const void *ptr);
/* Room for one more element after the n in the array at *items_ptr (cap
 * of them allocated, elem bytes each): doubles it, from first. false, with
 * the plan marked failed (reported once, as its out-of-memory), when it
 * cannot. */
bool hc_plan_room(struct hc_plan *p, void *items_ptr, size_t n, size_t *cap, size_t elem, size_t first);

/* Does group g run the vendor's library inside (hc_plan_ctx.group_vendor)? */
static inline bool hc_runs_vendor(const struct hc_plan_ctx *x, int g) { return x->group_vendor && x->group_vendor[g]; }
/* Is peer another rank of this rank's group, and does that group run the
 * vendor's library? Only plans over the whole comm (no members list) ask the vendor. */
static inline bool hc_vendor_peer(const struct hc_plan_ctx *x, int peer) {
  return x->group_of && x->members == NULL && peer != x->rank && x->group_of[peer] == x->group_of[x->rank] &&
         hc_runs_vendor(x, x->group_of[x->rank]);
}
/* Rank r's index among its group's members (its rank on the vendor's
 * communicator of the group). */
int hc_group_index(const struct hc_plan_ctx *x, int r);
/* A VENDOR step of coll SEND: ops[0..n) in one group of the vendor's sends
 * and receives (the list is copied into the plan's host scratch). */
hc_ref_t hc_push_vendor_p2p(struct hc_plan *p, const struct hc_vendor_p2p *ops, int n, hc_ref_t d0, hc_ref_t d1);

/* Member v of the ranks an algorithm runs over (hc_plan_ctx.members). */
static inline int hc_member(const struct hc_plan_ctx *x, int v) { return x->members ? x->members[v] : v; }

/* Block b of a buffer of count elements split over n: first element, length. */
static inline void hc_block(size_t count, int n, int b, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  *off = base * (size_t)b + HC_MIN((size_t)b, extra);
  *len = base + ((size_t)b < extra);
}
/* Chunk c of nchunks of a block of len elements. */
static inline void hc_chunk(size_t len, size_t nchunks, size_t c, size_t *off, size_t *clen) {
  *off = len * c / nchunks;
  *clen = len * (c + 1) / nchunks - *off;
}
/* Chunks per block so that one chunk of the longest block fits chunk_bytes. */
static inline size_t hc_nchunks(size_t maxlen, size_t esize, size_t chunk_bytes) {
  size_t n = HC_DIV_UP(maxlen * esize, chunk_bytes);
  return n ? n : 1;
}
/* A ring's chunks per block. On a comm with a GPU rank, chunk_bytes is
 * the window slot (8 MiB), and a block of one or two slots cut there would
 * leave the copies of a step nothing to overlap with: such a block goes in
 * up to 4 chunks of at least half a slot. Measured on the H200 (bench/gpu,
 * 2 ranks): at 16 MiB, 4 MiB chunks ran at 17.5 GB/s against 12.5 for
 * 8 MiB ones with ranks as threads; from 64 MiB, 8 MiB chunks ran at
 * 20.4 GB/s against 17.7-18.5 for 4 MiB ones with ranks as processes (each
 * chunk costs a switch between their contexts). A quarter slot (2 MiB
 * chunks, HC_RING_CUT_PART 4) lost at 16 MiB on an H100: 17.4 against 18.0
 * GB/s as threads, 17.8 against 20.2 as processes under MPS (bench/gpu/
 * README.md, thirteenth session). Every rank of the comm
 * cuts the same way: the rule reads only the block and the comm. Other
 * cuts are builds of their own (bench/gpu/variants.sh), not settings: every
 * rank must cut alike. */
#ifndef HC_RING_CUT_PART
#define HC_RING_CUT_PART 2 /* the cut's chunks are at least 1/this of a slot */
#endif
#ifndef HC_RING_CUT_MAX
#define HC_RING_CUT_MAX 4 /* and at most this many */
#endif
static inline size_t hc_ring_nchunks(const struct hc_plan_ctx *x, size_t maxlen, size_t esize) {
  const size_t n = hc_nchunks(maxlen, esize, x->chunk_bytes);
  if (!x->any_gpu) return n;
  const size_t parts = maxlen * esize / HC_MAX(x->chunk_bytes / HC_RING_CUT_PART, 1);
  return HC_MIN(HC_MAX(n, HC_MIN(parts, HC_RING_CUT_MAX)), HC_MAX(maxlen, 1));
}

/* Receive slots in the plan's scratch, used round-robin: a receive into a
 * slot waits for the step that last read it (its user). */
struct hc_slots {
  char *base;
  size_t slot_bytes;
  int count, next;
  hc_ref_t *last_user;
};
/* x->scratch_slots slots (at least one, at most max_count) of slot_bytes. */
hc_result_t hc_slots_create(struct hc_plan *p, const struct hc_plan_ctx *x, size_t slot_bytes, size_t max_count,
                            struct hc_slots *s);
void hc_slots_destroy(struct hc_slots *s);
/* The next slot; *user points at its last user's record: a receive into
 * the slot waits for *user, and the caller sets it to the slot's new user. */
static inline void *hc_slot_take(struct hc_slots *s, hc_ref_t **user) {
  const int i = s->next;
  s->next = (s->next + 1) % s->count;
  *user = &s->last_user[i];
  return s->base + (size_t)i * s->slot_bytes;
}

#define HC_PTR(base, elems, esize) ((char *)(base) + (size_t)(elems) * (esize))

/* The reduction every algorithm applies step by step: SUM for AVG and
 * PREMULSUM (their scaling is a separate step). */
static inline enum hc_redop hc_step_op(enum hc_redop op) { return op == HC_AVG || op == HC_PREMULSUM ? HC_SUM : op; }

/* Algorithms. `in` is the data to contribute (the send buffer, or the
 * pre-scaled copy for PREMULSUM, ready once in_dep is done). Each algorithm
 * handles its own AVG division (hc_push_avg) where the result is final. */
struct hc_alg_io {
  const void *in;
  void *out;
  hc_ref_t in_dep;
  /* When not NULL (tree broadcast and reduce, for plans that continue from
   * their result): set to the step after which out holds this rank's
   * result. */
  hc_ref_t *out_ready;
};
hc_result_t hc_ring_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io);
/* The ring all-reduce over x's members with a hook between its halves:
 * once `ready` is done, elements [off, off + len) of io.out hold the
 * members' sum of this rank's block; mid may work on them further and
 * returns what the all-gather half must wait for. *done (when not NULL):
 * a step done once all of io.out is final and no step reads it any more. */
typedef hc_ref_t (*hc_ring_mid_fn)(struct hc_plan *p, void *arg, size_t off, size_t len, hc_ref_t ready);
hc_result_t hc_ring_allreduce_split(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                    struct hc_alg_io io, hc_ring_mid_fn mid, void *arg, hc_ref_t *done);
/* The collectives of a comm of several groups (hier.c). */
/* All-reduce, broadcast, reduce, all-gather and reduce-scatter, as a->coll
 * says. */
hc_result_t hc_hier(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a, struct hc_alg_io io);
hc_result_t hc_rd_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io);
hc_result_t hc_rd_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io);
hc_result_t hc_rh_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                struct hc_alg_io io);
/* onestep.c */
hc_result_t hc_onestep_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io);
hc_result_t hc_onestep_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io);
hc_result_t hc_onestep_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io);
/* direct.c */
hc_result_t hc_direct_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                struct hc_alg_io io);
hc_result_t hc_direct_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                    struct hc_alg_io io);
hc_result_t hc_ring_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                  struct hc_alg_io io);
hc_result_t hc_ring_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io);
hc_result_t hc_tree_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io);
hc_result_t hc_chain_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                               struct hc_alg_io io);
hc_result_t hc_tree_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                           struct hc_alg_io io);
hc_result_t hc_chain_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io);
hc_result_t hc_p2p_alltoallv(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                             struct hc_alg_io io);
/* Gather or scatter, as a->coll says. */
hc_result_t hc_p2p_gather_scatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                  struct hc_alg_io io);
/* The peer of send and receive is a->root; a->stage_send copies the data
 * aside first. */
hc_result_t hc_p2p_send(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                        struct hc_alg_io io);
hc_result_t hc_p2p_recv(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                        struct hc_alg_io io);

/* For AVG, the division of out[0..count) by nranks after dep; otherwise
 * nothing. Returns the reference after which out is final. */
hc_ref_t hc_push_avg(struct hc_plan *p, const struct hc_coll_args *a, void *out, size_t count, int nranks,
                     hc_ref_t dep);

#endif
