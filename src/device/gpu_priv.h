/*
 * device/gpu_priv: the one implementation behind the cuda and hip backends.
 *
 * A vendor file (cuda.c, hip.c) owns only its library: it dlopens it,
 * resolves the entry points and fills a `struct hc_gpu_vendor` of
 * functions with hetccl's own uniform signatures, each a thin wrapper over
 * one vendor call that returns the vendor's result code (0 is success).
 * gpu.c and gpu_reduce.c implement every hc_dev_ops entry over that table:
 * device scoping, errors and their messages, stream flags and their
 * host-function fallback, the runtime-compiled reduction kernels and their
 * host fallback. So every GPU test on an NVIDIA machine exercises the logic
 * an AMD machine runs, and what stays unrun there is only the table.
 *
 * Devices and contexts. A "token" names a vendor context: a CUcontext (the
 * device's primary context) for CUDA, device + 1 for HIP. Every op that needs
 * a device makes it current for the call only and then restores what the
 * calling thread had (PyTorch's current device is left alone):
 *   - ops with a device argument use that device;
 *   - ops with a stream use the stream's device;
 *   - the others (host_alloc, host_register, event_create, ...) use the
 *     calling thread's current device, else the device of the last
 *     set_device() in the process, else device 0.
 *
 * Only device/ includes this header; tests include it for white-box hooks.
 */
#ifndef HC_GPU_PRIV_H_
#define HC_GPU_PRIV_H_

#include <pthread.h>

#include "device.h"

#define HC_GPU_MAX_DEVICES 64

/* Device attributes the generic code asks for; a vendor that cannot answer
 * returns non-zero and the generic code uses a default. */
enum hc_gpu_attr { HC_GPU_ATTR_SM_COUNT, HC_GPU_ATTR_CC_MAJOR, HC_GPU_ATTR_CC_MINOR, HC_GPU_ATTR_MPS };

/* What a pointer is, as the vendor reports it. */
enum hc_gpu_ptr_type { HC_GPU_PTR_UNKNOWN, HC_GPU_PTR_HOST_PINNED, HC_GPU_PTR_DEVICE };

/* Every entry returns the vendor's result code, 0 on success, unless noted.
 * Entries marked optional may be NULL (an old driver); the generic code then
 * takes the documented fallback. None of them logs. */
struct hc_gpu_vendor {
  const char *name;     /* "cuda", "hip": backend name and log prefix */
  const char *rtc_name; /* "NVRTC", "hipRTC" */
  enum hc_mem_kind kind;
  /* Result codes the generic code tells apart. */
  int err_not_ready;       /* event query: work still pending */
  int err_invalid_value;   /* pointer query of memory the driver never saw */
  int err_invalid_context; /* no current context; -1 if the vendor has none */
  int err_not_supported;   /* stream memory operation refused */
  /* Options every runtime compile gets, NULL-terminated: IEEE arithmetic,
   * no contraction into FMA, denormals kept (the host kernels' rules). */
  const char *const *rtc_options;

  /* dlopen the driver library, resolve every symbol, initialise the driver
   * and count devices. HC_ERR_DEVICE with the last-error text set (never a
   * WARN) when the library, a symbol or a device is missing. Called by
   * load (and by tests, to read why it failed). */
  hc_result_t (*open)(int *ndev);
  /* The vendor's text for a result code; never NULL. */
  const char *(*err_str)(int e);
  int (*device_attr)(int dev, enum hc_gpu_attr a, int *value);
  /* The device's PCI bus id, NUL-terminated in out. Optional (NULL). */
  int (*pci_bus_id)(int dev, char *out, int len);
  /* Whether stream wait/write value can run on the GPU (entry points found). */
  bool (*has_mem_ops)(void);
  /* Whether a kernel reads mapped host memory (host_alloc, host_register)
   * at its host address. */
  bool (*kernels_read_host_address)(void);
  /* The fp8 encodings of a device of this compute capability: a table
   * fact of the vendor (CUDA: always OCP; HIP: fnuz on 9.4, gfx94x). */
  enum hc_fp8_layout (*fp8_layout)(int cc_major, int cc_minor);
  /* Whether an RDMA write into a device of this compute capability needs a
   * flush before the device reads it (hc_dev_ops.rdma_flush_needed), and
   * the vendor's reason, a phrase after the capability. */
  bool (*rdma_flush_needed)(int cc_major, int cc_minor, const char **why);

  /* ---- contexts ---- */
  int (*device_token)(int dev, void **tok);      /* retains the primary context */
  int (*ctx_get)(void **tok);                    /* NULL when none is current */
  int (*ctx_set)(void *tok);                     /* NULL unbinds (CUDA) */
  int (*ctx_device)(int *dev);                   /* device of the current context */
  int (*stream_token)(void *stream, void **tok); /* NULL stream: current */

  /* ---- memory ---- */
  int (*mem_alloc)(void **p, size_t n);
  int (*mem_free)(void *p);
  int (*host_alloc)(void **p, size_t n); /* portable, mapped */
  int (*host_free)(void *p);
  int (*host_register)(void *p, size_t n); /* portable, mapped */
  int (*host_unregister)(void *p);
  /* Classifies p; a pointer the driver does not know gives either
   * HC_GPU_PTR_UNKNOWN or err_invalid_value (the driver's choice). */
  int (*ptr_attrs)(const void *p, enum hc_gpu_ptr_type *type, int *device);

  /* ---- streams and events ---- */
  int (*copy_async)(void *dst, const void *src, size_t n, void *stream);
  int (*stream_create)(void **s); /* non-blocking */
  int (*stream_destroy)(void *s);
  int (*stream_sync)(void *s);
  int (*stream_capturing)(void *s, bool *capturing);
  int (*event_create)(void **e); /* timing disabled */
  int (*event_destroy)(void *e);
  int (*event_record)(void *e, void *s);
  int (*event_query)(void *e); /* 0 done, err_not_ready pending */
  int (*stream_wait_event)(void *s, void *e);
  /* Stream waits until *flag >= v / writes v after prior work. flag is
   * mapped host memory (host_alloc, host_register). Optional (has_mem_ops). */
  int (*wait_value64)(void *s, volatile uint64_t *flag, uint64_t v);
  int (*write_value64)(void *s, volatile uint64_t *flag, uint64_t v);
  /* Several of them in one call. Optional (NULL: one call each). */
  int (*batch_values64)(void *s, const struct hc_flag_op *ops, int n);
  /* fn(arg) on a driver thread once prior work is done; fn makes no calls
   * into the vendor library. */
  int (*launch_host_func)(void *s, void (*fn)(void *), void *arg);
  /* dma-buf export, in two steps so that gpu.c owns the page range: the
   * device allocation holding p (its start and size), then a dma-buf file
   * descriptor of [start, start + len), whole host pages of one
   * allocation. Optional, both or neither (the driver cannot export). */
  int (*mem_range)(const void *p, uintptr_t *base, size_t *size);
  int (*dmabuf_fd)(uintptr_t start, size_t len, int *fd);

  /* ---- modules ---- */
  int (*module_load)(const void *image, void **mod);
  int (*module_unload)(void *mod);
  int (*module_function)(void *mod, const char *name, void **fn);
  int (*launch)(void *fn, unsigned grid, unsigned block, void *stream, void **params);

  /* ---- runtime compiler (hetccl's names, the vendor's rtc codes) ---- */
  /* Loads the compiler library. HC_ERR_DEVICE with the last-error text set
   * when it is absent (normal: reductions then run on the host). */
  hc_result_t (*rtc_open)(void);
  /* Target of compile attempt `attempt` for dev (0, 1, ...): the options
   * naming the architecture and whether the output is a binary the loader
   * takes as is. Non-zero when there is no such attempt. */
  int (*rtc_target)(int dev, int attempt, char *opt, size_t n, bool *binary);
  int (*rtc_create)(void **prog, const char *src, const char *name);
  int (*rtc_compile)(void *prog, int nopts, const char *const *opts);
  int (*rtc_log_size)(void *prog, size_t *n);
  int (*rtc_log)(void *prog, char *log);
  int (*rtc_code_size)(void *prog, bool binary, size_t *n);
  int (*rtc_code)(void *prog, bool binary, char *code);
  int (*rtc_destroy)(void **prog);
  const char *(*rtc_err_str)(int e);
  /* Optional: writes what names the loaded compiler's output (its version
   * and library file), the key under which kernel_cache.h keeps images;
   * NULL or non-zero: images are not kept. */
  int (*rtc_identity)(char *buf, size_t n);
};

/* The kernels, one per dtype x op; see gpu_kernels.c. */
extern const char hc_gpu_kernel_source[];
/* Name of a kernel: "hc_reduce_f32_sum", "hc_scale_bf16_div". */
void hc_gpu_kernel_name(char *buf, size_t n, bool scale, enum hc_dtype t, int op);
/* Name of a program kernel (hc_dev_program): "hc_program_f32_sum". */
void hc_gpu_program_kernel_name(char *buf, size_t n, enum hc_dtype t, int op);
#define HC_GPU_TRAP_KERNEL "hc_trap_if_set"

/* Per-device reduction state: compiled once, lazily, under the gpu lock. */
enum hc_gpu_rstate { HC_GPU_R_UNTRIED = 0, HC_GPU_R_KERNELS, HC_GPU_R_HOST };
struct hc_gpu_dev {
  atomic_int rstate; /* enum hc_gpu_rstate; set once, read without the lock */
  void *mod_tok;     /* context the module lives in */
  void *module;
  void *fn_reduce[HC_DTYPE_COUNT][HC_AVG];
  void *fn_scale[HC_DTYPE_COUNT][2];
  void *fn_program[HC_DTYPE_COUNT][HC_AVG]; /* by the dtype and op of its reductions */
  void *fn_trap;                            /* HC_GPU_TRAP_KERNEL */
  int sm_count;
};

/* A backend's process-wide state: a vendor table plus what load() found. */
struct hc_gpu {
  const struct hc_gpu_vendor *v;
  pthread_mutex_t lock; /* module builds, staging buffers */
  int ndev;
  atomic_bool mem_ops;    /* flag ops on the GPU; else host functions */
  bool rtc;               /* the runtime compiler loaded */
  atomic_int default_dev; /* last set_device() */
  /* Tests: force the fallbacks so one GPU run covers both paths. */
  atomic_bool force_host_flags, force_host_reduce;
  struct hc_gpu_dev dev[HC_GPU_MAX_DEVICES];
  /* Last compiled image, reused for devices of the same target;
   * image_cached: read from the kernel cache (kernel_cache.h). */
  char image_target[64];
  void *image;
  size_t image_size;
  bool image_cached;
  char *rtc_log; /* log of the last compile (kept for tests) */
  /* Pinned staging for the host fallback of reduce and scale. */
  void *stage;
  size_t stage_bytes;
};

/* The generic ops (gpu.c, gpu_reduce.c): hc_dev_ops entries plus the state. */
hc_result_t hc_gpu_load(void *ctx, struct hc_dev_caps *caps);
hc_result_t hc_gpu_mem_alloc(void *ctx, int device, size_t n, void **p);
hc_result_t hc_gpu_mem_free(void *ctx, int device, void *p);
hc_result_t hc_gpu_copy(void *ctx, void *dst, const void *src, size_t n, hc_stream_t s);
hc_result_t hc_gpu_reduce(void *ctx, const struct hc_reduce_args *a, hc_stream_t s);
hc_result_t hc_gpu_scale(void *ctx, const struct hc_scale_args *a, hc_stream_t s);
hc_result_t hc_gpu_trap_if_set(void *ctx, hc_stream_t s, const volatile uint64_t *word, bool *launched);
hc_result_t hc_gpu_program(void *ctx, const struct hc_dev_program *p, hc_stream_t s);
hc_result_t hc_gpu_build_kernels(void *ctx, int device, bool *kernels);
hc_result_t hc_gpu_ptr_query(void *ctx, const void *p, struct hc_ptr_info *out);
hc_result_t hc_gpu_set_device(void *ctx, int device);
hc_result_t hc_gpu_host_alloc(void *ctx, size_t n, void **p);
hc_result_t hc_gpu_host_free(void *ctx, void *p);
hc_result_t hc_gpu_host_register(void *ctx, void *p, size_t n);
/* hc_dev_ops.dmabuf_export; HC_ERR_DEVICE when the vendor has none. */
hc_result_t hc_gpu_dmabuf_export(void *ctx, const void *p, size_t n, int *fd, uint64_t *offset);
hc_result_t hc_gpu_host_unregister(void *ctx, void *p);
hc_result_t hc_gpu_stream_create(void *ctx, int device, hc_stream_t *s);
hc_result_t hc_gpu_stream_destroy(void *ctx, hc_stream_t s);
hc_result_t hc_gpu_event_create(void *ctx, hc_event_t *e);
hc_result_t hc_gpu_event_destroy(void *ctx, hc_event_t e);
hc_result_t hc_gpu_event_record(void *ctx, hc_event_t e, hc_stream_t s);
hc_result_t hc_gpu_event_query(void *ctx, hc_event_t e, int *done);
hc_result_t hc_gpu_stream_wait_event(void *ctx, hc_stream_t s, hc_event_t e);
hc_result_t hc_gpu_flag_wait(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t v);
hc_result_t hc_gpu_flag_write(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t v);
hc_result_t hc_gpu_flag_batch(void *ctx, hc_stream_t s, const struct hc_flag_op *ops, int n);
hc_result_t hc_gpu_stream_sync(void *ctx, hc_stream_t s);
hc_result_t hc_gpu_stream_capturing(void *ctx, hc_stream_t s, bool *capturing);
hc_result_t hc_gpu_current_device(void *ctx, int *device);
hc_result_t hc_gpu_fp8_layout(void *ctx, int device, enum hc_fp8_layout *out);
hc_result_t hc_gpu_pci_bus_id(void *ctx, int device, char *out, size_t len);
hc_result_t hc_gpu_rdma_flush_needed(void *ctx, int device, bool *needed, char *why, size_t len);
hc_result_t hc_gpu_thread_bound(void *ctx, bool *bound);

/* ---- shared between gpu.c and gpu_reduce.c ---- */

/* The calling thread's context before a scope switched it. */
struct hc_gpu_scope {
  void *saved;
  bool switched;
};
/* Makes dev current (dev < 0: keep the current context, else the default
 * device). hc_gpu_scope_exit restores what was current. */
hc_result_t hc_gpu_scope_device(struct hc_gpu *g, int dev, struct hc_gpu_scope *sc);
/* Makes the stream's context current. */
hc_result_t hc_gpu_scope_stream(struct hc_gpu *g, hc_stream_t s, struct hc_gpu_scope *sc);
void hc_gpu_scope_exit(struct hc_gpu *g, struct hc_gpu_scope *sc);
/* HC_FAIL(HC_ERR_DEVICE) with "<vendor>: <what>: <vendor text> (<code>)". */
hc_result_t hc_gpu_fail(struct hc_gpu *g, int e, const char *what);
/* Loads the runtime compiler once; sets g->rtc. */
void hc_gpu_rtc_init(struct hc_gpu *g);

/* HC_ERR_DEVICE with the formatted text as this thread's last error, no
 * WARN: a vendor's open() when its library or device is absent (device.c
 * logs the text at INFO). */
hc_result_t hc_gpu_absent(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A vendor symbol: resolved into table + offset; a missing optional one
 * stays NULL. */
struct hc_gpu_sym {
  const char *name;
  size_t offset;
  bool optional;
};
/* Resolves every entry from handle into table (a struct of function
 * pointers). Returns the name of the first missing required symbol, or NULL
 * when all are there. */
const char *hc_gpu_resolve(void *handle, const struct hc_gpu_sym *syms, size_t n, void *table);

/* ---- white-box hooks for tests (not used by the library) ---- */
struct hc_gpu *hc_gpu_state(enum hc_mem_kind kind); /* NULL unless loaded */
/* "kernels", "host" or "untried" for device dev. */
const char *hc_gpu_reduce_path(struct hc_gpu *g, int dev);
/* Compiles the kernel source for one target without any device (NVRTC only
 * needs its library). On success *image (malloc'd, free() it) holds
 * *image_size bytes; *log gets the compiler log (free() it) either way. */
hc_result_t hc_gpu_rtc_compile(const struct hc_gpu_vendor *v, const char *target_opt, bool binary, void **image,
                               size_t *image_size, char **log);
extern const struct hc_gpu_vendor hc_gpu_vendor_cuda;
extern const struct hc_gpu_vendor hc_gpu_vendor_hip;

/*
 * The hc_dev_ops table of a vendor: the generic ops, with the backend's
 * state as their ctx. A vendor file ends with
 *   static struct hc_gpu cuda_gpu = HC_GPU_STATE_INIT(&hc_gpu_vendor_cuda);
 *   const struct hc_dev_ops hc_dev_cuda = HC_GPU_OPS(cuda_gpu, "cuda", HC_MEM_CUDA);
 */
#define HC_GPU_STATE_INIT(vendor) \
  { .v = (vendor), .lock = PTHREAD_MUTEX_INITIALIZER }

#define HC_GPU_OPS(state, backend_name, mem_kind)                                                                      \
  {                                                                                                                    \
    .size = sizeof(struct hc_dev_ops), .abi = HC_DEV_ABI, .name = (backend_name), .kind = (mem_kind), .ctx = &(state), \
    .load = hc_gpu_load, .mem_alloc = hc_gpu_mem_alloc, .mem_free = hc_gpu_mem_free, .copy = hc_gpu_copy,              \
    .reduce = hc_gpu_reduce, .scale = hc_gpu_scale, .ptr_query = hc_gpu_ptr_query, .set_device = hc_gpu_set_device,    \
    .host_alloc = hc_gpu_host_alloc, .host_free = hc_gpu_host_free, .host_register = hc_gpu_host_register,             \
    .host_unregister = hc_gpu_host_unregister, .stream_create = hc_gpu_stream_create,                                  \
    .stream_destroy = hc_gpu_stream_destroy, .event_create = hc_gpu_event_create,                                      \
    .event_destroy = hc_gpu_event_destroy, .event_record = hc_gpu_event_record, .event_query = hc_gpu_event_query,     \
    .stream_wait_event = hc_gpu_stream_wait_event, .flag_wait = hc_gpu_flag_wait, .flag_write = hc_gpu_flag_write,     \
    .stream_sync = hc_gpu_stream_sync, .stream_capturing = hc_gpu_stream_capturing,                                    \
    .current_device = hc_gpu_current_device, .flag_batch = hc_gpu_flag_batch, .fp8_layout = hc_gpu_fp8_layout,         \
    .thread_bound = hc_gpu_thread_bound, .dmabuf_export = hc_gpu_dmabuf_export, .pci_bus_id = hc_gpu_pci_bus_id,       \
    .rdma_flush_needed = hc_gpu_rdma_flush_needed, .trap_if_set = hc_gpu_trap_if_set, .program = hc_gpu_program,       \
    .build_kernels = hc_gpu_build_kernels,                                                                             \
  }

#endif
