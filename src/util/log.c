/* Logging: one line per call, "host:pid:tid [rank] LEVEL SUBSYS file:line msg".
 * A disabled line costs two relaxed atomic loads. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

atomic_int hc_log_level = HC_LOG_WARN;
atomic_int hc_log_mask = HC_ALL;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static FILE *log_file;
static char host_name[64];
static _Thread_local int log_rank = -1;
static _Thread_local char log_comm_name[64];

static const char *const sys_names[] = {"UTIL", "BOOT", "DEV", "NET", "VENDOR", "PLAN", "EXEC", "API", "ENV"};

static int parse_mask(const char *s) {
  int mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (strcasecmp(tok, "ALL") == 0) mask |= HC_ALL;
    for (size_t i = 0; i < HC_ARRAY_LEN(sys_names); i++)
      if (strcasecmp(tok, sys_names[i]) == 0) mask |= 1 << i;
  }
  return mask ? mask : HC_ALL;
}

static void open_log_file(const char *pattern) {
  char path[512];
  size_t o = 0;
  for (const char *p = pattern; *p && o + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') o += snprintf(path + o, sizeof(path) - o, "%s", host_name), p++;
    else if (p[0] == '%' && p[1] == 'p') o += snprintf(path + o, sizeof(path) - o, "%d", (int)getpid()), p++;
    else path[o++] = *p;
  }
  path[o] = 0;
  log_file = fopen(path, "a");
}

/* Level and mask from the parameters (params.def's HETCCL_DEBUG choices). */
static void apply_settings(void) {
  const char *level = hc_param_str(HC_P_DEBUG);
  int l = HC_LOG_WARN;
  if (strcasecmp(level, "NONE") == 0) l = HC_LOG_NONE;
  else if (strcasecmp(level, "INFO") == 0) l = HC_LOG_INFO;
  else if (strcasecmp(level, "TRACE") == 0) l = HC_LOG_TRACE;
  atomic_store(&hc_log_level, l);
  atomic_store(&hc_log_mask, parse_mask(hc_param_str(HC_P_DEBUG_SUBSYS)));
}

static void log_init_once(void) {
  gethostname(host_name, sizeof(host_name) - 1);
  /* Logging must work before and without hc_params_load(), so it reads its
   * three variables through the parameter table's default-aware getter,
   * which never logs (a log line from inside this once-routine would wait
   * on itself). */
  apply_settings();
  const char *file = hc_param_str(HC_P_DEBUG_FILE);
  if (file[0]) open_log_file(file);
}

void hc_log_init(void) { pthread_once(&log_once, log_init_once); }

void hc_log_reload(void) {
  hc_log_init();
  hc_params_reset();
  /* The log file stays as it was. */
  if (hc_params_load() == HC_OK) apply_settings();
}

void hc_log_set_rank(int rank) { hc_log_set_comm(rank, NULL); }

void hc_log_set_comm(int rank, const char *name) {
  log_rank = rank;
  snprintf(log_comm_name, sizeof(log_comm_name), "%s", name ? name : "");
}

static const char *sys_name(int sys) {
  for (size_t i = 0; i < HC_ARRAY_LEN(sys_names); i++)
    if (sys == (1 << i)) return sys_names[i];
  return "ALL";
}

void hc_log_emit(int level, int sys, const char *file, int line, const char *fmt, ...) {
  int saved_errno = errno;
  hc_log_init();
  if (level > atomic_load(&hc_log_level) || !(sys & atomic_load(&hc_log_mask))) {
    errno = saved_errno;
    return;
  }
  static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  char rank[96] = "";
  if (log_rank >= 0) snprintf(rank, sizeof(rank), "[%d%s%s] ", log_rank, log_comm_name[0] ? " " : "", log_comm_name);
  FILE *out = log_file ? log_file : stderr;
  /* TRACE lines carry a time (microseconds, monotonic clock), to read
   * where a call spends it. */
  char when[32] = "";
  if (level == HC_LOG_TRACE) snprintf(when, sizeof(when), "%.1f ", (double)hc_now_ns() / 1e3);
  fprintf(out, "%s:%d:%ld %shetccl %s %s %s:%d %s%s\n", host_name, (int)getpid(), (long)syscall(SYS_gettid), rank,
          level_names[level], sys_name(sys), base ? base + 1 : file, line, when, msg);
  fflush(out);
  errno = saved_errno;
}
