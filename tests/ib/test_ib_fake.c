/*
 * The ib transport under the transport contract (tests/common/
 * net_contract.h) between two threads of this process, over the fake
 * libibverbs (tests/ib/fake_verbs.c, found through LD_LIBRARY_PATH): the
 * suite that the soft-RoCE VMs run (tests/ib/test_ib_pair.c), here in a
 * second, so that the fake is held to what a real verbs stack does for
 * net/ib, and net/ib's protocol runs in every build. The cases whose peer
 * dies need processes and are left out (the fake connects threads only).
 * Exit 77 when the verbs found are not the fake's.
 *   test_ib_fake [CASE]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h" /* HC_HAS_OP */
#include "net_contract.h"
#include "testutil.h"

/* Eager size and RDMA chunk (HETCCL_IB_EAGER_BYTES, HETCCL_IB_CHUNK). */
static const size_t ib_edges[] = {8192, 512 * 1024};
static const struct nc_transport ib = {
    .name = "ib (fake verbs)", .ops = &hc_net_ib, .edges = ib_edges, .nedges = HC_ARRAY_LEN(ib_edges), .step_s = 60};

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *only = argc > 1 ? argv[1] : NULL;
  alarm(600);
  void *fake = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  long long (*bytes)(const char *, const char *) = NULL;
  if (fake) *(void **)&bytes = dlsym(fake, "fake_verbs_bytes");
  if (bytes == NULL) {
    printf("skip: libibverbs.so.1 here is not the fake (set LD_LIBRARY_PATH to its folder)\n");
    return 77;
  }
  if (hc_params_load() != HC_OK) return 1;
  /* The contract's stall_probe case skips a transport without probes. */
  CHECK(HC_HAS_OP(&hc_net_ib, struct hc_net_ops, stall_publish) &&
            HC_HAS_OP(&hc_net_ib, struct hc_net_ops, mismatch_found),
        "ib has no stall probes");
  int failed = 0;
  for (int i = 0; i < nc_ncases; i++) {
    const struct nc_case *c = &nc_cases[i];
    if ((only && strcmp(only, c->name)) || c->peer_dies || c->needs_garbage) continue;
    failed += !nc_run_pair(&ib, c, NC_THREADS);
  }
  /* Everything went host to host, through RDMA writes of the fake. */
  long long moved = bytes("host", "host");
  printf("fake verbs moved %lld bytes host to host, %lld from or to GPU memory\n", moved,
         bytes("device", "device") + bytes("device", "host") + bytes("host", "device"));
  CHECK(moved > 0, "no byte went through the fake's RDMA writes");
  CHECK(failed == 0, "%d cases failed", failed);
  dlclose(fake);
  return tu_finish("test_ib_fake");
}
