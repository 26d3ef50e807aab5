/*
 * Shared helpers of the hetccl tests: ranks as threads of one process, a
 * CHECK macro that records what failed and prints the command line that
 * reproduces it, and value generators whose reductions are exact.
 *
 * Ranks as threads: tu_run_ranks() makes one hetcclUniqueId in the calling
 * (main) thread with hetcclGetUniqueId, starts one thread per rank and
 * calls fn(rank, nranks, id, arg) on each; each thread is one rank and
 * calls hetcclCommInitRank itself, so the real bootstrap and transport run
 * over loopback. A rank passes when fn returns 0 and no CHECK failed on its
 * thread. Within fn, tu_barrier() and tu_allgather_ptr() synchronise the
 * rank threads of that run (with a deadline, so a lost rank fails the test
 * instead of hanging it).
 *
 * Failures: CHECK(cond, fmt, ...) counts a check; when cond is false it
 * prints the file, line, rank, the case set by tu_set_case(), the message,
 * and "reproduce: <env> <argv[0]> <args>", where args come from
 * tu_set_repro() (per thread) and env lists the HETCCL_* variables set.
 * Only the first TU_MAX_PRINTED failures are printed; all are counted.
 *
 * Generators: tu_data_elem() gives random bits per (seed, source rank,
 * index) for collectives that only move data (compared bitwise, NaN
 * patterns included). tu_red_input() / tu_red_expect() give the inputs of a
 * reduction and its expected result, chosen so that the result is exact
 * whatever order the algorithm combines the ranks in (see testutil.c), and
 * so compared bitwise too.
 */
#ifndef HC_TESTUTIL_H_
#define HC_TESTUTIL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hetccl.h"
#include "util/util.h"

#define TU_MAX_PRINTED 40

/* Keeps argv for the reproduce line; call first in main. */
void tu_init(int argc, char **argv);

/* ---- checks ---- */

/* This thread's case, shown with each failure ("" clears it). */
void tu_set_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Arguments that rerun this thread's case, e.g. "--ranks 4 --case 17". */
void tu_set_repro(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records one check; prints the failure. Returns ok. */
bool tu_check_at(bool ok, const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define CHECK(cond, ...) tu_check_at(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
/* A hetccl call that must succeed; the failure shows the last-error text. */
#define CHECK_OK(call) tu_check_ok_at((call), __FILE__, __LINE__, #call)
bool tu_check_ok_at(hetcclResult_t r, const char *file, int line, const char *call);

long tu_checks(void);
long tu_failures(void);
/* Failures recorded on this thread so far. */
long tu_thread_failures(void);
/* Prints "<name>: N checks, M failures" and returns the exit code. */
int tu_finish(const char *name);

/* ---- ranks as threads ---- */

typedef int (*tu_rank_fn)(int rank, int nranks, hetcclUniqueId id, void *arg);
/* Runs fn on nranks threads (see the header comment). Returns the number of
 * ranks that failed; prints one line per failed rank. */
int tu_run_ranks(int nranks, tu_rank_fn fn, void *arg);
/* The same with one process per rank (fork; the caller must not have
 * initialised a GPU driver, which does not survive a fork). Their checks
 * count in the caller's totals; tu_allgather_ptr is refused. */
int tu_run_rank_processes(int nranks, tu_rank_fn fn, void *arg);
/* Inside fn: this thread's rank, or -1 outside tu_run_ranks. */
int tu_rank(void);
/* Inside fn: waits for every rank thread of this run. False (and a
 * recorded failure) when some rank did not arrive within TU_SYNC_SECONDS. */
bool tu_barrier(void);
/* Inside fn: all[r] = rank r's mine, for every rank. Collective. */
bool tu_allgather_ptr(void *mine, void **all);
#define TU_SYNC_SECONDS 300

/* Seconds since the first call, for timing lines. */
double tu_seconds(void);

/* ---- covering arrays ---- */

/* Test cases as tuples of ndims values (value k of dimension d in
 * 0..sizes[d]-1). relevant(v, d) says whether dimension d matters for tuple
 * v (an irrelevant one must hold 0, so each case has one form); valid(v)
 * excludes tuples that cannot run; cost(v) (may be NULL) breaks ties
 * towards cheap tuples. tu_pairwise picks tuples greedily until every pair
 * of values of two dimensions that occurs, both relevant, in some valid
 * tuple occurs in a picked one. Deterministic. Returns the number of tuples,
 * *out holding them (ndims ints each; free() it); -1 when out of memory. */
struct tu_dims {
  int ndims;
  const int *sizes;
  bool (*relevant)(const int *v, int d);
  bool (*valid)(const int *v, void *arg);
  int (*cost)(const int *v);
  void *arg;
};
int tu_pairwise(const struct tu_dims *dims, int **out);

/* ---- buffers with guards ---- */

/* bytes of memory between two guard zones (filled with a pattern), the
 * payload filled with fill_byte. Never NULL (aborts when out of memory). */
void *tu_buf_alloc(size_t bytes, uint8_t fill_byte);
/* Checks both guards; false (and a recorded failure naming what) when one
 * was overwritten. */
bool tu_buf_guards_ok(const void *buf, const char *what);
void tu_buf_free(void *buf); /* takes NULL */

/* ---- values ---- */

uint64_t tu_hash(uint64_t a, uint64_t b, uint64_t c);

/* Random bits for element i that rank src contributes (data movement). */
void tu_data_elem(enum hc_dtype t, uint64_t seed, int src, size_t i, void *elem);
/* count elements of rank src, indices first..first+count-1, into buf. */
void tu_data_fill(enum hc_dtype t, uint64_t seed, int src, size_t first, size_t count, void *buf);

/* A reduction test: what every rank contributes and what results. op is
 * SUM, PROD, MAX, MIN, AVG or PREMULSUM (each rank's own scalar from
 * tu_red_scalar). Element i is the same global index on every rank (for
 * reduce-scatter: rank * recvcount + k). */
struct tu_red {
  enum hc_dtype dtype;
  enum hc_redop op;
  int nranks;
  uint64_t seed;
};
void tu_red_input(const struct tu_red *s, int rank, size_t i, void *elem);
void tu_red_fill(const struct tu_red *s, int rank, size_t first, size_t count, void *buf);
/* The PREMULSUM scalar of rank, one element of s->dtype. */
void tu_red_scalar(const struct tu_red *s, int rank, void *elem);
/* The exact expected result of element i, one element of s->dtype. */
void tu_red_expect(const struct tu_red *s, size_t i, void *elem);

/* Compares count elements bitwise; on a mismatch records one failure that
 * names what, the first differing index, expected and got (hex and value)
 * and how many differ. Returns true when equal. */
bool tu_compare(enum hc_dtype t, const void *got, const void *expected, size_t count, const char *what);
/* "0x...(value)" of one element, into buf (at least 64 bytes). */
const char *tu_elem_str(enum hc_dtype t, const void *elem, char *buf, size_t len);

#endif
