/* HETCCL_* parameters: one table (params.def), parsed once, cached.
 *
 * Locking: params_lock guards only the cached values and is never held
 * while logging. Logging reads three parameters itself (log.c), so a log
 * line written under params_lock would take it again; hc_params_load parses
 * into a local snapshot, publishes it under the lock, and writes its lines
 * and its error after. */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
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

const struct hc_param_rule hc_param_rules[HC_P_COUNT] = {
#define HC_PARAM(name, type, def, doc)
#define HC_PARAM_RANGE(name, lo_, hi_) [HC_P_##name].ranged = true, [HC_P_##name].lo = (lo_), [HC_P_##name].hi = (hi_),
#define HC_PARAM_CHOICES(name, words) [HC_P_##name].choices = (words),
#define HC_PARAM_NCCL(name) [HC_P_##name].nccl = "NCCL_" #name,
#include "params.def"
#undef HC_PARAM
#undef HC_PARAM_RANGE
#undef HC_PARAM_CHOICES
#undef HC_PARAM_NCCL
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
  case 'K':
    mult = 1024.0;
    end++;
    break;
  case 'M':
    mult = 1024.0 * 1024;
    end++;
    break;
  case 'G':
    mult = 1024.0 * 1024 * 1024;
    end++;
    break;
  case 'T':
    mult = 1024.0 * 1024 * 1024 * 1024;
    end++;
    break;
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

/* Whether word is one of the comma-separated choices (any case). */
static bool is_choice(const char *choices, const char *word) {
  size_t len = strlen(word);
  for (const char *c = choices; *c;) {
    size_t n = strcspn(c, ",");
    if (n == len && strncasecmp(c, word, n) == 0) return true;
    c += n + (c[n] == ',');
  }
  return false;
}

static hc_result_t parse_value(enum hc_param p, const char *text, int64_t *out) {
  const struct hc_param_rule *rule = &hc_param_rules[p];
  hc_result_t r = HC_ERR_INTERNAL;
  *out = 0;
  switch (hc_param_table[p].type) {
  case HC_PT_STR: r = rule->choices && !is_choice(rule->choices, text) ? HC_ERR_USAGE : HC_OK; break;
  case HC_PT_INT: r = hc_parse_int(text, out); break;
  case HC_PT_SIZE: r = hc_parse_size(text, out); break;
  case HC_PT_BOOL: r = hc_parse_bool(text, out); break;
  }
  if (r == HC_OK && rule->ranged && (*out < rule->lo || *out > rule->hi)) r = HC_ERR_USAGE;
  return r;
}

const char *hc_param_accepts(enum hc_param p, char *buf, size_t len) {
  const struct hc_param_rule *rule = &hc_param_rules[p];
  static const char *const kinds[] = {"a string", "an integer", "a size (bytes, or with K, M, G: 512K, 4M)",
                                      "a boolean (1, 0, true, false, yes, no, on, off)"};
  const char *kind = kinds[hc_param_table[p].type];
  if (rule->choices) {
    /* "A,B,C" -> "one of A, B, C" */
    size_t o = (size_t)snprintf(buf, len, "one of ");
    for (const char *c = rule->choices; *c && o + 3 < len; c++) {
      if (*c == ',') buf[o++] = ',', buf[o++] = ' ';
      else buf[o++] = *c;
    }
    buf[HC_MIN(o, len - 1)] = 0;
  } else if (rule->ranged && rule->hi == INT64_MAX) {
    snprintf(buf, len, "%s of at least %lld", kind, (long long)rule->lo);
  } else if (rule->ranged) {
    snprintf(buf, len, "%s from %lld to %lld", kind, (long long)rule->lo, (long long)rule->hi);
  } else {
    snprintf(buf, len, "%s", kind);
  }
  return buf;
}

/* The text that sets p: HETCCL_<name>, else its NCCL_* stand-in, else NULL.
 * *var gets the variable's name. */
static const char *env_text(enum hc_param p, char *var, size_t len) {
  snprintf(var, len, "HETCCL_%s", hc_param_table[p].name);
  const char *text = getenv(var);
  if (text == NULL && hc_param_rules[p].nccl) {
    text = getenv(hc_param_rules[p].nccl);
    if (text) snprintf(var, len, "%s", hc_param_rules[p].nccl);
  }
  return text;
}

static bool is_nccl(const char *var) { return strncmp(var, "NCCL_", 5) == 0; }

const char *hc_param_source(enum hc_param p, char *buf, size_t len) {
  if (env_text(p, buf, len) == NULL) snprintf(buf, len, "HETCCL_%s", hc_param_table[p].name);
  return buf;
}

/* Levenshtein distance of a (length an) and b, for "did you mean". */
static size_t edit_distance(const char *a, size_t an, const char *b) {
  size_t bn = strlen(b), row[64];
  if (an >= 63 || bn >= 63) return SIZE_MAX;
  for (size_t j = 0; j <= bn; j++) row[j] = j;
  for (size_t i = 1; i <= an; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= bn; j++) {
      size_t up = row[j];
      size_t cost = toupper((unsigned char)a[i - 1]) != b[j - 1];
      row[j] = HC_MIN(HC_MIN(row[j] + 1, row[j - 1] + 1), diag + cost);
      diag = up;
    }
  }
  return row[bn];
}

/* One WARN per HETCCL_* name the table lacks, naming the closest known one
 * when it is close enough to be a typo. */
static void warn_unknown_names(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "HETCCL_", 7) != 0) continue;
    const char *name = *e + 7;
    size_t len = strcspn(name, "="), best_d = SIZE_MAX;
    int best = -1;
    for (int p = 0; p < HC_P_COUNT && best_d > 0; p++) {
      size_t d = edit_distance(name, len, hc_param_table[p].name);
      if (d < best_d) best_d = d, best = p;
    }
    if (best_d == 0) continue;
    /* A third of the name may differ: TIMOUT -> TIMEOUT, SHM_DISABEL -> SHM_DISABLE. */
    if (best >= 0 && best_d <= HC_MAX(len / 3, 1))
      HC_WARN(HC_ENV, "unknown variable HETCCL_%.*s ignored; did you mean HETCCL_%s? (see docs/params.md)", (int)len,
              name, hc_param_table[best].name);
    else
      HC_WARN(HC_ENV, "unknown variable HETCCL_%.*s ignored; no known variable is close (see docs/params.md)", (int)len,
              name);
  }
}

/* Parses every variable into the caller's arrays, without logging. On a bad
 * value returns HC_ERR_USAGE with *bad set to it. */
static hc_result_t parse_all(int64_t *ints, const char **strs, bool *nccl_rejected, enum hc_param *bad) {
  char var[96];
  for (int p = 0; p < HC_P_COUNT; p++) {
    const char *text = env_text((enum hc_param)p, var, sizeof(var));
    nccl_rejected[p] = false;
    if (text == NULL) text = hc_param_table[p].def;
    if (parse_value((enum hc_param)p, text, &ints[p]) != HC_OK) {
      if (!is_nccl(var)) {
        *bad = (enum hc_param)p;
        return HC_ERR_USAGE;
      }
      nccl_rejected[p] = true;
      text = hc_param_table[p].def;
      parse_value((enum hc_param)p, text, &ints[p]);
    }
    strs[p] = text;
  }
  return HC_OK;
}

/* The lines of a successful load: what was set, which NCCL_* names stood
 * in, and names nobody knows. */
static void log_load(const bool *nccl_rejected) {
  char var[96], accepts[160];
  for (int p = 0; p < HC_P_COUNT; p++) {
    const char *text = env_text((enum hc_param)p, var, sizeof(var));
    if (text == NULL) continue;
    if (nccl_rejected[p])
      HC_WARN(HC_ENV, "%s=\"%s\" ignored: HETCCL_%s (which it stands in for) accepts %s; the default %s stays", var,
              text, hc_param_table[p].name, hc_param_accepts((enum hc_param)p, accepts, sizeof(accepts)),
              hc_param_table[p].def[0] ? hc_param_table[p].def : "(empty)");
    else if (is_nccl(var)) HC_INFO(HC_ENV, "HETCCL_%s unset: taken from %s=%s", hc_param_table[p].name, var, text);
    else if (p == HC_P_SECRET) HC_INFO(HC_ENV, "%s set (not logged: it admits to the job)", var);
    else HC_INFO(HC_ENV, "%s set to %s", var, text);
  }
  warn_unknown_names();
}

hc_result_t hc_params_load(void) {
  int64_t ints[HC_P_COUNT];
  const char *strs[HC_P_COUNT];
  bool nccl_rejected[HC_P_COUNT];
  enum hc_param bad = HC_P_COUNT;
  /* Logging settles its level from the environment first (pthread_once),
   * so no log line below has to wait for this load. */
  hc_log_init();
  pthread_mutex_lock(&params_lock);
  bool parsed = params_parsed;
  pthread_mutex_unlock(&params_lock);
  if (parsed) return HC_OK;
  if (parse_all(ints, strs, nccl_rejected, &bad) != HC_OK) {
    char var[96], accepts[160];
    const char *text = env_text(bad, var, sizeof(var));
    /* A bad default is a bug (a unit test loads the defaults); a bad user
     * value is the user's to fix. */
    return HC_FAIL(HC_ERR_USAGE, "%s=\"%s\" is not accepted: expected %s", var, text ? text : hc_param_table[bad].def,
                   hc_param_accepts(bad, accepts, sizeof(accepts)));
  }
  /* Two threads may load at once; the one that publishes first logs. */
  pthread_mutex_lock(&params_lock);
  bool first = !params_parsed;
  if (first) {
    memcpy(int_values, ints, sizeof(ints));
    memcpy(str_values, strs, sizeof(strs));
    params_parsed = true;
  }
  pthread_mutex_unlock(&params_lock);
  if (first) log_load(nccl_rejected);
  return HC_OK;
}

void hc_params_reset(void) {
  pthread_mutex_lock(&params_lock);
  params_parsed = false;
  pthread_mutex_unlock(&params_lock);
}

/* Before a successful hc_params_load() (or when it failed) the getters read
 * the environment, falling back to the default where a value is bad, so
 * logging works at any time. */
static const char *raw_text(enum hc_param p, int64_t *v) {
  char var[96];
  const char *text = env_text(p, var, sizeof(var));
  if (text == NULL || parse_value(p, text, v) != HC_OK) {
    text = hc_param_table[p].def;
    parse_value(p, text, v);
  }
  return text;
}

int64_t hc_param_int(enum hc_param p) {
  pthread_mutex_lock(&params_lock);
  bool parsed = params_parsed;
  int64_t v = int_values[p];
  pthread_mutex_unlock(&params_lock);
  if (!parsed) raw_text(p, &v);
  return v;
}

const char *hc_param_str(enum hc_param p) {
  pthread_mutex_lock(&params_lock);
  bool parsed = params_parsed;
  const char *s = str_values[p];
  pthread_mutex_unlock(&params_lock);
  int64_t unused;
  return parsed ? s : raw_text(p, &unused);
}
