/*
 * GPU memory straight to the NIC, shown over the fake drivers: a comm of 2
 * groups x 2 GPUs on 2 "hosts" (HETCCL_FAKE_HOSTS=0,0,1,1: ranks 0 and 1,
 * group a, on host 0; ranks 2 and 3, group b, on host 1; each group on
 * devices 0 and 1, so each runs the fake NCCL inside), ranks as threads
 * over the fake libcuda, the fake NCCL and the fake libibverbs
 * (tests/ib/fake_verbs.c), the hosts joined by ib.
 *
 * Per call (all-reduce, send/recv between hosts, FSDP's all-gather and
 * reduce-scatter, MoE's all-to-all and all-to-all-v, a small all-reduce)
 * the results are compared bitwise with the test's own, and the drivers'
 * counters say how the bytes between the hosts went, which must be
 * exactly the bytes that have to cross (each group's data once to the
 * other group: test_plan_groups proves the plans cross no more):
 *   GDR_TEST_EXPECT=direct  every byte between the hosts is an RDMA write
 *                           from GPU memory into GPU memory (registered
 *                           through dma-buf), and no byte is copied between
 *                           GPU memory and pinned host memory (staging);
 *   GDR_TEST_EXPECT=staged  (HETCCL_GDR=STAGE, or an adapter that refuses
 *                           dma-buf) every byte between the hosts goes
 *                           pinned slot to pinned slot, copied out of GPU
 *                           memory and back in by the GPU, and no GPU
 *                           memory is ever registered.
 *   GDR_TEST_EXPECT=peermem as direct, with every GPU registration made
 *                           by ibv_reg_mr (the adapter refuses dma-buf,
 *                           FAKE_VERBS_DMABUF=0, and a peer-memory module
 *                           is loaded: the test makes a sysfs tree with
 *                           module/nvidia_peermem, HETCCL_SYSFS_ROOT).
 * Messages of at most HETCCL_IB_EAGER_BYTES (the small send/recv and
 * all-reduce) go GPU to GPU too where GPU memory is registered: the GPU
 * copies each into a slot of device scratch and out of one (device to
 * device), and no byte of them is in host memory; staged otherwise. At
 * the end the fake verbs' log (FAKE_VERBS_LOG) is read back against the
 * counters: in the direct modes, the only RDMA writes between host memory
 * are the transport's own records (clear-to-send, 48 bytes; credits, 0),
 * never a message. The GPU flush (net/ib's "flush"): per call, flush
 * reads (RDMA reads of GPU memory through a loopback queue pair) where
 * bytes landed in GPU memory over the NIC, none when staged or under
 * HETCCL_GDR_FLUSH=0, and no other RDMA read; in the log, every flush
 * reads a byte that a write with immediate into GPU memory landed on
 * since the last flush of that byte (none flushes memory nothing wrote,
 * none twice). Exits 77 unless the fake drivers are there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/device.h"
#include "gpu_rank_mem.h"
#include "testutil.h"

enum { NRANKS = 4, GROUP = 2 };
static const int device_of[NRANKS] = {0, 1, 0, 1};
static const struct hc_dev_ops *gpu;
static bool expect_direct;
static bool expect_peermem; /* direct, registered through the peer-memory module instead of dma-buf */

static long long (*verbs_bytes)(const char *src, const char *dst);
static long long (*verbs_regs)(const char *mem, int dmabuf);
static long long (*cuda_copied)(const char *src, const char *dst);
static long long (*verbs_reads)(const char *src, int loopback);
static bool flush_on; /* HETCCL_GDR_FLUSH and FAKE_CUDA_CC */

/* How the bytes of one call went, all ranks together. */
struct paths {
  long long direct;                 /* RDMA writes GPU memory -> GPU memory */
  long long via_pinned;             /* RDMA writes pinned -> pinned (staged) */
  long long other;                  /* RDMA writes between GPU and host memory (must not happen) */
  long long to_pinned, from_pinned; /* GPU copies GPU memory <-> pinned host memory */
  long long dev_regs;               /* registrations of GPU memory (dma-buf or not) */
  long long dev_copied; /* GPU copies GPU memory -> GPU memory (slots of device scratch, and the vendor's) */
  long long flushes;    /* RDMA reads of GPU memory through a loopback queue pair */
  long long reads;      /* all RDMA reads */
};
static struct paths now(void) {
  return (struct paths){.direct = verbs_bytes("device", "device"),
                        .via_pinned = verbs_bytes("pinned", "pinned"),
                        .other = verbs_bytes("device", "pinned") + verbs_bytes("pinned", "device") +
                                 verbs_bytes("device", "host") + verbs_bytes("host", "device"),
                        .to_pinned = cuda_copied("device", "pinned"),
                        .from_pinned = cuda_copied("pinned", "device"),
                        .dev_regs = verbs_regs("device", 0) + verbs_regs("device", 1),
                        .dev_copied = cuda_copied("device", "device"),
                        .flushes = verbs_reads("device", 1),
                        .reads = verbs_reads("device", 1) + verbs_reads("device", 0) + verbs_reads("pinned", 1) +
                                 verbs_reads("pinned", 0) + verbs_reads("host", 1) + verbs_reads("host", 0)};
}
/* Rank 0 reads the counters once every rank is between calls. */
static struct paths snapshot(void) {
  tu_barrier();
  struct paths p = tu_rank() == 0 ? now() : (struct paths){0};
  tu_barrier();
  return p;
}

/* After a call whose cross-host bytes are `cross` (all ranks together) and
 * whose every rank has synchronised its stream: did they go the expected
 * way? small: messages of at most the eager size, which go through the
 * eager ring when staged (host memory, not pinned slots); cross 0: a flat
 * all-reduce whose volume is another, so only the kinds are checked. */
static void expect_paths(struct paths before, long long cross, bool small, const char *what) {
  tu_barrier();
  if (tu_rank() == 0) {
    struct paths a = now();
    long long direct = a.direct - before.direct, pinned = a.via_pinned - before.via_pinned;
    long long out = a.to_pinned - before.to_pinned, in = a.from_pinned - before.from_pinned;
    printf("%s: %lld bytes between hosts: %lld GPU -> NIC -> GPU, %lld through pinned slots (GPU copies %lld out, "
           "%lld in); %lld GPU registrations so far; %lld flush reads\n",
           what, cross, direct, pinned, out, in, a.dev_regs, a.flushes - before.flushes);
    CHECK(a.other == before.other, "%s: %lld bytes went between GPU and host memory over the NIC", what,
          a.other - before.other);
    long long flushes = a.flushes - before.flushes;
    CHECK(a.reads - before.reads == flushes, "%s: %lld RDMA reads other than GPU flushes", what,
          a.reads - before.reads - flushes);
    CHECK(direct > 0 && flush_on ? flushes > 0 : flushes == 0,
          "%s: %lld flush reads with %lld bytes GPU to GPU over the NIC (HETCCL_GDR_FLUSH=%d)", what, flushes, direct,
          flush_on);
    if (small && expect_direct) { /* GPU to GPU through slots of device scratch, none through host memory */
      CHECK(cross ? direct == cross : direct > 0, "%s: %lld bytes GPU to GPU over the NIC, expected %lld", what, direct,
            cross);
      CHECK(pinned == 0 && out == 0 && in == 0 && a.dev_copied > before.dev_copied,
            "%s: %lld bytes through pinned slots, GPU copies %lld out to pinned memory, %lld in, %lld device to "
            "device",
            what, pinned, out, in, a.dev_copied - before.dev_copied);
    } else if (small) { /* none of it direct, all copied out of GPU memory and back */
      CHECK(direct == 0 && (cross ? out == cross && in == cross : out > 0 && in > 0),
            "%s: %lld bytes GPU to GPU over the NIC, %lld + %lld copied", what, direct, out, in);
    } else if (expect_direct) {
      CHECK(direct == cross, "%s: %lld bytes GPU to GPU over the NIC, expected all %lld", what, direct, cross);
      CHECK(pinned == 0 && out == 0 && in == 0, "%s: %lld bytes through pinned slots, %lld + %lld copied", what, pinned,
            out, in);
      CHECK(a.dev_regs > 0, "%s: no GPU memory registered", what);
    } else {
      CHECK(pinned == cross, "%s: %lld bytes through pinned slots, expected all %lld", what, pinned, cross);
      CHECK(direct == 0, "%s: %lld bytes GPU to GPU over the NIC, expected none", what, direct);
      CHECK(out == cross && in == cross, "%s: GPU copies %lld bytes out and %lld in, expected %lld each", what, out, in,
            cross);
      if (!expect_direct) CHECK(a.dev_regs == 0, "%s: %lld GPU registrations while staging", what, a.dev_regs);
    }
  }
  tu_barrier();
}

static void allreduce(hetcclComm_t comm, struct rank_mem *m, size_t count, const char *what) {
  const enum hc_dtype t = HC_FLOAT32;
  const size_t es = 4;
  uint8_t *host = malloc(count * es), *expect = malloc(count * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("%s", what);
  struct tu_red red = {t, HC_SUM, NRANKS, 11};
  tu_red_fill(&red, tu_rank(), 0, count, host);
  put(m, m->send, host, count * es);
  struct paths before = snapshot();
  CHECK_OK(hetcclAllReduce(m->send, m->recv, count, hetcclFloat, hetcclSum, comm, m->stream));
  get(m, host, m->recv, count * es);
  for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, expect + i * es);
  tu_compare(t, host, expect, count, what);
  /* Each group's sum goes once to the other group, cut among its ranks. */
  const bool small = count * es < 65536;
  expect_paths(before, small ? 0 : (long long)(NRANKS / GROUP * count * es), small, what);
out:
  free(host);
  free(expect);
}

/* Pipeline stages on two hosts: rank r and rank r ^ 2 swap activations
 * of count int32s. */
static void sendrecv(hetcclComm_t comm, struct rank_mem *m, size_t count, const char *what) {
  const size_t es = 4;
  uint8_t *host = malloc(count * es), *expect = malloc(count * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("%s", what);
  tu_data_fill(HC_INT32, 9, tu_rank(), 0, count, host);
  put(m, m->send, host, count * es);
  const int peer = tu_rank() ^ 2;
  struct paths before = snapshot();
  CHECK_OK(hetcclGroupStart());
  CHECK_OK(hetcclSend(m->send, count, hetcclInt32, peer, comm, m->stream));
  CHECK_OK(hetcclRecv(m->recv, count, hetcclInt32, peer, comm, m->stream));
  CHECK_OK(hetcclGroupEnd());
  get(m, host, m->recv, count * es);
  tu_data_fill(HC_INT32, 9, peer, 0, count, expect);
  tu_compare(HC_INT32, host, expect, count, what);
  const long long cross = (long long)(NRANKS * count * es);
  struct paths copies = snapshot();
  const bool small = count * es <= 8192;
  expect_paths(before, cross, small, what);
  if (tu_rank() == 0 && small) {
    /* Below the eager size: in the direct modes, each message copied on
     * the GPU into a slot of device scratch by its sender and out of one
     * by its receiver, device to device, and nothing else. */
    long long dd = copies.dev_copied - before.dev_copied;
    printf("%s: %lld bytes copied device to device by the GPUs\n", what, dd);
    CHECK(dd == (expect_direct ? 2 * cross : 0), "%s: %lld bytes copied device to device, expected %lld", what, dd,
          expect_direct ? 2 * cross : 0);
  }
out:
  free(host);
  free(expect);
}

static void fsdp(hetcclComm_t comm, struct rank_mem *m) {
  const enum hc_dtype t = HC_FLOAT32;
  const size_t es = 4, shard = 65536 + 5, full = shard * NRANKS;
  uint8_t *host = malloc(full * es), *expect = malloc(full * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("FSDP all-gather");
  tu_data_fill(t, 21, tu_rank(), 0, shard, host);
  put(m, m->send, host, shard * es);
  struct paths before = snapshot();
  CHECK_OK(hetcclAllGather(m->send, m->recv, shard, hetcclFloat, comm, m->stream));
  get(m, host, m->recv, full * es);
  for (int s = 0; s < NRANKS; s++) tu_data_fill(t, 21, s, 0, shard, expect + (size_t)s * shard * es);
  tu_compare(t, host, expect, full, "FSDP all-gather");
  /* Every shard once to the other group. */
  expect_paths(before, (long long)(NRANKS * shard * es), false, "FSDP all-gather");

  tu_set_case("FSDP reduce-scatter");
  struct tu_red red = {t, HC_SUM, NRANKS, 22};
  tu_red_fill(&red, tu_rank(), 0, full, host);
  put(m, m->send, host, full * es);
  before = snapshot();
  CHECK_OK(hetcclReduceScatter(m->send, m->recv, shard, hetcclFloat, hetcclSum, comm, m->stream));
  get(m, host, m->recv, shard * es);
  for (size_t i = 0; i < shard; i++) tu_red_expect(&red, (size_t)tu_rank() * shard + i, expect + i * es);
  tu_compare(t, host, expect, shard, "FSDP reduce-scatter");
  /* Each group's partial sums of the other group's shards, once. */
  expect_paths(before, (long long)(NRANKS * shard * es), false, "FSDP reduce-scatter");
out:
  free(host);
  free(expect);
}

static void moe(hetcclComm_t comm, struct rank_mem *m) {
  const enum hc_dtype t = HC_BFLOAT16;
  const int rank = tu_rank();
  const size_t es = 2, block = 40999, full = block * NRANKS;
  uint8_t *host = malloc(full * es * 4), *expect = malloc(full * es * 4);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("MoE all-to-all");
  tu_data_fill(t, 7, rank, 0, full, host);
  put(m, m->send, host, full * es);
  struct paths before = snapshot();
  CHECK_OK(hetcclAlltoAll(m->send, m->recv, block, hetcclBfloat16, comm, m->stream));
  get(m, host, m->recv, full * es);
  for (int s = 0; s < NRANKS; s++) tu_data_fill(t, 7, s, (size_t)rank * block, block, expect + (size_t)s * block * es);
  tu_compare(t, host, expect, full, "MoE all-to-all");
  /* Each rank's blocks for the other host's two ranks. */
  expect_paths(before, (long long)(NRANKS * (NRANKS - GROUP) * block * es), false, "MoE all-to-all");

  /* Uneven: rank s sends (s + 1) * (d + 1) * 3000 elements to rank d (each
   * block more than the eager size). */
  tu_set_case("MoE all-to-all-v");
  size_t sc[NRANKS], sd[NRANKS], rc[NRANKS], rd[NRANKS], stot = 0, rtot = 0;
  for (int d = 0; d < NRANKS; d++) {
    sc[d] = (size_t)(rank + 1) * (size_t)(d + 1) * 3000, sd[d] = stot, stot += sc[d];
    rc[d] = (size_t)(d + 1) * (size_t)(rank + 1) * 3000, rd[d] = rtot, rtot += rc[d];
  }
  long long cross = 0;
  for (int s = 0; s < NRANKS; s++)
    for (int d = 0; d < NRANKS; d++)
      if (s / GROUP != d / GROUP) cross += (long long)((s + 1) * (d + 1) * 3000) * (long long)es;
  tu_data_fill(t, 8, rank, 0, stot, host);
  put(m, m->send, host, stot * es);
  before = snapshot();
  CHECK_OK(hetcclAlltoAllv(m->send, sc, sd, m->recv, rc, rd, hetcclBfloat16, comm, m->stream));
  get(m, host, m->recv, rtot * es);
  for (int s = 0; s < NRANKS; s++) {
    size_t first = 0;
    for (int d = 0; d < rank; d++) first += (size_t)(s + 1) * (size_t)(d + 1) * 3000;
    tu_data_fill(t, 8, s, first, rc[s], expect + rd[s] * es);
  }
  tu_compare(t, host, expect, rtot, "MoE all-to-all-v");
  expect_paths(before, cross, false, "MoE all-to-all-v");
out:
  free(host);
  free(expect);
}

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  struct rank_mem m;
  hetcclComm_t comm;
  if (!rank_comm_open(&m, gpu, device_of[rank], 4u << 20, rank < GROUP ? "a" : "b", n, id, rank, &comm)) return 1;
  if (rank == 0) { /* hetccl has loaded both fakes now */
    void *verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD),
         *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (verbs) {
      *(void **)&verbs_bytes = dlsym(verbs, "fake_verbs_bytes");
      *(void **)&verbs_regs = dlsym(verbs, "fake_verbs_regs");
      *(void **)&verbs_reads = dlsym(verbs, "fake_verbs_reads");
      dlclose(verbs);
    }
    if (cuda) {
      *(void **)&cuda_copied = dlsym(cuda, "fake_cuda_copied");
      dlclose(cuda);
    }
  }
  tu_barrier();
  if (!verbs_bytes || !verbs_regs || !verbs_reads || !cuda_copied) {
    CHECK(rank != 0, "the fake libibverbs and libcuda are not both loaded (LD_LIBRARY_PATH, HETCCL_NET=IB)");
    hetcclCommDestroy(comm);
    return 1;
  }
  allreduce(comm, &m, 262147, "all-reduce");
  sendrecv(comm, &m, 300007, "send/recv between hosts");
  sendrecv(comm, &m, 1000, "small send/recv between hosts (eager size)");
  fsdp(comm, &m);
  moe(comm, &m);
  allreduce(comm, &m, 65536 + 3, "all-reduce, 2 x 128 KiB across");
  allreduce(comm, &m, 3000, "small all-reduce (eager size)");
  tu_barrier();
  CHECK_OK(hetcclCommDestroy(comm));
  rank_mem_close(&m);
  return 0;
}

/* The fake verbs' log (FAKE_VERBS_LOG), read back once the comms are
 * gone: every registration of GPU memory went through dma-buf (direct),
 * through ibv_reg_mr (peer memory) or none was made (staged), and the RDMA
 * writes it lists from GPU memory into GPU memory add up to what its
 * counters said, with every GPU registration deregistered again. In the
 * direct modes no message went through host memory: a write between host
 * memories is a clear-to-send record (48 bytes) or a credit (none), never
 * an eager message (16 bytes of signature and its payload). */
/* Ranges of GPU memory a write with immediate landed in, not flushed
 * since. */
struct landed {
  uintptr_t *start, *end;
  size_t n, cap;
};
static void landed_add(struct landed *l, uintptr_t start, size_t len) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->start = realloc(l->start, l->cap * sizeof(*l->start));
    l->end = realloc(l->end, l->cap * sizeof(*l->end));
    if (!CHECK(l->start && l->end, "out of memory")) exit(1);
  }
  l->start[l->n] = start;
  l->end[l->n++] = start + len;
}
/* A flush of the byte at a: whether something landed on it since its
 * last flush (those landings are flushed now). */
static bool landed_flush(struct landed *l, uintptr_t a) {
  bool hit = false;
  for (size_t i = 0; i < l->n;)
    if (l->start[i] <= a && a < l->end[i]) {
      hit = true;
      l->start[i] = l->start[--l->n];
      l->end[i] = l->end[l->n];
    } else {
      i++;
    }
  return hit;
}

static void check_log(const char *path, long long direct_total) {
  FILE *f = fopen(path, "r");
  if (!CHECK(f != NULL, "cannot read the fake verbs' log %s", path)) return;
  char line[512], mem[16], src_mem[16], dst_mem[16];
  long long regs = 0, dev_regs = 0, dev_dmabuf = 0, deregs = 0, writes = 0, direct = 0, host_records = 0;
  long long host_other = 0; /* writes between host memories that are not the transport's records */
  long long flushes = 0, unjustified = 0, landings = 0;
  struct landed landed = {0};
  int dmabuf, imm;
  void *dst, *src;
  size_t len;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "reg key=%*u addr=%*s len=%zu mem=%15s dmabuf=%d", &len, mem, &dmabuf) == 3) {
      regs++;
      dev_regs += !strcmp(mem, "device");
      dev_dmabuf += !strcmp(mem, "device") && dmabuf;
    } else if (!strncmp(line, "dereg ", 6)) {
      deregs++;
    } else if (sscanf(line, "read qp=%*u to=%*u len=%zu src=%p src_mem=%15s", &len, &src, src_mem) == 3) {
      flushes++;
      if (strcmp(src_mem, "device") != 0 || len != 1 || !landed_flush(&landed, (uintptr_t)src)) unjustified++;
    } else if (sscanf(line, "write qp=%*u to=%*u len=%zu src=%*s src_mem=%15s dst=%p dst_mem=%15s imm=%d", &len,
                      src_mem, &dst, dst_mem, &imm) == 5) {
      writes++;
      if (imm && len > 0 && !strcmp(dst_mem, "device")) {
        landed_add(&landed, (uintptr_t)dst, len);
        landings++;
      }
      if (!strcmp(src_mem, "device") && !strcmp(dst_mem, "device")) direct += (long long)len;
      if (strcmp(src_mem, "device") != 0 || strcmp(dst_mem, "device") != 0) {
        if (len == 48 || len == 0) host_records++;
        else host_other++;
      }
    }
  }
  fclose(f);
  free(landed.start);
  free(landed.end);
  printf("fake verbs log: %lld flush reads, %lld writes with immediate into GPU memory, %lld flushes of bytes "
         "nothing had written since their last flush\n",
         flushes, landings, unjustified);
  CHECK(unjustified == 0, "%lld flush reads of GPU memory no write had landed on since its last flush", unjustified);
  CHECK(flushes <= landings, "%lld flush reads for %lld writes into GPU memory", flushes, landings);
  CHECK(expect_direct && flush_on ? flushes > 0 : flushes == 0, "%lld flush reads (HETCCL_GDR_FLUSH=%d)", flushes,
        flush_on);
  printf("fake verbs log: %lld registrations (%lld of GPU memory, %lld through dma-buf), %lld deregistrations, "
         "%lld RDMA writes, %lld bytes GPU to GPU, %lld records and %lld other writes touching host memory\n",
         regs, dev_regs, dev_dmabuf, deregs, writes, direct, host_records, host_other);
  CHECK(direct == direct_total, "the log lists %lld bytes GPU to GPU, the counters %lld", direct, direct_total);
  CHECK(deregs == regs, "%lld registrations, %lld deregistrations", regs, deregs);
  if (expect_direct) {
    CHECK(dev_regs > 0 && dev_dmabuf == (expect_peermem ? 0 : dev_regs), "%lld GPU registrations, %lld through dma-buf",
          dev_regs, dev_dmabuf);
    CHECK(host_other == 0, "%lld RDMA writes of messages touched host memory", host_other);
  } else {
    CHECK(dev_regs == 0, "%lld GPU registrations while staging", dev_regs);
    CHECK(host_other > 0, "staged, yet no RDMA write of a message between host memories");
  }
}

static char sysfs[64] = "/tmp/hc_gdr_sysfs_XXXXXX", module[96], peermem[128];
static void sysfs_remove(void) {
  rmdir(peermem);
  rmdir(module);
  rmdir(sysfs);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *log_path = getenv("FAKE_VERBS_LOG");
  if (log_path) unlink(log_path); /* the fake appends */
  const char *want = getenv("GDR_TEST_EXPECT");
  expect_direct = want == NULL || strcmp(want, "staged") != 0;
  expect_peermem = want != NULL && strcmp(want, "peermem") == 0;
  /* Peer memory: a sysfs tree in which the module is loaded, named before
   * hetccl reads its parameters. */
  if (expect_peermem) {
    if (!CHECK(mkdtemp(sysfs) != NULL, "mkdtemp")) return tu_finish("test_coll_gdr");
    snprintf(module, sizeof(module), "%s/module", sysfs);
    snprintf(peermem, sizeof(peermem), "%s/nvidia_peermem", module);
    CHECK(mkdir(module, 0700) == 0 && mkdir(peermem, 0700) == 0, "cannot make %s", peermem);
    setenv("HETCCL_SYSFS_ROOT", sysfs, 1);
    atexit(sysfs_remove);
  }
  if (hc_params_load() != HC_OK) return 1;
  flush_on = gdr_flush_expected();
  gpu = hc_dev_get(HC_MEM_CUDA);
  if (getenv("HETCCL_NCCL_LIBRARY") == NULL || gpu == NULL || hc_dev_caps(HC_MEM_CUDA).device_count < 2) {
    printf("skip: needs the fake NCCL (HETCCL_NCCL_LIBRARY), the fake libibverbs and two fake CUDA devices\n");
    return 77;
  }
  printf("expecting GPU bytes between hosts %s\n", expect_peermem  ? "straight to the NIC (peer memory)"
                                                   : expect_direct ? "straight to the NIC"
                                                                   : "staged");
  tu_run_ranks(NRANKS, rank_main, NULL);
  if (log_path && verbs_bytes) check_log(log_path, verbs_bytes("device", "device"));

  return tu_finish("test_coll_gdr");
}
