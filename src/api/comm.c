/*
 * Communicator lifecycle: init (from an id or the launcher's environment),
 * split, finalize, destroy, abort, queries, and the error and version calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../plan/plan.h"
#include "../util/auth.h"
#include "../vendor/vendor.h"
#include "api_priv.h"
#include "proxy.h"

#define HC_PEER_INFO_MAGIC 0x68637069u


hc_result_t hc_comm_check(const struct hetcclComm *comm, const char *fn) {
  if (comm == NULL) return HC_FAIL(HC_ERR_ARG, "%s: comm is NULL", fn);
  if (comm->magic_head != HC_COMM_MAGIC_HEAD || comm->magic_tail != HC_COMM_MAGIC_TAIL)
    return HC_FAIL(HC_ERR_ARG, "%s: comm %p is not a valid communicator (destroyed or corrupted)",
                   fn, (const void *)comm);
  return HC_OK;
}

void hc_comm_set_async_error(struct hetcclComm *comm, hc_result_t r) {
  pthread_mutex_lock(&comm->error_lock);
  if (atomic_load(&comm->async_error) == HC_OK) {
    snprintf(comm->async_error_text, sizeof(comm->async_error_text), "%s", hc_last_error());
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
  const int culprit = hc_blamed();
  if (culprit >= 0 && comm->socket_ctx) hc_net_socket_notice(comm->socket_ctx, culprit);
  if (culprit >= 0 && comm->shm_ctx) hc_net_shm_notice(comm->shm_ctx, culprit);
  if (comm->socket_ctx) hc_net_socket.close(comm->socket_ctx);
  if (comm->ib_ctx) hc_net_ib.close(comm->ib_ctx);
  comm->socket_ctx = comm->ib_ctx = NULL;
  for (int i = 0; i < comm->nranks && comm->links.peer; i++)
    if (comm->links.peer[i].net != &hc_net_shm) comm->links.peer[i] = (struct hc_link){0};
  /* A GPU comm fails on the engine thread: its streams may still copy
   * through the windows of its shm segments, and its owner thread may be
   * in a call. The engine's notice in each window tells those peers;
   * destroy unmaps the segments and ends the bootstrap. */
  if (comm->config.device_kind != HC_MEM_HOST) return;
  if (comm->shm_ctx) hc_net_shm.close(comm->shm_ctx);
  comm->shm_ctx = NULL;
  for (int i = 0; i < comm->nranks && comm->links.peer; i++) comm->links.peer[i] = (struct hc_link){0};
  hc_bootstrap_destroy(comm->boot);
  comm->boot = NULL;
}

static size_t gpu_chunk_bytes(void) {
  return (size_t)HC_MAX(HC_DIV_UP(hc_param_int(HC_P_GPU_CHUNK_BYTES), 4096) * 4096, 4096);
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
    hc_result_t e = on ? gpu->host_register(w->mapping, w->mapping_bytes) : gpu->host_unregister(w->mapping);
    if (e != HC_OK && r == HC_OK) r = e;
  }
  return r;
}

/* A pair of one host where either rank asked for windows has them. */
static bool pair_has_window(const struct hetcclComm *comm, int peer) {
  return comm->links.peer[peer].net == &hc_net_shm &&
         (comm->peers[comm->rank].shm_window || comm->peers[peer].shm_window);
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
  size_t slot_bytes = 0;
  for (int i = 0; i < comm->nranks; i++) {
    struct hc_link *l = &comm->links.peer[i];
    if (!pair_has_window(comm, i)) continue;
    while (l->conn == NULL) {
      HC_TRY(l->net->connect(l->ctx, i, &l->handle, &l->conn));
      if (l->conn != NULL) break;
      if (hc_now_ns() > deadline)
        return HC_FAIL(HC_ERR_REMOTE, "rank %d: shm connection to rank %d not up within HETCCL_TIMEOUT",
                       comm->rank, i);
      HC_TRY(l->net->wait_blocking(l->ctx, 1));
    }
    struct hc_plan_window *w = &comm->plan_ctx.windows[i];
    l->net->window(l->conn, &w->w);
    if (w->w.bytes < HC_WINDOW_SLOTS * 4096)
      return HC_FAIL(HC_ERR_INTERNAL, "rank %d: the shm segment shared with rank %d has no window", comm->rank, i);
    w->slot_bytes = slot_bytes = w->w.bytes / HC_WINDOW_SLOTS;
  }
  if (comm->config.device_kind != HC_MEM_HOST) {
    HC_TRY(windows_register(comm, true));
    comm->windows_registered = true;
  }
  HC_INFO(HC_NET, "rank %d: %d same-host peers through shm windows of %d slots of %zu KiB", comm->rank, npairs,
          HC_WINDOW_SLOTS, slot_bytes >> 10);
  return HC_OK;
}

void hc_comm_free(struct hetcclComm *comm) {
  if (comm == NULL) return;
  const bool vendor_aborted = hc_proxy_destroy(comm->proxy);
  if (vendor_aborted) comm->group_vendor_comm = NULL;
  if (comm->windows_registered) windows_register(comm, false);
  free(comm->plan_ctx.windows);
  free(comm->group_of);
  void *vendor_comms[2] = {comm->vendor_comm, comm->group_vendor_comm};
  for (int k = 0; k < 2; k++)
    if (vendor_comms[k])
      (atomic_load(&comm->abort_flag) ? comm->vendor->comm_abort : comm->vendor->comm_destroy)(vendor_comms[k]);
  free(comm->group_vendor);
  hc_plan_reset(&comm->plan);
  hc_scratch_pool_destroy(comm->plan.pool);
  hc_scratch_pool_destroy(comm->plan.dev_pool);
  if (comm->socket_ctx) hc_net_socket.close(comm->socket_ctx);
  if (comm->shm_ctx) hc_net_shm.close(comm->shm_ctx);
  if (comm->ib_ctx) hc_net_ib.close(comm->ib_ctx);
  hc_bootstrap_destroy(comm->boot);
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
    return HC_FAIL(HC_ERR_ARG, "config was not initialised with HETCCL_CONFIG_INITIALIZER (magic 0x%x)",
                   user->magic);
#define HAS(field) (offsetof(hetcclConfig_t, field) + sizeof(user->field) <= user->size)
#define SET(field) (HAS(field) && user->field != HETCCL_CONFIG_UNDEF_INT)
  if (SET(blocking)) out->blocking = user->blocking != 0;
  if (SET(deviceKind)) {
    if (user->deviceKind < hetcclDeviceHost || user->deviceKind > hetcclDeviceHip)
      return HC_FAIL(HC_ERR_ARG, "config.deviceKind %d is not a hetcclDeviceKind_t", user->deviceKind);
    out->device_kind = (enum hc_mem_kind)user->deviceKind;
  }
  if (SET(deviceId)) out->device_id = user->deviceId;
  if (HAS(groupName) && user->groupName)
    snprintf(out->group_name, sizeof(out->group_name), "%s", user->groupName);
  if (HAS(commName) && user->commName)
    snprintf(out->comm_name, sizeof(out->comm_name), "%s", user->commName);
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

/* Ranks in one network namespace of one booted host share this; ranks in
 * different namespaces (the two-host tests) do not. */
static uint64_t host_hash(void) {
  char text[512] = "";
  size_t n = 0;
  gethostname(text, 128);
  n = strlen(text);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    n += fread(text + n, 1, 64, f);
    fclose(f);
  }
  /* Shared memory also needs the same pid namespace (CMA, /proc/<pid>)
   * and the same /dev/shm. */
  const char *const ids[] = {"/proc/self/ns/net", "/proc/self/ns/pid", "/dev/shm"};
  for (size_t i = 0; i < HC_ARRAY_LEN(ids); i++) {
    struct stat st;
    if (stat(ids[i], &st) == 0)
      n += (size_t)snprintf(text + n, sizeof(text) - n, ":%llu.%llu", (unsigned long long)st.st_dev,
                            (unsigned long long)st.st_ino);
  }
  uint8_t digest[32];
  hc_sha256(text, n, digest);
  uint64_t h;
  memcpy(&h, digest, sizeof(h));
  return h;
}

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
  return d->fp8_layout(config->device_id, out);
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
      if (p[j].group == g && p[j].host_hash == p[i].host_hash && p[j].device_id == p[i].device_id) return false;
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
  hc_result_t made = v && first == comm->rank ? hc_vendor_check(v, NULL, v->get_unique_id(&ids[comm->rank]),
                                                                "GetUniqueId")
                                              : HC_OK;
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, ids, sizeof(*ids)), r, out);
  HC_TRY_GOTO(made, r, out);
  if (v == NULL) goto out;
  void *vc = NULL;
  HC_TRY_GOTO(hc_vendor_check(v, NULL, v->comm_init_rank(&vc, size, ids[first], index), "CommInitRank"), r, out);
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

/* HETCCL_NET: which transport crosses between hosts. */
enum hc_net_choice { HC_NET_AUTO, HC_NET_IB, HC_NET_SOCKET };

static hc_result_t net_choice_parse(enum hc_net_choice *out) {
  const char *s = hc_param_str(HC_P_NET);
  if (s[0] == '\0') *out = HC_NET_AUTO;
  else if (strcasecmp(s, "IB") == 0) *out = HC_NET_IB;
  else if (strcasecmp(s, "SOCKET") == 0) *out = HC_NET_SOCKET;
  else return HC_FAIL(HC_ERR_USAGE, "HETCCL_NET=%s: must be IB or SOCKET (or empty: ib where usable)", s);
  return HC_OK;
}

/* Opens the ib transport unless HETCCL_NET says socket; a host without a
 * usable RDMA port goes on without it (INFO), unless HETCCL_NET=IB. */
static hc_result_t ib_open(struct hetcclComm *comm, const struct hc_net_args *args, enum hc_net_choice choice,
                           struct hc_net_handle *handle, bool *has_ib) {
  *has_ib = false;
  if (choice == HC_NET_SOCKET || comm->nranks < 2) return HC_OK;
  struct hc_net_caps caps;
  char earlier_error[512]; /* a host without ib is no error of the caller's: its text goes back */
  snprintf(earlier_error, sizeof(earlier_error), "%s", hc_last_error());
  hc_result_t r = hc_net_ib.open(args, &caps, handle, &comm->ib_ctx);
  if (r == HC_OK) {
    *has_ib = true;
    return HC_OK;
  }
  comm->ib_ctx = NULL;
  if (r == HC_ERR_USAGE) return r; /* a bad ib parameter value */
  if (choice == HC_NET_IB) {
    char why[512];
    snprintf(why, sizeof(why), "%s", hc_last_error());
    return HC_FAIL(r, "rank %d: HETCCL_NET=IB, but %s", comm->rank, why);
  }
  HC_INFO(HC_NET, "ib: not used by rank %d (%s); other hosts over sockets", comm->rank, hc_last_error());
  hc_set_last_error(earlier_error);
  return HC_OK;
}

static hc_result_t comm_init(struct hetcclComm **out, int nranks, const uint8_t id[HC_UNIQUE_ID_BYTES],
                             int rank, const struct hc_config *config) {
  hc_result_t r;
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
  hc_log_set_rank(rank);

  HC_TRY_GOTO(hc_bootstrap_create(id, rank, nranks, &comm->abort_flag, &comm->boot), r, fail);
  struct hc_net_args net_args = {.rank = rank, .nranks = nranks, .abort_flag = &comm->abort_flag,
                                 .device_kind = (int)config->device_kind, .device_id = config->device_id,
                                 .sig_explain = hc_plan_sig_explain};
  HC_TRY_GOTO(hc_bootstrap_id_secret(id, net_args.secret), r, fail);
  struct hc_net_caps caps;
  struct hc_net_handle handle;
  HC_TRY_GOTO(hc_net_socket.open(&net_args, &caps, &handle, &comm->socket_ctx), r, fail);
  struct hc_net_handle shm_handle = {0};
  bool has_shm = false;
  if (nranks > 1 && !hc_param_int(HC_P_SHM_DISABLE)) {
    struct hc_net_caps shm_caps;
    if (config->device_kind != HC_MEM_HOST && hc_param_int(HC_P_SHM_WINDOW))
      net_args.window_bytes = HC_WINDOW_SLOTS * gpu_chunk_bytes();
    has_shm = hc_net_shm.open(&net_args, &shm_caps, &shm_handle, &comm->shm_ctx) == HC_OK;
    if (!has_shm) HC_INFO(HC_NET, "shm: not available here (%s); local peers use sockets", hc_last_error());
  }

  enum hc_net_choice net_choice;
  struct hc_net_handle ib_handle = {0};
  bool has_ib = false;
  HC_TRY_GOTO(net_choice_parse(&net_choice), r, fail);
  HC_TRY_GOTO(ib_open(comm, &net_args, net_choice, &ib_handle, &has_ib), r, fail);

  HC_TRY_GOTO(hc_calloc(&comm->peers, (size_t)nranks, sizeof(*comm->peers), "peer table"), r, fail);
  struct hc_peer_info *me = &comm->peers[rank];
  *me = (struct hc_peer_info){.magic = HC_PEER_INFO_MAGIC, .rank = rank, .host_hash = host_hash(),
                              .pid = (int32_t)getpid(), .device_kind = config->device_kind,
                              .shm_window = net_args.window_bytes > 0,
                              .device_id = config->device_id, .socket_handle = handle,
                              .shm_handle = shm_handle, .has_shm = has_shm, .ib_handle = ib_handle,
                              .has_ib = has_ib};
  snprintf(me->group_name, sizeof(me->group_name), "%s",
           config->group_name[0] ? config->group_name : mem_kind_name(config->device_kind));
  const struct hc_vendor *my_vendor = config->device_kind != HC_MEM_HOST && hc_param_int(HC_P_VENDOR)
                                          ? hc_vendor_get(config->device_kind) : NULL;
  me->vendor_ok = my_vendor != NULL;
  me->vendor_version = my_vendor ? my_vendor->version : 0;
  enum hc_fp8_layout fp8;
  HC_TRY_GOTO(local_fp8_layout(config, &fp8), r, fail);
  me->fp8_layout = (int32_t)fp8;
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, comm->peers, sizeof(*comm->peers)), r, fail);
  for (int i = 0; i < nranks; i++)
    if (comm->peers[i].magic != HC_PEER_INFO_MAGIC || comm->peers[i].rank != i) {
      r = HC_FAIL(HC_ERR_INTERNAL, "init: rank %d published a malformed peer record", i);
      goto fail;
    }
  comm->ngroups = assign_groups(comm->peers, nranks);
  comm->fp8_odd_rank = -1;
  for (int i = 1; i < nranks && comm->fp8_odd_rank < 0; i++)
    if (comm->peers[i].fp8_layout != comm->peers[0].fp8_layout) comm->fp8_odd_rank = i;
  if (comm->fp8_odd_rank >= 0)
    HC_INFO(HC_API, "rank %d: ranks 0 and %d hold different fp8 encodings (%s, %s): fp8 calls on this comm are "
            "refused", rank, comm->fp8_odd_rank, hc_fp8_layout_name(comm->peers[0].fp8_layout),
            hc_fp8_layout_name(comm->peers[comm->fp8_odd_rank].fp8_layout));

  HC_TRY_GOTO(hc_calloc(&comm->links.peer, (size_t)nranks, sizeof(*comm->links.peer), "links"), r, fail);
  comm->links.rank = rank;
  comm->links.nranks = nranks;
  comm->links.abort_flag = &comm->abort_flag;
  /* Bare spinning only pays when every local rank has a core of its own;
   * otherwise it steals the core a peer needs to answer, so the engine
   * yields between polls from the start (exec.c, the wait policy). */
  int local_ranks = 0;
  for (int i = 0; i < nranks; i++) local_ranks += comm->peers[i].host_hash == me->host_hash;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm->links.spin_ns = (uint64_t)hc_param_int(HC_P_SPIN_US) * 1000;
  comm->links.cores_shared = local_ranks > cores;
  /* Same host (and both ends have shared memory): shm; other hosts: ib when
   * both ends opened it (HETCCL_NET), else sockets. Both ends decide from
   * the same two records. */
  int nshm = 0, nib = 0;
  for (int i = 0; i < nranks; i++) {
    if (i == rank) continue;
    const struct hc_peer_info *p = &comm->peers[i];
    if (p->host_hash == me->host_hash && p->has_shm && me->has_shm) {
      comm->links.peer[i] = (struct hc_link){.net = &hc_net_shm, .ctx = comm->shm_ctx, .handle = p->shm_handle};
      nshm++;
    } else if (p->has_ib && me->has_ib) {
      comm->links.peer[i] = (struct hc_link){.net = &hc_net_ib, .ctx = comm->ib_ctx, .handle = p->ib_handle};
      nib++;
    } else if (net_choice == HC_NET_IB) {
      r = HC_FAIL(HC_ERR_USAGE, "HETCCL_NET=IB: rank %d has no usable RDMA port, so rank %d cannot reach it over ib",
                  i, rank);
      goto fail;
    } else {
      comm->links.peer[i] = (struct hc_link){.net = &hc_net_socket, .ctx = comm->socket_ctx,
                                             .handle = p->socket_handle};
    }
  }

  bool any_gpu = false;
  for (int i = 0; i < nranks; i++) any_gpu |= comm->peers[i].device_kind != HC_MEM_HOST;
  enum hc_algo algo;
  HC_TRY_GOTO(hc_algo_parse(hc_param_str(HC_P_ALGO), &algo), r, fail);
  if (algo == HC_ALGO_DIRECT && any_gpu) {
    /* Its n-1 transfers per piece at once would be staged through the
     * pair windows, whose in-order GPU lanes it does not keep apart. */
    HC_INFO(HC_PLAN, "HETCCL_ALGO=DIRECT applies to comms of CPU ranks only: this comm has a GPU rank and "
            "chooses by size");
    algo = HC_ALGO_AUTO;
  }
  struct hc_scratch_pool *pool;
  const struct hc_dev_ops *gpu = config->device_kind == HC_MEM_HOST ? NULL : hc_dev_get(config->device_kind);
  HC_TRY_GOTO(hc_scratch_pool_create(gpu ? HC_POOL_PINNED : HC_POOL_HOST, gpu, config->device_id, &pool), r, fail);
  comm->plan.pool = pool;
  if (gpu) HC_TRY_GOTO(hc_scratch_pool_create(HC_POOL_DEVICE, gpu, config->device_id, &comm->plan.dev_pool), r, fail);
  comm->plan_ctx = (struct hc_plan_ctx){
      .rank = rank, .nranks = nranks, .algo = algo,
      .chunk_bytes = any_gpu ? gpu_chunk_bytes() : (size_t)HC_MAX(hc_param_int(HC_P_CHUNK_BYTES), 64),
      .ring_threshold = (size_t)hc_param_int(HC_P_RING_THRESHOLD),
      /* One step pays where a small message costs a round trip whatever
       * its size (shm's inline descriptors); GPU ranks stage every
       * transfer, and there n-1 copies per rank cost more. */
      .onestep_bytes = any_gpu ? 0 : (size_t)hc_param_int(HC_P_ONESTEP_BYTES),
      /* The direct algorithms trade the ring's steps for n-1 transfers at
       * once, which GPU ranks would each stage. */
      .direct_max_bytes = any_gpu ? 0 : (size_t)hc_param_int(HC_P_DIRECT_MAX_BYTES),
      .direct_chunk_bytes = (size_t)HC_MAX(hc_param_int(HC_P_DIRECT_CHUNK_BYTES), 64),
      .scratch_slots = (int)HC_MAX(hc_param_int(HC_P_SCRATCH_SLOTS), 1), .ngroups = 1};
  if (comm->ngroups > 1) {
    HC_TRY_GOTO(hc_calloc(&comm->group_of, (size_t)nranks, sizeof(int), "group table"), r, fail);
    for (int i = 0; i < nranks; i++) comm->group_of[i] = comm->peers[i].group;
    comm->plan_ctx.ngroups = comm->ngroups;
    comm->plan_ctx.group_of = comm->group_of;
    int mine = 0;
    for (int i = 0; i < nranks; i++) mine += comm->peers[i].group == me->group;
    if (comm->ngroups < nranks)
      HC_INFO(HC_PLAN, "rank %d: %d groups; group %s has %d ranks; collectives are hierarchical",
              rank, comm->ngroups, me->group_name, mine);
  }
  HC_TRY_GOTO(vendor_groups_choose(comm), r, fail);
  if (comm->ngroups > 1) comm->plan_ctx.group_vendor = comm->group_vendor;
  HC_TRY_GOTO(windows_open(comm), r, fail);
  if (config->device_kind != HC_MEM_HOST)
    HC_TRY_GOTO(hc_dev_get(config->device_kind)->set_device(config->device_id), r, fail);
  HC_TRY_GOTO(vendor_comms_init(comm), r, fail);
  if (config->device_kind != HC_MEM_HOST && comm->vendor_comm == NULL)
    HC_TRY_GOTO(hc_proxy_create(comm, &comm->proxy), r, fail);
  HC_INFO(HC_API,
          "comm %p rank %d of %d up: device %s:%d, group %s (%d groups), %d peers over shm, %d over ib, %d over "
          "sockets",
          (void *)comm, rank, nranks, mem_kind_name(config->device_kind), config->device_id, me->group_name,
          comm->ngroups, nshm, nib, nranks - 1 - nshm - nib);
  *out = comm;
  return HC_OK;
fail:
  hc_comm_free(comm);
  return r;
}

static hc_result_t check_init_args(hetcclComm_t *comm, int nranks, int rank) {
  if (comm == NULL) return HC_FAIL(HC_ERR_ARG, "CommInitRank: comm pointer is NULL");
  *comm = NULL;
  if (nranks < 1) return HC_FAIL(HC_ERR_ARG, "CommInitRank: nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks)
    return HC_FAIL(HC_ERR_ARG, "CommInitRank: rank %d is not in [0, %d)", rank, nranks);
  return HC_OK;
}

static hc_result_t api_CommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId commId,
                                               int rank, hetcclConfig_t *config) {
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
  HC_INFO(HC_BOOT, "rank %d of %d from %s, root %s:%d", env.rank, env.nranks, env.launcher,
          env.master_addr, env.master_port);
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

static hc_result_t api_CommSplit(hetcclComm_t comm, int color, int key, hetcclComm_t *newcomm,
                                      hetcclConfig_t *config) {
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
  if (color != HETCCL_SPLIT_NOCOLOR && newrank == 0)
    HC_TRY_GOTO(hc_bootstrap_id_create(recs[comm->rank].id), r, out);
  HC_TRY_GOTO(hc_bootstrap_allgather(comm->boot, recs, sizeof(*recs)), r, out);
  r = HC_OK;
  if (color != HETCCL_SPLIT_NOCOLOR)
    r = comm_init(newcomm, nnew, recs[leader].id, newrank, &cfg);
  hc_log_set_rank(comm->rank);
out:
  free(recs);
  return r;
}

/* ---- teardown ---- */

static hc_result_t api_CommFinalize(hetcclComm_t comm) {
  HC_TRY(hc_comm_check(comm, "CommFinalize"));
  /* Host calls complete before they return; a GPU comm's proxy may still
   * have plans to run. */
  if (comm->proxy) HC_TRY(hc_proxy_drain_blocking(comm->proxy));
  comm->finalized = true;
  return HC_OK;
}

static hc_result_t api_CommDestroy(hetcclComm_t comm) {
  if (comm == NULL) return HC_OK; /* as NCCL */
  HC_TRY(hc_comm_check(comm, "CommDestroy"));
  hc_comm_free(comm);
  return HC_OK;
}

static hc_result_t api_CommAbort(hetcclComm_t comm) {
  if (comm == NULL) return HC_OK;
  HC_TRY(hc_comm_check(comm, "CommAbort"));
  atomic_store(&comm->abort_flag, true);
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
  HC_TRY(hc_comm_check(comm, "CommGetAsyncError"));
  if (asyncError == NULL) return HC_FAIL(HC_ERR_ARG, "CommGetAsyncError: asyncError is NULL");
  *asyncError = (hetcclResult_t)atomic_load(&comm->async_error);
  void *vendor_comm = comm->vendor_comm ? comm->vendor_comm : comm->group_vendor_comm;
  if (*asyncError == hetcclSuccess && vendor_comm) {
    int vendor_error = 0;
    comm->vendor->comm_get_async_error(vendor_comm, &vendor_error);
    *asyncError = (hetcclResult_t)vendor_error;
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
  if (text[0] == 0 && comm != NULL && hc_comm_check(comm, "GetLastError") == HC_OK)
    return comm->async_error_text;
  return text;
}

static hc_result_t api_GetVersion(int *version) {
  if (version == NULL) return HC_FAIL(HC_ERR_ARG, "GetVersion: version is NULL");
  *version = HETCCL_VERSION_CODE;
  return HC_OK;
}

/* ---- exports: the public names over the functions above ---- */

HC_EXPORT hetcclResult_t hetcclCommInitRankConfig(hetcclComm_t *comm, int nranks, hetcclUniqueId commId,
                                               int rank, hetcclConfig_t *config) {
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

HC_EXPORT hetcclResult_t hetcclCommFinalize(hetcclComm_t comm) {
  return (hetcclResult_t)api_CommFinalize(comm);
}

HC_EXPORT hetcclResult_t hetcclCommDestroy(hetcclComm_t comm) {
  return (hetcclResult_t)api_CommDestroy(comm);
}

HC_EXPORT hetcclResult_t hetcclCommAbort(hetcclComm_t comm) {
  return (hetcclResult_t)api_CommAbort(comm);
}

HC_EXPORT hetcclResult_t hetcclCommCount(const hetcclComm_t comm, int *count) {
  return (hetcclResult_t)api_CommCount(comm, count);
}

HC_EXPORT hetcclResult_t hetcclCommUserRank(const hetcclComm_t comm, int *rank) {
  return (hetcclResult_t)api_CommUserRank(comm, rank);
}

HC_EXPORT hetcclResult_t hetcclCommGetAsyncError(hetcclComm_t comm, hetcclResult_t *asyncError) {
  return (hetcclResult_t)api_CommGetAsyncError(comm, asyncError);
}

HC_EXPORT hetcclResult_t hetcclGetVersion(int *version) {
  return (hetcclResult_t)api_GetVersion(version);
}
