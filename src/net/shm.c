/*
 * net/shm: the shared-memory transport between ranks of one host, setup
 * half. Owns the per-pair segments, how a pair comes up, sleeping, peer
 * liveness and cleanup; the data path is shm_progress.c, the registry of
 * hetcclMemAlloc buffers shm_mem.c (terms in shm_priv.h). Knows bytes,
 * never collectives.
 *
 * Design, and why:
 *
 * - One segment per pair, in /dev/shm, holding a channel per direction: a
 *   ring of HC_SHM_NDESC descriptors, each with room for a small message
 *   inline, and a ring of HETCCL_SHM_SLOTS slots of HETCCL_SHM_SLOT_BYTES.
 *   A descriptor is handed over by a word in its own first line, which
 *   the receiver polls (one line per small message: shm_progress.c);
 *   the other counters (tail, slot_head, slot_tail) sit on their own
 *   128-byte lines and only grow. The writer stores them after the data (a
 *   release store, or seq_cst: see Sleeping), the reader loads them, so
 *   the hot path is loads and stores, no locks, no syscalls. The segment is
 *   fallocated and mapped with MAP_POPULATE at connect: a full /dev/shm is
 *   an error there, not a SIGBUS later, and the hot path takes no page
 *   faults.
 *
 * - How a message travels (sender's choice, per message, in isend):
 *   INLINE  n <= HETCCL_SHM_INLINE_BYTES: copied into the descriptor. One
 *           copy each side, the send completes at once; the 8-byte
 *           all-reduce costs one cache-line round trip per direction.
 *   REG     the buffer lies in a hetcclMemAlloc segment (a memfd) and the
 *           peer can open this process's fds: the receiver maps the
 *           segment once (cached per connection) and memcpy()s straight out
 *           of it. Single copy, no syscall per message. The send completes
 *           when the receiver acks (advances tail past it).
 *   CMA     n >= HETCCL_SHM_CMA_MIN_BYTES and the peer can process_vm_readv
 *           this process: the receiver pulls from the sender's buffer into
 *           its own, one syscall per progress pass. Single copy; completes
 *           on the ack (a rendezvous: a send waits for its receive). Not
 *           for a lone send (HETCCL_SHM_LONE_SEND_SLOTS): one posted while
 *           this rank has no receive pending and no send to another peer
 *           (the root of a 2-rank broadcast or of a chain) goes through
 *           slots, where the sender's otherwise idle CPU copies too.
 *   SLOTS   otherwise: cut into parts of one slot, the sender writes part
 *           k+1 while the receiver reads part k (pipelined double copy);
 *           the send completes when its last part is in a slot. Messages
 *           from HETCCL_SHM_NT_MIN_BYTES (default 0: none) are written with
 *           non-temporal stores.
 *   Measured (tests/unit/test_net_shm.c perf, 2 processes, GB/s each way
 *   with both directions at once / one way; 16-core Xeon VM):
 *              16K        64K         512K        64M
 *     CMA      5.6/9.3    11.5/13.6   8.1/10.5    3.8/4.5
 *     REG      14.8/20.6  17.9/21.2   10.8/11.5   5.4/6.1
 *     SLOTS    5.3/8.9    6.0/15.6    5.4/10.5    3.7/6.8
 *     SLOTS+NT 4.0/6.5    4.5/9.1     4.8/9.1     2.9/6.0
 *   Hence: CMA from 64K (it ties with slots at 16K and wins both ways from
 *   64K when both directions are busy, as in a ring; one way, slots win
 *   for huge messages only because two cores copy, hence slots for lone
 *   sends; on a 2-core EPYC VM pulls ran at about 3 GB/s and one-way
 *   slots at 9-15, docs/perf.md, Broadcast), registered buffers
 *   whenever possible, and no streaming stores (the pipelined receiver
 *   reads each part while it is still cached: streaming only sends it to
 *   DRAM and back). Slots of 64K, 256K and 1M measured alike; 256K keeps a
 *   pair's segment at 4.6 MiB. The 8-byte round trip is 1.2 us there
 *   (0.2-0.4 us on a 2-core VM).
 *   Which pulls work is probed once per pair during the handshake (each
 *   side reads a word of the other by CMA, and opens the other's fd of the
 *   segment through /proc/<pid>/fd), so a refusal (Yama, seccomp in
 *   containers) costs one INFO line, never a failed transfer. To let CMA
 *   through Yama's ptrace_scope=1, open() calls
 *   prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) when HETCCL_SHM_CMA=1: any
 *   process of the same user may then attach to this one, which it could
 *   with ptrace_scope=0 anyway.
 *   Pulls are rendezvous: a plan must not make a receive wait for a send
 *   to the same peer completing (TCP has the same limit beyond its socket
 *   buffers; here it starts at HETCCL_SHM_CMA_MIN_BYTES).
 *
 * - Passes are short: one progress pass copies at most
 *   HETCCL_SHM_PASS_BYTES per direction (at least one slot part), then
 *   returns, so a rank's reductions and its other peers get their turn
 *   between pieces of a large message. End to end (hetccl-perf all_reduce
 *   over shm, ring, 512K chunks, same host) 8 ranks went from 0.6-0.7 GB/s
 *   with 4 MiB passes (worse than TCP's 0.9) to 1.6-2.1 GB/s with 32K-128K,
 *   and CMA then beats slots at every rank count (slots: 0.8-1.2 at 8).
 *   The 8-byte all-reduce of 2 ranks took 2.6 us (TCP: 8-10 us).
 *
 * - Who makes the segment: the lower rank creates
 *   /dev/shm/hetccl-<pid>-<pidns>-<lower id>-<higher id> from the two
 *   handles alone (no extra round trip); the higher rank opens it, retrying
 *   until it exists and says ready. Both sides then prove the job secret
 *   (HMAC over the name, each with its role) before either trusts the
 *   other. The opener unlinks the name right after mapping, so the segment
 *   lives only as long as a mapping does: a crash leaves nothing behind.
 *   What can be left is a segment whose creator died before its peer mapped
 *   it; open() removes every hetccl-* entry of this pid namespace whose
 *   creator pid is gone. Mode 0600: other users cannot open it.
 *
 * - Sleeping: each side has a waiting flag and a doorbell word. For every
 *   busy pair wait_blocking sets the flag and reads the doorbell, then
 *   takes a last look (a progress pass) at each, and then sleeps in one
 *   futex_waitv over the doorbells of all of them (shared futexes, not
 *   private), in slices of HC_SHM_SLICE_MS. A publisher stores its word
 *   (a counter, or a descriptor's posted word) and then reads the flag,
 *   and only when it can claim the flag (exchange to 0) bumps the
 *   doorbell and calls FUTEX_WAKE: one wake per sleep.
 *   The store and the load must not pass each other on either side (store
 *   buffering: then one of the two sides sees the other's). The sleeper
 *   pays for that: between its flag stores and its last looks it calls
 *   membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes every running
 *   thread of every process registered for it (each rank registers at
 *   open) pass a full fence, so the publisher's counter store is a plain
 *   release store (light_publish). Where the kernel has no such fence, or
 *   HETCCL_SHM_MEMBARRIER=0, on either side, both sides use seq_cst, an
 *   xchg per publish on x86 that stalls the publisher on the peer's line
 *   (2-core VM, 2 ranks, 8 B all-reduce: 0.60-0.66 us with release
 *   stores, 0.76-1.07 with the xchg; docs/perf.md). A sleep costs the
 *   membarrier (an IPI to every CPU running a rank: 10-12 us there).
 *   So while both sides spin, nothing but the counters and the payload
 *   crosses between the cores, and no syscall is made. Kernels without
 *   futex_waitv sleep on one doorbell in 1 ms slices.
 *
 * - A dead peer: a pidfd of the peer (pollable, readable once it exits,
 *   zombie included) is checked after every sleep slice and by test() when
 *   nothing moves (every HC_SHM_ALIVE_PASSES-th such pass, at most every
 *   HC_SHM_ALIVE_NS), so a SIGKILLed rank is HC_ERR_REMOTE naming it
 *   within a slice. A rank that closes or fails its
 *   connection sets its side's closed flag: the other side's pending
 *   requests fail with HC_ERR_REMOTE, like a socket's EOF, after it has
 *   consumed whatever was published before.
 *
 * Blocking: only wait_blocking sleeps. connect() creates, maps and probes
 * without waiting for the peer; test() copies.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../util/auth.h"
#include "shm_priv.h"

#define HC_SHM_DIR "/dev/shm/"
/* Sleep slices: long enough to cost nothing, short enough that abort and a
 * dead peer are seen quickly. */
#define HC_SHM_SLICE_MS 50
#define HC_SHM_ALIVE_NS (20ull * 1000000ull)
#define HC_SHM_MAX_WAITV 128 /* FUTEX_WAITV_MAX */

/* linux/futex.h's struct futex_waitv, spelled out for older headers. */
struct hc_futex_waitv {
  uint64_t val, uaddr;
  uint32_t flags, reserved;
};
#define HC_FUTEX_32 2u

/* ---- small helpers ---- */

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static uint64_t inode_of(const char *path, uint64_t *dev) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (dev) *dev = (uint64_t)st.st_dev;
  return (uint64_t)st.st_ino;
}

static void futex_wake_all(atomic_uint *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- connection state ---- */

void hc_net_shm_notify(struct hc_shm_conn *c) {
  /* The caller's counter store, then this load; the sleeper stores
   * waiting, reads the doorbell, fences (membarrier, or its seq_cst
   * accesses), then looks at the counters: one of the two sees the other's
   * store ("Sleeping" above). The compiler must not hoist the load either.
   * The doorbell's line is touched only when the peer sleeps, so a
   * spinning peer costs nothing here. */
  atomic_signal_fence(memory_order_seq_cst);
  if (atomic_load(&c->them->waiting) && atomic_exchange(&c->them->waiting, 0)) {
    /* Claimed: later publishes before the peer sleeps again make no
     * syscall; its futex sees the doorbell moved and returns at once. */
    atomic_fetch_add(&c->them->doorbell, 1);
    futex_wake_all(&c->them->doorbell);
  }
}

hc_result_t hc_net_shm_conn_fail(struct hc_shm_conn *c, hc_result_t r) {
  if (c->failed != HC_OK) return r;
  c->failed = r;
  /* A peer that failed because of another rank said so before closing. */
  const int notice = c->them ? atomic_load(&c->them->notice) : 0;
  c->culprit = r != HC_ERR_REMOTE ? -1 : notice > 0 ? notice - 1 : c->peer;
  if (c->culprit >= 0 && c->culprit != c->peer) {
    char text[sizeof(c->err)];
    snprintf(text, sizeof(text), "%s; rank %d failed because of rank %d", hc_last_error(), c->peer, c->culprit);
    hc_set_last_error(text);
  }
  hc_blame(c->culprit);
  if (c->me != NULL && c->culprit >= 0) {
    int none = 0;
    atomic_compare_exchange_strong(&c->me->notice, &none, c->culprit + 1);
  }
  snprintf(c->err, sizeof(c->err), "%s", hc_last_error());
  if (c->linked) unlink(c->name);
  c->linked = false;
  if (c->me != NULL) {
    atomic_store(&c->me->closed, 1);
    hc_net_shm_notify(c);
  }
  return r;
}

hc_result_t hc_net_shm_conn_check(const struct hc_shm_conn *c) {
  if (c->failed == HC_OK) return HC_OK;
  hc_set_last_error(c->err);
  hc_blame(c->culprit);
  return c->failed;
}

hc_result_t hc_net_shm_check_alive(struct hc_shm_conn *c, bool force) {
  uint64_t now = hc_now_ns();
  if (!force && now - c->last_alive_ns < HC_SHM_ALIVE_NS) return HC_OK;
  c->last_alive_ns = now;
  if (!hc_pid_exited(c->peer_handle.pid, c->pidfd)) return HC_OK;
  return hc_net_shm_conn_fail(c,
                              HC_FAIL(HC_ERR_REMOTE, "shm: rank %d (pid %d) exited; rank %d lost its connection to it",
                                      c->peer, (int)c->peer_handle.pid, c->ctx->rank));
}

static hc_result_t conn_get(struct hc_shm_ctx *ctx, int peer, struct hc_shm_conn **out) {
  *out = ctx->conns[peer];
  if (*out != NULL) return HC_OK;
  struct hc_shm_conn *c;
  HC_TRY(hc_calloc(&c, 1, sizeof(*c), "a shm connection"));
  c->ctx = ctx;
  c->peer = peer;
  c->side = ctx->rank < peer ? 0 : 1;
  c->pidfd = -1;
  c->seg_fd = -1;
  for (int i = 0; i < HC_SHM_REG_CACHE; i++) c->regs[i].fd = -1;
  ctx->conns[peer] = c;
  *out = c;
  return HC_OK;
}

static void conn_destroy(struct hc_shm_conn *c) {
  if (c == NULL) return;
  if (c->me != NULL) {
    atomic_store(&c->me->closed, 1);
    hc_net_shm_notify(c);
  }
  hc_net_shm_conn_free_reqs(c);
  if (c->seg) munmap(c->seg, c->seg_bytes);
  if (c->seg_fd >= 0) close(c->seg_fd);
  if (c->pidfd >= 0) close(c->pidfd);
  /* The creator's name outlives it only if the opener never mapped it; the
   * random ids make sure it is ours. */
  if (c->linked) unlink(c->name);
  if (c->state == HC_SHM_UP)
    HC_TRACE(HC_NET, "shm: %d -> %d sent %llu inline, %llu slots, %llu cma, %llu registered", c->ctx->rank, c->peer,
             (unsigned long long)c->nsent[HC_SHM_INLINE], (unsigned long long)c->nsent[HC_SHM_SLOTS],
             (unsigned long long)c->nsent[HC_SHM_CMA], (unsigned long long)c->nsent[HC_SHM_REG]);
  free(c);
}

/* ---- segment: layout, names, proofs, probes ---- */

static void layout(struct hc_shm_seg_hdr *h, uint32_t inline_bytes, uint32_t nslots, uint64_t slot_bytes,
                   uint64_t win_bytes) {
  h->version = HC_SHM_VERSION;
  h->ndesc = HC_SHM_NDESC;
  h->inline_bytes = inline_bytes;
  h->nslots = nslots;
  h->slot_bytes = slot_bytes;
  h->desc_stride = HC_SHM_DESC_HDR + round_up(inline_bytes, 64);
  uint64_t off = round_up(sizeof(*h), HC_SHM_PAGE);
  for (int s = 0; s < 2; s++) {
    h->desc_off[s] = off;
    off += round_up(HC_SHM_NDESC * h->desc_stride, HC_SHM_PAGE);
  }
  for (int s = 0; s < 2; s++) {
    h->slot_off[s] = off;
    off += (uint64_t)nslots * slot_bytes;
  }
  h->win_bytes = win_bytes;
  for (int s = 0; s < 2; s++) {
    h->win_off[s] = win_bytes ? off : 0;
    off += win_bytes;
  }
  h->total_bytes = off;
}

/* The opener's check of what the creator wrote: the same layout function
 * must give the same offsets, and they must fit the file. */
static bool layout_valid(const struct hc_shm_seg_hdr *h, uint64_t file_bytes) {
  if (h->version != HC_SHM_VERSION || h->ndesc != HC_SHM_NDESC || h->inline_bytes > HC_SHM_MAX_INLINE ||
      h->nslots < 1 || h->nslots > 4096 || h->slot_bytes == 0 || h->slot_bytes % HC_SHM_PAGE != 0 ||
      h->slot_bytes > (1ull << 30) || h->win_bytes % HC_SHM_PAGE != 0 || h->win_bytes > (1ull << 31))
    return false;
  struct hc_shm_seg_hdr want;
  layout(&want, h->inline_bytes, h->nslots, h->slot_bytes, h->win_bytes);
  return want.desc_stride == h->desc_stride && want.total_bytes == h->total_bytes && h->total_bytes == file_bytes &&
         !memcmp(want.desc_off, h->desc_off, sizeof(want.desc_off)) &&
         !memcmp(want.slot_off, h->slot_off, sizeof(want.slot_off)) &&
         !memcmp(want.win_off, h->win_off, sizeof(want.win_off));
}

static void segment_name(const struct hc_shm_ctx *ctx, const struct hc_shm_conn *c, char *out, size_t cap) {
  const struct hc_shm_handle *lo = c->side == 0 ? &ctx->handle : &c->peer_handle;
  const struct hc_shm_handle *hi = c->side == 0 ? &c->peer_handle : &ctx->handle;
  snprintf(out, cap, HC_SHM_DIR HC_SHM_PREFIX "%d-%08x-%016llx-%016llx", (int)lo->pid, (unsigned)(uint32_t)lo->pidns,
           (unsigned long long)lo->id, (unsigned long long)hi->id);
}

static void proof(const struct hc_shm_ctx *ctx, const struct hc_shm_conn *c, int side, uint8_t out[32]) {
  char text[160];
  int n = snprintf(text, sizeof(text), "hetccl-shm-%s|%s", side == 0 ? "creator" : "opener", c->name);
  hc_hmac_sha256(ctx->secret, sizeof(ctx->secret), text, (size_t)n, out);
}

static bool proof_ok(const struct hc_shm_ctx *ctx, const struct hc_shm_conn *c, int side, const uint8_t got[32]) {
  uint8_t want[32];
  proof(ctx, c, side, want);
  uint8_t diff = 0;
  for (int i = 0; i < 32; i++) diff |= (uint8_t)(want[i] ^ got[i]);
  return diff == 0;
}

/* Whether this process may read the peer's memory with process_vm_readv. */
static bool probe_cma(const struct hc_shm_conn *c, const struct hc_shm_side *peer) {
  if (!c->ctx->cma) return false;
  uint64_t got = 0;
  struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
  struct iovec r = {.iov_base = (void *)(uintptr_t)peer->probe_addr, .iov_len = sizeof(got)};
  ssize_t k = process_vm_readv(peer->pid, &l, 1, &r, 1, 0);
  if (k == (ssize_t)sizeof(got) && got == peer->probe_value) return true;
  int e = k < 0 ? errno : 0;
  static atomic_flag once = ATOMIC_FLAG_INIT;
  if (!atomic_flag_test_and_set(&once))
    HC_INFO(HC_NET,
            "shm: process_vm_readv of rank %d refused (%s): large messages take the pipelined double copy "
            "through slots (see HETCCL_SHM_CMA in docs/params.md)",
            c->peer, e ? strerror(e) : "wrong value");
  return false;
}

/* Whether this process may open the peer's fds (for its registered
 * buffers): opens the peer's fd of the segment and compares inodes. */
static bool probe_fd(const struct hc_shm_conn *c, const struct hc_shm_side *peer) {
  char path[64];
  struct stat a, b;
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)peer->pid, (int)peer->seg_fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    HC_INFO(HC_NET, "shm: rank %d cannot open fds of rank %d (%s): its registered buffers go by %s", c->ctx->rank,
            c->peer, strerror(errno), c->my_cma ? "CMA" : "slots");
    return false;
  }
  bool same = fstat(fd, &a) == 0 && fstat(c->seg_fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  close(fd);
  return same;
}

/* Accesses every page of both directions' rings (descriptors, slots) once
 * at connect: writes each page of this side's rings (nothing is posted yet,
 * and the peer looks at them only once the pair is up, after both sides did
 * this) and reads each page of the peer's. MAP_POPULATE maps the pages, but
 * on the 2-core development VM (Firecracker, AMD EPYC) the first access of
 * a page in each process still costs about 5 us (MADV_POPULATE_WRITE does
 * not help, a store does; the reader's first load costs too). A descriptor
 * takes more than a page: each of the first 64 messages over a connection
 * paid it, and an 8-byte all-reduce of 2 ranks took 10-12 us for its first
 * 63 calls instead of 0.3-0.7. The slot rings (2 MiB per direction) were
 * left to their first use, where the first pass through the ring paid
 * about 5 ms: 2-rank all-gather of 1 MiB took 75 us per call over its
 * first 64 calls, 49 us with the rings touched here (docs/perf.md). Here
 * it costs about 5 ms per connection on that VM, once, at connect. */
static void rings_touch(const struct hc_shm_conn *c) {
  const struct {
    uint8_t *mine;
    const uint8_t *theirs;
    size_t bytes;
  } rings[2] = {
      {c->tx_desc, c->rx_desc, round_up((uint64_t)c->ndesc * c->desc_stride, HC_SHM_PAGE)},
      {c->tx_slots, c->rx_slots, (size_t)c->nslots * c->slot_bytes},
  };
  for (int i = 0; i < 2; i++)
    for (size_t off = 0; off < rings[i].bytes; off += HC_SHM_PAGE) {
      volatile uint8_t *mine = rings[i].mine + off;
      const volatile uint8_t *theirs = rings[i].theirs + off;
      *mine = *mine;
      (void)*theirs;
    }
}

/* Pointers into a mapped segment, from its header. */
static void conn_bind(struct hc_shm_conn *c) {
  struct hc_shm_seg_hdr *h = c->hdr;
  int s = c->side, o = 1 - c->side;
  c->me = &h->side[s];
  c->them = &h->side[o];
  c->tx = &h->chan[s];
  c->rx = &h->chan[o];
  c->ndesc = h->ndesc;
  c->inline_bytes = h->inline_bytes;
  c->nslots = h->nslots;
  c->slot_bytes = h->slot_bytes;
  c->desc_stride = h->desc_stride;
  c->tx_desc = c->seg + h->desc_off[s];
  c->rx_desc = c->seg + h->desc_off[o];
  c->tx_slots = c->seg + h->slot_off[s];
  c->rx_slots = c->seg + h->slot_off[o];
  rings_touch(c);
}

/* What the peer's side says it can do, once it has said so (its state is
 * READY or OK): pulls from this rank, and the fence of its sleeps. */
static void peer_side_take(struct hc_shm_conn *c) {
  c->peer_cma = c->them->can_cma != 0;
  c->peer_fd = c->them->can_fd != 0;
  c->light_publish = c->ctx->fences && c->them->fences;
}

static void side_fill(struct hc_shm_conn *c, struct hc_shm_side *me) {
  me->pid = (int32_t)getpid();
  me->fences = c->ctx->fences;
  me->seg_fd = c->seg_fd;
  me->probe_addr = (uint64_t)(uintptr_t)&c->ctx->probe_value;
  me->probe_value = c->ctx->probe_value;
  proof(c->ctx, c, c->side, me->proof);
}

/* ---- handshake steps, each nonblocking ---- */

/* Creator, first call: makes, sizes, maps and fills the segment. */
static hc_result_t creator_start(struct hc_shm_conn *c) {
  const struct hc_shm_ctx *ctx = c->ctx;
  struct hc_shm_seg_hdr want;
  uint64_t win = HC_MAX((uint64_t)ctx->window_bytes, (uint64_t)c->peer_handle.window_pages * HC_SHM_PAGE);
  layout(&want, ctx->inline_bytes, ctx->nslots, ctx->slot_bytes, win);
  c->seg_fd = open(c->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (c->seg_fd < 0)
    return HC_FAIL(HC_ERR_SYSTEM, "shm: rank %d cannot create %s for rank %d: %s", ctx->rank, c->name, c->peer,
                   strerror(errno));
  c->linked = true;
  if (ftruncate(c->seg_fd, (off_t)want.total_bytes) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "shm: sizing %s (%llu bytes) for rank %d: %s", c->name,
                   (unsigned long long)want.total_bytes, c->peer, strerror(errno));
  int e = posix_fallocate(c->seg_fd, 0, (off_t)want.total_bytes);
  if (e != 0 && e != EOPNOTSUPP && e != EINVAL)
    return HC_FAIL(HC_ERR_SYSTEM,
                   "shm: /dev/shm cannot hold %.1f MiB for the pair of ranks %d and %d (%s); lower "
                   "HETCCL_SHM_SLOTS or HETCCL_SHM_SLOT_BYTES, or enlarge /dev/shm",
                   (double)want.total_bytes / (1 << 20), ctx->rank, c->peer, strerror(e));
  void *p = mmap(NULL, want.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->seg_fd, 0);
  if (p == MAP_FAILED)
    return HC_FAIL(HC_ERR_SYSTEM, "shm: mapping %s for rank %d: %s", c->name, c->peer, strerror(errno));
  c->seg = p;
  c->seg_bytes = want.total_bytes;
  c->hdr = p;
  /* The file is zero-filled: counters, flags and the peer's side start 0. */
  struct hc_shm_seg_hdr *h = c->hdr;
  h->version = want.version;
  h->ndesc = want.ndesc;
  h->inline_bytes = want.inline_bytes;
  h->nslots = want.nslots;
  h->slot_bytes = want.slot_bytes;
  h->desc_stride = want.desc_stride;
  h->total_bytes = want.total_bytes;
  memcpy(h->desc_off, want.desc_off, sizeof(want.desc_off));
  memcpy(h->slot_off, want.slot_off, sizeof(want.slot_off));
  h->win_bytes = want.win_bytes;
  memcpy(h->win_off, want.win_off, sizeof(want.win_off));
  conn_bind(c);
  side_fill(c, c->me);
  atomic_store(&c->me->state, HC_SHM_SIDE_READY);
  atomic_store(&h->ready, HC_SHM_READY);
  c->state = HC_SHM_CREATED;
  return HC_OK;
}

/* Creator: once the opener has mapped, proved itself and probed, probe it
 * back and say OK. */
static hc_result_t creator_poll(struct hc_shm_conn *c) {
  if (atomic_load(&c->them->state) < HC_SHM_SIDE_READY) return HC_OK;
  c->linked = false; /* the opener unlinked it before saying READY */
  if (c->them->pid != c->peer_handle.pid || !proof_ok(c->ctx, c, 1, c->them->proof))
    return HC_FAIL(HC_ERR_REMOTE, "shm: the process that opened %s is not rank %d of this job (pid %d, wrong proof)",
                   c->name, c->peer, (int)c->them->pid);
  c->my_cma = probe_cma(c, c->them);
  c->my_fd = probe_fd(c, c->them);
  peer_side_take(c);
  c->me->can_cma = c->my_cma;
  c->me->can_fd = c->my_fd;
  atomic_store(&c->me->state, HC_SHM_SIDE_OK);
  hc_net_shm_notify(c);
  close(c->seg_fd);
  c->seg_fd = -1;
  c->state = HC_SHM_UP;
  return HC_OK;
}

/* Opener: maps the segment once the creator has made it. */
static hc_result_t opener_poll_segment(struct hc_shm_conn *c) {
  int fd = open(c->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return HC_OK; /* not yet */
    return HC_FAIL(HC_ERR_SYSTEM, "shm: rank %d cannot open %s of rank %d: %s", c->ctx->rank, c->name, c->peer,
                   strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < HC_SHM_PAGE) {
    close(fd); /* not sized yet */
    return HC_OK;
  }
  if (st.st_uid != geteuid()) {
    close(fd);
    return HC_FAIL(HC_ERR_SYSTEM, "shm: %s belongs to uid %d, not to this job", c->name, (int)st.st_uid);
  }
  /* The header first, unpopulated: the creator may not have finished. */
  const struct hc_shm_seg_hdr *h0 = mmap(NULL, HC_SHM_PAGE, PROT_READ, MAP_SHARED, fd, 0);
  if (h0 == MAP_FAILED) {
    int e = errno;
    close(fd);
    return HC_FAIL(HC_ERR_SYSTEM, "shm: mapping %s of rank %d: %s", c->name, c->peer, strerror(e));
  }
  bool ready = atomic_load_explicit(&((struct hc_shm_seg_hdr *)h0)->ready, memory_order_acquire) == HC_SHM_READY;
  munmap((void *)h0, HC_SHM_PAGE);
  if (!ready) {
    close(fd);
    return HC_OK;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return HC_FAIL(HC_ERR_SYSTEM, "shm: mapping %s of rank %d: %s", c->name, c->peer, strerror(e));
  }
  struct hc_shm_seg_hdr *h = p;
  /* Acquire again through this mapping: the fields below are read here. */
  (void)atomic_load_explicit(&h->ready, memory_order_acquire);
  c->seg = p;
  c->seg_bytes = (size_t)st.st_size;
  c->hdr = h;
  c->seg_fd = fd;
  if (!layout_valid(h, (uint64_t)st.st_size))
    return HC_FAIL(HC_ERR_REMOTE, "shm: segment %s of rank %d has a layout this build does not know", c->name, c->peer);
  conn_bind(c);
  if (c->them->pid != c->peer_handle.pid || !proof_ok(c->ctx, c, 0, c->them->proof))
    return HC_FAIL(HC_ERR_REMOTE, "shm: %s was not made by rank %d of this job (pid %d, wrong proof)", c->name, c->peer,
                   (int)c->them->pid);
  unlink(c->name); /* both sides have it mapped */
  c->my_cma = probe_cma(c, c->them);
  c->my_fd = probe_fd(c, c->them);
  side_fill(c, c->me);
  c->me->can_cma = c->my_cma;
  c->me->can_fd = c->my_fd;
  atomic_store(&c->me->state, HC_SHM_SIDE_READY);
  hc_net_shm_notify(c);
  c->state = HC_SHM_OPENED;
  return HC_OK;
}

/* Opener: up once the creator has probed back. */
static void opener_poll_ok(struct hc_shm_conn *c) {
  if (atomic_load(&c->them->state) != HC_SHM_SIDE_OK) return;
  peer_side_take(c);
  close(c->seg_fd);
  c->seg_fd = -1;
  c->state = HC_SHM_UP;
}

/* ---- stale segments ---- */

/* Removes hetccl-<pid>-<pidns>-* entries of this pid namespace whose
 * creator has exited: what a job killed during connect leaves behind. */
static void sweep_stale(uint32_t pidns) {
  DIR *d = opendir(HC_SHM_DIR);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int pid;
    unsigned ns;
    if (strncmp(e->d_name, HC_SHM_PREFIX, strlen(HC_SHM_PREFIX)) != 0) continue;
    if (sscanf(e->d_name + strlen(HC_SHM_PREFIX), "%d-%8x-", &pid, &ns) != 2 || pid <= 0 || ns != pidns) continue;
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    char path[sizeof(HC_SHM_DIR) + 256];
    snprintf(path, sizeof(path), HC_SHM_DIR "%s", e->d_name);
    if (unlink(path) == 0) HC_INFO(HC_NET, "shm: removed %s, left by pid %d, which is gone", path, pid);
  }
  closedir(d);
}

/* ---- ops ---- */

static hc_result_t shm_net_close(void *vctx);

/* Whether this process takes part in membarrier's global expedited fence
 * (Linux 4.16+): registered once, at the first shm open. */
static bool fences_ready;
static void fences_register(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  fences_ready = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
                 (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
                 syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  if (!fences_ready) HC_INFO(HC_NET, "shm: no membarrier global expedited fence here: every publish is a full fence");
}
static bool fences_registered(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fences_register);
  return fences_ready;
}

static hc_result_t read_settings(struct hc_shm_ctx *ctx) {
  int64_t inl = hc_param_int(HC_P_SHM_INLINE_BYTES), slot = hc_param_int(HC_P_SHM_SLOT_BYTES);
  int64_t nslots = hc_param_int(HC_P_SHM_SLOTS);
  if (inl < 0 || inl > (int64_t)HC_SHM_MAX_INLINE)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_SHM_INLINE_BYTES=%lld: must be 0 to %u", (long long)inl, HC_SHM_MAX_INLINE);
  if (slot < HC_SHM_PAGE || slot > (1ll << 30) || slot % HC_SHM_PAGE != 0)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_SHM_SLOT_BYTES=%lld: must be a multiple of 4K from 4K to 1G", (long long)slot);
  if (nslots < 1 || nslots > 4096)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_SHM_SLOTS=%lld: must be 1 to 4096", (long long)nslots);
  ctx->inline_bytes = (uint32_t)inl;
  ctx->slot_bytes = (size_t)slot;
  ctx->nslots = (uint32_t)nslots;
  ctx->cma = hc_param_int(HC_P_SHM_CMA) != 0;
  ctx->cma_min = (size_t)hc_param_int(HC_P_SHM_CMA_MIN_BYTES);
  ctx->lone_send_slots = hc_param_int(HC_P_SHM_LONE_SEND_SLOTS) != 0;
  ctx->nt_min = (size_t)hc_param_int(HC_P_SHM_NT_MIN_BYTES);
  ctx->fences = hc_param_int(HC_P_SHM_MEMBARRIER) != 0 && fences_registered();
  int64_t pass = hc_param_int(HC_P_SHM_PASS_BYTES);
  if (pass < 1) return HC_FAIL(HC_ERR_USAGE, "HETCCL_SHM_PASS_BYTES=%lld: must be at least 1", (long long)pass);
  ctx->pass_bytes = (size_t)pass;
  return HC_OK;
}

static hc_result_t shm_net_open(const struct hc_net_args *a, struct hc_net_caps *caps, struct hc_net_handle *handle,
                                void **out) {
  hc_result_t r;
  struct hc_shm_ctx *ctx = NULL;
  *out = NULL;
  if (a == NULL || a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks)
    return HC_FAIL(HC_ERR_ARG, "shm: open with rank %d of %d", a ? a->rank : -1, a ? a->nranks : -1);
  HC_TRY(hc_params_load());
  HC_TRY(hc_calloc(&ctx, 1, sizeof(*ctx), "the shm transport"));
  ctx->rank = a->rank;
  ctx->nranks = a->nranks;
  memcpy(ctx->secret, a->secret, sizeof(ctx->secret));
  ctx->abort_flag = a->abort_flag;
  ctx->sig_explain = a->sig_explain;
  HC_TRY_GOTO(read_settings(ctx), r, fail);
  HC_TRY_GOTO(hc_calloc(&ctx->conns, (size_t)a->nranks, sizeof(ctx->conns[0]), "shm connections"), r, fail);
  HC_TRY_GOTO(hc_random_bytes(&ctx->probe_value, sizeof(ctx->probe_value)), r, fail);
  struct hc_shm_handle *h = &ctx->handle;
  h->magic = HC_SHM_MAGIC;
  h->version = HC_SHM_VERSION;
  h->pid = (int32_t)getpid();
  if (a->window_bytes > (1ull << 31)) {
    r = HC_FAIL(HC_ERR_USAGE, "shm: a window of %zu bytes is more than 2 GiB", a->window_bytes);
    goto fail;
  }
  ctx->window_bytes = round_up(a->window_bytes, HC_SHM_PAGE);
  h->window_pages = (uint32_t)(ctx->window_bytes / HC_SHM_PAGE);
  HC_TRY_GOTO(hc_random_bytes(&h->id, sizeof(h->id)), r, fail);
  h->pidns = inode_of("/proc/self/ns/pid", NULL);
  h->shm_ino = inode_of(HC_SHM_DIR, &h->shm_dev);
  if (h->shm_ino == 0) {
    r = HC_FAIL(HC_ERR_SYSTEM, "shm: rank %d: " HC_SHM_DIR " is not there (%s)", a->rank, strerror(errno));
    goto fail;
  }
  /* Yama (ptrace_scope=1) would refuse the peers' process_vm_readv. */
  if (ctx->cma) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  sweep_stale((uint32_t)h->pidns);
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->bytes, h, sizeof(*h));
  if (caps) {
    caps->device_memory = false;
    caps->pull_min_bytes = ctx->cma ? HC_MAX(ctx->cma_min, (size_t)ctx->inline_bytes + 1) : 0;
  }
  HC_INFO(HC_NET, "shm: rank %d open: inline %u, %u slots of %zu, CMA %s from %zu", ctx->rank, ctx->inline_bytes,
          ctx->nslots, ctx->slot_bytes, ctx->cma ? "on" : "off", ctx->cma_min);
  *out = ctx;
  return HC_OK;
fail:
  shm_net_close(ctx);
  return r;
}

static hc_result_t parse_handle(struct hc_shm_ctx *ctx, struct hc_shm_conn *c, const struct hc_net_handle *handle) {
  struct hc_shm_handle h;
  if (handle == NULL) return HC_FAIL(HC_ERR_ARG, "shm: rank %d: no handle for rank %d", ctx->rank, c->peer);
  memcpy(&h, handle->bytes, sizeof(h));
  if (h.magic != HC_SHM_MAGIC || h.version != HC_SHM_VERSION || h.pid <= 0)
    return HC_FAIL(HC_ERR_ARG, "shm: the handle of rank %d is not a shm handle (magic 0x%x, version %u)", c->peer,
                   h.magic, h.version);
  if ((h.pidns && ctx->handle.pidns && h.pidns != ctx->handle.pidns) || h.shm_dev != ctx->handle.shm_dev ||
      h.shm_ino != ctx->handle.shm_ino)
    return HC_FAIL(HC_ERR_USAGE,
                   "shm: rank %d is in another pid namespace or sees another /dev/shm than rank %d (another "
                   "container?): set HETCCL_SHM_DISABLE=1",
                   c->peer, ctx->rank);
  c->peer_handle = h;
  return HC_OK;
}

static hc_result_t shm_net_connect(void *vctx, int peer, const struct hc_net_handle *peer_handle, void **out) {
  struct hc_shm_ctx *ctx = vctx;
  struct hc_shm_conn *c;
  hc_result_t r = HC_OK;
  *out = NULL;
  if (peer < 0 || peer >= ctx->nranks || peer == ctx->rank)
    return HC_FAIL(HC_ERR_ARG, "shm: rank %d cannot connect to rank %d of %d", ctx->rank, peer, ctx->nranks);
  HC_TRY(conn_get(ctx, peer, &c));
  HC_TRY(hc_net_shm_conn_check(c));
  if (c->state == HC_SHM_UP) {
    *out = c;
    return HC_OK;
  }
  if (hc_shm_aborted(ctx))
    return hc_net_shm_conn_fail(c, HC_FAIL(HC_ERR_REMOTE, "shm: aborted while connecting to rank %d", peer));
  if (c->deadline_ns == 0) {
    if ((r = parse_handle(ctx, c, peer_handle)) != HC_OK) return hc_net_shm_conn_fail(c, r);
    c->deadline_ns = hc_deadline_ns();
    segment_name(ctx, c, c->name, sizeof(c->name));
    c->pidfd = hc_pidfd_open(c->peer_handle.pid);
    if (c->pidfd == -2) {
      c->pidfd = -1;
      return hc_net_shm_conn_fail(c, HC_FAIL(HC_ERR_REMOTE, "shm: rank %d (pid %d) is gone; rank %d cannot connect",
                                             peer, (int)c->peer_handle.pid, ctx->rank));
    }
  }
  switch (c->state) {
  case HC_SHM_IDLE: r = c->side == 0 ? creator_start(c) : opener_poll_segment(c); break;
  case HC_SHM_CREATED: r = creator_poll(c); break;
  case HC_SHM_OPENED: opener_poll_ok(c); break;
  case HC_SHM_UP: break;
  }
  if (r != HC_OK) return hc_net_shm_conn_fail(c, r);
  if (c->state == HC_SHM_UP) {
    HC_INFO(HC_NET,
            "shm: %d <-> %d up, %.1f MiB segment (windows %.1f MiB); pulls from rank %d: CMA %s, "
            "registered buffers %s; publishes %s",
            ctx->rank, peer, (double)c->seg_bytes / (1 << 20), (double)c->hdr->win_bytes / (1 << 20), peer,
            c->my_cma ? "yes" : "no", c->my_fd ? "yes" : "no",
            c->light_publish ? "release stores (membarrier)" : "full fences");
    *out = c;
    return HC_OK;
  }
  HC_TRY(hc_net_shm_check_alive(c, false));
  if (hc_now_ns() >= c->deadline_ns)
    return hc_net_shm_conn_fail(
        c,
        HC_FAIL(HC_ERR_REMOTE, "shm: rank %d: the connection %s rank %d did not come up within HETCCL_TIMEOUT=%lld s",
                ctx->rank, c->side == 0 ? "to" : "from", peer, (long long)hc_param_int(HC_P_TIMEOUT)));
  return HC_OK;
}

/* Sleeps on the doorbells in wv until one rings or until end_ns (absolute,
 * CLOCK_MONOTONIC). Returns false when the kernel lacks futex_waitv. */
static bool sleep_waitv(struct hc_futex_waitv *wv, int n, uint64_t end_ns) {
#ifdef SYS_futex_waitv
  static atomic_bool missing;
  if (!atomic_load_explicit(&missing, memory_order_relaxed)) {
    struct timespec ts = {.tv_sec = (time_t)(end_ns / 1000000000ull), .tv_nsec = (long)(end_ns % 1000000000ull)};
    if (syscall(SYS_futex_waitv, wv, (unsigned)n, 0u, &ts, CLOCK_MONOTONIC) >= 0 || errno != ENOSYS) return true;
    atomic_store(&missing, true);
  }
#else
  (void)wv, (void)n, (void)end_ns;
#endif
  return false;
}

/* Whether c is still coming up (a connect() has begun and not finished). */
static bool connecting(const struct hc_shm_conn *c) { return c->deadline_ns != 0 && c->state != HC_SHM_UP; }

/* Connecting: whether the peer has taken the handshake step c waits for. */
static bool peer_stepped(const struct hc_shm_conn *c) {
  unsigned st = atomic_load(&c->them->state);
  return c->state == HC_SHM_CREATED ? st >= HC_SHM_SIDE_READY : st == HC_SHM_SIDE_OK;
}

/* The last look of each connection about to sleep, after its waiting
 * flag is set (and, with fences, after the membarrier that orders every
 * publisher's counter store against it): a progress pass, or the peer's
 * handshake state. Whether any found something. */
static bool last_looks(struct hc_shm_conn **wc, int n) {
  bool ready = false;
  for (int i = 0; i < n && !ready; i++) {
    struct hc_shm_conn *c = wc[i];
    if (connecting(c)) {
      ready = peer_stepped(c);
      continue;
    }
    bool moved = false;
    hc_result_t r = hc_net_shm_conn_progress(c, &moved);
    if (r != HC_OK) hc_net_shm_conn_fail(c, r); /* the caller's test() reports it */
    ready = r != HC_OK || moved;
  }
  return ready;
}

/* Sleeping, per busy connection: set waiting, read the doorbell, then
 * (after one membarrier for all of them, where this process has it) take
 * a last look, and sleep on the doorbells' values only if no look found
 * anything. A peer that publishes after the look sees waiting and rings;
 * see hc_net_shm_notify. */
static hc_result_t shm_net_wait_blocking(void *vctx, int timeout_ms) {
  struct hc_shm_ctx *ctx = vctx;
  struct hc_futex_waitv wv[HC_SHM_MAX_WAITV];
  struct hc_shm_conn *wc[HC_SHM_MAX_WAITV];
  const uint64_t end = hc_now_ns() + (uint64_t)HC_MAX(timeout_ms, 0) * 1000000ull;
  for (;;) {
    if (hc_shm_aborted(ctx)) return HC_OK;
    int n = 0;
    bool poll_soon = false, ready = false;
    for (int p = 0; p < ctx->nranks && !ready; p++) {
      struct hc_shm_conn *c = ctx->conns[p];
      if (c == NULL) continue;
      if (!connecting(c) && !hc_net_shm_conn_busy(c)) continue;
      /* Something for the caller to learn now. */
      if (c->failed != HC_OK || c->n_complete > 0 || c->more || hc_net_shm_check_alive(c, false) != HC_OK) {
        ready = true;
        break;
      }
      if (c->me == NULL || n == HC_SHM_MAX_WAITV) {
        poll_soon = true; /* an opener before the segment exists: nothing to sleep on */
        continue;
      }
      atomic_store(&c->me->waiting, 1);
      wv[n] = (struct hc_futex_waitv){
          .val = atomic_load(&c->me->doorbell), .uaddr = (uintptr_t)&c->me->doorbell, .flags = HC_FUTEX_32};
      wc[n++] = c;
    }
    if (!ready && n > 0) {
      if (ctx->fences) syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
      ready = last_looks(wc, n);
    }
    uint64_t now = hc_now_ns();
    if (!ready && now < end) {
      uint64_t until = HC_MIN(end, now + (n == 0 || poll_soon ? 1 : HC_SHM_SLICE_MS) * 1000000ull);
      if (n == 0) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(until - now)};
        nanosleep(&ts, NULL);
        if (!poll_soon) return HC_OK; /* nothing of this ctx waits on a peer */
      } else if (!sleep_waitv(wv, n, until)) {
        /* Old kernel: one doorbell at a time, in short slices when several. */
        uint64_t rel = HC_MIN(until - now, n > 1 ? 1000000ull : until - now);
        struct timespec ts = {.tv_sec = (time_t)(rel / 1000000000ull), .tv_nsec = (long)(rel % 1000000000ull)};
        syscall(SYS_futex, (uint32_t *)&wc[0]->me->doorbell, FUTEX_WAIT, (uint32_t)wv[0].val, &ts, NULL, 0);
      }
    }
    for (int i = 0; i < n; i++) {
      atomic_store(&wc[i]->me->waiting, 0);
      ready = ready || atomic_load(&wc[i]->me->doorbell) != (unsigned)wv[i].val;
    }
    /* An opener whose segment did not exist has nothing to sleep on: back
     * to the caller after the short sleep, whose progress looks again (the
     * loop here would only sleep on until the timeout: a comm's first call
     * took 100 ms). */
    if (ready || poll_soon || hc_now_ns() >= end) return HC_OK;
  }
}

static hc_result_t shm_net_close(void *vctx) {
  struct hc_shm_ctx *ctx = vctx;
  if (ctx == NULL) return HC_OK;
  if (ctx->conns)
    for (int p = 0; p < ctx->nranks; p++) conn_destroy(ctx->conns[p]);
  free(ctx->conns);
  free(ctx);
  return HC_OK;
}

void hc_net_shm_notice(void *vctx, int culprit) {
  struct hc_shm_ctx *ctx = vctx;
  for (int p = 0; ctx && ctx->conns && p < ctx->nranks; p++) {
    struct hc_shm_conn *c = ctx->conns[p];
    int none = 0;
    if (c && c->me) atomic_compare_exchange_strong(&c->me->notice, &none, culprit + 1);
  }
}

static void shm_choose_pulls(void *vctx, enum hc_net_pulls way) { ((struct hc_shm_ctx *)vctx)->pulls = way; }

static void shm_net_window(void *vconn, struct hc_net_window *w) {
  struct hc_shm_conn *c = vconn;
  const struct hc_shm_seg_hdr *h = c->hdr;
  *w = (struct hc_net_window){0};
  if (h->win_bytes == 0) return;
  *w = (struct hc_net_window){.tx = c->seg + h->win_off[c->side],
                              .rx = c->seg + h->win_off[1 - c->side],
                              .bytes = h->win_bytes,
                              .tx_filled = &c->tx->win_filled,
                              .tx_freed = &c->tx->win_freed,
                              .rx_filled = &c->rx->win_filled,
                              .rx_freed = &c->rx->win_freed,
                              .tx_sig = c->tx->win_sig,
                              .rx_sig = c->rx->win_sig,
                              .heartbeat = &c->me->heartbeat,
                              .peer_heartbeat = &c->them->heartbeat,
                              .notice = &c->me->notice,
                              .peer_notice = &c->them->notice,
                              .mismatch = &c->me->mismatch,
                              .peer_mismatch = &c->them->mismatch,
                              .mapping = c->seg,
                              .mapping_bytes = c->seg_bytes};
}

static void shm_stall_publish(void *vconn, const struct hc_net_sig *mine) {
  struct hc_shm_conn *c = vconn;
  struct hc_shm_side *me = c->me;
  if (me == NULL || (atomic_load(&me->stall_sig[0]) == mine->w[0] && atomic_load(&me->stall_sig[1]) == mine->w[1]))
    return;
  atomic_fetch_add(&me->stall_gen, 1);
  atomic_store(&me->stall_sig[0], mine->w[0]);
  atomic_store(&me->stall_sig[1], mine->w[1]);
  atomic_fetch_add(&me->stall_gen, 1);
}

static void shm_stall_peek(void *vconn, struct hc_net_sig *theirs, uint64_t *gen) {
  const struct hc_shm_conn *c = vconn;
  *theirs = (struct hc_net_sig){{0, 0}};
  *gen = 0;
  if (c->them == NULL) return;
  for (int tries = 0; tries < 100; tries++) { /* the owner writes two words: never long */
    const uint64_t g = atomic_load(&c->them->stall_gen);
    const struct hc_net_sig s = {{atomic_load(&c->them->stall_sig[0]), atomic_load(&c->them->stall_sig[1])}};
    if (g % 2 == 0 && atomic_load(&c->them->stall_gen) == g) {
      *theirs = s;
      *gen = g;
      return;
    }
  }
}

static void shm_mismatch_found(void *vconn, const struct hc_net_sig *got, const struct hc_net_sig *want) {
  struct hc_shm_conn *c = vconn;
  if (c->me != NULL) hc_net_mismatch_publish(&c->me->mismatch, got, want);
}

const struct hc_net_ops hc_net_shm = {
    .size = sizeof(struct hc_net_ops),
    .abi = HC_NET_ABI,
    .name = "shm",
    .open = shm_net_open,
    .connect = shm_net_connect,
    .isend = hc_net_shm_isend,
    .irecv = hc_net_shm_irecv,
    .stall_publish = shm_stall_publish,
    .stall_peek = shm_stall_peek,
    .mismatch_found = shm_mismatch_found,
    .test = hc_net_shm_test,
    .wait_blocking = shm_net_wait_blocking,
    .close = shm_net_close,
    .window = shm_net_window,
    .choose_pulls = shm_choose_pulls,
};
