/*
 * abi/: the NCCL 2.28 API and ABI over hetccl's native API. Every function
 * of nccl.h 2.28.9 and the device-API host helpers that PyTorch imports is
 * exported twice, as NCCL does: a strong pnccl<Name> and a weak
 * nccl<Name> at the same address (the PMPI scheme: an interposer may define
 * ncclX and call pncclX).
 *
 * The types below are nccl.h's, restated so that no vendor header is
 * needed; the enum values are hetccl's own (include/hetccl.h equals nccl.h
 * value for value), so results, datatypes and ops pass through unchanged.
 * tests/unit/test_abi_nccl.c compiles against the real nccl.h and checks
 * the layouts and values.
 *
 * Device selection: a comm made through this ABI is a GPU comm on the
 * device current on the calling thread (as NCCL), when a GPU backend is
 * loaded; on a host without one it is a host comm, so the ABI is testable
 * anywhere.
 *
 * ncclGetVersion reports 2.28.9 (22809): PyTorch then offers the features
 * hetccl implements (AVG 2.10, PreMulSum 2.11, last error 2.13, config and
 * nonblocking flag 2.14/2.17, split 2.18, register and MemAlloc 2.19,
 * scalable init 2.23, fp8 2.24, AlltoAll 2.28). Device API, symmetric
 * windows, shrink, revoke and GroupSimulateEnd return ncclInvalidUsage with
 * a message (docs/nccl-abi.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hetccl.h"
#include "bridge.h"

typedef hetcclResult_t ncclResult_t;
typedef hetcclDataType_t ncclDataType_t;
typedef hetcclRedOp_t ncclRedOp_t;
typedef hetcclScalarResidence_t ncclScalarResidence_t;
typedef struct hetcclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef void *cudaStream_t;
typedef struct {
  char internal[128];
} ncclUniqueId;

/* struct ncclConfig_v22800, 80 bytes on LP64. */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare, trafficClass;
  const char *commName;
  int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched;
} ncclConfig_t;
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_v22800 is 80 bytes");

typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

typedef struct {
  int nRanks, rank, stride;
} ncclTeam_t;

#define NCCL_VERSION_REPORTED 22809

/* Strong pnccl<name>, weak nccl<name> at the same address. */
#define NCCL_API(ret, name, ...)                                                        \
  __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                      \
  __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__); \
  ret p##name(__VA_ARGS__)

/* Returns the result of call when it failed. */
#define NC_TRY(call)                    \
  do {                                  \
    ncclResult_t r_ = (call);           \
    if (r_ != hetcclSuccess) return r_; \
  } while (0)

/* hetccl's config from an NCCL config (read only up to its size) and the
 * current device. */
static ncclResult_t translate_config(const ncclConfig_t *in, hetcclConfig_t *out) {
  *out = (hetcclConfig_t)HETCCL_CONFIG_INITIALIZER;
  NC_TRY(hetcclGetDevice(&out->deviceKind, &out->deviceId));
  if (in == NULL) return hetcclSuccess;
  if (in->magic != HETCCL_CONFIG_MAGIC)
    return ABI_FAIL(hetcclInvalidArgument, "ncclConfig_t was not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x)",
                    in->magic);
#define HAS(field) (offsetof(ncclConfig_t, field) + sizeof(in->field) <= in->size)
  if (HAS(blocking)) out->blocking = in->blocking;
  if (HAS(commName)) out->commName = in->commName;
#undef HAS
  return hetcclSuccess;
}

/* ---- calls of the real NCCL that land here (bridge.h says when) ---- */

/* Returns the real function's answer when comm is the real library's. */
#define RETURN_IF_VENDOR_COMM(comm, name, ...)                      \
  do {                                                              \
    void *f_ = hc_abi_vendor_fn_for_comm((comm), #name);            \
    if (f_ != NULL) return ((__typeof__(&p##name))f_)(__VA_ARGS__); \
  } while (0)

/* Returns the real function's answer when the real library called (calls
 * without a comm are recognised by their caller). */
#define RETURN_IF_VENDOR_CALLER(name, ...)                                      \
  do {                                                                          \
    void *f_ = hc_abi_vendor_fn_for_caller(__builtin_return_address(0), #name); \
    if (f_ != NULL) return ((__typeof__(&p##name))f_)(__VA_ARGS__);             \
  } while (0)

static ncclResult_t unsupported(const char *fn, const char *why) {
  return ABI_FAIL(hetcclInvalidUsage, "%s: not supported by hetccl: %s", fn, why);
}

/* ---- version, errors ---- */

NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
  RETURN_IF_VENDOR_CALLER(ncclGetVersion, version);
  NC_TRY(hetcclGetVersion(version)); /* checks version */
  *version = NCCL_VERSION_REPORTED;
  return hetcclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result) {
  RETURN_IF_VENDOR_CALLER(ncclGetErrorString, result);
  return hetcclGetErrorString(result);
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclGetLastError, comm);
  return hetcclGetLastError(comm);
}

NCCL_API(void, ncclResetDebugInit, void) { hc_abi_reset_debug(); }

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
  RETURN_IF_VENDOR_CALLER(ncclGetUniqueId, uniqueId);
  return hetcclGetUniqueId((hetcclUniqueId *)uniqueId);
}

/* ---- communicators ---- */

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t *config) {
  hetcclConfig_t cfg;
  hetcclUniqueId id;
  NC_TRY(translate_config(config, &cfg));
  memcpy(&id, &commId, sizeof(id));
  return hetcclCommInitRankConfig(comm, nranks, id, rank, &cfg);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

/* Several ids spread NCCL's bootstrap load; hetccl's rendezvous needs one,
 * and every rank passes the same list, so the first serves. */
NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
         ncclUniqueId *commIds, ncclConfig_t *config) {
  if (nId < 1 || commIds == NULL)
    return ABI_FAIL(hetcclInvalidArgument, "ncclCommInitRankScalable: %d ids at %p", nId, (void *)commIds);
  return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

/* One process, ndev ranks. */
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist) {
  return hetcclCommInitAll(comm, ndev, devlist);
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  hetcclConfig_t cfg;
  if (config == NULL) return hetcclCommSplit(comm, color, key, newcomm, NULL);
  NC_TRY(translate_config(config, &cfg));
  return hetcclCommSplit(comm, color, key, newcomm, &cfg);
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
         ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  (void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)config, (void)shrinkFlags;
  if (newcomm) *newcomm = NULL;
  return unsupported("ncclCommShrink", "a child without the excluded ranks needs a rendezvous they do not join");
}

/* NCCL 2.29.7 and the newest RCCL (PyTorch's NCCL_HAS_COMM_OFFLOAD): suspend
 * and resume free and re-create a comm's dynamic GPU memory. hetccl's
 * scratch pools live as long as the comm; a ROCm or CUDA torch built
 * against such a header imports these, so they exist, and say so. */
typedef enum {
  ncclStatGpuMemSuspend,
  ncclStatGpuMemSuspended,
  ncclStatGpuMemPersist,
  ncclStatGpuMemTotal
} ncclCommMemStat_t;
NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  (void)comm, (void)flags;
  return unsupported("ncclCommSuspend", "hetccl keeps a comm's scratch memory until it is destroyed");
}
NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  (void)comm;
  return unsupported("ncclCommResume", "hetccl never suspends a comm");
}
NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value) {
  (void)comm, (void)stat;
  if (value) *value = 0;
  return unsupported("ncclCommMemStats", "hetccl does not count a comm's GPU memory");
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  (void)comm, (void)revokeFlags;
  return unsupported("ncclCommRevoke", "use ncclCommAbort");
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) { return hetcclCommFinalize(comm); }
NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommDestroy, comm);
  return hetcclCommDestroy(comm);
}
NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommAbort, comm);
  return hetcclCommAbort(comm);
}
NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommGetAsyncError, comm, asyncError);
  return hetcclCommGetAsyncError(comm, asyncError);
}
NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommCount, comm, count);
  return hetcclCommCount(comm, count);
}
NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommUserRank, comm, rank);
  return hetcclCommUserRank(comm, rank);
}
NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommCuDevice, comm, device);
  int kind;
  return hetcclCommDevice(comm, &kind, device);
}

/* ---- memory and registration ---- */

/* Device memory on the current device (host memory where there is no GPU). */
NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  RETURN_IF_VENDOR_CALLER(ncclMemAlloc, ptr, size);
  int kind, dev;
  NC_TRY(hetcclGetDevice(&kind, &dev));
  return hetcclMemAllocDevice(ptr, size, kind, dev);
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr) {
  RETURN_IF_VENDOR_CALLER(ncclMemFree, ptr);
  return hetcclMemFree(ptr);
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommRegister, comm, buff, size, handle);
  return hetcclCommRegister(comm, buff, size, handle);
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommDeregister, comm, handle);
  return hetcclCommDeregister(comm, handle);
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
         int winFlags) {
  (void)comm, (void)buff, (void)size, (void)winFlags;
  if (win) *win = NULL;
  return unsupported("ncclCommWindowRegister", "symmetric memory windows");
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  RETURN_IF_VENDOR_COMM(comm, ncclCommWindowDeregister, comm, win);
  (void)comm, (void)win;
  return unsupported("ncclCommWindowDeregister", "symmetric memory windows");
}

/* ---- reductions ops ---- */

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  return hetcclRedOpCreatePreMulSum(op, scalar, datatype, residence, comm);
}
NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) { return hetcclRedOpDestroy(op, comm); }

/* ---- collectives ---- */

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclAllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream);
  return hetcclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclBroadcast, sendbuff, recvbuff, count, datatype, root, comm, stream);
  return hetcclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return hetcclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  return hetcclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclAllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream);
  return hetcclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}
NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  return hetcclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}
NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return hetcclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}
/* RCCL's names, which a ROCm PyTorch calls (torch/csrc/cuda/nccl.cpp takes
 * them under USE_ROCM): ncclAllToAll (capital T, every RCCL) and
 * ncclAllToAllv, and the newest RCCL's ncclAlltoAllv. Counts and
 * displacements are in elements, one per rank. */
NCCL_API(ncclResult_t, ncclAllToAll, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  return hetcclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}
NCCL_API(ncclResult_t, ncclAllToAllv, const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
         void *recvbuff, const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  return hetcclAlltoAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, comm, stream);
}
NCCL_API(ncclResult_t, ncclAlltoAllv, const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
         void *recvbuff, const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream) {
  return hetcclAlltoAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, comm, stream);
}
NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return hetcclGather(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return hetcclScatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclSend, sendbuff, count, datatype, peer, comm, stream);
  return hetcclSend(sendbuff, count, datatype, peer, comm, stream);
}
NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  RETURN_IF_VENDOR_COMM(comm, ncclRecv, recvbuff, count, datatype, peer, comm, stream);
  return hetcclRecv(recvbuff, count, datatype, peer, comm, stream);
}

NCCL_API(ncclResult_t, ncclGroupStart, void) { return hetcclGroupStart(); }
NCCL_API(ncclResult_t, ncclGroupEnd, void) { return hetcclGroupEnd(); }
NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  (void)simInfo;
  return unsupported("ncclGroupSimulateEnd", "no cost model for hetccl's plans yet");
}

/* ---- device-API host helpers (nccl_device.h) ---- */

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void *reqs, void *outDevComm) {
  (void)comm, (void)reqs, (void)outDevComm;
  return unsupported("ncclDevCommCreate", "the NCCL device API");
}
NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void *devComm) {
  RETURN_IF_VENDOR_COMM(comm, ncclDevCommDestroy, comm, devComm);
  (void)comm, (void)devComm;
  return unsupported("ncclDevCommDestroy", "the NCCL device API");
}
NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers, void *outHandle, void *outReq) {
  RETURN_IF_VENDOR_CALLER(ncclLsaBarrierCreateRequirement, team, nBarriers, outHandle, outReq);
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return unsupported("ncclLsaBarrierCreateRequirement", "the NCCL device API");
}
NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team, int nBarriers,
         void *outHandle, void *outReq) {
  RETURN_IF_VENDOR_COMM(comm, ncclGinBarrierCreateRequirement, comm, team, nBarriers, outHandle, outReq);
  (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return unsupported("ncclGinBarrierCreateRequirement", "the NCCL device API");
}
NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, void *outHandle, void *outReq) {
  RETURN_IF_VENDOR_CALLER(ncclLLA2ACreateRequirement, nBlocks, nSlots, outHandle, outReq);
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return unsupported("ncclLLA2ACreateRequirement", "the NCCL device API");
}
NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  RETURN_IF_VENDOR_CALLER(ncclLLA2ACalcSlots, maxElts, maxEltSize);
  return maxElts * ((maxEltSize + 7) / 8);
}

/* Teams: the world; load/store-accessible peers are only the rank itself
 * (hetccl maps no peer memory into kernels); the rail is the world. */
NCCL_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclTeamWorld, comm);
  int n = 0, r = 0;
  hetcclCommCount(comm, &n);
  hetcclCommUserRank(comm, &r);
  return (ncclTeam_t){n, r, 1};
}
NCCL_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclTeamLsa, comm);
  return (ncclTeam_t){1, 0, 1};
}
NCCL_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm) {
  RETURN_IF_VENDOR_COMM(comm, ncclTeamRail, comm);
  return pncclTeamWorld(comm);
}
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank) {
  RETURN_IF_VENDOR_COMM(comm, ncclTeamRankToWorld, comm, team, rank);
  int me = 0;
  hetcclCommUserRank(comm, &me);
  return me + (rank - team.rank) * team.stride;
}
NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank) {
  RETURN_IF_VENDOR_COMM(comm, ncclTeamRankToLsa, comm, team, rank);
  return rank == team.rank ? 0 : -1;
}

/* ---- RCCL's C++ export ----
 *
 * ncclCommDump(ncclComm_t, std::unordered_map<std::string, std::string> &):
 * RCCL's nccl.h declares it (and defines NCCL_COMM_DUMP) for C++ callers,
 * and a ROCm PyTorch imports it (ProcessGroupNCCL's Flight Recorder, under
 * USE_ROCM && NCCL_COMM_DUMP); without it, such a torch does not load
 * with hetccl preloaded. The name is the libstdc++ C++11-ABI mangling of
 * that signature. C cannot fill a std::unordered_map: on a pass-through
 * comm the vendor's own ncclCommDump fills it from the vendor's comm; on
 * any other comm the dump stays empty. */
#define NCCL_COMM_DUMP_SYMBOL                                                                            \
  "_Z12ncclCommDumpP8ncclCommRSt13unordered_mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES7_" \
  "St4hashIS7_ESt8equal_toIS7_ESaISt4pairIKS7_S7_EEE"
__attribute__((visibility("default"))) ncclResult_t hc_nccl_comm_dump(ncclComm_t comm,
                                                                      void *map) __asm__(NCCL_COMM_DUMP_SYMBOL);
ncclResult_t hc_nccl_comm_dump(ncclComm_t comm, void *map) {
  typedef ncclResult_t (*dump_fn)(void *comm, void *map);
  void *real = hc_abi_vendor_fn_for_comm(comm, NCCL_COMM_DUMP_SYMBOL);
  if (real != NULL) return ((dump_fn)real)((void *)comm, map);
  void *vendor_comm;
  int kind, device;
  NC_TRY(hetcclCommGetVendorComm(comm, &vendor_comm));
  NC_TRY(hetcclCommDevice(comm, &kind, &device));
  void *f = vendor_comm ? hc_abi_vendor_symbol(kind, NCCL_COMM_DUMP_SYMBOL) : NULL;
  return f ? ((dump_fn)f)(vendor_comm, map) : hetcclSuccess;
}
