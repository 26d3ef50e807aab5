/*
 * A GPU comm whose peer fails: two GPU ranks of one host in two groups
 * (one process each, device 0), so that every byte crosses through their
 * shm windows on the streams, with no transfer of the progress engine's.
 * Only the engine's watch can see a peer that fails there.
 *   kill:  rank 1 dies by SIGKILL in the middle of a loop of all-reduces;
 *   kill_abort: as kill, but rank 0 aborts its comm as soon as it sees
 *          the error (as a framework that recovers in-process would);
 *   stop:  the parent SIGSTOPs rank 1 in the middle of the loop (run it
 *          with a small HETCCL_TIMEOUT);
 *   abort: rank 0's stream waits on a window counter (rank 1 never calls)
 *          while another thread calls hetcclCommAbort; the main thread
 *          sits in the stream's synchronize.
 *   cpu_kill: as kill, but rank 0 is a CPU rank: its host engine waits
 *          on the window counters that rank 1's stream moves;
 *   init_kill, init_hang: both ranks in one group on devices 0 and 1, so
 *          that init creates the vendor's comm (the fake NCCL of
 *          fake_nccl.c, nonblocking; its ranks in two processes never
 *          meet, as a peer that never arrives); with
 *          FAKE_NCCL_INIT_KILL_RANK=1 rank 1 dies there (init_kill: rank
 *          0's init must fail naming it), else both wait until
 *          HETCCL_TIMEOUT (init_hang: both fail saying so);
 *   dump:  HETCCL_DUMP_SIGNAL=USR1, sockets only: rank 0 receives from
 *          rank 1, which never sends; SIGUSR1 must print the call in
 *          flight, its step and the peer it waits for; then abort.
 * The survivor must see an error (hetcclCommGetAsyncError, as PyTorch's
 * watchdog polls it) that names the rank that failed, and destroy (abort)
 * must return. Its stream must end: a call in flight that nobody aborted
 * is released after the engine's grace, and where the device has kernels
 * (HETCCL_RELEASE_TRAP) that release ends in a trap, a sticky error, so the
 * synchronize must fail; without kernels, and after an abort, it drains
 * (and after an abort the device still works); the parent kills anything still
 * running after a deadline that only a hang reaches, and prints the time
 * from the fault to the survivor's exit.
 *   recv_kill: sockets only (as between hosts): rank 0 receives from rank
 *          1, which dies without sending; the closed connection must fail
 *          rank 0's comm, naming it.
 *   test_gpu_faults kill|kill_abort|stop|abort|cpu_kill|init_kill|init_hang|dump|recv_kill
 * GPU_FAULTS_OWN_DEVICES=1 puts rank r on device r and calls 4 KiB: no
 * process shares a GPU, so each call is one program kernel whose thread
 * spins on the window counters (exec/enqueue.c), the waits the engine
 * must release and the trap word must end.
 * Exits 77 (skip) where no CUDA device (real or fake) is found.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "device/gpu_priv.h"
#include "testutil.h"

#define HANG_S 60 /* far above what detection takes; only a hang reaches it */
/* Floats per call: 4 MiB, one window slot; 4 KiB with own devices. */
static size_t COUNT = 1u << 20;
/* This rank's device: 0, or its rank with GPU_FAULTS_OWN_DEVICES. */
static int DEV;

struct shared {
  atomic_int id_state; /* 0 not yet, 1 ready, -1 failed */
  hetcclUniqueId id;
  atomic_int calls[2]; /* calls each rank has made */
  atomic_int survivor_done;
  atomic_int ready;        /* ranks whose comm is up */
  atomic_int timed_out[2]; /* init_hang: whose init error named HETCCL_TIMEOUT */
};

static const struct hc_dev_ops *gpu;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define FAIL(...)                       \
  do {                                  \
    fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__);       \
    fputc('\n', stderr);                \
    return 1;                           \
  } while (0)

/* Which ranks are CPU ranks, and whether the two share a group on two
 * devices (the vendor's comm), by mode. */
static bool cpu_rank0, one_group;

static hetcclComm_t comm_make(int rank, struct shared *S) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = rank == 0 && cpu_rank0 ? hetcclDeviceHost : hetcclDeviceCuda;
  cfg.deviceId = one_group ? rank : DEV;
  cfg.groupName = one_group ? "g" : rank == 0 ? "a" : "b";
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

/* The stream of a call in flight when the comm failed, nobody having
 * aborted it: the engine releases it after its grace, into the trap check
 * where the device has kernels. */
static int released_stream_ends(int rank, hc_stream_t stream) {
  const bool trap =
      hc_param_int(HC_P_RELEASE_TRAP) != 0 && !strcmp(hc_gpu_reduce_path(hc_gpu_state(HC_MEM_CUDA), 0), "kernels");
  double t0 = now_s();
  hc_result_t r = hc_dev_stream_sync(gpu, stream);
  if (trap && r == HC_OK) FAIL("the released stream completed: the trap check at the end of the call did not fire");
  if (!trap && r != HC_OK) FAIL("the released stream did not drain: %s", hc_last_error());
  printf("rank %d: the released stream %s after %.2f s%s%s\n", rank, trap ? "failed" : "drained", now_s() - t0,
         trap ? ": " : "", trap ? hc_last_error() : "");
  return 0;
}

/* hetcclCommAbort as soon as the error shows, within the engine's grace:
 * the stream drains without a trap, and the device still works. */
static int abort_and_go_on(int rank, hetcclComm_t comm, hc_stream_t stream, void *d) {
  if (hetcclCommAbort(comm) != hetcclSuccess) FAIL("abort: %s", hetcclGetLastError(NULL));
  if (hc_dev_stream_sync(gpu, stream) != HC_OK) FAIL("the stream did not drain after the abort: %s", hc_last_error());
  float one = 1.0f, back = 0.0f;
  if (hc_dev_copy(gpu, d, &one, sizeof(one), stream) != HC_OK ||
      hc_dev_copy(gpu, &back, d, sizeof(back), stream) != HC_OK || hc_dev_stream_sync(gpu, stream) != HC_OK ||
      back != 1.0f)
    FAIL("the device does not work after the abort: %s", hc_last_error());
  printf("rank %d: aborted; the stream drained and the device still works\n", rank);
  hc_dev_mem_free(gpu, DEV, d);
  hc_dev_stream_destroy(gpu, stream);
  return 0;
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

/* kill, kill_abort and stop: all-reduces until the comm fails (the
 * survivor) or the parent stops it / it kills itself (rank 1). */
static int rank_loop(int rank, struct shared *S, bool kill_self, bool abort_on_error) {
  hc_stream_t stream = NULL;
  hc_event_t ev = NULL;
  void *d = NULL;
  hc_dev_set_device(gpu, DEV);
  if (hc_dev_stream_create(gpu, DEV, &stream) != HC_OK || hc_dev_event_create(gpu, &ev) != HC_OK ||
      hc_dev_mem_alloc(gpu, DEV, COUNT * 4, &d) != HC_OK)
    FAIL("device setup: %s", hc_last_error());
  hetcclComm_t comm = comm_make(rank, S);
  if (comm == NULL) return 1;
  bool in_flight = false; /* the failure caught a call on the stream */
  for (int i = 0;; i++) {
    if (hetcclAllReduce(d, d, COUNT, hetcclFloat, hetcclSum, comm, stream) != hetcclSuccess) break;
    atomic_store(&S->calls[rank], i + 1);
    if (rank == 1 && kill_self && i == 3) {
      usleep(20000); /* the exchange is under way on both streams */
      raise(SIGKILL);
    }
    if (!wait_or_error(comm, stream, ev)) {
      in_flight = true;
      break;
    }
  }
  if (rank == 1) FAIL("rank 1 saw its comm fail");
  if (abort_on_error) {
    int bad = abort_and_go_on(rank, comm, stream, d);
    hc_dev_event_destroy(gpu, ev); /* after: the fake's destroy waits for a pending record */
    atomic_store(&S->survivor_done, 1);
    return bad;
  }
  if (in_flight) {
    if (released_stream_ends(rank, stream)) return 1;
  } else if (hc_dev_stream_sync(gpu, stream) != HC_OK) {
    FAIL("the stream did not drain: %s", hc_last_error());
  }
  int bad = expect_error_naming(rank, comm, d, stream, "rank 1");
  if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
  atomic_store(&S->survivor_done, 1);
  hc_dev_mem_free(gpu, DEV, d);
  hc_dev_event_destroy(gpu, ev);
  hc_dev_stream_destroy(gpu, stream);
  return bad;
}

/* A stream, COUNT floats of device memory and the comm; NULL (said) on
 * failure. */
static hetcclComm_t rank_setup(int rank, struct shared *S, hc_stream_t *stream, void **d) {
  hc_dev_set_device(gpu, DEV);
  if (hc_dev_stream_create(gpu, DEV, stream) != HC_OK || hc_dev_mem_alloc(gpu, DEV, COUNT * 4, d) != HC_OK) {
    fprintf(stderr, "rank %d: device setup: %s\n", rank, hc_last_error());
    return NULL;
  }
  return comm_make(rank, S);
}

/* Rank 1 of abort and dump: a member that makes no call, until rank 0 is
 * done. */
static int idle_peer(int rank, struct shared *S, hetcclComm_t comm, hc_stream_t stream, void *d) {
  while (!atomic_load(&S->survivor_done)) usleep(1000);
  if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
  hc_dev_mem_free(gpu, DEV, d);
  hc_dev_stream_destroy(gpu, stream);
  return 0;
}

/* cpu_kill's rank 0: all-reduces of host memory until one fails, which
 * must name rank 1. */
static int cpu_rank_loop(struct shared *S) {
  const int rank = 0;
  float *h = calloc(COUNT, sizeof(float));
  if (h == NULL) FAIL("out of memory");
  hetcclComm_t comm = comm_make(rank, S);
  if (comm == NULL) return 1;
  hetcclResult_t r = hetcclSuccess;
  for (int i = 0; r == hetcclSuccess; i++) {
    r = hetcclAllReduce(h, h, COUNT, hetcclFloat, hetcclSum, comm, NULL);
    if (r == hetcclSuccess) atomic_store(&S->calls[rank], i + 1);
  }
  const char *text = hetcclGetLastError(comm);
  printf("rank 0: %s\n", text);
  int bad = 0;
  if (strstr(text, "rank 1") == NULL) {
    fprintf(stderr, "rank 0: the error does not name rank 1: %s\n", text);
    bad = 1;
  }
  if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
  atomic_store(&S->survivor_done, 1);
  free(h);
  return bad;
}

/* init_kill, init_hang: init must fail, saying why. */
static int rank_init_fault(int rank, struct shared *S, bool killed) {
  hetcclComm_t comm = comm_make(rank, S);
  if (comm != NULL) FAIL("init succeeded, but the vendor's comm cannot come up");
  const char *text = hetcclGetLastError(NULL);
  printf("rank %d: %s\n", rank, text);
  if (killed) {
    if (strstr(text, "rank 1 (pid") == NULL || strstr(text, "exited during init") == NULL)
      FAIL("the init error does not say that rank 1 exited: %s", text);
    return 0;
  }
  /* The rank whose deadline comes first says so; the other may instead
   * learn it from the closed bootstrap connection. */
  atomic_store(&S->timed_out[rank], strstr(text, "timed out after HETCCL_TIMEOUT") != NULL);
  if (!atomic_load(&S->timed_out[rank]) && strstr(text, "closed its bootstrap connection") == NULL)
    FAIL("the init error names neither the deadline nor the peer: %s", text);
  return 0;
}

/* recv_kill (sockets only, as between hosts): after one message, rank
 * 0's second receive waits on the socket for rank 1, which dies instead; the engine's poll of
 * the transfer sees the connection close and fails the comm, naming it. */
static int rank_recv_kill(int rank, struct shared *S) {
  hc_stream_t stream = NULL;
  hc_event_t ev = NULL;
  void *d = NULL;
  hetcclComm_t comm = rank_setup(rank, S, &stream, &d);
  if (comm == NULL || hc_dev_event_create(gpu, &ev) != HC_OK) return 1;
  if (rank == 1) { /* one message, so that the connection is up; then dies */
    if (hetcclSend(d, COUNT, hetcclFloat, 0, comm, stream) != hetcclSuccess || hc_dev_stream_sync(gpu, stream) != HC_OK)
      FAIL("send: %s", hetcclGetLastError(comm));
    usleep(300000); /* rank 0 waits in its second receive by then */
    raise(SIGKILL);
  }
  for (int i = 0; i < 2; i++) {
    if (hetcclRecv(d, COUNT, hetcclFloat, 1, comm, stream) != hetcclSuccess) FAIL("recv: %s", hetcclGetLastError(comm));
    if (wait_or_error(comm, stream, ev) != (i == 0)) FAIL("receive %d: %s", i, i ? "completed" : "failed");
  }
  if (released_stream_ends(rank, stream)) return 1;
  int bad = expect_error_naming(rank, comm, d, stream, "rank 1");
  if (hetcclCommDestroy(comm) != hetcclSuccess) FAIL("destroy: %s", hetcclGetLastError(NULL));
  hc_dev_event_destroy(gpu, ev);
  hc_dev_mem_free(gpu, DEV, d);
  hc_dev_stream_destroy(gpu, stream);
  return bad;
}

/* dump: rank 0's receive waits for rank 1 (sockets, so the engine runs its
 * transfer); SIGUSR1 makes the engine print its state to stderr, caught
 * here in a file. */
static int rank_dump(int rank, struct shared *S) {
  hc_stream_t stream = NULL;
  void *d = NULL;
  hetcclComm_t comm = rank_setup(rank, S, &stream, &d);
  if (comm == NULL) return 1;
  if (rank == 1) return idle_peer(rank, S, comm, stream, d); /* never sends */
  char path[] = "/tmp/hetccl-dump-XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  if (fd < 0 || saved < 0) FAIL("mkstemp: %s", strerror(errno));
  unlink(path);
  if (hetcclRecv(d, COUNT, hetcclFloat, 1, comm, stream) != hetcclSuccess) FAIL("recv: %s", hetcclGetLastError(comm));
  fflush(stderr);
  dup2(fd, 2);
  char text[16384] = "";
  for (double end = now_s() + HANG_S; now_s() < end && strstr(text, "in flight") == NULL;) {
    kill(getpid(), SIGUSR1);
    usleep(100000);
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    text[n > 0 ? n : 0] = 0;
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  fprintf(stderr, "%s", text);
  const char *const want[] = {"hetccl dump: pid", "rank 0 of 2", "call 1 in flight: step", "waiting for rank 1"};
  int bad = 0;
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    if (strstr(text, want[i]) == NULL) {
      fprintf(stderr, "rank 0: the dump does not say \"%s\"\n", want[i]);
      bad = 1;
    }
  if (hetcclCommAbort(comm) != hetcclSuccess) FAIL("abort: %s", hetcclGetLastError(NULL));
  if (hc_dev_stream_sync(gpu, stream) != HC_OK) FAIL("the stream did not drain: %s", hc_last_error());
  atomic_store(&S->survivor_done, 1);
  hc_dev_mem_free(gpu, DEV, d);
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
  hetcclComm_t comm = rank_setup(rank, S, &stream, &d);
  if (comm == NULL) return 1;
  if (rank == 1) return idle_peer(rank, S, comm, stream, d); /* never calls: rank 0's stream waits on its window */
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
  hc_dev_mem_free(gpu, DEV, d);
  hc_dev_stream_destroy(gpu, stream);
  return 0;
}

static int rank_main(int rank, struct shared *S, const char *mode) {
  gpu = hc_dev_get(HC_MEM_CUDA);
  if (gpu == NULL) FAIL("no CUDA device");
  if (getenv("GPU_FAULTS_OWN_DEVICES") && atoi(getenv("GPU_FAULTS_OWN_DEVICES"))) {
    DEV = rank;
    COUNT = 1024;
  }
  for (double end = now_s() + HANG_S; atomic_load(&S->id_state) == 0 && now_s() < end;) usleep(1000);
  if (atomic_load(&S->id_state) != 1) FAIL("no unique id");
  if (!strcmp(mode, "abort")) return rank_abort(rank, S);
  if (!strcmp(mode, "dump")) return rank_dump(rank, S);
  if (!strcmp(mode, "recv_kill")) return rank_recv_kill(rank, S);
  if (!strncmp(mode, "init_", 5)) return rank_init_fault(rank, S, !strcmp(mode, "init_kill"));
  if (cpu_rank0 && rank == 0) return cpu_rank_loop(S);
  return rank_loop(rank, S, strcmp(mode, "stop") != 0, !strcmp(mode, "kill_abort"));
}

/* Whether a CUDA device is there, asked in a child (the parent must not
 * load the driver before it forks). */
static bool have_gpu(void) {
  fflush(stdout);
  pid_t probe = fork();
  if (probe == 0) { /* the driver stays out of this process */
    if (hc_dev_get(HC_MEM_CUDA) != NULL) _exit(0);
    printf("skip: no CUDA device here (%s)\n", hc_dev_absent_reason(HC_MEM_CUDA));
    fflush(stdout);
    _exit(77);
  }
  int st = 0;
  return probe > 0 && waitpid(probe, &st, 0) == probe && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *mode = argc > 1 ? argv[1] : "";
  static const char *const modes[] = {"kill",      "kill_abort", "stop", "abort",    "cpu_kill",
                                      "init_kill", "init_hang",  "dump", "recv_kill"};
  bool known = false;
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) known |= !strcmp(mode, modes[i]);
  if (!known) {
    fprintf(stderr, "usage: %s kill|kill_abort|stop|abort|cpu_kill|init_kill|init_hang|dump|recv_kill\n", argv[0]);
    return 2;
  }
  cpu_rank0 = !strcmp(mode, "cpu_kill");
  one_group = !strncmp(mode, "init_", 5);
  const bool rank1_ends_well = !strcmp(mode, "abort") || !strcmp(mode, "dump") || !strcmp(mode, "init_hang");
  const bool killed = !strcmp(mode, "kill") || !strcmp(mode, "kill_abort") || !strcmp(mode, "cpu_kill") ||
                      !strcmp(mode, "init_kill") || !strcmp(mode, "recv_kill");
  if (!have_gpu()) return 77; /* have_gpu said why */
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

  /* The hang clock starts once both comms are up (NVRTC may take long);
   * in the init modes they never are. */
  for (double end = now_s() + 5 * HANG_S; !one_group && now_s() < end && atomic_load(&S->ready) < 2;) usleep(1000);
  /* The fault: after a few calls of both ranks. */
  double fault_at = now_s();
  if (!strcmp(mode, "stop")) {
    for (double end = now_s() + HANG_S;
         now_s() < end && (atomic_load(&S->calls[0]) < 3 || atomic_load(&S->calls[1]) < 3);)
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
      if (r == 1 && killed) fault_at = exited_at[1];
    }
    usleep(2000);
  }
  CHECK(status[0] != -1, "%s: rank 0 still running %d s after the fault: a hang", mode, HANG_S);
  CHECK(status[0] != -1 && WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0, "%s: rank 0 failed (status 0x%x)", mode,
        status[0]);
  if (killed)
    CHECK(status[1] != -1 && WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL,
          "%s: rank 1 did not die by SIGKILL (status 0x%x)", mode, status[1]);
  if (status[0] != -1) printf("%s: the survivor exited %.2f s after the fault\n", mode, exited_at[0] - fault_at);
  for (int r = 0; r < 2; r++) {
    if (status[r] != -1) continue;
    kill(pid[r], SIGKILL);
    kill(pid[r], SIGCONT);
    waitpid(pid[r], &status[r], 0);
    if (rank1_ends_well && r == 1) CHECK(0, "%s: rank 1 did not finish", mode);
  }
  if (rank1_ends_well && status[1] != -1 && exited_at[1] > 0)
    CHECK(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0, "%s: rank 1 failed (status 0x%x)", mode, status[1]);
  if (!strcmp(mode, "init_hang"))
    CHECK(atomic_load(&S->timed_out[0]) || atomic_load(&S->timed_out[1]), "init_hang: no rank named the deadline");
  munmap(S, sizeof(*S));
  return tu_finish("test_gpu_faults");
}
