/* HETCCL_* parameters: one table (params.def), parsed once, cached. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "util.h"

extern char **environ;

const struct hc_param_desc hc_param_table[HC_P_COUNT] = {
#define HC_PARAM(name, type, def, doc) {#name, HC_PT_##type, def, doc},
#include "params.def"
#undef HC_PARAM
};

static pthread_mutex_t params_lock = PTHREAD_MUTEX_INITIALIZER;
static bool params_parsed;
static int64_t int_values[HC_P_COUNT];
static const char *str_values[HC_P_COUNT];

hc_result_t hc_parse_int(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) return HC_ERR_USAGE;
  *out = v;
  return HC_OK;
}

hc_result_t hc_parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return HC_ERR_USAGE;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
  case 0: break;
  case 'K': mult = 1024.0; end++; break;
  case 'M': mult = 1024.0 * 1024; end++; break;
  case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
  case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
  default: return HC_ERR_USAGE;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v * mult > 9.0e18) return HC_ERR_USAGE;
  *out = (int64_t)(v * mult);
  return HC_OK;
}

hc_result_t hc_parse_bool(const char *s, int64_t *out) {
  if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) *out = 1;
  else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) *out = 0;
  else return HC_ERR_USAGE;
  return HC_OK;
}

static hc_result_t parse_value(enum hc_param p, const char *text, int64_t *out) {
  switch (hc_param_table[p].type) {
  case HC_PT_STR: return HC_OK;
  case HC_PT_INT: return hc_parse_int(text, out);
  case HC_PT_SIZE: return hc_parse_size(text, out);
  case HC_PT_BOOL: return hc_parse_bool(text, out);
  }
  return HC_ERR_INTERNAL;
}

static hc_result_t parse_all_locked(void) {
  char var[96];
  for (int p = 0; p < HC_P_COUNT; p++) {
    snprintf(var, sizeof(var), "HETCCL_%s", hc_param_table[p].name);
    const char *text = getenv(var);
    bool set = text != NULL;
    if (!set) text = hc_param_table[p].def;
    int64_t v = 0;
    if (parse_value(p, text, &v) != HC_OK) {
      /* A bad default is a bug; a bad user value is the user's to fix. */
      return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\" is not a valid %s", var, text,
                     hc_param_table[p].type == HC_PT_SIZE ? "size (e.g. 512K, 4M)"
                     : hc_param_table[p].type == HC_PT_BOOL ? "boolean (0 or 1)"
                                                            : "integer");
    }
    int_values[p] = v;
    str_values[p] = text;
    if (set) HC_INFO(HC_ENV, "%s set to %s", var, text);
  }
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "HETCCL_", 7) != 0) continue;
    const char *name = *e + 7;
    size_t len = strcspn(name, "=");
    bool known = false;
    for (int p = 0; p < HC_P_COUNT && !known; p++)
      known = strlen(hc_param_table[p].name) == len && !strncmp(hc_param_table[p].name, name, len);
    if (!known) HC_WARN(HC_ENV, "unknown variable %.*s ignored (see docs/params.md)", (int)len + 7, *e);
  }
  params_parsed = true;
  return HC_OK;
}

hc_result_t hc_params_load(void) {
  pthread_mutex_lock(&params_lock);
  hc_result_t r = params_parsed ? HC_OK : parse_all_locked();
  pthread_mutex_unlock(&params_lock);
  hc_log_init(); /* the log level is a parameter too */
  return r;
}

void hc_params_reset(void) {
  pthread_mutex_lock(&params_lock);
  params_parsed = false;
  pthread_mutex_unlock(&params_lock);
}

/* Before a successful hc_params_load() (or when it failed) the getters fall
 * back to the environment or the default, so logging works at any time. */
static const char *raw_text(enum hc_param p) {
  char var[96];
  snprintf(var, sizeof(var), "HETCCL_%s", hc_param_table[p].name);
  const char *text = getenv(var);
  return text ? text : hc_param_table[p].def;
}

int64_t hc_param_int(enum hc_param p) {
  pthread_mutex_lock(&params_lock);
  bool parsed = params_parsed;
  int64_t v = int_values[p];
  pthread_mutex_unlock(&params_lock);
  if (parsed) return v;
  if (parse_value(p, raw_text(p), &v) != HC_OK) parse_value(p, hc_param_table[p].def, &v);
  return v;
}

const char *hc_param_str(enum hc_param p) {
  pthread_mutex_lock(&params_lock);
  bool parsed = params_parsed;
  const char *s = str_values[p];
  pthread_mutex_unlock(&params_lock);
  return parsed ? s : raw_text(p);
}
