/*
 * hetccl-perf: an nccl-tests style benchmark of one hetccl collective on host
 * or GPU buffers. Flags, size sweep, run loop, bandwidth formulas and output
 * follow nccl-tests (shared/reference/nccl-tests.md), so rows line up with
 * *_perf.
 *
 *   hetccl-perf <collective> [flags]
 *     collective: all_reduce all_gather reduce_scatter broadcast reduce
 *                 alltoall gather scatter sendrecv
 *     -b,--minbytes S      smallest size (32M); K/M/G suffixes
 *     -e,--maxbytes S      largest size (32M)
 *     -i,--stepbytes S     additive step when -f is 1 (1M)
 *     -f,--stepfactor F    multiply the size by F each step (1)
 *     -n,--iters N         timed iterations per size and half (20)
 *     -w,--warmup_iters N  warm-up iterations per size, out of place and in place (1)
 *     -m,--agg_iters N     operations per iteration, grouped when > 1 (1)
 *     -N,--run_cycles N    repeat the sweep N times, 0 = forever (1)
 *     -c,--check N         validation runs after timing, 0 = none (1)
 *     -o,--op OP           sum prod min max avg mulsum, or all (sum)
 *     -d,--datatype T      int8 uint8 int32 uint32 int64 uint64 half float
 *                          double bfloat16 f8e4m3 f8e5m2 (also char int fp16
 *                          float16 fp32 float32 fp64 float64 bf16 e4m3 e5m2),
 *                          or all (float)
 *     -r,--root R          root of rooted collectives, -1 = every rank (0)
 *     -a,--average A       combine times: 0 rank 0, 1 mean, 2 min, 3 max (1)
 *     -z,--blocking Z      accepted and ignored: host calls always block
 *     -T,--timeout S       abort when one step (init, a warm-up, a half-row)
 *                          takes more than S seconds (0 = never)
 *     -G,--device LIST     where each rank's buffers live: host, cuda or hip,
 *                          or a comma list that rank r reads entry r mod its
 *                          length of, e.g. cuda,host (host). Not nccl-tests'
 *                          -G (CUDA graphs).
 *     -t,--nthreads 1, -g,--ngpus 1: one rank per process, nothing else
 *     -h,--help
 *
 * Each process is one rank: hetcclCommInitFromEnv() takes rank and size from
 * the launcher, so this runs under hetccl-run, torchrun-style variables,
 * srun or mpirun, e.g.
 *   hetccl-run -n 2 hetccl-perf all_reduce -b 8 -e 1M -f 4 -c 1
 *   hetccl-run -n 4 hetccl-perf all_reduce -G cuda,cuda,host,host
 *
 * GPU buffers (-G). A GPU rank allocates its two buffers on its device (the
 * host's GPU ranks take devices 0, 1, ... in rank order, modulo the count)
 * and runs the collectives on a stream of its own, which it synchronises
 * after the untimed call and after the timed loop, as nccl-tests does. The
 * collectives run on a comm split off with each rank's device in its
 * config, so CPU and GPU ranks mix in one comm; the tool's own exchanges
 * (times, error counts, the banner) run on the host comm it started from.
 * Checks fill host copies of the buffers and copy them in, and copy the
 * output back before comparing.
 *
 * Checking (-c N). After timing, each check fills the inputs anew, runs the
 * operation once untimed and counts wrong elements on every rank (summed
 * over ranks: the #wrong column). Inputs differ per element, rank and check
 * run. Data-moving collectives carry pseudo-random bytes and are compared
 * byte for byte with what the source rank sent. Reductions carry small
 * integers sized so that every partial result is exact in the datatype
 * (fp8 included) and the expected value is computed exactly; see
 * "Reduction inputs" below. Output buffers start filled with 0xA5 bytes, so
 * an output never written shows up as wrong. Rooted reduce and gather are
 * checked on the root only.
 *
 * Output comes from rank 0 only; a failed call is reported by the rank that
 * saw it. Exit status: 0 when every check passed, 1 on wrong results or a
 * failed call, 2 on a usage error, 124 on -T.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hetccl.h"
#include "device/device.h"
#include "util/util.h"
#include "nccl_tests.h"

#define SENTINEL 0xA5 /* fills output buffers before a check */
#define NO_OP (-1)    /* the op column of a data-moving collective */
#define NO_ROOT (-1)

/* ---- options ---- */

static struct {
  int64_t min_bytes, max_bytes, step_bytes, step_factor;
  int iters, warmup_iters, agg_iters, check, average, blocking;
  long run_cycles;
  int root;  /* -1: every rank in turn */
  int op;    /* enum hc_redop, or -1 for all */
  int dtype; /* enum hc_dtype, or -1 for all */
  int timeout_s;
  enum hc_mem_kind devices[64]; /* -G: rank r's kind is devices[r % ndevices]; */
  int ndevices;                 /* 0 without -G: every rank on the host */
} opt = {
    .min_bytes = 32 << 20,
    .max_bytes = 32 << 20,
    .step_bytes = 1 << 20,
    .step_factor = 1,
    .iters = 20,
    .warmup_iters = 1,
    .agg_iters = 1,
    .check = 1,
    .average = 1,
    .blocking = 0,
    .run_cycles = 1,
    .root = 0,
    .op = HC_SUM,
    .dtype = HC_FLOAT32,
    .timeout_s = 0,
};

/* ---- the run: one communicator, two buffers ---- */

struct bench {
  hetcclComm_t ctl;  /* host comm: the tool's own exchanges */
  hetcclComm_t comm; /* the one benchmarked: ctl, or split off with -G */
  int rank, n;
  /* What the calls use (buf_bytes each): host memory, or memory of device
   * `device` of gpu on stream. host_send/host_recv: where the tool fills
   * and checks; the same buffers on a host rank, copies on a GPU rank. */
  char *sendbuf, *recvbuf, *host_send, *host_recv;
  size_t buf_bytes;
  const struct hc_dev_ops *gpu; /* NULL: a host rank */
  int device;
  hc_stream_t stream;
  const struct coll *coll;
  /* The test in progress */
  enum hc_dtype dtype;
  size_t ts;          /* element size */
  int op;             /* enum hc_redop, NO_OP for data-moving collectives */
  int root;           /* NO_ROOT for collectives without one */
  uint64_t rep;       /* which data set the inputs hold (0: the one timed on) */
  uint64_t reps_used; /* data sets handed out to checks so far */
  /* The size in progress, in elements (nccl-tests.md §3) */
  size_t count, send_count, recv_count, send_inplace, recv_inplace;
  /* Totals */
  double bw_sum;
  long bw_rows;
  uint64_t halves_wrong; /* this rank's halves with a wrong element */
  bool row_open;         /* rank 0 has printed part of a row */
};

/* The arguments of one call, in place or not, after the per-iteration
 * shift. send is writable: the tool fills it before a check. */
struct call {
  char *send, *recv;
  size_t count;
  hetcclRedOp_t op;
};

static struct bench B;

static void fail(const char *what, hetcclResult_t r) {
  if (B.row_open) printf("\n");
  char who[32] = "";
  if (B.rank >= 0) snprintf(who, sizeof(who), "rank %d: ", B.rank);
  fprintf(stderr, "hetccl-perf: %s%s failed: %s: %s\n", who, what, hetcclGetErrorString(r), hetcclGetLastError(NULL));
  if (B.comm != NULL && B.comm != B.ctl) hetcclCommAbort(B.comm);
  if (B.ctl != NULL) hetcclCommAbort(B.ctl);
  exit(1);
}
#define CHECK(call, what)                      \
  do {                                         \
    hetcclResult_t r_ = (call);                \
    if (r_ != hetcclSuccess) fail((what), r_); \
  } while (0)

/* A device call of a GPU rank. */
#define DEV_CHECK(call, what) CHECK((hetcclResult_t)(call), (what))

/* A GPU rank waits for its stream; a host rank's calls completed already. */
static void sync_stream(void) {
  if (B.gpu) DEV_CHECK(hc_dev_stream_sync(B.gpu, B.stream), "stream synchronize");
}

/* ---- -T: alarm() re-armed at each step ---- */

static char timeout_msg[128];
static size_t timeout_msg_len;

static void on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(2, timeout_msg, timeout_msg_len);
  (void)w;
  _exit(124);
}

static void arm_timeout(void) {
  if (opt.timeout_s <= 0) return;
  char who[32] = "";
  if (B.rank >= 0) snprintf(who, sizeof(who), "rank %d: ", B.rank);
  timeout_msg_len = (size_t)snprintf(timeout_msg, sizeof(timeout_msg),
                                     "hetccl-perf: %stimeout: a step took more than %d s\n", who, opt.timeout_s);
  if (timeout_msg_len >= sizeof(timeout_msg)) timeout_msg_len = sizeof(timeout_msg) - 1;
  signal(SIGALRM, on_alarm);
  alarm((unsigned)opt.timeout_s);
}

/* ---- input generators ---- */

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(mix(a) ^ b) ^ c); }

/*
 * Data-moving collectives: byte j of what rank r sends is byte j%8 of
 * mix(seed(r) ^ j/8), so any byte of any rank's input can be recomputed
 * where it lands.
 */
static uint64_t byte_seed(int src) { return hash3(B.rep, (uint64_t)src, 0x5eed); }

static void bytes_fill(char *dst, size_t first, size_t n, int src) {
  uint64_t seed = byte_seed(src), word = 0;
  for (size_t j = first; j < first + n; j++) {
    if (j == first || j % 8 == 0) word = mix(seed ^ (j / 8));
    dst[j - first] = (char)(word >> (8 * (j % 8)));
  }
}

/* Elements of size ts in got[0..count) that differ from bytes first.. of
 * src's input. */
static uint64_t bytes_wrong(const char *got, size_t first, size_t count, size_t ts, int src) {
  uint64_t seed = byte_seed(src), word = 0, wrong = 0;
  for (size_t e = 0; e < count; e++) {
    bool bad = false;
    for (size_t b = 0; b < ts; b++) {
      size_t j = first + e * ts + b;
      if (e * ts + b == 0 || j % 8 == 0) word = mix(seed ^ (j / 8));
      bad |= got[e * ts + b] != (char)(word >> (8 * (j % 8)));
    }
    wrong += bad;
  }
  return wrong;
}

/*
 * Reduction inputs. v(r, i) is rank r's element i: a small integer (or 1, 2
 * and their negatives for prod) drawn from hash(rep, r, i), so a swapped or
 * shifted block changes the result. The ranges keep every partial result of
 * any reduction order exact:
 *   - exact[t]: all integers of [-exact, exact] ([0, exact] unsigned) are
 *     representable (fp8 e4m3: 16, e5m2: 8, bf16: 256, half: 2048, ...);
 *   - sum, mulsum (x2): |v| <= exact / (scale * n), so partial sums stay in
 *     range; with more ranks than that allows, only exact/scale ranks per
 *     element (chosen by the element) hold a +-1, the others 0;
 *   - avg: v = w(i) + d(r, i), where one rank adds 1 and another subtracts 1,
 *     so the sum is n * w(i) and the average w(i) exactly, whatever the
 *     division's rounding; |n * w| + 1 <= exact. (From n >= exact, e.g. 8
 *     ranks in e5m2, w is 0: the average is 0 everywhere, and only the
 *     cancelling +-1 and the sentinel catch mistakes.) An implementation
 *     that premultiplies by 1/n, as NCCL does for floats, can be 1 ulp off;
 *   - prod: |v| in {1, 2}, at most pow2[t] factors of 2 per element (2^6 for
 *     int8, 2^8 for e4m3 whose largest value is 448, ...);
 *   - min, max: any integer of the exact range.
 */
static const struct {
  double exact;
  int pow2;
} dtype_range[HC_DTYPE_COUNT] = {
    [HC_INT8] = {127, 6},
    [HC_UINT8] = {255, 7},
    [HC_INT32] = {2147483647.0, 30},
    [HC_UINT32] = {4294967295.0, 31},
    [HC_INT64] = {0x1p53, 62},
    [HC_UINT64] = {0x1p53, 63},
    [HC_FLOAT16] = {2048, 15},
    [HC_FLOAT32] = {0x1p24, 127},
    [HC_FLOAT64] = {0x1p53, 1023},
    [HC_BFLOAT16] = {256, 127},
    [HC_FP8_E4M3] = {16, 8},
    [HC_FP8_E5M2] = {8, 15},
};

static bool dtype_signed(enum hc_dtype t) { return t != HC_UINT8 && t != HC_UINT32 && t != HC_UINT64; }

/* An integer of [lo, hi] drawn from h. */
static double draw(uint64_t h, double lo, double hi) { return lo + (double)(h % (uint64_t)(hi - lo + 1)); }

/* Whether rank r is one of the `slots` ranks that may hold a non-neutral
 * value at element i, when every rank holding one would overflow. */
static bool in_slots(uint64_t i, int r, double slots) {
  int first = (int)(hash3(B.rep, i, 0x51075) % (uint64_t)B.n);
  return (double)((r - first + B.n) % B.n) < slots;
}

static double sum_value(int r, uint64_t i, double scale) {
  double budget = dtype_range[B.dtype].exact / scale;
  double b = (double)(uint64_t)(budget / B.n);
  bool sgn = dtype_signed(B.dtype);
  uint64_t h = hash3(B.rep, (uint64_t)r, i);
  if (b >= 1) return draw(h, sgn ? -b : 0, b);
  if (!in_slots(i, r, (double)(uint64_t)budget)) return 0;
  return draw(h, sgn ? -1 : 0, 1);
}

/* avg: w(i) shared by all ranks, plus 1 on rank up(i), minus 1 on down(i). */
static double avg_base(uint64_t i, bool *perturb) {
  double w = (double)(uint64_t)((dtype_range[B.dtype].exact - 1) / B.n);
  uint64_t h = hash3(B.rep, i, 0xa1);
  *perturb = B.n > 1;
  if (dtype_signed(B.dtype)) return draw(h, -w, w);
  if (w < 1) { /* unsigned with more ranks than values: all zero */
    *perturb = false;
    return 0;
  }
  return draw(h, 1, w);
}

static double avg_value(int r, uint64_t i) {
  bool perturb;
  double w = avg_base(i, &perturb);
  if (!perturb) return w;
  int up = (int)(hash3(B.rep, i, 0xa2) % (uint64_t)B.n);
  int down = (up + 1 + (int)(hash3(B.rep, i, 0xa3) % (uint64_t)(B.n - 1))) % B.n;
  return w + (r == up) - (r == down);
}

static double prod_value(int r, uint64_t i) {
  uint64_t h = hash3(B.rep, (uint64_t)r, i);
  double pow2 = dtype_range[B.dtype].pow2;
  double mag = (B.n <= pow2 || in_slots(i, r, pow2)) ? 1 + (double)(h & 1) : 1;
  return dtype_signed(B.dtype) && (h & 2) ? -mag : mag;
}

static double minmax_value(int r, uint64_t i) {
  double e = HC_MIN(dtype_range[B.dtype].exact, 1 << 20);
  return draw(hash3(B.rep, (uint64_t)r, i), dtype_signed(B.dtype) ? -e : 0, e);
}

static double red_value(int r, uint64_t i) {
  switch (B.op) {
  case HC_SUM: return sum_value(r, i, 1);
  case HC_PREMULSUM: return sum_value(r, i, 2);
  case HC_AVG: return avg_value(r, i);
  case HC_PROD: return prod_value(r, i);
  default: return minmax_value(r, i);
  }
}

static double red_expected(uint64_t i) {
  if (B.op == HC_AVG) {
    bool perturb;
    return avg_base(i, &perturb);
  }
  double acc = red_value(0, i);
  for (int r = 1; r < B.n; r++) {
    double v = red_value(r, i);
    switch (B.op) {
    case HC_PROD: acc *= v; break;
    case HC_MAX: acc = HC_MAX(acc, v); break;
    case HC_MIN: acc = HC_MIN(acc, v); break;
    default: acc += v; break;
    }
  }
  return B.op == HC_PREMULSUM ? 2 * acc : acc;
}

/* What rank src puts at dst: its input elements first..first+count. */
static void put_input(char *dst, int src, size_t first, size_t count) {
  if (B.op == NO_OP) {
    bytes_fill(dst, first * B.ts, count * B.ts, src);
    return;
  }
  for (size_t k = 0; k < count; k++) hc_dtype_store(B.dtype, dst + k * B.ts, red_value(src, first + k));
}

/* Wrong elements of got[0..count): a copy of src's input elements first..,
 * or for a reduction the reduced elements first.. (src unused). */
static uint64_t output_wrong(const char *got, int src, size_t first, size_t count) {
  if (B.op == NO_OP) return bytes_wrong(got, first * B.ts, count, B.ts, src);
  uint64_t wrong = 0;
  for (size_t k = 0; k < count; k++) wrong += hc_dtype_load(B.dtype, got + k * B.ts) != red_expected(first + k);
  return wrong;
}

/* ---- the collectives ---- */

static int me(void) { return B.rank; }
static int left(void) { return (B.rank - 1 + B.n) % B.n; }
static int right(void) { return (B.rank + 1) % B.n; }
static char *block(char *buf, int r, size_t count) { return buf + (size_t)r * count * B.ts; }

/* nccl-tests.md §3: count = S / ts; split collectives use per-rank blocks
 * rounded down to 16 bytes. Counts in elements. */
static size_t split_base(size_t count) { return (count / (size_t)B.n) & ~(16 / B.ts - 1); }

static void counts_whole(size_t count) {
  B.count = B.send_count = B.recv_count = count;
  B.send_inplace = B.recv_inplace = 0;
}
static void counts_gather(size_t count) { /* all_gather, gather */
  size_t base = split_base(count);
  B.count = B.send_count = base;
  B.recv_count = base * (size_t)B.n;
  B.send_inplace = base;
  B.recv_inplace = 0;
}
static void counts_scatter(size_t count) { /* reduce_scatter, scatter */
  size_t base = split_base(count);
  B.count = B.recv_count = base;
  B.send_count = base * (size_t)B.n;
  B.send_inplace = 0;
  B.recv_inplace = base;
}
static void counts_alltoall(size_t count) {
  size_t base = split_base(count);
  B.count = base;
  B.send_count = B.recv_count = base * (size_t)B.n;
  B.send_inplace = B.recv_inplace = 0;
}

static double factor_one(int n) {
  (void)n;
  return 1;
}
static double factor_ring(int n) { return (double)(n - 1) / n; }
static double factor_allreduce(int n) { return 2.0 * (n - 1) / n; }

#define DT ((hetcclDataType_t)B.dtype)
static hetcclResult_t run_all_reduce(const struct call *c) {
  return hetcclAllReduce(c->send, c->recv, c->count, DT, c->op, B.comm, B.stream);
}
static hetcclResult_t run_all_gather(const struct call *c) {
  return hetcclAllGather(c->send, c->recv, c->count, DT, B.comm, B.stream);
}
static hetcclResult_t run_reduce_scatter(const struct call *c) {
  return hetcclReduceScatter(c->send, c->recv, c->count, DT, c->op, B.comm, B.stream);
}
static hetcclResult_t run_broadcast(const struct call *c) {
  return hetcclBroadcast(c->send, c->recv, c->count, DT, B.root, B.comm, B.stream);
}
static hetcclResult_t run_reduce(const struct call *c) {
  return hetcclReduce(c->send, c->recv, c->count, DT, c->op, B.root, B.comm, B.stream);
}
static hetcclResult_t run_alltoall(const struct call *c) {
  return hetcclAlltoAll(c->send, c->recv, c->count, DT, B.comm, B.stream);
}
static hetcclResult_t run_gather(const struct call *c) {
  return hetcclGather(c->send, c->recv, c->count, DT, B.root, B.comm, B.stream);
}
static hetcclResult_t run_scatter(const struct call *c) {
  return hetcclScatter(c->send, c->recv, c->count, DT, B.root, B.comm, B.stream);
}
static hetcclResult_t run_sendrecv(const struct call *c) {
  hetcclResult_t r = hetcclGroupStart();
  if (r != hetcclSuccess) return r;
  hetcclResult_t rs = hetcclSend(c->send, c->count, DT, right(), B.comm, B.stream);
  hetcclResult_t rr = hetcclRecv(c->recv, c->count, DT, left(), B.comm, B.stream);
  r = hetcclGroupEnd();
  return rs != hetcclSuccess ? rs : rr != hetcclSuccess ? rr : r;
}

/* fill: writes this rank's inputs where the call reads them.
 * check: wrong elements of this rank's output. */
static void fill_own(const struct call *c) { put_input(c->send, me(), 0, B.send_count); }
static void fill_root(const struct call *c) {
  if (me() == B.root) put_input(c->send, B.root, 0, B.send_count);
}
static uint64_t check_reduced(const struct call *c) { return output_wrong(c->recv, 0, 0, c->count); }
static uint64_t check_reduced_root(const struct call *c) { return me() == B.root ? check_reduced(c) : 0; }
static uint64_t check_my_block(const struct call *c) { /* reduce_scatter */
  return output_wrong(c->recv, 0, (size_t)me() * c->count, c->count);
}
static uint64_t check_from_root(const struct call *c) { /* broadcast */
  return output_wrong(c->recv, B.root, 0, c->count);
}
static uint64_t check_root_block(const struct call *c) { /* scatter */
  return output_wrong(c->recv, B.root, (size_t)me() * c->count, c->count);
}
static uint64_t check_gathered(const struct call *c) { /* all_gather */
  uint64_t wrong = 0;
  for (int r = 0; r < B.n; r++) wrong += output_wrong(block(c->recv, r, c->count), r, 0, c->count);
  return wrong;
}
static uint64_t check_gathered_root(const struct call *c) { return me() == B.root ? check_gathered(c) : 0; }
static uint64_t check_alltoall(const struct call *c) {
  uint64_t wrong = 0;
  for (int r = 0; r < B.n; r++)
    wrong += output_wrong(block(c->recv, r, c->count), r, (size_t)me() * c->count, c->count);
  return wrong;
}
static uint64_t check_from_left(const struct call *c) { return output_wrong(c->recv, left(), 0, c->count); }

struct coll {
  const char *name, *api;
  bool reduces, rooted;
  bool algbw_per_rank;         /* algbw counts count*n elements (split collectives) */
  double (*bus_factor)(int n); /* busbw = algbw * bus_factor(n) */
  void (*counts)(size_t count);
  hetcclResult_t (*run)(const struct call *c);
  void (*fill)(const struct call *c);
  uint64_t (*check)(const struct call *c);
};

static const struct coll colls[] = {
    {"all_reduce", "hetcclAllReduce", true, false, false, factor_allreduce, counts_whole, run_all_reduce, fill_own,
     check_reduced},
    {"all_gather", "hetcclAllGather", false, false, true, factor_ring, counts_gather, run_all_gather, fill_own,
     check_gathered},
    {"reduce_scatter", "hetcclReduceScatter", true, false, true, factor_ring, counts_scatter, run_reduce_scatter,
     fill_own, check_my_block},
    {"broadcast", "hetcclBroadcast", false, true, false, factor_one, counts_whole, run_broadcast, fill_root,
     check_from_root},
    {"reduce", "hetcclReduce", true, true, false, factor_one, counts_whole, run_reduce, fill_own, check_reduced_root},
    {"alltoall", "hetcclAlltoAll", false, false, true, factor_ring, counts_alltoall, run_alltoall, fill_own,
     check_alltoall},
    {"gather", "hetcclGather", false, true, true, factor_ring, counts_gather, run_gather, fill_own,
     check_gathered_root},
    {"scatter", "hetcclScatter", false, true, true, factor_ring, counts_scatter, run_scatter, fill_root,
     check_root_block},
    {"sendrecv", "hetcclSend/Recv", false, false, false, factor_one, counts_whole, run_sendrecv, fill_own,
     check_from_left},
};

/* ---- one operation ---- */

/* The call for iteration iter on the buffers at sendbuf and recvbuf: like
 * nccl-tests, successive iterations move through the buffers in steps of
 * one operation's footprint, so that small sizes do not run from cache. In
 * place, both pointers lie in recvbuf. */
static struct call make_call_on(char *sendbuf, char *recvbuf, bool in_place, int iter) {
  size_t total = HC_MAX(B.send_count, B.recv_count) * B.ts;
  size_t steps = total ? B.buf_bytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1));
  char *send = sendbuf + shift, *recv = recvbuf + shift;
  struct call c = {.count = B.count, .op = (hetcclRedOp_t)(B.op == NO_OP ? HC_SUM : B.op)};
  c.send = in_place ? recv + B.send_inplace * B.ts * (size_t)B.rank : send;
  c.recv = in_place ? recv + B.recv_inplace * B.ts * (size_t)B.rank : recv;
  return c;
}
static struct call make_call(bool in_place, int iter) { return make_call_on(B.sendbuf, B.recvbuf, in_place, iter); }
/* The same call on the host copies, where the tool fills and checks. */
static struct call host_call(bool in_place) { return make_call_on(B.host_send, B.host_recv, in_place, 0); }

/* mulsum is a PreMulSum op made for each launch, as nccl-tests does. */
static void launch(bool in_place, int iter) {
  struct call c = make_call(in_place, iter);
  if (B.op == HC_PREMULSUM) {
    uint8_t two[8];
    hc_dtype_store(B.dtype, two, 2.0);
    CHECK(hetcclRedOpCreatePreMulSum(&c.op, two, DT, hetcclScalarHostImmediate, B.comm), "hetcclRedOpCreatePreMulSum");
  }
  CHECK(B.coll->run(&c), B.coll->api);
  if (B.op == HC_PREMULSUM) CHECK(hetcclRedOpDestroy(c.op, B.comm), "hetcclRedOpDestroy");
}

/* Output areas to the sentinel, then this rank's inputs in place; a GPU
 * rank copies both areas of iteration 0 to its device. */
static void prepare_data(bool in_place) {
  struct call c = host_call(in_place);
  const size_t footprint = HC_MAX(B.send_count, B.recv_count) * B.ts;
  memset(B.host_recv, SENTINEL, footprint);
  B.coll->fill(&c);
  if (B.gpu == NULL) return;
  DEV_CHECK(hc_dev_copy(B.gpu, B.sendbuf, B.host_send, B.send_count * B.ts, B.stream), "copy to the device");
  DEV_CHECK(hc_dev_copy(B.gpu, B.recvbuf, B.host_recv, footprint, B.stream), "copy to the device");
  sync_stream();
}

/* This rank's wrong output elements of the call just made (iteration 0). */
static uint64_t check_output(bool in_place) {
  if (B.gpu) {
    sync_stream();
    DEV_CHECK(hc_dev_copy(B.gpu, B.host_recv, B.recvbuf, HC_MAX(B.send_count, B.recv_count) * B.ts, B.stream),
              "copy from the device");
    sync_stream();
  }
  struct call c = host_call(in_place);
  return B.coll->check(&c);
}

/* ---- timing and checking ---- */

static double combine_time(double t) {
  double out = 0;
  if (opt.average == 0) {
    CHECK(hetcclBroadcast(&t, &out, 1, hetcclFloat64, 0, B.ctl, NULL), "hetcclBroadcast");
    return out;
  }
  static const hetcclRedOp_t ops[] = {hetcclSum, hetcclSum, hetcclMin, hetcclMax};
  CHECK(hetcclAllReduce(&t, &out, 1, hetcclFloat64, ops[opt.average], B.ctl, NULL), "hetcclAllReduce");
  return opt.average == 1 ? out / B.n : out;
}

static uint64_t sum_over_ranks(uint64_t v) {
  uint64_t out = 0;
  CHECK(hetcclAllReduce(&v, &out, 1, hetcclUint64, hetcclSum, B.ctl, NULL), "hetcclAllReduce");
  return out;
}

/* One half-row: nccl-tests' BenchTime. */
static void bench_half(bool in_place) {
  arm_timeout();
  if (opt.check) {
    B.rep = 0;
    prepare_data(in_place);
  }
  launch(in_place, 0);
  sync_stream();
  CHECK(hetcclBarrier(B.ctl, NULL), "hetcclBarrier");

  uint64_t t0 = hc_now_ns();
  for (int iter = 0; iter < opt.iters; iter++) {
    if (opt.agg_iters > 1) CHECK(hetcclGroupStart(), "hetcclGroupStart");
    for (int a = 0; a < opt.agg_iters; a++) launch(in_place, iter * opt.agg_iters + a);
    if (opt.agg_iters > 1) CHECK(hetcclGroupEnd(), "hetcclGroupEnd");
  }
  sync_stream();
  double sec = (double)(hc_now_ns() - t0) / 1e9 / ((double)opt.iters * opt.agg_iters);
  sec = combine_time(sec);

  double bytes = (double)B.count * (double)B.ts * (B.coll->algbw_per_rank ? B.n : 1);
  double algbw = sec > 0 ? bytes / 1e9 / sec : 0;
  double busbw = algbw * B.coll->bus_factor(B.n);

  uint64_t wrong = 0;
  for (int c = 0; c < opt.check && wrong == 0; c++) {
    B.rep = ++B.reps_used;
    prepare_data(in_place);
    launch(in_place, 0);
    uint64_t mine = check_output(in_place);
    if (mine) B.halves_wrong++;
    wrong = sum_over_ranks(mine);
  }

  if (B.rank == 0) {
    char t[32], a[32], b[32];
    printf("  %7s  %6s  %6s", nt_fmt_num(t, sizeof(t), sec * 1e6, 7), nt_fmt_num(a, sizeof(a), algbw, 6),
           nt_fmt_num(b, sizeof(b), busbw, 6));
    if (opt.check) printf("  %6g", (double)wrong);
    else printf("    N/A");
  }
  B.bw_sum += busbw;
  B.bw_rows++;
}

static void set_size(int64_t bytes) { B.coll->counts((size_t)bytes / B.ts); }

/* nccl-tests' TimeTest: warm up every size, then the rows. */
static void time_test(enum hc_dtype dtype, int op, int root) {
  B.dtype = dtype;
  B.ts = hc_dtype_size(dtype);
  B.op = op;
  B.root = root;
  arm_timeout();
  CHECK(hetcclBarrier(B.ctl, NULL), "hetcclBarrier");
  for (int64_t size = opt.min_bytes; size <= opt.max_bytes; size = size ? size * 2 : 1) {
    set_size(size);
    /* Both halves: each is a class of its own for the pull-or-copy timing
     * (api/pull_choice.c), whose trial calls belong in the warm-up. */
    for (int w = 0; w < opt.warmup_iters; w++) launch(false, w);
    for (int w = 0; w < opt.warmup_iters; w++) launch(true, w);
  }
  sync_stream();
  long repeat = opt.run_cycles;
  do {
    for (int64_t size = opt.min_bytes; size <= opt.max_bytes;
         size = opt.step_factor > 1 ? size * opt.step_factor : size + opt.step_bytes) {
      set_size(size);
      if (B.rank == 0)
        printf("%12zu  %12zu  %8s  %6s  %6d", HC_MAX(B.send_count, B.recv_count) * B.ts, B.count, hc_dtype_name(dtype),
               op == NO_OP ? "none" : hc_redop_name((enum hc_redop)op), root);
      B.row_open = B.rank == 0;
      bench_half(false);
      bench_half(true);
      if (B.rank == 0) printf("\n");
      B.row_open = false;
    }
  } while (--repeat != 0);
}

/* ---- banner and table header ---- */

struct rank_info {
  int32_t rank, pid;
  int32_t kind, device; /* enum hc_mem_kind and device of the buffers */
  char host[56];
};

/* Every rank's rank_info, this rank's last known state in it. */
static struct rank_info *gather_ranks(void) {
  struct rank_info mine = {
      .rank = B.rank, .pid = (int32_t)getpid(), .kind = B.gpu ? (int32_t)B.gpu->kind : 0, .device = B.device};
  gethostname(mine.host, sizeof(mine.host) - 1);
  mine.host[strcspn(mine.host, ".")] = 0;
  struct rank_info *all = calloc((size_t)B.n, sizeof(*all));
  if (all == NULL) {
    fprintf(stderr, "hetccl-perf: out of memory\n");
    exit(1);
  }
  CHECK(hetcclAllGather(&mine, all, sizeof(mine), hetcclUint8, B.ctl, NULL), "hetcclAllGather");
  return all;
}

static const char *kind_name(int kind) { return kind == HC_MEM_CUDA ? "cuda" : kind == HC_MEM_HIP ? "hip" : "host"; }

static void print_banner(const char *coll_name) {
  struct rank_info *all = gather_ranks();
  if (B.rank == 0) {
    int lib = 0;
    hetcclGetVersion(&lib);
    printf("# hetccl-perf version %d.%d.%d hetccl-headers=%d hetccl-library=%d\n", HETCCL_MAJOR, HETCCL_MINOR,
           HETCCL_PATCH, HETCCL_VERSION_CODE, lib);
    printf("# Collective test starting: hetccl-perf %s\n", coll_name);
    printf("# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %lld(%s) warmup iters: %d "
           "iters: %d agg iters: %d validation: %d graph: 0 unalign: 0\n",
           (long long)opt.min_bytes, (long long)opt.max_bytes,
           (long long)(opt.step_factor > 1 ? opt.step_factor : opt.step_bytes),
           opt.step_factor > 1 ? "factor" : "bytes", opt.warmup_iters, opt.iters, opt.agg_iters, opt.check);
    printf("#\n# Using devices\n");
    for (int r = 0; r < B.n; r++)
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", (int)all[r].rank, 0, (int)all[r].pid,
             all[r].host, (int)all[r].device, kind_name(all[r].kind), all[r].kind == HC_MEM_HOST ? "CPU" : "GPU");
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
           "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  free(all);
}

/* ---- command line ---- */

static void usage(FILE *f) {
  fprintf(f, "usage: hetccl-perf <collective> [flags]\n"
             "  collective: all_reduce all_gather reduce_scatter broadcast reduce alltoall\n"
             "              gather scatter sendrecv\n"
             "  -b,--minbytes S (32M)  -e,--maxbytes S (32M)  -i,--stepbytes S (1M)\n"
             "  -f,--stepfactor F (1)  -n,--iters N (20)  -w,--warmup_iters N (1)\n"
             "  -m,--agg_iters N (1)  -N,--run_cycles N (1; 0 = forever)  -c,--check N (1)\n"
             "  -o,--op sum|prod|min|max|avg|mulsum|all (sum)\n"
             "  -d,--datatype int8|uint8|int32|uint32|int64|uint64|half|float|double|\n"
             "                bfloat16|f8e4m3|f8e5m2|all (float)\n"
             "  -r,--root R (0; -1 = every rank)  -a,--average 0|1|2|3 (1: mean)\n"
             "  -z,--blocking Z (ignored)  -T,--timeout SECONDS (0)  -t,--nthreads 1  -g,--ngpus 1\n"
             "  -G,--device host|cuda|hip[,...] (host; rank r takes entry r mod the count)\n"
             "  -h,--help\n");
}

/* -G: a comma list of host, cuda, hip. */
static bool parse_devices(const char *s) {
  static const char *const names[] = {[HC_MEM_HOST] = "host", [HC_MEM_CUDA] = "cuda", [HC_MEM_HIP] = "hip"};
  opt.ndevices = 0;
  for (const char *p = s; *p;) {
    size_t len = strcspn(p, ",");
    int kind = -1;
    for (int k = 0; k < (int)HC_ARRAY_LEN(names); k++)
      if (strlen(names[k]) == len && strncasecmp(p, names[k], len) == 0) kind = k;
    if (kind < 0 || opt.ndevices == (int)HC_ARRAY_LEN(opt.devices)) return false;
    opt.devices[opt.ndevices++] = (enum hc_mem_kind)kind;
    p += len + (p[len] == ',');
  }
  return opt.ndevices > 0;
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* Returns the collective, or exits: 0 after -h, 2 on a usage error. */
static const struct coll *parse_args(int argc, char **argv) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, NULL, 't'},
      {"ngpus", required_argument, NULL, 'g'},
      {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},
      {"stepbytes", required_argument, NULL, 'i'},
      {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'n'},
      {"agg_iters", required_argument, NULL, 'm'},
      {"warmup_iters", required_argument, NULL, 'w'},
      {"run_cycles", required_argument, NULL, 'N'},
      {"check", required_argument, NULL, 'c'},
      {"op", required_argument, NULL, 'o'},
      {"datatype", required_argument, NULL, 'd'},
      {"root", required_argument, NULL, 'r'},
      {"blocking", required_argument, NULL, 'z'},
      {"timeout", required_argument, NULL, 'T'},
      {"average", required_argument, NULL, 'a'},
      {"device", required_argument, NULL, 'G'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int c, idx;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:c:o:d:r:z:T:a:G:h", longopts, &idx)) != -1) {
    long v = 0;
    bool ok = true;
    switch (c) {
    case 'b': ok = hc_parse_size(optarg, &opt.min_bytes) == HC_OK; break;
    case 'e': ok = hc_parse_size(optarg, &opt.max_bytes) == HC_OK; break;
    case 'i': ok = hc_parse_size(optarg, &opt.step_bytes) == HC_OK; break;
    case 'f':
      ok = parse_long(optarg, 1, 1 << 20, &v);
      opt.step_factor = v;
      break;
    case 'n':
      ok = parse_long(optarg, 1, INT32_MAX, &v);
      opt.iters = (int)v;
      break;
    case 'w':
      ok = parse_long(optarg, 0, INT32_MAX, &v);
      opt.warmup_iters = (int)v;
      break;
    case 'm':
      ok = parse_long(optarg, 1, 1 << 20, &v);
      opt.agg_iters = (int)v;
      break;
    case 'N':
      ok = parse_long(optarg, 0, INT32_MAX, &v);
      opt.run_cycles = v;
      break;
    case 'c':
      ok = parse_long(optarg, 0, INT32_MAX, &v);
      opt.check = (int)v;
      break;
    case 'o': ok = nt_parse_op(optarg, &opt.op); break;
    case 'd': ok = nt_parse_dtype(optarg, &opt.dtype); break;
    case 'r':
      ok = parse_long(optarg, -1, INT32_MAX, &v);
      opt.root = (int)v;
      break;
    case 'a':
      ok = parse_long(optarg, 0, 3, &v);
      opt.average = (int)v;
      break;
    case 'z':
      ok = parse_long(optarg, 0, 3, &v);
      opt.blocking = (int)v;
      break;
    case 'T':
      ok = parse_long(optarg, 0, INT32_MAX, &v);
      opt.timeout_s = (int)v;
      break;
    case 'G':
      if (!parse_devices(optarg)) {
        fprintf(stderr,
                "hetccl-perf: -G %s: expected host, cuda or hip, or a comma list of them "
                "(nccl-tests' -G, CUDA graphs, is not supported)\n",
                optarg);
        exit(2);
      }
      break;
    case 't':
    case 'g':
      ok = parse_long(optarg, 1, 1, &v);
      if (!ok) {
        fprintf(stderr, "hetccl-perf: -%c %s: one rank per process; only 1 is supported\n", c, optarg);
        exit(2);
      }
      break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
    if (!ok) {
      fprintf(stderr, "hetccl-perf: invalid value '%s' for -%c\n", optarg, c);
      exit(2);
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "hetccl-perf: %s\n", optind >= argc ? "which collective?" : "one collective only");
    usage(stderr);
    exit(2);
  }
  const char *name = argv[optind];
  size_t len = strlen(name);
  if (len > 5 && strcmp(name + len - 5, "_perf") == 0) len -= 5; /* all_reduce_perf */
  const struct coll *coll = NULL;
  for (size_t i = 0; i < HC_ARRAY_LEN(colls); i++)
    if (strlen(colls[i].name) == len && strncmp(colls[i].name, name, len) == 0) coll = &colls[i];
  if (coll == NULL) {
    fprintf(stderr, "hetccl-perf: unknown collective '%s'\n", name);
    usage(stderr);
    exit(2);
  }
  if (opt.min_bytes > opt.max_bytes) {
    fprintf(stderr, "hetccl-perf: invalid sizes for 'minbytes' and 'maxbytes': %lld > %lld\n", (long long)opt.min_bytes,
            (long long)opt.max_bytes);
    exit(2);
  }
  if (opt.step_factor > 1 ? opt.min_bytes == 0 : opt.step_bytes == 0) {
    fprintf(stderr, "hetccl-perf: the sweep would never end (%s)\n",
            opt.step_factor > 1 ? "-b 0 with -f > 1" : "-i 0 with -f 1");
    exit(2);
  }
  return coll;
}

/* With -G: this rank's device (the host's GPU ranks take devices 0, 1, ...
 * in rank order), its buffers and stream, and the comm split off ctl with
 * that device in its config. Without: the host comm itself. */
static void setup_buffers(void) {
  long page = sysconf(_SC_PAGESIZE);
  B.buf_bytes = (size_t)HC_MAX(opt.max_bytes, 1);
  size_t alloc = HC_DIV_UP(B.buf_bytes, (size_t)page) * (size_t)page;
  if (posix_memalign((void **)&B.host_send, (size_t)page, alloc) != 0 ||
      posix_memalign((void **)&B.host_recv, (size_t)page, alloc) != 0) {
    fprintf(stderr, "hetccl-perf: rank %d: cannot allocate 2 x %zu bytes\n", B.rank, alloc);
    hetcclCommAbort(B.ctl);
    exit(1);
  }
  memset(B.host_send, 0, alloc); /* first touch outside the timed loops */
  memset(B.host_recv, 0, alloc);
  B.sendbuf = B.host_send, B.recvbuf = B.host_recv;
  B.comm = B.ctl;
  if (opt.ndevices == 0) return;

  const enum hc_mem_kind kind = opt.devices[B.rank % opt.ndevices];
  struct rank_info *all = gather_ranks();
  int gpu_ranks_before = 0; /* on this host */
  for (int r = 0; r < B.rank; r++)
    gpu_ranks_before += strcmp(all[r].host, all[B.rank].host) == 0 && opt.devices[r % opt.ndevices] != HC_MEM_HOST;
  free(all);
  hetcclConfig_t config = HETCCL_CONFIG_INITIALIZER;
  config.deviceKind = kind == HC_MEM_CUDA ? hetcclDeviceCuda : kind == HC_MEM_HIP ? hetcclDeviceHip : hetcclDeviceHost;
  if (kind != HC_MEM_HOST) {
    B.gpu = hc_dev_get(kind);
    int count = hc_dev_caps(kind).device_count;
    if (B.gpu == NULL || count < 1) {
      const char *why = hc_dev_absent_reason(kind);
      fprintf(stderr, "hetccl-perf: rank %d: -G %s: no %s device: %s\n", B.rank, kind_name(kind), kind_name(kind),
              why && why[0] ? why : "none found");
      hetcclCommAbort(B.ctl);
      exit(1);
    }
    B.device = gpu_ranks_before % count;
    config.deviceId = B.device;
    DEV_CHECK(hc_dev_set_device(B.gpu, B.device), "set device");
    DEV_CHECK(hc_dev_stream_create(B.gpu, B.device, &B.stream), "stream create");
    DEV_CHECK(hc_dev_mem_alloc(B.gpu, B.device, alloc, (void **)&B.sendbuf), "device allocation");
    DEV_CHECK(hc_dev_mem_alloc(B.gpu, B.device, alloc, (void **)&B.recvbuf), "device allocation");
  }
  CHECK(hetcclCommSplit(B.ctl, 0, B.rank, &B.comm, &config), "hetcclCommSplit");
}

static void teardown(void) {
  if (B.comm != B.ctl) CHECK(hetcclCommDestroy(B.comm), "hetcclCommDestroy");
  B.comm = NULL;
  if (B.gpu) {
    DEV_CHECK(hc_dev_mem_free(B.gpu, B.device, B.sendbuf), "device free");
    DEV_CHECK(hc_dev_mem_free(B.gpu, B.device, B.recvbuf), "device free");
    DEV_CHECK(hc_dev_stream_destroy(B.gpu, B.stream), "stream destroy");
  }
  CHECK(hetcclCommDestroy(B.ctl), "hetcclCommDestroy");
  B.ctl = NULL;
  free(B.host_send);
  free(B.host_recv);
}

int main(int argc, char **argv) {
  setlinebuf(stdout);
  B.coll = parse_args(argc, argv);
  B.rank = -1;
  arm_timeout();
  CHECK(hetcclCommInitFromEnv(&B.ctl, NULL), "hetcclCommInitFromEnv");
  CHECK(hetcclCommUserRank(B.ctl, &B.rank), "hetcclCommUserRank");
  CHECK(hetcclCommCount(B.ctl, &B.n), "hetcclCommCount");
  if (opt.root >= B.n) {
    if (B.rank == 0) fprintf(stderr, "hetccl-perf: root %d does not exist among %d ranks\n", opt.root, B.n);
    hetcclCommDestroy(B.ctl);
    return 2;
  }
  setup_buffers();
  print_banner(B.coll->name);

  /* nccl-tests' order: datatypes, then ops, then roots. */
  int dt_first = opt.dtype < 0 ? 0 : opt.dtype, dt_last = opt.dtype < 0 ? HC_DTYPE_COUNT - 1 : opt.dtype;
  int op_first = opt.op < 0 ? 0 : opt.op, op_last = opt.op < 0 ? HC_REDOP_COUNT - 1 : opt.op;
  if (!B.coll->reduces) op_first = op_last = NO_OP;
  int root_first = opt.root < 0 ? 0 : opt.root, root_last = opt.root < 0 ? B.n - 1 : opt.root;
  if (!B.coll->rooted) root_first = root_last = NO_ROOT;
  for (int dt = dt_first; dt <= dt_last; dt++)
    for (int op = op_first; op <= op_last; op++)
      for (int root = root_first; root <= root_last; root++) time_test((enum hc_dtype)dt, op, root);

  uint64_t errors = sum_over_ranks(B.halves_wrong);
  alarm(0);
  if (B.rank == 0) {
    printf("# %-20s : %d %s\n", "Out of bounds values", (int)errors, errors ? "FAILED" : "OK");
    printf("# %-20s : %g %s\n", "Avg bus bandwidth", B.bw_rows ? B.bw_sum / (double)B.bw_rows : 0.0, "");
    printf("#\n# Collective test concluded: hetccl-perf %s\n#\n", B.coll->name);
    const char *err = hetcclGetLastError(NULL);
    if (err != NULL && *err) printf("# error: %s\n", err);
    else printf("\n");
  }
  teardown();
  return errors ? 1 : 0;
}
