/*
 * The model behind hetccl-sim (docs/sim.md has the assumptions and their
 * sources).
 *
 * 1. Topology: every GPU has five links (PCIe up, PCIe down, fabric out,
 *    fabric in, its memory), every node one (host memory), every NIC two
 *    (out, in); the switch fabric ("wire") is non-blocking and only counted.
 *    A link's capacity is bytes per microsecond.
 * 2. Plans: every rank's plan is built by plan/ as the library builds it
 *    for a GPU comm (hc_plan_add, then hc_plan_stage as api/proxy.c calls
 *    it), with groups, vendor groups and shm windows chosen as api/comm.c
 *    chooses them. Pointers are classified as host memory (host scratch,
 *    window slots) or device memory (everything else).
 * 3. Replay: each step is a task; a task starts when its dependencies are
 *    done, a GPU step also after the previous step of its lane (a stream
 *    runs in order), a transfer once both its send and its receive are
 *    ready and the transfer before it on the same pair has started (the
 *    proxy posts a queue in order). Copies, kernels and transfers are flows
 *    over the links of their path; concurrent flows share links max-min
 *    fairly (progressive filling), recomputed whenever a flow starts or
 *    ends. VENDOR steps of a group's members form one vendor collective,
 *    which starts when every member reached it and lasts what the vendor
 *    model says; it does not contend with flows.
 * 4. Vendor model: NCCL's ring (or tree for all-reduce, when its latency
 *    wins) over the ranks: bandwidth of the slowest ring edge (fabric inside
 *    a node, the node's NICs across), latency from NCCL's own tuning table.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "api/api_priv.h"
#include "plan/plan_priv.h" /* hc_plan_in_host_scratch: staging's own test of host memory */
#include "vendor/vendor.h"

const char *const sim_class_names[SIM_CLASSES] = {"hbm", "fabric", "pcie", "host", "nic", "wire"};

#define GBS(x) ((x)*1e3) /* GB/s into bytes per microsecond */
#define UNLIMITED 1e30

/* ---- topology ---- */

enum { L_UP, L_DOWN, L_FTX, L_FRX, L_HBM, L_PER_GPU };

struct link {
  double cap;
  int cls;
  double bytes, busy_us;
  double rem; /* max-min: capacity not yet handed out */
  int n;      /* max-min: flows not yet frozen that use it */
};

struct topo {
  const struct sim_cluster *c;
  int nranks, ngpus, nnodes, nnics, nlinks;
  int *rank_gpu, *gpu_node, *gpu_nic, *node_set;
  int ngroups, *group_of;
  bool *group_vendor;
  struct link *links;
};

static const struct sim_nodeset *set_of_gpu(const struct topo *t, int g) {
  return &t->c->sets[t->node_set[t->gpu_node[g]]];
}
static int gpu_link(int g, int which) { return g * L_PER_GPU + which; }
static int host_link(const struct topo *t, int node) { return t->ngpus * L_PER_GPU + node; }
static int nic_link(const struct topo *t, int nic, bool in) { return t->ngpus * L_PER_GPU + t->nnodes + 2 * nic + in; }
static int wire_link(const struct topo *t) { return t->nlinks - 1; }
static int rank_node(const struct topo *t, int r) { return t->gpu_node[t->rank_gpu[r]]; }

static void topo_free(struct topo *t) {
  free(t->rank_gpu);
  free(t->gpu_node);
  free(t->gpu_nic);
  free(t->node_set);
  free(t->group_of);
  free(t->group_vendor);
  free(t->links);
}

static void link_init(struct link *l, double gbs, int cls) { *l = (struct link){.cap = GBS(gbs), .cls = cls}; }

static void topo_links(struct topo *t) {
  for (int g = 0; g < t->ngpus; g++) {
    const struct sim_nodeset *s = set_of_gpu(t, g);
    link_init(&t->links[gpu_link(g, L_UP)], s->pcie_gbs, SIM_PCIE);
    link_init(&t->links[gpu_link(g, L_DOWN)], s->pcie_gbs, SIM_PCIE);
    link_init(&t->links[gpu_link(g, L_FTX)], s->fabric_is_pcie ? s->pcie_gbs : s->fabric_gbs, SIM_FABRIC);
    link_init(&t->links[gpu_link(g, L_FRX)], s->fabric_is_pcie ? s->pcie_gbs : s->fabric_gbs, SIM_FABRIC);
    link_init(&t->links[gpu_link(g, L_HBM)], s->hbm_gbs, SIM_HBM);
  }
  for (int n = 0; n < t->nnodes; n++)
    link_init(&t->links[host_link(t, n)], t->c->sets[t->node_set[n]].host_gbs, SIM_HOST);
  for (int g = 0; g < t->ngpus; g++) {
    const struct sim_nodeset *s = set_of_gpu(t, g);
    link_init(&t->links[nic_link(t, t->gpu_nic[g], false)], s->nic_gbs, SIM_NIC);
    link_init(&t->links[nic_link(t, t->gpu_nic[g], true)], s->nic_gbs, SIM_NIC);
  }
  link_init(&t->links[wire_link(t)], UNLIMITED / 1e3, SIM_WIRE);
}

/* Groups as api/comm.c makes them: by name (the vendor, or one per rank),
 * numbered in order of their lowest rank; a group runs the vendor's
 * library when its ranks own distinct GPUs and it is the whole comm or has
 * at least two ranks. */
static hc_result_t topo_groups(struct topo *t) {
  int *name = malloc((size_t)t->nranks * sizeof(int)), *first = malloc((size_t)t->nranks * sizeof(int));
  if (name == NULL || first == NULL) {
    free(name);
    free(first);
    return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for the groups of %d ranks", t->nranks);
  }
  for (int r = 0; r < t->nranks; r++) name[r] = t->c->group_per_rank ? r : (int)set_of_gpu(t, t->rank_gpu[r])->vendor;
  t->ngroups = 0;
  for (int r = 0; r < t->nranks; r++) {
    int g = 0;
    while (g < t->ngroups && name[first[g]] != name[r]) g++;
    if (g == t->ngroups) first[t->ngroups++] = r;
    t->group_of[r] = g;
  }
  for (int g = 0; g < t->ngroups; g++) {
    int size = 0;
    t->group_vendor[g] = true;
    for (int r = 0; r < t->nranks; r++) {
      if (t->group_of[r] != g) continue;
      size++;
      for (int q = 0; q < r; q++)
        if (t->group_of[q] == g && t->rank_gpu[q] == t->rank_gpu[r]) t->group_vendor[g] = false;
    }
    if (t->ngroups > 1 && size < 2) t->group_vendor[g] = false;
  }
  free(name);
  free(first);
  return HC_OK;
}

static hc_result_t topo_build(const struct sim_cluster *c, struct topo *t) {
  *t = (struct topo){.c = c, .nranks = sim_cluster_ranks(c), .ngpus = sim_cluster_gpus(c)};
  for (int i = 0; i < c->nsets; i++) {
    t->nnodes += c->sets[i].count;
    t->nnics += c->sets[i].count * HC_MIN(c->sets[i].nics, c->sets[i].gpus);
  }
  t->nlinks = t->ngpus * L_PER_GPU + t->nnodes + 2 * t->nnics + 1;
  t->rank_gpu = malloc((size_t)t->nranks * sizeof(int));
  t->gpu_node = malloc((size_t)t->ngpus * sizeof(int));
  t->gpu_nic = malloc((size_t)t->ngpus * sizeof(int));
  t->node_set = malloc((size_t)t->nnodes * sizeof(int));
  t->group_of = malloc((size_t)t->nranks * sizeof(int));
  t->group_vendor = calloc((size_t)t->nranks, sizeof(bool));
  t->links = calloc((size_t)t->nlinks, sizeof(struct link));
  if (!t->rank_gpu || !t->gpu_node || !t->gpu_nic || !t->node_set || !t->group_of || !t->group_vendor || !t->links) {
    topo_free(t);
    return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for a cluster of %d ranks", t->nranks);
  }
  int node = 0, gpu = 0, rank = 0, nic = 0;
  for (int i = 0; i < c->nsets; i++) {
    const struct sim_nodeset *s = &c->sets[i];
    const int nics = HC_MIN(s->nics, s->gpus);
    for (int k = 0; k < s->count; k++, node++, nic += nics) {
      t->node_set[node] = i;
      for (int j = 0; j < s->gpus; j++, gpu++) {
        t->gpu_node[gpu] = node;
        t->gpu_nic[gpu] = nic + j * nics / s->gpus;
        for (int q = 0; q < s->ranks_per_gpu; q++) t->rank_gpu[rank++] = gpu;
      }
    }
  }
  topo_links(t);
  hc_result_t r = topo_groups(t);
  if (r != HC_OK) topo_free(t);
  return r;
}

/* ---- the vendor's library ---- */

/* NCCL's latency model (src/graph/tuning.cc, the LL128 column, which NCCL
 * picks for the sizes of this tool): a base per call, and one hop per step
 * by the kind of link the step crosses. */
enum { HW_NVLINK, HW_PCI, HW_NET };
static const double ring_base_us = 10.0, tree_base_us = 4.4;
static const double ring_hop_us[3] = {1.9, 2.5, 4.0}, tree_hop_us[3] = {1.25, 1.9, 8.5};

struct vendor_cost {
  double us;
  const char *algo;
  double bytes[SIM_CLASSES];
};

/* Where ranks[0..m) sit: nodes spanned, the most ranks on one node, and
 * the slowest ring edge in GB/s. */
struct span {
  int nodes, most;
  double edge_gbs;
  int intra_hw;
  bool gdr;
};

static struct span span_of(const struct topo *t, const int *ranks, int m) {
  int *per_node = calloc((size_t)t->nnodes, sizeof(int)), *per_gpu = calloc((size_t)t->ngpus, sizeof(int));
  struct span s = {.edge_gbs = UNLIMITED, .intra_hw = HW_NVLINK, .gdr = true};
  double nic_gbs = UNLIMITED;
  for (int i = 0; i < m && per_node && per_gpu; i++) {
    per_node[rank_node(t, ranks[i])]++;
    /* Ranks that share a GPU (not NCCL's case: it refuses them) meet in its memory. */
    if (per_gpu[t->rank_gpu[ranks[i]]]++)
      s.edge_gbs = HC_MIN(s.edge_gbs, set_of_gpu(t, t->rank_gpu[ranks[i]])->hbm_gbs);
  }
  for (int n = 0; n < t->nnodes && per_node && per_gpu; n++) {
    if (per_node[n] == 0) continue;
    const struct sim_nodeset *ns = &t->c->sets[t->node_set[n]];
    s.nodes++;
    s.most = HC_MAX(s.most, per_node[n]);
    s.gdr &= ns->gdr;
    if (per_node[n] > 1) s.edge_gbs = HC_MIN(s.edge_gbs, ns->fabric_is_pcie ? ns->pcie_gbs : ns->fabric_gbs);
    if (ns->fabric_is_pcie) s.intra_hw = HW_PCI;
    /* Across nodes: one ring per NIC in use, each NIC fed over its GPU's PCIe. */
    nic_gbs = HC_MIN(nic_gbs, HC_MIN(ns->nics, per_node[n]) * HC_MIN(ns->nic_gbs, ns->pcie_gbs));
  }
  if (s.nodes > 1) s.edge_gbs = HC_MIN(s.edge_gbs, nic_gbs);
  free(per_node);
  free(per_gpu);
  return s;
}

/* The bytes a ring of m ranks over s.nodes nodes puts on each class, each
 * edge carrying per_edge bytes. */
static void ring_bytes(const struct span *s, int m, double per_edge, double *bytes) {
  const int cross = s->nodes > 1 ? s->nodes : 0, inside = m - cross;
  bytes[s->intra_hw == HW_PCI ? SIM_PCIE : SIM_FABRIC] += inside * per_edge;
  bytes[SIM_NIC] += 2.0 * cross * per_edge; /* out of one NIC, into another */
  bytes[SIM_WIRE] += cross * per_edge;
  bytes[SIM_PCIE] += 2.0 * cross * per_edge; /* GPU to NIC, NIC to GPU */
  if (!s->gdr) bytes[SIM_HOST] += 2.0 * cross * per_edge;
}

/* coll on ranks[0..m) with a buffer of S bytes (all-reduce, broadcast,
 * reduce: the buffer; all-gather, reduce-scatter: the whole gathered or
 * scattered one). */
static struct vendor_cost vendor_model(const struct topo *t, const int *ranks, int m, enum hc_coll coll, double S) {
  struct vendor_cost v = {.algo = "ring"};
  if (m < 2 || S <= 0) return v;
  const struct span s = span_of(t, ranks, m);
  const bool ar = coll == HC_COLL_ALLREDUCE,
             ring_like = ar || coll == HC_COLL_ALLGATHER || coll == HC_COLL_REDUCESCATTER;
  const double f = ar ? 2.0 * (m - 1) / m : ring_like ? (double)(m - 1) / m : 1.0;
  const int steps = (ar ? 2 : 1) * (m - 1), inter = s.nodes > 1 ? (ar ? 2 : 1) * (s.nodes - 1) : 0;
  const double wire_us = f * S / GBS(s.edge_gbs);
  v.us = ring_base_us + (steps - inter) * ring_hop_us[s.intra_hw] + inter * ring_hop_us[HW_NET] + wire_us;
  if (ar && s.nodes > 1) {
    double tree = tree_base_us +
                  2.0 * (ceil(log2(s.nodes)) * tree_hop_us[HW_NET] + (s.most - 1) * tree_hop_us[s.intra_hw]) + wire_us;
    if (tree < v.us) {
      v.us = tree;
      v.algo = "tree";
    }
  }
  ring_bytes(&s, m, f * S, v.bytes);
  return v;
}

/* ---- every rank's plan ---- */

/* A step as the replay needs it: the plan's, and where its pointers lie. */
struct sstep {
  struct hc_step s;
  bool src_host, dst_host;
  long counter;     /* WAIT, SIGNAL: which window counter */
  double p2p_bytes; /* VENDOR of coll SEND: what this rank's sends of the group move */
};

/* What windows point to: slots (host memory, never touched) and per
 * ordered pair (src, dst) the counters filled and freed. */
struct window_mem {
  char *tx, *rx;
  size_t bytes;
  atomic_ullong *counters; /* [2 * (src * n + dst) + (0 filled, 1 freed)] */
  long ncounters;
};

struct plans {
  struct sstep *steps;
  long n, cap;
  long *base; /* per rank: its first step; base[nranks] = n */
  double cross_group_bytes;
};

static bool in_window(const struct window_mem *wm, const void *p) {
  const char *c = p;
  return (c >= wm->tx && c < wm->tx + wm->bytes) || (c >= wm->rx && c < wm->rx + wm->bytes);
}

/* The windows of rank r as api/comm.c opens them: with every other GPU
 * rank of its node. */
static void windows_of(const struct topo *t, const struct window_mem *wm, size_t chunk, int r,
                       struct hc_plan_window *win) {
  const int n = t->nranks;
  for (int p = 0; p < n; p++) {
    win[p] = (struct hc_plan_window){0};
    if (p == r || rank_node(t, p) != rank_node(t, r)) continue;
    atomic_ullong *out = &wm->counters[2 * ((size_t)r * n + p)], *in = &wm->counters[2 * ((size_t)p * n + r)];
    win[p].w = (struct hc_net_window){.tx = (uint8_t *)wm->tx,
                                      .rx = (uint8_t *)wm->rx,
                                      .bytes = HC_WINDOW_SLOTS * chunk,
                                      .tx_filled = &out[0],
                                      .tx_freed = &out[1],
                                      .rx_filled = &in[0],
                                      .rx_freed = &in[1]};
    win[p].slot_bytes = chunk;
  }
}

/* Which window counter p is, or -1: a SIGNAL may also write a slot's
 * signature words (net.h), which nothing in the model waits on. */
static long counter_index(const struct window_mem *wm, const void *p) {
  const atomic_ullong *c = p;
  return c >= wm->counters && c < wm->counters + wm->ncounters ? (long)(c - wm->counters) : -1;
}

static hc_result_t plans_append(struct plans *ps, const struct hc_plan *p, const struct window_mem *wm) {
  if (ps->n + p->nsteps > ps->cap) {
    long cap = HC_MAX(ps->cap * 2, ps->n + p->nsteps + 1024);
    struct sstep *s = realloc(ps->steps, (size_t)cap * sizeof(*s));
    if (s == NULL) return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for %ld plan steps", cap);
    ps->steps = s;
    ps->cap = cap;
  }
  for (int i = 0; i < p->nsteps; i++) {
    const struct hc_step *st = &p->steps[i];
    struct sstep *o = &ps->steps[ps->n++];
    o->s = *st;
    o->src_host = st->src0 && (hc_plan_in_host_scratch(p, st->src0) || in_window(wm, st->src0));
    o->dst_host = st->dst && (hc_plan_in_host_scratch(p, st->dst) || in_window(wm, st->dst));
    o->counter = st->kind == HC_STEP_WAIT || st->kind == HC_STEP_SIGNAL ? counter_index(wm, st->src0) : -1;
    o->p2p_bytes = 0;
    if (st->kind == HC_STEP_VENDOR && st->coll == HC_COLL_SEND) /* the entries live while the plan does */
      for (size_t e = 0; e < st->count; e++) {
        const struct hc_vendor_p2p *q = (const struct hc_vendor_p2p *)st->src0 + e;
        if (q->send) o->p2p_bytes += (double)q->bytes;
      }
  }
  return HC_OK;
}

/* The context api/comm.c gives a GPU comm's plans (HETCCL_* as set), less
 * the rank, which plan_rank sets. */
static hc_result_t library_ctx(const struct topo *t, struct hc_plan_window *win, struct hc_plan_ctx *x) {
  const bool groups = t->ngroups > 1;
  *x = (struct hc_plan_ctx){.nranks = t->nranks,
                            .ngroups = t->ngroups,
                            .group_of = groups ? t->group_of : NULL,
                            .group_vendor = groups ? t->group_vendor : NULL,
                            .windows = win};
  return hc_plan_ctx_from_params(x, true);
}

static bool gdr_everywhere(const struct topo *t) {
  bool all = t->c->what_if_gdr;
  for (int i = 0; i < t->c->nsets; i++) all &= t->c->sets[i].gdr;
  return all;
}

/* Builds and stages rank r's plan and appends it. */
static hc_result_t plan_rank(const struct topo *t, const struct hc_coll_args *a, int r, const struct window_mem *wm,
                             const struct hc_plan_ctx *lib, struct hc_scratch_pool *pools[2], struct plans *ps) {
  windows_of(t, wm, lib->chunk_bytes, r, lib->windows);
  struct hc_plan_ctx x = *lib;
  x.rank = r;
  struct hc_plan p = {.pool = pools[0], .dev_pool = pools[1], .mem = HC_MEM_CUDA};
  hc_result_t res = hc_plan_add(&p, &x, a);
  for (int i = 0; res == HC_OK && i < p.nsteps; i++)
    if (p.steps[i].kind == HC_STEP_SEND && t->group_of[p.steps[i].peer] != t->group_of[r])
      ps->cross_group_bytes += (double)p.steps[i].count;
  /* As api/proxy.c stages a GPU plan: no transport reaches device memory
   * (unless the what-if says otherwise). */
  if (res == HC_OK) res = hc_plan_stage(&p, &x, !gdr_everywhere(t));
  if (res == HC_OK) res = plans_append(ps, &p, wm);
  hc_plan_reset(&p);
  return res;
}

static hc_result_t plans_build(const struct topo *t, const struct hc_coll_args *a, struct plans *ps) {
  const int n = t->nranks;
  struct hc_plan_window *win = calloc((size_t)n, sizeof(*win));
  struct hc_plan_ctx lib;
  hc_result_t r = library_ctx(t, win, &lib);
  struct window_mem wm = {.bytes = HC_WINDOW_SLOTS * lib.chunk_bytes};
  struct hc_scratch_pool *pools[2] = {NULL, NULL};
  wm.tx = malloc(wm.bytes);
  wm.rx = malloc(wm.bytes);
  wm.ncounters = 2L * n * n;
  wm.counters = calloc((size_t)wm.ncounters, sizeof(atomic_ullong));
  ps->base = calloc((size_t)n + 1, sizeof(long));
  if (r == HC_OK && (!win || !wm.tx || !wm.rx || !wm.counters || !ps->base))
    r = HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for the windows of %d ranks", n);
  for (int i = 0; i < 2 && r == HC_OK; i++) r = hc_scratch_pool_create(HC_POOL_HOST, NULL, 0, &pools[i]);
  for (int rank = 0; rank < n && r == HC_OK; rank++) {
    ps->base[rank] = ps->n;
    r = plan_rank(t, a, rank, &wm, &lib, pools, ps);
  }
  if (r == HC_OK) ps->base[n] = ps->n;
  for (int i = 0; i < 2; i++) hc_scratch_pool_destroy(pools[i]);
  free(win);
  free(wm.tx);
  free(wm.rx);
  free(wm.counters); /* the steps hold their indices (sstep.counter) */
  return r;
}

/* ---- replay ---- */

struct xfer {
  long send, recv;
  int ready; /* sides whose dependencies are done */
  bool started;
  long next; /* the next transfer of the same pair, or -1 */
  bool head; /* the first of its pair */
};

struct flow {
  double rem, rate;
  long task, xfer; /* what it completes: a step, or both steps of a transfer */
  int nl;
  int l[8];
};

struct event {
  double t;
  long id;
  bool flow; /* id is a flow to start, else a task that is done */
};

struct replay {
  const struct topo *t;
  const struct plans *ps;
  const struct hc_coll_args *a;
  long ntasks;
  int *rank_of;            /* per task */
  int *pending;            /* per task: dependencies not done */
  long *succ_first, *succ; /* CSR */
  long *cursor;            /* while the CSR is filled */
  long *xfer_of;           /* per task: its transfer, or -1 */
  struct xfer *xfers;
  long nxfers;
  long *inst_of, *inst_first, *inst_tasks; /* VENDOR steps: their collective, its members' steps */
  int *inst_arrived;
  long ninst;
  uint64_t *counter;           /* window counters */
  long *waiting, *next_waiter; /* per counter: WAIT steps parked on it (lists through next_waiter) */
  struct event *heap;
  long nheap, capheap;
  struct flow *flows;
  long nflows, capflows;
  long *active, nactive;
  bool rates_stale;
  long ndone;
  double now;
  double vendor_bytes[SIM_CLASSES];
  bool failed;
};

static void heap_push(struct replay *R, struct event e) {
  if (R->nheap == R->capheap) {
    long cap = HC_MAX(1024, R->capheap * 2);
    struct event *h = realloc(R->heap, (size_t)cap * sizeof(*h));
    if (h == NULL) {
      R->failed = true;
      return;
    }
    R->heap = h;
    R->capheap = cap;
  }
  long i = R->nheap++;
  while (i > 0 && R->heap[(i - 1) / 2].t > e.t) {
    R->heap[i] = R->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  R->heap[i] = e;
}

static struct event heap_pop(struct replay *R) {
  struct event top = R->heap[0], last = R->heap[--R->nheap];
  long i = 0;
  for (;;) {
    long c = 2 * i + 1;
    if (c >= R->nheap) break;
    if (c + 1 < R->nheap && R->heap[c + 1].t < R->heap[c].t) c++;
    if (R->heap[c].t >= last.t) break;
    R->heap[i] = R->heap[c];
    i = c;
  }
  if (R->nheap > 0) R->heap[i] = last;
  return top;
}

static void done_at(struct replay *R, long task, double t) { heap_push(R, (struct event){.t = t, .id = task}); }

/* A flow over links[0..nl) of bytes, starting after delay. */
static void flow_start(struct replay *R, long task, long xfer, const int *links, int nl, double bytes, double delay) {
  if (R->nflows == R->capflows) {
    long cap = HC_MAX(1024, R->capflows * 2);
    struct flow *f = realloc(R->flows, (size_t)cap * sizeof(*f));
    long *act = realloc(R->active, (size_t)cap * sizeof(long));
    if (f) R->flows = f;
    if (act) R->active = act;
    if (f == NULL || act == NULL) {
      R->failed = true;
      return;
    }
    R->capflows = cap;
  }
  struct flow *f = &R->flows[R->nflows];
  *f = (struct flow){.rem = HC_MAX(bytes, 1.0), .task = task, .xfer = xfer, .nl = nl};
  memcpy(f->l, links, (size_t)nl * sizeof(int));
  heap_push(R, (struct event){.t = R->now + delay, .id = R->nflows++, .flow = true});
}

static const struct sim_nodeset *set_of_rank(const struct topo *t, int r) { return set_of_gpu(t, t->rank_gpu[r]); }

/* A local step of rank r: a copy, a reduction or a scaling on its GPU. */
static void local_step(struct replay *R, long task, int r, const struct sstep *ss) {
  const struct topo *t = R->t;
  const int g = t->rank_gpu[r], node = rank_node(t, r);
  const struct sim_nodeset *s = set_of_rank(t, r);
  const double step = t->c->costs.step_us;
  const double es = (double)hc_dtype_size((enum hc_dtype)ss->s.dtype);
  int l[3];
  if (ss->s.kind == HC_STEP_REDUCE) { /* reads two operands, writes one */
    l[0] = gpu_link(g, L_HBM);
    flow_start(R, task, -1, l, 1, 1.5 * es * (double)ss->s.count, step);
  } else if (ss->s.kind == HC_STEP_SCALE) {
    l[0] = gpu_link(g, L_HBM);
    flow_start(R, task, -1, l, 1, es * (double)ss->s.count, step);
  } else if (ss->src_host != ss->dst_host) { /* across PCIe, through host memory */
    l[0] = gpu_link(g, ss->src_host ? L_DOWN : L_UP);
    l[1] = host_link(t, node);
    flow_start(R, task, -1, l, 2, (double)ss->s.count, step + s->pcie_us);
  } else {
    l[0] = ss->src_host ? host_link(t, node) : gpu_link(g, L_HBM);
    flow_start(R, task, -1, l, 1, (double)ss->s.count, step);
  }
}

/* The links a transfer from rank a (its data in host memory or not) to b
 * crosses, and its latency. */
static int transfer_path(const struct topo *t, int a, int b, bool src_host, bool dst_host, int *l, double *lat) {
  const int ga = t->rank_gpu[a], gb = t->rank_gpu[b], na = rank_node(t, a), nb = rank_node(t, b);
  const struct sim_nodeset *sa = set_of_gpu(t, ga), *sb = set_of_gpu(t, gb);
  int n = 0;
  *lat = t->c->costs.xfer_us;
  if (na == nb && !src_host && !dst_host) {
    if (ga == gb) {
      l[n++] = gpu_link(ga, L_HBM);
    } else if (sa->fabric_is_pcie) {
      l[n++] = gpu_link(ga, L_UP);
      l[n++] = gpu_link(gb, L_DOWN);
      *lat += sa->pcie_us;
    } else {
      l[n++] = gpu_link(ga, L_FTX);
      l[n++] = gpu_link(gb, L_FRX);
      *lat += sa->fabric_us;
    }
    return n;
  }
  l[n++] = src_host ? host_link(t, na) : gpu_link(ga, L_UP);
  if (na != nb) {
    l[n++] = nic_link(t, t->gpu_nic[ga], false);
    l[n++] = wire_link(t);
    l[n++] = nic_link(t, t->gpu_nic[gb], true);
    *lat += HC_MAX(sa->nic_us, sb->nic_us);
  }
  if (!(na == nb && src_host && dst_host)) l[n++] = dst_host ? host_link(t, nb) : gpu_link(gb, L_DOWN);
  return n;
}

static void xfer_try(struct replay *R, long x) {
  while (x >= 0) {
    struct xfer *X = &R->xfers[x];
    if (X->started || X->ready < 2 || !X->head) return;
    X->started = true;
    const struct sstep *snd = &R->ps->steps[X->send], *rcv = &R->ps->steps[X->recv];
    int l[8];
    double lat;
    const int n = transfer_path(R->t, R->rank_of[X->send], R->rank_of[X->recv], snd->src_host, rcv->dst_host, l, &lat);
    flow_start(R, -1, x, l, n, (double)snd->s.count, lat);
    x = X->next;
    if (x >= 0) R->xfers[x].head = true; /* posted after the one before it */
  }
}

/* coll's buffer for the vendor model (vendor_model) from a VENDOR step. */
static double vendor_buffer(const struct hc_step *s, int members) {
  if (s->coll == HC_COLL_SEND) return 0; /* count is the entries': see sstep.p2p_bytes */
  const double b = (double)s->count * (double)hc_dtype_size((enum hc_dtype)s->dtype);
  return s->coll == HC_COLL_ALLGATHER || s->coll == HC_COLL_REDUCESCATTER ? b * members : b;
}

static void vendor_arrive(struct replay *R, long task) {
  const long i = R->inst_of[task];
  const long first = R->inst_first[i], m = R->inst_first[i + 1] - first;
  if (++R->inst_arrived[i] < m) return;
  int *ranks = malloc((size_t)m * sizeof(int));
  if (ranks == NULL) {
    R->failed = true;
    return;
  }
  for (long k = 0; k < m; k++) ranks[k] = R->rank_of[R->inst_tasks[first + k]];
  const struct hc_step *s = &R->ps->steps[task].s;
  double S = vendor_buffer(s, (int)m);
  if (s->coll == HC_COLL_SEND) /* a group of sends and receives lasts as long as its busiest sender */
    for (long k = 0; k < m; k++) S = HC_MAX(S, R->ps->steps[R->inst_tasks[first + k]].p2p_bytes);
  struct vendor_cost v = vendor_model(R->t, ranks, (int)m, (enum hc_coll)s->coll, S);
  for (int c = 0; c < SIM_CLASSES; c++) R->vendor_bytes[c] += v.bytes[c];
  for (long k = 0; k < m; k++) done_at(R, R->inst_tasks[first + k], R->now + R->t->c->costs.step_us + v.us);
  free(ranks);
}

static void wait_or_park(struct replay *R, long task) {
  const struct sstep *ss = &R->ps->steps[task];
  if (R->counter[ss->counter] >= ss->s.count) {
    done_at(R, task, R->now + R->t->c->costs.step_us);
    return;
  }
  R->next_waiter[task] = R->waiting[ss->counter];
  R->waiting[ss->counter] = task;
}

/* Every dependency of task is done. */
static void task_ready(struct replay *R, long task) {
  const struct sstep *ss = &R->ps->steps[task];
  const int r = R->rank_of[task];
  switch (ss->s.kind) {
  case HC_STEP_COPY:
  case HC_STEP_REDUCE:
  case HC_STEP_SCALE: local_step(R, task, r, ss); break;
  case HC_STEP_WAIT: wait_or_park(R, task); break;
  case HC_STEP_VENDOR: vendor_arrive(R, task); break;
  case HC_STEP_SEND:
  case HC_STEP_RECV:
    if (R->xfer_of[task] < 0) { /* to itself: one copy on the GPU (the receive stands for both) */
      if (ss->s.kind == HC_STEP_RECV) local_step(R, task, r, ss);
      else done_at(R, task, R->now);
      break;
    }
    R->xfers[R->xfer_of[task]].ready++;
    xfer_try(R, R->xfer_of[task]);
    break;
  default: done_at(R, task, R->now); break; /* NOP, SIGNAL */
  }
}

static void task_done(struct replay *R, long task) {
  const struct sstep *ss = &R->ps->steps[task];
  R->ndone++;
  if (ss->s.kind == HC_STEP_SIGNAL && ss->counter >= 0) {
    R->counter[ss->counter] = HC_MAX(R->counter[ss->counter], (uint64_t)ss->s.count);
    long *w = &R->waiting[ss->counter];
    while (*w >= 0) { /* wake the waits that it satisfies */
      long x = *w;
      if (R->counter[ss->counter] >= R->ps->steps[x].s.count) {
        *w = R->next_waiter[x];
        done_at(R, x, R->now + R->t->c->costs.step_us);
      } else {
        w = &R->next_waiter[x];
      }
    }
  }
  for (long k = R->succ_first[task]; k < R->succ_first[task + 1]; k++)
    if (--R->pending[R->succ[k]] == 0) task_ready(R, R->succ[k]);
}

/* Max-min fair rates by progressive filling: the links with the smallest
 * fair share fix the rate of every flow through them, which then no longer
 * competes elsewhere; repeat. */
static void rates_compute(struct replay *R) {
  struct link *L = R->t->links;
  for (long i = 0; i < R->nactive; i++) {
    struct flow *f = &R->flows[R->active[i]];
    f->rate = -1;
    for (int k = 0; k < f->nl; k++) L[f->l[k]].rem = L[f->l[k]].cap, L[f->l[k]].n = 0;
  }
  for (long i = 0; i < R->nactive; i++) {
    struct flow *f = &R->flows[R->active[i]];
    for (int k = 0; k < f->nl; k++) L[f->l[k]].n++;
  }
  for (long left = R->nactive; left > 0;) {
    double share = UNLIMITED;
    for (long i = 0; i < R->nactive; i++) {
      const struct flow *f = &R->flows[R->active[i]];
      for (int k = 0; k < f->nl && f->rate < 0; k++) share = HC_MIN(share, L[f->l[k]].rem / L[f->l[k]].n);
    }
    for (long i = 0; i < R->nactive; i++) {
      struct flow *f = &R->flows[R->active[i]];
      bool bottleneck = false;
      for (int k = 0; k < f->nl && f->rate < 0; k++)
        bottleneck |= L[f->l[k]].rem / L[f->l[k]].n - share <= 1e-9 * (share + 1);
      if (!bottleneck) continue;
      f->rate = share;
      left--;
      for (int k = 0; k < f->nl; k++) L[f->l[k]].rem = HC_MAX(L[f->l[k]].rem - share, 0), L[f->l[k]].n--;
    }
  }
  R->rates_stale = false;
}

static void flow_activate(struct replay *R, long id) {
  struct flow *f = &R->flows[id];
  for (int k = 0; k < f->nl; k++) R->t->links[f->l[k]].bytes += f->rem;
  R->active[R->nactive++] = id;
  R->rates_stale = true;
}

/* Completing a step may start flows (and move R->flows): read first. */
static void flow_finish(struct replay *R, long id) {
  const long task = R->flows[id].task, xfer = R->flows[id].xfer;
  if (task >= 0) {
    task_done(R, task);
    return;
  }
  task_done(R, R->xfers[xfer].send);
  task_done(R, R->xfers[xfer].recv);
}

/* Moves time to t: flows progress, links count their busy time, finished
 * flows complete their steps. */
static void advance(struct replay *R, double t) {
  const double dt = t - R->now;
  struct link *L = R->t->links;
  for (long i = 0; i < R->nactive; i++) {
    struct flow *f = &R->flows[R->active[i]];
    for (int k = 0; k < f->nl; k++) L[f->l[k]].n = -1; /* mark: busy this interval */
    f->rem -= f->rate * dt;
  }
  for (long i = 0; i < R->nactive; i++) {
    const struct flow *f = &R->flows[R->active[i]];
    for (int k = 0; k < f->nl; k++)
      if (L[f->l[k]].n == -1) L[f->l[k]].busy_us += dt, L[f->l[k]].n = 0;
  }
  R->now = t;
  long kept = 0, nfinished = 0;
  long *finished = malloc((size_t)HC_MAX(R->nactive, 1) * sizeof(long));
  if (finished == NULL) {
    R->failed = true;
    return;
  }
  for (long i = 0; i < R->nactive; i++) {
    const long id = R->active[i];
    /* Within a picosecond of done: time (tens of thousands of us) cannot
     * move by less in a double. */
    if (R->flows[id].rem > 1e-6 * (R->flows[id].rate + 1)) R->active[kept++] = id;
    else finished[nfinished++] = id;
  }
  R->nactive = kept;
  R->rates_stale |= nfinished > 0;
  for (long i = 0; i < nfinished; i++) flow_finish(R, finished[i]);
  free(finished);
}

/* ---- the replay's graph ---- */

static bool on_lane(const struct sstep *ss, int rank) {
  switch (ss->s.kind) {
  case HC_STEP_COPY:
  case HC_STEP_REDUCE:
  case HC_STEP_SCALE:
  case HC_STEP_WAIT:
  case HC_STEP_SIGNAL:
  case HC_STEP_VENDOR: return true;
  case HC_STEP_RECV: return ss->s.peer == rank;
  default: return false;
  }
}

/* Calls fn(R, from, to) for every dependency: the plan's, and the order of
 * each lane. */
static void each_edge(struct replay *R, void (*fn)(struct replay *, long, long)) {
  for (int r = 0; r < R->t->nranks; r++) {
    long last[HC_LANE_COUNT] = {-1, -1};
    const long b = R->ps->base[r];
    for (long i = b; i < R->ps->base[r + 1]; i++) {
      const struct sstep *ss = &R->ps->steps[i];
      for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
        if (ss->s.deps[d]) fn(R, b + ss->s.deps[d] - 1, i);
      if (!on_lane(ss, r)) continue;
      const int lane = ss->s.kind == HC_STEP_VENDOR ? HC_LANE_MAIN : ss->s.lane;
      if (last[lane] >= 0) fn(R, last[lane], i);
      last[lane] = i;
    }
  }
}

static void edge_count(struct replay *R, long from, long to) {
  R->succ_first[from + 1]++;
  R->pending[to]++;
}

static void edge_fill(struct replay *R, long from, long to) { R->succ[R->cursor[from]++] = to; }

struct tkey {
  int src, dst;
  long seq, task;
};

static int tkey_cmp(const void *pa, const void *pb) {
  const struct tkey *a = pa, *b = pb;
  if (a->src != b->src) return a->src < b->src ? -1 : 1;
  if (a->dst != b->dst) return a->dst < b->dst ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The k-th send of a to b meets the k-th receive of b from a (plan.h). */
static hc_result_t pair_transfers(struct replay *R) {
  const int n = R->t->nranks;
  long ns = 0, nr = 0;
  struct tkey *sends = malloc((size_t)HC_MAX(R->ntasks, 1) * sizeof(*sends));
  struct tkey *recvs = malloc((size_t)HC_MAX(R->ntasks, 1) * sizeof(*recvs));
  long *seq = calloc(2 * (size_t)n, sizeof(long));
  R->xfers = malloc((size_t)HC_MAX(R->ntasks, 1) * sizeof(*R->xfers));
  hc_result_t res = HC_OK;
  if (!sends || !recvs || !seq || !R->xfers) {
    res = HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory pairing %ld steps", R->ntasks);
    goto out;
  }
  for (int r = 0; r < n; r++) {
    memset(seq, 0, 2 * (size_t)n * sizeof(long));
    for (long i = R->ps->base[r]; i < R->ps->base[r + 1]; i++) {
      const struct hc_step *s = &R->ps->steps[i].s;
      R->xfer_of[i] = -1;
      if (s->peer == r) continue;
      if (s->kind == HC_STEP_SEND) sends[ns++] = (struct tkey){r, s->peer, seq[s->peer]++, i};
      if (s->kind == HC_STEP_RECV) recvs[nr++] = (struct tkey){s->peer, r, seq[n + s->peer]++, i};
    }
  }
  qsort(sends, (size_t)ns, sizeof(*sends), tkey_cmp);
  qsort(recvs, (size_t)nr, sizeof(*recvs), tkey_cmp);
  for (long i = 0; i < ns && res == HC_OK; i++)
    if (i >= nr || tkey_cmp(&sends[i], &recvs[i]) != 0)
      res = HC_FAIL(HC_ERR_INTERNAL, "sim: send %ld of rank %d to %d meets no receive", sends[i].seq, sends[i].src,
                    sends[i].dst);
  if (res == HC_OK && nr != ns) res = HC_FAIL(HC_ERR_INTERNAL, "sim: %ld receives for %ld sends", nr, ns);
  for (long i = 0; i < ns && res == HC_OK; i++) {
    const bool same_pair = i + 1 < ns && sends[i + 1].src == sends[i].src && sends[i + 1].dst == sends[i].dst;
    R->xfers[i] = (struct xfer){.send = sends[i].task,
                                .recv = recvs[i].task,
                                .next = same_pair ? i + 1 : -1,
                                .head = i == 0 || sends[i - 1].src != sends[i].src || sends[i - 1].dst != sends[i].dst};
    R->xfer_of[sends[i].task] = R->xfer_of[recvs[i].task] = i;
  }
  R->nxfers = ns;
out:
  free(sends);
  free(recvs);
  free(seq);
  return res;
}

/* The k-th VENDOR step of every member of a group is one collective. */
static hc_result_t group_vendor_steps(struct replay *R) {
  const struct topo *t = R->t;
  const int n = t->nranks;
  int *count = calloc((size_t)n, sizeof(int)), *pos = calloc((size_t)n, sizeof(int)),
      *size = calloc((size_t)n, sizeof(int));
  long *inst_base = calloc((size_t)n + 1, sizeof(long));
  hc_result_t res = HC_OK;
  R->inst_of = malloc((size_t)HC_MAX(R->ntasks, 1) * sizeof(long));
  if (!count || !pos || !size || !inst_base || !R->inst_of) {
    res = HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for vendor steps");
    goto out;
  }
  for (int r = 0; r < n; r++) {
    pos[r] = size[t->group_of[r]]++;
    for (long i = R->ps->base[r]; i < R->ps->base[r + 1]; i++) count[r] += R->ps->steps[i].s.kind == HC_STEP_VENDOR;
  }
  int *per_group = calloc((size_t)t->ngroups, sizeof(int)); /* vendor steps of each member */
  for (int r = 0; r < n && per_group; r++) {
    const int g = t->group_of[r];
    if (pos[r] == 0) per_group[g] = count[r];
    else if (count[r] != per_group[g])
      res = HC_FAIL(HC_ERR_INTERNAL, "sim: rank %d has %d vendor steps, its group %d", r, count[r], per_group[g]);
  }
  R->ninst = 0;
  for (int g = 0; g < t->ngroups && per_group; g++) inst_base[g + 1] = inst_base[g] + per_group[g];
  R->ninst = per_group ? inst_base[t->ngroups] : 0;
  R->inst_first = calloc((size_t)R->ninst + 1, sizeof(long));
  R->inst_arrived = calloc((size_t)R->ninst + 1, sizeof(int));
  R->inst_tasks = malloc((size_t)HC_MAX(R->ntasks, 1) * sizeof(long));
  if (per_group == NULL || !R->inst_first || !R->inst_arrived || !R->inst_tasks) {
    if (res == HC_OK) res = HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for vendor steps");
    free(per_group);
    goto out;
  }
  for (int g = 0; g < t->ngroups; g++)
    for (long k = inst_base[g]; k < inst_base[g + 1]; k++) R->inst_first[k + 1] = R->inst_first[k] + size[g];
  for (int r = 0; r < n && res == HC_OK; r++) {
    long k = inst_base[t->group_of[r]];
    for (long i = R->ps->base[r]; i < R->ps->base[r + 1]; i++) {
      if (R->ps->steps[i].s.kind != HC_STEP_VENDOR) continue;
      R->inst_of[i] = k;
      R->inst_tasks[R->inst_first[k++] + pos[r]] = i;
    }
  }
  free(per_group);
out:
  free(count);
  free(pos);
  free(size);
  free(inst_base);
  return res;
}

static void replay_free(struct replay *R) {
  free(R->rank_of);
  free(R->pending);
  free(R->succ_first);
  free(R->succ);
  free(R->cursor);
  free(R->xfer_of);
  free(R->xfers);
  free(R->inst_of);
  free(R->inst_first);
  free(R->inst_tasks);
  free(R->inst_arrived);
  free(R->counter);
  free(R->waiting);
  free(R->next_waiter);
  free(R->heap);
  free(R->flows);
  free(R->active);
}

static hc_result_t replay_init(struct replay *R) {
  const long nt = R->ntasks = R->ps->n, ncounters = 2L * R->t->nranks * R->t->nranks;
  R->rank_of = malloc((size_t)HC_MAX(nt, 1) * sizeof(int));
  R->pending = calloc((size_t)nt + 1, sizeof(int));
  R->succ_first = calloc((size_t)nt + 2, sizeof(long));
  R->cursor = malloc(((size_t)nt + 1) * sizeof(long));
  R->xfer_of = malloc((size_t)HC_MAX(nt, 1) * sizeof(long));
  R->counter = calloc((size_t)ncounters, sizeof(uint64_t));
  R->waiting = malloc((size_t)ncounters * sizeof(long));
  R->next_waiter = malloc((size_t)HC_MAX(nt, 1) * sizeof(long));
  if (!R->rank_of || !R->pending || !R->succ_first || !R->cursor || !R->xfer_of || !R->counter || !R->waiting ||
      !R->next_waiter)
    return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for %ld steps", nt);
  for (long i = 0; i < ncounters; i++) R->waiting[i] = -1;
  for (int r = 0; r < R->t->nranks; r++)
    for (long i = R->ps->base[r]; i < R->ps->base[r + 1]; i++) R->rank_of[i] = r;
  each_edge(R, edge_count);
  for (long i = 0; i < nt; i++) R->succ_first[i + 1] += R->succ_first[i];
  R->succ = malloc((size_t)HC_MAX(R->succ_first[nt], 1) * sizeof(long));
  if (R->succ == NULL) return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory for %ld dependencies", R->succ_first[nt]);
  memcpy(R->cursor, R->succ_first, ((size_t)nt + 1) * sizeof(long));
  each_edge(R, edge_fill);
  HC_TRY(pair_transfers(R));
  return group_vendor_steps(R);
}

static double next_time(const struct replay *R) {
  double t = R->nheap ? R->heap[0].t : UNLIMITED;
  for (long i = 0; i < R->nactive; i++) {
    const struct flow *f = &R->flows[R->active[i]];
    if (f->rate > 0) t = HC_MIN(t, R->now + f->rem / f->rate);
  }
  return t;
}

static hc_result_t replay_run(struct replay *R) {
  for (long i = 0; i < R->ntasks; i++)
    if (R->pending[i] == 0) task_ready(R, i);
  while (!R->failed) {
    while (R->nheap && R->heap[0].t <= R->now) {
      struct event e = heap_pop(R);
      if (e.flow) flow_activate(R, e.id);
      else task_done(R, e.id);
    }
    if (R->rates_stale) rates_compute(R);
    const double t = next_time(R);
    if (t >= UNLIMITED) break;
    advance(R, t);
  }
  if (R->failed) return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory replaying %ld steps", R->ntasks);
  if (R->ndone < R->ntasks)
    return HC_FAIL(HC_ERR_INTERNAL, "sim: the replay stopped with %ld of %ld steps done (the plans wait on each other)",
                   R->ndone, R->ntasks);
  return HC_OK;
}

/* ---- the whole call ---- */

/* The buffer of a call as nccl-tests and the vendor model count it. */
static double call_buffer(const struct hc_coll_args *a, int n) {
  const double b = (double)a->count * (double)hc_dtype_size(a->dtype);
  return a->coll == HC_COLL_ALLGATHER || a->coll == HC_COLL_REDUCESCATTER ? b * n : b;
}

static void link_stats(const struct topo *t, struct sim_result *out) {
  for (int i = 0; i < t->nlinks; i++) {
    const struct link *l = &t->links[i];
    out->bytes[l->cls] += l->bytes;
    out->busy_us[l->cls] = HC_MAX(out->busy_us[l->cls], l->busy_us);
    out->load_us[l->cls] = HC_MAX(out->load_us[l->cls], l->bytes / l->cap);
  }
}

static hc_result_t replay_plans(const struct topo *t, const struct hc_coll_args *a, struct sim_result *out) {
  const double span = call_buffer(a, t->nranks);
  char *send = malloc((size_t)span), *recv = malloc((size_t)span); /* addresses only: never touched */
  struct plans ps = {0};
  struct replay R = {.t = t, .ps = &ps, .a = a};
  hc_result_t r = send && recv ? HC_OK : HC_FAIL(HC_ERR_SYSTEM, "sim: no address space for %.0f-byte buffers", span);
  struct hc_coll_args call = *a;
  call.sendbuf = send;
  call.recvbuf = recv;
  if (r == HC_OK) r = plans_build(t, &call, &ps);
  if (r == HC_OK) r = replay_init(&R);
  if (r == HC_OK) r = replay_run(&R);
  if (r == HC_OK) {
    out->us = HC_MAX(R.now, t->c->costs.call_us);
    out->nsteps = ps.n;
    out->cross_group_bytes = ps.cross_group_bytes;
    link_stats(t, out);
    for (int c = 0; c < SIM_CLASSES; c++) out->vendor_bytes[c] = R.vendor_bytes[c];
  }
  replay_free(&R);
  free(ps.steps);
  free(ps.base);
  free(send);
  free(recv);
  return r;
}

hc_result_t sim_run(const struct sim_cluster *c, const struct hc_coll_args *a, struct sim_result *out) {
  struct topo t;
  HC_TRY(topo_build(c, &t));
  *out = (struct sim_result){.ngroups = t.ngroups};
  int *all = malloc((size_t)t.nranks * sizeof(int));
  if (all == NULL) {
    topo_free(&t);
    return HC_FAIL(HC_ERR_SYSTEM, "sim: out of memory");
  }
  for (int r = 0; r < t.nranks; r++) all[r] = r;
  const struct vendor_cost v = vendor_model(&t, all, t.nranks, a->coll, call_buffer(a, t.nranks));
  out->vendor_us = v.us + t.c->costs.step_us;
  out->vendor_algo = v.algo;
  free(all);
  hc_result_t r = HC_OK;
  if (t.ngroups == 1 && t.group_vendor[0]) { /* the comm is the vendor's (pass-through) */
    out->us = out->vendor_us;
    memcpy(out->vendor_bytes, v.bytes, sizeof(v.bytes));
  } else {
    r = replay_plans(&t, a, out);
  }
  topo_free(&t);
  return r;
}

/* nccl-tests' busbw over algbw (shared/reference/nccl-tests.md, section 5). */
static double busbw_factor(enum hc_coll c, int n) {
  switch (c) {
  case HC_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
  case HC_COLL_ALLGATHER:
  case HC_COLL_REDUCESCATTER:
  case HC_COLL_ALLTOALL: return (double)(n - 1) / n;
  default: return 1;
  }
}

hc_result_t sim_row(const struct sim_cluster *c, enum hc_coll coll, enum hc_dtype t, enum hc_redop op, int root,
                    size_t nominal, struct sim_row *out) {
  const int n = sim_cluster_ranks(c);
  const size_t ts = hc_dtype_size(t);
  const bool split = coll == HC_COLL_ALLGATHER || coll == HC_COLL_REDUCESCATTER;
  *out = (struct sim_row){.count = nominal / ts};
  if (split) out->count = (out->count / (size_t)n) & ~(16 / ts - 1);
  if (out->count == 0) return HC_OK;
  /* PREMULSUM's factor changes no byte that moves. */
  struct hc_coll_args a = {
      .coll = coll, .count = out->count, .dtype = t, .op = op == HC_PREMULSUM ? HC_SUM : op, .root = root};
  HC_TRY(sim_run(c, &a, &out->r));
  out->bytes = (double)out->count * (double)ts * (split ? n : 1);
  out->algbw = out->bytes / out->r.us / 1e3;
  out->busbw = out->algbw * busbw_factor(coll, n);
  out->vendor_busbw = out->bytes / out->r.vendor_us / 1e3 * busbw_factor(coll, n);
  out->efficiency = out->busbw / out->vendor_busbw;
  return HC_OK;
}

/* hetccl's init: every rank tells the root its address and gets its ring
 * neighbour's (the root answers one rank at a time), connects to it, then
 * the ring all-gathers of the peer table and of the vendor groups' ids:
 * n - 1 steps each, one slot (and its header) per step. */
double sim_bootstrap_us(const struct sim_cluster *c) {
  const int n = sim_cluster_ranks(c);
  const double lat = c->costs.tcp_us, bw = GBS(c->costs.tcp_gbs);
  const double slots[] = {sizeof(struct hc_peer_info), sizeof(hc_vendor_id)};
  double us = n * 2 * lat + 2 * lat;
  for (size_t i = 0; i < HC_ARRAY_LEN(slots); i++) us += (n - 1) * (lat + (16 + slots[i]) / bw);
  return us;
}
