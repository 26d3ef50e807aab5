/*
 * hetccl-run: start N local ranks of one program, the way torchrun would.
 *
 *   hetccl-run -n N [--addr HOST] [--timeout SECONDS] [--bind core | --cpu-list LIST]
 *              [--rank-env R:VAR=VALUE]... [--] prog [args...]
 *
 * Environment of rank R: RANK=R, LOCAL_RANK=R, WORLD_SIZE=N,
 * LOCAL_WORLD_SIZE=N, GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_RANK=R,
 * ROLE_WORLD_SIZE=N, MASTER_ADDR (127.0.0.1 or --addr), MASTER_PORT (bound
 * as port 0 on MASTER_ADDR, read back and closed: free when we looked) and
 * HETCCL_SECRET (32 random hex digits, kept when already set), plus every
 * --rank-env of rank R. The rank variables of other launchers (Slurm, Open
 * MPI, PMI) are removed, so a job started inside srun or mpirun still sees
 * one consistent placement. stdin is /dev/null.
 *
 * Placement: by default the ranks go where the scheduler puts them. With
 * --bind core, rank R may run only on the R-th CPU this launcher may run on
 * (its affinity mask, in CPU order); with --cpu-list LIST (e.g. "0-7" or
 * "0,2,4,6"), only on the R-th CPU of LIST. So each rank owns a core, as
 * with mpirun --bind-to core: a benchmark then measures the library, not
 * the scheduler packing two ranks onto one core. Fewer CPUs than ranks is
 * a usage error.
 *
 * Output: each rank's stdout and stderr come back through pipes and go to
 * our stdout and stderr, one whole line per write, prefixed "[R] " (R padded
 * to the width of N-1). A line longer than 64 KiB is cut into several; a
 * last line without a newline gets one.
 *
 * Failure: when a rank exits non-zero or dies of a signal, one line on
 * stderr names it, the other ranks get SIGTERM, and SIGKILL 3 s later.
 * --timeout: after that many seconds (fractions allowed) every rank gets the
 * same treatment and we exit 124.
 *
 * Signals: SIGINT, SIGTERM and SIGHUP sent to hetccl-run are forwarded to
 * every rank. Each rank leads its own process group, so a terminal's Ctrl-C
 * reaches a rank once (through us), and a signal from us reaches the rank's
 * own children too. If hetccl-run itself is killed, the ranks get SIGKILL
 * (PR_SET_PDEATHSIG). Whatever a rank leaves behind in its process group is
 * killed once all ranks have exited; hetccl-run is a child subreaper, so it
 * also reaps those leftovers (no zombies, even under a pid 1 that does not
 * reap).
 *
 * Exit status: 0 when every rank exited 0; else the first failure's exit
 * code, or 128+signal for a rank killed by a signal; 124 on --timeout;
 * 2 on a usage error, 1 when a rank cannot be started.
 *
 * Uses libc only (Linux: pipe2, prctl, getrandom).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 4096
#define LINE_CAP (64 * 1024) /* longest line written in one piece */
#define GRACE_NS (3 * 1000000000ull)
#define DRAIN_NS (1000000000ull) /* how long leftovers may hold a pipe open */
#define NEVER UINT64_MAX

/* One output pipe of a rank: bytes read but not yet written as a line. */
struct stream {
  int fd;     /* read end; -1 once closed */
  int out_fd; /* 1 or 2 */
  char *buf;
  size_t len, cap;
};

struct rank {
  pid_t pid; /* also its process group id */
  bool alive;
  struct stream out[2]; /* stdout, stderr */
};

struct rank_env {
  int rank;
  char *var;
  const char *value;
};

static int sig_pipe[2] = {-1, -1};
static struct rank *ranks;
static int nranks, prefix_width = 1;
static int *rank_cpu;      /* the CPU rank R is bound to; NULL: not bound */
static bool out_broken[3]; /* our stdout / stderr gave EPIPE or similar */
static bool pipe_ignored;  /* SIGPIPE was ignored when we started */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig) {
  int saved = errno;
  unsigned char c = (unsigned char)sig;
  ssize_t r = write(sig_pipe[1], &c, 1); /* full pipe: the loop wakes anyway */
  (void)r;
  errno = saved;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: hetccl-run -n N [--addr HOST] [--timeout SECONDS] [--bind core | --cpu-list LIST]\n"
          "                  [--rank-env R:VAR=VALUE]... [--] prog [args...]\n"
          "  -n N                    number of local ranks (1..%d)\n"
          "  --addr HOST             MASTER_ADDR (default 127.0.0.1)\n"
          "  --timeout SECONDS       kill every rank and exit 124 after this long\n"
          "  --bind core             rank R runs only on the R-th CPU of our affinity mask\n"
          "  --cpu-list LIST         rank R runs only on the R-th CPU of LIST (\"0-7\", \"0,2,4\")\n"
          "  --rank-env R:VAR=VALUE  set VAR=VALUE for rank R only (repeatable)\n"
          "  -h, --help              this text\n",
          MAX_RANKS);
}

/* Writes all of iov (prefix, text, newline) with as few writes as possible;
 * one write in the normal case, so that lines of different ranks never mix.
 * A non-blocking descriptor that is full is waited on. */
static void write_all(int fd, struct iovec *iov, int n) {
  while (n > 0 && !out_broken[fd]) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, -1);
        continue;
      }
      out_broken[fd] = true; /* reader gone: drop output, keep the job */
      return;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
}

static void emit_line(int rank, int out_fd, const char *text, size_t len) {
  char prefix[32];
  int plen = snprintf(prefix, sizeof(prefix), "[%*d] ", prefix_width, rank);
  bool has_nl = len > 0 && text[len - 1] == '\n';
  struct iovec iov[3] = {
      {.iov_base = prefix, .iov_len = (size_t)plen},
      {.iov_base = (void *)text, .iov_len = len},
      {.iov_base = "\n", .iov_len = has_nl ? 0 : 1},
  };
  write_all(out_fd, iov, has_nl ? 2 : 3);
}

/* Writes every complete line in s->buf; with at_eof also the rest. A buffer
 * full of one line is written as a line of its own. */
static void stream_flush(int rank, struct stream *s, bool at_eof) {
  if (s->len == 0) return; /* buf may still be NULL */
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (nl == NULL) break;
    size_t end = (size_t)(nl - s->buf) + 1;
    emit_line(rank, s->out_fd, s->buf + start, end - start);
    start = end;
  }
  if (start < s->len && (at_eof || s->len - start >= LINE_CAP)) {
    emit_line(rank, s->out_fd, s->buf + start, s->len - start);
    start = s->len;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

static void stream_close(int rank, struct stream *s) {
  if (s->fd < 0) return;
  stream_flush(rank, s, true);
  close(s->fd);
  s->fd = -1;
  free(s->buf);
  s->buf = NULL;
  s->len = s->cap = 0;
}

/* Reads what is there (the fd is non-blocking) and writes complete lines.
 * Closes the stream at end of file or on a read error. */
static void stream_read(int rank, struct stream *s) {
  while (s->fd >= 0) {
    if (s->cap - s->len < 4096 && s->cap < LINE_CAP) {
      size_t cap = s->cap ? s->cap * 2 : 8192;
      if (cap > LINE_CAP) cap = LINE_CAP;
      char *b = realloc(s->buf, cap);
      if (b == NULL) {
        stream_flush(rank, s, true); /* out of memory: write what we hold */
        if (s->cap == 0) return;
      } else {
        s->buf = b;
        s->cap = cap;
      }
    }
    ssize_t got = read(s->fd, s->buf + s->len, s->cap - s->len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got <= 0) {
      stream_close(rank, s);
      return;
    }
    s->len += (size_t)got;
    stream_flush(rank, s, false);
  }
}

/* Sends sig to the process group of every rank still running. */
static void signal_ranks(int sig) {
  for (int r = 0; r < nranks; r++)
    if (ranks[r].alive) kill(-ranks[r].pid, sig);
}

/* A port that was free on host when we looked (bind port 0, read, close);
 * 127.0.0.1 when host is not an address of this machine. 0 on failure. */
static int free_port(const char *host) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *list = NULL;
  const char *tries[2] = {host, "127.0.0.1"};
  for (int t = 0; t < 2; t++) {
    if (getaddrinfo(tries[t], "0", &hints, &list) != 0) continue;
    for (struct addrinfo *a = list; a != NULL; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      struct sockaddr_storage ss;
      socklen_t sl = sizeof(ss);
      int port = 0;
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&ss)->sin_port);
      close(fd);
      if (port > 0) {
        freeaddrinfo(list);
        return port;
      }
    }
    freeaddrinfo(list);
  }
  return 0;
}

static bool make_secret(char hex[33]) {
  unsigned char b[16];
  size_t have = 0;
  while (have < sizeof(b)) {
    ssize_t got = getrandom(b + have, sizeof(b) - have, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    have += (size_t)got;
  }
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return true;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static void set_env_int(const char *var, long v) {
  char text[32];
  snprintf(text, sizeof(text), "%ld", v);
  setenv(var, text, 1);
}

/* Fills rank_cpu[0..n) from --bind core (list NULL: the CPUs of our
 * affinity mask) or --cpu-list. False, with a message, when the list does
 * not parse or names fewer than n CPUs. */
static bool place_ranks(const char *list, int n) {
  cpu_set_t mine;
  if (list == NULL && sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    fprintf(stderr, "hetccl-run: --bind core: sched_getaffinity: %s\n", strerror(errno));
    return false;
  }
  rank_cpu = calloc((size_t)n, sizeof(*rank_cpu));
  if (rank_cpu == NULL) {
    fprintf(stderr, "hetccl-run: out of memory\n");
    return false;
  }
  int have = 0;
  if (list == NULL) {
    for (int cpu = 0; cpu < CPU_SETSIZE && have < n; cpu++)
      if (CPU_ISSET(cpu, &mine)) rank_cpu[have++] = cpu;
  } else {
    const char *p = list;
    bool bad = *p == 0;
    while (*p && !bad) {
      char *end;
      long lo = strtol(p, &end, 10), hi = lo;
      bad = end == p || lo < 0 || lo >= CPU_SETSIZE;
      p = end;
      if (!bad && *p == '-') {
        hi = strtol(p + 1, &end, 10);
        bad = end == p + 1 || hi < lo || hi >= CPU_SETSIZE;
        p = end;
      }
      for (long cpu = lo; !bad && cpu <= hi && have < n; cpu++) rank_cpu[have++] = (int)cpu;
      if (*p == ',' && p[1] != 0) p++;
      else bad = bad || *p != 0;
    }
    if (bad) {
      fprintf(stderr, "hetccl-run: --cpu-list %s: expected CPU numbers and ranges like 0-3,8\n", list);
      have = -1;
    }
  }
  if (have >= 0 && have < n)
    fprintf(stderr, "hetccl-run: %s names %d CPU%s for %d ranks\n",
            list ? "--cpu-list" : "--bind core: our affinity mask", have, have == 1 ? "" : "s", n);
  if (have < n) {
    free(rank_cpu);
    rank_cpu = NULL;
    return false;
  }
  return true;
}

/* Runs in the child between fork and exec: only async-signal-safe calls
 * until the environment edits (the parent is single-threaded, so malloc is
 * safe here too). Never returns. */
static void child_exec(int r, pid_t parent, const sigset_t *old_mask, int out_w, int err_w, const struct rank_env *envs,
                       int nenvs, char **argv) {
  /* Caught signals become default again at exec anyway; reset them now so
   * that none runs our handler here. Ignored ones stay ignored. */
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  struct sigaction cur;
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
    sigaction(sigs[i], NULL, &cur);
    if (cur.sa_handler != SIG_IGN) signal(sigs[i], SIG_DFL);
  }
  if (!pipe_ignored) signal(SIGPIPE, SIG_DFL);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126); /* the launcher died before prctl */
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0 && null_fd != 0) {
    dup2(null_fd, 0);
    close(null_fd);
  }
  if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) _exit(126);
  close(out_w);
  close(err_w);
  if (rank_cpu != NULL) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(rank_cpu[r], &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) {
      fprintf(stderr, "hetccl-run: rank %d: cannot bind to CPU %d: %s\n", r, rank_cpu[r], strerror(errno));
      _exit(126);
    }
  }
  set_env_int("RANK", r);
  set_env_int("LOCAL_RANK", r);
  set_env_int("ROLE_RANK", r);
  for (int i = 0; i < nenvs; i++)
    if (envs[i].rank == r) setenv(envs[i].var, envs[i].value, 1);
  sigprocmask(SIG_SETMASK, old_mask, NULL);
  execvp(argv[0], argv);
  fprintf(stderr, "hetccl-run: rank %d: cannot run %s: %s\n", r, argv[0], strerror(errno));
  _exit(127);
}

/* Forks rank r. False (with a message) when it could not be started. */
static bool start_rank(int r, const struct rank_env *envs, int nenvs, char **argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) < 0) {
    fprintf(stderr, "hetccl-run: pipe for rank %d: %s\n", r, strerror(errno));
    return false;
  }
  if (pipe2(err, O_CLOEXEC) < 0) {
    fprintf(stderr, "hetccl-run: pipe for rank %d: %s\n", r, strerror(errno));
    close(out[0]);
    close(out[1]);
    return false;
  }
  /* Blocked, so that no signal runs our handler in the child before exec
   * (it would write into our self-pipe). */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) child_exec(r, parent, &old, out[1], err[1], envs, nenvs, argv);
  int fork_errno = errno;
  if (pid > 0) setpgid(pid, pid); /* also in the child: no race on kill(-pid) */
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    fprintf(stderr, "hetccl-run: fork for rank %d: %s\n", r, strerror(fork_errno));
    close(out[0]);
    close(err[0]);
    return false;
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  ranks[r].pid = pid;
  ranks[r].alive = true;
  ranks[r].out[0] = (struct stream){.fd = out[0], .out_fd = 1};
  ranks[r].out[1] = (struct stream){.fd = err[0], .out_fd = 2};
  return true;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"addr", required_argument, NULL, 'a'},
      {"timeout", required_argument, NULL, 't'},
      {"rank-env", required_argument, NULL, 'e'},
      {"bind", required_argument, NULL, 'b'},
      {"cpu-list", required_argument, NULL, 'c'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  long n = 0;
  const char *addr = "127.0.0.1";
  double timeout_s = 0;
  const char *cpu_list = NULL;
  bool bind = false;
  struct rank_env envs[argc]; /* at most one per argument */
  int nenvs = 0;
  int c;
  /* "+": options end at the program name, whose own options stay its own. */
  while ((c = getopt_long(argc, argv, "+n:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'n':
      if (!parse_int(optarg, 1, MAX_RANKS, &n)) {
        fprintf(stderr, "hetccl-run: -n %s: expected a rank count from 1 to %d\n", optarg, MAX_RANKS);
        return 2;
      }
      break;
    case 'a':
      if (*optarg == 0) {
        fprintf(stderr, "hetccl-run: --addr needs a host\n");
        return 2;
      }
      addr = optarg;
      break;
    case 't': {
      char *end;
      timeout_s = strtod(optarg, &end);
      if (end == optarg || *end || !(timeout_s > 0) || !isfinite(timeout_s) || timeout_s > 1e9) {
        fprintf(stderr, "hetccl-run: --timeout %s: expected seconds > 0\n", optarg);
        return 2;
      }
      break;
    }
    case 'e': {
      char *colon = strchr(optarg, ':');
      char *eq = colon ? strchr(colon + 1, '=') : NULL;
      long r;
      if (colon == NULL || eq == NULL || eq == colon + 1) {
        fprintf(stderr, "hetccl-run: --rank-env %s: expected R:VAR=VALUE\n", optarg);
        return 2;
      }
      *colon = 0;
      bool ok = parse_int(optarg, 0, MAX_RANKS - 1, &r);
      *colon = ':';
      if (!ok) {
        fprintf(stderr, "hetccl-run: --rank-env %s: bad rank\n", optarg);
        return 2;
      }
      *eq = 0; /* argv is ours to edit: VAR ends here */
      envs[nenvs].rank = (int)r;
      envs[nenvs].var = colon + 1;
      envs[nenvs].value = eq + 1;
      nenvs++;
      break;
    }
    case 'b':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "none") != 0) {
        fprintf(stderr, "hetccl-run: --bind %s: expected core or none\n", optarg);
        return 2;
      }
      bind = strcmp(optarg, "core") == 0;
      break;
    case 'c': cpu_list = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (n == 0 || optind >= argc) {
    fprintf(stderr, "hetccl-run: %s\n", n == 0 ? "-n N is required" : "no program given");
    usage(stderr);
    return 2;
  }
  for (int i = 0; i < nenvs; i++) {
    if (envs[i].rank >= n) {
      fprintf(stderr, "hetccl-run: --rank-env %d:%s=...: rank %d does not exist with -n %ld\n", envs[i].rank,
              envs[i].var, envs[i].rank, n);
      return 2;
    }
  }
  nranks = (int)n;
  if ((bind || cpu_list != NULL) && !place_ranks(cpu_list, nranks)) return 2;
  for (long top = nranks - 1; top >= 10; top /= 10) prefix_width++;

  int port = free_port(addr);
  if (port == 0) {
    fprintf(stderr, "hetccl-run: cannot find a free port on %s\n", addr);
    return 1;
  }
  char secret[33];
  if (getenv("HETCCL_SECRET") == NULL) {
    if (!make_secret(secret)) {
      fprintf(stderr, "hetccl-run: getrandom: %s\n", strerror(errno));
      return 1;
    }
    setenv("HETCCL_SECRET", secret, 1);
  }
  /* Variables every rank shares; RANK and friends are set in the child. */
  set_env_int("WORLD_SIZE", nranks);
  set_env_int("LOCAL_WORLD_SIZE", nranks);
  set_env_int("GROUP_RANK", 0);
  set_env_int("GROUP_WORLD_SIZE", 1);
  set_env_int("ROLE_WORLD_SIZE", nranks);
  setenv("MASTER_ADDR", addr, 1);
  set_env_int("MASTER_PORT", port);
  static const char *const other_launchers[] = {"SLURM_PROCID",
                                                "SLURM_NTASKS",
                                                "SLURM_NPROCS",
                                                "SLURM_LOCALID",
                                                "OMPI_COMM_WORLD_RANK",
                                                "OMPI_COMM_WORLD_SIZE",
                                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                                "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                "PMI_RANK",
                                                "PMI_SIZE",
                                                "PMIX_RANK"};
  for (size_t i = 0; i < sizeof(other_launchers) / sizeof(other_launchers[0]); i++) unsetenv(other_launchers[i]);

  /* Orphans of the ranks' children become ours, so we reap them: no
   * zombies even where pid 1 does not reap. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  ranks = calloc((size_t)nranks, sizeof(*ranks));
  struct pollfd *pfds = calloc((size_t)nranks * 2 + 1, sizeof(*pfds));
  int *pfd_rank = calloc((size_t)nranks * 2 + 1, sizeof(*pfd_rank));
  if (ranks == NULL || pfds == NULL || pfd_rank == NULL || pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    fprintf(stderr, "hetccl-run: out of memory or descriptors\n");
    return 1;
  }
  /* A signal we were started with ignored (nohup, a background job) stays
   * ignored, here and in the ranks; the others are caught and forwarded. */
  struct sigaction sa = {.sa_handler = on_signal}, prev;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  for (size_t i = 0; i < sizeof(caught) / sizeof(caught[0]); i++) {
    sigaction(caught[i], NULL, &prev);
    if (prev.sa_handler != SIG_IGN || caught[i] == SIGCHLD) sigaction(caught[i], &sa, NULL);
  }
  sigaction(SIGPIPE, NULL, &prev);
  pipe_ignored = prev.sa_handler == SIG_IGN;
  signal(SIGPIPE, SIG_IGN);

  for (int r = 0; r < nranks; r++) {
    if (!start_rank(r, envs, nenvs, argv + optind)) {
      for (int k = 0; k < r; k++) kill(-ranks[k].pid, SIGKILL);
      for (int k = 0; k < r; k++) {
        waitpid(ranks[k].pid, NULL, 0);
        stream_close(k, &ranks[k].out[0]);
        stream_close(k, &ranks[k].out[1]);
      }
      free(pfds);
      free(pfd_rank);
      free(ranks);
      free(rank_cpu);
      return 1;
    }
  }

  int alive = nranks, exit_code = 0;
  bool terminating = false, timed_out = false, swept = false, no_children = false;
  uint64_t start = now_ns();
  uint64_t timeout_at = timeout_s > 0 ? start + (uint64_t)(timeout_s * 1e9) : NEVER;
  uint64_t kill_at = NEVER, drain_until = NEVER;

  for (;;) {
    /* Reap every rank that has exited; its pipes are drained first so that
     * its last lines come out before our line about it. Of the failures
     * found at one moment, the lowest rank counts as the first. */
    int st, failed_rank = -1, failed_status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) != 0) {
      if (pid < 0) {
        if (errno == ECHILD) no_children = true;
        if (errno != EINTR) break;
        continue;
      }
      int r = 0;
      while (r < nranks && ranks[r].pid != pid) r++;
      if (r == nranks || !ranks[r].alive) continue;
      ranks[r].alive = false;
      alive--;
      stream_read(r, &ranks[r].out[0]);
      stream_read(r, &ranks[r].out[1]);
      bool failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
      if (failed && !terminating && (failed_rank < 0 || r < failed_rank)) {
        failed_rank = r;
        failed_status = st;
      }
    }
    if (failed_rank >= 0) {
      terminating = true;
      int pid_f = (int)ranks[failed_rank].pid;
      if (WIFSIGNALED(failed_status)) {
        int sig = WTERMSIG(failed_status);
        exit_code = 128 + sig;
        fprintf(stderr, "hetccl-run: rank %d (pid %d) was killed by signal %d (%s)", failed_rank, pid_f, sig,
                strsignal(sig));
      } else {
        exit_code = WEXITSTATUS(failed_status);
        fprintf(stderr, "hetccl-run: rank %d (pid %d) exited with code %d", failed_rank, pid_f, exit_code);
      }
      if (alive > 0) fprintf(stderr, "; terminating the other %d rank%s", alive, alive == 1 ? "" : "s");
      fprintf(stderr, "\n");
      signal_ranks(SIGTERM);
      kill_at = now_ns() + GRACE_NS;
    }

    uint64_t now = now_ns();
    if (now >= timeout_at) {
      timeout_at = NEVER;
      if (alive > 0) {
        timed_out = true;
        fprintf(stderr, "hetccl-run: timeout after %g s; terminating %d rank%s\n", timeout_s, alive,
                alive == 1 ? "" : "s");
        signal_ranks(SIGTERM);
        if (!terminating) kill_at = now + GRACE_NS;
        terminating = true;
      }
    }
    if (now >= kill_at) {
      signal_ranks(SIGKILL);
      kill_at = NEVER;
    }
    if (alive == 0 && !swept) {
      /* Whatever the ranks left behind in their groups goes too; its pipes
       * then reach end of file. Leftovers that changed group get DRAIN_NS. */
      swept = true;
      for (int r = 0; r < nranks; r++) kill(-ranks[r].pid, SIGKILL);
      drain_until = now + DRAIN_NS;
    }

    int npfd = 0;
    pfds[npfd++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
    for (int r = 0; r < nranks; r++) {
      for (int k = 0; k < 2; k++) {
        if (ranks[r].out[k].fd < 0) continue;
        pfd_rank[npfd] = r * 2 + k;
        pfds[npfd++] = (struct pollfd){.fd = ranks[r].out[k].fd, .events = POLLIN};
      }
    }
    if (alive == 0 && ((npfd == 1 && no_children) || now >= drain_until)) break;

    uint64_t wake = timeout_at < kill_at ? timeout_at : kill_at;
    if (drain_until < wake) wake = drain_until;
    int wait_ms = wake == NEVER ? -1 : wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
    if (poll(pfds, (nfds_t)npfd, wait_ms) < 0 && errno != EINTR) {
      fprintf(stderr, "hetccl-run: poll: %s\n", strerror(errno));
      signal_ranks(SIGKILL);
      for (int r = 0; r < nranks; r++)
        if (ranks[r].alive) waitpid(ranks[r].pid, NULL, 0);
      exit_code = 1;
      break;
    }
    if (pfds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t got;
      while ((got = read(sig_pipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t i = 0; i < got; i++)
          if (sigs[i] != SIGCHLD) signal_ranks(sigs[i]); /* SIGCHLD: reaped above */
      }
    }
    for (int i = 1; i < npfd; i++) {
      if (pfds[i].revents == 0) continue;
      int r = pfd_rank[i] / 2;
      stream_read(r, &ranks[r].out[pfd_rank[i] % 2]);
    }
  }
  for (int r = 0; r < nranks; r++) {
    stream_close(r, &ranks[r].out[0]);
    stream_close(r, &ranks[r].out[1]);
  }
  free(pfds);
  free(pfd_rank);
  free(ranks);
  free(rank_cpu);
  return timed_out ? 124 : exit_code;
}
