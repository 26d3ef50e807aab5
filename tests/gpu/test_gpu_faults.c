/*
 * A GPU comm whose peer fails: two GPU ranks of one host in two groups
 * (one process each, device 0), so that every byte crosses through their
 * shm windows on the streams, with no transfer of the progress engine's.
 * Only the engine's watch can see a peer that fails there.
 *   kill:  rank 1 dies by SIGKILL in the middle of a loop of all-reduces;
 *   stop:  the parent SIGSTOPs rank 1 in the middle of the loop (run it
 *          with a small HETCCL_TIMEOUT);
 *   abort: rank 0's stream waits on a window counter (rank 1 never calls)
 *          while another thread calls hetcclCommAbort; the main thread
 *          sits in the stream's synchronize.
 * The survivor must see an error (hetcclCommGetAsyncError, as PyTorch's
 * watchdog polls it) that names the rank that failed, its stream must
 * drain, and destroy (abort) must return; the parent kills anything still
 * running after a deadline that only a hang reaches, and prints the time
 * from the fault to the survivor's exit.
 *   test_gpu_faults kill|stop|abort
 * Exits 77 (skip) where no CUDA device (real or fake) is found.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

#define HANG_S 60 /* far above what detection takes; only a hang reaches it */
#define COUNT (1u << 20) /* floats: 4 MiB, one window slot */

struct shared {
  atomic_int id_state; /* 0 not yet, 1 ready, -1 failed */
  hetcclUniqueId id;
  atomic_int calls[2];  /* calls each rank has made */
  atomic_int survivor_done;
  atomic_int ready; /* ranks whose comm is up */
};

static const struct hc_dev_ops *gpu;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define FAIL(...) do { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); \
                       return 1; } while (0)

static hetcclComm_t comm_make(int rank, struct shared *S) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = hetcclDeviceCuda;
  cfg.deviceId = 0;
  cfg.groupName = rank == 0 ? "a" : "b";
  hetcclComm_t comm = NULL;
  if (hetcclCommInitRankConfig(&comm, 2, S->id, rank, &cfg) != hetcclSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", rank, hetcclGetLastError(NULL));
    return NULL;
  }
  atomic_fetch_add(&S->ready, 1);
  return comm;
}

/* Polls the stream and the comm's async error, as PyTorch's watchdog
 * does: 1 when the stream finished, 0 when the comm reported an error. */
static int wait_or_error(hetcclComm_t comm, hc_stream_t stream, hc_event_t ev) {
  hc_dev_event_record(gpu, ev, stream);
  for (;;) {
    int done = 0;
    hc_dev_event_query(gpu, ev, &done);
    if (done) return 1;
    hetcclResult_t async = hetcclSuccess;
    hetcclCommGetAsyncError(comm, &async);
    if (async != hetcclSuccess) return 0;
    usleep(1000);
  }
}

/* The error a later call reports names the culprit. */
static int expect_error_naming(int rank, hetcclComm_t comm, void *d, hc_stream_t stream, const char *who) {
  hetcclResult_t r = hetcclAllReduce(d, d, COUNT, hetcclFloat, hetcclSum, comm, stream);
  const char *text = hetcclGetLastError(comm);
  if (r == hetcclSuccess) FAIL("a call after the failure succeeded");
  if (strstr(text, who) == NULL) FAIL("the error does not name %s: %s", who, text);
  printf("rank %d: %s\n", rank, text);
  return 0;
}

/* kill and stop: all-reduces until the comm fails (the survivor) or the
 * parent stops it / it kills itself (rank 1). */
static int rank_loop(int rank, struct shared *S, bool kill_self) {
  hc_stream_t stream = NULL;
  hc_event_t ev = NULL;
  void *d = NULL;
  hc_dev_set_device(gpu, 0);
  if (hc_dev_stream_create(gpu, 0, &stream) != HC_OK || hc_dev_event_create(gpu, &ev) != HC_OK ||
      hc_dev_mem_alloc(gpu, 0, COUNT * 4, &d) != HC_OK)
    FAIL("device setup: %s", hc_last_error());
  hetcclComm_t comm = comm_make(rank, S);
  if (comm == NULL) return 1;
  for (int i = 0;; i++) {
    if (hetcclAllReduce(d, d, COUNT, hetcclFloat, hetcclSum, comm, stream) != hetcclSuccess) break;
    atomic_store(&S->calls[rank], i + 1);
    if (rank == 1 && kill_self && i == 3) {
      usleep(20000); /* the exchange is under way on both streams */
      raise(SIGKILL);
    }
    if (!wait_or_error(comm, stream, ev)) break;
  }
  if (rank == 1) FAIL("rank 1 saw its comm fail");
  if (hc_dev_stream_sync(gpu, stream) != HC_OK) FAIL("the stream did not drain: %s", hc_last_error());
  int bad = expect_error_naming(rank, comm, d, stream, "rank 1");
  if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
  atomic_store(&S->survivor_done, 1);
  hc_dev_mem_free(gpu, 0, d);
  hc_dev_event_destroy(gpu, ev);
  hc_dev_stream_destroy(gpu, stream);
  return bad;
}

struct aborter {
  hetcclComm_t comm;
  hetcclResult_t result;
  double returned_in;
};

static void *abort_later(void *arg) {
  struct aborter *a = arg;
  usleep(300000); /* the main thread is in the stream's synchronize */
  double t0 = now_s();
  a->result = hetcclCommAbort(a->comm);
  a->returned_in = now_s() - t0;
  return NULL;
}

static int rank_abort(int rank, struct shared *S) {
  hc_stream_t stream = NULL;
  void *d = NULL;
  hc_dev_set_device(gpu, 0);
  if (hc_dev_stream_create(gpu, 0, &stream) != HC_OK || hc_dev_mem_alloc(gpu, 0, COUNT * 4, &d) != HC_OK)
    FAIL("device setup: %s", hc_last_error());
  hetcclComm_t comm = comm_make(rank, S);
  if (comm == NULL) return 1;
  if (rank == 1) { /* never calls: rank 0's stream waits on its window */
    while (!atomic_load(&S->survivor_done)) usleep(1000);
    if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
    hc_dev_mem_free(gpu, 0, d);
    hc_dev_stream_destroy(gpu, stream);
    return 0;
  }
  /* Started first: without NVRTC the reduction runs on the host, and the
   * call itself waits for the stream. */
  struct aborter a = {.comm = comm, .result = hetcclInternalError};
  pthread_t t;
  if (pthread_create(&t, NULL, abort_later, &a) != 0) FAIL("pthread_create");
  if (hetcclAllReduce(d, d, COUNT, hetcclFloat, hetcclSum, comm, stream) != hetcclSuccess)
    FAIL("all-reduce: %s", hetcclGetLastError(comm));
  hc_result_t synced = hc_dev_stream_sync(gpu, stream);
  pthread_join(t, NULL);
  atomic_store(&S->survivor_done, 1);
  if (synced != HC_OK) FAIL("the stream did not drain: %s", hc_last_error());
  if (a.result != hetcclSuccess) FAIL("hetcclCommAbort returned %d", (int)a.result);
  printf("rank 0: hetcclCommAbort returned in %.3f s; the stream drained\n", a.returned_in);
  hc_dev_mem_free(gpu, 0, d);
  hc_dev_stream_destroy(gpu, stream);
  return 0;
}

static int rank_main(int rank, struct shared *S, const char *mode) {
  gpu = hc_dev_get(HC_MEM_CUDA);
  if (gpu == NULL) FAIL("no CUDA device");
  for (double end = now_s() + HANG_S; atomic_load(&S->id_state) == 0 && now_s() < end;) usleep(1000);
  if (atomic_load(&S->id_state) != 1) FAIL("no unique id");
  if (!strcmp(mode, "abort")) return rank_abort(rank, S);
  return rank_loop(rank, S, !strcmp(mode, "kill"));
}

/* Whether a CUDA device is there, asked in a child (the parent must not
 * load the driver before it forks). */
static bool have_gpu(void) {
  fflush(stdout);
  pid_t probe = fork();
  if (probe == 0) _exit(hc_dev_get(HC_MEM_CUDA) ? 0 : 77);
  int st = 0;
  return probe > 0 && waitpid(probe, &st, 0) == probe && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "kill") && strcmp(mode, "stop") && strcmp(mode, "abort")) {
    fprintf(stderr, "usage: %s kill|stop|abort\n", argv[0]);
    return 2;
  }
  if (!have_gpu()) {
    printf("skip: no CUDA device here\n");
    return 77;
  }
  struct shared *S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!CHECK(S != MAP_FAILED, "mmap")) return tu_finish("test_gpu_faults");
  memset(S, 0, sizeof(*S));
  pid_t pid[2];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      int rc = rank_main(r, S, mode);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  hetcclResult_t idr = hetcclGetUniqueId(&S->id);
  atomic_store(&S->id_state, idr == hetcclSuccess ? 1 : -1);
  CHECK(idr == hetcclSuccess, "hetcclGetUniqueId: %s", hetcclGetLastError(NULL));

  /* The hang clock starts once both comms are up (NVRTC may take long). */
  for (double end = now_s() + 5 * HANG_S; now_s() < end && atomic_load(&S->ready) < 2;) usleep(1000);
  /* The fault: after a few calls of both ranks. */
  double fault_at = now_s();
  if (!strcmp(mode, "stop")) {
    for (double end = now_s() + HANG_S; now_s() < end && (atomic_load(&S->calls[0]) < 3 || atomic_load(&S->calls[1]) < 3);)
      usleep(1000);
    kill(pid[1], SIGSTOP);
    fault_at = now_s();
  }
  int status[2] = {-1, -1};
  double exited_at[2] = {0, 0};
  const bool both_exit = strcmp(mode, "stop") != 0; /* a stopped rank 1 stays */
  for (double end = now_s() + HANG_S; now_s() < end && (status[0] == -1 || (both_exit && status[1] == -1));) {
    for (int r = 0; r < 2; r++) {
      int st;
      if (status[r] != -1 || waitpid(pid[r], &st, WNOHANG) != pid[r]) continue;
      status[r] = st;
      exited_at[r] = now_s();
      if (r == 1 && !strcmp(mode, "kill")) fault_at = exited_at[1];
    }
    usleep(2000);
  }
  CHECK(status[0] != -1, "%s: rank 0 still running %d s after the fault: a hang", mode, HANG_S);
  CHECK(status[0] != -1 && WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0, "%s: rank 0 failed (status 0x%x)",
        mode, status[0]);
  if (!strcmp(mode, "kill"))
    CHECK(status[1] != -1 && WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL,
          "kill: rank 1 did not die by SIGKILL (status 0x%x)", status[1]);
  if (status[0] != -1) printf("%s: the survivor exited %.2f s after the fault\n", mode, exited_at[0] - fault_at);
  for (int r = 0; r < 2; r++) {
    if (status[r] != -1) continue;
    kill(pid[r], SIGKILL);
    kill(pid[r], SIGCONT);
    waitpid(pid[r], &status[r], 0);
    if (!strcmp(mode, "abort") && r == 1) CHECK(0, "abort: rank 1 did not finish");
  }
  if (!strcmp(mode, "abort") && status[1] != -1 && exited_at[1] > 0)
    CHECK(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0, "abort: rank 1 failed (status 0x%x)", status[1]);
  munmap(S, sizeof(*S));
  return tu_finish("test_gpu_faults");
}
