/* The NCCL/RCCL adapter: finding, opening and resolving the vendor library. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vendor.h"

/* Every function the adapter uses, resolved in one loop: the strong
 * pnccl<X> first (what NCCL itself calls), then nccl<X>. */
#define HC_VENDOR_SYMBOLS(X)                                                   \
  X(get_version, "GetVersion")                                                 \
  X(get_unique_id, "GetUniqueId")                                              \
  X(comm_init_rank, "CommInitRank")                                            \
  X(comm_destroy, "CommDestroy")                                               \
  X(comm_abort, "CommAbort")                                                   \
  X(comm_get_async_error, "CommGetAsyncError")                                 \
  X(get_error_string, "GetErrorString")                                        \
  X(get_last_error, "GetLastError")                                            \
  X(all_reduce, "AllReduce")                                                   \
  X(broadcast, "Broadcast")                                                    \
  X(reduce, "Reduce")                                                          \
  X(all_gather, "AllGather")                                                   \
  X(reduce_scatter, "ReduceScatter")                                           \
  X(send, "Send")                                                              \
  X(recv, "Recv")                                                              \
  X(group_start, "GroupStart")                                                 \
  X(group_end, "GroupEnd")                                                     \
  X(red_op_create_pre_mul_sum, "RedOpCreatePreMulSum")                         \
  X(red_op_destroy, "RedOpDestroy")

/* RTLD_DEEPBIND binds the vendor library's own calls inside it; the
 * sanitizer runtimes refuse it (their interceptors must see every call), so
 * sanitizer builds open the library without it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HC_VENDOR_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#else
#define HC_VENDOR_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

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
   * isolates a library it loads. The API layer sends such calls back. */
  void *loaded = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  v->shared = loaded != NULL && !is_hetccl(loaded);
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

static void load(int which) {
  struct hc_vendor *v = &vendors[which];
  const bool rccl = which == 1;
  v->name = rccl ? "rccl" : "nccl";
  const char *soname = rccl ? "librccl.so.1" : "libnccl.so.2";
  void *h = NULL;
  char path[600];
  const char *forced = hc_param_str(rccl ? HC_P_RCCL_LIBRARY : HC_P_NCCL_LIBRARY);
  if (forced[0]) try_open(v, forced, &h);
  if (h == NULL) {
    struct find_ctx f = {.name = "libtorch_cuda.so"};
    if (rccl) f.name = "libtorch_hip.so";
    if (dl_iterate_phdr(find_loaded, &f)) {
      snprintf(path, sizeof(path), rccl ? "%s/%s" : "%s/../../nvidia/nccl/lib/%s", f.dir, soname);
      try_open(v, path, &h);
      if (h == NULL && !rccl) {
        snprintf(path, sizeof(path), "%s/../../nvidia/cu13/lib/%s", f.dir, soname);
        try_open(v, path, &h);
      }
    }
  }
  const char *system_dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64", "/usr/lib64",
                               "/opt/rocm/lib", "/usr/lib"};
  for (size_t i = 0; h == NULL && i < HC_ARRAY_LEN(system_dirs); i++) {
    snprintf(path, sizeof(path), "%s/%s", system_dirs[i], soname);
    try_open(v, path, &h);
  }
  if (h == NULL) {
    HC_INFO(HC_VENDOR, "%s: no %s found (HETCCL_%s_LIBRARY names one); hetccl runs its own algorithms",
            v->name, soname, rccl ? "RCCL" : "NCCL");
    return;
  }
  char sym[96];
  bool complete = true;
#define RESOLVE(field, suffix)                                                 \
  snprintf(sym, sizeof(sym), "pnccl%s", suffix);                               \
  *(void **)&v->field = dlsym(h, sym);                                         \
  if (v->field == NULL) {                                                      \
    snprintf(sym, sizeof(sym), "nccl%s", suffix);                              \
    *(void **)&v->field = dlsym(h, sym);                                       \
  }                                                                            \
  if (v->field == NULL) {                                                      \
    HC_INFO(HC_VENDOR, "%s: %s lacks %s", v->name, v->path, sym);              \
    complete = false;                                                          \
  }
  HC_VENDOR_SYMBOLS(RESOLVE)
#undef RESOLVE
  if (!complete || v->get_version(&v->version) != 0) {
    dlclose(h);
    return;
  }
  vendor_ok[which] = true;
  if (v->shared)
    HC_INFO(HC_VENDOR, "%s %d from %s, which the program had loaded already: its calls to the nccl* names land in "
            "hetccl, which sends those on the vendor's comms back to it", v->name, v->version, v->path);
  else
    HC_INFO(HC_VENDOR, "%s %d loaded privately from %s", v->name, v->version, v->path);
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

hc_result_t hc_vendor_check(const struct hc_vendor *v, void *comm, int result, const char *what) {
  if (result == 0) return HC_OK;
  return HC_FAIL((hc_result_t)result, "%s %s: %s: %s", v->name, what, v->get_error_string(result),
                 v->get_last_error(comm));
}

void *hc_vendor_symbol(const struct hc_vendor *v, const char *name) {
  char sym[128];
  snprintf(sym, sizeof(sym), "p%s", name);
  void *f = dlsym(v->handle, sym);
  return f ? f : dlsym(v->handle, name);
}
