/*
 * net: the table of transports and the choice of one per pair, after
 * NCCL's transport array (src/transport.cc): each transport says from the
 * two ends' published records whether it can connect a pair and at what
 * priority; the highest wins. Adding a transport is one entry here and one
 * handle slot (HC_NET_NTRANSPORTS); nothing above net/ names one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/auth.h"
#include "net.h"

/* HETCCL_FAKE_HOSTS (tests): the host number rank stands on, -1 when the
 * list is empty. */
static hc_result_t fake_host_of(int rank, int *out) {
  const char *list = hc_param_str(HC_P_FAKE_HOSTS), *p = list;
  *out = -1;
  if (list[0] == 0) return HC_OK;
  for (int r = 0;; r++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 1000000 || (*end != ',' && *end != 0))
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_FAKE_HOSTS=%s: not a list of host numbers", list);
    if (r == rank) {
      *out = (int)v;
      return HC_OK;
    }
    if (*end == 0)
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_FAKE_HOSTS=%s names %d hosts, rank %d has none", list, r + 1, rank);
    p = end + 1;
  }
}

uint64_t hc_net_host_id(int fake_host) {
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
  if (fake_host >= 0) n += (size_t)snprintf(text + n, sizeof(text) - n, ":fake host %d", fake_host);
  uint8_t digest[32];
  hc_sha256(text, n, digest);
  uint64_t h;
  memcpy(&h, digest, sizeof(h));
  return h;
}

/* HETCCL_NET: which transport crosses between hosts. */
enum net_choice { NET_AUTO, NET_IB, NET_SOCKET };

static hc_result_t net_choice_parse(enum net_choice *out) {
  const char *s = hc_param_str(HC_P_NET);
  if (s[0] == '\0') *out = NET_AUTO;
  else if (strcasecmp(s, "IB") == 0) *out = NET_IB;
  else if (strcasecmp(s, "SOCKET") == 0) *out = NET_SOCKET;
  else return HC_FAIL(HC_ERR_USAGE, "HETCCL_NET=%s: must be IB or SOCKET (or empty: ib where usable)", s);
  return HC_OK;
}

/* shm: ranks of one host, unless HETCCL_SHM_DISABLE; where it cannot open,
 * the host's pairs take the next transport. */
static hc_result_t shm_use(const struct hc_net_args *a, enum hc_net_use *use) {
  *use = a->nranks > 1 && !hc_param_int(HC_P_SHM_DISABLE) ? HC_NET_USE_OPTIONAL : HC_NET_USE_OFF;
  return HC_OK;
}

static int shm_can_connect(const struct hc_net_record *self, const struct hc_net_record *peer) {
  return self->host == peer->host ? 2 : HC_NET_NO;
}

/* ib: where both ends found a usable RDMA port, unless HETCCL_NET=SOCKET;
 * HETCCL_NET=IB makes a rank without one fail init. */
static hc_result_t ib_use(const struct hc_net_args *a, enum hc_net_use *use) {
  enum net_choice choice = NET_AUTO;
  HC_TRY(net_choice_parse(&choice));
  *use = a->nranks < 2 || choice == NET_SOCKET ? HC_NET_USE_OFF
         : choice == NET_IB                    ? HC_NET_USE_REQUIRED
                                               : HC_NET_USE_OPTIONAL;
  return HC_OK;
}

static int ib_can_connect(const struct hc_net_record *self, const struct hc_net_record *peer) {
  (void)self;
  (void)peer;
  return 1;
}

/* socket: any pair, the last resort; HETCCL_NET=IB rules it out. */
static hc_result_t socket_use(const struct hc_net_args *a, enum hc_net_use *use) {
  enum net_choice choice = NET_AUTO;
  (void)a;
  HC_TRY(net_choice_parse(&choice));
  *use = choice == NET_IB ? HC_NET_USE_OFF : HC_NET_USE_REQUIRED;
  return HC_OK;
}

static int socket_can_connect(const struct hc_net_record *self, const struct hc_net_record *peer) {
  (void)self;
  (void)peer;
  return 0;
}

/* One row per entry, as the table reads best. */
/* clang-format off */
const struct hc_transport hc_transports[HC_NET_NTRANSPORTS] = {
    {.ops = &hc_net_shm, .links_name = "shm", .use = shm_use, .can_connect = shm_can_connect,
     .notice = hc_net_shm_notice, .maps_memory = true},
    {.ops = &hc_net_ib, .links_name = "ib", .use = ib_use, .can_connect = ib_can_connect,
     .required_by = "HETCCL_NET=IB"},
    {.ops = &hc_net_socket, .links_name = "sockets", .use = socket_use, .can_connect = socket_can_connect,
     .notice = hc_net_socket_notice},
};
/* clang-format on */

/* Opens transport t per its use; an optional one that fails leaves
 * ctx NULL, says why at INFO and restores the caller's last error (a host
 * without ib is no error of the caller's). */
static hc_result_t transport_open(struct hc_net_set *set, int t, const struct hc_net_args *a,
                                  struct hc_net_record *mine) {
  const struct hc_transport *tr = &hc_transports[t];
  enum hc_net_use use;
  HC_TRY(tr->use(a, &use));
  if (use == HC_NET_USE_OFF) return HC_OK;
  char earlier_error[512];
  snprintf(earlier_error, sizeof(earlier_error), "%s", hc_last_error());
  hc_result_t r = tr->ops->open(a, &set->caps[t], &mine->handle[t], &set->ctx[t]);
  if (r == HC_OK) {
    mine->open[t] = 1;
    return HC_OK;
  }
  set->ctx[t] = NULL;
  if (r == HC_ERR_USAGE) return r; /* a bad parameter value */
  if (use == HC_NET_USE_REQUIRED) {
    if (tr->required_by == NULL) return r;
    char why[512];
    snprintf(why, sizeof(why), "%s", hc_last_error());
    return HC_FAIL(r, "rank %d: %s, but %s", a->rank, tr->required_by, why);
  }
  HC_INFO(HC_NET, "%s: not used by rank %d (%s); its pairs take another transport", tr->ops->name, a->rank,
          hc_last_error());
  hc_set_last_error(earlier_error);
  return HC_OK;
}

hc_result_t hc_net_set_open(struct hc_net_set *set, const struct hc_net_args *a, struct hc_net_record *mine) {
  *set = (struct hc_net_set){0};
  int fake_host;
  HC_TRY(fake_host_of(a->rank, &fake_host));
  *mine = (struct hc_net_record){.host = hc_net_host_id(fake_host), .window = a->window_bytes > 0};
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) {
    hc_result_t r = transport_open(set, t, a, mine);
    if (r != HC_OK) {
      hc_net_set_close(set, NULL, 0, false);
      return r;
    }
  }
  return HC_OK;
}

/* "shm, socket" or "none": what a record says is open. */
static void open_names(const struct hc_net_record *rec, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++)
    if (rec->open[t] && n < len)
      n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", hc_transports[t].ops->name);
  if (n == 0) snprintf(buf, len, "none");
}

hc_result_t hc_net_link_choose(const struct hc_net_set *set, int me, const struct hc_net_record *mine, int peer,
                               const struct hc_net_record *theirs, struct hc_link *link, int *t) {
  int best = -1, best_priority = HC_NET_NO;
  for (int i = 0; i < HC_NET_NTRANSPORTS; i++) {
    if (!mine->open[i] || !theirs->open[i]) continue;
    const int priority = hc_transports[i].can_connect(mine, theirs);
    if (priority > best_priority) best = i, best_priority = priority;
  }
  if (best < 0) {
    char here[64], there[64];
    open_names(mine, here, sizeof(here));
    open_names(theirs, there, sizeof(there));
    return HC_FAIL(HC_ERR_USAGE,
                   "rank %d cannot reach rank %d: no transport connects them (open on rank %d: %s; on rank %d: %s; "
                   "%s host; see HETCCL_NET, HETCCL_SHM_DISABLE)",
                   me, peer, me, here, peer, there, mine->host == theirs->host ? "the same" : "another");
  }
  *link = (struct hc_link){
      .net = hc_transports[best].ops, .ctx = set->ctx[best], .handle = theirs->handle[best], .caps = set->caps[best]};
  *t = best;
  return HC_OK;
}

bool hc_net_links_reach_device(const struct hc_link *links, int nranks) {
  for (int i = 0; i < nranks; i++)
    if (links[i].net != NULL && (!links[i].caps.device_memory || links[i].caps.device_min_bytes > 0)) return false;
  return true;
}

void hc_net_set_notice(const struct hc_net_set *set, int culprit) {
  for (int t = HC_NET_NTRANSPORTS - 1; t >= 0 && culprit >= 0; t--)
    if (set->ctx[t] && hc_transports[t].notice) hc_transports[t].notice(set->ctx[t], culprit);
}

void hc_net_set_close(struct hc_net_set *set, struct hc_link *links, int nranks, bool keep_mapped) {
  for (int t = HC_NET_NTRANSPORTS - 1; t >= 0; t--) {
    if (set->ctx[t] == NULL || (keep_mapped && hc_transports[t].maps_memory)) continue;
    hc_transports[t].ops->close(set->ctx[t]);
    set->ctx[t] = NULL;
    for (int i = 0; i < nranks && links; i++)
      if (links[i].net == hc_transports[t].ops) links[i] = (struct hc_link){0};
  }
}

hc_result_t hc_net_missing_op(const struct hc_net_ops *net, const char *op) {
  if (net == NULL) return HC_FAIL(HC_ERR_INTERNAL, "net: %s on a rank's link to itself, which has no transport", op);
  return HC_FAIL(HC_ERR_INTERNAL, "transport %s has no %s", net->name, op);
}

size_t hc_net_set_pull_min_bytes(const struct hc_net_set *s) {
  size_t least = 0;
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) {
    const size_t n = s->ctx[t] != NULL ? s->caps[t].pull_min_bytes : 0;
    if (n > 0 && (least == 0 || n < least)) least = n;
  }
  return least;
}

void hc_net_set_choose_pulls(const struct hc_net_set *s, enum hc_net_pulls way) {
  for (int t = 0; t < HC_NET_NTRANSPORTS; t++) {
    const struct hc_net_ops *ops = hc_transports[t].ops;
    if (s->ctx[t] != NULL && HC_HAS_OP(ops, struct hc_net_ops, choose_pulls)) ops->choose_pulls(s->ctx[t], way);
  }
}
