/*
 * The ib transport under the transport contract (tests/common/
 * net_contract.h) between two processes, one in each soft-RoCE VM
 * (guest_coll.sh, case "pair"): rank 0 in VM a, rank 1 in VM b. Every case
 * makes a fresh pair; the two ends exchange handles and meet at barriers
 * through files in a folder both VMs share. Edges of the sizes case: the
 * eager size and the RDMA chunk (their defaults). There is no way to inject
 * garbage into ib's queue pairs, so the garbage case is left out. In the
 * peer_killed case rank 1 runs its end in a forked child, which kills
 * itself. Exit 77 without a usable RDMA port.
 *   test_ib_pair RANK SHARED_DIR [CASE]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net_contract.h"
#include "testutil.h"

#define WAIT_S 120 /* software RoCE under CPU emulation is slow */

/* Files in a shared folder: NAME.SEQ.RANK, one namespace per case. */
struct file_link {
  const char *dir, *case_name;
  int seq;
};

static bool put_file(struct file_link *l, int me, const void *data, size_t n) {
  char path[512], tmp[520];
  snprintf(path, sizeof(path), "%s/%s.%d.%d", l->dir, l->case_name, l->seq, me);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL) return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok && rename(tmp, path) == 0;
}
static bool get_file(struct file_link *l, int peer, void *data, size_t n) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s.%d.%d", l->dir, l->case_name, l->seq, peer);
  for (int t = 0; t < WAIT_S * 100; t++) {
    FILE *f = fopen(path, "rb");
    if (f) {
      bool ok = fread(data, 1, n, f) == n;
      fclose(f);
      if (ok) return true;
    }
    usleep(10000);
  }
  return false;
}
static bool file_swap(void *arg, int me, const struct hc_net_handle *mine, struct hc_net_handle *theirs) {
  struct file_link *l = arg;
  bool ok = put_file(l, me, mine, sizeof(*mine)) && get_file(l, 1 - me, theirs, sizeof(*theirs));
  l->seq++;
  return ok;
}
static bool file_sync(void *arg, int me) {
  struct file_link *l = arg;
  char c = 's';
  bool ok = put_file(l, me, &c, 1) && get_file(l, 1 - me, &c, 1);
  l->seq++;
  return ok;
}

/* Eager size and RDMA chunk (HETCCL_IB_EAGER_BYTES, HETCCL_IB_CHUNK). */
static const size_t ib_edges[] = {8192, 512 * 1024};
static const struct nc_transport ib = {
    .name = "ib", .ops = &hc_net_ib, .edges = ib_edges, .nedges = HC_ARRAY_LEN(ib_edges), .step_s = WAIT_S};

/* Runs this rank's end of c; rank 1 of a case whose peer dies runs it in a
 * child that must end by SIGKILL. */
static bool run_end(const struct nc_case *c, int rank, const char *dir) {
  struct file_link fl = {.dir = dir, .case_name = c->name};
  struct nc_link link = {file_swap, file_sync, &fl};
  long f0 = tu_failures();
  if (!(c->peer_dies && rank == 1)) {
    nc_end_run(&ib, c, rank, &link);
  } else {
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      nc_end_run(&ib, c, rank, &link);
      fflush(stdout);
      _exit(1); /* the body kills this process; ending here is a failure */
    }
    int status = 0;
    pid_t w = 0;
    for (int t = 0; t < WAIT_S * 100 && child > 0 && (w = waitpid(child, &status, WNOHANG)) == 0; t++) usleep(10000);
    if (CHECK(child > 0 && w == child, "rank 1's child (pid %d) did not end within %d s", (int)child, WAIT_S))
      CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank 1's child ended with status 0x%x", status);
    else if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    }
  }
  tu_set_case("%s", "");
  bool ok = tu_failures() == f0;
  printf("%s ib %s, rank %d\n", ok ? "ok  " : "FAIL", c->name, rank);
  fflush(stdout);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: test_ib_pair RANK SHARED_DIR [CASE]\n");
    return 2;
  }
  tu_init(argc, argv);
  int rank = atoi(argv[1]) != 0;
  const char *only = argc == 4 ? argv[3] : NULL;
  if (only && nc_case_find(only) == NULL) {
    fprintf(stderr, "test_ib_pair: no case %s\n", only);
    return 2;
  }
  if (hc_params_load() != HC_OK) return 1;
  bool usable = false;
  char what[256];
  hc_net_ib_probe(&usable, what, sizeof(what));
  if (!usable) {
    printf("skip: no usable RDMA port (%s)\n", what);
    return 77;
  }
  hc_log_set_rank(rank);
  for (int i = 0; i < nc_ncases; i++)
    if ((only == NULL || !strcmp(only, nc_cases[i].name)) && !nc_cases[i].needs_garbage)
      run_end(&nc_cases[i], rank, argv[2]);
  return tu_finish(rank == 0 ? "test_ib_pair rank 0" : "test_ib_pair rank 1");
}
