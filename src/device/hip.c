/*
 * device/hip: the ROCm backend = gpu.c's generic ops over this vendor table.
 * This file only opens libamdhip64.so and hipRTC at run time, resolves their
 * entry points (listed once, in hip_api.h, with every constant it uses) and
 * wraps each call in hetccl's uniform signature. No HIP header is needed to
 * build it; where ROCm's headers are installed, tests/gpu/hip_constants_check.c
 * compares every constant with theirs at compile time.
 *
 * Not run on an AMD GPU yet (there is none): what the NVIDIA runs exercise
 * is everything but this table. Where Debian's HIP 5.2 is installed, CI
 * loads the real libamdhip64, resolves every entry point, finds no device
 * and says so (ctest device_hip_absent); hipRTC compiles the kernels for
 * gfx90a there (ctest gpu_kernels_host).
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
#include <stdio.h>
#include <stdlib.h>

#include "gpu_priv.h"
#include "hip_api.h"

/* The constants, one enum constant each, as ROCm's headers name them. */
#define HIP_CONSTANT(name, value) name = (value),
#define HIP_MEMORY_TYPE(name, header_name, value) name = (value),
enum { HC_HIP_CONSTANTS(HIP_CONSTANT) HC_HIP5_MEMORY_TYPES(HIP_MEMORY_TYPE) HC_HIP6_MEMORY_TYPES(HIP_MEMORY_TYPE) };
#undef HIP_CONSTANT
#undef HIP_MEMORY_TYPE

#define DECLARE_SYM(name, ret, params) ret(*name) params;
static struct hip_syms { HC_HIP_SYMBOLS(DECLARE_SYM, DECLARE_SYM) } hip;
static struct hiprtc_syms { HC_HIPRTC_SYMBOLS(DECLARE_SYM, DECLARE_SYM) } rtc;
#undef DECLARE_SYM

#define SYM(name, ret, params) {#name, offsetof(struct hip_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct hip_syms, name), true},
static const struct hc_gpu_sym hip_syms[] = {HC_HIP_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT
#define SYM(name, ret, params) {#name, offsetof(struct hiprtc_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct hiprtc_syms, name), true},
static const struct hc_gpu_sym hiprtc_syms[] = {HC_HIPRTC_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT

static const char *const hip_libs[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
static int runtime_version;

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

/* "libamdhip64.so.5 (HIP 5.2.21153): 29 entry points, optional ones absent:
 * hipStreamGetDevice" - what was loaded, for the INFO line and the "no
 * device" text (hetccl-info, tests). */
static void describe_library(char *buf, size_t n) {
  char where[256] = "libamdhip64";
  Dl_info info;
  if (dladdr((void *)(uintptr_t)hip.hipInit, &info) && info.dli_fname)
    snprintf(where, sizeof(where), "%s", info.dli_fname);
  size_t required = 0, absent_optional = 0;
  char absent_names[256] = "";
  for (size_t i = 0; i < HC_ARRAY_LEN(hip_syms); i++) {
    void *f;
    memcpy(&f, (char *)&hip + hip_syms[i].offset, sizeof(f));
    if (!hip_syms[i].optional) {
      required++;
    } else if (f == NULL) {
      size_t used = strlen(absent_names);
      snprintf(absent_names + used, sizeof(absent_names) - used, "%s%s", absent_optional ? ", " : "", hip_syms[i].name);
      absent_optional++;
    }
  }
  snprintf(buf, n, "%s (HIP %d.%d.%d): all %zu required entry points resolved, %zu of %zu optional%s%s", where,
           runtime_version / 10000000, runtime_version / 100000 % 100, runtime_version % 100000, required,
           HC_ARRAY_LEN(hip_syms) - required - absent_optional, HC_ARRAY_LEN(hip_syms) - required,
           absent_optional ? "; absent: " : "", absent_names);
}

static hc_result_t hip_open(int *ndev) {
  *ndev = 0;
  void *h = open_first(hip_libs, HC_ARRAY_LEN(hip_libs));
  if (h == NULL) return hc_gpu_absent("hip: libamdhip64.so not found (no ROCm)");
  const char *missing = hc_gpu_resolve(h, hip_syms, HC_ARRAY_LEN(hip_syms), &hip);
  if (missing != NULL) {
    dlclose(h);
    memset(&hip, 0, sizeof(hip));
    return hc_gpu_absent("hip: libamdhip64 lacks %s (ROCm too old)", missing);
  }
  /* Loaded for good from here: the runtime may have started threads. The
   * version needs no device (hipRuntimeGetVersion works before hipInit). */
  if (hip.hipRuntimeGetVersion(&runtime_version) != hipSuccess) runtime_version = 0;
  char lib[512];
  describe_library(lib, sizeof(lib));
  /* Without a GPU, ROCm 5.2's hipInit says hipErrorInvalidDevice and
   * hipGetDeviceCount hipErrorNoDevice: both mean "no AMD GPU". */
  int init = hip.hipInit(0), n = 0;
  int count = hip.hipGetDeviceCount(&n);
  if (init != hipSuccess || count != hipSuccess || n <= 0) {
    bool none = init == hipErrorNoDevice || init == hipErrorInvalidDevice || count == hipErrorNoDevice ||
                (count == hipSuccess && n <= 0);
    return hc_gpu_absent("hip: %s (hipInit: %s, hipGetDeviceCount: %s); %s", none ? "no AMD GPU" : "no usable AMD GPU",
                         hip_err_str(init), hip_err_str(count), lib);
  }
  HC_INFO(HC_DEV, "hip: %s; %d devices", lib, n);
  *ndev = n;
  return HC_OK;
}

static int hip_device_attr(int dev, enum hc_gpu_attr a, int *value) {
  static const int attrs[] = {
      [HC_GPU_ATTR_SM_COUNT] = hipDeviceAttributeMultiprocessorCount,
      [HC_GPU_ATTR_CC_MAJOR] = hipDeviceAttributeComputeCapabilityMajor,
      [HC_GPU_ATTR_CC_MINOR] = hipDeviceAttributeComputeCapabilityMinor,
  };
  if (a == HC_GPU_ATTR_MPS) return -1; /* CUDA's; the generic code then assumes none */
  return hip.hipDeviceGetAttribute(value, attrs[a], dev);
}

static bool hip_has_mem_ops(void) { return hip.hipStreamWaitValue64 != NULL && hip.hipStreamWriteValue64 != NULL; }
/* ROCm documents the device address of registered host memory as
 * hipHostGetDevicePointer's answer (flag_dptr below), not the host one. */
static bool hip_kernels_read_host_address(void) { return false; }

static int hip_pci_bus_id(int dev, char *out, int len) {
  return hip.hipDeviceGetPCIBusId ? hip.hipDeviceGetPCIBusId(out, len, dev) : hipErrorNotSupported;
}

/* HIP reports an AMD GPU's gfx9.x.y as compute capability 9.x: gfx94x
 * (MI300) is 9.4, whose fp8 instructions and RCCL use the fnuz encodings;
 * gfx950 (MI350) and RDNA4 use the OCP ones. */
static enum hc_fp8_layout hip_fp8_layout(int cc_major, int cc_minor) {
  return cc_major == 9 && cc_minor == 4 ? HC_FP8_FNUZ : HC_FP8_OCP;
}

/* RCCL flushes every AMD GPU unless the network plugin manages it. */
static bool hip_rdma_flush_needed(int cc_major, int cc_minor, const char **why) {
  (void)cc_major, (void)cc_minor;
  *why = "AMD (flushed on every architecture, as RCCL does)";
  return true;
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

static int hip_ctx_set(void *tok) { return tok == NULL ? hipSuccess : hip.hipSetDevice((int)(intptr_t)tok - 1); }

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

/* ROCm's dma-buf export (hipMemRangeHandleTypeDmaBufFd = 1). */
static int hip_mem_range(const void *p, uintptr_t *base, size_t *size) {
  void *b = NULL;
  if (hip.hipMemGetAddressRange == NULL) return hipErrorNotSupported;
  int e = hip.hipMemGetAddressRange(&b, size, (void *)p);
  *base = (uintptr_t)b;
  return e;
}

static int hip_dmabuf_fd(uintptr_t start, size_t len, int *fd) {
  if (hip.hipMemGetHandleForAddressRange == NULL) return hipErrorNotSupported;
  return hip.hipMemGetHandleForAddressRange(fd, (void *)start, len, 1, 0);
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
  bool rocm6 = runtime_version >= HC_HIP_VERSION_6_0;
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

/* A flag's device address. ROCm documents the device pointer of mapped
 * host memory (hipHostMallocMapped, hipHostRegisterMapped: every flag and
 * shm window counter) as hipHostGetDevicePointer's answer, which need not
 * be the host address for registered memory; the host address is the
 * fallback where the entry point is missing (unified addressing). One
 * runtime call per flag operation, as CUDA without
 * CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM. Not run on an AMD GPU. */
static int flag_dptr(volatile uint64_t *flag, void **d) {
  *d = (void *)(uintptr_t)flag;
  return hip.hipHostGetDevicePointer ? hip.hipHostGetDevicePointer(d, (void *)(uintptr_t)flag, 0) : hipSuccess;
}

static int hip_wait_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  void *d = NULL;
  int e = flag_dptr(flag, &d);
  return e != hipSuccess ? e : hip.hipStreamWaitValue64(s, d, v, hipStreamWaitValueGte, ~0ull);
}

static int hip_write_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  void *d = NULL;
  int e = flag_dptr(flag, &d);
  return e != hipSuccess ? e : hip.hipStreamWriteValue64(s, d, v, 0);
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
    .kernels_read_host_address = hip_kernels_read_host_address,
    .fp8_layout = hip_fp8_layout,
    .rdma_flush_needed = hip_rdma_flush_needed,
    .pci_bus_id = hip_pci_bus_id,
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
    .mem_range = hip_mem_range,
    .dmabuf_fd = hip_dmabuf_fd,
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
const struct hc_dev_ops hc_dev_hip = HC_GPU_OPS(hip_gpu, "hip", HC_MEM_HIP);
