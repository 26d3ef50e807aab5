/*
 * Bad input to every public function: each case checks the result code
 * (hetcclInvalidArgument for a bad argument, hetcclInvalidUsage for a call
 * out of order, as DESIGN rule 6 and NCCL have it) and that
 * hetcclGetLastError(NULL) then returns a non-empty text that names the
 * function or the argument. Nothing may hang: HETCCL_TIMEOUT is 3 s here
 * and the cases that wait on peers are timed.
 *
 * Parts:
 *  1. without a comm (main thread): version, error strings, unique id,
 *     CommInitRank / CommInitRankConfig / CommInitFromEnv with bad
 *     arguments, a unique id of random bytes, a well-formed id whose peers
 *     never come, MemAlloc / MemFree of what MemAlloc did not return,
 *     GroupEnd without GroupStart;
 *  2. with a comm of 2 ranks (ranks as threads), every rank running the
 *     whole table on its own comm: NULL comm, a garbage comm (a malloc'd
 *     block of junk, and one of zeros as a destroyed comm looks), NULL
 *     buffers with a non-zero count, bad datatypes (12, -1), bad ops (5
 *     before any PreMulSum exists, 99, -1, an op of another datatype, a
 *     destroyed op), bad roots and peers (-1, nranks), NULL out-pointers,
 *     bad split colors and configs, Barrier inside a group, RedOpDestroy of
 *     what is not a live op; then a collective that must still work;
 *  3. mismatched counts: rank 0 sends 10 elements, rank 1 receives 20:
 *     hetcclInvalidUsage on the receiver, and no hang on either side.
 * Every comm is destroyed, so LeakSanitizer sees no leak.
 *
 * Usage: test_api_errors (no arguments).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define TIMEOUT_S 3
#define SLACK_S 5 /* a timed failure may take HETCCL_TIMEOUT plus this */

/* Checks the result and the last-error text of one call. */
static void expect_at(const char *file, int line, const char *call, hetcclResult_t got, hetcclResult_t want,
                      const char *word1, const char *word2) {
  const char *msg = hetcclGetLastError(NULL);
  tu_check_at(got == want, file, line, NULL, "%s returned %d (%s), expected %d (%s); last error \"%s\"", call, (int)got,
              hetcclGetErrorString(got), (int)want, hetcclGetErrorString(want), msg ? msg : "(NULL)");
  if (want == hetcclSuccess || got == hetcclSuccess) return;
  tu_check_at(msg != NULL && msg[0] != 0 && (strcasestr(msg, word1) || (word2 && strcasestr(msg, word2))), file, line,
              NULL, "%s: last error \"%s\" names neither \"%s\" nor \"%s\"", call, msg ? msg : "(NULL)", word1,
              word2 ? word2 : "");
}
/* Clears the last error, makes the call, checks it. */
#define EXPECT(want, word1, word2, call)                                  \
  do {                                                                    \
    hc_set_last_error("");                                                \
    hetcclResult_t got_ = (call);                                         \
    expect_at(__FILE__, __LINE__, #call, got_, (want), (word1), (word2)); \
  } while (0)

/* ---- 1. without a comm ---- */

static void part_no_comm(void) {
  tu_set_case("no comm");
  EXPECT(hetcclInvalidArgument, "GetVersion", "version", hetcclGetVersion(NULL));
  int v = 0;
  EXPECT(hetcclSuccess, "", NULL, hetcclGetVersion(&v));
  CHECK(v == HETCCL_VERSION_CODE, "GetVersion gave %d, expected %d", v, HETCCL_VERSION_CODE);
  for (int r = -2; r <= 100; r++) {
    const char *s = hetcclGetErrorString((hetcclResult_t)r);
    CHECK(s != NULL && s[0] != 0, "GetErrorString(%d) is %s", r, s ? "empty" : "NULL");
  }
  CHECK(strcmp(hetcclGetErrorString(hetcclInvalidArgument), hetcclGetErrorString(hetcclInvalidUsage)) != 0,
        "GetErrorString: InvalidArgument and InvalidUsage read the same");
  hc_set_last_error("");
  CHECK(hetcclGetLastError(NULL) != NULL, "GetLastError(NULL) returned NULL");
  EXPECT(hetcclInvalidArgument, "GetUniqueId", "uniqueId", hetcclGetUniqueId(NULL));

  hetcclUniqueId zero_id;
  memset(&zero_id, 0, sizeof(zero_id));
  hetcclComm_t c = (hetcclComm_t)&zero_id; /* a sentinel: failures must set NULL */
  tu_set_case("CommInitRank with bad arguments");
  EXPECT(hetcclInvalidArgument, "CommInitRank", "comm", hetcclCommInitRank(NULL, 2, zero_id, 0));
  EXPECT(hetcclInvalidArgument, "CommInitRank", "nranks", hetcclCommInitRank(&c, 0, zero_id, 0));
  CHECK(c == NULL, "a failed CommInitRank left *comm = %p, not NULL", (void *)c);
  EXPECT(hetcclInvalidArgument, "CommInitRank", "nranks", hetcclCommInitRank(&c, -3, zero_id, 0));
  EXPECT(hetcclInvalidArgument, "CommInitRank", "rank", hetcclCommInitRank(&c, 2, zero_id, -1));
  EXPECT(hetcclInvalidArgument, "CommInitRank", "rank", hetcclCommInitRank(&c, 2, zero_id, 2));
  EXPECT(hetcclInvalidArgument, "CommInitRank", "rank", hetcclCommInitRank(&c, 1, zero_id, 1));

  tu_set_case("CommInitRank with a unique id of random bytes");
  hetcclUniqueId junk;
  for (size_t i = 0; i < sizeof(junk.internal); i++) junk.internal[i] = (char)tu_hash(77, 0, i);
  double t0 = tu_seconds();
  c = (hetcclComm_t)&zero_id;
  EXPECT(hetcclInvalidArgument, "CommInitRank", "id", hetcclCommInitRank(&c, 2, junk, 0));
  CHECK(c == NULL, "a failed CommInitRank left *comm = %p, not NULL", (void *)c);
  CHECK(tu_seconds() - t0 < TIMEOUT_S + SLACK_S, "CommInitRank with a random id took %.1f s", tu_seconds() - t0);
  EXPECT(hetcclInvalidArgument, "CommInitRank", "id", hetcclCommInitRank(&c, 1, zero_id, 0));

  tu_set_case("CommInitRank with a valid id whose other rank never comes (HETCCL_TIMEOUT=%d)", TIMEOUT_S);
  hetcclUniqueId id;
  if (CHECK_OK(hetcclGetUniqueId(&id))) {
    t0 = tu_seconds();
    c = (hetcclComm_t)&zero_id;
    hc_set_last_error("");
    hetcclResult_t r = hetcclCommInitRank(&c, 2, id, 0);
    double took = tu_seconds() - t0;
    const char *msg = hetcclGetLastError(NULL);
    CHECK(r == hetcclRemoteError || r == hetcclSystemError,
          "CommInitRank alone of 2 returned %d (%s), expected hetcclRemoteError or hetcclSystemError: \"%s\"", (int)r,
          hetcclGetErrorString(r), msg);
    CHECK(msg[0] != 0, "CommInitRank alone of 2 failed without a message");
    CHECK(took < TIMEOUT_S + SLACK_S, "CommInitRank alone of 2 took %.1f s with HETCCL_TIMEOUT=%d", took, TIMEOUT_S);
    CHECK(c == NULL, "a failed CommInitRank left *comm = %p, not NULL", (void *)c);
    if (r == hetcclSuccess && c) hetcclCommDestroy(c);
  }

  tu_set_case("CommInitRankConfig with a bad config");
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.magic = 0; /* never initialised */
  EXPECT(hetcclInvalidArgument, "CommInitRankConfig", "config", hetcclCommInitRankConfig(&c, 1, zero_id, 0, &cfg));
  hetcclConfig_t cfg2 = HETCCL_CONFIG_INITIALIZER;
  cfg2.deviceKind = 7;
  EXPECT(hetcclInvalidArgument, "CommInitRankConfig", "deviceKind", hetcclCommInitRankConfig(&c, 1, zero_id, 0, &cfg2));
  EXPECT(hetcclInvalidArgument, "CommInitRankConfig", "nranks", hetcclCommInitRankConfig(&c, 0, zero_id, 0, NULL));
  EXPECT(hetcclInvalidArgument, "CommInitRankConfig", "comm", hetcclCommInitRankConfig(NULL, 1, zero_id, 0, NULL));

  tu_set_case("CommInitFromEnv without a launcher's environment");
  static const char *const launch_vars[] = {"RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_LOCALID",
                                            "SLURM_STEP_NODELIST",
                                            "SLURM_JOB_ID",
                                            "OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_LOCAL_RANK"};
  for (size_t i = 0; i < HC_ARRAY_LEN(launch_vars); i++) unsetenv(launch_vars[i]);
  EXPECT(hetcclInvalidArgument, "CommInitFromEnv", "comm", hetcclCommInitFromEnv(NULL, NULL));
  EXPECT(hetcclInvalidUsage, "RANK", "environment", hetcclCommInitFromEnv(&c, NULL));
  EXPECT(hetcclInvalidArgument, "CommInitFromEnv", "config", hetcclCommInitFromEnv(&c, &cfg));

  tu_set_case("registered memory");
  void *mem = NULL;
  int kind = -1, dev = -1;
  EXPECT(hetcclInvalidArgument, "GetDevice", "kind", hetcclGetDevice(NULL, &dev));
  EXPECT(hetcclSuccess, "", NULL, hetcclGetDevice(&kind, &dev));
  CHECK(kind >= hetcclDeviceHost && kind <= hetcclDeviceHip && dev >= 0, "GetDevice: kind %d, device %d", kind, dev);
  EXPECT(hetcclInvalidArgument, "MemAllocDevice", "ptr", hetcclMemAllocDevice(NULL, 4096, hetcclDeviceHost, 0));
  EXPECT(hetcclInvalidArgument, "MemAllocDevice", "kind", hetcclMemAllocDevice(&mem, 4096, 7, 0));
  if (CHECK_OK(hetcclMemAllocDevice(&mem, 4096, hetcclDeviceHost, 0))) {
    memset(mem, 1, 4096);
    EXPECT(hetcclSuccess, "", NULL, hetcclMemFree(mem));
  }
  EXPECT(hetcclInvalidArgument, "MemAlloc", "ptr", hetcclMemAlloc(NULL, 4096));
  EXPECT(hetcclInvalidArgument, "MemAlloc", "size", hetcclMemAlloc(&mem, 0));
  EXPECT(hetcclSuccess, "", NULL, hetcclMemFree(NULL));
  void *plain = malloc(64);
  EXPECT(hetcclInvalidArgument, "MemFree", "MemAlloc", hetcclMemFree(plain));
  free(plain);
  if (CHECK_OK(hetcclMemAlloc(&mem, 4096))) {
    EXPECT(hetcclInvalidArgument, "MemFree", "MemAlloc", hetcclMemFree((char *)mem + 64));
    EXPECT(hetcclSuccess, "", NULL, hetcclMemFree(mem));
    EXPECT(hetcclInvalidArgument, "MemFree", "MemAlloc", hetcclMemFree(mem)); /* twice */
  }

  tu_set_case("groups");
  EXPECT(hetcclInvalidUsage, "GroupEnd", "GroupStart", hetcclGroupEnd());
  /* Balanced nesting is fine and an empty group is a no-op. */
  EXPECT(hetcclSuccess, "", NULL, hetcclGroupStart());
  EXPECT(hetcclSuccess, "", NULL, hetcclGroupStart());
  EXPECT(hetcclSuccess, "", NULL, hetcclGroupEnd());
  EXPECT(hetcclSuccess, "", NULL, hetcclGroupEnd());
  EXPECT(hetcclInvalidUsage, "GroupEnd", "GroupStart", hetcclGroupEnd());
  tu_set_case("%s", "");
}

/* ---- 2. the table, on a live comm ---- */

struct env {
  int rank, n;
  hetcclComm_t comm;    /* valid */
  hetcclComm_t garbage; /* malloc'd junk */
  hetcclComm_t zeroed;  /* malloc'd zeros: what a freed comm's magic looks like */
  float buf[64], buf2[64 * 4];
  size_t counts[4], displs[4], bad_counts[4];
  hetcclRedOp_t fop; /* a live PreMulSum op for float */
  float scalar;
};

#define INV hetcclInvalidArgument
#define USE hetcclInvalidUsage
#define F hetcclFloat
#define SZ 4
/* Bad datatypes and ops, as the enum types. */
#define DT_12 ((hetcclDataType_t)12)
#define DT_M1 ((hetcclDataType_t)-1)
#define OP_5 ((hetcclRedOp_t)5)
#define OP_99 ((hetcclRedOp_t)99)
#define OP_M1 ((hetcclRedOp_t)-1)

/* X(expected result, word 1, word 2, call); e is the struct env. Calls on a
 * bad comm: the same list runs for NULL and for both garbage comms (C). */
#define BAD_COMM_CASES(X, C)                                                                                           \
  X(INV, "AllReduce", "comm", hetcclAllReduce(e->buf, e->buf, SZ, F, hetcclSum, C, NULL))                              \
  X(INV, "Broadcast", "comm", hetcclBroadcast(e->buf, e->buf, SZ, F, 0, C, NULL))                                      \
  X(INV, "Reduce", "comm", hetcclReduce(e->buf, e->buf, SZ, F, hetcclSum, 0, C, NULL))                                 \
  X(INV, "AllGather", "comm", hetcclAllGather(e->buf, e->buf2, SZ, F, C, NULL))                                        \
  X(INV, "ReduceScatter", "comm", hetcclReduceScatter(e->buf2, e->buf, SZ, F, hetcclSum, C, NULL))                     \
  X(INV, "AlltoAll", "comm", hetcclAlltoAll(e->buf2, e->buf2, SZ, F, C, NULL))                                         \
  X(INV, "AlltoAllv", "comm",                                                                                          \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, e->counts, e->displs, F, C, NULL))                    \
  X(INV, "Gather", "comm", hetcclGather(e->buf, e->buf2, SZ, F, 0, C, NULL))                                           \
  X(INV, "Scatter", "comm", hetcclScatter(e->buf2, e->buf, SZ, F, 0, C, NULL))                                         \
  X(INV, "Send", "comm", hetcclSend(e->buf, SZ, F, 0, C, NULL))                                                        \
  X(INV, "Recv", "comm", hetcclRecv(e->buf, SZ, F, 0, C, NULL))                                                        \
  X(INV, "Barrier", "comm", hetcclBarrier(C, NULL))                                                                    \
  X(INV, "CommSplit", "comm", hetcclCommSplit(C, 0, 0, &tmp, NULL))                                                    \
  X(INV, "CommFinalize", "comm", hetcclCommFinalize(C))                                                                \
  X(INV, "CommCount", "comm", hetcclCommCount(C, &ival))                                                               \
  X(INV, "CommUserRank", "comm", hetcclCommUserRank(C, &ival))                                                         \
  X(INV, "CommGetAsyncError", "comm", hetcclCommGetAsyncError(C, &res))                                                \
  X(INV, "CommDevice", "comm", hetcclCommDevice(C, &ival, &ival))                                                      \
  X(INV, "CommGetVendorComm", "comm", hetcclCommGetVendorComm(C, &handle))                                             \
  X(INV, "CommRegister", "comm", hetcclCommRegister(C, e->buf, SZ, &handle))                                           \
  X(INV, "CommDeregister", "comm", hetcclCommDeregister(C, handle))                                                    \
  X(INV, "RedOpCreatePreMulSum", "comm", hetcclRedOpCreatePreMulSum(&op, &e->scalar, F, hetcclScalarHostImmediate, C)) \
  X(INV, "RedOpDestroy", "comm", hetcclRedOpDestroy(e->fop, C))

/* Calls on the valid comm with one bad argument each. */
#define BAD_ARG_CASES(X)                                                                                         \
  /* NULL buffers with a non-zero count (root / peer = this rank, where it matters) */                           \
  X(INV, "AllReduce", "sendbuff", hetcclAllReduce(NULL, e->buf, SZ, F, hetcclSum, e->comm, NULL))                \
  X(INV, "AllReduce", "recvbuff", hetcclAllReduce(e->buf, NULL, SZ, F, hetcclSum, e->comm, NULL))                \
  X(INV, "Broadcast", "sendbuff", hetcclBroadcast(NULL, e->buf, SZ, F, e->rank, e->comm, NULL))                  \
  X(INV, "Broadcast", "recvbuff", hetcclBroadcast(e->buf, NULL, SZ, F, e->rank, e->comm, NULL))                  \
  X(INV, "Reduce", "sendbuff", hetcclReduce(NULL, e->buf, SZ, F, hetcclSum, e->rank, e->comm, NULL))             \
  X(INV, "Reduce", "recvbuff", hetcclReduce(e->buf, NULL, SZ, F, hetcclSum, e->rank, e->comm, NULL))             \
  X(INV, "AllGather", "sendbuff", hetcclAllGather(NULL, e->buf2, SZ, F, e->comm, NULL))                          \
  X(INV, "AllGather", "recvbuff", hetcclAllGather(e->buf, NULL, SZ, F, e->comm, NULL))                           \
  X(INV, "ReduceScatter", "sendbuff", hetcclReduceScatter(NULL, e->buf, SZ, F, hetcclSum, e->comm, NULL))        \
  X(INV, "ReduceScatter", "recvbuff", hetcclReduceScatter(e->buf2, NULL, SZ, F, hetcclSum, e->comm, NULL))       \
  X(INV, "AlltoAll", "sendbuff", hetcclAlltoAll(NULL, e->buf2, SZ, F, e->comm, NULL))                            \
  X(INV, "AlltoAll", "recvbuff", hetcclAlltoAll(e->buf2, NULL, SZ, F, e->comm, NULL))                            \
  X(INV, "AlltoAllv", "sendbuff",                                                                                \
    hetcclAlltoAllv(NULL, e->counts, e->displs, e->buf2, e->counts, e->displs, F, e->comm, NULL))                \
  X(INV, "AlltoAllv", "recvbuff",                                                                                \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, NULL, e->counts, e->displs, F, e->comm, NULL))                \
  X(INV, "AlltoAllv", "sendcounts",                                                                              \
    hetcclAlltoAllv(e->buf2, NULL, e->displs, e->buf2 + 32, e->counts, e->displs, F, e->comm, NULL))             \
  X(INV, "AlltoAllv", "displ",                                                                                   \
    hetcclAlltoAllv(e->buf2, e->counts, NULL, e->buf2 + 32, e->counts, e->displs, F, e->comm, NULL))             \
  X(INV, "AlltoAllv", "recvcounts",                                                                              \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, NULL, e->displs, F, e->comm, NULL))             \
  X(INV, "AlltoAllv", "displ",                                                                                   \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, e->counts, NULL, F, e->comm, NULL))             \
  X(INV, "AlltoAllv", "itself", /* sends 4 to itself, expects 5 */                                               \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, e->bad_counts, e->displs, F, e->comm, NULL))    \
  X(INV, "Gather", "sendbuff", hetcclGather(NULL, e->buf2, SZ, F, e->rank, e->comm, NULL))                       \
  X(INV, "Gather", "recvbuff", hetcclGather(e->buf, NULL, SZ, F, e->rank, e->comm, NULL))                        \
  X(INV, "Scatter", "sendbuff", hetcclScatter(NULL, e->buf, SZ, F, e->rank, e->comm, NULL))                      \
  X(INV, "Scatter", "recvbuff", hetcclScatter(e->buf2, NULL, SZ, F, e->rank, e->comm, NULL))                     \
  X(INV, "Send", "sendbuff", hetcclSend(NULL, SZ, F, e->rank, e->comm, NULL))                                    \
  X(INV, "Recv", "recvbuff", hetcclRecv(NULL, SZ, F, e->rank, e->comm, NULL))                                    \
  /* count * size overflows */                                                                                   \
  X(INV, "AllReduce", "count", hetcclAllReduce(e->buf, e->buf, SIZE_MAX / 2, F, hetcclSum, e->comm, NULL))       \
  X(INV, "AllGather", "count", hetcclAllGather(e->buf, e->buf2, SIZE_MAX / 2 + 1, hetcclInt8, e->comm, NULL))    \
  /* bad datatypes */                                                                                            \
  X(INV, "AllReduce", "datatype", hetcclAllReduce(e->buf, e->buf, SZ, DT_12, hetcclSum, e->comm, NULL))          \
  X(INV, "AllReduce", "datatype", hetcclAllReduce(e->buf, e->buf, SZ, DT_M1, hetcclSum, e->comm, NULL))          \
  X(INV, "Broadcast", "datatype", hetcclBroadcast(e->buf, e->buf, SZ, DT_12, 0, e->comm, NULL))                  \
  X(INV, "Broadcast", "datatype", hetcclBroadcast(e->buf, e->buf, SZ, DT_M1, 0, e->comm, NULL))                  \
  X(INV, "Reduce", "datatype", hetcclReduce(e->buf, e->buf, SZ, DT_12, hetcclSum, 0, e->comm, NULL))             \
  X(INV, "Reduce", "datatype", hetcclReduce(e->buf, e->buf, SZ, DT_M1, hetcclMax, 0, e->comm, NULL))             \
  X(INV, "AllGather", "datatype", hetcclAllGather(e->buf, e->buf2, SZ, DT_12, e->comm, NULL))                    \
  X(INV, "AllGather", "datatype", hetcclAllGather(e->buf, e->buf2, SZ, DT_M1, e->comm, NULL))                    \
  X(INV, "ReduceScatter", "datatype", hetcclReduceScatter(e->buf2, e->buf, SZ, DT_12, hetcclSum, e->comm, NULL)) \
  X(INV, "ReduceScatter", "datatype", hetcclReduceScatter(e->buf2, e->buf, SZ, DT_M1, hetcclSum, e->comm, NULL)) \
  X(INV, "AlltoAll", "datatype", hetcclAlltoAll(e->buf2, e->buf2, SZ, DT_12, e->comm, NULL))                     \
  X(INV, "AlltoAll", "datatype", hetcclAlltoAll(e->buf2, e->buf2, SZ, DT_M1, e->comm, NULL))                     \
  X(INV, "AlltoAllv", "datatype",                                                                                \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, e->counts, e->displs, DT_12, e->comm, NULL))    \
  X(INV, "AlltoAllv", "datatype",                                                                                \
    hetcclAlltoAllv(e->buf2, e->counts, e->displs, e->buf2 + 32, e->counts, e->displs, DT_M1, e->comm, NULL))    \
  X(INV, "Gather", "datatype", hetcclGather(e->buf, e->buf2, SZ, DT_12, 0, e->comm, NULL))                       \
  X(INV, "Gather", "datatype", hetcclGather(e->buf, e->buf2, SZ, DT_M1, 0, e->comm, NULL))                       \
  X(INV, "Scatter", "datatype", hetcclScatter(e->buf2, e->buf, SZ, DT_12, 0, e->comm, NULL))                     \
  X(INV, "Scatter", "datatype", hetcclScatter(e->buf2, e->buf, SZ, DT_M1, 0, e->comm, NULL))                     \
  X(INV, "Send", "datatype", hetcclSend(e->buf, SZ, DT_12, e->rank, e->comm, NULL))                              \
  X(INV, "Send", "datatype", hetcclSend(e->buf, SZ, DT_M1, e->rank, e->comm, NULL))                              \
  X(INV, "Recv", "datatype", hetcclRecv(e->buf, SZ, DT_12, e->rank, e->comm, NULL))                              \
  X(INV, "Recv", "datatype", hetcclRecv(e->buf, SZ, DT_M1, e->rank, e->comm, NULL))                              \
  X(INV, "RedOpCreatePreMulSum", "datatype",                                                                     \
    hetcclRedOpCreatePreMulSum(&op, &e->scalar, DT_12, hetcclScalarHostImmediate, e->comm))                      \
  X(INV, "RedOpCreatePreMulSum", "datatype",                                                                     \
    hetcclRedOpCreatePreMulSum(&op, &e->scalar, DT_M1, hetcclScalarDevice, e->comm))                             \
  /* bad ops: 5 while no PreMulSum op exists yet, 99, -1 */                                                      \
  X(INV, "AllReduce", "op", hetcclAllReduce(e->buf, e->buf, SZ, F, OP_5, e->comm, NULL))                         \
  X(INV, "AllReduce", "op", hetcclAllReduce(e->buf, e->buf, SZ, F, OP_99, e->comm, NULL))                        \
  X(INV, "AllReduce", "op", hetcclAllReduce(e->buf, e->buf, SZ, F, OP_M1, e->comm, NULL))                        \
  X(INV, "Reduce", "op", hetcclReduce(e->buf, e->buf, SZ, F, OP_5, 0, e->comm, NULL))                            \
  X(INV, "Reduce", "op", hetcclReduce(e->buf, e->buf, SZ, F, OP_99, 0, e->comm, NULL))                           \
  X(INV, "Reduce", "op", hetcclReduce(e->buf, e->buf, SZ, F, OP_M1, 0, e->comm, NULL))                           \
  X(INV, "ReduceScatter", "op", hetcclReduceScatter(e->buf2, e->buf, SZ, F, OP_5, e->comm, NULL))                \
  X(INV, "ReduceScatter", "op", hetcclReduceScatter(e->buf2, e->buf, SZ, F, OP_99, e->comm, NULL))               \
  X(INV, "ReduceScatter", "op", hetcclReduceScatter(e->buf2, e->buf, SZ, F, OP_M1, e->comm, NULL))               \
  X(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(OP_5, e->comm))                                                \
  X(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(OP_99, e->comm))                                               \
  X(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(OP_M1, e->comm))                                               \
  X(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(hetcclSum, e->comm))                                           \
  X(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(hetcclAvg, e->comm))                                           \
  /* bad roots and peers: -1 and nranks */                                                                       \
  X(INV, "Broadcast", "root", hetcclBroadcast(e->buf, e->buf, SZ, F, -1, e->comm, NULL))                         \
  X(INV, "Broadcast", "root", hetcclBroadcast(e->buf, e->buf, SZ, F, e->n, e->comm, NULL))                       \
  X(INV, "Reduce", "root", hetcclReduce(e->buf, e->buf, SZ, F, hetcclSum, -1, e->comm, NULL))                    \
  X(INV, "Reduce", "root", hetcclReduce(e->buf, e->buf, SZ, F, hetcclSum, e->n, e->comm, NULL))                  \
  X(INV, "Gather", "root", hetcclGather(e->buf, e->buf2, SZ, F, -1, e->comm, NULL))                              \
  X(INV, "Gather", "root", hetcclGather(e->buf, e->buf2, SZ, F, e->n, e->comm, NULL))                            \
  X(INV, "Scatter", "root", hetcclScatter(e->buf2, e->buf, SZ, F, -1, e->comm, NULL))                            \
  X(INV, "Scatter", "root", hetcclScatter(e->buf2, e->buf, SZ, F, e->n, e->comm, NULL))                          \
  X(INV, "Send", "peer", hetcclSend(e->buf, SZ, F, -1, e->comm, NULL))                                           \
  X(INV, "Send", "peer", hetcclSend(e->buf, SZ, F, e->n, e->comm, NULL))                                         \
  X(INV, "Recv", "peer", hetcclRecv(e->buf, SZ, F, -1, e->comm, NULL))                                           \
  X(INV, "Recv", "peer", hetcclRecv(e->buf, SZ, F, e->n, e->comm, NULL))                                         \
  /* NULL out-pointers and other bad arguments */                                                                \
  X(INV, "CommCount", "count", hetcclCommCount(e->comm, NULL))                                                   \
  X(INV, "CommUserRank", "rank", hetcclCommUserRank(e->comm, NULL))                                              \
  X(INV, "CommGetAsyncError", "asyncError", hetcclCommGetAsyncError(e->comm, NULL))                              \
  X(INV, "CommDevice", "kind", hetcclCommDevice(e->comm, NULL, &ival))                                           \
  X(INV, "CommGetVendorComm", "vendorComm", hetcclCommGetVendorComm(e->comm, NULL))                              \
  X(INV, "CommRegister", "handle", hetcclCommRegister(e->comm, e->buf, SZ, NULL))                                \
  X(INV, "CommDeregister", "registration", hetcclCommDeregister(e->comm, &ival))                                 \
  X(INV, "CommSplit", "newcomm", hetcclCommSplit(e->comm, 0, 0, NULL, NULL))                                     \
  X(INV, "CommSplit", "color", hetcclCommSplit(e->comm, -5, 0, &tmp, NULL))                                      \
  X(INV, "CommSplit", "config", hetcclCommSplit(e->comm, 0, 0, &tmp, &zero_cfg))                                 \
  X(INV, "RedOpCreatePreMulSum", "op", /* the op pointer */                                                      \
    hetcclRedOpCreatePreMulSum(NULL, &e->scalar, F, hetcclScalarHostImmediate, e->comm))                         \
  X(INV, "RedOpCreatePreMulSum", "scalar",                                                                       \
    hetcclRedOpCreatePreMulSum(&op, NULL, F, hetcclScalarHostImmediate, e->comm))                                \
  X(INV, "RedOpCreatePreMulSum", "residence",                                                                    \
    hetcclRedOpCreatePreMulSum(&op, &e->scalar, F, (hetcclScalarResidence_t)2, e->comm))

/* Needs a live float PreMulSum op in e->fop. */
#define BAD_OP_CASES(X)                                                                                               \
  X(INV, "AllReduce", "datatype", hetcclAllReduce(e->buf, e->buf, SZ, hetcclInt32, e->fop, e->comm, NULL))            \
  X(INV, "Reduce", "datatype", hetcclReduce(e->buf, e->buf, SZ, hetcclFloat16, e->fop, 0, e->comm, NULL))             \
  X(INV, "ReduceScatter", "datatype", hetcclReduceScatter(e->buf2, e->buf, SZ, hetcclFloat64, e->fop, e->comm, NULL)) \
  X(INV, "AllReduce", "op", hetcclAllReduce(e->buf, e->buf, SZ, F, (hetcclRedOp_t)(e->fop + 1), e->comm, NULL))

struct table_case {
  hetcclResult_t want;
  const char *word1, *word2, *call;
};

static int rank_table(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  struct env E = {.rank = rank, .n = nranks, .scalar = 2.0f}, *e = &E;
  tu_set_repro("%s", "");
  tu_set_case("CommInitRank");
  if (!CHECK_OK(hetcclCommInitRank(&e->comm, nranks, id, rank))) return 1;
  e->garbage = malloc(1 << 16);
  e->zeroed = calloc(1, 1 << 16);
  memset(e->garbage, 0x5a, 1 << 16);
  for (int i = 0; i < 4; i++) {
    e->counts[i] = i < nranks ? 4 : 0;
    e->displs[i] = (size_t)i * 4;
    e->bad_counts[i] = e->counts[i] + (i == rank);
  }
  hetcclComm_t tmp = NULL;
  hetcclRedOp_t op = hetcclSum;
  int ival = 0;
  void *handle = NULL;
  hetcclResult_t res;
  hetcclConfig_t zero_cfg = HETCCL_CONFIG_INITIALIZER;
  zero_cfg.magic = 0;
  int ncases = 0;

#define RUN(want, w1, w2, call)                                     \
  do {                                                              \
    hc_set_last_error("");                                          \
    hetcclResult_t got_ = (call);                                   \
    expect_at(__FILE__, __LINE__, #call, got_, (want), (w1), (w2)); \
    ncases++;                                                       \
  } while (0);
  tu_set_case("NULL comm");
  BAD_COMM_CASES(RUN, NULL)
  tu_set_case("garbage comm (malloc'd junk)");
  BAD_COMM_CASES(RUN, e->garbage)
  tu_set_case("garbage comm (zeros, as a destroyed comm)");
  BAD_COMM_CASES(RUN, e->zeroed)
  RUN(INV, "CommDestroy", "comm", hetcclCommDestroy(e->garbage))
  RUN(INV, "CommAbort", "comm", hetcclCommAbort(e->garbage))
  RUN(INV, "CommDestroy", "comm", hetcclCommDestroy(e->zeroed))
  RUN(hetcclSuccess, "", NULL, hetcclCommDestroy(NULL)) /* as NCCL */
  RUN(hetcclSuccess, "", NULL, hetcclCommAbort(NULL))
  tu_set_case("bad arguments on a valid comm");
  BAD_ARG_CASES(RUN)
  CHECK(tmp == NULL, "a failed CommSplit left a comm %p", (void *)tmp);
  tu_set_case("the comm's device and registrations");
  int kind = -1, dev = -1;
  RUN(hetcclSuccess, "", NULL, hetcclCommDevice(e->comm, &kind, &dev))
  CHECK(kind == hetcclDeviceHost && dev == 0, "CommDevice of a host comm: kind %d, device %d", kind, dev);
  handle = &ival;
  RUN(hetcclSuccess, "", NULL, hetcclCommGetVendorComm(e->comm, &handle))
  CHECK(handle == NULL, "a host comm has vendor comm %p", handle);
  RUN(hetcclSuccess, "", NULL, hetcclCommRegister(e->comm, e->buf, SZ, &handle))
  RUN(hetcclSuccess, "", NULL, hetcclCommDeregister(e->comm, handle))

  tu_set_case("ops");
  if (CHECK_OK(hetcclRedOpCreatePreMulSum(&e->fop, &e->scalar, F, hetcclScalarHostImmediate, e->comm))) {
    BAD_OP_CASES(RUN)
    RUN(hetcclSuccess, "", NULL, hetcclRedOpDestroy(e->fop, e->comm))
    /* Destroyed: neither usable nor destroyable again. */
    RUN(INV, "AllReduce", "op", hetcclAllReduce(e->buf, e->buf, SZ, F, e->fop, e->comm, NULL))
    RUN(INV, "RedOpDestroy", "op", hetcclRedOpDestroy(e->fop, e->comm))
  }
  tu_set_case("Barrier inside a group");
  RUN(hetcclSuccess, "", NULL, hetcclGroupStart())
  RUN(USE, "Barrier", "group", hetcclBarrier(e->comm, NULL))
  RUN(hetcclSuccess, "", NULL, hetcclGroupEnd())
#undef RUN

  /* None of that may have hurt the comm. */
  tu_set_case("a collective after the bad calls");
  hetcclResult_t async = hetcclSuccess;
  CHECK_OK(hetcclCommGetAsyncError(e->comm, &async));
  CHECK(async == hetcclSuccess, "async error %d after bad calls", (int)async);
  int32_t v[5] = {rank, rank, rank, rank, rank};
  if (CHECK_OK(hetcclAllReduce(v, v, 5, hetcclInt32, hetcclSum, e->comm, NULL)))
    CHECK(v[0] == nranks * (nranks - 1) / 2 && v[4] == v[0], "AllReduce after bad calls gave %d", v[0]);
  if (rank == 0) printf("  %d table cases per rank\n", ncases);

  /* ---- 3. mismatched counts ---- */
  tu_set_case("mismatched counts: rank 0 sends 10 int32, rank 1 receives 20");
  if (nranks >= 2 && rank <= 1) {
    int32_t buf[20] = {0};
    double t0 = tu_seconds();
    hc_set_last_error("");
    if (rank == 0) {
      hetcclResult_t r = hetcclSend(buf, 10, hetcclInt32, 1, e->comm, NULL);
      /* The sender may complete; it must not hang. */
      CHECK(r == hetcclSuccess || r == hetcclInvalidUsage || r == hetcclRemoteError || r == hetcclSystemError,
            "sender returned %d (%s): %s", (int)r, hetcclGetErrorString(r), hetcclGetLastError(NULL));
    } else {
      hetcclResult_t r = hetcclRecv(buf, 20, hetcclInt32, 0, e->comm, NULL);
      expect_at(__FILE__, __LINE__, "hetcclRecv(buf, 20, hetcclInt32, 0, comm) against a send of 10", r, USE, "count",
                "Recv");
    }
    double took = tu_seconds() - t0;
    CHECK(took < TIMEOUT_S + SLACK_S, "rank %d took %.1f s with HETCCL_TIMEOUT=%d", rank, took, TIMEOUT_S);
  }
  tu_barrier();
  tu_set_case("CommDestroy");
  CHECK_OK(hetcclCommDestroy(e->comm));
  free(e->garbage);
  free(e->zeroed);
  tu_set_case("%s", "");
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  /* Bounded waits; the WARN lines of ~200 expected failures are noise
   * unless asked for. */
  char t[16];
  snprintf(t, sizeof(t), "%d", TIMEOUT_S);
  setenv("HETCCL_TIMEOUT", t, 1);
  setenv("HETCCL_DEBUG", "NONE", 0);
  hc_params_reset();
  tu_set_repro("%s", "");
  part_no_comm();
  printf("  without a comm: %ld checks, %.1f s\n", tu_checks(), tu_seconds());
  tu_run_ranks(2, rank_table, NULL);
  return tu_finish("test_api_errors");
}
