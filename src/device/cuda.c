/*
 * device/cuda: the CUDA backend = gpu.c's generic ops over this vendor
 * table. This file only opens libcuda.so.1 and NVRTC at run time, resolves
 * their entry points (listed once, in cuda_api.h) and wraps each call in
 * hetccl's uniform signature. No cuda.h is needed to build it.
 *
 * Contexts: a device's token is its primary context (the one the CUDA
 * runtime and PyTorch use), retained on first use and kept for the process.
 *
 * NVRTC is looked for in this order: HETCCL_NVRTC_LIBRARY ("none": not at
 * all, reductions on the host); the loader's libnvrtc.so.<driver major>,
 * .so.13, .so.12, .so; the CUDA toolkit's (CUDA_HOME, CUDA_PATH,
 * /usr/local/cuda); the nvidia wheels of any python3 site-packages
 * (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib), where a pip-installed PyTorch
 * keeps it. A compiler newer than the driver is skipped: the driver could
 * not load what it produces.
 */
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cuda_api.h"
#include "gpu_priv.h"

#define DECLARE_SYM(name, ret, params) ret(*name) params;
static struct cu_syms { HC_CUDA_SYMBOLS(DECLARE_SYM, DECLARE_SYM) } cu;
static struct nvrtc_syms { HC_NVRTC_SYMBOLS(DECLARE_SYM, DECLARE_SYM) } nv;
#undef DECLARE_SYM

#define SYM(name, ret, params) {#name, offsetof(struct cu_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct cu_syms, name), true},
static const struct hc_gpu_sym cu_syms[] = {HC_CUDA_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT
#define SYM(name, ret, params) {#name, offsetof(struct nvrtc_syms, name), false},
#define SYM_OPT(name, ret, params) {#name, offsetof(struct nvrtc_syms, name), true},
static const struct hc_gpu_sym nvrtc_syms[] = {HC_NVRTC_SYMBOLS(SYM, SYM_OPT)};
#undef SYM
#undef SYM_OPT

static int driver_version; /* 12080 for 12.8; 0 when libcuda is not loaded */
static int mem_ops_64;     /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS of device 0 */
/* CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM of device 0: a
 * flag's host address is its device address (no driver call per flag op). */
static int host_ptr_is_device_ptr;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[HC_GPU_MAX_DEVICES];

static const char *cuda_err_str(int e) {
  const char *s = NULL;
  if (cu.cuGetErrorString != NULL && cu.cuGetErrorString(e, &s) == CUDA_SUCCESS && s != NULL) return s;
  switch (e) { /* when the driver cannot say (the stub library) */
  case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY: the toolkit's stub libcuda, not a driver";
  case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
  default: return "unknown CUDA error";
  }
}

static hc_result_t cuda_open(int *ndev) {
  *ndev = 0;
  void *h = hc_dl_open("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return hc_gpu_absent("cuda: libcuda.so.1 not found (no NVIDIA driver)");
  const char *missing = hc_gpu_resolve(h, cu_syms, HC_ARRAY_LEN(cu_syms), &cu);
  if (missing != NULL) {
    dlclose(h);
    memset(&cu, 0, sizeof(cu));
    return hc_gpu_absent("cuda: libcuda.so.1 lacks %s (driver too old)", missing);
  }
  /* From here on the library stays loaded: the driver may have started
   * threads, and unloading it under them is not safe. */
  int e = cu.cuInit(0);
  if (e == CUDA_ERROR_NO_DEVICE) return hc_gpu_absent("cuda: no CUDA device (cuInit: %d)", e);
  if (e != CUDA_SUCCESS) return hc_gpu_absent("cuda: cuInit failed: %s (%d)", cuda_err_str(e), e);
  if (cu.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS) driver_version = 0;
  int n = 0;
  e = cu.cuDeviceGetCount(&n);
  if (e != CUDA_SUCCESS) return hc_gpu_absent("cuda: cuDeviceGetCount failed: %s (%d)", cuda_err_str(e), e);
  if (n <= 0) return hc_gpu_absent("cuda: no CUDA device");
  CUdevice d0;
  mem_ops_64 = 0;
  host_ptr_is_device_ptr = 0;
  if (cu.cuDeviceGet(&d0, 0) == CUDA_SUCCESS) {
    cu.cuDeviceGetAttribute(&mem_ops_64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, d0);
    cu.cuDeviceGetAttribute(&host_ptr_is_device_ptr, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, d0);
  }
  HC_INFO(HC_DEV,
          "cuda: driver %d.%d, %d devices; 64-bit stream memory operations: entry points %s, "
          "device 0 %s",
          driver_version / 1000, driver_version % 1000 / 10, n,
          cu.cuStreamWaitValue64_v2 && cu.cuStreamWriteValue64_v2 ? "found" : "missing",
          mem_ops_64 == 1 ? "supports them" : "does not");
  *ndev = n;
  return HC_OK;
}

static int cuda_device_attr(int dev, enum hc_gpu_attr a, int *value) {
  static const int attrs[] = {
      [HC_GPU_ATTR_SM_COUNT] = CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
      [HC_GPU_ATTR_CC_MAJOR] = CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
      [HC_GPU_ATTR_CC_MINOR] = CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
      [HC_GPU_ATTR_MPS] = CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
  };
  CUdevice d;
  int e = cu.cuDeviceGet(&d, dev);
  return e != CUDA_SUCCESS ? e : cu.cuDeviceGetAttribute(value, attrs[a], d);
}

static int cuda_pci_bus_id(int dev, char *out, int len) {
  CUdevice d;
  if (cu.cuDeviceGetPCIBusId == NULL) return CUDA_ERROR_NOT_SUPPORTED;
  int e = cu.cuDeviceGet(&d, dev);
  return e != CUDA_SUCCESS ? e : cu.cuDeviceGetPCIBusId(out, len, d);
}

/* The v2 entry points need no kernel-module option (CUDA 11.7 and later);
 * the 64-bit forms also need the device's word (device 0 stands for all:
 * hetccl's flags are 64-bit). */
static bool cuda_has_mem_ops(void) {
  return cu.cuStreamWaitValue64_v2 != NULL && cu.cuStreamWriteValue64_v2 != NULL &&
         cu.cuMemHostGetDevicePointer_v2 != NULL && mem_ops_64 == 1;
}

static bool cuda_kernels_read_host_address(void) { return host_ptr_is_device_ptr == 1; }

/* Every NVIDIA GPU with fp8 (sm_89 and later) uses the OCP encodings. */
static enum hc_fp8_layout cuda_fp8_layout(int cc_major, int cc_minor) {
  (void)cc_major, (void)cc_minor;
  return HC_FP8_OCP;
}

/* NCCL's rule (ncclTopoNeedFlush): Hopper and later order the adapter's
 * writes ahead of the completion the CPU sees; Ampere and earlier may
 * not. (NCCL also flushes a Grace C2C platform whose NIC sits behind a
 * PCIe switch: not told apart here.) */
static bool cuda_rdma_flush_needed(int cc_major, int cc_minor, const char **why) {
  (void)cc_minor;
  *why = cc_major < 9 ? "before 9.0" : "9.0 or later";
  return cc_major < 9;
}

/* ---- contexts ---- */

static int cuda_device_token(int dev, void **tok) {
  int e = CUDA_SUCCESS;
  pthread_mutex_lock(&ctx_lock);
  if (primary[dev] == NULL) {
    CUdevice d;
    e = cu.cuDeviceGet(&d, dev);
    if (e == CUDA_SUCCESS) e = cu.cuDevicePrimaryCtxRetain(&primary[dev], d);
  }
  *tok = primary[dev];
  pthread_mutex_unlock(&ctx_lock);
  return e;
}

static int cuda_ctx_get(void **tok) {
  CUcontext c = NULL;
  int e = cu.cuCtxGetCurrent(&c);
  *tok = c;
  return e;
}

static int cuda_ctx_set(void *tok) { return cu.cuCtxSetCurrent((CUcontext)tok); }

static int cuda_ctx_device(int *dev) {
  CUdevice d = -1;
  int e = cu.cuCtxGetDevice(&d);
  *dev = d; /* a CUdevice is its ordinal */
  return e;
}

static int cuda_stream_token(void *s, void **tok) {
  CUcontext c = NULL;
  int e = cu.cuStreamGetCtx((CUstream)s, &c);
  *tok = c;
  return e;
}

/* ---- memory ---- */

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static int cuda_mem_alloc(void **p, size_t n) {
  CUdeviceptr d = 0;
  int e = cu.cuMemAlloc_v2(&d, n);
  *p = (void *)(uintptr_t)d;
  return e;
}

static int cuda_mem_free(void *p) { return cu.cuMemFree_v2(dptr(p)); }

static int cuda_host_alloc(void **p, size_t n) {
  return cu.cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
}

static int cuda_host_free(void *p) { return cu.cuMemFreeHost(p); }

static int cuda_host_register(void *p, size_t n) {
  return cu.cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
}

static int cuda_host_unregister(void *p) { return cu.cuMemHostUnregister(p); }

/* CUDA 11.7's dma-buf export (a driver older than that lacks the entry
 * points). */
static int cuda_mem_range(const void *p, uintptr_t *base, size_t *size) {
  CUdeviceptr b = 0;
  if (cu.cuMemGetAddressRange_v2 == NULL) return CUDA_ERROR_NOT_SUPPORTED;
  int e = cu.cuMemGetAddressRange_v2(&b, size, dptr(p));
  *base = (uintptr_t)b;
  return e;
}

static int cuda_dmabuf_fd(uintptr_t start, size_t len, int *fd) {
  if (cu.cuMemGetHandleForAddressRange == NULL) return CUDA_ERROR_NOT_SUPPORTED;
  return cu.cuMemGetHandleForAddressRange(fd, (CUdeviceptr)start, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
}

static int cuda_ptr_attrs(const void *p, enum hc_gpu_ptr_type *type, int *device) {
  /* Each result slot is 8 zeroed bytes: wide enough whatever size the
   * driver writes (little-endian). */
  uint64_t mtype = 0, ordinal = 0, managed = 0;
  int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[] = {&mtype, &ordinal, &managed};
  *type = HC_GPU_PTR_UNKNOWN;
  *device = -1;
  int e = cu.cuPointerGetAttributes(3, attrs, data, dptr(p));
  if (e != CUDA_SUCCESS) return e;
  unsigned mt = (unsigned)mtype;
  if (mt == CU_MEMORYTYPE_DEVICE || mt == CU_MEMORYTYPE_UNIFIED || mt == CU_MEMORYTYPE_ARRAY || (managed & 0xff) != 0) {
    *type = HC_GPU_PTR_DEVICE;
    *device = (int)(uint32_t)ordinal;
  } else if (mt == CU_MEMORYTYPE_HOST) {
    *type = HC_GPU_PTR_HOST_PINNED;
  }
  return CUDA_SUCCESS;
}

/* ---- streams and events ---- */

static int cuda_copy_async(void *dst, const void *src, size_t n, void *s) {
  return cu.cuMemcpyAsync(dptr(dst), dptr(src), n, (CUstream)s);
}

static int cuda_stream_create(void **s) {
  CUstream st = NULL;
  int e = cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
  *s = st;
  return e;
}

static int cuda_stream_destroy(void *s) { return cu.cuStreamDestroy_v2((CUstream)s); }
static int cuda_stream_sync(void *s) { return cu.cuStreamSynchronize((CUstream)s); }

static int cuda_stream_capturing(void *s, bool *capturing) {
  int status = CU_STREAM_CAPTURE_STATUS_NONE;
  int e = cu.cuStreamIsCapturing((CUstream)s, &status);
  *capturing = e == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
  return e;
}

static int cuda_event_create(void **ev) {
  CUevent x = NULL;
  int e = cu.cuEventCreate(&x, CU_EVENT_DISABLE_TIMING);
  *ev = x;
  return e;
}

static int cuda_event_destroy(void *e) { return cu.cuEventDestroy_v2((CUevent)e); }
static int cuda_event_record(void *e, void *s) { return cu.cuEventRecord((CUevent)e, (CUstream)s); }
static int cuda_event_query(void *e) { return cu.cuEventQuery((CUevent)e); }

static int cuda_stream_wait_event(void *s, void *e) { return cu.cuStreamWaitEvent((CUstream)s, (CUevent)e, 0); }

/* The flag's device address: the mapping of the pinned host page. */
static int flag_dptr(volatile uint64_t *flag, CUdeviceptr *d) {
  if (host_ptr_is_device_ptr == 1) {
    *d = (CUdeviceptr)(uintptr_t)flag;
    return CUDA_SUCCESS;
  }
  return cu.cuMemHostGetDevicePointer_v2(d, (void *)(uintptr_t)flag, 0);
}

static int cuda_wait_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  CUdeviceptr d = 0;
  int e = flag_dptr(flag, &d);
  return e != CUDA_SUCCESS ? e : cu.cuStreamWaitValue64_v2((CUstream)s, d, v, CU_STREAM_WAIT_VALUE_GEQ);
}

static int cuda_write_value64(void *s, volatile uint64_t *flag, uint64_t v) {
  CUdeviceptr d = 0;
  int e = flag_dptr(flag, &d);
  return e != CUDA_SUCCESS ? e : cu.cuStreamWriteValue64_v2((CUstream)s, d, v, CU_STREAM_WRITE_VALUE_DEFAULT);
}

static int cuda_batch_values64(void *s, const struct hc_flag_op *ops, int n) {
  if (cu.cuStreamBatchMemOp_v2 == NULL) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamBatchMemOpParams p[16];
  for (int done = 0; done < n;) {
    int k = 0;
    for (; k < (int)HC_ARRAY_LEN(p) && done + k < n; k++) {
      const struct hc_flag_op *o = &ops[done + k];
      memset(&p[k], 0, sizeof(p[k]));
      p[k].value.operation = o->wait ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_64;
      int e = flag_dptr(o->flag, &p[k].value.address);
      if (e != CUDA_SUCCESS) return e;
      p[k].value.value64 = o->value;
      /* A relaxed write keeps its barrier: the H100's driver (CUDA 13)
       * refuses CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER in a batch. */
      p[k].value.flags = o->wait ? CU_STREAM_WAIT_VALUE_GEQ : CU_STREAM_WRITE_VALUE_DEFAULT;
    }
    int e = cu.cuStreamBatchMemOp_v2((CUstream)s, (unsigned)k, p, 0);
    if (e != CUDA_SUCCESS) return e;
    done += k;
  }
  return CUDA_SUCCESS;
}

static int cuda_launch_host_func(void *s, void (*fn)(void *), void *arg) {
  return cu.cuLaunchHostFunc((CUstream)s, fn, arg);
}

/* ---- modules ---- */

static int cuda_module_load(const void *image, void **mod) {
  CUmodule m = NULL;
  int e = cu.cuModuleLoadData(&m, image);
  *mod = m;
  return e;
}

static int cuda_module_unload(void *mod) { return cu.cuModuleUnload((CUmodule)mod); }

static int cuda_module_function(void *mod, const char *name, void **fn) {
  CUfunction f = NULL;
  int e = cu.cuModuleGetFunction(&f, (CUmodule)mod, name);
  *fn = f;
  return e;
}

static int cuda_launch(void *fn, unsigned grid, unsigned block, void *s, void **params) {
  return cu.cuLaunchKernel((CUfunction)fn, grid, 1, 1, block, 1, 1, 0, (CUstream)s, params, NULL);
}

/* ---- NVRTC ---- */

static pthread_mutex_t rtc_lock = PTHREAD_MUTEX_INITIALIZER;
static int rtc_state; /* 0 untried, 1 loaded, -1 absent */
static char rtc_absent_msg[512];

/* NVRTC opens libnvrtc-builtins by its soname; a copy outside the loader's
 * path (a wheel without RUNPATH, a toolkit not in ld.so.cache) is found
 * only if it is loaded already: load the one beside path first. */
static void nvrtc_preload_builtins(const char *path) {
  char pat[600];
  glob_t gl;
  const char *slash = strrchr(path, '/');
  if (slash == NULL) return;
  snprintf(pat, sizeof(pat), "%.*s/libnvrtc-builtins.so.*", (int)(slash - path), path);
  if (glob(pat, 0, NULL, &gl) != 0) return;
  for (size_t i = 0; i < gl.gl_pathc; i++)
    if (dlopen(gl.gl_pathv[i], RTLD_NOW | RTLD_LOCAL) == NULL)
      HC_TRACE(HC_DEV, "cuda: dlopen %s: %s", gl.gl_pathv[i], dlerror());
  globfree(&gl);
}

/* Loads one candidate; false (with an INFO line) when it is unusable. */
static bool nvrtc_try(const char *path) {
  nvrtc_preload_builtins(path);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    /* A bare soname is a guess; a path was named or found. */
    if (strchr(path, '/')) HC_INFO(HC_DEV, "cuda: NVRTC candidate %s: %s", path, dlerror());
    else HC_TRACE(HC_DEV, "cuda: NVRTC candidate %s: %s", path, dlerror());
    return false;
  }
  const char *missing = hc_gpu_resolve(h, nvrtc_syms, HC_ARRAY_LEN(nvrtc_syms), &nv);
  int major = 0, minor = 0;
  bool usable = false;
  if (missing != NULL) HC_INFO(HC_DEV, "cuda: skipping NVRTC at %s: it lacks %s", path, missing);
  else if (nv.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    HC_INFO(HC_DEV, "cuda: skipping NVRTC at %s: nvrtcVersion() fails", path);
  else if (driver_version > 0 && major > driver_version / 1000)
    HC_INFO(HC_DEV, "cuda: skipping NVRTC %d.%d at %s: newer than the driver (%d.%d)", major, minor, path,
            driver_version / 1000, driver_version % 1000 / 10);
  else usable = true;
  if (!usable) {
    memset(&nv, 0, sizeof(nv));
    dlclose(h);
    return false;
  }
  char where[512] = "";
  Dl_info info;
  if (dladdr((void *)(uintptr_t)nv.nvrtcVersion, &info) && info.dli_fname)
    snprintf(where, sizeof(where), "%s", info.dli_fname);
  HC_INFO(HC_DEV, "cuda: NVRTC %d.%d from %s%s", major, minor, where[0] ? where : path,
          nv.nvrtcGetCUBIN ? "" : " (no nvrtcGetCUBIN: PTX)");
  return true;
}

struct site_dirs {
  char dirs[32][512];
  int n;
};

static void site_add(struct site_dirs *sd, const char *dir, size_t len) {
  if (sd->n >= (int)HC_ARRAY_LEN(sd->dirs) || len == 0 || len >= sizeof(sd->dirs[0])) return;
  for (int i = 0; i < sd->n; i++)
    if (strlen(sd->dirs[i]) == len && !strncmp(sd->dirs[i], dir, len)) return;
  memcpy(sd->dirs[sd->n], dir, len);
  sd->dirs[sd->n++][len] = 0;
}

static void site_glob(struct site_dirs *sd, const char *prefix, const char *pattern) {
  char pat[1024];
  glob_t gl;
  if (prefix == NULL || !prefix[0]) return;
  int len = snprintf(pat, sizeof(pat), "%.512s%.256s", prefix, pattern);
  if (len < 0 || (size_t)len >= sizeof(pat)) return;
  if (glob(pat, GLOB_NOSORT, NULL, &gl) == 0)
    for (size_t i = 0; i < gl.gl_pathc; i++) site_add(sd, gl.gl_pathv[i], strlen(gl.gl_pathv[i]));
  globfree(&gl);
}

/* site-packages directories of libraries already loaded (a PyTorch job). */
static int site_from_loaded(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  const char *name = info->dlpi_name, *m;
  if (name == NULL) return 0;
  if ((m = strstr(name, "/site-packages/")) != NULL || (m = strstr(name, "/dist-packages/")) != NULL)
    site_add(arg, name, (size_t)(m - name) + 14);
  return 0;
}

/* Tries dir + pattern, newest name first (glob sorts; the last is newest). */
static bool nvrtc_glob(const char *dir, const char *pattern) {
  char pat[700];
  glob_t gl;
  bool found = false;
  snprintf(pat, sizeof(pat), "%s%s", dir, pattern);
  if (glob(pat, 0, NULL, &gl) != 0) return false;
  for (size_t k = gl.gl_pathc; k-- > 0 && !found;) found = nvrtc_try(gl.gl_pathv[k]);
  globfree(&gl);
  return found;
}

/* A CUDA toolkit's NVRTC: CUDA_HOME, CUDA_PATH, /usr/local/cuda (which may
 * be missing from the loader's cache). */
static bool nvrtc_from_toolkit(void) {
  const char *const roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (size_t i = 0; i < HC_ARRAY_LEN(roots); i++) {
    if (roots[i] == NULL || !roots[i][0]) continue;
    if (nvrtc_glob(roots[i], "/lib64/libnvrtc.so.*") || nvrtc_glob(roots[i], "/lib/libnvrtc.so.*")) return true;
  }
  return false;
}

/* The nvidia wheels of any python3 site-packages: those of libraries
 * already loaded (PyTorch), of the pythons on PATH, of virtualenv / conda /
 * pyenv / user / system installs. */
static bool nvrtc_from_wheels(void) {
  struct site_dirs *sd = calloc(1, sizeof(*sd));
  bool found = false;
  if (sd == NULL) return false;
  dl_iterate_phdr(site_from_loaded, sd);
  const char *path = getenv("PATH");
  for (const char *p = path; p && *p;) {
    size_t len = strcspn(p, ":");
    char prefix[512];
    if (len > 4 && len < sizeof(prefix) && !strncmp(p + len - 4, "/bin", 4)) {
      snprintf(prefix, sizeof(prefix), "%.*s", (int)(len - 4), p);
      site_glob(sd, prefix, "/lib/python3*/site-packages");
    }
    p += len + (p[len] == ':');
  }
  site_glob(sd, getenv("VIRTUAL_ENV"), "/lib/python3*/site-packages");
  site_glob(sd, getenv("CONDA_PREFIX"), "/lib/python3*/site-packages");
  site_glob(sd, getenv("HOME"), "/.local/lib/python3*/site-packages");
  site_glob(sd, getenv("HOME"), "/.pyenv/versions/*/lib/python3*/site-packages");
  site_glob(sd, "/usr/local/lib", "/python3*/dist-packages");
  site_glob(sd, "/usr/local/lib", "/python3*/site-packages");
  site_glob(sd, "/usr/lib", "/python3*/dist-packages");
  site_glob(sd, "/usr/lib", "/python3*/site-packages");
  site_glob(sd, "/opt/conda/lib", "/python3*/site-packages");
  for (int i = 0; i < sd->n && !found; i++)
    found = nvrtc_glob(sd->dirs[i], "/nvidia/cu1[0-9]/lib/libnvrtc.so.*") ||
            nvrtc_glob(sd->dirs[i], "/nvidia/cuda_nvrtc/lib/libnvrtc.so.*");
  free(sd);
  return found;
}

/* Finds and loads NVRTC (the order is in the header comment); false when
 * there is none to use. Called once, under rtc_lock. */
static bool nvrtc_find(void) {
  const char *explicit_path = hc_param_str(HC_P_NVRTC_LIBRARY);
  if (!strcmp(explicit_path, "none")) {
    snprintf(rtc_absent_msg, sizeof(rtc_absent_msg), "cuda: NVRTC off (HETCCL_NVRTC_LIBRARY=none)");
    return false;
  }
  if (explicit_path[0]) {
    if (nvrtc_try(explicit_path)) return true;
    HC_WARN(HC_DEV, "cuda: HETCCL_NVRTC_LIBRARY=%s cannot be used (see INFO lines); looking elsewhere", explicit_path);
  }
  /* The driver's own major first: its NVRTC makes what it loads best. */
  char preferred[32] = "";
  if (driver_version > 0) snprintf(preferred, sizeof(preferred), "libnvrtc.so.%d", driver_version / 1000);
  const char *const names[] = {preferred, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  for (size_t i = 0; i < HC_ARRAY_LEN(names); i++)
    if (names[i][0] && (i == 0 || strcmp(names[i], preferred) != 0) && nvrtc_try(names[i])) return true;
  if (nvrtc_from_toolkit() || nvrtc_from_wheels()) return true;
  snprintf(rtc_absent_msg, sizeof(rtc_absent_msg), "cuda: no usable libnvrtc (set HETCCL_NVRTC_LIBRARY to its path)");
  return false;
}

/* The version alone would miss a library replaced by a rebuild of the same
 * version: its file's size and time go in too. */
static int cuda_rtc_identity(char *buf, size_t n) {
  int major = 0, minor = 0;
  Dl_info info;
  struct stat st;
  if (nv.nvrtcVersion == NULL || nv.nvrtcVersion(&major, &minor) != 0 ||
      !dladdr((void *)(uintptr_t)nv.nvrtcVersion, &info) || info.dli_fname == NULL || stat(info.dli_fname, &st) != 0)
    return -1;
  const int len = snprintf(buf, n, "NVRTC %d.%d %s %lld %lld", major, minor, info.dli_fname, (long long)st.st_size,
                           (long long)st.st_mtime);
  return len > 0 && (size_t)len < n ? 0 : -1;
}

static hc_result_t cuda_rtc_open(void) {
  pthread_mutex_lock(&rtc_lock);
  if (rtc_state == 0) rtc_state = nvrtc_find() ? 1 : -1;
  hc_result_t r = HC_OK;
  if (rtc_state < 0) {
    hc_set_last_error(rtc_absent_msg);
    r = HC_ERR_DEVICE;
  }
  pthread_mutex_unlock(&rtc_lock);
  return r;
}

/* Attempts: the device's own binary (cubin); its PTX; PTX for the newest
 * architecture the compiler knows below the device (a device newer than
 * NVRTC), which the driver compiles forward. */
static int cuda_rtc_target(int dev, int attempt, char *opt, size_t n, bool *binary) {
  int major = 0, minor = 0;
  if (cuda_device_attr(dev, HC_GPU_ATTR_CC_MAJOR, &major) != 0 ||
      cuda_device_attr(dev, HC_GPU_ATTR_CC_MINOR, &minor) != 0)
    return -1;
  int arch = major * 10 + minor;
  if (nv.nvrtcGetCUBIN == NULL) attempt++;
  switch (attempt) {
  case 0:
    *binary = true;
    snprintf(opt, n, "--gpu-architecture=sm_%d", arch);
    return 0;
  case 1:
    *binary = false;
    snprintf(opt, n, "--gpu-architecture=compute_%d", arch);
    return 0;
  case 2: {
    int count = 0, best = 0, archs[128];
    if (nv.nvrtcGetNumSupportedArchs == NULL || nv.nvrtcGetSupportedArchs == NULL ||
        nv.nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0 || count > (int)HC_ARRAY_LEN(archs) ||
        nv.nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
      return -1;
    for (int i = 0; i < count; i++)
      if (archs[i] < arch && archs[i] > best) best = archs[i];
    if (best == 0) return -1;
    *binary = false;
    snprintf(opt, n, "--gpu-architecture=compute_%d", best);
    return 0;
  }
  default: return -1;
  }
}

static int cuda_rtc_create(void **prog, const char *src, const char *name) {
  nvrtcProgram p = NULL;
  int e = nv.nvrtcCreateProgram(&p, src, name, 0, NULL, NULL);
  *prog = p;
  return e;
}

static int cuda_rtc_compile(void *prog, int nopts, const char *const *opts) {
  return nv.nvrtcCompileProgram((nvrtcProgram)prog, nopts, opts);
}

static int cuda_rtc_log_size(void *prog, size_t *n) { return nv.nvrtcGetProgramLogSize((nvrtcProgram)prog, n); }

static int cuda_rtc_log(void *prog, char *log) { return nv.nvrtcGetProgramLog((nvrtcProgram)prog, log); }

static int cuda_rtc_code_size(void *prog, bool binary, size_t *n) {
  return binary ? nv.nvrtcGetCUBINSize((nvrtcProgram)prog, n) : nv.nvrtcGetPTXSize((nvrtcProgram)prog, n);
}

static int cuda_rtc_code(void *prog, bool binary, char *code) {
  return binary ? nv.nvrtcGetCUBIN((nvrtcProgram)prog, code) : nv.nvrtcGetPTX((nvrtcProgram)prog, code);
}

static int cuda_rtc_destroy(void **prog) {
  nvrtcProgram p = *prog;
  int e = p ? nv.nvrtcDestroyProgram(&p) : 0;
  *prog = NULL;
  return e;
}

static const char *cuda_rtc_err_str(int e) {
  const char *s = nv.nvrtcGetErrorString ? nv.nvrtcGetErrorString(e) : NULL;
  return s ? s : "unknown NVRTC error";
}

/* IEEE arithmetic as on the host: no FMA contraction, denormals kept,
 * correctly rounded division. */
static const char *const nvrtc_options[] = {"--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", NULL};

const struct hc_gpu_vendor hc_gpu_vendor_cuda = {
    .name = "cuda",
    .rtc_name = "NVRTC",
    .kind = HC_MEM_CUDA,
    .err_not_ready = CUDA_ERROR_NOT_READY,
    .err_invalid_value = CUDA_ERROR_INVALID_VALUE,
    .err_invalid_context = CUDA_ERROR_INVALID_CONTEXT,
    .err_not_supported = CUDA_ERROR_NOT_SUPPORTED,
    .rtc_options = nvrtc_options,
    .open = cuda_open,
    .err_str = cuda_err_str,
    .device_attr = cuda_device_attr,
    .has_mem_ops = cuda_has_mem_ops,
    .kernels_read_host_address = cuda_kernels_read_host_address,
    .fp8_layout = cuda_fp8_layout,
    .rdma_flush_needed = cuda_rdma_flush_needed,
    .pci_bus_id = cuda_pci_bus_id,
    .device_token = cuda_device_token,
    .ctx_get = cuda_ctx_get,
    .ctx_set = cuda_ctx_set,
    .ctx_device = cuda_ctx_device,
    .stream_token = cuda_stream_token,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .mem_range = cuda_mem_range,
    .dmabuf_fd = cuda_dmabuf_fd,
    .ptr_attrs = cuda_ptr_attrs,
    .copy_async = cuda_copy_async,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .stream_capturing = cuda_stream_capturing,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .stream_wait_event = cuda_stream_wait_event,
    .wait_value64 = cuda_wait_value64,
    .write_value64 = cuda_write_value64,
    .batch_values64 = cuda_batch_values64,
    .launch_host_func = cuda_launch_host_func,
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .module_function = cuda_module_function,
    .launch = cuda_launch,
    .rtc_open = cuda_rtc_open,
    .rtc_target = cuda_rtc_target,
    .rtc_create = cuda_rtc_create,
    .rtc_compile = cuda_rtc_compile,
    .rtc_log_size = cuda_rtc_log_size,
    .rtc_log = cuda_rtc_log,
    .rtc_code_size = cuda_rtc_code_size,
    .rtc_code = cuda_rtc_code,
    .rtc_destroy = cuda_rtc_destroy,
    .rtc_err_str = cuda_rtc_err_str,
    .rtc_identity = cuda_rtc_identity,
};

static struct hc_gpu cuda_gpu = HC_GPU_STATE_INIT(&hc_gpu_vendor_cuda);
const struct hc_dev_ops hc_dev_cuda = HC_GPU_OPS(cuda_gpu, "cuda", HC_MEM_CUDA);
