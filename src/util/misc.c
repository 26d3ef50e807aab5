/* Clocks, datatype facts, allocation, randomness, process liveness and dlopen helpers. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "util.h"

uint64_t hc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t hc_timeout_ns(void) { return (uint64_t)hc_param_int(HC_P_TIMEOUT) * 1000000000ull; }
uint64_t hc_deadline_ns(void) { return hc_now_ns() + hc_timeout_ns(); }

static const struct {
  size_t size;
  const char *name;
  bool is_float;
} dtypes[HC_DTYPE_COUNT] = {
    [HC_INT8] = {1, "int8", false},        [HC_UINT8] = {1, "uint8", false},    [HC_INT32] = {4, "int32", false},
    [HC_UINT32] = {4, "uint32", false},    [HC_INT64] = {8, "int64", false},    [HC_UINT64] = {8, "uint64", false},
    [HC_FLOAT16] = {2, "half", true},      [HC_FLOAT32] = {4, "float", true},   [HC_FLOAT64] = {8, "double", true},
    [HC_BFLOAT16] = {2, "bfloat16", true}, [HC_FP8_E4M3] = {1, "f8e4m3", true}, [HC_FP8_E5M2] = {1, "f8e5m2", true},
};

size_t hc_dtype_size(enum hc_dtype t) { return (unsigned)t < HC_DTYPE_COUNT ? dtypes[t].size : 0; }
const char *hc_dtype_name(enum hc_dtype t) { return (unsigned)t < HC_DTYPE_COUNT ? dtypes[t].name : "?"; }
bool hc_dtype_is_float(enum hc_dtype t) { return (unsigned)t < HC_DTYPE_COUNT && dtypes[t].is_float; }

const char *hc_redop_name(enum hc_redop op) {
  static const char *const names[HC_REDOP_COUNT] = {"sum", "prod", "max", "min", "avg", "mulsum"};
  return (unsigned)op < HC_REDOP_COUNT ? names[op] : "?";
}

const char *hc_coll_name(enum hc_coll c) {
  static const char *const names[HC_COLL_COUNT] = {"AllReduce",     "Broadcast", "Reduce",    "AllGather",
                                                   "ReduceScatter", "AlltoAll",  "AlltoAllv", "Gather",
                                                   "Scatter",       "Send",      "Recv"};
  return (unsigned)c < HC_COLL_COUNT ? names[c] : "?";
}

bool hc_coll_reduces(enum hc_coll c) {
  return c == HC_COLL_ALLREDUCE || c == HC_COLL_REDUCE || c == HC_COLL_REDUCESCATTER;
}

hc_result_t hc_calloc(void *out_ptr, size_t n, size_t size, const char *what) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  *(void **)out_ptr = p;
  if (p == NULL) return HC_FAIL(HC_ERR_SYSTEM, "out of host memory allocating %zu x %zu bytes for %s", n, size, what);
  return HC_OK;
}

hc_result_t hc_random_bytes(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return HC_FAIL(HC_ERR_SYSTEM, "getrandom: %s", strerror(errno));
    }
    p += got;
    n -= (size_t)got;
  }
  return HC_OK;
}

void *hc_dl_open(const char *path_or_name, int flags) {
  void *h = dlopen(path_or_name, flags);
  if (h == NULL) HC_INFO(HC_UTIL, "dlopen %s: %s", path_or_name, dlerror());
  return h;
}

void *hc_dl_sym(void *handle, const char *name) {
  void *s = dlsym(handle, name);
  if (s == NULL) HC_INFO(HC_UTIL, "dlsym %s: not found", name);
  return s;
}

int hc_pidfd_open(int pid) {
#ifdef SYS_pidfd_open
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd >= 0) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
  }
  if (errno == ESRCH) return -2;
#else
  (void)pid;
#endif
  return -1;
}

/* Without a pidfd a zombie still answers kill(0), so /proc/<pid>/stat's
 * state is read too. */
bool hc_pid_exited(int pid, int pidfd) {
  if (pidfd == -2) return true;
  if (pidfd >= 0) {
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return true;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return errno == ENOENT;
  size_t k = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[k] = 0;
  const char *rp = strrchr(buf, ')');
  return rp != NULL && (rp[2] == 'Z' || rp[2] == 'X');
}

void hc_copy_nt(void *dst, const void *src, size_t n) {
#ifdef __SSE2__
  uint8_t *d = dst;
  const uint8_t *s = src;
  const size_t head = HC_MIN((size_t)(-(uintptr_t)d & 15), n);
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i_u *)s), b = _mm_loadu_si128((const __m128i_u *)(s + 16));
    __m128i e = _mm_loadu_si128((const __m128i_u *)(s + 32)), f = _mm_loadu_si128((const __m128i_u *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), e);
    _mm_stream_si128((__m128i *)(d + 48), f);
  }
  memcpy(d, s, n);
  _mm_sfence(); /* the streamed stores before whatever publishes them */
#else
  memcpy(dst, src, n);
#endif
}
