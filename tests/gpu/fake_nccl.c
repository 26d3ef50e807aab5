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
 * reduce-scatter with SUM, PROD, MAX, MIN, and sends and receives, grouped
 * (ncclGroupStart .. ncclGroupEnd: one host function per group, on the
 * stream of its calls) or alone. A send leaves a copy of its bytes in the
 * comm's mailbox when it runs; a receive waits for the oldest message from
 * its peer, which must have its size. PreMulSum ops answer
 * ncclInvalidUsage (a pass-through comm would need them).
 * fake_nccl_calls() tells a test how many collectives and groups of sends
 * and receives ran, fake_nccl_calls_of(name) how many of one kind
 * ("AllReduce", ..., "SendRecv"), fake_nccl_p2p_bytes() how many bytes
 * the sends moved.
 *
 * Nonblocking init (ncclCommInitRankConfig with config.blocking = 0), as
 * hetccl creates its sub-comms: the comm's async error reads
 * ncclInProgress until every rank of the comm has joined it in this
 * process; ranks in other processes never do, which stands for a peer
 * that never arrives. FAKE_NCCL_INIT_KILL_RANK=r: rank r's process dies
 * by SIGKILL in its init (a peer killed while the others wait there).
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
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"

#define EXPORT __attribute__((visibility("default")))
enum {
  NCCL_SUCCESS = 0,
  NCCL_SYSTEM_ERROR = 2,
  NCCL_INTERNAL_ERROR = 3,
  NCCL_INVALID_ARGUMENT = 4,
  NCCL_INVALID_USAGE = 5,
  NCCL_IN_PROGRESS = 7
};
enum { MAX_RANKS = 64, ID_BYTES = 128, MEET_TIMEOUT_S = 120 };
enum coll { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, SENDRECV, NCOLL };
static const char *const coll_name[NCOLL] = {"AllReduce", "Broadcast",     "Reduce",
                                             "AllGather", "ReduceScatter", "SendRecv"};

/* A message a send left for its receiver. */
struct msg {
  int from, to;
  size_t bytes;
  struct msg *next;
  char data[];
};

struct shared {
  char id[ID_BYTES];
  int nranks, members;
  int joined; /* ranks that ever joined (members less those gone) */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int arrived;
  unsigned generation;
  bool failed;
  const void *in[MAX_RANKS];
  struct msg *mail; /* oldest first */
  struct shared *next;
};

struct fcomm {
  uint64_t magic; /* NCCL's startMagic, first in every ncclComm */
  struct shared *sh;
  int rank;
  atomic_bool nonblocking; /* in progress until every rank has joined sh */
};

/* One send (send set) or receive of a group, in bytes. */
struct p2p {
  const void *send;
  void *recv;
  size_t bytes;
  int peer;
};

struct op {
  struct fcomm *comm;
  enum coll coll;
  const void *send;
  void *recv;
  size_t count;
  int dtype, redop, root;
  int np2p; /* SENDRECV: its sends and receives */
  struct p2p *p2p;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared *registry;
static atomic_long calls, ids_made, calls_of[NCOLL], p2p_bytes;

EXPORT long fake_nccl_calls(void) { return atomic_load(&calls); }
EXPORT long fake_nccl_calls_of(const char *name) {
  for (int c = 0; c < NCOLL; c++)
    if (strcmp(name, coll_name[c]) == 0) return atomic_load(&calls_of[c]);
  return -1;
}
EXPORT long fake_nccl_p2p_bytes(void) { return atomic_load(&p2p_bytes); }

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
    hc_host_reduce(&(struct hc_reduce_args){.dst = dst,
                                            .src0 = dst,
                                            .src1 = (const char *)sh->in[k] + skip * es,
                                            .count = count,
                                            .dtype = (enum hc_dtype)dtype,
                                            .op = (enum hc_redop)redop});
}

/* A group of sends and receives: every send leaves its message first, then
 * each receive takes the oldest one from its peer (waiting for it). */
static void run_p2p(struct op *o) {
  struct shared *sh = o->comm->sh;
  const int me = o->comm->rank;
  pthread_mutex_lock(&sh->lock);
  for (int k = 0; k < o->np2p; k++) {
    const struct p2p *q = &o->p2p[k];
    if (q->send == NULL) continue;
    struct msg *m = malloc(sizeof(*m) + q->bytes);
    if (m == NULL) {
      fprintf(stderr, "fake nccl: out of memory\n");
      abort();
    }
    *m = (struct msg){.from = me, .to = q->peer, .bytes = q->bytes};
    memcpy(m->data, q->send, q->bytes);
    struct msg **at = &sh->mail;
    while (*at) at = &(*at)->next;
    *at = m;
    atomic_fetch_add(&p2p_bytes, (long)q->bytes);
  }
  pthread_cond_broadcast(&sh->cond);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += MEET_TIMEOUT_S;
  for (int k = 0; k < o->np2p && !sh->failed; k++) {
    const struct p2p *q = &o->p2p[k];
    if (q->send != NULL) continue;
    for (;;) {
      struct msg **at = &sh->mail;
      while (*at && !((*at)->from == q->peer && (*at)->to == me)) at = &(*at)->next;
      if (*at) {
        struct msg *m = *at;
        if (m->bytes != q->bytes) {
          fprintf(stderr, "fake nccl: rank %d receives %zu bytes from %d, which sent %zu\n", me, q->bytes, q->peer,
                  m->bytes);
          sh->failed = true;
        } else {
          memcpy(q->recv, m->data, m->bytes);
        }
        *at = m->next;
        free(m);
        break;
      }
      if (sh->failed || pthread_cond_timedwait(&sh->cond, &sh->lock, &until) == ETIMEDOUT) {
        if (!sh->failed) fprintf(stderr, "fake nccl: rank %d never got a message from %d\n", me, q->peer);
        sh->failed = true;
        pthread_cond_broadcast(&sh->cond);
        break;
      }
    }
  }
  pthread_mutex_unlock(&sh->lock);
  free(o->p2p);
  free(o);
}

static void run(void *arg) {
  struct op *o = arg;
  if (o->coll == SENDRECV) {
    run_p2p(o);
    return;
  }
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
    default: break; /* SENDRECV: run_p2p */
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
  atomic_fetch_add(&calls_of[o.coll], 1);
  if (launch(stream, run, copy) != 0) {
    free(copy);
    return NCCL_INTERNAL_ERROR;
  }
  return NCCL_SUCCESS;
}

/* This thread's open group of sends and receives (ncclGroupStart nests). */
static _Thread_local struct {
  int depth;
  struct op op; /* SENDRECV, its comm, and p2p */
  void *stream;
  int cap;
  bool bad; /* calls of several comms or streams: not modelled */
} group;

static int group_launch(void) {
  struct op o = group.op;
  void *stream = group.stream;
  const bool bad = group.bad;
  group.op = (struct op){0};
  group.cap = 0;
  group.bad = false;
  if (o.np2p == 0) return NCCL_SUCCESS;
  if (bad) {
    free(o.p2p);
    return NCCL_INVALID_USAGE;
  }
  int r = enqueue(o, stream);
  if (r != NCCL_SUCCESS) free(o.p2p);
  return r;
}

static int p2p_add(struct p2p q, int dtype, struct fcomm *c, void *stream) {
  if (c == NULL || dtype < 0 || dtype >= HC_DTYPE_COUNT || q.peer < 0 || q.peer >= c->sh->nranks)
    return NCCL_INVALID_ARGUMENT;
  q.bytes *= hc_dtype_size((enum hc_dtype)dtype);
  if (group.op.np2p == 0) {
    group.op = (struct op){.comm = c, .coll = SENDRECV};
    group.stream = stream;
  } else if (group.op.comm != c || group.stream != stream) {
    group.bad = true;
  }
  if (group.op.np2p == group.cap) {
    int cap = group.cap ? 2 * group.cap : 8;
    struct p2p *grown = realloc(group.op.p2p, (size_t)cap * sizeof(*grown));
    if (grown == NULL) return NCCL_SYSTEM_ERROR;
    group.op.p2p = grown;
    group.cap = cap;
  }
  group.op.p2p[group.op.np2p++] = q;
  return group.depth ? NCCL_SUCCESS : group_launch();
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

static int init_rank(struct fcomm **out, int nranks, struct unique_id id, int rank) {
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return NCCL_INVALID_ARGUMENT;
  const char *kill_rank = getenv("FAKE_NCCL_INIT_KILL_RANK");
  if (kill_rank && *kill_rank && atoi(kill_rank) == rank) raise(SIGKILL);
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
    sh->joined++;
    *c = (struct fcomm){.magic = 0x0280028002800280ull, .sh = sh, .rank = rank};
  }
  pthread_mutex_unlock(&registry_lock);
  *out = c;
  return c ? NCCL_SUCCESS : NCCL_SYSTEM_ERROR;
}

EXPORT int ncclCommInitRank(struct fcomm **out, int nranks, struct unique_id id, int rank) {
  return init_rank(out, nranks, id, rank);
}

/* ncclConfig_t's head, as every NCCL since 2.14 has it. */
struct config_head {
  size_t size;
  unsigned int magic, version;
  int blocking;
};

EXPORT int ncclCommInitRankConfig(struct fcomm **out, int nranks, struct unique_id id, int rank,
                                  struct config_head *config) {
  if (config && (config->magic != 0xcafebeefu || config->size < sizeof(*config))) return NCCL_INVALID_ARGUMENT;
  int r = init_rank(out, nranks, id, rank);
  if (r != NCCL_SUCCESS || config == NULL || config->blocking != 0) return r;
  atomic_store(&(*out)->nonblocking, true);
  return NCCL_IN_PROGRESS;
}

EXPORT int ncclCommDestroy(struct fcomm *c) {
  if (c == NULL) return NCCL_SUCCESS;
  pthread_mutex_lock(&registry_lock);
  if (--c->sh->members == 0) {
    struct shared **at = &registry;
    while (*at != c->sh) at = &(*at)->next;
    *at = c->sh->next;
    while (c->sh->mail) { /* sends nobody received */
      struct msg *m = c->sh->mail;
      c->sh->mail = m->next;
      free(m);
    }
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
  if (*err == NCCL_SUCCESS && c && atomic_load(&c->nonblocking)) {
    pthread_mutex_lock(&registry_lock);
    if (c->sh->joined < c->sh->nranks) *err = NCCL_IN_PROGRESS;
    else atomic_store(&c->nonblocking, false); /* up: stays up */
    pthread_mutex_unlock(&registry_lock);
  }
  return NCCL_SUCCESS;
}
EXPORT const char *ncclGetErrorString(int r) { return r == NCCL_SUCCESS ? "no error" : "fake nccl error"; }
EXPORT const char *ncclGetLastError(struct fcomm *c) {
  (void)c;
  return "";
}

EXPORT int ncclAllReduce(const void *s, void *r, size_t count, int dtype, int op, struct fcomm *c, void *stream) {
  return enqueue(
      (struct op){.comm = c, .coll = ALLREDUCE, .send = s, .recv = r, .count = count, .dtype = dtype, .redop = op},
      stream);
}
EXPORT int ncclBroadcast(const void *s, void *r, size_t count, int dtype, int root, struct fcomm *c, void *stream) {
  return enqueue(
      (struct op){.comm = c, .coll = BROADCAST, .send = s, .recv = r, .count = count, .dtype = dtype, .root = root},
      stream);
}
EXPORT int ncclReduce(const void *s, void *r, size_t count, int dtype, int op, int root, struct fcomm *c,
                      void *stream) {
  return enqueue(
      (struct op){
          .comm = c, .coll = REDUCE, .send = s, .recv = r, .count = count, .dtype = dtype, .redop = op, .root = root},
      stream);
}
EXPORT int ncclAllGather(const void *s, void *r, size_t count, int dtype, struct fcomm *c, void *stream) {
  return enqueue((struct op){.comm = c, .coll = ALLGATHER, .send = s, .recv = r, .count = count, .dtype = dtype},
                 stream);
}
EXPORT int ncclReduceScatter(const void *s, void *r, size_t count, int dtype, int op, struct fcomm *c, void *stream) {
  return enqueue(
      (struct op){.comm = c, .coll = REDUCESCATTER, .send = s, .recv = r, .count = count, .dtype = dtype, .redop = op},
      stream);
}

EXPORT int ncclSend(const void *s, size_t count, int dtype, int peer, struct fcomm *c, void *stream) {
  return p2p_add((struct p2p){.send = s, .bytes = count, .peer = peer}, dtype, c, stream);
}
EXPORT int ncclRecv(void *r, size_t count, int dtype, int peer, struct fcomm *c, void *stream) {
  return p2p_add((struct p2p){.recv = r, .bytes = count, .peer = peer}, dtype, c, stream);
}
EXPORT int ncclGroupStart(void) {
  group.depth++;
  return NCCL_SUCCESS;
}
EXPORT int ncclGroupEnd(void) {
  if (group.depth == 0) return NCCL_INVALID_USAGE;
  return --group.depth ? NCCL_SUCCESS : group_launch();
}
EXPORT int ncclRedOpCreatePreMulSum(int *op, void *scalar, int dtype, int residence, struct fcomm *c) {
  (void)op, (void)scalar, (void)dtype, (void)residence, (void)c;
  return NCCL_INVALID_USAGE;
}
EXPORT int ncclRedOpDestroy(int op, struct fcomm *c) {
  (void)op, (void)c;
  return NCCL_INVALID_USAGE;
}
