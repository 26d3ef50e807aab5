/*
 * A fake libamdhip64.so for machines without an AMD GPU: the HIP runtime
 * entry points device/hip.c resolves, each a thin shim over the fake CUDA
 * driver (fake_cuda.c, linked into the same library), plus a fake hipRTC.
 * So test_device_gpu --kind hip runs the whole backend suite through
 * hip.c's table (its wrappers, flags, pointer types, fallbacks) and the
 * shared gpu.c / gpu_reduce.c, here and in CI. What it cannot show is how
 * the real ROCm runtime behaves: that stays unrun until an AMD GPU.
 *
 * HIP's model, where it differs from the driver underneath:
 *  - no contexts: every thread has a current device, 0 until hipSetDevice;
 *    each shim first makes the thread's device context current;
 *  - hipPointerGetAttributes answers with ROCm 5's or ROCm 6's
 *    hipMemoryType numbering, by the version hipRuntimeGetVersion reports
 *    (FAKE_HIP_VERSION, default 60000000 = 6.0), and ROCm 5 fails on memory
 *    it never saw where ROCm 6 says "unregistered";
 *  - host functions only through hipStreamAddCallback: hipLaunchHostFunc is
 *    not exported (as in ROCm 5.2), so hip.c's fallback runs;
 *  - compute capability 9.0 (gfx90a), or 9.FAKE_HIP_CC_MINOR (4: gfx942,
 *    whose fp8 is fnuz).
 * hipRTC compiles nothing: it checks the options hip.c passes and returns
 * a small ELF image, which the fake module loader accepts; the kernels are
 * the host emulation of the source (kernels_emu.c), found by name.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_api.h"
#include "device/hip_api.h"

#define EXPORT __attribute__((visibility("default")))

#define HIP_CONSTANT(name, value) name = (value),
#define HIP_MEMORY_TYPE(name, header_name, value) name = (value),
enum { HC_HIP_CONSTANTS(HIP_CONSTANT) HC_HIP5_MEMORY_TYPES(HIP_MEMORY_TYPE) HC_HIP6_MEMORY_TYPES(HIP_MEMORY_TYPE) };
#undef HIP_CONSTANT
#undef HIP_MEMORY_TYPE
enum { HIP5_MEMORY_TYPE_DEVICE = 1, HIP6_MEMORY_TYPE_DEVICE = 2 };

/* The fake driver underneath (fake_cuda.c). */
CUresult cuInit(unsigned flags);
CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult cuCtxSetCurrent(CUcontext c);
CUresult cuCtxGetCurrent(CUcontext *c);
CUresult cuCtxGetDevice(CUdevice *d);
CUresult cuStreamGetCtx(CUstream s, CUcontext *c);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags);
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamIsCapturing(CUstream s, int *status);
CUresult cuEventCreate(CUevent *e, unsigned flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventQuery(CUevent e);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg);
CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr p, uint64_t v, unsigned flags);
CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr p, uint64_t v, unsigned flags);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleUnload(CUmodule m);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void **params, void **extra);

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && v[0] ? atoi(v) : def;
}

/* HIP's current device: the thread's context, device 0's until set. */
static _Thread_local int current = -1;

static hipError_t bind(int dev) {
  CUdevice d;
  CUcontext c;
  int e = cuDeviceGet(&d, dev);
  if (e == CUDA_SUCCESS) e = cuDevicePrimaryCtxRetain(&c, d);
  if (e == CUDA_SUCCESS) e = cuCtxSetCurrent(c);
  if (e == CUDA_SUCCESS) current = dev;
  return e;
}

/* Every call runs on the thread's current device. */
#define ON_DEVICE()                                  \
  do {                                               \
    hipError_t e_ = bind(current < 0 ? 0 : current); \
    if (e_ != hipSuccess) return e_;                 \
  } while (0)

EXPORT const char *hipGetErrorString(hipError_t e) {
  switch (e) {
  case hipSuccess: return "hipSuccess (fake)";
  case hipErrorInvalidValue: return "hipErrorInvalidValue (fake)";
  case hipErrorNoDevice: return "hipErrorNoDevice (fake)";
  case hipErrorNotReady: return "hipErrorNotReady (fake)";
  case hipErrorNotSupported: return "hipErrorNotSupported (fake)";
  default: return "some HIP error (fake)";
  }
}

EXPORT hipError_t hipInit(unsigned flags) { return cuInit(flags); }

EXPORT hipError_t hipRuntimeGetVersion(int *v) {
  *v = env_int("FAKE_HIP_VERSION", 60000000);
  return hipSuccess;
}

EXPORT hipError_t hipGetDeviceCount(int *n) {
  int e = cuInit(0);
  if (e != CUDA_SUCCESS) return e;
  return cuDeviceGetCount(n);
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d);
EXPORT hipError_t hipDeviceGetPCIBusId(char *id, int len, int dev) { return cuDeviceGetPCIBusId(id, len, dev); }

EXPORT hipError_t hipDeviceGetAttribute(int *v, int attr, int dev) {
  CUdevice d;
  int e = cuDeviceGet(&d, dev);
  if (e != CUDA_SUCCESS) return e;
  switch (attr) {
  case hipDeviceAttributeMultiprocessorCount:
    return cuDeviceGetAttribute(v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  case hipDeviceAttributeComputeCapabilityMajor: *v = 9; return hipSuccess;
  case hipDeviceAttributeComputeCapabilityMinor: *v = env_int("FAKE_HIP_CC_MINOR", 0); return hipSuccess;
  default: return hipErrorInvalidValue;
  }
}

EXPORT hipError_t hipSetDevice(int dev) { return bind(dev); }

EXPORT hipError_t hipGetDevice(int *dev) {
  *dev = current < 0 ? 0 : current;
  return hipSuccess;
}

EXPORT hipError_t hipMalloc(void **p, size_t n) {
  ON_DEVICE();
  CUdeviceptr d = 0;
  int e = cuMemAlloc_v2(&d, n);
  *p = (void *)(uintptr_t)d;
  return e;
}

EXPORT hipError_t hipFree(void *p) {
  ON_DEVICE();
  return cuMemFree_v2((CUdeviceptr)(uintptr_t)p);
}

EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned flags) {
  ON_DEVICE();
  return cuMemHostAlloc(p, n, flags); /* Portable / Mapped have CUDA's values */
}

EXPORT hipError_t hipHostFree(void *p) {
  ON_DEVICE();
  return cuMemFreeHost(p);
}

EXPORT hipError_t hipHostRegister(void *p, size_t n, unsigned flags) {
  ON_DEVICE();
  return cuMemHostRegister_v2(p, n, flags);
}

EXPORT hipError_t hipHostUnregister(void *p) {
  ON_DEVICE();
  return cuMemHostUnregister(p);
}

EXPORT hipError_t hipHostGetDevicePointer(void **d, void *p, unsigned flags) {
  CUdeviceptr x = 0;
  int e = cuMemHostGetDevicePointer_v2(&x, p, flags);
  *d = (void *)(uintptr_t)x;
  return e;
}

EXPORT hipError_t hipPointerGetAttributes(struct hip_ptr_attr *a, const void *p) {
  unsigned type = 0;
  int ordinal = -1;
  bool managed = false;
  int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void *data[] = {&type, &ordinal, &managed};
  int e = cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)(uintptr_t)p);
  if (e != CUDA_SUCCESS) return e;
  bool rocm6 = env_int("FAKE_HIP_VERSION", 60000000) >= HC_HIP_VERSION_6_0;
  memset(a, 0, sizeof(*a));
  a->device = ordinal;
  if (type == CU_MEMORYTYPE_DEVICE) {
    a->type = rocm6 ? HIP6_MEMORY_TYPE_DEVICE : HIP5_MEMORY_TYPE_DEVICE;
    a->device_pointer = (void *)p;
  } else if (type == CU_MEMORYTYPE_HOST) {
    a->type = rocm6 ? HIP6_MEMORY_TYPE_HOST : HIP5_MEMORY_TYPE_HOST;
    a->host_pointer = a->device_pointer = (void *)p;
  } else if (rocm6) {
    a->type = HIP6_MEMORY_TYPE_UNREGISTERED;
  } else {
    return hipErrorInvalidValue; /* ROCm 5: memory it never saw */
  }
  return hipSuccess;
}

EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, hipStream_t s) {
  if (kind != hipMemcpyDefault) return hipErrorInvalidValue;
  return cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s);
}

EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags) {
  ON_DEVICE();
  CUstream x = NULL;
  int e = cuStreamCreate(&x, flags);
  *s = x;
  return e;
}

/* The stream's device is made current, as ROCm does for a stream of another device. */
static hipError_t on_stream(hipStream_t s) {
  CUcontext c = NULL;
  if (s == NULL) {
    ON_DEVICE();
    return hipSuccess;
  }
  int e = cuStreamGetCtx(s, &c);
  return e != CUDA_SUCCESS ? e : cuCtxSetCurrent(c);
}

#define ON_STREAM(s)                 \
  do {                               \
    hipError_t e_ = on_stream(s);    \
    if (e_ != hipSuccess) return e_; \
  } while (0)

EXPORT hipError_t hipStreamGetDevice(hipStream_t s, int *dev) {
  CUcontext c = NULL;
  CUdevice d = 0;
  if (s == NULL) return hipGetDevice(dev);
  int e = cuStreamGetCtx(s, &c);
  CUcontext saved = NULL;
  cuCtxGetCurrent(&saved);
  if (e == CUDA_SUCCESS) e = cuCtxSetCurrent(c);
  if (e == CUDA_SUCCESS) e = cuCtxGetDevice(&d);
  cuCtxSetCurrent(saved);
  *dev = d;
  return e;
}

EXPORT hipError_t hipStreamDestroy(hipStream_t s) {
  ON_STREAM(s);
  return cuStreamDestroy_v2(s);
}

EXPORT hipError_t hipStreamSynchronize(hipStream_t s) {
  ON_STREAM(s);
  return cuStreamSynchronize(s);
}

EXPORT hipError_t hipStreamIsCapturing(hipStream_t s, int *status) {
  ON_STREAM(s);
  return cuStreamIsCapturing(s, status);
}

EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *ev, unsigned flags) {
  ON_DEVICE();
  CUevent x = NULL;
  int e = cuEventCreate(&x, flags);
  *ev = x;
  return e;
}

EXPORT hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  ON_STREAM(s);
  return cuEventRecord(e, s);
}

EXPORT hipError_t hipEventQuery(hipEvent_t e) { return cuEventQuery(e); }
EXPORT hipError_t hipEventDestroy(hipEvent_t e) { return cuEventDestroy_v2(e); }

EXPORT hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags) {
  ON_STREAM(s);
  return cuStreamWaitEvent(s, e, flags);
}

/* hipStreamAddCallback's shape over a host function. */
struct callback {
  hipStream_t s;
  hipStreamCallback_t cb;
  void *arg;
};

static void run_callback(void *arg) {
  struct callback *c = arg;
  c->cb(c->s, hipSuccess, c->arg);
  free(c);
}

EXPORT hipError_t hipStreamAddCallback(hipStream_t s, hipStreamCallback_t cb, void *arg, unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  ON_STREAM(s);
  struct callback *c = malloc(sizeof(*c));
  if (c == NULL) return hipErrorInvalidValue;
  *c = (struct callback){s, cb, arg};
  int e = cuLaunchHostFunc(s, run_callback, c);
  if (e != CUDA_SUCCESS) free(c);
  return e;
}

EXPORT hipError_t hipStreamWaitValue64(hipStream_t s, void *p, uint64_t v, unsigned flags, uint64_t mask) {
  if (flags != hipStreamWaitValueGte || mask != ~0ull) return hipErrorInvalidValue;
  ON_STREAM(s);
  return cuStreamWaitValue64_v2(s, (CUdeviceptr)(uintptr_t)p, v, CU_STREAM_WAIT_VALUE_GEQ);
}

EXPORT hipError_t hipStreamWriteValue64(hipStream_t s, void *p, uint64_t v, unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  ON_STREAM(s);
  return cuStreamWriteValue64_v2(s, (CUdeviceptr)(uintptr_t)p, v, 0);
}

EXPORT hipError_t hipModuleLoadData(hipModule_t *m, const void *image) {
  ON_DEVICE();
  CUmodule x = NULL;
  int e = cuModuleLoadData(&x, image);
  *m = x;
  return e;
}

EXPORT hipError_t hipModuleUnload(hipModule_t m) { return cuModuleUnload(m); }

EXPORT hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m, const char *name) {
  CUfunction x = NULL;
  int e = cuModuleGetFunction(&x, m, name);
  *f = x;
  return e;
}

EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shmem, hipStream_t s, void **params,
                                        void **extra) {
  ON_STREAM(s);
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

/* ---- hipRTC: checks what it is asked, compiles nothing ---- */

struct fake_program {
  bool compiled;
  char log[128];
};

/* A 64-byte ELF header for EM_AMDGPU: all the fake loader looks at. */
static const unsigned char fake_image[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x40, [16] = 1, [18] = 224};

EXPORT const char *hiprtcGetErrorString(hiprtcResult r) {
  return r == HIPRTC_SUCCESS ? "HIPRTC_SUCCESS (fake)" : "HIPRTC_ERROR (fake)";
}

EXPORT hiprtcResult hiprtcCreateProgram(hiprtcProgram *p, const char *src, const char *name, int nheaders,
                                        const char *const *headers, const char *const *include_names) {
  (void)name, (void)headers, (void)include_names;
  if (src == NULL || strstr(src, "hc_reduce_") == NULL || nheaders != 0) return 1;
  *p = calloc(1, sizeof(struct fake_program));
  return *p ? HIPRTC_SUCCESS : 1;
}

EXPORT hiprtcResult hiprtcDestroyProgram(hiprtcProgram *p) {
  free(*p);
  *p = NULL;
  return HIPRTC_SUCCESS;
}

/* hetccl's kernels must be compiled without FMA contraction. */
EXPORT hiprtcResult hiprtcCompileProgram(hiprtcProgram p, int nopts, const char *const *opts) {
  struct fake_program *fp = p;
  bool no_contract = false;
  for (int i = 0; i < nopts; i++) no_contract |= !strcmp(opts[i], "-ffp-contract=off");
  snprintf(fp->log, sizeof(fp->log), "%s", no_contract ? "" : "fake hipRTC: -ffp-contract=off missing");
  fp->compiled = no_contract;
  return no_contract ? HIPRTC_SUCCESS : 1;
}

EXPORT hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram p, size_t *n) {
  *n = strlen(((struct fake_program *)p)->log) + 1;
  return HIPRTC_SUCCESS;
}

EXPORT hiprtcResult hiprtcGetProgramLog(hiprtcProgram p, char *log) {
  strcpy(log, ((struct fake_program *)p)->log);
  return HIPRTC_SUCCESS;
}

EXPORT hiprtcResult hiprtcGetCodeSize(hiprtcProgram p, size_t *n) {
  if (!((struct fake_program *)p)->compiled) return 1;
  *n = sizeof(fake_image);
  return HIPRTC_SUCCESS;
}

EXPORT hiprtcResult hiprtcGetCode(hiprtcProgram p, char *code) {
  if (!((struct fake_program *)p)->compiled) return 1;
  memcpy(code, fake_image, sizeof(fake_image));
  return HIPRTC_SUCCESS;
}
