/*
 * device/gpu_reduce: reduce and scale on a GPU stream, for cuda and hip
 * alike (gpu_priv.h).
 *
 * Kernels: gpu_kernels.c's source, compiled by the vendor's runtime compiler
 * the first time a device reduces (once per process and device, under the
 * gpu lock; an image is reused by later devices of the same target), loaded
 * into that device's primary context, one function per dtype x op.
 *
 * Host fallback, when the compiler is missing or the kernels cannot be
 * built for a device: copy the operands into pinned staging on the stream,
 * synchronise, hc_host_reduce / hc_host_scale, copy back and synchronise,
 * chunk by chunk. Correct and slow, and it blocks the caller: the compiler
 * missing is an INFO line at load, a build failure a WARN with the log.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_priv.h"
#include "kernel_cache.h"

#define BLOCK_THREADS 256
#define STAGE_BYTES (8u << 20) /* two halves of 4 MiB */

void hc_gpu_rtc_init(struct hc_gpu *g) {
  g->rtc = g->v->rtc_open() == HC_OK;
  if (!g->rtc)
    HC_INFO(HC_DEV, "%s: %s not available (%s): reductions on %s memory run on the host, slowly", g->v->name,
            g->v->rtc_name, hc_last_error(), g->v->name);
}

/* ---- building the kernels ---- */

static hc_result_t rtc_build(const struct hc_gpu_vendor *v, const char *target_opt, bool binary, void **image,
                             size_t *image_size, char **log) {
  const char *opts[16];
  int nopts = 0;
  void *prog = NULL;
  hc_result_t r = HC_OK;
  size_t n = 0;
  *image = NULL;
  *image_size = 0;
  *log = NULL;
  if (target_opt[0]) opts[nopts++] = target_opt;
  for (const char *const *o = v->rtc_options; o && *o && nopts < (int)HC_ARRAY_LEN(opts); o++) opts[nopts++] = *o;
  int e = v->rtc_create(&prog, hc_gpu_kernel_source, "hetccl_reduce.cu");
  if (e != 0) return HC_FAIL(HC_ERR_DEVICE, "%s: %s: create program: %s", v->name, v->rtc_name, v->rtc_err_str(e));
  int ce = v->rtc_compile(prog, nopts, opts);
  if (v->rtc_log_size(prog, &n) == 0 && n > 1) {
    *log = malloc(n + 1);
    if (*log != NULL && v->rtc_log(prog, *log) == 0) (*log)[n] = 0;
    else {
      free(*log);
      *log = NULL;
    }
  }
  if (ce != 0) {
    /* Not a WARN yet: the next target may compile (build_kernels). */
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: %s: compiling the reduction kernels for %s: %s", v->name, v->rtc_name,
             target_opt[0] ? target_opt : "the current device", v->rtc_err_str(ce));
    hc_set_last_error(msg);
    r = HC_ERR_DEVICE;
    goto out;
  }
  e = v->rtc_code_size(prog, binary, &n);
  if (e != 0 || n == 0) {
    r = HC_FAIL(HC_ERR_DEVICE, "%s: %s: size of the compiled %s: %s", v->name, v->rtc_name, binary ? "binary" : "PTX",
                e ? v->rtc_err_str(e) : "empty");
    goto out;
  }
  *image = malloc(n);
  if (*image == NULL) {
    r = HC_FAIL(HC_ERR_SYSTEM, "%s: out of host memory for a %zu-byte kernel image", v->name, n);
    goto out;
  }
  e = v->rtc_code(prog, binary, *image);
  if (e != 0) {
    free(*image);
    *image = NULL;
    r = HC_FAIL(HC_ERR_DEVICE, "%s: %s: reading the compiled code: %s", v->name, v->rtc_name, v->rtc_err_str(e));
    goto out;
  }
  *image_size = n;
out:
  v->rtc_destroy(&prog);
  return r;
}

hc_result_t hc_gpu_rtc_compile(const struct hc_gpu_vendor *v, const char *target_opt, bool binary, void **image,
                               size_t *image_size, char **log) {
  *image = NULL;
  *image_size = 0;
  *log = NULL;
  HC_TRY(v->rtc_open());
  return rtc_build(v, target_opt, binary, image, image_size, log);
}

/* One kernel of a loaded module; unloads it on failure. */
static hc_result_t module_function(struct hc_gpu *g, void *mod, const char *name, void **slot) {
  int e = g->v->module_function(mod, name, slot);
  if (e == 0) return HC_OK;
  g->v->module_unload(mod);
  return HC_FAIL(HC_ERR_DEVICE, "%s: kernel %s missing from the module: %s (%d)", g->v->name, name, g->v->err_str(e),
                 e);
}

/* Resolves every kernel of a loaded module; unloads it on failure. */
static hc_result_t module_functions(struct hc_gpu *g, struct hc_gpu_dev *d, void *mod) {
  char name[64];
  for (int t = 0; t < HC_DTYPE_COUNT; t++) {
    for (int op = 0; op < HC_AVG + 2; op++) {
      bool scale = op >= HC_AVG;
      void **slot = scale ? &d->fn_scale[t][op - HC_AVG] : &d->fn_reduce[t][op];
      hc_gpu_kernel_name(name, sizeof(name), scale, (enum hc_dtype)t, scale ? op - HC_AVG : op);
      HC_TRY(module_function(g, mod, name, slot));
      if (scale) continue;
      hc_gpu_program_kernel_name(name, sizeof(name), (enum hc_dtype)t, op);
      HC_TRY(module_function(g, mod, name, &d->fn_program[t][op]));
    }
  }
  return module_function(g, mod, HC_GPU_TRAP_KERNEL, &d->fn_trap);
}

/* The kernel cache's key for an image of target (opt, binary): the
 * compiler, the target, every option and the source, one per line. NULL
 * when such images are not kept: no named target (hipRTC compiles for the
 * current device), or a compiler that cannot name itself. */
static char *image_cache_key(const struct hc_gpu_vendor *v, const char *target, size_t *len) {
  char compiler[640];
  if (!target[0] || v->rtc_identity == NULL || v->rtc_identity(compiler, sizeof(compiler)) != 0) return NULL;
  size_t n = strlen(compiler) + strlen(target) + strlen(hc_gpu_kernel_source) + 3;
  for (const char *const *o = v->rtc_options; o && *o; o++) n += strlen(*o) + 1;
  char *key = malloc(n + 1);
  if (key == NULL) return NULL;
  size_t at = (size_t)snprintf(key, n + 1, "%s\n%s\n", compiler, target);
  for (const char *const *o = v->rtc_options; o && *o; o++) at += (size_t)snprintf(key + at, n + 1 - at, "%s ", *o);
  at += (size_t)snprintf(key + at, n + 1 - at, "\n%s", hc_gpu_kernel_source);
  *len = at;
  return key;
}

/* g->image for the target (opt, binary) named target: from the kernel
 * cache when use_cache finds it there, else compiled, and then kept. */
static hc_result_t take_image(struct hc_gpu *g, int dev, const char *opt, bool binary, const char *target,
                              bool use_cache) {
  const struct hc_gpu_vendor *v = g->v;
  size_t key_len = 0;
  char *key = use_cache ? image_cache_key(v, target, &key_len) : NULL;
  void *image = NULL;
  size_t size = 0;
  const uint64_t t0 = hc_now_ns();
  const bool cached = key != NULL && hc_kernel_cache_load(key, key_len, &image, &size);
  if (cached) {
    HC_INFO(HC_DEV, "%s: device %d: reduction kernels (%s, %zu bytes) from the kernel cache in %.1f ms", v->name, dev,
            target, size, (double)(hc_now_ns() - t0) / 1e6);
  } else {
    char *log = NULL;
    const hc_result_t r = rtc_build(v, opt, binary, &image, &size, &log);
    free(g->rtc_log);
    g->rtc_log = log;
    if (r != HC_OK) {
      free(key);
      return r;
    }
    HC_INFO(HC_DEV, "%s: device %d: %s compiled the reduction kernels (%s, %zu bytes) in %.0f ms", v->name, dev,
            v->rtc_name, target, size, (double)(hc_now_ns() - t0) / 1e6);
    if (key != NULL) hc_kernel_cache_store(key, key_len, image, size);
  }
  free(key);
  free(g->image);
  g->image = image;
  g->image_size = size;
  g->image_cached = cached;
  snprintf(g->image_target, sizeof(g->image_target), "%s", target);
  return HC_OK;
}

/* Compiles (or reuses) an image for each target the vendor proposes, until
 * one loads into the current context. Called with the gpu lock held. */
static hc_result_t build_kernels(struct hc_gpu *g, int dev, struct hc_gpu_dev *d) {
  const struct hc_gpu_vendor *v = g->v;
  char opt[48], target[64];
  bool binary = false, use_cache = true;
  int attempt = 0;
  for (; v->rtc_target(dev, attempt, opt, sizeof(opt), &binary) == 0; attempt++) {
    /* An empty option compiles for the current device (hipRTC): that image
     * is this device's, not to be reused by a device of another target. */
    if (opt[0]) snprintf(target, sizeof(target), "%s %s", opt, binary ? "bin" : "ptx");
    else snprintf(target, sizeof(target), "device %d %s", dev, binary ? "bin" : "ptx");
    if ((g->image == NULL || strcmp(g->image_target, target) != 0) &&
        take_image(g, dev, opt, binary, target, use_cache) != HC_OK) {
      HC_INFO(HC_DEV, "%s: device %d: %s; next target", v->name, dev, hc_last_error());
      continue;
    }
    void *mod = NULL;
    int e = v->module_load(g->image, &mod);
    if (e != 0 && g->image_cached) {
      /* A kept image that this driver refuses (another driver wrote the
       * cache): this target is compiled afresh before the next is tried. */
      HC_INFO(HC_DEV, "%s: device %d: loading the cached %s image failed: %s (%d); compiling it", v->name, dev, target,
              v->err_str(e), e);
      free(g->image);
      g->image = NULL;
      use_cache = false;
      attempt--;
      continue;
    }
    if (e != 0) {
      HC_INFO(HC_DEV, "%s: device %d: loading the %s kernel image failed: %s (%d); next target", v->name, dev, target,
              v->err_str(e), e);
      char msg[256];
      snprintf(msg, sizeof(msg), "%s: loading the %s kernel image: %s (%d)", v->name, target, v->err_str(e), e);
      hc_set_last_error(msg);
      continue;
    }
    if (module_functions(g, d, mod) != HC_OK) continue;
    d->module = mod;
    return HC_OK;
  }
  /* Each failed attempt left its reason as the last error. */
  return attempt == 0 ? HC_FAIL(HC_ERR_DEVICE, "%s: no compile target for device %d", v->name, dev) : HC_ERR_DEVICE;
}

/* The compiler's log, one WARN line per line (a log line holds 1 KiB). */
static void warn_rtc_log(struct hc_gpu *g) {
  const char *p = g->rtc_log;
  if (p == NULL || !p[0]) return;
  HC_WARN(HC_DEV, "%s: %s log of the last attempt:", g->v->name, g->v->rtc_name);
  for (int lines = 0; *p && lines < 80; lines++) {
    size_t len = strcspn(p, "\n");
    HC_WARN(HC_DEV, "  %.*s", (int)HC_MIN(len, 900), p);
    p += len + (p[len] == '\n');
  }
}

/* The device's kernels, built on first use; HC_GPU_R_HOST when they cannot
 * be. Called inside the stream's scope. */
static enum hc_gpu_rstate device_kernels(struct hc_gpu *g, int dev, void *tok) {
  struct hc_gpu_dev *d = &g->dev[dev];
  int st = atomic_load_explicit(&d->rstate, memory_order_acquire);
  if (st != HC_GPU_R_UNTRIED) return (enum hc_gpu_rstate)st;
  pthread_mutex_lock(&g->lock);
  st = atomic_load_explicit(&d->rstate, memory_order_relaxed);
  if (st == HC_GPU_R_UNTRIED) {
    st = HC_GPU_R_HOST;
    if (g->rtc) {
      if (build_kernels(g, dev, d) == HC_OK) {
        d->mod_tok = tok;
        st = HC_GPU_R_KERNELS;
      } else {
        HC_WARN(HC_DEV, "%s: device %d: no reduction kernels (%s); reductions run on the host", g->v->name, dev,
                hc_last_error());
        warn_rtc_log(g);
      }
    }
    atomic_store_explicit(&d->rstate, st, memory_order_release);
  }
  pthread_mutex_unlock(&g->lock);
  return (enum hc_gpu_rstate)st;
}

const char *hc_gpu_reduce_path(struct hc_gpu *g, int dev) {
  if (g == NULL || dev < 0 || dev >= g->ndev) return "none";
  switch (atomic_load(&g->dev[dev].rstate)) {
  case HC_GPU_R_KERNELS: return "kernels";
  case HC_GPU_R_HOST: return "host";
  default: return "untried";
  }
}

/* ---- launching ---- */

static hc_result_t launch(struct hc_gpu *g, struct hc_gpu_dev *d, void *fn, size_t count, size_t elem, hc_stream_t s,
                          void **params, const char *what) {
  size_t packs = HC_DIV_UP(count, 16 / elem);
  size_t blocks = HC_DIV_UP(packs, BLOCK_THREADS);
  size_t max_blocks = d->sm_count > 0 ? (size_t)d->sm_count * 16 : 1024;
  blocks = HC_MAX(HC_MIN(blocks, max_blocks), 1);
  int e = g->v->launch(fn, (unsigned)blocks, BLOCK_THREADS, s, params);
  if (e != 0)
    return HC_FAIL(HC_ERR_DEVICE, "%s: launching the %s kernel (%zu elements, %zu blocks): %s (%d)", g->v->name, what,
                   count, blocks, g->v->err_str(e), e);
  return HC_OK;
}

/* Where the stream's work runs: device index and its context token. */
static hc_result_t stream_device(struct hc_gpu *g, int *dev, void **tok) {
  int e = g->v->ctx_device(dev);
  if (e != 0) return hc_gpu_fail(g, e, "device of the stream");
  e = g->v->ctx_get(tok);
  if (e != 0) return hc_gpu_fail(g, e, "context of the stream");
  if (*dev < 0 || *dev >= g->ndev)
    return HC_FAIL(HC_ERR_DEVICE, "%s: stream on device %d, beyond the %d devices found", g->v->name, *dev, g->ndev);
  return HC_OK;
}

/* Chooses kernels or the host for this call; *d is set for kernels. */
static bool use_kernels(struct hc_gpu *g, int dev, void *tok, struct hc_gpu_dev **d) {
  *d = &g->dev[dev];
  if (atomic_load(&g->force_host_reduce)) return false;
  if (device_kernels(g, dev, tok) != HC_GPU_R_KERNELS) return false;
  if ((*d)->mod_tok != tok) {
    /* A stream of a context other than the device's primary one. */
    HC_WARN_ONCE(HC_DEV,
                 "%s: device %d: stream outside the primary context; reductions on "
                 "its streams run on the host",
                 g->v->name, dev);
    return false;
  }
  return true;
}

/* ---- host fallback ---- */

static hc_result_t stage_get(struct hc_gpu *g) {
  if (g->stage != NULL) return HC_OK;
  int e = g->v->host_alloc(&g->stage, STAGE_BYTES);
  if (e != 0) {
    g->stage = NULL;
    return HC_FAIL(HC_ERR_DEVICE, "%s: allocating %u bytes of pinned staging for host reductions: %s (%d)", g->v->name,
                   STAGE_BYTES, g->v->err_str(e), e);
  }
  return HC_OK;
}

/* One staging copy on the stream; with sync, waits for the stream. */
static hc_result_t stage_copy(struct hc_gpu *g, void *dst, const void *src, size_t n, hc_stream_t s, bool sync) {
  int e = g->v->copy_async(dst, src, n, s);
  if (e == 0 && sync) e = g->v->stream_sync(s);
  if (e != 0)
    return HC_FAIL(HC_ERR_DEVICE, "%s: staging copy of %zu bytes for a host reduction: %s (%d)", g->v->name, n,
                   g->v->err_str(e), e);
  return HC_OK;
}

/* a or sa is NULL: one of reduce / scale. Inside the stream's scope. */
static hc_result_t host_fallback(struct hc_gpu *g, const struct hc_reduce_args *a, const struct hc_scale_args *sa,
                                 hc_stream_t s) {
  size_t elem = hc_dtype_size(a ? a->dtype : sa->dtype);
  size_t count = a ? a->count : sa->count;
  size_t chunk = STAGE_BYTES / 2 / elem;
  hc_result_t r = HC_OK;
  pthread_mutex_lock(&g->lock);
  HC_TRY_GOTO(stage_get(g), r, out);
  uint8_t *h0 = g->stage, *h1 = h0 + STAGE_BYTES / 2;
  for (size_t off = 0; off < count; off += chunk) {
    size_t n = HC_MIN(chunk, count - off), bytes = n * elem, boff = off * elem;
    if (a) {
      HC_TRY_GOTO(stage_copy(g, h0, (const uint8_t *)a->src0 + boff, bytes, s, false), r, out);
      HC_TRY_GOTO(stage_copy(g, h1, (const uint8_t *)a->src1 + boff, bytes, s, true), r, out);
      struct hc_reduce_args ha = *a;
      ha.dst = h0;
      ha.src0 = h0;
      ha.src1 = h1;
      ha.count = n;
      hc_host_reduce(&ha);
      HC_TRY_GOTO(stage_copy(g, (uint8_t *)a->dst + boff, h0, bytes, s, true), r, out);
    } else {
      HC_TRY_GOTO(stage_copy(g, h0, (const uint8_t *)sa->src + boff, bytes, s, true), r, out);
      struct hc_scale_args hs = *sa;
      hs.dst = h0;
      hs.src = h0;
      hs.count = n;
      hc_host_scale(&hs);
      HC_TRY_GOTO(stage_copy(g, (uint8_t *)sa->dst + boff, h0, bytes, s, true), r, out);
    }
  }
out:
  pthread_mutex_unlock(&g->lock);
  return r;
}

/* ---- the ops ---- */

static hc_result_t launch_reduce(struct hc_gpu *g, struct hc_gpu_dev *d, const struct hc_reduce_args *a,
                                 hc_stream_t s) {
  void *dst = a->dst;
  const void *src0 = a->src0, *src1 = a->src1;
  uint64_t n = a->count;
  const volatile uint64_t *trap = a->trap_word;
  void *params[] = {&dst, &src0, &src1, &n, &trap};
  HC_TRY(launch(g, d, d->fn_reduce[a->dtype][a->op], a->count, hc_dtype_size(a->dtype), s, params, "reduce"));
  if (a->trap_checked) *a->trap_checked = trap != NULL;
  return HC_OK;
}

static hc_result_t launch_scale(struct hc_gpu *g, struct hc_gpu_dev *d, const struct hc_scale_args *a, hc_stream_t s);

/* A reduce (ra) or a scale (sa) on stream s: the kernel where the stream's
 * device has kernels, else the host fallback. */
static hc_result_t run_on_stream(struct hc_gpu *g, const struct hc_reduce_args *ra, const struct hc_scale_args *sa,
                                 hc_stream_t s) {
  struct hc_gpu_scope sc;
  struct hc_gpu_dev *d;
  int dev;
  void *tok;
  hc_result_t r;
  HC_TRY(hc_gpu_scope_stream(g, s, &sc));
  HC_TRY_GOTO(stream_device(g, &dev, &tok), r, out);
  if (!use_kernels(g, dev, tok, &d)) r = host_fallback(g, ra, sa, s);
  else r = ra ? launch_reduce(g, d, ra, s) : launch_scale(g, d, sa, s);
out:
  hc_gpu_scope_exit(g, &sc);
  return r;
}

hc_result_t hc_gpu_reduce(void *ctx, const struct hc_reduce_args *a, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT || (unsigned)a->op >= HC_AVG)
    return HC_FAIL(HC_ERR_ARG, "%s: reduce: unsupported dtype %d / op %d", g->v->name, (int)a->dtype, (int)a->op);
  if (a->count == 0) return HC_OK;
  return run_on_stream(g, a, NULL, s);
}

/* The kernel arguments of a scale, computed as host_reduce.c's scale_mul /
 * scale_div compute theirs. */
static void scale_params(const struct hc_scale_args *a, uint64_t *u, double *fd, float *ff) {
  uint16_t h;
  *u = 0;
  *fd = 0;
  *ff = 0;
  if (a->kind == HC_SCALE_MUL) {
    switch (a->dtype) {
    case HC_FLOAT16:
      memcpy(&h, a->factor, 2);
      *ff = hc_half_to_float(h);
      break;
    case HC_BFLOAT16:
      memcpy(&h, a->factor, 2);
      *ff = hc_bf16_to_float(h);
      break;
    case HC_FP8_E4M3: *ff = hc_fp8e4m3_to_float(a->factor[0]); break;
    case HC_FP8_E5M2: *ff = hc_fp8e5m2_to_float(a->factor[0]); break;
    case HC_FLOAT32: memcpy(ff, a->factor, 4); break;
    case HC_FLOAT64: memcpy(fd, a->factor, 8); break;
    default: memcpy(u, a->factor, hc_dtype_size(a->dtype)); break; /* little-endian */
    }
    return;
  }
  uint64_t d = a->divisor, di = d == 0 ? 1 : d;
  switch (a->dtype) {
  case HC_INT8:
  case HC_INT32: *u = di > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : di; break;
  case HC_FLOAT64: *fd = (double)d; break;
  default:
    if (hc_dtype_is_float(a->dtype)) *ff = (float)d;
    else *u = di;
    break;
  }
}

static hc_result_t launch_scale(struct hc_gpu *g, struct hc_gpu_dev *d, const struct hc_scale_args *a, hc_stream_t s) {
  void *dst = a->dst;
  const void *src = a->src;
  uint64_t n = a->count, u;
  double fd;
  float ff;
  scale_params(a, &u, &fd, &ff);
  void *params[] = {&dst, &src, &n, &u, &fd, &ff};
  return launch(g, d, d->fn_scale[a->dtype][a->kind == HC_SCALE_DIV], a->count, hc_dtype_size(a->dtype), s, params,
                "scale");
}

hc_result_t hc_gpu_scale(void *ctx, const struct hc_scale_args *a, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  if ((unsigned)a->dtype >= HC_DTYPE_COUNT || (a->kind != HC_SCALE_MUL && a->kind != HC_SCALE_DIV))
    return HC_FAIL(HC_ERR_ARG, "%s: scale: unsupported dtype %d / kind %d", g->v->name, (int)a->dtype, (int)a->kind);
  if (a->count == 0) return HC_OK;
  return run_on_stream(g, NULL, a, s);
}

hc_result_t hc_gpu_trap_if_set(void *ctx, hc_stream_t s, const volatile uint64_t *word, bool *launched) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  struct hc_gpu_dev *d;
  int dev;
  void *tok;
  hc_result_t r = HC_OK;
  *launched = false;
  HC_TRY(hc_gpu_scope_stream(g, s, &sc));
  HC_TRY_GOTO(stream_device(g, &dev, &tok), r, out);
  if (use_kernels(g, dev, tok, &d)) {
    void *params[] = {&word};
    int e = g->v->launch(d->fn_trap, 1, 1, s, params);
    if (e != 0) {
      r = HC_FAIL(HC_ERR_DEVICE, "%s: launching the trap check kernel: %s (%d)", g->v->name, g->v->err_str(e), e);
      goto out;
    }
    *launched = true;
  }
out:
  hc_gpu_scope_exit(g, &sc);
  return r;
}

/* ---- programs ---- */

/* Whether p moves data (copies, reductions, LL ops): a program of flag
 * operations and trap checks alone costs less as a batch of them than as
 * a launch, and a stream's wait holds no GPU time while it waits. */
static bool program_moves_data(const struct hc_dev_program *p) {
  for (uint64_t k = 0; k < p->args.nops; k++)
    if (p->args.op[k].kind != HC_DEV_PROGRAM_WRITE && p->args.op[k].kind != HC_DEV_PROGRAM_WRITE_RELAXED &&
        p->args.op[k].kind != HC_DEV_PROGRAM_WAIT && p->args.op[k].kind != HC_DEV_PROGRAM_TRAP_CHECK)
      return true;
  return false;
}

/* One block: the ops' barriers join a block, not a grid. A thread per 16
 * bytes of a copy or reduction, per LL word of an LL op. */
static unsigned program_threads(const struct hc_dev_program *p) {
  uint64_t bytes = 0;
  for (uint64_t k = 0; k < p->args.nops; k++) {
    const struct hc_dev_program_op *o = &p->args.op[k];
    if (o->kind == HC_DEV_PROGRAM_COPY) bytes = HC_MAX(bytes, o->n);
    if (o->kind == HC_DEV_PROGRAM_LL_PUT || o->kind == HC_DEV_PROGRAM_LL_GET)
      bytes = HC_MAX(bytes, 16 * hc_ll_words(o->n));
    if (o->kind == HC_DEV_PROGRAM_REDUCE) bytes = HC_MAX(bytes, o->n * hc_dtype_size(p->dtype));
  }
  const uint64_t warps = HC_DIV_UP(HC_DIV_UP(bytes, 16), 32);
  return (unsigned)HC_MIN(HC_MAX(warps, 1) * 32, BLOCK_THREADS);
}

/* The program's ops one by one, each its own stream operation. */
static hc_result_t program_as_ops(struct hc_gpu *g, const struct hc_dev_program *p, hc_stream_t s) {
  struct hc_flag_op flags[HC_DEV_PROGRAM_OPS];
  int nflags = 0;
  for (uint64_t k = 0; k < p->args.nops; k++) {
    const struct hc_dev_program_op *o = &p->args.op[k];
    if (o->kind == HC_DEV_PROGRAM_WRITE || o->kind == HC_DEV_PROGRAM_WRITE_RELAXED || o->kind == HC_DEV_PROGRAM_WAIT) {
      const bool wait = o->kind == HC_DEV_PROGRAM_WAIT;
      flags[nflags++] = (struct hc_flag_op){.flag = (volatile uint64_t *)(wait ? (void *)(uintptr_t)o->src0 : o->dst),
                                            .value = o->n,
                                            .wait = wait,
                                            .relaxed = o->kind == HC_DEV_PROGRAM_WRITE_RELAXED};
      continue;
    }
    if (nflags > 0) HC_TRY(hc_gpu_flag_batch(g, s, flags, nflags));
    nflags = 0;
    bool launched;
    switch (o->kind) {
    case HC_DEV_PROGRAM_COPY: HC_TRY(hc_gpu_copy(g, o->dst, o->src0, o->n, s)); break;
    case HC_DEV_PROGRAM_REDUCE: {
      const struct hc_reduce_args a = {
          .dst = o->dst, .src0 = o->src0, .src1 = o->src1, .count = o->n, .dtype = p->dtype, .op = p->redop};
      HC_TRY(hc_gpu_reduce(g, &a, s));
      break;
    }
    case HC_DEV_PROGRAM_TRAP_CHECK: HC_TRY(hc_gpu_trap_if_set(g, s, p->args.trap, &launched)); break;
    case HC_DEV_PROGRAM_LL_PUT:
    case HC_DEV_PROGRAM_LL_GET:
      /* No stream operation reads or writes the LL form: the comm offered
       * it only where kernels run programs (api/comm.c). */
      return HC_FAIL(HC_ERR_DEVICE,
                     "%s: a program with an LL op (op %d), but the device runs programs as stream operations (no "
                     "runtime compiler, or its kernels failed to build); HETCCL_LL_BYTES=0 turns LL off",
                     g->v->name, (int)k);
    default:
      return HC_FAIL(HC_ERR_INTERNAL, "%s: program op %d of kind %llu", g->v->name, (int)k,
                     (unsigned long long)o->kind);
    }
  }
  return nflags > 0 ? hc_gpu_flag_batch(g, s, flags, nflags) : HC_OK;
}

hc_result_t hc_gpu_build_kernels(void *ctx, int device, bool *kernels) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  struct hc_gpu_dev *d;
  void *tok = NULL;
  *kernels = false;
  HC_TRY(hc_gpu_scope_device(g, device, &sc));
  int e = g->v->ctx_get(&tok);
  hc_result_t r = e == 0 ? HC_OK : hc_gpu_fail(g, e, "context of the device");
  if (r == HC_OK) *kernels = g->v->kernels_read_host_address() && use_kernels(g, device, tok, &d);
  hc_gpu_scope_exit(g, &sc);
  return r;
}

hc_result_t hc_gpu_program(void *ctx, const struct hc_dev_program *p, hc_stream_t s) {
  struct hc_gpu *g = ctx;
  struct hc_gpu_scope sc;
  struct hc_gpu_dev *d;
  int dev;
  void *tok;
  hc_result_t r;
  if (p->args.nops > HC_DEV_PROGRAM_OPS || (unsigned)p->dtype >= HC_DTYPE_COUNT || (unsigned)p->redop >= HC_AVG)
    return HC_FAIL(HC_ERR_ARG, "%s: program of %llu ops, dtype %d, op %d", g->v->name, (unsigned long long)p->args.nops,
                   (int)p->dtype, (int)p->redop);
  HC_TRY(hc_gpu_scope_stream(g, s, &sc));
  r = stream_device(g, &dev, &tok);
  const bool kernel =
      r == HC_OK && program_moves_data(p) && g->v->kernels_read_host_address() && use_kernels(g, dev, tok, &d);
  if (kernel) {
    void *params[] = {(void *)&p->args};
    int e = g->v->launch(d->fn_program[p->dtype][p->redop], 1, program_threads(p), s, params);
    if (e != 0)
      r = HC_FAIL(HC_ERR_DEVICE, "%s: launching a program of %llu ops: %s (%d)", g->v->name,
                  (unsigned long long)p->args.nops, g->v->err_str(e), e);
  }
  hc_gpu_scope_exit(g, &sc);
  return r != HC_OK || kernel ? r : program_as_ops(g, p, s);
}
