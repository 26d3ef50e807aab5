/*
 * Mismatched calls (issue 15, part 5): ranks that make different calls on
 * one comm must all fail with a message naming both calls, never return
 * success with garbage, never hang. Every transfer carries its call's
 * signature (collective, count, datatype, op, root, the comm's number of
 * the call; net.h) and the receiving transport checks it first.
 *
 * Cases (each on a fresh comm of 2 or 3 ranks, ranks as processes):
 *   kind     AllReduce on rank 0, Broadcast(root 0) on rank 1
 *   count    AllReduce of 1000 and of 500 floats
 *   dtype    AllReduce of float and of int32
 *   op       AllReduce sum and max
 *   root     Broadcast(root 0) on rank 0, Broadcast(root 1) on rank 1: both
 *            only send, so both calls complete; each rank's next call
 *            (AllReduce #1) meets the other's broadcast and names it
 *   seq      rank 1 made one more call (a zero-count AllReduce, which
 *            moves nothing): AllReduce #0 meets AllReduce #1
 *   reduce-roots  Reduce(root 0) on rank 0, Reduce(root 1) on rank 1: both
 *            only wait to receive, so no transfer carries a signature; the
 *            stall probe (exec.c) finds it after a second of waiting
 *   p2p      Send of 1000 floats meets a Recv of 500
 * Each rank checks that its call failed, or, a rank whose part was only
 * sends (which complete once handed over, before the peer checks), that
 * its next call fails; and that the text names both calls ("rank A called
 * X, rank B called Y"). Then matching calls on a fresh comm must pass
 * (bitwise against values computed here), and so must calls with a peer
 * that comes late to each (the stall probe must take it for no mismatch).
 *
 * The transport is the environment's: shm between processes of one host
 * (ctest coll_mismatch_shm), sockets under HETCCL_SHM_DISABLE=1
 * (coll_mismatch_socket). HETCCL_TIMEOUT bounds every wait, so a hang
 * fails the test instead of blocking it.
 *
 * --gpu (ctest coll_mismatch_gpu_window, over the fake libcuda): ranks
 * that exchange through the shm window, the signature in the window's
 * control words.
 *  - rank 0 a GPU rank, rank 1 a CPU rank: rank 0's part is only sends (so
 *    that its stream never waits for rank 1), rank 1 receives and checks:
 *    kind, count, datatype and op. Rank 1's call must fail naming both
 *    calls, and rank 0's comm too (its async error), from the mismatch
 *    rank 1 publishes in the window.
 *  - two GPU ranks (groups a and b on device 0: windows only, no transfer
 *    of the progress engine's): kind, count, datatype, op and root. The
 *    calls return once enqueued; each rank's engine checks the pieces its
 *    stream received, and each comm's async error must name both calls
 *    (root: both only send, so each rank's next call, AllReduce #1, meets
 *    the other's broadcast).
 *
 * Usage: test_coll_mismatch [--gpu] [--case NAME]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

#define COUNT 1000

struct call {
  /* SKIP: a zero-count AllReduce, then rank 0's call */
  enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_SEND, K_RECV, K_SKIP } kind;
  size_t count;
  hetcclDataType_t dtype;
  hetcclRedOp_t op;
  int root; /* rooted calls; the peer of send/recv */
};

struct mcase {
  const char *name;
  int nranks;
  struct call calls[3];  /* per rank */
  const char *expect[3]; /* per rank: substrings its error must hold, '|'-separated */
  bool next_call;        /* GPU ranks: the calls only send; the next one fails */
};

#define AR(n, t, o) \
  { K_ALLREDUCE, n, t, o, 0 }
static const struct mcase cases[] = {
    {"kind",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), {K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called Broadcast(root 0, 1000 float)",
      "rank 1 called Broadcast(root 0, 1000 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"count",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(500, hetcclFloat32, hetcclSum)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(sum, 500 float)",
      "rank 1 called AllReduce(sum, 500 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"dtype",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(COUNT, hetcclInt32, hetcclSum)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(sum, 1000 int32)",
      "rank 1 called AllReduce(sum, 1000 int32)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"op",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(COUNT, hetcclFloat32, hetcclMax)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(max, 1000 float)",
      "rank 1 called AllReduce(max, 1000 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"root",
     2,
     {{K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}, {K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 1}},
     {"rank 1 called Broadcast(root 1, 1000 float) #0", "rank 0 called Broadcast(root 0, 1000 float) #0"}},
    {"seq",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), {K_SKIP, COUNT, hetcclFloat32, hetcclSum, 0}},
     {"rank 0 called AllReduce(sum, 1000 float) #0|rank 1 called AllReduce(sum, 1000 float) #1",
      "rank 1 called AllReduce(sum, 1000 float) #1|rank 0 called AllReduce(sum, 1000 float) #0"}},
    {"reduce-roots",
     2,
     {{K_REDUCE, COUNT, hetcclFloat32, hetcclSum, 0}, {K_REDUCE, COUNT, hetcclFloat32, hetcclSum, 1}},
     {"rank 0 called Reduce(sum, root 0, 1000 float) #0|rank 1 called Reduce(sum, root 1, 1000 float) #0",
      "rank 1 called Reduce(sum, root 1, 1000 float) #0|rank 0 called Reduce(sum, root 0, 1000 float) #0"}},
    {"p2p",
     2,
     {{K_SEND, COUNT, hetcclFloat32, hetcclSum, 1}, {K_RECV, 500, hetcclFloat32, hetcclSum, 0}},
     {"rank 0 called Send(to 1, 1000 float)|rank 1 called Recv(from 0, 500 float)",
      "rank 1 called Recv(from 0, 500 float)|rank 0 called Send(to 1, 1000 float)"}},
};

static hetcclResult_t make_call(hetcclComm_t comm, const struct call *c, void *buf) {
  switch (c->kind) {
  case K_ALLREDUCE: return hetcclAllReduce(buf, buf, c->count, c->dtype, c->op, comm, NULL);
  case K_BROADCAST: return hetcclBroadcast(buf, buf, c->count, c->dtype, c->root, comm, NULL);
  case K_REDUCE: return hetcclReduce(buf, buf, c->count, c->dtype, c->op, c->root, comm, NULL);
  case K_SEND: return hetcclSend(buf, c->count, c->dtype, c->root, comm, NULL);
  case K_RECV: return hetcclRecv(buf, c->count, c->dtype, c->root, comm, NULL);
  case K_SKIP: return hetcclSuccess;
  }
  return hetcclInternalError;
}

/* Every '|'-separated part of expect occurs in text. */
static bool names_all(const char *text, const char *expect) {
  char parts[256];
  snprintf(parts, sizeof(parts), "%s", expect);
  for (char *save = NULL, *p = strtok_r(parts, "|", &save); p; p = strtok_r(NULL, "|", &save))
    if (strstr(text, p) == NULL) return false;
  return true;
}

/* GPU windows: rank 0 (GPU) only sends, rank 1 (CPU) receives. */
static const struct mcase gpu_cases[] = {
    {"kind",
     2,
     {{K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}, AR(COUNT, hetcclFloat32, hetcclSum)},
     {"rank 0 called Broadcast(root 0, 1000 float)|rank 1 called AllReduce(sum, 1000 float)",
      "rank 1 called AllReduce(sum, 1000 float)|rank 0 called Broadcast(root 0, 1000 float)"}},
    {"count",
     2,
     {{K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}, {K_BROADCAST, 500, hetcclFloat32, hetcclSum, 0}},
     {"rank 0 called Broadcast(root 0, 1000 float)|rank 1 called Broadcast(root 0, 500 float)",
      "rank 1 called Broadcast(root 0, 500 float)|rank 0 called Broadcast(root 0, 1000 float)"}},
    {"dtype",
     2,
     {{K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}, {K_BROADCAST, COUNT, hetcclInt32, hetcclSum, 0}},
     {"rank 0 called Broadcast(root 0, 1000 float)|rank 1 called Broadcast(root 0, 1000 int32)",
      "rank 1 called Broadcast(root 0, 1000 int32)|rank 0 called Broadcast(root 0, 1000 float)"}},
    {"op",
     2,
     {{K_REDUCE, COUNT, hetcclFloat32, hetcclSum, 1}, {K_REDUCE, COUNT, hetcclFloat32, hetcclMax, 1}},
     {"rank 0 called Reduce(sum, root 1, 1000 float)|rank 1 called Reduce(max, root 1, 1000 float)",
      "rank 1 called Reduce(max, root 1, 1000 float)|rank 0 called Reduce(sum, root 1, 1000 float)"}},
};

/* GPU windows, both ranks GPU ranks: every receive is a stream's. */
static const struct mcase gpu2_cases[] = {
    {"gpu2-kind",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), {K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called Broadcast(root 0, 1000 float)",
      "rank 1 called Broadcast(root 0, 1000 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"gpu2-count",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(500, hetcclFloat32, hetcclSum)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(sum, 500 float)",
      "rank 1 called AllReduce(sum, 500 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"gpu2-dtype",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(COUNT, hetcclInt32, hetcclSum)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(sum, 1000 int32)",
      "rank 1 called AllReduce(sum, 1000 int32)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"gpu2-op",
     2,
     {AR(COUNT, hetcclFloat32, hetcclSum), AR(COUNT, hetcclFloat32, hetcclMax)},
     {"rank 0 called AllReduce(sum, 1000 float)|rank 1 called AllReduce(max, 1000 float)",
      "rank 1 called AllReduce(max, 1000 float)|rank 0 called AllReduce(sum, 1000 float)"}},
    {"gpu2-root",
     2,
     {{K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 0}, {K_BROADCAST, COUNT, hetcclFloat32, hetcclSum, 1}},
     /* Each rank receives the other's broadcast in its AllReduce #1: the
      * one that looks first names it, the other hears of it. */
     {"called AllReduce(sum, 1 float) #1|called Broadcast(root ",
      "called AllReduce(sum, 1 float) #1|called Broadcast(root "},
     true},
    /* Both streams only wait to receive: no piece, so no signature, moves;
     * the engines' window stall probes find it (without them: a timeout). */
    {"gpu2-reduce-roots",
     2,
     {{K_REDUCE, COUNT, hetcclFloat32, hetcclSum, 0}, {K_REDUCE, COUNT, hetcclFloat32, hetcclSum, 1}},
     {"rank 0 called Reduce(sum, root 0, 1000 float) #0|rank 1 called Reduce(sum, root 1, 1000 float) #0",
      "rank 1 called Reduce(sum, root 1, 1000 float) #0|rank 0 called Reduce(sum, root 0, 1000 float) #0"}},
};

static const struct mcase *cur;
static bool gpu_mode, both_gpu;

#define HANG_S 60.0 /* far above what detection takes; only a hang reaches it */

/* Until the stream has run what was enqueued on it or the comm failed
 * (as PyTorch's watchdog polls): whether it failed. A released stream
 * completes too, so the error is looked at first. */
static bool stream_or_error(const struct hc_dev_ops *gpu, hetcclComm_t comm, hc_event_t ev) {
  hc_dev_event_record(gpu, ev, NULL);
  for (const double end = tu_seconds() + HANG_S; tu_seconds() < end; usleep(1000)) {
    hetcclResult_t async = hetcclSuccess;
    hetcclCommGetAsyncError(comm, &async);
    if (async != hetcclSuccess) return true;
    int done = 0;
    hc_dev_event_query(gpu, ev, &done);
    if (done) return false;
  }
  return false;
}

/* A GPU rank's comm on device 0, in groups a and b when both ranks are
 * GPU ranks (one device: windows, no vendor library). NULL on failure. */
static hetcclComm_t gpu_comm_open(int rank, int nranks, hetcclUniqueId id, const struct hc_dev_ops **gpu) {
  *gpu = hc_dev_get(HC_MEM_CUDA);
  if (!CHECK(*gpu != NULL, "no CUDA backend (the fake libcuda on LD_LIBRARY_PATH?)")) return NULL;
  hetcclComm_t comm = NULL;
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = hetcclDeviceCuda;
  cfg.deviceId = 0;
  if (both_gpu) cfg.groupName = rank == 0 ? "a" : "b";
  if (!CHECK_OK(hetcclCommInitRankConfig(&comm, nranks, id, rank, &cfg))) return NULL;
  return comm;
}

/* A GPU rank: its calls return once enqueued; the mismatch is its comm's
 * async error, found by its progress engine (in the pieces its stream
 * received, or in what the peer published in the window). */
static int gpu_rank(int rank, int nranks, hetcclUniqueId id) {
  const struct hc_dev_ops *gpu;
  hetcclComm_t comm = gpu_comm_open(rank, nranks, id, &gpu);
  if (comm == NULL) return 1;
  void *buf = NULL;
  hc_event_t ev = NULL;
  CHECK(hc_dev_mem_alloc(gpu, 0, COUNT * sizeof(double), &buf) == HC_OK, "cuMemAlloc");
  CHECK(hc_dev_event_create(gpu, &ev) == HC_OK, "cuEventCreate");
  tu_set_case("gpu %s, rank %d", cur->name, rank);
  CHECK_OK(make_call(comm, &cur->calls[rank], buf));
  bool failed = stream_or_error(gpu, comm, ev);
  if (!failed && cur->next_call) {
    CHECK_OK(hetcclAllReduce(buf, buf, 1, hetcclFloat32, hetcclSum, comm, NULL));
    failed = stream_or_error(gpu, comm, ev);
  }
  /* The stream may have used the piece before the engine looked. */
  hetcclResult_t async = hetcclSuccess;
  for (const double end = tu_seconds() + HANG_S; async == hetcclSuccess && tu_seconds() < end; usleep(1000))
    hetcclCommGetAsyncError(comm, &async);
  /* A later call fails at once, with the async error's text. */
  CHECK(hetcclAllReduce(buf, buf, 1, hetcclFloat32, hetcclSum, comm, NULL) != hetcclSuccess,
        "a call after the failure succeeded");
  const char *text = hetcclGetLastError(comm);
  CHECK(async == hetcclInvalidUsage, "expected the async error ncclInvalidUsage (%d), got %d: %s",
        (int)hetcclInvalidUsage, (int)async, text);
  CHECK(strstr(text, "mismatched calls") && names_all(text, cur->expect[rank]),
        "error text \"%s\" does not name \"%s\"", text, cur->expect[rank]);
  hetcclCommAbort(comm);
  hc_dev_event_destroy(gpu, ev);
  hc_dev_mem_free(gpu, 0, buf);
  return 0;
}

static int mismatch_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  if (gpu_mode && (rank == 0 || both_gpu)) return gpu_rank(rank, nranks, id);
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclCommInitRank(&comm, nranks, id, rank))) return 1;
  float *buf = calloc(COUNT * 2, sizeof(float));
  const struct call *mine = &cur->calls[rank];
  tu_set_case("%s%s, rank %d", gpu_mode ? "gpu " : "", cur->name, rank);
  hetcclResult_t r = hetcclSuccess;
  /* The "seq" case: rank 1 makes one call more, of nothing, first. */
  if (mine->kind == K_SKIP) CHECK_OK(make_call(comm, &(struct call)AR(0, hetcclFloat32, hetcclSum), buf));
  r = make_call(comm, mine->kind == K_SKIP ? &cur->calls[0] : mine, buf);
  char text[1024] = "";
  if (r != hetcclSuccess) {
    snprintf(text, sizeof(text), "%s", hetcclGetLastError(comm));
  } else {
    /* Only sends: handed over, so the call completed; the next one on
     * this comm must fail with the same message. */
    r = hetcclAllReduce(buf, buf, 1, hetcclFloat32, hetcclSum, comm, NULL);
    snprintf(text, sizeof(text), "%s", hetcclGetLastError(comm));
  }
  CHECK(r == hetcclInvalidUsage, "expected ncclInvalidUsage (%d), got %d: %s", (int)hetcclInvalidUsage, (int)r, text);
  CHECK(strstr(text, "mismatched calls") && names_all(text, cur->expect[rank]),
        "error text \"%s\" does not name \"%s\"", text, cur->expect[rank]);
  hetcclCommAbort(comm);
  free(buf);
  return 0;
}

/* Matching calls still pass: an all-reduce and a send/recv ring. */
static int matching_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclCommInitRank(&comm, nranks, id, rank))) return 1;
  tu_set_case("matching, rank %d", rank);
  int32_t *a = calloc(COUNT, sizeof(int32_t)), *in = calloc(COUNT, sizeof(int32_t));
  for (int i = 0; i < COUNT; i++) a[i] = rank * 1000 + i;
  CHECK_OK(hetcclAllReduce(a, a, COUNT, hetcclInt32, hetcclSum, comm, NULL));
  bool ok = true;
  for (int i = 0; i < COUNT; i++) ok &= a[i] == nranks * i + 1000 * nranks * (nranks - 1) / 2;
  CHECK(ok, "all-reduce result wrong");
  CHECK_OK(hetcclGroupStart());
  CHECK_OK(hetcclSend(a, COUNT, hetcclInt32, (rank + 1) % nranks, comm, NULL));
  CHECK_OK(hetcclRecv(in, COUNT, hetcclInt32, (rank + nranks - 1) % nranks, comm, NULL));
  CHECK_OK(hetcclGroupEnd());
  CHECK(!memcmp(in, a, COUNT * sizeof(int32_t)), "send/recv ring result wrong");
  CHECK_OK(hetcclCommDestroy(comm));
  free(a);
  free(in);
  return 0;
}

/* A peer that is only late is no mismatch: rank 1 sleeps past the stall
 * probe's second before each call, so rank 0 probes it every time (and
 * clears its probe after), and over sockets rank 1 reads those probes
 * between the messages of stream 0. Every call must pass, bitwise. */
static int late_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclCommInitRank(&comm, nranks, id, rank))) return 1;
  tu_set_case("late peer, rank %d", rank);
  int32_t *a = calloc(COUNT, sizeof(int32_t));
  for (int call = 0; call < 3; call++) {
    for (int i = 0; i < COUNT; i++) a[i] = rank * 1000 + i + call;
    if (rank == 1) usleep(1500 * 1000);
    CHECK_OK(hetcclAllReduce(a, a, COUNT, hetcclInt32, hetcclSum, comm, NULL));
    bool ok = true;
    for (int i = 0; i < COUNT; i++) ok &= a[i] == 2 * (i + call) + 1000;
    CHECK(ok, "all-reduce %d with a late peer: result wrong", call);
  }
  CHECK_OK(hetcclCommDestroy(comm));
  free(a);
  return 0;
}

/* The same with two GPU ranks (windows only): rank 0's stream waits for
 * rank 1 in each all-reduce for 1.5 s, so rank 0's engine probes it every
 * time; rank 1's stream waits for nothing then, so it publishes no probe,
 * and nothing may take it for a mismatch. Every call must pass, bitwise,
 * and the comm must have no async error. */
static int gpu_late_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  const struct hc_dev_ops *gpu;
  hetcclComm_t comm = gpu_comm_open(rank, nranks, id, &gpu);
  if (comm == NULL) return 1;
  tu_set_case("gpu late peer, rank %d", rank);
  int32_t *a = calloc(COUNT, sizeof(int32_t));
  void *buf = NULL;
  hc_stream_t st = NULL;
  CHECK(hc_dev_mem_alloc(gpu, 0, COUNT * sizeof(int32_t), &buf) == HC_OK, "cuMemAlloc");
  CHECK(hc_dev_stream_create(gpu, 0, &st) == HC_OK, "cuStreamCreate");
  for (int call = 0; call < 3 && buf && st; call++) {
    for (int i = 0; i < COUNT; i++) a[i] = rank * 1000 + i + call;
    if (rank == 1) usleep(1500 * 1000);
    CHECK(hc_dev_copy(gpu, buf, a, COUNT * sizeof(int32_t), st) == HC_OK, "copy in");
    CHECK_OK(hetcclAllReduce(buf, buf, COUNT, hetcclInt32, hetcclSum, comm, st));
    CHECK(hc_dev_copy(gpu, a, buf, COUNT * sizeof(int32_t), st) == HC_OK, "copy out");
    CHECK(hc_dev_stream_sync(gpu, st) == HC_OK, "cuStreamSynchronize");
    bool ok = true;
    for (int i = 0; i < COUNT; i++) ok &= a[i] == 2 * (i + call) + 1000;
    CHECK(ok, "all-reduce %d with a late peer: result wrong", call);
  }
  hetcclResult_t async = hetcclSuccess;
  hetcclCommGetAsyncError(comm, &async);
  CHECK(async == hetcclSuccess, "async error %d with a late peer: %s", (int)async, hetcclGetLastError(comm));
  CHECK_OK(hetcclCommDestroy(comm));
  if (st) hc_dev_stream_destroy(gpu, st);
  hc_dev_mem_free(gpu, 0, buf);
  free(a);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  int a = 1;
  if (a < argc && !strcmp(argv[a], "--gpu")) gpu_mode = true, a++;
  const char *only = a + 1 < argc && !strcmp(argv[a], "--case") ? argv[a + 1] : NULL;
  const struct mcase *list = gpu_mode ? gpu_cases : cases;
  const size_t ncases = gpu_mode ? HC_ARRAY_LEN(gpu_cases) : HC_ARRAY_LEN(cases);
  const size_t nall = ncases + (gpu_mode ? HC_ARRAY_LEN(gpu2_cases) : 0);
  for (size_t k = 0; k < nall; k++) {
    both_gpu = k >= ncases;
    cur = both_gpu ? &gpu2_cases[k - ncases] : &list[k];
    if (only && strcmp(only, cur->name)) continue;
    tu_set_repro("%s--case %s", gpu_mode ? "--gpu " : "", cur->name);
    double t0 = tu_seconds();
    tu_run_rank_processes(cur->nranks, mismatch_rank, NULL);
    printf("case %s: %.2f s\n", cur->name, tu_seconds() - t0);
  }
  if (gpu_mode && (only == NULL || !strcmp(only, "gpu2-late"))) {
    both_gpu = true;
    tu_run_rank_processes(2, gpu_late_rank, NULL);
  }
  if (only == NULL && !gpu_mode) {
    tu_run_rank_processes(2, matching_rank, NULL);
    tu_run_rank_processes(3, matching_rank, NULL);
    tu_run_rank_processes(2, late_rank, NULL);
  }
  return tu_finish("coll_mismatch");
}
