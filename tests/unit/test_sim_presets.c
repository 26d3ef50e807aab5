/*
 * hetccl-sim's presets kept honest (docs/sim.md). For kim2026 and
 * h100x8+mi300x8, all-reduce, all-gather and reduce-scatter at 1 MiB ..
 * 1 GiB (x4), the plans the library builds, replayed on the model, must
 *  - cross between groups exactly the least bytes (the formulas of
 *    test_plan_groups: 2 (G - 1) B for all-reduce, sum over groups of
 *    (n - |g|) b for the others);
 *  - put on the wire (the slowest link class) those bytes, plus at most
 *    what hetccl's own algorithms inside a group spanning several nodes
 *    move across them: nothing where the vendor's library runs inside
 *    (all-reduce), n (|g| - k) b per group g of k ranks per node where
 *    hetccl sends each block to each member (all-gather, reduce-scatter);
 *  - keep the average efficiency at or above the floor in sim_floors.txt.
 * And the h200-2ranks prediction stays within 25 % of what bench/gpu
 * measured (the figures are in sim_floors.txt with their source).
 *   test_sim_presets FLOORS_FILE
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "testutil.h"

static const struct {
  const char *name;
  enum hc_coll coll;
} colls[] = {
    {"all_reduce", HC_COLL_ALLREDUCE}, {"all_gather", HC_COLL_ALLGATHER}, {"reduce_scatter", HC_COLL_REDUCESCATTER}};

/* Per group: its size and ranks per node, from the description (groups
 * are vendors; each set is one vendor). */
struct groups {
  int n, G, size[2], per_node[2];
};

static struct groups groups_of(const struct sim_cluster *c) {
  struct groups g = {.n = sim_cluster_ranks(c)};
  for (int i = 0; i < c->nsets; i++) {
    const int v = (int)c->sets[i].vendor;
    g.size[v] += c->sets[i].count * c->sets[i].gpus;
    g.per_node[v] = c->sets[i].gpus;
  }
  for (int v = 0; v < 2; v++) g.G += g.size[v] > 0;
  return g;
}

static void check_bytes(const struct groups *g, enum hc_coll coll, const struct sim_row *w) {
  const double B = w->bytes, b = w->bytes / g->n; /* b: one rank's block */
  double least = 0, inside = 0;
  for (int v = 0; v < 2 && coll != HC_COLL_ALLREDUCE; v++) {
    if (g->size[v] == 0) continue;
    least += (double)(g->n - g->size[v]) * b;
    inside += (double)g->n * (g->size[v] - g->per_node[v]) * b;
  }
  if (coll == HC_COLL_ALLREDUCE) least = 2.0 * (g->G - 1) * B;
  CHECK(w->r.cross_group_bytes == least, "%.0f bytes crossed between groups, the least is %.0f", w->r.cross_group_bytes,
        least);
  CHECK(w->r.bytes[SIM_WIRE] >= least && w->r.bytes[SIM_WIRE] <= least + inside,
        "hetccl's own steps put %.0f bytes on the wire; expected %.0f (between groups) + at most %.0f (inside)",
        w->r.bytes[SIM_WIRE], least, inside);
}

/* The floor of preset/coll, or -1 when the file has none. */
static double floor_of(const char *path, const char *preset, const char *coll) {
  FILE *f = fopen(path, "r");
  char line[256], p[64], c[64];
  double v, found = -1;
  while (f && fgets(line, sizeof(line), f))
    if (line[0] != '#' && sscanf(line, "%63s %63s %lf", p, c, &v) == 3 && !strcmp(p, preset) && !strcmp(c, coll))
      found = v;
  if (f) fclose(f);
  return found;
}

static void check_preset(const char *preset, const char *floors) {
  struct sim_cluster c;
  if (!CHECK_OK((hetcclResult_t)sim_cluster_preset(preset, &c))) return;
  const struct groups g = groups_of(&c);
  for (size_t i = 0; i < HC_ARRAY_LEN(colls); i++) {
    double sum = 0;
    int rows = 0;
    for (size_t size = 1 << 20; size <= (1u << 30); size *= 4) {
      struct sim_row w;
      tu_set_case("%s %s %zu", preset, colls[i].name, size);
      if (!CHECK_OK((hetcclResult_t)sim_row(&c, colls[i].coll, HC_FLOAT32, HC_SUM, 0, size, &w))) return;
      check_bytes(&g, colls[i].coll, &w);
      sum += w.efficiency;
      rows++;
    }
    const double avg = sum / rows, floor = floor_of(floors, preset, colls[i].name);
    tu_set_case("%s %s", preset, colls[i].name);
    printf("%-16s %-15s avg efficiency %.3f (floor %.2f)\n", preset, colls[i].name, avg, floor);
    CHECK(floor >= 0, "%s has no floor for %s %s", floors, preset, colls[i].name);
    CHECK(avg >= floor, "average efficiency %.3f fell below its floor %.2f", avg, floor);
  }
}

/* "measured h200-2ranks SIZE BUSBW ..." lines: the all-reduce prediction
 * within 25 %. */
static void check_measured(const char *floors) {
  FILE *f = fopen(floors, "r");
  char line[256], preset[64];
  size_t size;
  double measured;
  int n = 0;
  struct sim_cluster c;
  while (f && fgets(line, sizeof(line), f)) {
    if (sscanf(line, "measured %63s %zu %lf", preset, &size, &measured) != 3) continue;
    struct sim_row w;
    tu_set_case("%s all_reduce %zu", preset, size);
    if (!CHECK_OK((hetcclResult_t)sim_cluster_preset(preset, &c)) ||
        !CHECK_OK((hetcclResult_t)sim_row(&c, HC_COLL_ALLREDUCE, HC_FLOAT32, HC_SUM, 0, size, &w)))
      break;
    printf("%-16s all_reduce %10zu predicted %.2f GB/s, measured %.2f\n", preset, size, w.busbw, measured);
    CHECK(w.busbw >= 0.75 * measured && w.busbw <= 1.25 * measured, "predicted %.2f GB/s busbw, measured %.2f", w.busbw,
          measured);
    n++;
  }
  if (f) fclose(f);
  CHECK(n > 0, "%s has no measured lines", floors);
}

/* The file format refuses what it cannot model, and a set inherits the
 * previous set's links. */
static void check_parser(void) {
  static const char *const bad[] = {
      "nodes = 1\nvendor = intel\npcie_gbs = 1\nhbm_gbs = 1\nhost_gbs = 1\nnic_gbs = 1\nfabric = pcie\n",
      "nodes = 1\ngpus = 4\n", /* no bandwidths */
      "name = x\n",            /* no nodes */
      "nodes = 1\nfabric = pcie\npcie_gbs = -3\nhbm_gbs = 1\nhost_gbs = 1\nnic_gbs = 1\n",
      "nodes = 1\nfabric = pcie\npcie_gbs = 1\nhbm_gbs = 1\nhost_gbs = 1\nnic_gbs = 1\nwarp = 9\n",
  };
  struct sim_cluster c;
  for (size_t i = 0; i < HC_ARRAY_LEN(bad); i++) {
    tu_set_case("parser: bad text %zu", i);
    CHECK(sim_cluster_parse(bad[i], "bad", &c) == HC_ERR_USAGE, "a bad description was accepted");
  }
  tu_set_case("parser: inheritance");
  const char *two = "nodes = 2\ngpus = 4\nfabric = pcie\npcie_gbs = 12\nhbm_gbs = 300\nhost_gbs = 100\n"
                    "nic_gbs = 25 # one per node\nnodes = 3\nvendor = amd\npcie_gbs = 25\n";
  if (CHECK_OK((hetcclResult_t)sim_cluster_parse(two, "two", &c))) {
    CHECK(c.nsets == 2 && c.sets[1].count == 3 && c.sets[1].gpus == 4 && c.sets[1].pcie_gbs == 25 &&
              c.sets[1].nic_gbs == 25 && c.sets[1].vendor == SIM_AMD && c.sets[0].vendor == SIM_NVIDIA,
          "the second set is not the first with its own keys");
    CHECK(sim_cluster_ranks(&c) == 20, "%d ranks, expected 20", sim_cluster_ranks(&c));
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: test_sim_presets FLOORS_FILE\n");
    return 2;
  }
  check_parser();
  check_preset("kim2026", argv[1]);
  check_preset("h100x8+mi300x8", argv[1]);
  check_measured(argv[1]);
  return tu_finish("test_sim_presets");
}
