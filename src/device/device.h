/*
 * device: one backend per device kind (host, cuda, hip) behind
 * an ops table: pointer kind, allocation, copies and reductions for every
 * datatype x op. Knows nothing of transports or plans.
 */
#ifndef HC_DEVICE_H_
#define HC_DEVICE_H_

#include "../util/util.h"

enum hc_mem_kind { HC_MEM_HOST = 0, HC_MEM_CUDA = 1, HC_MEM_HIP = 2, HC_MEM_KIND_COUNT };

/* Opaque device stream (cudaStream_t, hipStream_t). For host: its helper
 * pool (struct hc_host_pool, below) or NULL. */
typedef void *hc_stream_t;

/* dst[i] = src0[i] op src1[i] for i < count; dst may equal src0 or src1.
 * op is SUM, PROD, MAX or MIN (AVG and PREMULSUM are sums plus a scale). */
struct hc_reduce_args {
  void *dst;
  const void *src0, *src1;
  size_t count;
  enum hc_dtype dtype;
  enum hc_redop op;
  /* Optional, GPU backends: check trap_word first, as trap_if_set does;
   * *trap_checked says whether it was (a kernel ran, not the host). */
  const volatile uint64_t *trap_word;
  bool *trap_checked;
};

/* Scaling, for PREMULSUM (multiply by one element of dtype) and AVG
 * (divide by an element count). dst may equal src. */
enum hc_scale_kind { HC_SCALE_MUL, HC_SCALE_DIV };
struct hc_scale_args {
  void *dst;
  const void *src;
  size_t count;
  enum hc_dtype dtype;
  enum hc_scale_kind kind;
  uint8_t factor[8]; /* HC_SCALE_MUL: one element of dtype */
  uint64_t divisor;  /* HC_SCALE_DIV */
};

/* One stream flag operation of a batch (flag_batch). */
struct hc_flag_op {
  volatile uint64_t *flag;
  uint64_t value;
  bool wait; /* else write */
  /* A write that needs no memory barrier of its own: what came before it
   * may be seen after it, and it is seen by the time the next write that
   * has one is. A backend may order it all the same (CUDA's batches do:
   * the driver refuses CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER there). */
  bool relaxed;
};

/* Stream work run as one kernel (program): copies, counter writes and
 * waits (flag ops), reductions of one dtype and op, and checks of a trap
 * word (trap_if_set), in order. Where a plan's work is that and small, one
 * launch stands for its 4-6 driver calls and their gaps on the GPU
 * (exec/enqueue.c). hc_dev_program_args is the kernel's argument
 * (gpu_kernels.c: hc_program), 8-byte fields only; the numbers are its
 * HC_PROGRAM_*. */
#define HC_DEV_PROGRAM_OPS 12
#define HC_DEV_PROGRAM_COPY 0          /* n bytes, src0 -> dst */
#define HC_DEV_PROGRAM_WRITE 1         /* *dst = n, once what came before is visible */
#define HC_DEV_PROGRAM_WAIT 2          /* until *src0 >= n (cuStreamWaitValue64's GEQ) */
#define HC_DEV_PROGRAM_REDUCE 3        /* dst = src0 op src1, n elements */
#define HC_DEV_PROGRAM_TRAP_CHECK 4    /* trap if *trap has HC_DEV_TRAP_ARMED */
#define HC_DEV_PROGRAM_WRITE_RELAXED 5 /* *dst = n, seen by the time the next WRITE is (hc_flag_op.relaxed) */
#define HC_DEV_PROGRAM_LL_PUT 6        /* n bytes, src0 -> dst in LL form with flag (below) */
#define HC_DEV_PROGRAM_LL_GET 7        /* n bytes, src0 in LL form -> dst, once each word carries flag */
struct hc_dev_program_op {
  uint64_t kind, n;
  void *dst;
  const void *src0, *src1;
  uint64_t flag; /* LL_PUT, LL_GET */
};
/* The LL form of n bytes (NCCL's LL protocol): ceil(n / 4) 8-byte words,
 * each 4 bytes of data in its low half (little-endian, the last one padded
 * with zeros) and the flag in its high half, stored as one 8-byte write.
 * A reader that sees the flag has the word's data with it: no counter to
 * wait on first, no fence on the writer's side, one read of host memory
 * for both (plan/stage.c uses it for small window pieces). */
#define HC_LL_WORD_DATA 4
static inline size_t hc_ll_words(size_t n) { return (n + HC_LL_WORD_DATA - 1) / HC_LL_WORD_DATA; }
/* The trap word (trap_if_set, hc_dev_program_args.trap): ARMED makes a
 * check trap; RELEASED alone ends an LL_GET that would wait forever, with
 * its data undefined, as a released counter ends a WAIT (exec/enqueue.c). */
#define HC_DEV_TRAP_ARMED 1u
#define HC_DEV_TRAP_RELEASED 2u
struct hc_dev_program_args {
  uint64_t nops;
  const volatile uint64_t *trap; /* mapped host memory; read by WAIT, LL_GET and TRAP_CHECK */
  struct hc_dev_program_op op[HC_DEV_PROGRAM_OPS];
};
struct hc_dev_program {
  struct hc_dev_program_args args;
  /* Which kernel: what its reductions are. */
  enum hc_dtype dtype;
  enum hc_redop redop;
};

/* Opaque device event (CUevent, hipEvent_t). */
typedef void *hc_event_t;

/* What a pointer is, from the pointer itself. */
struct hc_ptr_info {
  enum hc_mem_kind kind; /* HC_MEM_HOST for pageable or pinned host memory */
  int device;            /* GPU ordinal when kind is a GPU */
  bool host_pinned;      /* host memory registered with or allocated by this backend */
};

/* What the bytes of an fp8 buffer mean on a device: the OCP encodings
 * (e4m3fn: NaN 0x7f/0xff, max 448; e5m2 with infinities), which NVIDIA
 * GPUs and hetccl's kernels use, or the fnuz ones of AMD's gfx94x (MI300:
 * one NaN 0x80, no negative zero, exponent bias one higher), which RCCL
 * uses there. The same byte means different numbers in the two. */
enum hc_fp8_layout { HC_FP8_OCP = 0, HC_FP8_FNUZ = 1 };

/* Capabilities a backend found when it loaded. */
struct hc_dev_caps {
  int device_count;
  bool stream_mem_ops;  /* flag_wait/flag_write run on the GPU (else host functions) */
  bool runtime_compile; /* reductions compiled at run time (else host fallback) */
  /* Its reductions read mapped host memory (host_alloc, host_register) at
   * its host address: a kernel's, or the host fallback's. */
  bool reduce_reads_host;
  /* Every device's contexts are clients of an MPS server (CUDA): processes
   * that share a GPU then run on it at once, as threads of one process do,
   * instead of taking turns in time slices. */
  bool mps;
};

#define HC_DEV_ABI 2 /* 2: every op takes ctx first */
struct hc_dev_ops {
  uint32_t size, abi; /* sizeof and HC_DEV_ABI the backend was built with */
  const char *name;   /* "host", "cuda", "hip" */
  enum hc_mem_kind kind;
  /* The backend's own state: the first argument of every op. Callers go
   * through the hc_dev_<op> wrappers below, which pass it. */
  void *ctx;
  /* dlopen and probe; an error turns only this backend off. */
  hc_result_t (*load)(void *ctx, struct hc_dev_caps *caps);
  hc_result_t (*mem_alloc)(void *ctx, int device, size_t n, void **p);
  hc_result_t (*mem_free)(void *ctx, int device, void *p);
  /* Ordered on s; completes before return for the host backend. A GPU
   * backend copies in any direction (unified addressing). */
  hc_result_t (*copy)(void *ctx, void *dst, const void *src, size_t n, hc_stream_t s);
  hc_result_t (*reduce)(void *ctx, const struct hc_reduce_args *a, hc_stream_t s);
  hc_result_t (*scale)(void *ctx, const struct hc_scale_args *a, hc_stream_t s);
  /* ---- GPU backends only (NULL for host; test with HC_HAS_OP) ---- */
  /* The kind and device of p; HC_MEM_HOST for anything this backend does
   * not own. Never fails for a host pointer. */
  hc_result_t (*ptr_query)(void *ctx, const void *p, struct hc_ptr_info *out);
  /* Makes device current on the calling thread (the primary context). */
  hc_result_t (*set_device)(void *ctx, int device);
  /* Page-locked host memory, mapped for the device (cuMemHostAlloc with
   * PORTABLE|DEVICEMAP); and registering existing host memory (a shared
   * memory segment) the same way. */
  hc_result_t (*host_alloc)(void *ctx, size_t n, void **p);
  hc_result_t (*host_free)(void *ctx, void *p);
  hc_result_t (*host_register)(void *ctx, void *p, size_t n);
  hc_result_t (*host_unregister)(void *ctx, void *p);
  /* Internal streams, non-blocking with respect to the legacy stream. */
  hc_result_t (*stream_create)(void *ctx, int device, hc_stream_t *s);
  hc_result_t (*stream_destroy)(void *ctx, hc_stream_t s);
  hc_result_t (*event_create)(void *ctx, hc_event_t *e); /* timing disabled */
  hc_result_t (*event_destroy)(void *ctx, hc_event_t e);
  hc_result_t (*event_record)(void *ctx, hc_event_t e, hc_stream_t s);
  /* *done = 1 once everything before the record has run. */
  hc_result_t (*event_query)(void *ctx, hc_event_t e, int *done);
  hc_result_t (*stream_wait_event)(void *ctx, hc_stream_t s, hc_event_t e);
  /* The stream stops until *flag >= value (64-bit counters that start at 0
   * never wrap). flag is mapped host memory: host_alloc or host_register. */
  hc_result_t (*flag_wait)(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t value);
  /* The stream writes value to *flag once the work before it is done. */
  hc_result_t (*flag_write)(void *ctx, hc_stream_t s, volatile uint64_t *flag, uint64_t value);
  hc_result_t (*stream_sync)(void *ctx, hc_stream_t s); /* blocking; tests and teardown only */
  /* Whether the caller's stream is capturing a graph. */
  hc_result_t (*stream_capturing)(void *ctx, hc_stream_t s, bool *capturing);
  /* The device current on the calling thread (cudaGetDevice's answer). */
  hc_result_t (*current_device)(void *ctx, int *device);
  /* ops[0..n) in order on s, as flag_wait / flag_write would, in one
   * driver call where the driver has one (cuStreamBatchMemOp). */
  hc_result_t (*flag_batch)(void *ctx, hc_stream_t s, const struct hc_flag_op *ops, int n);
  /* The fp8 encodings of device (its architecture decides). */
  hc_result_t (*fp8_layout)(void *ctx, int device, enum hc_fp8_layout *out);
  /* Whether the calling thread has a device of this backend current: CUDA,
   * a current context (what cudaSetDevice / torch.cuda.set_device make);
   * HIP, always (its runtime gives every thread a current device). */
  hc_result_t (*thread_bound)(void *ctx, bool *bound);
  /* The device memory holding [p, p + n) as a dma-buf file descriptor (the
   * caller closes it) and the offset of p in it, for an RDMA device to
   * register (net/ib). Optional: NULL where the driver cannot export. */
  hc_result_t (*dmabuf_export)(void *ctx, const void *p, size_t n, int *fd, uint64_t *offset);
  /* The device's PCI bus id as its driver spells it ("0000:3B:00.0"), for
   * net/topo's choice of the nearest NIC. Optional: NULL, or HC_ERR_DEVICE
   * where the driver cannot say. */
  hc_result_t (*pci_bus_id)(void *ctx, int device, char *out, size_t len);
  /* Whether an RDMA adapter's writes into device memory can still be on
   * their way when their completion reaches the CPU, so that net/ib must
   * flush a receive into it before the device reads it ("flush" in
   * net/ib_priv.h); why, in words for an INFO line ("compute capability
   * 8.0, before 9.0"). A fact of the architecture. Optional (NULL: assume
   * it must). */
  hc_result_t (*rdma_flush_needed)(void *ctx, int device, bool *needed, char *why, size_t len);
  /* Once the work before it is done, the stream traps (a sticky error: the
   * process's later driver calls fail, its streams never complete) if
   * *word, mapped host memory, has HC_DEV_TRAP_ARMED by then. *launched = false, and
   * nothing is enqueued, where the stream's device has no kernels (no
   * runtime compiler). */
  hc_result_t (*trap_if_set)(void *ctx, hc_stream_t s, const volatile uint64_t *word, bool *launched);
  /* Runs p on s: one kernel of one block, where the stream's device has
   * kernels that read mapped host memory at its host address; else each
   * op as its own stream operation (copy, flag batch, reduce,
   * trap_if_set), with the same effect but for the kernel's wait, which
   * also ends in a trap once *trap is set. The kernel spins on the GPU
   * while it waits: the caller uses it where nothing else must run on the
   * GPU for the wait to end (enqueue.c). */
  hc_result_t (*program)(void *ctx, const struct hc_dev_program *p, hc_stream_t s);
  /* Builds device's kernels in its primary context now, as its first
   * reduction or program would, so that init learns whether its programs
   * will run as kernels (*kernels) before a peer relies on it (api/comm.c:
   * the LL form). A failed build is *kernels = false, not an error. */
  hc_result_t (*build_kernels)(void *ctx, int device, bool *kernels);
}; /* append only */

/* HC_ERR_DEVICE, with a message naming the backend and op: d lacks op (a
 * GPU op of the host backend, or an optional op its driver cannot do). */
hc_result_t hc_dev_missing_op(const struct hc_dev_ops *d, const char *op);
#define HC_DEV_CALL(d, op, ...) \
  (HC_HAS_OP((d), struct hc_dev_ops, op) ? (d)->op((d)->ctx, __VA_ARGS__) : hc_dev_missing_op((d), #op))

/* One wrapper per op, the only way to call one: each passes the backend's
 * ctx and fails with a message where the backend lacks the op. The
 * contracts are those of the ops above. (ptr_query asks one backend;
 * hc_dev_ptr_query below asks them all.) */
static inline hc_result_t hc_dev_load(const struct hc_dev_ops *d, struct hc_dev_caps *caps) {
  return HC_DEV_CALL(d, load, caps);
}
static inline hc_result_t hc_dev_mem_alloc(const struct hc_dev_ops *d, int device, size_t n, void **p) {
  return HC_DEV_CALL(d, mem_alloc, device, n, p);
}
static inline hc_result_t hc_dev_mem_free(const struct hc_dev_ops *d, int device, void *p) {
  return HC_DEV_CALL(d, mem_free, device, p);
}
static inline hc_result_t hc_dev_copy(const struct hc_dev_ops *d, void *dst, const void *src, size_t n, hc_stream_t s) {
  return HC_DEV_CALL(d, copy, dst, src, n, s);
}
static inline hc_result_t hc_dev_reduce(const struct hc_dev_ops *d, const struct hc_reduce_args *a, hc_stream_t s) {
  return HC_DEV_CALL(d, reduce, a, s);
}
static inline hc_result_t hc_dev_scale(const struct hc_dev_ops *d, const struct hc_scale_args *a, hc_stream_t s) {
  return HC_DEV_CALL(d, scale, a, s);
}
static inline hc_result_t hc_dev_ptr_query_on(const struct hc_dev_ops *d, const void *p, struct hc_ptr_info *out) {
  return HC_DEV_CALL(d, ptr_query, p, out);
}
static inline hc_result_t hc_dev_set_device(const struct hc_dev_ops *d, int device) {
  return HC_DEV_CALL(d, set_device, device);
}
static inline hc_result_t hc_dev_host_alloc(const struct hc_dev_ops *d, size_t n, void **p) {
  return HC_DEV_CALL(d, host_alloc, n, p);
}
static inline hc_result_t hc_dev_host_free(const struct hc_dev_ops *d, void *p) { return HC_DEV_CALL(d, host_free, p); }
static inline hc_result_t hc_dev_host_register(const struct hc_dev_ops *d, void *p, size_t n) {
  return HC_DEV_CALL(d, host_register, p, n);
}
static inline hc_result_t hc_dev_host_unregister(const struct hc_dev_ops *d, void *p) {
  return HC_DEV_CALL(d, host_unregister, p);
}
static inline hc_result_t hc_dev_stream_create(const struct hc_dev_ops *d, int device, hc_stream_t *s) {
  return HC_DEV_CALL(d, stream_create, device, s);
}
static inline hc_result_t hc_dev_stream_destroy(const struct hc_dev_ops *d, hc_stream_t s) {
  return HC_DEV_CALL(d, stream_destroy, s);
}
static inline hc_result_t hc_dev_event_create(const struct hc_dev_ops *d, hc_event_t *e) {
  return HC_DEV_CALL(d, event_create, e);
}
static inline hc_result_t hc_dev_event_destroy(const struct hc_dev_ops *d, hc_event_t e) {
  return HC_DEV_CALL(d, event_destroy, e);
}
static inline hc_result_t hc_dev_event_record(const struct hc_dev_ops *d, hc_event_t e, hc_stream_t s) {
  return HC_DEV_CALL(d, event_record, e, s);
}
static inline hc_result_t hc_dev_event_query(const struct hc_dev_ops *d, hc_event_t e, int *done) {
  return HC_DEV_CALL(d, event_query, e, done);
}
static inline hc_result_t hc_dev_stream_wait_event(const struct hc_dev_ops *d, hc_stream_t s, hc_event_t e) {
  return HC_DEV_CALL(d, stream_wait_event, s, e);
}
static inline hc_result_t hc_dev_flag_wait(const struct hc_dev_ops *d, hc_stream_t s, volatile uint64_t *flag,
                                           uint64_t value) {
  return HC_DEV_CALL(d, flag_wait, s, flag, value);
}
static inline hc_result_t hc_dev_flag_write(const struct hc_dev_ops *d, hc_stream_t s, volatile uint64_t *flag,
                                            uint64_t value) {
  return HC_DEV_CALL(d, flag_write, s, flag, value);
}
static inline hc_result_t hc_dev_stream_sync(const struct hc_dev_ops *d, hc_stream_t s) {
  return HC_DEV_CALL(d, stream_sync, s);
}
static inline hc_result_t hc_dev_stream_capturing(const struct hc_dev_ops *d, hc_stream_t s, bool *capturing) {
  return HC_DEV_CALL(d, stream_capturing, s, capturing);
}
static inline hc_result_t hc_dev_current_device(const struct hc_dev_ops *d, int *device) {
  return HC_DEV_CALL(d, current_device, device);
}
static inline hc_result_t hc_dev_flag_batch(const struct hc_dev_ops *d, hc_stream_t s, const struct hc_flag_op *ops,
                                            int n) {
  return HC_DEV_CALL(d, flag_batch, s, ops, n);
}
static inline hc_result_t hc_dev_fp8_layout(const struct hc_dev_ops *d, int device, enum hc_fp8_layout *out) {
  return HC_DEV_CALL(d, fp8_layout, device, out);
}
static inline hc_result_t hc_dev_thread_bound(const struct hc_dev_ops *d, bool *bound) {
  return HC_DEV_CALL(d, thread_bound, bound);
}
static inline hc_result_t hc_dev_dmabuf_export(const struct hc_dev_ops *d, const void *p, size_t n, int *fd,
                                               uint64_t *offset) {
  return HC_DEV_CALL(d, dmabuf_export, p, n, fd, offset);
}
static inline hc_result_t hc_dev_pci_bus_id(const struct hc_dev_ops *d, int device, char *out, size_t len) {
  return HC_DEV_CALL(d, pci_bus_id, device, out, len);
}
static inline hc_result_t hc_dev_rdma_flush_needed(const struct hc_dev_ops *d, int device, bool *needed, char *why,
                                                   size_t len) {
  return HC_DEV_CALL(d, rdma_flush_needed, device, needed, why, len);
}

static inline hc_result_t hc_dev_trap_if_set(const struct hc_dev_ops *d, hc_stream_t s, const volatile uint64_t *word,
                                             bool *launched) {
  return HC_DEV_CALL(d, trap_if_set, s, word, launched);
}

static inline hc_result_t hc_dev_program(const struct hc_dev_ops *d, const struct hc_dev_program *p, hc_stream_t s) {
  return HC_DEV_CALL(d, program, p, s);
}
static inline hc_result_t hc_dev_build_kernels(const struct hc_dev_ops *d, int device, bool *kernels) {
  return HC_DEV_CALL(d, build_kernels, device, kernels);
}

extern const struct hc_dev_ops hc_dev_host;

/* Helper threads for the host backend's large copies, reductions and
 * scalings (host_pool.c); given to it as its stream. */
struct hc_host_pool;
/* Runs part(job, begin, end) over [0, n) in units of unit bytes. */
typedef void (*hc_host_part_fn)(const void *job, size_t begin, size_t end);
/* *pool: NULL when helpers <= 0 (the backend then works alone). Threads
 * start with the first job that is split. */
hc_result_t hc_host_pool_create(int helpers, size_t split_bytes, struct hc_host_pool **pool);
void hc_host_pool_destroy(struct hc_host_pool *pool);
/* Runs fn over [0, n) split among the helpers and the calling thread, when
 * n units are at least the pool's split_bytes and no other job runs;
 * returns false, having run nothing, otherwise. */
bool hc_host_pool_run(struct hc_host_pool *pool, hc_host_part_fn fn, const void *job, size_t n, size_t unit);
/* HETCCL_HOST_HELPERS' default: the CPUs this process may run on, shared
 * among the comm's local_ranks ranks of this host, less the rank's own;
 * at most 7 where a rank of this host is a GPU (gpu_peer), else at most 3
 * (host_pool.c says why). */
int hc_host_pool_auto_helpers(int local_ranks, bool gpu_peer);

/* The backend for a memory kind, or NULL when it is not loaded (the first
 * call loads it; a backend that fails to load says why at INFO, once). */
const struct hc_dev_ops *hc_dev_get(enum hc_mem_kind kind);
/* The caps found when kind's backend loaded; zeros when it is not loaded. */
struct hc_dev_caps hc_dev_caps(enum hc_mem_kind kind);
/* Why kind's backend did not load (its library, symbol or device is
 * missing: the text of its INFO line); NULL when it is loaded. */
const char *hc_dev_absent_reason(enum hc_mem_kind kind);
/* What p is, asking every loaded GPU backend; host when none claims it. */
hc_result_t hc_dev_ptr_query(const void *p, struct hc_ptr_info *out);
/* Room for a PCI bus id as drivers spell it ("0000:1B:00.0", or with an
 * 8-digit domain), with its terminator. */
#define HC_PCI_BUS_ID_BYTES 32
/* The PCI bus id of GPU device of kind into out, as its driver spells it;
 * false, out empty, for the host or where the driver cannot say (why then
 * holds the reason, and this thread's last error is left as it was). */
bool hc_dev_gpu_bus_id(enum hc_mem_kind kind, int device, char *out, size_t len, char *why, size_t why_len);

extern const struct hc_dev_ops hc_dev_cuda;
extern const struct hc_dev_ops hc_dev_hip;

/* Host kernels, exposed for tests and tools. Low-precision types (fp16,
 * bf16, fp8) are widened to float per element and rounded back to nearest
 * even. fp8 conversions saturate to the largest finite value (as NCCL's
 * __nv_cvt_float_to_fp8 with __NV_SATFINITE); NaN stays NaN. */
void hc_host_reduce(const struct hc_reduce_args *a);
void hc_host_scale(const struct hc_scale_args *a);
float hc_half_to_float(uint16_t h);
uint16_t hc_float_to_half(float f);
float hc_bf16_to_float(uint16_t b);
uint16_t hc_float_to_bf16(float f);
float hc_fp8e4m3_to_float(uint8_t v);
uint8_t hc_float_to_fp8e4m3(float f);
float hc_fp8e5m2_to_float(uint8_t v);
uint8_t hc_float_to_fp8e5m2(float f);
/* One element of dtype at p, as double (tests, scalars). */
double hc_dtype_load(enum hc_dtype t, const void *p);
/* Stores v into one element of dtype at p, rounding and saturating. */
void hc_dtype_store(enum hc_dtype t, void *p, double v);

#endif
