/*
 * hetccl-sim's model (docs/sim.md): a cluster description, the library's
 * own plans for every rank of it (plan/, nothing runs), and a replay of
 * those plans on a model of the links, against a model of the vendor's
 * library on the same links.
 *
 * Units: bandwidths in GB/s (1e9 bytes per second, per direction unless
 * said), latencies and times in microseconds.
 */
#ifndef HC_TOOLS_SIM_H_
#define HC_TOOLS_SIM_H_

#include "plan/plan.h"

enum sim_vendor { SIM_NVIDIA, SIM_AMD };

/* count identical nodes. */
struct sim_nodeset {
  int count;
  int gpus, ranks_per_gpu; /* ranks_per_gpu > 1: ranks share a GPU (hetccl only) */
  enum sim_vendor vendor;
  bool fabric_is_pcie;          /* no NVLink/xGMI: GPU to GPU over PCIe peer-to-peer */
  double fabric_gbs, fabric_us; /* per GPU per direction (NVLink/xGMI) */
  double pcie_gbs, pcie_us;     /* GPU <-> host, per GPU per direction */
  double hbm_gbs;               /* a device-to-device copy, bytes copied per second */
  double host_gbs;              /* host memory, bytes copied per second, per node */
  int nics;                     /* GPU i is served by NIC i * nics / gpus */
  double nic_gbs, nic_us;       /* per NIC per direction; one-way latency through the network */
  bool gdr;                     /* the NIC can read and write GPU memory */
};

/* The software's own costs, the same for every node. */
struct sim_costs {
  double step_us; /* a GPU step (copy, kernel, stream wait) after the one it follows */
  double call_us; /* hetccl's host-side cost of one call */
  double xfer_us; /* the proxy's cost of one transfer, beyond the wire */
  double tcp_us;  /* bootstrap: one-way latency of a TCP message */
  double tcp_gbs; /* bootstrap: one TCP stream */
};

#define SIM_MAX_SETS 8
struct sim_cluster {
  char name[64];
  bool group_per_rank; /* HETCCL_GROUP set per rank; otherwise one group per vendor */
  /* What if: transfers between nodes move GPU memory through the NIC
   * (staging leaves them alone) where every node has gdr. Not what the
   * library does yet: api/proxy.c stages every transfer of GPU memory. */
  bool what_if_gdr;
  struct sim_costs costs;
  int nsets;
  struct sim_nodeset sets[SIM_MAX_SETS];
};

/* The file format (also the presets' text): "key = value" lines, '#'
 * comments. Keys before the first "nodes" line are the cluster's; "nodes
 * = N" starts a set of N identical nodes, and the keys after it describe
 * it (unset keys inherit the previous set's). */
hc_result_t sim_cluster_parse(const char *text, const char *origin, struct sim_cluster *out);
hc_result_t sim_cluster_preset(const char *name, struct sim_cluster *out);
hc_result_t sim_cluster_load(const char *path, struct sim_cluster *out);
/* Names of the presets, NULL-terminated. */
extern const char *const sim_preset_names[];
/* Scales the node counts of every set to nodes in all, in proportion. */
hc_result_t sim_cluster_scale(struct sim_cluster *c, int nodes);
int sim_cluster_ranks(const struct sim_cluster *c);
int sim_cluster_gpus(const struct sim_cluster *c);

enum sim_link_class { SIM_HBM, SIM_FABRIC, SIM_PCIE, SIM_HOST, SIM_NIC, SIM_WIRE, SIM_CLASSES };
extern const char *const sim_class_names[SIM_CLASSES];

struct sim_result {
  double us;               /* hetccl's plan on this cluster */
  double vendor_us;        /* the vendor's library on every rank of the same cluster */
  const char *vendor_algo; /* "ring" or "tree" */
  /* hetccl's own steps, per class: bytes on its links; busy_us, the longest
   * time one of its links carried a flow; load_us, the longest time one of
   * its links needs for its bytes at full rate (a lower bound on us). */
  double bytes[SIM_CLASSES], busy_us[SIM_CLASSES], load_us[SIM_CLASSES];
  double vendor_bytes[SIM_CLASSES]; /* its VENDOR steps (or the whole call, pass-through) */
  double cross_group_bytes;         /* bytes of hetccl's transfers between ranks of different groups */
  long nsteps;
  int ngroups;
};

/* One call (a->count as the library takes it) on every rank. */
hc_result_t sim_run(const struct sim_cluster *c, const struct hc_coll_args *a, struct sim_result *out);
/* One row of the table: nominal size S of coll as nccl-tests sizes it
 * (shared/reference/nccl-tests.md, section 3), simulated, with nccl-tests'
 * bandwidths. count == 0: S is too small for this many ranks. */
struct sim_row {
  size_t count;                                  /* nccl-tests' count column (per rank for split collectives) */
  double bytes;                                  /* its size column */
  double algbw, busbw, vendor_busbw, efficiency; /* GB/s; efficiency = busbw / vendor_busbw */
  struct sim_result r;
};
hc_result_t sim_row(const struct sim_cluster *c, enum hc_coll coll, enum hc_dtype t, enum hc_redop op, int root,
                    size_t nominal, struct sim_row *out);

/* hetccl's init on every rank: the bootstrap's rendezvous and all-gathers. */
double sim_bootstrap_us(const struct sim_cluster *c);

#endif
