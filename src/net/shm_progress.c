/*
 * net/shm: the data path. Owns the request FIFOs of a connection and moves
 * messages through the channel of each direction: descriptors with inline
 * payloads, pipelined parts through slots, and pulls (CMA, registered
 * buffers). Never sleeps; every loop stops when the ring it needs is full
 * or empty, or when a pass has copied pass_bytes in that direction (so that
 * the caller's reductions and other peers get their turn; see shm.c).
 *
 * Ordering: a channel has one writer per counter. The sender fills a
 * descriptor and then stores its posted word (a slot: then slot_head); the
 * receiver loads it, reads, and stores tail (slot_tail), after which the
 * sender may reuse the entry. The receiver polls the posted word of the
 * descriptor it expects, not a counter beside the ring: the word shares
 * the line of the header and of an inline payload's first 32 bytes, so an
 * 8-byte message crosses between the cores in one line (with a head
 * counter it took two dependent fetches, the counter then the
 * descriptor). Descriptors are consumed in order, one message at a time,
 * so matching is FIFO per direction. A publishing store must not pass the
 * publisher's load of the peer's waiting flag that follows it (shm.c,
 * hc_net_shm_notify), or a wakeup is lost: either the sleeper's membarrier
 * orders the two (light_publish: a release store) or the store is seq_cst
 * (publish()).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_priv.h"

static struct hc_shm_desc *desc_at(uint8_t *ring, const struct hc_shm_conn *c, uint64_t i) {
  return (struct hc_shm_desc *)(ring + (i % c->ndesc) * c->desc_stride);
}

static uint8_t *slot_at(uint8_t *ring, const struct hc_shm_conn *c, uint64_t i) {
  return ring + (i % c->nslots) * c->slot_bytes;
}

/* Stores a counter the peer reads (see "Ordering" above). */
static void publish(const struct hc_shm_conn *c, atomic_ullong *counter, uint64_t v) {
  if (c->light_publish) atomic_store_explicit(counter, v, memory_order_release);
  else atomic_store(counter, v);
}

/* Hands descriptor number seq, filled, to the receiver (as publish()). */
static void publish_desc(const struct hc_shm_conn *c, struct hc_shm_desc *d, uint64_t seq) {
  if (c->light_publish) atomic_store_explicit(&d->posted, (uint32_t)(seq + 1), memory_order_release);
  else atomic_store(&d->posted, (uint32_t)(seq + 1));
}

static bool desc_posted(const struct hc_shm_desc *d, uint64_t seq) {
  return atomic_load(&d->posted) == (uint32_t)(seq + 1);
}

static void req_complete(struct hc_shm_conn *c, struct hc_shm_req *q) {
  q->complete = true;
  c->n_complete++;
  c->n_incomplete--;
  if (q->is_send) c->sends_pending--, c->ctx->sends_pending--;
  else c->recvs_pending--, c->ctx->recvs_pending--;
}

bool hc_net_shm_conn_busy(const struct hc_shm_conn *c) { return c->n_incomplete > 0; }

/* ---- sending ---- */

static size_t part_bytes(const struct hc_shm_conn *c, size_t n, size_t off) { return HC_MIN(c->slot_bytes, n - off); }

/* The descriptor the next send fills, or NULL while the ring is full. */
static struct hc_shm_desc *desc_free(struct hc_shm_conn *c) {
  if (c->tx_head - c->tx_tail >= c->ndesc) {
    c->tx_tail = atomic_load(&c->tx->tail);
    if (c->tx_head - c->tx_tail >= c->ndesc) return NULL;
  }
  return desc_at(c->tx_desc, c, c->tx_head);
}

/* Fills d's header (and an inline message's payload) and hands it to the
 * receiver, numbered; a pulled message's address fields are filled
 * before. */
static uint64_t desc_post(struct hc_shm_conn *c, struct hc_shm_desc *d, enum hc_shm_kind kind, const void *buf,
                          size_t n, const struct hc_net_sig *sig) {
  d->len = n;
  d->kind = kind;
  d->sig = *sig;
  if (kind == HC_SHM_INLINE && n > 0) memcpy(hc_shm_inline_payload(d), buf, n);
  const uint64_t seq = c->tx_head++;
  publish_desc(c, d, seq);
  c->nsent[kind]++;
  return seq;
}

/* Posts descriptors and writes slot parts for sends in order; completes
 * pulled sends the receiver has acked. */
static void send_progress(struct hc_shm_conn *c, bool *published) {
  size_t budget = c->ctx->pass_bytes;
  struct hc_shm_req *q;
  while ((q = c->send_cur) != NULL) {
    if (!q->posted) {
      struct hc_shm_desc *d = desc_free(c);
      if (d == NULL) break;
      if (q->kind == HC_SHM_CMA) d->u.cma_addr = (uint64_t)(uintptr_t)q->buf;
      if (q->kind == HC_SHM_REG) {
        d->u.reg.fd = q->reg.fd;
        d->u.reg.id = q->reg.id;
        d->u.reg.bytes = q->reg.seg_bytes;
        d->u.reg.off = q->reg.off;
      }
      q->seq = desc_post(c, d, q->kind, q->buf, q->n, &q->sig);
      q->posted = true;
      *published = true;
      if (q->kind == HC_SHM_INLINE) req_complete(c, q);
      if (q->kind == HC_SHM_CMA || q->kind == HC_SHM_REG) c->n_unacked++;
    }
    if (q->kind == HC_SHM_SLOTS) {
      bool nt = c->ctx->nt_min > 0 && q->n >= c->ctx->nt_min;
      while (q->off < q->n) {
        if (budget == 0) {
          c->more = true;
          return;
        }
        if (c->tx_slot_head - c->tx_slot_tail >= c->nslots) {
          c->tx_slot_tail = atomic_load(&c->tx->slot_tail);
          if (c->tx_slot_head - c->tx_slot_tail >= c->nslots) return; /* stays on q */
        }
        size_t k = part_bytes(c, q->n, q->off);
        uint8_t *slot = slot_at(c->tx_slots, c, c->tx_slot_head);
        if (nt) hc_copy_nt(slot, q->buf + q->off, k); /* the sender will not read the slot again */
        else memcpy(slot, q->buf + q->off, k);
        q->off += k;
        budget -= HC_MIN(budget, k);
        c->tx_slot_head++;
        publish(c, &c->tx->slot_head, c->tx_slot_head);
        /* Wake a sleeping receiver at the first part, not the last. */
        hc_net_shm_notify(c);
      }
      req_complete(c, q);
    }
    c->send_cur = q->next;
  }
}

/* Pulled sends complete once the receiver's tail has passed them. */
static void send_acks(struct hc_shm_conn *c) {
  if (c->n_unacked == 0) return;
  c->tx_tail = atomic_load(&c->tx->tail);
  for (struct hc_shm_req *q = c->sendq.head; q && q->posted && q->seq < c->tx_tail && c->n_unacked > 0; q = q->next)
    if (!q->complete) {
      req_complete(c, q);
      c->n_unacked--;
    }
}

/* ---- receiving ---- */

static hc_result_t pull_fail_closed(const struct hc_shm_conn *c) {
  return HC_FAIL(HC_ERR_REMOTE, "shm: rank %d closed the connection while rank %d was reading a message from it",
                 c->peer, c->ctx->rank);
}

/* Reads up to *budget bytes of q's message from the sender's buffer. */
static hc_result_t pull_cma(struct hc_shm_conn *c, struct hc_shm_req *q, const struct hc_shm_desc *d, size_t *budget) {
  while (q->off<q->n && * budget> 0) {
    size_t want = HC_MIN(q->n - q->off, *budget);
    struct iovec l = {.iov_base = q->buf + q->off, .iov_len = want};
    struct iovec r = {.iov_base = (void *)(uintptr_t)(d->u.cma_addr + q->off), .iov_len = want};
    ssize_t k = process_vm_readv(c->peer_handle.pid, &l, 1, &r, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      int e = k < 0 ? errno : EFAULT;
      if (atomic_load(&c->them->closed)) return pull_fail_closed(c);
      if (e == ESRCH)
        return HC_FAIL(HC_ERR_REMOTE, "shm: rank %d (pid %d) exited while rank %d was reading a message from it",
                       c->peer, (int)c->peer_handle.pid, c->ctx->rank);
      return HC_FAIL(e == EFAULT ? HC_ERR_REMOTE : HC_ERR_SYSTEM, "shm: reading %zu bytes at 0x%llx of rank %d: %s%s",
                     want, (unsigned long long)(d->u.cma_addr + q->off), c->peer, strerror(e),
                     e == EFAULT ? " (the send buffer was freed before its send completed?)" : "");
    }
    q->off += (size_t)k;
    *budget -= (size_t)k;
  }
  return HC_OK;
}

/* The peer's registered segment behind d, mapped once and cached. */
static hc_result_t reg_map(struct hc_shm_conn *c, const struct hc_shm_desc *d, const uint8_t **base) {
  struct hc_shm_reg_map *slot = NULL;
  for (int i = 0; i < HC_SHM_REG_CACHE; i++) {
    struct hc_shm_reg_map *m = &c->regs[i];
    if (m->fd == d->u.reg.fd && m->id == d->u.reg.id && m->bytes == d->u.reg.bytes) {
      m->last_use = ++c->reg_clock;
      *base = m->base;
      return HC_OK;
    }
    if (m->fd == d->u.reg.fd) { /* the peer freed that buffer and reused the fd */
      munmap((void *)m->base, m->bytes);
      m->fd = -1;
    }
    if (slot == NULL || m->fd < 0 || (slot->fd >= 0 && m->last_use < slot->last_use)) slot = m;
  }
  if (slot->fd >= 0) munmap((void *)slot->base, slot->bytes);
  slot->fd = -1;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)c->peer_handle.pid, (int)d->u.reg.fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return HC_FAIL(HC_ERR_REMOTE, "shm: cannot open the registered buffer (fd %d) of rank %d: %s", (int)d->u.reg.fd,
                   c->peer, strerror(errno));
  struct stat st;
  void *p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == d->u.reg.bytes)
    p = mmap(NULL, d->u.reg.bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  const struct hc_shm_reg_hdr *h = p;
  if (p == MAP_FAILED || h->magic != HC_SHM_REG_MAGIC || h->id != d->u.reg.id) {
    if (p != MAP_FAILED) munmap(p, d->u.reg.bytes);
    return HC_FAIL(HC_ERR_REMOTE, "shm: fd %d of rank %d is not the registered buffer its message names",
                   (int)d->u.reg.fd, c->peer);
  }
  *slot = (struct hc_shm_reg_map){
      .fd = d->u.reg.fd, .id = d->u.reg.id, .bytes = d->u.reg.bytes, .last_use = ++c->reg_clock, .base = p};
  *base = p;
  return HC_OK;
}

static hc_result_t pull_reg(struct hc_shm_conn *c, struct hc_shm_req *q, const struct hc_shm_desc *d, size_t *budget) {
  const uint8_t *base = NULL;
  if (d->u.reg.off < HC_SHM_PAGE || d->u.reg.off > d->u.reg.bytes || q->n > d->u.reg.bytes - d->u.reg.off)
    return HC_FAIL(HC_ERR_REMOTE, "shm: rank %d sent a registered-buffer message outside its buffer", c->peer);
  HC_TRY(reg_map(c, d, &base));
  size_t k = HC_MIN(q->n - q->off, *budget);
  memcpy(q->buf + q->off, base + d->u.reg.off + q->off, k);
  q->off += k;
  *budget -= k;
  return HC_OK;
}

static hc_result_t recv_progress(struct hc_shm_conn *c, bool *published) {
  size_t budget = c->ctx->pass_bytes;
  struct hc_shm_req *q;
  while ((q = c->recv_cur) != NULL) {
    struct hc_shm_desc *d = desc_at(c->rx_desc, c, c->rx_tail);
    if (!q->matched) {
      if (!desc_posted(d, c->rx_tail)) return HC_OK;
      if (!hc_net_sig_equal(&d->sig, &q->sig)) {
        /* Before closed (hc_net_shm_conn_fail), which publishes it. */
        hc_net_mismatch_publish(&c->me->mismatch, &d->sig, &q->sig);
        return hc_net_sig_fail(c->ctx->sig_explain, c->ctx->rank, &q->sig, c->peer, &d->sig, false);
      }
      if (d->len != (uint64_t)q->n)
        return HC_FAIL(HC_ERR_USAGE, "shm: mismatched counts: expected %zu bytes from rank %d, got %llu", q->n, c->peer,
                       (unsigned long long)d->len);
      if (d->kind >= HC_SHM_NKINDS || (d->kind == HC_SHM_CMA && !c->my_cma) || (d->kind == HC_SHM_REG && !c->my_fd) ||
          (d->kind == HC_SHM_INLINE && d->len > c->inline_bytes))
        return HC_FAIL(HC_ERR_REMOTE, "shm: rank %d sent a descriptor of kind %u that rank %d cannot take", c->peer,
                       d->kind, c->ctx->rank);
      q->matched = true;
      q->kind = (uint8_t)d->kind;
    }
    switch (q->kind) {
    case HC_SHM_INLINE:
      if (q->n > 0) memcpy(q->buf, hc_shm_inline_payload(d), q->n);
      break;
    case HC_SHM_SLOTS:
      while (q->off < q->n) {
        if (budget == 0) { /* the sender may keep feeding: stop somewhere */
          c->more = true;
          return HC_OK;
        }
        if (c->rx_slot_tail == c->rx_slot_head) {
          c->rx_slot_head = atomic_load(&c->rx->slot_head);
          if (c->rx_slot_tail == c->rx_slot_head) return HC_OK;
        }
        size_t k = part_bytes(c, q->n, q->off);
        memcpy(q->buf + q->off, slot_at(c->rx_slots, c, c->rx_slot_tail), k);
        q->off += k;
        budget -= HC_MIN(budget, k);
        c->rx_slot_tail++;
        publish(c, &c->rx->slot_tail, c->rx_slot_tail);
        hc_net_shm_notify(c); /* a sender waiting for room goes on now */
      }
      break;
    case HC_SHM_CMA:
    case HC_SHM_REG:
      HC_TRY(q->kind == HC_SHM_CMA ? pull_cma(c, q, d, &budget) : pull_reg(c, q, d, &budget));
      if (q->off < q->n) {
        c->more = true;
        return HC_OK;
      }
      /* A sender that closed (and may have freed its buffer) during the
       * copy is seen here. The read is an RMW that changes nothing: its
       * release half keeps the copy's loads before it, which a plain
       * acquire load would not (and TSan has no fences). */
      if (atomic_fetch_or_explicit(&c->them->closed, 0, memory_order_acq_rel)) return pull_fail_closed(c);
      break;
    }
    c->rx_tail++;
    publish(c, &c->rx->tail, c->rx_tail);
    *published = true;
    req_complete(c, q);
    c->recv_cur = q->next;
  }
  return HC_OK;
}

hc_result_t hc_net_shm_conn_progress(struct hc_shm_conn *c, bool *moved) {
  bool published = false;
  uint64_t before = c->tx_head + c->tx_slot_head + c->rx_tail + c->rx_slot_tail + (uint64_t)c->n_complete;
  /* Read before the pass: what the peer published before it closed is
   * consumed by the passes that follow, and only what is still pending
   * after a pass that moved nothing fails. */
  bool peer_closed = atomic_load(&c->them->closed) != 0;
  c->more = false;
  send_progress(c, &published);
  send_acks(c);
  hc_result_t r = recv_progress(c, &published);
  if (published) hc_net_shm_notify(c);
  uint64_t after = c->tx_head + c->tx_slot_head + c->rx_tail + c->rx_slot_tail + (uint64_t)c->n_complete;
  if (moved) *moved = after != before || c->more;
  if (r != HC_OK) return r;
  if (!hc_net_shm_conn_busy(c)) return HC_OK;
  /* A pass stops at its budget: slots a closed sender filled are drained
   * over several passes, and only a pass that finds nothing left fails. */
  if (peer_closed && (after != before || c->more)) return HC_OK;
  if (peer_closed && atomic_load(&c->them->mismatch.set))
    return hc_net_mismatch_fail(&c->them->mismatch, c->ctx->sig_explain, c->ctx->rank, c->peer);
  if (peer_closed)
    return HC_FAIL(HC_ERR_REMOTE, "shm: rank %d closed the connection (rank %d still had requests pending)", c->peer,
                   c->ctx->rank);
  /* A spinning receiver makes empty passes back to back: the clock that
   * rate-limits the look at the peer's pid is read on few of them. */
  if (after == before && !c->more && ++c->empty_passes % HC_SHM_ALIVE_PASSES == 0)
    return hc_net_shm_check_alive(c, false);
  return HC_OK;
}

/* ---- requests ---- */

/* A send from a rank that waits for nothing else: no receive pending, no
 * send to another peer. A pull leaves all of a message's copying to the
 * receiver; the slot pipeline shares it with the sender, whose CPU would
 * otherwise idle, and is then the faster path one way (shm.c). That is
 * the rule where the comm has not timed the call (HC_NET_PULLS_DEFAULT);
 * where it has, its choice decides lone sends too. */
static bool lone_send(const struct hc_shm_conn *c) {
  const struct hc_shm_ctx *ctx = c->ctx;
  return ctx->lone_send_slots && ctx->pulls == HC_NET_PULLS_DEFAULT && ctx->recvs_pending == 0 &&
         ctx->sends_pending == c->sends_pending;
}

/* A send that fits a descriptor, with no send queued before it and room
 * in the ring, goes out here and needs no request (net.h): most small
 * collectives' sends, for which a request's bookkeeping and test cost as
 * much as the rest of the call. */
static bool send_inline_now(struct hc_shm_conn *c, const void *buf, size_t n, const struct hc_net_sig *sig) {
  if (n > c->inline_bytes || c->send_cur != NULL) return false;
  struct hc_shm_desc *d = desc_free(c);
  if (d == NULL) return false;
  const struct hc_net_sig none = {{0, 0}};
  desc_post(c, d, HC_SHM_INLINE, buf, n, sig != NULL ? sig : &none);
  hc_net_shm_notify(c);
  return true;
}

static hc_result_t post(struct hc_shm_conn *c, void *buf, size_t n, const struct hc_net_sig *sig, bool is_send,
                        void **out) {
  const char *what = is_send ? "isend" : "irecv";
  *out = NULL;
  if (c == NULL) return HC_FAIL(HC_ERR_ARG, "shm: %s on a NULL connection", what);
  HC_TRY(hc_net_shm_conn_check(c));
  if (c->state != HC_SHM_UP)
    return HC_FAIL(HC_ERR_ARG, "shm: %s to rank %d before the connection is up", what, c->peer);
  if (buf == NULL && n > 0)
    return HC_FAIL(HC_ERR_ARG, "shm: %s of %zu bytes %s rank %d with a NULL buffer", what, n, is_send ? "to" : "from",
                   c->peer);
  if (is_send && send_inline_now(c, buf, n, sig)) return HC_OK;
  struct hc_shm_req *q = c->spare_reqs;
  if (q != NULL) {
    c->spare_reqs = q->next;
    c->nspare--;
    *q = (struct hc_shm_req){0};
  } else {
    HC_TRY(hc_calloc(&q, 1, sizeof(*q), "a shm request"));
  }
  q->conn = c;
  q->buf = buf;
  q->n = n;
  if (sig != NULL) q->sig = *sig;
  q->is_send = is_send;
  if (is_send) {
    const struct hc_shm_ctx *ctx = c->ctx;
    if (n <= c->inline_bytes) q->kind = HC_SHM_INLINE;
    else if (c->peer_fd && hc_net_shm_reg_lookup(buf, n, &q->reg)) q->kind = HC_SHM_REG;
    else if (c->peer_cma && n >= ctx->cma_min && ctx->pulls != HC_NET_PULLS_NONE && !lone_send(c)) q->kind = HC_SHM_CMA;
    else q->kind = HC_SHM_SLOTS;
  }
  struct hc_shm_queue *fifo = is_send ? &c->sendq : &c->recvq;
  q->prev = fifo->tail;
  if (fifo->tail) fifo->tail->next = q;
  else fifo->head = q;
  fifo->tail = q;
  c->n_incomplete++;
  if (is_send) c->sends_pending++, c->ctx->sends_pending++;
  else c->recvs_pending++, c->ctx->recvs_pending++;
  if (is_send && c->send_cur == NULL) c->send_cur = q;
  if (!is_send && c->recv_cur == NULL) c->recv_cur = q;
  /* A send goes out now: the small-message latency is this call plus the
   * receiver's next test(). */
  hc_result_t r = hc_net_shm_conn_progress(c, NULL);
  if (r != HC_OK) return hc_net_shm_conn_fail(c, r); /* q stays queued; close frees it */
  *out = q;
  return HC_OK;
}

hc_result_t hc_net_shm_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  /* The cast drops const only to share post(); a send never writes buf. */
  return post(conn, (void *)buf, n, sig, true, req);
}

hc_result_t hc_net_shm_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  return post(conn, buf, n, sig, false, req);
}

/* A done request's memory, kept for the next post (a small message's
 * send and receive then allocate nothing). */
#define HC_SHM_SPARE_REQS 16
static void req_spare(struct hc_shm_conn *c, struct hc_shm_req *q) {
  if (c->nspare == HC_SHM_SPARE_REQS) {
    free(q);
    return;
  }
  q->next = c->spare_reqs;
  c->spare_reqs = q;
  c->nspare++;
}

static void req_unlink(struct hc_shm_conn *c, struct hc_shm_req *q) {
  struct hc_shm_queue *fifo = q->is_send ? &c->sendq : &c->recvq;
  if (q->prev) q->prev->next = q->next;
  else fifo->head = q->next;
  if (q->next) q->next->prev = q->prev;
  else fifo->tail = q->prev;
}

hc_result_t hc_net_shm_test(void *req, int *done) {
  struct hc_shm_req *q = req;
  *done = 0;
  if (q == NULL) return HC_FAIL(HC_ERR_ARG, "shm: test of a NULL request");
  struct hc_shm_conn *c = q->conn;
  /* A request completed by an earlier pass is reported done even if the
   * conn failed since: its bytes did arrive. */
  if (!q->complete) {
    HC_TRY(hc_net_shm_conn_check(c));
    hc_result_t r = hc_net_shm_conn_progress(c, NULL);
    if (r != HC_OK) return hc_net_shm_conn_fail(c, r);
    if (!q->complete) return HC_OK;
  }
  req_unlink(c, q);
  c->n_complete--;
  req_spare(c, q);
  *done = 1;
  return HC_OK;
}

void hc_net_shm_conn_free_reqs(struct hc_shm_conn *c) {
  struct hc_shm_queue *fifos[2] = {&c->sendq, &c->recvq};
  for (int i = 0; i < 2; i++) {
    struct hc_shm_req *q = fifos[i]->head;
    while (q) {
      struct hc_shm_req *next = q->next;
      free(q);
      q = next;
    }
    fifos[i]->head = fifos[i]->tail = NULL;
  }
  while (c->spare_reqs) {
    struct hc_shm_req *next = c->spare_reqs->next;
    free(c->spare_reqs);
    c->spare_reqs = next;
  }
  c->nspare = 0;
  c->send_cur = c->recv_cur = NULL;
  c->ctx->sends_pending -= c->sends_pending;
  c->ctx->recvs_pending -= c->recvs_pending;
  c->n_complete = c->n_incomplete = c->n_unacked = c->sends_pending = c->recvs_pending = 0;
  for (int i = 0; i < HC_SHM_REG_CACHE; i++)
    if (c->regs[i].fd >= 0) {
      munmap((void *)c->regs[i].base, c->regs[i].bytes);
      c->regs[i].fd = -1;
    }
}
