/*
 * bootstrap: unique id, root rendezvous, and the ring that carries the
 * out-of-band all-gather during init. Knows nothing of devices or
 * collectives.
 *
 * Terms. The *root* is a detached thread of the process that made the id; it
 * owns its listening socket and its memory, serves one rendezvous, and frees
 * everything when it exits (rendezvous done, failed, or HETCCL_TIMEOUT).
 * A *rank* is one hc_bootstrap_create caller. Each rank listens on a *ring
 * listener* of its own, tells the root its address, and gets back the
 * address of *next* ((rank+1) % nranks); it then connects to next and
 * accepts from *prev*. A *slot* is one rank's share of an all-gather buffer.
 *
 * Invariant: every connection proves the id's secret (auth.h) before
 * anything else is read from it, and a connection that fails to is closed
 * without disturbing the rendezvous: the root and the ring listener serve
 * every connection at once (greet.h), so strangers, silent or garbage, in
 * any number, delay no rank.
 *
 * Wire records, fixed sizes, integers big-endian:
 *   address    family u16 (4 or 6) | port u16 | scope u32 | bytes [16]       24 B
 *   id         magic "HCID" | version u16 | 0 u16 | address | secret [16]   48 B
 *   rank hello magic "HCRH" | rank u32 | nranks u32 | ring address           36 B
 *   root reply status u32 (hc_result_t, or "WAIT": a progress record, more
 *              follow) | next's address | message [256]                   284 B
 *   ring hello magic "HCRG" | rank u32 | nranks u32                          12 B
 *   gather hdr magic "HCAG" | sequence u32 | slot size u64                   16 B
 * Every record read goes through its pure parser (bootstrap_wire.h) before
 * a field is used; tests/fuzz/ feeds those parsers hostile bytes.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../util/auth.h"
#include "../util/sock.h"
#include "bootstrap.h"
#include "bootstrap_wire.h"
#include "greet.h"

#define ID_MAGIC 0x48434944u /* "HCID" */
#define ID_VERSION 1
#define HELLO_MAGIC 0x48435248u  /* "HCRH" */
#define RING_MAGIC 0x48435247u   /* "HCRG" */
#define GATHER_MAGIC 0x48434147u /* "HCAG" */

#define ADDR_BYTES HC_BOOTSTRAP_ADDR_BYTES
#define ID_OFF_ADDR 8
#define ID_OFF_SECRET (ID_OFF_ADDR + ADDR_BYTES)
#define HELLO_BYTES HC_BOOTSTRAP_HELLO_BYTES
#define MSG_BYTES HC_BOOTSTRAP_MSG_BYTES
#define REPLY_BYTES HC_BOOTSTRAP_REPLY_BYTES
#define RING_HELLO_BYTES HC_BOOTSTRAP_RING_HELLO_BYTES
#define GATHER_HDR_BYTES HC_BOOTSTRAP_GATHER_HDR_BYTES
#define MAX_RANKS HC_BOOTSTRAP_MAX_RANKS
#define ROOT_GRACE_NS (500ull * 1000000ull)
/* While ranks are missing, the root and the waiting ranks say who, this
 * often: a rank whose peers never start is not silent for HETCCL_TIMEOUT. */
#define REPORT_NS (10ull * 1000000000ull)

struct hc_bootstrap {
  int rank, nranks;
  int next_fd, prev_fd; /* -1 when nranks == 1 */
  const atomic_bool *abort_flag;
  uint32_t seq; /* all-gathers done, checked against prev's */
  bool broken;  /* a failed all-gather leaves the ring out of step */
  char next_name[80], prev_name[80];
};

/* ---- encoding ---- */

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* The rank hello (to the root) and the ring hello (to prev) open alike:
 * magic, the sender's rank, nranks. */
#define RANK_HEAD_BYTES 12
static void rank_head_put(uint8_t *buf, uint32_t magic, const struct hc_bootstrap *b) {
  put32(buf, magic);
  put32(buf + 4, (uint32_t)b->rank);
  put32(buf + 8, (uint32_t)b->nranks);
}
static void rank_head_get(const uint8_t *buf, uint32_t *magic, uint32_t *rank, uint32_t *nranks) {
  *magic = get32(buf);
  *rank = get32(buf + 4);
  *nranks = get32(buf + 8);
}

static void put_addr(uint8_t *p, const union hc_sockaddr *a) {
  memset(p, 0, ADDR_BYTES);
  if (a->sa.sa_family == AF_INET) {
    put16(p, 4);
    put16(p + 2, (uint16_t)hc_sock_port(a));
    memcpy(p + 8, &a->sin.sin_addr, 4);
  } else if (a->sa.sa_family == AF_INET6) {
    put16(p, 6);
    put16(p + 2, (uint16_t)hc_sock_port(a));
    put32(p + 4, a->sin6.sin6_scope_id);
    memcpy(p + 8, &a->sin6.sin6_addr, 16);
  }
}

static bool get_addr(const uint8_t *p, union hc_sockaddr *a) {
  memset(a, 0, sizeof(*a));
  if (get16(p) == 4) {
    a->sin.sin_family = AF_INET;
    a->sin.sin_port = htons(get16(p + 2));
    memcpy(&a->sin.sin_addr, p + 8, 4);
  } else if (get16(p) == 6) {
    a->sin6.sin6_family = AF_INET6;
    a->sin6.sin6_port = htons(get16(p + 2));
    a->sin6.sin6_scope_id = get32(p + 4);
    memcpy(&a->sin6.sin6_addr, p + 8, 16);
  } else {
    return false;
  }
  return get16(p + 2) != 0;
}

static void id_encode(uint8_t id[HC_UNIQUE_ID_BYTES], const union hc_sockaddr *root, const uint8_t secret[16]) {
  memset(id, 0, HC_UNIQUE_ID_BYTES);
  put32(id, ID_MAGIC);
  put16(id + 4, ID_VERSION);
  put_addr(id + ID_OFF_ADDR, root);
  memcpy(id + ID_OFF_SECRET, secret, 16);
}

/* ---- parsers of bootstrap_wire.h ---- */

hc_result_t hc_bootstrap_id_parse(const uint8_t *id, size_t n, struct hc_bootstrap_id *out) {
  memset(out, 0, sizeof(*out));
  if (n != HC_UNIQUE_ID_BYTES) return HC_FAIL(HC_ERR_ARG, "unique id: %zu bytes, expected %d", n, HC_UNIQUE_ID_BYTES);
  if (get32(id) != ID_MAGIC)
    return HC_FAIL(HC_ERR_ARG, "unique id: not a hetccl id (magic 0x%08x; was it made by hetcclGetUniqueId?)",
                   get32(id));
  if (get16(id + 4) != ID_VERSION)
    return HC_FAIL(HC_ERR_ARG, "unique id: version %u, this library reads version %u", get16(id + 4), ID_VERSION);
  if (!get_addr(id + ID_OFF_ADDR, &out->root)) {
    memset(out, 0, sizeof(*out));
    return HC_FAIL(HC_ERR_ARG, "unique id: no valid root address");
  }
  memcpy(out->secret, id + ID_OFF_SECRET, 16);
  return HC_OK;
}

bool hc_bootstrap_hello_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_hello *out) {
  memset(out, 0, sizeof(*out));
  if (n != HELLO_BYTES) return false;
  rank_head_get(buf, &out->magic, &out->rank, &out->nranks);
  memcpy(out->ring_bytes, buf + RANK_HEAD_BYTES, ADDR_BYTES);
  out->ring_ok = get_addr(buf + RANK_HEAD_BYTES, &out->ring);
  return out->magic == HELLO_MAGIC;
}

bool hc_bootstrap_hello_check(const struct hc_bootstrap_hello *h, int root_nranks, const char *who, char *msg,
                              size_t msg_len) {
  uint32_t rank = h->rank, nranks = h->nranks;
  if (nranks < 1 || nranks > MAX_RANKS)
    snprintf(msg, msg_len, "rank %u at %s says nranks = %u (must be 1..%d)", rank, who, nranks, MAX_RANKS);
  else if (rank >= nranks) snprintf(msg, msg_len, "rank %u at %s is out of range for nranks = %u", rank, who, nranks);
  else if (root_nranks != 0 && (int)nranks != root_nranks)
    snprintf(msg, msg_len,
             "ranks disagree on nranks (WORLD_SIZE, or the count passed to init): rank %u at %s says %u, "
             "earlier ranks said %d",
             rank, who, nranks, root_nranks);
  else if (nranks > 1 && !h->ring_ok) snprintf(msg, msg_len, "rank %u at %s sent no valid ring address", rank, who);
  else return true;
  return false;
}

bool hc_bootstrap_reply_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_reply *out) {
  memset(out, 0, sizeof(*out));
  if (n != REPLY_BYTES) return false;
  out->status = get32(buf);
  out->waiting = out->status == HC_BOOTSTRAP_WAITING;
  out->code = out->status <= HC_ERR_REMOTE ? (hc_result_t)out->status : HC_ERR_REMOTE;
  out->next_ok = get_addr(buf + 4, &out->next);
  memcpy(out->msg, buf + 4 + ADDR_BYTES, MSG_BYTES - 1);
  out->msg[MSG_BYTES - 1] = 0;
  return true;
}

bool hc_bootstrap_ring_hello_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_ring_hello *out) {
  memset(out, 0, sizeof(*out));
  if (n != RING_HELLO_BYTES) return false;
  rank_head_get(buf, &out->magic, &out->rank, &out->nranks);
  return out->magic == RING_MAGIC;
}

bool hc_bootstrap_gather_hdr_parse(const uint8_t *buf, size_t n, struct hc_bootstrap_gather_hdr *out) {
  memset(out, 0, sizeof(*out));
  if (n != GATHER_HDR_BYTES) return false;
  out->magic = get32(buf);
  out->seq = get32(buf + 4);
  out->size = (uint64_t)get32(buf + 8) << 32 | get32(buf + 12);
  return out->magic == GATHER_MAGIC;
}

static hc_result_t id_decode(const uint8_t id[HC_UNIQUE_ID_BYTES], union hc_sockaddr *root, uint8_t secret[16]) {
  struct hc_bootstrap_id parsed;
  HC_TRY(hc_bootstrap_id_parse(id, HC_UNIQUE_ID_BYTES, &parsed));
  if (root) *root = parsed.root;
  if (secret) memcpy(secret, parsed.secret, 16);
  return HC_OK;
}

hc_result_t hc_bootstrap_id_secret(const uint8_t id[HC_UNIQUE_ID_BYTES], uint8_t secret[16]) {
  return id_decode(id, NULL, secret);
}

/* ---- root ---- */

/* The root serves every connection at once (greet.h): strangers, silent or
 * garbage, cost the ranks nothing. A rank that said hello waits, seated,
 * for the answer; the root watches its connection meanwhile (a rank that
 * leaves fails the rendezvous for all at once). After a failure the root
 * stays until every rank that any hello counted has had the answer, so
 * that late ranks learn why instead of waiting for HETCCL_TIMEOUT. */
struct root {
  int listen_fd;
  struct hc_greeter greeter;
  uint64_t start_ns, deadline_ns, next_report_ns;
  char where[80];  /* listening address, for messages */
  int nranks;      /* from the first rank; 0 until then */
  int most_nranks; /* the largest nranks any hello claimed (in range) */
  int arrived;
  int *fds; /* per rank; -1 until it arrives */
  uint8_t (*addrs)[ADDR_BYTES];
  /* Once a rank's hello is invalid the rendezvous cannot succeed: the root
   * answers every rank, connected or yet to come, with this error. */
  hc_result_t failed;
  char fail_msg[MSG_BYTES];
  int answered;
  bool done;
};

/* One reply record. A seated rank's socket holds at most a few unread
 * progress records, far below any send buffer, so this never waits; a
 * rank that cannot take it has left. */
static void root_send(struct root *rt, int fd, int rank, uint32_t status, const uint8_t *next_addr, const char *msg) {
  uint8_t reply[REPLY_BYTES] = {0};
  put32(reply, status);
  if (next_addr) memcpy(reply + 4, next_addr, ADDR_BYTES);
  snprintf((char *)reply + 4 + ADDR_BYTES, MSG_BYTES, "%s", msg);
  ssize_t w;
  do w = send(fd, reply, sizeof(reply), MSG_DONTWAIT | MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != (ssize_t)sizeof(reply))
    HC_WARN(HC_BOOT, "bootstrap root %s: could not answer rank %d (it left?)", rt->where, rank);
}

/* Answers every connected rank with the failure and lets them go. */
static void root_fail_all(struct root *rt, hc_result_t status, const char *msg) {
  rt->failed = status;
  snprintf(rt->fail_msg, sizeof(rt->fail_msg), "%s", msg);
  HC_WARN(HC_BOOT, "bootstrap root %s: %s", rt->where, msg);
  for (int i = 0; i < rt->nranks; i++) {
    if (rt->fds[i] < 0) continue;
    root_send(rt, rt->fds[i], i, (uint32_t)status, NULL, msg);
    close(rt->fds[i]);
    rt->fds[i] = -1;
    rt->answered++;
  }
  rt->arrived = 0;
}

/* All ranks are in: each learns where its next listens. */
static void root_complete(struct root *rt) {
  for (int i = 0; i < rt->nranks; i++) {
    root_send(rt, rt->fds[i], i, HC_OK, rt->addrs[(i + 1) % rt->nranks], "");
    close(rt->fds[i]);
    rt->fds[i] = -1;
  }
  rt->done = true;
  HC_INFO(HC_BOOT, "bootstrap root %s: rendezvous of %d ranks done", rt->where, rt->nranks);
}

/* "2 of 4 ranks arrived; missing: 1 3" into msg. */
static void root_missing(const struct root *rt, char *msg, size_t len) {
  int o = snprintf(msg, len, "%d of %d ranks arrived; missing:", rt->arrived, rt->nranks);
  int listed = 0;
  for (int i = 0; i < rt->nranks && o > 0 && (size_t)o < len - 16; i++) {
    if (rt->fds[i] >= 0) continue;
    if (listed++ == 16) {
      snprintf(msg + o, len - (size_t)o, " ...");
      break;
    }
    o += snprintf(msg + o, len - (size_t)o, " %d", i);
  }
}

/* Every REPORT_NS of waiting: who is missing, in the root's log and, as a
 * progress record, in the log of every rank that waits. */
static void root_report(struct root *rt) {
  uint64_t now = hc_now_ns();
  if (now < rt->next_report_ns) return;
  rt->next_report_ns = now + REPORT_NS;
  long waited = (long)((now - rt->start_ns) / 1000000000ull), left = (long)((rt->deadline_ns - now) / 1000000000ull);
  if (rt->nranks == 0) {
    HC_WARN(HC_BOOT, "bootstrap root %s: no rank has arrived in %ld s; waiting %ld s more (HETCCL_TIMEOUT)", rt->where,
            waited, left);
    return;
  }
  char missing[MSG_BYTES - 96], msg[MSG_BYTES];
  root_missing(rt, missing, sizeof(missing));
  snprintf(msg, sizeof(msg), "after %ld s, %s; waiting %ld s more (HETCCL_TIMEOUT)", waited, missing, left);
  HC_WARN(HC_BOOT, "bootstrap root %s: %s", rt->where, msg);
  for (int i = 0; i < rt->nranks; i++)
    if (rt->fds[i] >= 0) root_send(rt, rt->fds[i], i, HC_BOOTSTRAP_WAITING, NULL, msg);
}

/* The greeter's callback: a connection that proved the secret and sent a
 * rank hello. */
static void root_take(void *ctx, int fd, const uint8_t *hello, const char *who) {
  struct root *rt = ctx;
  struct hc_bootstrap_hello h;
  if (!hc_bootstrap_hello_parse(hello, HELLO_BYTES, &h)) {
    HC_WARN(HC_BOOT, "bootstrap root %s: %s sent 0x%08x instead of a rank hello; dropped", rt->where, who, h.magic);
    close(fd);
    return;
  }
  uint32_t rank = h.rank, nranks = h.nranks;
  if (nranks <= MAX_RANKS && (int)nranks > rt->most_nranks) rt->most_nranks = (int)nranks;
  if (rt->failed != HC_OK) {
    root_send(rt, fd, (int)rank, (uint32_t)rt->failed, NULL, rt->fail_msg);
    close(fd);
    rt->answered++;
    return;
  }
  char msg[MSG_BYTES];
  msg[0] = 0;
  if (hc_bootstrap_hello_check(&h, rt->nranks, who, msg, sizeof(msg)) && rt->nranks == 0) {
    rt->fds = malloc(nranks * sizeof(*rt->fds));
    rt->addrs = calloc(nranks, sizeof(*rt->addrs));
    if (rt->fds == NULL || rt->addrs == NULL) {
      snprintf(msg, sizeof(msg), "out of host memory for %u ranks", nranks);
      free(rt->fds), free(rt->addrs);
      rt->fds = NULL, rt->addrs = NULL;
    } else {
      for (uint32_t i = 0; i < nranks; i++) rt->fds[i] = -1;
      rt->nranks = (int)nranks;
    }
  }
  if (msg[0] == 0 && rt->fds[rank] >= 0)
    snprintf(msg, sizeof(msg), "rank %u joined twice (again from %s): two processes passed the same rank", rank, who);
  if (msg[0]) {
    /* The offender is answered first, then everyone already waiting. */
    root_send(rt, fd, (int)rank, HC_ERR_USAGE, NULL, msg);
    close(fd);
    rt->answered++;
    if (rt->fds == NULL) {
      /* Nothing sized the rendezvous: later ranks get the same answer. */
      rt->failed = HC_ERR_USAGE;
      snprintf(rt->fail_msg, sizeof(rt->fail_msg), "%s", msg);
      HC_WARN(HC_BOOT, "bootstrap root %s: %s", rt->where, msg);
      return;
    }
    root_fail_all(rt, HC_ERR_USAGE, msg);
    return;
  }
  rt->fds[rank] = fd;
  memcpy(rt->addrs[rank], h.ring_bytes, ADDR_BYTES);
  rt->arrived++;
  HC_TRACE(HC_BOOT, "bootstrap root %s: rank %u of %u from %s (%d arrived)", rt->where, rank, nranks, who, rt->arrived);
  if (rt->arrived == rt->nranks) root_complete(rt);
}

/* A waiting rank sends nothing more: readable means it left (died, or broke
 * the protocol). The rendezvous then fails for every rank, at once, rather
 * than leave them waiting for HETCCL_TIMEOUT for a rank that may never
 * come back. p[i] for from <= i < np watch rank rank_of[i]. */
static void root_drop_leavers(struct root *rt, const struct pollfd *p, const int *rank_of, int from, int np) {
  for (int i = from; i < np; i++) {
    if (p[i].revents == 0 || rt->fds[rank_of[i]] < 0) continue;
    int r = rank_of[i];
    close(rt->fds[r]);
    rt->fds[r] = -1;
    rt->arrived--;
    rt->answered++;
    if (rt->failed == HC_OK) {
      char msg[MSG_BYTES];
      snprintf(msg, sizeof(msg), "rank %d left (died?) before all %d ranks arrived", r, rt->nranks);
      root_fail_all(rt, HC_ERR_REMOTE, msg);
    }
  }
}

static void root_timeout(struct root *rt) {
  char missing[MSG_BYTES - 96], msg[MSG_BYTES];
  root_missing(rt, missing, sizeof(missing));
  snprintf(msg, sizeof(msg), "rendezvous timed out (HETCCL_TIMEOUT, %lld s): %s", (long long)hc_param_int(HC_P_TIMEOUT),
           missing);
  root_fail_all(rt, HC_ERR_REMOTE, msg);
}

static void root_free(struct root *rt) {
  for (int i = 0; rt->fds && i < rt->nranks; i++)
    if (rt->fds[i] >= 0) close(rt->fds[i]);
  hc_greeter_close(&rt->greeter);
  if (rt->listen_fd >= 0) close(rt->listen_fd);
  free(rt->fds);
  free(rt->addrs);
  free(rt);
}

static bool root_finished(const struct root *rt) {
  return rt->done || (rt->failed != HC_OK && rt->answered >= HC_MAX(rt->nranks, rt->most_nranks));
}

/* Root threads of this process still serving a rendezvous: a rank of this
 * process whose rendezvous failed waits for them (roots_wait) before
 * returning, since the program then often exits, and with it a root that
 * had not yet answered the other ranks (they would read a closed
 * connection instead of the verdict). */
static atomic_int roots_running;

static void *root_main(void *arg) {
  struct root *rt = arg;
  struct pollfd *p = NULL;
  int *rank_of = NULL; /* p[i] watches rank rank_of[i], after the greeter's entries */
  int cap = 0;
  while (!root_finished(rt)) {
    uint64_t now = hc_now_ns();
    if (now >= rt->deadline_ns) {
      if (rt->nranks == 0) HC_WARN(HC_BOOT, "bootstrap root %s: no rank came before HETCCL_TIMEOUT", rt->where);
      else if (rt->failed == HC_OK) root_timeout(rt);
      break;
    }
    if (rt->failed == HC_OK) root_report(rt);
    int need = 1 + HC_GREET_MAX_PENDING + rt->nranks;
    if (need > cap) {
      cap = need;
      free(p), free(rank_of);
      p = malloc((size_t)cap * sizeof(*p));
      rank_of = malloc((size_t)cap * sizeof(*rank_of));
      if (p == NULL || rank_of == NULL) {
        HC_WARN(HC_BOOT, "bootstrap root %s: out of host memory; rendezvous abandoned", rt->where);
        break;
      }
    }
    int ng = hc_greeter_pollfds(&rt->greeter, p), np = ng;
    for (int i = 0; i < rt->nranks; i++) {
      if (rt->fds[i] < 0) continue;
      rank_of[np] = i;
      p[np++] = (struct pollfd){.fd = rt->fds[i], .events = POLLIN};
    }
    uint64_t left_ms = (rt->deadline_ns - now) / 1000000 + 1;
    if (poll(p, (nfds_t)np, (int)HC_MIN(left_ms, 100)) < 0)
      for (int i = 0; i < np; i++) p[i].revents = 0;
    root_drop_leavers(rt, p, rank_of, ng, np);
    if (hc_greeter_progress(&rt->greeter, p, root_take, rt) != HC_OK) {
      char msg[MSG_BYTES];
      snprintf(msg, sizeof(msg), "%s", hc_last_error());
      if (rt->nranks > 0 && rt->failed == HC_OK) root_fail_all(rt, HC_ERR_SYSTEM, msg);
      break;
    }
  }
  free(p);
  free(rank_of);
  root_free(rt);
  atomic_fetch_sub(&roots_running, 1);
  return NULL;
}

/* Waits, at most ROOT_GRACE_NS, for this process's roots to finish. */
static void roots_wait(void) {
  for (const uint64_t end = hc_now_ns() + ROOT_GRACE_NS; atomic_load(&roots_running) > 0 && hc_now_ns() < end;)
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}

/* Takes ownership of listen_fd in every case. */
static hc_result_t root_start(int listen_fd, const union hc_sockaddr *where, const uint8_t secret[16]) {
  struct root *rt = calloc(1, sizeof(*rt));
  if (rt == NULL) {
    close(listen_fd);
    return HC_FAIL(HC_ERR_SYSTEM, "bootstrap: out of host memory for the root");
  }
  rt->listen_fd = listen_fd;
  rt->start_ns = hc_now_ns();
  rt->deadline_ns = hc_deadline_ns();
  rt->next_report_ns = rt->start_ns + REPORT_NS;
  hc_sock_str(where, rt->where, sizeof(rt->where));
  char greeter_where[96];
  snprintf(greeter_where, sizeof(greeter_where), "bootstrap root %s", rt->where);
  hc_greeter_init(&rt->greeter, listen_fd, secret, HC_AUTH_BOOT_ROOT, HELLO_BYTES, greeter_where);
  pthread_attr_t attr;
  pthread_t tid;
  int e = pthread_attr_init(&attr);
  if (e == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&roots_running, 1);
    e = pthread_create(&tid, &attr, root_main, rt);
    if (e != 0) atomic_fetch_sub(&roots_running, 1);
    pthread_attr_destroy(&attr);
  }
  if (e != 0) {
    char where_s[80];
    snprintf(where_s, sizeof(where_s), "%s", rt->where);
    root_free(rt);
    return HC_FAIL(HC_ERR_SYSTEM, "bootstrap root %s: cannot start its thread: %s", where_s, strerror(e));
  }
  HC_INFO(HC_BOOT, "bootstrap root up at %s", rt->where);
  return HC_OK;
}

hc_result_t hc_bootstrap_id_create(uint8_t id[HC_UNIQUE_ID_BYTES]) {
  union hc_sockaddr local, bound;
  char ifname[64];
  uint8_t secret[16];
  int fd;
  HC_TRY(hc_sock_local_addr(&local, ifname, sizeof(ifname)));
  HC_TRY(hc_random_bytes(secret, sizeof(secret)));
  HC_TRY(hc_sock_listen(&local, &fd, &bound));
  HC_TRY(root_start(fd, &bound, secret));
  id_encode(id, &bound, secret);
  return HC_OK;
}

/* Whether addr is one of this host's: bind() to it only works if it is. */
static bool addr_is_local(const union hc_sockaddr *addr) {
  union hc_sockaddr probe = *addr;
  if (probe.sa.sa_family == AF_INET) probe.sin.sin_port = 0;
  else probe.sin6.sin6_port = 0;
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  bool local = bind(s, &probe.sa, hc_sock_len(&probe)) == 0;
  close(s);
  return local;
}

hc_result_t hc_bootstrap_id_from_addr(const char *host, int port, const uint8_t secret[16], bool start_root,
                                      uint8_t id[HC_UNIQUE_ID_BYTES]) {
  union hc_sockaddr addr;
  if (port <= 0 || port > 65535)
    return HC_FAIL(HC_ERR_USAGE, "bootstrap: root port %d of host \"%s\" must be 1..65535", port, host);
  HC_TRY(hc_sock_resolve(host, port, &addr));
  if (start_root) {
    /* Other hosts may reach us by another address than the one this host
     * resolves the name to: a NAT or load balancer in front of it, or the
     * 127.0.1.1 that Debian's /etc/hosts gives the host's own name while
     * DNS gives everyone else the real one. Then listen on every address,
     * on the same port. */
    union hc_sockaddr bind_addr = addr;
    bool loopback = addr.sa.sa_family == AF_INET ? (ntohl(addr.sin.sin_addr.s_addr) >> 24) == 127
                                                 : IN6_IS_ADDR_LOOPBACK(&addr.sin6.sin6_addr);
    if (loopback || !addr_is_local(&addr)) {
      char buf[80];
      HC_INFO(HC_BOOT, "bootstrap: %s (%s) is %s; the root listens on all addresses", host,
              hc_sock_str(&addr, buf, sizeof(buf)), loopback ? "a loopback address" : "not an address of this host");
      memset(&bind_addr, 0, sizeof(bind_addr));
      bind_addr.sa.sa_family = addr.sa.sa_family;
      if (addr.sa.sa_family == AF_INET) bind_addr.sin.sin_port = htons((uint16_t)port);
      else bind_addr.sin6.sin6_port = htons((uint16_t)port);
    }
    int fd;
    hc_result_t r = hc_sock_listen(&bind_addr, &fd, NULL);
    if (r != HC_OK) {
      char cause[512];
      snprintf(cause, sizeof(cause), "%s", hc_last_error());
      return HC_FAIL(r, "bootstrap: cannot start the root for %s port %d (another job on that port?): %s", host, port,
                     cause);
    }
    HC_TRY(root_start(fd, &addr, secret));
  }
  id_encode(id, &addr, secret);
  return HC_OK;
}

/* ---- rank side ---- */

static void bootstrap_close(struct hc_bootstrap *b) {
  if (b->next_fd >= 0) close(b->next_fd);
  if (b->prev_fd >= 0) close(b->prev_fd);
  b->next_fd = b->prev_fd = -1;
}

void hc_bootstrap_destroy(struct hc_bootstrap *b) {
  if (b == NULL) return;
  bootstrap_close(b);
  free(b);
}

/* Registers with the root; *next gets next's ring address. */
static hc_result_t join_root(struct hc_bootstrap *b, const union hc_sockaddr *root, const uint8_t secret[16],
                             const union hc_sockaddr *ring, uint64_t deadline_ns, union hc_sockaddr *next) {
  char where[80];
  hc_sock_str(root, where, sizeof(where));
  int fd = -1;
  hc_result_t r;
  uint8_t hello[HELLO_BYTES] = {0}, reply[REPLY_BYTES];
  rank_head_put(hello, HELLO_MAGIC, b);
  if (ring) put_addr(hello + RANK_HEAD_BYTES, ring);
  HC_TRY_GOTO(hc_sock_connect_blocking(root, "the bootstrap root", deadline_ns, b->abort_flag, &fd), r, out);
  HC_TRY_GOTO(hc_auth_client_blocking(fd, secret, HC_AUTH_BOOT_ROOT, deadline_ns, b->abort_flag), r, out);
  HC_TRY_GOTO(hc_sock_send_blocking(fd, hello, sizeof(hello), deadline_ns, b->abort_flag), r, out);
  /* From here on the root watches this connection: if this process dies,
   * every rank waiting there learns it at once (tests/chaos/gpu.sh reads
   * this line to tell such a kill from one before the rank arrived). */
  HC_INFO(HC_BOOT, "bootstrap rank %d of %d: joined the root %s", b->rank, b->nranks, where);
  /* The root answers once every rank has arrived, so this wait is the
   * rendezvous itself. It gets a short grace past our deadline: the root's
   * deadline is about the same, and its answer names the missing ranks,
   * which our own timeout could not. */
  struct hc_bootstrap_reply rep;
  do {
    r = hc_sock_recv_blocking(fd, reply, sizeof(reply), deadline_ns + ROOT_GRACE_NS, b->abort_flag);
    if (r != HC_OK) {
      char cause[512];
      snprintf(cause, sizeof(cause), "%s", hc_last_error());
      r = HC_FAIL(r, "bootstrap rank %d of %d: no answer from the root %s before all ranks arrived: %s", b->rank,
                  b->nranks, where, cause);
      goto out;
    }
    hc_bootstrap_reply_parse(reply, sizeof(reply), &rep); /* sizeof(reply) is its length: always parses */
    if (rep.waiting)
      HC_WARN(HC_BOOT, "bootstrap rank %d of %d: the root %s is waiting: %s", b->rank, b->nranks, where, rep.msg);
  } while (rep.waiting);
  if (rep.status != HC_OK) {
    r = HC_FAIL(rep.code, "bootstrap rank %d of %d: the root %s ended the rendezvous: %s", b->rank, b->nranks, where,
                rep.msg);
    roots_wait();
    goto out;
  }
  *next = rep.next;
  if (b->nranks > 1 && !rep.next_ok) {
    r = HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: the root %s sent no valid address for rank %d", b->rank, where,
                (b->rank + 1) % b->nranks);
    goto out;
  }
  r = HC_OK;
out:
  if (fd >= 0) close(fd);
  return r;
}

static hc_result_t connect_next(struct hc_bootstrap *b, const union hc_sockaddr *next, const uint8_t secret[16],
                                uint64_t deadline_ns) {
  uint8_t hello[RING_HELLO_BYTES];
  rank_head_put(hello, RING_MAGIC, b);
  hc_sock_str(next, b->next_name, sizeof(b->next_name));
  char what[48];
  snprintf(what, sizeof(what), "rank %d (next on the bootstrap ring)", (b->rank + 1) % b->nranks);
  HC_TRY(hc_sock_connect_blocking(next, what, deadline_ns, b->abort_flag, &b->next_fd));
  HC_TRY(hc_auth_client_blocking(b->next_fd, secret, HC_AUTH_BOOT_RING, deadline_ns, b->abort_flag));
  HC_TRY(hc_sock_send_blocking(b->next_fd, hello, sizeof(hello), deadline_ns, b->abort_flag));
  return HC_OK;
}

/* Waits for prev on the ring listener. Strangers, and peers that are not
 * prev, are dropped with a WARN while the wait goes on. */
struct prev_wait {
  struct hc_bootstrap *b;
  int prev, fd;
};

static void take_prev(void *ctx, int fd, const uint8_t *hello, const char *who) {
  struct prev_wait *w = ctx;
  struct hc_bootstrap *b = w->b;
  struct hc_bootstrap_ring_hello h;
  bool parsed = hc_bootstrap_ring_hello_parse(hello, RING_HELLO_BYTES, &h);
  if (w->fd < 0 && parsed && h.rank == (uint32_t)w->prev && h.nranks == (uint32_t)b->nranks) {
    w->fd = fd;
    snprintf(b->prev_name, sizeof(b->prev_name), "%s", who);
    return;
  }
  HC_WARN(HC_BOOT, "bootstrap rank %d: %s claims to be rank %u of %u, expected rank %d of %d; dropped", b->rank, who,
          h.rank, h.nranks, w->prev, b->nranks);
  close(fd);
}

static hc_result_t accept_prev(struct hc_bootstrap *b, int listen_fd, const uint8_t secret[16], uint64_t deadline_ns) {
  struct prev_wait w = {b, (b->rank + b->nranks - 1) % b->nranks, -1};
  struct hc_greeter g;
  char where[64];
  snprintf(where, sizeof(where), "bootstrap rank %d's ring listener", b->rank);
  hc_greeter_init(&g, listen_fd, secret, HC_AUTH_BOOT_RING, RING_HELLO_BYTES, where);
  struct pollfd p[1 + HC_GREET_MAX_PENDING];
  uint64_t start = hc_now_ns(), next_report = start + REPORT_NS;
  hc_result_t r = HC_OK;
  while (w.fd < 0 && r == HC_OK) {
    uint64_t now = hc_now_ns();
    if (b->abort_flag && atomic_load_explicit(b->abort_flag, memory_order_acquire)) {
      r = HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: aborted while waiting for rank %d to connect", b->rank, w.prev);
      break;
    }
    if (now >= deadline_ns) {
      r = HC_FAIL(HC_ERR_REMOTE,
                  "bootstrap rank %d: rank %d did not connect to the ring within HETCCL_TIMEOUT (%lld s)", b->rank,
                  w.prev, (long long)hc_param_int(HC_P_TIMEOUT));
      break;
    }
    if (now >= next_report) {
      next_report = now + REPORT_NS;
      HC_WARN(HC_BOOT,
              "bootstrap rank %d: rank %d has not connected to the ring after %llu s; waiting %llu s more "
              "(HETCCL_TIMEOUT)",
              b->rank, w.prev, (unsigned long long)((now - start) / 1000000000ull),
              (unsigned long long)((deadline_ns - now) / 1000000000ull));
    }
    int n = hc_greeter_pollfds(&g, p);
    uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
    if (poll(p, (nfds_t)n, (int)HC_MIN(left_ms, 100)) < 0)
      for (int i = 0; i < n; i++) p[i].revents = 0;
    r = hc_greeter_progress(&g, p, take_prev, &w);
  }
  hc_greeter_close(&g);
  if (r == HC_OK) b->prev_fd = w.fd;
  else if (w.fd >= 0) close(w.fd);
  return r;
}

hc_result_t hc_bootstrap_create(const uint8_t id[HC_UNIQUE_ID_BYTES], int rank, int nranks,
                                const atomic_bool *abort_flag, struct hc_bootstrap **out) {
  union hc_sockaddr root, local, ring, next;
  uint8_t secret[16];
  char ifname[64];
  int listen_fd = -1;
  hc_result_t r;
  *out = NULL;
  if (nranks < 1 || nranks > MAX_RANKS)
    return HC_FAIL(HC_ERR_ARG, "bootstrap: nranks = %d (must be 1..%d)", nranks, MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return HC_FAIL(HC_ERR_ARG, "bootstrap: rank %d is out of range for nranks = %d", rank, nranks);
  HC_TRY(id_decode(id, &root, secret));
  struct hc_bootstrap *b;
  HC_TRY(hc_calloc(&b, 1, sizeof(*b), "bootstrap"));
  b->rank = rank;
  b->nranks = nranks;
  b->next_fd = b->prev_fd = -1;
  b->abort_flag = abort_flag;
  uint64_t deadline_ns = hc_deadline_ns();
  if (nranks > 1) {
    /* Listening before the root hears of us: by the time any rank learns
     * this address, connections to it are already queued, not refused. */
    HC_TRY_GOTO(hc_sock_local_addr(&local, ifname, sizeof(ifname)), r, fail);
    HC_TRY_GOTO(hc_sock_listen(&local, &listen_fd, &ring), r, fail);
  }
  HC_TRY_GOTO(join_root(b, &root, secret, nranks > 1 ? &ring : NULL, deadline_ns, &next), r, fail);
  if (nranks > 1) {
    /* Every handshake needs its acceptor in accept_prev: rank 0 connects
     * first, everyone else accepts first, so the handshakes run around the
     * ring one after another instead of all waiting on each other. */
    if (rank == 0) HC_TRY_GOTO(connect_next(b, &next, secret, deadline_ns), r, fail);
    HC_TRY_GOTO(accept_prev(b, listen_fd, secret, deadline_ns), r, fail);
    if (rank != 0) HC_TRY_GOTO(connect_next(b, &next, secret, deadline_ns), r, fail);
    close(listen_fd);
    listen_fd = -1;
    HC_TRY_GOTO(hc_sock_tune(b->next_fd), r, fail);
    HC_TRY_GOTO(hc_sock_tune(b->prev_fd), r, fail);
    HC_INFO(HC_BOOT, "bootstrap rank %d of %d: ring up via %s, next %s, prev %s", rank, nranks, ifname, b->next_name,
            b->prev_name);
  }
  *out = b;
  return HC_OK;
fail:
  if (listen_fd >= 0) close(listen_fd);
  hc_bootstrap_destroy(b);
  return r;
}

/* ---- all-gather over the ring ---- */

/* Shuts the ring down after a failure: next sees EOF, prev a reset, each
 * fails in turn and does the same, so the error reaches every rank quickly
 * instead of at its deadline. */
static void ring_break(struct hc_bootstrap *b) {
  b->broken = true;
  shutdown(b->next_fd, SHUT_RDWR);
  shutdown(b->prev_fd, SHUT_RDWR);
}

/* Sends n bytes to next while receiving n from prev. Both at once: a rank
 * that only sent would block once slots outgrow the socket buffers, and
 * everyone in the ring would wait on everyone. */
static hc_result_t ring_exchange(struct hc_bootstrap *b, const void *sendbuf, void *recvbuf, size_t n,
                                 uint64_t deadline_ns) {
  const char *sp = sendbuf;
  char *rp = recvbuf;
  size_t sent = 0, got = 0;
  int prev = (b->rank + b->nranks - 1) % b->nranks, next = (b->rank + 1) % b->nranks;
  while (sent < n || got < n) {
    if (b->abort_flag && atomic_load_explicit(b->abort_flag, memory_order_acquire))
      return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: aborted", b->rank);
    if (sent < n) {
      ssize_t w = send(b->next_fd, sp + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: send to rank %d (%s): %s", b->rank, next, b->next_name,
                       strerror(errno));
    }
    if (got < n) {
      ssize_t g = recv(b->prev_fd, rp + got, n - got, MSG_DONTWAIT);
      if (g > 0) got += (size_t)g;
      else if (g == 0)
        return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: rank %d (%s) closed the connection", b->rank, prev,
                       b->prev_name);
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: receive from rank %d (%s): %s", b->rank, prev, b->prev_name,
                       strerror(errno));
    }
    if (sent == n && got == n) break;
    uint64_t now = hc_now_ns();
    if (now >= deadline_ns) {
      return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: timed out (HETCCL_TIMEOUT) %s rank %d (%s)", b->rank,
                     got < n ? "receiving from" : "sending to", got < n ? prev : next,
                     got < n ? b->prev_name : b->next_name);
    }
    struct pollfd p[2];
    int np = 0;
    if (sent < n) p[np++] = (struct pollfd){.fd = b->next_fd, .events = POLLOUT};
    if (got < n) p[np++] = (struct pollfd){.fd = b->prev_fd, .events = POLLIN};
    uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
    if (poll(p, (nfds_t)np, (int)HC_MIN(left_ms, 100)) < 0 && errno != EINTR)
      return HC_FAIL(HC_ERR_SYSTEM, "bootstrap rank %d: poll: %s", b->rank, strerror(errno));
  }
  return HC_OK;
}

static hc_result_t allgather_steps(struct hc_bootstrap *b, uint8_t *buf, size_t size) {
  uint64_t deadline_ns = hc_deadline_ns();
  int n = b->nranks, prev = (b->rank + n - 1) % n;
  /* Ranks that disagree on the slot size, or on which all-gather this is,
   * would read each other's bytes as garbage: compare first. */
  uint8_t mine[GATHER_HDR_BYTES], theirs[GATHER_HDR_BYTES];
  put32(mine, GATHER_MAGIC);
  put32(mine + 4, b->seq);
  put32(mine + 8, (uint32_t)((uint64_t)size >> 32));
  put32(mine + 12, (uint32_t)size);
  HC_TRY(ring_exchange(b, mine, theirs, sizeof(mine), deadline_ns));
  struct hc_bootstrap_gather_hdr h;
  if (!hc_bootstrap_gather_hdr_parse(theirs, sizeof(theirs), &h) || h.seq != b->seq || h.size != (uint64_t)size) {
    return HC_FAIL(HC_ERR_USAGE,
                   "bootstrap rank %d: out of step with rank %d: it is in all-gather #%u of %llu-byte slots, this "
                   "rank in #%u of %zu-byte slots",
                   b->rank, prev, h.seq, (unsigned long long)h.size, b->seq, size);
  }
  /* Step s: pass on the slot received in step s-1 (our own in step 0). */
  for (int s = 0; s < n - 1; s++) {
    int send_slot = (b->rank - s + n) % n, recv_slot = (b->rank - s - 1 + n) % n;
    HC_TRY(ring_exchange(b, buf + (size_t)send_slot * size, buf + (size_t)recv_slot * size, size, deadline_ns));
  }
  return HC_OK;
}

hc_result_t hc_bootstrap_allgather(struct hc_bootstrap *b, void *buf, size_t size) {
  if (b->broken) return HC_FAIL(HC_ERR_REMOTE, "bootstrap rank %d: the ring failed in an earlier call", b->rank);
  if (b->nranks == 1) return HC_OK;
  if (size > SIZE_MAX / (size_t)b->nranks)
    return HC_FAIL(HC_ERR_ARG, "bootstrap: all-gather of %d slots of %zu bytes overflows", b->nranks, size);
  hc_result_t r = allgather_steps(b, buf, size);
  if (r != HC_OK) {
    ring_break(b);
    return r;
  }
  b->seq++;
  return HC_OK;
}

int hc_bootstrap_hung_up(struct hc_bootstrap *b) {
  if (b->nranks == 1) return -1;
  if (b->broken) return (b->rank + b->nranks - 1) % b->nranks;
  const int fds[2] = {b->prev_fd, b->next_fd};
  const int ranks[2] = {(b->rank + b->nranks - 1) % b->nranks, (b->rank + 1) % b->nranks};
  for (int i = 0; i < 2; i++) {
    struct pollfd p = {.fd = fds[i], .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return ranks[i];
  }
  return -1;
}

hc_result_t hc_bootstrap_barrier(struct hc_bootstrap *b) {
  if (b->nranks == 1) return HC_OK;
  uint8_t *buf;
  HC_TRY(hc_calloc(&buf, (size_t)b->nranks, 1, "bootstrap barrier"));
  hc_result_t r = hc_bootstrap_allgather(b, buf, 1);
  free(buf);
  return r;
}
