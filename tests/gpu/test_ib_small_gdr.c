/*
 * Small messages of GPU memory over the ib transport, between a GPU rank
 * and a CPU rank (the two kinds a comm mixes), as threads over the fake
 * libcuda and the fake libibverbs (tests/ib/fake_verbs.c). Messages of at
 * most the eager size must never pass through the CPU on the GPU rank's
 * side (net/ib_priv.h: "device receiver", "device eager"):
 *   GPU -> CPU  the eager write gathers the signature from host memory and
 *               the payload from the GPU buffer's registration: the
 *               adapter reads the payload out of GPU memory;
 *   CPU -> GPU  the GPU rank is a device receiver, so the CPU rank waits for
 *               its clear-to-send and writes the payload straight into the
 *               GPU buffer.
 * Each at a few sizes up to the eager size (0 included), and one above it
 * (chunked: the test runs with HETCCL_IB_CHUNK=4K), checked bitwise
 * against the sender's bytes, and by the fake verbs' counters of which
 * memory each byte was read from and written to. The GPU flush (net/ib's
 * "flush"): every non-empty receive into the GPU rank's memory is
 * complete only once exactly one RDMA read of that memory went through a
 * loopback queue pair (one per message, whatever its chunks) and its
 * completion was seen, and the CPU
 * rank's receives into host memory have none; with HETCCL_GDR_FLUSH=0 no
 * read at all. A mismatch of lengths on a small receive into GPU memory
 * fails both ends, naming both lengths. Exits 77 unless both fakes are
 * there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "gpu_rank_mem.h"
#include "net/net.h"
#include "testutil.h"

enum { GPU_RANK = 0, CPU_RANK = 1 };
static const size_t sizes[] = {1, 4000, 8192, 0, 777, 3 * 4096 + 100};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAX_BYTES (4 * 4096)

static const struct hc_dev_ops *gpu;
static long long (*verbs_bytes)(const char *src, const char *dst);
static long long (*verbs_reads)(const char *src, int loopback);
static long long (*verbs_reads_unpolled)(void);

/* RDMA reads so far: out of GPU memory through a loopback queue pair (the
 * flushes), and all others (out of host memory, or to a peer). */
struct reads {
  long long flushes, others;
};
static struct reads reads_now(void) {
  return (struct reads){verbs_reads("device", 1), verbs_reads("device", 0) + verbs_reads("pinned", 0) +
                                                      verbs_reads("pinned", 1) + verbs_reads("host", 0) +
                                                      verbs_reads("host", 1)};
}

struct end {
  void *ctx, *conn;
  struct hc_net_handle handle;
  struct hc_net_caps caps;
};

/* Posts a send and a receive with the peer and tests both until done (or
 * a failure, returned). */
static hc_result_t exchange(struct end *e, const void *out, void *in, size_t n_out, size_t n_in) {
  void *sreq = NULL, *rreq = NULL;
  int sdone = 0, rdone = 0;
  hc_result_t r = hc_net_ib.irecv(e->conn, in, n_in, NULL, &rreq);
  if (r == HC_OK) r = hc_net_ib.isend(e->conn, out, n_out, NULL, &sreq);
  const uint64_t deadline = hc_now_ns() + 60 * 1000000000ull;
  while (r == HC_OK && (!sdone || !rdone)) {
    if (!sdone) r = hc_net_ib.test(sreq, &sdone);
    if (r == HC_OK && !rdone) r = hc_net_ib.test(rreq, &rdone);
    if (r == HC_OK && hc_now_ns() > deadline) r = HC_FAIL(HC_ERR_REMOTE, "exchange not done within 60 s");
    if (r == HC_OK && (!sdone || !rdone)) r = hc_net_ib.wait_blocking(e->ctx, 10);
  }
  return r;
}

static void fill(uint8_t *p, size_t n, int rank, size_t k) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 7 + (size_t)rank * 31 + k * 13 + 1);
}

static bool flush_on; /* HETCCL_GDR_FLUSH and FAKE_CUDA_CC */

static int rank_main(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)id;
  (void)arg;
  struct end e = {0};
  struct rank_mem m = {0};
  const bool on_gpu = rank == GPU_RANK;
  uint8_t *host_out = malloc(MAX_BYTES), *host_in = malloc(MAX_BYTES), *expect = malloc(MAX_BYTES);
  uint8_t *out = host_out, *in = host_in;
  if (!CHECK(host_out && host_in && expect, "out of memory")) goto out;
  if (on_gpu) {
    if (!CHECK(rank_mem_open(&m, gpu, 0, MAX_BYTES), "GPU buffers: %s", hc_last_error())) goto out;
    out = m.send;
    in = m.recv;
  }
  struct hc_net_args a = {.rank = rank, .nranks = nranks, .device_kind = on_gpu ? HC_MEM_CUDA : HC_MEM_HOST};
  memcpy(a.secret, "0123456789abcdef", 16);
  if (!CHECK(hc_net_ib.open(&a, &e.caps, &e.handle, &e.ctx) == HC_OK, "open: %s", hc_last_error())) goto out;
  if (on_gpu) {
    CHECK(e.caps.device_memory && e.caps.device_small, "the GPU rank's ib does not take GPU memory: %s",
          e.caps.device_path);
    /* The comm's INFO line says whether receives are flushed, and why. */
    const char *mode = getenv("HETCCL_GDR_FLUSH");
    CHECK(strstr(e.caps.device_path, flush_on ? "; receives flushed: " : "; receives not flushed: ") &&
              strstr(e.caps.device_path,
                     mode ? (strcmp(mode, "1") ? "HETCCL_GDR_FLUSH=0" : "HETCCL_GDR_FLUSH=1")
                          : (flush_on ? "compute capability 8.0, before 9.0" : "compute capability 9.0, 9.0 or later")),
          "the GPU path's text: %s", e.caps.device_path);
    printf("the GPU rank's path: %s\n", e.caps.device_path);
  }
  void *handles[2];
  if (!tu_allgather_ptr(&e.handle, handles)) goto out;
  const struct hc_net_handle *theirs = handles[1 - rank];
  const uint64_t deadline = hc_now_ns() + 60 * 1000000000ull;
  while (e.conn == NULL && hc_now_ns() < deadline) {
    if (!CHECK(hc_net_ib.connect(e.ctx, 1 - rank, theirs, &e.conn) == HC_OK, "connect: %s", hc_last_error())) goto out;
    if (e.conn == NULL) hc_net_ib.wait_blocking(e.ctx, 10);
  }
  if (!CHECK(e.conn != NULL, "not connected within 60 s")) goto out;
  for (size_t k = 0; k < NSIZES; k++) {
    const size_t n = sizes[k];
    tu_set_case("%zu bytes", n);
    fill(host_out, n, rank, k);
    if (on_gpu) put(&m, out, host_out, MAX_BYTES);
    tu_barrier();
    long long d2h = 0, h2d = 0;
    struct reads before = {0};
    if (rank == 0) d2h = verbs_bytes("device", "host"), h2d = verbs_bytes("host", "device"), before = reads_now();
    tu_barrier();
    CHECK(exchange(&e, out, in, n, n) == HC_OK, "%zu bytes each way: %s", n, hc_last_error());
    if (on_gpu) { /* its receive is complete: its flush, if any, is done */
      struct reads r = reads_now();
      const long long want = flush_on && n > 0 ? 1 : 0;
      CHECK(r.flushes - before.flushes == want && r.others == before.others,
            "%zu bytes into GPU memory: %lld flush reads at completion, expected %lld; %lld other reads", n,
            r.flushes - before.flushes, want, r.others - before.others);
      CHECK(verbs_reads_unpolled() == 0, "%zu bytes into GPU memory: complete before its flush read's completion", n);
    }
    if (on_gpu) get(&m, host_in, in, MAX_BYTES);
    fill(expect, n, 1 - rank, k);
    CHECK(memcmp(host_in, expect, n) == 0, "%zu bytes from rank %d differ", n, 1 - rank);
    tu_barrier();
    if (rank == 0) {
      d2h = verbs_bytes("device", "host") - d2h, h2d = verbs_bytes("host", "device") - h2d;
      printf("%zu bytes each way: %lld read by the adapter out of GPU memory into host memory, %lld written into "
             "GPU memory from host memory\n",
             n, d2h, h2d);
      CHECK(d2h == (long long)n && h2d == (long long)n,
            "%zu bytes each way: %lld from GPU to host memory, %lld from host to GPU memory over the NIC", n, d2h, h2d);
      struct reads r = reads_now(); /* the CPU rank's receive into host memory is done too: no flush of its own */
      printf("%zu bytes each way: %lld flush reads of GPU memory, %lld other RDMA reads\n", n,
             r.flushes - before.flushes, r.others - before.others);
      CHECK(r.flushes - before.flushes == (flush_on && n > 0 ? 1 : 0) && r.others == before.others,
            "%zu bytes each way: %lld flush reads, %lld other reads (one receive into GPU memory, one into host "
            "memory)",
            n, r.flushes - before.flushes, r.others - before.others);
    }
    tu_barrier();
  }
  /* Lengths that differ on a receive into GPU memory: both ends fail. */
  tu_set_case("mismatched lengths");
  hc_result_t r = on_gpu ? exchange(&e, NULL, in, 0, 4000) : exchange(&e, out, in, 3000, 0);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "3000") && strstr(hc_last_error(), "4000"),
        "a message of 3000 bytes met a receive of 4000: %s (%s)", hc_result_str(r), hc_last_error());
  tu_barrier(); /* nobody closes while the peer still reads its reason */
out:
  if (e.ctx) hc_net_ib.close(e.ctx);
  if (on_gpu) rank_mem_close(&m);
  free(host_out);
  free(host_in);
  free(expect);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (hc_params_load() != HC_OK) return 1;
  gpu = hc_dev_get(HC_MEM_CUDA);
  void *verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (verbs) *(void **)&verbs_bytes = dlsym(verbs, "fake_verbs_bytes");
  if (verbs) *(void **)&verbs_reads = dlsym(verbs, "fake_verbs_reads");
  if (verbs) *(void **)&verbs_reads_unpolled = dlsym(verbs, "fake_verbs_reads_unpolled");
  flush_on = gdr_flush_expected();
  if (gpu == NULL || verbs_bytes == NULL || verbs_reads == NULL || verbs_reads_unpolled == NULL || cuda == NULL ||
      dlsym(cuda, "fake_cuda_copied") == NULL) {
    printf("skip: needs the fake libcuda and the fake libibverbs (LD_LIBRARY_PATH)\n");
    return 77;
  }
  tu_run_ranks(2, rank_main, NULL);
  return tu_finish("test_ib_small_gdr");
}
