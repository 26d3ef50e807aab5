/*
 * The NCCL ABI, seen from a program built against the real nccl.h 2.28.9
 * and linked to hetccl's drop-in (build/nccl/libnccl.so.2): layouts and
 * values agree, and calls through nccl* do their jobs. Runs on a host
 * without a GPU, where ABI comms are host comms.
 */
#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

#define NRANKS 3
static ncclUniqueId id;

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
  EXPECT(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat64, ncclScalarHostImmediate, comm) == ncclSuccess, "premul");
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
  return NULL;
}

int main(void) {
  int v = 0;
  EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "version %d, header %d", v, NCCL_VERSION_CODE);
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "id");
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
