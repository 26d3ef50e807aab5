/*
 * vendor/: the vendor's own collective library (NCCL for CUDA, RCCL for
 * HIP) opened at run time, privately, so that a homogeneous group runs at
 * native speed. One adapter for both: RCCL exports NCCL's functions.
 *
 * Loading: HETCCL_NCCL_LIBRARY (or HETCCL_RCCL_LIBRARY), then the library
 * next to an already loaded PyTorch (torch/lib/../../nvidia/nccl/lib for
 * CUDA wheels, torch/lib for ROCm wheels), then the system's. hetccl itself
 * (which answers to libnccl.so.2 under LD_PRELOAD) is never taken. The
 * library is opened with RTLD_LOCAL | RTLD_DEEPBIND: its names stay out of
 * the global scope and its own calls to its nccl* names bind inside it.
 * Not so where the program had loaded it globally first (PyTorch's wheel
 * does; dlopen then returns that copy, whose bindings are made) or where
 * RTLD_DEEPBIND is off (sanitizer builds): those calls reach hetccl's
 * exports, which hand them back (abi/nccl.c; docs/nccl-abi.md).
 */
#ifndef HC_VENDOR_H_
#define HC_VENDOR_H_

#include "../device/device.h"

/* ncclUniqueId: passed by value, as nccl.h does. */
typedef struct {
  char internal[128];
} hc_vendor_id;

/* ncclConfig_t as NCCL 2.14 (the first with a config) laid it out: the
 * library reads the first `size` bytes and, for an older `version`, keeps
 * its defaults for the fields added since, so one layout serves every
 * later NCCL and RCCL. Only blocking = 0 is asked for (api/init_watch.h). */
struct hc_vendor_config {
  size_t size;
  unsigned int magic;   /* HC_VENDOR_CONFIG_MAGIC */
  unsigned int version; /* HC_VENDOR_CONFIG_VERSION */
  int blocking;
};
#define HC_VENDOR_CONFIG_MAGIC 0xcafebeefu
#define HC_VENDOR_CONFIG_VERSION 21400u /* NCCL_VERSION(2, 14, 0) */
/* ncclInProgress: a nonblocking comm's operation goes on in the library. */
#define HC_VENDOR_IN_PROGRESS 7

/* The vendor's functions, with nccl.h's signatures in hetccl's types
 * (values and layouts are the same). */
struct hc_vendor {
  const char *name; /* "nccl", "rccl" */
  char path[512];
  void *handle; /* from dlopen */
  /* Its own calls to its nccl* names reach hetccl's exports: the program
   * had loaded it globally before hetccl did, or no RTLD_DEEPBIND. */
  bool binds_globally;
  int version;
  int (*get_version)(int *version);
  int (*get_unique_id)(hc_vendor_id *id);
  int (*comm_init_rank)(void **comm, int nranks, hc_vendor_id id, int rank);
  int (*comm_destroy)(void *comm);
  int (*comm_abort)(void *comm);
  int (*comm_get_async_error)(void *comm, int *err);
  const char *(*get_error_string)(int result);
  const char *(*get_last_error)(void *comm);
  int (*all_reduce)(const void *s, void *r, size_t count, int dtype, int op, void *comm, void *stream);
  int (*broadcast)(const void *s, void *r, size_t count, int dtype, int root, void *comm, void *stream);
  int (*reduce)(const void *s, void *r, size_t count, int dtype, int op, int root, void *comm, void *stream);
  int (*all_gather)(const void *s, void *r, size_t count, int dtype, void *comm, void *stream);
  int (*reduce_scatter)(const void *s, void *r, size_t count, int dtype, int op, void *comm, void *stream);
  int (*send)(const void *s, size_t count, int dtype, int peer, void *comm, void *stream);
  int (*recv)(void *r, size_t count, int dtype, int peer, void *comm, void *stream);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*red_op_create_pre_mul_sum)(int *op, void *scalar, int dtype, int residence, void *comm);
  int (*red_op_destroy)(int op, void *comm);
  /* Optional: NULL where the library lacks them. All-to-all is RCCL's
   * ncclAllToAll (every RCCL) or ncclAlltoAll (NCCL 2.28, newest RCCL);
   * all-to-all-v is RCCL's only (ncclAllToAllv, newest ncclAlltoAllv).
   * Counts and displacements in elements. Neither takes sendbuff ==
   * recvbuff (RCCL's header says in place is not supported). */
  int (*all_to_all)(const void *s, void *r, size_t count, int dtype, void *comm, void *stream);
  int (*all_to_allv)(const void *s, const size_t *scounts, const size_t *sdispls, void *r, const size_t *rcounts,
                     const size_t *rdispls, int dtype, void *comm, void *stream);
  /* ncclCommInitRankConfig (NCCL 2.14 on): hetccl creates sub-comms
   * nonblocking through it, so that their init can be watched and
   * aborted. NULL where the library lacks it (then the blocking init). */
  int (*comm_init_rank_config)(void **comm, int nranks, hc_vendor_id id, int rank, struct hc_vendor_config *config);
  /* What this library's version means to hetccl (vendor.c's table). */
  bool has_fp8; /* ncclFloat8e4m3 / e5m2 (10, 11) are in its ncclDataType_t */
};

/* One call of the API as the vendor runs it. Counts are in elements, as
 * the NCCL API takes them; dtype and op are nccl.h's values (hetccl's
 * own: hc_dtype, hc_redop). root is the root, or the peer of SEND / RECV. */
struct hc_vendor_call {
  enum hc_coll coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  int dtype, op, root;
  /* ALLTOALLV: one count and displacement per rank. */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
  /* Non-NULL: op is a PreMulSum by this host value (one element of dtype),
   * made on comm for the call and destroyed after it. */
  const void *premul_factor;
};

/* One send or receive of a VENDOR step of coll SEND, in bytes; peer is an
 * index among the group's members. */
struct hc_vendor_p2p {
  void *buf; /* send: read; receive: written */
  size_t bytes;
  int32_t peer;
  bool send;
};

/* hetccl's result for a code the vendor returned: 0 to 7 mean the same in
 * every NCCL and RCCL; ncclTimeout (8 in NCCL 2.30 and the newest RCCL,
 * where NCCL 2.28 callers read 8 as ncclNumResults) and anything newer
 * become HC_ERR_REMOTE, hetccl's own result for a wait that timed out. */
hc_result_t hc_vendor_result(int vendor_result);

/* ncclCommGetAsyncError(comm): *err, ncclInProgress while a nonblocking
 * comm's init or call goes on. Every caller in hetccl goes through this
 * one lock: on a nonblocking comm NCCL completes (joins) the library's
 * own job thread inside this call, which two threads must not do at once
 * (the engine's poll, the caller's wait, hetcclCommGetAsyncError from
 * PyTorch's watchdog). Returns the call's own result. */
int hc_vendor_async_error(const struct hc_vendor *v, void *comm, int *err);

/* The vendor library for a GPU kind, loaded once per process; NULL (and an
 * INFO line) when none is found. */
const struct hc_vendor *hc_vendor_get(enum hc_mem_kind kind);
/* HC_OK for the vendor's result 0; otherwise hc_vendor_result of it, with
 * a message naming what failed, the vendor's error string and code, and its
 * last-error text for comm. ncclInProgress from a call on comm (its
 * sub-comms are nonblocking, see comm_init_rank_config) means the call goes
 * on inside the library: this waits, as a blocking comm's call would have,
 * until comm's async error leaves ncclInProgress (bounded by
 * HETCCL_TIMEOUT), and checks that instead. */
hc_result_t hc_vendor_check(const struct hc_vendor *v, void *comm, int result, const char *what);
/* The one collective -> vendor function dispatch. Enqueues c on stream s of
 * comm; me and nranks (this rank in comm, and comm's size) matter only to
 * the calls that may run as sends and receives. All-to-all and all-to-all-v run as the
 * library's own functions where it has them and the buffers are distinct;
 * they, gather and scatter otherwise run as sends and receives, in a
 * vendor group of their own. */
hc_result_t hc_vendor_run(const struct hc_vendor *v, void *comm, int me, int nranks, const struct hc_vendor_call *c,
                          hc_stream_t s);
/* ops[0..n) as one vendor group on s. */
hc_result_t hc_vendor_run_p2p(const struct hc_vendor *v, void *comm, const struct hc_vendor_p2p *ops, size_t n,
                              hc_stream_t s);
/* A vendor group around calls made between the two: the end closes the
 * group even when calls_result (what the calls inside returned) is an
 * error, so that the vendor's group depth on this thread stays balanced,
 * and returns calls_result, else the close's result. */
hc_result_t hc_vendor_group_start(const struct hc_vendor *v, void *comm);
hc_result_t hc_vendor_group_end(const struct hc_vendor *v, void *comm, hc_result_t calls_result);
/* Any entry point of a loaded vendor library: p<name> where it has one,
 * else <name>; NULL when absent. */
void *hc_vendor_symbol(const struct hc_vendor *v, const char *name);

#endif
