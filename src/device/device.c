/* The registry of device backends: loaded on first use, once. */
#include <pthread.h>
#include <stdio.h>

#include "device.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const struct hc_dev_ops *loaded[HC_MEM_KIND_COUNT];
static struct hc_dev_caps caps[HC_MEM_KIND_COUNT];
/* Why a backend is off: what its load said (hetccl-info, tests). */
static char absent_reason[HC_MEM_KIND_COUNT][768];

static void load_all(void) {
  const struct hc_dev_ops *candidates[] = {&hc_dev_host, &hc_dev_cuda, &hc_dev_hip};
  for (size_t i = 0; i < HC_ARRAY_LEN(candidates); i++) {
    const struct hc_dev_ops *d = candidates[i];
    if (d->abi != HC_DEV_ABI || d->size < offsetof(struct hc_dev_ops, scale) + sizeof(d->scale)) {
      HC_INFO(HC_DEV, "device backend %s: built for ABI %u, not %u; off", d->name, d->abi, HC_DEV_ABI);
      snprintf(absent_reason[d->kind], sizeof(absent_reason[d->kind]), "built for device ABI %u, not %u", d->abi,
               HC_DEV_ABI);
      continue;
    }
    if (hc_dev_load(d, &caps[d->kind]) != HC_OK) {
      HC_INFO(HC_DEV, "device backend %s: not available (%s)", d->name, hc_last_error());
      snprintf(absent_reason[d->kind], sizeof(absent_reason[d->kind]), "%s", hc_last_error());
      hc_set_last_error(""); /* an absent backend is not this thread's error */
      caps[d->kind] = (struct hc_dev_caps){0};
      continue;
    }
    loaded[d->kind] = d;
    HC_INFO(HC_DEV, "device backend %s: %d devices%s%s", d->name, caps[d->kind].device_count,
            caps[d->kind].stream_mem_ops ? ", stream memory operations" : "",
            caps[d->kind].runtime_compile ? ", runtime-compiled reductions" : "");
  }
}

const struct hc_dev_ops *hc_dev_get(enum hc_mem_kind kind) {
  if ((unsigned)kind >= HC_MEM_KIND_COUNT) return NULL;
  pthread_once(&load_once, load_all);
  return loaded[kind];
}

struct hc_dev_caps hc_dev_caps(enum hc_mem_kind kind) {
  if (hc_dev_get(kind) == NULL) return (struct hc_dev_caps){0};
  return caps[kind];
}

const char *hc_dev_absent_reason(enum hc_mem_kind kind) {
  if ((unsigned)kind >= HC_MEM_KIND_COUNT || hc_dev_get(kind) != NULL) return NULL;
  return absent_reason[kind];
}

hc_result_t hc_dev_ptr_query(const void *p, struct hc_ptr_info *out) {
  *out = (struct hc_ptr_info){.kind = HC_MEM_HOST};
  for (int k = HC_MEM_HOST + 1; k < HC_MEM_KIND_COUNT; k++) {
    const struct hc_dev_ops *d = hc_dev_get((enum hc_mem_kind)k);
    if (d == NULL || !HC_HAS_OP(d, struct hc_dev_ops, ptr_query)) continue;
    HC_TRY(hc_dev_ptr_query_on(d, p, out));
    if (out->kind != HC_MEM_HOST || out->host_pinned) return HC_OK;
  }
  return HC_OK;
}

bool hc_dev_gpu_bus_id(enum hc_mem_kind kind, int device, char *out, size_t len, char *why, size_t why_len) {
  out[0] = 0;
  snprintf(why, why_len, "a CPU rank");
  if (kind == HC_MEM_HOST) return false;
  const struct hc_dev_ops *gpu = hc_dev_get(kind);
  if (gpu == NULL || !HC_HAS_OP(gpu, struct hc_dev_ops, pci_bus_id) || gpu->pci_bus_id == NULL) {
    snprintf(why, why_len, "its backend cannot tell bus ids");
    return false;
  }
  char saved[256];
  snprintf(saved, sizeof(saved), "%s", hc_last_error());
  if (hc_dev_pci_bus_id(gpu, device, out, len) == HC_OK) return true;
  snprintf(why, why_len, "%s", hc_last_error());
  out[0] = 0;
  hc_set_last_error(saved);
  return false;
}

hc_result_t hc_dev_missing_op(const struct hc_dev_ops *d, const char *op) {
  return HC_FAIL(HC_ERR_DEVICE, "device backend %s has no %s", d->name, op);
}
