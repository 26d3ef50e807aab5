/*
 * Pulls or copies: chosen per collective and size class by timing both.
 *
 * A same-host peer takes a large message either by pulling it straight
 * from the sender's buffer (one copy, by the receiver: shm's CMA) or
 * through the pair's slots (two copies, one on each side, pipelined).
 * Which is faster depends on the machine and the collective more than on
 * the bytes: on the 16-core Xeon pulls won the all-reduce but lost the
 * 2-rank broadcast by 1.8x; on the 2-core VM a 2-rank all-reduce of
 * 1 MiB takes 1.8x as long with pulls (the reduce that follows takes 5x
 * the cycles), while all-gather and reduce-scatter run the same either
 * way (docs/perf.md). A copy-speed calibration at init did not predict
 * that, so a comm times its own calls: the first calls of each
 * (collective, in place or not, log2 bytes) class run one way, then the
 * other, and the way with the shorter best time carries the class's later
 * calls. "Pulls" means every send that can be pulled, a lone send too
 * (the root of a 2-rank broadcast, which shm otherwise sends through
 * slots): the timing decides there as well.
 *
 * Either way moves the same bytes into the same places, so the choice
 * changes no result. Each rank chooses for its own sends: ranks make the
 * same calls in the same order, so their trials line up, and ranks that
 * time differently end up mixing the ways, which is correct too.
 */
#include "api_priv.h"

/* Whether a works in place, as NCCL defines it: this rank's block of the
 * larger buffer is the smaller one. */
static bool in_place(const struct hetcclComm *comm, const struct hc_coll_args *a) {
  const size_t block = a->count * hc_dtype_size(a->dtype) * (size_t)comm->rank;
  switch (a->coll) {
  case HC_COLL_ALLGATHER: return (const char *)a->recvbuf + block == (const char *)a->sendbuf;
  case HC_COLL_REDUCESCATTER: return (const char *)a->sendbuf + block == (const char *)a->recvbuf;
  default: return a->sendbuf == a->recvbuf;
  }
}

/* a's class, or NULL where there is no choice to make (HETCCL_SHM_CMA_TUNE
 * off, no transport pulls, a call too small to be pulled). In place and
 * out of place are classes apart: an out-of-place broadcast's root also
 * copies its input to its output, which made it pull (16-core Xeon,
 * 2 ranks from 4 MiB) where in place its slots ran twice as fast. */
static struct hc_pull_class *pull_class_of(struct hetcclComm *comm, const struct hc_coll_args *a) {
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  /* Every message of a call is at most its buffer (the per-rank one for
   * all-gather and the like): smaller calls have nothing to pull. */
  if (comm->pull_min_bytes == 0 || bytes < comm->pull_min_bytes || a->coll == HC_COLL_ALLTOALLV) return NULL;
  int log2_bytes = 0;
  while ((bytes >> log2_bytes) > 1) log2_bytes++;
  return &comm->pull_classes[a->coll][in_place(comm, a)][log2_bytes];
}

bool hc_pull_class_allows(const struct hc_pull_class *c, bool *trial) {
  *trial = c->calls < 2 * HC_PULL_TRIALS;
  return *trial ? c->calls < HC_PULL_TRIALS : !c->copies;
}

bool hc_pull_class_record(struct hc_pull_class *c, bool pulled, uint64_t ns) {
  uint64_t *best = &c->best_ns[pulled ? 0 : 1];
  if (*best == 0 || ns < *best) *best = ns;
  if (++c->calls < 2 * HC_PULL_TRIALS) return false;
  c->copies = c->best_ns[1] < c->best_ns[0];
  return true;
}

static void pull_choice_log(const struct hetcclComm *comm, const struct hc_coll_args *a,
                            const struct hc_pull_class *c) {
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  const double pulls_us = (double)c->best_ns[0] / 1e3, copies_us = (double)c->best_ns[1] / 1e3;
  HC_INFO(HC_API, "comm %p%s%s rank %d: %s of %zu bytes %s (and its size class): %s, best %.1f us against %.1f us %s",
          (void *)comm, HC_COMM_NAME_ARGS(comm), comm->rank, hc_coll_name(a->coll), bytes,
          in_place(comm, a) ? "in place" : "out of place", c->copies ? "slot copies" : "pulls",
          c->copies ? copies_us : pulls_us, c->copies ? pulls_us : copies_us, c->copies ? "pulled" : "through slots");
}

hc_result_t hc_pull_choice_run(struct hetcclComm *comm, const struct hc_coll_args *a, struct hc_exec_job *job) {
  struct hc_pull_class *c = pull_class_of(comm, a);
  if (c == NULL) return hc_exec_run_blocking(job, 1);
  bool trial, allow = hc_pull_class_allows(c, &trial);
  hc_net_set_choose_pulls(&comm->nets, allow ? HC_NET_PULLS_ALL : HC_NET_PULLS_NONE);
  const uint64_t start_ns = trial ? hc_now_ns() : 0;
  hc_result_t r = hc_exec_run_blocking(job, 1);
  if (trial && r == HC_OK && hc_pull_class_record(c, allow, hc_now_ns() - start_ns)) pull_choice_log(comm, a, c);
  hc_net_set_choose_pulls(&comm->nets, HC_NET_PULLS_DEFAULT);
  return r;
}
