/*
 * The NIC nearest each GPU (net/topo.c), over a fake sysfs tree that the
 * test builds (HETCCL_SYSFS_ROOT): 2 CPU sockets, each with 2 root
 * complexes, each holding one PCIe switch with 2 GPUs and 1 NIC (mlx5_<s>
 * on switch s). The expected NIC of every GPU follows from that
 * construction:
 *   all NICs: the NIC of the GPU's own switch (4 NICs used in parallel);
 *   without switch 1's NIC: its GPUs take NIC 0 (same NUMA node), not the
 *     other socket's;
 *   only the other socket's NICs: equally far, dealt out by the GPU's
 *     index, so both are used.
 * Also: the drivers' spelling of bus ids (upper case, 8-digit domain), and
 * a GPU missing from the tree is an error naming it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/net.h"
#include "testutil.h"

enum { SWITCHES = 4, GPUS_PER_SWITCH = 2 };

static char root[64];

static void mkdirs(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (CHECK(f != NULL, "%s: %s", path, strerror(errno))) {
    fputs(text, f);
    fclose(f);
  }
}

/* Bus numbers of switch s: its upstream port on bus base, downstream ports
 * on base + 1, GPU j on base + 2 + j, the NIC on base + 2 + GPUS_PER_SWITCH;
 * its root complex is pci0000:<base - 1>, root port 0000:<base - 1>:01.0. */
static int base_bus(int s) { return 0x20 * (s + 1); }

static void bus_id(int s, int endpoint, char *out, size_t len) {
  snprintf(out, len, "0000:%02x:00.0", base_bus(s) + 2 + endpoint);
}

/* devices/ path of endpoint e (a GPU index, or GPUS_PER_SWITCH: the NIC) of switch s. */
static void device_dir(int s, int e, char *out, size_t len) {
  const int b = base_bus(s);
  snprintf(out, len, "%s/devices/pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0/0000:%02x:%02x.0/0000:%02x:00.0", root,
           b - 1, b - 1, b, b + 1, e, b + 2 + e);
}

static void build_tree(void) {
  char dir[PATH_MAX], file[PATH_MAX + 32], link[PATH_MAX], id[32];
  snprintf(dir, sizeof(dir), "%s/bus/pci/devices", root);
  mkdirs(dir);
  snprintf(dir, sizeof(dir), "%s/class/infiniband", root);
  mkdirs(dir);
  for (int s = 0; s < SWITCHES; s++)
    for (int e = 0; e <= GPUS_PER_SWITCH; e++) {
      device_dir(s, e, dir, sizeof(dir));
      mkdirs(dir);
      snprintf(file, sizeof(file), "%s/numa_node", dir);
      write_file(file, s / 2 ? "1\n" : "0\n"); /* two switches per socket */
      bus_id(s, e, id, sizeof(id));
      snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, id);
      CHECK(symlink(dir, link) == 0, "symlink %s: %s", link, strerror(errno));
      if (e == GPUS_PER_SWITCH) {
        snprintf(link, sizeof(link), "%s/class/infiniband/mlx5_%d", root, s);
        mkdirs(link);
        snprintf(file, sizeof(file), "%s/device", link);
        CHECK(symlink(dir, file) == 0, "symlink %s: %s", file, strerror(errno));
      }
    }
}

/* Each GPU's pick among the NICs named in use[] (switch indexes). */
static void check_picks(const char *what, const int *use, int nuse, int (*expect)(int s, int j, int index)) {
  struct hc_topo_node nics[SWITCHES];
  for (int k = 0; k < nuse; k++) {
    char name[16];
    snprintf(name, sizeof(name), "mlx5_%d", use[k]);
    if (!CHECK_OK((hetcclResult_t)hc_topo_ib_node(name, &nics[k]))) return;
  }
  for (int s = 0; s < SWITCHES; s++)
    for (int j = 0; j < GPUS_PER_SWITCH; j++) {
      char id[32];
      struct hc_topo_node gpu;
      bus_id(s, j, id, sizeof(id));
      tu_set_case("%s: GPU %s", what, id);
      if (!CHECK_OK((hetcclResult_t)hc_topo_pci_node(id, &gpu))) continue;
      const int index = s * GPUS_PER_SWITCH + j;
      const int k = hc_topo_nearest(&gpu, nics, nuse, index);
      const int want = expect(s, j, index);
      printf("%-34s GPU %d (%s, NUMA %d) -> mlx5_%d (%s)\n", what, index, id, gpu.numa, k >= 0 ? use[k] : -1,
             k >= 0 ? hc_topo_closeness_name(hc_topo_closeness(&gpu, &nics[k])) : "none");
      CHECK(k >= 0 && use[k] == want, "%s: GPU %d took mlx5_%d, expected mlx5_%d", what, index, k >= 0 ? use[k] : -1,
            want);
    }
}

static int own_switch(int s, int j, int index) {
  (void)j, (void)index;
  return s;
}
static int without_nic1(int s, int j, int index) {
  (void)j, (void)index;
  return s == 1 ? 0 : s;
}
static int other_socket(int s, int j, int index) {
  (void)j;
  return s >= 2 ? s : 2 + index % 2; /* socket 0's GPUs: both far NICs, alternately */
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  snprintf(root, sizeof(root), "/tmp/hetccl-topo-XXXXXX");
  if (!CHECK(mkdtemp(root) != NULL, "mkdtemp: %s", strerror(errno))) return tu_finish("test_net_topo");
  setenv("HETCCL_SYSFS_ROOT", root, 1);
  hc_params_reset();
  build_tree();
  const int all[] = {0, 1, 2, 3}, no1[] = {0, 2, 3}, far[] = {2, 3};
  check_picks("every switch has its NIC", all, 4, own_switch);
  check_picks("switch 1 without a NIC", no1, 3, without_nic1);
  check_picks("only socket 1's NICs", far, 2, other_socket);

  tu_set_case("closeness classes");
  struct hc_topo_node a = {.path = "pci0000:1f/0000:1f:01.0/0000:20:00.0/0000:21:00.0/0000:22:00.0", .numa = 0};
  struct hc_topo_node b = {.path = "pci0000:1f/0000:1f:01.0/0000:20:00.0/0000:21:02.0/0000:24:00.0", .numa = 0};
  struct hc_topo_node c = {.path = "pci0000:1f/0000:1f:02.0/0000:30:00.0", .numa = 0};
  struct hc_topo_node d = {.path = "pci0000:3f/0000:3f:01.0/0000:40:00.0", .numa = 0};
  struct hc_topo_node e = {.path = "pci0000:7f/0000:7f:01.0/0000:80:00.0", .numa = 1};
  CHECK(hc_topo_closeness(&a, &b) == HC_TOPO_SWITCH + 1, "below one switch (root port, upstream port): %d",
        hc_topo_closeness(&a, &b));
  CHECK(hc_topo_closeness(&a, &c) == HC_TOPO_HOST_BRIDGE, "one root complex: %d", hc_topo_closeness(&a, &c));
  CHECK(hc_topo_closeness(&a, &d) == HC_TOPO_NUMA, "one NUMA node: %d", hc_topo_closeness(&a, &d));
  CHECK(hc_topo_closeness(&a, &e) == HC_TOPO_SYSTEM, "across sockets: %d", hc_topo_closeness(&a, &e));
  CHECK(hc_topo_nearest(&a, NULL, 0, 0) == -1, "no NIC: -1");

  tu_set_case("bus id spellings");
  struct hc_topo_node lower, upper;
  char id[32], id_upper[40];
  bus_id(3, 1, id, sizeof(id));
  snprintf(id_upper, sizeof(id_upper), "0000%s", id);
  for (char *p = id_upper; *p; p++)
    if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
  if (CHECK_OK((hetcclResult_t)hc_topo_pci_node(id, &lower)) &&
      CHECK_OK((hetcclResult_t)hc_topo_pci_node(id_upper, &upper)))
    CHECK(strcmp(lower.path, upper.path) == 0 && upper.numa == 1, "%s and %s: %s (NUMA %d) and %s (NUMA %d)", id,
          id_upper, lower.path, lower.numa, upper.path, upper.numa);

  tu_set_case("a GPU not in the tree");
  struct hc_topo_node missing;
  CHECK(hc_topo_pci_node("0000:ee:00.0", &missing) == HC_ERR_SYSTEM, "a missing device is an error");
  CHECK(strstr(hc_last_error(), "0000:ee:00.0") != NULL, "the error names it: %s", hc_last_error());

  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  CHECK(system(cmd) == 0, "%s", cmd);
  return tu_finish("test_net_topo");
}
