/*
 * Staging: a plan on GPU memory, for transports that move host memory only.
 * Each transfer of device memory becomes pieces; a piece of a send is a
 * copy from the device into a pinned send slot and the send of that slot; a
 * piece of a receive is the receive into a pinned receive slot and a copy
 * to the device. Pieces of consecutive chunks overlap: while piece k is on
 * the wire, the copy of piece k+1 runs, and the copy of piece k-1 back to
 * the device. Sends and receives have their own slot rings, so a send never
 * waits for a receive's slot (no cycle between two ranks that both stage).
 *
 * A rank's transfers to itself are not staged: they meet as one copy on
 * the device (exec/enqueue.c).
 *
 * A pointer is host memory if it lies in one of the plan's host scratch
 * buffers (pinned for GPU plans); every other buffer of a GPU plan is
 * device memory, the caller's or the plan's data scratch.
 *
 * Every plan, host or GPU, also cuts transfers of host memory into the same
 * pieces (sent or received in place), so that a message is cut the same way
 * on both ranks whatever each one's memory: a GPU rank that stages and a
 * CPU rank that does not must still match piece for piece.
 *
 * GPU memory straight to the NIC: with a peer whose transport reaches this
 * rank's device memory (hc_plan_ctx.peer_gdr), the pieces of a transfer of
 * device memory stay sends and receives of the device buffer itself, cut
 * the same way, with no copy: the adapter reads the GPU's memory, and
 * writes a receive into it (a reduction slot in device scratch, which the
 * GPU then reduces from where it landed). A piece of at most gdr_min_bytes
 * goes through a slot instead, as staging does, but a slot of device
 * scratch when gdr_small_device: the GPU copies device to device into it
 * and the adapter reads it (a send), or the adapter writes it and the GPU
 * copies it out (a receive); no byte touches host memory. A slot rather
 * than the buffer itself, since the transport registers what it is given
 * and the plans' scratch stays registered (ib's cache) where a small user
 * buffer would be registered for a few bytes. Without gdr_small_device the
 * slot is pinned host memory (one GPU copy each way).
 *
 * With a peer that has a window (plan.h, hc_plan_window), no transport is
 * involved. Piece k of a send: wait until the receiver has freed piece
 * k - SLOTS, copy into tx slot k % SLOTS, publish filled = k + 1. Piece k
 * of a receive: wait until filled > k, copy out of rx slot k % SLOTS,
 * publish freed = k + 1. Before filled, the sender also writes the piece's
 * signature (net.h) into two control words (k % HC_NET_WINDOW_SIGS: they
 * outlive the slot), which a CPU receiver checks once filled has passed k,
 * before it uses the data (exec.c), and the progress engine of a GPU
 * receiver once its stream has (exec/engine.c). The copies are the device's own (a GPU's DMA
 * engines, memcpy on a CPU rank), so between two GPU ranks of one host the
 * bytes cross host memory once. The signals of one counter are chained so
 * that they are published in piece order.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "plan_priv.h"

struct slot_ring {
  char *base;
  size_t bytes;
  int count, next;
  hc_ref_t *last_user;
};

static struct hc_plan_window *window_of(const struct hc_plan_ctx *x, const struct hc_step *s) {
  if (x->windows == NULL || (s->kind != HC_STEP_SEND && s->kind != HC_STEP_RECV)) return NULL;
  struct hc_plan_window *w = &x->windows[s->peer];
  return w->w.bytes ? w : NULL;
}

/* The steps of one transfer with a windowed peer; returns what the
 * transfer's dependents wait for. */
static hc_ref_t push_window_transfer(struct hc_plan *p, struct hc_plan_window *w, const struct hc_step *s,
                                     bool device_memory, hc_ref_t *pieces) {
  const bool send = s->kind == HC_STEP_SEND;
  const int npieces = (int)HC_DIV_UP(s->count, w->slot_bytes);
  for (int k = 0; k < npieces; k++) {
    size_t off = (size_t)k * w->slot_bytes, len = HC_MIN(w->slot_bytes, s->count - off);
    uint64_t piece = send ? w->tx_pieces++ : w->rx_pieces++;
    char *slot = (char *)(send ? w->w.tx : w->w.rx) + (piece % HC_WINDOW_SLOTS) * w->slot_bytes;
    /* A GPU runs the three steps in order on the copy's stream. */
    const uint8_t lane = send && device_memory ? HC_LANE_TO_HOST : HC_LANE_MAIN;
    /* peer: whose process moves the counter (exec watches it while waiting). */
    struct hc_step wait = {.kind = HC_STEP_WAIT, .lane = lane, .peer = s->peer};
    memcpy(wait.deps, s->deps, sizeof(wait.deps));
    if (send) {
      wait.src0 = w->w.tx_freed;
      wait.count = piece >= HC_WINDOW_SLOTS ? piece + 1 - HC_WINDOW_SLOTS : 0;
    } else {
      wait.src0 = w->w.rx_filled;
      wait.count = piece + 1;
      wait.src1 = w->w.rx_sig + 2 * (piece % HC_NET_WINDOW_SIGS);
      wait.call = s->call;
    }
    if (wait.count == 0) wait.kind = HC_STEP_NOP; /* the counter is there already */
    hc_ref_t ready = hc_plan_push(p, wait);
    struct hc_step copy = {.kind = HC_STEP_COPY, .lane = lane, .count = len, HC_DEPS(ready)};
    if (send) {
      copy.dst = slot;
      copy.src0 = (const char *)s->src0 + off;
    } else {
      copy.dst = (char *)s->dst + off;
      copy.src0 = slot;
    }
    hc_ref_t copied = hc_plan_push(p, copy);
    if (send) /* the signature words, then filled: one lane, in order */
      for (int word = 0; word < 2; word++)
        copied = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_SIGNAL, .lane = lane,
                                                  .src0 = w->w.tx_sig + 2 * (piece % HC_NET_WINDOW_SIGS) + word,
                                                  .count = s->call < p->nsigs ? p->sigs[s->call].w[word] : 0,
                                                  HC_DEPS(copied)});
    hc_ref_t *last = &w->last_signal[!send];
    *last = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_SIGNAL, .lane = lane,
                                             .src0 = send ? w->w.tx_filled : w->w.rx_freed,
                                             .count = piece + 1, HC_DEPS(copied, *last)});
    /* The transfer's dependents need its buffer free (send) or its data in
     * (receive): both are the copy, which a GPU step can follow on the
     * GPU. The signal is done by the end of the plan. */
    pieces[k] = copied;
  }
  return hc_plan_join(p, pieces, npieces);
}

/* Whether a piece of len bytes of a transfer of device memory with peer
 * goes through pinned slots: its transport cannot reach GPU memory, or
 * the piece is small enough for the transport to copy it with the CPU. */
static bool piece_staged(const struct hc_plan_ctx *x, int peer, size_t len) {
  return x->peer_gdr == NULL || !x->peer_gdr[peer] || len <= x->gdr_min_bytes;
}

/* The slots a staged piece of device memory with peer goes through: 1,
 * device scratch, where the transport reaches this rank's device memory
 * at every size from memory that stays registered; else 0, pinned host
 * memory. */
static int slot_memory(const struct hc_plan_ctx *x, int peer) {
  return x->gdr_small_device && x->peer_gdr != NULL && x->peer_gdr[peer];
}

/* Whether some piece of a transfer of count bytes with peer is staged
 * (want_staged) or direct (!want_staged): only the first and the last
 * piece can differ in length. */
static bool some_piece(const struct hc_plan_ctx *x, int peer, size_t count, size_t piece_max, bool want_staged) {
  const size_t npieces = HC_DIV_UP(count, piece_max);
  return piece_staged(x, peer, HC_MIN(count, piece_max)) == want_staged ||
         piece_staged(x, peer, count - (npieces - 1) * piece_max) == want_staged;
}

/* Always 0: a WAIT for 0 on it is reached at once, so such a step only
 * holds a place on the main lane, the caller's stream (exec/enqueue.c). A
 * transfer that waits for it waits for the stream to get there; the stream
 * waits there for the transfers it depends on. */
static atomic_ullong gate_counter;

static hc_ref_t push_gate(struct hc_plan *p, hc_ref_t after) {
  return hc_plan_push(p, (struct hc_step){.kind = HC_STEP_WAIT, .lane = HC_LANE_MAIN, .src0 = &gate_counter,
                                          .count = 0, HC_DEPS(after)});
}

/* Adds ref to s's dependencies (joining them when all are taken). */
static void add_dep(struct hc_plan *p, struct hc_step *s, hc_ref_t ref) {
  for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
    if (s->deps[d] == 0) {
      s->deps[d] = ref;
      return;
    }
  hc_ref_t joined = hc_plan_join(p, s->deps, HC_STEP_MAX_DEPS);
  memset(s->deps, 0, sizeof(s->deps));
  s->deps[0] = joined;
  s->deps[1] = ref;
}

/* The slot rings of each memory that some staged piece uses
 * (rings[memory]), of nslots slots of piece_max bytes; false when out of
 * memory (what was had is freed with the rest). */
static bool rings_create(struct hc_plan *p, const bool rings[2], size_t piece_max, int nslots,
                         struct slot_ring ring[2][2]) {
  bool ok = true;
  for (int m = 0; m < 2; m++)
    for (int d = 0; d < 2 && rings[m]; d++) {
      struct slot_ring *rg = &ring[m][d];
      const size_t bytes = piece_max * (size_t)nslots;
      *rg = (struct slot_ring){.bytes = piece_max, .count = nslots};
      rg->base = m ? hc_plan_scratch(p, bytes) : hc_plan_host_scratch(p, bytes);
      rg->last_user = calloc((size_t)nslots, sizeof(hc_ref_t));
      ok &= rg->base != NULL && rg->last_user != NULL;
    }
  return ok;
}

hc_result_t hc_plan_stage(struct hc_plan *p, const struct hc_plan_ctx *x, bool device_memory) {
  struct hc_step *old = p->steps;
  const int nold = p->nsteps;
  const size_t piece_max = x->chunk_bytes;
  const int nslots = HC_MAX(x->scratch_slots, 2);
  hc_ref_t *map = calloc((size_t)nold + 1, sizeof(hc_ref_t));
  hc_ref_t *pieces = NULL;
  /* [memory][direction]: memory 0 pinned host slots, 1 device scratch
   * slots (small pieces with peers reached directly); direction 0 sends,
   * 1 receives. */
  struct slot_ring ring[2][2] = {{{0}}};
  bool rings[2] = {false, false}; /* some piece of device memory goes through that memory's slots */
  size_t max_pieces = 1;
  bool any = false;
  bool direct = false;             /* some piece of device memory goes straight to the transport */
  hc_ref_t *direct_refs = NULL, entry_gate = 0;
  int ndirect = 0, direct_cap = 0;
  for (int i = 0; i < nold; i++) {
    const struct hc_step *s = &old[i];
    if (s->kind != HC_STEP_SEND && s->kind != HC_STEP_RECV) continue;
    const struct hc_plan_window *w = window_of(x, s);
    if (w != NULL) {
      any = true;
      max_pieces = HC_MAX(max_pieces, HC_DIV_UP(s->count, w->slot_bytes));
      continue;
    }
    bool dev = device_memory && s->peer != x->rank &&
               !hc_plan_in_host_scratch(p, s->kind == HC_STEP_SEND ? s->src0 : s->dst);
    if (dev && s->count > 0 && some_piece(x, s->peer, s->count, piece_max, true)) rings[slot_memory(x, s->peer)] = true;
    direct |= dev && s->count > 0 && some_piece(x, s->peer, s->count, piece_max, false);
    if ((dev && s->count > 0) || s->count > piece_max) {
      any = true;
      max_pieces = HC_MAX(max_pieces, HC_DIV_UP(s->count, piece_max));
    }
  }
  if (!any) {
    free(map);
    return HC_OK;
  }
  pieces = calloc(max_pieces, sizeof(hc_ref_t));
  const bool rings_ok = rings_create(p, rings, piece_max, nslots, ring);
  hc_result_t r = HC_OK;
  for (int peer = 0; x->windows && peer < x->nranks; peer++)
    x->windows[peer].last_signal[0] = x->windows[peer].last_signal[1] = 0;
  if (map == NULL || pieces == NULL || !rings_ok) {
    r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of memory staging %d steps", nold);
    goto out;
  }
  /* Rebuild the step list from scratch, old steps read from `old`. */
  p->steps = NULL;
  p->nsteps = p->cap = 0;
  /* A direct piece reads or writes GPU memory that the caller's stream
   * wrote or will read, with no copy on a lane to order it: it waits for
   * the stream to reach the call (the entry gate, first on the main lane),
   * and the stream waits for every direct piece before the call ends (the
   * exit gate, last). */
  if (direct) entry_gate = push_gate(p, 0);
  for (int i = 0; i < nold; i++) {
    struct hc_step s = old[i];
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
      if (s.deps[d]) s.deps[d] = map[s.deps[d] - 1];
    bool send = s.kind == HC_STEP_SEND, recv = s.kind == HC_STEP_RECV;
    struct hc_plan_window *w = window_of(x, &s);
    if (w != NULL && s.count > 0) {
      map[i] = push_window_transfer(p, w, &s, device_memory, pieces);
      continue;
    }
    bool dev = device_memory && (send || recv) && s.peer != x->rank &&
               !hc_plan_in_host_scratch(p, send ? s.src0 : s.dst);
    if ((!send && !recv) || s.count == 0 || (!dev && s.count <= piece_max)) {
      map[i] = hc_plan_push(p, s);
      continue;
    }
    const int npieces = (int)HC_DIV_UP(s.count, piece_max);
    struct slot_ring *rg = &ring[dev ? slot_memory(x, s.peer) : 0][recv];
    for (int k = 0; k < npieces; k++) {
      size_t off = (size_t)k * piece_max, len = HC_MIN(piece_max, s.count - off);
      if (!dev || !piece_staged(x, s.peer, len)) {
        /* Host memory, or device memory the transport reaches: the piece
         * in place, no copies. */
        struct hc_step piece = s;
        piece.count = len;
        if (send) piece.src0 = (const char *)s.src0 + off;
        else piece.dst = (char *)s.dst + off;
        if (dev) add_dep(p, &piece, entry_gate);
        pieces[k] = hc_plan_push(p, piece);
        if (dev && ndirect == direct_cap) {
          const int cap = HC_MAX(2 * direct_cap, 64);
          hc_ref_t *grown = realloc(direct_refs, (size_t)cap * sizeof(*grown));
          if (grown == NULL) {
            p->cap = -1; /* reported below, as the plan's own out-of-memory */
          } else {
            direct_refs = grown;
            direct_cap = cap;
          }
        }
        if (dev && ndirect < direct_cap) direct_refs[ndirect++] = pieces[k];
        continue;
      }
      int si = rg->next;
      rg->next = (rg->next + 1) % rg->count;
      char *slot = rg->base + (size_t)si * rg->bytes;
      /* A piece waits for what the whole transfer waited for, and for the
       * slot's previous user. */
      struct hc_step first = s;
      first.count = len;
      for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
        if (first.deps[d] == 0) {
          first.deps[d] = rg->last_user[si];
          break;
        }
      if (send) {
        first.kind = HC_STEP_COPY;
        first.lane = HC_LANE_TO_HOST;
        first.dst = slot;
        first.src0 = (const char *)s.src0 + off;
        hc_ref_t copied = hc_plan_push(p, first);
        struct hc_step send_slot = {.kind = HC_STEP_SEND, .peer = s.peer, .call = s.call, .src0 = slot,
                                    .count = len, HC_DEPS(copied)};
        rg->last_user[si] = pieces[k] = hc_plan_push(p, send_slot);
      } else {
        first.dst = slot;
        hc_ref_t got = hc_plan_push(p, first);
        rg->last_user[si] = pieces[k] =
            hc_plan_push(p, (struct hc_step){.kind = HC_STEP_COPY, .dst = (char *)s.dst + off,
                                             .src0 = slot, .count = len, HC_DEPS(got)});
      }
    }
    map[i] = hc_plan_join(p, pieces, npieces);
  }
  if (direct && p->cap >= 0) push_gate(p, hc_plan_join(p, direct_refs, ndirect));
  if (p->cap < 0) r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory staging %d steps", nold);
  free(old);
out:
  if (r != HC_OK && p->steps == NULL) p->steps = old; /* failed before the rebuild */
  free(map);
  free(pieces);
  free(direct_refs);
  for (int m = 0; m < 2; m++)
    for (int d = 0; d < 2; d++) free(ring[m][d].last_user);
  return r;
}
