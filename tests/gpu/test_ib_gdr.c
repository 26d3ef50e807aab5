/*
 * GPU memory for the ib transport, on a real GPU (exits 77 without one):
 *   1. the CUDA backend exports device memory as a dma-buf
 *      (cuMemGetHandleForAddressRange): at the start of an allocation, in
 *      its middle and near its end, each fd a real dma-buf (its size from
 *      lseek covers the range asked);
 *   2. where this host also has a usable RDMA port, the ib transport
 *      registers that memory by its HETCCL_GDR mode (dma-buf, peer memory)
 *      through its registration cache, and a second lookup hits the cache.
 * Step 2 skips, saying so, where there is no RDMA port (the H200 machine);
 * step 1 is what that machine can show.
 *   build-gpu/tests/test_ib_gdr            (HETCCL_DEBUG=INFO for the lines)
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/device.h"
#include "net/ib_priv.h"
#include "testutil.h"

static void export_at(const struct hc_dev_ops *cuda, uint8_t *base, size_t off, size_t n) {
  int fd = -1;
  uint64_t offset = 0;
  hc_result_t r = hc_dev_dmabuf_export(cuda, base + off, n, &fd, &offset);
  CHECK(r == HC_OK && fd >= 0, "dma-buf export of %zu bytes at +%zu", n, off);
  if (fd < 0) return;
  off_t size = lseek(fd, 0, SEEK_END);
  CHECK(size >= (off_t)(offset + (off % 4096) + n), "dma-buf of %lld bytes for %zu bytes at +%zu", (long long)size, n,
        off);
  printf("PASS dma-buf export at +%zu (%zu bytes): fd %d, %lld bytes, offset %llu\n", off, n, fd, (long long)size,
         (unsigned long long)offset);
  close(fd);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (hc_params_load() != HC_OK) return 1;
  const struct hc_dev_ops *cuda = hc_dev_get(HC_MEM_CUDA);
  if (cuda == NULL) {
    printf("skip: no CUDA device (%s)\n", hc_dev_absent_reason(HC_MEM_CUDA));
    return 77;
  }
  if (hc_dev_set_device(cuda, 0) != HC_OK) return 1;
  const size_t bytes = 64u << 20;
  void *dev = NULL;
  if (hc_dev_mem_alloc(cuda, 0, bytes, &dev) != HC_OK) {
    printf("FAIL: cuMemAlloc of %zu bytes: %s\n", bytes, hc_last_error());
    return 1;
  }
  if (!HC_HAS_OP(cuda, struct hc_dev_ops, dmabuf_export)) {
    printf("FAIL: the CUDA backend has no dmabuf_export\n");
    return 1;
  }
  export_at(cuda, dev, 0, bytes);
  export_at(cuda, dev, 12345, 1 << 20);
  export_at(cuda, dev, bytes - 8192, 8192);

  bool usable = false;
  char what[256];
  hc_net_ib_probe(&usable, what, sizeof(what));
  if (!usable) {
    printf("skip (ib part): no usable RDMA port here (%s): GPU memory registration with a NIC not run\n", what);
  } else {
    struct hc_net_args a = {.rank = 0, .nranks = 1, .device_kind = HC_MEM_CUDA};
    struct hc_net_handle h;
    void *vctx = NULL;
    hc_result_t r = hc_net_ib.open(&a, NULL, &h, &vctx);
    CHECK(r == HC_OK, "ib open on %s", what);
    if (r == HC_OK) {
      struct hc_ib_ctx *ctx = vctx;
      printf("ib: %s, HETCCL_GDR mode %d (1 dma-buf, 2 peer memory, 3 staging)\n", what, ctx->gdr_mode);
      if (ctx->gdr_mode == HC_IB_GDR_STAGE) {
        printf("skip (ib part): this host reaches GPU memory only through staging\n");
      } else {
        struct hc_ib_reg *r1 = NULL, *r2 = NULL;
        r = hc_ib_reg_get(ctx, (uint8_t *)dev + 4096, 1 << 20, true, &r1);
        if (r != HC_OK && ctx->gdr_auto && ctx->gdr_mode == HC_IB_GDR_STAGE) {
          /* The adapter refused the dma-buf (soft-RoCE does) and no other
           * path is left: AUTO said so and fell back. */
          printf("skip (ib part): %s refused the dma-buf registration; AUTO fell back to staging (%s)\n", what,
                 hc_last_error());
        } else {
          CHECK(r == HC_OK && r1 && r1->mr, "registering 1 MiB of GPU memory");
        }
        if (r == HC_OK) {
          printf("PASS ib registration of GPU memory: lkey 0x%x rkey 0x%x (%s)\n", r1->mr->lkey, r1->mr->rkey,
                 r1->dmabuf_fd >= 0 ? "dma-buf" : "peer memory");
          r = hc_ib_reg_get(ctx, (uint8_t *)dev + 8192, 4096, true, &r2);
          CHECK(r == HC_OK && (ctx->max_regs == 0 || r2 == r1), "second lookup inside the same range");
          hc_ib_reg_put(ctx, r2);
          hc_ib_reg_put(ctx, r1);
        }
      }
      hc_net_ib.close(vctx);
    }
  }
  hc_dev_mem_free(cuda, 0, dev);
  return tu_finish("test_ib_gdr");
}
