/*
 * Host collectives end to end: ranks as threads of one process, real TCP
 * bootstrap and socket transport over loopback (tests/common/testutil.h).
 *
 * Dimensions: collective (AllReduce, Broadcast, Reduce, AllGather,
 * ReduceScatter, AlltoAll, AlltoAllv, Gather, Scatter, Send/Recv ring in a
 * group, Send/Recv to self, Barrier) x datatype (12) x op (sum, prod, max,
 * min, avg, PreMulSum with the scalar on the "device" and host-immediate) x
 * count (0, 1, 7, 1023, 1 Mi + 3) x in-place / out-of-place x algorithm
 * (a comm made under HETCCL_ALGO unset, RING, RING with 1 KiB chunks and
 * 2 scratch slots, RD, TREE, ONESTEP, ONESTEP with 1 KiB chunks and 2
 * slots (pieces with two ranks), DIRECT, DIRECT with 1 KiB pieces and one
 * slot set), for one rank count per run (--ranks).
 * The full product is far too slow, so the cases form a covering array: a
 * greedy generator picks cases until every pair of values of two dimensions
 * that can occur together occurs in some case (op only matters for the
 * reducing collectives; datatype and count not for Barrier; in-place not
 * for Send/Recv and Barrier). The big count runs only with four datatypes
 * and only for nranks <= 4 without --quick.
 *
 * Expected results are computed independently from the generators of
 * testutil.c (exact by construction) and compared bitwise; send buffers of
 * out-of-place calls must come back unchanged, receive buffers carry guard
 * zones, and buffers a rank must not write (Reduce and Gather off the root)
 * must stay as they were.
 * Extra cases: all-reduce of inexact random floats under every all-reduce
 * algorithm, whose results must be bitwise identical on all ranks (and
 * close to the exact sum); every chunked algorithm with more chunks than
 * scratch slots (8 KiB per rank, 1 KiB chunks, 2 slots; and 1 KiB direct
 * pieces with one slot set); a group with
 * collectives on two comms made by hetcclCommSplit (keys reversed, so ranks
 * are renumbered) and on the parent, once with the connections already up
 * and once on fresh comms (connections come up inside GroupEnd);
 * hetcclCommSplit with HETCCL_SPLIT_NOCOLOR.
 *
 * Usage: test_coll_host [--ranks N] [--quick] [--case K|split] [--list]
 *   without --ranks: 1, 2, 3, 4, 5 and 8 ranks in turn. --case K reruns one
 *   case (the number a failure prints; "split" the split and group test),
 *   --list prints the cases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "testutil.h"

/* ---- dimensions ---- */

enum coll {
  C_ALLREDUCE,
  C_BROADCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_ALLTOALL,
  C_ALLTOALLV,
  C_GATHER,
  C_SCATTER,
  C_SENDRECV,
  C_SENDSELF,
  C_BARRIER,
  C_NCOLL,
  C_XRANK = C_NCOLL /* extra: inexact float all-reduce, identical on all ranks */
};
static const char *const coll_names[] = {"AllReduce",    "Broadcast", "Reduce",        "AllGather", "ReduceScatter",
                                         "AlltoAll",     "AlltoAllv", "Gather",        "Scatter",   "SendRecvRing",
                                         "SendRecvSelf", "Barrier",   "AllReduceXRank"};

enum opv { O_SUM, O_PROD, O_MAX, O_MIN, O_AVG, O_PREMUL_DEV, O_PREMUL_HOST, O_NOPS };
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg", "premulsum(device)", "premulsum(host)"};
static const enum hc_redop op_hc[] = {HC_SUM, HC_PROD, HC_MAX, HC_MIN, HC_AVG, HC_PREMULSUM, HC_PREMULSUM};

#define BIG_COUNT (((size_t)1 << 20) + 3)
static const size_t counts[] = {0, 1, 7, 1023, BIG_COUNT};
#define NCOUNTS 5
#define BIG_IDX 4
static bool big_dtype(int t) { return t == HC_INT8 || t == HC_FP8_E4M3 || t == HC_BFLOAT16 || t == HC_FLOAT32; }

/* Comm configurations: HETCCL_* values set while the comm is made ("" =
 * what the environment had at start). */
enum cfgv {
  CFG_AUTO,
  CFG_RING,
  CFG_RING_SMALL,
  CFG_RD,
  CFG_TREE,
  CFG_ONESTEP,
  CFG_ONESTEP_SMALL,
  CFG_DIRECT,
  CFG_DIRECT_SMALL,
  CFG_N
};
static const struct {
  const char *name, *algo, *chunk, *slots, *direct_chunk;
} cfgs[CFG_N] = {
    {"AUTO", "", "", "", ""},
    {"RING", "RING", "", "", ""},
    {"RING_CHUNK1K", "RING", "1K", "2", ""},
    {"RD", "RD", "", "", ""},
    {"TREE", "TREE", "", "", ""},
    {"ONESTEP", "ONESTEP", "", "", ""},
    /* With two ranks: many pieces through 2 receive slots. */
    {"ONESTEP_CHUNK1K", "ONESTEP", "1K", "2", ""},
    {"DIRECT", "DIRECT", "", "", ""},
    /* Many pieces per block, one slot set (pieces reuse it one by one). */
    {"DIRECT_PIECE1K", "DIRECT", "", "1", "1K"},
};

enum dim { D_COLL, D_DTYPE, D_OP, D_COUNT, D_INPLACE, D_CFG, NDIM };
static const int dim_size[NDIM] = {C_NCOLL, HC_DTYPE_COUNT, O_NOPS, NCOUNTS, 2, CFG_N};

struct tcase {
  int v[NDIM];
  int root;
  uint64_t seed;
};

static bool reducing(int c) { return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCESCATTER || c == C_XRANK; }

static bool relevant(const int *v, int d) {
  switch (d) {
  case D_OP: return reducing(v[D_COLL]);
  case D_DTYPE:
  case D_COUNT: return v[D_COLL] != C_BARRIER;
  case D_INPLACE: return v[D_COLL] != C_SENDRECV && v[D_COLL] != C_SENDSELF && v[D_COLL] != C_BARRIER;
  default: return true;
  }
}

static bool valid(const int *v, bool big_ok) {
  for (int d = 0; d < NDIM; d++)
    if (!relevant(v, d) && v[d] != 0) return false; /* one canonical form */
  if (v[D_COUNT] == BIG_IDX && (!big_ok || !big_dtype(v[D_DTYPE]))) return false;
  return true;
}

static bool valid_cb(const int *v, void *arg) { return valid(v, *(const bool *)arg); }
static int cost_cb(const int *v) { return v[D_COUNT] == BIG_IDX ? 1 : 0; }

static int build_pairwise(bool big_ok, struct tcase **out) {
  struct tu_dims dims = {NDIM, dim_size, relevant, valid_cb, cost_cb, &big_ok};
  int *tuples;
  int n = tu_pairwise(&dims, &tuples);
  if (n < 0) abort();
  struct tcase *cases = calloc((size_t)n + 1, sizeof(*cases));
  if (cases == NULL) abort();
  for (int i = 0; i < n; i++) memcpy(cases[i].v, &tuples[i * NDIM], sizeof(cases[i].v));
  free(tuples);
  *out = cases;
  return n;
}

/* The full list: the covering array, then the cross-rank float and the
 * chunking cases. */
static int build_cases(int nranks, bool quick, struct tcase **out, int *nextra) {
  struct tcase *cases;
  int n = build_pairwise(!quick && nranks <= 4, &cases);
  static const int xdtypes[] = {HC_FLOAT16, HC_FLOAT32, HC_FLOAT64, HC_BFLOAT16, HC_FP8_E4M3};
  static const int xcfgs[] = {CFG_AUTO,    CFG_RING,          CFG_RING_SMALL, CFG_RD,
                              CFG_ONESTEP, CFG_ONESTEP_SMALL, CFG_DIRECT,     CFG_DIRECT_SMALL};
  int extra = (int)(HC_ARRAY_LEN(xdtypes) * HC_ARRAY_LEN(xcfgs));
  *nextra = extra;
  cases = realloc(cases, (size_t)(n + extra) * sizeof(*cases));
  int k = 0;
  for (size_t c = 0; c < HC_ARRAY_LEN(xcfgs); c++)
    for (size_t t = 0; t < HC_ARRAY_LEN(xdtypes); t++, k++) {
      struct tcase *x = &cases[n++];
      memset(x, 0, sizeof(*x));
      x->v[D_COLL] = C_XRANK;
      x->v[D_DTYPE] = xdtypes[t];
      x->v[D_OP] = k % 3 == 2 ? O_AVG : O_SUM;
      x->v[D_COUNT] = k % 2 ? 3 : 2; /* 1023 or 7 */
      x->v[D_INPLACE] = k % 4 >= 2;
      x->v[D_CFG] = xcfgs[c];
    }
  /* Many chunks per block and more chunks than scratch slots (1 KiB
   * chunks and 2 slots, the ring's and two ranks' one step; 1 KiB direct
   * pieces and 1 slot set): every chunked algorithm, 8 KiB per rank. */
  static const int ccolls[] = {C_ALLREDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE};
  static const int ccfgs[] = {CFG_RING_SMALL, CFG_ONESTEP_SMALL, CFG_DIRECT_SMALL};
  const int nchunked = 2 * (int)HC_ARRAY_LEN(ccolls) * (int)HC_ARRAY_LEN(ccfgs);
  cases = realloc(cases, (size_t)(n + extra + nchunked) * sizeof(*cases));
  for (size_t f = 0; f < HC_ARRAY_LEN(ccfgs); f++)
    for (size_t c = 0; c < 2 * HC_ARRAY_LEN(ccolls); c++) {
      struct tcase *x = &cases[n++];
      memset(x, 0, sizeof(*x));
      x->v[D_COLL] = ccolls[c % HC_ARRAY_LEN(ccolls)];
      x->v[D_DTYPE] = c < HC_ARRAY_LEN(ccolls) ? HC_FLOAT64 : HC_INT32;
      x->v[D_OP] = reducing(x->v[D_COLL]) ? (c < HC_ARRAY_LEN(ccolls) ? O_SUM : O_PREMUL_DEV) : 0;
      x->v[D_COUNT] = 3; /* 1023 */
      x->v[D_INPLACE] = (int)(c % 2);
      x->v[D_CFG] = ccfgs[f];
    }
  *nextra += nchunked;
  for (int i = 0; i < n; i++) {
    cases[i].seed = tu_hash(0x5eedc011ull, (uint64_t)nranks, (uint64_t)i);
    cases[i].root = (int)(cases[i].seed % (uint64_t)nranks);
  }
  *out = cases;
  return n;
}

static void case_text(const struct tcase *c, int nranks, int index, char *buf, size_t len) {
  const int *v = c->v;
  int at = snprintf(buf, len, "#%d %s nranks %d algo %s", index, coll_names[v[D_COLL]], nranks, cfgs[v[D_CFG]].name);
  if (relevant(v, D_DTYPE))
    at += snprintf(buf + at, len - (size_t)at, " %s count %zu", hc_dtype_name(v[D_DTYPE]), counts[v[D_COUNT]]);
  if (reducing(v[D_COLL])) at += snprintf(buf + at, len - (size_t)at, " op %s", op_names[v[D_OP]]);
  if (relevant(v, D_INPLACE))
    at += snprintf(buf + at, len - (size_t)at, " %s", v[D_INPLACE] ? "in-place" : "out-of-place");
  if (v[D_COLL] == C_BROADCAST || v[D_COLL] == C_REDUCE || v[D_COLL] == C_GATHER || v[D_COLL] == C_SCATTER)
    snprintf(buf + at, len - (size_t)at, " root %d", c->root);
}

/* ---- running one case on one rank ---- */

#define ONLY_ALL (-2)
#define ONLY_SPLIT (-1)

struct run_ctx {
  int nranks;
  bool quick;
  int cfg;  /* the configuration this run serves */
  int only; /* --case K, or ONLY_ALL / ONLY_SPLIT */
  const struct tcase *cases;
  int ncases;
  atomic_int barrier_arrivals;
  atomic_int cases_run;
};

struct rk {
  int rank, n;
  hetcclComm_t comm;
  struct run_ctx *ctx;
  int barriers_done;
};

#define ES(t) hc_dtype_size((enum hc_dtype)(t))
#define AT(p, i, t) ((char *)(p) + (size_t)(i)*ES(t))

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) abort();
  return p;
}

/* A receive buffer of count elements (0xcd bytes) or, for count 0 when
 * null_ok, NULL. */
static void *rbuf(size_t count, int t, bool null_ok) {
  return count == 0 && null_ok ? NULL : tu_buf_alloc(count * ES(t), 0xcd);
}

static void expect_red(const struct tu_red *s, size_t first, size_t count, void *out) {
  for (size_t k = 0; k < count; k++) tu_red_expect(s, first + k, AT(out, k, s->dtype));
}

static void expect_data(int t, uint64_t seed, int src, size_t first, size_t count, void *out) {
  tu_data_fill((enum hc_dtype)t, seed, src, first, count, out);
}

/* What a buffer must still hold: a copy taken now. */
static void *snapshot(const void *buf, size_t bytes) {
  void *s = xmalloc(bytes);
  if (bytes) memcpy(s, buf, bytes);
  return s;
}

/* The op to pass: built-in, or a PreMulSum with this rank's scalar. The
 * "device" scalar is read when the call runs, so it is written only after
 * the create call; the host-immediate one is read by the create call, so it
 * is overwritten with a wrong value afterwards. */
struct op_handle {
  hetcclRedOp_t op;
  bool custom;
  uint8_t *storage;
};

static bool op_make(struct rk *k, int opv, const struct tu_red *s, struct op_handle *h) {
  *h = (struct op_handle){.op = (hetcclRedOp_t)op_hc[opv]};
  if (opv != O_PREMUL_DEV && opv != O_PREMUL_HOST) return true;
  uint8_t right[8], wrong[8];
  tu_red_scalar(s, k->rank, right);
  if (hc_dtype_is_float(s->dtype)) hc_dtype_store(s->dtype, wrong, 3.0);
  else hc_dtype_store(s->dtype, wrong, 1000003.0);
  h->storage = xmalloc(8);
  bool dev = opv == O_PREMUL_DEV;
  memcpy(h->storage, dev ? wrong : right, 8);
  hetcclResult_t r = hetcclRedOpCreatePreMulSum(&h->op, h->storage, (hetcclDataType_t)s->dtype,
                                                dev ? hetcclScalarDevice : hetcclScalarHostImmediate, k->comm);
  if (!CHECK_OK(r)) {
    free(h->storage);
    h->storage = NULL;
    return false;
  }
  h->custom = true;
  memcpy(h->storage, dev ? right : wrong, 8);
  CHECK((int)h->op >= hetcclNumOps, "PreMulSum op %d is below hetcclNumOps", (int)h->op);
  return true;
}

static void op_free(struct rk *k, struct op_handle *h) {
  if (h->custom) CHECK_OK(hetcclRedOpDestroy(h->op, k->comm));
  free(h->storage);
}

/* A collective that must succeed; the failure shows the last-error text.
 * (One rank's failure leaves its peers waiting until HETCCL_TIMEOUT.) */
static bool call_ok(hetcclResult_t r, const char *what) {
  return CHECK(r == hetcclSuccess, "%s returned %d (%s): %s", what, (int)r, hetcclGetErrorString(r),
               hetcclGetLastError(NULL));
}

static void run_allreduce(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  struct tu_red s = {(enum hc_dtype)t, op_hc[c->v[D_OP]], k->n, c->seed};
  struct op_handle oh;
  if (!op_make(k, c->v[D_OP], &s, &oh)) return;
  void *send = rbuf(n_el, t, null_ok);
  if (send) tu_red_fill(&s, k->rank, 0, n_el, send);
  void *recv = inplace ? send : rbuf(n_el, t, null_ok);
  void *before = snapshot(send, send ? n_el * ES(t) : 0);
  if (call_ok(hetcclAllReduce(send, recv, n_el, (hetcclDataType_t)t, oh.op, k->comm, NULL), "AllReduce")) {
    void *exp = xmalloc(n_el * ES(t));
    expect_red(&s, 0, n_el, exp);
    if (n_el) tu_compare((enum hc_dtype)t, recv, exp, n_el, "AllReduce recvbuff");
    if (!inplace && n_el) tu_compare((enum hc_dtype)t, send, before, n_el, "AllReduce sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "AllReduce sendbuff");
  if (!inplace) {
    tu_buf_guards_ok(recv, "AllReduce recvbuff");
    tu_buf_free(recv);
  }
  tu_buf_free(send);
  free(before);
  op_free(k, &oh);
}

static void run_broadcast(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int root = c->root, me = k->rank;
  void *send, *recv;
  if (inplace) {
    send = recv = rbuf(n_el, t, null_ok);
    if (me == root && send) expect_data(t, c->seed, root, 0, n_el, send);
  } else {
    /* Off the root the send buffer is not read: NULL or junk. */
    send = me == root || !(c->seed & 2) ? rbuf(n_el, t, null_ok) : NULL;
    if (send && me == root) expect_data(t, c->seed, root, 0, n_el, send);
    recv = rbuf(n_el, t, null_ok);
  }
  if (call_ok(hetcclBroadcast(send, recv, n_el, (hetcclDataType_t)t, root, k->comm, NULL), "Broadcast") && n_el) {
    void *exp = xmalloc(n_el * ES(t));
    expect_data(t, c->seed, root, 0, n_el, exp);
    tu_compare((enum hc_dtype)t, recv, exp, n_el, "Broadcast recvbuff");
    if (!inplace && me == root) tu_compare((enum hc_dtype)t, send, exp, n_el, "Broadcast sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "Broadcast sendbuff");
  tu_buf_guards_ok(recv, "Broadcast recvbuff");
  if (!inplace) tu_buf_free(send);
  tu_buf_free(recv);
}

static void run_reduce(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int root = c->root, me = k->rank;
  struct tu_red s = {(enum hc_dtype)t, op_hc[c->v[D_OP]], k->n, c->seed};
  struct op_handle oh;
  if (!op_make(k, c->v[D_OP], &s, &oh)) return;
  void *send = rbuf(n_el, t, null_ok);
  if (send) tu_red_fill(&s, me, 0, n_el, send);
  void *recv;
  if (inplace) recv = send;
  else if (me == root || !(c->seed & 2)) recv = rbuf(n_el, t, null_ok); /* off the root: junk to keep */
  else recv = NULL;                                                     /* or NULL, as allowed */
  void *send_before = snapshot(send, send ? n_el * ES(t) : 0);
  void *recv_before = snapshot(recv, recv ? n_el * ES(t) : 0);
  if (call_ok(hetcclReduce(send, recv, n_el, (hetcclDataType_t)t, oh.op, root, k->comm, NULL), "Reduce") && n_el) {
    if (me == root) {
      void *exp = xmalloc(n_el * ES(t));
      expect_red(&s, 0, n_el, exp);
      tu_compare((enum hc_dtype)t, recv, exp, n_el, "Reduce recvbuff on the root");
      free(exp);
    } else if (recv) {
      tu_compare((enum hc_dtype)t, recv, recv_before, n_el, "Reduce recvbuff off the root (must not be written)");
    }
    if (!inplace || me != root)
      tu_compare((enum hc_dtype)t, send, send_before, n_el, "Reduce sendbuff (must not change)");
  }
  tu_buf_guards_ok(send, "Reduce sendbuff");
  if (!inplace) {
    tu_buf_guards_ok(recv, "Reduce recvbuff");
    tu_buf_free(recv);
  }
  tu_buf_free(send);
  free(send_before);
  free(recv_before);
  op_free(k, &oh);
}

static void run_allgather(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int n = k->n, me = k->rank;
  void *recv = rbuf(n_el * (size_t)n, t, null_ok);
  void *send = inplace ? (recv ? AT(recv, (size_t)me * n_el, t) : NULL) : rbuf(n_el, t, null_ok);
  if (send) expect_data(t, c->seed, me, 0, n_el, send);
  if (call_ok(hetcclAllGather(send, recv, n_el, (hetcclDataType_t)t, k->comm, NULL), "AllGather") && n_el) {
    void *exp = xmalloc(n_el * (size_t)n * ES(t));
    for (int j = 0; j < n; j++) expect_data(t, c->seed, j, 0, n_el, AT(exp, (size_t)j * n_el, t));
    tu_compare((enum hc_dtype)t, recv, exp, n_el * (size_t)n, "AllGather recvbuff");
    if (!inplace)
      tu_compare((enum hc_dtype)t, send, AT(exp, (size_t)me * n_el, t), n_el, "AllGather sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(recv, "AllGather recvbuff");
  if (!inplace) {
    tu_buf_guards_ok(send, "AllGather sendbuff");
    tu_buf_free(send);
  }
  tu_buf_free(recv);
}

static void run_reducescatter(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int n = k->n, me = k->rank;
  struct tu_red s = {(enum hc_dtype)t, op_hc[c->v[D_OP]], n, c->seed};
  struct op_handle oh;
  if (!op_make(k, c->v[D_OP], &s, &oh)) return;
  const size_t total = n_el * (size_t)n;
  void *send = rbuf(total, t, null_ok);
  if (send) tu_red_fill(&s, me, 0, total, send);
  void *recv = inplace ? (send ? AT(send, (size_t)me * n_el, t) : NULL) : rbuf(n_el, t, null_ok);
  void *before = snapshot(send, send ? total * ES(t) : 0);
  if (call_ok(hetcclReduceScatter(send, recv, n_el, (hetcclDataType_t)t, oh.op, k->comm, NULL), "ReduceScatter") &&
      n_el) {
    void *exp = xmalloc(n_el * ES(t));
    expect_red(&s, (size_t)me * n_el, n_el, exp);
    tu_compare((enum hc_dtype)t, recv, exp, n_el, "ReduceScatter recvbuff");
    if (!inplace) tu_compare((enum hc_dtype)t, send, before, total, "ReduceScatter sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "ReduceScatter sendbuff");
  if (!inplace) {
    tu_buf_guards_ok(recv, "ReduceScatter recvbuff");
    tu_buf_free(recv);
  }
  tu_buf_free(send);
  free(before);
  op_free(k, &oh);
}

/* Element k of the block rank src sends to rank dst: a distinct index per
 * (dst, k) of src's data stream. */
#define A2A_INDEX(dst, k, stride) ((size_t)(dst) * (stride) + (k))

static void run_alltoall(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int n = k->n, me = k->rank;
  const size_t total = n_el * (size_t)n;
  void *send = rbuf(total, t, null_ok);
  if (send) expect_data(t, c->seed, me, 0, total, send); /* block j = indices j*count.. */
  void *recv = inplace ? send : rbuf(total, t, null_ok);
  void *before = snapshot(send, send ? total * ES(t) : 0);
  if (call_ok(hetcclAlltoAll(send, recv, n_el, (hetcclDataType_t)t, k->comm, NULL), "AlltoAll") && n_el) {
    void *exp = xmalloc(total * ES(t));
    for (int j = 0; j < n; j++) expect_data(t, c->seed, j, (size_t)me * n_el, n_el, AT(exp, (size_t)j * n_el, t));
    tu_compare((enum hc_dtype)t, recv, exp, total, "AlltoAll recvbuff");
    if (!inplace) tu_compare((enum hc_dtype)t, send, before, total, "AlltoAll sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "AlltoAll sendbuff");
  if (!inplace) {
    tu_buf_guards_ok(recv, "AlltoAll recvbuff");
    tu_buf_free(recv);
  }
  tu_buf_free(send);
  free(before);
}

/* Count rank src sends to rank dst: count/2 .. 3*count/2, 0 for count 0. */
static size_t v_count(size_t base, int src, int dst) {
  return base ? (base * (size_t)((src + 2 * dst) % 3 + 1) + 1) / 2 : 0;
}

static void run_alltoallv(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace) {
  const int n = k->n, me = k->rank;
  const size_t stride = 2 * n_el + 2;
  size_t *sc = xmalloc((size_t)n * sizeof(size_t)), *sd = xmalloc((size_t)n * sizeof(size_t));
  size_t *rc = xmalloc((size_t)n * sizeof(size_t)), *rd = xmalloc((size_t)n * sizeof(size_t));
  /* Send blocks in reverse peer order with 1-element gaps, receive blocks
   * in peer order with 2-element gaps: the gaps must stay as they were. */
  size_t sspan = 0, rspan = 0;
  for (int j = n - 1; j >= 0; j--) {
    sc[j] = v_count(n_el, me, j);
    sd[j] = sspan;
    sspan += sc[j] + 1;
  }
  for (int j = 0; j < n; j++) {
    rc[j] = v_count(n_el, j, me);
    rd[j] = rspan;
    rspan += rc[j] + 2;
  }
  void *send, *recv;
  if (inplace) {
    send = recv = rbuf(HC_MAX(sspan, rspan), t, false);
  } else {
    send = rbuf(sspan, t, false);
    recv = rbuf(rspan, t, false);
  }
  for (int j = 0; j < n; j++)
    for (size_t e = 0; e < sc[j]; e++)
      tu_data_elem((enum hc_dtype)t, c->seed, me, A2A_INDEX(j, e, stride), AT(send, sd[j] + e, t));
  const size_t span = inplace ? HC_MAX(sspan, rspan) : rspan;
  void *recv_before = snapshot(recv, span * ES(t));
  void *send_before = snapshot(send, sspan * ES(t));
  if (call_ok(hetcclAlltoAllv(send, sc, sd, recv, rc, rd, (hetcclDataType_t)t, k->comm, NULL), "AlltoAllv")) {
    void *exp = recv_before; /* the gaps keep what was there */
    for (int j = 0; j < n; j++)
      for (size_t e = 0; e < rc[j]; e++)
        tu_data_elem((enum hc_dtype)t, c->seed, j, A2A_INDEX(me, e, stride), AT(exp, rd[j] + e, t));
    tu_compare((enum hc_dtype)t, recv, exp, span, "AlltoAllv recvbuff (blocks and gaps)");
    if (!inplace) tu_compare((enum hc_dtype)t, send, send_before, sspan, "AlltoAllv sendbuff (must not change)");
  }
  tu_buf_guards_ok(recv, "AlltoAllv recvbuff");
  if (!inplace) {
    tu_buf_guards_ok(send, "AlltoAllv sendbuff");
    tu_buf_free(send);
  }
  tu_buf_free(recv);
  free(recv_before);
  free(send_before);
  free(sc);
  free(sd);
  free(rc);
  free(rd);
}

static void run_gather(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int n = k->n, me = k->rank, root = c->root;
  const size_t total = n_el * (size_t)n;
  void *recv = NULL, *send;
  if (me == root) recv = rbuf(total, t, null_ok);
  else if (!(c->seed & 2)) recv = rbuf(total, t, false); /* off the root: junk to keep, or NULL */
  if (inplace && me == root) send = recv ? AT(recv, (size_t)root * n_el, t) : NULL;
  else send = rbuf(n_el, t, null_ok);
  if (send) expect_data(t, c->seed, me, 0, n_el, send);
  void *recv_before = snapshot(recv, recv ? total * ES(t) : 0);
  if (call_ok(hetcclGather(send, recv, n_el, (hetcclDataType_t)t, root, k->comm, NULL), "Gather") && n_el) {
    if (me == root) {
      void *exp = xmalloc(total * ES(t));
      for (int j = 0; j < n; j++) expect_data(t, c->seed, j, 0, n_el, AT(exp, (size_t)j * n_el, t));
      tu_compare((enum hc_dtype)t, recv, exp, total, "Gather recvbuff on the root");
      free(exp);
    } else if (recv) {
      tu_compare((enum hc_dtype)t, recv, recv_before, total, "Gather recvbuff off the root (must not be written)");
    }
    if (!(inplace && me == root)) {
      void *exp = xmalloc(n_el * ES(t));
      expect_data(t, c->seed, me, 0, n_el, exp);
      tu_compare((enum hc_dtype)t, send, exp, n_el, "Gather sendbuff (must not change)");
      free(exp);
    }
  }
  tu_buf_guards_ok(recv, "Gather recvbuff");
  if (!(inplace && me == root)) {
    tu_buf_guards_ok(send, "Gather sendbuff");
    tu_buf_free(send);
  }
  tu_buf_free(recv);
  free(recv_before);
}

static void run_scatter(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace, bool null_ok) {
  const int n = k->n, me = k->rank, root = c->root;
  const size_t total = n_el * (size_t)n;
  void *send = NULL, *recv;
  if (me == root) {
    send = rbuf(total, t, null_ok);
    if (send) expect_data(t, c->seed, root, 0, total, send);
  } else if (!(c->seed & 2)) {
    send = rbuf(total, t, false); /* off the root: not read */
  }
  if (inplace && me == root) recv = send ? AT(send, (size_t)root * n_el, t) : NULL;
  else recv = rbuf(n_el, t, null_ok);
  if (call_ok(hetcclScatter(send, recv, n_el, (hetcclDataType_t)t, root, k->comm, NULL), "Scatter") && n_el) {
    void *exp = xmalloc(total * ES(t));
    expect_data(t, c->seed, root, 0, total, exp);
    tu_compare((enum hc_dtype)t, recv, AT(exp, (size_t)me * n_el, t), n_el, "Scatter recvbuff");
    if (me == root && !inplace) tu_compare((enum hc_dtype)t, send, exp, total, "Scatter sendbuff (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "Scatter sendbuff");
  if (!(inplace && me == root)) {
    tu_buf_guards_ok(recv, "Scatter recvbuff");
    tu_buf_free(recv);
  }
  tu_buf_free(send);
}

/* Send to next and receive from prev in one group (receive first when the
 * seed says so); with 3+ ranks sometimes both directions at once. */
static void run_sendrecv(struct rk *k, const struct tcase *c, size_t n_el, int t, bool null_ok) {
  const int n = k->n, me = k->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  const bool both = n >= 3 && (c->seed & 4);
  void *send = rbuf(n_el, t, null_ok), *from_prev = rbuf(n_el, t, null_ok);
  void *from_next = both ? rbuf(n_el, t, null_ok) : NULL;
  if (send) expect_data(t, c->seed, me, 0, n_el, send);
  const hetcclDataType_t dt = (hetcclDataType_t)t;
  bool ok = CHECK_OK(hetcclGroupStart());
  if (c->seed & 1) {
    ok &= CHECK_OK(hetcclRecv(from_prev, n_el, dt, prev, k->comm, NULL));
    ok &= CHECK_OK(hetcclSend(send, n_el, dt, next, k->comm, NULL));
  } else {
    ok &= CHECK_OK(hetcclSend(send, n_el, dt, next, k->comm, NULL));
    ok &= CHECK_OK(hetcclRecv(from_prev, n_el, dt, prev, k->comm, NULL));
  }
  if (both) {
    ok &= CHECK_OK(hetcclSend(send, n_el, dt, prev, k->comm, NULL));
    ok &= CHECK_OK(hetcclRecv(from_next, n_el, dt, next, k->comm, NULL));
  }
  ok &= call_ok(hetcclGroupEnd(), "GroupEnd of Send/Recv");
  if (ok && n_el) {
    void *exp = xmalloc(n_el * ES(t));
    expect_data(t, c->seed, prev, 0, n_el, exp);
    tu_compare((enum hc_dtype)t, from_prev, exp, n_el, "Recv from prev");
    if (both) {
      expect_data(t, c->seed, next, 0, n_el, exp);
      tu_compare((enum hc_dtype)t, from_next, exp, n_el, "Recv from next");
    }
    expect_data(t, c->seed, me, 0, n_el, exp);
    tu_compare((enum hc_dtype)t, send, exp, n_el, "Send buffer (must not change)");
    free(exp);
  }
  tu_buf_guards_ok(send, "sendbuff");
  tu_buf_guards_ok(from_prev, "recvbuff from prev");
  tu_buf_guards_ok(from_next, "recvbuff from next");
  tu_buf_free(send);
  tu_buf_free(from_prev);
  tu_buf_free(from_next);
}

static void run_sendself(struct rk *k, const struct tcase *c, size_t n_el, int t, bool null_ok) {
  const int me = k->rank;
  void *send = rbuf(n_el, t, null_ok), *recv = rbuf(n_el, t, null_ok);
  if (send) expect_data(t, c->seed, me, 0, n_el, send);
  const hetcclDataType_t dt = (hetcclDataType_t)t;
  bool ok = CHECK_OK(hetcclGroupStart());
  if (c->seed & 1) {
    ok &= CHECK_OK(hetcclRecv(recv, n_el, dt, me, k->comm, NULL));
    ok &= CHECK_OK(hetcclSend(send, n_el, dt, me, k->comm, NULL));
  } else {
    ok &= CHECK_OK(hetcclSend(send, n_el, dt, me, k->comm, NULL));
    ok &= CHECK_OK(hetcclRecv(recv, n_el, dt, me, k->comm, NULL));
  }
  ok &= call_ok(hetcclGroupEnd(), "GroupEnd of Send/Recv to self");
  if (ok && n_el) {
    void *exp = xmalloc(n_el * ES(t));
    expect_data(t, c->seed, me, 0, n_el, exp);
    tu_compare((enum hc_dtype)t, recv, exp, n_el, "Recv from self");
    free(exp);
  }
  tu_buf_guards_ok(send, "sendbuff");
  tu_buf_guards_ok(recv, "recvbuff");
  tu_buf_free(send);
  tu_buf_free(recv);
}

/* No rank may leave the barrier before every rank has entered it. */
static void run_barrier(struct rk *k) {
  atomic_fetch_add(&k->ctx->barrier_arrivals, 1);
  if (call_ok(hetcclBarrier(k->comm, NULL), "Barrier")) {
    int arrived = atomic_load(&k->ctx->barrier_arrivals);
    CHECK(arrived >= k->n * (k->barriers_done + 1), "left barrier %d after only %d arrivals (need %d)",
          k->barriers_done, arrived, k->n * (k->barriers_done + 1));
  }
  k->barriers_done++;
}

/* Inexact random floats in [-1, 1]: the result must be bitwise the same on
 * every rank, and within rounding error of the exact sum. */
static double xrank_value(int t, uint64_t seed, int rank, size_t i) {
  uint8_t e[8];
  double v = (double)(tu_hash(seed, (uint64_t)rank, i) >> 11) * 0x1p-52 - 1.0;
  hc_dtype_store((enum hc_dtype)t, e, v);
  return hc_dtype_load((enum hc_dtype)t, e);
}

static double type_eps(int t) {
  switch (t) {
  case HC_FLOAT16: return 0x1p-11;
  case HC_BFLOAT16: return 0x1p-8;
  case HC_FLOAT32: return 0x1p-24;
  case HC_FLOAT64: return 0x1p-53;
  case HC_FP8_E4M3: return 0x1p-4;
  default: return 0x1p-3;
  }
}

static void run_xrank(struct rk *k, const struct tcase *c, size_t n_el, int t, bool inplace) {
  const int n = k->n, me = k->rank;
  const bool avg = c->v[D_OP] == O_AVG;
  void *send = rbuf(n_el, t, false);
  for (size_t i = 0; i < n_el; i++) hc_dtype_store((enum hc_dtype)t, AT(send, i, t), xrank_value(t, c->seed, me, i));
  void *recv = inplace ? send : rbuf(n_el, t, false);
  hetcclResult_t r = hetcclAllReduce(send, recv, n_el, (hetcclDataType_t)t, avg ? hetcclAvg : hetcclSum, k->comm, NULL);
  bool ok = call_ok(r, "AllReduce");
  void **all = xmalloc((size_t)n * sizeof(void *));
  if (tu_allgather_ptr(ok ? recv : NULL, all)) {
    if (ok && all[0])
      tu_compare((enum hc_dtype)t, recv, all[0], n_el, "AllReduce result against rank 0's (must be bitwise equal)");
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; ok && i < n_el; i++) {
      double exact = 0, mag = 0;
      for (int j = 0; j < n; j++) {
        double v = xrank_value(t, c->seed, j, i);
        exact += v;
        mag += v < 0 ? -v : v;
      }
      if (avg) exact /= n, mag /= n;
      double got = hc_dtype_load((enum hc_dtype)t, AT(recv, i, t));
      double err = got - exact < 0 ? exact - got : got - exact;
      double tol = (double)(n + 2) * type_eps(t) * (mag + 1e-30) + type_eps(t) * 0x1p-6;
      if (!(err <= tol)) {
        if (!bad) first = i, worst = err;
        bad++;
      }
    }
    CHECK(bad == 0,
          "%zu of %zu results are farther from the exact sum than rounding allows (first index %zu, error %g)", bad,
          n_el, first, worst);
    tu_barrier(); /* the others read my buffer until here */
  }
  free(all);
  if (!inplace) tu_buf_free(recv);
  tu_buf_free(send);
}

static void run_case(struct rk *k, const struct tcase *c, int index) {
  char text[256];
  case_text(c, k->n, index, text, sizeof(text));
  tu_set_case("%s", text);
  tu_set_repro("--ranks %d%s --case %d", k->n, k->ctx->quick ? " --quick" : "", index);
  const size_t n_el = counts[c->v[D_COUNT]];
  const int t = c->v[D_DTYPE];
  const bool inplace = c->v[D_INPLACE];
  const bool null_ok = (c->seed >> 8) & 1; /* count 0: sometimes NULL buffers */
  switch (c->v[D_COLL]) {
  case C_ALLREDUCE: run_allreduce(k, c, n_el, t, inplace, null_ok); break;
  case C_BROADCAST: run_broadcast(k, c, n_el, t, inplace, null_ok); break;
  case C_REDUCE: run_reduce(k, c, n_el, t, inplace, null_ok); break;
  case C_ALLGATHER: run_allgather(k, c, n_el, t, inplace, null_ok); break;
  case C_REDUCESCATTER: run_reducescatter(k, c, n_el, t, inplace, null_ok); break;
  case C_ALLTOALL: run_alltoall(k, c, n_el, t, inplace, null_ok); break;
  case C_ALLTOALLV: run_alltoallv(k, c, n_el, t, inplace); break;
  case C_GATHER: run_gather(k, c, n_el, t, inplace, null_ok); break;
  case C_SCATTER: run_scatter(k, c, n_el, t, inplace, null_ok); break;
  case C_SENDRECV: run_sendrecv(k, c, n_el, t, null_ok); break;
  case C_SENDSELF: run_sendself(k, c, n_el, t, null_ok); break;
  case C_BARRIER: run_barrier(k); break;
  case C_XRANK: run_xrank(k, c, n_el, t, inplace); break;
  default: break;
  }
  if (k->rank == 0) atomic_fetch_add(&k->ctx->cases_run, 1);
  tu_set_case("%s", "");
}

static int rank_cases(int rank, int nranks, hetcclUniqueId id, void *arg) {
  struct run_ctx *ctx = arg;
  struct rk k = {.rank = rank, .n = nranks, .ctx = ctx};
  tu_set_case("init of a comm with algo %s", cfgs[ctx->cfg].name);
  tu_set_repro("--ranks %d%s", nranks, ctx->quick ? " --quick" : "");
  if (!CHECK_OK(hetcclCommInitRank(&k.comm, nranks, id, rank))) return 1;
  int cnt = -1, me = -1;
  CHECK_OK(hetcclCommCount(k.comm, &cnt));
  CHECK_OK(hetcclCommUserRank(k.comm, &me));
  CHECK(cnt == nranks && me == rank, "CommCount %d / CommUserRank %d, expected %d / %d", cnt, me, nranks, rank);
  for (int i = 0; i < ctx->ncases; i++) {
    if (ctx->cases[i].v[D_CFG] != ctx->cfg || (ctx->only != ONLY_ALL && ctx->only != i)) continue;
    run_case(&k, &ctx->cases[i], i);
  }
  hetcclResult_t async = hetcclSuccess;
  CHECK_OK(hetcclCommGetAsyncError(k.comm, &async));
  CHECK(async == hetcclSuccess, "comm has async error %d after the cases", (int)async);
  CHECK_OK(hetcclCommFinalize(k.comm));
  CHECK_OK(hetcclCommDestroy(k.comm));
  return 0;
}

/* ---- split and groups over several comms ---- */

/* Rank of `rank` in its color of a split where every rank r passes
 * color_of(r) and key_of(r): members ordered by key, then parent rank. */
static int split_rank(int n, int rank, int (*color_of)(int, int), int (*key_of)(int, int), int *size) {
  int pos = 0, cnt = 0;
  for (int r = 0; r < n; r++) {
    if (color_of(r, n) != color_of(rank, n)) continue;
    cnt++;
    if (key_of(r, n) < key_of(rank, n) || (key_of(r, n) == key_of(rank, n) && r < rank)) pos++;
  }
  *size = cnt;
  return pos;
}
static int color_parity(int r, int n) {
  (void)n;
  return r % 2;
}
static int color_half(int r, int n) { return r < n / 2 ? 0 : 1; }
static int key_reversed(int r, int n) { return n - r; }

static bool check_comm(hetcclComm_t c, int size, int rank, const char *what) {
  int cnt = -1, me = -1;
  bool ok = CHECK_OK(hetcclCommCount(c, &cnt)) && CHECK_OK(hetcclCommUserRank(c, &me));
  return ok && CHECK(cnt == size && me == rank, "%s: CommCount %d, CommUserRank %d; expected %d, %d", what, cnt, me,
                     size, rank);
}

/* One group: AllReduce on child A, AllGather on child B, Broadcast on the
 * parent, and a second AllReduce on child A; then checks every result. */
static void group_over_comms(int rank, int n, hetcclComm_t parent, hetcclComm_t ca, int ra, int size_a, hetcclComm_t cb,
                             int rb, int size_b) {
  const size_t cnt = 1031;
  struct tu_red s1 = {HC_INT32, HC_SUM, size_a, 11}, s2 = {HC_FLOAT32, HC_MAX, size_a, 12};
  void *ar = tu_buf_alloc(cnt * 4, 0xcd), *ar2 = tu_buf_alloc(cnt * 4, 0xcd);
  void *ag_send = tu_buf_alloc(cnt * 2, 0xcd), *ag_recv = tu_buf_alloc(cnt * 2 * (size_t)size_b, 0xcd);
  void *bc = tu_buf_alloc(cnt * 8, 0xcd);
  tu_red_fill(&s1, ra, 0, cnt, ar);
  tu_red_fill(&s2, ra, 0, cnt, ar2);
  tu_data_fill(HC_BFLOAT16, 13, rb, 0, cnt, ag_send);
  if (rank == n - 1) tu_data_fill(HC_FLOAT64, 14, n - 1, 0, cnt, bc);
  bool g = CHECK_OK(hetcclGroupStart());
  g &= CHECK_OK(hetcclAllReduce(ar, ar, cnt, hetcclInt32, hetcclSum, ca, NULL));
  g &= CHECK_OK(hetcclAllGather(ag_send, ag_recv, cnt, hetcclBfloat16, cb, NULL));
  g &= CHECK_OK(hetcclBroadcast(bc, bc, cnt, hetcclFloat64, n - 1, parent, NULL));
  g &= CHECK_OK(hetcclAllReduce(ar2, ar2, cnt, hetcclFloat32, hetcclMax, ca, NULL));
  g &= call_ok(hetcclGroupEnd(), "GroupEnd over three comms");
  if (g) {
    void *exp = xmalloc(cnt * 8 * (size_t)n);
    expect_red(&s1, 0, cnt, exp);
    tu_compare(HC_INT32, ar, exp, cnt, "AllReduce on child A");
    expect_red(&s2, 0, cnt, exp);
    tu_compare(HC_FLOAT32, ar2, exp, cnt, "second AllReduce on child A");
    for (int j = 0; j < size_b; j++) tu_data_fill(HC_BFLOAT16, 13, j, 0, cnt, AT(exp, (size_t)j * cnt, HC_BFLOAT16));
    tu_compare(HC_BFLOAT16, ag_recv, exp, cnt * (size_t)size_b, "AllGather on child B");
    tu_data_fill(HC_FLOAT64, 14, n - 1, 0, cnt, exp);
    tu_compare(HC_FLOAT64, bc, exp, cnt, "Broadcast on the parent");
    free(exp);
  }
  tu_buf_free(ar);
  tu_buf_free(ar2);
  tu_buf_free(ag_send);
  tu_buf_free(ag_recv);
  tu_buf_free(bc);
}

/* An AlltoAll of one element: afterwards every pair of ranks of c is
 * connected. */
static bool connect_all(hetcclComm_t c, int size) {
  uint8_t *s = xmalloc((size_t)size), *r = xmalloc((size_t)size);
  memset(s, 1, (size_t)size);
  bool ok = call_ok(hetcclAlltoAll(s, r, 1, hetcclUint8, c, NULL), "AlltoAll (connecting every pair)");
  free(s);
  free(r);
  return ok;
}

/* The plan cache (api/coll.c): a call made again with the same arguments
 * runs the plan kept from the first time, so it must read the buffers as
 * they are now, not as they were; other calls in between (in place, of
 * another size, another collective) must neither disturb it nor reuse it. */
static void repeated_calls(int rank, int n, hetcclComm_t comm) {
  enum { COUNT = 37, GATHERED = 5 };
  int32_t in[COUNT], out[COUNT], exp[COUNT], part[GATHERED], all[GATHERED * 8], all_exp[GATHERED * 8];
  if (n > 8) return;
  for (int iter = 0; iter < 5; iter++) {
    tu_set_case("split: AllReduce with the same buffers, call %d of 5, new data each time", iter + 1);
    struct tu_red s = {HC_INT32, HC_SUM, n, 0xcac4e000ull + (uint64_t)iter};
    tu_red_fill(&s, rank, 0, COUNT, in);
    if (!call_ok(hetcclAllReduce(in, out, COUNT, hetcclInt32, hetcclSum, comm, NULL), "AllReduce")) return;
    expect_red(&s, 0, COUNT, exp);
    tu_compare(HC_INT32, out, exp, COUNT, "AllReduce again with the same buffers");
    if (iter == 1) { /* the same call in place: another plan */
      if (!call_ok(hetcclAllReduce(in, in, COUNT, hetcclInt32, hetcclSum, comm, NULL), "AllReduce")) return;
      tu_compare(HC_INT32, in, exp, COUNT, "AllReduce in place between calls out of place");
    }
    if (iter == 2) { /* a shorter count of the same buffers */
      tu_red_fill(&s, rank, 0, COUNT, in);
      out[COUNT - 1] = -7;
      if (!call_ok(hetcclAllReduce(in, out, COUNT - 1, hetcclInt32, hetcclSum, comm, NULL), "AllReduce")) return;
      tu_compare(HC_INT32, out, exp, COUNT - 1, "AllReduce of count - 1 between calls of count");
      CHECK(out[COUNT - 1] == -7, "AllReduce of count - 1 wrote element %d: %d", COUNT - 1, (int)out[COUNT - 1]);
    }
    if (iter == 3) { /* another collective */
      for (int i = 0; i < GATHERED; i++) part[i] = rank * 1000 + iter * 10 + i;
      for (int r = 0; r < n; r++)
        for (int i = 0; i < GATHERED; i++) all_exp[r * GATHERED + i] = r * 1000 + iter * 10 + i;
      if (!call_ok(hetcclAllGather(part, all, GATHERED, hetcclInt32, comm, NULL), "AllGather")) return;
      tu_compare(HC_INT32, all, all_exp, (size_t)(GATHERED * n), "AllGather between all-reduces");
    }
  }
}

/* The kept plan of a large call (many steps, several transfers per peer)
 * and exec's tables of it, kept with it: run again with the same buffers
 * it must start from its first step each time; another pair of buffers, or
 * a group of two calls, replaces it, and the first buffers then plan again.
 * Every call gets new data and is checked. */
static void repeated_large_calls(int rank, int n, hetcclComm_t comm) {
  enum { COUNT = 70001 };
  int32_t *in_a = xmalloc(COUNT * sizeof(int32_t)), *out_a = xmalloc(COUNT * sizeof(int32_t));
  int32_t *in_b = xmalloc(COUNT * sizeof(int32_t)), *out_b = xmalloc(COUNT * sizeof(int32_t));
  int32_t *exp = xmalloc(COUNT * sizeof(int32_t));
  /* which buffers each call uses; 'g': a group of an A and a B call */
  static const char order[] = "AAABAgAA";
  for (int k = 0; order[k]; k++) {
    const bool group = order[k] == 'g', use_b = order[k] == 'B';
    tu_set_case("split: large AllReduce, call %d of %s (A, B: buffer pairs; g: a group of A and B)", k + 1, order);
    struct tu_red s = {HC_INT32, HC_SUM, n, 0x1a26e000ull + (uint64_t)k};
    tu_red_fill(&s, rank, 0, COUNT, use_b ? in_b : in_a);
    if (group) tu_red_fill(&s, rank, 0, COUNT, in_b);
    bool ok = !group || call_ok(hetcclGroupStart(), "GroupStart");
    ok = ok &&
         call_ok(hetcclAllReduce(use_b ? in_b : in_a, use_b ? out_b : out_a, COUNT, hetcclInt32, hetcclSum, comm, NULL),
                 "AllReduce");
    ok =
        ok && (!group || call_ok(hetcclAllReduce(in_b, out_b, COUNT, hetcclInt32, hetcclSum, comm, NULL), "AllReduce"));
    ok = ok && (!group || call_ok(hetcclGroupEnd(), "GroupEnd"));
    if (!ok) break;
    expect_red(&s, 0, COUNT, exp);
    tu_compare(HC_INT32, use_b ? out_b : out_a, exp, COUNT, "large AllReduce, repeated or after another plan");
    if (group) tu_compare(HC_INT32, out_b, exp, COUNT, "large AllReduce, the group's second call");
  }
  free(in_a);
  free(out_a);
  free(in_b);
  free(out_b);
  free(exp);
}

/* One call of moving_buffers: coll on slot's buffers, out of place or in
 * place (NCCL's layouts), with new data, checked. */
static bool moving_call(int rank, int n, hetcclComm_t comm, enum hc_coll coll, int32_t *sb, int32_t *rb, bool in_place,
                        uint64_t seed) {
  enum { COUNT = 29 };
  int32_t exp[COUNT * 8];
  struct tu_red s = {HC_INT32, HC_SUM, n, seed};
  hetcclResult_t res;
  if (coll == HC_COLL_ALLREDUCE) {
    int32_t *in = in_place ? rb : sb;
    tu_red_fill(&s, rank, 0, COUNT, in);
    res = hetcclAllReduce(in, rb, COUNT, hetcclInt32, hetcclSum, comm, NULL);
    expect_red(&s, 0, COUNT, exp);
  } else if (coll == HC_COLL_ALLGATHER) { /* block v: every element (v + 1) * 1000 + seed % 1000 + i */
    int32_t *in = in_place ? rb + rank * COUNT : sb;
    for (int v = 0; v < n; v++)
      for (int i = 0; i < COUNT; i++) exp[v * COUNT + i] = (v + 1) * 1000 + (int32_t)(seed % 1000) + i;
    memcpy(in, exp + rank * COUNT, COUNT * sizeof(int32_t));
    res = hetcclAllGather(in, rb, COUNT, hetcclInt32, comm, NULL);
  } else if (coll == HC_COLL_REDUCESCATTER) {
    tu_red_fill(&s, rank, 0, (size_t)COUNT * (size_t)n, in_place ? rb : sb);
    res = hetcclReduceScatter(in_place ? rb : sb, in_place ? rb + rank * COUNT : rb, COUNT, hetcclInt32, hetcclSum,
                              comm, NULL);
    expect_red(&s, (size_t)rank * COUNT, COUNT, exp);
  } else if (coll == HC_COLL_BROADCAST) { /* from the last rank: every element seed % 1000 * 100 + i */
    for (int i = 0; i < COUNT; i++) exp[i] = (int32_t)(seed % 1000) * 100 + i;
    if (rank == n - 1) memcpy(in_place ? rb : sb, exp, sizeof(int32_t) * COUNT);
    res = hetcclBroadcast(in_place ? rb : sb, rb, COUNT, hetcclInt32, n - 1, comm, NULL);
  } else { /* Reduce to the last rank; the others' recvbuf (in place: their input) must stay as it was */
    tu_red_fill(&s, rank, 0, COUNT, in_place ? rb : sb);
    if (rank == n - 1) expect_red(&s, 0, COUNT, exp);
    else memcpy(exp, rb, sizeof(int32_t) * COUNT);
    res = hetcclReduce(in_place ? rb : sb, rb, COUNT, hetcclInt32, hetcclSum, n - 1, comm, NULL);
  }
  if (!call_ok(res, hc_coll_name(coll))) return false;
  const int32_t *out = coll == HC_COLL_REDUCESCATTER && in_place ? rb + rank * COUNT : rb;
  tu_compare(HC_INT32, out, exp, coll == HC_COLL_ALLGATHER ? (size_t)(COUNT * n) : COUNT,
             "a call on buffers that moved since the last");
  return true;
}

/* The plan cache with buffers that move from call to call, as benchmarks
 * and frameworks pass them: the kept plan moves onto each call's buffers
 * (where they lie as before), or is planned again (in place after out of
 * place, and back). Four slots of each buffer in turn, four calls out of
 * place, four in place, four out of place, per collective. */
static void moving_buffers(int rank, int n, hetcclComm_t comm) {
  enum { COUNT = 29, SLOTS = 4 };
  static const enum hc_coll colls[] = {HC_COLL_ALLREDUCE, HC_COLL_ALLGATHER, HC_COLL_REDUCESCATTER, HC_COLL_BROADCAST,
                                       HC_COLL_REDUCE};
  if (n > 8) return;
  int32_t *send = xmalloc(sizeof(int32_t) * COUNT * (size_t)n * SLOTS);
  int32_t *recv = xmalloc(sizeof(int32_t) * COUNT * (size_t)n * SLOTS);
  for (size_t c = 0; c < HC_ARRAY_LEN(colls); c++)
    for (int k = 0; k < 3 * SLOTS; k++) {
      const int slot = k % SLOTS;
      const bool in_place = k / SLOTS == 1;
      tu_set_case("split: %s on moving buffers, call %d of %d (slot %d, %s)", hc_coll_name(colls[c]), k + 1, 3 * SLOTS,
                  slot, in_place ? "in place" : "out of place");
      if (!moving_call(rank, n, comm, colls[c], send + (size_t)slot * COUNT * (size_t)n,
                       recv + (size_t)slot * COUNT * (size_t)n, in_place, 0x30e1e000ull + c * 100 + (uint64_t)k))
        break;
    }
  free(send);
  free(recv);
}

static int rank_split(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  tu_set_repro("--ranks %d --case split", n);
  tu_set_case("split: init");
  hetcclComm_t parent = NULL, ca = NULL, cb = NULL, cnc = NULL;
  if (!CHECK_OK(hetcclCommInitRank(&parent, n, id, rank))) return 1;
  int size_a, size_b;
  const int ra = split_rank(n, rank, color_parity, key_reversed, &size_a);
  const int rb = split_rank(n, rank, color_half, key_reversed, &size_b);
  tu_set_case("split: parity and halves, keys reversed");
  bool ok = CHECK_OK(hetcclCommSplit(parent, color_parity(rank, n), key_reversed(rank, n), &ca, NULL));
  ok &= CHECK_OK(hetcclCommSplit(parent, color_half(rank, n), key_reversed(rank, n), &cb, NULL));
  ok = ok && check_comm(ca, size_a, ra, "parity comm") && check_comm(cb, size_b, rb, "halves comm");
  if (ok) {
    tu_set_case("split: group of AllReduce(child A) + AllGather(child B) + Broadcast(parent) + AllReduce(child A), "
                "connections already up");
    if (connect_all(ca, size_a) && connect_all(cb, size_b) && connect_all(parent, n))
      group_over_comms(rank, n, parent, ca, ra, size_a, cb, rb, size_b);
  }
  /* NOCOLOR: rank 0 stays out and gets NULL; the others form a comm. */
  tu_set_case("split: rank 0 with HETCCL_SPLIT_NOCOLOR");
  hetcclComm_t sentinel = (hetcclComm_t)&cnc;
  cnc = sentinel;
  if (CHECK_OK(hetcclCommSplit(parent, rank == 0 ? HETCCL_SPLIT_NOCOLOR : 7, rank, &cnc, NULL))) {
    if (rank == 0) {
      CHECK(cnc == NULL, "NOCOLOR: newcomm %p, expected NULL", (void *)cnc);
      cnc = NULL;
    } else if (check_comm(cnc, n - 1, rank - 1, "comm without rank 0")) {
      struct tu_red s = {HC_UINT8, HC_SUM, n - 1, 15};
      uint8_t buf[77], exp[77];
      tu_red_fill(&s, rank - 1, 0, sizeof(buf), buf);
      if (call_ok(hetcclAllReduce(buf, buf, sizeof(buf), hetcclUint8, hetcclSum, cnc, NULL), "AllReduce")) {
        expect_red(&s, 0, sizeof(buf), exp);
        tu_compare(HC_UINT8, buf, exp, sizeof(buf), "AllReduce on the comm without rank 0");
      }
    }
  } else if (cnc == sentinel) {
    cnc = NULL;
  }
  tu_set_case("split: every rank with HETCCL_SPLIT_NOCOLOR");
  hetcclComm_t none = sentinel;
  if (CHECK_OK(hetcclCommSplit(parent, HETCCL_SPLIT_NOCOLOR, 0, &none, NULL)) &&
      !CHECK(none == NULL, "all NOCOLOR: newcomm %p, expected NULL", (void *)none) && none != sentinel)
    hetcclCommDestroy(none);
  tu_set_case("split: parent after the splits");
  CHECK_OK(hetcclBarrier(parent, NULL));
  repeated_calls(rank, n, parent);
  repeated_large_calls(rank, n, parent);
  moving_buffers(rank, n, parent);
  /* Last, as a failure here breaks the comms: the same group on a fresh
   * copy of the parent and fresh children, so that the connections of
   * three comms come up inside one GroupEnd. */
  hetcclComm_t p2 = NULL, ca2 = NULL, cb2 = NULL;
  tu_set_case("split: group over three fresh comms (connections come up inside GroupEnd)");
  ok = CHECK_OK(hetcclCommSplit(parent, 0, rank, &p2, NULL));
  ok = ok && CHECK_OK(hetcclCommSplit(p2, color_parity(rank, n), key_reversed(rank, n), &ca2, NULL));
  ok = ok && CHECK_OK(hetcclCommSplit(p2, color_half(rank, n), key_reversed(rank, n), &cb2, NULL));
  if (ok) group_over_comms(rank, n, p2, ca2, ra, size_a, cb2, rb, size_b);
  if (ca2) CHECK_OK(hetcclCommDestroy(ca2));
  if (cb2) CHECK_OK(hetcclCommDestroy(cb2));
  if (p2) CHECK_OK(hetcclCommDestroy(p2));
  if (cnc) CHECK_OK(hetcclCommDestroy(cnc));
  if (ca) CHECK_OK(hetcclCommDestroy(ca));
  if (cb) CHECK_OK(hetcclCommDestroy(cb));
  CHECK_OK(hetcclCommDestroy(parent));
  tu_set_case("%s", "");
  return 0;
}

/* ---- main ---- */

#define NCFG_VARS 4
static char saved_env[NCFG_VARS][256];
static bool saved_set[NCFG_VARS];
static const char *const cfg_vars[NCFG_VARS] = {"HETCCL_ALGO", "HETCCL_CHUNK_BYTES", "HETCCL_SCRATCH_SLOTS",
                                                "HETCCL_DIRECT_CHUNK_BYTES"};

static void apply_cfg(int cfg) {
  const char *vals[NCFG_VARS] = {cfgs[cfg].algo, cfgs[cfg].chunk, cfgs[cfg].slots, cfgs[cfg].direct_chunk};
  for (int i = 0; i < NCFG_VARS; i++) {
    if (vals[i][0]) setenv(cfg_vars[i], vals[i], 1);
    else if (saved_set[i]) setenv(cfg_vars[i], saved_env[i], 1);
    else unsetenv(cfg_vars[i]);
  }
  hc_params_reset();
}

static void print_case_list(const struct tcase *cases, int n, int nranks) {
  char text[256];
  for (int i = 0; i < n; i++) {
    case_text(&cases[i], nranks, i, text, sizeof(text));
    printf("%s\n", text);
  }
}

static int run_nranks(int nranks, bool quick, int only, bool list) {
  struct tcase *cases;
  int nextra;
  int ncases = build_cases(nranks, quick, &cases, &nextra);
  if (list) {
    print_case_list(cases, ncases, nranks);
    free(cases);
    return 0;
  }
  printf(
      "nranks %d: %d cases (covering array of every pair of dimensions + %d cross-rank float and chunking cases)%s\n",
      nranks, ncases, nextra, quick ? ", --quick" : "");
  fflush(stdout);
  int failed = 0;
  for (int cfg = 0; cfg < CFG_N; cfg++) {
    bool any = false;
    for (int i = 0; i < ncases && !any; i++) any = cases[i].v[D_CFG] == cfg && (only == ONLY_ALL || only == i);
    if (!any) continue;
    double t0 = tu_seconds();
    struct run_ctx ctx = {.nranks = nranks, .quick = quick, .cfg = cfg, .only = only, .cases = cases, .ncases = ncases};
    apply_cfg(cfg);
    failed += tu_run_ranks(nranks, rank_cases, &ctx);
    printf("  algo %-14s %3d cases %6.2f s\n", cfgs[cfg].name, atomic_load(&ctx.cases_run), tu_seconds() - t0);
    fflush(stdout);
  }
  apply_cfg(CFG_AUTO);
  if (only == ONLY_ALL || only == ONLY_SPLIT) {
    double t0 = tu_seconds();
    failed += tu_run_ranks(nranks, rank_split, NULL);
    printf("  split/group/NOCOLOR     %6.2f s\n", tu_seconds() - t0);
  }
  free(cases);
  return failed;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  int nranks = 0, only = ONLY_ALL;
  bool quick = false, list = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--list")) list = true;
    else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
      i++;
      only = !strcmp(argv[i], "split") ? ONLY_SPLIT : atoi(argv[i]);
    } else {
      fprintf(stderr, "usage: %s [--ranks N] [--quick] [--case K|split] [--list]\n", argv[0]);
      return 2;
    }
  }
  for (int i = 0; i < NCFG_VARS; i++) {
    const char *v = getenv(cfg_vars[i]);
    saved_set[i] = v != NULL;
    if (v) snprintf(saved_env[i], sizeof(saved_env[i]), "%s", v);
  }
  static const int all_ranks[] = {1, 2, 3, 4, 5, 8};
  for (size_t i = 0; i < HC_ARRAY_LEN(all_ranks); i++) {
    if (nranks > 0 && all_ranks[i] != nranks) continue;
    run_nranks(all_ranks[i], quick, only, list);
  }
  if (nranks > 0 && nranks != 1 && nranks != 2 && nranks != 3 && nranks != 4 && nranks != 5 && nranks != 8)
    run_nranks(nranks, quick, only, list);
  return list ? 0 : tu_finish("test_coll_host");
}
