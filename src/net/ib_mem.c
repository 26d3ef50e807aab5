/*
 * net/ib: memory registrations. Owns the registration cache of a ctx (its
 * protection domain) and the choice of how GPU memory is registered.
 *
 * The cache keeps up to HETCCL_IB_REG_CACHE registrations, most recently
 * used first, each covering whole pages. A buffer inside a cached range is
 * served from it only if the range still maps the same memory: ibv_reg_mr
 * pins the pages, so while the range is mapped its page frames cannot
 * change; a buffer freed and its addresses mapped again (munmap + mmap, the
 * allocator handing the range out anew) shows other page frames. So a hit
 * compares the frames of the range's first and last pages with those seen
 * at registration (/proc/self/pagemap) and drops a stale entry. A process
 * that cannot read page frames (no CAP_SYS_ADMIN: the kernel reports 0)
 * caches nothing and registers every large transfer for its duration; an
 * INFO line says which.
 *
 * GPU memory (HETCCL_GDR): dma-buf first (the driver exports the range as
 * a dma-buf, ibv_reg_dmabuf_mr registers it), then the peer-memory module
 * (ibv_reg_mr on the device pointer, nvidia_peermem), then pinned host
 * staging, where the plans copy device memory through pinned slots. The
 * mode is chosen once per ctx, from what the host has, and logged at INFO.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "../device/device.h"
#include "ib_priv.h"

#define HC_IB_PAGE 4096u

static const char *const gdr_names[] = {"AUTO", "DMABUF", "PEERMEM", "STAGE"};

hc_result_t hc_ib_gdr_parse(const char *s, int *mode) {
  for (int i = 0; i < (int)HC_ARRAY_LEN(gdr_names); i++)
    if (strcasecmp(s, gdr_names[i]) == 0) {
      *mode = i;
      return HC_OK;
    }
  if (strcmp(s, "0") == 0) {
    *mode = HC_IB_GDR_STAGE;
    return HC_OK;
  }
  return HC_FAIL(HC_ERR_USAGE, "HETCCL_GDR=%s: must be AUTO, DMABUF, PEERMEM or STAGE", s);
}

/* The page frame of the page holding addr; 0 when not visible. */
static uint64_t page_frame(int fd, uintptr_t addr) {
  uint64_t entry = 0;
  if (fd < 0) return 0;
  if (pread(fd, &entry, sizeof(entry), (off_t)(addr / HC_IB_PAGE * sizeof(entry))) != (ssize_t)sizeof(entry)) return 0;
  if (!(entry >> 63)) return 0;             /* not present */
  return entry & ((UINT64_C(1) << 55) - 1); /* bits 0-54 */
}

/* Whether the peer-memory route is there: the kernel module that lets an
 * RDMA driver pin GPU pages for ibv_reg_mr. */
static bool peermem_loaded(void) {
  char a[PATH_MAX], b[PATH_MAX];
  snprintf(a, sizeof(a), "%s/module/nvidia_peermem", hc_net_sysfs_root());
  snprintf(b, sizeof(b), "%s/module/nv_peer_mem", hc_net_sysfs_root());
  return access(a, F_OK) == 0 || access(b, F_OK) == 0;
}

/* The GPU path this host supports, HETCCL_GDR deciding among them. */
static hc_result_t gdr_resolve(struct hc_ib_ctx *ctx) {
  /* A CPU comm never loads a GPU driver for this. */
  const struct hc_dev_ops *gpu =
      ctx->device_kind == HC_MEM_HOST ? NULL : hc_dev_get((enum hc_mem_kind)ctx->device_kind);
  bool dmabuf = ctx->v->ibv_reg_dmabuf_mr != NULL && gpu != NULL && HC_HAS_OP(gpu, struct hc_dev_ops, dmabuf_export);
  bool peermem = peermem_loaded();
  int want = ctx->gdr_mode;
  ctx->gdr_auto = want == HC_IB_GDR_AUTO;
  if (gpu == NULL) { /* host buffers only: the mode does not matter */
    ctx->gdr_mode = HC_IB_GDR_STAGE;
    return HC_OK;
  }
  if (want == HC_IB_GDR_DMABUF && !dmabuf)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_GDR=DMABUF: %s",
                   ctx->v->ibv_reg_dmabuf_mr == NULL ? "libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34)"
                                                     : "this GPU backend cannot export dma-bufs");
  if (want == HC_IB_GDR_PEERMEM && !peermem)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_GDR=PEERMEM: the nvidia_peermem module is not loaded");
  if (want == HC_IB_GDR_AUTO) want = dmabuf ? HC_IB_GDR_DMABUF : peermem ? HC_IB_GDR_PEERMEM : HC_IB_GDR_STAGE;
  ctx->gdr_mode = want;
  if (gpu)
    HC_INFO(HC_NET, "ib: %s memory through %s (dma-buf %s, peer memory %s)", gpu->name,
            want == HC_IB_GDR_DMABUF    ? "dma-buf registration"
            : want == HC_IB_GDR_PEERMEM ? "the peer-memory module"
                                        : "pinned host staging",
            dmabuf ? "available" : "not available", peermem ? "loaded" : "not loaded");
  return HC_OK;
}

void hc_net_ib_gdr_probe(int device_kind, char *what, size_t len) {
  struct hc_ib_ctx probe = {.device_kind = device_kind};
  probe.v = hc_ib_verbs_load();
  if (probe.v == NULL) {
    snprintf(what, len, "no libibverbs");
    return;
  }
  if (hc_ib_gdr_parse(hc_param_str(HC_P_GDR), &probe.gdr_mode) != HC_OK || gdr_resolve(&probe) != HC_OK) {
    snprintf(what, len, "%s", hc_last_error());
    return;
  }
  const struct hc_dev_ops *gpu = hc_dev_get((enum hc_mem_kind)device_kind);
  snprintf(what, len, "%s (dma-buf export: %s, ibv_reg_dmabuf_mr: %s, peer-memory module: %s)",
           probe.gdr_mode == HC_IB_GDR_DMABUF    ? "dma-buf registration"
           : probe.gdr_mode == HC_IB_GDR_PEERMEM ? "peer memory"
                                                 : "pinned host staging",
           gpu && HC_HAS_OP(gpu, struct hc_dev_ops, dmabuf_export) ? "built" : "no",
           probe.v->ibv_reg_dmabuf_mr ? "yes" : "no", peermem_loaded() ? "loaded" : "not loaded");
}

hc_result_t hc_ib_mem_init(struct hc_ib_ctx *ctx) {
  ctx->max_regs = (int)HC_MAX(hc_param_int(HC_P_IB_REG_CACHE), 0);
  ctx->pagemap_fd = -1;
  if (ctx->max_regs > 0) {
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    /* Comms open from several threads at once; the store only faults the page in, so it is atomic. */
    static uint8_t probe[HC_IB_PAGE];
    __atomic_store_n(&probe[0], 1, __ATOMIC_RELAXED);
    if (fd >= 0 && page_frame(fd, (uintptr_t)probe) != 0) {
      ctx->pagemap_fd = fd;
    } else {
      if (fd >= 0) close(fd);
      HC_INFO(HC_NET, "ib: page frames are not visible to this process (/proc/self/pagemap needs CAP_SYS_ADMIN): "
                      "no registration cache, large transfers are registered one by one");
      ctx->max_regs = 0;
    }
  }
  return gdr_resolve(ctx);
}

static void reg_free(struct hc_ib_ctx *ctx, struct hc_ib_reg *r) {
  if (r->mr) ctx->v->ibv_dereg_mr(r->mr);
  if (r->dmabuf_fd >= 0) close(r->dmabuf_fd);
  free(r);
}

static void lru_unlink(struct hc_ib_ctx *ctx, struct hc_ib_reg *r) {
  if (r->prev) r->prev->next = r->next;
  else ctx->regs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->cached = false;
  ctx->nregs--;
}

static void lru_push(struct hc_ib_ctx *ctx, struct hc_ib_reg *r) {
  r->next = ctx->regs;
  r->prev = NULL;
  if (ctx->regs) ctx->regs->prev = r;
  ctx->regs = r;
  r->cached = true;
  ctx->nregs++;
}

/* Drops r from the cache; it is freed now or when its last user is done. */
static void reg_evict(struct hc_ib_ctx *ctx, struct hc_ib_reg *r) {
  lru_unlink(ctx, r);
  if (r->refs == 0) reg_free(ctx, r);
}

void hc_ib_mem_fini(struct hc_ib_ctx *ctx) {
  while (ctx->regs) {
    struct hc_ib_reg *r = ctx->regs;
    lru_unlink(ctx, r);
    reg_free(ctx, r);
  }
  if (ctx->pagemap_fd >= 0) close(ctx->pagemap_fd);
  ctx->pagemap_fd = -1;
}

static bool reg_still_mapped(const struct hc_ib_ctx *ctx, const struct hc_ib_reg *r) {
  if (r->device) return true; /* GPU ranges (dma-buf or peer memory): the driver's, not pages of ours */
  return page_frame(ctx->pagemap_fd, r->start) == r->pfn_first &&
         page_frame(ctx->pagemap_fd, r->end - 1) == r->pfn_last;
}

/* Registers GPU memory [r->start, r->end) by the ctx's mode; inside is a
 * pointer into the allocation, by which the driver finds it (r->start, the
 * first page, may lie before the allocation where the driver hands out
 * memory that is not page-aligned). */
static hc_result_t reg_device(struct hc_ib_ctx *ctx, const struct hc_ptr_info *info, const void *inside,
                              struct hc_ib_reg *r) {
  /* Remote read: a receive into it ends with the flush read ("flush" in
   * ib_priv.h), through the ctx's own loopback queue pair. */
  const int access = HC_IBV_ACCESS_LOCAL_WRITE | HC_IBV_ACCESS_REMOTE_WRITE | HC_IBV_ACCESS_REMOTE_READ;
  void *start = (void *)r->start;
  size_t len = r->end - r->start;
  if (ctx->gdr_mode == HC_IB_GDR_DMABUF) {
    const struct hc_dev_ops *d = hc_dev_get(info->kind);
    uint64_t offset = 0;
    HC_TRY(hc_dev_dmabuf_export(d, inside, len, &r->dmabuf_fd, &offset));
    r->mr = ctx->v->ibv_reg_dmabuf_mr(ctx->pd, offset, len, (uint64_t)r->start, r->dmabuf_fd, access);
    if (r->mr != NULL) return HC_OK;
    int e = errno;
    close(r->dmabuf_fd);
    r->dmabuf_fd = -1;
    /* Library and driver have dma-buf, the adapter does not (soft-RoCE,
     * older firmware): under AUTO, the next path for this and every later
     * registration. */
    if (!ctx->gdr_auto || (e != EOPNOTSUPP && e != ENOTSUP && e != EPROTONOSUPPORT && e != ENOSYS))
      return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: ibv_reg_dmabuf_mr of %zu bytes of %s memory failed: %s", ctx->dev.name,
                     len, d->name, strerror(e));
    ctx->gdr_mode = peermem_loaded() ? HC_IB_GDR_PEERMEM : HC_IB_GDR_STAGE;
    HC_INFO(HC_NET, "ib: %s refuses dma-buf registrations (%s); GPU memory through %s from now on", ctx->dev.name,
            strerror(e), ctx->gdr_mode == HC_IB_GDR_PEERMEM ? "the peer-memory module" : "pinned host staging");
  }
  if (ctx->gdr_mode == HC_IB_GDR_PEERMEM) {
    r->mr = ctx->v->ibv_reg_mr(ctx->pd, start, len, access);
    if (r->mr == NULL)
      return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: ibv_reg_mr of %zu bytes of GPU memory (peer memory) failed: %s",
                     ctx->dev.name, len, strerror(errno));
    return HC_OK;
  }
  /* Reached when a refused dma-buf left nothing but staging: the open's
   * probe says so at INFO, and the plans stage from then on. */
  char text[200];
  snprintf(text, sizeof(text),
           "ib: %s cannot register GPU memory here (HETCCL_GDR resolved to staging): it must "
           "come through pinned host staging",
           ctx->dev.name);
  hc_set_last_error(text);
  return HC_ERR_USAGE;
}

bool hc_ib_gdr_probe_reg(struct hc_ib_ctx *ctx, int device_id, char *path, size_t len) {
  static const size_t probe_bytes = 2 * HC_IB_PAGE;
  const struct hc_dev_ops *gpu =
      ctx->device_kind == HC_MEM_HOST ? NULL : hc_dev_get((enum hc_mem_kind)ctx->device_kind);
  if (gpu == NULL) {
    snprintf(path, len, "staged: not a GPU comm");
    return false;
  }
  if (ctx->gdr_mode == HC_IB_GDR_STAGE) {
    snprintf(path, len, "staged: %s",
             ctx->gdr_auto ? "this host has neither dma-buf registration nor a peer-memory "
                             "module"
                           : "HETCCL_GDR=STAGE");
    return false;
  }
  /* The probe's failure is no failure of the comm: the text before it is
   * the caller's, and goes back. */
  char saved[256];
  snprintf(saved, sizeof(saved), "%s", hc_last_error());
  void *buf = NULL;
  bool ok = false;
  struct hc_ptr_info info = {.kind = (enum hc_mem_kind)ctx->device_kind, .device = device_id};
  struct hc_ib_reg r = {.dmabuf_fd = -1};
  if (hc_dev_mem_alloc(gpu, device_id, probe_bytes, &buf) != HC_OK) {
    snprintf(path, len, "staged: no device memory to try a registration with (%s)", hc_last_error());
  } else {
    /* Whole pages inside the allocation, as the cache registers them. */
    r.start = HC_DIV_UP((uintptr_t)buf, HC_IB_PAGE) * HC_IB_PAGE;
    r.end = r.start + HC_IB_PAGE;
    if (r.end > (uintptr_t)buf + probe_bytes) r.end = r.start; /* cannot happen: two pages hold one whole one */
    ok = r.end > r.start && reg_device(ctx, &info, (const void *)r.start, &r) == HC_OK;
    if (ok)
      snprintf(path, len, "gdr %s on %s", ctx->gdr_mode == HC_IB_GDR_DMABUF ? "dma-buf" : "peer-mem", ctx->dev.name);
    else if (ctx->gdr_mode == HC_IB_GDR_STAGE) /* AUTO, after a refused dma-buf */
      snprintf(path, len, "staged: %s refuses dma-buf registrations, and no peer-memory module is loaded",
               ctx->dev.name);
    else snprintf(path, len, "staged: %s", hc_last_error());
    if (r.mr) ctx->v->ibv_dereg_mr(r.mr);
    if (r.dmabuf_fd >= 0) close(r.dmabuf_fd);
    hc_dev_mem_free(gpu, device_id, buf);
  }
  if (!ok) ctx->gdr_mode = HC_IB_GDR_STAGE; /* the transport then never meets GPU memory */
  hc_set_last_error(saved);
  return ok;
}

hc_result_t hc_ib_reg_get(struct hc_ib_ctx *ctx, void *buf, size_t n, bool need_write, struct hc_ib_reg **out) {
  uintptr_t start = (uintptr_t)buf / HC_IB_PAGE * HC_IB_PAGE;
  uintptr_t end = HC_DIV_UP((uintptr_t)buf + HC_MAX(n, (size_t)1), HC_IB_PAGE) * HC_IB_PAGE;
  *out = NULL;
  for (struct hc_ib_reg *r = ctx->regs; r; r = r->next) {
    if (r->start > start || r->end < end || (need_write && !r->writable)) continue;
    if (!reg_still_mapped(ctx, r)) {
      HC_TRACE(HC_NET, "ib: registration [%p, %p) is stale (memory freed and mapped again): dropped", (void *)r->start,
               (void *)r->end);
      reg_evict(ctx, r);
      break;
    }
    lru_unlink(ctx, r); /* to the front */
    lru_push(ctx, r);
    r->refs++;
    *out = r;
    return HC_OK;
  }
  struct hc_ptr_info info = {.kind = HC_MEM_HOST};
  if (ctx->device_kind != HC_MEM_HOST) HC_TRY(hc_dev_ptr_query(buf, &info));
  struct hc_ib_reg *r;
  HC_TRY(hc_calloc(&r, 1, sizeof(*r), "an ib registration"));
  r->dmabuf_fd = -1;
  r->start = start;
  r->end = end;
  r->writable = true;
  hc_result_t res = HC_OK;
  if (info.kind != HC_MEM_HOST) {
    r->device = true;
    res = reg_device(ctx, &info, buf, r);
  } else {
    r->mr =
        ctx->v->ibv_reg_mr(ctx->pd, (void *)start, end - start, HC_IBV_ACCESS_LOCAL_WRITE | HC_IBV_ACCESS_REMOTE_WRITE);
    if (r->mr == NULL && !need_write && (errno == EFAULT || errno == EACCES || errno == EPERM)) {
      r->mr = ctx->v->ibv_reg_mr(ctx->pd, (void *)start, end - start, 0); /* read-only pages */
      r->writable = false;
    }
    if (r->mr == NULL)
      res = HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot register %zu bytes at %p: %s", ctx->dev.name, (size_t)(end - start),
                    (void *)start, strerror(errno));
    /* Frames after ibv_reg_mr: it has faulted in and pinned every page. */
    r->pfn_first = page_frame(ctx->pagemap_fd, start);
    r->pfn_last = page_frame(ctx->pagemap_fd, end - 1);
  }
  if (res != HC_OK) {
    reg_free(ctx, r);
    return res;
  }
  r->refs = 1;
  if (ctx->max_regs > 0) {
    lru_push(ctx, r);
    while (ctx->nregs > ctx->max_regs) {
      struct hc_ib_reg *last = ctx->regs;
      while (last->next) last = last->next;
      reg_evict(ctx, last);
    }
  }
  *out = r;
  return HC_OK;
}

void hc_ib_reg_put(struct hc_ib_ctx *ctx, struct hc_ib_reg *r) {
  if (r == NULL || --r->refs > 0) return;
  if (!r->cached) reg_free(ctx, r);
}
