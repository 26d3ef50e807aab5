/*
 * net: transports that move bytes between buffers of two ranks. They know
 * bytes, not collectives: socket (TCP), shm (same host), ib (RDMA verbs).
 *
 * Matching: messages between one pair of ranks on one transport are matched
 * in the order they are posted, sends against receives, like NCCL's p2p. A
 * receive posted for n bytes that meets a message of another length fails
 * with HC_ERR_USAGE naming both lengths ("mismatched counts").
 *
 * Signatures: isend / irecv take a short record of the call a
 * transfer belongs to (struct hc_net_sig, filled by plan/). The transports
 * carry it in a header they send anyway and compare it, as bytes, with the
 * receive's before they deliver anything; on a difference both ends fail
 * with HC_ERR_USAGE and the text of hc_net_args.sig_explain, the receiver
 * at once, the sender once it hears of it (its receive from that peer, or
 * its next call: a send that was handed over completes before the check).
 *
 * Nothing here blocks: connect returns NULL until the connection is up, test
 * reports done = 0 until the request completes. The one call that sleeps is
 * wait_blocking, which the progress engine calls when it has nothing to do.
 */
#ifndef HC_NET_H_
#define HC_NET_H_

#include <stdatomic.h>

#include "../util/util.h"

/* What call of the comm a transfer belongs to; opaque here (plan.h,
 * hc_plan_sig, packs and explains it). All zeroes: "none", what isend and
 * irecv carry when given no signature (NULL). */
struct hc_net_sig {
  uint64_t w[2];
};
static inline bool hc_net_sig_equal(const struct hc_net_sig *a, const struct hc_net_sig *b) {
  return a->w[0] == b->w[0] && a->w[1] == b->w[1];
}
/* Writes into buf the text of a mismatch: rank me called what mine says,
 * rank peer what theirs says; me_sends: me is the sending end. */
typedef void (*hc_net_sig_explain_fn)(char *buf, size_t len, int me, const struct hc_net_sig *mine, int peer,
                                      const struct hc_net_sig *theirs, bool me_sends);
/* The failure both ends of a mismatch report, through explain (NULL: the
 * raw words). Returns HC_ERR_USAGE. */
hc_result_t hc_net_sig_fail(hc_net_sig_explain_fn explain, int me, const struct hc_net_sig *mine, int peer,
                            const struct hc_net_sig *theirs, bool me_sends);

/* A mismatch a rank found as the receiving end of a pair, in memory both
 * ranks map (shm: the owner's side of the segment; a window's), so that
 * the other end names both calls too: got is what the peer sent, want
 * what the finder expected. set is stored last, and only once. */
struct hc_net_mismatch {
  atomic_uint set;
  struct hc_net_sig got, want;
};
void hc_net_mismatch_publish(struct hc_net_mismatch *m, const struct hc_net_sig *got, const struct hc_net_sig *want);
/* The failure of the other end, once theirs->set: rank me sent got, rank
 * peer (the finder) expected want. Returns HC_ERR_USAGE. */
hc_result_t hc_net_mismatch_fail(const struct hc_net_mismatch *theirs, hc_net_sig_explain_fn explain, int me, int peer);

#define HC_NET_HANDLE_BYTES 64
/* What peers need to reach this rank's transport; published at init. */
struct hc_net_handle {
  uint8_t bytes[HC_NET_HANDLE_BYTES];
};

struct hc_net_args {
  int rank, nranks;
  uint8_t secret[16];                /* from the unique id */
  const atomic_bool *abort_flag;     /* may be NULL */
  size_t window_bytes;               /* shm: the window this rank wants per direction (0: none) */
  int socket_nstreams;               /* socket: streams per peer; 0: HETCCL_SOCKET_NSTREAMS */
  int device_kind;                   /* enum hc_mem_kind of the comm's buffers here: ib looks at GPU
                                * drivers (dma-buf) only for a GPU comm, never loading them for
                                * a CPU one */
  hc_net_sig_explain_fn sig_explain; /* may be NULL */
  int device_id;                     /* a GPU comm's device: ib takes the port nearest it (net/topo.c) */
};

/*
 * A window: host memory that both ranks of a pair map, one region per
 * direction, with two counters each. The transport only provides it; the
 * plans that use it own the protocol (plan/stage.c): the sender writes
 * piece k into slot k % nslots and publishes filled = k + 1, the receiver
 * reads it and publishes freed = k + 1, and the sender reuses the slot
 * once freed has passed it. A GPU rank registers the regions with its
 * driver, so that its copies move the bytes in and out directly: no host
 * copy between two GPU ranks of one host.
 */
#define HC_NET_WINDOW_SIGS 8 /* signature slots per direction (at least a plan's window slots) */
struct hc_net_window {
  uint8_t *tx, *rx; /* this rank writes tx and reads rx */
  size_t bytes;     /* of each; 0: the pair has no window */
  atomic_ullong *tx_filled, *tx_freed, *rx_filled, *rx_freed;
  /* Control words beside the counters: 2 x HC_NET_WINDOW_SIGS words per
   * direction, piece k's signature (hc_net_sig) at [2j, 2j + 1], j = k %
   * HC_NET_WINDOW_SIGS, written by the sender before it publishes filled,
   * read by the receiver after. There are more of them than slots, so that
   * a piece's words outlive its slot: the sender writes piece k's only once
   * the receiver has freed piece k - HC_NET_WINDOW_SIGS + slots, which lets
   * a host thread that watches a GPU receiver's stream check them after
   * the stream has used the piece (exec/engine.c). */
  atomic_ullong *tx_sig, *rx_sig;
  /* Liveness between the pair's progress engines (exec/engine.c): each
   * side bumps its own heartbeat while it runs, and on a failure stores
   * the culprit's rank + 1 in its notice; the peer reads both. */
  atomic_ullong *heartbeat, *peer_heartbeat;
  atomic_int *notice, *peer_notice;
  /* A signature mismatch found in a piece of this window (the receiving
   * end publishes it before its notice), this rank's and the peer's. */
  struct hc_net_mismatch *mismatch, *peer_mismatch;
  /* The mapping that holds both windows and the four counters: what a GPU
   * rank registers with its driver, so that its streams copy into the
   * slots and wait on and write the counters. */
  void *mapping;
  size_t mapping_bytes;
};

struct hc_net_caps {
  /* Sends from and receives into GPU memory of the comm's device go
   * directly (the adapter reads and writes it: GPUDirect RDMA), for
   * messages of more than device_min_bytes; smaller ones must be host
   * memory (a transport may copy them with the CPU). A registration was
   * tried at open and worked. */
  bool device_memory;
  size_t device_min_bytes;
  /* Messages of at most device_min_bytes may be GPU memory too, where it
   * stays registered (a plan's device scratch: the transport registers
   * each buffer it meets, which costs more than a small copy): the plans
   * copy them there on the GPU instead of staging them through host
   * memory. Only with device_memory. */
  bool device_small;
  /* How GPU memory goes ("dma-buf on mlx5_0") or why it is staged, for
   * the comm's INFO line; "" where the transport has nothing to say. */
  char device_path[200];
  /* Sends from this size may be pulled: the receiver reads the sender's
   * buffer, one copy (shm's CMA, where the pair's probe allows it). 0:
   * never. */
  size_t pull_min_bytes;
};

/* Which sends a peer may pull (choose_pulls). */
enum hc_net_pulls {
  HC_NET_PULLS_DEFAULT, /* the transport's own rules (shm: a lone send goes through slots) */
  HC_NET_PULLS_ALL,     /* every send that can be pulled */
  HC_NET_PULLS_NONE,    /* none: the transport's own copies */
};

/* 4: isend / irecv may complete at once (*req NULL); 3: choose_pulls
 * replaces allow_pulls; 2: isend / irecv take the signature */
#define HC_NET_ABI 4
struct hc_net_ops {
  uint32_t size, abi;
  const char *name; /* "socket" */
  /* Per communicator: starts listening; *handle is published to peers. */
  hc_result_t (*open)(const struct hc_net_args *a, struct hc_net_caps *caps, struct hc_net_handle *handle, void **ctx);
  /* Nonblocking: *conn stays NULL until the connection to peer is up and
   * authenticated. Both ranks of a pair call it; call again until non-NULL. */
  hc_result_t (*connect)(void *ctx, int peer, const struct hc_net_handle *peer_handle, void **conn);
  /* The buffer must stay valid until test reports done. sig: the
   * signature of the transfer's call (see the top of this file), copied;
   * NULL: none (all zeroes). A transfer that completed within the call
   * (shm: a small send with the ring free) returns no request: *req is
   * NULL, the buffer is free again, and there is nothing to test. */
  hc_result_t (*isend)(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req);
  hc_result_t (*irecv)(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req);
  /* Makes progress; done = 1 frees req. A peer that closed is HC_ERR_REMOTE
   * naming it. */
  hc_result_t (*test)(void *req, int *done);
  /* Sleeps until some pending request or connection of ctx can progress, or
   * timeout_ms passes. */
  hc_result_t (*wait_blocking)(void *ctx, int timeout_ms);
  /* Frees ctx, its connections and any requests still pending. */
  hc_result_t (*close)(void *ctx);
  /* Optional (NULL: never a window). The pair's window, once conn is up. */
  void (*window)(void *conn, struct hc_net_window *w);
  /* Optional (NULL: no stall probes; test with HC_HAS_OP). A rank that has
   * waited for the peer for a while (exec.c) publishes the signature of
   * the call it waits in (all zeroes: it waits no more), which the peer
   * reads with stall_peek: theirs, and *gen, a number that changes with
   * every publish. A rank that finds its call differs says so with
   * mismatch_found before it fails the connection, so that the peer names
   * both calls (got: the peer's call, want: this rank's). All three or
   * none; they never block. shm, socket and ib have them. */
  void (*stall_publish)(void *conn, const struct hc_net_sig *mine);
  void (*stall_peek)(void *conn, struct hc_net_sig *theirs, uint64_t *gen);
  void (*mismatch_found)(void *conn, const struct hc_net_sig *got, const struct hc_net_sig *want);
  /* Optional (NULL: the transport never lets a peer pull; caps
   * pull_min_bytes). How this rank's sends travel from now on, as the comm
   * chose by timing both ways (api/pull_choice.c). */
  void (*choose_pulls)(void *ctx, enum hc_net_pulls way);
}; /* append only; a change of meaning bumps HC_NET_ABI */

extern const struct hc_net_ops hc_net_socket;
/* RDMA verbs (InfiniBand, RoCE v2) over libibverbs opened at run time;
 * open fails (HC_ERR_SYSTEM, saying why) where no usable device exists.
 * See net/ib.c. */
extern const struct hc_net_ops hc_net_ib;
/* What ib finds on this host without opening a transport: *usable, and a
 * line saying which device and port, or why none (hetccl-info, init). */
void hc_net_ib_probe(bool *usable, char *what, size_t len);
/* Which port ib would give each GPU of device_kind (a GPU kind) and why,
 * one line per GPU into out (hetccl-info). */
void hc_net_ib_gpu_ports(int device_kind, char *out, size_t len);
/* How ib would reach memory of device_kind (a GPU kind) under HETCCL_GDR:
 * a line naming the path and what the host has (hetccl-info). */
void hc_net_ib_gdr_probe(int device_kind, char *what, size_t len);
/* ---- topology (net/topo.c): the RDMA device nearest a GPU ---- */

/* A PCI device's place: its path under sysfs's devices/ from the root
 * complex down, and its NUMA node (-1: unknown). */
struct hc_topo_node {
  char path[256];
  int numa;
};
/* How near two devices are, larger is nearer: across sockets, the same
 * NUMA node, the same root complex, or below a common bridge (a PCIe switch
 * or root port), HC_TOPO_SWITCH + 1 for each deeper bridge they share. */
enum { HC_TOPO_SYSTEM = 0, HC_TOPO_NUMA = 1, HC_TOPO_HOST_BRIDGE = 2, HC_TOPO_SWITCH = 3 };
int hc_topo_closeness(const struct hc_topo_node *a, const struct hc_topo_node *b);
const char *hc_topo_closeness_name(int closeness);
/* The index of the nearest of nics[0..n) to gpu (-1 when n is 0); equally
 * near ones are dealt out by spread (the GPU's index on its node), so that
 * a node's GPUs use all of them. Pure: no sysfs. */
int hc_topo_nearest(const struct hc_topo_node *gpu, const struct hc_topo_node *nics, int n, int spread);
/* The node of a PCI device by its bus id ("0000:3b:00.0", any case, as the
 * drivers spell it), or of an RDMA device by name, read from sysfs
 * (HETCCL_SYSFS_ROOT, a test's fake tree, or /sys). */
hc_result_t hc_topo_pci_node(const char *bus_id, struct hc_topo_node *out);
/* Where sysfs is read: HETCCL_SYSFS_ROOT (a test's fake tree), else /sys
 * (the PCI tree here, loaded kernel modules in net/ib_mem.c). */
const char *hc_net_sysfs_root(void);
hc_result_t hc_topo_ib_node(const char *name, struct hc_topo_node *out);

/* Ranks of one host (same pid namespace and /dev/shm); see net/shm.c. */
extern const struct hc_net_ops hc_net_shm;
/* Before a failing comm closes its connections: tells every peer that the
 * failure was caused by rank culprit, so that a peer whose connection to
 * this rank then fails blames culprit (hc_blame) rather than this rank.
 * Best effort, never blocks. */
void hc_net_socket_notice(void *ctx, int culprit);
void hc_net_shm_notice(void *ctx, int culprit);

/* ---- a comm's transports (net/net.c) ---- */

/* The transports a comm may use, in hc_transports[] order (net.c): that
 * order indexes the records' handles and a comm's contexts. */
#define HC_NET_NTRANSPORTS 3

/* What a rank publishes about its transports at init (all-gathered). Every
 * rank chooses a pair's transport from the pair's two records alone, so
 * both ends choose the same. */
struct hc_net_record {
  uint64_t host;                                   /* hc_net_host_id */
  struct hc_net_handle handle[HC_NET_NTRANSPORTS]; /* valid where open */
  uint8_t open[HC_NET_NTRANSPORTS];                /* transport t opened here */
  uint8_t window;                                  /* asked for windows: a pair with such a rank has them */
  uint8_t pad[4];
};

/* How this rank reaches one peer. */
struct hc_link {
  const struct hc_net_ops *net; /* NULL for this rank itself */
  void *ctx;                    /* the transport's per-comm context */
  struct hc_net_handle handle;  /* the peer's, from the init all-gather */
  void *conn;                   /* NULL until connected */
  struct hc_net_caps caps;      /* what net said it can do, when it opened here */
  int32_t pid;                  /* a same-host peer's process (liveness of its windows), else 0 */
};

/* HC_ERR_INTERNAL, with a message naming the transport and op: net (NULL:
 * the link of a rank to itself) lacks op. */
hc_result_t hc_net_missing_op(const struct hc_net_ops *net, const char *op);
#define HC_LINK_CALL(l, op, ...)                                                              \
  ((l)->net != NULL && HC_HAS_OP((l)->net, struct hc_net_ops, op) ? (l)->net->op(__VA_ARGS__) \
                                                                  : hc_net_missing_op((l)->net, #op))

/* One wrapper per op that a link's users call, the only way to call one
 * outside net/: each passes the link's context or connection, and fails
 * with a message where the transport lacks the op. The contracts are
 * those of struct hc_net_ops. */
/* Connects l to peer: l->conn stays NULL until the connection is up. */
static inline hc_result_t hc_link_connect(struct hc_link *l, int peer) {
  return HC_LINK_CALL(l, connect, l->ctx, peer, &l->handle, &l->conn);
}
static inline hc_result_t hc_link_isend(const struct hc_link *l, const void *buf, size_t n,
                                        const struct hc_net_sig *sig, void **req) {
  return HC_LINK_CALL(l, isend, l->conn, buf, n, sig, req);
}
static inline hc_result_t hc_link_irecv(const struct hc_link *l, void *buf, size_t n, const struct hc_net_sig *sig,
                                        void **req) {
  return HC_LINK_CALL(l, irecv, l->conn, buf, n, sig, req);
}
/* req: an isend or irecv of l. */
static inline hc_result_t hc_link_test(const struct hc_link *l, void *req, int *done) {
  return HC_LINK_CALL(l, test, req, done);
}
/* Sleeps until some request or connection of l's transport in this comm
 * (of every link over it) can progress, or timeout_ms passes. */
static inline hc_result_t hc_link_wait(const struct hc_link *l, int timeout_ms) {
  return HC_LINK_CALL(l, wait_blocking, l->ctx, timeout_ms);
}
/* Whether l's transport gives pairs windows (the window op). */
static inline bool hc_link_offers_window(const struct hc_link *l) {
  return l->net != NULL && HC_HAS_OP(l->net, struct hc_net_ops, window);
}
/* The pair's window; w->bytes 0 (and every pointer NULL) where it has none
 * or the connection is not up. */
static inline void hc_link_window(const struct hc_link *l, struct hc_net_window *w) {
  *w = (struct hc_net_window){0};
  if (l->conn != NULL && hc_link_offers_window(l)) l->net->window(l->conn, w);
}
/* Whether l's transport has the stall probes (all three ops) and l is up. */
static inline bool hc_link_probes(const struct hc_link *l) {
  return l->conn != NULL && l->net != NULL && HC_HAS_OP(l->net, struct hc_net_ops, stall_publish) &&
         HC_HAS_OP(l->net, struct hc_net_ops, stall_peek) && HC_HAS_OP(l->net, struct hc_net_ops, mismatch_found);
}
/* The stall probes, where hc_link_probes(l); no-ops elsewhere. */
static inline void hc_link_stall_publish(const struct hc_link *l, const struct hc_net_sig *mine) {
  if (hc_link_probes(l)) l->net->stall_publish(l->conn, mine);
}
static inline void hc_link_stall_peek(const struct hc_link *l, struct hc_net_sig *theirs, uint64_t *gen) {
  *theirs = (struct hc_net_sig){{0, 0}};
  *gen = 0;
  if (hc_link_probes(l)) l->net->stall_peek(l->conn, theirs, gen);
}
static inline void hc_link_mismatch_found(const struct hc_link *l, const struct hc_net_sig *got,
                                          const struct hc_net_sig *want) {
  if (hc_link_probes(l)) l->net->mismatch_found(l->conn, got, want);
}

/* The transports one comm opened: ctx[t] of hc_transports[t], NULL where
 * it is not open here. */
struct hc_net_set {
  void *ctx[HC_NET_NTRANSPORTS];
  struct hc_net_caps caps[HC_NET_NTRANSPORTS];
};

/* Over the transports of s: the smallest send a peer may pull, 0 where
 * none may (caps); and how sends travel from now on (the op
 * choose_pulls). */
size_t hc_net_set_pull_min_bytes(const struct hc_net_set *s);
void hc_net_set_choose_pulls(const struct hc_net_set *s, enum hc_net_pulls way);

/* One entry of hc_transports[]: how a comm uses a transport. */
enum hc_net_use { HC_NET_USE_OFF, HC_NET_USE_OPTIONAL, HC_NET_USE_REQUIRED };
struct hc_transport {
  const struct hc_net_ops *ops;
  const char *links_name; /* how init's summary counts its links: "over shm" */
  /* From the parameters and args: whether this rank opens it, and whether
   * a failure to open then fails init (optional: said at INFO, the pairs
   * go over another). HC_ERR_USAGE for a bad parameter value. */
  hc_result_t (*use)(const struct hc_net_args *a, enum hc_net_use *use);
  /* What makes it required, for the failure's text ("HETCCL_NET=IB");
   * NULL: the transport's own failure is the text. */
  const char *required_by;
  /* Called only where both records say it is open: the priority of this
   * transport for the pair (the highest wins), or HC_NET_NO. Depends on
   * the two records only, and gives the same either way round. */
  int (*can_connect)(const struct hc_net_record *self, const struct hc_net_record *peer);
  /* Optional (NULL: none): before a failing comm closes its connections,
   * tells every peer the rank it blames (hc_net_socket_notice). */
  void (*notice)(void *ctx, int culprit);
  /* Its connections map memory that a GPU comm's streams may still touch
   * when the comm fails: hc_net_set_close keeps it open when asked. */
  bool maps_memory;
};
#define HC_NET_NO (-1)
extern const struct hc_transport hc_transports[HC_NET_NTRANSPORTS];

/* Ranks in one network and pid namespace of one booted host, seeing one
 * /dev/shm, share this value; others do not, nor do ranks on different fake
 * hosts (fake_host >= 0: HETCCL_FAKE_HOSTS, tests only). */
uint64_t hc_net_host_id(int fake_host);
/* Opens each transport this rank uses (hc_transport.use) and fills mine:
 * this host, the handles and which are open. On failure closes what it
 * opened. */
hc_result_t hc_net_set_open(struct hc_net_set *set, const struct hc_net_args *a, struct hc_net_record *mine);
/* The link from a rank with record mine to rank peer (record theirs): the
 * open transport of the highest priority for the pair. HC_ERR_USAGE, naming
 * both ranks and what each opened, when none can connect them. *t: its
 * index in hc_transports. */
hc_result_t hc_net_link_choose(const struct hc_net_set *set, int me, const struct hc_net_record *mine, int peer,
                               const struct hc_net_record *theirs, struct hc_link *link, int *t);
/* Every link's transport sends from and receives into device memory at
 * every size (hc_net_caps.device_memory, device_min_bytes 0), so that no
 * plan needs host staging; true when there are none. */
bool hc_net_links_reach_device(const struct hc_link *links, int nranks);
/* A failing comm: tells every peer the rank it blames (culprit >= 0). */
void hc_net_set_notice(const struct hc_net_set *set, int culprit);
/* Closes the transports of set, all of them or, with keep_mapped, those
 * whose memory may still be in use (maps_memory); links (nranks, may be
 * NULL) over a closed one are cleared. */
void hc_net_set_close(struct hc_net_set *set, struct hc_link *links, int nranks, bool keep_mapped);

/* Registered host memory (hetcclMemAlloc / hetcclMemFree; net/shm_mem.c):
 * page-aligned host memory that shm peers on this host read directly when
 * it is the buffer of an isend. Any thread. alloc: HC_ERR_ARG for a NULL ptr
 * or size 0, HC_ERR_SYSTEM when the memory cannot be had; free: NULL is a
 * no-op, a pointer alloc did not return is HC_ERR_ARG. */
hc_result_t hc_net_mem_alloc(void **ptr, size_t size);
hc_result_t hc_net_mem_free(void *ptr);

#endif
