/*
 * hetccl-sim: the library's own planner on a modelled cluster. Builds every
 * rank's plan as the library would (plan/, nothing runs), replays the plans
 * on a link-level model, and prints an nccl-tests-like table with the
 * efficiency against the vendor's library on the same cluster (docs/sim.md).
 *
 *   hetccl-sim --cluster NAME|FILE [--nodes N] [--links] <collective> [flags]
 *     NAME: kim2026, h100x8+mi300x8, h200-2ranks; FILE: key = value lines
 *     collective: all_reduce all_gather reduce_scatter broadcast reduce
 *     --nodes N    scale the preset's node sets to N nodes in all
 *     --what-if-gdr  transfers between nodes read and write GPU memory through
 *                  the NIC where the cluster allows it (not yet the library's
 *                  plan: it stages every transfer of GPU memory)
 *     --links      after each row, per link class: bytes, and of its links the
 *                  longest busy (carrying a flow) and loaded (bytes / rate) times
 *     -b,-e,-i,-f  sizes as nccl-tests (32M, 32M, 1M, 1); -d datatype (float);
 *     -o op (sum); -r root (0)
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_tests.h"
#include "sim/sim.h"

static const struct coll {
  const char *name;
  enum hc_coll coll;
} * coll,
    colls[] = {
        {"all_reduce", HC_COLL_ALLREDUCE}, {"all_gather", HC_COLL_ALLGATHER}, {"reduce_scatter", HC_COLL_REDUCESCATTER},
        {"broadcast", HC_COLL_BROADCAST},  {"reduce", HC_COLL_REDUCE},
};

static struct {
  const char *cluster;
  int nodes;
  bool links, what_if_gdr;
  int64_t minbytes, maxbytes, stepbytes;
  double factor;
  int dtype, op, root;
} opt = {.minbytes = 32 << 20, .maxbytes = 32 << 20, .stepbytes = 1 << 20, .factor = 1, .dtype = HC_FLOAT32};

static void usage(FILE *f) {
  fprintf(f, "usage: hetccl-sim --cluster NAME|FILE [--nodes N] [--links] [--what-if-gdr] <collective> [-b S] [-e S] "
             "[-i S] [-f F]\n"
             "                  [-d datatype] [-o op] [-r root]\n"
             "  presets: kim2026 h100x8+mi300x8 h200-2ranks; collectives: all_reduce all_gather reduce_scatter\n"
             "  broadcast reduce\n");
}

static bool parse_size(const char *s, int64_t *out) { return hc_parse_size(s, out) == HC_OK && *out > 0; }

/* Returns 0 when the arguments are good, else the exit code. */
static int parse_args(int argc, char **argv) {
  static const struct option longs[] = {{"cluster", required_argument, NULL, 'C'},
                                        {"nodes", required_argument, NULL, 'N'},
                                        {"links", no_argument, NULL, 'L'},
                                        {"what-if-gdr", no_argument, NULL, 'G'},
                                        {"minbytes", required_argument, NULL, 'b'},
                                        {"maxbytes", required_argument, NULL, 'e'},
                                        {"stepbytes", required_argument, NULL, 'i'},
                                        {"stepfactor", required_argument, NULL, 'f'},
                                        {"datatype", required_argument, NULL, 'd'},
                                        {"op", required_argument, NULL, 'o'},
                                        {"root", required_argument, NULL, 'r'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "b:e:i:f:d:o:r:h", longs, NULL)) != -1) {
    bool ok = true;
    switch (c) {
    case 'C': opt.cluster = optarg; break;
    case 'N': ok = (opt.nodes = atoi(optarg)) > 0; break;
    case 'L': opt.links = true; break;
    case 'G': opt.what_if_gdr = true; break;
    case 'b': ok = parse_size(optarg, &opt.minbytes); break;
    case 'e': ok = parse_size(optarg, &opt.maxbytes); break;
    case 'i': ok = parse_size(optarg, &opt.stepbytes); break;
    case 'f': ok = (opt.factor = atof(optarg)) >= 1; break;
    case 'd': ok = nt_parse_dtype(optarg, &opt.dtype) && opt.dtype >= 0; break;
    case 'o': ok = nt_parse_op(optarg, &opt.op) && opt.op >= 0; break;
    case 'r': ok = (opt.root = atoi(optarg)) >= 0; break;
    case 'h': usage(stdout); return -1;
    default: ok = false;
    }
    if (!ok) {
      fprintf(stderr, "hetccl-sim: bad option or value: %s\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  for (size_t i = 0; optind < argc && i < HC_ARRAY_LEN(colls); i++)
    if (!strcmp(argv[optind], colls[i].name)) coll = &colls[i];
  if (opt.cluster == NULL || coll == NULL || optind + 1 != argc) {
    usage(stderr);
    return 2;
  }
  return 0;
}

static hc_result_t load_cluster(struct sim_cluster *c) {
  for (int i = 0; sim_preset_names[i]; i++)
    if (!strcmp(opt.cluster, sim_preset_names[i])) return sim_cluster_preset(opt.cluster, c);
  return sim_cluster_load(opt.cluster, c);
}

static void print_links(const struct sim_result *r) {
  for (int c = 0; c < SIM_CLASSES; c++)
    if (r->bytes[c] > 0 || r->vendor_bytes[c] > 0)
      printf("#   %-6s hetccl %10.4g B, busiest link busy %9.1f us, loaded %9.1f us; vendor steps %10.4g B\n",
             sim_class_names[c], r->bytes[c], r->busy_us[c], r->load_us[c], r->vendor_bytes[c]);
}

/* One row; returns its efficiency, -2 when the size is too small, -1 on
 * failure. */
static double row(const struct sim_cluster *c, int64_t nominal) {
  struct sim_row w;
  const enum hc_dtype t = (enum hc_dtype)opt.dtype;
  if (sim_row(c, coll->coll, t, (enum hc_redop)opt.op, opt.root, (size_t)nominal, &w) != HC_OK) {
    fprintf(stderr, "hetccl-sim: %s\n", hc_last_error());
    return -1;
  }
  if (w.count == 0) return -2;
  const bool rooted = coll->coll == HC_COLL_BROADCAST || coll->coll == HC_COLL_REDUCE;
  char tm[32], ab[32], bb[32], vt[32], vb[32];
  printf("%12.0f  %12zu  %8s  %6s  %6d  %7s  %6s  %6s  %7s  %6s  %5.3f  %-4s\n", w.bytes, w.count, hc_dtype_name(t),
         hc_coll_reduces(coll->coll) ? hc_redop_name((enum hc_redop)opt.op) : "none", rooted ? opt.root : -1,
         nt_fmt_num(tm, sizeof(tm), w.r.us, 7), nt_fmt_num(ab, sizeof(ab), w.algbw, 6),
         nt_fmt_num(bb, sizeof(bb), w.busbw, 6), nt_fmt_num(vt, sizeof(vt), w.r.vendor_us, 7),
         nt_fmt_num(vb, sizeof(vb), w.vendor_busbw, 6), w.efficiency, w.r.vendor_algo);
  if (opt.links) print_links(&w.r);
  return w.efficiency;
}

static void banner(const struct sim_cluster *c, int n) {
  int nodes = 0;
  for (int i = 0; i < c->nsets; i++) nodes += c->sets[i].count;
  printf("# hetccl-sim: %s on cluster %s: %d ranks, %d GPUs, %d nodes\n", coll->name, c->name, n, sim_cluster_gpus(c),
         nodes);
  if (c->what_if_gdr) printf("# what if: transfers between nodes through the NIC straight from GPU memory\n");
  printf("# init (bootstrap rendezvous and all-gathers): %.1f us\n", sim_bootstrap_us(c));
  printf("# time, algbw, busbw: hetccl's plans; vtime, vbusbw: the vendor's library on every rank (algo); eff = busbw "
         "/ vbusbw\n");
  printf("#\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %7s  %6s  %5s  %4s\n", "size", "count", "type", "redop",
         "root", "time", "algbw", "busbw", "vtime", "vbusbw", "eff", "algo");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %7s  %6s  %5s\n", "(B)", "(elements)", "", "", "", "(us)",
         "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "");
}

int main(int argc, char **argv) {
  int rc = parse_args(argc, argv);
  if (rc) return rc < 0 ? 0 : rc;
  struct sim_cluster c;
  if (load_cluster(&c) != HC_OK || (opt.nodes && sim_cluster_scale(&c, opt.nodes) != HC_OK)) {
    fprintf(stderr, "hetccl-sim: %s\n", hc_last_error());
    return 2;
  }
  c.what_if_gdr = opt.what_if_gdr;
  const int n = sim_cluster_ranks(&c);
  banner(&c, n);
  double sum = 0;
  int rows = 0;
  for (int64_t size = opt.minbytes; size <= opt.maxbytes;
       size = opt.factor > 1 ? (int64_t)((double)size * opt.factor) : size + opt.stepbytes) {
    double eff = row(&c, size);
    if (eff == -1) return 1;
    if (eff < 0) continue;
    sum += eff;
    rows++;
  }
  printf("# Avg efficiency : %.3f\n", rows ? sum / rows : 0.0);
  return 0;
}
