/*
 * The NCCL ABI, seen from a program built against the real nccl.h 2.28.9
 * and linked to hetccl's drop-in (build/nccl/libnccl.so.2): layouts and
 * values agree, and calls through nccl* do their jobs. Runs on a host
 * without a GPU, where ABI comms are host comms. Each rank also makes a
 * nonblocking comm (config blocking = 0) and polls it.
 */
#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* From nccl_device.h, which is C++: the host helper torch imports. */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void *reqs, void *outDevComm);

_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t size");
_Static_assert(offsetof(ncclConfig_t, blocking) == 16, "blocking offset");
_Static_assert(offsetof(ncclConfig_t, netName) == 32, "netName offset");
_Static_assert(offsetof(ncclConfig_t, commName) == 48, "commName offset");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "last field offset");
_Static_assert(sizeof(ncclUniqueId) == 128, "unique id");
_Static_assert(ncclInProgress == 7 && ncclRemoteError == 6 && ncclInvalidUsage == 5, "results");
_Static_assert(ncclFloat8e5m2 == 11 && ncclBfloat16 == 9 && ncclNumTypes == 12, "datatypes");
_Static_assert(ncclAvg == 4 && ncclNumOps == 5, "ops");

static int failures;
#define EXPECT(cond, ...)                                    \
  do {                                                       \
    if (!(cond)) {                                           \
      failures++;                                            \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
    }                                                        \
  } while (0)

#define NRANKS 3
static ncclUniqueId id, nonblocking_id;

/* Polls a nonblocking comm until ncclCommGetAsyncError stops reading
 * ncclInProgress (120 s: longer is a hang); returns what it read. */
static ncclResult_t wait_done(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const time_t deadline = time(NULL) + 120;
  while (state == ncclInProgress && time(NULL) < deadline) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) usleep(1000);
  }
  return state;
}

/* A nonblocking comm, as PyTorch makes one under
 * TORCH_NCCL_USE_COMM_NONBLOCKING=1: init and finalize may return
 * ncclInProgress; the comm is polled until each is done. */
static void nonblocking_comm(int rank) {
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "abi-nonblocking";
  ncclResult_t r = ncclCommInitRankConfig(&comm, NRANKS, nonblocking_id, rank, &cfg);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "nonblocking init returned %d: %s", (int)r, ncclGetLastError(NULL));
  if (comm == NULL) return;
  r = wait_done(comm);
  EXPECT(r == ncclSuccess, "nonblocking init ended in %d: %s", (int)r, ncclGetLastError(comm));
  if (r == ncclSuccess) {
    int32_t in = rank + 1, out = 0;
    EXPECT(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, NULL) == ncclSuccess, "%s", ncclGetLastError(NULL));
    EXPECT(out == NRANKS * (NRANKS + 1) / 2, "nonblocking allreduce gave %d", (int)out);
    r = ncclCommFinalize(comm);
    EXPECT(r == ncclInProgress || r == ncclSuccess, "nonblocking finalize returned %d", (int)r);
    EXPECT(wait_done(comm) == ncclSuccess, "nonblocking finalize: %s", ncclGetLastError(comm));
  }
  EXPECT(ncclCommDestroy(comm) == ncclSuccess, "destroy the nonblocking comm");
}

static void *rank_main(void *arg) {
  int rank = (int)(long)arg;
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.commName = "abi";
  ncclResult_t r = ncclCommInitRankConfig(&comm, NRANKS, id, rank, &cfg);
  EXPECT(r == ncclSuccess, "init: %s", ncclGetLastError(NULL));
  if (r != ncclSuccess) return NULL;
  int n = 0, me = -1;
  ncclCommCount(comm, &n);
  ncclCommUserRank(comm, &me);
  EXPECT(n == NRANKS && me == rank, "count %d rank %d", n, me);

  float in[5], out[5];
  for (int i = 0; i < 5; i++) in[i] = (float)(rank + 1) * (float)(i + 1);
  EXPECT(ncclAllReduce(in, out, 5, ncclFloat, ncclSum, comm, NULL) == ncclSuccess, "%s", ncclGetLastError(NULL));
  for (int i = 0; i < 5; i++) EXPECT(out[i] == 6.0f * (float)(i + 1), "allreduce[%d] = %g", i, out[i]);

  double scalar = 0.5, d[2] = {rank * 2.0, 4.0}, dout[2];
  ncclRedOp_t premul;
  EXPECT(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat64, ncclScalarHostImmediate, comm) == ncclSuccess,
         "premul");
  EXPECT(ncclAllReduce(d, dout, 2, ncclFloat64, premul, comm, NULL) == ncclSuccess, "premul allreduce");
  EXPECT(dout[0] == 3.0 && dout[1] == 6.0, "premul gave %g %g", dout[0], dout[1]);
  EXPECT(ncclRedOpDestroy(premul, comm) == ncclSuccess, "destroy op");

  int b[4] = {rank, rank, rank, rank};
  EXPECT(ncclBcast(b, 4, ncclInt32, 2, comm, NULL) == ncclSuccess, "bcast");
  EXPECT(b[0] == 2 && b[3] == 2, "bcast gave %d", b[0]);

  int sendv = 100 + rank, recvv = -1;
  ncclGroupStart();
  ncclSend(&sendv, 1, ncclInt32, (rank + 1) % NRANKS, comm, NULL);
  ncclRecv(&recvv, 1, ncclInt32, (rank + NRANKS - 1) % NRANKS, comm, NULL);
  EXPECT(ncclGroupEnd() == ncclSuccess, "group");
  EXPECT(recvv == 100 + (rank + NRANKS - 1) % NRANKS, "recv %d", recvv);

  ncclComm_t child = NULL;
  EXPECT(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, -rank, &child, NULL) == ncclSuccess, "split");
  if (rank == 0) EXPECT(child == NULL, "NOCOLOR gave a comm");
  else {
    ncclCommUserRank(child, &me);
    EXPECT(me == (rank == 2 ? 0 : 1), "split rank %d", me);
    ncclCommDestroy(child);
  }

  /* Bad input: the documented code and a message. */
  EXPECT(ncclAllReduce(in, out, 5, (ncclDataType_t)42, ncclSum, comm, NULL) == ncclInvalidArgument, "bad type");
  EXPECT(strlen(ncclGetLastError(NULL)) > 0, "no message");
  EXPECT(ncclDevCommCreate(comm, NULL, NULL) == ncclInvalidUsage, "device API must refuse");
  ncclResult_t async = ncclInProgress;
  EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess, "async %d", async);
  EXPECT(ncclCommFinalize(comm) == ncclSuccess, "finalize");
  EXPECT(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  nonblocking_comm(rank);
  return NULL;
}

int main(void) {
  int v = 0;
  EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "version %d, header %d", v, NCCL_VERSION_CODE);
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "id");
  EXPECT(ncclGetUniqueId(&nonblocking_id) == ncclSuccess, "id");
  pthread_t t[NRANKS];
  for (long r = 0; r < NRANKS; r++) pthread_create(&t[r], NULL, rank_main, (void *)r);
  for (int r = 0; r < NRANKS; r++) pthread_join(t[r], NULL);
  ncclComm_t all[2];
  EXPECT(ncclCommInitAll(all, 2, NULL) == ncclSuccess, "InitAll: %s", ncclGetLastError(NULL));
  if (failures == 0) {
    int n0 = 0;
    ncclCommCount(all[1], &n0);
    EXPECT(n0 == 2, "InitAll count %d", n0);
    ncclCommDestroy(all[0]);
    ncclCommDestroy(all[1]);
  }
  printf("test_abi_nccl: %s\n", failures ? "FAILED" : "nccl.h 2.28.9 layouts agree, calls through nccl* work");
  return failures != 0;
}
