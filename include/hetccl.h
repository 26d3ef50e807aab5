/*
 * hetccl: collective communication for jobs that mix NVIDIA GPUs, AMD GPUs
 * and CPUs in one communicator.
 *
 * The API is NCCL's, renamed: every enum value equals its nccl.h twin, so the
 * NCCL ABI layer is a rename. This is the only public header; it uses no
 * vendor type (a stream is an opaque pointer: cudaStream_t or hipStream_t).
 *
 * Completion. A call on host buffers outside a group has completed when it
 * returns: the receive buffer holds the result and the send buffer may be
 * reused. Inside hetcclGroupStart/End the calls only record work; all of it
 * runs, concurrently, in hetcclGroupEnd, and has completed when GroupEnd
 * returns. The stream argument is ignored for host buffers (pass NULL).
 *
 * Errors. Every function returns a result code; on failure the text that
 * explains it is readable through hetcclGetLastError() on the same thread.
 * Failures of the peers (a dead rank, a timeout) surface as
 * hetcclRemoteError or hetcclSystemError and are also reported by
 * hetcclCommGetAsyncError() from any thread.
 */
#ifndef HETCCL_H_
#define HETCCL_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HETCCL_MAJOR 0
#define HETCCL_MINOR 1
#define HETCCL_PATCH 0
#define HETCCL_VERSION_CODE (HETCCL_MAJOR * 10000 + HETCCL_MINOR * 100 + HETCCL_PATCH)

typedef struct hetcclComm *hetcclComm_t;
#define HETCCL_COMM_NULL NULL

/* An opaque device stream (cudaStream_t, hipStream_t), or NULL. */
typedef void *hetcclStream_t;

#define HETCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[HETCCL_UNIQUE_ID_BYTES];
} hetcclUniqueId;

typedef enum {
  hetcclSuccess = 0,
  hetcclUnhandledCudaError = 1, /* any device runtime failure */
  hetcclSystemError = 2,
  hetcclInternalError = 3,
  hetcclInvalidArgument = 4,
  hetcclInvalidUsage = 5,
  hetcclRemoteError = 6,
  hetcclInProgress = 7,
  hetcclNumResults = 8
} hetcclResult_t;

typedef enum {
  hetcclSum = 0,
  hetcclProd = 1,
  hetcclMax = 2,
  hetcclMin = 3,
  hetcclAvg = 4,
  hetcclNumOps = 5, /* also the first value hetcclRedOpCreatePreMulSum returns */
  hetcclMaxRedOp = 0x7fffffff
} hetcclRedOp_t;

typedef enum {
  hetcclInt8 = 0,
  hetcclChar = 0,
  hetcclUint8 = 1,
  hetcclInt32 = 2,
  hetcclInt = 2,
  hetcclUint32 = 3,
  hetcclInt64 = 4,
  hetcclUint64 = 5,
  hetcclFloat16 = 6,
  hetcclHalf = 6,
  hetcclFloat32 = 7,
  hetcclFloat = 7,
  hetcclFloat64 = 8,
  hetcclDouble = 8,
  hetcclBfloat16 = 9,
  hetcclFloat8e4m3 = 10, /* OCP e4m3fn */
  hetcclFloat8e5m2 = 11, /* OCP e5m2 */
  hetcclNumTypes = 12
} hetcclDataType_t;

typedef enum {
  hetcclScalarDevice = 0,       /* read at each collective call (see below) */
  hetcclScalarHostImmediate = 1 /* read once, before the create call returns */
} hetcclScalarResidence_t;

/* Where a rank's buffers live. */
typedef enum { hetcclDeviceHost = 0, hetcclDeviceCuda = 1, hetcclDeviceHip = 2 } hetcclDeviceKind_t;

#define HETCCL_CONFIG_UNDEF_INT INT_MIN
#define HETCCL_CONFIG_UNDEF_PTR NULL
#define HETCCL_SPLIT_NOCOLOR (-1)
#define HETCCL_CONFIG_MAGIC 0xcafebeef

/*
 * Communicator options. The first fields have the layout of NCCL 2.28's
 * ncclConfig_t, so a config from the NCCL ABI is copied field by field up to
 * its `size`; hetccl's own fields follow. Start from HETCCL_CONFIG_INITIALIZER
 * and never touch size, magic or version. UNDEF means the default.
 */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; /* 1 (default): calls complete before returning; 0: "Nonblocking comms" below */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName; /* shown in the comm's log lines and errors */
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  /* hetccl */
  int deviceKind;        /* hetcclDeviceKind_t; default hetcclDeviceHost */
  int deviceId;          /* GPU ordinal for a GPU kind; default 0 */
  const char *groupName; /* overrides HETCCL_GROUP for this comm */
} hetcclConfig_t;

/*
 * Nonblocking comms (blocking = 0), as NCCL has them: CommInitRankConfig,
 * CommInitFromEnv, CommSplit and CommFinalize may return hetcclInProgress
 * and finish on a thread of hetccl's; the comm handle is valid at once. Poll
 * hetcclCommGetAsyncError until it stops reading hetcclInProgress: then it
 * reads success, or the error (its text through hetcclGetLastError(comm)).
 * Until then every other call on the comm fails with hetcclInvalidArgument;
 * hetcclCommDestroy and hetcclCommAbort may be called at any time, and stop
 * an init still running. A split's exchange over the parent comm runs in the
 * call; only the new comm's init is left running. Collectives complete as on
 * a blocking comm and never return hetcclInProgress.
 */
#define HETCCL_CONFIG_INITIALIZER                                                                           \
  {                                                                                                         \
    sizeof(hetcclConfig_t), HETCCL_CONFIG_MAGIC, HETCCL_VERSION_CODE, HETCCL_CONFIG_UNDEF_INT,              \
        HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_PTR, \
        HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_PTR, HETCCL_CONFIG_UNDEF_INT, \
        HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, \
        HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_INT, HETCCL_CONFIG_UNDEF_PTR  \
  }

/* Version, errors */
hetcclResult_t hetcclGetVersion(int *version);
const char *hetcclGetErrorString(hetcclResult_t result);
/* Text of this thread's latest failure (comm may be NULL). Never NULL. */
const char *hetcclGetLastError(hetcclComm_t comm);

/* Communicator lifecycle */

/* Makes a fresh id and starts, in this process, the rendezvous that
 * hetcclCommInitRank on every rank will join. Distribute the id yourself. */
hetcclResult_t hetcclGetUniqueId(hetcclUniqueId *uniqueId);
hetcclResult_t hetcclCommInitRank(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank);
hetcclResult_t hetcclCommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank,
                                        hetcclConfig_t *config);
/* Rank, size and rendezvous from the launcher's environment: torchrun
 * (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), Slurm
 * (SLURM_PROCID, SLURM_NTASKS, ...) or Open MPI (OMPI_COMM_WORLD_RANK, ...).
 * See docs/launch.md. */
hetcclResult_t hetcclCommInitFromEnv(hetcclComm_t *comm, hetcclConfig_t *config);
/* Collective over comm: ranks with one color form one new comm, ordered by
 * key then parent rank. HETCCL_SPLIT_NOCOLOR yields *newcomm = NULL.
 * config NULL inherits the parent's. */
hetcclResult_t hetcclCommSplit(hetcclComm_t comm, int color, int key, hetcclComm_t *newcomm, hetcclConfig_t *config);
/* Completes all issued work; collective. Afterwards only CommDestroy is
 * accepted (others: hetcclInvalidUsage). */
hetcclResult_t hetcclCommFinalize(hetcclComm_t comm);
hetcclResult_t hetcclCommDestroy(hetcclComm_t comm);
/* Safe from any thread: unblocks calls in flight on comm, which return
 * hetcclRemoteError, and frees comm once they have returned. */
hetcclResult_t hetcclCommAbort(hetcclComm_t comm);
hetcclResult_t hetcclCommCount(const hetcclComm_t comm, int *count);
hetcclResult_t hetcclCommUserRank(const hetcclComm_t comm, int *rank);
hetcclResult_t hetcclCommGetAsyncError(hetcclComm_t comm, hetcclResult_t *asyncError);
/* One process, ndev ranks of a new comm: rank i on device devlist[i] (i
 * when devlist is NULL) of the kind hetcclGetDevice reports. On failure no
 * comm is left made. */
hetcclResult_t hetcclCommInitAll(hetcclComm_t *comms, int ndev, const int *devlist);
/* The device this rank of comm runs on: a hetcclDeviceKind_t and ordinal. */
hetcclResult_t hetcclCommDevice(const hetcclComm_t comm, int *deviceKind, int *deviceId);
/* The vendor library's communicator (ncclComm_t of the real NCCL or RCCL)
 * that a comm of one homogeneous group passes every call to; NULL when
 * hetccl runs the comm's collectives itself. For interoperation only: work
 * issued on it is not ordered with hetccl's. */
hetcclResult_t hetcclCommGetVendorComm(const hetcclComm_t comm, void **vendorComm);
/* Registration is a hint, as in NCCL: hetccl moves any buffer without it.
 * The handle records what was registered, until hetcclCommDeregister. */
hetcclResult_t hetcclCommRegister(const hetcclComm_t comm, void *buff, size_t size, void **handle);
hetcclResult_t hetcclCommDeregister(const hetcclComm_t comm, void *handle);

/* Groups: nested Start/End pairs form one group. */
hetcclResult_t hetcclGroupStart(void);
hetcclResult_t hetcclGroupEnd(void);

/* Custom reduction: each rank's input is multiplied by *scalar, then summed.
 * hetcclScalarHostImmediate: *scalar (host memory) is read once, here.
 * hetcclScalarDevice: scalar (host or device memory) must stay valid while
 * op lives; each collective call that uses op reads it when the call is
 * made (a device value through a copy and a wait for it), not when the
 * stream reaches the collective as NCCL does: a value that work already
 * queued on the stream will change may be read before that change. */
hetcclResult_t hetcclRedOpCreatePreMulSum(hetcclRedOp_t *op, void *scalar, hetcclDataType_t datatype,
                                          hetcclScalarResidence_t residence, hetcclComm_t comm);
hetcclResult_t hetcclRedOpDestroy(hetcclRedOp_t op, hetcclComm_t comm);

/* Collectives. In-place forms are as NCCL defines them. */
hetcclResult_t hetcclAllReduce(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                               hetcclRedOp_t op, hetcclComm_t comm, hetcclStream_t stream);
hetcclResult_t hetcclBroadcast(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype, int root,
                               hetcclComm_t comm, hetcclStream_t stream);
/* recvbuff may be NULL off the root. */
hetcclResult_t hetcclReduce(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                            hetcclRedOp_t op, int root, hetcclComm_t comm, hetcclStream_t stream);
/* sendcount per rank; in place if sendbuff == recvbuff + rank*sendcount. */
hetcclResult_t hetcclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, hetcclDataType_t datatype,
                               hetcclComm_t comm, hetcclStream_t stream);
/* recvcount per rank; in place if recvbuff == sendbuff + rank*recvcount. */
hetcclResult_t hetcclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, hetcclDataType_t datatype,
                                   hetcclRedOp_t op, hetcclComm_t comm, hetcclStream_t stream);
/* count per peer. */
hetcclResult_t hetcclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                              hetcclComm_t comm, hetcclStream_t stream);
/* Counts and displacements in elements, one per peer (RCCL's ncclAllToAllv). */
hetcclResult_t hetcclAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[], void *recvbuff,
                               const size_t recvcounts[], const size_t rdispls[], hetcclDataType_t datatype,
                               hetcclComm_t comm, hetcclStream_t stream);
/* count per rank; recvbuff (count*nranks) only on the root. */
hetcclResult_t hetcclGather(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype, int root,
                            hetcclComm_t comm, hetcclStream_t stream);
/* count per rank; sendbuff (count*nranks) only on the root. */
hetcclResult_t hetcclScatter(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype, int root,
                             hetcclComm_t comm, hetcclStream_t stream);
hetcclResult_t hetcclSend(const void *sendbuff, size_t count, hetcclDataType_t datatype, int peer, hetcclComm_t comm,
                          hetcclStream_t stream);
hetcclResult_t hetcclRecv(void *recvbuff, size_t count, hetcclDataType_t datatype, int peer, hetcclComm_t comm,
                          hetcclStream_t stream);
hetcclResult_t hetcclBarrier(hetcclComm_t comm, hetcclStream_t stream);

/* Registered host memory: the counterpart of ncclMemAlloc. *ptr receives
 * size bytes of page-aligned host memory that peers on the same host read
 * directly (a single copy, no system call per message) when it is the send
 * buffer of a collective or hetcclSend. Any thread; no communicator needed.
 * Free it with hetcclMemFree only (never free()); hetcclMemFree(NULL) does
 * nothing. hetcclInvalidArgument for a NULL ptr, a size of 0 or a pointer
 * hetcclMemAlloc did not return; hetcclSystemError when the memory cannot be
 * had. Each buffer holds one file descriptor until it is freed. */
hetcclResult_t hetcclMemAlloc(void **ptr, size_t size);
/* Frees what hetcclMemAlloc or hetcclMemAllocDevice returned. */
hetcclResult_t hetcclMemFree(void *ptr);
/* size bytes of memory on device deviceId of kind deviceKind (a
 * hetcclDeviceKind_t; hetcclDeviceHost: as hetcclMemAlloc). Free it with
 * hetcclMemFree. hetcclInvalidArgument where no backend of that kind is
 * loaded. */
hetcclResult_t hetcclMemAllocDevice(void **ptr, size_t size, int deviceKind, int deviceId);

/* The device the calling thread chose: the first GPU kind (CUDA, then HIP)
 * with a device current on this thread (cudaSetDevice, hipSetDevice); else
 * the current device of the first GPU kind loaded; else the host (id 0). */
hetcclResult_t hetcclGetDevice(int *deviceKind, int *deviceId);

#ifdef __cplusplus
}
#endif
#endif /* HETCCL_H_ */
