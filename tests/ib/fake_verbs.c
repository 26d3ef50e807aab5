/*
 * A fake libibverbs.so.1 for machines without an RDMA device: the part of
 * the verbs API that net/ib loads (src/net/ib_verbs.h, HC_IB_SYMBOLS and
 * ibv_reg_dmabuf_mr), emulating one InfiniBand device between the threads
 * of one process, so that the ib transport and the plans above it run
 * here and in CI, GPU memory included (over the fake libcuda, whose
 * "device memory" is host memory: tests/gpu/fake_cuda.c).
 *
 * Model: one device "fakeib0", one active port (InfiniBand link layer, LID
 * 1, MTU 4096). Queue pairs are reliable-connected in name: a queue pair
 * in RTS executes each RDMA WRITE (WITH IMMEDIATE) at post time, memcpy
 * from the local buffer to the remote address, after checking what a real
 * adapter checks: the local range inside a registration of the lkey (or
 * inline), the remote range inside a registration of the rkey that allows
 * remote writes. Then a completion on the sender's send queue (when
 * signaled) and, for an immediate, one on the receiver's receive queue,
 * which consumes a posted receive (arrivals wait for one: an RNR retry
 * that never gives up, as hetccl asks). Writes to a remote queue pair not
 * ready yet (RESET, INIT) or in error are held, in order, as a real
 * adapter's retries would hold them; one that is destroyed fails them
 * with "transport retry counter exceeded". A bad key fails a write with
 * a protection or "remote access error"; the sender's queue pair then
 * goes to the error state and flushes what follows. Completion channels are
 * pipes: an armed queue that gets a completion writes one event.
 *
 * Memory: ibv_reg_mr of GPU memory fails with EFAULT (no peer-memory
 * module) unless FAKE_VERBS_PEERMEM=1; ibv_reg_dmabuf_mr takes a dma-buf
 * fd of at least offset + length bytes (the fake libcuda exports memfds)
 * and registers the range at iova, unless FAKE_VERBS_DMABUF=0 (EOPNOTSUPP,
 * as soft-RoCE answers). Whether a range is GPU memory, pinned host memory
 * or plain host memory is asked of the libcuda already loaded in the
 * process (cuPointerGetAttributes), when there is one.
 *
 * Log (FAKE_VERBS_LOG=path, appended, one line per event, for tests):
 *   reg key=K addr=0x.. len=N mem=device|pinned|host dmabuf=0|1
 *   dereg key=K
 *   write qp=Q to=Q len=N src=0x.. src_mem=M dst=0x.. dst_mem=M imm=0|1 inline=0|1 nsge=N
 *   (src_mem: the memory of the first gathered piece; nsge=N pieces)
 *   read qp=Q to=Q len=N src=0x.. src_mem=M dst=0x.. dst_mem=M
 *   (an RDMA READ: src is the remote range read, dst the local one)
 * The same figures are kept in counters that a test in the process reads
 * with fake_verbs_bytes(src_mem, dst_mem), each gathered piece counted by
 * its own memory (reads not included), fake_verbs_regs(mem, dmabuf), and
 * fake_verbs_reads(src_mem, loopback): the RDMA READs out of memory of
 * src_mem, on a queue pair connected to itself (loopback = 1, net/ib's
 * GPU flushes) or to another; fake_verbs_reads_unpolled(): completions of
 * reads not yet polled (a caller that reports what a read guards as done
 * before it has seen the read complete leaves one behind).
 *
 * RDMA READ (one local piece, never inline) copies the remote range, which
 * a registration of the rkey must cover with remote read access, into the
 * local piece, which a registration of the lkey must cover with local
 * write access: as an adapter checks. Its completion is queued only at
 * the next poll of its completion queue (that poll does not return it),
 * as a read's round trip takes time where a write's local completion
 * may already be there. Nothing models the GPU's view of memory, so a
 * read flushes nothing here: a test counts them. Reads whose completions
 * are not polled yet take room in their queue pair's send queue: one
 * beyond the max_send_wr it was made with is refused (ENOMEM), as an
 * adapter refuses a post to a full queue; fake_verbs_reads_peak() is the
 * most a queue pair ever had. FAKE_VERBS_READ_FAIL_AFTER=N: the read after
 * the first N of the process completes with "remote operation error" (its
 * queue pair goes into error, as an adapter's would), copying nothing.
 *
 * Limits: ranks must be threads of one process (queue pairs find each
 * other by number in this process); no atomics, sends or shared receive
 * queues (net/ib uses none). One lock serialises every call.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/cuda_api.h"
#include "net/ib_verbs.h"

#define EXPORT __attribute__((visibility("default")))

/* Work completion statuses beyond ib_verbs.h's two. */
enum { WC_LOC_PROT_ERR = 4, WC_REM_ACCESS_ERR = 10, WC_REM_OP_ERR = 11, WC_RETRY_EXC_ERR = 12 };

struct ibv_device {
  char name[64];
};
struct ibv_pd {
  struct ibv_context *context;
};

struct fake_ctx {
  struct ibv_context cx; /* first: hetccl's ops calls go through it */
};

struct fake_mr {
  struct ibv_mr mr;
  struct fake_mr *next;
  int access;
  const char *mem;
  bool dmabuf;
};

struct fake_cq {
  struct ibv_cq cq;
  struct ibv_wc *wc;
  size_t cap, head, count;
  bool armed;
  struct ibv_wc *late; /* completions of reads, queued at the next poll */
  size_t nlate, late_cap;
};

struct arrival { /* a write with immediate waiting for a posted receive */
  uint32_t imm, len, src_qp;
};

#define MAX_SGE 4
/* A posted write (or read), copied out of the caller's work request (inline data
 * too): held while the remote queue pair is not ready to receive yet, as
 * a real adapter retries until it is. */
struct write {
  struct write *next;
  uint64_t wr_id, remote_addr;
  int opcode, nsge;
  unsigned flags;
  uint32_t imm, rkey;
  struct ibv_sge sge[MAX_SGE];
  uint8_t *inline_copy;
};

struct fake_qp {
  struct ibv_qp qp;
  struct fake_qp *next;
  uint32_t dest_qpn;
  uint32_t max_inline;
  uint32_t max_send_sge; /* a work request gathering more pieces is refused, as an adapter refuses it */
  uint32_t max_send_wr;
  uint32_t reads_out; /* reads posted whose completion is not polled yet */
  uint64_t *recvs;    /* posted receives' wr_ids, a FIFO */
  size_t recv_cap, recv_head, nrecv;
  struct arrival *waiting;
  size_t wait_cap, wait_head, nwait;
  struct write *held, *held_tail; /* in post order */
};

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device dev0 = {"fakeib0"};
static struct fake_mr *mrs;
static struct fake_qp *qps;
static uint32_t next_key = 0x100, next_qpn = 0x40;
static FILE *log_file;
static bool log_opened;

/* Counters by memory kind: 0 device, 1 pinned, 2 host. */
static long long bytes_by[3][3], regs_by[3][2], reads_by[3][2], reads_unpolled, reads_peak, reads_started;

static int kind_index(const char *mem) { return !strcmp(mem, "device") ? 0 : !strcmp(mem, "pinned") ? 1 : 2; }

EXPORT long long fake_verbs_bytes(const char *src_mem, const char *dst_mem) {
  pthread_mutex_lock(&big);
  long long n = bytes_by[kind_index(src_mem)][kind_index(dst_mem)];
  pthread_mutex_unlock(&big);
  return n;
}

EXPORT long long fake_verbs_reads(const char *src_mem, int loopback) {
  pthread_mutex_lock(&big);
  long long n = reads_by[kind_index(src_mem)][loopback != 0];
  pthread_mutex_unlock(&big);
  return n;
}

EXPORT long long fake_verbs_reads_unpolled(void) {
  pthread_mutex_lock(&big);
  long long n = reads_unpolled;
  pthread_mutex_unlock(&big);
  return n;
}

EXPORT long long fake_verbs_reads_peak(void) {
  pthread_mutex_lock(&big);
  long long n = reads_peak;
  pthread_mutex_unlock(&big);
  return n;
}

EXPORT long long fake_verbs_regs(const char *mem, int dmabuf) {
  pthread_mutex_lock(&big);
  long long n = regs_by[kind_index(mem)][dmabuf != 0];
  pthread_mutex_unlock(&big);
  return n;
}

static bool env_flag(const char *name, bool dflt) {
  const char *v = getenv(name);
  return v == NULL || v[0] == 0 ? dflt : atoi(v) != 0;
}

/* Under big. */
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  if (!log_opened) {
    const char *path = getenv("FAKE_VERBS_LOG");
    log_file = path && path[0] ? fopen(path, "a") : NULL;
    log_opened = true;
  }
  if (log_file == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(log_file, fmt, ap);
  va_end(ap);
  fputc('\n', log_file);
  fflush(log_file);
}

/* What the loaded libcuda says of p: "device", "pinned" or "host". */
static const char *mem_of(const void *p) {
  static CUresult (*attrs)(unsigned, int *, void **, CUdeviceptr);
  if (attrs == NULL) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) return "host";
    *(void **)&attrs = dlsym(h, "cuPointerGetAttributes");
    dlclose(h); /* still loaded by its first opener */
    if (attrs == NULL) return "host";
  }
  unsigned type = 0;
  int attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void *data = &type;
  if (attrs(1, &attr, &data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return "host";
  return type == CU_MEMORYTYPE_DEVICE ? "device" : type == CU_MEMORYTYPE_HOST ? "pinned" : "host";
}

/* What a registered range holds: its page-rounded ends may lie outside
 * the buffer it was made for, so the middle is asked first. */
static const char *range_mem(const void *addr, size_t len) {
  const char *mid = mem_of((const char *)addr + len / 2);
  if (strcmp(mid, "host") != 0 || len == 0) return mid;
  const char *first = mem_of(addr);
  return strcmp(first, "host") != 0 ? first : mem_of((const char *)addr + len - 1);
}

/* ---- devices ---- */

EXPORT struct ibv_device **ibv_get_device_list(int *n) {
  struct ibv_device **list = calloc(2, sizeof(*list));
  if (list == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  list[0] = &dev0;
  if (n) *n = 1;
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d ? d->name : NULL; }

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d) {
  if (d != &dev0) {
    errno = ENODEV;
    return NULL;
  }
  struct fake_ctx *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->cx.device = d;
  c->cx.ops.poll_cq = fake_poll_cq;
  c->cx.ops.req_notify_cq = fake_req_notify_cq;
  c->cx.ops.post_send = fake_post_send;
  c->cx.ops.post_recv = fake_post_recv;
  c->cx.cmd_fd = c->cx.async_fd = -1;
  c->cx.num_comp_vectors = 1;
  return &c->cx;
}

EXPORT int ibv_close_device(struct ibv_context *cx) {
  free(cx);
  return 0;
}

EXPORT int ibv_query_port(struct ibv_context *cx, uint8_t port, struct ibv_port_attr *a) {
  (void)cx;
  if (port != 1) return EINVAL;
  memset(a, 0, sizeof(*a));
  a->state = HC_IBV_PORT_ACTIVE;
  a->max_mtu = a->active_mtu = HC_IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->lid = 1;
  a->link_layer = HC_IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *cx, uint8_t port, int index, union ibv_gid *gid) {
  (void)cx;
  if (port != 1 || index != 0) return EINVAL;
  memset(gid, 0, sizeof(*gid));
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *cx) {
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (pd) pd->context = cx;
  return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

/* ---- memory ---- */

static struct ibv_mr *mr_add(struct ibv_pd *pd, void *addr, size_t len, int access, const char *mem, bool dmabuf) {
  struct fake_mr *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = m->mr.rkey = next_key++;
  m->access = access;
  m->mem = mem;
  m->dmabuf = dmabuf;
  m->next = mrs;
  mrs = m;
  regs_by[kind_index(mem)][dmabuf]++;
  log_line("reg key=%u addr=%p len=%zu mem=%s dmabuf=%d", m->mr.lkey, addr, len, mem, dmabuf);
  return &m->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  pthread_mutex_lock(&big);
  const char *mem = range_mem(addr, len);
  struct ibv_mr *mr = NULL;
  if (strcmp(mem, "device") == 0 && !env_flag("FAKE_VERBS_PEERMEM", false))
    errno = EFAULT; /* the pages are not the kernel's to pin without a peer-memory module */
  else if (len == 0 || addr == NULL) errno = EINVAL;
  else mr = mr_add(pd, addr, len, access, mem, false);
  pthread_mutex_unlock(&big);
  return mr;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                        int access) {
  struct stat st;
  if (!env_flag("FAKE_VERBS_DMABUF", true)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < offset + len || len == 0) {
    errno = EINVAL;
    return NULL;
  }
  pthread_mutex_lock(&big);
  struct ibv_mr *mr = mr_add(pd, (void *)(uintptr_t)iova, len, access, range_mem((void *)(uintptr_t)iova, len), true);
  pthread_mutex_unlock(&big);
  return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&big);
  int rc = EINVAL;
  for (struct fake_mr **pp = &mrs; *pp; pp = &(*pp)->next)
    if (&(*pp)->mr == mr) {
      struct fake_mr *m = *pp;
      *pp = m->next;
      log_line("dereg key=%u", m->mr.lkey);
      free(m);
      rc = 0;
      break;
    }
  pthread_mutex_unlock(&big);
  return rc;
}

/* The registration of key covering [addr, addr + len), or NULL. Under big. */
static struct fake_mr *mr_covering(uint32_t key, uintptr_t addr, size_t len) {
  for (struct fake_mr *m = mrs; m; m = m->next)
    if (m->mr.lkey == key && addr >= (uintptr_t)m->mr.addr && addr + len <= (uintptr_t)m->mr.addr + m->mr.length)
      return m;
  return NULL;
}

/* ---- completion queues and channels ---- */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *cx) {
  struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
  int fds[2];
  if (ch == NULL) return NULL;
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    free(ch);
    return NULL;
  }
  ch->context = cx;
  ch->fd = fds[0];
  ch->refcnt = fds[1]; /* the write end, kept where hetccl never looks */
  return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
  close(ch->fd);
  close(ch->refcnt);
  free(ch);
  return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context) {
  struct ibv_cq *got = NULL;
  if (read(ch->fd, &got, sizeof(got)) != (ssize_t)sizeof(got)) return -1;
  *cq = got;
  *cq_context = got->cq_context;
  return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned n) {
  (void)cq;
  (void)n;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *cx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                                    int comp_vector) {
  (void)comp_vector;
  struct fake_cq *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->cap = (size_t)(cqe > 0 ? cqe : 1) * 2;
  c->wc = calloc(c->cap, sizeof(*c->wc));
  if (c->wc == NULL) {
    free(c);
    return NULL;
  }
  c->cq.context = cx;
  c->cq.channel = ch;
  c->cq.cq_context = cq_context;
  c->cq.cqe = cqe;
  return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  struct fake_cq *c = (struct fake_cq *)cq;
  pthread_mutex_lock(&big);
  reads_unpolled -= (long long)c->nlate;
  for (size_t i = 0; i < c->count; i++) reads_unpolled -= c->wc[(c->head + i) % c->cap].opcode == HC_IBV_WC_RDMA_READ;
  free(c->late);
  free(c->wc);
  free(c);
  pthread_mutex_unlock(&big);
  return 0;
}

/* Under big. A full queue grows: a real one would overflow into an async
 * error, which net/ib's depths rule out. */
static void cq_push(struct fake_cq *c, const struct ibv_wc *wc) {
  if (c->count == c->cap) {
    struct ibv_wc *w = calloc(c->cap * 2, sizeof(*w));
    if (w == NULL) abort(); /* a test fake out of memory has nothing better to do */
    for (size_t i = 0; i < c->count; i++) w[i] = c->wc[(c->head + i) % c->cap];
    free(c->wc);
    c->wc = w;
    c->head = 0;
    c->cap *= 2;
  }
  c->wc[(c->head + c->count++) % c->cap] = *wc;
  if (c->armed && c->cq.channel != NULL) {
    struct ibv_cq *self = &c->cq;
    c->armed = false;
    if (write(c->cq.channel->refcnt, &self, sizeof(self)) != (ssize_t)sizeof(self)) {
      /* a full pipe holds events enough to wake the reader */
    }
  }
}

/* Under big: a read's completion, queued at the next poll. */
static void cq_push_late(struct fake_cq *c, const struct ibv_wc *wc) {
  if (c->nlate == c->late_cap) {
    c->late_cap = c->late_cap ? c->late_cap * 2 : 16;
    c->late = realloc(c->late, c->late_cap * sizeof(*c->late));
    if (c->late == NULL) abort(); /* a test fake out of memory has nothing better to do */
  }
  c->late[c->nlate++] = *wc;
}

static struct fake_qp *qp_find(uint32_t num);

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  struct fake_cq *c = (struct fake_cq *)cq;
  int k = 0;
  pthread_mutex_lock(&big);
  for (; k < n && c->count > 0; k++) {
    wc[k] = c->wc[c->head];
    if (wc[k].opcode == HC_IBV_WC_RDMA_READ) {
      reads_unpolled--;
      struct fake_qp *q = qp_find(wc[k].qp_num);
      if (q && q->reads_out > 0) q->reads_out--;
    }
    c->head = (c->head + 1) % c->cap;
    c->count--;
  }
  for (size_t i = 0; i < c->nlate; i++) cq_push(c, &c->late[i]);
  c->nlate = 0;
  pthread_mutex_unlock(&big);
  return k;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  (void)solicited_only;
  pthread_mutex_lock(&big);
  ((struct fake_cq *)cq)->armed = true;
  pthread_mutex_unlock(&big);
  return 0;
}

/* ---- queue pairs ---- */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
  if (a->qp_type != HC_IBV_QPT_RC || a->srq != NULL || a->send_cq == NULL || a->recv_cq == NULL) {
    errno = EINVAL;
    return NULL;
  }
  struct fake_qp *q = calloc(1, sizeof(*q));
  if (q == NULL) return NULL;
  q->recv_cap = a->cap.max_recv_wr ? a->cap.max_recv_wr : 1;
  q->recvs = calloc(q->recv_cap, sizeof(*q->recvs));
  if (q->recvs == NULL) {
    free(q);
    return NULL;
  }
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.state = HC_IBV_QPS_RESET;
  q->qp.qp_type = a->qp_type;
  q->max_inline = a->cap.max_inline_data;
  q->max_send_sge = a->cap.max_send_sge;
  q->max_send_wr = a->cap.max_send_wr;
  pthread_mutex_lock(&big);
  q->qp.qp_num = next_qpn++;
  q->next = qps;
  qps = q;
  pthread_mutex_unlock(&big);
  return &q->qp;
}

static void run_held(struct fake_qp *q);

/* Under big. */
static struct fake_qp *qp_find(uint32_t num) {
  for (struct fake_qp *q = qps; q; q = q->next)
    if (q->qp.qp_num == num) return q;
  return NULL;
}

/* Under big: every posted receive completes flushed. */
static void flush_recvs(struct fake_qp *q) {
  while (q->nrecv > 0) {
    struct ibv_wc wc = {.wr_id = q->recvs[q->recv_head],
                        .status = HC_IBV_WC_WR_FLUSH_ERR,
                        .opcode = HC_IBV_WC_RECV_RDMA_WITH_IMM,
                        .qp_num = q->qp.qp_num};
    q->recv_head = (q->recv_head + 1) % q->recv_cap;
    q->nrecv--;
    cq_push((struct fake_cq *)q->qp.recv_cq, &wc);
  }
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct fake_qp *q = (struct fake_qp *)qp;
  pthread_mutex_lock(&big);
  if (mask & HC_IBV_QP_DEST_QPN) q->dest_qpn = a->dest_qp_num;
  if (mask & HC_IBV_QP_STATE) {
    q->qp.state = a->qp_state;
    if (a->qp_state == HC_IBV_QPS_ERR) flush_recvs(q);
    /* Writes held for this queue pair (or by it) can go now. */
    for (struct fake_qp *o = qps; o; o = o->next)
      if (o->held && (o == q || o->dest_qpn == q->qp.qp_num)) run_held(o);
  }
  pthread_mutex_unlock(&big);
  return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  struct fake_qp *q = (struct fake_qp *)qp;
  pthread_mutex_lock(&big);
  for (struct fake_qp **pp = &qps; *pp; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  /* Writes held for it fail now, as retries would. */
  for (struct fake_qp *o = qps; o; o = o->next)
    if (o->held && o->dest_qpn == q->qp.qp_num) run_held(o);
  pthread_mutex_unlock(&big);
  while (q->held) {
    struct write *w = q->held;
    q->held = w->next;
    free(w->inline_copy);
    free(w);
  }
  free(q->recvs);
  free(q->waiting);
  free(q);
  return 0;
}

/* Under big: an arrival on q completes its oldest posted receive. */
static void deliver(struct fake_qp *q, const struct arrival *a) {
  struct ibv_wc wc = {.wr_id = q->recvs[q->recv_head],
                      .status = HC_IBV_WC_SUCCESS,
                      .opcode = HC_IBV_WC_RECV_RDMA_WITH_IMM,
                      .byte_len = a->len,
                      .imm_data = a->imm,
                      .qp_num = q->qp.qp_num,
                      .src_qp = a->src_qp,
                      .wc_flags = HC_IBV_WC_WITH_IMM};
  q->recv_head = (q->recv_head + 1) % q->recv_cap;
  q->nrecv--;
  cq_push((struct fake_cq *)q->qp.recv_cq, &wc);
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct fake_qp *q = (struct fake_qp *)qp;
  int rc = 0;
  pthread_mutex_lock(&big);
  for (; wr; wr = wr->next) {
    if (q->nrecv == q->recv_cap || q->qp.state == HC_IBV_QPS_RESET) {
      rc = q->nrecv == q->recv_cap ? ENOMEM : EINVAL;
      *bad = wr;
      break;
    }
    q->recvs[(q->recv_head + q->nrecv++) % q->recv_cap] = wr->wr_id;
    if (q->qp.state == HC_IBV_QPS_ERR) flush_recvs(q);
    while (q->nwait > 0 && q->nrecv > 0) {
      deliver(q, &q->waiting[q->wait_head]);
      q->wait_head = (q->wait_head + 1) % q->wait_cap;
      q->nwait--;
    }
  }
  pthread_mutex_unlock(&big);
  return rc;
}

/* Under big: one RDMA write of q; the status of its completion. */
static int execute_write(struct fake_qp *q, struct fake_qp *to, const struct write *wr) {
  if (q->qp.state == HC_IBV_QPS_ERR) return HC_IBV_WC_WR_FLUSH_ERR;
  size_t len = 0;
  for (int i = 0; i < wr->nsge; i++) len += wr->sge[i].length;
  const bool inline_data = wr->inline_copy != NULL;
  for (int i = 0; i < wr->nsge && !inline_data; i++)
    if (wr->sge[i].length > 0 && mr_covering(wr->sge[i].lkey, (uintptr_t)wr->sge[i].addr, wr->sge[i].length) == NULL)
      return WC_LOC_PROT_ERR;
  if (to == NULL || to->qp.state == HC_IBV_QPS_ERR) return WC_RETRY_EXC_ERR;
  uintptr_t dst = (uintptr_t)wr->remote_addr;
  struct fake_mr *rm = len > 0 ? mr_covering(wr->rkey, dst, len) : NULL;
  if (len > 0 && (rm == NULL || !(rm->access & HC_IBV_ACCESS_REMOTE_WRITE))) return WC_REM_ACCESS_ERR;
  /* What the bytes themselves are, at either end. */
  uintptr_t src = wr->nsge > 0 ? (uintptr_t)wr->sge[0].addr : 0;
  const char *src_mem = inline_data || len == 0 ? "host" : mem_of((const void *)src);
  const char *dst_mem = len == 0 ? "host" : mem_of((const void *)dst);
  size_t off = 0;
  for (int i = 0; i < wr->nsge; i++) {
    const void *from = inline_data ? (const void *)(wr->inline_copy + off) : (const void *)(uintptr_t)wr->sge[i].addr;
    memmove((char *)dst + off, from, wr->sge[i].length);
    off += wr->sge[i].length;
  }
  bool imm = wr->opcode == HC_IBV_WR_RDMA_WRITE_WITH_IMM;
  /* Counted by the memory of each gathered piece: a write of a signature
   * in host memory and a payload in GPU memory counts each where it came
   * from. */
  for (int i = 0; i < wr->nsge && !inline_data && len > 0; i++)
    bytes_by[kind_index(mem_of((const void *)(uintptr_t)wr->sge[i].addr))][kind_index(dst_mem)] +=
        (long long)wr->sge[i].length;
  if (inline_data || len == 0) bytes_by[kind_index(src_mem)][kind_index(dst_mem)] += (long long)len;
  log_line("write qp=%u to=%u len=%zu src=%p src_mem=%s dst=%p dst_mem=%s imm=%d inline=%d nsge=%d", q->qp.qp_num,
           to->qp.qp_num, len, (void *)src, src_mem, (void *)dst, dst_mem, imm, inline_data, wr->nsge);
  if (imm) {
    struct arrival a = {.imm = wr->imm, .len = (uint32_t)len, .src_qp = q->qp.qp_num};
    if (to->nrecv > 0) {
      deliver(to, &a);
    } else { /* receiver not ready: held until a receive is posted */
      if (to->nwait == to->wait_cap) {
        size_t cap = to->wait_cap ? to->wait_cap * 2 : 64;
        struct arrival *w = calloc(cap, sizeof(*w));
        if (w == NULL) abort();
        for (size_t i = 0; i < to->nwait; i++) w[i] = to->waiting[(to->wait_head + i) % to->wait_cap];
        free(to->waiting);
        to->waiting = w;
        to->wait_head = 0;
        to->wait_cap = cap;
      }
      to->waiting[(to->wait_head + to->nwait++) % to->wait_cap] = a;
    }
  }
  return HC_IBV_WC_SUCCESS;
}

/* Under big: one RDMA read of q (one local piece); the status of its
 * completion. */
static int execute_read(struct fake_qp *q, struct fake_qp *to, const struct write *wr) {
  if (q->qp.state == HC_IBV_QPS_ERR) return HC_IBV_WC_WR_FLUSH_ERR;
  static long long fail_after = -2; /* -2: not read yet, -1: never */
  if (fail_after == -2) {
    const char *v = getenv("FAKE_VERBS_READ_FAIL_AFTER");
    fail_after = v && v[0] ? atoll(v) : -1;
  }
  if (fail_after >= 0 && reads_started++ == fail_after) {
    log_line("read qp=%u failed (FAKE_VERBS_READ_FAIL_AFTER=%lld)", q->qp.qp_num, fail_after);
    return WC_REM_OP_ERR;
  }
  const struct ibv_sge *local = &wr->sge[0];
  const struct fake_mr *lm = mr_covering(local->lkey, (uintptr_t)local->addr, local->length);
  if (wr->nsge != 1 || lm == NULL || !(lm->access & HC_IBV_ACCESS_LOCAL_WRITE)) return WC_LOC_PROT_ERR;
  if (to == NULL || to->qp.state == HC_IBV_QPS_ERR) return WC_RETRY_EXC_ERR;
  const struct fake_mr *rm = mr_covering(wr->rkey, (uintptr_t)wr->remote_addr, local->length);
  if (rm == NULL || !(rm->access & HC_IBV_ACCESS_REMOTE_READ)) return WC_REM_ACCESS_ERR;
  const void *src = (const void *)(uintptr_t)wr->remote_addr;
  void *dst = (void *)(uintptr_t)local->addr;
  const char *src_mem = mem_of(src), *dst_mem = mem_of(dst);
  memmove(dst, src, local->length);
  reads_by[kind_index(src_mem)][to == q]++;
  log_line("read qp=%u to=%u len=%u src=%p src_mem=%s dst=%p dst_mem=%s", q->qp.qp_num, to->qp.qp_num, local->length,
           src, src_mem, dst, dst_mem);
  return HC_IBV_WC_SUCCESS;
}

/* Under big: runs q's held writes in order while its remote queue pair
 * can take them: it left RESET and INIT, and is not in error (a real
 * adapter retries into one in error until its retry count runs out, by
 * when the peer has closed it: here, until it is destroyed, when the
 * write fails). */
static void run_held(struct fake_qp *q) {
  while (q->held) {
    struct fake_qp *to = qp_find(q->dest_qpn);
    if (to != NULL && (to->qp.state == HC_IBV_QPS_ERR || to->qp.state < HC_IBV_QPS_RTR) &&
        q->qp.state != HC_IBV_QPS_ERR)
      return;
    struct write *w = q->held;
    q->held = w->next;
    if (q->held == NULL) q->held_tail = NULL;
    const bool read = w->opcode == HC_IBV_WR_RDMA_READ;
    int status = read ? execute_read(q, to, w) : execute_write(q, to, w);
    if (status != HC_IBV_WC_SUCCESS) q->qp.state = HC_IBV_QPS_ERR;
    if (status != HC_IBV_WC_SUCCESS || (w->flags & HC_IBV_SEND_SIGNALED)) {
      struct ibv_wc wc = {.wr_id = w->wr_id,
                          .status = status,
                          .opcode = read ? HC_IBV_WC_RDMA_READ : HC_IBV_WC_RDMA_WRITE,
                          .qp_num = q->qp.qp_num};
      reads_unpolled += read;
      if (read && status == HC_IBV_WC_SUCCESS) cq_push_late((struct fake_cq *)q->qp.send_cq, &wc);
      else cq_push((struct fake_cq *)q->qp.send_cq, &wc);
    } else if (read) {
      q->reads_out--; /* no completion will free its room */
    }
    free(w->inline_copy);
    free(w);
  }
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct fake_qp *q = (struct fake_qp *)qp;
  int rc = 0;
  pthread_mutex_lock(&big);
  for (; wr; wr = wr->next) {
    if ((q->qp.state != HC_IBV_QPS_RTS && q->qp.state != HC_IBV_QPS_ERR) || wr->num_sge > MAX_SGE ||
        (uint32_t)wr->num_sge > q->max_send_sge ||
        (wr->opcode != HC_IBV_WR_RDMA_WRITE && wr->opcode != HC_IBV_WR_RDMA_WRITE_WITH_IMM &&
         wr->opcode != HC_IBV_WR_RDMA_READ) ||
        (wr->opcode == HC_IBV_WR_RDMA_READ && (wr->send_flags & HC_IBV_SEND_INLINE))) {
      rc = EINVAL;
      *bad = wr;
      break;
    }
    if (wr->opcode == HC_IBV_WR_RDMA_READ && q->reads_out >= q->max_send_wr) {
      rc = ENOMEM;
      *bad = wr;
      break;
    }
    struct write *w = calloc(1, sizeof(*w));
    size_t len = 0;
    for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
    if (w == NULL || ((wr->send_flags & HC_IBV_SEND_INLINE) &&
                      (len > q->max_inline || (w->inline_copy = malloc(len + 1)) == NULL))) {
      free(w);
      rc = w == NULL ? ENOMEM : EINVAL;
      *bad = wr;
      break;
    }
    *w = (struct write){.wr_id = wr->wr_id,
                        .remote_addr = wr->wr.rdma.remote_addr,
                        .opcode = wr->opcode,
                        .nsge = wr->num_sge,
                        .flags = wr->send_flags,
                        .imm = wr->imm_data,
                        .rkey = wr->wr.rdma.rkey,
                        .inline_copy = w->inline_copy};
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      w->sge[i] = wr->sg_list[i];
      if (w->inline_copy) memcpy(w->inline_copy + off, (const void *)(uintptr_t)wr->sg_list[i].addr, w->sge[i].length);
      off += w->sge[i].length;
    }
    if (w->opcode == HC_IBV_WR_RDMA_READ) {
      q->reads_out++;
      if (q->reads_out > reads_peak) reads_peak = q->reads_out;
    }
    if (q->held_tail) q->held_tail->next = w;
    else q->held = w;
    q->held_tail = w;
    run_held(q);
  }
  pthread_mutex_unlock(&big);
  return rc;
}

EXPORT const char *ibv_wc_status_str(int status) {
  switch (status) {
  case HC_IBV_WC_SUCCESS: return "success";
  case WC_LOC_PROT_ERR: return "local protection error";
  case HC_IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
  case WC_REM_ACCESS_ERR: return "remote access error";
  case WC_REM_OP_ERR: return "remote operation error";
  case WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
  default: return "unknown";
  }
}
