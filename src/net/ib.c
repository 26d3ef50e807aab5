/*
 * net/ib: the RDMA verbs transport, setup half. Owns loading libibverbs
 * (dlopen, once per process), choosing the device and port
 * (HETCCL_IB_HCA, HETCCL_IB_GID_INDEX; InfiniBand and RoCE v2 link layers),
 * and bringing up each peer's reliable-connected queue pairs; the data
 * protocol lives in ib_progress.c, registrations in ib_mem.c (terms in
 * ib_priv.h). Knows bytes, never collectives.
 *
 * Setup goes through the socket transport: each ib ctx opens a socket ctx
 * of one stream per peer, whose handle is this transport's handle. So the
 * control connection of a pair proves membership with the job's secret
 * before anything is read from it, like every connection in hetccl, and the
 * queue pair numbers, GIDs, ring addresses and keys travel only over it.
 * Then the control connection stays up with a receive posted: a peer that
 * dies closes it, which fails the pair at once instead of after the queue
 * pairs' retries.
 *
 * Nothing here waits for the peer: connect() moves a small state machine
 * (control up -> records exchanged -> queue pairs ready to send) as far as
 * the bytes at hand allow, bounded by HETCCL_TIMEOUT from the first call.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "../device/device.h"
#include "ib_priv.h"
#include "ib_wire.h"

/* wait_blocking sleeps on the completion channel in slices this long, so
 * that the control connections (a peer's death) and abort are looked at. */
#define HC_IB_SLICE_MS 20

/* ---- the library ---- */

static struct hc_ib_verbs verbs;
static const struct hc_ib_verbs *verbs_ok;
static pthread_once_t verbs_once = PTHREAD_ONCE_INIT;
static char verbs_why[256];

static void verbs_load_once(void) {
  /* RTLD_LOCAL: its symbols stay out of the global scope of the job. */
  void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(verbs_why, sizeof(verbs_why), "libibverbs.so.1 not loadable (%s)", dlerror());
    return;
  }
#define HC_IB_RESOLVE(name, ret, args)                                         \
  if ((*(void **)&verbs.name = dlsym(h, #name)) == NULL) {                     \
    snprintf(verbs_why, sizeof(verbs_why), "libibverbs.so.1 lacks %s", #name); \
    return;                                                                    \
  }
  HC_IB_SYMBOLS(HC_IB_RESOLVE)
#undef HC_IB_RESOLVE
  *(void **)&verbs.ibv_reg_dmabuf_mr = dlsym(h, "ibv_reg_dmabuf_mr");
  verbs_ok = &verbs; /* the handle stays open for the life of the process */
}

const struct hc_ib_verbs *hc_ib_verbs_load(void) {
  pthread_once(&verbs_once, verbs_load_once);
  if (verbs_ok == NULL) HC_INFO(HC_NET, "ib: %s; no ib transport", verbs_why);
  return verbs_ok;
}

/* ---- devices ---- */

/* One entry of the spec: "name" or "name:port", the name a prefix unless
 * exact. */
static bool hca_entry_matches(const char *entry, size_t len, bool exact, const char *dev, int port) {
  const char *colon = memchr(entry, ':', len);
  size_t name_len = colon ? (size_t)(colon - entry) : len;
  if (colon != NULL && atoi(colon + 1) != port) return false;
  if (exact) return strlen(dev) == name_len && strncmp(dev, entry, name_len) == 0;
  return strncmp(dev, entry, name_len) == 0;
}

bool hc_ib_hca_matches(const char *spec, const char *dev, int port) {
  if (spec == NULL || spec[0] == '\0') return true;
  bool exclude = spec[0] == '^';
  if (exclude) spec++;
  bool exact = spec[0] == '=';
  if (exact) spec++;
  bool hit = false;
  for (const char *p = spec; *p && !hit;) {
    size_t len = strcspn(p, ",");
    if (len > 0) hit = hca_entry_matches(p, len, exact, dev, port);
    p += len + (p[len] == ',');
  }
  return exclude ? !hit : hit;
}

/* RoCE: the GID type from sysfs ("RoCE v2", "IB/RoCE v1"). */
static bool gid_is_roce_v2(const char *dev, int port, int index) {
  char path[256], type[32] = "";
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port, index);
  FILE *f = fopen(path, "r");
  if (f == NULL) return false;
  bool ok = fgets(type, sizeof(type), f) != NULL && strncmp(type, "RoCE v2", 7) == 0;
  fclose(f);
  return ok;
}

static bool gid_is_ipv4_mapped(const union ibv_gid *g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_zero(const union ibv_gid *g) {
  static const uint8_t zero[16];
  return memcmp(g->raw, zero, sizeof(zero)) == 0;
}

/* The GID index of a RoCE port: HETCCL_IB_GID_INDEX, else the first RoCE v2
 * GID mapping an IPv4 address, else the first RoCE v2 GID, else 0. Only the
 * first entries are read: tables hold up to 1024 and each read is a
 * syscall. */
static hc_result_t pick_gid(const struct hc_ib_verbs *v, struct ibv_context *cx, struct hc_ib_dev *d, int tbl_len) {
  int64_t want = hc_param_int(HC_P_IB_GID_INDEX);
  if (want >= 0) {
    if (want >= tbl_len)
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_GID_INDEX=%lld: %s port %d has %d GIDs", (long long)want, d->name,
                     d->port, tbl_len);
    d->gid_index = (int)want;
    if (v->ibv_query_gid(cx, (uint8_t)d->port, d->gid_index, &d->gid) != 0)
      return HC_FAIL(HC_ERR_SYSTEM, "ib: %s port %d: cannot read GID %d", d->name, d->port, d->gid_index);
    return HC_OK;
  }
  int first_v2 = -1, mapped_v2 = -1;
  for (int i = 0; i < HC_MIN(tbl_len, 32) && mapped_v2 < 0; i++) {
    union ibv_gid g;
    if (v->ibv_query_gid(cx, (uint8_t)d->port, i, &g) != 0 || gid_is_zero(&g)) continue;
    if (!gid_is_roce_v2(d->name, d->port, i)) continue;
    if (first_v2 < 0) first_v2 = i;
    if (gid_is_ipv4_mapped(&g)) mapped_v2 = i;
  }
  d->gid_index = mapped_v2 >= 0 ? mapped_v2 : first_v2 >= 0 ? first_v2 : 0;
  if (v->ibv_query_gid(cx, (uint8_t)d->port, d->gid_index, &d->gid) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s port %d: cannot read GID %d", d->name, d->port, d->gid_index);
  return HC_OK;
}

/* Of the ports found, the one nearest the GPU (net/topo.c); the first where
 * the PCI tree cannot be read, said in near. */
#define HC_IB_MAX_PORTS 32
static int nearest_port(const struct hc_ib_dev *ports, int n, const char *gpu_bus_id, int spread, char *near,
                        size_t near_len) {
  struct hc_topo_node gpu, nics[HC_IB_MAX_PORTS];
  snprintf(near, near_len, "the first active port");
  if (gpu_bus_id == NULL || gpu_bus_id[0] == 0 || n < 2) return 0;
  char saved[256]; /* a tree that cannot be read is no failure: the first port serves */
  snprintf(saved, sizeof(saved), "%s", hc_last_error());
  bool readable = hc_topo_pci_node(gpu_bus_id, &gpu) == HC_OK;
  for (int i = 0; i < n && readable; i++) readable = hc_topo_ib_node(ports[i].name, &nics[i]) == HC_OK;
  if (!readable) {
    snprintf(near, near_len, "the first active port (PCI tree unreadable: %s)", hc_last_error());
    hc_set_last_error(saved);
    return 0;
  }
  int k = hc_topo_nearest(&gpu, nics, n, spread);
  snprintf(near, near_len, "nearest GPU %s: %s", gpu_bus_id, hc_topo_closeness_name(hc_topo_closeness(&gpu, &nics[k])));
  return k;
}

hc_result_t hc_ib_find_device(const struct hc_ib_verbs *v, const char *gpu_bus_id, int spread, struct hc_ib_dev *dev,
                              bool *found, char *why, size_t why_len, char *near, size_t near_len) {
  int n = 0, nports = 0;
  struct hc_ib_dev ports[HC_IB_MAX_PORTS];
  char near_text[160];
  hc_result_t r = HC_OK;
  const char *spec = hc_param_str(HC_P_IB_HCA);
  *found = false;
  snprintf(why, why_len, "no RDMA device");
  struct ibv_device **list = v->ibv_get_device_list(&n);
  if (list == NULL) {
    snprintf(why, why_len, "ibv_get_device_list: %s", strerror(errno));
    return HC_OK;
  }
  int seen = 0;
  for (int i = 0; i < n && nports < HC_IB_MAX_PORTS && r == HC_OK; i++) {
    const char *name = v->ibv_get_device_name(list[i]);
    struct ibv_context *cx = v->ibv_open_device(list[i]);
    if (cx == NULL) continue;
    for (int port = 1; port <= 8 && nports < HC_IB_MAX_PORTS; port++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (v->ibv_query_port(cx, (uint8_t)port, &pa) != 0) break; /* no such port */
      seen++;
      if (!hc_ib_hca_matches(spec, name, port)) {
        snprintf(why, why_len, "%s:%d excluded by HETCCL_IB_HCA=%s", name, port, spec);
        continue;
      }
      if (pa.state != HC_IBV_PORT_ACTIVE) {
        snprintf(why, why_len, "%s:%d is not active (state %d)", name, port, pa.state);
        continue;
      }
      if (pa.link_layer != HC_IBV_LINK_LAYER_INFINIBAND && pa.link_layer != HC_IBV_LINK_LAYER_ETHERNET &&
          pa.link_layer != HC_IBV_LINK_LAYER_UNSPECIFIED) {
        snprintf(why, why_len, "%s:%d has link layer %d (neither InfiniBand nor Ethernet)", name, port, pa.link_layer);
        continue;
      }
      struct hc_ib_dev d = {.port = port,
                            .active_mtu = pa.active_mtu,
                            .lid = pa.lid,
                            .link_layer = pa.link_layer == HC_IBV_LINK_LAYER_ETHERNET ? HC_IBV_LINK_LAYER_ETHERNET
                                                                                      : HC_IBV_LINK_LAYER_INFINIBAND};
      snprintf(d.name, sizeof(d.name), "%s", name);
      if (d.link_layer == HC_IBV_LINK_LAYER_ETHERNET) {
        r = pick_gid(v, cx, &d, pa.gid_tbl_len);
        if (r != HC_OK) break;
      } else if (v->ibv_query_gid(cx, (uint8_t)port, 0, &d.gid) != 0) {
        memset(&d.gid, 0, sizeof(d.gid));
      }
      ports[nports++] = d;
    }
    v->ibv_close_device(cx);
  }
  v->ibv_free_device_list(list);
  if (r == HC_OK && nports > 0) {
    *dev = ports[nearest_port(ports, nports, gpu_bus_id, spread, near_text, sizeof(near_text))];
    *found = true;
    if (near) snprintf(near, near_len, "%s", near_text);
  }
  if (!*found && seen == 0 && n > 0) snprintf(why, why_len, "%d RDMA devices, none could be opened", n);
  return r;
}

static const char *link_layer_name(int ll) { return ll == HC_IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand"; }

void hc_net_ib_probe(bool *usable, char *what, size_t len) {
  struct hc_ib_dev d;
  char why[200];
  *usable = false;
  const struct hc_ib_verbs *v = hc_ib_verbs_load();
  if (v == NULL) {
    snprintf(what, len, "%s", verbs_why);
    return;
  }
  if (hc_ib_find_device(v, NULL, 0, &d, usable, why, sizeof(why), NULL, 0) != HC_OK) {
    snprintf(what, len, "%s", hc_last_error());
    return;
  }
  if (!*usable) snprintf(what, len, "%s", why);
  else if (d.link_layer == HC_IBV_LINK_LAYER_ETHERNET)
    snprintf(what, len, "%s:%d %s, GID index %d, MTU %d", d.name, d.port, link_layer_name(d.link_layer), d.gid_index,
             128 << d.active_mtu);
  else
    snprintf(what, len, "%s:%d %s, LID %u, MTU %d", d.name, d.port, link_layer_name(d.link_layer), d.lid,
             128 << d.active_mtu);
}

/* The PCI bus id of a GPU comm's device ("" for a CPU comm, or where the
 * driver cannot say: the NIC is then the first active port). */
static void gpu_pci_bus_id(const struct hc_net_args *a, char *out, size_t len) {
  char why[256];
  if (!hc_dev_gpu_bus_id((enum hc_mem_kind)a->device_kind, a->device_id, out, len, why, sizeof(why)) &&
      a->device_kind != HC_MEM_HOST)
    HC_INFO(HC_NET, "ib: no PCI bus id for GPU device %d (%s): the first active port serves", a->device_id, why);
}

void hc_net_ib_gpu_ports(int device_kind, char *out, size_t len) {
  size_t at = 0;
  out[0] = 0;
  const struct hc_ib_verbs *v = hc_ib_verbs_load();
  const struct hc_dev_ops *gpu = hc_dev_get((enum hc_mem_kind)device_kind);
  if (v == NULL || gpu == NULL) return;
  const int ngpus = hc_dev_caps((enum hc_mem_kind)device_kind).device_count;
  for (int g = 0; g < ngpus && at < len; g++) {
    struct hc_net_args a = {.device_kind = device_kind, .device_id = g};
    char bus[HC_PCI_BUS_ID_BYTES], why[200], near[200];
    struct hc_ib_dev d;
    bool found = false;
    gpu_pci_bus_id(&a, bus, sizeof(bus));
    if (hc_ib_find_device(v, bus, g, &d, &found, why, sizeof(why), near, sizeof(near)) != HC_OK)
      snprintf(why, sizeof(why), "%s", hc_last_error());
    int n = found ? snprintf(out + at, len - at, "  %s %d (%s) -> %s:%d (%s)\n", gpu->name, g,
                             bus[0] ? bus : "no bus id", d.name, d.port, near)
                  : snprintf(out + at, len - at, "  %s %d -> none: %s\n", gpu->name, g, why);
    at = HC_MIN(at + (n > 0 ? (size_t)n : 0), len);
  }
}

/* ---- connections ---- */

static bool aborted(const struct hc_ib_ctx *ctx) {
  return ctx->abort_flag != NULL && atomic_load_explicit(ctx->abort_flag, memory_order_acquire);
}

static void qps_to_error(struct hc_ib_conn *c) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = HC_IBV_QPS_ERR;
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i]) c->ctx->v->ibv_modify_qp(c->qps[i], &a, HC_IBV_QP_STATE);
}

/* Sends bye_out over the control connection, once. 40 bytes go into an
 * empty socket buffer on the first try. */
static void bye_send(struct hc_ib_conn *c) {
  if (c->bye_sent || c->control == NULL || c->state != HC_IB_UP) return;
  void *req = NULL;
  int done = 0;
  if (hc_net_socket.isend(c->control, c->bye_out, sizeof(c->bye_out), NULL, &req) == HC_OK)
    (void)hc_net_socket.test(req, &done);
  c->bye_sent = true;
}

hc_result_t hc_ib_conn_fail(struct hc_ib_conn *c, hc_result_t r) {
  if (c->failed != HC_OK) return r;
  c->failed = r;
  snprintf(c->err, sizeof(c->err), "%s", hc_last_error());
  /* A mismatch is this side's finding: say so to the peer, whose receive
   * would otherwise see only a closed connection. 40 bytes go into an empty
   * socket buffer on the first try. */
  if (r == HC_ERR_USAGE) bye_send(c);
  qps_to_error(c);
  hc_set_last_error(c->err);
  return r;
}

hc_result_t hc_ib_conn_check(const struct hc_ib_conn *c) {
  if (c->failed == HC_OK) return HC_OK;
  hc_set_last_error(c->err);
  return c->failed;
}

static hc_result_t conn_get(struct hc_ib_ctx *ctx, int peer, struct hc_ib_conn **out) {
  *out = ctx->conns[peer];
  if (*out != NULL) return HC_OK;
  struct hc_ib_conn *c;
  HC_TRY(hc_calloc(&c, 1, sizeof(*c), "an ib connection"));
  c->ctx = ctx;
  c->peer = peer;
  c->nqps = ctx->nqps;
  ctx->conns[peer] = c;
  *out = c;
  return HC_OK;
}

static void conn_destroy(struct hc_ib_conn *c) {
  if (c == NULL) return;
  const struct hc_ib_verbs *v = c->ctx->v;
  hc_ib_conn_free_reqs(c); /* drops their registrations */
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i]) v->ibv_destroy_qp(c->qps[i]);
  if (c->cq) v->ibv_destroy_cq(c->cq);
  if (c->block_mr) v->ibv_dereg_mr(c->block_mr);
  free(c->block);
  free(c);
}

/* A reliable-connected queue pair on cq, brought to INIT with the remote
 * access it grants; cap is what was granted (some devices inline less, or
 * not at all: asked again without it). what names it in messages. */
hc_result_t hc_ib_qp_open(struct hc_ib_ctx *ctx, struct ibv_cq *cq, struct ibv_qp_cap *cap, int access,
                          const char *what, struct ibv_qp **out) {
  const struct hc_ib_verbs *v = ctx->v;
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = HC_IBV_QPT_RC;
  ia.cap = *cap;
  *out = v->ibv_create_qp(ctx->pd, &ia);
  if (*out == NULL) {
    ia.cap.max_inline_data = 0;
    *out = v->ibv_create_qp(ctx->pd, &ia);
  }
  if (*out == NULL) return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot create %s: %s", ctx->dev.name, what, strerror(errno));
  *cap = ia.cap;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = HC_IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = (uint8_t)ctx->dev.port;
  a.qp_access_flags = (unsigned)access;
  if (v->ibv_modify_qp(*out, &a, HC_IBV_QP_STATE | HC_IBV_QP_PKEY_INDEX | HC_IBV_QP_PORT | HC_IBV_QP_ACCESS_FLAGS) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: INIT failed: %s", what, strerror(errno));
  return HC_OK;
}

/* The verbs resources of a pair: completion queue, queue pairs (to INIT,
 * receives posted), the registered block of rings. */
static hc_result_t conn_create_qps(struct hc_ib_conn *c) {
  struct hc_ib_ctx *ctx = c->ctx;
  const struct hc_ib_verbs *v = ctx->v;
  int cqe = (int)(c->nqps * (HC_IB_SQ_DEPTH + HC_IB_RQ_DEPTH));
  c->cq = v->ibv_create_cq(ctx->context, cqe, NULL, ctx->channel, 0);
  if (c->cq == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot create a completion queue of %d entries for rank %d: %s",
                   ctx->dev.name, cqe, c->peer, strerror(errno));
  size_t eager = (size_t)ctx->eager_slots * hc_ib_eager_stride(ctx->eager_bytes);
  size_t cts = HC_IB_CTS_SLOTS * HC_IB_CTS_BYTES;
  c->block_bytes = 2 * eager + 2 * cts;
  if (posix_memalign((void **)&c->block, 4096, c->block_bytes) != 0) {
    c->block = NULL;
    return HC_FAIL(HC_ERR_SYSTEM, "ib: out of host memory for the rings of rank %d (%zu bytes)", c->peer,
                   c->block_bytes);
  }
  memset(c->block, 0, c->block_bytes);
  c->eager_in = c->block;
  c->eager_out = c->block + eager;
  c->cts_in = c->block + 2 * eager;
  c->cts_out = c->cts_in + cts;
  c->block_mr =
      v->ibv_reg_mr(ctx->pd, c->block, c->block_bytes, HC_IBV_ACCESS_LOCAL_WRITE | HC_IBV_ACCESS_REMOTE_WRITE);
  if (c->block_mr == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot register %zu bytes of rings for rank %d: %s", ctx->dev.name,
                   c->block_bytes, c->peer, strerror(errno));
  for (int i = 0; i < c->nqps; i++) {
    char what[64];
    struct ibv_qp_cap cap = {.max_send_wr = HC_IB_SQ_DEPTH,
                             .max_recv_wr = HC_IB_RQ_DEPTH,
                             .max_send_sge = 2 /* device eager */,
                             .max_recv_sge = 1,
                             .max_inline_data = 64};
    snprintf(what, sizeof(what), "queue pair %d for rank %d", i, c->peer);
    HC_TRY(hc_ib_qp_open(ctx, c->cq, &cap, HC_IBV_ACCESS_LOCAL_WRITE | HC_IBV_ACCESS_REMOTE_WRITE, what, &c->qps[i]));
    c->max_inline = cap.max_inline_data;
    HC_TRY(hc_ib_post_recvs(c, i, HC_IB_RQ_DEPTH));
  }
  return HC_OK;
}

static void setup_fill(const struct hc_ib_conn *c, struct hc_ib_setup *s) {
  const struct hc_ib_ctx *ctx = c->ctx;
  memset(s, 0, sizeof(*s));
  s->magic = HC_IB_MAGIC;
  s->rank = (uint32_t)ctx->rank;
  s->nqps = (uint32_t)c->nqps;
  s->eager_slots = ctx->eager_slots;
  s->eager_bytes = (uint32_t)ctx->eager_bytes;
  s->cts_slots = HC_IB_CTS_SLOTS;
  s->chunk = ctx->chunk;
  s->lid = ctx->dev.lid;
  s->link_layer = (uint32_t)ctx->dev.link_layer;
  s->mtu = (uint32_t)ctx->dev.active_mtu;
  memcpy(s->gid, ctx->dev.gid.raw, 16);
  for (int i = 0; i < c->nqps; i++) s->qpn[i] = c->qps[i]->qp_num;
  s->eager_addr = (uint64_t)(uintptr_t)c->eager_in;
  s->eager_rkey = c->block_mr->rkey;
  s->cts_addr = (uint64_t)(uintptr_t)c->cts_in;
  s->cts_rkey = c->block_mr->rkey;
  s->flags = ctx->device_recv ? HC_IB_SETUP_DEVICE_RECV : 0;
}

static hc_result_t setup_check(const struct hc_ib_conn *c, const struct hc_ib_setup *s) {
  const struct hc_ib_ctx *ctx = c->ctx;
  if (s->rank != (uint32_t)c->peer)
    return HC_FAIL(HC_ERR_REMOTE, "ib: the control connection of rank %d answered as rank %u", c->peer, s->rank);
  if (s->nqps != (uint32_t)c->nqps || s->eager_slots != ctx->eager_slots || s->eager_bytes != ctx->eager_bytes ||
      s->chunk != ctx->chunk)
    return HC_FAIL(HC_ERR_USAGE,
                   "ib: rank %d has HETCCL_IB_QPS_PER_CONN=%u HETCCL_IB_EAGER_SLOTS=%u HETCCL_IB_EAGER_BYTES=%u "
                   "HETCCL_IB_CHUNK=%llu, rank %d has %d, %u, %zu and %zu: set them alike on every rank",
                   c->peer, s->nqps, s->eager_slots, s->eager_bytes, (unsigned long long)s->chunk, ctx->rank, c->nqps,
                   ctx->eager_slots, ctx->eager_bytes, ctx->chunk);
  if (s->link_layer != (uint32_t)ctx->dev.link_layer)
    return HC_FAIL(HC_ERR_USAGE, "ib: rank %d's port is %s, rank %d's is %s: they cannot be connected", c->peer,
                   link_layer_name((int)s->link_layer), ctx->rank, link_layer_name(ctx->dev.link_layer));
  return HC_OK;
}

/* INIT -> RTR -> RTS towards the queue pair dest_qpn of the port with lid
 * (InfiniBand) or gid (RoCE) and active MTU mtu. */
hc_result_t hc_ib_qp_connect(struct hc_ib_ctx *ctx, struct ibv_qp *qp, uint32_t dest_qpn, uint32_t lid,
                             const uint8_t gid[16], int mtu, const char *what) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = HC_IBV_QPS_RTR;
  a.path_mtu = HC_MIN(ctx->dev.active_mtu, mtu);
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = (uint8_t)ctx->dev.port;
  if (ctx->dev.link_layer == HC_IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)ctx->dev.gid_index;
    a.ah_attr.grh.hop_limit = 64;
  } else {
    a.ah_attr.dlid = (uint16_t)lid;
  }
  if (ctx->v->ibv_modify_qp(qp, &a,
                            HC_IBV_QP_STATE | HC_IBV_QP_AV | HC_IBV_QP_PATH_MTU | HC_IBV_QP_DEST_QPN |
                                HC_IBV_QP_RQ_PSN | HC_IBV_QP_MAX_DEST_RD_ATOMIC | HC_IBV_QP_MIN_RNR_TIMER) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: RTR failed: %s", what, strerror(errno));
  memset(&a, 0, sizeof(a));
  a.qp_state = HC_IBV_QPS_RTS;
  a.sq_psn = 0;
  a.timeout = (uint8_t)ctx->ack_timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7; /* 7: retry forever on "receiver not ready" */
  a.max_rd_atomic = 1;
  if (ctx->v->ibv_modify_qp(qp, &a,
                            HC_IBV_QP_STATE | HC_IBV_QP_SQ_PSN | HC_IBV_QP_TIMEOUT | HC_IBV_QP_RETRY_CNT |
                                HC_IBV_QP_RNR_RETRY | HC_IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: RTS failed: %s", what, strerror(errno));
  return HC_OK;
}

/* Every queue pair of c towards the peer's. */
static hc_result_t qps_connect(struct hc_ib_conn *c) {
  const struct hc_ib_setup *s = &c->remote;
  for (int i = 0; i < c->nqps; i++) {
    char what[64];
    snprintf(what, sizeof(what), "queue pair %d to rank %d", i, c->peer);
    HC_TRY(hc_ib_qp_connect(c->ctx, c->qps[i], s->qpn[i], s->lid, s->gid, (int)s->mtu, what));
  }
  return HC_OK;
}

/* Tests a socket request of the control connection; *req becomes NULL once
 * done. */
static hc_result_t control_test(void **req, bool *done) {
  int d = 1;
  if (*req != NULL) HC_TRY(hc_net_socket.test(*req, &d));
  if (d) *req = NULL;
  *done = *req == NULL;
  return HC_OK;
}

/* Moves the setup of c as far as the bytes at hand allow. */
static hc_result_t conn_setup_step(struct hc_ib_conn *c, const struct hc_net_handle *peer_handle) {
  struct hc_ib_ctx *ctx = c->ctx;
  if (c->state == HC_IB_CONTROL) {
    HC_TRY(hc_net_socket.connect(ctx->sock_ctx, c->peer, peer_handle, &c->control));
    if (c->control == NULL) return HC_OK;
    HC_TRY(conn_create_qps(c));
    struct hc_ib_setup s;
    setup_fill(c, &s);
    hc_ib_setup_encode(&s, c->setup_out);
    HC_TRY(hc_net_socket.isend(c->control, c->setup_out, sizeof(c->setup_out), NULL, &c->setup_send));
    HC_TRY(hc_net_socket.irecv(c->control, c->setup_in, sizeof(c->setup_in), NULL, &c->setup_recv));
    c->state = HC_IB_EXCHANGE;
  }
  if (c->state == HC_IB_EXCHANGE) {
    bool sent, got;
    HC_TRY(control_test(&c->setup_send, &sent));
    HC_TRY(control_test(&c->setup_recv, &got));
    if (!sent || !got) return HC_OK;
    if (!hc_ib_setup_parse(c->setup_in, sizeof(c->setup_in), &c->remote))
      return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d sent a malformed setup record (magic 0x%x, %u queue pairs)", c->peer,
                     c->remote.magic, c->remote.nqps);
    HC_TRY(setup_check(c, &c->remote));
    HC_TRY(qps_connect(c));
    HC_TRY(hc_net_socket.irecv(c->control, c->bye_in, sizeof(c->bye_in), NULL, &c->bye_recv));
    c->state = HC_IB_UP;
  }
  return HC_OK;
}

/* ---- ops ---- */

static hc_result_t ib_close(void *vctx);

/* A host without libibverbs or without an active port simply has no ib:
 * the reason becomes the last-error text for the caller to report (INFO,
 * or an error under HETCCL_NET=IB), without the WARN of a failure. */
static hc_result_t ib_absent(const char *why) {
  char text[320];
  snprintf(text, sizeof(text), "ib: %s", why);
  hc_set_last_error(text);
  return HC_ERR_SYSTEM;
}

/* The ib parameters (params.def) into a new ctx, each checked. */
static hc_result_t ctx_params(struct hc_ib_ctx *ctx) {
  int64_t nqps = hc_param_int(HC_P_IB_QPS_PER_CONN), chunk = hc_param_int(HC_P_IB_CHUNK);
  int64_t eager = hc_param_int(HC_P_IB_EAGER_BYTES), slots = hc_param_int(HC_P_IB_EAGER_SLOTS);
  int64_t timeout = hc_param_int(HC_P_IB_TIMEOUT);
  if (nqps < 1 || nqps > HC_IB_MAX_QPS)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_QPS_PER_CONN=%lld: must be 1 to %d", (long long)nqps, HC_IB_MAX_QPS);
  if (chunk < 4096 || chunk > (1ll << 30))
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_CHUNK=%lld: must be 4K to 1G", (long long)chunk);
  if (eager < 0 || eager > HC_IB_MAX_EAGER)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_EAGER_BYTES=%lld: must be 0 to 32K", (long long)eager);
  if (slots < 1 || slots > 64)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_EAGER_SLOTS=%lld: must be 1 to 64", (long long)slots);
  if (timeout < 1 || timeout > 31)
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_IB_TIMEOUT=%lld: must be 1 to 31", (long long)timeout);
  HC_TRY(hc_ib_gdr_parse(hc_param_str(HC_P_GDR), &ctx->gdr_mode));
  ctx->nqps = (int)nqps;
  ctx->chunk = (size_t)chunk;
  ctx->eager_bytes = (size_t)eager;
  ctx->eager_slots = (uint32_t)slots;
  ctx->ack_timeout = (int)timeout;
  ctx->fault_after = (uint64_t)HC_MAX(hc_param_int(HC_P_IB_FAULT_AFTER), 0);
  return HC_OK;
}

/* The port for this rank (nearest its GPU, said in near), opened: device
 * context, protection domain, nonblocking completion channel. */
static hc_result_t ctx_open_device(struct hc_ib_ctx *ctx, const struct hc_net_args *a, char *near, size_t near_len) {
  const struct hc_ib_verbs *v = ctx->v;
  char gpu_bus_id[HC_PCI_BUS_ID_BYTES] = "", why[200];
  bool found = false;
  gpu_pci_bus_id(a, gpu_bus_id, sizeof(gpu_bus_id));
  HC_TRY(hc_ib_find_device(v, gpu_bus_id, a->device_id, &ctx->dev, &found, why, sizeof(why), near, near_len));
  if (!found) {
    char text[260];
    snprintf(text, sizeof(text), "no usable RDMA port: %s", why);
    return ib_absent(text);
  }
  /* The device is opened again by name: find_device closed what it probed. */
  int n = 0;
  struct ibv_device **list = v->ibv_get_device_list(&n);
  for (int i = 0; list != NULL && i < n && ctx->context == NULL; i++)
    if (strcmp(v->ibv_get_device_name(list[i]), ctx->dev.name) == 0) ctx->context = v->ibv_open_device(list[i]);
  if (list) v->ibv_free_device_list(list);
  if (ctx->context == NULL) return HC_FAIL(HC_ERR_SYSTEM, "ib: cannot open %s: %s", ctx->dev.name, strerror(errno));
  ctx->pd = v->ibv_alloc_pd(ctx->context);
  if (ctx->pd == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot allocate a protection domain: %s", ctx->dev.name, strerror(errno));
  ctx->channel = v->ibv_create_comp_channel(ctx->context);
  if (ctx->channel == NULL || fcntl(ctx->channel->fd, F_SETFL, fcntl(ctx->channel->fd, F_GETFL) | O_NONBLOCK) != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot create a nonblocking completion channel: %s", ctx->dev.name,
                   strerror(errno));
  return HC_OK;
}

/* What the comm may hand this transport: GPU memory straight to the
 * adapter where a registration of it works (a forced HETCCL_GDR that
 * does not work fails the open). Messages of at most eager_bytes of GPU
 * memory go too (ib_priv.h: device receiver, device eager), from and into
 * memory that stays registered: the plans copy them on the GPU into their
 * device scratch, rather than have each small user buffer registered. */
/* Whether receives into GPU memory are flushed ("flush" in ib_priv.h):
 * HETCCL_GDR_FLUSH, and under AUTO the GPU's own answer; said after the
 * path (for the comm's INFO line). A GPU that cannot say is flushed: a
 * flush too many costs microseconds, one too few stale bytes. */
static void flush_choose(struct hc_ib_ctx *ctx, int device_id, char *path, size_t len) {
  const char *mode = hc_param_str(HC_P_GDR_FLUSH);
  char why[160] = "", var[64];
  hc_param_source(HC_P_GDR_FLUSH, var, sizeof(var));
  if (strcasecmp(mode, "AUTO") != 0) {
    ctx->flush.enabled = strcmp(mode, "1") == 0;
    snprintf(why, sizeof(why), "%s=%s", var, mode);
  } else {
    const struct hc_dev_ops *gpu = hc_dev_get((enum hc_mem_kind)ctx->device_kind);
    char saved[256];
    snprintf(saved, sizeof(saved), "%s", hc_last_error());
    bool needed = true;
    if (gpu == NULL) snprintf(why, sizeof(why), "no GPU backend to ask whether the GPU needs them");
    else if (hc_dev_rdma_flush_needed(gpu, device_id, &needed, why, sizeof(why)) != HC_OK) /* the op absent too */
      snprintf(why, sizeof(why), "the GPU cannot say whether it needs them: %s", hc_last_error());
    hc_set_last_error(saved);
    ctx->flush.enabled = needed;
  }
  size_t at = strlen(path);
  snprintf(path + at, len - HC_MIN(at, len), "; receives %s: %s", ctx->flush.enabled ? "flushed" : "not flushed", why);
}

static hc_result_t ctx_gdr_caps(struct hc_ib_ctx *ctx, const struct hc_net_args *a, struct hc_net_caps *caps) {
  *caps = (struct hc_net_caps){.device_min_bytes = ctx->eager_bytes};
  bool forced = !ctx->gdr_auto && ctx->gdr_mode != HC_IB_GDR_STAGE;
  caps->device_memory = hc_ib_gdr_probe_reg(ctx, a->device_id, caps->device_path, sizeof(caps->device_path));
  if (forced && !caps->device_memory)
    return HC_FAIL(HC_ERR_USAGE, "ib: HETCCL_GDR=%s, but %s", hc_param_str(HC_P_GDR), caps->device_path);
  caps->device_small = caps->device_memory;
  ctx->device_recv = caps->device_memory;
  if (ctx->device_recv) flush_choose(ctx, a->device_id, caps->device_path, sizeof(caps->device_path));
  return HC_OK;
}

static hc_result_t ib_open(const struct hc_net_args *a, struct hc_net_caps *caps, struct hc_net_handle *handle,
                           void **out) {
  hc_result_t r;
  struct hc_ib_ctx *ctx = NULL;
  char near[200] = "";
  *out = NULL;
  if (a == NULL || a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks)
    return HC_FAIL(HC_ERR_ARG, "ib: open with rank %d of %d", a ? a->rank : -1, a ? a->nranks : -1);
  HC_TRY(hc_params_load());
  const struct hc_ib_verbs *v = hc_ib_verbs_load();
  HC_TRY(hc_calloc(&ctx, 1, sizeof(*ctx), "the ib transport"));
  ctx->pagemap_fd = -1;
  ctx->v = v;
  ctx->rank = a->rank;
  ctx->nranks = a->nranks;
  ctx->abort_flag = a->abort_flag;
  ctx->sig_explain = a->sig_explain;
  ctx->device_kind = a->device_kind;
  HC_TRY_GOTO(ctx_params(ctx), r, fail);
  if (v == NULL) {
    r = ib_absent(verbs_why);
    goto fail;
  }
  HC_TRY_GOTO(hc_calloc(&ctx->conns, (size_t)a->nranks, sizeof(ctx->conns[0]), "ib connections"), r, fail);
  HC_TRY_GOTO(ctx_open_device(ctx, a, near, sizeof(near)), r, fail);
  HC_TRY_GOTO(hc_ib_mem_init(ctx), r, fail);
  struct hc_net_args sa = *a;
  sa.window_bytes = 0;
  sa.socket_nstreams = 1;
  HC_TRY_GOTO(hc_net_socket.open(&sa, NULL, handle, &ctx->sock_ctx), r, fail);
  if (caps) HC_TRY_GOTO(ctx_gdr_caps(ctx, a, caps), r, fail);
  HC_INFO(HC_NET, "ib: rank %d on %s:%d (%s, %s %d, MTU %d; %s), %d queue pairs per peer, chunk %zu, eager %zu x %u",
          ctx->rank, ctx->dev.name, ctx->dev.port, link_layer_name(ctx->dev.link_layer),
          ctx->dev.link_layer == HC_IBV_LINK_LAYER_ETHERNET ? "GID index" : "LID",
          ctx->dev.link_layer == HC_IBV_LINK_LAYER_ETHERNET ? ctx->dev.gid_index : ctx->dev.lid,
          128 << ctx->dev.active_mtu, near, ctx->nqps, ctx->chunk, ctx->eager_bytes, ctx->eager_slots);
  *out = ctx;
  return HC_OK;
fail:
  ib_close(ctx);
  return r;
}

static hc_result_t ib_connect(void *vctx, int peer, const struct hc_net_handle *peer_handle, void **out) {
  struct hc_ib_ctx *ctx = vctx;
  struct hc_ib_conn *c;
  hc_result_t r;
  *out = NULL;
  if (peer < 0 || peer >= ctx->nranks || peer == ctx->rank)
    return HC_FAIL(HC_ERR_ARG, "ib: rank %d cannot connect to rank %d of %d", ctx->rank, peer, ctx->nranks);
  HC_TRY(conn_get(ctx, peer, &c));
  HC_TRY(hc_ib_conn_check(c));
  if (c->state != HC_IB_UP) {
    if (aborted(ctx))
      return hc_ib_conn_fail(c, HC_FAIL(HC_ERR_REMOTE, "ib: aborted while connecting to rank %d", peer));
    if (c->deadline_ns == 0) c->deadline_ns = hc_deadline_ns();
    if ((r = conn_setup_step(c, peer_handle)) != HC_OK) return hc_ib_conn_fail(c, r);
    if (c->state != HC_IB_UP) {
      if (hc_now_ns() >= c->deadline_ns)
        return hc_ib_conn_fail(c, HC_FAIL(HC_ERR_REMOTE,
                                          "ib: rank %d: the connection with rank %d did not come up within "
                                          "HETCCL_TIMEOUT=%lld s",
                                          ctx->rank, peer, (long long)hc_param_int(HC_P_TIMEOUT)));
      return HC_OK;
    }
  }
  if (!c->announced)
    HC_INFO(HC_NET, "ib: %d <-> %d up via %s:%d, %d queue pairs, path MTU %d", ctx->rank, peer, ctx->dev.name,
            ctx->dev.port, c->nqps, 128 << HC_MIN(ctx->dev.active_mtu, (int)c->remote.mtu));
  c->announced = true;
  *out = c;
  return HC_OK;
}

/* Sleeps on the completion channel until an armed CQ has a completion or
 * slice_ms passes; the events are acknowledged at once (a CQ with events
 * not acknowledged cannot be destroyed). */
static hc_result_t channel_sleep(struct hc_ib_ctx *ctx, int slice_ms) {
  struct pollfd pf = {.fd = ctx->channel->fd, .events = POLLIN};
  int k = poll(&pf, 1, slice_ms);
  if (k < 0 && errno != EINTR) return HC_FAIL(HC_ERR_SYSTEM, "ib: rank %d: poll: %s", ctx->rank, strerror(errno));
  struct ibv_cq *cq;
  void *cq_context;
  while (k > 0 && ctx->v->ibv_get_cq_event(ctx->channel, &cq, &cq_context) == 0) ctx->v->ibv_ack_cq_events(cq, 1);
  return HC_OK;
}

static hc_result_t ib_wait_blocking(void *vctx, int timeout_ms) {
  struct hc_ib_ctx *ctx = vctx;
  uint64_t end = hc_now_ns() + (uint64_t)HC_MAX(timeout_ms, 0) * 1000000ull;
  for (;;) {
    if (aborted(ctx)) return HC_OK;
    bool moved = false;
    int armed = 0, setting_up = 0;
    /* Flush reads complete on the ctx's own queue, polled by every
     * connection's progress below. */
    if (ctx->flush.inflight > 0) hc_ib_req_notify_cq(ctx->flush.cq, 0);
    for (int p = 0; p < ctx->nranks; p++) {
      struct hc_ib_conn *c = ctx->conns[p];
      if (c == NULL) continue;
      bool busy = c->sendq.head != NULL || c->recvq.head != NULL;
      if (busy && (c->failed != HC_OK || c->n_complete > 0)) return HC_OK;
      if (c->failed != HC_OK) continue;
      if (c->state != HC_IB_UP) {
        /* The peer's setup must not wait for this rank's next connect(). */
        enum hc_ib_conn_state before = c->state;
        setting_up++;
        if (c->control != NULL) {
          hc_result_t r = conn_setup_step(c, NULL);
          if (r != HC_OK) hc_ib_conn_fail(c, r);
          moved = moved || c->state != before || r != HC_OK;
        }
        continue;
      }
      if (!busy) continue;
      /* Arm, then poll once more: a completion that arrived before the arm
       * raises no event, and would otherwise wait a whole slice. */
      hc_ib_req_notify_cq(c->cq, 0);
      armed++;
      hc_result_t r = hc_ib_conn_progress(c, &moved);
      if (r != HC_OK) {
        hc_ib_conn_fail(c, r);
        moved = true;
      }
      if (c->n_complete > 0) moved = true;
    }
    if (moved) return HC_OK;
    uint64_t now = hc_now_ns();
    if (now >= end) return HC_OK;
    int left_ms = (int)HC_MIN((end - now + 999999) / 1000000, (uint64_t)HC_IB_SLICE_MS);
    if (setting_up > 0 && armed > 0) {
      /* Both kinds of events: short sleeps on the control sockets. */
      HC_TRY(hc_net_socket.wait_blocking(ctx->sock_ctx, 1));
      HC_TRY(channel_sleep(ctx, 0));
    } else if (setting_up > 0) {
      HC_TRY(hc_net_socket.wait_blocking(ctx->sock_ctx, left_ms));
    } else {
      HC_TRY(channel_sleep(ctx, left_ms));
    }
  }
}

static hc_result_t ib_close(void *vctx) {
  struct hc_ib_ctx *ctx = vctx;
  if (ctx == NULL) return HC_OK;
  if (ctx->conns)
    for (int p = 0; p < ctx->nranks; p++) conn_destroy(ctx->conns[p]);
  hc_ib_flush_fini(ctx); /* before the channel its completion queue reports to */
  if (ctx->sock_ctx) hc_net_socket.close(ctx->sock_ctx);
  if (ctx->channel) ctx->v->ibv_destroy_comp_channel(ctx->channel);
  hc_ib_mem_fini(ctx);
  if (ctx->pd) ctx->v->ibv_dealloc_pd(ctx->pd);
  if (ctx->context) ctx->v->ibv_close_device(ctx->context);
  free(ctx->conns);
  free(ctx);
  return HC_OK;
}

/* Stall probes (net.h) travel on the control connection, which is a
 * socket transport connection with a receive always posted (the bye
 * record's), so its own probes do: a probe header between two messages of
 * its stream, read while that receive waits, which control_check tests
 * whenever the ib connection is idle. */
static void ib_stall_publish(void *vconn, const struct hc_net_sig *mine) {
  struct hc_ib_conn *c = vconn;
  if (c->failed == HC_OK && c->state == HC_IB_UP && c->bye_recv != NULL) hc_net_socket.stall_publish(c->control, mine);
}

static void ib_stall_peek(void *vconn, struct hc_net_sig *theirs, uint64_t *gen) {
  const struct hc_ib_conn *c = vconn;
  *theirs = (struct hc_net_sig){{0, 0}};
  *gen = 0;
  if (c->state == HC_IB_UP && c->control != NULL) hc_net_socket.stall_peek(c->control, theirs, gen);
}

/* The bye record of a signature mismatch (as ib_progress.c's sig_mismatch
 * writes it: this rank's call, then the one it met), sent now: the peer,
 * stalled as well, fails naming both calls. */
static void ib_mismatch_found(void *vconn, const struct hc_net_sig *got, const struct hc_net_sig *want) {
  struct hc_ib_conn *c = vconn;
  hc_ib_bye_sig(c, want, got);
  bye_send(c);
}

const struct hc_net_ops hc_net_ib = {
    .size = sizeof(struct hc_net_ops),
    .abi = HC_NET_ABI,
    .name = "ib",
    .open = ib_open,
    .connect = ib_connect,
    .isend = hc_ib_isend,
    .irecv = hc_ib_irecv,
    .test = hc_ib_test,
    .wait_blocking = ib_wait_blocking,
    .close = ib_close,
    .stall_publish = ib_stall_publish,
    .stall_peek = ib_stall_peek,
    .mismatch_found = ib_mismatch_found,
};
