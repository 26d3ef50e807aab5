/*
 * device/gpu: the GPU backends' generic ops (cuda and hip alike) over a
 * vendor table (gpu_priv.h): loading, device scoping, memory, copies,
 * pointer queries, streams, events and stream flags. Reductions are in
 * gpu_reduce.c. Knows no vendor library and no vendor type.
 *
 * Invariant: every op leaves the calling thread's current context as it
 * found it (hc_gpu_scope_*), except set_device, whose job is to change it.
 */
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpu_priv.h"

/* Loaded backends by memory kind, for the test hooks. */
static struct hc_gpu *_Atomic loaded_gpus[HC_MEM_KIND_COUNT];

hc_result_t hc_gpu_fail(struct hc_gpu *g, int e, const char *what) {
  return HC_FAIL(HC_ERR_DEVICE, "%s: %s: %s (%d)", g->v->name, what, g->v->err_str(e), e);
}

hc_result_t hc_gpu_absent(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  hc_set_last_error(msg);
  return HC_ERR_DEVICE;
}

const char *hc_gpu_resolve(void *handle, const struct hc_gpu_sym *syms, size_t n, void *table) {
  const char *missing = NULL;
  for (size_t i = 0; i < n; i++) {
    void *f = dlsym(handle, syms[i].name);
    /* POSIX: a function pointer has the representation of a void *. */
    memcpy((char *)table + syms[i].offset, &f, sizeof(f));
    if (f == NULL && !syms[i].optional && missing == NULL) missing = syms[i].name;
    if (f == NULL) HC_TRACE(HC_DEV, "dlsym %s: not found%s", syms[i].name, syms[i].optional ? " (optional)" : "");
  }
  return missing;
}

hc_result_t hc_gpu_load(void *ctx, struct hc_dev_caps *caps) {
  struct hc_gpu *g = ctx;
  const struct hc_gpu_vendor *v = g->v;
  *caps = (struct hc_dev_caps){0};
  int ndev = 0;
  /* Absent library or device: the vendor set the last-error text (no WARN). */
  HC_TRY(v->open(&ndev));
  g->ndev = HC_MIN(ndev, HC_GPU_MAX_DEVICES);
  if (ndev > HC_GPU_MAX_DEVICES)
    HC_INFO(HC_DEV, "%s: %d devices, using the first %d", v->name, ndev, HC_GPU_MAX_DEVICES);
  bool mps = g->ndev > 0;
  for (int d = 0; d < g->ndev; d++) {
    int sms = 0, major = 0, minor = 0, mps_enabled = 0;
    mps &= v->device_attr(d, HC_GPU_ATTR_MPS, &mps_enabled) == 0 && mps_enabled == 1;
    if (v->device_attr(d, HC_GPU_ATTR_SM_COUNT, &sms) != 0 || sms <= 0) sms = 0;
    g->dev[d].sm_count = sms;
    if (v->device_attr(d, HC_GPU_ATTR_CC_MAJOR, &major) == 0 && v->device_attr(d, HC_GPU_ATTR_CC_MINOR, &minor) == 0)
      HC_INFO(HC_DEV, "%s: device %d: compute capability %d.%d, %d multiprocessors", v->name, d, major, minor, sms);
  }
  atomic_store(&g->mem_ops, v->has_mem_ops());
  hc_gpu_rtc_init(g);
  caps->device_count = g->ndev;
  caps->stream_mem_ops = atomic_load(&g->mem_ops);
  caps->runtime_compile = g->rtc;
  caps->reduce_reads_host = !g->rtc || v->kernels_read_host_address();
  caps->mps = mps;
  if (mps) HC_INFO(HC_DEV, "%s: contexts are clients of an MPS server", v->name);
  atomic_store(&loaded_gpus[v->kind], g);
  return HC_OK;
}

struct hc_gpu *hc_gpu_state(enum hc_mem_kind kind) {
  if ((unsigned)kind >= HC_MEM_KIND_COUNT) return NULL;
  if (hc_dev_get(kind) == NULL) return NULL;
  return atomic_load(&loaded_gpus[kind]);
}

/* ---- device scoping ---- */

static hc_result_t check_device(struct hc_gpu *g, int dev) {
  if (dev < 0 || dev >= g->ndev)
    return HC_FAIL(HC_ERR_ARG, "%s: device %d out of range (%d devices)", g->v->name, dev, g->ndev);
  return HC_OK;
}

static hc_result_t scope_token(struct hc_gpu *g, void *tok, struct hc_gpu_scope *sc) {
  void *cur = NULL;
  int e = g->v->ctx_get(&cur);
  if (e != 0) return hc_gpu_fail(g, e, "get current context");
  sc->saved = cur;
  sc->switched = false;
  if (tok == cur || tok == NULL) return HC_OK;
  e = g->v->ctx_set(tok);
  if (e != 0) return hc_gpu_fail(g, e, "set current context");
  sc->switched = true;
  return HC_OK;
}

hc_result_t hc_gpu_scope_device(struct hc_gpu *g, int dev, struct hc_gpu_scope *sc) {
  void *tok = NULL;
  *sc = (struct hc_gpu_scope){0};
  if (dev < 0) {
    int e = g->v->ctx_get(&tok);
    if (e != 0) return hc_gpu_fail(g, e, "get current context");
    if (tok != NULL) {
      sc->saved = tok;
      return HC_OK;
    }
    dev = atomic_load(&g->default_dev);
  }
  HC_TRY(check_device(g, dev));
  int e = g->v->device_token(dev, &tok);
  if (e != 0) return hc_gpu_fail(g, e, "retain the device's primary context");
  return scope_token(g, tok, sc);
}

hc_result_t hc_gpu_scope_stream(struct hc_gpu *g, hc_stream_t s, struct hc_gpu_scope *sc) {
  *sc = (struct hc_gpu_scope){0};
  if (s == NULL) return hc_gpu_scope_device(g, -1, sc); /* legacy stream: current device */
  void *tok = NULL;
  int e = g->v->stream_token(s, &tok);
  if (e != 0) return hc_gpu_fail(g, e, "find the stream's context");
  if (tok == NULL) return hc_gpu_scope_device(g, -1, sc);
  return scope_token(g, tok, sc);
}

void hc_gpu_scope_exit(struct hc_gpu *g, struct hc_gpu_scope *sc) {
  if (!sc->switched) return;
  int e = g->v->ctx_set(sc->saved);
  if (e != 0) HC_WARN_ONCE(HC_DEV, "%s: cannot restore the caller's context: %s", g->v->name, g->v->err_str(e));
  sc->switched = false;
}

/* Runs one vendor call inside a scope; the scope's failure comes first. */
#define IN_SCOPE(g, enter, call, what)                \
  do {                                                \
    struct hc_gpu_scope sc_;                          \
    HC_TRY(enter);                                    \
    int e_ = (call);                                  \
    hc_gpu_scope_exit((g), &sc_);                     \
    if (e_ != 0) return hc_gpu_fail((g), e_, (what)); \
    return HC_OK;                                     \
  } while (0)

hc_result_t hc_gpu_set_device(void *ctx, int device) {
  struct hc_gpu *g = ctx;
  void *tok = NULL;
  HC_TRY(check_device(g, device));
  int e = g->v->device_token(device, &tok);
  if (e != 0) return hc_gpu_fail(g, e, "retain the device's primary context");
  e = g->v->ctx_set(tok);
  if (e != 0) return hc_gpu_fail(g, e, "set current device");
  atomic_store(&g->default_dev, device);
  return HC_OK;
}

/* The calling thread's current context, NULL for none. */
static hc_result_t current_context(struct hc_gpu *g, void **tok) {
  *tok = NULL;
  int e = g->v->ctx_get(tok);
  return e != 0 ? hc_gpu_fail(g, e, "get current context") : HC_OK;
}

/* A context is current (HIP's ctx_get always names the current device). */
hc_result_t hc_gpu_thread_bound(void *ctx, bool *bound) {
  void *tok;
  *bound = false;
  HC_TRY(current_context(ctx, &tok));
  *bound = tok != NULL;
  return HC_OK;
}

/* The runtime's answer (cudaGetDevice / hipGetDevice): the current
 * context's device, 0 when none is current. */
hc_result_t hc_gpu_current_device(void *ctx, int *device) {
  struct hc_gpu *g = ctx;
  void *tok;
  *device = 0;
  HC_TRY(current_context(g, &tok));
  if (tok == NULL) return HC_OK;
  int e = g->v->ctx_device(device);
  if (e != 0) return hc_gpu_fail(g, e, "device of the current context");
  return HC_OK;
}

/* ---- memory ---- */

hc_result_t hc_gpu_mem_alloc(void *ctx, int device, size_t n, void **p) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  *p = NULL;
  HC_TRY(hc_gpu_scope_device(g, device, &sc));
  int e = g->v->mem_alloc(p, n ? n : 1);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0) {
    *p = NULL;
    return HC_FAIL(HC_ERR_DEVICE, "%s: allocating %zu bytes on device %d: %s (%d)", g->v->name, n, device,
                   g->v->err_str(e), e);
  }
  return HC_OK;
}

hc_result_t hc_gpu_mem_free(void *ctx, int device, void *p) {
  struct hc_gpu *g = ctx;
  if (p == NULL) return HC_OK;
  IN_SCOPE(g, hc_gpu_scope_device(g, device, &sc_), g->v->mem_free(p), "free device memory");
}

hc_result_t hc_gpu_host_alloc(void *ctx, size_t n, void **p) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  *p = NULL;
  HC_TRY(hc_gpu_scope_device(g, -1, &sc));
  int e = g->v->host_alloc(p, n ? n : 1);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0) {
    *p = NULL;
    return HC_FAIL(HC_ERR_DEVICE, "%s: allocating %zu bytes of pinned host memory: %s (%d)", g->v->name, n,
                   g->v->err_str(e), e);
  }
  return HC_OK;
}

hc_result_t hc_gpu_host_free(void *ctx, void *p) {
  struct hc_gpu *g = ctx;
  if (p == NULL) return HC_OK;
  IN_SCOPE(g, hc_gpu_scope_device(g, -1, &sc_), g->v->host_free(p), "free pinned host memory");
}

hc_result_t hc_gpu_host_register(void *ctx, void *p, size_t n) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  HC_TRY(hc_gpu_scope_device(g, -1, &sc));
  int e = g->v->host_register(p, n);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0)
    return HC_FAIL(HC_ERR_DEVICE, "%s: registering %zu bytes of host memory at %p: %s (%d)", g->v->name, n, p,
                   g->v->err_str(e), e);
  return HC_OK;
}

/* The range must cover whole host pages of one allocation, so it runs
 * from p's page to the allocation's end, rounded to a page (allocations
 * are made in pages of at least 2 MiB); the dma-buf starts at p's page
 * (offset 0). */
static int dmabuf_export(const struct hc_gpu_vendor *v, const void *p, int *fd) {
  const uintptr_t page = 4096;
  uintptr_t base = 0, start = (uintptr_t)p / page * page;
  size_t size = 0;
  int e = v->mem_range(p, &base, &size);
  if (e != 0) return e;
  return v->dmabuf_fd(start, (size_t)(HC_DIV_UP(base + size, page) * page - start), fd);
}

hc_result_t hc_gpu_dmabuf_export(void *ctx, const void *p, size_t n, int *fd, uint64_t *offset) {
  struct hc_gpu *g = ctx;
  *fd = -1;
  *offset = 0;
  if (g->v->mem_range == NULL || g->v->dmabuf_fd == NULL)
    return HC_FAIL(HC_ERR_DEVICE, "%s: this driver cannot export device memory as a dma-buf", g->v->name);
  struct hc_gpu_scope sc;
  HC_TRY(hc_gpu_scope_device(g, -1, &sc));
  int e = dmabuf_export(g->v, p, fd);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0) {
    *fd = -1;
    return HC_FAIL(HC_ERR_DEVICE, "%s: exporting %zu bytes of device memory at %p as a dma-buf: %s (%d)", g->v->name, n,
                   p, g->v->err_str(e), e);
  }
  HC_INFO(HC_DEV, "%s: %zu bytes at %p exported as dma-buf fd %d (offset %llu)", g->v->name, n, p, *fd,
          (unsigned long long)*offset);
  return HC_OK;
}

hc_result_t hc_gpu_host_unregister(void *ctx, void *p) {
  struct hc_gpu *g = ctx;
  IN_SCOPE(g, hc_gpu_scope_device(g, -1, &sc_), g->v->host_unregister(p), "unregister host memory");
}

hc_result_t hc_gpu_ptr_query(void *ctx, const void *p, struct hc_ptr_info *out) {
  struct hc_gpu *g = ctx;
  enum hc_gpu_ptr_type type = HC_GPU_PTR_UNKNOWN;
  int device = -1;
  *out = (struct hc_ptr_info){.kind = HC_MEM_HOST, .device = -1};
  if (p == NULL) return HC_OK;
  int e = g->v->ptr_attrs(p, &type, &device);
  if (e != 0 && e == g->v->err_invalid_context) {
    /* No context on this thread: ask again inside the default device's. */
    struct hc_gpu_scope sc;
    HC_TRY(hc_gpu_scope_device(g, -1, &sc));
    e = g->v->ptr_attrs(p, &type, &device);
    hc_gpu_scope_exit(g, &sc);
  }
  /* A pointer the driver never saw is plain host memory, never an error. */
  if (e != 0 && (e == g->v->err_invalid_value || e == g->v->err_invalid_context)) return HC_OK;
  if (e != 0) return hc_gpu_fail(g, e, "pointer query");
  switch (type) {
  case HC_GPU_PTR_DEVICE:
    out->kind = g->v->kind;
    out->device = device;
    break;
  case HC_GPU_PTR_HOST_PINNED: out->host_pinned = true; break;
  case HC_GPU_PTR_UNKNOWN: break;
  }
  return HC_OK;
}

/* ---- copies, streams, events ---- */

hc_result_t hc_gpu_copy(void *ctx, void *dst, const void *src, size_t n, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  if (n == 0 || dst == src) return HC_OK;
  struct hc_gpu_scope sc;
  HC_TRY(hc_gpu_scope_stream(g, s, &sc));
  int e = g->v->copy_async(dst, src, n, s);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0)
    return HC_FAIL(HC_ERR_DEVICE, "%s: copy of %zu bytes %p -> %p: %s (%d)", g->v->name, n, src, dst, g->v->err_str(e),
                   e);
  return HC_OK;
}

hc_result_t hc_gpu_stream_create(void *ctx, int device, hc_stream_t *s) {
  struct hc_gpu *g = ctx;
  *s = NULL;
  IN_SCOPE(g, hc_gpu_scope_device(g, device, &sc_), g->v->stream_create(s), "create a stream");
}

hc_result_t hc_gpu_stream_destroy(void *ctx, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  if (s == NULL) return HC_OK;
  IN_SCOPE(g, hc_gpu_scope_stream(g, s, &sc_), g->v->stream_destroy(s), "destroy a stream");
}

hc_result_t hc_gpu_stream_sync(void *ctx, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  IN_SCOPE(g, hc_gpu_scope_stream(g, s, &sc_), g->v->stream_sync(s), "synchronise a stream");
}

hc_result_t hc_gpu_stream_capturing(void *ctx, hc_stream_t s, bool *capturing) {
  struct hc_gpu *g = ctx;
  *capturing = false;
  IN_SCOPE(g, hc_gpu_scope_stream(g, s, &sc_), g->v->stream_capturing(s, capturing), "query stream capture");
}

hc_result_t hc_gpu_event_create(void *ctx, hc_event_t *e) {
  struct hc_gpu *g = ctx;
  *e = NULL;
  IN_SCOPE(g, hc_gpu_scope_device(g, -1, &sc_), g->v->event_create(e), "create an event");
}

hc_result_t hc_gpu_event_destroy(void *ctx, hc_event_t e) {
  struct hc_gpu *g = ctx;
  if (e == NULL) return HC_OK;
  IN_SCOPE(g, hc_gpu_scope_device(g, -1, &sc_), g->v->event_destroy(e), "destroy an event");
}

hc_result_t hc_gpu_event_record(void *ctx, hc_event_t e, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  IN_SCOPE(g, hc_gpu_scope_stream(g, s, &sc_), g->v->event_record(e, s), "record an event");
}

hc_result_t hc_gpu_event_query(void *ctx, hc_event_t ev, int *done) {
  struct hc_gpu *g = ctx;
  *done = 0;
  int e = g->v->event_query(ev);
  if (e == g->v->err_not_ready) return HC_OK;
  if (e != 0) return hc_gpu_fail(g, e, "query an event");
  *done = 1;
  return HC_OK;
}

hc_result_t hc_gpu_stream_wait_event(void *ctx, hc_stream_t s, hc_event_t e) {
  struct hc_gpu *g = ctx;
  IN_SCOPE(g, hc_gpu_scope_stream(g, s, &sc_), g->v->stream_wait_event(s, e), "make a stream wait for an event");
}

/* ---- stream flags ---- */

/*
 * The host-function fallback, for drivers without stream memory operations.
 * A wait is a host function that spins until the flag reaches the value;
 * the stream cannot move on meanwhile, which is the point. It gives up after
 * HETCCL_TIMEOUT (WARN): a host function cannot fail its stream, and a
 * stuck driver thread is worse than a late one. Drivers may run the host
 * functions of all streams on one thread, so with the fallback a wait must
 * be released by the host (the proxy thread), not by a flag_write queued on
 * another stream after it.
 */
struct flag_op {
  volatile uint64_t *flag;
  uint64_t value;
  uint64_t timeout_ns;
};

static void flag_wait_fn(void *arg) {
  struct flag_op *op = arg;
  uint64_t start = hc_now_ns();
  unsigned spins = 0;
  while (__atomic_load_n(op->flag, __ATOMIC_ACQUIRE) < op->value) {
    if (++spins < 1000) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, 20000}; /* 20 us */
    nanosleep(&ts, NULL);
    if (hc_now_ns() - start > op->timeout_ns) {
      HC_WARN(HC_DEV,
              "stream flag wait for %llu at %p timed out after %llu s (flag is %llu); "
              "releasing the stream",
              (unsigned long long)op->value, (void *)op->flag, (unsigned long long)(op->timeout_ns / 1000000000ull),
              (unsigned long long)*op->flag);
      break;
    }
  }
  free(op);
}

static void flag_write_fn(void *arg) {
  struct flag_op *op = arg;
  __atomic_store_n(op->flag, op->value, __ATOMIC_RELEASE);
  free(op);
}

static hc_result_t flag_host_func(struct hc_gpu *g, hc_stream_t s, volatile uint64_t *flag, uint64_t v, bool wait) {
  struct flag_op *op = malloc(sizeof(*op));
  if (op == NULL) return HC_FAIL(HC_ERR_SYSTEM, "%s: out of host memory for a stream flag", g->v->name);
  op->flag = flag;
  op->value = v;
  op->timeout_ns = (uint64_t)hc_param_int(HC_P_TIMEOUT) * 1000000000ull;
  struct hc_gpu_scope sc;
  hc_result_t r = hc_gpu_scope_stream(g, s, &sc);
  if (r != HC_OK) {
    free(op);
    return r;
  }
  int e = g->v->launch_host_func(s, wait ? flag_wait_fn : flag_write_fn, op);
  hc_gpu_scope_exit(g, &sc);
  if (e != 0) {
    free(op); /* never queued: the driver does not own it */
    return hc_gpu_fail(g, e,
                       wait ? "enqueue a host function waiting on a flag" : "enqueue a host function writing a flag");
  }
  return HC_OK;
}

/* A stream memory operation, or the host function when the driver refuses
 * them (then for good, said once at INFO). */
static hc_result_t flag_op(struct hc_gpu *g, hc_stream_t s, volatile uint64_t *flag, uint64_t v, bool wait) {
  if (flag == NULL) return HC_FAIL(HC_ERR_ARG, "%s: stream flag is NULL", g->v->name);
  if (!atomic_load(&g->mem_ops) || atomic_load(&g->force_host_flags)) return flag_host_func(g, s, flag, v, wait);
  struct hc_gpu_scope sc;
  HC_TRY(hc_gpu_scope_stream(g, s, &sc));
  int e = wait ? g->v->wait_value64(s, flag, v) : g->v->write_value64(s, flag, v);
  hc_gpu_scope_exit(g, &sc);
  if (e == 0) return HC_OK;
  if (e == g->v->err_not_supported) {
    HC_INFO(HC_DEV, "%s: stream memory operations refused (%s); using host functions", g->v->name, g->v->err_str(e));
    atomic_store(&g->mem_ops, false);
    return flag_host_func(g, s, flag, v, wait);
  }
  return HC_FAIL(HC_ERR_DEVICE, "%s: stream %s of flag %p (value %llu): %s (%d)", g->v->name,
                 wait ? "wait on" : "write", (void *)flag, (unsigned long long)v, g->v->err_str(e), e);
}

hc_result_t hc_gpu_flag_wait(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t v) {
  struct hc_gpu *g = ctx;
  return flag_op(g, s, flag, v, true);
}

hc_result_t hc_gpu_flag_write(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t v) {
  struct hc_gpu *g = ctx;
  return flag_op(g, s, flag, v, false);
}

hc_result_t hc_gpu_flag_batch(void *ctx, hc_stream_t s, const struct hc_flag_op *ops, int n) {
  struct hc_gpu *g = ctx;
  if (n > 1 && g->v->batch_values64 != NULL && atomic_load(&g->mem_ops) && !atomic_load(&g->force_host_flags)) {
    struct hc_gpu_scope sc;
    HC_TRY(hc_gpu_scope_stream(g, s, &sc));
    int e = g->v->batch_values64(s, ops, n);
    hc_gpu_scope_exit(g, &sc);
    if (e == 0) return HC_OK;
    if (e != g->v->err_not_supported)
      return HC_FAIL(HC_ERR_DEVICE, "%s: a batch of %d stream flag operations: %s (%d)", g->v->name, n,
                     g->v->err_str(e), e);
  }
  for (int i = 0; i < n; i++) HC_TRY(flag_op(g, s, ops[i].flag, ops[i].value, ops[i].wait));
  return HC_OK;
}

hc_result_t hc_gpu_pci_bus_id(void *ctx, int device, char *out, size_t len) {
  struct hc_gpu *g = ctx;
  if (len) out[0] = 0;
  HC_TRY(check_device(g, device));
  if (g->v->pci_bus_id == NULL)
    return HC_FAIL(HC_ERR_DEVICE, "%s: this driver cannot name a device's PCI bus id", g->v->name);
  int e = g->v->pci_bus_id(device, out, (int)HC_MIN(len, (size_t)INT_MAX));
  if (e != 0) return hc_gpu_fail(g, e, "PCI bus id");
  return HC_OK;
}

hc_result_t hc_gpu_rdma_flush_needed(void *ctx, int device, bool *needed, char *why, size_t len) {
  struct hc_gpu *g = ctx;
  int major = 0, minor = 0;
  const char *reason = "";
  *needed = true;
  if (len) why[0] = 0;
  HC_TRY(check_device(g, device));
  int e = g->v->device_attr(device, HC_GPU_ATTR_CC_MAJOR, &major);
  if (e == 0) e = g->v->device_attr(device, HC_GPU_ATTR_CC_MINOR, &minor);
  if (e != 0) return hc_gpu_fail(g, e, "compute capability (whether RDMA writes need a flush)");
  *needed = g->v->rdma_flush_needed(major, minor, &reason);
  snprintf(why, len, "%s compute capability %d.%d, %s", g->v->name, major, minor, reason);
  return HC_OK;
}

/* ---- datatypes ---- */

hc_result_t hc_gpu_fp8_layout(void *ctx, int device, enum hc_fp8_layout *out) {
  struct hc_gpu *g = ctx;
  int major = 0, minor = 0;
  *out = HC_FP8_OCP;
  HC_TRY(check_device(g, device));
  int e = g->v->device_attr(device, HC_GPU_ATTR_CC_MAJOR, &major);
  if (e == 0) e = g->v->device_attr(device, HC_GPU_ATTR_CC_MINOR, &minor);
  if (e != 0) return hc_gpu_fail(g, e, "compute capability (for the fp8 encodings)");
  *out = g->v->fp8_layout(major, minor);
  return HC_OK;
}
