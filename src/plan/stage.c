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
 * publish freed = k + 1; or, when the next step is a reduction that alone
 * reads the piece (reduced_in_slot), no copy: the reduction reads the
 * slot, and freed follows it. Before filled, the sender also writes the piece's
 * signature (net.h) into two control words (k % HC_NET_WINDOW_SIGS: they
 * outlive the slot), which a CPU receiver checks once filled has passed k,
 * before it uses the data (exec.c), and the progress engine of a GPU
 * receiver once its stream has (exec/engine.c). The copies are the device's own (a GPU's DMA
 * engines, memcpy on a CPU rank), so between two GPU ranks of one host the
 * bytes cross host memory once. The signals of one counter are chained so
 * that they are published in piece order.
 *
 * A transfer of up to the window's ll_bytes is one piece in LL form
 * (plan.h, enum hc_ll): its copies write and read the LL slot of the
 * piece, the rest is the same. A GPU receiver then reads the data with
 * its flags in one read of host memory instead of reading filled first
 * (bench/gpu/README.md).
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

static char *window_slot(const struct hc_plan_window *w, bool send, uint64_t piece) {
  return (char *)(send ? w->w.tx : w->w.rx) + (piece % HC_WINDOW_SLOTS) * w->slot_bytes;
}

static uint64_t *ll_slot(const struct hc_plan_window *w, bool send, uint64_t piece) {
  return (send ? w->ll_tx : w->ll_rx) + (piece % HC_WINDOW_SLOTS) * hc_ll_words(w->ll_bytes);
}

/* Never 0, what LL words hold before anyone writes them. */
static uint32_t ll_flag(uint64_t piece) { return (uint32_t)(piece % UINT32_MAX) + 1; }

/* The wait before piece `piece` of transfer s with w: until the receiver
 * has freed piece - SLOTS (a send), or the sender has filled piece (a
 * receive, whose signature exec checks then). */
static hc_ref_t push_window_wait(struct hc_plan *p, struct hc_plan_window *w, const struct hc_step *s, uint64_t piece,
                                 uint8_t lane, enum hc_ll ll) {
  const bool send = s->kind == HC_STEP_SEND;
  /* peer: whose process moves the counter (exec watches it while waiting). */
  struct hc_step wait = {.kind = HC_STEP_WAIT, .lane = lane, .ll = ll, .peer = s->peer};
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
  return hc_plan_push(p, wait);
}

/* Publishes filled (send) or freed (receive) = piece + 1 once `after` is
 * done, chained after the direction's previous signal so that the counter
 * only grows. relaxed (hc_step.relaxed): a freed that follows only reads
 * of the slot. */
static void push_window_signal(struct hc_plan *p, struct hc_plan_window *w, bool send, uint64_t piece, uint8_t lane,
                               hc_ref_t after, bool relaxed) {
  hc_ref_t *last = &w->last_signal[!send];
  *last = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_SIGNAL,
                                           .lane = lane,
                                           .relaxed = relaxed,
                                           .src0 = send ? w->w.tx_filled : w->w.rx_freed,
                                           .count = piece + 1,
                                           HC_DEPS(after, *last)});
}

/* The steps of one transfer with a windowed peer; returns what the
 * transfer's dependents wait for. */
static hc_ref_t push_window_transfer(struct hc_plan *p, struct hc_plan_window *w, const struct hc_step *s,
                                     bool device_memory, hc_ref_t *pieces) {
  const bool send = s->kind == HC_STEP_SEND;
  const int npieces = (int)HC_DIV_UP(s->count, w->slot_bytes);
  const bool ll = s->count <= w->ll_bytes; /* every piece in LL form (one, unless the slots are smaller) */
  for (int k = 0; k < npieces; k++) {
    size_t off = (size_t)k * w->slot_bytes, len = HC_MIN(w->slot_bytes, s->count - off);
    uint64_t piece = send ? w->tx_pieces++ : w->rx_pieces++;
    char *slot = window_slot(w, send, piece);
    /* A GPU runs the three steps in order on the copy's stream. */
    const uint8_t lane = send && device_memory ? HC_LANE_TO_HOST : HC_LANE_MAIN;
    hc_ref_t ready = push_window_wait(p, w, s, piece, lane, ll && !send ? HC_LL_POLLED : HC_LL_NONE);
    struct hc_step copy = {.kind = HC_STEP_COPY, .lane = lane, .count = len, HC_DEPS(ready)};
    if (ll) {
      copy.ll = send ? HC_LL_PUT : HC_LL_GET;
      copy.ll_flag = ll_flag(piece);
      slot = (char *)ll_slot(w, send, piece);
    }
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
        copied = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_SIGNAL,
                                                  .lane = lane,
                                                  .relaxed = 1,
                                                  .src0 = w->w.tx_sig + 2 * (piece % HC_NET_WINDOW_SIGS) + word,
                                                  .count = s->call < p->nsigs ? p->sigs[s->call].w[word] : 0,
                                                  HC_DEPS(copied)});
    /* An LL get's freed publishes no data: the words it read are in. */
    push_window_signal(p, w, send, piece, lane, copied, ll && !send);
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
  return hc_plan_push(
      p,
      (struct hc_step){.kind = HC_STEP_WAIT, .lane = HC_LANE_MAIN, .src0 = &gate_counter, .count = 0, HC_DEPS(after)});
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

/* One staging pass: the plan being rebuilt and what its transfers share. */
struct stage {
  struct hc_plan *p;
  const struct hc_plan_ctx *x;
  bool device_memory; /* the plan's buffers outside its host scratch are device memory */
  size_t piece_max;
  hc_ref_t *pieces; /* one transfer's pieces */
  /* [memory][direction]: memory 0 pinned host slots, 1 device scratch
   * slots (slot_memory); direction 0 sends, 1 receives. */
  struct slot_ring ring[2][2];
  /* A direct piece reads or writes GPU memory that the caller's stream
   * wrote or will read, with no copy on a lane to order it: it waits for
   * the stream to reach the call (the entry gate, first on the main lane),
   * and the stream waits for every direct piece (the plan's direct_refs,
   * ndirect of them) before the call ends (the exit gate, last). */
  hc_ref_t entry_gate;
  size_t ndirect;
  /* A window receive whose bytes the next step reduces straight from the
   * slot (reduced_in_slot): its slot, for that step, which also frees it. */
  struct hc_plan_window *landing_window; /* NULL: none pending */
  uint64_t landing_piece;
  const void *landing_dst; /* the receive's own destination, which the reduction names */
};

/* What a plan's transfers ask of staging. */
struct stage_needs {
  bool any;      /* some transfer is cut into pieces */
  bool rings[2]; /* some piece of device memory goes through that memory's slots */
  bool direct;   /* some piece of device memory goes straight to the transport */
  size_t max_pieces;
};

/* Whether the send or receive s moves device memory to another rank. */
static bool moves_device_memory(const struct stage *st, const struct hc_step *s) {
  return st->device_memory && s->peer != st->x->rank &&
         !hc_plan_in_host_scratch(st->p, s->kind == HC_STEP_SEND ? s->src0 : s->dst);
}

static struct stage_needs survey(const struct stage *st, const struct hc_step *steps, int n) {
  struct stage_needs need = {.max_pieces = 1};
  for (int i = 0; i < n; i++) {
    const struct hc_step *s = &steps[i];
    if (s->kind != HC_STEP_SEND && s->kind != HC_STEP_RECV) continue;
    const struct hc_plan_window *w = window_of(st->x, s);
    if (w != NULL) {
      need.any = true;
      need.max_pieces = HC_MAX(need.max_pieces, HC_DIV_UP(s->count, w->slot_bytes));
      continue;
    }
    const bool dev = moves_device_memory(st, s) && s->count > 0;
    if (dev && some_piece(st->x, s->peer, s->count, st->piece_max, true))
      need.rings[slot_memory(st->x, s->peer)] = true;
    need.direct |= dev && some_piece(st->x, s->peer, s->count, st->piece_max, false);
    if (dev || s->count > st->piece_max) {
      need.any = true;
      need.max_pieces = HC_MAX(need.max_pieces, HC_DIV_UP(s->count, st->piece_max));
    }
  }
  return need;
}

/* The stage's tables, carved from the plan's kept stage_refs: the map of
 * old steps to new ones, the pieces' list and, for each memory some staged
 * piece goes through, its two slot rings' last users; and the rings
 * themselves (pinned host scratch, or device scratch). */
static hc_result_t stage_alloc(struct stage *st, const struct stage_needs *need, int nold, hc_ref_t **map) {
  struct hc_plan *p = st->p;
  const int nslots = HC_MAX(st->x->scratch_slots, 2);
  const size_t nrefs = (size_t)nold + 1 + need->max_pieces + 4 * (size_t)nslots;
  if (p->stage_refs_cap < nrefs) {
    free(p->stage_refs);
    p->stage_refs_cap = 0;
    if ((p->stage_refs = malloc(nrefs * sizeof(hc_ref_t))) == NULL)
      return HC_FAIL(HC_ERR_SYSTEM, "plan: out of memory staging %d steps", nold);
    p->stage_refs_cap = nrefs;
  }
  memset(p->stage_refs, 0, nrefs * sizeof(hc_ref_t));
  *map = p->stage_refs;
  st->pieces = *map + nold + 1;
  hc_ref_t *last_users = st->pieces + need->max_pieces;
  const size_t bytes = st->piece_max * (size_t)nslots;
  bool ok = true;
  for (int m = 0; m < 2; m++)
    for (int d = 0; d < 2 && need->rings[m]; d++) {
      struct slot_ring *rg = &st->ring[m][d];
      *rg = (struct slot_ring){.bytes = st->piece_max, .count = nslots, .last_user = last_users};
      last_users += nslots;
      rg->base = m ? hc_plan_scratch(p, bytes) : hc_plan_host_scratch(p, bytes);
      ok = ok && rg->base != NULL;
    }
  return ok ? HC_OK : HC_FAIL(HC_ERR_SYSTEM, "plan: out of memory staging %d steps", nold);
}

/* Remembers a direct piece for the exit gate. */
static void note_direct(struct stage *st, hc_ref_t piece) {
  struct hc_plan *p = st->p;
  if (hc_plan_room(p, &p->direct_refs, st->ndirect, &p->direct_cap, sizeof(*p->direct_refs), 64))
    p->direct_refs[st->ndirect++] = piece;
}

/* Host memory, or device memory the transport reaches (dev): the piece
 * [off, off + len) of transfer s in place, no copies. */
static hc_ref_t push_piece_in_place(struct stage *st, const struct hc_step *s, size_t off, size_t len, bool dev) {
  struct hc_step piece = *s;
  piece.count = len;
  if (s->kind == HC_STEP_SEND) piece.src0 = (const char *)s->src0 + off;
  else piece.dst = (char *)s->dst + off;
  if (dev) add_dep(st->p, &piece, st->entry_gate);
  hc_ref_t ref = hc_plan_push(st->p, piece);
  if (dev) note_direct(st, ref);
  return ref;
}

/* The piece [off, off + len) of transfer s of device memory through the
 * next slot of its direction's ring: a copy into the slot and its send, or
 * the receive into the slot and a copy out. */
static hc_ref_t push_staged_piece(struct stage *st, const struct hc_step *s, size_t off, size_t len) {
  const bool send = s->kind == HC_STEP_SEND;
  struct slot_ring *rg = &st->ring[slot_memory(st->x, s->peer)][!send];
  const int si = rg->next;
  rg->next = (rg->next + 1) % rg->count;
  char *slot = rg->base + (size_t)si * rg->bytes;
  /* A piece waits for what the whole transfer waited for, and for the
   * slot's previous user. */
  struct hc_step first = *s;
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
    first.src0 = (const char *)s->src0 + off;
    hc_ref_t copied = hc_plan_push(st->p, first);
    return rg->last_user[si] = hc_plan_push(st->p, (struct hc_step){.kind = HC_STEP_SEND,
                                                                    .peer = s->peer,
                                                                    .call = s->call,
                                                                    .src0 = slot,
                                                                    .count = len,
                                                                    HC_DEPS(copied)});
  }
  first.dst = slot;
  hc_ref_t got = hc_plan_push(st->p, first);
  return rg->last_user[si] = hc_plan_push(
             st->p, (struct hc_step){
                        .kind = HC_STEP_COPY, .dst = (char *)s->dst + off, .src0 = slot, .count = len, HC_DEPS(got)});
}

/* Transfer s cut into pieces of piece_max bytes; returns what its
 * dependents wait for. */
static hc_ref_t push_transfer(struct stage *st, const struct hc_step *s, bool dev) {
  const int npieces = (int)HC_DIV_UP(s->count, st->piece_max);
  for (int k = 0; k < npieces; k++) {
    const size_t off = (size_t)k * st->piece_max, len = HC_MIN(st->piece_max, s->count - off);
    st->pieces[k] = dev && piece_staged(st->x, s->peer, len) ? push_staged_piece(st, s, off, len)
                                                             : push_piece_in_place(st, s, off, len, dev);
  }
  return hc_plan_join(st->p, st->pieces, npieces);
}

static bool ranges_overlap(const void *a, const void *b, size_t bytes) {
  const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bytes && y < x + bytes;
}

/* Whether old step i, a window receive, is reduced straight from its slot
 * by step i + 1: a reduction that depends on it, reads its bytes where
 * they land and nowhere else reads them (hc_step.landed), and writes
 * elsewhere. A piece of one slot, small enough for this rank
 * (hc_plan_ctx.window_reduce_bytes), and not in LL form. Only the very
 * next step, so that no other signal of the window comes between the
 * piece's wait and its freed, which keeps the counter growing in piece
 * order. */
static bool reduced_in_slot(const struct stage *st, const struct hc_step *old, int nold, int i) {
  const struct hc_step *recv = &old[i], *red = &old[i + 1];
  const struct hc_plan_window *w = window_of(st->x, recv);
  if (recv->kind != HC_STEP_RECV || w == NULL || i + 1 >= nold || red->kind != HC_STEP_REDUCE) return false;
  const size_t bytes = red->count * hc_dtype_size(red->dtype);
  bool depends = false;
  for (int d = 0; d < HC_STEP_MAX_DEPS; d++) depends |= red->deps[d] == i + 1;
  const bool reads_landing =
      ((red->landed & 1) && red->src0 == recv->dst) || ((red->landed & 2) && red->src1 == recv->dst);
  return depends && reads_landing && recv->count == bytes && bytes > w->ll_bytes && bytes <= w->slot_bytes &&
         bytes <= st->x->window_reduce_bytes && !ranges_overlap(red->dst, recv->dst, bytes);
}

/* The receive of reduced_in_slot: only its wait; the reduction reads the
 * slot and frees it. */
static hc_ref_t push_landing(struct stage *st, struct hc_plan_window *w, const struct hc_step *s) {
  st->landing_window = w;
  st->landing_piece = w->rx_pieces++;
  st->landing_dst = s->dst;
  return push_window_wait(st->p, w, s, st->landing_piece, HC_LANE_MAIN, HC_LL_NONE);
}

/* The reduction after push_landing, reading the slot; then the slot's freed. */
static hc_ref_t push_reduce_in_slot(struct stage *st, struct hc_step s) {
  struct hc_plan_window *w = st->landing_window;
  const void *slot = window_slot(w, false, st->landing_piece);
  if ((s.landed & 1) && s.src0 == st->landing_dst) s.src0 = slot;
  else s.src1 = slot;
  s.landed = 0;
  const hc_ref_t reduced = hc_plan_push(st->p, s);
  push_window_signal(st->p, w, false, st->landing_piece, HC_LANE_MAIN, reduced, false);
  st->landing_window = NULL;
  return reduced;
}

/* Old step i in the rebuilt plan (map: old refs to new ones); returns
 * what its dependents wait for. */
static hc_ref_t restage_step(struct stage *st, const struct hc_step *old, int nold, int i, const hc_ref_t *map) {
  struct hc_step s = old[i];
  for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
    if (s.deps[d]) s.deps[d] = map[s.deps[d] - 1];
  if (st->landing_window != NULL) return push_reduce_in_slot(st, s);
  const bool transfer = s.kind == HC_STEP_SEND || s.kind == HC_STEP_RECV;
  struct hc_plan_window *w = window_of(st->x, &s);
  if (w != NULL && s.count > 0) {
    if (reduced_in_slot(st, old, nold, i)) return push_landing(st, w, &s);
    return push_window_transfer(st->p, w, &s, st->device_memory, st->pieces);
  }
  const bool dev = transfer && moves_device_memory(st, &s);
  if (!transfer || s.count == 0 || (!dev && s.count <= st->piece_max)) return hc_plan_push(st->p, s);
  return push_transfer(st, &s, dev);
}

hc_result_t hc_plan_stage(struct hc_plan *p, const struct hc_plan_ctx *x, bool device_memory) {
  struct stage st = {.p = p, .x = x, .device_memory = device_memory, .piece_max = x->chunk_bytes};
  struct hc_step *old = p->steps;
  const int nold = p->nsteps;
  const struct stage_needs need = survey(&st, old, nold);
  if (!need.any) return HC_OK;
  for (int peer = 0; x->windows && peer < x->nranks; peer++)
    x->windows[peer].last_signal[0] = x->windows[peer].last_signal[1] = 0;
  hc_ref_t *map = NULL;
  hc_result_t r = stage_alloc(&st, &need, nold, &map);
  if (r == HC_OK) {
    /* Rebuild the step list in the spare array, old steps read from `old`,
     * which becomes the spare. */
    const int old_cap = p->cap;
    p->steps = p->spare;
    p->cap = p->spare_cap;
    p->nsteps = 0;
    p->spare = old;
    p->spare_cap = old_cap;
    if (need.direct) st.entry_gate = push_gate(p, 0);
    for (int i = 0; i < nold; i++) map[i] = restage_step(&st, old, nold, i, map);
    if (need.direct && p->cap >= 0) push_gate(p, hc_plan_join(p, p->direct_refs, (int)st.ndirect));
    if (p->cap < 0) r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory staging %d steps", nold);
  }
  return r;
}
