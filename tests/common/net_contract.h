/*
 * The transport contract of src/net/net.h as one suite that runs over every
 * transport, in the spirit of gloo's transport-parameterised tests: a case
 * is a body that both ends of one connected pair run, rank 0 on one end and
 * rank 1 on the other, whatever carries them (two threads, two processes of
 * one host, two VMs). The cases:
 *   sizes           0, 1, small odd sizes, each of the transport's edges
 *                   (inline limit, slot, chunk) and one either side of it,
 *                   several MiB: one way, the other way, then both at once,
 *                   all posted before any test; bytes and the receive
 *                   buffers' guards checked, a 0-byte receive writes
 *                   nothing; every other message carries a signature
 *                   (isend / irecv with a signature) that matches;
 *   ordering        512 messages each way of sizes 0..5000 and ~100K, all
 *                   in flight: each lands in the receive posted at its
 *                   position (net.h matches in posted order; a message
 *                   that overtook another shows as wrong bytes or counts);
 *   many_in_flight  64 messages each way at once, of mixed sizes up to
 *                   3 MiB (more than any transport's slots or credits);
 *   mismatch_counts_small, _large  rank 1 posts a receive longer than the
 *                   message: it fails with HC_ERR_USAGE, "mismatched
 *                   counts" and both lengths, and its connection stays
 *                   failed; rank 0's send ends (done or an error) in time;
 *   mismatch_sig_small, _large  equal lengths, different signatures: both
 *                   ends fail with HC_ERR_USAGE and the same raw words
 *                   ("mismatched calls: rank 0 called ..."), the sender on
 *                   its next request at the latest;
 *   stall_probe     both ends wait on a receive, nothing is sent: each
 *                   publishes a signature (stall_publish) and reads the
 *                   peer's (stall_peek); then rank 0 reports the mismatch
 *                   (mismatch_found) and closes, and rank 1's receive
 *                   fails with HC_ERR_USAGE naming both; skipped where the
 *                   transport has no stall probes;
 *   peer_close      rank 1 closes its ctx while rank 0 waits on a receive
 *                   and a large send: both fail with HC_ERR_REMOTE naming
 *                   rank 1;
 *   peer_killed     rank 1 (a process of its own) dies by SIGKILL in the
 *                   middle of large transfers (it sends, never receives,
 *                   so rank 0's send cannot finish): rank 0's requests fail with
 *                   HC_ERR_REMOTE naming rank 1 before the deadline;
 *   garbage         before the pair connects, junk connections (one sends
 *                   an HTTP request, one stays silent, one sends two bytes
 *                   and closes) reach rank 1's listener, where the
 *                   transport offers one (nc_transport.garbage; elsewhere
 *                   the case is skipped, saying so); the pair then comes
 *                   up and runs the sizes case.
 * Every wait has a deadline (nc_transport.step_s); failures are testutil
 * CHECKs, named by transport, case and rank.
 */
#ifndef HC_NET_CONTRACT_H_
#define HC_NET_CONTRACT_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/net.h"

#define NC_GARBAGE_FDS 3

struct nc_end;

/* What a transport brings to the suite besides its ops. */
struct nc_transport {
  const char *name;
  const struct hc_net_ops *ops;
  /* Sizes at which the transport changes path or cuts a message (inline
   * limit, slot, chunk, eager size): the sizes case sends each, one less
   * and one more. */
  const size_t *edges;
  int nedges;
  int step_s; /* deadline of one phase of a case; 0: 30 s */
  /* Optional: opens junk connections to the listener behind h (its end is
   * open, not yet connected), at most NC_GARBAGE_FDS, and returns how many
   * (-1 on failure, with a CHECK). NULL: the transport has no way in, and
   * the garbage case is skipped, saying so. */
  int (*garbage)(const struct hc_net_handle *h, int fds[NC_GARBAGE_FDS]);
  /* Optional: where send buffers come from (NULL: malloc, free). */
  void *(*send_alloc)(size_t n);
  void (*send_free)(void *p);
  /* Optional: runs on each end after a body that left no failure, before
   * the end closes (e.g. which path the messages took). */
  void (*after_body)(const struct nc_end *e);
  /* Optional, nc_run_pair only: runs once both ends have finished, given
   * the process ids of rank 0 and rank 1 (leftovers of the pair). */
  void (*after_pair)(int pid0, int pid1);
};

/* How the two ends reach each other outside the transport. swap publishes
 * this end's handle and returns the peer's; sync returns once both ends
 * called it. Both give up (false) after a deadline. */
struct nc_link {
  bool (*swap)(void *arg, int me, const struct hc_net_handle *mine, struct hc_net_handle *theirs);
  bool (*sync)(void *arg, int me);
  void *arg;
};

/* One end of a pair, as a case body sees it. */
struct nc_end {
  const struct nc_transport *t;
  const struct hc_net_ops *ops;
  int me, peer;
  void *ctx, *conn; /* a body that closes ctx sets both to NULL */
  atomic_bool abort_flag;
  const struct nc_link *link;
  uint64_t step_ns;
};

struct nc_case {
  const char *name;
  void (*body)(struct nc_end *e);
  bool peer_dies;     /* rank 1 kills itself: it must be a process of its own */
  bool needs_garbage; /* runs only where nc_transport.garbage is set */
};
extern const struct nc_case nc_cases[];
extern const int nc_ncases;
/* The case called name, or NULL. */
const struct nc_case *nc_case_find(const char *name);

/* One end of case c: opens t as rank me of 2, swaps handles over link,
 * connects, runs the body, closes. Failures are CHECKs on this thread. */
void nc_end_run(const struct nc_transport *t, const struct nc_case *c, int me, const struct nc_link *link);

/* Tests the requests until all are done (each done one becomes NULL) or one
 * fails: returns that failure, HC_OK when all are done. Past e's deadline a
 * CHECK fails (a hang) and the result is HC_ERR_INTERNAL. Spins a little
 * without progress before it sleeps in wait_blocking, as exec does. */
hc_result_t nc_complete(struct nc_end *e, void **reqs, int n);
/* Payloads: nc_fill writes the pattern of seed, nc_first_wrong returns the
 * index of the first byte that differs from it (SIZE_MAX: none); the seed
 * differs per sender, round and message. */
uint64_t nc_seed(int src, int round, int idx);
void nc_fill(uint8_t *p, size_t n, uint64_t seed);
size_t nc_first_wrong(const uint8_t *p, size_t n, uint64_t seed);

/* Both ends on this host: two threads of this process, or rank 1 in a
 * forked child (rank 0 stays in the caller, which must not have threads).
 * A case whose peer dies is refused in NC_THREADS. Prints "ok" or "FAIL"
 * with transport and case; returns true when both ends passed. */
enum nc_mode { NC_THREADS, NC_PROCESSES };
bool nc_run_pair(const struct nc_transport *t, const struct nc_case *c, enum nc_mode mode);
/* Every case, or only the one named only (NULL: all), through nc_run_pair
 * in mode; those whose peer dies in NC_PROCESSES. Returns how many failed. */
int nc_run_suite(const struct nc_transport *t, enum nc_mode mode, const char *only);

#endif
