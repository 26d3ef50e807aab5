/*
 * Communicator lifecycle: init (from an id or the launcher's environment),
 * split, finalize, destroy, abort, queries, and the error and version calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "../plan/plan.h"
#include "../vendor/vendor.h"
#include "api_priv.h"
#include "init_watch.h"
#include "proxy.h"

#define HC_PEER_INFO_MAGIC 0x68637069u

hc_result_t hc_comm_check_handle(const struct hetcclComm *comm, const char *fn) {
  if (comm == NULL) return HC_FAIL(HC_ERR_ARG, "%s: comm is NULL", fn);
  if (comm->magic_head != HC_COMM_MAGIC_HEAD || comm->magic_tail != HC_COMM_MAGIC_TAIL)
    return HC_FAIL(HC_ERR_ARG, "%s: comm %p is not a valid communicator (destroyed or corrupted)", fn,
                   (const void *)comm);
  return HC_OK;
}

hc_result_t hc_comm_check(const struct hetcclComm *comm, const char *fn) {
  HC_TRY(hc_comm_check_handle(comm, fn));
  const int state = atomic_load(&comm->state);
  switch ((enum hc_comm_state)state) {
  case HC_COMM_READY: return HC_OK;
  case HC_COMM_INITIALISING:
  case HC_COMM_FINALIZING:
    /* NCCL's answer to a call before GetAsyncError read success. */
    return HC_FAIL(HC_ERR_ARG,
                   "%s: comm %p%s%s: its nonblocking %s is still running; poll CommGetAsyncError "
                   "until it stops returning InProgress",
                   fn, (const void *)comm, HC_COMM_NAME_ARGS(comm),
                   state == HC_COMM_INITIALISING ? "init" : "finalize");
  case HC_COMM_INIT_FAILED:
    return HC_FAIL((hc_result_t)atomic_load(&comm->async_error),
                   "%s: comm %p: its init failed (%s); destroy or abort it", fn, (const void *)comm,
                   comm->async_error_text);
  case HC_COMM_FINALIZED: break;
  }
  return HC_FAIL(HC_ERR_USAGE, "%s: comm %p%s%s was finalized; only CommDestroy may follow", fn, (const void *)comm,
                 HC_COMM_NAME_ARGS(comm));
}

void hc_comm_set_async_error(struct hetcclComm *comm, hc_result_t r) {
  pthread_mutex_lock(&comm->error_lock);
  if (atomic_load(&comm->async_error) == HC_OK) {
    snprintf(comm->async_error_text, sizeof(comm->async_error_text), "%s%s%s", comm->config.comm_name,
             comm->config.comm_name[0] ? ": " : "", hc_last_error());
    atomic_store(&comm->async_error, r);
  }
  pthread_mutex_unlock(&comm->error_lock);
}

void hc_comm_fail(struct hetcclComm *comm, hc_result_t r) {
  hc_comm_set_async_error(comm, r);
  /* Closing every connection now makes each peer's next wait on this rank
   * fail at once, and so on round the job: a dead rank becomes an error
   * on every survivor without each one waiting for its deadline. A notice
   * first names the rank this one blames, so that the others blame it too
   * rather than this rank, which only saw it first. */
  hc_net_set_notice(&comm->nets, hc_blamed());
  /* A GPU comm fails on the engine thread: its streams may still copy
   * through the windows of its shm segments, and its owner thread may be
   * in a call. The engine's notice in each window tells those peers;
   * destroy unmaps the segments and ends the bootstrap. */
  const bool gpu = comm->config.device_kind != HC_MEM_HOST;
  hc_net_set_close(&comm->nets, comm->links.peer, comm->links.peer ? comm->nranks : 0, gpu);
  if (gpu) return;
  hc_bootstrap_destroy(comm->boot);
  comm->boot = NULL;
}

/* Registers (or unregisters) the mapping of every window with this rank's
 * GPU driver, so that its streams copy into the slots at full speed and
 * wait on and write the counters. */
static hc_result_t windows_register(struct hetcclComm *comm, bool on) {
  const struct hc_dev_ops *gpu = hc_dev_get(comm->config.device_kind);
  hc_result_t r = HC_OK;
  for (int i = 0; i < comm->nranks && comm->plan_ctx.windows; i++) {
    const struct hc_net_window *w = &comm->plan_ctx.windows[i].w;
    if (w->bytes == 0) continue;
    hc_result_t e =
        on ? hc_dev_host_register(gpu, w->mapping, w->mapping_bytes) : hc_dev_host_unregister(gpu, w->mapping);
    if (e != HC_OK && r == HC_OK) r = e;
  }
  return r;
}

/* A pair whose transport offers windows (shm) has them where either rank
 * asked for them. */
static bool pair_has_window(const struct hetcclComm *comm, int peer) {
  return hc_link_offers_window(&comm->links.peer[peer]) &&
         (comm->peers[comm->rank].net.window || comm->peers[peer].net.window);
}

/* A rank that takes turns with rank r on r's GPU, or -1: r then runs no
 * programs (api/proxy.c). */
static int gpu_sharer(const struct hc_peer_info *peers, int nranks, int r) {
  for (int i = 0; i < nranks; i++)
    if (hc_peers_time_slice_gpu(&peers[r], &peers[i])) return i;
  return -1;
}

/* hc_peer_info.ll_bytes: a GPU rank runs LL copies in programs only
 * (exec/enqueue.c), so it offers them where its programs can run as
 * kernels, and no larger than those; ll_offers_confirm withdraws the offer
 * where its kernels then fail to build. */
static int32_t ll_bytes_offered(const struct hc_config *config) {
  int64_t ll = hc_param_int(HC_P_LL_BYTES);
  if (config->device_kind == HC_MEM_HOST) return (int32_t)ll;
  const struct hc_dev_caps caps = hc_dev_caps(config->device_kind);
  if (!caps.runtime_compile || !caps.reduce_reads_host) return 0;
  return (int32_t)HC_MIN(ll, hc_param_int(HC_P_GPU_PROGRAM_BYTES));
}

/* What rank r's pairs may carry in LL form, from the peer table: its
 * offer, except that a GPU rank that time-slices its GPU runs no programs,
 * so it has none. */
static int32_t rank_ll_bytes(const struct hetcclComm *comm, int r) {
  const struct hc_peer_info *p = &comm->peers[r];
  if (p->device_kind != HC_MEM_HOST && gpu_sharer(comm->peers, comm->nranks, r) >= 0) return 0;
  return HC_MAX(p->ll_bytes, 0);
}

/* The LL pieces of the pair with peer (plan.h, hc_plan_window.ll_bytes):
 * both ranks compute the same from the peer table. */
static size_t pair_ll_bytes(const struct hetcclComm *comm, int peer) {
  return (size_t)HC_MIN(rank_ll_bytes(comm, comm->rank), rank_ll_bytes(comm, peer));
}

/* A GPU rank offered LL from its backend's capabilities, before it knew
 * whether any pair would use it; whether its kernels build and load, which
 * LL needs, is known only once they are built. Where a pair may use LL,
 * every GPU rank that offered it builds them now (the same as its first
 * reduction would), and the ranks exchange what they can keep: a rank
 * whose kernels fail runs its pairs without LL, and its reductions on the
 * host, instead of failing a call. Every rank decides from the same peer
 * table whether to join the all-gather. */
static hc_result_t ll_offers_confirm(struct hetcclComm *comm) {
  bool gpu_offers = false;
  for (int i = 0; i < comm->nranks; i++)
    gpu_offers |= comm->peers[i].device_kind != HC_MEM_HOST && rank_ll_bytes(comm, i) > 0;
  const bool vendor_runs_all = comm->ngroups == 1 && comm->group_vendor[0];
  if (!gpu_offers || vendor_runs_all || comm->nranks == 1) return HC_OK;
  struct hc_peer_info *me = &comm->peers[comm->rank];
  int32_t *kept;
  HC_TRY(hc_calloc(&kept, (size_t)comm->nranks, sizeof(*kept), "LL offers"));
  kept[comm->rank] = me->ll_bytes;
  hc_result_t r = HC_OK;
  if (me->device_kind != HC_MEM_HOST && rank_ll_bytes(comm, comm->rank) > 0) {
    bool kernels = false;
    r = hc_dev_build_kernels(hc_dev_get(me->device_kind), comm->config.device_id, &kernels);
    if (r != HC_OK || !kernels) {
      kept[comm->rank] = 0;
      HC_INFO(HC_API, "rank %d: no kernels on device %d: its window pieces travel without the LL form", comm->rank,
              comm->config.device_id);
    }
  }
  /* A failure here still joins the all-gather, so that no rank waits for
   * this one. */
  const hc_result_t gathered = hc_bootstrap_allgather(comm->boot, kept, sizeof(*kept));
  if (gathered == HC_OK)
    for (int i = 0; i < comm->nranks; i++) comm->peers[i].ll_bytes = kept[i];
  free(kept);
  return r != HC_OK ? r : gathered;
}

/* The LL slots of one direction of a window (plan.h, hc_plan_window). */
static size_t ll_region_bytes(size_t ll_bytes) { return HC_WINDOW_SLOTS * hc_ll_words(ll_bytes) * sizeof(uint64_t); }

/* Lays out w for the pair (plan.h, hc_plan_window): the data slots, then
 * the LL slots. Both ranks of the pair lay it out alike. The window a GPU
 * rank asks for has room for its LL slots besides slots of a chunk each
 * (phase_transports_open), and a pair's ll_bytes is at most that rank's. */
static void window_layout(struct hc_plan_window *w, size_t ll_bytes) {
  size_t ll_region = ll_region_bytes(ll_bytes);
  if (ll_region + HC_WINDOW_SLOTS * 4096 > w->w.bytes) ll_bytes = ll_region = 0;
  w->ll_bytes = ll_bytes;
  w->slot_bytes = (w->w.bytes - ll_region) / HC_WINDOW_SLOTS / 4096 * 4096;
  w->ll_tx = ll_bytes ? (uint64_t *)(void *)(w->w.tx + w->w.bytes - ll_region) : NULL;
  w->ll_rx = ll_bytes ? (uint64_t *)(void *)(w->w.rx + w->w.bytes - ll_region) : NULL;
}

/* Pairs with windows connect now, at init, and take the windows of their
 * segment; staging then moves their transfers through them (plan.h,
 * hc_plan_window). */
static hc_result_t windows_open(struct hetcclComm *comm) {
  int npairs = 0;
  for (int i = 0; i < comm->nranks; i++) npairs += pair_has_window(comm, i);
  if (npairs == 0) return HC_OK;
  HC_TRY(hc_calloc(&comm->plan_ctx.windows, (size_t)comm->nranks, sizeof(*comm->plan_ctx.windows), "windows"));
  uint64_t deadline = hc_deadline_ns();
  size_t slot_bytes = 0, ll_bytes = 0;
  for (int i = 0; i < comm->nranks; i++) {
    struct hc_link *l = &comm->links.peer[i];
    if (!pair_has_window(comm, i)) continue;
    while (l->conn == NULL) {
      HC_TRY(hc_link_connect(l, i));
      if (l->conn != NULL) break;
      if (hc_now_ns() > deadline)
        return HC_FAIL(HC_ERR_REMOTE, "rank %d: %s connection to rank %d not up within HETCCL_TIMEOUT", comm->rank,
                       l->net->name, i);
      HC_TRY(hc_comm_init_peers_check(comm, "while this rank waited for its shm windows"));
      HC_TRY(hc_link_wait(l, 1));
    }
    struct hc_plan_window *w = &comm->plan_ctx.windows[i];
    hc_link_window(l, &w->w);
    if (w->w.bytes < HC_WINDOW_SLOTS * 4096)
      return HC_FAIL(HC_ERR_INTERNAL, "rank %d: the %s connection with rank %d has no window", comm->rank, l->net->name,
                     i);
    window_layout(w, pair_ll_bytes(comm, i));
    slot_bytes = w->slot_bytes;
    ll_bytes = HC_MAX(ll_bytes, w->ll_bytes);
  }
  if (comm->config.device_kind != HC_MEM_HOST) {
    HC_TRY(windows_register(comm, true));
    comm->windows_registered = true;
  }
  HC_INFO(HC_NET, "rank %d: %d same-host peers through windows of %d slots of %zu KiB; LL form up to %zu bytes",
          comm->rank, npairs, HC_WINDOW_SLOTS, slot_bytes >> 10, ll_bytes);
  return HC_OK;
}

/* How a GPU rank's bytes reach peer, and why, into text (for the INFO
 * line); *direct: straight between GPU memory and the NIC. */
static void gpu_path_of(const struct hetcclComm *comm, int peer, bool *direct, char *text, size_t len) {
  const struct hc_link *l = &comm->links.peer[peer];
  const int mine = comm->peers[comm->rank].group;
  *direct = false;
  if (comm->group_vendor && comm->group_vendor[mine] && comm->peers[peer].group == mine)
    snprintf(text, len, "the vendor library (group mates)");
  else if (pair_has_window(comm, peer))
    snprintf(text, len, "%s window (GPU copies into shared host memory)", l->net->name);
  else if (l->caps.device_memory) {
    *direct = true;
    if (l->caps.device_small)
      snprintf(text, len,
               "%s (messages of up to %zu bytes copied by the GPU into registered device scratch, no host "
               "copy)",
               l->caps.device_path, l->caps.device_min_bytes);
    else
      snprintf(text, len, "%s (messages of up to %zu bytes staged through pinned host memory)", l->caps.device_path,
               l->caps.device_min_bytes);
  } else if (l->caps.device_path[0]) snprintf(text, len, "%s", l->caps.device_path);
  else snprintf(text, len, "staged: %s takes host memory only", l->net->name);
}

/* Which peers a GPU rank's transfers reach with GPU memory straight to the
 * NIC (plan.h, hc_plan_ctx.peer_gdr), and one INFO line saying, per class
 * of peers, which path GPU bytes take and why. Local facts only: the two
 * ends of a pair need not agree, since a staged and a direct transfer are
 * the same bytes on the wire, cut into the same pieces. */
static hc_result_t gdr_choose(struct hetcclComm *comm) {
  if (comm->config.device_kind == HC_MEM_HOST || comm->nranks < 2) return HC_OK;
  HC_TRY(hc_calloc(&comm->peer_gdr, (size_t)comm->nranks, sizeof(bool), "GPU paths"));
  char line[1536], cls[400], other[400];
  size_t at = 0;
  bool done[HC_MAX_LOGGED_PEERS] = {false};
  bool any = false, direct, small_device = true;
  size_t min_bytes = 0;
  for (int i = 0; i < comm->nranks; i++) {
    if (i == comm->rank) continue;
    gpu_path_of(comm, i, &direct, cls, sizeof(cls));
    comm->peer_gdr[i] = direct;
    if (direct) min_bytes = HC_MAX(min_bytes, comm->links.peer[i].caps.device_min_bytes);
    if (direct) small_device &= comm->links.peer[i].caps.device_small;
    any |= direct;
  }
  /* Peers of one class together: "ranks 2,3: gdr dma-buf on mlx5_0". */
  for (int i = 0; i < comm->nranks && i < HC_MAX_LOGGED_PEERS && at < sizeof(line); i++) {
    if (i == comm->rank || done[i]) continue;
    gpu_path_of(comm, i, &direct, cls, sizeof(cls));
    int n = snprintf(line + at, sizeof(line) - at, "%s%d", at ? "; " : "", i);
    at = HC_MIN(at + (size_t)HC_MAX(n, 0), sizeof(line));
    for (int j = i + 1; j < comm->nranks && j < HC_MAX_LOGGED_PEERS && at < sizeof(line); j++) {
      if (j == comm->rank || done[j]) continue;
      gpu_path_of(comm, j, &direct, other, sizeof(other));
      if (strcmp(cls, other) != 0) continue;
      done[j] = true;
      n = snprintf(line + at, sizeof(line) - at, ",%d", j);
      at = HC_MIN(at + (size_t)HC_MAX(n, 0), sizeof(line));
    }
    n = snprintf(line + at, sizeof(line) - at, ": %s", cls);
    at = HC_MIN(at + (size_t)HC_MAX(n, 0), sizeof(line));
  }
  HC_INFO(HC_NET, "rank %d: GPU bytes to ranks %s%s", comm->rank, line,
          comm->nranks > HC_MAX_LOGGED_PEERS ? "; ..." : "");
  if (any) {
    comm->plan_ctx.peer_gdr = comm->peer_gdr;
    comm->plan_ctx.gdr_min_bytes = min_bytes;
    comm->plan_ctx.gdr_small_device = small_device;
  }
  return HC_OK;
}

void hc_comm_free(struct hetcclComm *comm) {
  if (comm == NULL) return;
  hc_comm_task_join(comm);
  const bool vendor_aborted = hc_proxy_destroy(comm->proxy);
  if (vendor_aborted) comm->group_vendor_comm = NULL;
  if (comm->windows_registered) windows_register(comm, false);
  free(comm->plan_ctx.windows);
  free(comm->group_of);
  free(comm->peer_gdr);
  void *vendor_comms[2] = {comm->vendor_comm, comm->group_vendor_comm};
  for (int k = 0; k < 2; k++)
    if (vendor_comms[k])
      (atomic_load(&comm->abort_flag) ? comm->vendor->comm_abort : comm->vendor->comm_destroy)(vendor_comms[k]);
  free(comm->group_vendor);
  hc_exec_memo_free(comm->plan_memo);
  hc_plan_reset(&comm->plan);
  hc_scratch_pool_destroy(comm->plan.pool);
  hc_scratch_pool_destroy(comm->plan.dev_pool);
  hc_net_set_close(&comm->nets, NULL, 0, false);
  hc_bootstrap_destroy(comm->boot);
  hc_exec_links_log_waits(&comm->links);
  hc_host_pool_destroy(comm->links.host_pool);
  free(comm->links.peer);
  free(comm->peers);
  pthread_mutex_destroy(&comm->error_lock);
  comm->magic_head = comm->magic_tail = 0;
  free(comm);
}

/* ---- config ---- */

static const char *mem_kind_name(enum hc_mem_kind k) {
  static const char *const names[] = {"host", "cuda", "hip"};
  return (unsigned)k < HC_ARRAY_LEN(names) ? names[k] : "?";
}

/* Reads the fields the caller's struct has (by its size); UNDEF = default. */
static hc_result_t config_resolve(const hetcclConfig_t *user, struct hc_config *out) {
  *out = (struct hc_config){.blocking = 1, .device_kind = HC_MEM_HOST};
  snprintf(out->group_name, sizeof(out->group_name), "%s", hc_param_str(HC_P_GROUP));
  if (user == NULL) return HC_OK;
  if (user->magic != HETCCL_CONFIG_MAGIC)
    return HC_FAIL(HC_ERR_ARG, "config was not initialised with HETCCL_CONFIG_INITIALIZER (magic 0x%x)", user->magic);
#define HAS(field) (offsetof(hetcclConfig_t, field) + sizeof(user->field) <= user->size)
#define SET(field) (HAS(field) && user->field != HETCCL_CONFIG_UNDEF_INT)
  if (SET(blocking)) out->blocking = user->blocking != 0;
  if (SET(deviceKind)) {
    if (user->deviceKind < hetcclDeviceHost || user->deviceKind > hetcclDeviceHip)
      return HC_FAIL(HC_ERR_ARG, "config.deviceKind %d is not a hetcclDeviceKind_t", user->deviceKind);
    out->device_kind = (enum hc_mem_kind)user->deviceKind;
  }
  if (SET(deviceId)) out->device_id = user->deviceId;
  if (HAS(groupName) && user->groupName) snprintf(out->group_name, sizeof(out->group_name), "%s", user->groupName);
  if (HAS(commName) && user->commName) snprintf(out->comm_name, sizeof(out->comm_name), "%s", user->commName);
#undef SET
#undef HAS
  if (out->device_kind != HC_MEM_HOST && hc_dev_get(out->device_kind) == NULL) {
    const char *why = hc_dev_absent_reason(out->device_kind);
    return HC_FAIL(HC_ERR_USAGE, "config.deviceKind %d (%s): that device backend is off: %s", (int)out->device_kind,
                   mem_kind_name(out->device_kind), why && why[0] ? why : "not loaded");
  }
  return HC_OK;
}

/* ---- init ---- */

/* Groups in order of their lowest rank: the same on every rank. */
static int assign_groups(struct hc_peer_info *peers, int nranks) {
  int ngroups = 0;
  for (int i = 0; i < nranks; i++) {
    peers[i].group = -1;
    for (int j = 0; j < i; j++)
      if (!strcmp(peers[j].group_name, peers[i].group_name)) {
        peers[i].group = peers[j].group;
        break;
      }
    if (peers[i].group < 0) peers[i].group = ngroups++;
  }
  return ngroups;
}

const char *hc_fp8_layout_name(int layout) {
  return layout == HC_FP8_FNUZ ? "fnuz (e4m3fnuz, e5m2fnuz)" : "OCP (e4m3fn, e5m2)";
}

/* What this rank's fp8 buffers hold: HETCCL_FP8_LAYOUT, else the device's
 * (a CPU rank holds what hetccl's host kernels compute: OCP). */
static hc_result_t local_fp8_layout(const struct hc_config *config, enum hc_fp8_layout *out) {
  const char *s = hc_param_str(HC_P_FP8_LAYOUT);
  *out = HC_FP8_OCP;
  if (!strcmp(s, "ocp")) return HC_OK;
  if (!strcmp(s, "fnuz")) {
    *out = HC_FP8_FNUZ;
    return HC_OK;
  }
  if (strcmp(s, "auto") != 0) return HC_FAIL(HC_ERR_USAGE, "HETCCL_FP8_LAYOUT=%s: not ocp, fnuz or auto", s);
  const struct hc_dev_ops *d = config->device_kind == HC_MEM_HOST ? NULL : hc_dev_get(config->device_kind);
  if (d == NULL || !HC_HAS_OP(d, struct hc_dev_ops, fp8_layout)) return HC_OK;
  return hc_dev_fp8_layout(d, config->device_id, out);
}

bool hc_peers_share_gpu(const struct hc_peer_info *a, const struct hc_peer_info *b) {
  if (a->device_kind == HC_MEM_HOST || a->device_kind != b->device_kind || a->net.host != b->net.host) return false;
  if (a->gpu_bus_id[0] && b->gpu_bus_id[0]) return strcasecmp(a->gpu_bus_id, b->gpu_bus_id) == 0;
  return a->device_id == b->device_id;
}

bool hc_peers_time_slice_gpu(const struct hc_peer_info *a, const struct hc_peer_info *b) {
  return a->pid != b->pid && hc_peers_share_gpu(a, b) && !(a->gpu_mps && b->gpu_mps);
}

/* Can the vendor's library run among the ranks of group g: each owns a
 * distinct GPU of one vendor, and each loaded that vendor's library in the
 * same version (NCCL and RCCL do not promise to talk across versions)?
 * Every rank decides it from the same table. */
static bool vendor_can_run(const struct hetcclComm *comm, int g) {
  const struct hc_peer_info *p = comm->peers, *first = NULL;
  for (int i = 0; i < comm->nranks; i++) {
    if (p[i].group != g) continue;
    if (first == NULL) first = &p[i];
    if (!p[i].vendor_ok || p[i].device_kind != first->device_kind || p[i].vendor_version != first->vendor_version)
      return false;
    for (int j = 0; j < i; j++)
      if (p[j].group == g && hc_peers_share_gpu(&p[j], &p[i])) return false;
  }
  return first != NULL;
}

/* Which groups run the vendor's library inside: a comm that is one such
 * group is the vendor's comm (pass-through); in a comm of several groups,
 * those of at least two ranks. The others run hetccl's own algorithms
 * inside, said at INFO. */
static hc_result_t vendor_groups_choose(struct hetcclComm *comm) {
  HC_TRY(hc_calloc(&comm->group_vendor, (size_t)comm->ngroups, sizeof(bool), "group table"));
  const struct hc_peer_info *me = &comm->peers[comm->rank];
  int size = 0;
  for (int i = 0; i < comm->nranks; i++) size += comm->peers[i].group == me->group;
  for (int g = 0; g < comm->ngroups; g++) {
    int n = 0;
    for (int i = 0; i < comm->nranks; i++) n += comm->peers[i].group == g;
    comm->group_vendor[g] = vendor_can_run(comm, g) && (comm->ngroups == 1 || n > 1);
  }
  if (comm->ngroups > 1) comm->plan_ctx.group_vendor = comm->group_vendor;
  if (comm->ngroups > 1 && size > 1 && me->device_kind != HC_MEM_HOST && !comm->group_vendor[me->group])
    HC_INFO(HC_VENDOR, "rank %d: group %s of %d ranks runs hetccl's own algorithms inside (%s)", comm->rank,
            me->group_name, size,
            !me->vendor_ok ? "no vendor library here, or HETCCL_VENDOR=0"
                           : "some of its ranks share a GPU, or lack the vendor library, or are of another kind");
  return HC_OK;
}

/* The vendor's communicator of this rank's group, when its group runs the
 * vendor's library. The unique id of each such group's first rank travels
 * through hetccl's bootstrap, in one all-gather that every rank joins. */
static hc_result_t vendor_comms_init(struct hetcclComm *comm) {
  const int mine = comm->peers[comm->rank].group;
  bool any = false;
  for (int g = 0; g < comm->ngroups; g++) any |= comm->group_vendor[g];
  if (!any) return HC_OK;
  int first = -1, index = 0, size = 0;
  for (int i = 0; i < comm->nranks; i++) {
    if (comm->peers[i].group != mine) continue;
    if (first < 0) first = i;
    if (i < comm->rank) index++;
    size++;
  }
  const struct hc_vendor *v = comm->group_vendor[mine] ? hc_vendor_get(comm->config.device_kind) : NULL;
  hc_result_t r = HC_OK;
  hc_vendor_id *ids;
  HC_TRY(hc_calloc(&ids, (size_t)comm->nranks, sizeof(*ids), "vendor ids"));
  /* A failure here still joins the all-gather, so that no rank waits for
   * this one; the group's other ranks then fail to reach the vendor. */
  hc_result_t made =
      v && first == comm->rank ? hc_vendor_check(v, NULL, v->get_unique_id(&ids[comm->rank]), "GetUniqueId") : HC_OK;
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, ids, sizeof(*ids)), r, out);
  HC_TRY_GOTO(made, r, out);
  if (v == NULL) goto out;
  void *vc = NULL;
  HC_TRY_GOTO(hc_comm_vendor_init_watched_blocking(comm, v, size, ids[first], index, &vc), r, out);
  comm->vendor = v;
  if (comm->ngroups == 1) {
    comm->vendor_comm = vc;
    HC_INFO(HC_VENDOR, "rank %d: pass-through to %s %d (%s)", comm->rank, v->name, v->version, v->path);
  } else {
    comm->group_vendor_comm = vc;
    HC_INFO(HC_VENDOR, "rank %d: group %s runs %s %d inside (rank %d of %d there)", comm->rank,
            comm->peers[comm->rank].group_name, v->name, v->version, index, size);
  }
out:
  free(ids);
  return r;
}

/* ---- init, phase by phase (comm_init below lists them) ---- */

static hc_result_t phase_bootstrap(struct hetcclComm *comm) {
  return hc_bootstrap_create(comm->id, comm->rank, comm->nranks, &comm->abort_flag, &comm->boot);
}

/* net: opens each transport this rank uses; its record goes into the
 * peer table for the exchange. */
static hc_result_t phase_transports_open(struct hetcclComm *comm) {
  const struct hc_config *config = &comm->config;
  struct hc_net_args net_args = {.rank = comm->rank,
                                 .nranks = comm->nranks,
                                 .abort_flag = &comm->abort_flag,
                                 .device_kind = (int)config->device_kind,
                                 .device_id = config->device_id,
                                 .sig_explain = hc_plan_sig_explain};
  HC_TRY(hc_bootstrap_id_secret(comm->id, net_args.secret));
  if (config->device_kind != HC_MEM_HOST && hc_param_int(HC_P_SHM_WINDOW))
    net_args.window_bytes =
        HC_WINDOW_SLOTS * hc_plan_chunk_bytes(true) + ll_region_bytes((size_t)hc_param_int(HC_P_LL_BYTES));
  HC_TRY(hc_calloc(&comm->peers, (size_t)comm->nranks, sizeof(*comm->peers), "peer table"));
  return hc_net_set_open(&comm->nets, &net_args, &comm->peers[comm->rank].net);
}

/* bootstrap: every rank's record (device, group, vendor, fp8, transports)
 * to every rank. */
static hc_result_t phase_peers_exchange(struct hetcclComm *comm) {
  const struct hc_config *config = &comm->config;
  struct hc_peer_info *me = &comm->peers[comm->rank];
  const struct hc_net_record net = me->net; /* phase_transports_open's */
  *me = (struct hc_peer_info){.magic = HC_PEER_INFO_MAGIC,
                              .rank = comm->rank,
                              .pid = (int32_t)getpid(),
                              .device_kind = config->device_kind,
                              .device_id = config->device_id,
                              .net = net};
  snprintf(me->group_name, sizeof(me->group_name), "%s",
           config->group_name[0] ? config->group_name : mem_kind_name(config->device_kind));
  const struct hc_vendor *my_vendor =
      config->device_kind != HC_MEM_HOST && hc_param_int(HC_P_VENDOR) ? hc_vendor_get(config->device_kind) : NULL;
  me->vendor_ok = my_vendor != NULL;
  me->vendor_version = my_vendor ? my_vendor->version : 0;
  me->ll_bytes = ll_bytes_offered(config);
  me->gpu_mps = config->device_kind != HC_MEM_HOST && hc_dev_caps(config->device_kind).mps;
  enum hc_fp8_layout fp8;
  HC_TRY(local_fp8_layout(config, &fp8));
  me->fp8_layout = (int32_t)fp8;
  char why[256];
  if (!hc_dev_gpu_bus_id(config->device_kind, config->device_id, me->gpu_bus_id, sizeof(me->gpu_bus_id), why,
                         sizeof(why)) &&
      config->device_kind != HC_MEM_HOST)
    HC_INFO(HC_API,
            "rank %d: no PCI bus id for device %d (%s): ranks of this host that share a GPU are told by "
            "device number",
            comm->rank, config->device_id, why);
  HC_TRY(hc_bootstrap_allgather(comm->boot, comm->peers, sizeof(*comm->peers)));
  /* Every later use reads the names as C strings. */
  for (int i = 0; i < comm->nranks; i++) {
    const struct hc_peer_info *p = &comm->peers[i];
    if (p->magic != HC_PEER_INFO_MAGIC || p->rank != i || !memchr(p->group_name, 0, sizeof(p->group_name)) ||
        !memchr(p->gpu_bus_id, 0, sizeof(p->gpu_bus_id)))
      return HC_FAIL(HC_ERR_INTERNAL, "init: rank %d published a malformed peer record", i);
  }
  return HC_OK;
}

/* From the peer table, the same on every rank: groups, and whether fp8
 * means the same everywhere. */
static hc_result_t phase_groups(struct hetcclComm *comm) {
  const struct hc_peer_info *peers = comm->peers;
  comm->ngroups = assign_groups(comm->peers, comm->nranks);
  const struct hc_peer_info *me = &peers[comm->rank];
  const int sharer = gpu_sharer(peers, comm->nranks, comm->rank);
  if (sharer >= 0) {
    comm->gpu_time_sliced = true;
    HC_INFO(HC_API,
            "rank %d: rank %d, another process, uses the same GPU (%s): the GPU time-slices the two processes' "
            "contexts, and each wait of one on the other costs a switch (100-300 us); CUDA MPS, or a GPU per "
            "process, does not pay it",
            comm->rank, sharer, me->gpu_bus_id[0] ? me->gpu_bus_id : "same device number");
  }
  comm->fp8_odd_rank = -1;
  for (int i = 1; i < comm->nranks && comm->fp8_odd_rank < 0; i++)
    if (peers[i].fp8_layout != peers[0].fp8_layout) comm->fp8_odd_rank = i;
  if (comm->fp8_odd_rank >= 0)
    HC_INFO(HC_API,
            "rank %d: ranks 0 and %d hold different fp8 encodings (%s, %s): fp8 calls on this comm are "
            "refused",
            comm->rank, comm->fp8_odd_rank, hc_fp8_layout_name(peers[0].fp8_layout),
            hc_fp8_layout_name(peers[comm->fp8_odd_rank].fp8_layout));
  return HC_OK;
}

/* net: each pair over the transport of the highest priority that can
 * connect it (both ends decide from the same two records); exec: the
 * wait policy of the links. */
static hc_result_t phase_links(struct hetcclComm *comm) {
  const struct hc_peer_info *me = &comm->peers[comm->rank];
  bool local_gpu = false;
  comm->local_ranks = 0;
  for (int i = 0; i < comm->nranks; i++) {
    const bool local = comm->peers[i].net.host == me->net.host;
    comm->local_ranks += local;
    local_gpu |= local && comm->peers[i].device_kind != HC_MEM_HOST;
  }
  HC_TRY(hc_exec_links_init(&comm->links, comm->rank, comm->nranks, &comm->abort_flag, comm->local_ranks));
  for (int i = 0; i < comm->nranks; i++) {
    int t;
    if (i == comm->rank) continue;
    HC_TRY(hc_net_link_choose(&comm->nets, comm->rank, &me->net, i, &comm->peers[i].net, &comm->links.peer[i], &t));
    /* exec watches a same-host peer's process while it waits on its windows */
    if (comm->peers[i].net.host == me->net.host) comm->links.peer[i].pid = comm->peers[i].pid;
  }
  hc_exec_links_check_cpus(&comm->links);
  if (comm->config.device_kind == HC_MEM_HOST) {
    int helpers = hc_param_int(HC_P_HOST_HELPERS);
    if (helpers < 0) helpers = hc_host_pool_auto_helpers(comm->local_ranks, local_gpu);
    const size_t split_bytes = (size_t)hc_param_int(HC_P_HOST_SPLIT_BYTES);
    HC_TRY(hc_host_pool_create(helpers, split_bytes, &comm->links.host_pool));
    if (helpers > 0)
      HC_INFO(HC_EXEC, "rank %d: %d helper threads for copies and reductions from %zu bytes", comm->rank, helpers,
              split_bytes);
  }
  comm->stage_device =
      comm->config.device_kind != HC_MEM_HOST && !hc_net_links_reach_device(comm->links.peer, comm->nranks);
  return HC_OK;
}

/* hc_plan_ctx.window_reduce_bytes: a CPU rank reduces every window piece
 * in its slot, a GPU rank the small ones where its reductions read mapped
 * host memory as it is addressed on the host. On the H200 a kernel that
 * read pieces of up to 1 MiB across the bus beat the copy engine and a
 * kernel on device memory; at 4 MiB it was even, and the ring's pieces of
 * 4-8 MiB lost (bench/gpu/README.md, 2026-12-06). */
static size_t window_reduce_bytes(enum hc_mem_kind kind) {
  const size_t limit = (size_t)hc_param_int(HC_P_WINDOW_REDUCE_BYTES);
  if (limit == 0) return 0; /* off for every rank */
  if (kind == HC_MEM_HOST) return SIZE_MAX;
  return hc_dev_caps(kind).reduce_reads_host ? limit : 0;
}

/* plan: what every plan of this comm depends on besides the call, and its
 * scratch pools. */
static hc_result_t phase_plans(struct hetcclComm *comm) {
  const struct hc_config *config = &comm->config;
  bool any_gpu = false, all_gpu = true;
  for (int i = 0; i < comm->nranks; i++) {
    any_gpu |= comm->peers[i].device_kind != HC_MEM_HOST;
    all_gpu &= comm->peers[i].device_kind != HC_MEM_HOST;
  }
  const bool one_host = comm->local_ranks == comm->nranks;
  hc_plan_sig_configure();
  const struct hc_dev_ops *gpu = config->device_kind == HC_MEM_HOST ? NULL : hc_dev_get(config->device_kind);
  HC_TRY(hc_scratch_pool_create(gpu ? HC_POOL_PINNED : HC_POOL_HOST, gpu, config->device_id, &comm->plan.pool));
  if (gpu) HC_TRY(hc_scratch_pool_create(HC_POOL_DEVICE, gpu, config->device_id, &comm->plan.dev_pool));
  comm->plan_ctx = (struct hc_plan_ctx){
      .rank = comm->rank,
      .nranks = comm->nranks,
      .all_gpu = all_gpu,
      .one_host = one_host,
      /* Only where every rank is here do all of them see the same cores. */
      .cores_shared = one_host && comm->links.cores_shared,
      .ngroups = 1,
      .window_reduce_bytes = window_reduce_bytes(config->device_kind),
  };
  HC_TRY(hc_plan_ctx_from_params(&comm->plan_ctx, any_gpu));
  comm->pull_min_bytes = hc_param_int(HC_P_SHM_CMA_TUNE) ? hc_net_set_pull_min_bytes(&comm->nets) : 0;
  if (comm->ngroups == 1) return HC_OK;
  const struct hc_peer_info *me = &comm->peers[comm->rank];
  HC_TRY(hc_calloc(&comm->group_of, (size_t)comm->nranks, sizeof(int), "group table"));
  for (int i = 0; i < comm->nranks; i++) comm->group_of[i] = comm->peers[i].group;
  comm->plan_ctx.ngroups = comm->ngroups;
  comm->plan_ctx.group_of = comm->group_of;
  int mine = 0;
  for (int i = 0; i < comm->nranks; i++) mine += comm->peers[i].group == me->group;
  if (comm->ngroups < comm->nranks)
    HC_INFO(HC_PLAN, "rank %d: %d groups; group %s has %d ranks; collectives are hierarchical", comm->rank,
            comm->ngroups, me->group_name, mine);
  return HC_OK;
}

/* device: later calls of this thread go to the comm's GPU. */
static hc_result_t phase_device(struct hetcclComm *comm) {
  if (comm->config.device_kind == HC_MEM_HOST) return HC_OK;
  return hc_dev_set_device(hc_dev_get(comm->config.device_kind), comm->config.device_id);
}

/* exec: a GPU comm that does not pass every call to the vendor joins the
 * process's progress engine. */
static hc_result_t phase_engine(struct hetcclComm *comm) {
  if (comm->config.device_kind == HC_MEM_HOST || comm->vendor_comm != NULL) return HC_OK;
  return hc_proxy_create(comm, &comm->proxy);
}

/* The comm's one INFO line: where it runs and how many peers each
 * transport reaches. */
static hc_result_t phase_report(struct hetcclComm *comm) {
  char links_said[128];
  size_t said = 0;
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) {
    int n = 0;
    for (int i = 0; i < comm->nranks; i++) n += comm->links.peer[i].net == hc_transports[t].ops;
    said += (size_t)snprintf(links_said + said, sizeof(links_said) - HC_MIN(said, sizeof(links_said)),
                             t ? ", %d over %s" : "%d peers over %s", n, hc_transports[t].links_name);
  }
  HC_INFO(HC_API, "comm %p%s%s rank %d of %d up: device %s:%d, group %s (%d groups), %s", (void *)comm,
          HC_COMM_NAME_ARGS(comm), comm->rank, comm->nranks, mem_kind_name(comm->config.device_kind),
          comm->config.device_id, comm->peers[comm->rank].group_name, comm->ngroups, links_said);
  return HC_OK;
}

/* Init in the order each phase needs the ones before it; the first that
 * fails ends it, and hc_comm_free takes the half-built comm. */
static const struct init_phase {
  const char *name;
  hc_result_t (*run)(struct hetcclComm *comm);
} init_phases[] = {
    {"bootstrap", phase_bootstrap},          /* bootstrap: the ring of ranks, authenticated */
    {"transports", phase_transports_open},   /* net: open what this rank uses */
    {"peers", phase_peers_exchange},         /* bootstrap: all-gather of the peer records */
    {"groups", phase_groups},                /* api: groups and fp8, from the records */
    {"links", phase_links},                  /* net: a transport per pair; exec: wait policy */
    {"plans", phase_plans},                  /* plan: plan context and scratch pools */
    {"vendor groups", vendor_groups_choose}, /* vendor: which groups run the vendor's library */
    {"LL offers", ll_offers_confirm},        /* device: kernels built where a pair may use LL */
    {"windows", windows_open},               /* net + device: shm windows, registered with the GPU */
    {"GPU paths", gdr_choose},               /* plan: which peers' GPU bytes go straight to the NIC */
    {"device", phase_device},                /* device: this thread on the comm's GPU */
    {"vendor comms", vendor_comms_init},     /* vendor: the group's vendor communicator */
    {"engine", phase_engine},                /* exec: the progress engine, for GPU comms */
    {"report", phase_report},
};

/* Runs the phases in order; the first that fails ends it (the caller
 * frees the half-built comm). A nonblocking comm runs this on a thread of
 * its own (comm_async.c). */
hc_result_t hc_comm_build(struct hetcclComm *comm) {
  hc_result_t r = HC_OK;
  for (size_t p = 0; p < HC_ARRAY_LEN(init_phases) && r == HC_OK; p++) {
    r = init_phases[p].run(comm);
    HC_TRACE(HC_API, "rank %d: init: %s %s", comm->rank, init_phases[p].name, r == HC_OK ? "done" : "failed");
  }
  return r;
}

/* A blocking comm is built here, on the caller's thread; a nonblocking
 * one is handed out at once and built on a thread of its own. */
static hc_result_t comm_init(struct hetcclComm **out, int nranks, const uint8_t id[HC_UNIQUE_ID_BYTES], int rank,
                             const struct hc_config *config) {
  struct hetcclComm *comm;
  *out = NULL;
  HC_TRY(hc_calloc(&comm, 1, sizeof(*comm), "communicator"));
  pthread_mutex_init(&comm->error_lock, NULL);
  comm->magic_head = HC_COMM_MAGIC_HEAD;
  comm->magic_tail = HC_COMM_MAGIC_TAIL;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->config = *config;
  memcpy(comm->id, id, HC_UNIQUE_ID_BYTES);
  atomic_init(&comm->abort_flag, false);
  atomic_init(&comm->state, HC_COMM_READY);
  hc_log_set_comm(rank, config->comm_name);
  if (!config->blocking) return hc_comm_init_async(comm, out);
  const hc_result_t r = hc_comm_build(comm);
  if (r != HC_OK) {
    hc_comm_free(comm);
    return r;
  }
  *out = comm;
  return HC_OK;
}

static hc_result_t check_init_args(hetcclComm_t *comm, int nranks, int rank) {
  if (comm == NULL) return HC_FAIL(HC_ERR_ARG, "CommInitRank: comm pointer is NULL");
  *comm = NULL;
  if (nranks < 1) return HC_FAIL(HC_ERR_ARG, "CommInitRank: nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return HC_FAIL(HC_ERR_ARG, "CommInitRank: rank %d is not in [0, %d)", rank, nranks);
  return HC_OK;
}

static hc_result_t api_CommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank,
                                          hetcclConfig_t *config) {
  struct hc_config cfg;
  HC_TRY(hc_params_load());
  HC_TRY(check_init_args(comm, nranks, rank));
  HC_TRY(config_resolve(config, &cfg));
  return comm_init(comm, nranks, (const uint8_t *)commId.internal, rank, &cfg);
}

static hc_result_t api_CommInitRank(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank) {
  return api_CommInitRankConfig(comm, nranks, commId, rank, NULL);
}

static hc_result_t api_CommInitFromEnv(hetcclComm_t *comm, hetcclConfig_t *config) {
  struct hc_launch_env env;
  struct hc_config cfg;
  uint8_t id[HC_UNIQUE_ID_BYTES];
  HC_TRY(hc_params_load());
  if (comm == NULL) return HC_FAIL(HC_ERR_ARG, "CommInitFromEnv: comm pointer is NULL");
  *comm = NULL;
  HC_TRY(config_resolve(config, &cfg));
  HC_TRY(hc_launch_env_read(&env));
  HC_TRY(check_init_args(comm, env.nranks, env.rank));
  HC_INFO(HC_BOOT, "rank %d of %d from %s, root %s:%d", env.rank, env.nranks, env.launcher, env.master_addr,
          env.master_port);
  HC_TRY(hc_bootstrap_id_from_addr(env.master_addr, env.master_port, env.secret, env.rank == 0, id));
  return comm_init(comm, env.nranks, id, env.rank, &cfg);
}

static hc_result_t api_GetUniqueId(hetcclUniqueId *uniqueId) {
  HC_TRY(hc_params_load());
  if (uniqueId == NULL) return HC_FAIL(HC_ERR_ARG, "GetUniqueId: uniqueId is NULL");
  memset(uniqueId, 0, sizeof(*uniqueId));
  return hc_bootstrap_id_create((uint8_t *)uniqueId->internal);
}

/* ---- split ---- */

struct split_record {
  int32_t color, key;
  uint8_t id[HC_UNIQUE_ID_BYTES]; /* the new comm's id, from its first member */
};

static hc_result_t api_CommSplit(hetcclComm_t comm, int color, int key, hetcclComm_t *newcomm, hetcclConfig_t *config) {
  hc_result_t r;
  HC_TRY(hc_comm_check(comm, "CommSplit"));
  if (comm->boot == NULL)
    return HC_FAIL(HC_ERR_USAGE, "CommSplit: the communicator failed earlier and must be destroyed: %s",
                   comm->async_error_text);
  if (newcomm == NULL) return HC_FAIL(HC_ERR_ARG, "CommSplit: newcomm is NULL");
  *newcomm = NULL;
  if (color < 0 && color != HETCCL_SPLIT_NOCOLOR)
    return HC_FAIL(HC_ERR_ARG, "CommSplit: color %d must be >= 0 or HETCCL_SPLIT_NOCOLOR", color);
  struct hc_config cfg = comm->config;
  if (config) HC_TRY(config_resolve(config, &cfg));
  const int n = comm->nranks;
  struct split_record *recs;
  HC_TRY(hc_calloc(&recs, (size_t)n, sizeof(*recs), "split records"));
  recs[comm->rank].color = color;
  recs[comm->rank].key = key;
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, recs, sizeof(*recs)), r, out);
  /* My position: members of my color ordered by (key, parent rank). */
  int newrank = 0, nnew = 0, leader = -1;
  for (int i = 0; i < n; i++) {
    if (recs[i].color != color) continue;
    nnew++;
    if (recs[i].key < key || (recs[i].key == key && i < comm->rank)) newrank++;
  }
  for (int i = 0; i < n && color != HETCCL_SPLIT_NOCOLOR; i++) {
    if (recs[i].color != color) continue;
    int pos = 0;
    for (int j = 0; j < n; j++)
      if (recs[j].color == color && (recs[j].key < recs[i].key || (recs[j].key == recs[i].key && j < i))) pos++;
    if (pos == 0) leader = i;
  }
  if (color != HETCCL_SPLIT_NOCOLOR && newrank == 0) HC_TRY_GOTO(hc_bootstrap_id_create(recs[comm->rank].id), r, out);
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, recs, sizeof(*recs)), r, out);
  r = HC_OK;
  if (color != HETCCL_SPLIT_NOCOLOR) r = comm_init(newcomm, nnew, recs[leader].id, newrank, &cfg);
  hc_log_set_comm(comm->rank, comm->config.comm_name);
out:
  free(recs);
  return r;
}

/* ---- teardown ---- */

static hc_result_t api_CommFinalize(hetcclComm_t comm) {
  HC_TRY(hc_comm_check(comm, "CommFinalize"));
  /* Host calls complete before they return; a GPU comm's proxy may still
   * have plans to run. */
  if (!comm->config.blocking) return hc_comm_finalize_async(comm);
  if (comm->proxy) HC_TRY(hc_proxy_drain_blocking(comm->proxy));
  atomic_store(&comm->state, HC_COMM_FINALIZED);
  return HC_OK;
}

/* Destroying a comm whose nonblocking init still runs aborts that init
 * (hc_comm_free, hc_comm_task_join); one whose finalize runs waits for it. */
static hc_result_t api_CommDestroy(hetcclComm_t comm) {
  if (comm == NULL) return HC_OK; /* as NCCL */
  HC_TRY(hc_comm_check_handle(comm, "CommDestroy"));
  hc_comm_free(comm);
  return HC_OK;
}

static hc_result_t api_CommAbort(hetcclComm_t comm) {
  if (comm == NULL) return HC_OK;
  HC_TRY(hc_comm_check_handle(comm, "CommAbort"));
  atomic_store(&comm->abort_flag, true);
  hc_comm_task_join(comm);
  /* Calls in flight on other threads see the flag within their 100 ms poll
   * slice and return; the comm is freed only once they are out. */
  uint64_t deadline = hc_now_ns() + 10ull * 1000000000ull;
  while (atomic_load(&comm->active_calls) > 0 && hc_now_ns() < deadline) usleep(1000);
  if (atomic_load(&comm->active_calls) > 0)
    return HC_FAIL(HC_ERR_INTERNAL, "CommAbort: calls still in flight after 10 s; comm leaked");
  hc_comm_free(comm);
  return HC_OK;
}

/* ---- queries ---- */

static hc_result_t api_CommCount(const hetcclComm_t comm, int *count) {
  HC_TRY(hc_comm_check(comm, "CommCount"));
  if (count == NULL) return HC_FAIL(HC_ERR_ARG, "CommCount: count is NULL");
  *count = comm->nranks;
  return HC_OK;
}

static hc_result_t api_CommUserRank(const hetcclComm_t comm, int *rank) {
  HC_TRY(hc_comm_check(comm, "CommUserRank"));
  if (rank == NULL) return HC_FAIL(HC_ERR_ARG, "CommUserRank: rank is NULL");
  *rank = comm->rank;
  return HC_OK;
}

static hc_result_t api_CommGetAsyncError(hetcclComm_t comm, hetcclResult_t *asyncError) {
  HC_TRY(hc_comm_check_handle(comm, "CommGetAsyncError"));
  if (asyncError == NULL) return HC_FAIL(HC_ERR_ARG, "CommGetAsyncError: asyncError is NULL");
  const int state = atomic_load(&comm->state);
  if (state == HC_COMM_INITIALISING || state == HC_COMM_FINALIZING) {
    *asyncError = hetcclInProgress;
    return HC_OK;
  }
  *asyncError = (hetcclResult_t)atomic_load(&comm->async_error);
  void *vendor_comm = comm->vendor_comm ? comm->vendor_comm : comm->group_vendor_comm;
  if (*asyncError == hetcclSuccess && vendor_comm) {
    int vendor_error = 0;
    hc_vendor_async_error(comm->vendor, vendor_comm, &vendor_error);
    /* The sub-comm is nonblocking inside; this comm is not: a call still
     * settling in the library is no error (hc_vendor_check waits for it). */
    *asyncError = vendor_error == HC_VENDOR_IN_PROGRESS ? hetcclSuccess : (hetcclResult_t)vendor_error;
  }
  return HC_OK;
}

/* ---- errors, version ---- */

HC_EXPORT const char *hetcclGetErrorString(hetcclResult_t result) {
  if ((unsigned)result > (unsigned)hetcclInProgress) return "unknown result code";
  return hc_result_str((hc_result_t)result);
}

HC_EXPORT const char *hetcclGetLastError(hetcclComm_t comm) {
  const char *text = hc_last_error();
  if (text[0] == 0 && comm != NULL && hc_comm_check_handle(comm, "GetLastError") == HC_OK)
    return comm->async_error_text;
  return text;
}

static hc_result_t api_GetVersion(int *version) {
  if (version == NULL) return HC_FAIL(HC_ERR_ARG, "GetVersion: version is NULL");
  *version = HETCCL_VERSION_CODE;
  return HC_OK;
}

/* ---- exports: the public names over the functions above ---- */

HC_EXPORT hetcclResult_t hetcclCommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank,
                                                  hetcclConfig_t *config) {
  return (hetcclResult_t)api_CommInitRankConfig(comm, nranks, commId, rank, config);
}

HC_EXPORT hetcclResult_t hetcclCommInitRank(hetcclComm_t *comm, int nranks, hetcclUniqueId commId, int rank) {
  return (hetcclResult_t)api_CommInitRank(comm, nranks, commId, rank);
}

HC_EXPORT hetcclResult_t hetcclCommInitFromEnv(hetcclComm_t *comm, hetcclConfig_t *config) {
  return (hetcclResult_t)api_CommInitFromEnv(comm, config);
}

HC_EXPORT hetcclResult_t hetcclGetUniqueId(hetcclUniqueId *uniqueId) {
  return (hetcclResult_t)api_GetUniqueId(uniqueId);
}

HC_EXPORT hetcclResult_t hetcclCommSplit(hetcclComm_t comm, int color, int key, hetcclComm_t *newcomm,
                                         hetcclConfig_t *config) {
  return (hetcclResult_t)api_CommSplit(comm, color, key, newcomm, config);
}

HC_EXPORT hetcclResult_t hetcclCommFinalize(hetcclComm_t comm) { return (hetcclResult_t)api_CommFinalize(comm); }

HC_EXPORT hetcclResult_t hetcclCommDestroy(hetcclComm_t comm) { return (hetcclResult_t)api_CommDestroy(comm); }

HC_EXPORT hetcclResult_t hetcclCommAbort(hetcclComm_t comm) { return (hetcclResult_t)api_CommAbort(comm); }

HC_EXPORT hetcclResult_t hetcclCommCount(const hetcclComm_t comm, int *count) {
  return (hetcclResult_t)api_CommCount(comm, count);
}

HC_EXPORT hetcclResult_t hetcclCommUserRank(const hetcclComm_t comm, int *rank) {
  return (hetcclResult_t)api_CommUserRank(comm, rank);
}

HC_EXPORT hetcclResult_t hetcclCommGetAsyncError(hetcclComm_t comm, hetcclResult_t *asyncError) {
  return (hetcclResult_t)api_CommGetAsyncError(comm, asyncError);
}

HC_EXPORT hetcclResult_t hetcclGetVersion(int *version) { return (hetcclResult_t)api_GetVersion(version); }
