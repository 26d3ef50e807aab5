/*
 * A fake libcuda.so.1 for machines without a GPU: enough of the driver API
 * that hetccl's CUDA backend runs end to end on the host, so that
 * test_device_gpu exercises device/gpu.c, gpu_reduce.c and cuda.c here and
 * in CI (the real run is tests/gpu/run.sh on a GPU machine).
 *
 * Model: "device memory" is host memory in a table of ranges (device,
 * pinned, registered), so copies are memmove and pointer queries answer from
 * the table. Each stream is a worker thread running its queue in order, with
 * a random delay before each operation so that a missing synchronisation
 * shows up as wrong data. Kernels are the host emulation of the kernel
 * source (kernels_emu.c, generated from hc_gpu_kernel_source at build
 * time), run thread by thread (a program kernel as one thread, see the
 * source); cuModuleLoadData only checks that it got a
 * cubin (ELF) or PTX. Events, stream waits and writes of 32-bit values and
 * host functions behave as CUDA documents them. A trap (hc_trap_if_set)
 * is a sticky error, CUDA_ERROR_ILLEGAL_INSTRUCTION, for the whole
 * process rather than its context: from then on work is dropped, waits
 * end, and every stream operation, synchronize and event query fails.
 * Stream memory operations are the 64-bit ones (what hetccl uses).
 *
 * Stricter than CUDA where that finds bugs: allocating, creating streams and
 * events, loading modules need a current context; an operation on a stream
 * needs the stream's context current; a kernel runs only on a stream of the
 * context its module was loaded into.
 *
 * fake_cuda_copied(src, dst) counts the bytes of copies (a program
 * kernel's copy ops included) by the memory at either end ("device",
 * "pinned", "host"), for tests that show which bytes crossed host memory.
 *
 * Environment: FAKE_CUDA_DEVICES (default 2), FAKE_CUDA_MEMOPS=0 (stream
 * memory operations answer CUDA_ERROR_NOT_SUPPORTED), FAKE_CUDA_REJECT_CUBIN=1
 * (cuModuleLoadData takes only PTX, as a driver older than the compiler
 * would), FAKE_CUDA_REJECT_PTX=1 (and PTX too: with both, no kernel image
 * loads, as where the compiler is newer than the driver), FAKE_CUDA_DELAY_US (largest random delay per operation, default
 * 300), FAKE_CUDA_CC (compute capability as major * 10 + minor, default 90:
 * Hopper; 80 is Ampere, whose RDMA writes net/ib flushes).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "device/cuda_api.h"
#include "device/device.h"

#define EXPORT __attribute__((visibility("default")))
#define MAXDEV 8
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_ILLEGAL_INSTRUCTION 715

/* The emulated kernels (kernels_emu.c), their thread index and trap hook. */
extern unsigned long long hc_emu_tid, hc_emu_nthreads;
extern void (*hc_emu_trap)(void);
static atomic_int sticky; /* CUDA_SUCCESS until a kernel traps */
static void on_trap(void) { atomic_store(&sticky, CUDA_ERROR_ILLEGAL_INSTRUCTION); }

struct CUctx_st {
  int dev;
};
static struct CUctx_st ctxs[MAXDEV];
static int ndev = 2, delay_us = 300;
static bool memops = true, reject_cubin, reject_ptx, inited;
static int mps = -1; /* FAKE_CUDA_MPS: what CU_DEVICE_ATTRIBUTE_MPS_ENABLED answers; -1: unknown, as older drivers */
static int compute_capability = 90; /* FAKE_CUDA_CC */
static _Thread_local CUcontext cur;

static void complain(const char *fmt, const char *arg) {
  fprintf(stderr, "fake cuda: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
}

/* ---- memory ranges ---- */

enum { R_HOST = CU_MEMORYTYPE_HOST, R_DEVICE = CU_MEMORYTYPE_DEVICE };
struct range {
  uintptr_t base;
  size_t n;
  int type, dev;
  bool registered;
};
static struct range ranges[4096];
static int nranges;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;

static struct range *find_locked(uintptr_t p) {
  for (int i = 0; i < nranges; i++)
    if (p >= ranges[i].base && p < ranges[i].base + ranges[i].n) return &ranges[i];
  return NULL;
}

static int add_range(void *p, size_t n, int type, int dev, bool registered) {
  int e = CUDA_SUCCESS;
  pthread_mutex_lock(&mem_lock);
  if (nranges == (int)(sizeof(ranges) / sizeof(ranges[0]))) e = CUDA_ERROR_OUT_OF_MEMORY;
  else if (find_locked((uintptr_t)p) || find_locked((uintptr_t)p + n - 1))
    e = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  else ranges[nranges++] = (struct range){(uintptr_t)p, n, type, dev, registered};
  pthread_mutex_unlock(&mem_lock);
  return e;
}

/* Removes the range starting exactly at p, of the given type. */
static int del_range(void *p, int type, bool registered) {
  int e = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < nranges; i++) {
    if (ranges[i].base == (uintptr_t)p && ranges[i].type == type && ranges[i].registered == registered) {
      ranges[i] = ranges[--nranges];
      e = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&mem_lock);
  if (e != CUDA_SUCCESS && registered) e = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  return e;
}

/* ---- streams ---- */

enum op_kind { OP_COPY, OP_LAUNCH, OP_WAITV, OP_WRITEV, OP_HOSTFN, OP_RECORD, OP_WAITEV };
struct CUevent_st {
  CUcontext ctx;
  atomic_ulong recorded, done; /* record generations */
};
enum kernel_kind { K_REDUCE, K_SCALE, K_TRAP, K_PROGRAM };
struct CUfunc_st {
  CUcontext ctx;
  void *fn;
  enum kernel_kind kind;
};
struct op {
  struct op *next;
  enum op_kind k;
  void *dst;
  const void *src;
  size_t n;
  volatile uint64_t *flag;
  uint64_t value;
  CUhostFn fn;
  void *arg;
  CUevent ev;
  unsigned long gen;
  struct CUfunc_st *f;
  unsigned long long nthreads;
  unsigned char params[6][8];
  struct hc_dev_program_args program;
};
struct CUstream_st {
  CUcontext ctx; /* NULL: the legacy stream, any context */
  pthread_t th;
  pthread_mutex_t m;
  pthread_cond_t cv;
  struct op *head, *tail;
  bool busy, stop;
};
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER; /* hc_emu_tid is global */
static struct CUstream_st *legacy;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

static void spin_until(bool (*cond)(struct op *), struct op *o, const char *what) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!cond(o) && !atomic_load(&sticky)) {
    sched_yield();
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 120) {
      complain("%s: waited 120 s, giving up", what);
      return;
    }
  }
}

static bool value_reached(struct op *o) {
  return (int64_t)(__atomic_load_n(o->flag, __ATOMIC_ACQUIRE) - o->value) >= 0; /* CUDA's GEQ */
}
static bool event_reached(struct op *o) { return atomic_load(&o->ev->done) >= o->gen; }

static void run_op(struct op *o) {
  if (atomic_load(&sticky) && o->k != OP_RECORD) return; /* a record still counts, for cuEventDestroy */
  switch (o->k) {
  case OP_COPY: memmove(o->dst, o->src, o->n); break;
  case OP_LAUNCH:
    if (o->f->kind == K_PROGRAM) {
      /* As one thread, outside the lock: it may wait for another stream's
       * program, and reads none of the globals the lock guards. */
      ((void (*)(struct hc_dev_program_args))o->f->fn)(o->program);
      break;
    }
    pthread_mutex_lock(&launch_lock);
    hc_emu_nthreads = o->nthreads;
    for (unsigned long long t = 0; t < o->nthreads; t++) {
      hc_emu_tid = t;
      void *p0, *p1, *p2;
      unsigned long long u0, u1;
      double d;
      float f;
      memcpy(&p0, o->params[0], 8);
      memcpy(&p1, o->params[1], 8);
      if (o->f->kind == K_TRAP) {
        ((void (*)(const volatile void *))o->f->fn)(p0);
      } else if (o->f->kind == K_SCALE) {
        memcpy(&u0, o->params[2], 8);
        memcpy(&u1, o->params[3], 8);
        memcpy(&d, o->params[4], 8);
        memcpy(&f, o->params[5], 4);
        ((void (*)(void *, void *, unsigned long long, unsigned long long, double, float))o->f->fn)(p0, p1, u0, u1, d,
                                                                                                    f);
      } else {
        void *trap;
        memcpy(&p2, o->params[2], 8);
        memcpy(&u0, o->params[3], 8);
        memcpy(&trap, o->params[4], 8);
        ((void (*)(void *, void *, void *, unsigned long long, const volatile void *))o->f->fn)(p0, p1, p2, u0, trap);
      }
    }
    pthread_mutex_unlock(&launch_lock);
    break;
  case OP_WAITV: spin_until(value_reached, o, "cuStreamWaitValue64"); break;
  case OP_WRITEV: __atomic_store_n(o->flag, o->value, __ATOMIC_RELEASE); break;
  case OP_HOSTFN: o->fn(o->arg); break;
  case OP_RECORD: atomic_store(&o->ev->done, o->gen); break;
  case OP_WAITEV: spin_until(event_reached, o, "cuStreamWaitEvent"); break;
  }
}

static void *worker(void *arg) {
  struct CUstream_st *s = arg;
  unsigned seed = (unsigned)(uintptr_t)s;
  pthread_mutex_lock(&s->m);
  for (;;) {
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->cv, &s->m);
    if (s->head == NULL) break;
    struct op *o = s->head;
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->m);
    if (delay_us > 0) usleep((useconds_t)(rand_r(&seed) % delay_us));
    run_op(o);
    free(o);
    pthread_mutex_lock(&s->m);
    s->busy = false;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->m);
  return NULL;
}

static struct CUstream_st *stream_new(CUcontext ctx) {
  struct CUstream_st *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->ctx = ctx;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->th, NULL, worker, s) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

static void legacy_init(void) { legacy = stream_new(NULL); }

/* The stream an operation goes to, checking the context rules. */
static int stream_of(CUstream s, struct CUstream_st **out) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (s == NULL) {
    pthread_once(&legacy_once, legacy_init);
    *out = legacy;
    return legacy ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (s->ctx != cur) {
    complain("%s: stream of another context than the current one", "operation");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *out = s;
  return CUDA_SUCCESS;
}

static int enqueue(CUstream stream, struct op *o) {
  struct CUstream_st *s;
  int e = atomic_load(&sticky);
  if (e == CUDA_SUCCESS) e = stream_of(stream, &s);
  if (e != CUDA_SUCCESS) {
    free(o);
    return e;
  }
  pthread_mutex_lock(&s->m);
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  return CUDA_SUCCESS;
}

static struct op *op_new(enum op_kind k) {
  struct op *o = calloc(1, sizeof(*o));
  if (o) o->k = k;
  return o;
}

static void drain(struct CUstream_st *s) {
  pthread_mutex_lock(&s->m);
  while (s->head || s->busy) pthread_cond_wait(&s->cv, &s->m);
  pthread_mutex_unlock(&s->m);
}

/* ---- the driver API ---- */

EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  switch (e) {
  case CUDA_SUCCESS: *s = "no error (fake)"; break;
  case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument (fake)"; break;
  case CUDA_ERROR_INVALID_CONTEXT: *s = "invalid device context (fake)"; break;
  case CUDA_ERROR_NOT_READY: *s = "device not ready (fake)"; break;
  case CUDA_ERROR_NOT_SUPPORTED: *s = "operation not supported (fake)"; break;
  case CUDA_ERROR_INVALID_IMAGE: *s = "device kernel image is invalid (fake)"; break;
  case CUDA_ERROR_INVALID_HANDLE: *s = "invalid resource handle (fake)"; break;
  case CUDA_ERROR_ILLEGAL_INSTRUCTION: *s = "an illegal instruction was encountered (fake)"; break;
  default: *s = "some error (fake)"; break;
  }
  return CUDA_SUCCESS;
}

/* Once per process, as the real driver: a later cuInit (NVRTC calls it
 * from another thread) must not rewrite what other threads read. */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_state(void) {
  const char *v;
  if ((v = getenv("FAKE_CUDA_DEVICES")) != NULL) ndev = atoi(v);
  if (ndev > MAXDEV) ndev = MAXDEV;
  if ((v = getenv("FAKE_CUDA_MEMOPS")) != NULL) memops = atoi(v) != 0;
  if ((v = getenv("FAKE_CUDA_MPS")) != NULL) mps = atoi(v) != 0;
  if ((v = getenv("FAKE_CUDA_DELAY_US")) != NULL) delay_us = atoi(v);
  if ((v = getenv("FAKE_CUDA_REJECT_CUBIN")) != NULL) reject_cubin = atoi(v) != 0;
  if ((v = getenv("FAKE_CUDA_REJECT_PTX")) != NULL) reject_ptx = atoi(v) != 0;
  if ((v = getenv("FAKE_CUDA_CC")) != NULL && atoi(v) > 0) compute_capability = atoi(v);
  for (int i = 0; i < MAXDEV; i++) ctxs[i].dev = i;
  hc_emu_trap = on_trap;
  inited = true;
}

EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_once(&init_once, init_state);
  return ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
  *n = ndev;
  return inited ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

/* Device d sits on bus 0x1b + 0x20 d, spelled as the real driver does
 * (upper case). */
EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (id == NULL || len < 13) return CUDA_ERROR_INVALID_VALUE;
  snprintf(id, (size_t)len, "0000:%02X:00.0", 0x1b + 0x20 * d);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = compute_capability / 10; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = compute_capability % 10; break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: *v = memops; break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
    if (mps < 0) return CUDA_ERROR_INVALID_VALUE;
    *v = mps;
    break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *c = &ctxs[d];
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  cur = c;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
  *c = cur;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  *d = cur->dev;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *c) {
  *c = s ? s->ctx : cur;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  void *m = aligned_alloc(256, (n + 255) / 256 * 256);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  int e = add_range(m, n, R_DEVICE, cur->dev, false);
  if (e != CUDA_SUCCESS) {
    free(m);
    return e;
  }
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  int e = del_range((void *)(uintptr_t)p, R_DEVICE, false);
  if (e == CUDA_SUCCESS) free((void *)(uintptr_t)p);
  return e;
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0 || (flags & ~3u)) return CUDA_ERROR_INVALID_VALUE;
  void *m = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  int e = add_range(m, n, R_HOST, cur->dev, false);
  if (e != CUDA_SUCCESS) {
    free(m);
    return e;
  }
  *p = m;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  int e = del_range(p, R_HOST, false);
  if (e == CUDA_SUCCESS) free(p);
  return e;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0 || (flags & ~3u)) return CUDA_ERROR_INVALID_VALUE;
  return add_range(p, n, R_HOST, cur->dev, true);
}

EXPORT CUresult cuMemHostUnregister(void *p) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  return del_range(p, R_HOST, true);
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mem_lock);
  struct range *r = find_locked((uintptr_t)p);
  bool ok = r && r->type == R_HOST;
  pthread_mutex_unlock(&mem_lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  *d = (CUdeviceptr)(uintptr_t)p; /* unified addressing */
  return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
  pthread_mutex_lock(&mem_lock);
  struct range *r = find_locked((uintptr_t)p);
  struct range copy = r ? *r : (struct range){0};
  pthread_mutex_unlock(&mem_lock);
  for (unsigned i = 0; i < n; i++) {
    switch (attrs[i]) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data[i] = r ? (unsigned)copy.type : 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = r ? copy.dev : -2; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(bool *)data[i] = false; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

/* dma-buf export (CUDA 11.7): the fake's device memory is host memory, so
 * the "dma-buf" is a memfd of the range's size; what is checked is what the
 * real driver requires: device memory, a whole-page range inside one
 * allocation (pages of the allocation's page-rounded span). */
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  pthread_mutex_lock(&mem_lock);
  struct range *r = find_locked((uintptr_t)p);
  struct range copy = r ? *r : (struct range){0};
  pthread_mutex_unlock(&mem_lock);
  if (r == NULL || copy.type != R_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  *base = (CUdeviceptr)copy.base;
  *size = copy.n;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, int type,
                                              unsigned long long flags) {
  CUdeviceptr base = 0;
  size_t n = 0;
  if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags != 0 || size == 0 || p % 4096 || size % 4096)
    return CUDA_ERROR_INVALID_VALUE;
  /* p was rounded down to its page from a pointer inside the allocation, so
   * it may lie before the fake's 256-byte-aligned base, even inside the
   * allocation before it: the page's last 256-byte unit is looked up too,
   * and either allocation may hold the range. */
  bool inside = false;
  for (int k = 0; k < 2 && !inside; k++)
    inside = cuMemGetAddressRange_v2(&base, &n, p + (k ? 4096 - 256 : 0)) == CUDA_SUCCESS && p >= base / 4096 * 4096 &&
             p + size <= (base + n + 4095) / 4096 * 4096;
  if (!inside) return CUDA_ERROR_INVALID_VALUE;
  int fd = memfd_create("fake-cuda-dmabuf", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(int *)handle = fd;
  return CUDA_SUCCESS;
}

/* Bytes copied, by the memory of source and destination: 0 device, 1
 * pinned or registered host memory, 2 other host memory; for tests that
 * show which bytes crossed host memory (fake_cuda_copied). */
static atomic_llong copied[3][3];

static int mem_index(uintptr_t p) {
  pthread_mutex_lock(&mem_lock);
  struct range *r = find_locked(p);
  int k = r == NULL ? 2 : r->type == R_DEVICE ? 0 : 1;
  pthread_mutex_unlock(&mem_lock);
  return k;
}

static int mem_name_index(const char *mem) { return !strcmp(mem, "device") ? 0 : !strcmp(mem, "pinned") ? 1 : 2; }

EXPORT long long fake_cuda_copied(const char *src_mem, const char *dst_mem) {
  return atomic_load(&copied[mem_name_index(src_mem)][mem_name_index(dst_mem)]);
}

/* At enqueue: a copy, or a program kernel's copy op. */
static void count_copy(const void *dst, const void *src, size_t n) {
  atomic_fetch_add(&copied[mem_index((uintptr_t)src)][mem_index((uintptr_t)dst)], (long long)n);
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  count_copy((const void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  struct op *o = op_new(OP_COPY);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->dst = (void *)(uintptr_t)dst;
  o->src = (const void *)(uintptr_t)src;
  o->n = n;
  return enqueue(s, o);
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  *s = stream_new(cur);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  if (s == NULL) return CUDA_ERROR_INVALID_HANDLE;
  drain(s);
  pthread_mutex_lock(&s->m);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  pthread_join(s->th, NULL);
  pthread_mutex_destroy(&s->m);
  pthread_cond_destroy(&s->cv);
  free(s);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream s) {
  struct CUstream_st *st;
  int e = stream_of(s, &st);
  if (e == CUDA_SUCCESS) drain(st);
  return e == CUDA_SUCCESS ? atomic_load(&sticky) : e;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) {
  (void)s;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_VALUE;
  *e = calloc(1, sizeof(**e));
  if (*e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  (*e)->ctx = cur;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  if (e == NULL) return CUDA_ERROR_INVALID_HANDLE;
  if (s != NULL && s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  struct op *o = op_new(OP_RECORD);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->ev = e;
  o->gen = atomic_fetch_add(&e->recorded, 1) + 1;
  return enqueue(s, o);
}

EXPORT CUresult cuEventQuery(CUevent e) {
  if (e == NULL) return CUDA_ERROR_INVALID_HANDLE;
  if (atomic_load(&sticky)) return atomic_load(&sticky);
  return atomic_load(&e->done) >= atomic_load(&e->recorded) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  if (e == NULL) return CUDA_ERROR_INVALID_HANDLE;
  /* CUDA lets a pending event be destroyed; its record op still points at
   * it, so wait for that here. */
  while (atomic_load(&e->done) < atomic_load(&e->recorded)) sched_yield();
  free(e);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  if (e == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct op *o = op_new(OP_WAITEV);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->ev = e;
  o->gen = atomic_load(&e->recorded);
  return enqueue(s, o);
}

EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg) {
  struct op *o = op_new(OP_HOSTFN);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->fn = fn;
  o->arg = arg;
  return enqueue(s, o);
}

static int value_op(enum op_kind k, CUstream s, CUdeviceptr p, uint64_t v, unsigned flags) {
  if (!memops) return CUDA_ERROR_NOT_SUPPORTED;
  /* No flags, as hetccl passes none: the H100's driver refuses even
   * CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER in a batch. */
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mem_lock);
  struct range *r = find_locked((uintptr_t)p);
  bool ok = r && (r->type == R_HOST || r->type == R_DEVICE);
  pthread_mutex_unlock(&mem_lock);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  struct op *o = op_new(k);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  if (p % 8 != 0) return CUDA_ERROR_INVALID_VALUE;
  o->flag = (volatile uint64_t *)(uintptr_t)p;
  o->value = v;
  return enqueue(s, o);
}

EXPORT CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr p, uint64_t v, unsigned flags) {
  return value_op(OP_WAITV, s, p, v, flags);
}

EXPORT CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr p, uint64_t v, unsigned flags) {
  return value_op(OP_WRITEV, s, p, v, flags);
}

EXPORT CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned flags) {
  if (flags != 0 || ops == NULL) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    unsigned op = ops[i].operation;
    if (op != CU_STREAM_MEM_OP_WAIT_VALUE_64 && op != CU_STREAM_MEM_OP_WRITE_VALUE_64) return CUDA_ERROR_INVALID_VALUE;
    int e = value_op(op == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? OP_WAITV : OP_WRITEV, s, ops[i].value.address,
                     ops[i].value.value64, ops[i].value.flags);
    if (e != CUDA_SUCCESS) return e;
  }
  return CUDA_SUCCESS;
}

/* NVRTC 13 opens libcuda.so.1 itself and asks for the driver's private
 * export tables: there are none here. */
EXPORT CUresult cuGetExportTable(const void **table, const void *id) {
  (void)id;
  *table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- modules: the emulated kernels of this library ---- */

struct CUmod_st {
  CUcontext ctx;
  struct CUfunc_st fns[128];
  int nfns;
};

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  if (cur == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  const char *img = image;
  bool cubin = img && !memcmp(img,
                              "\x7f"
                              "ELF",
                              4);
  bool ptx = img && strstr(img, ".version") && strstr(img, ".target");
  if ((!cubin && !ptx) || (cubin && reject_cubin) || (!cubin && reject_ptx)) return CUDA_ERROR_INVALID_IMAGE;
  *m = calloc(1, sizeof(**m));
  if (*m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  (*m)->ctx = cur;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule m) {
  free(m);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  static void *self;
  if (self == NULL) {
    Dl_info info;
    if (!dladdr((void *)(uintptr_t)cuInit, &info)) return CUDA_ERROR_NOT_FOUND;
    self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }
  void *fn = self ? dlsym(self, name) : NULL;
  if (fn == NULL || m->nfns == 128) return CUDA_ERROR_NOT_FOUND;
  struct CUfunc_st *x = &m->fns[m->nfns++];
  x->ctx = m->ctx;
  x->fn = fn;
  x->kind = !strncmp(name, "hc_scale_", 9)      ? K_SCALE
            : !strncmp(name, "hc_program_", 11) ? K_PROGRAM
            : !strcmp(name, "hc_trap_if_set")   ? K_TRAP
                                                : K_REDUCE;
  *f = x;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  if (f == NULL || params == NULL || extra != NULL) return CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || bx == 0 || bx > 1024 || gy != 1 || gz != 1 || by != 1 || bz != 1 || shmem != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (f->ctx != cur || (s != NULL && s->ctx != f->ctx)) {
    complain("%s: kernel of another context than the stream's or the current one", "cuLaunchKernel");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (f->kind == K_PROGRAM && gx != 1) {
    complain("%s: a program kernel in several blocks (its barriers join one)", "cuLaunchKernel");
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct op *o = op_new(OP_LAUNCH);
  if (o == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  o->f = f;
  o->nthreads = (unsigned long long)gx * bx;
  /* CUDA copies the arguments at launch: the caller's locals may go. */
  if (f->kind == K_PROGRAM) {
    memcpy(&o->program, params[0], sizeof(o->program));
    for (uint64_t k = 0; k < o->program.nops && k < HC_DEV_PROGRAM_OPS; k++)
      if (o->program.op[k].kind == HC_DEV_PROGRAM_COPY)
        count_copy(o->program.op[k].dst, o->program.op[k].src0, o->program.op[k].n);
    return enqueue(s, o);
  }
  static const size_t reduce_sizes[] = {8, 8, 8, 8, 8}, scale_sizes[] = {8, 8, 8, 8, 8, 4}, trap_sizes[] = {8};
  const size_t *sizes = f->kind == K_SCALE ? scale_sizes : f->kind == K_TRAP ? trap_sizes : reduce_sizes;
  size_t np = f->kind == K_SCALE ? 6 : f->kind == K_TRAP ? 1 : 5;
  for (size_t i = 0; i < np; i++) memcpy(o->params[i], params[i], sizes[i]);
  return enqueue(s, o);
}
