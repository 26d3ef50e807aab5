/*
 * plan: turns one collective call into steps (send, receive, reduce, copy,
 * scale) with dependencies between them. How the bytes move is net/'s
 * business, who runs the steps is exec/'s.
 *
 * Terms used by every algorithm:
 *  - block: the part of a buffer that one rank owns or is responsible for
 *    (ring algorithms split a buffer into nranks blocks of nearly equal
 *    counts; block b has count/n elements, plus one when b < count % n);
 *  - chunk: the unit of pipelining, at most HETCCL_CHUNK_BYTES; a block is
 *    cut into chunks at boundaries every rank computes the same way;
 *  - slot: a chunk-sized part of the plan's scratch buffer that receives
 *    data before it is reduced; slots are reused round-robin, and a receive
 *    into a slot waits for the step that last used it.
 *
 * Matching: sends to one peer, and receives from one peer, are posted in
 * step order. Every rank builds the same sequence for the same call, so the
 * k-th send of rank a to rank b meets the k-th receive of b from a.
 */
#ifndef HC_PLAN_H_
#define HC_PLAN_H_

#include "../device/device.h"
#include "../net/net.h"
#include "../vendor/vendor.h"

/* The algorithms of the table in algos.c; AUTO: the table's choice. */
enum hc_algo {
  HC_ALGO_AUTO,
  HC_ALGO_RING,
  HC_ALGO_RD,
  HC_ALGO_TREE,
  HC_ALGO_HIER,
  HC_ALGO_ONESTEP,
  HC_ALGO_DIRECT,
  HC_ALGO_COUNT
};
const char *hc_algo_name(enum hc_algo a);
/* Parses HETCCL_ALGO into one forced algorithm per collective (AUTO where
 * none is forced): a comma-separated list of NAME (every collective that
 * has an algorithm of that name) and COLLECTIVE:NAME (that collective,
 * whatever a bare NAME says), case-insensitive; "" forces none. A name
 * no collective has, a collective without that algorithm, a collective
 * named twice or two bare names fail with HC_ERR_USAGE, naming what is
 * accepted. */
hc_result_t hc_algo_parse(const char *s, enum hc_algo forced[HC_COLL_COUNT]);

/* All-to-all-v's arrays, nranks each, in elements. */
struct hc_alltoallv_args {
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
};

/* One call, validated by api/. Counts are in elements. */
struct hc_coll_args {
  enum hc_coll coll;
  enum hc_dtype dtype;
  enum hc_redop op; /* SUM, PROD, MAX, MIN, AVG or PREMULSUM */
  int root;         /* broadcast, reduce, gather, scatter; the peer of send/recv */
  const void *sendbuf;
  void *recvbuf;
  size_t count;                      /* per-rank count for allgather/reducescatter/alltoall/gather/scatter */
  uint8_t premul_factor[8];          /* PREMULSUM: one element of dtype */
  const struct hc_alltoallv_args *v; /* ALLTOALLV */
  /* Collectives made on the comm before this call (api/): a collective's
   * own number; send and receive carry the count they follow. Every rank
   * makes the same collectives in the same order, so the numbers agree. */
  uint32_t seq;
  bool stage_send; /* SEND: copy the data aside first (a receive of the same group overwrites the buffer: in-place
                      send/recv) */
};
/* Every call builds one. Up to 64 bytes, GCC -O2 on x86-64 zeroes it with
 * four vector stores; at 96 it took a rep stos of 11 words, on the path of
 * every small call, where each store counts (docs/perf.md). */
_Static_assert(sizeof(struct hc_coll_args) <= 64, "hc_coll_args grew past 64 bytes");

/* The signature of a's transfers on rank `rank` (net.h, hc_net_sig):
 * collective, count, datatype, op, root and seq, in 16 bytes. Both ends of
 * a send/recv pair carry the same one (kind SEND, root = the sender). */
struct hc_net_sig hc_plan_sig(const struct hc_coll_args *a, int rank);
/* sig, of an earlier call of the same shape, becomes that of the call
 * numbered seq: what a kept plan's transfers carry when it runs again. */
void hc_plan_sig_renumber(struct hc_net_sig *sig, uint32_t seq);
/* Reads HETCCL_SIGNATURES (0: hc_plan_sig returns no signature). */
void hc_plan_sig_configure(void);
/* hc_net_sig_explain_fn: "rank 1 called Broadcast(root 0, 1000 float) #4,
 * rank 0 called AllReduce(sum, 1000 float) #4". */
void hc_plan_sig_explain(char *buf, size_t len, int me, const struct hc_net_sig *mine, int peer,
                         const struct hc_net_sig *theirs, bool me_sends);

/* NOP does nothing: it joins several steps into one dependency. WAIT is
 * done once the counter at src0 (an atomic_ullong) is at least count (a
 * window receive's also names at src1 the two control words that must then
 * hold sigs[call], the signature of the piece from peer; a window wait's
 * peer is the rank whose process moves the counter);
 * SIGNAL stores count there (the window protocol, see hc_plan_window).
 * VENDOR is one collective of the vendor library's communicator of this
 * rank's group (hc_plan_ctx.group_vendor), on the main lane: coll (ALLREDUCE,
 * BROADCAST, REDUCE, ALLGATHER or REDUCESCATTER) from src0 into dst, count
 * elements as the vendor counts them, redop, and peer as the root (an index
 * among the group's members); or coll SEND: one group of the vendor's
 * sends and receives (ncclGroupStart .. ncclGroupEnd), src0 pointing to
 * count struct hc_vendor_p2p in the plan's host scratch. */
enum hc_step_kind {
  HC_STEP_SEND,
  HC_STEP_RECV,
  HC_STEP_REDUCE,
  HC_STEP_COPY,
  HC_STEP_SCALE,
  HC_STEP_NOP,
  HC_STEP_WAIT,
  HC_STEP_SIGNAL,
  HC_STEP_VENDOR
};

/* GPU plans: the internal stream a local step runs on. Copies into host
 * memory have their own, so that they overlap copies and kernels going
 * the other way. */
enum hc_lane { HC_LANE_MAIN, HC_LANE_TO_HOST, HC_LANE_COUNT };

/* A small window piece in LL form (device.h; hc_plan_window.ll_bytes):
 * the COPY into the window writes it (PUT: dst is the LL words), the
 * COPY out of it reads it (GET: src0 is), with the step's ll_flag. The
 * receive's WAIT for filled says POLLED: the GET after it polls its words
 * itself, so a GPU, which runs that GET in a program, skips the wait; a
 * CPU rank waits for filled as for any piece (its signature check is
 * there) and then finds the words in place. */
enum hc_ll { HC_LL_NONE, HC_LL_PUT, HC_LL_GET, HC_LL_POLLED };

#define HC_STEP_MAX_DEPS 4
/* A step reference: 1 + step index, 0 = none (see hc_step.deps). */
typedef int32_t hc_ref_t;
struct hc_step {
  uint8_t kind;  /* enum hc_step_kind */
  uint8_t redop; /* REDUCE: SUM, PROD, MAX, MIN; SCALE: enum hc_scale_kind */
  uint8_t dtype;
  uint8_t lane; /* enum hc_lane */
  uint8_t coll; /* VENDOR: enum hc_coll */
  /* REDUCE: bit 0 (src0), bit 1 (src1): that source is where a receive
   * the step depends on landed, and no other step reads it, so staging
   * may point it at the window slot the bytes arrived in instead of
   * copying them out (hc_reduce_reads_landing, stage.c). */
  uint8_t landed;
  /* SIGNAL: 1 where the write needs no memory barrier of its own: only
   * the next signal of its lane must not be seen before it (a window
   * piece's signature words, read once its filled has been seen; the freed
   * of a piece in LL form, which only says that its words were read). */
  uint8_t relaxed;
  uint8_t ll;    /* COPY, WAIT: enum hc_ll */
  int32_t peer;  /* SEND, RECV; VENDOR: the root */
  uint32_t call; /* SEND, RECV: its call's signature, hc_plan.sigs[call] */
  void *dst;     /* RECV, REDUCE, COPY, SCALE */
  /* SEND, COPY and SCALE read src0, REDUCE both. SCALE's src1 points to
   * its factor (MUL: one element of dtype) or divisor (DIV: a uint64_t). */
  const void *src0, *src1;
  size_t count; /* elements (bytes for SEND, RECV, COPY) */
  /* Earlier steps that must be done first, as 1 + their index, so that a
   * zero-initialised entry means "none". */
  int32_t deps[HC_STEP_MAX_DEPS];
  uint32_t ll_flag; /* COPY with ll PUT or GET: the flag of the piece's LL words */
};

/* A buffer a plan took from a pool, and the pool it goes back to. */
struct hc_scratch {
  void *buf;
  size_t bytes;
  struct hc_scratch_pool *pool;
};

struct hc_plan {
  struct hc_step *steps;
  int nsteps, cap;
  /* hc_plan_stage's array for the steps it rebuilds, swapped with steps;
   * kept by hc_plan_clear like the others. */
  struct hc_step *spare;
  int spare_cap;
  /* hc_plan_stage's tables (the old-to-new step map, a transfer's pieces,
   * the slot rings' last users; the direct pieces), kept the same way so
   * that staging a call allocates nothing once the plan has run one. */
  hc_ref_t *stage_refs, *direct_refs;
  size_t stage_refs_cap, direct_cap;
  /* Where scratch comes from and goes back: host memory (pinned for GPU
   * plans) for what the host reads or transports move, and for GPU plans
   * device memory (dev_pool) for the data the algorithms reduce. */
  struct hc_scratch_pool *pool, *dev_pool;
  struct hc_scratch *scratch;
  int nscratch, scratch_cap;
  struct hc_net_sig *sigs; /* of the calls whose transfers the plan holds */
  uint32_t nsigs, sigs_cap;
  enum hc_algo algo; /* what ran, for logs and benchmarks */
  /* The VENDOR step of coll SEND that later send/recv calls of this plan
   * join (one group of the vendor's sends and receives, as the caller's
   * group is one for NCCL: two ranks that each send first would otherwise
   * wait for each other); 0 for none. */
  hc_ref_t open_vendor_p2p;
  enum hc_mem_kind mem; /* where the buffers live */
};

/* Scratch buffers of a comm, kept between calls so the hot path does not
 * fault in fresh pages. Any thread may take from and return to a pool (a
 * mutex guards its free list). */
struct hc_scratch_pool;
enum hc_pool_kind { HC_POOL_HOST, HC_POOL_PINNED, HC_POOL_DEVICE };
/* dev: the GPU backend of PINNED (page-locked host memory that its copies
 * reach at full speed) and DEVICE (memory of its device `device`). */
hc_result_t hc_scratch_pool_create(enum hc_pool_kind kind, const struct hc_dev_ops *dev, int device,
                                   struct hc_scratch_pool **out);
void hc_scratch_pool_destroy(struct hc_scratch_pool *pool); /* takes NULL */

/* What a plan may depend on besides the call. */
struct hc_plan_ctx {
  int rank, nranks;
  enum hc_algo algo[HC_COLL_COUNT]; /* HETCCL_ALGO per collective (hc_algo_parse); AUTO: the table's choice */
  size_t chunk_bytes;               /* HETCCL_CHUNK_BYTES */
  size_t ring_threshold;            /* HETCCL_RING_THRESHOLD */
  size_t onestep_bytes;             /* HETCCL_ONESTEP_BYTES */
  size_t rd_allreduce_bytes;        /* HETCCL_RD_ALLREDUCE_BYTES */
  bool any_gpu;                     /* some rank's buffers are GPU memory: one step is never chosen by size */
  bool all_gpu;                     /* every rank's buffers are GPU memory */
  /* All-reduce, all-gather and reduce-scatter of flat comms whose whole
   * vector (all-reduce's buffer, all-gather's output, reduce-scatter's
   * input) has up to this many bytes exchange directly (direct.c); 0: never. */
  size_t direct_max_bytes;
  size_t direct_chunk_bytes; /* a direct algorithm's piece; 0: chunk_bytes */
  bool one_host;             /* every rank is on this host (algos.c: how large a vector goes direct) */
  bool cores_shared;         /* every rank is on this host, and they outnumber its cores (algos.c: rounds) */
  int scratch_slots;         /* HETCCL_SCRATCH_SLOTS */
  int ngroups;               /* HETCCL_GROUP groups (plan/hier.c); 1 when there is one */
  const int *group_of;       /* per rank: its group, 0 .. ngroups - 1; NULL with one group */
  /* Per group, or NULL for none: the group runs the vendor's library
   * inside (its ranks each own a distinct GPU of one vendor; api/comm.c
   * decides, the same on every rank). Its members' blocks are then the
   * vendor's: count / size each, the last member also the rest. */
  const bool *group_vendor;
  /* The ranks an algorithm runs over, member i being rank members[i]
   * (rank and nranks are then the index and count of members); NULL: all. */
  const int *members;
  struct hc_plan_window *windows; /* per peer, or NULL: no peer has a window */
  /* GPU plans: per peer, or NULL for none: the transport reaches this
   * rank's GPU memory directly (net.h, hc_net_caps.device_memory), so
   * staging leaves a transfer of device memory with that peer as it is,
   * except pieces of at most gdr_min_bytes, which the transport wants in
   * memory that stays registered: the GPU copies them through slots of
   * device scratch when gdr_small_device (net.h, hc_net_caps.device_small),
   * else through pinned host slots. api/comm.c decides, from local facts:
   * a staged and a direct piece are the same bytes on the wire. */
  const bool *peer_gdr;
  size_t gdr_min_bytes;
  bool gdr_small_device;
  /* A window piece of up to this many bytes that a reduction alone reads
   * (hc_step.landed) is reduced straight from its slot, and the slot freed
   * after the reduction; larger ones, and all with 0, are copied out first.
   * api/comm.c: HETCCL_WINDOW_REDUCE_BYTES for a GPU rank whose kernels
   * read mapped host memory at its host address, no limit for a CPU rank. */
  size_t window_reduce_bytes;
};

/* A peer's window (net.h, hc_net_window) as staging uses it: a transfer
 * to or from that peer moves through the window's slots instead of the
 * transport. Pieces are numbered per direction across plans; staging
 * hands the numbers out, so plans must be staged in the order they run. */
struct hc_plan_window {
  struct hc_net_window w; /* w.bytes == 0: no window with this peer */
  size_t slot_bytes;      /* of each of the HC_WINDOW_SLOTS slots at the start of w.tx and w.rx */
  /* Pieces of up to ll_bytes (0: none) go in LL form (hc_ll) through LL
   * slots of hc_ll_words(ll_bytes) words each, HC_WINDOW_SLOTS of them per
   * direction after the data slots, numbered as those are: both ranks of
   * the pair speak it (api/comm.c), and both lay the window out alike. */
  size_t ll_bytes;
  uint64_t *ll_tx, *ll_rx;
  uint64_t tx_pieces, rx_pieces;
  int32_t last_signal[2]; /* staging's own: the plan's latest signal per direction */
};
#define HC_WINDOW_SLOTS 4
_Static_assert(HC_WINDOW_SLOTS < HC_NET_WINDOW_SIGS, "a piece's signature words must outlive its slot (net.h)");

/* Appends a step; returns its reference, or 0 when out of memory (the plan
 * remembers the failure: p->cap < 0, and hc_plan_add reports it). */
hc_ref_t hc_plan_push(struct hc_plan *p, struct hc_step s);
/* One reference that stands for refs[0..n) (NOP steps of up to
 * HC_STEP_MAX_DEPS deps each); overwrites refs. 0 when n is 0. */
hc_ref_t hc_plan_join(struct hc_plan *p, hc_ref_t *refs, int n);

/* Appends a signature to p->sigs; returns its index for hc_step.call (0,
 * with p->cap < 0, when out of memory). */
uint32_t hc_plan_sig_add(struct hc_plan *p, const struct hc_net_sig *sig);

/* An ALLTOALLV call's arrays, copied (hc_coll_args_keep_counts). */
struct hc_alltoallv_kept {
  struct hc_alltoallv_args v;
  size_t arrays[]; /* 4 * nranks */
};

/* Copies an ALLTOALLV call's four arrays into a new hc_alltoallv_kept
 * (*kept, the caller's to free) and points the call at the copies: the
 * caller may reuse its arrays once the call has returned. */
hc_result_t hc_coll_args_keep_counts(struct hc_coll_args *a, int nranks, struct hc_alltoallv_kept **kept);

/* The pipeline chunk of a comm's plans (hc_plan_ctx.chunk_bytes): with a
 * GPU rank, the window slot (HETCCL_GPU_CHUNK_BYTES in whole pages), else
 * HETCCL_CHUNK_BYTES. */
size_t hc_plan_chunk_bytes(bool any_gpu);

/* Fills the fields of x that come from settings (HETCCL_ALGO, the chunk,
 * the size limits of the algorithms, the scratch slots) for a comm with or
 * without a GPU rank, and sets any_gpu; the caller sets the comm's shape
 * (rank, nranks, all_gpu, hosts, groups, windows). One place, so that
 * hetccl-info and the simulator plan as the library does. */
hc_result_t hc_plan_ctx_from_params(struct hc_plan_ctx *x, bool any_gpu);

/* Appends the steps of one call to plan (a group appends several calls to
 * one plan). Allocates scratch as needed; hc_plan_reset frees everything. */
hc_result_t hc_plan_add(struct hc_plan *plan, const struct hc_plan_ctx *ctx, const struct hc_coll_args *a);
void hc_plan_reset(struct hc_plan *plan);
/* Empties plan for the next call as hc_plan_reset does, but keeps the room
 * of its arrays, so that a plan object reused call after call (a GPU
 * comm's, api/proxy.c) allocates nothing for them once grown. */
void hc_plan_clear(struct hc_plan *plan);

/* The algorithm table (algos.c): one row per collective and algorithm.
 * A call gets the first row of its collective, in table order, that
 * applies to it and that the automatic choice takes, unless HETCCL_ALGO
 * forces another row of its collective that applies. The last row of each
 * collective applies to every call and is always taken, so every call
 * gets a row. Every rank chooses the same row: the predicates read only
 * the call and what every rank's context holds alike. */
struct hc_alg_io;
struct hc_algo_desc {
  enum hc_coll coll;
  enum hc_algo algo;
  /* Can it run this call on this comm at all? NULL: always. */
  bool (*applies)(const struct hc_plan_ctx *x, const struct hc_coll_args *a);
  /* Does the automatic choice take it (once it applies)? NULL: always. */
  bool (*chosen)(const struct hc_plan_ctx *x, const struct hc_coll_args *a);
  /* Appends the call's steps (plan_priv.h: struct hc_alg_io). */
  hc_result_t (*build)(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                       struct hc_alg_io io);
  const char *what;        /* the algorithm in a few words */
  const char *applies_doc; /* the two predicates in words, for hetccl-info --algos */
  const char *chosen_doc;
};
/* The rows, in the order the choice tries them; *n: their number. */
const struct hc_algo_desc *hc_algo_table(size_t *n);
/* The row hc_plan_add builds call a with (NULL only for an unknown collective). */
const struct hc_algo_desc *hc_algo_choose(const struct hc_plan_ctx *x, const struct hc_coll_args *a);

/* Last pass over every plan. A transfer with a peer that has a window
 * becomes window pieces (for host and GPU plans alike: both ranks of the
 * pair use the window). Every other transfer is cut into pieces of at most
 * ctx->chunk_bytes (every rank cuts the same way, whatever its memory).
 * With device_memory (a GPU plan), also rewrites every piece of device
 * memory whose transport cannot reach device memory (ctx->peer_gdr) into
 * transfers of pinned host slots (copy device -> slot, then send; receive,
 * then copy slot -> device), with separate slot rings for sends and
 * receives; host scratch is pinned already and is sent as it is. Small
 * pieces with a peer the transport reaches device memory for go the same
 * way through slots of device scratch (ctx->gdr_small_device). */
hc_result_t hc_plan_stage(struct hc_plan *plan, const struct hc_plan_ctx *ctx, bool device_memory);

#endif
