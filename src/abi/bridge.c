/* What abi/nccl.c needs beyond the public API (bridge.h), over util/ and
 * vendor/. */
#include <dlfcn.h>
#include <stdarg.h>

#include "bridge.h"
#include "../util/util.h"
#include "../vendor/vendor.h"

hetcclResult_t hc_abi_fail_at(hetcclResult_t result, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hc_vfail_at((hc_result_t)result, file, line, fmt, ap);
  va_end(ap);
  return result;
}

void hc_abi_reset_debug(void) { hc_log_reload(); }

#define VENDOR_COMM_MAGIC 0x0280028002800280ull

/* name in a real library whose own calls land here; with object (a
 * dli_fbase), only in that one. */
static void *shared_vendor_fn(const char *name, const void *object) {
  const enum hc_mem_kind gpus[] = {HC_MEM_CUDA, HC_MEM_HIP};
  for (size_t i = 0; i < HC_ARRAY_LEN(gpus); i++) {
    const struct hc_vendor *v = hc_vendor_get(gpus[i]);
    void *f = v && v->binds_globally ? hc_vendor_symbol(v, name) : NULL;
    Dl_info where;
    if (f && (object == NULL || (dladdr(f, &where) && where.dli_fbase == object))) return f;
  }
  return NULL;
}

void *hc_abi_vendor_fn_for_comm(const void *comm, const char *name) {
  if (comm == NULL) return NULL;
  uint64_t head;
  memcpy(&head, comm, sizeof(head));
  return head == VENDOR_COMM_MAGIC ? shared_vendor_fn(name, NULL) : NULL;
}

/* The real library's code: a file named libnccl / librccl, not hetccl
 * itself (which answers to libnccl.so.2), that is a loaded vendor's. */
void *hc_abi_vendor_fn_for_caller(const void *caller_addr, const char *name) {
  Dl_info caller, own;
  if (!dladdr(caller_addr, &caller) || caller.dli_fname == NULL) return NULL;
  if (dladdr((const void *)&hc_abi_vendor_fn_for_caller, &own) && own.dli_fbase == caller.dli_fbase) return NULL;
  if (!strstr(caller.dli_fname, "libnccl") && !strstr(caller.dli_fname, "librccl")) return NULL;
  return shared_vendor_fn(name, caller.dli_fbase);
}

void *hc_abi_vendor_symbol(int deviceKind, const char *name) {
  if (deviceKind != hetcclDeviceCuda && deviceKind != hetcclDeviceHip) return NULL;
  const struct hc_vendor *v = hc_vendor_get((enum hc_mem_kind)deviceKind);
  return v ? hc_vendor_symbol(v, name) : NULL;
}
