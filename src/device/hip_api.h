/*
 * device/hip_api: the HIP runtime and hipRTC types, constants and
 * signatures that device/hip.c resolves at run time, declared here so that
 * the build needs no ROCm header (CI machines and NVIDIA hosts lack it).
 * Only hip.c includes this file, and tests/gpu/hip_constants_check.c,
 * which compiles it next to ROCm's own headers (where they are installed)
 * and fails the build when a value here differs from theirs.
 *
 * Every constant is listed once, with the header's own name, in
 * HC_HIP_CONSTANTS (same value in ROCm 5 and 6) or in the per-major lists
 * (values that changed in ROCm 6.0). hip.c makes them enum constants; the
 * check makes each a _Static_assert against the header.
 */
#ifndef HC_HIP_API_H_
#define HC_HIP_API_H_

#include <stddef.h>
#include <stdint.h>

/* name as in hip/hip_runtime_api.h or hip/driver_types.h, value */
#define HC_HIP_CONSTANTS(X)                       \
  /* hipError_t */                                \
  X(hipSuccess, 0)                                \
  X(hipErrorInvalidValue, 1)                      \
  X(hipErrorNoDevice, 100)                        \
  X(hipErrorInvalidDevice, 101)                   \
  X(hipErrorNotReady, 600)                        \
  X(hipErrorNotSupported, 801)                    \
  /* hipDeviceAttribute_t */                      \
  X(hipDeviceAttributeComputeCapabilityMajor, 23) \
  X(hipDeviceAttributeComputeCapabilityMinor, 61) \
  X(hipDeviceAttributeMultiprocessorCount, 63)    \
  /* flags */                                     \
  X(hipHostMallocPortable, 0x1)                   \
  X(hipHostMallocMapped, 0x2)                     \
  X(hipHostRegisterPortable, 0x1)                 \
  X(hipHostRegisterMapped, 0x2)                   \
  X(hipStreamNonBlocking, 0x01)                   \
  X(hipEventDisableTiming, 0x2)                   \
  X(hipStreamWaitValueGte, 0x0)                   \
  X(hipStreamCaptureStatusNone, 0)                \
  /* hipMemcpyKind */                             \
  X(hipMemcpyDefault, 4)                          \
  /* hiprtcResult */                              \
  X(HIPRTC_SUCCESS, 0)

/* hipMemoryType, which ROCm 6.0 renumbered to CUDA's values (and gave an
 * "unregistered" type for pageable memory): hetccl's name, the header's
 * name, value. hip.c picks the list by hipRuntimeGetVersion. */
#define HC_HIP5_MEMORY_TYPES(X) X(HIP5_MEMORY_TYPE_HOST, hipMemoryTypeHost, 0)
#define HC_HIP6_MEMORY_TYPES(X)                                  \
  X(HIP6_MEMORY_TYPE_UNREGISTERED, hipMemoryTypeUnregistered, 0) \
  X(HIP6_MEMORY_TYPE_HOST, hipMemoryTypeHost, 1)

/* HIP_VERSION = major * 1e7 + minor * 1e5 + patch (hip/hip_version.h). */
#define HC_HIP_VERSION_6_0 60000000

/* The types, unless ROCm's own headers are in the same file (the check). */
#ifndef HC_HIP_API_LISTS_ONLY
typedef int hipError_t;
typedef int hiprtcResult;
typedef void *hipStream_t, *hipEvent_t, *hipModule_t, *hipFunction_t, *hiprtcProgram;
typedef void (*hipStreamCallback_t)(hipStream_t s, hipError_t status, void *arg);

/* hipPointerAttribute_t: the first field is `memoryType` in ROCm 5 and
 * `type` in ROCm 6, same place; the check compares the other offsets. */
struct hip_ptr_attr {
  int type;
  int device;
  void *device_pointer;
  void *host_pointer;
  int is_managed;
  unsigned allocation_flags;
};
#endif

/* hip/hip_runtime_api.h: X = required, OPT = optional (absent from older
 * ROCm: hipStreamGetDevice 5.5, hipLaunchHostFunc exported 5.3). */
#define HC_HIP_SYMBOLS(X, OPT)                                                                                      \
  X(hipGetErrorString, const char *, (hipError_t e))                                                                \
  X(hipInit, hipError_t, (unsigned flags))                                                                          \
  X(hipRuntimeGetVersion, hipError_t, (int *v))                                                                     \
  X(hipGetDeviceCount, hipError_t, (int *n))                                                                        \
  X(hipDeviceGetAttribute, hipError_t, (int *v, int attr, int dev))                                                 \
  X(hipSetDevice, hipError_t, (int dev))                                                                            \
  X(hipGetDevice, hipError_t, (int *dev))                                                                           \
  X(hipMalloc, hipError_t, (void **p, size_t n))                                                                    \
  X(hipFree, hipError_t, (void *p))                                                                                 \
  X(hipHostMalloc, hipError_t, (void **p, size_t n, unsigned flags))                                                \
  X(hipHostFree, hipError_t, (void *p))                                                                             \
  X(hipHostRegister, hipError_t, (void *p, size_t n, unsigned flags))                                               \
  X(hipHostUnregister, hipError_t, (void *p))                                                                       \
  X(hipPointerGetAttributes, hipError_t, (struct hip_ptr_attr * a, const void *p))                                  \
  X(hipMemcpyAsync, hipError_t, (void *dst, const void *src, size_t n, int kind, hipStream_t s))                    \
  X(hipStreamCreateWithFlags, hipError_t, (hipStream_t * s, unsigned flags))                                        \
  X(hipStreamDestroy, hipError_t, (hipStream_t s))                                                                  \
  X(hipStreamSynchronize, hipError_t, (hipStream_t s))                                                              \
  X(hipStreamIsCapturing, hipError_t, (hipStream_t s, int *status))                                                 \
  X(hipEventCreateWithFlags, hipError_t, (hipEvent_t * e, unsigned flags))                                          \
  X(hipEventRecord, hipError_t, (hipEvent_t e, hipStream_t s))                                                      \
  X(hipEventQuery, hipError_t, (hipEvent_t e))                                                                      \
  X(hipEventDestroy, hipError_t, (hipEvent_t e))                                                                    \
  X(hipStreamWaitEvent, hipError_t, (hipStream_t s, hipEvent_t e, unsigned flags))                                  \
  X(hipStreamAddCallback, hipError_t, (hipStream_t s, hipStreamCallback_t cb, void *arg, unsigned flags))           \
  X(hipModuleLoadData, hipError_t, (hipModule_t * m, const void *image))                                            \
  X(hipModuleUnload, hipError_t, (hipModule_t m))                                                                   \
  X(hipModuleGetFunction, hipError_t, (hipFunction_t * f, hipModule_t m, const char *name))                         \
  X(hipModuleLaunchKernel, hipError_t,                                                                              \
    (hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
     hipStream_t s, void **params, void **extra))                                                                   \
  OPT(hipStreamGetDevice, hipError_t, (hipStream_t s, int *dev))                                                    \
  OPT(hipLaunchHostFunc, hipError_t, (hipStream_t s, void (*fn)(void *), void *arg))                                \
  OPT(hipStreamWaitValue64, hipError_t, (hipStream_t s, void *p, uint64_t v, unsigned flags, uint64_t mask))        \
  OPT(hipStreamWriteValue64, hipError_t, (hipStream_t s, void *p, uint64_t v, unsigned flags))                      \
  OPT(hipHostGetDevicePointer, hipError_t, (void **device_ptr, void *host_ptr, unsigned flags))                     \
  OPT(hipDeviceGetPCIBusId, hipError_t, (char *id, int len, int dev))                                               \
  OPT(hipMemGetAddressRange, hipError_t, (void **base, size_t *size, void *p))                                      \
  OPT(hipMemGetHandleForAddressRange, hipError_t,                                                                   \
      (void *handle, void *p, size_t size, int type, unsigned long long flags))

/* hip/hiprtc.h */
#define HC_HIPRTC_SYMBOLS(X, OPT)                                                                    \
  X(hiprtcGetErrorString, const char *, (hiprtcResult r))                                            \
  X(hiprtcCreateProgram, hiprtcResult,                                                               \
    (hiprtcProgram * p, const char *src, const char *name, int nheaders, const char *const *headers, \
     const char *const *include_names))                                                              \
  X(hiprtcDestroyProgram, hiprtcResult, (hiprtcProgram * p))                                         \
  X(hiprtcCompileProgram, hiprtcResult, (hiprtcProgram p, int nopts, const char *const *opts))       \
  X(hiprtcGetProgramLogSize, hiprtcResult, (hiprtcProgram p, size_t * n))                            \
  X(hiprtcGetProgramLog, hiprtcResult, (hiprtcProgram p, char *log))                                 \
  X(hiprtcGetCodeSize, hiprtcResult, (hiprtcProgram p, size_t * n))                                  \
  X(hiprtcGetCode, hiprtcResult, (hiprtcProgram p, char *code))

#endif
