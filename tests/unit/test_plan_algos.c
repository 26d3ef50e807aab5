/*
 * The algorithm table (plan/algos.c), HETCCL_ALGO and hetccl-info --algos.
 *  1. The table: no (collective, algorithm) twice, and each collective's
 *     last row applies to every call and is always chosen, so that every
 *     call gets a row.
 *  2. HETCCL_ALGO: what each form forces, and the refusals, whose message
 *     names what is accepted.
 *  3. The planner: the algorithm hc_plan_add builds each call with (on
 *     every rank) against the rules as docs/params.md states them, written
 *     out below per shape and size.
 *  4. hetccl-info --algos for the same shapes: each cell of its grid is
 *     the algorithm the planner builds that call with; a bad HETCCL_ALGO
 *     makes it fail naming the accepted names.
 *  5. A ring's chunks: the sends of a 2-rank ring all-reduce (one per
 *     chunk in each half) against the cut docs/params.md states for
 *     HETCCL_GPU_CHUNK_BYTES and HETCCL_CHUNK_BYTES; the cut of the one
 *     step of two GPU ranks, and its bounded receive slots.
 *  6. Window pieces reduced in their slot: in the staged plan of a pair
 *     with a window, which receives are copied out of the receive window
 *     and which reductions read it instead, against the algorithm's own
 *     receives (those a reduction alone reads, up to the ctx's limit);
 *     each such reduction is followed by the slot's freed, and the freed
 *     counter is published in piece order.
 *  7. A cleared plan stages as a fresh one: a GPU rank's ring all-reduce
 *     staged through pinned slot rings, in a plan that first staged and
 *     cleared a larger call (hc_plan_clear keeps the step, map, piece and
 *     slot-user tables), has the steps of the same call staged in a fresh
 *     plan: kinds, peers, sizes, lanes, dependencies, and the same user
 *     buffer wherever either plan names one.
 * argv[1]: the hetccl-info binary.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "testutil.h"

/* The five collectives whose choice depends on the shape and the size, in
 * the order of the expected rows below; the others are always DIRECT. */
static const enum hc_coll choosy[] = {HC_COLL_ALLREDUCE, HC_COLL_BROADCAST, HC_COLL_REDUCE, HC_COLL_ALLGATHER,
                                      HC_COLL_REDUCESCATTER};

enum gpus { CPU_ONLY, A_GPU, ALL_GPU };

struct shape {
  const char *groups; /* one letter per rank: its group */
  const char *vendor; /* groups that run the vendor library ("" none; implies A_GPU) */
  enum gpus gpus;
  const char *algo;        /* HETCCL_ALGO */
  size_t ring_threshold;   /* ONESTEP_BYTES is 4K and RD_ALLREDUCE_BYTES 8K throughout */
  size_t bytes[3];         /* 0: none */
  const char *expect[3];   /* per size: the algorithms of choosy[] */
  size_t direct_max_bytes; /* HETCCL_DIRECT_MAX_BYTES; 0 in most shapes (test_coll_host forces DIRECT) */
  bool across_hosts;       /* the ranks span hosts (the planner alone: hetccl-info shows one host) */
  bool cores_shared;       /* the ranks outnumber the host's cores */
};

/* The rules: one step up to 4K on CPU-only comms (all-reduce, all-gather; all-reduce,
 * all-gather and reduce-scatter of a power of two of ranks above 2: recursive doubling, or halving, and all-reduce
 * so up to 8K on one host); from the ring threshold
 * the ring (all-reduce: given an element per rank) or the chain; below,
 * recursive doubling or the tree; with several groups one of which has
 * several ranks, the hierarchy (all-reduce: from the threshold, or with a
 * vendor group and an element per rank); an all-reduce of two GPU ranks
 * takes one step up to one window slot (HETCCL_GPU_CHUNK_BYTES, 8 MiB).
 * With DIRECT_MAX_BYTES, CPU-only comms of one group and more than 2 ranks
 * take the direct algorithms above the one-step size up to that whole
 * vector, all-gather of fewer than 8 ranks, and every call of ranks that
 * span hosts, only up to 4M. Where the ranks outnumber the host's cores,
 * no recursive doubling or halving: one step, or direct.
 * A forced name applies where the collective has it and it applies;
 * elsewhere the table chooses. */
static const struct shape shapes[] = {
    {"aaaaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4, 4096, 8192},
     {"RD TREE TREE RD RD", "RD TREE TREE RD RD", "RD TREE TREE RING RING"}},
    {"aaaaaaaa", "", CPU_ONLY, "", 64 << 10, {65536}, {"RING RING RING RING RING"}},
    {"aaaaaaaa", "", A_GPU, "", 64 << 10, {4, 65536}, {"RD TREE TREE RING RING", "RING RING RING RING RING"}},
    {"aaaaaaaa", "", A_GPU, "", 16, {16, 32}, {"RD RING RING RING RING", "RING RING RING RING RING"}},
    {"aabb",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4, 8192, 65536},
     {"RD HIER HIER HIER HIER", "RD HIER HIER HIER HIER", "HIER HIER HIER HIER HIER"}},
    {"ab", "", CPU_ONLY, "", 64 << 10, {4, 65536}, {"ONESTEP TREE TREE ONESTEP RING", "RING RING RING RING RING"}},
    {"ab", "", A_GPU, "", 64 << 10, {4, 65536}, {"RD TREE TREE RING RING", "RING RING RING RING RING"}},
    {"ab",
     "",
     ALL_GPU,
     "",
     64 << 10,
     {4, 65536, (8 << 20) + 4},
     {"ONESTEP TREE TREE RING RING", "ONESTEP RING RING RING RING", "RING RING RING RING RING"}},
    {"aa", "", ALL_GPU, "allreduce:ring", 64 << 10, {65536}, {"RING RING RING RING RING"}},
    {"aaa", "", ALL_GPU, "", 64 << 10, {4, 65536}, {"RD TREE TREE RING RING", "RING RING RING RING RING"}},
    {"aabbc", "ab", CPU_ONLY, "", 64 << 10, {16, 20}, {"RD HIER HIER HIER HIER", "HIER HIER HIER HIER HIER"}},
    {"aabb", "", CPU_ONLY, "RING,broadcast:tree", 64 << 10, {4}, {"RING TREE RING RING RING"}},
    {"aabb", "", CPU_ONLY, "allreduce:onestep", 64 << 10, {65536}, {"ONESTEP HIER HIER HIER HIER"}},
    {"aaaa", "", CPU_ONLY, "HIER", 64 << 10, {65536}, {"RING RING RING RING RING"}},
    {"abab", "", CPU_ONLY, "TREE", 64 << 10, {65536}, {"HIER TREE TREE HIER HIER"}},
    {"aaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {8192, 1 << 20, 2 << 20},
     {"RD TREE TREE DIRECT DIRECT", "DIRECT RING RING DIRECT DIRECT", "DIRECT RING RING RING DIRECT"},
     1 << 30},
    {"aaaaaaaaaaaaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4100, 8192, 8196},
     {"RD TREE TREE DIRECT DIRECT", "RD TREE TREE DIRECT DIRECT", "DIRECT TREE TREE DIRECT DIRECT"},
     1 << 30},
    {"aaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4096, 4100},
     {"ONESTEP TREE TREE ONESTEP DIRECT", "DIRECT TREE TREE DIRECT DIRECT"},
     1 << 30},
    {"aaaaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4096, 8192},
     {"RD TREE TREE RD RD", "DIRECT TREE TREE DIRECT DIRECT"},
     1 << 30,
     true},
    {"aaaaaaaa", "", CPU_ONLY, "", 64 << 10, {2 << 20}, {"DIRECT RING RING DIRECT DIRECT"}, 1 << 30},
    {"aaaaaaaa", "", CPU_ONLY, "", 64 << 10, {1 << 20}, {"DIRECT RING RING RING RING"}, 4 << 20},
    {"aaa", "", A_GPU, "", 64 << 10, {8192}, {"RD TREE TREE RING RING"}, 1 << 30},
    {"aaaaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {512 << 10, 8 << 20},
     {"DIRECT RING RING DIRECT DIRECT", "RING RING RING RING RING"},
     1 << 30,
     true},
    {"aaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4, 4096, 8192},
     {"ONESTEP TREE TREE ONESTEP DIRECT", "ONESTEP TREE TREE ONESTEP DIRECT", "DIRECT TREE TREE DIRECT DIRECT"},
     1 << 30,
     false,
     true},
    {"aaaaaaaa",
     "",
     CPU_ONLY,
     "",
     64 << 10,
     {4, 65536},
     {"ONESTEP TREE TREE ONESTEP DIRECT", "DIRECT RING RING DIRECT DIRECT"},
     1 << 30,
     false,
     true},
};

/* ---- 1, 2 ---- */

static void check_table(void) {
  size_t n;
  const struct hc_algo_desc *t = hc_algo_table(&n);
  for (int c = 0; c < HC_COLL_COUNT; c++) {
    const struct hc_algo_desc *last = NULL;
    for (size_t i = 0; i < n; i++) {
      if (t[i].coll != (enum hc_coll)c) continue;
      last = &t[i];
      CHECK(t[i].build != NULL && t[i].what != NULL, "%s %s: no build function or text", hc_coll_name(t[i].coll),
            hc_algo_name(t[i].algo));
      for (size_t j = 0; j < i; j++)
        CHECK(t[j].coll != t[i].coll || t[j].algo != t[i].algo, "%s %s: two rows", hc_coll_name(t[i].coll),
              hc_algo_name(t[i].algo));
    }
    CHECK(last != NULL && last->applies == NULL && last->chosen == NULL,
          "%s: its last row must apply to every call and always be chosen", hc_coll_name((enum hc_coll)c));
  }
}

/* forced: per collective the name it must force, "" for none. */
static void check_parse(const char *s, const char *const forced[HC_COLL_COUNT]) {
  enum hc_algo got[HC_COLL_COUNT];
  if (!CHECK(hc_algo_parse(s, got) == HC_OK, "HETCCL_ALGO=%s refused: %s", s, hc_last_error())) return;
  for (int c = 0; c < HC_COLL_COUNT; c++) {
    const char *want = forced[c][0] ? forced[c] : "AUTO";
    CHECK(!strcmp(hc_algo_name(got[c]), want), "HETCCL_ALGO=%s: %s forced to %s, expected %s", s,
          hc_coll_name((enum hc_coll)c), hc_algo_name(got[c]), want);
  }
}

static void check_refused(const char *s, const char *names) {
  enum hc_algo got[HC_COLL_COUNT];
  const hc_result_t r = hc_algo_parse(s, got);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), names),
        "HETCCL_ALGO=%s: result %d, message '%s', expected it to name %s", s, (int)r, hc_last_error(), names);
}

static void check_parsing(void) {
  /* AllReduce Broadcast Reduce AllGather ReduceScatter AlltoAll AlltoAllv Gather Scatter Send Recv */
  check_parse("", (const char *const[]){"", "", "", "", "", "", "", "", "", "", ""});
  check_parse("RING", (const char *const[]){"RING", "RING", "RING", "RING", "RING", "", "", "", "", "", ""});
  check_parse("tree", (const char *const[]){"", "TREE", "TREE", "", "", "", "", "", "", "", ""});
  check_parse("ring,AllReduce:rd,reducescatter:hier",
              (const char *const[]){"RD", "RING", "RING", "RING", "HIER", "", "", "", "", "", ""});
  check_parse("allgather:onestep,send:direct",
              (const char *const[]){"", "", "", "ONESTEP", "", "", "", "", "", "DIRECT", ""});
  check_refused("FOO", "the names are RING, RD, TREE, HIER, ONESTEP, DIRECT,");
  check_refused("allreduce:tree", "AllReduce has no algorithm TREE; it has HIER, ONESTEP, DIRECT, RING, RD");
  check_refused("bcast:ring", "AllReduce, Broadcast, Reduce, AllGather, ReduceScatter");
  check_refused("RING,TREE", "two algorithms for every collective (RING and TREE)");
  check_refused("allreduce:ring,AllReduce:rd", "AllReduce is named twice");
  check_refused("allreduce:", "'' is no algorithm");
  check_refused("RING,", "'' is no algorithm");
  check_refused("AUTO", "'AUTO' is no algorithm");
}

/* ---- 3 ---- */

/* Groups numbered in the order of their lowest rank, as api/comm.c does. */
struct comm_shape {
  int n, ngroups, group_of[16];
  bool vendor[16];
};

static struct comm_shape comm_shape_of(const struct shape *s) {
  struct comm_shape cs = {.n = (int)strlen(s->groups)};
  for (int i = 0; i < cs.n; i++) {
    const char *first = strchr(s->groups, s->groups[i]);
    cs.group_of[i] = first == s->groups + i ? cs.ngroups++ : cs.group_of[first - s->groups];
    if (strchr(s->vendor, s->groups[i])) cs.vendor[cs.group_of[i]] = true;
  }
  return cs;
}

/* The algorithm rank r's plan for coll on bytes of float32 is built with. */
static enum hc_algo planned(const struct shape *s, const struct comm_shape *cs, int r, enum hc_coll coll, size_t bytes,
                            struct hc_scratch_pool *pool) {
  const int n = cs->n;
  struct hc_plan_ctx x = {.rank = r,
                          .nranks = n,
                          .chunk_bytes = hc_plan_chunk_bytes(s->gpus != CPU_ONLY || s->vendor[0]),
                          .ring_threshold = s->ring_threshold,
                          .onestep_bytes = 4096,
                          .rd_allreduce_bytes = 8192,
                          .direct_max_bytes = s->gpus != CPU_ONLY ? 0 : s->direct_max_bytes,
                          .one_host = !s->across_hosts,
                          .cores_shared = s->cores_shared,
                          .any_gpu = s->gpus != CPU_ONLY || s->vendor[0],
                          .all_gpu = s->gpus == ALL_GPU,
                          .scratch_slots = 4,
                          .ngroups = cs->ngroups,
                          .group_of = cs->ngroups > 1 ? cs->group_of : NULL,
                          .group_vendor = cs->ngroups > 1 ? cs->vendor : NULL};
  if (!CHECK(hc_algo_parse(s->algo, x.algo) == HC_OK, "HETCCL_ALGO=%s: %s", s->algo, hc_last_error()))
    return HC_ALGO_AUTO;
  const size_t count = bytes / 4;
  size_t counts[16], displs[16];
  for (int i = 0; i < n; i++) counts[i] = count, displs[i] = (size_t)i * count;
  const struct hc_alltoallv_args v = {.sendcounts = counts, .sdispls = displs, .recvcounts = counts, .rdispls = displs};
  char *in = calloc((size_t)n, bytes), *out = calloc((size_t)n, bytes);
  struct hc_coll_args a = {.coll = coll,
                           .sendbuf = in,
                           .recvbuf = out,
                           .count = count,
                           .dtype = HC_FLOAT32,
                           .op = HC_SUM,
                           .root = coll == HC_COLL_SEND || coll == HC_COLL_RECV ? (r + 1) % n : 0,
                           .v = &v};
  struct hc_plan p = {.pool = pool};
  enum hc_algo algo = HC_ALGO_AUTO;
  if (in && out && CHECK_OK((hetcclResult_t)hc_plan_add(&p, &x, &a))) algo = p.algo;
  hc_plan_reset(&p);
  free(in);
  free(out);
  return algo;
}

static void check_planner(const struct shape *s, struct hc_scratch_pool *pool) {
  const struct comm_shape cs = comm_shape_of(s);
  for (int k = 0; k < 3 && s->bytes[k]; k++)
    for (int c = 0; c < HC_COLL_COUNT; c++) {
      char want[16] = "DIRECT";
      const char *row = s->expect[k];
      for (size_t i = 0; i < HC_ARRAY_LEN(choosy); i++) { /* word i of the expected row */
        const size_t len = strcspn(row, " ");
        if (choosy[i] == (enum hc_coll)c) snprintf(want, sizeof(want), "%.*s", (int)len, row);
        row += len + (row[len] == ' ');
      }
      for (int r = 0; r < cs.n; r++) {
        tu_set_case("groups %s vendor '%s'%s%s HETCCL_ALGO=%s threshold %zu: %s of %zu bytes on rank %d", s->groups,
                    s->vendor, (const char *const[]){"", " a gpu", " all gpu"}[s->gpus],
                    s->cores_shared ? " cores shared" : "", s->algo, s->ring_threshold, hc_coll_name((enum hc_coll)c),
                    s->bytes[k], r);
        const enum hc_algo got = planned(s, &cs, r, (enum hc_coll)c, s->bytes[k], pool);
        CHECK(!strcmp(hc_algo_name(got), want), "planned with %s, expected %s", hc_algo_name(got), want);
      }
    }
  tu_set_case("%s", "");
}

/* ---- 4 ---- */

/* "a,a,b,b" from "aabb". */
static void comma_list(const char *letters, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (const char *l = letters; *l && at < len; l++) at += (size_t)snprintf(buf + at, len - at, at ? ",%c" : "%c", *l);
}

/* Runs hetccl-info --algos for s under its variables; its output in out. */
static bool run_info(const char *info, const struct shape *s, char *out, size_t len) {
  char cmd[512], groups[64], vendor[16], sizes[64] = "";
  comma_list(s->groups, groups, sizeof(groups));
  comma_list(s->vendor, vendor, sizeof(vendor));
  for (int k = 0; k < 3 && s->bytes[k]; k++)
    snprintf(sizes + strlen(sizes), sizeof(sizes) - strlen(sizes), "%s%zu", k ? "," : "", s->bytes[k]);
  snprintf(cmd, sizeof(cmd),
           "HETCCL_ALGO='%s' HETCCL_RING_THRESHOLD=%zu HETCCL_ONESTEP_BYTES=4K HETCCL_RD_ALLREDUCE_BYTES=8K "
           "HETCCL_DIRECT_MAX_BYTES=%zu '%s' --algos "
           "--groups %s%s%s%s%s "
           "--sizes %s 2>&1",
           s->algo, s->ring_threshold, s->direct_max_bytes, info, groups, vendor[0] ? " --vendor " : "", vendor,
           (const char *const[]){"", " --gpu", " --all-gpu"}[s->gpus], s->cores_shared ? " --cores-shared" : "", sizes);
  FILE *f = popen(cmd, "r");
  if (!CHECK(f != NULL, "popen: %s", cmd)) return false;
  const size_t got = fread(out, 1, len - 1, f);
  out[got] = 0;
  const int status = pclose(f);
  return CHECK(status == 0, "%s exited with status %d:\n%s", cmd, status, out);
}

static void check_info(const char *info, const struct shape *s, struct hc_scratch_pool *pool) {
  static char out[1 << 16];
  if (!run_info(info, s, out, sizeof(out))) return;
  const struct comm_shape cs = comm_shape_of(s);
  char *line = strstr(out, "\n       bytes ");
  if (!CHECK(line != NULL, "no grid in the output of hetccl-info --algos:\n%s", out)) return;
  enum hc_coll cols[HC_COLL_COUNT];
  int ncols = 0;
  char *save, *word = strtok_r(line + 1, " \n", &save); /* "bytes" */
  while (ncols < HC_COLL_COUNT && (word = strtok_r(NULL, " \n", &save)) != NULL) {
    int c = 0;
    while (c < HC_COLL_COUNT && strcmp(hc_coll_name((enum hc_coll)c), word)) c++;
    if (!CHECK(c < HC_COLL_COUNT, "grid header: '%s' is no collective", word)) return;
    cols[ncols++] = (enum hc_coll)c;
  }
  CHECK(ncols == HC_COLL_COUNT, "grid header: %d collectives", ncols);
  int rows = 0;
  while ((word = strtok_r(NULL, " \n", &save)) != NULL) {
    const size_t bytes = strtoull(word, NULL, 10);
    CHECK(rows < 3 && bytes == s->bytes[rows], "grid row %d is for %s bytes", rows, word);
    for (int i = 0; i < ncols; i++) {
      word = strtok_r(NULL, " \n", &save);
      const enum hc_algo want = planned(s, &cs, 0, cols[i], bytes, pool);
      CHECK(word && !strcmp(word, hc_algo_name(want)),
            "groups %s HETCCL_ALGO=%s: hetccl-info says %s for %s of %zu bytes, the planner builds %s", s->groups,
            s->algo, word ? word : "nothing", hc_coll_name(cols[i]), bytes, hc_algo_name(want));
    }
    rows++;
  }
  int nsizes = 0;
  while (nsizes < 3 && s->bytes[nsizes]) nsizes++;
  CHECK(rows == nsizes, "groups %s: %d grid rows, expected %d", s->groups, rows, nsizes);
}

static void check_info_refuses(const char *info) {
  static char out[1 << 12];
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "HETCCL_ALGO=allreduce:tree '%s' --algos 2>&1", info);
  FILE *f = popen(cmd, "r");
  if (!CHECK(f != NULL, "popen: %s", cmd)) return;
  const size_t got = fread(out, 1, sizeof(out) - 1, f);
  out[got] = 0;
  const int status = pclose(f);
  CHECK(status != 0 && strstr(out, "it has HIER, ONESTEP, DIRECT, RING, RD"), "%s: status %d, output:\n%s", cmd, status,
        out);
}

/* ---- 5 ---- */

/* Rank 0's plan of a 2-rank all-reduce of bytes of float32 (algorithm
 * forced, or the table's with AUTO): its sends, and the distinct places
 * its receives land in. */
struct pair_plan {
  int sends, recv_places;
};

static struct pair_plan pair_plan(enum hc_algo algo, bool gpus, size_t chunk_bytes, size_t bytes,
                                  struct hc_scratch_pool *pool) {
  struct hc_plan_ctx x = {.rank = 0,
                          .nranks = 2,
                          .chunk_bytes = chunk_bytes,
                          .any_gpu = gpus,
                          .all_gpu = gpus,
                          .scratch_slots = 4,
                          .ngroups = 1};
  x.algo[HC_COLL_ALLREDUCE] = algo;
  float *in = calloc(bytes / 4, 4), *out = calloc(bytes / 4, 4);
  struct hc_coll_args a = {
      .coll = HC_COLL_ALLREDUCE, .sendbuf = in, .recvbuf = out, .count = bytes / 4, .dtype = HC_FLOAT32, .op = HC_SUM};
  struct hc_plan p = {.pool = pool};
  struct pair_plan got = {-1, -1};
  if (in && out && CHECK_OK((hetcclResult_t)hc_plan_add(&p, &x, &a))) {
    got = (struct pair_plan){0, 0};
    for (int i = 0; i < p.nsteps; i++) {
      got.sends += p.steps[i].kind == HC_STEP_SEND;
      if (p.steps[i].kind != HC_STEP_RECV) continue;
      int j = 0;
      while (j < i && !(p.steps[j].kind == HC_STEP_RECV && p.steps[j].dst == p.steps[i].dst)) j++;
      got.recv_places += j == i;
    }
  }
  hc_plan_reset(&p);
  free(in);
  free(out);
  return got;
}

/* A comm with a GPU rank cuts a ring's block at the slot, except that a
 * block of fewer than 4 slots goes in as many as 4 chunks of at least half
 * a slot; a CPU-only comm cuts at its chunk. Each half of the 2-rank
 * all-reduce sends its block once, so sends = 2 x chunks per block. Two
 * GPU ranks take one step up to one slot; forced above, it cuts the whole
 * vector at the slot and receives into at most HETCCL_SCRATCH_SLOTS (4
 * here) places. */
static void check_ring_chunks(struct hc_scratch_pool *pool) {
  const size_t M = 1 << 20;
  const struct {
    enum hc_algo algo;
    bool gpu;
    size_t chunk, bytes;
    int sends, recv_places; /* -1: not checked */
  } cases[] = {
      {HC_ALGO_RING, true, 8 * M, 4 * M, 2, -1},      /* block 2 MiB: under half a slot */
      {HC_ALGO_RING, true, 8 * M, 12 * M, 2, -1},     /* block 6 MiB: one half slot fits once */
      {HC_ALGO_RING, true, 8 * M, 16 * M, 4, -1},     /* block 8 MiB: two halves */
      {HC_ALGO_RING, true, 8 * M, 32 * M, 8, -1},     /* block 16 MiB: four halves */
      {HC_ALGO_RING, true, 8 * M, 64 * M, 8, -1},     /* block 32 MiB: four slots */
      {HC_ALGO_RING, true, 8 * M, 128 * M, 16, -1},   /* block 64 MiB: eight slots */
      {HC_ALGO_RING, false, M / 2, 16 * M, 32, -1},   /* CPU-only: 512 KiB chunks of an 8 MiB block */
      {HC_ALGO_AUTO, true, 8 * M, 4, 1, 1},           /* two GPU ranks: one step up to a slot */
      {HC_ALGO_AUTO, true, 8 * M, 8 * M, 1, 1},       /* a slot */
      {HC_ALGO_AUTO, true, 8 * M, 8 * M + 4, 2, -1},  /* over it: the ring, a chunk per half */
      {HC_ALGO_ONESTEP, true, 8 * M, 12 * M, 2, 2},   /* two slots, the last one partly */
      {HC_ALGO_ONESTEP, true, 8 * M, 16 * M, 2, 2},   /* two slots: not the ring's four halves */
      {HC_ALGO_ONESTEP, true, 8 * M, 128 * M, 16, 4}, /* sixteen slots, through 4 receive places */
      {HC_ALGO_ONESTEP, false, M / 2, 4 * M, 8, 4},   /* CPU-only, forced: 512 KiB pieces */
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(cases); i++) {
    tu_set_case("%s all-reduce of %zu bytes, %s chunk %zu KiB", hc_algo_name(cases[i].algo), cases[i].bytes,
                cases[i].gpu ? "GPU" : "CPU", cases[i].chunk >> 10);
    const struct pair_plan got = pair_plan(cases[i].algo, cases[i].gpu, cases[i].chunk, cases[i].bytes, pool);
    CHECK(got.sends == cases[i].sends, "%d sends, expected %d", got.sends, cases[i].sends);
    CHECK(cases[i].recv_places < 0 || got.recv_places == cases[i].recv_places, "receives into %d places, expected %d",
          got.recv_places, cases[i].recv_places);
  }
  tu_set_case("%s", "");
}

/* A kept plan's signature renumbered for a later call of the same shape
 * must be the one that call plans afresh (the peer whose cache missed
 * compares them), for every part of it that a call sets; no signature
 * stays none. */
static void check_sig_renumber(void) {
  static const struct hc_coll_args calls[] = {
      {.coll = HC_COLL_ALLREDUCE, .count = 1000, .dtype = HC_FLOAT32, .op = HC_MAX},
      {.coll = HC_COLL_BROADCAST, .count = 7, .dtype = HC_INT8, .root = 3},
      {.coll = HC_COLL_SEND, .count = 1, .dtype = HC_FLOAT64, .root = 2},
      {.coll = HC_COLL_RECV, .count = 1, .dtype = HC_FLOAT64, .root = 2},
  };
  static const uint32_t seqs[][2] = {{0, 1}, {5, 4}, {7, 0xffffffffu}, {0xffffffffu, 0}};
  for (size_t i = 0; i < HC_ARRAY_LEN(calls); i++)
    for (size_t k = 0; k < HC_ARRAY_LEN(seqs); k++) {
      tu_set_case("signature of %s, seq %u renumbered to %u", hc_coll_name(calls[i].coll), seqs[k][0], seqs[k][1]);
      struct hc_coll_args earlier = calls[i], later = calls[i];
      earlier.seq = seqs[k][0];
      later.seq = seqs[k][1];
      struct hc_net_sig sig = hc_plan_sig(&earlier, 1);
      const struct hc_net_sig want = hc_plan_sig(&later, 1);
      hc_plan_sig_renumber(&sig, later.seq);
      CHECK(hc_net_sig_equal(&sig, &want), "got %016llx %016llx, planned afresh %016llx %016llx",
            (unsigned long long)sig.w[0], (unsigned long long)sig.w[1], (unsigned long long)want.w[0],
            (unsigned long long)want.w[1]);
    }
  tu_set_case("no signature renumbered");
  struct hc_net_sig none = {{0, 0}};
  hc_plan_sig_renumber(&none, 9);
  CHECK(none.w[0] == 0 && none.w[1] == 0, "no signature became %016llx %016llx", (unsigned long long)none.w[0],
        (unsigned long long)none.w[1]);
  tu_set_case("%s", "");
}

/* ---- 6 ---- */

/* Rank 0's staged plan of one call with rank 1 through a window of 4
 * slots of slot bytes and LL slots for pieces of up to ll bytes: its
 * receives copied out of the window (out of its LL slots: ll_gets), its
 * reductions that read the window, its pieces put in LL form, and whether
 * every freed of the receive window follows what used the slot and
 * publishes a larger count than the one before. In LL form (plan.h, enum
 * hc_ll), a receive's wait says POLLED and its freed is relaxed, and the
 * flags of the puts and of the gets count the pieces from 1. */
struct window_use {
  int copied_out, reduced_in_slot, ll_gets, ll_puts;
  bool freed_in_order, ll_form;
};

static bool in_range(const void *p, const void *base, size_t bytes) {
  return (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

static struct window_use window_use(enum hc_coll coll, enum hc_algo algo, size_t bytes, bool in_place, size_t slot,
                                    size_t window_reduce_bytes, size_t ll, struct hc_scratch_pool *pool) {
  static atomic_ullong counters[4], sigs[2][2 * HC_NET_WINDOW_SIGS];
  struct hc_plan_window windows[2];
  memset(windows, 0, sizeof(windows));
  char *tx = calloc(HC_WINDOW_SLOTS, slot), *rx = calloc(HC_WINDOW_SLOTS, slot);
  const size_t ll_slots = HC_WINDOW_SLOTS * hc_ll_words(ll) * sizeof(uint64_t);
  uint64_t *ll_tx = calloc(1, ll_slots + 8), *ll_rx = calloc(1, ll_slots + 8);
  windows[1] = (struct hc_plan_window){.w = {.tx = (uint8_t *)tx,
                                             .rx = (uint8_t *)rx,
                                             .bytes = HC_WINDOW_SLOTS * slot,
                                             .tx_filled = &counters[0],
                                             .tx_freed = &counters[1],
                                             .rx_filled = &counters[2],
                                             .rx_freed = &counters[3],
                                             .tx_sig = sigs[0],
                                             .rx_sig = sigs[1]},
                                       .slot_bytes = slot,
                                       .ll_bytes = ll,
                                       .ll_tx = ll_tx,
                                       .ll_rx = ll_rx};
  struct hc_plan_ctx x = {.rank = 0,
                          .nranks = 2,
                          .chunk_bytes = slot,
                          .ring_threshold = SIZE_MAX,
                          .scratch_slots = 4,
                          .ngroups = 1,
                          .windows = windows,
                          .window_reduce_bytes = window_reduce_bytes};
  x.algo[coll] = algo;
  const size_t total = coll == HC_COLL_REDUCESCATTER ? 2 * bytes : bytes;
  float *in = calloc(total / 4, 4), *out = in_place ? in : calloc(bytes / 4, 4);
  struct hc_coll_args a = {
      .coll = coll, .sendbuf = in, .recvbuf = out, .count = bytes / 4, .dtype = HC_FLOAT32, .op = HC_SUM};
  struct hc_plan p = {.pool = pool};
  struct window_use got = {-1, -1, -1, -1, false, false};
  if (tx && rx && ll_tx && ll_rx && in && out && CHECK_OK((hetcclResult_t)hc_plan_add(&p, &x, &a)) &&
      CHECK_OK((hetcclResult_t)hc_plan_stage(&p, &x, false))) {
    got = (struct window_use){0, 0, 0, 0, true, true};
    uint64_t last_freed = 0;
    uint32_t put_flag = 0, get_flag = 0;
    int polled = 0;
    for (int i = 0; i < p.nsteps; i++) {
      const struct hc_step *s = &p.steps[i];
      const bool reads_rx = in_range(s->src0, rx, HC_WINDOW_SLOTS * slot) ||
                            (s->kind == HC_STEP_REDUCE && in_range(s->src1, rx, HC_WINDOW_SLOTS * slot));
      const bool ll_get = s->kind == HC_STEP_COPY && s->ll == HC_LL_GET && in_range(s->src0, ll_rx, ll_slots);
      const bool ll_put = s->kind == HC_STEP_COPY && s->ll == HC_LL_PUT && in_range(s->dst, ll_tx, ll_slots);
      got.copied_out += s->kind == HC_STEP_COPY && reads_rx;
      got.reduced_in_slot += s->kind == HC_STEP_REDUCE && reads_rx;
      got.ll_gets += ll_get;
      got.ll_puts += ll_put;
      polled += s->kind == HC_STEP_WAIT && s->ll == HC_LL_POLLED;
      if (ll_get) got.ll_form &= s->ll_flag == ++get_flag && s->count <= ll;
      if (ll_put) got.ll_form &= s->ll_flag == ++put_flag && s->count <= ll;
      if (s->kind != HC_STEP_SIGNAL || s->src0 != (const void *)&counters[3]) continue;
      /* what used the slot: a dependency of the signal that read the window */
      bool after_use = false, after_ll_get = false;
      for (int d = 0; d < HC_STEP_MAX_DEPS; d++) {
        const struct hc_step *u = s->deps[d] ? &p.steps[s->deps[d] - 1] : NULL;
        if (u == NULL) continue;
        after_ll_get |= u->kind == HC_STEP_COPY && u->ll == HC_LL_GET && in_range(u->src0, ll_rx, ll_slots);
        after_use |= (u->kind == HC_STEP_COPY || u->kind == HC_STEP_REDUCE) &&
                     (in_range(u->src0, rx, HC_WINDOW_SLOTS * slot) ||
                      (u->kind == HC_STEP_REDUCE && in_range(u->src1, rx, HC_WINDOW_SLOTS * slot)));
      }
      got.freed_in_order &= (after_use || after_ll_get) && s->count == last_freed + 1;
      got.ll_form &= s->relaxed == after_ll_get;
      last_freed = s->count;
    }
    got.ll_form &= polled == got.ll_gets;
  }
  hc_plan_reset(&p);
  if (out != in) free(out);
  free(in);
  free(tx);
  free(rx);
  free(ll_tx);
  free(ll_rx);
  return got;
}

static void check_window_reduce(struct hc_scratch_pool *pool) {
  const size_t K = 1024, all = SIZE_MAX;
  const struct {
    const char *what;
    enum hc_coll coll;
    enum hc_algo algo;
    size_t bytes;
    bool in_place;
    size_t slot, limit, ll;
    int copied_out, reduced_in_slot, ll_gets, ll_puts;
  } cases[] = {
      /* one step: the peer's vector, one piece, reduced where it lands */
      {"one step", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K, false, 16 * K, all, 0, 0, 1, 0, 0},
      {"one step, limit 0", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K, false, 16 * K, 0, 0, 1, 0, 0, 0},
      {"one step, piece over the limit", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K, false, 16 * K, 4 * K - 4, 0, 1, 0,
       0, 0},
      {"one step, piece at the limit", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K, false, 16 * K, 4 * K, 0, 0, 1, 0, 0},
      {"one step, 5 pieces", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 80 * K, false, 16 * K, all, 0, 0, 5, 0, 0},
      /* ring: the reduce-scatter half's 2 pieces of 16K reduced in the
       * slot, the all-gather half's copied into the output */
      {"ring", HC_COLL_ALLREDUCE, HC_ALGO_RING, 64 * K, false, 16 * K, all, 0, 2, 2, 0, 0},
      {"ring, limit 0", HC_COLL_ALLREDUCE, HC_ALGO_RING, 64 * K, false, 16 * K, 0, 0, 4, 0, 0, 0},
      /* reduce-scatter into the output: it lands in the output and is
       * reduced there, so it is copied out; in place it lands in scratch */
      {"reduce-scatter", HC_COLL_REDUCESCATTER, HC_ALGO_RING, 32 * K, false, 16 * K, all, 0, 2, 0, 0, 0},
      {"reduce-scatter in place", HC_COLL_REDUCESCATTER, HC_ALGO_RING, 32 * K, true, 16 * K, all, 0, 0, 2, 0, 0},
      /* all-gather receives into the output, which nothing reduces */
      {"all-gather", HC_COLL_ALLGATHER, HC_ALGO_RING, 32 * K, false, 16 * K, all, 0, 2, 0, 0, 0},
      /* LL form (ll bytes): the one-step pair's 4 KiB, read out of its LL
       * slot (no reduction from the window), and put into the peer's */
      {"one step, LL", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K, false, 16 * K, all, 4 * K, 0, 0, 1, 1},
      {"one step, over LL", HC_COLL_ALLREDUCE, HC_ALGO_ONESTEP, 4 * K + 4, false, 16 * K, all, 4 * K, 0, 1, 0, 0},
      /* the ring's four pieces of 16 KiB, each one in LL form */
      {"ring, LL", HC_COLL_ALLREDUCE, HC_ALGO_RING, 64 * K, false, 16 * K, all, 16 * K, 0, 0, 4, 4},
  };
  for (size_t i = 0; i < HC_ARRAY_LEN(cases); i++) {
    tu_set_case("window reduce: %s, %zu bytes", cases[i].what, cases[i].bytes);
    const struct window_use got = window_use(cases[i].coll, cases[i].algo, cases[i].bytes, cases[i].in_place,
                                             cases[i].slot, cases[i].limit, cases[i].ll, pool);
    CHECK(got.copied_out == cases[i].copied_out, "%d pieces copied out of the window, expected %d", got.copied_out,
          cases[i].copied_out);
    CHECK(got.reduced_in_slot == cases[i].reduced_in_slot, "%d reductions read the window, expected %d",
          got.reduced_in_slot, cases[i].reduced_in_slot);
    CHECK(got.freed_in_order, "a freed of the receive window comes before the slot's use or out of order");
    CHECK(got.ll_gets == cases[i].ll_gets && got.ll_puts == cases[i].ll_puts,
          "%d pieces read and %d put in LL form, expected %d and %d", got.ll_gets, got.ll_puts, cases[i].ll_gets,
          cases[i].ll_puts);
    CHECK(got.ll_form, "an LL piece's flag, POLLED wait or relaxed freed is wrong");
  }
  tu_set_case("%s", "");
}

/* ---- 7 ---- */

static bool in_buffers(const void *p, const float *in, const float *out, size_t bytes) {
  return in_range(p, in, bytes) || in_range(p, out, bytes);
}

/* Rank 0's ring all-reduce of bytes of float32 on a GPU comm, staged (in
 * pieces of 64 KiB through 4 slots a direction: more pieces than slots, so
 * that each piece after the fourth waits for its slot's last user). */
static bool stage_ring(struct hc_plan *p, const float *in, float *out, size_t bytes) {
  struct hc_plan_ctx x = {.rank = 0,
                          .nranks = 2,
                          .chunk_bytes = 64 << 10,
                          .any_gpu = true,
                          .all_gpu = true,
                          .scratch_slots = 4,
                          .ngroups = 1};
  x.algo[HC_COLL_ALLREDUCE] = HC_ALGO_RING;
  struct hc_coll_args a = {
      .coll = HC_COLL_ALLREDUCE, .sendbuf = in, .recvbuf = out, .count = bytes / 4, .dtype = HC_FLOAT32, .op = HC_SUM};
  return CHECK_OK((hetcclResult_t)hc_plan_add(p, &x, &a)) && CHECK_OK((hetcclResult_t)hc_plan_stage(p, &x, true));
}

static void check_cleared_plan_stages_afresh(struct hc_scratch_pool *pool) {
  const size_t bytes = 1 << 20, larger = 4 << 20;
  float *in = calloc(larger / 4, 4), *out = calloc(larger / 4, 4);
  struct hc_plan fresh = {.pool = pool}, reused = {.pool = pool};
  tu_set_case("%s", "a cleared plan restaged");
  if (!CHECK(in && out, "out of memory") || !stage_ring(&fresh, in, out, bytes) ||
      !stage_ring(&reused, in, out, larger)) {
    goto out;
  }
  /* The case stages what it means to: 8 pieces a half through 4 slots. */
  int staged_copies = 0, slot_waits = 0;
  for (int i = 0; i < fresh.nsteps; i++) {
    const struct hc_step *f = &fresh.steps[i];
    int ndeps = 0;
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++) ndeps += f->deps[d] != 0;
    staged_copies += f->kind == HC_STEP_COPY && f->lane == HC_LANE_TO_HOST;
    slot_waits += f->kind == HC_STEP_COPY && f->lane == HC_LANE_TO_HOST && ndeps > 1;
  }
  CHECK(staged_copies == 16 && slot_waits > 0, "%d copies into slots, %d of them wait for a slot's last user",
        staged_copies, slot_waits);
  const int larger_steps = reused.nsteps;
  for (int round = 0; round < 2; round++) { /* the second round: tables already of the size */
    hc_plan_clear(&reused);
    if (!stage_ring(&reused, in, out, bytes)) goto out;
    CHECK(reused.nsteps == fresh.nsteps && fresh.nsteps < larger_steps, "round %d: %d steps, fresh %d (larger %d)",
          round, reused.nsteps, fresh.nsteps, larger_steps);
    for (int i = 0; i < fresh.nsteps && i < reused.nsteps; i++) {
      const struct hc_step *f = &fresh.steps[i], *r = &reused.steps[i];
      const bool same_buffers =
          (f->dst == r->dst || (!in_buffers(f->dst, in, out, larger) && !in_buffers(r->dst, in, out, larger))) &&
          (f->src0 == r->src0 || (!in_buffers(f->src0, in, out, larger) && !in_buffers(r->src0, in, out, larger)));
      if (!CHECK(f->kind == r->kind && f->peer == r->peer && f->count == r->count && f->lane == r->lane &&
                     memcmp(f->deps, r->deps, sizeof(f->deps)) == 0 && same_buffers,
                 "round %d, step %d differs from the fresh plan's (kind %d / %d, deps %d %d %d / %d %d %d)", round, i,
                 f->kind, r->kind, f->deps[0], f->deps[1], f->deps[2], r->deps[0], r->deps[1], r->deps[2]))
        break;
    }
  }
out:
  hc_plan_reset(&fresh);
  hc_plan_reset(&reused);
  free(in);
  free(out);
  tu_set_case("%s", "");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: test_plan_algos HETCCL-INFO\n");
    return 2;
  }
  setenv("HETCCL_DEBUG", "NONE", 0); /* the refusals' WARN lines are noise unless asked for */
  hc_params_reset();
  check_table();
  check_parsing();
  struct hc_scratch_pool *pool;
  if (!CHECK_OK((hetcclResult_t)hc_scratch_pool_create(HC_POOL_HOST, NULL, 0, &pool)))
    return tu_finish("test_plan_algos");
  for (size_t i = 0; i < HC_ARRAY_LEN(shapes); i++) {
    check_planner(&shapes[i], pool);
    if (!shapes[i].across_hosts) check_info(argv[1], &shapes[i], pool);
  }
  check_info_refuses(argv[1]);
  check_ring_chunks(pool);
  check_sig_renumber();
  check_window_reduce(pool);
  check_cleared_plan_stages_afresh(pool);
  hc_scratch_pool_destroy(pool);
  return tu_finish("test_plan_algos");
}
