/*
 * The NCCL ABI takes RCCL's smaller ncclConfig_t: a ROCm PyTorch built
 * against RCCL 2.21 hands ncclCommInitRankConfig a 48-byte
 * ncclConfig_v21700 (size, magic, version, blocking, cgaClusterSize,
 * minCTAs, maxCTAs, netName, splitShare), which ends where NCCL 2.28's
 * trafficClass would begin. hetccl must honour its fields and read nothing
 * past its size: the config here is a heap block of exactly 48 bytes, so
 * under AddressSanitizer (CI) any read past it fails the test. Also: the
 * same block with a wrong magic is refused with ncclInvalidArgument.
 * One rank; the white-box check of the comm's config includes api_priv.h.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_priv.h"
#include "testutil.h"

/* RCCL 2.21.5's nccl.h, restated (LP64). */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare;
} rccl_config_v21700;
_Static_assert(sizeof(rccl_config_v21700) == 48, "RCCL 2.21's ncclConfig_t is 48 bytes");

/* The ABI entry points, as a ROCm caller declares them (ncclUniqueId is 128
 * bytes by value, like hetcclUniqueId). */
hetcclResult_t pncclGetUniqueId(hetcclUniqueId *id);
hetcclResult_t pncclCommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId id, int rank, void *config);
hetcclResult_t pncclCommDestroy(hetcclComm_t comm);
hetcclResult_t pncclCommGetAsyncError(hetcclComm_t comm, hetcclResult_t *state);

/* Polls a nonblocking comm until its init is no longer in progress (120 s:
 * longer is a hang); returns what GetAsyncError then reads. */
static hetcclResult_t wait_init(hetcclComm_t comm) {
  hetcclResult_t state = hetcclInProgress;
  const double t0 = tu_seconds();
  while (state == hetcclInProgress && tu_seconds() - t0 < 120) {
    if (!CHECK_OK(pncclCommGetAsyncError(comm, &state))) return hetcclInternalError;
    if (state == hetcclInProgress) usleep(1000);
  }
  return state;
}

static rccl_config_v21700 *rccl_config(int blocking, unsigned magic) {
  rccl_config_v21700 *c = malloc(sizeof(*c)); /* exactly 48 bytes: nothing after it */
  *c = (rccl_config_v21700){.size = sizeof(*c),
                            .magic = magic,
                            .version = 22105,
                            .blocking = blocking,
                            .cgaClusterSize = INT_MIN,
                            .minCTAs = INT_MIN,
                            .maxCTAs = INT_MIN,
                            .netName = NULL,
                            .splitShare = INT_MIN};
  return c;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  hetcclUniqueId id;
  if (!CHECK_OK(pncclGetUniqueId(&id))) return tu_finish("test_abi_rccl_config");
  tu_set_case("RCCL 2.21 config, blocking = 0");
  rccl_config_v21700 *c = rccl_config(0, HETCCL_CONFIG_MAGIC);
  hetcclComm_t comm = NULL;
  /* Nonblocking: the init may still run when the call returns. */
  hetcclResult_t r = pncclCommInitRankConfig(&comm, 1, id, 0, c);
  CHECK(r == hetcclInProgress || r == hetcclSuccess, "init returned %d: %s", (int)r, hetcclGetLastError(NULL));
  if (comm != NULL) {
    CHECK_OK(wait_init(comm));
    CHECK(comm->config.blocking == 0, "the 48-byte config's blocking = 0 was not taken");
    CHECK(comm->config.comm_name[0] == 0, "a commName was read past the config's 48 bytes");
    CHECK_OK(pncclCommDestroy(comm));
  }
  free(c);
  tu_set_case("RCCL 2.21 config, wrong magic");
  c = rccl_config(1, 0xdeadbeef);
  comm = NULL;
  r = pncclCommInitRankConfig(&comm, 1, id, 0, c);
  CHECK(r == hetcclInvalidArgument && comm == NULL && strstr(hetcclGetLastError(NULL), "magic"), "wrong magic: %s (%s)",
        hetcclGetErrorString(r), hetcclGetLastError(NULL));
  free(c);
  return tu_finish("test_abi_rccl_config");
}
