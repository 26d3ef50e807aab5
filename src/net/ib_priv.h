/*
 * net/ib internals shared by ib.c (loading, devices, setup, close),
 * ib_progress.c (the data protocol) and ib_mem.c (registrations). Nothing
 * outside src/net/ and its tests includes this.
 *
 * Terms:
 *   control   a socket-transport connection of one stream per pair, made by
 *             the socket transport itself (so authenticated with the job's
 *             secret exactly like every other connection). It carries the
 *             one setup record each way, then stays open with a receive
 *             posted: its end (EOF, or an error record) tells a rank at once
 *             that its peer died or gave up, whatever the queue pairs say.
 *   seq       the number of a message in its direction of a pair, from 0;
 *             both ends count sends and receives alike.
 *   eager     a message of at most eager_bytes: the sender writes its
 *             signature (net.h, 16 bytes) and payload into slot
 *             (e % eager_slots) of the receiver's eager ring (e counts eager
 *             messages) and completes at once; the receiver checks the
 *             signature and copies the payload out when the matching
 *             receive is posted and frees the slot.
 *   credit    a free eager slot the sender knows of. The receiver reports
 *             its count of freed slots (a CREDIT write) so that a sender
 *             never overwrites a slot not yet copied out.
 *   cts       clear to send: for every receive, the receiver writes one
 *             record {buffer address, rkey, size, seq, signature} into slot
 *             (seq % cts_slots) of the sender's cts ring. A large message
 *             waits for its cts, then goes straight into that buffer.
 *   chunk     one RDMA write of a large message (chunk_bytes, the last one
 *             shorter), each with an immediate naming the seq; chunks go
 *             round-robin over the pair's queue pairs, and the receive is
 *             complete when all of them have arrived.
 *   device receiver  a rank whose comm reaches its GPU memory (a GPU
 *             registration worked at open) says so in its setup record
 *             (HC_IB_SETUP_DEVICE_RECV). Its eager ring is host memory,
 *             which a CPU cannot copy into GPU memory; so a sender waits
 *             for the cts of every message to it, small ones too. The cts
 *             of a small receive into GPU memory carries the buffer's
 *             address and key, and the message goes straight into it as one
 *             chunk; a cts without an address (a receive into host memory)
 *             lets it go eager. Like NCCL's ib transport (which has no
 *             eager protocol at all), the receiver drives: its cts goes out
 *             when the receive is posted, usually before the send.
 *   device eager  an eager message from GPU memory is one write of two
 *             pieces (the signature from the registered block, the payload
 *             from the buffer's own registration), never inline: no CPU
 *             reads GPU memory. The plans hand such small GPU messages in
 *             registered device scratch that the GPU copied them into
 *             (plan/stage.c), so their registration is cached.
 *
 *   flush     GPU memory an RDMA write (or the last chunk's immediate) has
 *             landed in may not yet be visible to the GPU's own loads: the
 *             adapter's PCIe writes can still sit in the GPU's ingress
 *             while the completion reaches the CPU. So, as NCCL's ib
 *             transport does (ncclIbIflush), a receive into GPU memory
 *             completes only after a flush: an RDMA READ of one byte of its
 *             buffer through a queue pair of the ctx connected to itself,
 *             into a registered host scratch byte. PCIe orders the read's
 *             completion behind the writes before it, so once the read is
 *             back every byte of the message is in GPU memory. One per
 *             receive, not per chunk; none for host memory (eager ring,
 *             pinned slots) or an empty message. Only where the GPU needs
 *             it (HETCCL_GDR_FLUSH=AUTO): NVIDIA before compute capability
 *             9.0 and every AMD GPU, as NCCL's ncclTopoNeedFlush and RCCL
 *             decide (the device backend's rdma_flush_needed); 1: always,
 *             0: never.
 *
 * Every notification is an RDMA WRITE WITH IMMEDIATE; the immediate (32
 * bits, network order on the wire) is type (2 bits) then:
 *   EAGER   seq % 2^14, size (16 bits)     CTS     seq % 2^30
 *   DATA    seq % 2^30                     CREDIT  freed slots % 2^30
 *
 * Threading: like net/socket, a ctx and its conns are used by one thread at
 * a time; nothing here takes a lock except the process-wide library load.
 */
#ifndef HC_NET_IB_PRIV_H_
#define HC_NET_IB_PRIV_H_

#include "ib_verbs.h"
#include "net.h"

#define HC_IB_MAGIC 0x42494348u /* "HCIB" */
#define HC_IB_MAX_QPS 8
#define HC_IB_MAX_EAGER (32u << 10)
#define HC_IB_CTS_SLOTS 64u
#define HC_IB_SQ_DEPTH 128u
#define HC_IB_RQ_DEPTH 256u
#define HC_IB_CTS_BYTES 48u
#define HC_IB_SIG_BYTES 16u /* struct hc_net_sig, little endian, before an eager payload */

enum hc_ib_imm_type { HC_IB_IMM_EAGER = 0, HC_IB_IMM_CTS = 1, HC_IB_IMM_DATA = 2, HC_IB_IMM_CREDIT = 3 };
#define HC_IB_SEQ30 0x3fffffffu
#define HC_IB_SEQ14 0x3fffu

static inline uint32_t hc_ib_imm(enum hc_ib_imm_type t, uint32_t v) { return ((uint32_t)t << 30) | (v & HC_IB_SEQ30); }
static inline uint32_t hc_ib_imm_eager(uint64_t seq, size_t n) {
  return ((uint32_t)HC_IB_IMM_EAGER << 30) | (((uint32_t)seq & HC_IB_SEQ14) << 16) | (uint32_t)n;
}

/* The setup record each side sends over the control connection (all
 * integers little endian). */
struct hc_ib_setup {
  uint32_t magic, rank, nqps, eager_slots;
  uint32_t eager_bytes, cts_slots;
  uint64_t chunk;
  uint32_t lid;
  uint32_t link_layer, mtu;
  uint8_t gid[16];
  uint32_t qpn[HC_IB_MAX_QPS];
  uint64_t eager_addr;
  uint32_t eager_rkey;
  uint64_t cts_addr;
  uint32_t cts_rkey;
  uint32_t flags; /* HC_IB_SETUP_* */
};
/* The sender of this record receives small messages into GPU memory: wait
 * for its cts before any message (see "device receiver" above). */
#define HC_IB_SETUP_DEVICE_RECV 1u
#define HC_IB_SETUP_BYTES 136
/* What a rank sends over control when it gives up on the pair, so that its
 * peer fails with the same reason instead of a bare "connection closed". */
#define HC_IB_BYE_BYTES 40
/* MISMATCH: sent u64 | posted u64 (bytes). SIG: the writer's signature |
 * the one it met (2 x u64 each). */
enum hc_ib_bye_reason { HC_IB_BYE_MISMATCH = 1, HC_IB_BYE_SIG = 2 };

/* Its wire form and parser: ib_wire.h. */

/* One registration of the cache (ib_mem.c). */
struct hc_ib_reg {
  struct hc_ib_reg *prev, *next; /* LRU list of the ctx; most recent first */
  uintptr_t start, end;
  struct ibv_mr *mr;
  int refs;
  bool cached;                  /* in the list; false: freed when refs drops to 0 */
  bool writable;                /* local and remote write access (else read-only pages: sends only) */
  uint64_t pfn_first, pfn_last; /* page frames at registration, to notice reuse */
  int dmabuf_fd;                /* GPU memory registered through dma-buf, else -1 */
  bool device;                  /* GPU memory (dma-buf or peer memory) */
};

struct hc_ib_req;

struct hc_ib_queue {
  struct hc_ib_req *head, *tail;
};

enum hc_ib_conn_state {
  HC_IB_CONTROL,  /* the control connection is coming up */
  HC_IB_EXCHANGE, /* setup records in flight */
  HC_IB_UP
};

struct hc_ib_conn {
  struct hc_ib_ctx *ctx;
  int peer;
  enum hc_ib_conn_state state;
  void *control;                            /* socket conn */
  void *setup_send, *setup_recv, *bye_recv; /* socket requests */
  uint8_t setup_out[HC_IB_SETUP_BYTES], setup_in[HC_IB_SETUP_BYTES];
  uint8_t bye_in[HC_IB_BYE_BYTES], bye_out[HC_IB_BYE_BYTES];
  struct hc_ib_setup remote;
  hc_result_t failed;
  char err[320];
  bool announced;
  bool bye_sent; /* bye_out went to the peer (once) */
  uint64_t deadline_ns;
  uint64_t control_checked_ns; /* when the control connection was last looked at */

  struct ibv_cq *cq;
  int nqps;
  struct ibv_qp *qps[HC_IB_MAX_QPS];
  uint32_t sq_used[HC_IB_MAX_QPS];
  uint32_t max_inline;
  uint64_t writes_posted; /* for HETCCL_IB_FAULT_AFTER */

  /* One registered block: eager ring in (receiving), eager staging out
   * (sending), cts ring in (sending side reads it), cts staging out. */
  uint8_t *block;
  size_t block_bytes;
  struct ibv_mr *block_mr;
  uint8_t *eager_in, *eager_out, *cts_in, *cts_out;

  /* sending direction */
  struct hc_ib_queue sendq;
  uint64_t send_posted;       /* seqs handed out */
  struct hc_ib_req *send_cur; /* oldest send not fully posted */
  uint64_t eager_sent, eager_freed_remote;
  uint32_t cts_have[HC_IB_CTS_SLOTS]; /* seq30 + 1 of the cts in each slot, 0: none */
  /* receiving direction */
  struct hc_ib_queue recvq;
  uint64_t recv_posted;
  uint64_t cts_sent;      /* seqs whose cts went out */
  uint64_t eager_arrived; /* eager messages landed in our ring */
  uint64_t eager_taken;   /* of those, copied out (slots freed) */
  uint64_t credit_reported;
  uint32_t eager_meta[64]; /* per slot: the immediate that filled it (slots <= 64) */
  uint32_t flushes_due;    /* receives landed in GPU memory whose flush waits for room */
  int n_complete;
};

struct hc_ib_req {
  struct hc_ib_conn *conn;
  struct hc_ib_req *prev, *next;
  uint8_t *buf;
  size_t n;
  struct hc_net_sig sig;
  bool is_send, complete;
  bool device;    /* buf is GPU memory (asked only where the ctx reaches it) */
  bool cts_seen;  /* send: the cts was taken (a small message to a device receiver) */
  bool flush_due; /* recv: landed in GPU memory, its flush not posted yet (no room) */
  bool flushing;  /* recv: its flush read posted, awaited before it completes */
  uint64_t seq;
  struct hc_ib_reg *reg; /* large messages: the buffer's registration */
  /* send: chunks posted and completions awaited; recv: chunks arrived */
  size_t chunks, chunks_posted, chunks_done;
  uint64_t remote_addr;
  uint32_t rkey;
};

struct hc_ib_dev {
  char name[64];
  int port;
  int link_layer, active_mtu, gid_index;
  uint16_t lid;
  union ibv_gid gid;
};

/* The flush queue pair of a ctx (ib_flush.c), made at its first use. */
#define HC_IB_FLUSH_DEPTH 64u
struct hc_ib_flush {
  bool enabled; /* HETCCL_GDR_FLUSH, resolved at open for the comm's GPU */
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  uint8_t *scratch; /* where the reads land, never looked at */
  struct ibv_mr *scratch_mr;
  uint32_t inflight; /* reads posted, not yet polled */
};

struct hc_ib_ctx {
  int rank, nranks;
  const atomic_bool *abort_flag;
  hc_net_sig_explain_fn sig_explain;
  const struct hc_ib_verbs *v;
  struct hc_ib_dev dev;
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct ibv_comp_channel *channel; /* every conn's CQ reports to it; nonblocking fd */
  void *sock_ctx;                   /* the control connections' socket transport */
  struct hc_ib_conn **conns;        /* [nranks] */
  int nqps;
  size_t chunk, eager_bytes;
  uint32_t eager_slots;
  int ack_timeout;
  uint64_t fault_after;
  /* registration cache (ib_mem.c) */
  struct hc_ib_reg *regs; /* LRU list */
  int nregs, max_regs;
  int pagemap_fd;   /* -1: page frames not visible: no cache */
  int gdr_mode;     /* enum hc_ib_gdr, resolved */
  bool gdr_auto;    /* HETCCL_GDR=AUTO: a refused dma-buf registration falls back */
  int device_kind;  /* hc_net_args.device_kind: host comms never query pointers */
  bool device_recv; /* a GPU registration worked at open: HC_IB_SETUP_DEVICE_RECV */
  struct hc_ib_flush flush;
};

/* ---- ib.c ---- */
/* The process-wide libibverbs table, loaded once; NULL with an INFO line
 * when the library or a symbol is missing. */
const struct hc_ib_verbs *hc_ib_verbs_load(void);
/* The device and port for a rank: among the active ports HETCCL_IB_HCA
 * allows, the one nearest the GPU whose PCI bus id is gpu_bus_id
 * (net/topo.c; equally near ones dealt out by spread, the GPU's index),
 * else the first. HC_OK with *found = false when none (the reason in why,
 * not logged as a WARN). near (when not NULL) says how the choice was
 * made. */
hc_result_t hc_ib_find_device(const struct hc_ib_verbs *v, const char *gpu_bus_id, int spread, struct hc_ib_dev *dev,
                              bool *found, char *why, size_t why_len, char *near, size_t near_len);
/* Whether a device/port matches an NCCL_IB_HCA-style spec ("" matches all). */
bool hc_ib_hca_matches(const char *spec, const char *dev, int port);
/* Makes r (just returned by HC_FAIL) c's sticky failure, tells the peer when
 * there is a reason to send, and moves c's queue pairs to the error state.
 * Returns r. */
hc_result_t hc_ib_conn_fail(struct hc_ib_conn *c, hc_result_t r);
/* Writes bye_out: a signature mismatch, this rank's call and the one it
 * met (the peer names both from it). */
void hc_ib_bye_sig(struct hc_ib_conn *c, const struct hc_net_sig *mine, const struct hc_net_sig *got);
hc_result_t hc_ib_conn_check(const struct hc_ib_conn *c);
/* A reliable-connected queue pair on cq, in INIT granting access; cap is
 * updated to what the device granted. what names it in messages. */
hc_result_t hc_ib_qp_open(struct hc_ib_ctx *ctx, struct ibv_cq *cq, struct ibv_qp_cap *cap, int access,
                          const char *what, struct ibv_qp **out);
/* INIT -> RTR -> RTS towards queue pair dest_qpn at lid (InfiniBand) or
 * gid (RoCE), path MTU the lesser of ours and mtu. */
hc_result_t hc_ib_qp_connect(struct hc_ib_ctx *ctx, struct ibv_qp *qp, uint32_t dest_qpn, uint32_t lid,
                             const uint8_t gid[16], int mtu, const char *what);

/* ---- ib_progress.c ---- */
hc_result_t hc_ib_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req);
hc_result_t hc_ib_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req);
/* Bytes of one eager slot: signature, then up to eager_bytes of payload. */
static inline size_t hc_ib_eager_stride(size_t eager_bytes) { return HC_IB_SIG_BYTES + eager_bytes; }
hc_result_t hc_ib_test(void *req, int *done);
/* Polls c's completion queue and moves both directions as far as they go.
 * *moved: something happened. */
hc_result_t hc_ib_conn_progress(struct hc_ib_conn *c, bool *moved);
/* Posts the receive work requests of a new queue pair. */
hc_result_t hc_ib_post_recvs(struct hc_ib_conn *c, int qp, uint32_t n);
void hc_ib_conn_free_reqs(struct hc_ib_conn *c);

/* ---- ib_flush.c ---- */
/* Posts the flush read of one byte at addr (inside reg, GPU memory) with
 * wr_id, making the flush queue pair first if the ctx has none; *posted
 * false when its send queue is full (try again after a poll). */
hc_result_t hc_ib_flush_post(struct hc_ib_ctx *ctx, const struct hc_ib_reg *reg, const void *addr, uint64_t wr_id,
                             bool *posted);
/* Up to n completions of flush reads (none polled while none is in
 * flight); < 0 on a failed poll. */
int hc_ib_flush_poll(struct hc_ib_ctx *ctx, struct ibv_wc *wc, int n);
void hc_ib_flush_fini(struct hc_ib_ctx *ctx);

/* ---- ib_mem.c ---- */
enum hc_ib_gdr { HC_IB_GDR_AUTO, HC_IB_GDR_DMABUF, HC_IB_GDR_PEERMEM, HC_IB_GDR_STAGE };
hc_result_t hc_ib_gdr_parse(const char *s, int *mode);
hc_result_t hc_ib_mem_init(struct hc_ib_ctx *ctx);
void hc_ib_mem_fini(struct hc_ib_ctx *ctx);
/* Whether GPU memory of device_id can be registered for this ctx: a
 * registration of a page of it tried under the resolved mode (a refused
 * dma-buf moving to the next mode under AUTO). path says how, or why not
 * ("gdr dma-buf on mlx5_0", "staged: ..."); where not, the ctx's mode
 * becomes staging. A GPU comm's open calls it; never a failure of its
 * own. */
bool hc_ib_gdr_probe_reg(struct hc_ib_ctx *ctx, int device_id, char *path, size_t len);
/* A registration covering [buf, buf + n), from the cache when a live one
 * covers it; the caller holds a reference until hc_ib_reg_put. A receive
 * needs write access; a send may come from read-only pages (constant
 * data), registered for reading only. */
hc_result_t hc_ib_reg_get(struct hc_ib_ctx *ctx, void *buf, size_t n, bool need_write, struct hc_ib_reg **out);
void hc_ib_reg_put(struct hc_ib_ctx *ctx, struct hc_ib_reg *r);

#endif
