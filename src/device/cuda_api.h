/*
 * device/cuda_api: the few CUDA driver API and NVRTC types, constants and
 * signatures that device/cuda.c resolves at run time, declared here so that
 * the build needs no cuda.h (CI machines may lack the toolkit). Every value
 * is copied from the CUDA 13.0 headers (cuda.h, nvrtc.h); these values are
 * part of the driver ABI and have not changed since they were introduced.
 * Only cuda.c includes this file.
 */
#ifndef HC_CUDA_API_H_
#define HC_CUDA_API_H_

#include <stddef.h>

typedef int CUresult;                   /* enum cudaError_enum */
typedef int CUdevice;                   /* CUdevice_v1 */
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 (64-bit hosts) */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef void (*CUhostFn)(void *userData); /* CUDA_CB is empty on Linux */

/* CUresult (cuda.h, enum cudaError_enum) */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_NOT_SUPPORTED 801

/* CUdevice_attribute (cuda.h) */
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
/* The V1 stream memory operations: off unless the kernel module has
 * NVreg_EnableStreamMemOPs=1. The _v2 entry points that hetccl calls
 * (CUDA 11.7 and later drivers) do not depend on it. */
#define CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 92
#define CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM 91
/* Contexts made on the device are clients of an MPS server (CUDA 12.3 and
 * later drivers; older ones answer CUDA_ERROR_INVALID_VALUE). */
#define CU_DEVICE_ATTRIBUTE_MPS_ENABLED 133
#define CU_STREAM_MEM_OP_WAIT_VALUE_64 4
#define CU_STREAM_MEM_OP_WRITE_VALUE_64 5
/* CUstreamBatchMemOpParams_v1, the wait/write members (48 bytes). */
typedef union {
  unsigned operation;
  struct {
    unsigned operation;
    CUdeviceptr address;
    unsigned long long value64;
    unsigned flags;
    CUdeviceptr alias;
  } value;
  unsigned long long pad[6];
} CUstreamBatchMemOpParams;
_Static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "CUstreamBatchMemOpParams is 48 bytes");
_Static_assert(offsetof(CUstreamBatchMemOpParams, value.value64) == 16 &&
                   offsetof(CUstreamBatchMemOpParams, value.flags) == 24 &&
                   offsetof(CUstreamBatchMemOpParams, value.alias) == 32,
               "CUstreamMemOpWaitValueParams_st layout");

/* CUpointer_attribute (cuda.h) */
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1 /* CUmemRangeHandleType, CUDA 11.7 */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2    /* unsigned int, a CUmemorytype */
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8     /* bool-sized flag (read as 0/non-0) */
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9 /* int */

/* CUmemorytype (cuda.h); 0 means "not known to CUDA" (pageable memory). */
#define CU_MEMORYTYPE_HOST 0x01
#define CU_MEMORYTYPE_DEVICE 0x02
#define CU_MEMORYTYPE_ARRAY 0x03
#define CU_MEMORYTYPE_UNIFIED 0x04

/* Flags (cuda.h) */
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_WAIT_VALUE_GEQ 0x0      /* (int32_t)(*addr - value) >= 0 */
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0 /* with a memory barrier before the write */
#define CU_STREAM_CAPTURE_STATUS_NONE 0

/* nvrtcResult (nvrtc.h) */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_SUCCESS 0

/*
 * The driver entry points hetccl calls, as X(name, return, parameters): one
 * list, resolved in one loop by the exact symbol names that cuda.h's
 * #defines select (cuMemAlloc -> cuMemAlloc_v2, ...). Optional entries may
 * be absent from an old driver; their feature is then off.
 */
#define HC_CUDA_SYMBOLS(X, OPT)                                                                                  \
  X(cuGetErrorString, CUresult, (CUresult e, const char **s))                                                    \
  X(cuInit, CUresult, (unsigned flags))                                                                          \
  X(cuDriverGetVersion, CUresult, (int *version))                                                                \
  X(cuDeviceGetCount, CUresult, (int *count))                                                                    \
  X(cuDeviceGet, CUresult, (CUdevice * dev, int ordinal))                                                        \
  X(cuDeviceGetAttribute, CUresult, (int *v, int attr, CUdevice dev))                                            \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext * ctx, CUdevice dev))                                         \
  X(cuCtxSetCurrent, CUresult, (CUcontext ctx))                                                                  \
  X(cuCtxGetCurrent, CUresult, (CUcontext * ctx))                                                                \
  X(cuCtxGetDevice, CUresult, (CUdevice * dev))                                                                  \
  X(cuStreamGetCtx, CUresult, (CUstream s, CUcontext * ctx))                                                     \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr * p, size_t n))                                                        \
  X(cuMemFree_v2, CUresult, (CUdeviceptr p))                                                                     \
  X(cuMemHostAlloc, CUresult, (void **p, size_t n, unsigned flags))                                              \
  X(cuMemFreeHost, CUresult, (void *p))                                                                          \
  X(cuMemHostRegister_v2, CUresult, (void *p, size_t n, unsigned flags))                                         \
  X(cuMemHostUnregister, CUresult, (void *p))                                                                    \
  X(cuMemHostGetDevicePointer_v2, CUresult, (CUdeviceptr * d, void *p, unsigned flags))                          \
  X(cuPointerGetAttributes, CUresult, (unsigned n, int *attrs, void **data, CUdeviceptr p))                      \
  X(cuMemcpyAsync, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))                           \
  X(cuStreamCreate, CUresult, (CUstream * s, unsigned flags))                                                    \
  X(cuStreamDestroy_v2, CUresult, (CUstream s))                                                                  \
  X(cuStreamSynchronize, CUresult, (CUstream s))                                                                 \
  X(cuStreamIsCapturing, CUresult, (CUstream s, int *status))                                                    \
  X(cuEventCreate, CUresult, (CUevent * e, unsigned flags))                                                      \
  X(cuEventRecord, CUresult, (CUevent e, CUstream s))                                                            \
  X(cuEventQuery, CUresult, (CUevent e))                                                                         \
  X(cuEventDestroy_v2, CUresult, (CUevent e))                                                                    \
  X(cuStreamWaitEvent, CUresult, (CUstream s, CUevent e, unsigned flags))                                        \
  X(cuLaunchHostFunc, CUresult, (CUstream s, CUhostFn fn, void *arg))                                            \
  X(cuModuleLoadData, CUresult, (CUmodule * m, const void *image))                                               \
  X(cuModuleUnload, CUresult, (CUmodule m))                                                                      \
  X(cuModuleGetFunction, CUresult, (CUfunction * f, CUmodule m, const char *name))                               \
  X(cuLaunchKernel, CUresult,                                                                                    \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
     CUstream s, void **params, void **extra))                                                                   \
  OPT(cuStreamWaitValue64_v2, CUresult, (CUstream s, CUdeviceptr p, uint64_t v, unsigned flags))                 \
  OPT(cuStreamWriteValue64_v2, CUresult, (CUstream s, CUdeviceptr p, uint64_t v, unsigned flags))                \
  OPT(cuStreamBatchMemOp_v2, CUresult, (CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags))  \
  OPT(cuDeviceGetPCIBusId, CUresult, (char *id, int len, CUdevice dev))                                          \
  OPT(cuMemGetAddressRange_v2, CUresult, (CUdeviceptr * base, size_t * size, CUdeviceptr p))                     \
  OPT(cuMemGetHandleForAddressRange, CUresult,                                                                   \
      (void *handle, CUdeviceptr p, size_t size, int type, unsigned long long flags))

/* NVRTC, the same way. nvrtcGetCUBIN appeared in CUDA 11.1; without it the
 * kernels are compiled to PTX and the driver finishes the job. The
 * supported-architecture list (CUDA 11.2) picks a PTX target for a device
 * newer than the compiler. */
#define HC_NVRTC_SYMBOLS(X, OPT)                                                                    \
  X(nvrtcGetErrorString, const char *, (nvrtcResult r))                                             \
  X(nvrtcVersion, nvrtcResult, (int *major, int *minor))                                            \
  X(nvrtcCreateProgram, nvrtcResult,                                                                \
    (nvrtcProgram * p, const char *src, const char *name, int nheaders, const char *const *headers, \
     const char *const *include_names))                                                             \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram * p))                                           \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram p, int nopts, const char *const *opts))         \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram p, size_t * n))                              \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram p, char *log))                                   \
  X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram p, size_t * n))                                     \
  X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram p, char *ptx))                                          \
  OPT(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram p, size_t * n))                                 \
  OPT(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram p, char *cubin))                                    \
  OPT(nvrtcGetNumSupportedArchs, nvrtcResult, (int *n))                                             \
  OPT(nvrtcGetSupportedArchs, nvrtcResult, (int *archs))

#endif
