/* Result codes and the per-thread last-error text. */
#include <stdarg.h>
#include <stdio.h>

#include "util.h"

static _Thread_local char last_error[1024];

const char *hc_result_str(hc_result_t r) {
  switch (r) {
  case HC_OK: return "no error";
  case HC_ERR_DEVICE: return "unhandled device runtime error";
  case HC_ERR_SYSTEM: return "unhandled system error";
  case HC_ERR_INTERNAL: return "internal error";
  case HC_ERR_ARG: return "invalid argument";
  case HC_ERR_USAGE: return "invalid usage";
  case HC_ERR_REMOTE: return "remote process exited or there was a network error";
  case HC_IN_PROGRESS: return "operation in progress";
  }
  return "unknown result code";
}

hc_result_t hc_vfail_at(hc_result_t r, const char *file, int line, const char *fmt, va_list ap) {
  int saved_errno = errno;
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  hc_log_emit(HC_LOG_WARN, HC_ALL, file, line, "%s", last_error);
  errno = saved_errno;
  return r;
}

hc_result_t hc_fail_at(hc_result_t r, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hc_vfail_at(r, file, line, fmt, ap);
  va_end(ap);
  return r;
}

const char *hc_last_error(void) { return last_error; }

static _Thread_local int blamed = -1;

void hc_blame(int rank) { blamed = rank; }

int hc_blamed(void) { return blamed; }

void hc_set_last_error(const char *text) { snprintf(last_error, sizeof(last_error), "%s", text); }
