/*
 * bootstrap: ranks as threads of one process. Rendezvous, ring all-gather
 * (small and large slots) and barrier for several sizes; strangers at the
 * root, and a rendezvous among 50 silent or garbage connections; invalid
 * rank sets, and WORLD_SIZE / duplicate RANK mismatches by environment init
 * with and without HETCCL_SECRET; launcher environments; IPv6; abort; and a
 * missing peer failing at HETCCL_TIMEOUT instead of hanging.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/bootstrap_wire.h"
#include "util/auth.h"
#include "util/sock.h"
#include "testutil.h"

static uint64_t ms_since(uint64_t t0) { return (hc_now_ns() - t0) / 1000000; }

static void set_param(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  hc_params_reset();
  CHECK(hc_params_load() == HC_OK, "params load after %s", name);
}

/* ---- ranks as threads ---- */

/* What one rank thread does after rendezvous. */
enum rank_work { WORK_FULL, WORK_NONE, WORK_GATHER_THEN_LEAVE, WORK_GATHER_SIZE_OF_RANK };

struct rank_arg {
  const uint8_t *id;
  int rank, nranks, claim_rank, claim_nranks; /* claim_*: what it tells bootstrap */
  enum rank_work work;
  const atomic_bool *abort_flag;
  hc_result_t r;      /* of hc_bootstrap_create */
  hc_result_t r_work; /* of the first failing call after it */
  char err[1024];
  uint64_t ms; /* time spent in create */
};

/* Distinct per-rank, per-byte content, so a misplaced slot shows. */
static uint8_t slot_byte(int rank, size_t i, size_t size) { return (uint8_t)(rank * 31 + i * 7 + size); }

static hc_result_t gather_check(struct hc_bootstrap *b, int rank, int n, size_t size) {
  uint8_t *buf = malloc((size_t)n * size);
  memset(buf, 0xee, (size_t)n * size);
  for (size_t i = 0; i < size; i++) buf[(size_t)rank * size + i] = slot_byte(rank, i, size);
  hc_result_t r = hc_bootstrap_allgather(b, buf, size);
  for (int s = 0; r == HC_OK && s < n; s++) {
    for (size_t i = 0; i < size; i++) {
      if (buf[(size_t)s * size + i] != slot_byte(s, i, size)) {
        CHECK(false, "rank %d of %d: slot %d byte %zu of %zu is 0x%02x, want 0x%02x", rank, n, s, i, size,
              buf[(size_t)s * size + i], slot_byte(s, i, size));
        break;
      }
    }
  }
  free(buf);
  return r;
}

static void *rank_thread(void *arg) {
  struct rank_arg *a = arg;
  struct hc_bootstrap *b = NULL;
  hc_log_set_rank(a->rank);
  uint64_t t0 = hc_now_ns();
  a->r = hc_bootstrap_create(a->id, a->claim_rank, a->claim_nranks, a->abort_flag, &b);
  a->ms = ms_since(t0);
  a->r_work = HC_OK;
  if (a->r != HC_OK) {
    snprintf(a->err, sizeof(a->err), "%s", hc_last_error());
    return NULL;
  }
  hc_result_t r = HC_OK;
  switch (a->work) {
  case WORK_FULL: {
    static const size_t sizes[] = {4, 4096, 1, 100000};
    for (size_t i = 0; i < HC_ARRAY_LEN(sizes) && r == HC_OK; i++) r = gather_check(b, a->rank, a->nranks, sizes[i]);
    if (r == HC_OK) r = hc_bootstrap_barrier(b);
    if (r == HC_OK) r = gather_check(b, a->rank, a->nranks, 4);
    if (r == HC_OK) r = hc_bootstrap_barrier(b);
    break;
  }
  case WORK_NONE: break;
  case WORK_GATHER_THEN_LEAVE:
    /* Rank 0 leaves after one all-gather; the others must fail their
     * second one promptly, not at the deadline. */
    r = gather_check(b, a->rank, a->nranks, 8);
    if (r == HC_OK && a->rank != 0) r = gather_check(b, a->rank, a->nranks, 8);
    break;
  case WORK_GATHER_SIZE_OF_RANK: r = gather_check(b, a->rank, a->nranks, a->rank == 1 ? 16 : 8); break;
  }
  a->r_work = r;
  if (r != HC_OK) snprintf(a->err, sizeof(a->err), "%s", hc_last_error());
  hc_bootstrap_destroy(b);
  return NULL;
}

/* Starts n rank threads on id (rank i claims claims[i] if given) and joins
 * them. */
static void run_ranks(const uint8_t *id, int n, struct rank_arg *args, enum rank_work work,
                      const atomic_bool *abort_flag) {
  pthread_t *t = calloc((size_t)n, sizeof(*t));
  for (int i = 0; i < n; i++) {
    args[i].id = id;
    args[i].rank = i;
    args[i].nranks = n;
    if (args[i].claim_nranks == 0) args[i].claim_rank = i, args[i].claim_nranks = n;
    args[i].work = work;
    args[i].abort_flag = abort_flag;
    args[i].r = args[i].r_work = HC_ERR_INTERNAL;
    pthread_create(&t[i], NULL, rank_thread, &args[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  free(t);
}

/* id_create runs on "rank 0's" thread: here, before the others start. */
static void test_sizes(void) {
  static const int sizes[] = {1, 2, 3, 5, 8};
  for (size_t k = 0; k < HC_ARRAY_LEN(sizes); k++) {
    int n = sizes[k];
    uint8_t id[HC_UNIQUE_ID_BYTES];
    CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create for n=%d", n);
    struct rank_arg args[8] = {0};
    uint64_t t0 = hc_now_ns();
    run_ranks(id, n, args, WORK_FULL, NULL);
    for (int i = 0; i < n; i++) {
      CHECK(args[i].r == HC_OK && args[i].r_work == HC_OK, "n=%d rank %d: create %d work %d: %s", n, i, args[i].r,
            args[i].r_work, args[i].err);
    }
    printf("n=%d: rendezvous + 6 all-gathers/barriers in %llu ms\n", n, (unsigned long long)ms_since(t0));
  }
}

/* ---- strangers at the root ---- */

struct stranger {
  union hc_sockaddr root;
  int kind; /* 0 wrong secret, 1 garbage, 2 silent then close, 3 wrong secret on the ring purpose */
  hc_result_t r;
};

static void *stranger_thread(void *arg) {
  struct stranger *s = arg;
  static const uint8_t wrong[16] = {0xde, 0xad};
  int fd;
  uint64_t dl = hc_now_ns() + 3000000000ull;
  s->r = hc_sock_connect_blocking(&s->root, "the root", dl, NULL, &fd);
  if (s->r != HC_OK) return NULL;
  switch (s->kind) {
  case 0: s->r = hc_auth_client_blocking(fd, wrong, HC_AUTH_BOOT_ROOT, dl, NULL); break;
  case 1: {
    char junk[64];
    memset(junk, 'Z', sizeof(junk));
    s->r = hc_sock_send_blocking(fd, junk, sizeof(junk), dl, NULL);
    uint8_t b;
    if (s->r == HC_OK) s->r = hc_sock_recv_blocking(fd, &b, 1, dl, NULL);
    break;
  }
  case 2:
    usleep(200000);
    s->r = HC_ERR_REMOTE;
    break;
  }
  close(fd);
  return NULL;
}

/* A port nobody uses right now (bound, then released). */
static int free_port(void) {
  union hc_sockaddr a, bound;
  int fd;
  hc_sock_resolve("127.0.0.1", 0, &a);
  if (hc_sock_listen(&a, &fd, &bound) != HC_OK) return 0;
  close(fd);
  return hc_sock_port(&bound);
}

static void test_strangers(void) {
  int port = free_port();
  uint8_t secret[16], id[HC_UNIQUE_ID_BYTES], id_rank[HC_UNIQUE_ID_BYTES], got[16];
  hc_random_bytes(secret, sizeof(secret));
  CHECK(hc_bootstrap_id_from_addr("127.0.0.1", port, secret, true, id) == HC_OK, "root on 127.0.0.1:%d", port);
  CHECK(hc_bootstrap_id_secret(id, got) == HC_OK && !memcmp(got, secret, 16), "id keeps the secret");
  /* What a rank other than 0 computes from the same environment. */
  CHECK(hc_bootstrap_id_from_addr("127.0.0.1", port, secret, false, id_rank) == HC_OK &&
            !memcmp(id, id_rank, HC_UNIQUE_ID_BYTES),
        "ids of root and non-root agree");
  /* Strangers first, all three kinds, before any rank: the root must drop
   * each and keep waiting. */
  struct stranger s[3];
  pthread_t t[3];
  for (int k = 0; k < 3; k++) {
    s[k].kind = k;
    hc_sock_resolve("127.0.0.1", port, &s[k].root);
    pthread_create(&t[k], NULL, stranger_thread, &s[k]);
  }
  for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
  CHECK(s[0].r == HC_ERR_REMOTE, "wrong-secret stranger got in: %d", s[0].r);
  CHECK(s[1].r == HC_ERR_REMOTE, "garbage stranger was answered: %d", s[1].r);
  struct rank_arg args[3] = {0};
  run_ranks(id, 3, args, WORK_FULL, NULL);
  for (int i = 0; i < 3; i++)
    CHECK(args[i].r == HC_OK && args[i].r_work == HC_OK, "rank %d after strangers: %s", i, args[i].err);

  /* A second root on the same port fails, naming the address. */
  uint8_t id2[HC_UNIQUE_ID_BYTES];
  int lfd;
  union hc_sockaddr a;
  hc_sock_resolve("127.0.0.1", 0, &a);
  hc_sock_listen(&a, &lfd, &a);
  char busy[16];
  snprintf(busy, sizeof(busy), "%d", hc_sock_port(&a));
  hc_result_t r = hc_bootstrap_id_from_addr("127.0.0.1", hc_sock_port(&a), secret, true, id2);
  CHECK(r == HC_ERR_SYSTEM && strstr(hc_last_error(), "127.0.0.1") && strstr(hc_last_error(), busy),
        "root on a busy port -> %d", r);
  close(lfd);
  CHECK(hc_bootstrap_id_from_addr("127.0.0.1", 0, secret, true, id2) == HC_ERR_USAGE, "port 0 accepted");
}

/* 50 connections that stay open through the whole rendezvous, silent or
 * sending half a record of garbage: the root serves the ranks meanwhile.
 * HETCCL_TIMEOUT=4, below the 5 s handshake window, makes this a check
 * without a timing threshold: a root that waited out any stranger's window
 * before serving the ranks (one after another: 250 s; or all at once: 5 s)
 * would fail them, while the rendezvous itself takes milliseconds. */
enum { CROWD = 50 };

static void crowd_rendezvous(bool garbage) {
  uint8_t id[HC_UNIQUE_ID_BYTES];
  union hc_sockaddr root;
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  struct hc_bootstrap_id parsed;
  CHECK(hc_bootstrap_id_parse(id, sizeof(id), &parsed) == HC_OK, "id parses");
  root = parsed.root;
  int fds[CROWD];
  int connected = 0;
  for (int i = 0; i < CROWD; i++) {
    fds[i] = -1;
    if (hc_sock_connect_blocking(&root, "the root", hc_now_ns() + 5000000000ull, NULL, &fds[i]) != HC_OK) continue;
    connected++;
    if (garbage) {
      /* Less than an auth hello (24 bytes): the root must not wait for the
       * rest before serving anyone else. Every other one sends a full
       * record of junk, which fails at once. */
      char junk[64];
      memset(junk, 'Z' + i, sizeof(junk));
      CHECK(hc_sock_send_blocking(fds[i], junk, i % 2 ? 7 : sizeof(junk), hc_now_ns() + 5000000000ull, NULL) == HC_OK,
            "garbage %d", i);
    }
  }
  CHECK(connected == CROWD, "only %d of %d strangers connected", connected, CROWD);
  /* Lets the root take them in before the ranks queue behind them (were
   * it slower, the check would only be weaker, never fail wrongly). */
  usleep(200000);
  struct rank_arg args[3] = {0};
  uint64_t t0 = hc_now_ns();
  run_ranks(id, 3, args, WORK_FULL, NULL);
  for (int i = 0; i < 3; i++)
    CHECK(args[i].r == HC_OK && args[i].r_work == HC_OK, "rank %d among %d %s connections: %s", i, CROWD,
          garbage ? "garbage" : "silent", args[i].err);
  printf("rendezvous of 3 ranks among %d %s connections: %llu ms\n", CROWD, garbage ? "garbage" : "silent",
         (unsigned long long)ms_since(t0));
  for (int i = 0; i < CROWD; i++)
    if (fds[i] >= 0) close(fds[i]);
}

static void test_crowd(void) {
  set_param("HETCCL_TIMEOUT", "4");
  crowd_rendezvous(false);
  crowd_rendezvous(true);
  set_param("HETCCL_TIMEOUT", NULL);
}

/* ---- invalid rank sets ---- */

static void test_invalid(void) {
  uint8_t id[HC_UNIQUE_ID_BYTES];
  struct hc_bootstrap *b = (struct hc_bootstrap *)1;
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  CHECK(hc_bootstrap_create(id, 2, 2, NULL, &b) == HC_ERR_ARG && b == NULL, "rank 2 of 2 accepted");
  CHECK(hc_bootstrap_create(id, 0, 0, NULL, &b) == HC_ERR_ARG, "nranks 0 accepted");
  uint8_t junk[HC_UNIQUE_ID_BYTES] = {0};
  CHECK(hc_bootstrap_create(junk, 0, 1, NULL, &b) == HC_ERR_ARG, "zero id accepted");
  uint8_t secret[16];
  CHECK(hc_bootstrap_id_secret(junk, secret) == HC_ERR_ARG, "secret of zero id");

  /* Two threads both claim rank 0 of 2: both are refused, by the root. */
  struct rank_arg args[2] = {{.claim_rank = 0, .claim_nranks = 2}, {.claim_rank = 0, .claim_nranks = 2}};
  uint64_t t0 = hc_now_ns();
  run_ranks(id, 2, args, WORK_NONE, NULL);
  for (int i = 0; i < 2; i++)
    CHECK(args[i].r == HC_ERR_USAGE && strstr(args[i].err, "twice"), "duplicate rank: thread %d -> %d: %s", i,
          args[i].r, args[i].err);
  CHECK(ms_since(t0) < 2000, "duplicate rank took %llu ms", (unsigned long long)ms_since(t0));

  /* Disagreeing nranks. */
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  struct rank_arg args2[2] = {{.claim_rank = 0, .claim_nranks = 2}, {.claim_rank = 1, .claim_nranks = 3}};
  run_ranks(id, 2, args2, WORK_NONE, NULL);
  for (int i = 0; i < 2; i++)
    CHECK(args2[i].r == HC_ERR_USAGE && strstr(args2[i].err, "nranks"), "nranks mismatch: thread %d -> %d: %s", i,
          args2[i].r, args2[i].err);

  /* Ranks that disagree on the slot size fail with a message, not garbage. */
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  struct rank_arg args3[3] = {0};
  run_ranks(id, 3, args3, WORK_GATHER_SIZE_OF_RANK, NULL);
  bool usage = false;
  for (int i = 0; i < 3; i++) {
    CHECK(args3[i].r == HC_OK && args3[i].r_work != HC_OK, "size mismatch: rank %d -> %d", i, args3[i].r_work);
    usage |= args3[i].r_work == HC_ERR_USAGE && strstr(args3[i].err, "out of step");
  }
  CHECK(usage, "no rank reported the slot size mismatch");

  /* A rank that leaves: the others fail their next all-gather quickly. */
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  struct rank_arg args4[4] = {0};
  t0 = hc_now_ns();
  run_ranks(id, 4, args4, WORK_GATHER_THEN_LEAVE, NULL);
  CHECK(args4[0].r_work == HC_OK, "rank 0: %s", args4[0].err);
  for (int i = 1; i < 4; i++)
    CHECK(args4[i].r_work == HC_ERR_REMOTE, "rank %d after rank 0 left -> %d", i, args4[i].r_work);
  CHECK(ms_since(t0) < 3000, "departure noticed after %llu ms", (unsigned long long)ms_since(t0));
}

/* ---- launcher environments (single-threaded part) ---- */

static const char *const launcher_vars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
};

static void clear_launcher_env(void) {
  for (size_t i = 0; i < HC_ARRAY_LEN(launcher_vars); i++) unsetenv(launcher_vars[i]);
  set_param("HETCCL_SECRET", NULL);
}

static void test_env(void) {
  struct hc_launch_env e;
  hc_result_t r;
  clear_launcher_env();
  r = hc_launch_env_read(&e);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "RANK"), "empty environment -> %d", r);

  /* torchrun */
  setenv("RANK", "3", 1), setenv("WORLD_SIZE", "8", 1), setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1), setenv("MASTER_PORT", "29500", 1);
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && !strcmp(e.launcher, "torchrun") && e.rank == 3 && e.nranks == 8 && e.local_rank == 1 &&
            !strcmp(e.master_addr, "10.1.2.3") && e.master_port == 29500,
        "torchrun -> %d", r);
  uint8_t want[32];
  /* Without WORLD_SIZE: ranks that disagree on it still reach the root. */
  const char *text = "hetccl:10.1.2.3:29500";
  hc_sha256(text, strlen(text), want);
  CHECK(r == HC_OK && !memcmp(e.secret, want, 16), "derived secret");
  set_param("HETCCL_SECRET", "00112233445566778899aabbccddeeFF");
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && e.secret[0] == 0x00 && e.secret[1] == 0x11 && e.secret[15] == 0xff, "HETCCL_SECRET -> %d", r);
  set_param("HETCCL_SECRET", "0011223344556677");
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE && strstr(hc_last_error(), "HETCCL_SECRET"), "short secret");
  set_param("HETCCL_SECRET", "0011223344556677889900112233445g");
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE, "non-hex secret");
  set_param("HETCCL_SECRET", NULL);
  unsetenv("MASTER_PORT");
  unsetenv("MASTER_ADDR");
  r = hc_launch_env_read(&e);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "MASTER_ADDR") && strstr(hc_last_error(), "MASTER_PORT"),
        "torchrun without master -> %d", r);
  setenv("MASTER_ADDR", "h", 1), setenv("MASTER_PORT", "29500", 1), setenv("RANK", "8", 1);
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE && strstr(hc_last_error(), "RANK"), "RANK 8 of 8");
  setenv("RANK", "x", 1);
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE, "RANK x");
  setenv("RANK", "0", 1), setenv("MASTER_PORT", "70000", 1);
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE && strstr(hc_last_error(), "MASTER_PORT"), "port 70000");
  unsetenv("LOCAL_RANK"), setenv("MASTER_PORT", "1234", 1);
  CHECK(hc_launch_env_read(&e) == HC_OK && e.local_rank == -1, "no LOCAL_RANK -> -1");

  /* Slurm: first host of the step's node list, port from the job id. */
  clear_launcher_env();
  setenv("SLURM_PROCID", "5", 1), setenv("SLURM_NTASKS", "16", 1), setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_STEP_NODELIST", "node[01-04,07],gpu5", 1), setenv("SLURM_JOB_NODELIST", "other[1-9]", 1);
  setenv("SLURM_JOB_ID", "123456", 1);
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && !strcmp(e.launcher, "slurm") && e.rank == 5 && e.nranks == 16 && e.local_rank == 1 &&
            !strcmp(e.master_addr, "node01") && e.master_port == 23456,
        "slurm -> %d addr %s port %d", r, e.master_addr, e.master_port);
  static const struct {
    const char *list, *first;
  } lists[] = {{"node07", "node07"},
               {"a,b", "a"},
               {"n[3-4]-ib,m1", "n3-ib"},
               {"rack[2,5]-n[10-12]", "rack2-n10"},
               {"gpu[009]", "gpu009"}};
  for (size_t i = 0; i < HC_ARRAY_LEN(lists); i++) {
    setenv("SLURM_STEP_NODELIST", lists[i].list, 1);
    r = hc_launch_env_read(&e);
    CHECK(r == HC_OK && !strcmp(e.master_addr, lists[i].first), "node list %s -> %s", lists[i].list, e.master_addr);
  }
  setenv("SLURM_STEP_NODELIST", "node[01-", 1);
  CHECK(hc_launch_env_read(&e) == HC_ERR_USAGE, "broken node list accepted");
  unsetenv("SLURM_STEP_NODELIST");
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && !strcmp(e.master_addr, "other1"), "job node list -> %s", e.master_addr);
  setenv("MASTER_ADDR", "10.0.0.9", 1), setenv("MASTER_PORT", "4444", 1);
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && !strcmp(e.master_addr, "10.0.0.9") && e.master_port == 4444, "slurm with MASTER_*");
  unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT"), unsetenv("SLURM_JOB_NODELIST"), unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_NTASKS");
  r = hc_launch_env_read(&e);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "SLURM_NTASKS") && strstr(hc_last_error(), "NODELIST") &&
            strstr(hc_last_error(), "SLURM_JOB_ID"),
        "slurm missing vars -> %d", r);

  /* Open MPI: MASTER_* required. Inside Slurm, Open MPI's variables win. */
  clear_launcher_env();
  setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "1", 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1), setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  r = hc_launch_env_read(&e);
  CHECK(r == HC_ERR_USAGE && strstr(hc_last_error(), "MASTER_ADDR") && strstr(hc_last_error(), "MASTER_PORT"),
        "openmpi without master -> %d", r);
  setenv("MASTER_ADDR", "::1", 1), setenv("MASTER_PORT", "5555", 1);
  r = hc_launch_env_read(&e);
  CHECK(r == HC_OK && !strcmp(e.launcher, "openmpi") && e.rank == 2 && e.nranks == 4 && e.local_rank == 0 &&
            !strcmp(e.master_addr, "::1") && e.master_port == 5555,
        "openmpi -> %d", r);
  clear_launcher_env();
}

/* Environment init end to end: every rank reads the same variables, rank 0
 * starts the root, the others retry until it is up. */
struct env_rank {
  int rank;
  struct hc_launch_env env;
  uint8_t id[HC_UNIQUE_ID_BYTES];
  struct rank_arg arg;
};

static void *env_rank_thread(void *p) {
  struct env_rank *er = p;
  /* Rank 0 comes late: the others' connects must be retried. */
  if (er->rank == 0) usleep(300000);
  er->arg.r =
      hc_bootstrap_id_from_addr(er->env.master_addr, er->env.master_port, er->env.secret, er->rank == 0, er->id);
  if (er->arg.r != HC_OK) return NULL;
  er->arg.id = er->id;
  er->arg.rank = er->arg.claim_rank = er->rank;
  er->arg.nranks = er->arg.claim_nranks = er->env.nranks;
  er->arg.work = WORK_FULL;
  return rank_thread(&er->arg);
}

static void test_env_init(void) {
  enum { N = 3 };
  struct env_rank er[N];
  char port[16];
  snprintf(port, sizeof(port), "%d", free_port());
  clear_launcher_env();
  setenv("MASTER_ADDR", "localhost", 1), setenv("MASTER_PORT", port, 1), setenv("WORLD_SIZE", "3", 1);
  for (int i = 0; i < N; i++) {
    char rank[16];
    snprintf(rank, sizeof(rank), "%d", i);
    setenv("RANK", rank, 1);
    memset(&er[i], 0, sizeof(er[i]));
    er[i].rank = i;
    CHECK(hc_launch_env_read(&er[i].env) == HC_OK, "env rank %d", i);
  }
  clear_launcher_env();
  pthread_t t[N];
  for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, env_rank_thread, &er[i]);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++)
    CHECK(er[i].arg.r == HC_OK && er[i].arg.r_work == HC_OK, "env init rank %d: %d/%d %s", i, er[i].arg.r,
          er[i].arg.r_work, er[i].arg.err);
}

/* Ranks started with different WORLD_SIZE, or two with the same RANK, by
 * environment init (derived secret, and with HETCCL_SECRET): every rank
 * gets the root's verdict, naming the problem, not a failed proof or a
 * timeout. Under HETCCL_TIMEOUT=20 a wait for the deadline would end in a
 * timeout message, which the checks reject. */
static void env_mismatch(const int *ranks, const int *sizes, const char *secret, const char *want) {
  enum { N = 3 };
  struct env_rank er[N];
  char port[16];
  snprintf(port, sizeof(port), "%d", free_port());
  clear_launcher_env();
  set_param("HETCCL_SECRET", secret);
  setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", port, 1);
  for (int i = 0; i < N; i++) {
    char rank[16], size[16];
    snprintf(rank, sizeof(rank), "%d", ranks[i]);
    snprintf(size, sizeof(size), "%d", sizes[i]);
    setenv("RANK", rank, 1), setenv("WORLD_SIZE", size, 1);
    memset(&er[i], 0, sizeof(er[i]));
    er[i].rank = ranks[i];
    CHECK(hc_launch_env_read(&er[i].env) == HC_OK, "env rank %d of %d", ranks[i], sizes[i]);
  }
  clear_launcher_env();
  pthread_t t[N];
  uint64_t t0 = hc_now_ns();
  for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, env_rank_thread, &er[i]);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++) {
    CHECK(er[i].arg.r == HC_ERR_USAGE && strstr(er[i].arg.err, want), "%s secret: rank %d of %d -> %d: %s",
          secret ? "given" : "derived", ranks[i], sizes[i], er[i].arg.r, er[i].arg.err);
  }
  printf("%s secret: every rank told within %llu ms: %s\n", secret ? "given" : "derived",
         (unsigned long long)ms_since(t0), er[N - 1].arg.err);
}

static void test_env_mismatch(void) {
  set_param("HETCCL_TIMEOUT", "20");
  static const int ranks[] = {0, 1, 2}, sizes[] = {2, 3, 3}, dup_ranks[] = {0, 1, 1}, dup_sizes[] = {3, 3, 3};
  static const char *const secrets[] = {NULL, "00112233445566778899aabbccddeeff"};
  for (size_t k = 0; k < HC_ARRAY_LEN(secrets); k++) {
    env_mismatch(ranks, sizes, secrets[k], "ranks disagree on nranks (WORLD_SIZE");
    env_mismatch(dup_ranks, dup_sizes, secrets[k], "rank 1 joined twice");
  }
  set_param("HETCCL_SECRET", NULL);
  set_param("HETCCL_TIMEOUT", NULL);
}

/* ---- IPv6 ---- */

static void test_ipv6(void) {
  union hc_sockaddr a;
  int fd;
  if (hc_sock_resolve("::1", 0, &a) != HC_OK || hc_sock_listen(&a, &fd, NULL) != HC_OK) {
    printf("skipped: IPv6 loopback (::1) is not available\n");
    return;
  }
  close(fd);
  set_param("HETCCL_SOCKET_IFNAME", "lo");
  set_param("HETCCL_SOCKET_FAMILY", "AF_INET6");
  uint8_t id[HC_UNIQUE_ID_BYTES];
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "IPv6 id_create");
  struct rank_arg args[3] = {0};
  run_ranks(id, 3, args, WORK_FULL, NULL);
  for (int i = 0; i < 3; i++) CHECK(args[i].r == HC_OK && args[i].r_work == HC_OK, "IPv6 rank %d: %s", i, args[i].err);
  set_param("HETCCL_SOCKET_IFNAME", NULL);
  set_param("HETCCL_SOCKET_FAMILY", NULL);
}

/* ---- abort and timeout ---- */

struct aborter {
  atomic_bool *flag;
  int after_ms;
};

static void *abort_thread(void *p) {
  struct aborter *a = p;
  usleep((useconds_t)a->after_ms * 1000);
  atomic_store(a->flag, true);
  return NULL;
}

static void test_abort(void) {
  uint8_t id[HC_UNIQUE_ID_BYTES];
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  atomic_bool flag = false;
  struct aborter ab = {&flag, 300};
  pthread_t t;
  pthread_create(&t, NULL, abort_thread, &ab);
  /* Rank 0 of 2 waits for a rank 1 that never comes, until aborted. */
  struct rank_arg args[1] = {{.claim_rank = 0, .claim_nranks = 2}};
  run_ranks(id, 1, args, WORK_NONE, &flag);
  pthread_join(t, NULL);
  CHECK(args[0].r == HC_ERR_REMOTE && strstr(args[0].err, "aborted"), "abort -> %d: %s", args[0].r, args[0].err);
  CHECK(args[0].ms >= 250 && args[0].ms < 1000, "abort took %llu ms", (unsigned long long)args[0].ms);
}

static void *run_ranks_thread(void *p) {
  struct rank_arg *a = p;
  run_ranks(a->id, 1, a, WORK_NONE, NULL);
  return NULL;
}

/* Rank 1 of 3 said hello and then leaves before rank 2 arrives (here it
 * aborts its wait; a killed process closes its connection the same way):
 * the root ends the rendezvous at once for rank 0, naming rank 1, instead
 * of waiting for rank 2 until HETCCL_TIMEOUT (60 s here, so that a root
 * that waited would answer with "timed out", not "left"). */
struct leaver {
  struct rank_arg arg;
  atomic_bool flag;
};

static void *leaver_thread(void *p) {
  struct leaver *l = p;
  run_ranks(l->arg.id, 1, &l->arg, WORK_NONE, &l->flag);
  return NULL;
}

static void test_leaver(void) {
  set_param("HETCCL_TIMEOUT", "60");
  uint8_t id[HC_UNIQUE_ID_BYTES];
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  static struct leaver one; /* rank 1 */
  one = (struct leaver){.arg = {.id = id, .claim_rank = 1, .claim_nranks = 3}};
  struct aborter ab = {&one.flag, 1000}; /* its hello has long reached the root by then */
  pthread_t t[2];
  pthread_create(&t[0], NULL, leaver_thread, &one);
  pthread_create(&t[1], NULL, abort_thread, &ab);
  struct rank_arg zero[1] = {{.claim_rank = 0, .claim_nranks = 3}};
  run_ranks(id, 1, zero, WORK_NONE, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(zero[0].r == HC_ERR_REMOTE && strstr(zero[0].err, "rank 1 left"), "rank 0 -> %d: %s", zero[0].r, zero[0].err);
  CHECK(one.arg.r == HC_ERR_REMOTE && strstr(one.arg.err, "aborted"), "rank 1 -> %d: %s", one.arg.r, one.arg.err);
  set_param("HETCCL_TIMEOUT", NULL);
}

/* hc_bootstrap_hung_up: -1 while the ring is whole, even with bytes of a
 * later all-gather waiting unread; a neighbour's rank once it has closed
 * its end. */
struct made {
  const uint8_t *id;
  int rank;
  struct hc_bootstrap *b;
};

static void *make_thread(void *p) {
  struct made *m = p;
  hc_log_set_rank(m->rank);
  CHECK(hc_bootstrap_create(m->id, m->rank, 3, NULL, &m->b) == HC_OK, "rank %d: create", m->rank);
  return NULL;
}

struct gather {
  struct hc_bootstrap *b;
  int rank;
  hc_result_t r;
};

static void *gather_thread(void *p) {
  struct gather *g = p;
  g->r = gather_check(g->b, g->rank, 3, 8);
  return NULL;
}

static void test_hung_up(void) {
  uint8_t id[HC_UNIQUE_ID_BYTES];
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  struct made m[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    m[i] = (struct made){.id = id, .rank = i};
    pthread_create(&t[i], NULL, make_thread, &m[i]);
  }
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  if (!m[0].b || !m[1].b || !m[2].b) return;
  for (int i = 0; i < 3; i++) CHECK(hc_bootstrap_hung_up(m[i].b) == -1, "rank %d: a hang-up in a whole ring", i);
  /* Ranks 0 and 1 start an all-gather: rank 1's header reaches rank 2 and
   * waits there unread, which is no hang-up; then rank 2 joins. */
  struct gather g[2] = {{.b = m[0].b, .rank = 0}, {.b = m[1].b, .rank = 1}};
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, gather_thread, &g[i]);
  usleep(200000);
  CHECK(hc_bootstrap_hung_up(m[2].b) == -1, "rank 2: unread bytes from rank 1 taken for a hang-up");
  CHECK(gather_check(m[2].b, 2, 3, 8) == HC_OK, "rank 2: all-gather");
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    CHECK(g[i].r == HC_OK, "rank %d: all-gather", i);
  }
  hc_bootstrap_destroy(m[1].b);
  for (int i = 0; i < 3; i += 2) {
    int seen = -1;
    for (uint64_t t0 = hc_now_ns(); seen < 0 && ms_since(t0) < 10000;) { /* only a hang reaches 10 s */
      seen = hc_bootstrap_hung_up(m[i].b);
      if (seen < 0) usleep(1000);
    }
    CHECK(seen == 1, "rank %d: hung_up -> %d after rank 1 closed, want 1", i, seen);
    hc_bootstrap_destroy(m[i].b);
  }
}

static void test_timeout(void) {
  set_param("HETCCL_TIMEOUT", "2");
  uint8_t id[HC_UNIQUE_ID_BYTES], id_noroot[HC_UNIQUE_ID_BYTES];
  CHECK(hc_bootstrap_id_create(id) == HC_OK, "id_create");
  /* Nobody at all at the root address: connect retries until the deadline.
   * Runs alongside the case below, to keep the test short. */
  int port = free_port();
  uint8_t secret[16] = {0};
  CHECK(hc_bootstrap_id_from_addr("127.0.0.1", port, secret, false, id_noroot) == HC_OK, "id without root");
  struct rank_arg noroot = {.id = id_noroot, .claim_rank = 1, .claim_nranks = 2};
  pthread_t t;
  pthread_create(&t, NULL, run_ranks_thread, &noroot);
  /* Ranks 0 and 1 of 3; rank 2 never comes. */
  struct rank_arg args[2] = {{.claim_rank = 0, .claim_nranks = 3}, {.claim_rank = 1, .claim_nranks = 3}};
  run_ranks(id, 2, args, WORK_NONE, NULL);
  pthread_join(t, NULL);
  for (int i = 0; i < 2; i++) {
    CHECK((args[i].r == HC_ERR_REMOTE || args[i].r == HC_ERR_SYSTEM) && args[i].err[0],
          "missing peer: rank %d -> %d: %s", i, args[i].r, args[i].err);
    CHECK(args[i].ms >= 1500 && args[i].ms < 4000, "missing peer: rank %d failed after %llu ms", i,
          (unsigned long long)args[i].ms);
    printf("rank %d without rank 2: %s\n", i, args[i].err);
  }
  CHECK(noroot.r == HC_ERR_REMOTE && strstr(noroot.err, "127.0.0.1") && noroot.ms >= 1500 && noroot.ms < 4000,
        "no root: %d after %llu ms: %s", noroot.r, (unsigned long long)noroot.ms, noroot.err);
  set_param("HETCCL_TIMEOUT", NULL);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (getenv("HETCCL_DEBUG") == NULL) setenv("HETCCL_DEBUG", "NONE", 1);
  hc_params_reset();
  hc_params_load();
  /* Environment changes happen while no other thread runs. */
  static const struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {{"env", test_env},           {"ipv6", test_ipv6},
               {"sizes", test_sizes},       {"strangers", test_strangers},
               {"env_init", test_env_init}, {"invalid", test_invalid},
               {"crowd", test_crowd},       {"env_mismatch", test_env_mismatch},
               {"abort", test_abort},       {"leaver", test_leaver},
               {"hung_up", test_hung_up},   {"timeout", test_timeout}};
  for (size_t i = 0; i < HC_ARRAY_LEN(tests); i++) {
    uint64_t t1 = hc_now_ns();
    tests[i].fn();
    printf("%s: %llu ms\n", tests[i].name, (unsigned long long)ms_since(t1));
  }
  return tu_finish("test_bootstrap");
}
