/*
 * A comm of a GPU rank and a CPU rank on two fake hosts
 * (HETCCL_FAKE_HOSTS=0,1), each its own group, joined by ib over the fake
 * libibverbs, the GPU over the fake libcuda; ranks as threads. At sizes
 * around the eager threshold (HETCCL_IB_EAGER_BYTES, 8 KiB: 4 bytes to
 * 12 KiB, 8188, 8192 and 8196 among them) a send/recv each way, an
 * all-reduce and an all-gather are compared bitwise with the test's own
 * results (testutil's generators), and the drivers' counters say how the
 * GPU rank's bytes went: a send/recv crosses exactly its bytes GPU memory
 * -> NIC -> host memory one way and host memory -> NIC -> GPU memory the
 * other, the small ones through the GPU rank's registered device scratch
 * (GPU copies device to device) and the large ones from and into the
 * caller's buffer; no call copies a byte between GPU memory and pinned
 * host memory, and every call that landed bytes in GPU memory flushed
 * them (net/ib's "flush"; none under HETCCL_GDR_FLUSH=0). Exits 77 unless
 * the fakes are there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "gpu_rank_mem.h"
#include "testutil.h"

enum { GPU_RANK = 0, CPU_RANK = 1, NRANKS = 2 };
/* int32 / float32 elements: 4 B, 4 KiB, 8188, 8192, 8196 B, 12 KiB. */
static const size_t counts[] = {1, 1024, 2047, 2048, 2049, 3072};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
#define MAX_BYTES (2 * 3072 * 4)

static const struct hc_dev_ops *gpu;
static bool flush_on; /* HETCCL_GDR_FLUSH and FAKE_CUDA_CC */
static long long (*verbs_bytes)(const char *src, const char *dst);
static long long (*verbs_reads)(const char *src, int loopback);
static long long (*cuda_copied)(const char *src, const char *dst);

/* A rank's buffers: device memory on the GPU rank, host memory on the CPU
 * rank; host staging for the test's own fills and reads. */
struct bufs {
  struct rank_mem m;
  void *send, *recv;
  hc_stream_t stream;
  uint8_t *host, *expect;
};

static void to_send(struct bufs *b, size_t bytes) {
  if (tu_rank() == GPU_RANK) put(&b->m, b->send, b->host, bytes);
  else memcpy(b->send, b->host, bytes);
}
static void from_recv(struct bufs *b, size_t bytes) {
  if (tu_rank() == GPU_RANK) get(&b->m, b->host, b->recv, bytes);
  else memcpy(b->host, b->recv, bytes);
}

struct counts {
  long long d2h, h2d, d2d_nic, pinned_copies, dev_copies, flushes;
};
static struct counts counters(void) {
  return (struct counts){.d2h = verbs_bytes("device", "host"),
                         .h2d = verbs_bytes("host", "device"),
                         .d2d_nic = verbs_bytes("device", "device"),
                         .pinned_copies = cuda_copied("device", "pinned") + cuda_copied("pinned", "device"),
                         .dev_copies = cuda_copied("device", "device"),
                         .flushes = verbs_reads("device", 1)};
}
static struct counts snapshot(void) {
  tu_barrier();
  struct counts c = tu_rank() == 0 ? counters() : (struct counts){0};
  tu_barrier();
  return c;
}

/* After a call whose every rank has its results: no byte between GPU and
 * pinned memory; flushes where bytes landed in GPU memory. exact_bytes
 * (send/recv, >= 0): that many bytes each way, GPU to host and host to
 * GPU memory over the NIC, in one message each way: one flush, and the
 * GPU copies each byte of a small one twice (into a slot of device scratch
 * to send, out of one received), none of a large one. */
static void expect_paths(struct counts before, long long exact_bytes, const char *what) {
  tu_barrier();
  if (tu_rank() == 0) {
    struct counts a = counters();
    long long d2h = a.d2h - before.d2h, h2d = a.h2d - before.h2d, flushes = a.flushes - before.flushes;
    long long dev_copies = a.dev_copies - before.dev_copies;
    printf("%s: over the NIC %lld bytes GPU -> host, %lld host -> GPU; GPU copies %lld device to device, %lld via "
           "pinned memory; %lld flush reads\n",
           what, d2h, h2d, dev_copies, a.pinned_copies - before.pinned_copies, flushes);
    CHECK(a.pinned_copies == before.pinned_copies && a.d2d_nic == before.d2d_nic,
          "%s: %lld bytes copied between GPU and pinned memory, %lld GPU to GPU over the NIC", what,
          a.pinned_copies - before.pinned_copies, a.d2d_nic - before.d2d_nic);
    CHECK(flush_on ? (h2d > 0) == (flushes > 0) : flushes == 0, "%s: %lld flush reads for %lld bytes into GPU memory",
          what, flushes, h2d);
    if (exact_bytes >= 0) {
      const long long eager = hc_param_int(HC_P_IB_EAGER_BYTES), copies = exact_bytes <= eager ? 2 * exact_bytes : 0;
      CHECK(d2h == exact_bytes && h2d == exact_bytes, "%s: %lld bytes GPU -> host, %lld host -> GPU, expected %lld",
            what, d2h, h2d, exact_bytes);
      CHECK(dev_copies == copies, "%s: GPU copies %lld bytes device to device, expected %lld", what, dev_copies,
            copies);
      CHECK(flushes == (flush_on ? 1 : 0), "%s: %lld flush reads for one receive into GPU memory", what, flushes);
    }
  }
  tu_barrier();
}

static void sendrecv(hetcclComm_t comm, struct bufs *b, size_t count) {
  char what[64];
  snprintf(what, sizeof(what), "send/recv of %zu bytes each way", count * 4);
  tu_set_case("%s", what);
  const int peer = 1 - tu_rank();
  tu_data_fill(HC_INT32, 3, tu_rank(), 0, count, b->host);
  to_send(b, count * 4);
  struct counts before = snapshot();
  CHECK_OK(hetcclGroupStart());
  CHECK_OK(hetcclSend(b->send, count, hetcclInt32, peer, comm, b->stream));
  CHECK_OK(hetcclRecv(b->recv, count, hetcclInt32, peer, comm, b->stream));
  CHECK_OK(hetcclGroupEnd());
  from_recv(b, count * 4);
  tu_data_fill(HC_INT32, 3, peer, 0, count, b->expect);
  tu_compare(HC_INT32, b->host, b->expect, count, what);
  expect_paths(before, (long long)count * 4, what);
}

static void allreduce(hetcclComm_t comm, struct bufs *b, size_t count) {
  char what[64];
  snprintf(what, sizeof(what), "all-reduce of %zu bytes", count * 4);
  tu_set_case("%s", what);
  struct tu_red red = {HC_FLOAT32, HC_SUM, NRANKS, 5};
  tu_red_fill(&red, tu_rank(), 0, count, b->host);
  to_send(b, count * 4);
  struct counts before = snapshot();
  CHECK_OK(hetcclAllReduce(b->send, b->recv, count, hetcclFloat, hetcclSum, comm, b->stream));
  from_recv(b, count * 4);
  for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, b->expect + i * 4);
  tu_compare(HC_FLOAT32, b->host, b->expect, count, what);
  expect_paths(before, -1, what);
}

static void allgather(hetcclComm_t comm, struct bufs *b, size_t count) {
  char what[64];
  snprintf(what, sizeof(what), "all-gather of %zu bytes per rank", count * 4);
  tu_set_case("%s", what);
  tu_data_fill(HC_INT32, 4, tu_rank(), 0, count, b->host);
  to_send(b, count * 4);
  struct counts before = snapshot();
  CHECK_OK(hetcclAllGather(b->send, b->recv, count, hetcclInt32, comm, b->stream));
  from_recv(b, NRANKS * count * 4);
  for (int s = 0; s < NRANKS; s++) tu_data_fill(HC_INT32, 4, s, 0, count, b->expect + (size_t)s * count * 4);
  tu_compare(HC_INT32, b->host, b->expect, NRANKS * count, what);
  expect_paths(before, -1, what);
}

static bool open_rank(struct bufs *b, int rank, hetcclUniqueId id, hetcclComm_t *comm) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  b->host = malloc(MAX_BYTES);
  b->expect = malloc(MAX_BYTES);
  if (!CHECK(b->host && b->expect, "out of memory")) return false;
  if (rank == GPU_RANK) {
    if (!rank_comm_open(&b->m, gpu, 0, MAX_BYTES, "gpu", NRANKS, id, rank, comm)) return false;
    b->send = b->m.send, b->recv = b->m.recv, b->stream = b->m.stream;
    return true;
  }
  b->send = malloc(MAX_BYTES);
  b->recv = malloc(MAX_BYTES);
  if (!CHECK(b->send && b->recv, "out of memory")) return false;
  cfg.groupName = "cpu";
  return CHECK_OK(hetcclCommInitRankConfig(comm, NRANKS, id, rank, &cfg));
}

static void close_rank(struct bufs *b, int rank, hetcclComm_t comm) {
  if (comm) CHECK_OK(hetcclCommDestroy(comm));
  if (rank == GPU_RANK) {
    rank_mem_close(&b->m);
  } else {
    free(b->send);
    free(b->recv);
  }
  free(b->host);
  free(b->expect);
}

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)n, (void)arg;
  struct bufs b = {0};
  hetcclComm_t comm = NULL;
  if (open_rank(&b, rank, id, &comm)) {
    for (size_t k = 0; k < NCOUNTS; k++) {
      sendrecv(comm, &b, counts[k]);
      allreduce(comm, &b, counts[k]);
      allgather(comm, &b, counts[k]);
    }
  }
  close_rank(&b, rank, comm);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (hc_params_load() != HC_OK) return 1;
  flush_on = gdr_flush_expected();
  gpu = hc_dev_get(HC_MEM_CUDA);
  void *verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (verbs) *(void **)&verbs_bytes = dlsym(verbs, "fake_verbs_bytes");
  if (verbs) *(void **)&verbs_reads = dlsym(verbs, "fake_verbs_reads");
  if (cuda) *(void **)&cuda_copied = dlsym(cuda, "fake_cuda_copied");
  if (gpu == NULL || !verbs_bytes || !verbs_reads || !cuda_copied) {
    printf("skip: needs the fake libcuda and the fake libibverbs (LD_LIBRARY_PATH)\n");
    return 77;
  }
  tu_run_ranks(NRANKS, rank_main, NULL);
  return tu_finish("test_coll_mixed_gdr");
}
