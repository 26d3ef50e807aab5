/* The NCCL/RCCL adapter: finding, opening and resolving the vendor library. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vendor.h"

/* Every function the adapter uses, resolved in one loop: field, its name
 * in NCCL's spelling, another spelling some releases use instead ("" for
 * none), and whether a library without it is still used. For each
 * spelling, the strong pnccl<X> first (what the library itself calls),
 * then nccl<X>. */
#define HC_VENDOR_SYMBOLS(X)                                     \
  X(get_version, "GetVersion", "", true)                         \
  X(get_unique_id, "GetUniqueId", "", true)                      \
  X(comm_init_rank, "CommInitRank", "", true)                    \
  X(comm_destroy, "CommDestroy", "", true)                       \
  X(comm_abort, "CommAbort", "", true)                           \
  X(comm_get_async_error, "CommGetAsyncError", "", true)         \
  X(get_error_string, "GetErrorString", "", true)                \
  X(get_last_error, "GetLastError", "", true)                    \
  X(all_reduce, "AllReduce", "", true)                           \
  X(broadcast, "Broadcast", "", true)                            \
  X(reduce, "Reduce", "", true)                                  \
  X(all_gather, "AllGather", "", true)                           \
  X(reduce_scatter, "ReduceScatter", "", true)                   \
  X(send, "Send", "", true)                                      \
  X(recv, "Recv", "", true)                                      \
  X(group_start, "GroupStart", "", true)                         \
  X(group_end, "GroupEnd", "", true)                             \
  X(red_op_create_pre_mul_sum, "RedOpCreatePreMulSum", "", true) \
  X(red_op_destroy, "RedOpDestroy", "", true)                    \
  X(all_to_all, "AlltoAll", "AllToAll", false)                   \
  X(all_to_allv, "AlltoAllv", "AllToAllv", false)                \
  X(comm_init_rank_config, "CommInitRankConfig", "", false)

/* Facts that differ between the two libraries, by version (the NCCL API
 * version each reports: RCCL reports the NCCL release it is based on). */
struct vendor_traits {
  const char *name, *soname;
  enum hc_param library_param;
  const char *library_param_name;
  /* A pip-installed PyTorch's own copy: folders relative to its
   * libtorch_<gpu>.so that may hold the library. */
  const char *torch_lib;
  const char *torch_dirs[2];
  int fp8_since; /* first version whose ncclDataType_t has the fp8 types */
};
static const struct vendor_traits traits[2] = {
    /* NCCL 2.24.3 added ncclFloat8e4m3 / e5m2. */
    {"nccl",
     "libnccl.so.2",
     HC_P_NCCL_LIBRARY,
     "HETCCL_NCCL_LIBRARY",
     "libtorch_cuda.so",
     {"../../nvidia/nccl/lib", "../../nvidia/cu13/lib"},
     22400},
    /* RCCL had them (as RCCL_FLOAT8, the same values 10 and 11) before
     * NCCL; from its 2.20 line on, as far as hetccl knows (not run here:
     * no AMD GPU). On gfx94x (MI300) they hold the fnuz encodings. */
    {"rccl", "librccl.so.1", HC_P_RCCL_LIBRARY, "HETCCL_RCCL_LIBRARY", "libtorch_hip.so", {".", NULL}, 22000},
};

hc_result_t hc_vendor_result(int vendor_result) {
  if (vendor_result >= 0 && vendor_result <= (int)HC_IN_PROGRESS) return (hc_result_t)vendor_result;
  return HC_ERR_REMOTE;
}

/* RTLD_DEEPBIND binds the vendor library's own calls inside it; the
 * sanitizer runtimes refuse it (their interceptors must see every call), so
 * sanitizer builds open the library without it, and its own calls then
 * reach our exports as if the program had loaded it globally. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HC_VENDOR_DEEPBIND 0
#else
#define HC_VENDOR_DEEPBIND RTLD_DEEPBIND
#endif
#define HC_VENDOR_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | HC_VENDOR_DEEPBIND)

static struct hc_vendor vendors[2];
static bool vendor_ok[2];
static pthread_once_t once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

/* The folder of the first loaded object whose path ends in name. */
struct find_ctx {
  const char *name;
  char dir[512];
};
static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct find_ctx *f = arg;
  const char *p = info->dlpi_name, *slash = p ? strrchr(p, '/') : NULL;
  if (slash && strcmp(slash + 1, f->name) == 0) {
    snprintf(f->dir, sizeof(f->dir), "%.*s", (int)(slash - p), p);
    return 1;
  }
  return 0;
}

/* Is path this very library (which may answer to libnccl.so.2)? */
static bool is_hetccl(void *handle) { return dlsym(handle, "hetcclGetVersion") != NULL; }

static bool try_open(struct hc_vendor *v, const char *path, void **out) {
  struct stat st;
  if (path[0] == '/' && stat(path, &st) != 0) return false;
  /* Already loaded by the program (PyTorch's wheel loads its NCCL with
   * RTLD_GLOBAL before anything calls hetccl): dlopen returns that copy,
   * whose own calls resolve globally, to our exports; RTLD_DEEPBIND only
   * isolates a library it loads. The ABI layer sends such calls back. */
  void *loaded = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  v->binds_globally = (loaded != NULL && !is_hetccl(loaded)) || HC_VENDOR_DEEPBIND == 0;
  if (loaded) dlclose(loaded);
  void *h = dlopen(path, HC_VENDOR_DLOPEN_FLAGS);
  if (h == NULL) {
    HC_INFO(HC_VENDOR, "%s: %s", path, dlerror());
    return false;
  }
  if (is_hetccl(h)) {
    dlclose(h);
    return false;
  }
  snprintf(v->path, sizeof(v->path), "%s", path);
  v->handle = h;
  *out = h;
  return true;
}

/* p<name>, <name>, then the same for other_name; NULL when none is there. */
static void *resolve(void *h, const char *name, const char *other_name) {
  const char *const names[] = {name, other_name};
  char sym[96];
  for (size_t i = 0; i < HC_ARRAY_LEN(names); i++) {
    if (!names[i][0]) continue;
    snprintf(sym, sizeof(sym), "pnccl%s", names[i]);
    void *f = dlsym(h, sym);
    if (f == NULL) {
      snprintf(sym, sizeof(sym), "nccl%s", names[i]);
      f = dlsym(h, sym);
    }
    if (f != NULL) return f;
  }
  return NULL;
}

static void load(int which) {
  struct hc_vendor *v = &vendors[which];
  const struct vendor_traits *t = &traits[which];
  v->name = t->name;
  const char *soname = t->soname;
  void *h = NULL;
  char path[600];
  const char *forced = hc_param_str(t->library_param);
  if (forced[0]) try_open(v, forced, &h);
  struct find_ctx f = {.name = t->torch_lib};
  if (h == NULL && dl_iterate_phdr(find_loaded, &f)) {
    for (size_t i = 0; h == NULL && i < HC_ARRAY_LEN(t->torch_dirs) && t->torch_dirs[i]; i++) {
      snprintf(path, sizeof(path), "%s/%s/%s", f.dir, t->torch_dirs[i], soname);
      try_open(v, path, &h);
    }
  }
  const char *system_dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64", "/usr/lib64", "/opt/rocm/lib",
                               "/usr/lib"};
  for (size_t i = 0; h == NULL && i < HC_ARRAY_LEN(system_dirs); i++) {
    snprintf(path, sizeof(path), "%s/%s", system_dirs[i], soname);
    try_open(v, path, &h);
  }
  if (h == NULL) {
    HC_INFO(HC_VENDOR, "%s: no %s found (%s names one); hetccl runs its own algorithms", v->name, soname,
            t->library_param_name);
    return;
  }
  bool complete = true;
#define RESOLVE(field, spelling, other_spelling, required)                 \
  *(void **)&v->field = resolve(h, spelling, other_spelling);              \
  if (v->field == NULL && (required)) {                                    \
    HC_INFO(HC_VENDOR, "%s: %s lacks nccl%s", v->name, v->path, spelling); \
    complete = false;                                                      \
  }
  HC_VENDOR_SYMBOLS(RESOLVE)
#undef RESOLVE
  if (!complete || v->get_version(&v->version) != 0) {
    dlclose(h);
    return;
  }
  v->has_fp8 = v->version >= t->fp8_since;
  vendor_ok[which] = true;
  if (v->binds_globally)
    HC_INFO(HC_VENDOR, "%s %d from %s, %s: its calls to the nccl* names land in hetccl, which sends them back to it",
            v->name, v->version, v->path,
            HC_VENDOR_DEEPBIND ? "which the program had loaded already" : "opened without RTLD_DEEPBIND (sanitizers)");
  else
    HC_INFO(HC_VENDOR, "%s %d loaded privately from %s; all-to-all %s, all-to-all-v %s, fp8 %s", v->name, v->version,
            v->path, v->all_to_all ? "native" : "as send/recv", v->all_to_allv ? "native" : "as send/recv",
            v->has_fp8 ? "yes" : "no");
}

static void load_nccl(void) { load(0); }
static void load_rccl(void) { load(1); }

const struct hc_vendor *hc_vendor_get(enum hc_mem_kind kind) {
  if (kind == HC_MEM_CUDA) {
    pthread_once(&once[0], load_nccl);
    return vendor_ok[0] ? &vendors[0] : NULL;
  }
  if (kind == HC_MEM_HIP) {
    pthread_once(&once[1], load_rccl);
    return vendor_ok[1] ? &vendors[1] : NULL;
  }
  return NULL;
}

static pthread_mutex_t async_error_lock = PTHREAD_MUTEX_INITIALIZER;

int hc_vendor_async_error(const struct hc_vendor *v, void *comm, int *err) {
  pthread_mutex_lock(&async_error_lock);
  const int r = v->comm_get_async_error(comm, err);
  pthread_mutex_unlock(&async_error_lock);
  return r;
}

/* A nonblocking comm's call that returned ncclInProgress: its async error
 * once it is no longer in progress, or ncclInProgress at the deadline. */
static int settle_blocking(const struct hc_vendor *v, void *comm) {
  const uint64_t deadline = hc_deadline_ns();
  int state = HC_VENDOR_IN_PROGRESS;
  for (;;) {
    if (hc_vendor_async_error(v, comm, &state) != 0 || state != HC_VENDOR_IN_PROGRESS) return state;
    if (hc_now_ns() > deadline) return state;
    const struct timespec pause = {0, 100000};
    nanosleep(&pause, NULL);
  }
}

hc_result_t hc_vendor_check(const struct hc_vendor *v, void *comm, int result, const char *what) {
  if (result == HC_VENDOR_IN_PROGRESS && comm != NULL) {
    result = settle_blocking(v, comm);
    if (result == HC_VENDOR_IN_PROGRESS)
      return HC_FAIL(HC_ERR_REMOTE, "%s %s: still in progress after HETCCL_TIMEOUT=%llds", v->name, what,
                     (long long)hc_param_int(HC_P_TIMEOUT));
  }
  if (result == 0) return HC_OK;
  return HC_FAIL(hc_vendor_result(result), "%s %s: %s (%d): %s", v->name, what, v->get_error_string(result), result,
                 v->get_last_error(comm));
}

void *hc_vendor_symbol(const struct hc_vendor *v, const char *name) {
  char sym[128];
  snprintf(sym, sizeof(sym), "p%s", name);
  void *f = dlsym(v->handle, sym);
  return f ? f : dlsym(v->handle, name);
}
