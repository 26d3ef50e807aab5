/*
 * util: results and the last-error text, logging, HETCCL_* parameters,
 * clocks, datatypes and reduction ops, dlopen and socket helpers.
 * Knows nothing of the layers above.
 */
#ifndef HC_UTIL_H_
#define HC_UTIL_H_

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Values equal ncclResult_t, so abi/ casts and never translates. */
typedef enum {
  HC_OK = 0,
  HC_ERR_DEVICE = 1,
  HC_ERR_SYSTEM = 2,
  HC_ERR_INTERNAL = 3,
  HC_ERR_ARG = 4,
  HC_ERR_USAGE = 5,
  HC_ERR_REMOTE = 6,
  HC_IN_PROGRESS = 7
} hc_result_t;

/* Sets this thread's last-error text, logs it at WARN, returns r. */
hc_result_t hc_fail_at(hc_result_t r, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define HC_FAIL(r, ...) hc_fail_at((r), __FILE__, __LINE__, __VA_ARGS__)
/* The same over a va_list (abi/'s own failures). */
hc_result_t hc_vfail_at(hc_result_t r, const char *file, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
/* This thread's last-error text ("" when none). */
const char *hc_last_error(void);
/* Sets the last-error text without logging (to copy an async error). */
void hc_set_last_error(const char *text);
/* The rank this thread's last failure blames: the one that died, stopped
 * or failed first, as far as this rank can tell (-1: none). Transports
 * set it with their failures; a failing comm names it to its peers. */
void hc_blame(int rank);
int hc_blamed(void);
const char *hc_result_str(hc_result_t r);

/* Callers of a failing call only leave a TRACE line: the first place that saw
 * the failure wrote the message. */
#define HC_UNWIND(r) HC_TRACE(HC_UTIL, "-> %s", hc_result_str(r))
#define HC_TRY(call)         \
  do {                       \
    hc_result_t r_ = (call); \
    if (r_ != HC_OK) {       \
      HC_UNWIND(r_);         \
      return r_;             \
    }                        \
  } while (0)
#define HC_TRY_GOTO(call, res, out) \
  do {                              \
    (res) = (call);                 \
    if ((res) != HC_OK) {           \
      HC_UNWIND(res);               \
      goto out;                     \
    }                               \
  } while (0)
/* Retries EINTR, never EAGAIN. */
#define HC_SYS(call, what)                                                        \
  do {                                                                            \
    int s_;                                                                       \
    do s_ = (call);                                                               \
    while (s_ == -1 && errno == EINTR);                                           \
    if (s_ == -1) return HC_FAIL(HC_ERR_SYSTEM, "%s: %s", what, strerror(errno)); \
  } while (0)

/* ---- logging ---- */
enum hc_log_level { HC_LOG_NONE = 0, HC_LOG_WARN = 1, HC_LOG_INFO = 2, HC_LOG_TRACE = 3 };
/* Subsystems, one per layer. */
enum hc_sys {
  HC_UTIL = 1,
  HC_BOOT = 2,
  HC_DEV = 4,
  HC_NET = 8,
  HC_VENDOR = 16,
  HC_PLAN = 32,
  HC_EXEC = 64,
  HC_API = 128,
  HC_ENV = 256,
  HC_ALL = 511
};
extern atomic_int hc_log_level;
extern atomic_int hc_log_mask;
/* Reads HETCCL_DEBUG / HETCCL_DEBUG_SUBSYS once; safe to call often. */
void hc_log_init(void);
/* Reads the logging variables again (ncclResetDebugInit). */
void hc_log_reload(void);
/* Rank shown in log lines of this thread (-1: none). */
void hc_log_set_rank(int rank);
/* The same, and the name of the comm the thread works for ("" or NULL:
 * none; copied): "[3 name]" opens its lines (config commName). */
void hc_log_set_comm(int rank, const char *name);
void hc_log_emit(int level, int sys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define HC_LOG(lvl, sys, ...)                                                 \
  do {                                                                        \
    if ((lvl) <= atomic_load_explicit(&hc_log_level, memory_order_relaxed) && \
        ((sys)&atomic_load_explicit(&hc_log_mask, memory_order_relaxed)))     \
      hc_log_emit((lvl), (sys), __FILE__, __LINE__, __VA_ARGS__);             \
  } while (0)
#define HC_WARN(sys, ...) HC_LOG(HC_LOG_WARN, sys, __VA_ARGS__)
#define HC_INFO(sys, ...) HC_LOG(HC_LOG_INFO, sys, __VA_ARGS__)
#define HC_TRACE(sys, ...) HC_LOG(HC_LOG_TRACE, sys, __VA_ARGS__)
#define HC_WARN_ONCE(sys, ...)                                        \
  do {                                                                \
    static atomic_flag once_ = ATOMIC_FLAG_INIT;                      \
    if (!atomic_flag_test_and_set(&once_)) HC_WARN(sys, __VA_ARGS__); \
  } while (0)

/* ---- parameters: src/util/params.def is the one table ---- */
enum hc_param_type { HC_PT_STR, HC_PT_INT, HC_PT_SIZE, HC_PT_BOOL };
enum hc_param {
#define HC_PARAM(name, type, def, doc) HC_P_##name,
#include "params.def"
#undef HC_PARAM
  HC_P_COUNT
};
struct hc_param_desc {
  const char *name; /* without the HETCCL_ prefix */
  enum hc_param_type type;
  const char *def;
  const char *doc;
};
extern const struct hc_param_desc hc_param_table[HC_P_COUNT];
/* What params.def says a row accepts beyond its type, and the NCCL_* name
 * read when the HETCCL_* one is unset (NULL: none). */
struct hc_param_rule {
  bool ranged;
  int64_t lo, hi;      /* INT, SIZE: when ranged */
  const char *choices; /* STR: comma-separated words, any case; NULL: any text */
  const char *nccl;
};
extern const struct hc_param_rule hc_param_rules[HC_P_COUNT];
/* "an integer from 1 to 1000000000", "one of NONE,WARN,INFO,TRACE"... into buf. */
const char *hc_param_accepts(enum hc_param p, char *buf, size_t len);
/* The variable a value came from, for messages: "NCCL_SOCKET_IFNAME" when
 * that one stood in, else "HETCCL_SOCKET_IFNAME". Into buf. */
const char *hc_param_source(enum hc_param p, char *buf, size_t len);
/* Parses every set HETCCL_* variable (or its NCCL_* stand-in) once; a value
 * that does not parse or lies outside what the table accepts fails with
 * HC_ERR_USAGE naming the variable, the value and what is accepted; an
 * unknown HETCCL_* name is a WARN naming the closest known one. Never waits
 * on logging: callable from any thread, with or without logging set up.
 * Called by every init path. */
hc_result_t hc_params_load(void);
int64_t hc_param_int(enum hc_param p);     /* INT, SIZE, BOOL */
const char *hc_param_str(enum hc_param p); /* STR; never NULL */
/* Parsers shared by params and tools: "4M", "1G", "512" -> bytes. */
hc_result_t hc_parse_size(const char *s, int64_t *out);
hc_result_t hc_parse_int(const char *s, int64_t *out);
hc_result_t hc_parse_bool(const char *s, int64_t *out);
/* For tests and hetccl-info: drop the cache so the next read re-parses. */
void hc_params_reset(void);

/* ---- clocks ---- */
uint64_t hc_now_ns(void); /* CLOCK_MONOTONIC */
/* HETCCL_TIMEOUT, and the absolute deadline that far from now. */
uint64_t hc_timeout_ns(void);
uint64_t hc_deadline_ns(void);

/* ---- datatypes and reduction ops (values of ncclDataType_t / ncclRedOp_t) ---- */
enum hc_dtype {
  HC_INT8 = 0,
  HC_UINT8,
  HC_INT32,
  HC_UINT32,
  HC_INT64,
  HC_UINT64,
  HC_FLOAT16,
  HC_FLOAT32,
  HC_FLOAT64,
  HC_BFLOAT16,
  HC_FP8_E4M3,
  HC_FP8_E5M2,
  HC_DTYPE_COUNT
};
enum hc_redop { HC_SUM = 0, HC_PROD, HC_MAX, HC_MIN, HC_AVG, HC_PREMULSUM, HC_REDOP_COUNT };
size_t hc_dtype_size(enum hc_dtype t);
const char *hc_dtype_name(enum hc_dtype t); /* nccl-tests' names: "float", "half", ... */
const char *hc_redop_name(enum hc_redop op);
bool hc_dtype_is_float(enum hc_dtype t);

/* ---- collectives (the API's, in its order) ---- */
enum hc_coll {
  HC_COLL_ALLREDUCE,
  HC_COLL_BROADCAST,
  HC_COLL_REDUCE,
  HC_COLL_ALLGATHER,
  HC_COLL_REDUCESCATTER,
  HC_COLL_ALLTOALL,
  HC_COLL_ALLTOALLV,
  HC_COLL_GATHER,
  HC_COLL_SCATTER,
  HC_COLL_SEND,
  HC_COLL_RECV,
  HC_COLL_COUNT
};
const char *hc_coll_name(enum hc_coll c);
/* All-reduce, reduce and reduce-scatter: the collectives that combine. */
bool hc_coll_reduces(enum hc_coll c);

/* ---- small helpers ---- */
#define HC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define HC_DIV_UP(a, b) (((a) + (b)-1) / (b))
#define HC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* A macro's value as a string literal. */
#define HC_STR(x) HC_STR_(x)
#define HC_STR_(x) #x
/* An ops table (device backends, transports: `size` first) reaches op and
 * fills it: optional ops, and tables built before op was appended. */
#define HC_HAS_OP(ops, type, op) ((ops)->size >= offsetof(type, op) + sizeof((ops)->op) && (ops)->op != NULL)

/* Calls calloc and fails with a message naming what. */
hc_result_t hc_calloc(void *out_ptr, size_t n, size_t size, const char *what);
/* 16 random bytes or more from getrandom(). */
hc_result_t hc_random_bytes(void *buf, size_t n);
/* memcpy with non-temporal stores, for data the writer will not read again
 * and that is too large to stay in cache: the stores skip the read of each
 * line that a cached store makes first. */
void hc_copy_nt(void *dst, const void *src, size_t n);

/* Process liveness (same pid namespace). A pidfd of pid (close-on-exec),
 * or -1 where the kernel has none (liveness then falls back to /proc), or
 * -2 when pid is gone already. */
int hc_pidfd_open(int pid);
/* Whether pid has exited (a zombie counts), by its pidfd when >= 0. */
bool hc_pid_exited(int pid, int pidfd);

/* dlopen helpers: a missing library is an INFO line, never a crash. */
void *hc_dl_open(const char *path_or_name, int flags);
void *hc_dl_sym(void *handle, const char *name);

#endif /* HC_UTIL_H_ */
