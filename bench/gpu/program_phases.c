/*
 * Where a small GPU program's time goes (device.h: hc_dev_program), on one
 * GPU. Each variant is enqueued alone on an idle stream and timed from the
 * call until the stream is seen done (synchronise); the call's own host
 * time is printed beside it. A variant adds one kind of op to the one
 * before, so the differences between rows are the phases:
 *   - a 4-byte device -> device copy: a launch and an empty-ish kernel;
 *   - the same 4 bytes into pinned host memory (the peer's window slot);
 *   - then 1 and 5 counter writes (each a system fence and a store), and
 *     4 relaxed writes (no fence) before 1;
 *   - then a wait already met and a trap check (reads of host memory);
 *   - then a 1-element reduction reading the slot in host memory;
 *   - the whole program of one rank of a 4-byte cross-group all-reduce
 *     (exec/enqueue.c: copy, 2 relaxed writes (the signature words) and
 *     filled, wait, trap check, reduce, freed, the lane counter);
 *   - the same program with the vector in LL form (device.h): an LL put
 *     instead of the copy, an LL get into device memory instead of the
 *     wait, the trap check and the read of the slot.
 * Then the exchange itself: two threads, one stream each, each enqueues
 * that program at once (after a barrier) with its wait on the peer's
 * counter, as gpu_bench A's two ranks do, with no hetccl host work around
 * it; then the same in LL form. Each must end with 1 + 2 in both outputs,
 * else the exit status is 1
 * (the test bench_program_phases_fake_cuda runs this over the fake driver).
 * Medians of N samples, us. Exits 77 where there is no CUDA device or
 * its kernels cannot read host memory (then programs run as separate
 * stream operations and there is nothing of a kernel's to time).
 *   program_phases
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "timing.h"
#include "util/util.h"

enum { N = 400, WARMUP = 20 };

static const struct hc_dev_ops *gpu;

/* Counters: one rank's view of the window (written by its program or its
 * peer's), and the trap word that is never set here. */
enum { SIG0, SIG1, FILLED, FREED, LANE, NCOUNTERS };
struct rank_mem {
  volatile uint64_t *counter; /* pinned host, NCOUNTERS words */
  float *slot;                /* pinned host: where the peer puts its vector */
  uint64_t *ll;               /* pinned host: where the peer puts it in LL form */
  float *in, *out, *got;      /* device; got: the peer's vector out of ll */
};
static volatile uint64_t *trap_word;

static struct hc_dev_program_op op_copy(void *dst, const void *src, size_t n) {
  return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_COPY, .n = n, .dst = dst, .src0 = src};
}
static struct hc_dev_program_op op_write(volatile uint64_t *dst, uint64_t v) {
  return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_WRITE, .n = v, .dst = (void *)dst};
}
static struct hc_dev_program_op op_write_relaxed(volatile uint64_t *dst, uint64_t v) {
  return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_WRITE_RELAXED, .n = v, .dst = (void *)dst};
}
static struct hc_dev_program_op op_wait(volatile uint64_t *src, uint64_t v) {
  return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_WAIT, .n = v, .src0 = (const void *)src};
}
static struct hc_dev_program_op op_reduce(float *dst, const float *a, const float *b, size_t n) {
  return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_REDUCE, .n = n, .dst = dst, .src0 = a, .src1 = b};
}

/* One rank's program of the 4-byte all-reduce for call number seq: its
 * vector into the peer's slot, the signature words and filled on the
 * peer's side, the wait for its own filled, the reduction from its slot,
 * freed and the lane counter. */
static struct hc_dev_program exchange_program(struct rank_mem *self, struct rank_mem *peer, uint64_t seq) {
  struct hc_dev_program p = {.args.trap = trap_word, .dtype = HC_FLOAT32, .redop = HC_SUM};
  p.args.op[p.args.nops++] = op_copy(peer->slot, self->in, sizeof(float));
  p.args.op[p.args.nops++] = op_write_relaxed(&peer->counter[SIG0], seq);
  p.args.op[p.args.nops++] = op_write_relaxed(&peer->counter[SIG1], seq);
  p.args.op[p.args.nops++] = op_write(&peer->counter[FILLED], seq);
  p.args.op[p.args.nops++] = op_wait(&self->counter[FILLED], seq);
  p.args.op[p.args.nops++] = (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_TRAP_CHECK};
  p.args.op[p.args.nops++] = op_reduce(self->out, self->in, self->slot, 1);
  p.args.op[p.args.nops++] = op_write(&peer->counter[FREED], seq);
  p.args.op[p.args.nops++] = op_write(&self->counter[LANE], seq);
  return p;
}

/* The same all-reduce with the vector in LL form (device.h), in the order
 * hetccl enqueues it: one 8-byte store of data and flag, the signature
 * words and filled as before (no GPU waits on them), one read of the
 * peer's word into device memory, freed as a relaxed write (it follows
 * only reads), the reduction from device memory, the lane counter. */
static struct hc_dev_program exchange_program_ll(struct rank_mem *self, struct rank_mem *peer, uint64_t seq) {
  struct hc_dev_program p = {.args.trap = trap_word, .dtype = HC_FLOAT32, .redop = HC_SUM};
  p.args.op[p.args.nops++] = (struct hc_dev_program_op){
      .kind = HC_DEV_PROGRAM_LL_PUT, .n = sizeof(float), .dst = peer->ll, .src0 = self->in, .flag = seq};
  p.args.op[p.args.nops++] = op_write_relaxed(&peer->counter[SIG0], seq);
  p.args.op[p.args.nops++] = op_write_relaxed(&peer->counter[SIG1], seq);
  p.args.op[p.args.nops++] = op_write(&peer->counter[FILLED], seq);
  p.args.op[p.args.nops++] = (struct hc_dev_program_op){
      .kind = HC_DEV_PROGRAM_LL_GET, .n = sizeof(float), .dst = self->got, .src0 = self->ll, .flag = seq};
  p.args.op[p.args.nops++] = op_write_relaxed(&peer->counter[FREED], seq);
  p.args.op[p.args.nops++] = op_reduce(self->out, self->in, self->got, 1);
  p.args.op[p.args.nops++] = op_write(&self->counter[LANE], seq);
  return p;
}

/* The single-stream ladder (see the header): each rung is the one before
 * it and one kind of op more. */
static const struct rung {
  const char *name;
  bool to_host;        /* the copy into the slot in pinned host memory, else device memory */
  int relaxed, writes; /* counter writes after the copy, the relaxed ones first */
  bool wait;           /* then a wait already met and a trap check */
  bool reduce;         /* then a 1-element reduction from the slot */
  bool whole;          /* instead, one rank's whole all-reduce program */
  bool ll;             /* that program in LL form */
} rungs[] = {
    {"4 B copy device -> device", false, 0, 0, false, false, false},
    {"4 B copy device -> pinned host", true, 0, 0, false, false, false},
    {"  + 1 counter write", true, 0, 1, false, false, false},
    {"  + 5 counter writes", true, 0, 5, false, false, false},
    {"  + 4 relaxed writes and 1 write", true, 4, 1, false, false, false},
    {"  + 5 writes, a met wait, a trap check", true, 0, 5, true, false, false},
    {"  + that, and a 1-element reduction from host", true, 0, 5, true, true, false},
    {"one rank's all-reduce program, its wait met", true, 0, 0, false, false, true, false},
    {"the same in LL form, its words there", true, 0, 0, false, false, true, true},
};

static struct hc_dev_program rung_program(const struct rung *g, struct rank_mem *r, uint64_t seq) {
  if (g->whole) {
    r->counter[FILLED] = seq; /* as though the peer had written it */
    return g->ll ? exchange_program_ll(r, r, seq) : exchange_program(r, r, seq);
  }
  struct hc_dev_program p = {.args.trap = trap_word, .dtype = HC_FLOAT32, .redop = HC_SUM};
  p.args.op[p.args.nops++] = op_copy(g->to_host ? r->slot : r->out, r->in, sizeof(float));
  for (int w = 0; w < g->relaxed + g->writes; w++)
    p.args.op[p.args.nops++] = w < g->relaxed ? op_write_relaxed(&r->counter[w], seq) : op_write(&r->counter[w], seq);
  if (g->wait) {
    p.args.op[p.args.nops++] = op_wait(&r->counter[0], seq);
    p.args.op[p.args.nops++] = (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_TRAP_CHECK};
  }
  if (g->reduce) p.args.op[p.args.nops++] = op_reduce(r->out, r->in, r->slot, 1);
  return p;
}

static bool rank_mem_alloc(struct rank_mem *r) {
  memset(r, 0, sizeof(*r));
  if (hc_dev_host_alloc(gpu, NCOUNTERS * sizeof(uint64_t), (void **)&r->counter) != HC_OK ||
      hc_dev_host_alloc(gpu, 64, (void **)&r->slot) != HC_OK || hc_dev_host_alloc(gpu, 64, (void **)&r->ll) != HC_OK ||
      hc_dev_mem_alloc(gpu, 0, 64, (void **)&r->in) != HC_OK ||
      hc_dev_mem_alloc(gpu, 0, 64, (void **)&r->out) != HC_OK ||
      hc_dev_mem_alloc(gpu, 0, 64, (void **)&r->got) != HC_OK)
    return false;
  memset((void *)r->counter, 0, NCOUNTERS * sizeof(uint64_t));
  memset(r->ll, 0, 64);
  return true;
}
static void rank_mem_free(struct rank_mem *r) {
  hc_dev_host_free(gpu, (void *)r->counter);
  hc_dev_host_free(gpu, r->slot);
  hc_dev_host_free(gpu, r->ll);
  hc_dev_mem_free(gpu, 0, r->in);
  hc_dev_mem_free(gpu, 0, r->got);
  hc_dev_mem_free(gpu, 0, r->out);
}

static bool ladder(struct rank_mem *r, hc_stream_t s) {
  printf("%-48s %12s %10s\n", "one stream, one program at a time", "call->done", "the call");
  uint64_t seq = 0;
  for (size_t v = 0; v < HC_ARRAY_LEN(rungs); v++) {
    double done[N], call[N];
    for (int i = -WARMUP; i < N; i++) {
      const struct hc_dev_program p = rung_program(&rungs[v], r, ++seq);
      const double t0 = now_us();
      if (hc_dev_program(gpu, &p, s) != HC_OK) {
        printf("%s: hc_dev_program failed\n", rungs[v].name);
        return false;
      }
      const double t1 = now_us();
      hc_dev_stream_sync(gpu, s);
      if (i >= 0) call[i] = t1 - t0, done[i] = now_us() - t0;
    }
    printf("%-48s %12.1f %10.1f\n", rungs[v].name, median(done, N), median(call, N));
  }
  return true;
}

/* The two-thread exchange: each thread's rank, stream and samples. */
static struct exchange {
  pthread_barrier_t bar;
  struct rank_mem mem[2];
  hc_stream_t stream[2];
  double done[2][N], call[2][N];
  atomic_bool failed;
  bool ll; /* exchange_program_ll, else exchange_program */
} ex;

static void *exchange_rank(void *arg) {
  const int r = (int)(long)arg;
  hc_dev_set_device(gpu, 0);
  for (int i = -WARMUP; i < N; i++) {
    const uint64_t seq = (uint64_t)(i + WARMUP + 1);
    struct hc_dev_program p = ex.ll ? exchange_program_ll(&ex.mem[r], &ex.mem[1 - r], seq)
                                    : exchange_program(&ex.mem[r], &ex.mem[1 - r], seq);
    pthread_barrier_wait(&ex.bar);
    const double t0 = now_us();
    if (hc_dev_program(gpu, &p, ex.stream[r]) != HC_OK) atomic_store(&ex.failed, true);
    const double t1 = now_us();
    hc_dev_stream_sync(gpu, ex.stream[r]);
    if (i >= 0) ex.call[r][i] = t1 - t0, ex.done[r][i] = now_us() - t0;
  }
  return NULL;
}

static bool exchange(bool ll) {
  ex.ll = ll;
  for (int r = 0; r < 2; r++) {
    memset((void *)ex.mem[r].counter, 0, NCOUNTERS * sizeof(uint64_t));
    memset(ex.mem[r].ll, 0, 64);
    const float v = (float)(r + 1);
    const float zero = 0;
    hc_dev_copy(gpu, ex.mem[r].out, &zero, sizeof(zero), ex.stream[r]);
    hc_dev_copy(gpu, ex.mem[r].in, &v, sizeof(v), ex.stream[r]);
    hc_dev_stream_sync(gpu, ex.stream[r]);
  }
  pthread_barrier_init(&ex.bar, NULL, 2);
  pthread_t t[2];
  for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, exchange_rank, (void *)r);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  pthread_barrier_destroy(&ex.bar);
  float sum[2] = {0, 0};
  for (int r = 0; r < 2; r++) {
    hc_dev_copy(gpu, &sum[r], ex.mem[r].out, sizeof(float), ex.stream[r]);
    hc_dev_stream_sync(gpu, ex.stream[r]);
  }
  if (atomic_load(&ex.failed) || sum[0] != 3.0f || sum[1] != 3.0f) {
    printf("exchange%s: failed (sums %g and %g, not 1 + 2)\n", ll ? " in LL form" : "", sum[0], sum[1]);
    return false;
  }
  printf("\n%-48s %12s %10s\n", ll ? "two threads, two streams, at once, LL form" : "two threads, two streams, at once",
         "call->done", "the call");
  for (int r = 0; r < 2; r++)
    printf("rank %d: the all-reduce program, waiting on its peer %9.1f %10.1f\n", r, median(ex.done[r], N),
           median(ex.call[r], N));
  return true;
}

int main(void) {
  gpu = hc_dev_get(HC_MEM_CUDA);
  const struct hc_dev_caps caps = hc_dev_caps(HC_MEM_CUDA);
  if (gpu == NULL || caps.device_count < 1) {
    printf("program_phases: no CUDA device\n");
    return 77;
  }
  hc_dev_set_device(gpu, 0);
  if (!caps.runtime_compile || !caps.reduce_reads_host) {
    printf("program_phases: this device's kernels do not read host memory; programs run as stream operations\n");
    return 77;
  }
  hc_stream_t s;
  if (hc_dev_host_alloc(gpu, sizeof(uint64_t), (void **)&trap_word) != HC_OK ||
      hc_dev_stream_create(gpu, 0, &s) != HC_OK || !rank_mem_alloc(&ex.mem[0]) || !rank_mem_alloc(&ex.mem[1]) ||
      hc_dev_stream_create(gpu, 0, &ex.stream[0]) != HC_OK || hc_dev_stream_create(gpu, 0, &ex.stream[1]) != HC_OK) {
    printf("program_phases: setup failed\n");
    return 1;
  }
  *trap_word = 0;
  bool ok = ladder(&ex.mem[0], s);
  ok = ok && exchange(false) && exchange(true);
  for (int r = 0; r < 2; r++) {
    hc_dev_stream_destroy(gpu, ex.stream[r]);
    rank_mem_free(&ex.mem[r]);
  }
  hc_dev_stream_destroy(gpu, s);
  hc_dev_host_free(gpu, (void *)trap_word);
  return ok ? 0 : 1;
}
