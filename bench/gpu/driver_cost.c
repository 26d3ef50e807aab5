/*
 * What the host pays for each driver call that a small GPU collective
 * makes, each timed alone on a stream that is idle (synchronised after
 * every sample), first or after a flag write: tiny copies each way, a
 * stream flag write, events, and the context and capture queries that the
 * device layer makes around each operation. gpu_bench's "the call itself"
 * is a sum of such calls plus hetccl's own work. Medians of N, in us.
 * The driver is opened at run time, as hetccl opens it (src/device/cuda.c);
 * with the fake libcuda of tests/gpu the figures are the fake's.
 *   driver_cost
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device/cuda_api.h"
#include "timing.h"

enum { N = 400 };

#define DECLARE(name, ret, params) static ret(*p_##name) params;
HC_CUDA_SYMBOLS(DECLARE, DECLARE)
#undef DECLARE

#define CK(call)                                                       \
  do {                                                                 \
    CUresult e_ = (call);                                              \
    if (e_ != CUDA_SUCCESS) {                                          \
      fprintf(stderr, "driver_cost: %s failed: %d\n", #call, (int)e_); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

static CUstream s;
static CUevent ev;
static CUdeviceptr dev, dev2;
static uint64_t *host; /* pinned and mapped: one allocation holds every word used */

enum op { D2H, H2D, D2D, FLAG_WRITE, EVENT_RECORD, EVENT_QUERY, STREAM_CTX, CTX_CURRENT, CAPTURING, NOPS };
static const char *const op_name[NOPS] = {"cuMemcpyAsync device->host",
                                          "cuMemcpyAsync host->device",
                                          "cuMemcpyAsync device->device",
                                          "cuStreamWriteValue64",
                                          "cuEventRecord",
                                          "cuEventQuery",
                                          "cuStreamGetCtx",
                                          "cuCtxGetCurrent",
                                          "cuStreamIsCapturing"};

static void enqueue(enum op op, uint64_t i) {
  CUdeviceptr h = (CUdeviceptr)(uintptr_t)&host[8];
  CUcontext c;
  int status;
  switch (op) {
  case D2H: CK(p_cuMemcpyAsync(h, dev, 4, s)); break;
  case H2D: CK(p_cuMemcpyAsync(dev, h, 4, s)); break;
  case D2D: CK(p_cuMemcpyAsync(dev2, dev, 4, s)); break;
  case FLAG_WRITE: CK(p_cuStreamWriteValue64_v2(s, (CUdeviceptr)(uintptr_t)&host[0], i, 0)); break;
  case EVENT_RECORD: CK(p_cuEventRecord(ev, s)); break;
  case EVENT_QUERY: (void)p_cuEventQuery(ev); break;
  case STREAM_CTX: CK(p_cuStreamGetCtx(s, &c)); break;
  case CTX_CURRENT: CK(p_cuCtxGetCurrent(&c)); break;
  case CAPTURING: CK(p_cuStreamIsCapturing(s, &status)); break;
  case NOPS: break;
  }
}

/* The median cost of op on a synchronised stream, alone or after another
 * operation (before < 0: alone). */
static double cost(enum op op, int before) {
  double t[N];
  for (int i = 0; i < N; i++) {
    if (before >= 0) enqueue((enum op)before, (uint64_t)i);
    double t0 = now_us();
    enqueue(op, (uint64_t)i);
    t[i] = now_us() - t0;
    CK(p_cuStreamSynchronize(s));
  }
  return median(t, N);
}

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("skip: no libcuda.so.1 (%s)\n", dlerror());
    return 77;
  }
#define RESOLVE(name, ret, params) *(void **)&p_##name = dlsym(lib, #name);
  HC_CUDA_SYMBOLS(RESOLVE, RESOLVE)
#undef RESOLVE
  if (p_cuStreamWriteValue64_v2 == NULL) {
    printf("skip: the driver has no cuStreamWriteValue64_v2\n");
    return 77;
  }
  CUdevice d;
  CUcontext ctx;
  int ndev = 0;
  if (p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGetCount(&ndev) != CUDA_SUCCESS || ndev == 0) {
    printf("skip: no CUDA device\n");
    return 77;
  }
  CK(p_cuDeviceGet(&d, 0));
  CK(p_cuDevicePrimaryCtxRetain(&ctx, d));
  CK(p_cuCtxSetCurrent(ctx));
  CK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CK(p_cuMemAlloc_v2(&dev, 64));
  CK(p_cuMemAlloc_v2(&dev2, 64));
  CK(p_cuMemHostAlloc((void **)&host, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  printf("%-30s %8s %14s\n", "host cost (us, median)", "alone", "after a flag");
  for (int op = 0; op < NOPS; op++)
    printf("%-30s %8.2f %14.2f\n", op_name[op], cost((enum op)op, -1), cost((enum op)op, FLAG_WRITE));
  CK(p_cuMemFreeHost(host));
  CK(p_cuMemFree_v2(dev2));
  CK(p_cuMemFree_v2(dev));
  CK(p_cuEventDestroy_v2(ev));
  CK(p_cuStreamDestroy_v2(s));
  return 0;
}
