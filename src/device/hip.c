/*
 * device/hip: the ROCm backend = gpu.c's generic ops over this vendor table.
 * This file only opens libamdhip64.so and hipRTC at run time, resolves their
 * entry points (listed once below) and wraps each call in hetccl's uniform
 * signature. No HIP header is needed to build it.
 *
 * Not run anywhere yet (no AMD GPU): what the NVIDIA runs exercise is
 * everything but this table. It must load cleanly and say why at INFO
 * when ROCm or a device is absent.
 *
 * Contexts: HIP has a current device per thread, not contexts; a token is
 * device + 1. A stream's device comes from hipStreamGetDevice (ROCm 5.5+);
 * on older ROCm a stream is taken to be on the current device.
 *
 * Versions: hipMemoryType changed its values in ROCm 6.0 (to CUDA's), and
 * hipPointerGetAttributes stopped failing on unregistered host memory;
 * hipRuntimeGetVersion tells which. hipRTC lived inside libamdhip64 up to
 * ROCm 5.2 and is libhiprtc.so since; both are looked for. hipLaunchHostFunc
 * appeared in ROCm 5.3; hipStreamAddCallback stands in before it.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_priv.h"

/* ---- HIP types and constants, copied by value from ROCm's headers ---- */
typedef int hipError_t;
typedef int hiprtcResult;
typedef void *hipStream_t, *hipEvent_t, *hipModule_t, *hipFunction_t, *hiprtcProgram;
typedef void (*hipStreamCallback_t)(hipStream_t s, hipError_t status, void *arg);

/* hip/hip_runtime_api.h (hipError_t) */
#define hipSuccess 0
#define hipErrorInvalidValue 1
#define hipErrorNoDevice 100
#define hipErrorNotReady 600
#define hipErrorNotSupported 801
/* hip/hip_runtime_api.h (hipDeviceAttribute_t; same in ROCm 5 and 6) */
#define hipDeviceAttributeComputeCapabilityMajor 23
#define hipDeviceAttributeComputeCapabilityMinor 61
#define hipDeviceAttributeMultiprocessorCount 63
/* hip/hip_runtime_api.h (flags) */
#define hipHostMallocPortable 0x1
#define hipHostMallocMapped 0x2
#define hipHostRegisterPortable 0x1
#define hipHostRegisterMapped 0x2
#define hipStreamNonBlocking 0x01
#define hipEventDisableTiming 0x2
#define hipStreamWaitValueGte 0x0
#define hipStreamCaptureStatusNone 0
/* hip/driver_types.h (hipMemcpyKind) */
#define hipMemcpyDefault 4
/* hip/hip_runtime_api.h (hipMemoryType): ROCm 5 numbering, then ROCm 6's */
#define HIP5_MEMORY_TYPE_HOST 0
#define HIP6_MEMORY_TYPE_UNREGISTERED 0
#define HIP6_MEMORY_TYPE_HOST 1
#define HIP_VERSION_6_0 60000000 /* HIP_VERSION = major * 1e7 + minor * 1e5 + patch */

/* hip/hip_runtime_api.h: hipPointerAttribute_t (the first field is
 * `memoryType` in ROCm 5 and `type` in ROCm 6; same layout). */
struct hip_ptr_attr {
  int type;
  int device;
  void *device_pointer;
  void *host_pointer;
  int is_managed;
  unsigned allocation_flags;
};

#define HIP_SYMBOLS(X, OPT)                                                                  \
  X(hipGetErrorString, const char *, (hipError_t e))                                          \
  X(hipInit, hipError_t, (unsigned flags))                                                    \
  X(hipRuntimeGetVersion, hipError_t, (int *v))                                               \
  X(hipGetDeviceCount, hipError_t, (int *n))                                                  \
  X(hipDeviceGetAttribute, hipError_t, (int *v, int attr, int dev))                           \
  X(hipSetDevice, hipError_t, (int dev))                                                      \
  X(hipGetDevice, hipError_t, (int *dev))                                                     \
  X(hipMalloc, hipError_t, (void **p, size_t n))                                              \
  X(hipFree, hipError_t, (void *p))                                                           \
  X(hipHostMalloc, hipError_t, (void **p, size_t n, unsigned flags))                          \
  X(hipHostFree, hipError_t, (void *p))                                                       \
  X(hipHostRegister, hipError_t, (void *p, size_t n, unsigned flags))                         \
  X(hipHostUnregister, hipError_t, (void *p))                                                 \
  X(hipPointerGetAttributes, hipError_t, (struct hip_ptr_attr * a, const void *p))            \
  X(hipMemcpyAsync, hipError_t, (void *dst, const void *src, size_t n, int kind, hipStream_t s)) \
  X(hipStreamCreateWithFlags, hipError_t, (hipStream_t * s, unsigned flags))                  \
  X(hipStreamDestroy, hipError_t, (hipStream_t s))                                            \
  X(hipStreamSynchronize, hipError_t, (hipStream_t s))                                        \
  X(hipStreamIsCapturing, hipError_t, (hipStream_t s, int *status))                           \
  X(hipEventCreateWithFlags, hipError_t, (hipEvent_t * e, unsigned flags))                    \
  X(hipEventRecord, hipError_t, (hipEvent_t e, hipStream_t s))                                \
  X(hipEventQuery, hipError_t, (hipEvent_t e))                                                \
  X(hipEventDestroy, hipError_t, (hipEvent_t e))                                              \
  X(hipStreamWaitEvent, hipError_t, (hipStream_t s, hipEvent_t e, unsigned flags))            \
  X(hipStreamAddCallback, hipError_t, (hipStream_t s, hipStreamCallback_t cb, void *arg, unsigned flags)) \
  X(hipModuleLoadData, hipError_t, (hipModule_t * m, const void *image))                      \
  X(hipModuleUnload, hipError_t, (hipModule_t m))                                             \
  X(hipModuleGetFunction, hipError_t, (hipFunction_t * f, hipModule_t m, const char *name))   \
  X(hipModuleLaunchKernel, hipError_t,                                                        \
    (hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,        \
     unsigned bz, unsigned shmem, hipStream_t s, void **params, void **extra))                \
  OPT(hipStreamGetDevice, hipError_t, (hipStream_t s, int *dev))                              \
  OPT(hipLaunchHostFunc, hipError_t, (hipStream_t s, void (*fn)(void *), void *arg))          \
  OPT(hipStreamWaitValue64, hipError_t, (hipStream_t s, void *p, uint64_t v, unsigned flags, uint64_t mask)) \
  OPT(hipStreamWriteValue64, hipError_t, (hipStream_t s, void *p, uint64_t v, unsigned flags)) \
  OPT(hipMemGetAddressRange, hipError_t, (void **base, size_t *size, void *p))                \
  OPT(hipMemGetHandleForAddressRange, hipError_t,                                             \
      (void *handle, void *p, size_t size, int type, unsigned long long flags))

/* hip/hiprtc.h */
#define HIPRTC_SYMBOLS(X, OPT)                                                               \
  X(hiprtcGetErrorString, const char *, (hiprtcResult r))                                     \
  X(hiprtcCreateProgram, hiprtcResult,                                                        \
    (hiprtcProgram * p, const char *src, const char *name, int nheaders,                      \
     const char *const *headers, const char *const *include_names))                           \
  X(hiprtcDestroyProgram, hiprtcResult, (hiprtcProgram * p))                                  \
  X(hiprtcCompileProgram, hiprtcResult, (hiprtcProgram p, int nopts, const char *const *opts)) \
  X(hiprtcGetProgramLogSize, hiprtcResult, (hiprtcProgram p, size_t *n))                      \
  X(hiprtcGetProgramLog, hiprtcResult, (hiprtcProgram p, char *log))                          \
  X(hiprtcGetCodeSize, hiprtcResult, (hiprtcProgram p, size_t *n))                            \
  X(hiprtcGetCode, hiprtcResult, (hiprtcProgram p, char *code))

#define DECLARE_SYM(name, ret, params) ret(*name) params;
static struct hip_syms {
  HIP_SYMBOLS(DECLARE_SYM, DECLARE_SYM)
} hip;
static struct hiprtc_syms {
  HIPRTC_SYMBOLS(DECLARE_SYM, DECLARE_SYM)
} rtc;
#undef DECLARE_SYM

#define SYM(name, ret, params) {#name, offsetof(struct hip_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct hip_syms, name), true},
static const struct hc_gpu_sym hip_syms[] = {HIP_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT
#define SYM(name, ret, params) {#name, offsetof(struct hiprtc_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct hiprtc_syms, name), true},
static const struct hc_gpu_sym hiprtc_syms[] = {HIPRTC_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT

static const char *const hip_libs[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
static int runtime_version;

__attribute__((format(printf, 1, 2))) static hc_result_t absent(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  hc_set_last_error(msg);
  return HC_ERR_DEVICE;
}

static const char *hip_err_str(int e) {
  const char *s = hip.hipGetErrorString ? hip.hipGetErrorString(e) : NULL;
  return s ? s : "unknown HIP error";
}

static void *open_first(const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) return h;
    HC_TRACE(HC_DEV, "hip: dlopen %s: %s", names[i], dlerror());
  }
  return NULL;
}

static hc_result_t hip_open(int *ndev) {
  *ndev = 0;
  void *h = open_first(hip_libs, HC_ARRAY_LEN(hip_libs));
  if (h == NULL) return absent("hip: libamdhip64.so not found (no ROCm)");
  const char *missing = hc_gpu_resolve(h, hip_syms, HC_ARRAY_LEN(hip_syms), &hip);
  if (missing != NULL) {
    dlclose(h);
    memset(&hip, 0, sizeof(hip));
    return absent("hip: libamdhip64 lacks %s (ROCm too old)", missing);
  }
  /* Loaded for good from here: the runtime may have started threads. */
  if (hip.hipRuntimeGetVersion(&runtime_version) != hipSuccess) runtime_version = 0;
  int e = hip.hipInit(0);
  if (e == hipErrorNoDevice) return absent("hip: no AMD GPU (hipInit: %d)", e);
  if (e != hipSuccess) return absent("hip: no usable AMD GPU: hipInit: %s (%d)", hip_err_str(e), e);
  int n = 0;
  e = hip.hipGetDeviceCount(&n);
  if (e == hipErrorNoDevice || (e == hipSuccess && n <= 0)) return absent("hip: no AMD GPU");
  if (e != hipSuccess) return absent("hip: hipGetDeviceCount failed: %s (%d)", hip_err_str(e), e);
  HC_INFO(HC_DEV, "hip: runtime %d.%d, %d devices", runtime_version / 10000000,
          runtime_version / 100000 % 100, n);
  *ndev = n;
  return HC_OK;
}

static int hip_device_attr(int dev, enum hc_gpu_attr a, int *value) {
  static const int attrs[] = {
      [HC_GPU_ATTR_SM_COUNT] = hipDeviceAttributeMultiprocessorCount,
      [HC_GPU_ATTR_CC_MAJOR] = hipDeviceAttributeComputeCapabilityMajor,
      [HC_GPU_ATTR_CC_MINOR] = hipDeviceAttributeComputeCapabilityMinor,
  };
  return hip.hipDeviceGetAttribute(value, attrs[a], dev);
}

static bool hip_has_mem_ops(void) {
  return hip.hipStreamWaitValue64 != NULL && hip.hipStreamWriteValue64 != NULL;
}

/* ---- contexts: token = device + 1 ---- */

static int hip_device_token(int dev, void **tok) {
  *tok = (void *)(intptr_t)(dev + 1);
  return hipSuccess;
}

static int hip_ctx_get(void **tok) {
  int d = 0;
  int e = hip.hipGetDevice(&d);
  *tok = e == hipSuccess ? (void *)(intptr_t)(d + 1) : NULL;
  return e;
}

static int hip_ctx_set(void *tok) {
  return tok == NULL ? hipSuccess : hip.hipSetDevice((int)(intptr_t)tok - 1);
}

static int hip_ctx_device(int *dev) { return hip.hipGetDevice(dev); }

static int hip_stream_token(void *s, void **tok) {
  int d = 0;
  if (s == NULL || hip.hipStreamGetDevice == NULL) return hip_ctx_get(tok);
  int e = hip.hipStreamGetDevice(s, &d);
  *tok = e == hipSuccess ? (void *)(intptr_t)(d + 1) : NULL;
  return e;
}

/* ---- memory ---- */

static int hip_mem_alloc(void **p, size_t n) { return hip.hipMalloc(p, n); }
static int hip_mem_free(void *p) { return hip.hipFree(p); }

static int hip_host_alloc(void **p, size_t n) {
  return hip.hipHostMalloc(p, n, hipHostMallocPortable | hipHostMallocMapped);
}

static int hip_host_free(void *p) { return hip.hipHostFree(p); }

static int hip_host_register(void *p, size_t n) {
  return hip.hipHostRegister(p, n, hipHostRegisterPortable | hipHostRegisterMapped);
}

static int hip_host_unregister(void *p) { return hip.hipHostUnregister(p); }

/* ROCm's dma-buf export (hipMemRangeHandleTypeDmaBufFd = 1), the range
 * taken as CUDA's is (cuda.c). */
static int hip_dmabuf_export(const void *p, size_t n, int *fd, uint64_t *offset) {
  const uintptr_t page = 4096;
  void *base = NULL;
  size_t size = 0;
  (void)n;
  if (hip.hipMemGetAddressRange == NULL || hip.hipMemGetHandleForAddressRange == NULL) return hipErrorNotSupported;
  int e = hip.hipMemGetAddressRange(&base, &size, (void *)p);
  if (e != 0) return e;
  uintptr_t start = (uintptr_t)p / page * page;
  size_t len = (size_t)(HC_DIV_UP((uintptr_t)base + size, page) * page - start);
  int handle = -1;
  e = hip.hipMemGetHandleForAddressRange(&handle, (void *)start, len, 1, 0);
  if (e != 0) return e;
  *fd = handle;
  *offset = 0;
  return 0;
}

static int hip_ptr_attrs(const void *p, enum hc_gpu_ptr_type *type, int *device) {
  /* Room past the known fields, in case a release appends some. */
  union {
    struct hip_ptr_attr a;
    char room[256];
  } u;
  memset(&u, 0, sizeof(u));
  *type = HC_GPU_PTR_UNKNOWN;
  *device = -1;
  int e = hip.hipPointerGetAttributes(&u.a, p);
  if (e != hipSuccess) return e; /* ROCm 5: hipErrorInvalidValue for pageable memory */
  bool rocm6 = runtime_version >= HIP_VERSION_6_0;
  int host = rocm6 ? HIP6_MEMORY_TYPE_HOST : HIP5_MEMORY_TYPE_HOST;
  if (rocm6 && u.a.type == HIP6_MEMORY_TYPE_UNREGISTERED && !u.a.is_managed) return hipSuccess;
  if (u.a.type == host && !u.a.is_managed) {
    *type = HC_GPU_PTR_HOST_PINNED;
  } else {
    *type = HC_GPU_PTR_DEVICE;
    *device = u.a.device;
  }
  return hipSuccess;
}

/* ---- streams and events ---- */

static int hip_copy_async(void *dst, const void *src, size_t n, void *s) {
  return hip.hipMemcpyAsync(dst, src, n, hipMemcpyDefault, s);
}

static int hip_stream_create(void **s) { return hip.hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
static int hip_stream_destroy(void *s) { return hip.hipStreamDestroy(s); }
static int hip_stream_sync(void *s) { return hip.hipStreamSynchronize(s); }

static int hip_stream_capturing(void *s, bool *capturing) {
  int status = hipStreamCaptureStatusNone;
  int e = hip.hipStreamIsCapturing(s, &status);
  *capturing = e == hipSuccess && status != hipStreamCaptureStatusNone;
  return e;
}

static int hip_event_create(void **e) { return hip.hipEventCreateWithFlags(e, hipEventDisableTiming); }
static int hip_event_destroy(void *e) { return hip.hipEventDestroy(e); }
static int hip_event_record(void *e, void *s) { return hip.hipEventRecord(e, s); }
static int hip_event_query(void *e) { return hip.hipEventQuery(e); }
static int hip_stream_wait_event(void *s, void *e) { return hip.hipStreamWaitEvent(s, e, 0); }

/* Mapped host memory is addressed by its host pointer. */
static int hip_wait_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  return hip.hipStreamWaitValue64(s, (void *)(uintptr_t)flag, v, hipStreamWaitValueGte, ~0ull);
}

static int hip_write_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  return hip.hipStreamWriteValue64(s, (void *)(uintptr_t)flag, v, 0);
}

/* hipStreamAddCallback's shape, for ROCm without hipLaunchHostFunc. */
struct host_call {
  void (*fn)(void *);
  void *arg;
};

static void host_call_cb(hipStream_t s, hipError_t status, void *arg) {
  struct host_call *c = arg;
  (void)s;
  (void)status;
  c->fn(c->arg);
  free(c);
}

static int hip_launch_host_func(void *s, void (*fn)(void *), void *arg) {
  if (hip.hipLaunchHostFunc != NULL) return hip.hipLaunchHostFunc(s, fn, arg);
  struct host_call *c = malloc(sizeof(*c));
  if (c == NULL) return hipErrorInvalidValue;
  c->fn = fn;
  c->arg = arg;
  int e = hip.hipStreamAddCallback(s, host_call_cb, c, 0);
  if (e != hipSuccess) free(c);
  return e;
}

/* ---- modules ---- */

static int hip_module_load(const void *image, void **mod) { return hip.hipModuleLoadData(mod, image); }
static int hip_module_unload(void *mod) { return hip.hipModuleUnload(mod); }

static int hip_module_function(void *mod, const char *name, void **fn) {
  return hip.hipModuleGetFunction(fn, mod, name);
}

static int hip_launch(void *fn, unsigned grid, unsigned block, void *s, void **params) {
  return hip.hipModuleLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, s, params, NULL);
}

/* ---- hipRTC ---- */

static pthread_mutex_t rtc_lock = PTHREAD_MUTEX_INITIALIZER;
static int rtc_state; /* 0 untried, 1 loaded, -1 absent */

static hc_result_t hip_rtc_open(void) {
  static const char *const names[] = {"libhiprtc.so", "libhiprtc.so.6", "libhiprtc.so.5",
                                      /* ROCm <= 5.2: inside the runtime */
                                      "libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
  pthread_mutex_lock(&rtc_lock);
  for (size_t i = 0; i < HC_ARRAY_LEN(names) && rtc_state == 0; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) continue;
    if (hc_gpu_resolve(h, hiprtc_syms, HC_ARRAY_LEN(hiprtc_syms), &rtc) == NULL) {
      HC_INFO(HC_DEV, "hip: hipRTC from %s", names[i]);
      rtc_state = 1;
    } else {
      memset(&rtc, 0, sizeof(rtc));
      dlclose(h);
    }
  }
  if (rtc_state == 0) rtc_state = -1;
  hc_result_t r = HC_OK;
  if (rtc_state < 0) {
    hc_set_last_error("hip: no hipRTC (libhiprtc.so) found");
    r = HC_ERR_DEVICE;
  }
  pthread_mutex_unlock(&rtc_lock);
  return r;
}

/* One attempt: no architecture option, so hipRTC compiles for the current
 * device (the stream's: gpu_reduce.c builds inside its scope). */
static int hip_rtc_target(int dev, int attempt, char *opt, size_t n, bool *binary) {
  (void)dev;
  if (attempt > 0 || n == 0) return -1;
  opt[0] = 0;
  *binary = true;
  return 0;
}

static int hip_rtc_create(void **prog, const char *src, const char *name) {
  return rtc.hiprtcCreateProgram(prog, src, name, 0, NULL, NULL);
}

static int hip_rtc_compile(void *prog, int nopts, const char *const *opts) {
  return rtc.hiprtcCompileProgram(prog, nopts, opts);
}

static int hip_rtc_log_size(void *prog, size_t *n) { return rtc.hiprtcGetProgramLogSize(prog, n); }
static int hip_rtc_log(void *prog, char *log) { return rtc.hiprtcGetProgramLog(prog, log); }

static int hip_rtc_code_size(void *prog, bool binary, size_t *n) {
  (void)binary;
  return rtc.hiprtcGetCodeSize(prog, n);
}

static int hip_rtc_code(void *prog, bool binary, char *code) {
  (void)binary;
  return rtc.hiprtcGetCode(prog, code);
}

static int hip_rtc_destroy(void **prog) {
  int e = *prog ? rtc.hiprtcDestroyProgram(prog) : 0;
  *prog = NULL;
  return e;
}

static const char *hip_rtc_err_str(int e) {
  const char *s = rtc.hiprtcGetErrorString ? rtc.hiprtcGetErrorString(e) : NULL;
  return s ? s : "unknown hipRTC error";
}

/* IEEE arithmetic as on the host: clang contracts a * b + c into FMA by
 * default for HIP; denormals and correctly rounded division are clang's
 * defaults for gfx9 and later. */
static const char *const hiprtc_options[] = {"-ffp-contract=off", NULL};

const struct hc_gpu_vendor hc_gpu_vendor_hip = {
    .name = "hip",
    .rtc_name = "hipRTC",
    .kind = HC_MEM_HIP,
    .err_not_ready = hipErrorNotReady,
    .err_invalid_value = hipErrorInvalidValue,
    .err_invalid_context = -1,
    .err_not_supported = hipErrorNotSupported,
    .rtc_options = hiprtc_options,
    .open = hip_open,
    .err_str = hip_err_str,
    .device_attr = hip_device_attr,
    .has_mem_ops = hip_has_mem_ops,
    .device_token = hip_device_token,
    .ctx_get = hip_ctx_get,
    .ctx_set = hip_ctx_set,
    .ctx_device = hip_ctx_device,
    .stream_token = hip_stream_token,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .host_alloc = hip_host_alloc,
    .host_free = hip_host_free,
    .host_register = hip_host_register,
    .dmabuf_export = hip_dmabuf_export,
    .host_unregister = hip_host_unregister,
    .ptr_attrs = hip_ptr_attrs,
    .copy_async = hip_copy_async,
    .stream_create = hip_stream_create,
    .stream_destroy = hip_stream_destroy,
    .stream_sync = hip_stream_sync,
    .stream_capturing = hip_stream_capturing,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .event_query = hip_event_query,
    .stream_wait_event = hip_stream_wait_event,
    .wait_value64 = hip_wait_value64,
    .write_value64 = hip_write_value64,
    .launch_host_func = hip_launch_host_func,
    .module_load = hip_module_load,
    .module_unload = hip_module_unload,
    .module_function = hip_module_function,
    .launch = hip_launch,
    .rtc_open = hip_rtc_open,
    .rtc_target = hip_rtc_target,
    .rtc_create = hip_rtc_create,
    .rtc_compile = hip_rtc_compile,
    .rtc_log_size = hip_rtc_log_size,
    .rtc_log = hip_rtc_log,
    .rtc_code_size = hip_rtc_code_size,
    .rtc_code = hip_rtc_code,
    .rtc_destroy = hip_rtc_destroy,
    .rtc_err_str = hip_rtc_err_str,
};

static struct hc_gpu hip_gpu = HC_GPU_STATE_INIT(&hc_gpu_vendor_hip);
HC_GPU_BACKEND(hip_gpu, hc_dev_hip, "hip", HC_MEM_HIP)
