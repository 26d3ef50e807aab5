/*
 * Cluster descriptions: the key=value format (sim.h) and the presets, which
 * are written in it. Every figure of the presets is cited in docs/sim.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* The software's costs, measured on the H200 machine (docs/sim.md). */
#define SIM_COSTS                                                                       \
  "step_us = 2.7    # 4-byte all-reduce: 13.5 us of GPU work after the call, 5 steps\n" \
  "call_us = 17.2   # the call itself (bench/gpu)\n"                                    \
  "xfer_us = 3.5    # stream flag round trip: the proxy sees a copy done (bench/gpu)\n" \
  "tcp_us = 9.9     # half a loopback TCP round trip (19.8 us, measured here)\n"        \
  "tcp_gbs = 4.9    # loopback TCP, one stream (measured here)\n"

static const char kim2026[] =
    "# Kim et al.'s testbed: 2 nodes of 4 V100-PCIe, 2 of 4 Radeon Pro W7800, ConnectX-6 HDR\n"
    "name = kim2026\n" SIM_COSTS "nodes = 2\nvendor = nvidia\ngpus = 4\nfabric = pcie\n"
    "pcie_gbs = 12.5  # PCIe 3.0 x16: 15.75 peak, 12-13 achievable\npcie_us = 1.0\n"
    "hbm_gbs = 350    # 900 GB/s HBM2 x 0.39 (the H200's measured copy rate over its peak)\n"
    "host_gbs = 197   # 2 sockets x 6 channels DDR4-2933 (282 GB/s peak) x 0.7\nnics = 1\nnic_gbs = 25  # HDR 200 "
    "Gb/s\nnic_us = 1.0\ngdr = 1\n"
    "nodes = 2\nvendor = amd\n"
    "pcie_gbs = 25    # PCIe 4.0 x16: 31.5 peak, about 25 achievable\n"
    "hbm_gbs = 337    # 864 GB/s GDDR6 x 0.39\n";

static const char h100_mi300[] =
    "# 2 nodes of 8 H100 SXM (NVLink 4) + 2 of 8 MI300X (xGMI), one 400 Gb/s NIC per GPU\n"
    "name = h100x8+mi300x8\n" SIM_COSTS "nodes = 2\nvendor = nvidia\ngpus = 8\nfabric = link\n"
    "fabric_gbs = 450 # NVLink 4: 900 GB/s both directions\nfabric_us = 0.5\n"
    "pcie_gbs = 55    # PCIe 5.0 x16: pinned copies measured on the H200 machine\npcie_us = 1.0\n"
    "hbm_gbs = 1306   # 3.35 TB/s x 0.39\n"
    "host_gbs = 430   # 2 sockets x 8 channels DDR5-4800 (614 GB/s peak) x 0.7\n"
    "nics = 8\nnic_gbs = 50   # ConnectX-7 NDR 400 Gb/s\nnic_us = 1.0\ngdr = 1\n"
    "nodes = 2\nvendor = amd\n"
    "fabric_gbs = 448 # xGMI: 7 links, about 896 GB/s both directions\n"
    "hbm_gbs = 2067   # 5.3 TB/s x 0.39\n"
    "host_gbs = 645   # 2 sockets x 12 channels DDR5-4800 (922 GB/s peak) x 0.7\n";

static const char h200_2ranks[] =
    "# Two ranks in two groups on one H200, staged through host memory (bench/gpu, case A)\n"
    "name = h200-2ranks\ngroup = rank\n" SIM_COSTS
    "nodes = 1\nvendor = nvidia\ngpus = 1\nranks_per_gpu = 2\nfabric = link\n"
    "fabric_gbs = 450\nfabric_us = 0.5\n"
    "pcie_gbs = 55.2  # pinned copies, measured: 55.3 down, 55.2 up\npcie_us = 1.0\n"
    "hbm_gbs = 1870   # device-to-device copy, measured\n"
    "host_gbs = 215   # 1 socket x 8 channels DDR5-4800 (307 GB/s peak) x 0.7 (not measured; not binding)\n"
    "nics = 1\nnic_gbs = 50\nnic_us = 1.0\ngdr = 0\n";

static const struct {
  const char *name, *text;
} presets[] = {{"kim2026", kim2026}, {"h100x8+mi300x8", h100_mi300}, {"h200-2ranks", h200_2ranks}};
const char *const sim_preset_names[] = {"kim2026", "h100x8+mi300x8", "h200-2ranks", NULL};

static bool parse_double(const char *v, double lo, double *out) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end || d < lo) return false;
  *out = d;
  return true;
}

static bool parse_int(const char *v, int lo, int *out) {
  double d;
  if (!parse_double(v, lo, &d) || d != (double)(int)d) return false;
  *out = (int)d;
  return true;
}

/* One key of a node set; false when the key or value is not one. */
static bool set_key(struct sim_nodeset *s, const char *k, const char *v) {
  if (!strcmp(k, "vendor")) {
    if (strcmp(v, "nvidia") && strcmp(v, "amd")) return false;
    s->vendor = !strcmp(v, "amd") ? SIM_AMD : SIM_NVIDIA;
    return true;
  }
  if (!strcmp(k, "fabric")) {
    if (strcmp(v, "pcie") && strcmp(v, "link")) return false;
    s->fabric_is_pcie = !strcmp(v, "pcie");
    return true;
  }
  if (!strcmp(k, "gdr")) {
    int on;
    if (!parse_int(v, 0, &on) || on > 1) return false;
    s->gdr = on;
    return true;
  }
  const struct {
    const char *key;
    double *d;
    int *i;
    double lo;
  } keys[] = {{"gpus", NULL, &s->gpus, 1},
              {"ranks_per_gpu", NULL, &s->ranks_per_gpu, 1},
              {"nics", NULL, &s->nics, 1},
              {"fabric_gbs", &s->fabric_gbs, NULL, 1e-3},
              {"fabric_us", &s->fabric_us, NULL, 0},
              {"pcie_gbs", &s->pcie_gbs, NULL, 1e-3},
              {"pcie_us", &s->pcie_us, NULL, 0},
              {"hbm_gbs", &s->hbm_gbs, NULL, 1e-3},
              {"host_gbs", &s->host_gbs, NULL, 1e-3},
              {"nic_gbs", &s->nic_gbs, NULL, 1e-3},
              {"nic_us", &s->nic_us, NULL, 0}};
  for (size_t i = 0; i < HC_ARRAY_LEN(keys); i++)
    if (!strcmp(k, keys[i].key))
      return keys[i].d ? parse_double(v, keys[i].lo, keys[i].d) : parse_int(v, (int)keys[i].lo, keys[i].i);
  return false;
}

/* One key of the cluster's (before the first "nodes"). */
static bool cluster_key(struct sim_cluster *c, const char *k, const char *v) {
  if (!strcmp(k, "name")) return snprintf(c->name, sizeof(c->name), "%s", v) < (int)sizeof(c->name);
  if (!strcmp(k, "group")) {
    if (strcmp(v, "rank") && strcmp(v, "vendor")) return false;
    c->group_per_rank = !strcmp(v, "rank");
    return true;
  }
  const struct {
    const char *key;
    double *d;
  } keys[] = {{"step_us", &c->costs.step_us},
              {"call_us", &c->costs.call_us},
              {"xfer_us", &c->costs.xfer_us},
              {"tcp_us", &c->costs.tcp_us},
              {"tcp_gbs", &c->costs.tcp_gbs}};
  for (size_t i = 0; i < HC_ARRAY_LEN(keys); i++)
    if (!strcmp(k, keys[i].key)) return parse_double(v, 0, keys[i].d);
  return false;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
  return s;
}

/* A set must say what its links are before a plan can run on it. */
static hc_result_t check_set(const struct sim_nodeset *s, const char *origin, int i) {
  if (s->count < 1 || s->gpus < 1 || s->nics < 1 || s->pcie_gbs <= 0 || s->hbm_gbs <= 0 || s->host_gbs <= 0 ||
      s->nic_gbs <= 0 || (!s->fabric_is_pcie && s->fabric_gbs <= 0))
    return HC_FAIL(HC_ERR_USAGE,
                   "%s: node set %d lacks nodes, gpus, nics, or a bandwidth (pcie_gbs, hbm_gbs, "
                   "host_gbs, nic_gbs, fabric_gbs unless fabric = pcie)",
                   origin, i + 1);
  return HC_OK;
}

hc_result_t sim_cluster_parse(const char *text, const char *origin, struct sim_cluster *out) {
  *out = (struct sim_cluster){.costs = {.tcp_gbs = 1}};
  snprintf(out->name, sizeof(out->name), "%s", origin);
  struct sim_nodeset cur = {.gpus = 1, .ranks_per_gpu = 1, .nics = 1};
  int lineno = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[256];
    lineno++;
    if (len >= sizeof(line)) return HC_FAIL(HC_ERR_USAGE, "%s:%d: line too long", origin, lineno);
    memcpy(line, p, len);
    line[len] = 0;
    p += len + (nl != NULL);
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *k = trim(line);
    if (*k == 0) continue;
    char *eq = strchr(k, '=');
    if (eq == NULL) return HC_FAIL(HC_ERR_USAGE, "%s:%d: expected key = value", origin, lineno);
    *eq = 0;
    char *v = trim(eq + 1);
    k = trim(k);
    bool ok;
    if (!strcmp(k, "nodes")) {
      if (out->nsets == SIM_MAX_SETS)
        return HC_FAIL(HC_ERR_USAGE, "%s:%d: more than %d node sets", origin, lineno, SIM_MAX_SETS);
      ok = parse_int(v, 1, &cur.count);
      if (ok) out->sets[out->nsets++] = cur;
    } else if (out->nsets == 0) {
      ok = cluster_key(out, k, v);
    } else {
      ok = set_key(&out->sets[out->nsets - 1], k, v);
      cur = out->sets[out->nsets - 1];
    }
    if (!ok) return HC_FAIL(HC_ERR_USAGE, "%s:%d: bad key or value: %s = %s", origin, lineno, k, v);
  }
  if (out->nsets == 0) return HC_FAIL(HC_ERR_USAGE, "%s: no \"nodes = N\" line", origin);
  for (int i = 0; i < out->nsets; i++) HC_TRY(check_set(&out->sets[i], origin, i));
  return HC_OK;
}

hc_result_t sim_cluster_preset(const char *name, struct sim_cluster *out) {
  for (size_t i = 0; i < HC_ARRAY_LEN(presets); i++)
    if (!strcmp(name, presets[i].name)) return sim_cluster_parse(presets[i].text, name, out);
  return HC_FAIL(HC_ERR_USAGE, "no preset named %s (kim2026, h100x8+mi300x8, h200-2ranks)", name);
}

hc_result_t sim_cluster_load(const char *path, struct sim_cluster *out) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return HC_FAIL(HC_ERR_USAGE, "%s: no preset of that name (kim2026, h100x8+mi300x8, h200-2ranks) and no file: %s",
                   path, strerror(errno));
  char *text = calloc(1, 1 << 20);
  size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
  bool big = !feof(f);
  fclose(f);
  hc_result_t r = text == NULL ? HC_FAIL(HC_ERR_SYSTEM, "out of memory reading %s", path)
                  : big        ? HC_FAIL(HC_ERR_USAGE, "%s: larger than 1 MiB", path)
                               : sim_cluster_parse(text, path, out);
  (void)n;
  free(text);
  return r;
}

hc_result_t sim_cluster_scale(struct sim_cluster *c, int nodes) {
  int total = 0;
  for (int i = 0; i < c->nsets; i++) total += c->sets[i].count;
  if (nodes < c->nsets) return HC_FAIL(HC_ERR_USAGE, "--nodes %d: %s has %d node sets", nodes, c->name, c->nsets);
  int given = 0;
  for (int i = 0; i < c->nsets; i++) {
    int n = i == c->nsets - 1 ? nodes - given : HC_MAX(1, (int)((long)nodes * c->sets[i].count / total));
    c->sets[i].count = n;
    given += n;
  }
  return HC_OK;
}

int sim_cluster_gpus(const struct sim_cluster *c) {
  int n = 0;
  for (int i = 0; i < c->nsets; i++) n += c->sets[i].count * c->sets[i].gpus;
  return n;
}

int sim_cluster_ranks(const struct sim_cluster *c) {
  int n = 0;
  for (int i = 0; i < c->nsets; i++) n += c->sets[i].count * c->sets[i].gpus * c->sets[i].ranks_per_gpu;
  return n;
}
