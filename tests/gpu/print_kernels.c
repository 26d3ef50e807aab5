/* Writes the GPU kernel source (device/gpu_kernels.c) to argv[1], for the
 * host emulation that the fake libcuda (fake_cuda.c) runs. */
#include <stdio.h>

#include "device/gpu_priv.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT.c\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "w");
  if (f == NULL || fputs(hc_gpu_kernel_source, f) < 0 || fclose(f) != 0) {
    perror(argv[1]);
    return 1;
  }
  return 0;
}
