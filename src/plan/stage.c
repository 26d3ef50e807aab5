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
 * With a peer that has a window (plan.h, hc_plan_window), no transport is
 * involved. Piece k of a send: wait until the receiver has freed piece
 * k - SLOTS, copy into tx slot k % SLOTS, publish filled = k + 1. Piece k
 * of a receive: wait until filled > k, copy out of rx slot k % SLOTS,
 * publish freed = k + 1. Before filled, the sender also writes the piece's
 * signature (net.h) into the slot's two control words, which the receiver
 * checks once filled has passed k, before it uses the data (exec.c). The copies are the device's own (a GPU's DMA
 * engines, memcpy on a CPU rank), so between two GPU ranks of one host the
 * bytes cross host memory once. The signals of one counter are chained so
 * that they are published in piece order.
 */
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
      wait.src1 = w->w.rx_sig + 2 * (piece % HC_WINDOW_SLOTS);
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
                                                  .src0 = w->w.tx_sig + 2 * (piece % HC_WINDOW_SLOTS) + word,
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

hc_result_t hc_plan_stage(struct hc_plan *p, const struct hc_plan_ctx *x, bool device_memory) {
  struct hc_step *old = p->steps;
  const int nold = p->nsteps;
  const size_t piece_max = x->chunk_bytes;
  const int nslots = HC_MAX(x->scratch_slots, 2);
  hc_ref_t *map = calloc((size_t)nold + 1, sizeof(hc_ref_t));
  hc_ref_t *pieces = NULL;
  struct slot_ring ring[2] = {{0}}; /* [0] sends, [1] receives */
  size_t max_pieces = 1;
  bool any = false, rings = false; /* rings: some transfer of device memory goes through a transport */
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
    rings |= dev && s->count > 0;
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
  for (int d = 0; d < 2 && rings; d++) {
    ring[d] = (struct slot_ring){.bytes = piece_max, .count = nslots};
    ring[d].base = hc_plan_host_scratch(p, piece_max * (size_t)nslots);
    ring[d].last_user = calloc((size_t)nslots, sizeof(hc_ref_t));
  }
  hc_result_t r = HC_OK;
  for (int peer = 0; x->windows && peer < x->nranks; peer++)
    x->windows[peer].last_signal[0] = x->windows[peer].last_signal[1] = 0;
  if (map == NULL || pieces == NULL ||
      (rings && (ring[0].base == NULL || ring[1].base == NULL || ring[0].last_user == NULL ||
                         ring[1].last_user == NULL))) {
    r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of memory staging %d steps", nold);
    goto out;
  }
  /* Rebuild the step list from scratch, old steps read from `old`. */
  p->steps = NULL;
  p->nsteps = p->cap = 0;
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
    if (!dev) {
      /* Host memory: pieces in place, no copies. */
      for (int k = 0; k < npieces; k++) {
        size_t off = (size_t)k * piece_max, len = HC_MIN(piece_max, s.count - off);
        struct hc_step piece = s;
        piece.count = len;
        if (send) piece.src0 = (const char *)s.src0 + off;
        else piece.dst = (char *)s.dst + off;
        pieces[k] = hc_plan_push(p, piece);
      }
      map[i] = hc_plan_join(p, pieces, npieces);
      continue;
    }
    struct slot_ring *rg = &ring[recv];
    for (int k = 0; k < npieces; k++) {
      size_t off = (size_t)k * piece_max, len = HC_MIN(piece_max, s.count - off);
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
  if (p->cap < 0) r = HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory staging %d steps", nold);
  free(old);
out:
  if (r != HC_OK && p->steps == NULL) p->steps = old; /* failed before the rebuild */
  free(map);
  free(pieces);
  free(ring[0].last_user);
  free(ring[1].last_user);
  return r;
}
