/*
 * Memory and devices of the calling thread: registered host memory
 * (hetcclMemAlloc / hetcclMemFree: validation and export only; the buffers
 * and the registry that the transports of this host consult live in net/,
 * hc_net_mem_alloc), device memory, and the device a thread has chosen.
 */
#include "api_priv.h"

static hc_result_t api_MemAlloc(void **ptr, size_t size) {
  HC_TRY(hc_params_load());
  return hc_net_mem_alloc(ptr, size);
}

/* Device memory goes back to its backend; the rest to net's registry,
 * which refuses what it never handed out. */
static hc_result_t api_MemFree(void *ptr) {
  if (ptr == NULL) return HC_OK;
  struct hc_ptr_info info;
  HC_TRY(hc_dev_ptr_query(ptr, &info));
  if (info.kind != HC_MEM_HOST) return hc_dev_mem_free(hc_dev_get(info.kind), info.device, ptr);
  return hc_net_mem_free(ptr);
}

static hc_result_t api_MemAllocDevice(void **ptr, size_t size, int kind, int device) {
  if (ptr == NULL) return HC_FAIL(HC_ERR_ARG, "MemAllocDevice: ptr is NULL");
  if (kind == hetcclDeviceHost) return api_MemAlloc(ptr, size);
  const struct hc_dev_ops *d = kind == hetcclDeviceCuda || kind == hetcclDeviceHip ? hc_dev_get(kind) : NULL;
  if (d == NULL) return HC_FAIL(HC_ERR_ARG, "MemAllocDevice: device kind %d has no loaded backend", kind);
  return hc_dev_mem_alloc(d, device, size, ptr);
}

/* The first GPU backend (CUDA, then HIP) with a device current on the
 * calling thread (thread_bound); else the first loaded GPU backend's
 * current device; else the host. On a host with both NVIDIA and AMD GPUs,
 * a ROCm program never makes a CUDA context current, so its comms are HIP
 * comms, and a CUDA program's are CUDA comms. */
static hc_result_t api_GetDevice(int *kind, int *id) {
  HC_TRY(hc_params_load()); /* the backends read theirs as they load */
  if (kind == NULL || id == NULL) return HC_FAIL(HC_ERR_ARG, "GetDevice: kind or id is NULL");
  const enum hc_mem_kind gpus[] = {HC_MEM_CUDA, HC_MEM_HIP};
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < HC_ARRAY_LEN(gpus); i++) {
      const struct hc_dev_ops *d = hc_dev_get(gpus[i]);
      bool bound = false;
      if (d == NULL || (pass == 0 && (hc_dev_thread_bound(d, &bound) != HC_OK || !bound))) continue;
      if (hc_dev_current_device(d, id) == HC_OK) {
        *kind = gpus[i] == HC_MEM_CUDA ? hetcclDeviceCuda : hetcclDeviceHip;
        return HC_OK;
      }
    }
  }
  *kind = hetcclDeviceHost;
  *id = 0;
  return HC_OK;
}

HC_EXPORT hetcclResult_t hetcclMemAlloc(void **ptr, size_t size) { return (hetcclResult_t)api_MemAlloc(ptr, size); }

HC_EXPORT hetcclResult_t hetcclMemFree(void *ptr) { return (hetcclResult_t)api_MemFree(ptr); }

HC_EXPORT hetcclResult_t hetcclMemAllocDevice(void **ptr, size_t size, int deviceKind, int deviceId) {
  return (hetcclResult_t)api_MemAllocDevice(ptr, size, deviceKind, deviceId);
}

HC_EXPORT hetcclResult_t hetcclGetDevice(int *deviceKind, int *deviceId) {
  return (hetcclResult_t)api_GetDevice(deviceKind, deviceId);
}
