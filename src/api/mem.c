/*
 * Registered host memory (hetcclMemAlloc / hetcclMemFree): validation and
 * export only; the buffers and the registry that the transports of this
 * host consult live in net/ (net.h, hc_net_mem_alloc).
 */
#include "api_priv.h"

static hc_result_t api_MemAlloc(void **ptr, size_t size) {
  HC_TRY(hc_params_load());
  return hc_net_mem_alloc(ptr, size);
}

static hc_result_t api_MemFree(void *ptr) { return hc_net_mem_free(ptr); }

HC_EXPORT hetcclResult_t hetcclMemAlloc(void **ptr, size_t size) { return (hetcclResult_t)api_MemAlloc(ptr, size); }

HC_EXPORT hetcclResult_t hetcclMemFree(void *ptr) { return (hetcclResult_t)api_MemFree(ptr); }
