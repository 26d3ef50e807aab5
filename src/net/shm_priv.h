/*
 * net/shm internals shared by shm.c (setup: open, connect, wait, close),
 * shm_progress.c (the data path: isend/irecv/test) and shm_mem.c (the
 * registry of hetcclMemAlloc buffers). Nothing outside src/net/ includes
 * this, except the transport's own unit test, which reads the counters of
 * a connection to tell which path a message took.
 *
 * Terms (the design and its reasons are at the top of shm.c):
 *   segment  the /dev/shm file of one pair of ranks, created by the lower
 *            rank, unlinked as soon as the higher rank has mapped it.
 *   side     one process's half of the segment header: side 0 is the
 *            creator's, side 1 the opener's. A side is written by its owner
 *            only, except its doorbell and waiting flag (the other process
 *            rings the one and clears the other).
 *   channel  one direction; chan[s] carries what side s sends. It holds a
 *            ring of descriptors and a ring of slots.
 *   desc     one message: its length and how its bytes travel (kind); a
 *            descriptor stays in the ring until the receiver has consumed
 *            the message, so the receiver's tail counter is also the ack.
 *   inline   a small message copied into its descriptor, from the
 *            header's second half on: up to 32 bytes share the line of
 *            the word that publishes them.
 *   slot     a fixed-size buffer of the slot ring; a SLOTS message is cut
 *            into parts of one slot each, written and read in order.
 *   pull     the receiver copies straight out of the sender's memory:
 *            CMA (process_vm_readv) or a mapping of a registered buffer.
 *
 * Threading: a ctx, its connections and requests are used by one thread at
 * a time, as net.h says; the registry (shm_mem.c) takes its own lock.
 */
#ifndef HC_NET_SHM_PRIV_H_
#define HC_NET_SHM_PRIV_H_

#include <stddef.h>
#include <sys/types.h>

#include "net.h"

#define HC_SHM_MAGIC 0x4d534348u /* "HCSM": handles */
#define HC_SHM_READY 0x59445248u /* segment header: the creator finished it */
#define HC_SHM_VERSION 5
#define HC_SHM_LINE 128    /* two cache lines: the adjacent-line prefetcher pairs them */
#define HC_SHM_NDESC 64    /* descriptors per channel */
#define HC_SHM_DESC_HDR 64 /* descriptor bytes: its header, whose second half is also an inline payload's start */
#define HC_SHM_PAGE 4096
#define HC_SHM_PREFIX "hetccl-" /* every segment name in /dev/shm starts so */
#define HC_SHM_MAX_INLINE (64u << 10)
#define HC_SHM_REG_CACHE 32    /* mappings of a peer's registered buffers kept per conn */
#define HC_SHM_ALIVE_PASSES 64 /* empty progress passes per look at the peer's pid (and the clock) */

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
               "shm needs lock-free (address-free) 32- and 64-bit atomics");

/* What hc_net_handle holds. Host order: handles only travel between
 * processes of one host here. */
struct hc_shm_handle {
  uint32_t magic, version;
  int32_t pid;
  uint32_t window_pages;     /* the window this rank wants per direction, in pages */
  uint64_t id;               /* random, per ctx: names the pair's segment */
  uint64_t pidns;            /* inode of /proc/self/ns/pid (0: unknown) */
  uint64_t shm_dev, shm_ino; /* identity of /dev/shm as this process sees it */
};
_Static_assert(sizeof(struct hc_shm_handle) <= HC_NET_HANDLE_BYTES, "shm handle too big");

/* Handshake states of a side. */
enum { HC_SHM_SIDE_NONE = 0, HC_SHM_SIDE_READY = 1, HC_SHM_SIDE_OK = 2 };

struct hc_shm_side {
  /* The owner sleeps on this word (shared futex); the peer bumps it, and
   * wakes the owner, after it publishes something while waiting is set. */
  _Alignas(HC_SHM_LINE) atomic_uint doorbell;
  /* Set by the owner from just before its last look until it is awake;
   * the peer clears it when it rings, so that it rings once per sleep. */
  _Alignas(HC_SHM_LINE) atomic_uint waiting;
  /* Set once by the owner when it closes or fails the connection. */
  _Alignas(HC_SHM_LINE) atomic_uint closed;
  atomic_uint state; /* HC_SHM_SIDE_*; stored after the fields below */
  int32_t pid;
  int32_t seg_fd;      /* the owner's fd of the segment, for the peer's fd probe */
  uint32_t can_cma;    /* the owner can process_vm_readv the peer's memory */
  uint32_t can_fd;     /* the owner can open the peer's fds (/proc/<pid>/fd) */
  uint32_t fences;     /* the owner's process sleeps through membarrier (shm.c, "Sleeping") */
  uint64_t probe_addr; /* address, in the owner, of probe_value */
  uint64_t probe_value;
  uint8_t proof[32]; /* HMAC(secret, role | segment name) */
  /* A signature mismatch the owner found as a receiver (net.h), of the
   * transport or of the window: published before closed and notice, so
   * that the peer, once it sees either, names both calls. */
  struct hc_net_mismatch mismatch;
  /* The owner's stall probe (net.h, stall_publish): a seqlock, odd while
   * the owner writes the words. */
  _Alignas(HC_SHM_LINE) atomic_ullong stall_gen;
  atomic_ullong stall_sig[2];
  /* The window's liveness words (net.h, hc_net_window), the owner's. */
  _Alignas(HC_SHM_LINE) atomic_ullong heartbeat;
  atomic_int notice;
};

/* One direction. Counters only grow; index = counter % ring size. A
 * descriptor is published by its own word (hc_shm_desc.posted), not by a
 * counter: the receiver polls the line it reads next. */
struct hc_shm_chan {
  _Alignas(HC_SHM_LINE) atomic_ullong tail;      /* receiver: messages consumed (the ack) */
  _Alignas(HC_SHM_LINE) atomic_ullong slot_head; /* sender: parts written */
  _Alignas(HC_SHM_LINE) atomic_ullong slot_tail; /* receiver: parts consumed */
  /* The window (net.h, hc_net_window), owned by the plans that use it. */
  _Alignas(HC_SHM_LINE) atomic_ullong win_filled;                      /* sender: pieces written */
  _Alignas(HC_SHM_LINE) atomic_ullong win_freed;                       /* receiver: pieces read */
  _Alignas(HC_SHM_LINE) atomic_ullong win_sig[2 * HC_NET_WINDOW_SIGS]; /* sender: hc_net_window.tx_sig */
};

/* Page 0 of a segment. Everything but the atomics is written by the
 * creator before it release-stores ready, and never changes. */
struct hc_shm_seg_hdr {
  atomic_uint ready; /* HC_SHM_READY */
  uint32_t version;
  uint32_t ndesc, inline_bytes, nslots, reserved;
  uint64_t slot_bytes, desc_stride, total_bytes;
  uint64_t desc_off[2], slot_off[2]; /* of channel s's rings, from the segment start */
  uint64_t win_bytes, win_off[2];    /* channel s's window (0 bytes: none) */
  struct hc_shm_side side[2];
  struct hc_shm_chan chan[2];
};

_Static_assert(sizeof(struct hc_shm_seg_hdr) <= HC_SHM_PAGE, "segment header must fit its page");

/* How a message's bytes travel. */
enum hc_shm_kind { HC_SHM_INLINE = 0, HC_SHM_SLOTS = 1, HC_SHM_CMA = 2, HC_SHM_REG = 3, HC_SHM_NKINDS };

struct hc_shm_desc {
  uint64_t len;
  /* The low 32 bits of (the descriptor's counter + 1), stored last: the
   * receiver waits for the value it expects in the descriptor itself, so
   * that a small message is one line to fetch (an older value is the
   * message 64 before, never this one). */
  atomic_uint posted;
  uint32_t kind;
  struct hc_net_sig sig; /* of the send's call (net.h): checked before the length */
  union {
    uint64_t cma_addr; /* CMA: the payload's address in the sender */
    struct {
      int32_t fd; /* the sender's fd of the registered segment */
      uint32_t unused;
      uint64_t id;             /* the segment's random id (its header says it too) */
      uint64_t bytes;          /* size of the whole segment */
      uint64_t off;            /* of the payload in the segment */
    } reg;                     /* REG */
    uint8_t payload_start[32]; /* INLINE: the payload runs on past the header (hc_shm_inline_payload) */
  } u;
};
_Static_assert(sizeof(struct hc_shm_desc) == HC_SHM_DESC_HDR, "descriptor header size");
_Static_assert(offsetof(struct hc_shm_desc, u) == HC_SHM_DESC_HDR / 2, "inline payload starts mid-header");

static inline uint8_t *hc_shm_inline_payload(struct hc_shm_desc *d) {
  return (uint8_t *)d + offsetof(struct hc_shm_desc, u);
}

/* A registered buffer as isend sees it (shm_mem.c). */
struct hc_shm_reg_ref {
  int fd;
  uint64_t id, seg_bytes, off;
};

enum hc_shm_conn_state {
  HC_SHM_IDLE,    /* nothing done yet */
  HC_SHM_CREATED, /* creator: segment made, waiting for the opener */
  HC_SHM_OPENED,  /* opener: segment mapped, waiting for the creator's OK */
  HC_SHM_UP
};

struct hc_shm_req {
  struct hc_shm_conn *conn;
  struct hc_shm_req *prev, *next;
  uint8_t *buf;
  size_t n;
  struct hc_net_sig sig;
  bool is_send;
  bool posted;  /* send: its descriptor is in the ring */
  bool matched; /* receive: met its descriptor, lengths agree */
  bool complete;
  uint8_t kind;              /* enum hc_shm_kind */
  uint64_t seq;              /* send: index of its descriptor */
  size_t off;                /* bytes moved so far (slot parts, pulls) */
  struct hc_shm_reg_ref reg; /* send, REG */
};

struct hc_shm_queue {
  struct hc_shm_req *head, *tail;
};

/* A mapping of one of the peer's registered segments. */
struct hc_shm_reg_map {
  int fd; /* the peer's fd number; -1: entry unused */
  uint64_t id, bytes, last_use;
  const uint8_t *base;
};

struct hc_shm_conn {
  struct hc_shm_ctx *ctx;
  int peer;
  int side; /* 0: this rank created the segment (lower rank), 1: opened it */
  enum hc_shm_conn_state state;
  struct hc_shm_handle peer_handle;
  int pidfd;     /* of the peer, -1 where pidfd_open is missing */
  int culprit;   /* once failed: the rank the failure blames */
  int seg_fd;    /* closed once the handshake is over */
  char name[96]; /* "/hetccl-..." */
  bool linked;   /* creator: the name may still exist in /dev/shm */
  uint64_t deadline_ns, last_alive_ns;
  uint64_t empty_passes; /* progress passes that moved nothing */
  uint8_t *seg;
  size_t seg_bytes;
  struct hc_shm_seg_hdr *hdr;
  struct hc_shm_side *me, *them;
  struct hc_shm_chan *tx, *rx;
  uint8_t *tx_desc, *rx_desc, *tx_slots, *rx_slots;
  uint32_t ndesc, inline_bytes, nslots;
  size_t slot_bytes, desc_stride;
  bool peer_cma, peer_fd; /* the peer can pull from this rank by CMA / fd */
  bool my_cma, my_fd;     /* this rank can pull from the peer */
  bool light_publish;     /* both sides' fences: counters are published with release stores */
  /* Local copies of the counters; the shared ones are read only when these
   * say there is nothing (more) to do. */
  uint64_t tx_head, tx_tail, tx_slot_head, tx_slot_tail;
  uint64_t rx_tail, rx_slot_head, rx_slot_tail;
  bool more;                        /* progress stopped on its budget, not for want of the peer */
  int n_complete;                   /* requests complete but not yet freed by test() */
  int n_incomplete;                 /* requests posted and not complete */
  int n_unacked;                    /* pulled sends posted and not acked */
  int sends_pending, recvs_pending; /* of n_incomplete; the ctx sums them over its connections */
  hc_result_t failed;
  char err[320];
  struct hc_shm_queue sendq, recvq;
  struct hc_shm_req *send_cur;   /* first send not fully handed over */
  struct hc_shm_req *recv_cur;   /* first receive not complete */
  struct hc_shm_req *spare_reqs; /* done requests' memory, for the next posts (linked by next) */
  int nspare;
  struct hc_shm_reg_map regs[HC_SHM_REG_CACHE];
  uint64_t reg_clock;
  uint64_t nsent[HC_SHM_NKINDS]; /* messages sent by kind (tests, INFO at close) */
};

struct hc_shm_ctx {
  int rank, nranks;
  uint8_t secret[16];
  const atomic_bool *abort_flag;
  hc_net_sig_explain_fn sig_explain;
  struct hc_shm_handle handle;
  /* Settings, read at open. The creator's layout wins for a pair; the
   * window is the larger of the two ranks' wishes. */
  uint32_t inline_bytes, nslots;
  size_t window_bytes;
  size_t slot_bytes, cma_min, nt_min;
  size_t pass_bytes; /* payload bytes one pass copies per direction */
  bool cma;
  bool lone_send_slots;    /* HETCCL_SHM_LONE_SEND_SLOTS */
  enum hc_net_pulls pulls; /* the comm's choice for now (net.h, choose_pulls) */
  bool fences;             /* this process is registered for membarrier's global expedited fence */
  /* Requests posted and not complete, over every connection: a send
   * chooses its path by what else this rank waits for (lone_send). */
  int sends_pending, recvs_pending;
  uint64_t probe_value;       /* peers read it through CMA to prove they can */
  struct hc_shm_conn **conns; /* [nranks], made on first use */
};

static inline bool hc_shm_aborted(const struct hc_shm_ctx *ctx) {
  return ctx->abort_flag != NULL && atomic_load_explicit(ctx->abort_flag, memory_order_acquire);
}

/* shm_progress.c */
hc_result_t hc_net_shm_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req);
hc_result_t hc_net_shm_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req);
hc_result_t hc_net_shm_test(void *req, int *done);
/* One pass over both directions of c; *moved (may be NULL): it moved
 * bytes, completed requests or stopped on its budget. */
hc_result_t hc_net_shm_conn_progress(struct hc_shm_conn *c, bool *moved);
/* Something of c waits on the peer (a request not complete). */
bool hc_net_shm_conn_busy(const struct hc_shm_conn *c);
/* Frees every request still queued on c (and the spare ones) and unmaps the registered
 * segments of the peer (close only). */
void hc_net_shm_conn_free_reqs(struct hc_shm_conn *c);

/* shm.c */
/* Makes r (just returned by HC_FAIL) c's sticky failure and tells the peer
 * (its pending requests fail as if this rank closed). Returns r. */
hc_result_t hc_net_shm_conn_fail(struct hc_shm_conn *c, hc_result_t r);
/* HC_OK, or c's sticky failure with its text made this thread's last error
 * again (without a second WARN line). */
hc_result_t hc_net_shm_conn_check(const struct hc_shm_conn *c);
/* After a publishing store the peer may wait for: wakes the peer if it
 * sleeps or is about to. */
void hc_net_shm_notify(struct hc_shm_conn *c);
/* HC_ERR_REMOTE (sticky) when the peer process has exited; rate-limited
 * unless force. */
hc_result_t hc_net_shm_check_alive(struct hc_shm_conn *c, bool force);

/* shm_mem.c */
/* Whether [buf, buf+n) lies in one hetcclMemAlloc buffer; fills *out. */
bool hc_net_shm_reg_lookup(const void *buf, size_t n, struct hc_shm_reg_ref *out);
/* Magic and id at the start of every registered segment (the user's
 * pointer starts one page further). */
struct hc_shm_reg_hdr {
  uint64_t magic, id, bytes;
};
#define HC_SHM_REG_MAGIC 0x4745524d53434848ull /* "HHCSMREG" */

#endif
