/*
 * Ring algorithms: reduce-scatter, all-gather, and all-reduce as the two in
 * sequence. Each rank sends to next = rank+1 and receives from prev =
 * rank-1 (mod nranks); every step moves one chunk of one block, so a chunk
 * received at step s is forwarded at step s+1 while later chunks of step s
 * are still on the wire.
 *
 * Reduce-scatter: at step s (0 <= s < n-1) rank r sends block r-1-s and
 * receives block r-2-s, to which it adds its own contribution; after n-1
 * steps block r is complete on rank r. Every element is reduced in one
 * fixed order, on one rank, so all ranks end with identical bits.
 * All-gather: at step s rank r sends block r-s and receives block r-s-1.
 */
#include <stdlib.h>

#include "plan_priv.h"

static int ring_mod(int v, int n) { return ((v % n) + n) % n; }

/* Per (block, chunk): the last step that wrote the chunk in the output, and
 * the last one that read it (a receive into it must wait for both). */
struct chunk_refs {
  hc_ref_t *writer, *reader;
  size_t nchunks;
};

static hc_result_t chunk_refs_create(struct chunk_refs *t, int nblocks, size_t nchunks) {
  t->nchunks = nchunks;
  t->writer = calloc((size_t)nblocks * nchunks, sizeof(hc_ref_t));
  t->reader = calloc((size_t)nblocks * nchunks, sizeof(hc_ref_t));
  if (t->writer == NULL || t->reader == NULL) {
    free(t->writer);
    free(t->reader);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d x %zu chunk records", nblocks, nchunks);
  }
  return HC_OK;
}

static void chunk_refs_destroy(struct chunk_refs *t) {
  free(t->writer);
  free(t->reader);
}

hc_result_t hc_ring_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io) {
  return hc_ring_allreduce_split(p, x, a, io, NULL, NULL, NULL);
}

/* One ring all-reduce being built: who its neighbours are, how its blocks
 * are cut into chunks, and the last writer and reader of each chunk. */
struct ring_ar {
  struct hc_plan *p;
  const struct hc_coll_args *a;
  struct hc_alg_io io;
  int n, r, next, prev;
  size_t es, nch;
  struct chunk_refs t;
};

/* The reduce-scatter half: after it, block r of io.out holds the sum. */
static void ring_ar_reduce_scatter(struct ring_ar *g, struct hc_slots *sl) {
  const struct hc_coll_args *a = g->a;
  const struct hc_alg_io io = g->io;
  const int n = g->n, r = g->r;
  const size_t es = g->es, nch = g->nch;
  const enum hc_redop op = hc_step_op(a->op);
  size_t boff, blen, coff, clen;
  for (int s = 0; s < n - 1; s++) {
    const int sb = ring_mod(r - 1 - s, n), rb = ring_mod(r - 2 - s, n);
    for (size_t c = 0; c < nch; c++) {
      hc_block(a->count, n, sb, &boff, &blen);
      hc_chunk(blen, nch, c, &coff, &clen);
      if (clen) {
        /* Step 0 sends this rank's raw input, later steps the partial sums. */
        const void *src = s == 0 ? HC_PTR(io.in, boff + coff, es) : HC_PTR(io.out, boff + coff, es);
        hc_ref_t ready = s == 0 ? io.in_dep : g->t.writer[sb * nch + c];
        g->t.reader[sb * nch + c] = hc_push_send(g->p, g->next, src, clen * es, ready, 0);
      }
      hc_block(a->count, n, rb, &boff, &blen);
      hc_chunk(blen, nch, c, &coff, &clen);
      if (clen) {
        hc_ref_t *slot_user;
        void *slot = hc_slot_take(sl, &slot_user);
        hc_ref_t got = hc_push_recv(g->p, g->prev, slot, clen * es, *slot_user, 0);
        hc_ref_t red = hc_push_reduce(g->p, HC_PTR(io.out, boff + coff, es), slot, HC_PTR(io.in, boff + coff, es), clen,
                                      a->dtype, op, got, io.in_dep, 0);
        hc_reduce_reads_landing(g->p, red, slot);
        g->t.writer[rb * nch + c] = *slot_user = red;
      }
    }
  }
}

/* The all-gather half: block r of io.out goes round the ring. */
static void ring_ar_all_gather(struct ring_ar *g) {
  const int n = g->n, r = g->r;
  const size_t es = g->es, nch = g->nch;
  size_t boff, blen, coff, clen;
  for (int s = 0; s < n - 1; s++) {
    const int sb = ring_mod(r - s, n), rb = ring_mod(r - s - 1, n);
    for (size_t c = 0; c < nch; c++) {
      hc_block(g->a->count, n, sb, &boff, &blen);
      hc_chunk(blen, nch, c, &coff, &clen);
      if (clen)
        g->t.reader[sb * nch + c] =
            hc_push_send(g->p, g->next, HC_PTR(g->io.out, boff + coff, es), clen * es, g->t.writer[sb * nch + c], 0);
      hc_block(g->a->count, n, rb, &boff, &blen);
      hc_chunk(blen, nch, c, &coff, &clen);
      if (clen)
        g->t.writer[rb * nch + c] = hc_push_recv(g->p, g->prev, HC_PTR(g->io.out, boff + coff, es), clen * es,
                                                 g->t.writer[rb * nch + c], g->t.reader[rb * nch + c]);
    }
  }
}

hc_result_t hc_ring_allreduce_split(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                    struct hc_alg_io io, hc_ring_mid_fn mid, void *arg, hc_ref_t *done) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype);
  if (n == 1) {
    hc_ref_t d = hc_push_copy(p, io.out, io.in, a->count * es, io.in_dep, 0);
    if (mid) d = mid(p, arg, 0, a->count, d);
    d = hc_push_avg(p, a, io.out, a->count, n, d);
    if (done) *done = d;
    return HC_OK;
  }
  const size_t maxlen = HC_DIV_UP(a->count, (size_t)n);
  struct ring_ar g = {.p = p,
                      .a = a,
                      .io = io,
                      .n = n,
                      .r = r,
                      .next = hc_member(x, (r + 1) % n),
                      .prev = hc_member(x, (r + n - 1) % n),
                      .es = es,
                      .nch = hc_ring_nchunks(x, maxlen, es)};
  const size_t nch = g.nch;
  struct hc_slots sl;
  HC_TRY(chunk_refs_create(&g.t, n, nch));
  hc_result_t res = hc_slots_create(p, x, HC_DIV_UP(maxlen, nch) * es, SIZE_MAX, &sl);
  if (res != HC_OK) {
    chunk_refs_destroy(&g.t);
    return res;
  }
  ring_ar_reduce_scatter(&g, &sl);
  size_t boff, blen, coff, clen;
  hc_block(a->count, n, r, &boff, &blen);
  if (mid) { /* the join overwrites this block's writers, which become `after` anyway */
    hc_ref_t after = mid(p, arg, boff, blen, hc_plan_join(p, &g.t.writer[r * nch], (int)nch));
    for (size_t c = 0; c < nch; c++) g.t.writer[r * nch + c] = after;
  }
  for (size_t c = 0; c < nch; c++) {
    hc_chunk(blen, nch, c, &coff, &clen);
    g.t.writer[r * nch + c] = hc_push_avg(p, a, HC_PTR(io.out, boff + coff, es), clen, n, g.t.writer[r * nch + c]);
  }
  ring_ar_all_gather(&g);
  if (done) {
    /* Final once written, and free once the sends that read it are done
     * (a caller may write it next). The arrays are not read again. */
    hc_ref_t written = hc_plan_join(p, g.t.writer, n * (int)nch), sent = hc_plan_join(p, g.t.reader, n * (int)nch);
    *done = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_NOP, HC_DEPS(written, sent)});
  }
  hc_slots_destroy(&sl);
  chunk_refs_destroy(&g.t);
  return HC_OK;
}

/* Partial sums live in two block-sized buffers used by alternate steps:
 * the partial received at step s is forwarded at step s+1, and its buffer
 * is next written at step s+2, after that send (a smaller ring of slots
 * would be overwritten before the send that forwards it is even posted). */
hc_result_t hc_ring_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                  struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), count = a->count;
  const enum hc_redop op = hc_step_op(a->op);
  if (n == 1) {
    hc_ref_t d = hc_push_copy(p, io.out, io.in, count * es, io.in_dep, 0);
    hc_push_avg(p, a, io.out, count, n, d);
    return HC_OK;
  }
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t nch = hc_ring_nchunks(x, count, es);
  char *partial[2] = {NULL, NULL};
  if (n > 2) {
    partial[0] = hc_plan_scratch(p, 2 * count * es);
    if (partial[0] == NULL) return HC_OK; /* the plan reports it */
    partial[1] = partial[0] + count * es;
  }
  /* Per chunk: the reduce that made the partial being forwarded, and the
   * last step that read each partial buffer. */
  hc_ref_t *made = calloc(nch, sizeof(hc_ref_t)), *read[2];
  read[0] = calloc(nch, sizeof(hc_ref_t));
  read[1] = calloc(nch, sizeof(hc_ref_t));
  hc_result_t res = HC_OK;
  if (made == NULL || read[0] == NULL || read[1] == NULL) {
    res = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %zu chunk records", nch);
    goto out;
  }
  /* The last step receives straight into the output and reduces there,
   * unless the output is this rank's input block (in place). */
  char *last_land = io.out;
  if ((const char *)io.out == (const char *)io.in + (size_t)r * count * es) {
    last_land = hc_plan_scratch(p, count * es);
    if (last_land == NULL) goto out;
  }
  size_t coff, clen;
  for (int s = 0; s < n - 1; s++) {
    const int sb = ((r - 1 - s) % n + n) % n, rb = ((r - 2 - s) % n + n) % n;
    const bool last = s == n - 2; /* rb == r: the reduction lands in out */
    char *recv_into = last ? NULL : partial[s % 2];
    for (size_t c = 0; c < nch; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen == 0) continue;
      if (s == 0) {
        hc_push_send(p, next, HC_PTR(io.in, (size_t)sb * count + coff, es), clen * es, io.in_dep, 0);
      } else {
        int b = (s - 1) % 2;
        read[b][c] = hc_push_send(p, next, HC_PTR(partial[b], coff, es), clen * es, made[c], 0);
      }
      const void *mine = HC_PTR(io.in, (size_t)rb * count + coff, es);
      if (last) {
        void *dst = HC_PTR(io.out, coff, es), *land = HC_PTR(last_land, coff, es);
        hc_ref_t got = hc_push_recv(p, prev, land, clen * es, 0, 0);
        hc_ref_t red = hc_push_reduce(p, dst, land, mine, clen, a->dtype, op, got, io.in_dep, 0);
        if (land != dst) hc_reduce_reads_landing(p, red, land);
        hc_push_avg(p, a, dst, clen, n, red);
      } else {
        int b = s % 2;
        void *land = HC_PTR(recv_into, coff, es);
        hc_ref_t got = hc_push_recv(p, prev, land, clen * es, read[b][c], 0);
        made[c] = hc_push_reduce(p, land, land, mine, clen, a->dtype, op, got, io.in_dep, 0);
      }
    }
  }
out:
  free(made);
  free(read[0]);
  free(read[1]);
  return res;
}

hc_result_t hc_ring_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), count = a->count;
  hc_push_copy(p, HC_PTR(io.out, (size_t)r * count, es), io.in, count * es, io.in_dep, 0);
  if (n == 1) return HC_OK;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t nch = hc_ring_nchunks(x, count, es);
  hc_ref_t *received = calloc(nch, sizeof(hc_ref_t)); /* chunk c of the block received last */
  if (received == NULL) return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %zu chunk records", nch);
  size_t coff, clen;
  for (int s = 0; s < n - 1; s++) {
    const int sb = ring_mod(r - s, n), rb = ring_mod(r - s - 1, n);
    for (size_t c = 0; c < nch; c++) {
      hc_chunk(count, nch, c, &coff, &clen);
      if (clen == 0) continue;
      /* Step 0 sends straight from the input: no need to wait for its copy. */
      if (s == 0) hc_push_send(p, next, HC_PTR(io.in, coff, es), clen * es, io.in_dep, 0);
      else hc_push_send(p, next, HC_PTR(io.out, (size_t)sb * count + coff, es), clen * es, received[c], 0);
      received[c] = hc_push_recv(p, prev, HC_PTR(io.out, (size_t)rb * count + coff, es), clen * es, 0, 0);
    }
  }
  free(received);
  return HC_OK;
}
