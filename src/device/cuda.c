/* Placeholder until the CUDA backend lands: loading reports it absent. */
#include "device.h"

static hc_result_t cuda_load(struct hc_dev_caps *caps) {
  *caps = (struct hc_dev_caps){0};
  /* An absent backend is normal (a CPU-only host): no WARN, only the text
   * that device.c logs at INFO. */
  hc_set_last_error("cuda: backend not built in");
  return HC_ERR_DEVICE;
}

const struct hc_dev_ops hc_dev_cuda = {
    .size = sizeof(struct hc_dev_ops), .abi = HC_DEV_ABI, .name = "cuda", .kind = HC_MEM_CUDA,
    .load = cuda_load,
};
