/* api/: the communicator object and what the native API's files share. */
#ifndef HC_API_PRIV_H_
#define HC_API_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>

#include "../bootstrap/bootstrap.h"
#include "../exec/exec.h"
#include "../util/util.h"
#include "hetccl.h"

/* The public API; everything else stays hidden (-fvisibility=hidden). */
#define HC_EXPORT __attribute__((visibility("default")))

#define HC_COMM_MAGIC_HEAD 0x6865746363636f6dull /* "hetcccom" */
#define HC_COMM_MAGIC_TAIL 0x6d6f636363746568ull
#define HC_MAX_PREMUL_OPS 64
#define HC_GROUP_NAME_BYTES 32
#define HC_MAX_LOGGED_PEERS 64 /* the INFO line of GPU paths names this many peers at most */

/* What every rank publishes at init; every rank derives the same groups and
 * transports from the same table. */
struct hc_peer_info {
  uint32_t magic;
  int32_t rank;
  int32_t pid;
  int32_t device_kind; /* enum hc_mem_kind */
  int32_t device_id;
  int32_t group;          /* filled after the exchange: index of the group */
  int32_t vendor_ok;      /* the vendor library of device_kind loaded here */
  int32_t vendor_version; /* its version (NCCL's numbering; RCCL reports its NCCL base) */
  int32_t ll_bytes;       /* window pieces it writes and reads in LL form, up to (comm.c: ll_bytes_offered) */
  char group_name[HC_GROUP_NAME_BYTES];
  int32_t fp8_layout;                   /* enum hc_fp8_layout: what this rank's fp8 buffers hold */
  char gpu_bus_id[HC_PCI_BUS_ID_BYTES]; /* its GPU's PCI bus id; empty: a CPU rank, or the driver cannot say */
  int32_t gpu_mps;                      /* a GPU rank whose contexts are MPS clients (hc_dev_caps.mps) */
  struct hc_net_record net;             /* its host and transports */
};

/* Do the ranks of these two records use one physical GPU? Their device
 * ordinals alone cannot say: each process numbers only the GPUs it sees
 * (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, which SLURM sets per task,
 * make every rank's GPU device 0), so the bus id decides where both know
 * it. */
bool hc_peers_share_gpu(const struct hc_peer_info *a, const struct hc_peer_info *b);

/* Do these two ranks take turns on one GPU? Ranks of two processes that
 * share a GPU each have a context there, which the GPU time-slices, unless
 * both are clients of an MPS server, which runs them at once. */
bool hc_peers_time_slice_gpu(const struct hc_peer_info *a, const struct hc_peer_info *b);

struct hc_premul_op {
  bool in_use;
  enum hc_dtype dtype;
  int residence;          /* hetcclScalarResidence_t */
  uint8_t factor[8];      /* host-immediate: the value */
  const void *factor_ptr; /* device residence: read at each call, when it is made */
};

struct hc_config {
  int blocking; /* 0: init, split and finalize return HC_IN_PROGRESS (comm_async.c) */
  enum hc_mem_kind device_kind;
  int device_id;
  char group_name[HC_GROUP_NAME_BYTES];
  char comm_name[64]; /* the caller's name for the comm, shown in its log lines */
};

/* Where a comm is in its life, as hc_comm_check and hetcclCommGetAsyncError
 * see it. A blocking comm is READY when the caller first sees it. A
 * nonblocking one (config blocking = 0) is handed out INITIALISING while a
 * thread of its own builds it, and its finalize runs on such a thread too
 * (comm_async.c); INIT_FAILED keeps the error for GetAsyncError until the
 * caller destroys or aborts the comm. */
enum hc_comm_state {
  HC_COMM_READY,
  HC_COMM_INITIALISING,
  HC_COMM_INIT_FAILED,
  HC_COMM_FINALIZING,
  HC_COMM_FINALIZED,
};

/* Calls of one collective and size class on a host comm, while the comm
 * times pulls against copies for them (pull_choice.c). */
struct hc_pull_class {
  uint8_t calls;       /* trial calls made so far (pull_choice.c) */
  bool copies;         /* after the trials: this rank's sends go through copies */
  uint64_t best_ns[2]; /* the shortest trial with pulls allowed [0], with copies only [1] */
};
#define HC_PULL_CLASSES 64 /* log2 of a call's bytes */
/* Timed calls of each way, in a run: the first HC_PULL_TRIALS calls of a
 * class allow pulls, as many after them do not. Runs rather than
 * alternate calls: on the 2-core VM a way runs slower for up to 4 calls
 * after the other, pages it has not touched for a while costing much
 * more on their next touch (docs/perf.md). The best of a run discounts
 * that, a call's first touch of fresh scratch, and a disturbed call. */
#define HC_PULL_TRIALS 3

struct hetcclComm {
  uint64_t magic_head;
  int rank, nranks;
  struct hc_config config;
  uint8_t id[HC_UNIQUE_ID_BYTES];
  struct hc_bootstrap *boot;
  struct hc_peer_info *peers; /* nranks */
  int ngroups;
  int *group_of; /* per rank: peers[i].group, for plans */
  /* fp8 across the comm, from the peer table (the same on every rank):
   * the first rank whose encodings differ from rank 0's, else -1. */
  int fp8_odd_rank;
  /* Another process's rank uses this rank's GPU: the GPU time-slices the
   * two contexts (without MPS), so no kernel of ours may spin waiting for
   * the other's work (HETCCL_GPU_PROGRAM_BYTES). */
  bool gpu_time_sliced;
  int local_ranks; /* ranks of the comm on this host, this one included */
  struct hc_links links;
  struct hc_net_set nets; /* the transports open here */
  /* Plans stage device memory through pinned host memory: a GPU comm
   * with a link whose transport cannot reach device memory (caps). */
  bool stage_device;
  struct hc_plan_ctx plan_ctx;
  bool windows_registered; /* plan_ctx.windows, with this rank's GPU driver */
  struct hc_plan plan;     /* reused call after call */
  uint32_t coll_seq;       /* collectives made so far (hc_coll_args.seq) */
  uint8_t barrier_byte;    /* what a host comm's barrier all-reduces (coll.c) */
  /* The plan cache (coll.c): plan still holds the steps and scratch of
   * this call, the last one made alone on this host comm. */
  bool plan_kept;
  struct hc_coll_args plan_call;
  struct hc_exec_memo *plan_memo; /* exec's tables of plan, while it is unchanged */
  /* Calls from this many bytes may pull, and time pulls against copies
   * (pull_choice.c); 0: none (HETCCL_SHM_CMA_TUNE=0, no transport pulls). */
  size_t pull_min_bytes;
  struct hc_pull_class pull_classes[HC_COLL_COUNT][2][HC_PULL_CLASSES]; /* [coll][in place][log2 bytes] */
  struct hc_premul_op premul[HC_MAX_PREMUL_OPS];
  atomic_bool abort_flag;
  atomic_int active_calls; /* calls inside the library on this comm */
  atomic_int async_error;  /* hc_result_t */
  pthread_mutex_t error_lock;
  char async_error_text[512];
  atomic_int state;       /* enum hc_comm_state */
  pthread_t task;         /* a nonblocking comm's init or finalize (comm_async.c) */
  bool task_started;      /* task is to be joined; the owner thread's */
  struct hc_proxy *proxy; /* GPU comms: their side of the process's progress engine */
  /* The vendor library of this rank's device kind, when some group runs
   * it (plan.h, hc_plan_ctx.group_vendor). A pass-through comm (one such
   * group) sends every call to vendor_comm; in a comm of several groups,
   * group_vendor_comm is the one of this rank's group. */
  const struct hc_vendor *vendor;
  void *vendor_comm;
  void *group_vendor_comm;
  bool *group_vendor; /* per group */
  bool *peer_gdr;     /* GPU comms: per peer, GPU memory straight to the NIC (plan_ctx.peer_gdr) */
  uint64_t magic_tail;
};

/* printf arguments that follow a comm's address with its name (config
 * commName) where it has one: "comm %p%s%s". */
#define HC_COMM_NAME_ARGS(comm) ((comm)->config.comm_name[0] ? " " : ""), (comm)->config.comm_name

/* Validates the handle: HC_ERR_ARG with a message for NULL or garbage.
 * hc_comm_check also wants the comm READY, as NCCL does: a nonblocking
 * init or finalize still running is HC_ERR_ARG, a failed init its error,
 * a finalized comm HC_ERR_USAGE. hc_comm_check_handle takes a comm in any
 * state (destroy, abort, GetAsyncError). */
hc_result_t hc_comm_check(const struct hetcclComm *comm, const char *fn);
hc_result_t hc_comm_check_handle(const struct hetcclComm *comm, const char *fn);
/* Records a failure of work on comm for hetcclCommGetAsyncError. */
void hc_comm_set_async_error(struct hetcclComm *comm, hc_result_t r);
/* Work on comm failed: records r for hetcclCommGetAsyncError and closes
 * every connection so that the peers learn it too. The owner thread only;
 * for a GPU comm, the engine thread (its windows stay mapped). */
void hc_comm_fail(struct hetcclComm *comm, hc_result_t r);
/* Frees everything comm owns; takes half-built comms. Waits for a
 * nonblocking init or finalize still running (hc_comm_task_join). */
void hc_comm_free(struct hetcclComm *comm);
/* Builds a comm that comm.c allocated (rank, nranks, id and config set)
 * into a working one. On failure comm is half-built: hc_comm_free takes it.
 * Runs on the caller's thread, or a nonblocking comm's init thread. */
hc_result_t hc_comm_build(struct hetcclComm *comm);

/* pull_choice.c. Runs job, the plan of a (a call made alone on a host
 * comm), with pulls allowed or withheld as a's class has chosen, or in
 * one of its trials. */
hc_result_t hc_pull_choice_run(struct hetcclComm *comm, const struct hc_coll_args *a, struct hc_exec_job *job);
/* Whether this call of c lets peers pull; *trial: it is one of c's first
 * calls, which hc_pull_class_record must see. */
bool hc_pull_class_allows(const struct hc_pull_class *c, bool *trial);
/* A trial call of c took ns; true when it was the last, and c has chosen. */
bool hc_pull_class_record(struct hc_pull_class *c, bool pulled, uint64_t ns);

/* ---- nonblocking comms (comm_async.c) ---- */

/* Hands out comm (allocated, not built) INITIALISING and builds it on a
 * thread of its own: *out = comm and HC_IN_PROGRESS. When no thread can be
 * started, frees comm and fails. */
hc_result_t hc_comm_init_async(struct hetcclComm *comm, struct hetcclComm **out);
/* Finalizes a READY nonblocking comm on a thread of its own:
 * HC_IN_PROGRESS, or HC_OK when nothing was left to wait for. */
hc_result_t hc_comm_finalize_async(struct hetcclComm *comm);
/* Waits for a nonblocking init or finalize still running, first raising
 * the abort flag under an init (an unfinished comm has no work to finish).
 * Returns at once when none runs. The owner thread (destroy, abort). */
void hc_comm_task_join(struct hetcclComm *comm);

/* "OCP (e4m3fn, e5m2)" or "fnuz (e4m3fnuz, e5m2fnuz)" for an enum hc_fp8_layout. */
const char *hc_fp8_layout_name(int layout);

/* Records a call in the current group, or runs it right away; sets its
 * seq. */
struct hc_coll_args;
hc_result_t hc_coll_enqueue(struct hetcclComm *comm, struct hc_coll_args *a, hc_stream_t stream, const char *fn);

#endif
