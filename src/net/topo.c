/*
 * net/topo: which RDMA device is nearest a GPU, from the PCI tree in sysfs,
 * as NCCL's topology detection reads it. A PCI device's place is its path
 * under /sys/devices, from the root complex down
 * ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"): each
 * component past the first is a bridge (a root port or a PCIe switch's
 * port) or the device itself. Two devices below one bridge share a switch
 * (or a root port); below one root complex only, they cross the host
 * bridge; on one NUMA node only, the CPU's fabric; else the link between
 * sockets. The nearest NIC is the one with the deepest common bridge, then
 * the same root complex, then the same NUMA node.
 *
 * The tree is read from HETCCL_SYSFS_ROOT (a test's fake tree) or /sys:
 * bus/pci/devices/<bus id> and class/infiniband/<name>/device are links
 * into devices/; numa_node sits beside each device.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

const char *hc_net_sysfs_root(void) {
  const char *r = hc_param_str(HC_P_SYSFS_ROOT);
  return r && r[0] ? r : "/sys";
}

/* The node of the device that link (under the sysfs root) points to. */
static hc_result_t node_of(const char *link, struct hc_topo_node *out) {
  char root[PATH_MAX], full[PATH_MAX], target[PATH_MAX];
  *out = (struct hc_topo_node){.numa = -1};
  snprintf(full, sizeof(full), "%s/%s", hc_net_sysfs_root(), link);
  if (realpath(hc_net_sysfs_root(), root) == NULL || realpath(full, target) == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "topology: %s: %s", full, strerror(errno));
  char devices[PATH_MAX + 16];
  snprintf(devices, sizeof(devices), "%s/devices/", root);
  const size_t skip = strlen(devices);
  if (strncmp(target, devices, skip) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "topology: %s leads to %s, outside %s", full, target, devices);
  if (strlen(target + skip) >= sizeof(out->path))
    return HC_FAIL(HC_ERR_SYSTEM, "topology: %s: a path of %zu characters", target, strlen(target + skip));
  snprintf(out->path, sizeof(out->path), "%s", target + skip);
  char numa_file[PATH_MAX + 16];
  snprintf(numa_file, sizeof(numa_file), "%s/numa_node", target);
  FILE *f = fopen(numa_file, "r");
  if (f != NULL) {
    if (fscanf(f, "%d", &out->numa) != 1) out->numa = -1;
    fclose(f);
  }
  return HC_OK;
}

hc_result_t hc_topo_pci_node(const char *bus_id, struct hc_topo_node *out) {
  char link[128];
  /* Drivers spell bus ids in upper case (cuDeviceGetPCIBusId) and with a
   * longer domain (8 digits); sysfs has 4 lower-case ones. */
  char id[32];
  size_t n = strlen(bus_id);
  if (n >= sizeof(id)) return HC_FAIL(HC_ERR_ARG, "topology: PCI bus id \"%s\" is too long", bus_id);
  for (size_t i = 0; i <= n; i++)
    id[i] = (char)(bus_id[i] >= 'A' && bus_id[i] <= 'F' ? bus_id[i] - 'A' + 'a' : bus_id[i]);
  const char *colon = strchr(id, ':');
  const char *tail = colon && colon - id > 4 ? colon - 4 : id;
  snprintf(link, sizeof(link), "bus/pci/devices/%s", tail);
  return node_of(link, out);
}

hc_result_t hc_topo_ib_node(const char *name, struct hc_topo_node *out) {
  char link[128];
  snprintf(link, sizeof(link), "class/infiniband/%s/device", name);
  return node_of(link, out);
}

/* Path components a and b share, from the root complex down. */
static int shared_components(const char *a, const char *b) {
  int shared = 0;
  for (;;) {
    const char *ea = strchr(a, '/'), *eb = strchr(b, '/');
    size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
    if (la == 0 || la != lb || memcmp(a, b, la) != 0) return shared;
    shared++;
    if (!ea || !eb) return shared;
    a = ea + 1;
    b = eb + 1;
  }
}

int hc_topo_closeness(const struct hc_topo_node *a, const struct hc_topo_node *b) {
  const int shared = shared_components(a->path, b->path);
  /* shared 1: the root complex; each further one a bridge both sit below. */
  if (shared >= 2) return HC_TOPO_SWITCH + (shared - 2);
  if (shared == 1) return HC_TOPO_HOST_BRIDGE;
  if (a->numa >= 0 && a->numa == b->numa) return HC_TOPO_NUMA;
  return HC_TOPO_SYSTEM;
}

int hc_topo_nearest(const struct hc_topo_node *gpu, const struct hc_topo_node *nics, int n, int spread) {
  int best = -1, ties = 0;
  for (int i = 0; i < n; i++) {
    const int c = hc_topo_closeness(gpu, &nics[i]);
    if (c > best) best = c, ties = 0;
    if (c == best) ties++;
  }
  if (n == 0) return -1;
  /* Equally near NICs are dealt out by spread (the GPU's index), so that
   * the GPUs of a node use all of them. */
  int pick = (spread < 0 ? 0 : spread) % ties;
  for (int i = 0; i < n; i++)
    if (hc_topo_closeness(gpu, &nics[i]) == best && pick-- == 0) return i;
  return -1;
}

const char *hc_topo_closeness_name(int closeness) {
  return closeness >= HC_TOPO_SWITCH        ? "same PCIe switch"
         : closeness == HC_TOPO_HOST_BRIDGE ? "same root complex"
         : closeness == HC_TOPO_NUMA        ? "same NUMA node"
                                            : "across sockets";
}
