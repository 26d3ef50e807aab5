/*
 * A fake libnccl.so.2 for machines with one GPU or none: enough of NCCL
 * that hetccl's groups run their VENDOR steps (plan/hier.c) on it, over
 * the fake libcuda.so.1, with the ranks as threads of one process.
 *
 * Model: a communicator is shared by the ranks that named the same unique
 * id. A collective is a host function on the caller's stream (so it runs in
 * stream order, as NCCL's kernels do); on each rank it copies its input
 * aside, meets the other ranks, computes its own output from everyone's
 * copies (hetccl's host reductions, the same bits as its kernels), and
 * meets them again before its copy is freed. "Device memory" is host
 * memory in the fake driver, so plain copies reach it.
 *
 * What hetccl's group steps use: all-reduce, broadcast, reduce, all-gather,
 * reduce-scatter with SUM, PROD, MAX, MIN. Send, receive and PreMulSum ops
 * answer ncclInvalidUsage (a pass-through comm would need them).
 * fake_nccl_calls() tells a test how many collectives ran.
 *
 * Like NCCL, it calls its own exported names through its PLT (NCCL's
 * ncclBcast calls ncclBroadcast, its init ncclGetVersion), and a comm
 * starts with NCCL's magic word; fake_nccl_call_own() makes two such calls
 * and says where they were bound (tests/gpu/test_vendor_bindings.c). Its
 * version, 2.28.7, is not the one hetccl reports, so that a caller can
 * tell whose answer it got.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"

#define EXPORT __attribute__((visibility("default")))
enum { NCCL_SUCCESS = 0, NCCL_SYSTEM_ERROR = 2, NCCL_INTERNAL_ERROR = 3, NCCL_INVALID_ARGUMENT = 4,
       NCCL_INVALID_USAGE = 5 };
enum { MAX_RANKS = 64, ID_BYTES = 128, MEET_TIMEOUT_S = 120 };
enum coll { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER };

struct shared {
  char id[ID_BYTES];
  int nranks, members;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int arrived;
  unsigned generation;
  bool failed;
  const void *in[MAX_RANKS];
  struct shared *next;
};

struct fcomm {
  uint64_t magic; /* NCCL's startMagic, first in every ncclComm */
  struct shared *sh;
  int rank;
};

struct op {
  struct fcomm *comm;
  enum coll coll;
  const void *send;
  void *recv;
  size_t count;
  int dtype, redop, root;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared *registry;
static atomic_long calls, ids_made;

EXPORT long fake_nccl_calls(void) { return atomic_load(&calls); }

/* Every rank of sh gets here before any leaves; false when one never came. */
static bool meet(struct shared *sh) {
  pthread_mutex_lock(&sh->lock);
  const unsigned generation = sh->generation;
  if (++sh->arrived == sh->nranks) {
    sh->arrived = 0;
    sh->generation++;
    pthread_cond_broadcast(&sh->cond);
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += MEET_TIMEOUT_S;
  while (generation == sh->generation && !sh->failed)
    if (pthread_cond_timedwait(&sh->cond, &sh->lock, &until) == ETIMEDOUT) {
      fprintf(stderr, "fake nccl: a rank of comm %s never came to a collective\n", sh->id);
      sh->failed = true;
      pthread_cond_broadcast(&sh->cond);
    }
  bool ok = !sh->failed;
  pthread_mutex_unlock(&sh->lock);
  return ok;
}

/* dst[0..count) = the reduction of the count elements at in[0..n) + skip. */
static void reduce_all(struct shared *sh, void *dst, size_t skip, size_t count, int dtype, int redop) {
  const size_t es = hc_dtype_size((enum hc_dtype)dtype);
  memcpy(dst, (const char *)sh->in[0] + skip * es, count * es);
  for (int k = 1; k < sh->nranks; k++)
    hc_host_reduce(&(struct hc_reduce_args){.dst = dst, .src0 = dst, .src1 = (const char *)sh->in[k] + skip * es,
                                            .count = count, .dtype = (enum hc_dtype)dtype,
                                            .op = (enum hc_redop)redop});
}

static void run(void *arg) {
  struct op *o = arg;
  struct shared *sh = o->comm->sh;
  const int me = o->comm->rank, n = sh->nranks;
  const size_t es = hc_dtype_size((enum hc_dtype)o->dtype), bytes = o->count * es;
  size_t in_bytes = bytes;
  if (o->coll == REDUCESCATTER) in_bytes = bytes * (size_t)n;
  if (o->coll == BROADCAST && me != o->root) in_bytes = 0;
  void *copy = malloc(in_bytes ? in_bytes : 1);
  if (copy == NULL) {
    fprintf(stderr, "fake nccl: out of memory\n");
    abort();
  }
  if (in_bytes) memcpy(copy, o->send, in_bytes);
  sh->in[me] = copy;
  if (meet(sh)) {
    switch (o->coll) {
    case ALLREDUCE: reduce_all(sh, o->recv, 0, o->count, o->dtype, o->redop); break;
    case REDUCE:
      if (me == o->root) reduce_all(sh, o->recv, 0, o->count, o->dtype, o->redop);
      break;
    case REDUCESCATTER: reduce_all(sh, o->recv, (size_t)me * o->count, o->count, o->dtype, o->redop); break;
    case BROADCAST: memcpy(o->recv, sh->in[o->root], bytes); break;
    case ALLGATHER:
      for (int k = 0; k < n; k++) memcpy((char *)o->recv + (size_t)k * bytes, sh->in[k], bytes);
      break;
    }
    meet(sh);
  }
  free(copy);
  free(o);
}

typedef int (*launch_host_fn)(void *stream, void (*fn)(void *), void *arg);
static launch_host_fn launch; /* the fake driver's cuLaunchHostFunc */
static pthread_once_t launch_once = PTHREAD_ONCE_INIT;

static void find_launch(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda) *(void **)&launch = dlsym(cuda, "cuLaunchHostFunc");
}

static int enqueue(struct op o, void *stream) {
  pthread_once(&launch_once, find_launch);
  if (launch == NULL) return NCCL_SYSTEM_ERROR;
  if (o.comm == NULL || o.redop < 0 || o.redop > 3 || o.dtype < 0 || o.dtype >= HC_DTYPE_COUNT)
    return NCCL_INVALID_ARGUMENT;
  struct op *copy = malloc(sizeof(*copy));
  if (copy == NULL) return NCCL_SYSTEM_ERROR;
  *copy = o;
  atomic_fetch_add(&calls, 1);
  if (launch(stream, run, copy) != 0) {
    free(copy);
    return NCCL_INTERNAL_ERROR;
  }
  return NCCL_SUCCESS;
}

EXPORT int ncclGetVersion(int *version) {
  *version = 22807;
  return NCCL_SUCCESS;
}

EXPORT int ncclGetUniqueId(char *id) {
  memset(id, 0, ID_BYTES);
  snprintf(id, ID_BYTES, "fake-nccl-%d-%ld", (int)getpid(), atomic_fetch_add(&ids_made, 1));
  return NCCL_SUCCESS;
}

/* ncclUniqueId is passed by value: 128 bytes. */
struct unique_id {
  char internal[ID_BYTES];
};

EXPORT int ncclCommInitRank(struct fcomm **out, int nranks, struct unique_id id, int rank) {
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return NCCL_INVALID_ARGUMENT;
  pthread_mutex_lock(&registry_lock);
  struct shared *sh = registry;
  while (sh && memcmp(sh->id, id.internal, ID_BYTES) != 0) sh = sh->next;
  if (sh == NULL && (sh = calloc(1, sizeof(*sh))) != NULL) {
    memcpy(sh->id, id.internal, ID_BYTES);
    sh->nranks = nranks;
    pthread_mutex_init(&sh->lock, NULL);
    pthread_cond_init(&sh->cond, NULL);
    sh->next = registry;
    registry = sh;
  }
  struct fcomm *c = sh ? calloc(1, sizeof(*c)) : NULL;
  if (c) {
    sh->members++;
    *c = (struct fcomm){.magic = 0x0280028002800280ull, .sh = sh, .rank = rank};
  }
  pthread_mutex_unlock(&registry_lock);
  *out = c;
  return c ? NCCL_SUCCESS : NCCL_SYSTEM_ERROR;
}

EXPORT int ncclCommDestroy(struct fcomm *c) {
  if (c == NULL) return NCCL_SUCCESS;
  pthread_mutex_lock(&registry_lock);
  if (--c->sh->members == 0) {
    struct shared **at = &registry;
    while (*at != c->sh) at = &(*at)->next;
    *at = c->sh->next;
    pthread_mutex_destroy(&c->sh->lock);
    pthread_cond_destroy(&c->sh->cond);
    free(c->sh);
  }
  pthread_mutex_unlock(&registry_lock);
  free(c);
  return NCCL_SUCCESS;
}
EXPORT int ncclCommAbort(struct fcomm *c) { return ncclCommDestroy(c); }
EXPORT int ncclCommCount(const struct fcomm *c, int *count) {
  *count = c->sh->nranks;
  return NCCL_SUCCESS;
}

/* Calls ncclGetVersion and ncclCommCount(c) as NCCL calls its own names:
 * through this library's PLT, which the loader bound with this library's
 * lookup scope. *version_fn and *count_fn: what those names were bound to
 * (their GOT entries, resolved the same way). */
EXPORT int fake_nccl_call_own(const struct fcomm *c, int *version, int *count, void **version_fn, void **count_fn) {
  *version_fn = (void *)&ncclGetVersion;
  *count_fn = (void *)&ncclCommCount;
  int r = ncclGetVersion(version);
  return r != NCCL_SUCCESS ? r : ncclCommCount(c, count);
}
EXPORT int ncclCommGetAsyncError(struct fcomm *c, int *err) {
  *err = c && c->sh->failed ? NCCL_SYSTEM_ERROR : NCCL_SUCCESS;
  return NCCL_SUCCESS;
}
EXPORT const char *ncclGetErrorString(int r) { return r == NCCL_SUCCESS ? "no error" : "fake nccl error"; }
EXPORT const char *ncclGetLastError(struct fcomm *c) {
  (void)c;
  return "";
}

EXPORT int ncclAllReduce(const void *s, void *r, size_t count, int dtype, int op, struct fcomm *c, void *stream) {
  return enqueue((struct op){.comm = c, .coll = ALLREDUCE, .send = s, .recv = r, .count = count, .dtype = dtype,
                             .redop = op}, stream);
}
EXPORT int ncclBroadcast(const void *s, void *r, size_t count, int dtype, int root, struct fcomm *c, void *stream) {
  return enqueue((struct op){.comm = c, .coll = BROADCAST, .send = s, .recv = r, .count = count, .dtype = dtype,
                             .root = root}, stream);
}
EXPORT int ncclReduce(const void *s, void *r, size_t count, int dtype, int op, int root, struct fcomm *c,
                      void *stream) {
  return enqueue((struct op){.comm = c, .coll = REDUCE, .send = s, .recv = r, .count = count, .dtype = dtype,
                             .redop = op, .root = root}, stream);
}
EXPORT int ncclAllGather(const void *s, void *r, size_t count, int dtype, struct fcomm *c, void *stream) {
  return enqueue((struct op){.comm = c, .coll = ALLGATHER, .send = s, .recv = r, .count = count, .dtype = dtype},
                 stream);
}
EXPORT int ncclReduceScatter(const void *s, void *r, size_t count, int dtype, int op, struct fcomm *c,
                             void *stream) {
  return enqueue((struct op){.comm = c, .coll = REDUCESCATTER, .send = s, .recv = r, .count = count,
                             .dtype = dtype, .redop = op}, stream);
}

EXPORT int ncclSend(const void *s, size_t count, int dtype, int peer, struct fcomm *c, void *stream) {
  (void)s, (void)count, (void)dtype, (void)peer, (void)c, (void)stream;
  return NCCL_INVALID_USAGE;
}
EXPORT int ncclRecv(void *r, size_t count, int dtype, int peer, struct fcomm *c, void *stream) {
  (void)r, (void)count, (void)dtype, (void)peer, (void)c, (void)stream;
  return NCCL_INVALID_USAGE;
}
EXPORT int ncclGroupStart(void) { return NCCL_SUCCESS; }
EXPORT int ncclGroupEnd(void) { return NCCL_SUCCESS; }
EXPORT int ncclRedOpCreatePreMulSum(int *op, void *scalar, int dtype, int residence, struct fcomm *c) {
  (void)op, (void)scalar, (void)dtype, (void)residence, (void)c;
  return NCCL_INVALID_USAGE;
}
EXPORT int ncclRedOpDestroy(int op, struct fcomm *c) {
  (void)op, (void)c;
  return NCCL_INVALID_USAGE;
}
