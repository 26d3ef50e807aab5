/*
 * The ib registration cache on a real verbs device (run inside the
 * soft-RoCE VMs by guest_coll.sh; exits 77 without a usable port):
 *   - a buffer inside a cached range is served by the same registration;
 *   - memory unmapped and mapped again at the same address (what an
 *     allocator does with a freed large block) is noticed: the stale
 *     registration is dropped and a new one made (another rkey);
 *   - HETCCL_IB_REG_CACHE bounds the cache (least recently used go first);
 *   - read-only pages register for sending (read access only) and fail,
 *     with a message, for receiving.
 *   build/tests/test_ib_regcache
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "net/ib_priv.h"
#include "testutil.h"

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (hc_params_load() != HC_OK) return 1;
  bool usable = false;
  char what[256];
  hc_net_ib_probe(&usable, what, sizeof(what));
  if (!usable) {
    printf("skip: no usable RDMA port (%s)\n", what);
    return 77;
  }
  struct hc_net_args a = {.rank = 0, .nranks = 1};
  struct hc_net_handle h;
  void *vctx = NULL;
  if (hc_net_ib.open(&a, NULL, &h, &vctx) != HC_OK) {
    printf("FAIL: ib open: %s\n", hc_last_error());
    return 1;
  }
  struct hc_ib_ctx *ctx = vctx;
  if (ctx->max_regs == 0) {
    printf("skip: no registration cache in this process (page frames not visible)\n");
    hc_net_ib.close(vctx);
    return 77;
  }
  const size_t len = 1 << 20;
  uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  memset(p, 1, len);
  struct hc_ib_reg *r1 = NULL, *r2 = NULL, *r3 = NULL;
  CHECK(hc_ib_reg_get(ctx, p, len, true, &r1) == HC_OK, "register 1 MiB");
  CHECK(hc_ib_reg_get(ctx, p + 4096, 8192, true, &r2) == HC_OK && r2 == r1, "a sub-range hits the cache");
  hc_ib_reg_put(ctx, r2);
  hc_ib_reg_put(ctx, r1);
  uint32_t old_rkey = r1->mr->rkey;
  /* Free and map again at the same address, as an allocator would. */
  munmap(p, len);
  uint8_t *q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(q == p, "mapped again at %p (got %p)", (void *)p, (void *)q);
  if (q == p) {
    memset(q, 2, len);
    CHECK(hc_ib_reg_get(ctx, q, len, true, &r3) == HC_OK, "register the new mapping");
    CHECK(r3 != NULL && r3->mr->rkey != old_rkey, "the stale registration (rkey 0x%x) was replaced (rkey 0x%x)",
          old_rkey, r3 ? r3->mr->rkey : 0);
    CHECK(ctx->nregs == 1, "one registration cached, %d", ctx->nregs);
    printf("PASS: freed and mapped again: rkey 0x%x replaced by 0x%x\n", old_rkey, r3 ? r3->mr->rkey : 0);
    hc_ib_reg_put(ctx, r3);
  }
  /* The bound: max_regs + 2 distinct ranges leave max_regs cached. */
  int n = ctx->max_regs + 2;
  uint8_t *many = mmap(NULL, (size_t)n * 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (many != MAP_FAILED) {
    for (int i = 0; i < n; i++) {
      struct hc_ib_reg *r = NULL;
      many[(size_t)i * 8192] = 1;
      CHECK(hc_ib_reg_get(ctx, many + (size_t)i * 8192, 100, true, &r) == HC_OK, "range %d", i);
      hc_ib_reg_put(ctx, r);
    }
    CHECK(ctx->nregs == ctx->max_regs, "%d cached, bound %d", ctx->nregs, ctx->max_regs);
    printf("PASS: %d ranges registered, %d cached (HETCCL_IB_REG_CACHE)\n", n, ctx->nregs);
  }
  /* Constant data: a send may come from read-only pages. */
  uint8_t *ro = mmap(NULL, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ro != MAP_FAILED) {
    struct hc_ib_reg *rs = NULL, *rw = NULL;
    CHECK(ro[100] == 0, "read");
    CHECK(hc_ib_reg_get(ctx, ro, 65536, false, &rs) == HC_OK && rs && !rs->writable, "read-only pages, for a send");
    hc_result_t r = hc_ib_reg_get(ctx, ro, 65536, true, &rw);
    CHECK(r == HC_ERR_SYSTEM && rw == NULL, "read-only pages must not register for a receive");
    if (rs && r == HC_ERR_SYSTEM) printf("PASS: read-only pages register for sends only (%s)\n", hc_last_error());
    hc_ib_reg_put(ctx, rs);
    munmap(ro, 65536);
  }
  hc_net_ib.close(vctx);
  if (q == p) munmap(q, len);
  if (many != MAP_FAILED) munmap(many, (size_t)n * 8192);
  return tu_finish("test_ib_regcache");
}
