/*
 * fp8 across ranks whose fp8 buffers hold different encodings (OCP on
 * NVIDIA GPUs and CPUs, fnuz on AMD gfx94x, where RCCL reduces fnuz).
 * There is no AMD GPU here, so a rank declares what an MI300 rank would
 * hold with HETCCL_FP8_LAYOUT=fnuz, in its own process, as a user would;
 * the declaration travels in the peer table exactly as a HIP rank's
 * device-derived layout does (api/comm.c), and the check (api/coll.c)
 * sees no difference between the two.
 *   1. OCP + fnuz: every fp8 call (all-reduce, all-gather, send/recv)
 *      fails with ncclInvalidArgument on every rank, saying which ranks
 *      differ; nothing hangs, and the comm still reduces float32.
 *   2. fnuz + fnuz: bytes move unchanged (all-gather); a reduction by
 *      hetccl's own kernels, which implement OCP, is refused.
 *   3. OCP + OCP (the default on CPU ranks): fp8 all-reduce works.
 *   4. HETCCL_FP8_LAYOUT=bogus fails init with ncclInvalidUsage naming it.
 * Ranks are processes (one environment each); the transport is loopback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "testutil.h"

/* HETCCL_FP8_LAYOUT of each rank: one letter per rank, o(cp) or f(nuz). */
static const char *layouts;

static bool refused(hetcclResult_t r, const char *what, const char *needle) {
  const char *msg = hetcclGetLastError(NULL);
  return CHECK(r == hetcclInvalidArgument && strstr(msg, needle) != NULL,
               "%s: got %s (%s), want invalid argument mentioning \"%s\"", what, hetcclGetErrorString(r), msg, needle);
}

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  setenv("HETCCL_FP8_LAYOUT", layouts[rank] == 'f' ? "fnuz" : "ocp", 1);
  hc_params_reset();
  hetcclComm_t comm;
  if (!CHECK_OK(hetcclCommInitRank(&comm, n, id, rank))) return 1;
  bool mixed = strchr(layouts, 'f') && strchr(layouts, 'o');
  bool fnuz = !mixed && layouts[0] == 'f';
  uint8_t send[8], recv[16], gathered[16];
  for (int i = 0; i < 8; i++) send[i] = hc_float_to_fp8e4m3((float)(rank + 1) * 0.5f * (float)(i + 1));
  tu_set_case("layouts %s: fp8 e4m3 all-reduce", layouts);
  hetcclResult_t r = hetcclAllReduce(send, recv, 8, hetcclFloat8e4m3, hetcclSum, comm, NULL);
  if (mixed) {
    refused(r, "all-reduce", "different fp8 encodings");
  } else if (fnuz) {
    refused(r, "all-reduce", "reduction of fnuz data");
  } else if (CHECK_OK(r)) {
    for (int i = 0; i < 8; i++) {
      float want = 0;
      for (int k = 0; k < n; k++) want += (float)(k + 1) * 0.5f * (float)(i + 1);
      CHECK(recv[i] == hc_float_to_fp8e4m3(want), "element %d: 0x%02x, want 0x%02x", i, recv[i],
            hc_float_to_fp8e4m3(want));
    }
  }
  tu_set_case("layouts %s: fp8 e5m2 all-gather", layouts);
  r = hetcclAllGather(send, gathered, 8, hetcclFloat8e5m2, comm, NULL);
  if (mixed) {
    refused(r, "all-gather", "different fp8 encodings");
  } else if (CHECK_OK(r)) {
    for (int k = 0; k < n; k++)
      for (int i = 0; i < 8; i++)
        CHECK(gathered[k * 8 + i] == hc_float_to_fp8e4m3((float)(k + 1) * 0.5f * (float)(i + 1)),
              "gathered byte %d of rank %d changed", i, k);
  }
  if (mixed) {
    tu_set_case("layouts %s: fp8 send/recv", layouts);
    int peer = 1 - rank;
    r = rank == 0 ? hetcclSend(send, 8, hetcclFloat8e4m3, peer, comm, NULL)
                  : hetcclRecv(recv, 8, hetcclFloat8e4m3, peer, comm, NULL);
    refused(r, rank == 0 ? "send" : "recv",
            layouts[0] == 'o' ? "rank 0 OCP (e4m3fn, e5m2), rank 1 fnuz"
                              : "rank 0 fnuz (e4m3fnuz, e5m2fnuz), rank 1 OCP");
  }
  /* The refusals left nothing half-done: the comm still works. */
  tu_set_case("layouts %s: float32 all-reduce after the fp8 calls", layouts);
  float f = (float)rank + 1, sum = 0;
  if (CHECK_OK(hetcclAllReduce(&f, &sum, 1, hetcclFloat32, hetcclSum, comm, NULL)))
    CHECK(sum == (float)(n * (n + 1) / 2), "float32 sum %g", (double)sum);
  CHECK_OK(hetcclCommDestroy(comm));
  return 0;
}

static int bad_value_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  setenv("HETCCL_FP8_LAYOUT", "e4m3fnuz", 1);
  hc_params_reset();
  hetcclComm_t comm = NULL;
  hetcclResult_t r = hetcclCommInitRank(&comm, n, id, rank);
  const char *msg = hetcclGetLastError(NULL);
  CHECK(r == hetcclInvalidUsage && comm == NULL && strstr(msg, "HETCCL_FP8_LAYOUT=e4m3fnuz") != NULL,
        "bad HETCCL_FP8_LAYOUT: %s (%s)", hetcclGetErrorString(r), msg);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *const runs[] = {"of", "fo", "ff", "oo"};
  for (size_t i = 0; i < HC_ARRAY_LEN(runs); i++) {
    layouts = runs[i];
    long failures = tu_failures();
    tu_run_rank_processes(2, rank_main, NULL);
    printf("%s layouts %s: %ld failures\n", tu_failures() == failures ? "PASS" : "FAIL", layouts,
           tu_failures() - failures);
  }
  long failures = tu_failures();
  tu_run_rank_processes(1, bad_value_main, NULL);
  printf("%s a bad HETCCL_FP8_LAYOUT fails init\n", tu_failures() == failures ? "PASS" : "FAIL");
  return tu_finish("test_coll_fp8_layout");
}
