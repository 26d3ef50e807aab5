/*
 * exec: the progress engine. Runs plans to completion: posts sends and
 * receives to the transports in each peer's order, tests them, and runs the
 * local steps (reduce, copy, scale) on the device backend as soon as their
 * dependencies are done. Knows nothing of the API.
 *
 * For host buffers the calling thread drives the engine (no hand-off to
 * another thread, so a small all-reduce costs the wire and nothing else).
 * When nothing moves it polls, first bare while a peer is likely to answer
 * soon, then yielding the core between passes, and after HETCCL_SPIN_US
 * sleeps in the transport's wait (exec.c says why).
 */
#ifndef HC_EXEC_H_
#define HC_EXEC_H_

#include <stdatomic.h>

#include "../net/net.h"
#include "../plan/plan.h"

/* A comm's links, as exec sees them. */
struct hc_links {
  int rank, nranks;
  struct hc_link *peer;           /* nranks entries */
  const atomic_bool *abort_flag;  /* set by hetcclCommAbort from any thread */
  uint64_t spin_ns;               /* how long to poll before sleeping (HETCCL_SPIN_US) */
  bool cores_shared;              /* local ranks outnumber cores: never poll without yielding */
  bool own_cpu;                   /* bound to one CPU that no local peer may run on (below) */
  struct hc_host_pool *host_pool; /* helpers of the local steps of host plans (HETCCL_HOST_HELPERS); may be NULL */
  /* The wait policy's memory (exec.c), written by the thread that runs
   * this comm's plans: how soon peers answered lately, and for how many
   * more waits a yield that ran another thread here still counts. */
  uint64_t answer_ns;
  int peer_here_waits;
  /* What this comm's waits came to, logged at INFO (EXEC) when the comm is
   * freed: whether ranks that wait on each other poll, yield or sleep, for
   * a benchmark run on a machine a profiler cannot reach (docs/perf.md). A
   * wait is one idle stretch of a call, from the first pass that moved
   * nothing to the next that moved. Written like the two above. */
  struct hc_exec_wait_stats {
    uint64_t runs; /* blocking runs (calls, groups) that waited or not */
    uint64_t waits;
    uint64_t ended[3];        /* by the phase the wait had reached: HC_WAIT_BARE, _YIELD, _SLEEP */
    uint64_t sleeps;          /* sleeps in a transport (a wait may take several) */
    uint64_t idle_ns, max_ns; /* all waits' time, the longest one's */
  } waits;
};

enum { HC_WAIT_BARE, HC_WAIT_YIELD, HC_WAIT_SLEEP };

/* Allocates links->peer (nranks, empty until net chooses each one) and
 * sets the wait policy: local_ranks ranks of the comm share this host. */
hc_result_t hc_exec_links_init(struct hc_links *links, int rank, int nranks, const atomic_bool *abort_flag,
                               int local_ranks);

/* Logs links->waits at INFO (EXEC), if any wait was counted. */
void hc_exec_links_log_waits(const struct hc_links *links);

/* Sets links->own_cpu: the calling thread may run on one CPU only, and no
 * same-host peer (links->peer[].pid, read by pid) may run there. */
void hc_exec_links_check_cpus(struct hc_links *links);

/* One plan of host memory to run on one comm's links. (A GPU comm's plans
 * are split by enqueue.h: its streams take the local steps, and this
 * engine, on the progress engine's thread (engine.h), the transfers.) */
struct hc_exec_job {
  struct hc_links *links;
  struct hc_plan *plan;
  struct hc_exec_memo **memo; /* optional: where plan's run tables are kept (below) */
};

/* A run's tables of a plan (dependency counts, who waits for whom, the
 * transfer queues), kept between runs of a plan that runs again unchanged
 * (api's plan cache), so that a repeated call allocates nothing: the first
 * hc_exec_run_blocking of a job whose memo slot is empty fills it, later
 * ones rewind it. Whoever changes or frees the plan frees the memo first. */
struct hc_exec_memo;
void hc_exec_memo_free(struct hc_exec_memo *memo); /* takes NULL */

/* Runs every job to completion, or fails: HC_ERR_REMOTE when a peer dies,
 * HETCCL_TIMEOUT passes from the first pass that moved nothing (naming a
 * peer still awaited) or an abort flag is set; the transports' errors as
 * they are. Blocks the calling thread. The clock (and the setting) is first
 * read at that pass: a call that never waits (an inline send, a broadcast's
 * root) reads neither. */
hc_result_t hc_exec_run_blocking(struct hc_exec_job *jobs, int njobs);

/* The same one plan at a time, for a thread that serves several (the
 * progress engine, engine.h): start, then poll until *done (a poll never
 * blocks; *moved says whether anything happened), then end. A failed poll
 * returns what hc_exec_run_blocking would. */
struct hc_exec_run;
hc_result_t hc_exec_start(const struct hc_exec_job *job, struct hc_exec_run **out);
hc_result_t hc_exec_poll(struct hc_exec_run *run, bool *done, bool *moved);
/* Sleeps (at most timeout_ms) in the transport the runs wait for. */
hc_result_t hc_exec_sleep(struct hc_exec_run *const *runs, int nruns, int timeout_ms);
void hc_exec_end(struct hc_exec_run *run); /* takes NULL */
/* Where a run stands, for messages and the state dump. */
struct hc_exec_state {
  int steps_done, steps;
  int failed_peer;              /* the peer of the last transport call (whom a failure concerns), or -1 */
  int awaited_peer;             /* a peer whose transfer is still in flight or queued, or -1 */
  const atomic_ullong *counter; /* a counter a WAIT step waits on, or NULL */
  uint64_t counter_target;
};
void hc_exec_describe(const struct hc_exec_run *run, struct hc_exec_state *out);

/* A COPY, REDUCE or SCALE step on dev, ordered on stream. A REDUCE given
 * a trap word checks it first where it runs as a kernel, and says so in
 * *trap_checked (hc_reduce_args); NULL, NULL for none. */
hc_result_t hc_exec_local_step(const struct hc_dev_ops *dev, const struct hc_step *s, hc_stream_t stream,
                               const volatile uint64_t *trap_word, bool *trap_checked);

#endif
