/*
 * Rank placement from a launcher's environment: torchrun, Slurm (srun),
 * Open MPI (mpirun). Launcher variables are read with getenv() directly;
 * HETCCL_SECRET goes through the parameter table like every HETCCL_* one.
 *
 * When several launchers' variables are present, the one that started this
 * process directly wins: torchrun's workers inherit Slurm's variables, and
 * so do the processes mpirun starts inside a Slurm allocation.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../util/auth.h"
#include "bootstrap.h"

/* Names of the missing variables, collected so one message names them all. */
struct missing {
  char names[256];
};

static const char *need(struct missing *m, const char *name) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == 0) {
    size_t o = strlen(m->names);
    snprintf(m->names + o, sizeof(m->names) - o, "%s%s", o ? ", " : "", name);
    return NULL;
  }
  return v;
}

static hc_result_t parse_int_var(const char *name, const char *text, int64_t lo, int64_t hi, int *out) {
  int64_t v;
  if (hc_parse_int(text, &v) != HC_OK || v < lo || v > hi)
    return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\" is not an integer in %lld..%lld", name, text, (long long)lo, (long long)hi);
  *out = (int)v;
  return HC_OK;
}

static hc_result_t set_addr(struct hc_launch_env *env, const char *name, const char *addr) {
  if (strlen(addr) >= sizeof(env->master_addr))
    return HC_FAIL(HC_ERR_USAGE, "%s is %zu characters long; at most %zu are allowed", name, strlen(addr),
                   sizeof(env->master_addr) - 1);
  snprintf(env->master_addr, sizeof(env->master_addr), "%s", addr);
  return HC_OK;
}

/* Rank, size and local rank, checked against each other. */
static hc_result_t set_placement(struct hc_launch_env *env, const char *rank_var, const char *rank,
                                 const char *size_var, const char *size, const char *local_var) {
  HC_TRY(parse_int_var(size_var, size, 1, 1 << 24, &env->nranks));
  HC_TRY(parse_int_var(rank_var, rank, 0, env->nranks - 1, &env->rank));
  const char *local = getenv(local_var);
  env->local_rank = -1;
  if (local && local[0]) HC_TRY(parse_int_var(local_var, local, 0, env->nranks - 1, &env->local_rank));
  return HC_OK;
}

/* The first host of a Slurm node list: "node[01-04,07],gpu5" -> "node01".
 * Inside brackets only the first number of the first range counts. */
static hc_result_t first_slurm_host(const char *var, const char *list, char *out, size_t len) {
  size_t o = 0;
  bool in_brackets = false, taking = true;
  for (const char *c = list; *c; c++) {
    if (!in_brackets) {
      if (*c == ',') break;
      if (*c == '[') {
        in_brackets = true, taking = true;
        continue;
      }
    } else {
      if (*c == ']') {
        in_brackets = false;
        continue;
      }
      if (*c == ',' || *c == '-') taking = false;
      if (!taking) continue;
    }
    if (o + 1 >= len) return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\": first host name is too long", var, list);
    out[o++] = *c;
  }
  out[o] = 0;
  if (o == 0 || in_brackets) return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\" is not a Slurm node list", var, list);
  return HC_OK;
}

/* A launcher that names rank, size and local rank in variables of its own
 * and the root in MASTER_ADDR and MASTER_PORT (torchrun, Open MPI). */
struct master_launcher {
  const char *name, *title; /* env->launcher, and the launcher as messages name it */
  const char *rank_var, *size_var, *local_var;
  const char *hint; /* appended to the message naming missing variables */
};

static const struct master_launcher torchrun = {.name = "torchrun",
                                                .title = "torchrun",
                                                .rank_var = "RANK",
                                                .size_var = "WORLD_SIZE",
                                                .local_var = "LOCAL_RANK",
                                                .hint = ""};
static const struct master_launcher openmpi = {
    .name = "openmpi",
    .title = "Open MPI",
    .rank_var = "OMPI_COMM_WORLD_RANK",
    .size_var = "OMPI_COMM_WORLD_SIZE",
    .local_var = "OMPI_COMM_WORLD_LOCAL_RANK",
    .hint = " (under mpirun, export MASTER_ADDR and MASTER_PORT naming a free port on the host of rank 0)"};

static hc_result_t read_master_launcher(struct hc_launch_env *env, const struct master_launcher *l) {
  struct missing m = {{0}};
  const char *rank = need(&m, l->rank_var), *size = need(&m, l->size_var);
  const char *addr = need(&m, "MASTER_ADDR"), *port = need(&m, "MASTER_PORT");
  if (m.names[0])
    return HC_FAIL(HC_ERR_USAGE, "%s environment is incomplete: %s not set%s", l->title, m.names, l->hint);
  env->launcher = l->name;
  HC_TRY(set_placement(env, l->rank_var, rank, l->size_var, size, l->local_var));
  HC_TRY(set_addr(env, "MASTER_ADDR", addr));
  return parse_int_var("MASTER_PORT", port, 1, 65535, &env->master_port);
}

static hc_result_t read_slurm(struct hc_launch_env *env) {
  struct missing m = {{0}};
  const char *rank = need(&m, "SLURM_PROCID");
  const char *size = getenv("SLURM_NTASKS");
  if (size == NULL || size[0] == 0) size = getenv("SLURM_NPROCS"); /* older Slurm */
  if (size == NULL || size[0] == 0) need(&m, "SLURM_NTASKS");
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  const char *list_var = "SLURM_STEP_NODELIST", *list = NULL;
  if (addr == NULL || addr[0] == 0) {
    static const char *const vars[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    for (size_t i = 0; i < HC_ARRAY_LEN(vars) && list == NULL; i++) {
      list = getenv(vars[i]);
      if (list && list[0] == 0) list = NULL;
      if (list) list_var = vars[i];
    }
    if (list == NULL) need(&m, "SLURM_STEP_NODELIST or SLURM_JOB_NODELIST (or MASTER_ADDR)");
  }
  const char *job = NULL;
  if (port == NULL || port[0] == 0) {
    job = getenv("SLURM_JOB_ID");
    if (job == NULL || job[0] == 0) job = getenv("SLURM_JOBID");
    if (job == NULL || job[0] == 0) need(&m, "SLURM_JOB_ID (or MASTER_PORT)");
  }
  if (m.names[0]) return HC_FAIL(HC_ERR_USAGE, "Slurm environment is incomplete: %s not set", m.names);
  env->launcher = "slurm";
  HC_TRY(set_placement(env, "SLURM_PROCID", rank, "SLURM_NTASKS", size, "SLURM_LOCALID"));
  if (list) HC_TRY(first_slurm_host(list_var, list, env->master_addr, sizeof(env->master_addr)));
  else HC_TRY(set_addr(env, "MASTER_ADDR", addr));
  if (job) {
    /* Every task of the step computes the same port, and two jobs sharing a
     * node differ in it unless their ids are 10000 apart. */
    int64_t id;
    if (hc_parse_int(job, &id) != HC_OK || id < 0)
      return HC_FAIL(HC_ERR_USAGE, "SLURM_JOB_ID=\"%s\" is not a job number", job);
    env->master_port = 20000 + (int)(id % 10000);
    return HC_OK;
  }
  return parse_int_var("MASTER_PORT", port, 1, 65535, &env->master_port);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static hc_result_t read_secret(struct hc_launch_env *env) {
  const char *s = hc_param_str(HC_P_SECRET);
  if (s[0] == 0) {
    /* Every rank derives the same value from what it was given anyway. This
     * keeps two jobs that share a port from joining each other; it is no
     * protection against someone who can read the job's environment.
     * WORLD_SIZE stays out of it: ranks that disagree on it must reach the
     * root, which names the disagreement, instead of failing as strangers. */
    char text[400];
    snprintf(text, sizeof(text), "hetccl:%s:%d", env->master_addr, env->master_port);
    uint8_t digest[32];
    hc_sha256(text, strlen(text), digest);
    memcpy(env->secret, digest, sizeof(env->secret));
    return HC_OK;
  }
  if (strlen(s) != 2 * sizeof(env->secret))
    return HC_FAIL(HC_ERR_USAGE, "HETCCL_SECRET must be 32 hex digits, it has %zu characters", strlen(s));
  for (size_t i = 0; i < sizeof(env->secret); i++) {
    int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return HC_FAIL(HC_ERR_USAGE, "HETCCL_SECRET must be 32 hex digits; character %zu is not one",
                     2 * i + (hi < 0 ? 1 : 2));
    env->secret[i] = (uint8_t)(hi << 4 | lo);
  }
  return HC_OK;
}

static bool set(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != 0;
}

hc_result_t hc_launch_env_read(struct hc_launch_env *env) {
  memset(env, 0, sizeof(*env));
  env->local_rank = -1;
  if (set("RANK") || set("WORLD_SIZE")) HC_TRY(read_master_launcher(env, &torchrun));
  else if (set("OMPI_COMM_WORLD_RANK") || set("OMPI_COMM_WORLD_SIZE")) HC_TRY(read_master_launcher(env, &openmpi));
  else if (set("SLURM_PROCID")) HC_TRY(read_slurm(env));
  else {
    return HC_FAIL(HC_ERR_USAGE,
                   "no launcher environment: expected RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun), "
                   "SLURM_PROCID, SLURM_NTASKS (srun) or OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE with "
                   "MASTER_ADDR, MASTER_PORT (mpirun)");
  }
  HC_TRY(read_secret(env));
  HC_INFO(HC_BOOT, "%s environment: rank %d of %d (local %d), root %s:%d", env->launcher, env->rank, env->nranks,
          env->local_rank, env->master_addr, env->master_port);
  return HC_OK;
}
