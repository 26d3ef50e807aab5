/*
 * Which ranks use one physical GPU (hc_peers_share_gpu, src/api/comm.c):
 * the rule that decides whether a group may run on its vendor's library
 * (which refuses two ranks on one GPU) and which ranks are told that they
 * time-slice one.
 *
 * rule: made-up peer records. Each process numbers only the GPUs it sees,
 * so with CUDA_VISIBLE_DEVICES set per rank (as SLURM does) every rank's
 * GPU is device 0 while the bus ids differ: distinct GPUs. One bus id
 * under two device numbers (one process sees all GPUs, the other one) is
 * one GPU; bus ids compare without regard to case; where a rank cannot
 * tell its bus id the device numbers decide; other hosts, other kinds and
 * CPU ranks never share. Ranks of two processes on one GPU take turns on
 * it unless both are MPS clients; ranks of one process never do.
 * comm: where a CUDA backend is loaded (the fake libcuda under ctest: its
 * device d sits on bus 0x1b + 0x20 d), two GPU ranks as threads on devices
 * 0 and 1 publish their bus ids in the peer table and do not share; two
 * on device 0 do; each publishes whether its contexts are MPS clients, as
 * the driver says (FAKE_CUDA_MPS, which ctest sets to 1 for api_peers_mps;
 * unset, the fake answers as a driver that predates the attribute).
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../../src/api/api_priv.h"
#include "testutil.h"

static struct hc_peer_info gpu_rank(uint64_t host, int device, const char *bus_id) {
  struct hc_peer_info p = {.device_kind = HC_MEM_CUDA, .device_id = device};
  p.net.host = host;
  snprintf(p.gpu_bus_id, sizeof(p.gpu_bus_id), "%s", bus_id);
  return p;
}

static void test_rule(void) {
  tu_set_case("rule");
  struct hc_peer_info a = gpu_rank(1, 0, "0000:1B:00.0"), b = gpu_rank(1, 0, "0000:3B:00.0");
  CHECK(!hc_peers_share_gpu(&a, &b), "device 0 of two processes on other buses: distinct GPUs");
  b = gpu_rank(1, 1, "0000:1B:00.0");
  CHECK(hc_peers_share_gpu(&a, &b) && hc_peers_share_gpu(&b, &a), "one bus id as devices 0 and 1: one GPU");
  b = gpu_rank(1, 2, "0000:1b:00.0");
  CHECK(hc_peers_share_gpu(&a, &b), "bus ids compare without regard to case");
  b = gpu_rank(1, 0, "");
  CHECK(hc_peers_share_gpu(&a, &b), "a bus id unknown: the same device number is one GPU");
  b = gpu_rank(1, 1, "");
  CHECK(!hc_peers_share_gpu(&a, &b), "a bus id unknown: other device numbers are distinct");
  b = gpu_rank(2, 0, "0000:1B:00.0");
  CHECK(!hc_peers_share_gpu(&a, &b), "another host's GPU on the same bus is another GPU");
  b = gpu_rank(1, 0, "0000:1B:00.0");
  b.device_kind = HC_MEM_HIP;
  CHECK(!hc_peers_share_gpu(&a, &b), "a GPU of another kind is another GPU");
  struct hc_peer_info cpu = {.device_kind = HC_MEM_HOST};
  cpu.net.host = 1;
  struct hc_peer_info cpu2 = cpu;
  CHECK(!hc_peers_share_gpu(&cpu, &cpu2) && !hc_peers_share_gpu(&cpu, &a), "CPU ranks share no GPU");

  a = gpu_rank(1, 0, "0000:1B:00.0"), b = gpu_rank(1, 0, "0000:1B:00.0");
  a.pid = 100, b.pid = 200;
  CHECK(hc_peers_time_slice_gpu(&a, &b) && hc_peers_time_slice_gpu(&b, &a), "two processes on one GPU take turns");
  a.gpu_mps = 1;
  CHECK(hc_peers_time_slice_gpu(&a, &b), "one of them an MPS client: they still take turns");
  b.gpu_mps = 1;
  CHECK(!hc_peers_time_slice_gpu(&a, &b), "both MPS clients: they run at once");
  a.gpu_mps = b.gpu_mps = 0, b.pid = a.pid;
  CHECK(!hc_peers_time_slice_gpu(&a, &b), "two ranks of one process share its context");
  b = gpu_rank(1, 0, "0000:3B:00.0"), b.pid = 200;
  CHECK(!hc_peers_time_slice_gpu(&a, &b), "two processes on two GPUs");
}

struct comm_case {
  int devices[2];
};

static int comm_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  const struct comm_case *c = arg;
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.deviceKind = hetcclDeviceCuda;
  cfg.deviceId = c->devices[rank];
  cfg.groupName = rank == 0 ? "g0" : "g1";
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclCommInitRankConfig(&comm, nranks, id, rank, &cfg))) return 1;
  const struct hc_peer_info *p = comm->peers;
  char want[HC_PCI_BUS_ID_BYTES];
  for (int r = 0; r < nranks; r++) {
    snprintf(want, sizeof(want), "0000:%02X:00.0", 0x1b + 0x20 * c->devices[r]);
    CHECK(strcmp(p[r].gpu_bus_id, want) == 0, "rank %d's bus id: \"%s\", expected \"%s\"", r, p[r].gpu_bus_id, want);
  }
  const char *mps = getenv("FAKE_CUDA_MPS");
  const int want_mps = mps != NULL && atoi(mps) != 0;
  for (int r = 0; r < nranks; r++)
    CHECK(p[r].gpu_mps == want_mps, "rank %d: gpu_mps %d, the driver says %d", r, (int)p[r].gpu_mps, want_mps);
  const bool one_gpu = c->devices[0] == c->devices[1];
  CHECK(hc_peers_share_gpu(&p[0], &p[1]) == one_gpu, "devices %d and %d: %s", c->devices[0], c->devices[1],
        one_gpu ? "one GPU" : "two GPUs");
  CHECK_OK(hetcclCommDestroy(comm));
  return 0;
}

static void test_comm(void) {
  if (hc_dev_get(HC_MEM_CUDA) == NULL || hc_dev_caps(HC_MEM_CUDA).device_count < 2) {
    printf("comm: skipped (no CUDA backend with 2 devices; ctest runs it over the fake libcuda)\n");
    return;
  }
  struct comm_case cases[] = {{{0, 1}}, {{0, 0}}};
  for (size_t i = 0; i < HC_ARRAY_LEN(cases); i++) {
    tu_set_case("comm, devices %d and %d", cases[i].devices[0], cases[i].devices[1]);
    CHECK(tu_run_ranks(2, comm_rank, &cases[i]) == 0, "ranks ran");
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_rule();
  test_comm();
  return tu_finish("api_peers");
}
