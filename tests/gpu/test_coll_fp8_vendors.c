/*
 * fp8 between a CUDA rank and a HIP rank whose device is gfx94x-like
 * (compute capability 9.4: fnuz fp8), with the encodings derived the way
 * a real job derives them: HETCCL_FP8_LAYOUT unset (auto), the HIP
 * backend's vendor table maps 9.4 to fnuz, the rank publishes it in the
 * peer table. Over the fake libcuda and libamdhip64 (tests/gpu/gpu.cmake),
 * one process per rank:
 *  - fp8 all-reduce and all-gather of device buffers fail on both ranks
 *    with ncclInvalidArgument naming the two encodings;
 *  - float32 all-reduce of device buffers still works on that comm.
 * Skips (77) without both backends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  enum hc_mem_kind kind = rank == 0 ? HC_MEM_CUDA : HC_MEM_HIP;
  const struct hc_dev_ops *gpu = hc_dev_get(kind);
  if (!CHECK(gpu != NULL, "rank %d: no %s backend", rank, rank == 0 ? "cuda" : "hip")) return 1;
  hc_stream_t s = NULL;
  void *d = NULL;
  CHECK_OK((hetcclResult_t)hc_dev_set_device(gpu, 0));
  CHECK_OK((hetcclResult_t)hc_dev_stream_create(gpu, 0, &s));
  CHECK_OK((hetcclResult_t)hc_dev_mem_alloc(gpu, 0, 64, &d));
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = kind == HC_MEM_HIP ? hetcclDeviceHip : hetcclDeviceCuda;
  cfg.deviceId = 0;
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclCommInitRankConfig(&comm, n, id, rank, &cfg))) return 1;
  const char *want = "rank 0 OCP (e4m3fn, e5m2), rank 1 fnuz";
  tu_set_case("fp8 e4m3 all-reduce, CUDA + gfx94x HIP");
  hetcclResult_t r = hetcclAllReduce(d, d, 8, hetcclFloat8e4m3, hetcclSum, comm, s);
  CHECK(r == hetcclInvalidArgument && strstr(hetcclGetLastError(NULL), want), "all-reduce: %s (%s)",
        hetcclGetErrorString(r), hetcclGetLastError(NULL));
  tu_set_case("fp8 e5m2 all-gather, CUDA + gfx94x HIP");
  r = hetcclAllGather(d, (char *)d + 16, 8, hetcclFloat8e5m2, comm, s);
  CHECK(r == hetcclInvalidArgument && strstr(hetcclGetLastError(NULL), want), "all-gather: %s (%s)",
        hetcclGetErrorString(r), hetcclGetLastError(NULL));
  tu_set_case("float32 all-reduce after the refusals");
  float one = (float)(rank + 1), sum = 0;
  CHECK_OK((hetcclResult_t)hc_dev_copy(gpu, d, &one, sizeof(one), s));
  if (CHECK_OK(hetcclAllReduce(d, d, 1, hetcclFloat32, hetcclSum, comm, s))) {
    CHECK_OK((hetcclResult_t)hc_dev_copy(gpu, &sum, d, sizeof(sum), s));
    CHECK_OK((hetcclResult_t)hc_dev_stream_sync(gpu, s));
    CHECK(sum == 3.0f, "float32 sum %g, want 3", (double)sum);
  }
  CHECK_OK(hetcclCommDestroy(comm));
  hc_dev_mem_free(gpu, 0, d);
  hc_dev_stream_destroy(gpu, s);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  /* The parent loads no driver (a fork would not carry it): a probe does. */
  fflush(stdout);
  pid_t probe = fork();
  if (probe == 0) _exit(hc_dev_get(HC_MEM_CUDA) && hc_dev_get(HC_MEM_HIP) ? 0 : 77);
  int st = 0;
  if (probe < 0 || waitpid(probe, &st, 0) != probe || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("skip: needs a CUDA and a HIP device (the fake drivers of tests/gpu/gpu.cmake)\n");
    return 77;
  }
  tu_run_rank_processes(2, rank_main, NULL);
  return tu_finish("test_coll_fp8_vendors");
}
