/*
 * Compile-time check of device/hip_api.h against ROCm's own headers: every
 * constant hip.c copies by value equals the header's, hipPointerAttribute_t
 * has the layout hip.c reads, and every required entry point hip.c
 * resolves is declared there. Built (never run: building is the check)
 * only where hip/hip_runtime_api.h is installed (tests/gpu/gpu.cmake);
 * Debian's libamdhip64-dev (HIP 5.2) in CI.
 */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <hip/hiprtc.h>

#define HC_HIP_API_LISTS_ONLY
#include "device/hip_api.h"

#define CHECK_CONSTANT(name, value) \
  _Static_assert((long long)(name) == (long long)(value), "hip_api.h: " #name " is not " #value " in ROCm's headers");
HC_HIP_CONSTANTS(CHECK_CONSTANT)

#define CHECK_MEMORY_TYPE(ours, theirs, value) \
  _Static_assert((long long)(theirs) == (long long)(value), "hip_api.h: " #ours " is not " #theirs " of this ROCm");
/* The one place where the ROCm major decides, as hipRuntimeGetVersion does
 * in hip.c at run time. */
#if HIP_VERSION_MAJOR >= 6
HC_HIP6_MEMORY_TYPES(CHECK_MEMORY_TYPE)
#else
HC_HIP5_MEMORY_TYPES(CHECK_MEMORY_TYPE)
#endif
_Static_assert(HC_HIP_VERSION_6_0 == 6 * 10000000, "HIP_VERSION encodes major * 1e7");

/* struct hip_ptr_attr is hipPointerAttribute_t field for field. */
_Static_assert(sizeof(hipPointerAttribute_t) == 32, "hipPointerAttribute_t is 32 bytes");
_Static_assert(offsetof(hipPointerAttribute_t, device) == 4, "hipPointerAttribute_t.device at 4");
_Static_assert(offsetof(hipPointerAttribute_t, devicePointer) == 8, "devicePointer at 8");
_Static_assert(offsetof(hipPointerAttribute_t, hostPointer) == 16, "hostPointer at 16");
_Static_assert(offsetof(hipPointerAttribute_t, isManaged) == 24, "isManaged at 24");
_Static_assert(offsetof(hipPointerAttribute_t, allocationFlags) == 28, "allocationFlags at 28");

/* Every required entry point is declared by the headers: a misspelt or
 * renamed one fails here, not at dlsym on an AMD machine. (void (*)(void)
 * is the one function type every function converts to without a warning.) */
typedef void (*any_function)(void);
#define DECLARED(name, ret, params) (any_function) & name,
#define OPTIONAL(name, ret, params)
any_function hc_hip_declared_entry_points[] = {HC_HIP_SYMBOLS(DECLARED, OPTIONAL)
                                                   HC_HIPRTC_SYMBOLS(DECLARED, OPTIONAL)};
