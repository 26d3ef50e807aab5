/*
 * The algorithm table: one row per (collective, algorithm) saying when the
 * algorithm can run a call, when the automatic choice takes it, and which
 * function builds its steps (ring.c, tree.c, onestep.c, direct.c, hier.c,
 * p2p.c).
 * hc_plan_add builds every call with the row hc_algo_choose gives, and
 * hetccl-info --algos prints the table and the choice for a comm shape, so
 * the documented choice and the planner's are one.
 *
 * Every predicate reads only the call and what every rank's context holds
 * alike (sizes, rank and group counts, which groups run the vendor, whether
 * a rank is a GPU, HETCCL_* thresholds that must be set alike): all ranks
 * choose the same row, so their steps meet.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "plan_priv.h"

/* ---- when each algorithm applies and pays ---- */

static size_t call_bytes(const struct hc_coll_args *a) { return a->count * hc_dtype_size(a->dtype); }

/* The hierarchical plans need groups, and the whole comm to plan over. */
static bool grouped(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  (void)a;
  return x->ngroups >= 2 && x->group_of != NULL && x->members == NULL;
}

/* With one rank per group the flat algorithm is already hierarchical. */
static bool some_group_shared(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  (void)a;
  return x->ngroups < x->nranks;
}

static bool any_vendor_group(const struct hc_plan_ctx *x) {
  for (int g = 0; g < x->ngroups; g++)
    if (hc_runs_vendor(x, g)) return true;
  return false;
}

/* Each byte crosses between groups once per group, not once per rank;
 * smaller messages take the flat algorithms' few steps instead, unless a
 * group runs the vendor's library (whose steps keep its bytes off hetccl's
 * transports) and every rank has an element (the rings inside the other
 * groups need one per member). */
static bool hier_allreduce_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return some_group_shared(x, a) &&
         (call_bytes(a) >= x->ring_threshold || (any_vendor_group(x) && a->count >= (size_t)x->nranks));
}

/* One step pays where a small message costs a round trip whatever its size
 * (shm's inline descriptors); GPU ranks stage every transfer, and there
 * n-1 copies per rank cost more. */
static bool one_step_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return !x->any_gpu && call_bytes(a) <= x->onestep_bytes;
}

/* A broadcast's one step makes the root post n-1 messages per call, the
 * binomial tree's root log2(n): back to back, the tree's calls ran 1.5-3.5x
 * faster at 4-16 ranks from 8 B to 2K (16-core Xeon, docs/perf.md), and
 * with 2 ranks both are one send. So broadcast takes it only when forced. */
static bool never_chosen(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  (void)x;
  (void)a;
  return false;
}

/* An all-reduce, all-gather or reduce-scatter of a power of two of CPU
 * ranks above 2 with at most ONESTEP_BYTES (per rank): recursive doubling's
 * log2(n) exchanges in sequence beat one step's n-1 messages into and out
 * of every rank, and the direct algorithm's two rounds (16-core Xeon,
 * all-reduce of 4 and 8 ranks bound, 8 B to 2K: 1.3-2.5x; all-gather:
 * docs/perf.md). Reduce-scatter takes the same exchanges backwards
 * (recursive halving) in place of the direct algorithm's one round of n-1
 * messages per rank, which had the same gap (not yet measured on 16
 * cores). The one-step and direct rows leave such calls to the recursive
 * doubling row. Other rank counts keep one step: there the doubling's fold
 * adds two hops in sequence (all-reduce), or the blocks are not aligned
 * runs (all-gather, reduce-scatter).
 * Where the ranks outnumber the host's cores, each exchange in sequence
 * waits for its peer to be scheduled, and the fewest rounds win: on 2
 * cores, up to 4K, one step took 12-15 us against recursive doubling's
 * 27-42 with 4 ranks, and 46-59 against 113-160 with 8; the direct
 * reduce-scatter 12-13 against 37-39 and 50-54 against 107-133 (unbound,
 * docs/perf.md). */
static bool power_of_two_ranks(const struct hc_plan_ctx *x) { return (x->nranks & (x->nranks - 1)) == 0; }

static bool rd_ranks(const struct hc_plan_ctx *x) { return x->nranks > 2 && power_of_two_ranks(x) && !x->cores_shared; }

static bool rd_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return one_step_pays(x, a) && rd_ranks(x);
}

static bool one_step_not_rd(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return one_step_pays(x, a) && !rd_pays(x, a);
}

/* An all-reduce's doubling keeps paying above the one-step size, up to
 * RD_ALLREDUCE_BYTES: at 8K it ran 1.1x, 1.3x and 1.45x as fast as the
 * direct algorithm with 4, 8 and 16 bound ranks, and was even at 16K
 * (16-core Xeon, two passes each, docs/perf.md). One step, the other rank
 * counts' choice, lost to direct at 8K (3, 6 and 12 ranks: 1.2-2x slower),
 * so ONESTEP_BYTES stays where it is. Measured on one host only: ranks
 * that span hosts keep the one-step size. */
static bool rd_allreduce_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  const size_t limit = x->one_host ? x->rd_allreduce_bytes : HC_MIN(x->rd_allreduce_bytes, x->onestep_bytes);
  return !x->any_gpu && rd_ranks(x) && call_bytes(a) <= limit;
}

/* Two GPU ranks move the same bytes either way (each stages its whole
 * vector out and the peer's in), but the ring's all-gather waits for its
 * reduce-scatter, and each of its waits on the peer is one more that two
 * processes on one GPU pay a switch of contexts for. A vector of one
 * window slot (chunk_bytes) goes in one step instead: one wait, no second
 * half. On the H100 (bench/gpu, two groups, three runs) ranks as processes
 * took 216-238 against 430-461 us at 64 KiB, 258-263 against 461-482 at 1
 * MiB and 425-428 against 613-702 at 4 MiB; as threads 43 against 74-75
 * at 64 KiB and 116-120 against 143-147 at 1 MiB. Larger vectors would go
 * in pieces, and there the ring stays: at 64 MiB it was ahead as threads
 * and as processes (3162-3337 against 3248-3649 us), at 16 MiB as threads
 * (927-965 against 954-1041) though not as processes (1121-1263 against
 * 1052). A CPU rank would reduce the whole vector instead of half: with
 * one, the ring stays at every size. */
static bool gpu_pair(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return x->nranks == 2 && x->all_gpu && call_bytes(a) <= x->chunk_bytes;
}

static bool one_step_allreduce_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return (one_step_pays(x, a) && !rd_allreduce_pays(x, a)) || gpu_pair(x, a);
}

static bool large(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return call_bytes(a) >= x->ring_threshold;
}

/* The ring splits the buffer into a block per rank. */
static bool ring_allreduce_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return large(x, a) && a->count >= (size_t)x->nranks;
}

/* The direct algorithms (direct.c) run over the whole comm of CPU ranks:
 * their n-1 transfers per piece at once would each be staged on a GPU
 * rank, through pair windows whose in-order lanes they do not keep apart. */
static bool flat_cpu(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  (void)a;
  return !x->any_gpu && x->members == NULL;
}

/* Recursive doubling's all-gather swaps aligned runs of blocks. */
static bool flat_cpu_pof2(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return flat_cpu(x, a) && power_of_two_ranks(x);
}

/* The whole vector: all-reduce's buffer, all-gather's output,
 * reduce-scatter's input. */
static size_t direct_vector(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return a->coll == HC_COLL_ALLREDUCE ? call_bytes(a) : call_bytes(a) * (size_t)x->nranks;
}

/* Up to this vector the direct algorithms' fewer rounds paid wherever they
 * apply (the first measurements, docs/perf.md); above it only where
 * measured: ranks of one host, and there all-gather from 8 ranks (below). */
#define DIRECT_SMALL_VECTOR_BYTES ((size_t)4 << 20)

/* Two rounds (one for all-gather and reduce-scatter) replace the ring's
 * 2(n-1) steps and recursive doubling's log2(n) in sequence. Large vectors
 * gain on one host too: each rank pulls from n-1 peers at once rather than
 * from one neighbour per step, and 4, 8 and 16 bound ranks ran 1.1-1.5x
 * faster than the ring from 8M to 128M (16-core Xeon, docs/perf.md), so
 * the default maximum (1G) leaves the ring only beyond what was measured.
 * Across hosts the ring of host-ordered ranks crosses each host's link
 * with about one rank's bytes, direct with every rank's to every rank of
 * the other hosts: large vectors keep the ring there. With 2 ranks they
 * save no round: the ring is the same exchange, and recursive doubling's
 * one round beat direct's two at 8-32 KiB (docs/perf.md). */
static bool direct_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  const size_t vector = direct_vector(x, a);
  return x->nranks > 2 && vector <= x->direct_max_bytes && (x->one_host || vector <= DIRECT_SMALL_VECTOR_BYTES);
}

static bool direct_not_rd(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return direct_pays(x, a) && !rd_pays(x, a);
}

static bool direct_allreduce_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return direct_pays(x, a) && !rd_allreduce_pays(x, a);
}

/* An all-gather reduces nothing: direct and the ring copy the same n-1
 * blocks into each rank, and only the pulls at once differ. From 8 ranks
 * those won at every size measured (8M-128M: 1.13-1.20x the ring); with 4
 * they gained nothing from 8M (0.87-1.02x). */
#define DIRECT_ALLGATHER_MANY_RANKS 8

static bool direct_allgather_pays(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  return direct_not_rd(x, a) &&
         (x->nranks >= DIRECT_ALLGATHER_MANY_RANKS || direct_vector(x, a) <= DIRECT_SMALL_VECTOR_BYTES);
}

/* ---- the table ---- */

#define HIER_APPLIES "a comm of several groups"
#define HIER_CHOSEN "some group has several ranks"
#define ONESTEP_CHOSEN "no rank is a GPU and the call has at most ONESTEP_BYTES bytes per rank"
#define FLAT_CPU "a comm of CPU ranks only"
#define RD_RANKS "the ranks are a power of two above 2, and no more than the host's cores"
#define NOT_RD_RANKS "the ranks are not a power of two above 2, or they outnumber the host's cores"
#define DIRECT_CHOSEN \
  "more than 2 ranks and the whole vector has at most DIRECT_MAX_BYTES bytes (4M where the ranks span hosts)"
#define DIRECT_WHAT "direct transfers between each pair (a vendor group's mates: the vendor's sends and receives)"

/* One row per entry, as the table reads best. */
/* clang-format off */
static const struct hc_algo_desc table[] = {
    {.coll = HC_COLL_ALLREDUCE, .algo = HC_ALGO_HIER, .applies = grouped, .chosen = hier_allreduce_pays,
     .build = hc_hier,
     .what = "reduce-scatter inside each group, a ring of one rank per group across, all-gather inside",
     .applies_doc = HIER_APPLIES,
     .chosen_doc = HIER_CHOSEN ", and the call has RING_THRESHOLD bytes or more, or some group runs the "
                   "vendor library and the call has an element per rank"},
    {.coll = HC_COLL_ALLREDUCE, .algo = HC_ALGO_ONESTEP, .chosen = one_step_allreduce_pays,
     .build = hc_onestep_allreduce,
     .what = "every rank sends its input to every other at once and reduces alone (two ranks: in pieces, each "
             "reduced as it lands)",
     .chosen_doc = "the comm is two GPU ranks and the call fits one chunk; or " ONESTEP_CHOSEN
                   ", and recursive doubling does not take it (below)"},
    {.coll = HC_COLL_ALLREDUCE, .algo = HC_ALGO_DIRECT, .applies = flat_cpu, .chosen = direct_allreduce_pays,
     .build = hc_direct_allreduce,
     .what = "each block from every rank straight to the rank that reduces it, in cache-sized pieces, then "
             "from there to every rank: two rounds",
     .applies_doc = FLAT_CPU, .chosen_doc = DIRECT_CHOSEN ", unless recursive doubling takes the call (below)"},
    {.coll = HC_COLL_ALLREDUCE, .algo = HC_ALGO_RING, .chosen = ring_allreduce_pays, .build = hc_ring_allreduce,
     .what = "ring reduce-scatter then ring all-gather, pipelined in chunks",
     .chosen_doc = "the call has RING_THRESHOLD bytes or more and an element per rank"},
    {.coll = HC_COLL_ALLREDUCE, .algo = HC_ALGO_RD, .build = hc_rd_allreduce,
     .what = "recursive doubling: log2(n) exchanges of the whole buffer",
     .chosen_doc = "no row above is chosen; these leave it the calls of at most RD_ALLREDUCE_BYTES on CPU comms "
                   "of a power of two of ranks above 2, no more than the host's cores"},

    {.coll = HC_COLL_BROADCAST, .algo = HC_ALGO_HIER, .applies = grouped, .chosen = some_group_shared,
     .build = hc_hier,
     .what = "from RING_THRESHOLD bytes without a vendor group: a chain through the ranks ordered by group; "
             "else a tree among one leader per group, then one inside each group",
     .applies_doc = HIER_APPLIES, .chosen_doc = HIER_CHOSEN},
    {.coll = HC_COLL_BROADCAST, .algo = HC_ALGO_ONESTEP, .chosen = never_chosen, .build = hc_onestep_broadcast,
     .what = "the root sends its message to every other rank at once",
     .chosen_doc = "only where forced (the tree's calls run faster back to back)"},
    {.coll = HC_COLL_BROADCAST, .algo = HC_ALGO_RING, .chosen = large, .build = hc_chain_broadcast,
     .what = "a pipelined chain from the root through every rank",
     .chosen_doc = "the call has RING_THRESHOLD bytes or more"},
    {.coll = HC_COLL_BROADCAST, .algo = HC_ALGO_TREE, .build = hc_tree_broadcast,
     .what = "a binomial tree from the root"},

    {.coll = HC_COLL_REDUCE, .algo = HC_ALGO_HIER, .applies = grouped, .chosen = some_group_shared,
     .build = hc_hier,
     .what = "from RING_THRESHOLD bytes without a vendor group: a chain through the ranks ordered by group; "
             "else a tree inside each group to its leader, then one among the leaders",
     .applies_doc = HIER_APPLIES, .chosen_doc = HIER_CHOSEN},
    {.coll = HC_COLL_REDUCE, .algo = HC_ALGO_RING, .chosen = large, .build = hc_chain_reduce,
     .what = "a pipelined chain through every rank to the root",
     .chosen_doc = "the call has RING_THRESHOLD bytes or more"},
    {.coll = HC_COLL_REDUCE, .algo = HC_ALGO_TREE, .build = hc_tree_reduce, .what = "a binomial tree to the root"},

    {.coll = HC_COLL_ALLGATHER, .algo = HC_ALGO_HIER, .applies = grouped, .chosen = some_group_shared,
     .build = hc_hier,
     .what = "each block to one member of every other group, which passes it on inside its group",
     .applies_doc = HIER_APPLIES, .chosen_doc = HIER_CHOSEN},
    {.coll = HC_COLL_ALLGATHER, .algo = HC_ALGO_ONESTEP, .chosen = one_step_not_rd, .build = hc_onestep_allgather,
     .what = "every rank sends its block to every other at once",
     .chosen_doc = ONESTEP_CHOSEN ", and " NOT_RD_RANKS},
    {.coll = HC_COLL_ALLGATHER, .algo = HC_ALGO_DIRECT, .applies = flat_cpu, .chosen = direct_allgather_pays,
     .build = hc_onestep_allgather, .what = "each block straight from its owner to every rank (the one-step exchange)",
     .applies_doc = FLAT_CPU,
     .chosen_doc = DIRECT_CHOSEN ", and at most 4M with fewer than 8 ranks, unless recursive doubling takes the "
                   "call (below)"},
    {.coll = HC_COLL_ALLGATHER, .algo = HC_ALGO_RD, .applies = flat_cpu_pof2, .chosen = rd_pays,
     .build = hc_rd_allgather, .what = "recursive doubling: log2(n) exchanges, each of the blocks gathered so far",
     .applies_doc = "a comm of CPU ranks only, a power of two of them",
     .chosen_doc = ONESTEP_CHOSEN ", and " RD_RANKS},
    {.coll = HC_COLL_ALLGATHER, .algo = HC_ALGO_RING, .build = hc_ring_allgather,
     .what = "a ring, n - 1 steps, pipelined in chunks"},

    {.coll = HC_COLL_REDUCESCATTER, .algo = HC_ALGO_HIER, .applies = grouped, .chosen = some_group_shared,
     .build = hc_hier,
     .what = "block b summed on one member of each group, whose partial goes to rank b",
     .applies_doc = HIER_APPLIES, .chosen_doc = HIER_CHOSEN},
    {.coll = HC_COLL_REDUCESCATTER, .algo = HC_ALGO_DIRECT, .applies = flat_cpu, .chosen = direct_not_rd,
     .build = hc_direct_reducescatter,
     .what = "each block from every rank straight to the rank that owns it, reduced there in cache-sized pieces",
     .applies_doc = FLAT_CPU, .chosen_doc = DIRECT_CHOSEN ", unless recursive halving takes the call (below)"},
    {.coll = HC_COLL_REDUCESCATTER, .algo = HC_ALGO_RD, .applies = flat_cpu_pof2, .chosen = rd_pays,
     .build = hc_rh_reducescatter,
     .what = "recursive halving: log2(n) exchanges, each of half the blocks still summed",
     .applies_doc = "a comm of CPU ranks only, a power of two of them",
     .chosen_doc = ONESTEP_CHOSEN ", and " RD_RANKS},
    {.coll = HC_COLL_REDUCESCATTER, .algo = HC_ALGO_RING, .build = hc_ring_reducescatter,
     .what = "a ring, n - 1 steps, pipelined in chunks"},

    {.coll = HC_COLL_ALLTOALL, .algo = HC_ALGO_DIRECT, .build = hc_p2p_alltoallv, .what = DIRECT_WHAT},
    {.coll = HC_COLL_ALLTOALLV, .algo = HC_ALGO_DIRECT, .build = hc_p2p_alltoallv, .what = DIRECT_WHAT},
    {.coll = HC_COLL_GATHER, .algo = HC_ALGO_DIRECT, .build = hc_p2p_gather_scatter, .what = DIRECT_WHAT},
    {.coll = HC_COLL_SCATTER, .algo = HC_ALGO_DIRECT, .build = hc_p2p_gather_scatter, .what = DIRECT_WHAT},
    {.coll = HC_COLL_SEND, .algo = HC_ALGO_DIRECT, .build = hc_p2p_send, .what = DIRECT_WHAT},
    {.coll = HC_COLL_RECV, .algo = HC_ALGO_DIRECT, .build = hc_p2p_recv, .what = DIRECT_WHAT},
};
/* clang-format on */

const struct hc_algo_desc *hc_algo_table(size_t *n) {
  *n = HC_ARRAY_LEN(table);
  return table;
}

const struct hc_algo_desc *hc_algo_choose(const struct hc_plan_ctx *x, const struct hc_coll_args *a) {
  if ((unsigned)a->coll >= HC_COLL_COUNT) return NULL;
  const enum hc_algo forced = x->algo[a->coll];
  const struct hc_algo_desc *pick = NULL;
  for (size_t i = 0; i < HC_ARRAY_LEN(table); i++) {
    const struct hc_algo_desc *d = &table[i];
    if (d->coll != a->coll || (d->applies && !d->applies(x, a))) continue;
    if (d->algo == forced) return d;
    if (pick == NULL && (d->chosen == NULL || d->chosen(x, a))) pick = d;
  }
  return pick;
}

/* ---- names ---- */

const char *hc_algo_name(enum hc_algo a) {
  static const char *const names[HC_ALGO_COUNT] = {"AUTO", "RING", "RD", "TREE", "HIER", "ONESTEP", "DIRECT"};
  return (unsigned)a < HC_ALGO_COUNT ? names[a] : "?";
}

static bool has_row(enum hc_coll c, enum hc_algo algo) {
  for (size_t i = 0; i < HC_ARRAY_LEN(table); i++)
    if (table[i].coll == c && table[i].algo == algo) return true;
  return false;
}

/* The algorithm or collective whose name is word[0..len), case aside. */
static bool algo_named(const char *word, size_t len, enum hc_algo *out) {
  for (int a = HC_ALGO_AUTO + 1; a < HC_ALGO_COUNT; a++)
    if (strlen(hc_algo_name((enum hc_algo)a)) == len && !strncasecmp(word, hc_algo_name((enum hc_algo)a), len)) {
      *out = (enum hc_algo)a;
      return true;
    }
  return false;
}

static bool coll_named(const char *word, size_t len, enum hc_coll *out) {
  for (int c = 0; c < HC_COLL_COUNT; c++)
    if (strlen(hc_coll_name((enum hc_coll)c)) == len && !strncasecmp(word, hc_coll_name((enum hc_coll)c), len)) {
      *out = (enum hc_coll)c;
      return true;
    }
  return false;
}

/* Appends name to the list in buf, after a comma unless it is the first. */
static void list_add(char *buf, size_t len, const char *name) {
  const size_t at = strlen(buf);
  if (at < len) snprintf(buf + at, len - at, "%s%s", at ? ", " : "", name);
}

/* "HIER, ONESTEP, RING, RD": the algorithms of collective c, in table
 * order; every algorithm for HC_COLL_COUNT. */
static const char *algos_of(enum hc_coll c, char *buf, size_t len) {
  buf[0] = 0;
  for (int a = HC_ALGO_AUTO + 1; a < HC_ALGO_COUNT && c == HC_COLL_COUNT; a++)
    list_add(buf, len, hc_algo_name((enum hc_algo)a));
  for (size_t i = 0; i < HC_ARRAY_LEN(table); i++)
    if (table[i].coll == c) list_add(buf, len, hc_algo_name(table[i].algo));
  return buf;
}

static const char *coll_names(char *buf, size_t len) {
  buf[0] = 0;
  for (int c = 0; c < HC_COLL_COUNT; c++) list_add(buf, len, hc_coll_name((enum hc_coll)c));
  return buf;
}

hc_result_t hc_algo_parse(const char *s, enum hc_algo forced[HC_COLL_COUNT]) {
  enum hc_algo bare = HC_ALGO_AUTO;
  bool named[HC_COLL_COUNT] = {false};
  char names[160];
  for (int c = 0; c < HC_COLL_COUNT; c++) forced[c] = HC_ALGO_AUTO;
  if (s == NULL || s[0] == 0) return HC_OK;
  for (const char *item = s;; item++) {
    const size_t len = strcspn(item, ",");
    const char *colon = memchr(item, ':', len);
    const char *word = colon ? colon + 1 : item;
    const size_t wlen = len - (size_t)(word - item);
    enum hc_coll c = HC_COLL_COUNT;
    enum hc_algo algo;
    if (colon && !coll_named(item, (size_t)(colon - item), &c))
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_ALGO=%s: '%.*s' is no collective; the collectives are %s", s,
                     (int)(colon - item), item, coll_names(names, sizeof(names)));
    if (!algo_named(word, wlen, &algo))
      return HC_FAIL(HC_ERR_USAGE,
                     "HETCCL_ALGO=%s: '%.*s' is no algorithm; the names are %s, alone or after a collective and "
                     "a colon (allreduce:ring)",
                     s, (int)wlen, word, algos_of(HC_COLL_COUNT, names, sizeof(names)));
    if (colon && !has_row(c, algo))
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_ALGO=%s: %s has no algorithm %s; it has %s", s, hc_coll_name(c),
                     hc_algo_name(algo), algos_of(c, names, sizeof(names)));
    if (colon && named[c]) return HC_FAIL(HC_ERR_USAGE, "HETCCL_ALGO=%s: %s is named twice", s, hc_coll_name(c));
    if (!colon && bare != HC_ALGO_AUTO)
      return HC_FAIL(HC_ERR_USAGE,
                     "HETCCL_ALGO=%s: two algorithms for every collective (%s and %s); name the "
                     "collective of one (broadcast:tree)",
                     s, hc_algo_name(bare), hc_algo_name(algo));
    if (colon) {
      named[c] = true;
      forced[c] = algo;
    } else {
      bare = algo;
    }
    item += len;
    if (*item == 0) break;
  }
  for (int c = 0; c < HC_COLL_COUNT; c++)
    if (!named[c] && has_row((enum hc_coll)c, bare)) forced[c] = bare;
  return HC_OK;
}
