/*
 * abi/: what the NCCL ABI (nccl.c) needs of hetccl beyond include/hetccl.h,
 * named in one place so that nccl.c stays a mapping onto the public API:
 * its own failures' messages, NCCL's debug reset, and the real NCCL's (or
 * RCCL's) functions for that library's own calls that land in hetccl's
 * exports. bridge.c implements them over util/ and vendor/.
 */
#ifndef HC_ABI_BRIDGE_H_
#define HC_ABI_BRIDGE_H_

#include "hetccl.h"

/* Sets this thread's last-error text (hetcclGetLastError), logs it at WARN
 * with file:line, and returns result. */
hetcclResult_t hc_abi_fail_at(hetcclResult_t result, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define ABI_FAIL(result, ...) hc_abi_fail_at((result), __FILE__, __LINE__, __VA_ARGS__)

/* Reads the logging variables again (ncclResetDebugInit). */
void hc_abi_reset_debug(void);

/* Where the program loaded the real library globally before hetccl opened
 * it (PyTorch's wheel does), that library resolves its own calls to the
 * nccl* names against the global scope, which LD_PRELOAD puts us first in
 * (RTLD_DEEPBIND isolates only a library that dlopen loads fresh); so does
 * a library opened without RTLD_DEEPBIND (sanitizer builds). Such a call
 * carries one of the real library's comms, or comes from the real
 * library's code; it goes back to the real function
 * (tests/gpu/test_vendor_bindings.c). Both return that function, or NULL
 * when the call is hetccl's to answer. */
/* comm is one of the real library's (recognised by the magic NCCL puts
 * first in every comm); NULL comm: never. */
void *hc_abi_vendor_fn_for_comm(const void *comm, const char *name);
/* caller_addr (a return address) lies in the real library's code. */
void *hc_abi_vendor_fn_for_caller(const void *caller_addr, const char *name);

/* name in the vendor library loaded for deviceKind (a hetcclDeviceKind_t),
 * whether or not it binds globally; NULL when none is loaded or it lacks
 * the name. */
void *hc_abi_vendor_symbol(int deviceKind, const char *name);

#endif
