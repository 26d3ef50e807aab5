/*
 * plan: step storage, the scratch pool, and hc_plan_add, which builds each
 * call with the algorithm the table in algos.c chooses. The algorithms live
 * in ring.c, tree.c, onestep.c, hier.c and p2p.c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan_priv.h"

/* ---- scratch pool ---- */

/* A host pool keeps its HC_POOL_KEEP largest free buffers and frees the
 * rest. A pinned or device pool frees nothing before it is destroyed:
 * freeing such memory (cuMemFreeHost, cuMemFree) waits for every stream of
 * the context, and a GPU call returns its plan's buffers on the calling
 * thread as soon as the call is enqueued (api/proxy.c), while its stream
 * may still wait for the progress engine's transfers (exec/engine.h): a
 * free there would make every GPU call wait for its own completion. Its
 * buffers are reused by size. */
#define HC_POOL_KEEP 8
struct hc_scratch_pool {
  pthread_mutex_t lock;
  enum hc_pool_kind kind;
  const struct hc_dev_ops *dev;
  int device;
  void **free_bufs;
  size_t *free_bytes;
  int cap;
};

static void *buf_alloc(const struct hc_scratch_pool *pool, size_t bytes) {
  size_t rounded = HC_DIV_UP(bytes ? bytes : 1, 4096) * 4096;
  void *p = NULL;
  switch (pool->kind) {
  case HC_POOL_HOST: return aligned_alloc(4096, rounded);
  case HC_POOL_PINNED: return hc_dev_host_alloc(pool->dev, rounded, &p) == HC_OK ? p : NULL;
  case HC_POOL_DEVICE: return hc_dev_mem_alloc(pool->dev, pool->device, rounded, &p) == HC_OK ? p : NULL;
  }
  return NULL;
}

static void buf_free(const struct hc_scratch_pool *pool, void *p) {
  if (p == NULL) return;
  switch (pool->kind) {
  case HC_POOL_HOST: free(p); break;
  case HC_POOL_PINNED: hc_dev_host_free(pool->dev, p); break;
  case HC_POOL_DEVICE: hc_dev_mem_free(pool->dev, pool->device, p); break;
  }
}

hc_result_t hc_scratch_pool_create(enum hc_pool_kind kind, const struct hc_dev_ops *dev, int device,
                                   struct hc_scratch_pool **out) {
  struct hc_scratch_pool *pool;
  HC_TRY(hc_calloc(&pool, 1, sizeof(*pool), "scratch pool"));
  pool->cap = HC_POOL_KEEP;
  pool->free_bufs = calloc((size_t)pool->cap, sizeof(void *));
  pool->free_bytes = calloc((size_t)pool->cap, sizeof(size_t));
  if (pool->free_bufs == NULL || pool->free_bytes == NULL) {
    free(pool->free_bufs);
    free(pool->free_bytes);
    free(pool);
    return HC_FAIL(HC_ERR_SYSTEM, "out of host memory for a scratch pool");
  }
  pthread_mutex_init(&pool->lock, NULL);
  pool->kind = kind;
  pool->dev = dev;
  pool->device = device;
  *out = pool;
  return HC_OK;
}

void hc_scratch_pool_destroy(struct hc_scratch_pool *pool) {
  if (pool == NULL) return;
  for (int i = 0; i < pool->cap; i++) buf_free(pool, pool->free_bufs[i]);
  free(pool->free_bufs);
  free(pool->free_bytes);
  pthread_mutex_destroy(&pool->lock);
  free(pool);
}

static void *pool_get(struct hc_scratch_pool *pool, size_t bytes, size_t *got) {
  int best = -1;
  pthread_mutex_lock(&pool->lock);
  for (int i = 0; i < pool->cap; i++)
    if (pool->free_bufs[i] && pool->free_bytes[i] >= bytes &&
        (best < 0 || pool->free_bytes[i] < pool->free_bytes[best]))
      best = i;
  void *buf = NULL;
  if (best >= 0) {
    buf = pool->free_bufs[best];
    *got = pool->free_bytes[best];
    pool->free_bufs[best] = NULL;
  }
  pthread_mutex_unlock(&pool->lock);
  if (buf) return buf;
  *got = bytes;
  return buf_alloc(pool, bytes);
}

/* Keeps the largest buffers: the next call of the same size reuses them. */
static void pool_put(struct hc_scratch_pool *pool, void *buf, size_t bytes) {
  pthread_mutex_lock(&pool->lock);
  int victim = 0;
  for (int i = 0; i < pool->cap; i++) {
    if (pool->free_bufs[i] == NULL) {
      victim = i;
      break;
    }
    if (pool->free_bytes[i] < pool->free_bytes[victim]) victim = i;
  }
  if (pool->free_bufs[victim] != NULL && pool->kind != HC_POOL_HOST) {
    /* Full, and pinned or device memory is never freed here: grow. */
    int cap = pool->cap * 2;
    void **bufs = realloc(pool->free_bufs, (size_t)cap * sizeof(void *));
    if (bufs) pool->free_bufs = bufs;
    size_t *sizes = realloc(pool->free_bytes, (size_t)cap * sizeof(size_t));
    if (sizes) pool->free_bytes = sizes;
    if (bufs && sizes) {
      memset(pool->free_bufs + pool->cap, 0, (size_t)(cap - pool->cap) * sizeof(void *));
      memset(pool->free_bytes + pool->cap, 0, (size_t)(cap - pool->cap) * sizeof(size_t));
      victim = pool->cap;
      pool->cap = cap;
    } else {
      HC_WARN_ONCE(HC_PLAN, "scratch pool: out of host memory for its index; a pinned buffer is leaked");
      pthread_mutex_unlock(&pool->lock);
      return;
    }
  }
  void *evicted = NULL;
  if (pool->free_bufs[victim] == NULL || pool->free_bytes[victim] < bytes) {
    evicted = pool->free_bufs[victim];
    pool->free_bufs[victim] = buf;
    pool->free_bytes[victim] = bytes;
  } else {
    evicted = buf;
  }
  pthread_mutex_unlock(&pool->lock);
  buf_free(pool, evicted);
}

/* ---- steps ---- */

static bool plan_failed(const struct hc_plan *p) { return p->cap < 0; }

bool hc_plan_room(struct hc_plan *p, void *items_ptr, size_t n, size_t *cap, size_t elem, size_t first) {
  if (n < *cap) return true;
  void *items;
  memcpy(&items, items_ptr, sizeof(items));
  const size_t grown_cap = *cap ? 2 * *cap : first;
  void *grown = realloc(items, grown_cap * elem);
  if (grown == NULL) {
    p->cap = -1;
    return false;
  }
  memcpy(items_ptr, &grown, sizeof(grown));
  *cap = grown_cap;
  return true;
}

hc_ref_t hc_plan_push(struct hc_plan *p, struct hc_step s) {
  size_t cap = (size_t)p->cap;
  if (plan_failed(p) || !hc_plan_room(p, &p->steps, (size_t)p->nsteps, &cap, sizeof(*p->steps), 64)) return 0;
  p->cap = (int)cap;
  p->steps[p->nsteps++] = s;
  return p->nsteps;
}

hc_ref_t hc_plan_join(struct hc_plan *p, hc_ref_t *refs, int n) {
  while (n > 1) {
    int m = 0;
    for (int i = 0; i < n; i += HC_STEP_MAX_DEPS) {
      struct hc_step s = {.kind = HC_STEP_NOP};
      for (int d = 0; d < HC_STEP_MAX_DEPS && i + d < n; d++) s.deps[d] = refs[i + d];
      refs[m++] = hc_plan_push(p, s);
    }
    n = m;
  }
  return n ? refs[0] : 0;
}

static void *take_scratch(struct hc_plan *p, struct hc_scratch_pool *pool, size_t bytes) {
  if (plan_failed(p)) return NULL;
  size_t cap = (size_t)p->scratch_cap;
  const bool room = hc_plan_room(p, &p->scratch, (size_t)p->nscratch, &cap, sizeof(*p->scratch), 4);
  if (room) p->scratch_cap = (int)cap;
  size_t got = 0;
  void *buf = room ? pool_get(pool, bytes, &got) : NULL;
  if (buf == NULL) {
    p->cap = -1;
    return NULL;
  }
  p->scratch[p->nscratch++] = (struct hc_scratch){.buf = buf, .bytes = got, .pool = pool};
  return buf;
}

void *hc_plan_scratch(struct hc_plan *p, size_t bytes) {
  return take_scratch(p, p->dev_pool ? p->dev_pool : p->pool, bytes);
}

hc_result_t hc_slots_create(struct hc_plan *p, const struct hc_plan_ctx *x, size_t slot_bytes, size_t max_count,
                            struct hc_slots *s) {
  *s = (struct hc_slots){.count = (int)HC_MIN((size_t)HC_MAX(x->scratch_slots, 1), HC_MAX(max_count, 1)),
                         .slot_bytes = slot_bytes};
  s->base = hc_plan_scratch(p, (size_t)s->count * slot_bytes);
  s->last_user = calloc((size_t)s->count, sizeof(hc_ref_t));
  if (s->base == NULL || s->last_user == NULL) {
    hc_slots_destroy(s);
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d receive slots of %zu bytes", s->count, slot_bytes);
  }
  return HC_OK;
}

void hc_slots_destroy(struct hc_slots *s) {
  free(s->last_user);
  s->last_user = NULL;
}

void *hc_plan_host_scratch(struct hc_plan *p, size_t bytes) { return take_scratch(p, p->pool, bytes); }

bool hc_plan_in_host_scratch(const struct hc_plan *p, const void *ptr) {
  const char *c = ptr;
  for (int i = 0; i < p->nscratch; i++) {
    const struct hc_scratch *s = &p->scratch[i];
    if (s->pool == p->pool && c >= (const char *)s->buf && c < (const char *)s->buf + s->bytes) return true;
  }
  return false;
}

uint32_t hc_plan_sig_add(struct hc_plan *p, const struct hc_net_sig *sig) {
  if (plan_failed(p)) return 0;
  if (p->nsigs > 0 && hc_net_sig_equal(&p->sigs[p->nsigs - 1], sig)) return p->nsigs - 1;
  size_t cap = p->sigs_cap;
  if (!hc_plan_room(p, &p->sigs, p->nsigs, &cap, sizeof(*p->sigs), 4)) return 0;
  p->sigs_cap = (uint32_t)cap;
  p->sigs[p->nsigs] = *sig;
  return p->nsigs++;
}

/* The plan's scratch buffers back to their pools. */
static void return_scratch(struct hc_plan *p) {
  for (int i = 0; i < p->nscratch; i++) pool_put(p->scratch[i].pool, p->scratch[i].buf, p->scratch[i].bytes);
}

void hc_plan_reset(struct hc_plan *p) {
  return_scratch(p);
  free(p->scratch);
  free(p->sigs);
  free(p->steps);
  free(p->spare);
  free(p->stage_refs);
  free(p->direct_refs);
  *p = (struct hc_plan){.pool = p->pool, .dev_pool = p->dev_pool};
}

void hc_plan_clear(struct hc_plan *p) {
  if (plan_failed(p)) { /* an array's room is no longer known */
    hc_plan_reset(p);
    return;
  }
  return_scratch(p);
  *p = (struct hc_plan){.steps = p->steps,
                        .cap = p->cap,
                        .spare = p->spare,
                        .spare_cap = p->spare_cap,
                        .stage_refs = p->stage_refs,
                        .stage_refs_cap = p->stage_refs_cap,
                        .direct_refs = p->direct_refs,
                        .direct_cap = p->direct_cap,
                        .pool = p->pool,
                        .dev_pool = p->dev_pool,
                        .scratch = p->scratch,
                        .scratch_cap = p->scratch_cap,
                        .sigs = p->sigs,
                        .sigs_cap = p->sigs_cap};
}

hc_result_t hc_coll_args_keep_counts(struct hc_coll_args *a, int nranks, struct hc_alltoallv_kept **kept) {
  const size_t n = (size_t)nranks;
  struct hc_alltoallv_kept *k = malloc(sizeof(*k) + 4 * n * sizeof(size_t));
  *kept = k;
  if (k == NULL) return HC_FAIL(HC_ERR_SYSTEM, "out of host memory for the alltoallv counts of %d ranks", nranks);
  const size_t *src[4] = {a->v->sendcounts, a->v->sdispls, a->v->recvcounts, a->v->rdispls};
  for (int i = 0; i < 4; i++) memcpy(k->arrays + (size_t)i * n, src[i], n * sizeof(size_t));
  k->v = (struct hc_alltoallv_args){
      .sendcounts = k->arrays, .sdispls = k->arrays + n, .recvcounts = k->arrays + 2 * n, .rdispls = k->arrays + 3 * n};
  a->v = &k->v;
  return HC_OK;
}

/* ---- the vendor's library inside groups ---- */

int hc_group_index(const struct hc_plan_ctx *x, int r) {
  int index = 0;
  for (int i = 0; i < r; i++) index += x->group_of[i] == x->group_of[r];
  return index;
}

hc_ref_t hc_push_vendor_p2p(struct hc_plan *p, const struct hc_vendor_p2p *ops, int n, hc_ref_t d0, hc_ref_t d1) {
  if (n == 0) return d0;
  struct hc_vendor_p2p *kept = hc_plan_host_scratch(p, (size_t)n * sizeof(*ops));
  if (kept == NULL) return 0; /* the plan reports it */
  memcpy(kept, ops, (size_t)n * sizeof(*ops));
  return hc_plan_push(
      p, (struct hc_step){
             .kind = HC_STEP_VENDOR, .coll = HC_COLL_SEND, .src0 = kept, .count = (size_t)n, HC_DEPS(d0, d1)});
}

/* ---- signatures ----
 * w[0]: count (0 for ALLTOALLV, whose counts are per peer: the transports
 * compare those as lengths). w[1]: bits 0-3 the collective + 1 (0: no
 * signature), 4-7 datatype, 8-11 op, 12-31 root (ranks below 2^20), 32-63
 * seq. */

static bool coll_rooted(enum hc_coll c) {
  return c == HC_COLL_BROADCAST || c == HC_COLL_REDUCE || c == HC_COLL_GATHER || c == HC_COLL_SCATTER;
}

/* HETCCL_SIGNATURES, read once per comm init (every comm of a process
 * reads the same environment); a relaxed load per call, not the params
 * lock. */
static atomic_bool sigs_off;

void hc_plan_sig_configure(void) {
  atomic_store_explicit(&sigs_off, hc_param_int(HC_P_SIGNATURES) == 0, memory_order_relaxed);
}

struct hc_net_sig hc_plan_sig(const struct hc_coll_args *a, int rank) {
  if (atomic_load_explicit(&sigs_off, memory_order_relaxed)) return (struct hc_net_sig){{0, 0}};
  enum hc_coll kind = a->coll == HC_COLL_RECV ? HC_COLL_SEND : a->coll;
  uint64_t root = 0, op = hc_coll_reduces(a->coll) ? (uint64_t)a->op : 0;
  if (coll_rooted(a->coll) || a->coll == HC_COLL_RECV) root = (uint64_t)a->root;
  if (a->coll == HC_COLL_SEND) root = (uint64_t)rank;
  struct hc_net_sig sig = {
      {a->coll == HC_COLL_ALLTOALLV ? 0 : (uint64_t)a->count,
       ((uint64_t)kind + 1) | (uint64_t)a->dtype << 4 | op << 8 | (root & 0xfffff) << 12 | (uint64_t)a->seq << 32}};
  return sig;
}

void hc_plan_sig_renumber(struct hc_net_sig *sig, uint32_t seq) {
  if (sig->w[1] != 0) /* no signature (HETCCL_SIGNATURES=0) stays none */
    sig->w[1] = (sig->w[1] & 0xffffffffu) | (uint64_t)seq << 32;
}

/* One side's call, as the user made it: p2p from the point of view of me,
 * which is one end of the pair (me and other). */
static void sig_describe(char *buf, size_t len, const struct hc_net_sig *sig, int me, int other) {
  unsigned kind = (unsigned)(sig->w[1] & 0xf), seq = (unsigned)(sig->w[1] >> 32);
  if (kind == 0) {
    snprintf(buf, len, "a transfer of no collective");
    return;
  }
  enum hc_coll c = (enum hc_coll)(kind - 1);
  enum hc_dtype t = (enum hc_dtype)((sig->w[1] >> 4) & 0xf);
  enum hc_redop op = (enum hc_redop)((sig->w[1] >> 8) & 0xf);
  int root = (int)((sig->w[1] >> 12) & 0xfffff);
  unsigned long long count = (unsigned long long)sig->w[0];
  char args[96];
  if (c == HC_COLL_SEND && root != me) c = HC_COLL_RECV;
  if (c == HC_COLL_SEND) snprintf(args, sizeof(args), "to %d, %llu %s", other, count, hc_dtype_name(t));
  else if (c == HC_COLL_RECV) snprintf(args, sizeof(args), "from %d, %llu %s", root, count, hc_dtype_name(t));
  else if (c == HC_COLL_REDUCE)
    snprintf(args, sizeof(args), "%s, root %d, %llu %s", hc_redop_name(op), root, count, hc_dtype_name(t));
  else if (hc_coll_reduces(c)) snprintf(args, sizeof(args), "%s, %llu %s", hc_redop_name(op), count, hc_dtype_name(t));
  else if (coll_rooted(c)) snprintf(args, sizeof(args), "root %d, %llu %s", root, count, hc_dtype_name(t));
  else if (c == HC_COLL_ALLTOALLV) snprintf(args, sizeof(args), "%s", hc_dtype_name(t));
  else snprintf(args, sizeof(args), "%llu %s", count, hc_dtype_name(t));
  snprintf(buf, len, "%s(%s) #%u", hc_coll_name(c), args, seq);
}

void hc_plan_sig_explain(char *buf, size_t len, int me, const struct hc_net_sig *mine, int peer,
                         const struct hc_net_sig *theirs, bool me_sends) {
  (void)me_sends; /* a p2p signature names its sender */
  char a[160], b[160];
  sig_describe(a, sizeof(a), mine, me, peer);
  sig_describe(b, sizeof(b), theirs, peer, me);
  snprintf(buf, len, "rank %d called %s, rank %d called %s", me, a, peer, b);
}

/* ---- scaling steps ---- */

hc_ref_t hc_push_avg(struct hc_plan *p, const struct hc_coll_args *a, void *out, size_t count, int nranks,
                     hc_ref_t dep) {
  if (a->op != HC_AVG || count == 0) return dep;
  enum hc_dtype t = a->dtype;
  uint64_t *divisor = hc_plan_host_scratch(p, sizeof(uint64_t));
  if (divisor == NULL) return 0;
  *divisor = (uint64_t)nranks;
  struct hc_step s = {.kind = HC_STEP_SCALE,
                      .redop = HC_SCALE_DIV,
                      .dtype = (uint8_t)t,
                      .dst = out,
                      .src0 = out,
                      .src1 = divisor,
                      .count = count,
                      HC_DEPS(dep)};
  return hc_plan_push(p, s);
}

/* PREMULSUM: every rank contributes factor * its input; the scaled copy is
 * what the algorithm then sums. */
static hc_ref_t push_premul(struct hc_plan *p, const struct hc_coll_args *a, size_t count, const void **in) {
  size_t esize = hc_dtype_size(a->dtype);
  void *scaled = hc_plan_scratch(p, count * esize);
  void *factor = hc_plan_host_scratch(p, sizeof(a->premul_factor));
  if (scaled == NULL || factor == NULL) return 0;
  memcpy(factor, a->premul_factor, sizeof(a->premul_factor));
  struct hc_step s = {.kind = HC_STEP_SCALE,
                      .redop = HC_SCALE_MUL,
                      .dtype = (uint8_t)a->dtype,
                      .dst = scaled,
                      .src0 = *in,
                      .src1 = factor,
                      .count = count};
  *in = scaled;
  return hc_plan_push(p, s);
}

/* ---- one call, with the algorithm the table gives (algos.c) ---- */

/* Elements of this rank's input for the reducing collectives. */
static size_t input_count(const struct hc_coll_args *a, int nranks) {
  return a->coll == HC_COLL_REDUCESCATTER ? a->count * (size_t)nranks : a->count;
}

size_t hc_plan_chunk_bytes(bool any_gpu) {
  if (any_gpu) return (size_t)HC_MAX(HC_DIV_UP(hc_param_int(HC_P_GPU_CHUNK_BYTES), 4096) * 4096, 4096);
  return (size_t)HC_MAX(hc_param_int(HC_P_CHUNK_BYTES), 64);
}

hc_result_t hc_plan_ctx_from_params(struct hc_plan_ctx *x, bool any_gpu) {
  x->any_gpu = any_gpu;
  x->chunk_bytes = hc_plan_chunk_bytes(any_gpu);
  x->ring_threshold = (size_t)hc_param_int(HC_P_RING_THRESHOLD);
  x->onestep_bytes = (size_t)hc_param_int(HC_P_ONESTEP_BYTES);
  x->rd_allreduce_bytes = (size_t)hc_param_int(HC_P_RD_ALLREDUCE_BYTES);
  /* The direct algorithms trade the ring's steps for n-1 transfers at
   * once, which GPU ranks would each stage. */
  x->direct_max_bytes = any_gpu ? 0 : (size_t)hc_param_int(HC_P_DIRECT_MAX_BYTES);
  x->direct_chunk_bytes = (size_t)HC_MAX(hc_param_int(HC_P_DIRECT_CHUNK_BYTES), 64);
  x->scratch_slots = (int)HC_MAX(hc_param_int(HC_P_SCRATCH_SLOTS), 1);
  return hc_algo_parse(hc_param_str(HC_P_ALGO), x->algo);
}

hc_result_t hc_plan_add(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  struct hc_alg_io io = {.in = a->sendbuf, .out = a->recvbuf};
  bool reducing = hc_coll_reduces(a->coll);
  if (a->coll != HC_COLL_ALLTOALLV && a->coll != HC_COLL_SEND && a->coll != HC_COLL_RECV && a->count == 0)
    return HC_OK; /* as NCCL: a count of 0 is a no-op */
  if (reducing && a->op == HC_PREMULSUM) io.in_dep = push_premul(p, a, input_count(a, x->nranks), &io.in);
  const struct hc_algo_desc *algo = hc_algo_choose(x, a);
  if (algo == NULL) return HC_FAIL(HC_ERR_INTERNAL, "plan: unknown collective %d", (int)a->coll);
  const int first_step = p->nsteps;
  const struct hc_net_sig sig = hc_plan_sig(a, x->rank);
  const uint32_t call = hc_plan_sig_add(p, &sig);
  p->algo = algo->algo;
  hc_result_t r = algo->build(p, x, a, io);
  if (r != HC_OK) return r;
  if (plan_failed(p)) return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory building %s", hc_coll_name(a->coll));
  for (int i = first_step; i < p->nsteps; i++)
    if (p->steps[i].kind == HC_STEP_SEND || p->steps[i].kind == HC_STEP_RECV) p->steps[i].call = call;
  HC_TRACE(HC_PLAN, "%s count %zu %s %s: %s, %d steps so far", hc_coll_name(a->coll), a->count, hc_dtype_name(a->dtype),
           hc_redop_name(a->op), hc_algo_name(algo->algo), p->nsteps);
  return HC_OK;
}
